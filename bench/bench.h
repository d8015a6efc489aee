/* The benchmarks' entry points: `zshard bench step|comm|memory|attention|optim ARGS` (the CLI's
 * bench command dispatches here). Each parses its flags through the argument library
 * (src/args/flags.h) and returns the process exit status. */
#ifndef ZS_BENCH_H
#define ZS_BENCH_H

int zs_bench_step(int argc, char **argv);
int zs_bench_comm(int argc, char **argv);
int zs_bench_memory(int argc, char **argv);
int zs_bench_attention(int argc, char **argv);
int zs_bench_optim(int argc, char **argv);

#endif

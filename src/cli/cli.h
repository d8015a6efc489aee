/* Subcommands of the zshard executable. Each returns the process exit status; they print
 * their own errors (one line on stderr) and never call exit() deep inside. */
#ifndef ZS_CLI_H
#define ZS_CLI_H

int zs_cli_train(int argc, char **argv);
int zs_cli_run(int argc, char **argv);
int zs_cli_bench(int argc, char **argv);
int zs_cli_mem(int argc, char **argv);
int zs_cli_ckpt(int argc, char **argv);

/* Benchmarks (bench/): `zshard bench step ...` and `zshard bench comm ...`. */
int zs_bench_step(int argc, char **argv);
int zs_bench_comm(int argc, char **argv);
int zs_bench_memory(int argc, char **argv);

/* Print "zshard: <msg>" to stderr; returns 1 or 2 for the caller to exit with. */
int zs_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

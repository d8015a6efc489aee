/* Subcommands of the zshard executable. Each returns the process exit status; they print
 * their own errors (one line on stderr) and never call exit() deep inside. */
#ifndef ZS_CLI_H
#define ZS_CLI_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

int zs_cli_train(int argc, char **argv);
int zs_cli_run(int argc, char **argv);
int zs_cli_bench(int argc, char **argv);
int zs_cli_mem(int argc, char **argv);
int zs_cli_ckpt(int argc, char **argv);

/* Benchmarks (bench/): `zshard bench step ...` and `zshard bench comm ...`. */
int zs_bench_step(int argc, char **argv);
int zs_bench_comm(int argc, char **argv);
int zs_bench_memory(int argc, char **argv);
int zs_bench_attention(int argc, char **argv);

/* Print "zshard: <msg>" to stderr; returns 1 or 2 for the caller to exit with. */
/* DESIGN.md §4's model-state formula of a stage as text ("4Ψ + 12Ψ/N") and in bytes for psi
 * (padded) parameters on world ranks (zs_mem_formula). */
const char *zs_cli_formula_text(int stage, const zs_mem_options *mo, char *buf, size_t n);
uint64_t zs_cli_formula_bytes(int stage, const zs_mem_options *mo, uint64_t psi, int world);

int zs_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

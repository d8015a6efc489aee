/* Helpers shared by the benchmarks. */
#ifndef ZS_BENCH_UTIL_H
#define ZS_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Write an llm.c token shard of n random tokens below vocab (fixed xorshift seed: a step's
 * cost does not depend on the text). 0 on success; else zs_last_error() says why. */
int zs_bench_token_file(const char *path, int64_t n, int vocab);
/* Absolute path of the running zshard executable. 0 on success. */
int zs_bench_self(char *buf, size_t cap);
/* The median of v[0..n) (n >= 1; the upper one of an even count), sorting v in place. */
double zs_bench_median(double *v, int n);

#endif

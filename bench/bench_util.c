/* Helpers shared by the benchmarks: synthetic token data, the executable's own path, medians. */
#include "bench/bench_util.h"

#include "data/data.h"
#include "zshard.h"

#include <stdlib.h>
#include <unistd.h>

int zs_bench_token_file(const char *path, int64_t n, int vocab) {
    uint16_t *tok = malloc((size_t)n * 2);
    if (!tok) return -1;
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x % (uint64_t)vocab);
    }
    zs_status st = zs_llmc_shard_write(path, tok, n);
    free(tok);
    return st == ZS_OK ? 0 : -1;
}

int zs_bench_self(char *buf, size_t cap) {
    ssize_t len = readlink("/proc/self/exe", buf, cap - 1);
    if (len <= 0) return -1;
    buf[len] = '\0';
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double zs_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

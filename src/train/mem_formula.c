/* The model-state formula of zs_mem_formula as text and as bytes (mem_formula.h). */
#include "train/mem_formula.h"

#include <stdio.h>

/* "aΨ + bΨ/N", leaving out a zero term. */
const char *zs_mem_formula_text(int stage, const zs_mem_options *mo, char *buf, size_t n) {
    int a, b;
    zs_mem_formula(stage, mo, &a, &b);
    if (a && b)
        snprintf(buf, n, "%dΨ + %dΨ/N", a, b);
    else if (a)
        snprintf(buf, n, "%dΨ", a);
    else
        snprintf(buf, n, "%dΨ/N", b);
    return buf;
}

/* a*psi + b*psi/world. */
uint64_t zs_mem_formula_bytes(int stage, const zs_mem_options *mo, uint64_t psi, int world) {
    int a, b;
    zs_mem_formula(stage, mo, &a, &b);
    return (uint64_t)a * psi + (uint64_t)b * psi / (uint64_t)world;
}

/* Bytes a rank sends each peer of a group of n per step for its share of psi elements (psi / n
 * of them): the stage's all-gathers and reduce-scatters (docs/sharding.md "Bytes across hosts"). */
static double per_peer(int stage, double bp, double bg, int k, double psi, int n) {
    double f = stage == 0   ? 2 * bg
               : stage == 1 ? bg + bp
               : stage == 2 ? k * bg + bp
                            : k * (2 * bp + bg);
    return psi / n * f;
}

void zs_mem_bytes_sent(int stage, const zs_mem_options *mo, uint64_t psi, int world, int per_host,
                       int shard_group, int grad_accum, double *group, double *replicas,
                       double *across) {
    double bp = mo && mo->dtype == ZS_DTYPE_BF16 ? 2 : 4;
    double bg = mo && mo->reduce_dtype == ZS_DTYPE_BF16 ? 2 : 4;
    int L = per_host < world ? per_host : world, S = shard_group > 0 ? shard_group : world;
    int R = world / S, in_host = S < L ? S : L; /* the group's ranks on one host */
    double g = per_peer(stage, bp, bg, grad_accum, (double)psi, S);
    *group = (S - 1) * g;
    *across = (S - in_host) * g;
    *replicas = 0;
    if (R > 1) { /* the shard's all-reduce across the R replicas: each sends 2 / R of it */
        int near = S < L ? L / S : 1; /* replicas on this host, itself included */
        double r = 2.0 * (double)psi / S / R * bg;
        *replicas = (R - 1) * r;
        *across += (R - near) * r;
    }
}

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

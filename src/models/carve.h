/* Carving one allocation into a model's activation or workspace buffers, shared by the
 * architectures so the byte counts the estimator reports and what create allocates are one
 * computation. */
#ifndef ZS_MODELS_CARVE_H
#define ZS_MODELS_CARVE_H

#include <stdint.h>

/* n floats (rounded up to 64 bytes) from base at *total; with base NULL only counts. */
static inline float *zs_carve(float *base, uint64_t *total, uint64_t n) {
    float *p = base ? base + *total : NULL;
    *total += (n + 15) / 16 * 16;
    return p;
}

#endif

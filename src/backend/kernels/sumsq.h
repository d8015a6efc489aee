/* Sum (of squares) of one fixed-size chunk in double, shared by the CPU loop and the CUDA
 * kernel: both split x into ZS_SUMSQ_CHUNK-element chunks, sum each with these functions and
 * add the chunk sums in index order, so the result is the same bits on either backend and
 * for any thread count (the global gradient norm and the logged loss depend on it). */
#ifndef ZS_BACKEND_KERNELS_SUMSQ_H
#define ZS_BACKEND_KERNELS_SUMSQ_H

#include "backend/kernels/common.h"
#include "core/bf16.h"

#include <stddef.h>

#define ZS_SUMSQ_CHUNK 4096

/* sum_i x[i]^2 over n <= ZS_SUMSQ_CHUNK elements, in double with fixed lanes
 * (vectorisable, deterministic). */
static ZS_HD double zs_sumsq_chunk(const float *x, size_t n) {
    double acc[ZS_LANES] = {0};
    size_t i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < n; i++)
        acc[i % ZS_LANES] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* zs_sumsq_chunk of bf16 values, each widened exactly as it is read: the same bits. */
static ZS_HD double zs_sumsq16_chunk(const zs_bf16 *x, size_t n) {
    double acc[ZS_LANES] = {0};
    size_t i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++) {
            double d = (double)zs_bf16_to_f32(x[i + j]);
            acc[j] += d * d;
        }
    for (; i < n; i++) {
        double d = (double)zs_bf16_to_f32(x[i]);
        acc[i % ZS_LANES] += d * d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum_i x[i] over n <= ZS_SUMSQ_CHUNK elements, in double, the same lanes (the `sum` op: a
 * micro-batch's loss). */
static ZS_HD double zs_sum_chunk(const float *x, size_t n) {
    double acc[ZS_LANES] = {0};
    size_t i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] += (double)x[i + j];
    for (; i < n; i++)
        acc[i % ZS_LANES] += (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

#endif

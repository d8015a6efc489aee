/* Drawing the next token from a row of logits (the `sample` op), shared by the CPU loop and
 * the CUDA kernel. The uniform number is cuRAND's: the first curand_uniform of a
 * curandStatePhilox4_32_10 after curand_init(seed, subsequence = the draw's index, offset 0),
 * i.e. the first output of the Philox-4x32-10 bijection (Salmon et al., SC'11) of the counter
 * (0, 0, index) under the key seed, mapped to x * 2^-32 + 2^-33. The CUDA kernel gets it from
 * cuRAND's device API; the CPU computes it here, so both draw the same token from the same
 * logits. The maximum and the total run in the order of one block of ZS_ROW_THREADS (common.h),
 * the search for the drawn token in index order. */
#ifndef ZS_BACKEND_KERNELS_SAMPLE_H
#define ZS_BACKEND_KERNELS_SAMPLE_H

#include "backend/kernels/common.h"
#include "core/philox.h"

#include <stdint.h>

/* cuRAND's first uniform of curand_init(seed, index, 0), in (0, 1]: its counter starts at
 * (0, 0, index) under the key seed, which is core/philox.h's draw for (seed, stream index,
 * element 0). */
static ZS_HD float zs_curand_first_uniform(uint64_t seed, uint64_t index) {
    return (float)zs_philox_draw(seed, index, 0).v[0] * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
}

/* The drawn token's weight: exp((x - mx) / temperature). */
static ZS_HD float zs_sample_weight(float x, float mx, float temperature) {
    return zs_expf((x - mx) / temperature);
}

/* The first index whose running sum of weights (fp32, index order) reaches target; the last
 * index with a weight when rounding leaves the sum short of it. */
static ZS_HD int zs_sample_search(const float *logits, int V, float mx, float temperature,
                                  float target) {
    float acc = 0.0f;
    int last = 0;
    for (int i = 0; i < V; i++) {
        float w = zs_sample_weight(logits[i], mx, temperature);
        if (w > 0.0f) last = i;
        acc += w;
        if (acc >= target) return i;
    }
    return last;
}

/* The first maximum of logits[V]. */
static ZS_HD int zs_sample_argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

#endif

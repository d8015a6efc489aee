/* Deterministic reductions shared by the CPU backends: every element is summed in rank
 * order, ((x0 + x1) + x2) + ..., in fp32 (bf16 inputs widen, the sum rounds once), then
 * divided by the world size for AVG. The same formula wherever an element is reduced is
 * what makes all_reduce equal reduce_scatter + all_gather bit for bit. */
#include "comm/comm_internal.h"
#include "core/bf16.h"

#include <string.h>

/* Blocks of this many elements are summed in a stack buffer: one pass over each input,
 * vectorizable, and the output may alias an input. */
#define BLOCK 512

void zs_reduce_f32(float *out, const float *const *in, int n, size_t count, int avg, int world) {
    float acc[BLOCK];
    const float scale_div = (float)world;
    for (size_t b = 0; b < count; b += BLOCK) {
        size_t m = count - b < BLOCK ? count - b : BLOCK;
        const float *x0 = in[0] + b;
        for (size_t i = 0; i < m; i++)
            acc[i] = x0[i];
        for (int r = 1; r < n; r++) {
            const float *x = in[r] + b;
            for (size_t i = 0; i < m; i++)
                acc[i] += x[i];
        }
        if (avg)
            for (size_t i = 0; i < m; i++)
                acc[i] /= scale_div;
        memcpy(out + b, acc, m * sizeof(float));
    }
}

void zs_reduce_bf16(uint16_t *out, const uint16_t *const *in, int n, size_t count, int avg,
                    int world) {
    float acc[BLOCK];
    const float scale_div = (float)world;
    for (size_t b = 0; b < count; b += BLOCK) {
        size_t m = count - b < BLOCK ? count - b : BLOCK;
        const uint16_t *x0 = in[0] + b;
        for (size_t i = 0; i < m; i++)
            acc[i] = zs_bits_f32((uint32_t)x0[i] << 16);
        for (int r = 1; r < n; r++) {
            const uint16_t *x = in[r] + b;
            for (size_t i = 0; i < m; i++)
                acc[i] += zs_bits_f32((uint32_t)x[i] << 16);
        }
        if (avg)
            for (size_t i = 0; i < m; i++)
                acc[i] /= scale_div;
        for (size_t i = 0; i < m; i++)
            out[b + i] = zs_f32_to_bf16(acc[i]).bits;
    }
}

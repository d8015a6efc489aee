/* Deterministic reductions shared by the CPU backends: every element is summed in rank
 * order, ((x0 + x1) + x2) + ..., in fp32 (bf16 inputs widen, the sum rounds once), then
 * divided by the world size for AVG. The same formula wherever an element is reduced is
 * what makes all_reduce equal reduce_scatter + all_gather bit for bit; the vector and
 * scalar code below perform exactly these IEEE operations per element, so which one
 * handles an element never changes its bits.
 *
 * The kernel walks all n inputs together, GROUP elements at a time with the sums in
 * registers: n concurrent sequential streams keep the hardware prefetchers busy (summing
 * block by block, one input after the other, ran at about half the read bandwidth), and
 * each group is read completely before any output is written, so an output may alias an
 * input. The result can go to several outputs at once (the all_reduce that writes every
 * rank's copy), optionally with streaming stores. */
#include "comm/comm_internal.h"
#include "core/bf16.h"

#include <stdint.h>
#include <string.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define GROUP 32 /* elements per step: 4 AVX registers of fp32 sums, 128 bytes per stream */

/* Scalar sums of elements [i, i + m) (m <= GROUP) of the inputs, for heads and tails. */
static void sum_f32(float *acc, const float *const *in, int n, size_t i, size_t m, int avg,
                    float world) {
    for (size_t j = 0; j < m; j++)
        acc[j] = in[0][i + j];
    for (int r = 1; r < n; r++)
        for (size_t j = 0; j < m; j++)
            acc[j] += in[r][i + j];
    if (avg)
        for (size_t j = 0; j < m; j++)
            acc[j] /= world;
}

static void sum_bf16(float *acc, const uint16_t *const *in, int n, size_t i, size_t m, int avg,
                     float world) {
    for (size_t j = 0; j < m; j++)
        acc[j] = zs_bits_f32((uint32_t)in[0][i + j] << 16);
    for (int r = 1; r < n; r++)
        for (size_t j = 0; j < m; j++)
            acc[j] += zs_bits_f32((uint32_t)in[r][i + j] << 16);
    if (avg)
        for (size_t j = 0; j < m; j++)
            acc[j] /= world;
}

#if defined(__AVX2__)
/* Vector sums of the GROUP elements at i, left in acc[0..3]. */
static inline void vsum_f32(__m256 *acc, const float *const *in, int n, size_t i, int avg,
                            __m256 world) {
    for (int v = 0; v < 4; v++)
        acc[v] = _mm256_loadu_ps(in[0] + i + 8 * v);
    for (int r = 1; r < n; r++)
        for (int v = 0; v < 4; v++)
            acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(in[r] + i + 8 * v));
    if (avg)
        for (int v = 0; v < 4; v++)
            acc[v] = _mm256_div_ps(acc[v], world);
}

static inline __m256 widen_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline void vsum_bf16(__m256 *acc, const uint16_t *const *in, int n, size_t i, int avg,
                             __m256 world) {
    for (int v = 0; v < 4; v++)
        acc[v] = widen_bf16(in[0] + i + 8 * v);
    for (int r = 1; r < n; r++)
        for (int v = 0; v < 4; v++)
            acc[v] = _mm256_add_ps(acc[v], widen_bf16(in[r] + i + 8 * v));
    if (avg)
        for (int v = 0; v < 4; v++)
            acc[v] = _mm256_div_ps(acc[v], world);
}

/* Streaming stores need 32-byte aligned addresses: usable when every output sits at the
 * same offset within 32 bytes, after a scalar head that aligns them all. The head's length
 * in elements, or -1 when the outputs disagree. */
static long stream_head(void *const *out, int nout, size_t esz) {
    uintptr_t mis = (uintptr_t)out[0] & 31;
    for (int o = 1; o < nout; o++)
        if (((uintptr_t)out[o] & 31) != mis) return -1;
    if (mis % esz) return -1;
    return (long)(((32 - mis) & 31) / esz);
}
#endif

void zs_reduce_f32(float *const *out, int nout, const float *const *in, int n, size_t count,
                   int avg, int world, int stream) {
    const float wf = (float)world;
    float acc[GROUP];
    size_t i = 0;
#if defined(__AVX2__)
    long head = stream ? stream_head((void *const *)out, nout, sizeof(float)) : -1;
    if (head < 0) stream = 0, head = 0;
    if ((size_t)head > count) head = (long)count;
    sum_f32(acc, in, n, 0, (size_t)head, avg, wf);
    for (int o = 0; o < nout; o++)
        memcpy(out[o], acc, (size_t)head * sizeof(float));
    const __m256 wv = _mm256_set1_ps(wf);
    for (i = (size_t)head; i + GROUP <= count; i += GROUP) {
        __m256 v[4];
        vsum_f32(v, in, n, i, avg, wv);
        for (int o = 0; o < nout; o++)
            for (int k = 0; k < 4; k++)
                if (stream)
                    _mm256_stream_ps(out[o] + i + 8 * k, v[k]);
                else
                    _mm256_storeu_ps(out[o] + i + 8 * k, v[k]);
    }
    if (stream) _mm_sfence(); /* order the streaming stores before the signal publishing them */
#else
    (void)stream;
#endif
    for (; i < count; i += GROUP) {
        size_t m = count - i < GROUP ? count - i : GROUP;
        sum_f32(acc, in, n, i, m, avg, wf);
        for (int o = 0; o < nout; o++)
            memcpy(out[o] + i, acc, m * sizeof(float));
    }
}

/* fp32 sums to bf16 bits, rounded as everywhere else (zs_f32_to_bf16). */
static void to_bf16(uint16_t *dst, const float *acc, size_t m) {
    for (size_t j = 0; j < m; j++)
        dst[j] = zs_f32_to_bf16(acc[j]).bits;
}

void zs_reduce_bf16(uint16_t *const *out, int nout, const uint16_t *const *in, int n, size_t count,
                    int avg, int world, int stream) {
    const float wf = (float)world;
    float acc[GROUP];
    uint16_t bits[GROUP];
    size_t i = 0;
#if defined(__AVX2__)
    long head = stream ? stream_head((void *const *)out, nout, sizeof(uint16_t)) : -1;
    if (head < 0) stream = 0, head = 0;
    if ((size_t)head > count) head = (long)count;
    sum_bf16(acc, in, n, 0, (size_t)head, avg, wf);
    to_bf16(bits, acc, (size_t)head);
    for (int o = 0; o < nout; o++)
        memcpy(out[o], bits, (size_t)head * sizeof(uint16_t));
    const __m256 wv = _mm256_set1_ps(wf);
    for (i = (size_t)head; i + GROUP <= count; i += GROUP) {
        __m256 v[4];
        vsum_bf16(v, in, n, i, avg, wv);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(acc + 8 * k, v[k]);
        /* The rounding (with its NaN rule) stays the scalar zs_f32_to_bf16, which the
         * compiler vectorizes: one definition of bf16 rounding in the code base. */
        to_bf16(bits, acc, GROUP);
        for (int o = 0; o < nout; o++)
            for (int k = 0; k < 2; k++) {
                __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(bits + 16 * k));
                __m256i *d = (__m256i *)(void *)(out[o] + i + 16 * k);
                if (stream)
                    _mm256_stream_si256(d, b);
                else
                    _mm256_storeu_si256(d, b);
            }
    }
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
    for (; i < count; i += GROUP) {
        size_t m = count - i < GROUP ? count - i : GROUP;
        sum_bf16(acc, in, n, i, m, avg, wf);
        to_bf16(bits, acc, m);
        for (int o = 0; o < nout; o++)
            memcpy(out[o] + i, bits, m * sizeof(uint16_t));
    }
}

/* Small helpers shared by the host/device math headers in this folder: a restrict keyword
 * that works in C and CUDA C++, a vectorisable exp for the CPU loops, and fixed-order
 * multi-lane reductions (the lane split is what lets the compiler vectorise a float sum
 * without -ffast-math, and it is fixed, so results do not depend on threads). */
#ifndef ZS_BACKEND_KERNELS_COMMON_H
#define ZS_BACKEND_KERNELS_COMMON_H

#include "core/bf16.h"
#include "core/hd.h"

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__cplusplus)
#define ZS_RESTRICT __restrict__
#else
#define ZS_RESTRICT restrict
#endif

/* Number of independent accumulators in the reductions below (one AVX2 register). */
#define ZS_LANES 8

/* exp(x) for x in [-87, 88], clamped outside (a result is then 0 or exp(88)), relative
 * error about 2 ulp. It is plain arithmetic (Cephes' expf: Cody-Waite range reduction,
 * degree-6 polynomial, exponent by bit construction) so that host loops calling it vectorise
 * (libm's expf is an opaque call that keeps them scalar), and the device runs the very same
 * operations: CUDA's expf would differ in the last bits, and the CUDA backend (built with
 * --fmad=false) is tested bit for bit against the CPU on everything that calls this. */
static ZS_HD float zs_expf(float x) {
    float lo = x < -87.0f ? 0.0f : 1.0f; /* exp(-87) is near FLT_MIN: flush below it */
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* n = round(x / ln 2) by the 1.5*2^23 trick; floorf would not vectorise in ISO C. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f; /* ln 2 split in two so n*ln2 is exact enough */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* n in [-126, 127]: a normal power of two. A NaN x (a diverged run) gives a NaN p, and the
     * result is NaN whatever e is; converting the NaN n to int would be undefined. */
    int32_t e = (int32_t)(n == n ? n : 0.0f) + 127;
    return p * zs_bits_f32((uint32_t)e << 23) * lo;
}

/* Column sums over N rows (bias and norm-weight gradients): the order both backends add in, so
 * they give the same bits. Rows fall in segments of ZS_COLSUM_SEG; segment s goes to partial
 * sum s % ZS_COLSUM_GROUPS, which adds its rows in index order (segments ascending); the
 * partials, started at 0, are added in group order 0, 1, ... into a 0-started total, and the
 * total is added to the output. A GPU sums the groups in parallel (a block of columns times
 * groups) and the CPU keeps the groups as rotating accumulators in one pass over the rows. */
#define ZS_COLSUM_SEG 64
#define ZS_COLSUM_GROUPS 16

static ZS_HD int zs_colsum_group(int r) {
    return (r / ZS_COLSUM_SEG) % ZS_COLSUM_GROUPS;
}

/* out[c] += the total of the ZS_COLSUM_GROUPS partials acc[w * ld + c], added in group order
 * into a 0-started float (the CPU's end of a column sum; a GPU's block does the same). */
static ZS_HD void zs_colsum_finish(float *out, const float *acc, size_t ld, int nc) {
    for (int c = 0; c < nc; c++) {
        float t = 0.0f;
        for (int w = 0; w < ZS_COLSUM_GROUPS; w++)
            t += acc[(size_t)w * ld + c];
        out[c] += t;
    }
}

/* The first key of row b*T+t under document masks (backend/ops.h "Documents"): where its
 * document starts, or 0 without masks (seg NULL). */
static ZS_HD int zs_seg_lo(const int32_t *seg, size_t bt) {
    return seg ? (int)seg[bt] : 0;
}

/* Combine the lanes in a fixed pairwise order. */
static ZS_HD float zs_lanes_sum(const float *acc) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum_i a[i]*b[i] in fp32, fixed order. */
static ZS_HD float zs_dot(const float *ZS_RESTRICT a, const float *ZS_RESTRICT b, int n) {
    float acc[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        acc[i % ZS_LANES] += a[i] * b[i];
    return zs_lanes_sum(acc);
}

/* sum_i a[i] in fp32, fixed order. */
static ZS_HD float zs_sum(const float *a, int n) {
    float acc[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] += a[i + j];
    for (; i < n; i++)
        acc[i % ZS_LANES] += a[i];
    return zs_lanes_sum(acc);
}

/* max_i a[i] (n >= 1); NaN inputs are not propagated reliably. */
static ZS_HD float zs_max(const float *a, int n) {
    float acc[ZS_LANES];
    for (int j = 0; j < ZS_LANES; j++)
        acc[j] = a[0];
    int i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] = a[i + j] > acc[j] ? a[i + j] : acc[j];
    for (; i < n; i++)
        acc[0] = a[i] > acc[0] ? a[i] : acc[0];
    float m = acc[0];
    for (int j = 1; j < ZS_LANES; j++)
        m = acc[j] > m ? acc[j] : m;
    return m;
}

/* ---- the GPU's reduction order, written out for the CPU ------------------------------------
 * Row reductions of norms run one warp per row on the GPU: lane l adds elements l, l + 32, ...
 * in order, then the 32 partials combine through a xor butterfly (offsets 16, 8, 4, 2, 1, after
 * which every lane holds the same total). The softmax runs one block of ZS_ROW_THREADS per row:
 * thread t adds elements t, t + ZS_ROW_THREADS, ..., each warp combines by the butterfly, and the
 * warp totals combine by a butterfly of their own. The CPU twins add in exactly that order, so
 * both backends give the same bits. */
#define ZS_WARP 32
#define ZS_ROW_THREADS 256

/* acc[i % LANES] += TERM(i) for i in [0, n), in blocks of LANES so that the compiler vectorises
 * the lanes (element i always lands in lane i % LANES, in order of i). */
#define ZS_LANE_SUM(acc, LANES, n, i, TERM)                                                        \
    do {                                                                                           \
        int zs_i0_ = 0;                                                                            \
        for (; zs_i0_ + (LANES) <= (n); zs_i0_ += (LANES))                                         \
            for (int zs_j_ = 0; zs_j_ < (LANES); zs_j_++) {                                        \
                int i = zs_i0_ + zs_j_;                                                            \
                (acc)[zs_j_] += (TERM);                                                            \
            }                                                                                      \
        for (int zs_j_ = 0; zs_i0_ + zs_j_ < (n); zs_j_++) {                                       \
            int i = zs_i0_ + zs_j_;                                                                \
            (acc)[zs_j_] += (TERM);                                                                \
        }                                                                                          \
    } while (0)

/* The butterfly over n partials (n a power of two), in place; returns the total. */
static ZS_HD float zs_tree(float *v, int n) {
    for (int d = n / 2; d >= 1; d /= 2)
        for (int i = 0; i < d; i++)
            v[i] = v[i] + v[i + d];
    return v[0];
}

static ZS_HD float zs_tree_max(float *v, int n) {
    for (int d = n / 2; d >= 1; d /= 2)
        for (int i = 0; i < d; i++)
            v[i] = v[i + d] > v[i] ? v[i + d] : v[i];
    return v[0];
}

/* ZS_ROW_THREADS partials: each warp's butterfly, then the butterfly over the warps. */
static ZS_HD float zs_block_tree(float *v) {
    float w[ZS_ROW_THREADS / ZS_WARP];
    for (int k = 0; k < ZS_ROW_THREADS / ZS_WARP; k++)
        w[k] = zs_tree(v + k * ZS_WARP, ZS_WARP);
    return zs_tree(w, ZS_ROW_THREADS / ZS_WARP);
}

static ZS_HD float zs_block_tree_max(float *v) {
    float w[ZS_ROW_THREADS / ZS_WARP];
    for (int k = 0; k < ZS_ROW_THREADS / ZS_WARP; k++)
        w[k] = zs_tree_max(v + k * ZS_WARP, ZS_WARP);
    return zs_tree_max(w, ZS_ROW_THREADS / ZS_WARP);
}

/* y[i] += a * x[i]. */
static ZS_HD void zs_axpy_row(float *ZS_RESTRICT y, float a, const float *ZS_RESTRICT x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

#endif

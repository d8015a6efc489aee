/* Memory-efficient causal attention in the FlashAttention manner: the per-row math of one
 * query row against one block of keys/values, shared by the CPU loops (cpu/flash_cpu.c) and
 * the CUDA kernels (cuda/flash_cuda.cu). Forward keeps a running max m and sum l per row (the
 * online softmax) and saves only the output and lse = m + log l; backward recomputes each
 * block's probabilities as exp(s - lse).
 *
 * Numerics are part of the contract: key blocks are ZS_FA_BK wide from position 0, every sum
 * runs in a fixed order, and the host and the device execute the very same operations
 * (plain-arithmetic exp and log, no contraction), so both backends give the same bits
 * whatever the thread count or the launch geometry. With document masks (backend/ops.h
 * "Documents") a row reads only its document's keys lo..i: the blocks stay aligned to 0, the
 * first one it reads is the block holding lo, and inside it the row starts at lo (zs_fa_span);
 * with lo = 0 that is exactly the unmasked computation. */
#ifndef ZS_BACKEND_KERNELS_FLASH_H
#define ZS_BACKEND_KERNELS_FLASH_H

#include "backend/kernels/common.h"

/* Keys per block. The online softmax rescales at block boundaries, so this width is part of
 * the results; it is the same on every backend. */
#define ZS_FA_BK 64
/* From this T on, the tensor-core backward computes dk and dv in a kernel each, below it in one
 * (flash_tc_bwd_cuda.cu, tc_kv_split); named here so that the tests run both forms. */
#define ZS_FA_TC_KV_SPLIT_T 1024
/* Query rows per CPU forward task: it only splits work and does not change a bit. */
#define ZS_FA_BQ 64

/* log(x) for a positive normal x, relative error about 1 ulp: Cephes' logf (mantissa in
 * [sqrt(1/2), sqrt(2)), degree-8 polynomial), in plain arithmetic for the reason zs_expf
 * gives. Here x = l >= 1 always (the row maximum contributes exp(0)). */
static ZS_HD float zs_logf(float x) {
    uint32_t u = zs_f32_bits(x);
    float e = (float)((int32_t)((u >> 23) & 0xff) - 126);
    float f = zs_bits_f32((u & 0x007fffffu) | 0x3f000000u); /* x = f * 2^e, f in [0.5, 1) */
    if (f < 0.707106781186547524f) {
        e -= 1.0f;
        f = f + f - 1.0f;
    } else {
        f = f - 1.0f;
    }
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    y += -2.12194440e-4f * e;
    y += -0.5f * z;
    return f + y + 0.693359375f * e;
}

/* The keys of row i, whose document starts at lo, inside the key block [j0, j0 + n): the first
 * at offset *a in the block, the return value how many (<= 0: none in this block). */
static ZS_HD int zs_fa_span(int i, int lo, int j0, int n, int *a) {
    int first = lo > j0 ? lo - j0 : 0;
    int end = i - j0 + 1 < n ? i - j0 + 1 : n;
    *a = first;
    return end - first;
}

/* The first key block row i reads: the one holding its document's start lo. */
static ZS_HD int zs_fa_first_block(int lo) {
    return lo - lo % ZS_FA_BK;
}

/* s[j] = scale * sum_d a[d] * b(j, d) for j < n, with b(j, d) = b[j*sj + d*sd]. Each sum runs
 * over d = 0..hs-1 in order, one product and one add per term, so a row-major block (sj = the
 * row stride, sd = 1: the device) and a transposed one (sj = 1, sd = its width: the CPU, whose
 * inner loop over j then vectorises) give the same bits. Serves q.k (scores) and dO.v. */
static ZS_HD void zs_fa_dots(float *ZS_RESTRICT s, const float *ZS_RESTRICT a,
                             const float *ZS_RESTRICT b, size_t sj, size_t sd, int n, int hs,
                             float scale) {
    for (int j = 0; j < n; j++)
        s[j] = 0.0f;
    for (int d = 0; d < hs; d++) {
        float ad = a[d];
        const float *bd = b + (size_t)d * sd;
        for (int j = 0; j < n; j++)
            s[j] += ad * bd[(size_t)j * sj];
    }
    for (int j = 0; j < n; j++)
        s[j] *= scale;
}

/* Online-softmax step of one query row over n scaled scores s of one key block: with the
 * row's running max *m (-inf before the first block) and sum *l (0), s becomes
 * exp(s - m_new), the output accumulator o[hs] and *l are rescaled by exp(m - m_new), and the
 * block is added: o += sum_j s[j] v(j, :), v(j, e) = v[j*vs + e], j in order. */
static ZS_HD void zs_fa_fwd_block(float *ZS_RESTRICT s, float *ZS_RESTRICT o, float *m, float *l,
                                  const float *ZS_RESTRICT v, size_t vs, int n, int hs) {
    float mb = zs_max(s, n);
    float mn = mb > *m ? mb : *m;
    float alpha = zs_expf(*m - mn); /* 0 on the first block: exp(-inf) clamps to 0 */
    for (int j = 0; j < n; j++)
        s[j] = zs_expf(s[j] - mn);
    *l = *l * alpha + zs_sum(s, n);
#ifndef ZS_MUTANT_FA_NO_RESCALE /* the tests' deliberately broken build (flash_broken): no rescale */
    for (int e = 0; e < hs; e++)
        o[e] *= alpha;
#endif
    for (int j = 0; j < n; j++)
        zs_axpy_row(o, s[j], v + (size_t)j * vs, hs);
    *m = mn;
}

/* End of a row: o /= l; returns the row's log-sum-exp m + log l, all backward keeps. */
static ZS_HD float zs_fa_fwd_finish(float *o, float m, float l, int hs) {
    float inv = 1.0f / l;
    for (int e = 0; e < hs; e++)
        o[e] *= inv;
    return m + zs_logf(l);
}

/* Backward of one query row against one key block, from its scaled scores s and its dp = dO.v
 * (both from zs_fa_dots): s becomes the probabilities p = exp(s - lse) and dp the score
 * gradients p * (dp - delta) * scale, delta = dO.O of the row (the softmax backward's
 * sum_j p_j dp_j, which equals it). */
static ZS_HD void zs_fa_bwd_block(float *ZS_RESTRICT s, float *ZS_RESTRICT dp, float lse,
                                  float delta, float scale, int n) {
    for (int j = 0; j < n; j++) {
        s[j] = zs_expf(s[j] - lse);
        dp[j] = s[j] * (dp[j] - delta) * scale;
    }
}

#endif

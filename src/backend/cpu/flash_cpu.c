/* CPU memory-efficient causal attention (backend/kernels/flash.h): O(T) memory per head,
 * multi-head and grouped-query alike, with q, k and v as strided row views (GPT-2's packed
 * q | k | v is the case NKV = NH, row stride 3C).
 *  - Forward: a task per (batch, query head, block of ZS_FA_BQ query rows). Each key block is
 *    copied transposed into a small per-task buffer (where it stays in L1 for the block's
 *    rows), then every row takes its online-softmax step against it.
 *  - Backward: a pass computes delta = dO.O per row; then a task per (batch, kv head) walks
 *    the key blocks, and for each its group's query heads and every query row at or after
 *    the block, recomputing probabilities from lse. The task owns its kv head's dk and dv
 *    and its query heads' dq, so no atomics and no dependence on the thread count.
 * Document masks (seg): a row reads the keys of its own document only (kernels/flash.h).
 * A bf16 out (fwd16, bwd16): the forward's rows accumulate in the task's buffer and are rounded
 * once at their end; delta widens each row first.
 * Per-task buffers (4 * ZS_FA_BK * hs floats at most) come from malloc and are not counted
 * in the memory categories, as OpenBLAS's own buffers are not. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/flash.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Query rows whose key/value-gradient updates backward applies together (see below). */
#define BWD_ROWS 8

/* Rows j0..j0+n-1 of a [T, ld] view, hs columns from col, into dst[hs][ZS_FA_BK]. */
static void transpose_block(float *dst, const float *src, size_t ld, int n, int hs) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hs; d++)
            dst[(size_t)d * ZS_FA_BK + j] = src[(size_t)j * ld + d];
}

/* The forward into an fp32 out, or (out16) into a bf16 one: then the task's rows accumulate in
 * its own buffer and are rounded once as they finish. */
static zs_status flash_fwd(void *out, int out16, float *lse, const float *q, const float *k,
                           const float *v, int B, int T, int NH, int NKV, int hs, int ldq, int ldkv,
                           const int32_t *seg) {
    zs_status st = ZS_OK;
    const int rep = NH / NKV, nqb = (T + ZS_FA_BQ - 1) / ZS_FA_BQ;
    const size_t ldo = (size_t)NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    int oom = 0;
#pragma omp parallel for schedule(dynamic, 1)                                                      \
    reduction(|                                                                                    \
              : oom) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (long task = 0; task < (long)B * NH * nqb; task++) {
        int qb = (int)(task % nqb), bh = (int)(task / nqb);
        int b = bh / NH, h = bh % NH, g = h / rep;
        int i0 = qb * ZS_FA_BQ, nq = T - i0 < ZS_FA_BQ ? T - i0 : ZS_FA_BQ;
        const float *kb = k + (size_t)b * T * ldkv + (size_t)g * hs;
        const float *vb = v + (size_t)b * T * ldkv + (size_t)g * hs;
        float m[ZS_FA_BQ], l[ZS_FA_BQ], sc[ZS_FA_BK];
        float *kt = malloc((size_t)hs * (ZS_FA_BK + (out16 ? ZS_FA_BQ : 0)) * sizeof *kt);
        if (!kt) {
            oom = 1;
            continue;
        }
        /* row i's accumulator: its out row, or (out16) its row of the buffer after kt */
#define ACC_ROW(i)                                                                                 \
    (out16 ? kt + (size_t)hs * (ZS_FA_BK + ((i)-i0))                                               \
           : (float *)out + ((size_t)b * T + (i)) * ldo + (size_t)h * hs)
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            memset(ACC_ROW(i0 + r), 0, (size_t)hs * 4);
        }
        /* Rows read their document's keys only (lo..i); seg is non-decreasing along a row, so
         * the task's first row has the smallest lo. */
        int lo0 = zs_seg_lo(seg, (size_t)b * T + i0);
        for (int j0 = zs_fa_first_block(lo0); j0 <= i0 + nq - 1; j0 += ZS_FA_BK) {
            int n = T - j0 < ZS_FA_BK ? T - j0 : ZS_FA_BK;
            transpose_block(kt, kb + (size_t)j0 * ldkv, (size_t)ldkv, n, hs);
            for (int r = 0; r < nq; r++) {
                int i = i0 + r, a = 0;
                int ni = zs_fa_span(i, zs_seg_lo(seg, (size_t)b * T + i), j0, n, &a);
                if (ni <= 0) continue;
                const float *qi = q + ((size_t)b * T + i) * ldq + (size_t)h * hs;
                float *oi = ACC_ROW(i);
                zs_fa_dots(sc, qi, kt + a, 1, ZS_FA_BK, ni, hs, scale);
                zs_fa_fwd_block(sc, oi, &m[r], &l[r], vb + (size_t)(j0 + a) * ldkv, (size_t)ldkv,
                                ni, hs);
            }
        }
        for (int r = 0; r < nq; r++) {
            float *oi = ACC_ROW(i0 + r);
            lse[(size_t)bh * T + i0 + r] = zs_fa_fwd_finish(oi, m[r], l[r], hs);
            if (out16) {
                zs_bf16 *o16 = (zs_bf16 *)out + ((size_t)b * T + i0 + r) * ldo + (size_t)h * hs;
                for (int e = 0; e < hs; e++)
                    o16[e] = zs_f32_to_bf16(oi[e]);
            }
        }
#undef ACC_ROW
        free(kt);
    }
    ZS_REQUIRE(!oom, ZS_ERR_OOM, "flash_attention_fwd: out of memory for a %d x %d block buffer",
               hs, ZS_FA_BK);
fail:
    return st;
}

zs_status zs_cpu_flash_attention_fwd(zs_stream_t *s, float *out, float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int NH, int NKV,
                                     int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check("flash_attention_fwd", B, T, NH, NKV, hs, ldq, ldkv));
    ZS_CHECK(flash_fwd(out, 0, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg));
fail:
    return st;
}

zs_status zs_cpu_flash_attention_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                                       const float *k, const float *v, int B, int T, int NH,
                                       int NKV, int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check16("flash_attention_fwd16", B, T, NH, NKV, hs, ldq, ldkv));
    ZS_CHECK(flash_fwd(out, 1, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg));
fail:
    return st;
}

/* The backward for an fp32 out, or (out16) a bf16 one, widened row by row for delta. */
static zs_status flash_bwd(float *dq, float *dk, float *dv, float *delta, const float *dout,
                           const float *q, const float *k, const float *v, const void *out,
                           int out16, const float *lse, int B, int T, int NH, int NKV, int hs,
                           int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    const int rep = NH / NKV;
    const size_t ldo = (size_t)NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    int oom = 0;
    /* delta[b,h,i] = dO_i . O_i, the row term of the softmax backward. */
#pragma omp parallel for schedule(static) if ((size_t)B * T * NH * hs >= ZS_CPU_PAR_MIN)
    for (long r = 0; r < (long)B * T; r++) {
        int b = (int)(r / T), i = (int)(r % T);
        float wide[ZS_FA_OUT16_MAX_HS];
        for (int h = 0; h < NH; h++) {
            size_t o = (size_t)r * ldo + (size_t)h * hs;
            if (out16)
                for (int e = 0; e < hs; e++)
                    wide[e] = zs_bf16_to_f32(((const zs_bf16 *)out)[o + e]);
            const float *oi = out16 ? wide : (const float *)out + o;
            delta[((size_t)b * NH + h) * T + i] = zs_dot(dout + o, oi, hs);
        }
    }
#pragma omp parallel for schedule(dynamic, 1)                                                      \
    reduction(|                                                                                    \
              : oom) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (long task = 0; task < (long)B * NKV; task++) {
        int b = (int)(task / NKV), g = (int)(task % NKV);
        size_t koff = (size_t)b * T * ldkv + (size_t)g * hs;
        float sc[BWD_ROWS][ZS_FA_BK], dp[BWD_ROWS][ZS_FA_BK];
        /* the op overwrites: this task's rows of dk, dv and its heads' dq start at zero */
        for (int t = 0; t < T; t++) {
            memset(dk + koff + (size_t)t * ldkv, 0, (size_t)hs * sizeof *dk);
            memset(dv + koff + (size_t)t * ldkv, 0, (size_t)hs * sizeof *dv);
            memset(dq + ((size_t)b * T + t) * ldq + (size_t)g * rep * hs, 0,
                   (size_t)rep * hs * sizeof *dq);
        }
        float *kt = malloc(2 * (size_t)hs * ZS_FA_BK * sizeof *kt);
        if (!kt) {
            oom = 1;
            continue;
        }
        float *vt = kt + (size_t)hs * ZS_FA_BK;
        for (int j0 = 0; j0 < T; j0 += ZS_FA_BK) {
            int n = T - j0 < ZS_FA_BK ? T - j0 : ZS_FA_BK;
            const float *kj = k + koff + (size_t)j0 * ldkv;
            float *dkj = dk + koff + (size_t)j0 * ldkv, *dvj = dv + koff + (size_t)j0 * ldkv;
            transpose_block(kt, kj, (size_t)ldkv, n, hs);
            transpose_block(vt, v + koff + (size_t)j0 * ldkv, (size_t)ldkv, n, hs);
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                size_t bh = (size_t)b * NH + h;
                /* Query rows in groups of BWD_ROWS: each row's block math as before, then
                 * the group's dk/dv updates key by key, so that a key's rows stay in L1
                 * across the group. For a fixed key the rows still add in ascending order
                 * (the order the CUDA kv kernel uses), so the bits do not change. */
                for (int i = j0; i < T; i += BWD_ROWS) {
                    int gn = T - i < BWD_ROWS ? T - i : BWD_ROWS;
                    const float *qr[BWD_ROWS], *dOr[BWD_ROWS];
                    int a[BWD_ROWS], ni[BWD_ROWS];
                    for (int r = 0; r < gn; r++) {
                        int ir = i + r;
                        qr[r] = dOr[r] = NULL;
                        ni[r] = zs_fa_span(ir, zs_seg_lo(seg, (size_t)b * T + ir), j0, n, &a[r]);
                        if (ni[r] <= 0) continue; /* the block is before its document */
                        size_t qo = ((size_t)b * T + ir) * ldq + (size_t)h * hs;
                        qr[r] = q + qo;
                        dOr[r] = dout + ((size_t)b * T + ir) * ldo + (size_t)h * hs;
                        float *s_r = sc[r] + a[r], *dp_r = dp[r] + a[r];
                        zs_fa_dots(s_r, qr[r], kt + a[r], 1, ZS_FA_BK, ni[r], hs, scale);
                        zs_fa_dots(dp_r, dOr[r], vt + a[r], 1, ZS_FA_BK, ni[r], hs, 1.0f);
                        zs_fa_bwd_block(s_r, dp_r, lse[bh * T + ir], delta[bh * T + ir], scale,
                                        ni[r]);
                        float *dqi = dq + qo;
                        for (int j = a[r]; j < a[r] + ni[r]; j++)
                            zs_axpy_row(dqi, dp[r][j], kj + (size_t)j * ldkv, hs);
                    }
                    for (int j = 0; j < n; j++) {
                        /* The rows that see key j0 + j: at or after it, in its document. */
                        for (int r = 0; r < gn; r++)
                            if (j >= a[r] && j < a[r] + ni[r])
                                zs_axpy_row(dkj + (size_t)j * ldkv, dp[r][j], qr[r], hs);
                        for (int r = 0; r < gn; r++)
                            if (j >= a[r] && j < a[r] + ni[r])
                                zs_axpy_row(dvj + (size_t)j * ldkv, sc[r][j], dOr[r], hs);
                    }
                }
            }
        }
        free(kt);
    }
    ZS_REQUIRE(!oom, ZS_ERR_OOM, "flash_attention_bwd: out of memory for a %d x %d block buffer",
               hs, ZS_FA_BK);
fail:
    return st;
}

zs_status zs_cpu_flash_attention_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                     const float *dout, const float *q, const float *k,
                                     const float *v, const float *out, const float *lse, int B,
                                     int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                     const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check("flash_attention_bwd", B, T, NH, NKV, hs, ldq, ldkv));
    ZS_CHECK(flash_bwd(dq, dk, dv, delta, dout, q, k, v, out, 0, lse, B, T, NH, NKV, hs, ldq, ldkv,
                       seg));
fail:
    return st;
}

zs_status zs_cpu_flash_attention_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv,
                                       float *delta, const float *dout, const float *q,
                                       const float *k, const float *v, const zs_bf16 *out,
                                       const float *lse, int B, int T, int NH, int NKV, int hs,
                                       int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check16("flash_attention_bwd16", B, T, NH, NKV, hs, ldq, ldkv));
    ZS_CHECK(flash_bwd(dq, dk, dv, delta, dout, q, k, v, out, 1, lse, B, T, NH, NKV, hs, ldq, ldkv,
                       seg));
fail:
    return st;
}

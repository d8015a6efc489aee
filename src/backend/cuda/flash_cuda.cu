/* CUDA memory-efficient causal attention: the twin of cpu/flash_cpu.c over the same per-row
 * math (backend/kernels/flash.h), so both backends give the same bits. Every kernel walks the
 * key blocks of ZS_FA_BK from position 0 and sums each output element's terms in the CPU's
 * order, without atomics:
 *  - forward: a thread per query row (b, h, i): online softmax over its key blocks, out row
 *    and lse;
 *  - delta: a thread per query row, dO.O;
 *  - backward q: a thread per query row: recomputed probabilities, dq row;
 *  - backward kv: a thread per key row (b, g, j): dk and dv, over the group's query heads in
 *    order and, inside each, over query rows i = j..T-1 in order.
 * With document masks (seg) a row reads its document's keys only, from the block holding its
 * start (kernels/flash.h: zs_fa_span), and a key row skips the query rows of later documents.
 * This is the correctness-first form (one row per thread, K and V read from global memory);
 * a tiled tensor-core version can replace the kernels behind the same contract, with the
 * CPU as its oracle within a stated tolerance.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/flash.h"

/* One call's strided views: q rows (stride ldq) hold NH heads of hs, k/v rows (stride ldkv)
 * NKV heads; out and dout rows are dense NH*hs. */
typedef struct fa_view {
    int B, T, NH, NKV, hs;
    size_t ldq, ldkv;
    float scale;
} fa_view;

static __device__ size_t fa_qrow(const fa_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * a.ldq + (size_t)h * a.hs;
}

static __device__ size_t fa_kvrow(const fa_view &a, int b, int j, int g) {
    return ((size_t)b * a.T + j) * a.ldkv + (size_t)g * a.hs;
}

static __device__ size_t fa_orow(const fa_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
}

/* Row i's accumulator: the fp32 out row itself, or for a bf16 out (flash_attention_fwd16) the
 * thread's own array, rounded into the row at its end; and a row of out as fp32 for delta. */
static __device__ float *fa_acc(float *o, float *) {
    return o;
}
static __device__ float *fa_acc(zs_bf16 *, float *own) {
    return own;
}
static __device__ void fa_store(float *, const float *, int) {}
static __device__ void fa_store(zs_bf16 *o, const float *acc, int hs) {
    for (int e = 0; e < hs; e++)
        zs_cu_put(o + e, acc[e]);
}
static __device__ const float *fa_wide(const float *o, float *, int) {
    return o;
}
static __device__ const float *fa_wide(const zs_bf16 *o, float *own, int hs) {
    for (int e = 0; e < hs; e++)
        own[e] = zs_cu_widen(o[e]);
    return own;
}

template <typename OT>
static __device__ void fa_fwd_rows(OT *out, float *own, float *lse, const float *q, const float *k,
                                   const float *v, const int32_t *seg, const fa_view &a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NH * a.T) {
        int i = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        int g = h / (a.NH / a.NKV);
        const float *qi = q + fa_qrow(a, b, i, h);
        float *oi = fa_acc(out + fa_orow(a, b, i, h), own);
        float sc[ZS_FA_BK], m = -INFINITY, l = 0.0f;
        int lo = zs_seg_lo(seg, (size_t)b * a.T + i);
        for (int e = 0; e < a.hs; e++)
            oi[e] = 0.0f;
        for (int j0 = zs_fa_first_block(lo); j0 <= i; j0 += ZS_FA_BK) {
            int n = a.T - j0 < ZS_FA_BK ? a.T - j0 : ZS_FA_BK, f = 0;
            int ni = zs_fa_span(i, lo, j0, n, &f);
            zs_fa_dots(sc, qi, k + fa_kvrow(a, b, j0 + f, g), a.ldkv, 1, ni, a.hs, a.scale);
            zs_fa_fwd_block(sc, oi, &m, &l, v + fa_kvrow(a, b, j0 + f, g), a.ldkv, ni, a.hs);
        }
        lse[bh * a.T + i] = zs_fa_fwd_finish(oi, m, l, a.hs);
        fa_store(out + fa_orow(a, b, i, h), oi, a.hs);
    }
}

static __global__ void fa_fwd_kernel(float *out, float *lse, const float *q, const float *k,
                                     const float *v, const int32_t *seg, fa_view a) {
    fa_fwd_rows(out, NULL, lse, q, k, v, seg, a);
}

static __global__ void fa_fwd16_kernel(zs_bf16 *out, float *lse, const float *q, const float *k,
                                       const float *v, const int32_t *seg, fa_view a) {
    float own[ZS_FA_OUT16_MAX_HS];
    fa_fwd_rows(out, own, lse, q, k, v, seg, a);
}

template <typename OT>
static __device__ void fa_delta_rows(float *delta, const float *dout, const OT *out, float *own,
                                     const fa_view &a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NH * a.T) {
        int i = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        size_t o = fa_orow(a, b, i, h);
        delta[bh * a.T + i] = zs_dot(dout + o, fa_wide(out + o, own, a.hs), a.hs);
    }
}

static __global__ void fa_delta_kernel(float *delta, const float *dout, const float *out,
                                       fa_view a) {
    fa_delta_rows(delta, dout, out, NULL, a);
}

static __global__ void fa_delta16_kernel(float *delta, const float *dout, const zs_bf16 *out,
                                         fa_view a) {
    float own[ZS_FA_OUT16_MAX_HS];
    fa_delta_rows(delta, dout, out, own, a);
}

/* dq rows: fp32, or bf16 (flash_attention_bwd16g) summed in the thread's own array and
 * rounded into the row at its end, as the forward's out. */
template <typename GT>
static __device__ void fa_bwd_q_rows(GT *dq, float *own, const float *dout, const float *q,
                                     const float *k, const float *v, const float *lse,
                                     const float *delta, const int32_t *seg, const fa_view &a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NH * a.T) {
        int i = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        int g = h / (a.NH / a.NKV);
        const float *qi = q + fa_qrow(a, b, i, h);
        const float *dOi = dout + fa_orow(a, b, i, h);
        float *dqi = fa_acc(dq + fa_qrow(a, b, i, h), own);
        float sc[ZS_FA_BK], dp[ZS_FA_BK];
        int lo = zs_seg_lo(seg, (size_t)b * a.T + i);
        for (int e = 0; e < a.hs; e++) /* the op overwrites: the sum starts at zero */
            dqi[e] = 0.0f;
        for (int j0 = zs_fa_first_block(lo); j0 <= i; j0 += ZS_FA_BK) {
            int n = a.T - j0 < ZS_FA_BK ? a.T - j0 : ZS_FA_BK, f = 0;
            int ni = zs_fa_span(i, lo, j0, n, &f);
            const float *kj = k + fa_kvrow(a, b, j0 + f, g);
            zs_fa_dots(sc, qi, kj, a.ldkv, 1, ni, a.hs, a.scale);
            zs_fa_dots(dp, dOi, v + fa_kvrow(a, b, j0 + f, g), a.ldkv, 1, ni, a.hs, 1.0f);
            zs_fa_bwd_block(sc, dp, lse[bh * a.T + i], delta[bh * a.T + i], a.scale, ni);
            for (int j = 0; j < ni; j++)
                zs_axpy_row(dqi, dp[j], kj + (size_t)j * a.ldkv, a.hs);
        }
        fa_store(dq + fa_qrow(a, b, i, h), dqi, a.hs);
    }
}

static __global__ void fa_bwd_q_kernel(float *dq, const float *dout, const float *q, const float *k,
                                       const float *v, const float *lse, const float *delta,
                                       const int32_t *seg, fa_view a) {
    fa_bwd_q_rows(dq, NULL, dout, q, k, v, lse, delta, seg, a);
}

static __global__ void fa_bwd_q16_kernel(zs_bf16 *dq, const float *dout, const float *q,
                                         const float *k, const float *v, const float *lse,
                                         const float *delta, const int32_t *seg, fa_view a) {
    float own[ZS_FA_OUT16_MAX_HS];
    fa_bwd_q_rows(dq, own, dout, q, k, v, lse, delta, seg, a);
}

/* dk and dv rows, as dq's: fp32, or bf16 summed in two own arrays. */
template <typename GT>
static __device__ void fa_bwd_kv_rows(GT *dk, GT *dv, float *own, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse,
                                      const float *delta, const int32_t *seg, const fa_view &a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NKV * a.T) {
        int j = (int)(idx % (size_t)a.T);
        size_t bg = idx / (size_t)a.T;
        int b = (int)(bg / (size_t)a.NKV), g = (int)(bg % (size_t)a.NKV);
        int rep = a.NH / a.NKV;
        size_t kr = fa_kvrow(a, b, j, g);
        float *dkj = fa_acc(dk + kr, own), *dvj = fa_acc(dv + kr, own + ZS_FA_OUT16_MAX_HS);
        for (int e = 0; e < a.hs; e++) { /* the op overwrites: the sums start at zero */
            dkj[e] = 0.0f;
            dvj[e] = 0.0f;
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            size_t bh = (size_t)b * a.NH + h;
            for (int i = j; i < a.T; i++) {
                if (zs_seg_lo(seg, (size_t)b * a.T + i) > j) break; /* a later document */
                const float *qi = q + fa_qrow(a, b, i, h);
                const float *dOi = dout + fa_orow(a, b, i, h);
                float s1, dp1;
                zs_fa_dots(&s1, qi, k + kr, 1, 1, 1, a.hs, a.scale);
                zs_fa_dots(&dp1, dOi, v + kr, 1, 1, 1, a.hs, 1.0f);
                zs_fa_bwd_block(&s1, &dp1, lse[bh * a.T + i], delta[bh * a.T + i], a.scale, 1);
                zs_axpy_row(dkj, dp1, qi, a.hs);
                zs_axpy_row(dvj, s1, dOi, a.hs);
            }
        }
        fa_store(dk + kr, dkj, a.hs);
        fa_store(dv + kr, dvj, a.hs);
    }
}

static __global__ void fa_bwd_kv_kernel(float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *lse,
                                        const float *delta, const int32_t *seg, fa_view a) {
    fa_bwd_kv_rows(dk, dv, NULL, dout, q, k, v, lse, delta, seg, a);
}

static __global__ void fa_bwd_kv16_kernel(zs_bf16 *dk, zs_bf16 *dv, const float *dout,
                                          const float *q, const float *k, const float *v,
                                          const float *lse, const float *delta, const int32_t *seg,
                                          fa_view a) {
    float own[2 * ZS_FA_OUT16_MAX_HS];
    fa_bwd_kv_rows(dk, dv, own, dout, q, k, v, lse, delta, seg, a);
}

/* Costs count the (query, key) pairs the causal mask admits, T(T+1)/2 per (b, h), and the key
 * blocks the rows visit, i/ZS_FA_BK + 1 for row i. Document masks admit fewer, but seg lives
 * in device memory (counting them would take a synchronising copy), so with seg these are
 * upper bounds. Only ZS_COST calls these helpers, and a real build compiles it away: hence
 * [[maybe_unused]]. */
[[maybe_unused]] static inline double fa_pairs(const fa_view &a) {
    return (double)a.B * a.NH * a.T * (a.T + 1.0) / 2.0;
}

[[maybe_unused]] static inline double fa_blocks(const fa_view &a) {
    double q = (double)(a.T / ZS_FA_BK), r = (double)(a.T % ZS_FA_BK);
    return (double)a.B * a.NH * (ZS_FA_BK * q * (q + 1.0) / 2.0 + r * (q + 1.0));
}

/* Query rows (b, h, i), and the elements of q (or out), of k (or v), and of seg. */
[[maybe_unused]] static inline double fa_rows(const fa_view &a) {
    return (double)a.B * a.NH * a.T;
}
[[maybe_unused]] static inline double fa_q_elems(const fa_view &a) {
    return fa_rows(a) * a.hs;
}
[[maybe_unused]] static inline double fa_kv_elems(const fa_view &a) {
    return (double)a.B * a.T * a.NKV * a.hs;
}
[[maybe_unused]] static inline double fa_seg_elems(const fa_view &a, const int32_t *seg) {
    return seg ? (double)a.B * a.T : 0.0;
}

static zs_status make_view(const char *op, int B, int T, int NH, int NKV, int hs, int ldq, int ldkv,
                           fa_view *a) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check(op, B, T, NH, NKV, hs, ldq, ldkv));
    a->B = B;
    a->T = T;
    a->NH = NH;
    a->NKV = NKV;
    a->hs = hs;
    a->ldq = (size_t)ldq;
    a->ldkv = (size_t)ldkv;
    a->scale = 1.0f / sqrtf((float)hs);
fail:
    return st;
}

/* The forward into an fp32 out, or a bf16 one (2 bytes an element written where 4 were). */
template <typename OT>
static zs_status fa_fwd(zs_stream_t *s, const char *op, OT *out, float *lse, const float *q,
                        const float *k, const float *v, int B, int T, int NH, int NKV, int hs,
                        int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    fa_view a;
    size_t rows = 0;
    ZS_CHECK(make_view(op, B, T, NH, NKV, hs, ldq, ldkv, &a));
    rows = (size_t)B * NH * T;
    if (rows == 0) return ZS_OK;
    ZS_REQUIRE(out && lse && q && k && v, ZS_ERR_INVALID, "%s: NULL buffer", op);
    /* per pair q.k and its scale (2hs + 1), exp, the block's sum and o += p v (2hs + 3); per
     * block the rescale (hs + 11); per row o / l and lse (hs + 3). q, k, v read; out, lse
     * written. */
    ZS_COST(fa_pairs(a) * (4.0 * hs + 4.0) + fa_blocks(a) * (hs + 11.0) + fa_rows(a) * (hs + 3.0),
            0,
            4.0 * (fa_q_elems(a) + 2.0 * fa_kv_elems(a) + fa_rows(a) + fa_seg_elems(a, seg)) +
                sizeof(OT) * fa_q_elems(a));
    if (sizeof(OT) == sizeof(float)) {
        ZS_LAUNCH(fa_fwd_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, zs_cu_stream(s),
                  (float *)out, lse, q, k, v, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_fwd_kernel);
    } else {
        ZS_LAUNCH(fa_fwd16_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, zs_cu_stream(s),
                  (zs_bf16 *)out, lse, q, k, v, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_fwd16_kernel);
    }
fail:
    return st;
}

zs_status zs_cu_flash_attention_fwd(zs_stream_t *s, float *out, float *lse, const float *q,
                                    const float *k, const float *v, int B, int T, int NH, int NKV,
                                    int hs, int ldq, int ldkv, const int32_t *seg) {
    return fa_fwd(s, "flash_attention_fwd", out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg);
}

zs_status zs_cu_flash_attention_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                                      const float *k, const float *v, int B, int T, int NH, int NKV,
                                      int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check16("flash_attention_fwd16", B, T, NH, NKV, hs, ldq, ldkv));
    return fa_fwd(s, "flash_attention_fwd16", out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

/* The q and kv passes read the delta rows the first kernel writes: stream order keeps them in
 * sequence; they write disjoint buffers, fp32 or bf16 (GT). */
template <typename OT, typename GT>
static zs_status fa_bwd(zs_stream_t *s, const char *op, GT *dq, GT *dk, GT *dv, float *delta,
                        const float *dout, const float *q, const float *k, const float *v,
                        const OT *out, const float *lse, int B, int T, int NH, int NKV, int hs,
                        int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    fa_view a;
    size_t rows = 0, kvrows = 0;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_CHECK(make_view(op, B, T, NH, NKV, hs, ldq, ldkv, &a));
    rows = (size_t)B * NH * T;
    kvrows = (size_t)B * NKV * T;
    if (rows == 0) return ZS_OK;
    ZS_REQUIRE(dq && dk && dv && delta && dout && q && k && v && out && lse, ZS_ERR_INVALID,
               "%s: NULL buffer", op);
    ZS_COST(fa_rows(a) * (2.0 * hs + 7.0), 0,
            4.0 * (fa_q_elems(a) + fa_rows(a)) + sizeof(OT) * fa_q_elems(a));
    if (sizeof(OT) == sizeof(float)) {
        ZS_LAUNCH(fa_delta_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, delta, dout,
                  (const float *)out, a);
        ZS_CUDA_CHECK_LAUNCH(fa_delta_kernel);
    } else {
        ZS_LAUNCH(fa_delta16_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, delta, dout,
                  (const zs_bf16 *)out, a);
        ZS_CUDA_CHECK_LAUNCH(fa_delta16_kernel);
    }
    /* per pair q.k and dO.v (4hs + 2), p and ds (5), dq (2hs); an fp32 dq read and written,
     * a bf16 one written */
    ZS_COST(fa_pairs(a) * (6.0 * hs + 7.0), 0,
            4.0 * (2.0 * fa_q_elems(a) + 2.0 * fa_kv_elems(a) + 2.0 * fa_rows(a) +
                   fa_seg_elems(a, seg)) +
                (sizeof(GT) == 4 ? 8.0 : 2.0) * fa_q_elems(a));
    if (sizeof(GT) == sizeof(float)) {
        ZS_LAUNCH(fa_bwd_q_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, (float *)dq, dout, q,
                  k, v, lse, delta, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_bwd_q_kernel);
    } else {
        ZS_LAUNCH(fa_bwd_q16_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, (zs_bf16 *)dq, dout,
                  q, k, v, lse, delta, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_bwd_q16_kernel);
    }
    /* per pair q.k and dO.v (4hs + 2), p and ds (5), dk and dv (4hs); k, v read; fp32 dk, dv
     * read and written, bf16 ones written */
    ZS_COST(fa_pairs(a) * (8.0 * hs + 7.0), 0,
            4.0 * (2.0 * fa_q_elems(a) + 2.0 * fa_kv_elems(a) + 2.0 * fa_rows(a) +
                   fa_seg_elems(a, seg)) +
                (sizeof(GT) == 4 ? 16.0 : 4.0) * fa_kv_elems(a));
    if (sizeof(GT) == sizeof(float)) {
        ZS_LAUNCH(fa_bwd_kv_kernel, zs_cu_blocks(kvrows), ZS_CU_THREADS, 0, cs, (float *)dk,
                  (float *)dv, dout, q, k, v, lse, delta, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_bwd_kv_kernel);
    } else {
        ZS_LAUNCH(fa_bwd_kv16_kernel, zs_cu_blocks(kvrows), ZS_CU_THREADS, 0, cs, (zs_bf16 *)dk,
                  (zs_bf16 *)dv, dout, q, k, v, lse, delta, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_bwd_kv16_kernel);
    }
fail:
    return st;
}

zs_status zs_cu_flash_attention_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                    const float *dout, const float *q, const float *k,
                                    const float *v, const float *out, const float *lse, int B,
                                    int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                    const int32_t *seg) {
    return fa_bwd(s, "flash_attention_bwd", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                  NKV, hs, ldq, ldkv, seg);
}

zs_status zs_cu_flash_attention_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const zs_bf16 *out, const float *lse, int B,
                                      int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                      const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check16("flash_attention_bwd16", B, T, NH, NKV, hs, ldq, ldkv));
    return fa_bwd(s, "flash_attention_bwd16", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                  NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

zs_status zs_cu_flash_attention_bwd16g(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv,
                                       float *delta, const float *dout, const float *q,
                                       const float *k, const float *v, const zs_bf16 *out,
                                       const float *lse, int B, int T, int NH, int NKV, int hs,
                                       int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check16("flash_attention_bwd16g", B, T, NH, NKV, hs, ldq, ldkv));
    return fa_bwd(s, "flash_attention_bwd16g", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                  NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

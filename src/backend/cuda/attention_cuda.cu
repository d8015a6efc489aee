/* CUDA causal self-attention, multi-head (q | k | v packed in one [B,T,3C] buffer) and
 * grouped-query (separate q, k, v buffers). Both run the same kernels, which take q, k and v
 * as strided row views: packed MHA is GQA with NKV = NH and row stride 3C. Each kernel calls
 * the shared row math of backend/kernels/attention.h as the CPU twins do
 * (cpu/attention_cpu.c, cpu/attention_gqa_cpu.c) and sums every output element's terms in
 * the CPU's order, so results match bit for bit, without atomics:
 *  - forward: a thread per query row (b, h, t): scores, causal softmax into att, out row;
 *  - backward 1: a thread per query row: datt row (softmax backward) and its dq row;
 *  - backward 2: a thread per key/value row (b, g, t2): dk and dv, summing over the group's
 *    query heads h in order and, inside each, over query rows t = t2..T-1 in order.
 * With document masks (seg, backend/ops.h "Documents") row t reads keys lo..t only, and a key
 * row stops at the first query row of a later document.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/attention.h"

/* Strided views of one attention call. Row r of q for batch b is q + (b*T + r)*qs, head h at
 * column h*hs; k and v likewise with stride kvs and kv head g = h / (NH/NKV); out rows have
 * stride NH*hs. */
typedef struct attn_view {
    int B, T, NH, NKV, hs;
    size_t qs, kvs;
    float scale;
} attn_view;

static __global__ void attn_fwd_kernel(float *out, float *att, const float *q, const float *k,
                                       const float *v, const int32_t *seg, attn_view a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NH * a.T) {
        int t = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        int g = h / (a.NH / a.NKV);
        const float *qt = q + ((size_t)b * a.T + t) * a.qs + (size_t)h * a.hs;
        const float *kb = k + (size_t)b * a.T * a.kvs + (size_t)g * a.hs;
        const float *vb = v + (size_t)b * a.T * a.kvs + (size_t)g * a.hs;
        float *p = att + (bh * a.T + t) * a.T;
        int lo = zs_seg_lo(seg, (size_t)b * a.T + t);
        for (int t2 = lo; t2 <= t; t2++)
            p[t2] = zs_dot(qt, kb + t2 * a.kvs, a.hs) * a.scale;
        zs_causal_softmax_span(p, lo, t, a.T);
        float *o = out + ((size_t)b * a.T + t) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
        for (int i = 0; i < a.hs; i++)
            o[i] = 0.0f;
        for (int t2 = lo; t2 <= t; t2++)
            zs_axpy_row(o, p[t2], vb + t2 * a.kvs, a.hs);
    }
}

/* Query rows: datt row = softmax backward of (dout . v), then dq_t += sum_t2 datt[t2] k_t2. */
static __global__ void attn_bwd_q_kernel(float *dq, float *datt, const float *dout, const float *k,
                                         const float *v, const float *att, const int32_t *seg,
                                         attn_view a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NH * a.T) {
        int t = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        int g = h / (a.NH / a.NKV);
        const float *kb = k + (size_t)b * a.T * a.kvs + (size_t)g * a.hs;
        const float *vb = v + (size_t)b * a.T * a.kvs + (size_t)g * a.hs;
        const float *p = att + (bh * a.T + t) * a.T;
        float *dp = datt + (bh * a.T + t) * a.T;
        const float *dO = dout + ((size_t)b * a.T + t) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
        int lo = zs_seg_lo(seg, (size_t)b * a.T + t);
        for (int t2 = lo; t2 <= t; t2++)
            dp[t2] = zs_dot(dO, vb + t2 * a.kvs, a.hs);
        zs_causal_softmax_span_bwd(dp, p, lo, t, a.scale);
        float *dqt = dq + ((size_t)b * a.T + t) * a.qs + (size_t)h * a.hs;
        for (int t2 = lo; t2 <= t; t2++)
            zs_axpy_row(dqt, dp[t2], kb + t2 * a.kvs, a.hs);
    }
}

/* Key/value rows: dv_t2 += att[h,t,t2] dout[h,t], dk_t2 += datt[h,t,t2] q[h,t], over the
 * group's heads in order, then t = t2..T-1 in order (the CPU's order). */
static __global__ void attn_bwd_kv_kernel(float *dk, float *dv, const float *datt,
                                          const float *dout, const float *q, const float *att,
                                          const int32_t *seg, attn_view a) {
    ZS_CU_FOR(idx, (size_t)a.B * a.NKV * a.T) {
        int t2 = (int)(idx % (size_t)a.T);
        size_t bg = idx / (size_t)a.T;
        int b = (int)(bg / (size_t)a.NKV), g = (int)(bg % (size_t)a.NKV);
        int rep = a.NH / a.NKV;
        size_t krow = ((size_t)b * a.T + t2) * a.kvs + (size_t)g * a.hs;
        float *dkt = dk + krow, *dvt = dv + krow;
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            size_t bh = (size_t)b * a.NH + h;
            for (int t = t2; t < a.T; t++) {
                if (zs_seg_lo(seg, (size_t)b * a.T + t) > t2) break; /* a later document */
                size_t pi = (bh * a.T + t) * a.T + t2;
                const float *dO =
                    dout + ((size_t)b * a.T + t) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
                const float *qt = q + ((size_t)b * a.T + t) * a.qs + (size_t)h * a.hs;
                zs_axpy_row(dvt, att[pi], dO, a.hs);
                zs_axpy_row(dkt, datt[pi], qt, a.hs);
            }
        }
    }
}

/* Costs count the (query, key) pairs the causal mask admits, T(T+1)/2 per (b, h). Document
 * masks admit fewer, but seg lives in device memory (counting them would take a synchronising
 * copy), so with seg these are upper bounds. Per pair: zs_dot (2hs + 7) and the scale, the
 * softmax's exp, sum and scale (4), the output row (2hs). Only ZS_COST calls these helpers, and
 * a real build compiles it away: hence [[maybe_unused]]. */
[[maybe_unused]] static inline double attn_pairs(const attn_view &a) {
    return (double)a.B * a.NH * a.T * (a.T + 1.0) / 2.0;
}

/* Elements of q (or out), of k (or v), and of seg. */
[[maybe_unused]] static inline double attn_q_elems(const attn_view &a) {
    return (double)a.B * a.T * a.NH * a.hs;
}
[[maybe_unused]] static inline double attn_kv_elems(const attn_view &a) {
    return (double)a.B * a.T * a.NKV * a.hs;
}

static zs_status launch_attn_fwd(cudaStream_t cs, float *out, float *att, const float *q,
                                 const float *k, const float *v, const int32_t *seg, attn_view a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T;
    if (rows == 0) return ZS_OK;
    ZS_REQUIRE(out && att && q && k && v, ZS_ERR_INVALID, "attention_fwd: NULL buffer");
    ZS_REQUIRE(a.NKV >= 1 && a.NH % a.NKV == 0 && a.hs >= 1, ZS_ERR_INVALID,
               "attention_fwd: bad heads NH=%d NKV=%d hs=%d", a.NH, a.NKV, a.hs);
    /* per row 8 more (the lanes' sum, 1 / sum); att written whole (zeros outside the span) */
    ZS_COST(attn_pairs(a) * (4.0 * a.hs + 12.0) + 8.0 * rows, 0,
            4.0 * (2.0 * attn_q_elems(a) + 2.0 * attn_kv_elems(a) + (double)rows * a.T +
                   (seg ? (double)a.B * a.T : 0.0)));
    ZS_LAUNCH(attn_fwd_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, out, att, q, k, v, seg, a);
    ZS_CUDA_CHECK_LAUNCH(attn_fwd_kernel);
fail:
    return st;
}

/* The kv pass reads datt rows the q pass writes: stream order keeps them in sequence. */
static zs_status launch_attn_bwd(cudaStream_t cs, float *dq, float *dk, float *dv, float *datt,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *att, const int32_t *seg, attn_view a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T, kvrows = (size_t)a.B * a.NKV * a.T;
    if (rows == 0) return ZS_OK;
    ZS_REQUIRE(dq && dk && dv && datt && dout && q && k && v && att, ZS_ERR_INVALID,
               "attention_bwd: NULL buffer");
    ZS_REQUIRE(a.NKV >= 1 && a.NH % a.NKV == 0 && a.hs >= 1, ZS_ERR_INVALID,
               "attention_bwd: bad heads NH=%d NKV=%d hs=%d", a.NH, a.NKV, a.hs);
    /* per pair dout.v (2hs + 7), the softmax backward (5), dq (2hs); per row the lanes' sum of
     * p.dp (7). att read and datt written over the admitted pairs, dq read and written. */
    ZS_COST(attn_pairs(a) * (4.0 * a.hs + 12.0) + 7.0 * rows, 0,
            4.0 * (3.0 * attn_q_elems(a) + 2.0 * attn_kv_elems(a) + 2.0 * attn_pairs(a) +
                   (seg ? (double)a.B * a.T : 0.0)));
    ZS_LAUNCH(attn_bwd_q_kernel, zs_cu_blocks(rows), ZS_CU_THREADS, 0, cs, dq, datt, dout, k, v,
              att, seg, a);
    ZS_CUDA_CHECK_LAUNCH(attn_bwd_q_kernel);
    /* per pair two rows (dv, dk: 4hs); att and datt read over the pairs, dk and dv read and
     * written */
    ZS_COST(attn_pairs(a) * 4.0 * a.hs, 0,
            4.0 * (2.0 * attn_pairs(a) + 2.0 * attn_q_elems(a) + 4.0 * attn_kv_elems(a) +
                   (seg ? (double)a.B * a.T : 0.0)));
    ZS_LAUNCH(attn_bwd_kv_kernel, zs_cu_blocks(kvrows), ZS_CU_THREADS, 0, cs, dk, dv, datt, dout, q,
              att, seg, a);
    ZS_CUDA_CHECK_LAUNCH(attn_bwd_kv_kernel);
fail:
    return st;
}

/* Packed q | k | v: GQA with NKV = NH, every row stride 3C. */
static attn_view mha_view(int B, int T, int C, int NH) {
    attn_view a;
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NH;
    a.hs = C / NH;
    a.qs = a.kvs = 3 * (size_t)C;
    a.scale = 1.0f / sqrtf((float)a.hs);
    return a;
}

static attn_view gqa_view(int B, int T, int NH, int NKV, int hs) {
    attn_view a;
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.hs = hs;
    a.qs = (size_t)NH * hs;
    a.kvs = (size_t)NKV * hs;
    a.scale = 1.0f / sqrtf((float)hs);
    return a;
}

static zs_status check_mha(const char *op, int B, int T, int C, int NH) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 1 && NH >= 1 && C % NH == 0, ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d C=%d NH=%d (C must be a multiple of NH)", op, B, T, C, NH);
fail:
    return st;
}

static zs_status check_gqa(const char *op, int B, int T, int NH, int NKV, int hs) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && NH >= 1 && NKV >= 1 && hs >= 1 && NH % NKV == 0, ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d NH=%d NKV=%d hs=%d (NKV must divide NH)", op, B, T, NH, NKV,
               hs);
fail:
    return st;
}

zs_status zs_cu_attention_fwd(zs_stream_t *s, float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_mha("attention_fwd", B, T, C, NH));
    ZS_CHECK(launch_attn_fwd(zs_cu_stream(s), out, att, qkv, qkv ? qkv + C : NULL,
                             qkv ? qkv + 2 * (size_t)C : NULL, seg, mha_view(B, T, C, NH)));
fail:
    return st;
}

zs_status zs_cu_attention_bwd(zs_stream_t *s, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH,
                              const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_mha("attention_bwd", B, T, C, NH));
    ZS_CHECK(launch_attn_bwd(zs_cu_stream(s), dqkv, dqkv ? dqkv + C : NULL,
                             dqkv ? dqkv + 2 * (size_t)C : NULL, datt, dout, qkv,
                             qkv ? qkv + C : NULL, qkv ? qkv + 2 * (size_t)C : NULL, att, seg,
                             mha_view(B, T, C, NH)));
fail:
    return st;
}

zs_status zs_cu_attention_gqa_fwd(zs_stream_t *s, float *out, float *att, const float *q,
                                  const float *k, const float *v, int B, int T, int NH, int NKV,
                                  int hs, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_gqa("attention_gqa_fwd", B, T, NH, NKV, hs));
    ZS_CHECK(launch_attn_fwd(zs_cu_stream(s), out, att, q, k, v, seg, gqa_view(B, T, NH, NKV, hs)));
fail:
    return st;
}

zs_status zs_cu_attention_gqa_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *datt,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const float *att, int B, int T, int NH, int NKV, int hs,
                                  const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_gqa("attention_gqa_bwd", B, T, NH, NKV, hs));
    ZS_CHECK(launch_attn_bwd(zs_cu_stream(s), dq, dk, dv, datt, dout, q, k, v, att, seg,
                             gqa_view(B, T, NH, NKV, hs)));
fail:
    return st;
}

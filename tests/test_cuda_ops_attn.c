/* The CUDA backend's ops across positions against the CPU backend (ctest label gpu; the
 * harness, the comparisons' rules and ZS_TEST_CUDA_FAKE: cuda_ops_util.h): the embeddings,
 * attention (MHA, GQA, memory-efficient) and RoPE, each without and then with document masks
 * (backend/ops.h "Documents": random documents and a padded row), bitwise against the CPU
 * (RoPE within its bound); and one decoding step over a KV cache. */
#include "backend/ops.h"
#include "cuda_ops_util.h"

/* Document starts (backend/ops.h "Documents") for B rows of T, or NULL without documents: a
 * new document at t > 0 with probability 1/8; row 1 padded (m real tokens, then documents of
 * one). The host copy is *h (NULL without). */
static const int32_t *docs_seg(int docs, int B, int T, const int32_t **h) {
    *h = NULL;
    if (!docs) return NULL;
    int32_t *seg = co_hbuf((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        for (int t = 0; t < T; t++) {
            int32_t *r = seg + (size_t)b * T;
            r[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < 0.125 ? t : r[t - 1];
        }
    }
    *h = seg;
    return co_upi(seg, (size_t)B * T);
}

/* ---- embedding ---------------------------------------------------------------------- */

static void check_embedding(int with_wpe, int grads, int docs) {
    int B = 3, T = 7, C = 70, V = 11; /* V small: tokens repeat */
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nbt = (size_t)B * T, no = nbt * C;
    int32_t *tok = co_hbuf(nbt * sizeof(int32_t));
    for (size_t i = 0; i < nbt; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    float *wte = co_randn((size_t)V * C, 1.0f),
          *wpe = with_wpe ? co_randn((size_t)T * C, 1.0f) : NULL;
    float *out = co_poisoned(no), *d_out = co_up(out, no);
    int32_t *d_tok = co_upi(tok, nbt);
    ZT_OK(co_cpu->embedding_fwd(NULL, out, tok, wte, wpe, B, T, C, seg));
    ZT_OK(co_gpu->embedding_fwd(NULL, d_out, d_tok, co_up(wte, (size_t)V * C),
                                wpe ? co_up(wpe, (size_t)T * C) : NULL, B, T, C, d_seg));
    co_expect_bits(with_wpe ? (docs ? "embedding_fwd (documents)" : "embedding_fwd")
                            : "embedding_fwd (no wpe)",
                   d_out, out, no);
    /* grads: 1 dwte only, 2 dwpe only, 3 both. */
    float *dout = co_randn(no, 1.0f);
    float *dwte0 = co_randn((size_t)V * C, 1.0f), *dwpe0 = co_randn((size_t)T * C, 1.0f);
    float *dwte = co_clone(dwte0, (size_t)V * C), *dwpe = co_clone(dwpe0, (size_t)T * C);
    float *d_dwte = co_up(dwte0, (size_t)V * C), *d_dwpe = co_up(dwpe0, (size_t)T * C);
    ZT_OK(co_cpu->embedding_bwd(NULL, grads & 1 ? dwte : NULL, grads & 2 ? dwpe : NULL, dout, tok,
                                B, T, C, seg));
    ZT_OK(co_gpu->embedding_bwd(NULL, grads & 1 ? d_dwte : NULL, grads & 2 ? d_dwpe : NULL,
                                co_up(dout, no), d_tok, B, T, C, d_seg));
    co_expect_bits("embedding_bwd dwte", d_dwte, dwte, (size_t)V * C);
    co_expect_bits(docs ? "embedding_bwd dwpe (documents)" : "embedding_bwd dwpe", d_dwpe, dwpe,
                   (size_t)T * C);
    co_release();
}

/* dwte over more rows than the GPU lists at a time (2048), more columns than a block owns
 * (256), ids on every part (id % 128): V = 1000, tokens drawn at random; and V = 1, one token
 * on every row, so one part holds the whole batch, repeated in every batch it walks. */
static void check_embedding_wte_rows(int V) {
    int B = 3, T = 1500, C = 300;
    size_t nbt = (size_t)B * T, no = nbt * C;
    int32_t *tok = co_hbuf(nbt * sizeof(int32_t));
    for (size_t i = 0; i < nbt; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    float *dout = co_randn(no, 1.0f), *dwte0 = co_randn((size_t)V * C, 1.0f);
    float *dwte = co_clone(dwte0, (size_t)V * C), *d_dwte = co_up(dwte0, (size_t)V * C);
    ZT_OK(co_cpu->embedding_bwd(NULL, dwte, NULL, dout, tok, B, T, C, NULL));
    ZT_OK(co_gpu->embedding_bwd(NULL, d_dwte, NULL, co_up(dout, no), co_upi(tok, nbt), B, T, C,
                                NULL));
    co_expect_bits(V == 1 ? "embedding_bwd dwte (one token on every row)"
                          : "embedding_bwd dwte (4500 rows, 300 columns)",
                   d_dwte, dwte, (size_t)V * C);
    co_release();
}

/* ---- attention, RoPE ---------------------------------------------------------------- */

static void check_attention(int docs) {
    int B = 2, T = 13, C = 48, NH = 4; /* hs = 12: lane tails */
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = co_randn(nqkv, 1.0f), *out = co_poisoned(no), *att = co_poisoned(na);
    float *d_qkv = co_up(qkv, nqkv), *d_out = co_up(out, no), *d_att = co_up(att, na);
    ZT_OK(co_cpu->attention_fwd(NULL, out, att, qkv, B, T, C, NH, seg));
    ZT_OK(co_gpu->attention_fwd(NULL, d_out, d_att, d_qkv, B, T, C, NH, d_seg));
    co_expect_bits(docs ? "attention_fwd out (documents)" : "attention_fwd out", d_out, out, no);
    co_expect_bits(docs ? "attention_fwd att (documents)" : "attention_fwd att", d_att, att, na);
    float *dout = co_randn(no, 1.0f), *dqkv0 = co_randn(nqkv, 1.0f), *dqkv = co_clone(dqkv0, nqkv);
    float *d_dqkv = co_up(dqkv0, nqkv);
    ZT_OK(co_cpu->attention_bwd(NULL, dqkv, co_poisoned(na), dout, qkv, att, B, T, C, NH, seg));
    ZT_OK(co_gpu->attention_bwd(NULL, d_dqkv, co_up(co_poisoned(na), na), co_up(dout, no), d_qkv,
                                co_up(att, na), B, T, C, NH, d_seg));
    co_expect_bits(docs ? "attention_bwd dqkv (accumulates, documents)"
                        : "attention_bwd dqkv (accumulates)",
                   d_dqkv, dqkv, nqkv);
    co_release();
}

static void check_attention_gqa(int NH, int NKV, int docs) {
    int B = 2, T = 11, hs = 10;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nq = (size_t)B * T * NH * hs, nk = (size_t)B * T * NKV * hs, na = (size_t)B * NH * T * T;
    float *q = co_randn(nq, 1.0f), *k = co_randn(nk, 1.0f), *v = co_randn(nk, 1.0f);
    float *out = co_poisoned(nq), *att = co_poisoned(na);
    float *d_q = co_up(q, nq), *d_k = co_up(k, nk), *d_v = co_up(v, nk), *d_out = co_up(out, nq),
          *d_att = co_up(att, na);
    char what[96];
    const char *dw = docs ? " (documents)" : "";
    ZT_OK(co_cpu->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs, seg));
    ZT_OK(co_gpu->attention_gqa_fwd(NULL, d_out, d_att, d_q, d_k, d_v, B, T, NH, NKV, hs, d_seg));
    snprintf(what, sizeof what, "attention_gqa_fwd NH=%d NKV=%d out%s", NH, NKV, dw);
    co_expect_bits(what, d_out, out, nq);
    snprintf(what, sizeof what, "attention_gqa_fwd NH=%d NKV=%d att%s", NH, NKV, dw);
    co_expect_bits(what, d_att, att, na);
    float *dout = co_randn(nq, 1.0f), *dq0 = co_randn(nq, 1.0f), *dk0 = co_randn(nk, 1.0f),
          *dv0 = co_randn(nk, 1.0f);
    float *dq = co_clone(dq0, nq), *dk = co_clone(dk0, nk), *dv = co_clone(dv0, nk);
    float *d_dq = co_up(dq0, nq), *d_dk = co_up(dk0, nk), *d_dv = co_up(dv0, nk);
    ZT_OK(co_cpu->attention_gqa_bwd(NULL, dq, dk, dv, co_poisoned(na), dout, q, k, v, att, B, T, NH,
                                    NKV, hs, seg));
    ZT_OK(co_gpu->attention_gqa_bwd(NULL, d_dq, d_dk, d_dv, co_up(co_poisoned(na), na),
                                    co_up(dout, nq), d_q, d_k, d_v, co_up(att, na), B, T, NH, NKV,
                                    hs, d_seg));
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dq%s", NH, NKV, dw);
    co_expect_bits(what, d_dq, dq, nq);
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dk%s", NH, NKV, dw);
    co_expect_bits(what, d_dk, dk, nk);
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dv%s", NH, NKV, dw);
    co_expect_bits(what, d_dv, dv, nk);
    co_release();
}

/* Memory-efficient attention: same bits as the CPU (backend/kernels/flash.h runs the same
 * operations on both), for T past one key block (ZS_FA_BK = 64) with a partial last block,
 * GQA and GPT-2's packed rows (q, k, v and their gradients as views into one buffer). */
static void check_flash(int NH, int NKV, int packed, int docs) {
    int B = 2, T = docs ? 150 : 70, hs = 12; /* documents: across key blocks, from a late one */
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    const char *dw = docs ? " documents" : "";
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    float *qb = co_randn(nq, 1.0f), *kb = packed ? qb + QD : co_randn(nk, 1.0f),
          *vb = packed ? qb + QD + KD : co_randn(nk, 1.0f);
    float *d_qb = co_up(qb, nq), *d_kb = packed ? d_qb + QD : co_up(kb, nk),
          *d_vb = packed ? d_qb + QD + KD : co_up(vb, nk);
    float *out = co_poisoned(no), *lse = co_poisoned(nl), *d_out = co_up(out, no),
          *d_lse = co_up(lse, nl);
    char what[96];
    ZT_OK(co_cpu->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                      (int)ldkv, seg));
    ZT_OK(co_gpu->flash_attention_fwd(NULL, d_out, d_lse, d_qb, d_kb, d_vb, B, T, NH, NKV, hs,
                                      (int)ldq, (int)ldkv, d_seg));
    snprintf(what, sizeof what, "flash_attention_fwd NH=%d NKV=%d%s%s out", NH, NKV,
             packed ? " packed" : "", dw);
    co_expect_bits(what, d_out, out, no);
    snprintf(what, sizeof what, "flash_attention_fwd NH=%d NKV=%d%s%s lse", NH, NKV,
             packed ? " packed" : "", dw);
    co_expect_bits(what, d_lse, lse, nl);
    /* Gradients overwrite NaN prefills: the CPU's must all be finite, the GPU's its bits. */
    size_t ng = packed ? nq : nq + 2 * nk;
    float *g0 = co_poisoned(ng), *g = co_clone(g0, ng), *d_g = co_up(g0, ng),
          *dout = co_randn(no, 1.0f);
    size_t ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    ZT_OK(co_cpu->flash_attention_bwd(NULL, g, g + ok, g + ov, co_poisoned(nl), dout, qb, kb, vb,
                                      out, lse, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, seg));
    ZT_OK(co_gpu->flash_attention_bwd(NULL, d_g, d_g + ok, d_g + ov, co_up(co_poisoned(nl), nl),
                                      co_up(dout, no), d_qb, d_kb, d_vb, d_out, d_lse, B, T, NH,
                                      NKV, hs, (int)ldq, (int)ldkv, d_seg));
    snprintf(what, sizeof what, "flash_attention_bwd NH=%d NKV=%d%s%s dq | dk | dv (overwrite)", NH,
             NKV, packed ? " packed" : "", dw);
    size_t left = 0;
    for (size_t i = 0; i < ng; i++)
        left += !isfinite(g[i]);
    ZT_CHECK(left == 0, "%s: %zu of %zu CPU gradients not overwritten", what, left, ng);
    co_expect_bits(what, d_g, g, ng);
    co_release();
}

/* RoPE's angles come from powf, cosf and sinf, which differ between libm and CUDA by a few
 * ulp: inv_freq by up to ~4 ulp, so the angle pos*inv_freq by ~5e-7 relative (at most
 * T * 5e-7 absolute), and cos/sin by ~2 ulp more. An output x1 c - x2 s then moves by at most
 * (|x1| + |x2|) times that; the bound below doubles it. A wrong pairing or position is O(1). */
static void check_rope(int docs) {
    int B = 2, T = 9, NH = 3, hs = 16, half = hs / 2;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    float theta = 10000.0f;
    size_t n = (size_t)B * T * NH * hs;
    float *x = co_randn(n, 1.0f), *out = co_poisoned(n), *d_x = co_up(x, n), *d_out = co_up(out, n);
    double *bound = co_hbuf(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        size_t head = i / hs, j = i % hs, pj = j < (size_t)half ? j + half : j - half;
        double pair = fabs(x[i]) + fabs(x[head * hs + pj]);
        bound[i] = 2.0 * pair * (T * 5e-7 + 4 * CO_U32) + 4 * CO_U32;
    }
    ZT_OK(co_cpu->rope_fwd(NULL, out, x, B, T, NH, hs, theta, seg));
    ZT_OK(co_gpu->rope_fwd(NULL, d_out, d_x, B, T, NH, hs, theta, d_seg));
    co_expect_bounded(docs ? "rope_fwd (documents)" : "rope_fwd", d_out, out, bound, n);
    float *gpu_out = co_down(d_out, n);
    float *d_y = co_up(x, n);
    ZT_OK(co_gpu->rope_fwd(NULL, d_y, d_y, B, T, NH, hs, theta, d_seg));
    co_expect_bits("rope_fwd in place (against out of place)", d_y, gpu_out, n);
    float *din = co_poisoned(n), *d_din = co_up(din, n);
    ZT_OK(co_cpu->rope_bwd(NULL, din, x, B, T, NH, hs, theta, seg));
    ZT_OK(co_gpu->rope_bwd(NULL, d_din, d_x, B, T, NH, hs, theta, d_seg));
    co_expect_bounded(docs ? "rope_bwd (documents)" : "rope_bwd", d_din, din, bound, n);
    /* bwd(fwd(x)) = x up to rounding: the rotation is orthogonal. */
    ZT_OK(co_gpu->rope_bwd(NULL, d_y, d_y, B, T, NH, hs, theta, d_seg));
    co_expect_close("rope_bwd(rope_fwd(x)) in place", d_y, x, n, 1e-5);
    co_release();
}

/* ---- decoding ----------------------------------------------------------------------- */

/* One decoding position over a KV cache: the cache rows and the output as the CPU computes
 * them. Without RoPE every operation is shared arithmetic: bitwise. With RoPE (LLaMA) q and k
 * first turn through cosf/sinf/powf, whose CUDA versions differ by an ulp or two: the stored k
 * rows and the output are then compared within the RoPE bound scaled by the attention's
 * weights (at most the largest |v|). */
static void check_decode_attention(int NH, int NKV, float theta) {
    int hs = 8, cap = 12, pos = 7, QD = NH * hs, KD = NKV * hs;
    size_t nc = (size_t)cap * KD;
    float *q = co_randn(QD, 1.0f), *k = co_randn(KD, 1.0f), *v = co_randn(KD, 1.0f);
    float *kc = co_randn(nc, 1.0f), *vc = co_randn(nc, 1.0f), *out = co_poisoned(QD);
    float *sc = co_poisoned((size_t)NH * cap);
    float *d_q = co_up(q, QD), *d_k = co_up(k, KD), *d_v = co_up(v, KD), *d_kc = co_up(kc, nc);
    float *d_vc = co_up(vc, nc), *d_out = co_up(out, QD), *d_sc = co_up(sc, (size_t)NH * cap);
    ZT_OK(co_cpu->decode_attention(NULL, out, q, k, v, kc, vc, sc, NH, NKV, hs, pos, theta));
    ZT_OK(co_gpu->decode_attention(NULL, d_out, d_q, d_k, d_v, d_kc, d_vc, d_sc, NH, NKV, hs, pos,
                                   theta));
    char what[80];
    snprintf(what, sizeof what, "decode_attention NH=%d NKV=%d theta=%g", NH, NKV, (double)theta);
    if (theta <= 0.0f) {
        co_expect_bits(what, d_out, out, QD);
        co_expect_bits("decode_attention: k cache", d_kc, kc, nc);
        co_expect_bits("decode_attention: v cache", d_vc, vc, nc);
    } else {
        /* RoPE's angle error (as check_rope) on |q|,|k| <= 4.5, through a softmax of scores
         * summed over hs terms: generous 1e-4 relative bound on values of order 1. */
        co_expect_close(what, d_out, out, QD, 1e-4);
        co_expect_close("decode_attention: k cache (rotated)", d_kc, kc, nc, 1e-5);
        co_expect_bits("decode_attention: v cache", d_vc, vc, nc);
    }
    co_release();
}

int main(void) {
    co_init("cuda_ops_attn");
    for (int grads = 1; grads <= 3; grads++) {
        check_embedding(1, grads, 0);
        check_embedding(0, grads, 0);
        check_embedding(1, grads, 1);
    }
    check_embedding_wte_rows(1000);
    check_embedding_wte_rows(1);
    for (int docs = 0; docs < 2; docs++) { /* without, then with document masks */
        check_attention(docs);
        check_attention_gqa(6, 2, docs);
        check_attention_gqa(4, 4, docs);
        check_attention_gqa(3, 1, docs);
        check_flash(4, 4, 1, docs);
        check_flash(6, 2, 0, docs);
        check_flash(4, 1, 0, docs);
        check_rope(docs);
    }
    check_decode_attention(4, 4, 0.0f);
    check_decode_attention(6, 2, 10000.0f);
    return zt_finish();
}

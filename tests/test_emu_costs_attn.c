/* The attention kernels' declared costs (ZS_COST, docs/cuda.md "The profiler") against what the
 * emulated GPU's profiler measures (ctest label gpu, emulated GPU only), the other ops' being
 * test_emu_costs.c's: attention (packed MHA and GQA) and flash attention (packed and separate
 * rows, fp32 and bf16 out, fp32 and bf16 gradients), with and without documents; the bf16
 * table's flash attention on tensor cores (fp32 and bf16 out, fp32 and bf16 gradients); decoding
 * (kv_store, kv_attend) and sampling. Each runs alone between zs_emu_profile_start and _stop on
 * small random cases, every launch recorded passes checks 1 and 2 of test_emu_costs.c (its cost
 * declared, tensor-core FLOPs as executed, bytes: check_rec in emucost.h), and
 *  3. the declared FLOPs of attention, flash attention and decode attention equal a count of
 *     the (query, key) pairs (and key blocks) the masks admit, enumerated here independently of
 *     the launchers' closed forms (with documents, the causal count they declare); sampling's
 *     are affine in V.
 * Every __global__ kernel of attention_cuda.cu, flash_cuda.cu, flash_tc_cuda.cu,
 * flash_tc_bwd_cuda.cu and decode_cuda.cu (read from the sources) must have been checked.
 * Exits 77 without a GPU. */
#include "backend/kernels/flash.h"
#include "backend/ops.h"
#include "emucost.h"

#include <stdint.h>
#include <string.h>

/* ---- attention -------------------------------------------------------------------------- */

/* The rows (b, h, t) of one attention call and the keys lo..t each admits: the pairs, and the
 * sectors of att (or datt, laid out alike: [(b NH + h) T + t] T + t2) they occupy. causal
 * ignores the document masks. */
static double attn_pairs_enum(int B, int NH, int T, const int32_t *seg, sectors *s) {
    double pairs = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int lo = seg_lo(seg, (size_t)b * T + t);
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                pairs += t - lo + 1;
                if (s) sec_add(s, (row + lo) * 4, (row + t + 1) * 4);
            }
    return pairs;
}

/* Packed MHA (attention_fwd/bwd on q | k | v, NKV = NH) or GQA. B = 2, T = 70, hs = 12. FLOPs
 * (the kernels' per-row math, kernels/attention.h and common.h): forward per pair 4hs + 12
 * (q.k with its lanes' sum and scale, exp, sum, 1/sum scale, the out row), per row 8; backward
 * q per pair 4hs + 12 (dout.v, softmax backward, dq row), per row 7; backward kv per pair 4hs.
 * With document masks the launchers cannot see seg (device memory) and declare the causal
 * count, an upper bound: checked equal to the causal enumeration, and the admitted count is
 * printed beside it. */
static void check_attention(int NH, int NKV, int packed, int docs) {
    int B = 2, T = 70, hs = 12, C = NH * hs;
    size_t BT = (size_t)B * T, nq = BT * NH * hs, nk = BT * NKV * hs;
    size_t na = (size_t)B * NH * T * T;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    float *qkv = packed ? drand(BT * 3 * C) : NULL, *dqkv = packed ? drand(BT * 3 * C) : NULL;
    float *q = packed ? NULL : drand(nq), *k = packed ? NULL : drand(nk);
    float *v = packed ? NULL : drand(nk), *dq = packed ? NULL : drand(nq);
    float *dk = packed ? NULL : drand(nk), *dv = packed ? NULL : drand(nk);
    float *out = drand(nq), *att = drand(na), *datt = drand(na), *dout = drand(nq);
    sectors adm = sec_new(na * 4);
    double pairs = attn_pairs_enum(B, NH, T, seg, &adm),
           causal = attn_pairs_enum(B, NH, T, NULL, NULL);
    double rows = (double)B * NH * T, S = sec_bytes(&adm);
    double f_fwd = causal * (4.0 * hs + 12) + 8 * rows, f_q = causal * (4.0 * hs + 12) + 7 * rows;
    double f_kv = causal * 4.0 * hs;
    int nbuf = packed ? 1 : 3; /* q, k, v */
    char what[160];
    snprintf(what, sizeof what, "%s NH=%d NKV=%d%s: %.0f pairs admitted of %.0f causal",
             packed ? "attention" : "attention_gqa", NH, NKV, docs ? " documents" : "", pairs,
             causal);
    printf(" %s\n", what);
    prof_start();
    if (packed)
        ZT_OK(gpu->attention_fwd(NULL, out, att, qkv, B, T, C, NH, d_seg));
    else
        ZT_OK(gpu->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs, d_seg));
    prof_stop();
    const zs_emu_record *f = rec("attn_fwd_kernel");
    /* att is scratch too: the scores are written to it, then read back by the softmax and the
     * output rows (the admitted span of each row: S); the out rows are zeroed, then added to */
    check_rec(f, 2 + nbuf + docs, S + 4.0 * nq, "att (admitted pairs) and out read back");
    ZT_CHECK(f->flops == f_fwd, "attn_fwd_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             f->flops, f_fwd, what);
    prof_start();
    if (packed)
        ZT_OK(gpu->attention_bwd(NULL, dqkv, datt, dout, qkv, att, B, T, C, NH, d_seg));
    else
        ZT_OK(gpu->attention_gqa_bwd(NULL, dq, dk, dv, datt, dout, q, k, v, att, B, T, NH, NKV, hs,
                                     d_seg));
    prof_stop();
    const zs_emu_record *bq = rec("attn_bwd_q_kernel"), *bkv = rec("attn_bwd_kv_kernel");
    /* the declaration counts att read and datt written over the causal pairs; the kernel
     * touches the admitted ones, whose sectors are S, and reads datt back (softmax backward,
     * dq rows) */
    check_rec(bq, (packed ? 5 : 6) + docs, 3 * S - 8.0 * causal,
              "att read, datt written and read back over the admitted pairs' sectors");
    check_rec(bkv, (packed ? 5 : 6) + docs, 2 * S - 8.0 * causal,
              "att and datt read over the admitted pairs' sectors");
    ZT_CHECK(bq->flops == f_q, "attn_bwd_q_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bq->flops, f_q, what);
    ZT_CHECK(bkv->flops == f_kv, "attn_bwd_kv_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bkv->flops, f_kv, what);
    if (docs)
        printf("  with documents the kernels run %.0f, %.0f and %.0f FLOPs of those declared\n",
               pairs * (4.0 * hs + 12) + 8 * rows, pairs * (4.0 * hs + 12) + 7 * rows,
               pairs * 4.0 * hs);
    zt_release();
}

/* ---- flash attention ---------------------------------------------------------------------- */

/* Rows (b, h, i) with their admitted keys lo..i and the key blocks they visit (from the one
 * holding lo, kernels/flash.h). out[0] pairs, out[1] blocks, out[2] rows. */
static void fa_enum(int B, int NH, int T, const int32_t *seg, double out[3]) {
    out[0] = out[1] = out[2] = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int lo = seg_lo(seg, (size_t)b * T + i);
                out[0] += i - lo + 1;
                out[1] += i / ZS_FA_BK - lo / ZS_FA_BK + 1;
                out[2] += 1;
            }
}

/* FLOPs (kernels/flash.h): forward per pair 4hs + 4, per block visited hs + 11, per row
 * hs + 3; delta per row 2hs + 7; backward q per pair 6hs + 7; backward kv per pair 8hs + 7.
 * Documents as check_attention: the causal count is declared. T = 70 crosses a key block,
 * T = 150 with documents starts rows in a late one. */
static void check_flash(int NH, int NKV, int packed, int docs) {
    int B = 2, T = docs ? 150 : 70, hs = 12;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    float *qb = drand(nq), *kb = packed ? qb + QD : drand(nk),
          *vb = packed ? qb + QD + KD : drand(nk);
    float *out = drand(no), *lse = drand(nl), *dout = drand(no), *delta = drand(nl);
    size_t ng = packed ? nq : nq + 2 * nk, ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    float *g = drand(ng);
    double adm[3], cau[3];
    fa_enum(B, NH, T, seg, adm);
    fa_enum(B, NH, T, NULL, cau);
    double f_fwd = cau[0] * (4.0 * hs + 4) + cau[1] * (hs + 11.0) + cau[2] * (hs + 3.0);
    double f_delta = cau[2] * (2.0 * hs + 7), f_q = cau[0] * (6.0 * hs + 7);
    double f_kv = cau[0] * (8.0 * hs + 7);
    int nbuf = packed ? 1 : 3;
    char what[160];
    snprintf(what, sizeof what,
             "flash NH=%d NKV=%d%s%s T=%d: %.0f pairs, %.0f blocks admitted of %.0f, %.0f causal",
             NH, NKV, packed ? " packed" : "", docs ? " documents" : "", T, adm[0], adm[1], cau[0],
             cau[1]);
    printf(" %s\n", what);
    prof_start();
    ZT_OK(gpu->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                   (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *f = rec("fa_fwd_kernel");
    /* the output rows are the online softmax's accumulator: zeroed, rescaled and added to in
     * place, so out is read back whole */
    sectors so = sec_new(no * 4);
    sec_add(&so, 0, no * 4);
    check_rec(f, 2 + nbuf + docs, sec_bytes(&so), "out read back (the accumulator)");
    ZT_CHECK(f->flops == f_fwd, "fa_fwd_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             f->flops, f_fwd, what);
    /* the bf16 out (flash_attention_fwd16): the accumulator is the thread's own, so each
     * output is written once and nothing is read back */
    zs_bf16 *out16 = (zs_bf16 *)drand((no + 1) / 2);
    prof_start();
    ZT_OK(gpu->flash_attention_fwd16(NULL, out16, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                     (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *f16 = rec("fa_fwd16_kernel");
    check_rec(f16, 2 + nbuf + docs, 0, NULL);
    ZT_CHECK(f16->flops == f_fwd, "fa_fwd16_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             f16->flops, f_fwd, what);
    prof_start();
    ZT_OK(gpu->flash_attention_bwd(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out, lse, B, T,
                                   NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *d = rec("fa_delta_kernel"), *bq = rec("fa_bwd_q_kernel");
    const zs_emu_record *bkv = rec("fa_bwd_kv_kernel");
    check_rec(d, 3, 0, NULL);
    check_rec(bq, 4 + nbuf + docs, 0, NULL);
    check_rec(bkv, 4 + nbuf + docs, 0, NULL);
    ZT_CHECK(d->flops == f_delta, "fa_delta_kernel: %.0f FLOPs declared, %.0f enumerated", d->flops,
             f_delta);
    prof_start();
    ZT_OK(gpu->flash_attention_bwd16(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out16, lse,
                                     B, T, NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *d16 = rec("fa_delta16_kernel");
    check_rec(d16, 3, 0, NULL);
    check_rec(rec("fa_bwd_q_kernel"), 4 + nbuf + docs, 0, NULL);
    check_rec(rec("fa_bwd_kv_kernel"), 4 + nbuf + docs, 0, NULL);
    ZT_CHECK(d16->flops == f_delta, "fa_delta16_kernel: %.0f FLOPs declared, %.0f enumerated",
             d16->flops, f_delta);
    ZT_CHECK(bq->flops == f_q, "fa_bwd_q_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bq->flops, f_q, what);
    ZT_CHECK(bkv->flops == f_kv, "fa_bwd_kv_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bkv->flops, f_kv, what);
    /* bf16 gradients (the bf16 table's bwd16g; hs 12 takes these kernels, not the tensor cores'):
     * summed in the threads' own arrays, so each is written once and nothing is read back */
    zs_bf16 *g16 = (zs_bf16 *)drand((ng + 1) / 2);
    prof_start();
    ZT_OK(gpu->with_math(ZS_MATH_BF16)
              ->flash_attention_bwd16g(NULL, g16, g16 + ok, g16 + ov, delta, dout, qb, kb, vb,
                                       out16, lse, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *bq16 = rec("fa_bwd_q16_kernel"), *bkv16 = rec("fa_bwd_kv16_kernel");
    check_rec(rec("fa_delta16_kernel"), 3, 0, NULL);
    check_rec(bq16, 4 + nbuf + docs, 0, NULL);
    check_rec(bkv16, 4 + nbuf + docs, 0, NULL);
    ZT_CHECK(bq16->flops == f_q && bkv16->flops == f_kv,
             "fa_bwd_q16_kernel, fa_bwd_kv16_kernel: %.0f, %.0f FLOPs declared, %.0f, %.0f "
             "enumerated (%s)",
             bq16->flops, bkv16->flops, f_q, f_kv, what);
    if (docs)
        printf("  with documents the kernels run %.0f, %.0f and %.0f FLOPs of fwd, bwd q, bwd kv\n",
               adm[0] * (4.0 * hs + 4) + adm[1] * (hs + 11.0) + adm[2] * (hs + 3.0),
               adm[0] * (6.0 * hs + 7), adm[0] * (8.0 * hs + 7));
    zt_release();
}

/* The bf16 table's flash attention on tensor cores (flash_tc_cuda.cu), without documents (with
 * them the launchers declare the causal bound): the tensor FLOPs declared must equal those
 * the mma instructions executed, and the bytes each input once (K and V are staged again for
 * every query block, but their unique bytes are what DRAM must move). T = 150 is three 64-row
 * tiles, the last partial, where dk and dv share a kernel; at T = ZS_FA_TC_KV_SPLIT_T + 6 (1030:
 * five blocks of 256 keys, the last partial) each has its own (flash_tc_bwd_cuda.cu). */
/* The tensor-core backward's kernels after delta, as one call launched them. */
static void check_tc_bwd(int nbuf, int T) {
    check_rec(rec("fa_tc_bwd_q_kernel"), 4 + nbuf, 0, NULL);
    if (T < ZS_FA_TC_KV_SPLIT_T) {
        check_rec(rec("fa_tc_bwd_kv_kernel"), 4 + nbuf, 0, NULL);
    } else {
        check_rec(rec("fa_tc_bwd_dv_kernel"), 3 + nbuf, 0, NULL);
        check_rec(rec("fa_tc_bwd_dk_kernel"), 4 + nbuf, 0, NULL);
    }
}

static void check_flash_tc(int NH, int NKV, int packed, int T) {
    int B = 2, hs = 64;
    const zs_ops *tc = gpu->with_math(ZS_MATH_BF16);
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    float *qb = drand(nq), *kb = packed ? qb + QD : drand(nk),
          *vb = packed ? qb + QD + KD : drand(nk);
    float *out = drand(no), *lse = drand(nl), *dout = drand(no), *delta = drand(nl);
    size_t ng = packed ? nq : nq + 2 * nk, ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    float *g = drand(ng);
    int nbuf = packed ? 1 : 3;
    printf(" flash on tensor cores NH=%d NKV=%d%s T=%d hs=%d\n", NH, NKV, packed ? " packed" : "",
           T, hs);
    prof_start();
    ZT_OK(tc->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                  (int)ldkv, NULL));
    prof_stop();
    const zs_emu_record *f = rec("fa_tc_fwd_kernel");
    check_rec(f, 2 + nbuf, 0, NULL);
    ZT_CHECK(f->mma_counted > 0 && f->flops > 0, "fa_tc_fwd_kernel: no tensor-core work");
    prof_start();
    ZT_OK(tc->flash_attention_bwd(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out, lse, B, T,
                                  NH, NKV, hs, (int)ldq, (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_delta_kernel"), 3, 0, NULL);
    check_tc_bwd(nbuf, T);
    /* the bf16 out: written once (the forward), read once (delta) */
    zs_bf16 *out16 = (zs_bf16 *)drand((no + 1) / 2);
    prof_start();
    ZT_OK(tc->flash_attention_fwd16(NULL, out16, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                    (int)ldkv, NULL));
    prof_stop();
    const zs_emu_record *f16 = rec("fa_tc_fwd16_kernel");
    check_rec(f16, 2 + nbuf, 0, NULL);
    ZT_CHECK(f16->mma_counted > 0 && f16->flops == f->flops,
             "fa_tc_fwd16_kernel: %.0f FLOPs declared, the fp32-out kernel's %.0f", f16->flops,
             f->flops);
    prof_start();
    ZT_OK(tc->flash_attention_bwd16(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out16, lse, B,
                                    T, NH, NKV, hs, (int)ldq, (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_delta16_kernel"), 3, 0, NULL);
    check_tc_bwd(nbuf, T);
    /* and bf16 gradients (bwd16g), each written once, two bytes */
    zs_bf16 *g16 = (zs_bf16 *)drand((ng + 1) / 2);
    prof_start();
    ZT_OK(tc->flash_attention_bwd16g(NULL, g16, g16 + ok, g16 + ov, delta, dout, qb, kb, vb, out16,
                                     lse, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_delta16_kernel"), 3, 0, NULL);
    check_tc_bwd(nbuf, T);
    /* and bf16 q, k, v (fwd16q, bwd16q) and bwd16q's bf16 dO: two bytes an element read */
    zs_bf16 *q16 = (zs_bf16 *)drand((nq + 2 * nk + 1) / 2), *k16 = packed ? q16 + QD : q16 + nq,
            *v16 = packed ? q16 + QD + KD : q16 + nq + nk, *dout16 = (zs_bf16 *)drand((no + 1) / 2);
    ZT_OK(tc->cast(NULL, q16, ZS_DTYPE_BF16, qb, ZS_DTYPE_F32, nq));
    ZT_OK(tc->cast(NULL, dout16, ZS_DTYPE_BF16, dout, ZS_DTYPE_F32, no));
    if (!packed) {
        ZT_OK(tc->cast(NULL, k16, ZS_DTYPE_BF16, kb, ZS_DTYPE_F32, nk));
        ZT_OK(tc->cast(NULL, v16, ZS_DTYPE_BF16, vb, ZS_DTYPE_F32, nk));
    }
    prof_start();
    ZT_OK(tc->flash_attention_fwd16q(NULL, out16, lse, q16, k16, v16, B, T, NH, NKV, hs, (int)ldq,
                                     (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_fwd16_kernel"), 2 + nbuf, 0, NULL);
    prof_start();
    ZT_OK(tc->flash_attention_bwd16q(NULL, g16, g16 + ok, g16 + ov, delta, dout16, q16, k16, v16,
                                     out16, lse, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_delta16_kernel"), 3, 0, NULL);
    check_tc_bwd(nbuf, T);
    zt_release();
}

/* ---- decoding ---------------------------------------------------------------------------- */

/* One position over a cache of cap rows. FLOPs: RoPE 12 per rotated pair (the angle's powf,
 * cosf, sinf and 3 more, the rotation 6) of q's NH and k's NKV heads; attention 4hs + 5 per
 * (head, cached row) pair (score and scale, exp and sum, 1/sum, the weighted row). fl[0]
 * kv_store, fl[1] kv_attend. */
static void run_decode(int NH, int NKV, float theta, int pos, double fl[2]) {
    int hs = 8, cap = 12, QD = NH * hs, KD = NKV * hs;
    size_t nc = (size_t)cap * KD;
    float *q = drand(QD), *k = drand(KD), *v = drand(KD), *kc = drand(nc), *vc = drand(nc);
    float *out = drand(QD), *sc = drand((size_t)NH * cap);
    double rotated = theta > 0 ? (double)(NH + NKV) * (hs / 2) : 0, pairs = 0;
    for (int h = 0; h < NH; h++)
        for (int j = 0; j <= pos; j++)
            pairs++;
    prof_start();
    ZT_OK(gpu->decode_attention(NULL, out, q, k, v, kc, vc, sc, NH, NKV, hs, pos, theta));
    prof_stop();
    const zs_emu_record *s = rec("kv_store_kernel"), *a = rec("kv_attend_kernel");
    check_rec(s, 5, 0, NULL);
    /* scores are written, then read back by the softmax and the weighted sum; the out row is
     * the weighted sum's accumulator, read back as it is added to */
    check_rec(a, 5, 4.0 * NH * (pos + 1) + 4.0 * QD, "scores and out read back");
    ZT_CHECK(s->flops == 12.0 * rotated, "kv_store_kernel: %.0f FLOPs declared, %.0f enumerated",
             s->flops, 12.0 * rotated);
    ZT_CHECK(a->flops == pairs * (4.0 * hs + 5),
             "kv_attend_kernel: %.0f FLOPs declared, %.0f enumerated", a->flops,
             pairs * (4.0 * hs + 5));
    fl[0] = s->flops;
    fl[1] = a->flops;
    zt_release();
}

static void check_decode(void) {
    double a[2], b[2];
    run_decode(4, 4, 0.0f, 7, a);
    run_decode(6, 2, 10000.0f, 7, b);
    run_decode(6, 2, 10000.0f, 3, a);
    check_scaling("kv_attend_kernel", a[1], 4, b[1], 8);
}

/* Sampling: greedy (comparisons only) and with a temperature, whose FLOPs are affine in V (the
 * weights and at most as many for the search, plus the block sum): equal steps of V give
 * equal steps of FLOPs. */
static double run_sample(int V, float temp) {
    float *logits = drand((size_t)V);
    int32_t *tok = zt_dbuf(sizeof(int32_t));
    prof_start();
    ZT_OK(gpu->sample(NULL, tok, logits, V, temp, 12345, 7));
    prof_stop();
    const zs_emu_record *r = rec("sample_kernel");
    check_rec(r, 2, 0, NULL);
    zt_release();
    return r->flops;
}

static void check_sample(void) {
    double g = run_sample(3001, 0.0f);
    ZT_CHECK(g == 0, "sample_kernel greedy: %g FLOPs declared", g);
    double f1 = run_sample(1001, 0.7f), f2 = run_sample(2001, 0.7f), f3 = run_sample(3001, 0.7f);
    ZT_CHECK(f2 - f1 == f3 - f2 && f2 > f1,
             "sample_kernel: %.0f, %.0f, %.0f FLOPs at V = 1001, 2001, 3001: not affine in V", f1,
             f2, f3);
}

int main(void) {
    ec_start("emu_costs_attn", EC_ATTENTION);
    for (int docs = 0; docs < 2; docs++) {
        check_attention(4, 4, 1, docs);
        check_attention(6, 2, 0, docs);
        check_flash(4, 4, 1, docs);
        check_flash(6, 2, 0, docs);
    }
    check_flash_tc(4, 4, 1, 150);
    check_flash_tc(6, 2, 0, 150);
    check_flash_tc(2, 1, 0, ZS_FA_TC_KV_SPLIT_T + 6);
    check_decode();
    check_sample();
    return ec_finish();
}

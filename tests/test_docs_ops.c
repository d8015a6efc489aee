/* Document masks in the CPU ops (backend/ops.h "Documents"): every row is cut into documents
 * (random segment starts, and padded rows whose padding tokens are documents of one), and
 *  - the attention kernels (naive multi-head on packed q | k | v, naive grouped-query, flash on
 *    packed and separate rows) against a double-precision reference of the block-diagonal
 *    causal attention: outputs, log-sum-exps and gradients (accumulated onto prefills), the
 *    gradients also against central finite differences of that reference;
 *  - a document's rows keep every bit of their outputs and gradients when the other documents'
 *    q, k, v and output gradients change (rows of the same batch row and of other rows);
 *  - seg all zero (one document per row) gives the bits of seg NULL, the path of runs without
 *    documents, in every op;
 *  - flash gives the bits of the CUDA kernels' loop order with masks (run here on the host with
 *    the same kernels/flash.h functions), as the unmasked test in test_flash does;
 *  - RoPE and the learned position embedding restart positions at each document: RoPE against
 *    a double reference at position t - seg, the embedding exactly (small integers).
 * Whole models on documents: test_docs_model.c. */
#include "backend/kernels/flash.h"
#include "backend/ops.h"
#include "opstest.h"

#include <string.h>

static const zs_ops *ops;

/* ---- segments --------------------------------------------------------------------------- */

/* Random documents: each row starts a new document at t > 0 with probability p; row 1 (when
 * there is one) is a padded row instead: a document of m real tokens, then padding tokens that
 * are documents of one. */
static int32_t *make_seg(int B, int T, double p) {
    int32_t *seg = zt_malloc((size_t)B * T * sizeof *seg);
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        for (int t = 0; t < T; t++) {
            int32_t *s = seg + (size_t)b * T;
            s[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < p ? t : s[t - 1];
        }
    }
    return seg;
}

/* Whether row b's tokens i and j are in the same document. */
static int same_doc(const int32_t *seg, int T, int b, int i, int j) {
    int lo = i < j ? i : j, hi = i < j ? j : i;
    return seg[(size_t)b * T + hi] <= lo;
}

/* ---- the reference ---------------------------------------------------------------------- */

/* One attention call's strided views, as test_flash's: q rows of stride ldq hold NH heads of
 * hs; k and v rows of stride ldkv NKV heads. packed: q | k | v in one buffer (GPT-2). */
typedef struct view {
    int B, T, NH, NKV, hs, packed;
    size_t ldq, ldkv, nq, nkv, nbuf, no;
    float *buf, *q, *k, *v; /* q, k, v point into buf */
    const int32_t *seg;
} view;

static view make_att(int B, int T, int NH, int NKV, int hs, int packed, const int32_t *seg) {
    view a = {B, T, NH, NKV, hs, packed, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, seg};
    size_t BT = (size_t)B * T, QD = (size_t)NH * hs, KD = (size_t)NKV * hs;
    a.ldq = packed ? QD + 2 * KD : QD;
    a.ldkv = packed ? a.ldq : KD;
    a.nbuf = packed ? BT * a.ldq : BT * (QD + 2 * KD);
    a.buf = fbuf(a.nbuf);
    zt_fill_normal(a.buf, a.nbuf, 1.0f);
    a.q = a.buf;
    a.k = packed ? a.buf + QD : a.buf + BT * QD;
    a.v = packed ? a.buf + QD + KD : a.buf + BT * (QD + KD);
    a.nq = BT * a.ldq;
    a.nkv = BT * a.ldkv;
    a.no = BT * QD;
    return a;
}

/* Element e of head h of row (b, t) in a view of stride ld over base. */
static size_t at(const view *a, size_t ld, int b, int t, int h) {
    return ((size_t)b * a->T + t) * ld + (size_t)h * a->hs;
}

/* out[B,T,NH*hs], lse[B,NH,T] and the gradients of sum(out * dout) into g (the buffer's shape:
 * q, k, v at their offsets), all in double from the (double) inputs x. */
static void reference(const view *a, const double *x, const double *dout, double *out, double *lse,
                      double *g) {
    int T = a->T, hs = a->hs, rep = a->NH / a->NKV;
    size_t ldo = (size_t)a->NH * hs, ko = (size_t)(a->k - a->buf), vo = (size_t)(a->v - a->buf);
    double scale = 1.0 / sqrt((double)hs), *p = dbuf((size_t)T), *dp = dbuf((size_t)T);
    if (g) memset(g, 0, a->nbuf * sizeof *g);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int i = 0; i < T; i++) {
                int lo = a->seg ? a->seg[(size_t)b * T + i] : 0, gk = h / rep;
                const double *qi = x + at(a, a->ldq, b, i, h);
                double mx = -INFINITY, sum = 0, pdp = 0;
                for (int j = lo; j <= i; j++) {
                    const double *kj = x + ko + at(a, a->ldkv, b, j, gk);
                    double d = 0;
                    for (int e = 0; e < hs; e++)
                        d += qi[e] * kj[e];
                    p[j] = d * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = lo; j <= i; j++)
                    sum += (p[j] = exp(p[j] - mx));
                if (lse) lse[((size_t)b * a->NH + h) * T + i] = mx + log(sum);
                double *oi = out + ((size_t)b * T + i) * ldo + (size_t)h * hs;
                const double *dOi = dout ? dout + ((size_t)b * T + i) * ldo + (size_t)h * hs : NULL;
                for (int e = 0; e < hs; e++)
                    oi[e] = 0;
                for (int j = lo; j <= i; j++) {
                    const double *vj = x + vo + at(a, a->ldkv, b, j, gk);
                    p[j] /= sum;
                    double d = 0;
                    for (int e = 0; e < hs; e++) {
                        oi[e] += p[j] * vj[e];
                        if (dOi) d += dOi[e] * vj[e];
                    }
                    dp[j] = d;
                    pdp += p[j] * d;
                }
                if (!g) continue;
                for (int j = lo; j <= i; j++) {
                    size_t kr = at(a, a->ldkv, b, j, gk);
                    double ds = p[j] * (dp[j] - pdp) * scale;
                    for (int e = 0; e < hs; e++) {
                        g[at(a, a->ldq, b, i, h) + e] += ds * x[ko + kr + e];
                        g[ko + kr + e] += ds * qi[e];
                        g[vo + kr + e] += p[j] * dOi[e];
                    }
                }
            }
    free(p);
    free(dp);
}

/* ---- running a kernel ---------------------------------------------------------------------- */

enum { NAIVE_MHA, NAIVE_GQA, FLASH, NKERNELS };
static const char *KNAME[] = {"naive attention (packed)", "naive grouped-query attention",
                              "flash attention"};

/* Forward and backward of one kernel on a's inputs with dout: out, lse (flash; NULL else), and
 * the gradients accumulated onto g (the buffer's shape). The flash backward overwrites its
 * gradients: it runs on NaNs (one left over fails the callers' checks) and g's prefill is
 * added back after. */
static void run_kernel(int kern, const view *a, const float *dout, float *out, float *lse,
                       float *g) {
    int B = a->B, T = a->T, NH = a->NH, NKV = a->NKV, hs = a->hs;
    size_t na = (size_t)B * NH * T * T, nl = (size_t)B * NH * T;
    float *dq = g + (a->q - a->buf), *dk = g + (a->k - a->buf), *dv = g + (a->v - a->buf);
    if (kern == FLASH) {
        float *delta = fbuf(nl), *pre = fcopy(g, a->nbuf);
        zt_poison(delta, nl);
        zt_poison(g, a->nbuf); /* q | k | v, or the packed rows: all of it is dq, dk and dv */
        ZT_OK(ops->flash_attention_fwd(NULL, out, lse, a->q, a->k, a->v, B, T, NH, NKV, hs,
                                       (int)a->ldq, (int)a->ldkv, a->seg));
        ZT_OK(ops->flash_attention_bwd(NULL, dq, dk, dv, delta, dout, a->q, a->k, a->v, out, lse, B,
                                       T, NH, NKV, hs, (int)a->ldq, (int)a->ldkv, a->seg));
        for (size_t i = 0; i < a->nbuf; i++)
            g[i] = pre[i] + g[i];
        free(delta), free(pre);
        return;
    }
    float *att = fbuf(na), *datt = fbuf(na);
    zt_poison(att, na);
    zt_poison(datt, na); /* scratch: what is in it must not matter */
    if (kern == NAIVE_MHA) {
        int C = NH * hs;
        ZT_OK(ops->attention_fwd(NULL, out, att, a->buf, B, T, C, NH, a->seg));
        ZT_OK(ops->attention_bwd(NULL, g, datt, dout, a->buf, att, B, T, C, NH, a->seg));
    } else {
        ZT_OK(ops->attention_gqa_fwd(NULL, out, att, a->q, a->k, a->v, B, T, NH, NKV, hs, a->seg));
        ZT_OK(ops->attention_gqa_bwd(NULL, dq, dk, dv, datt, dout, a->q, a->k, a->v, att, B, T, NH,
                                     NKV, hs, a->seg));
    }
    /* The probabilities are 0 outside each row's document keys. */
    int outside = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    float pij = att[(((size_t)b * NH + h) * T + i) * T + j];
                    int in = j <= i && (!a->seg || j >= a->seg[(size_t)b * T + i]);
                    outside += !in && pij != 0.0f;
                }
    ZT_CHECK(outside == 0, "%s: %d probabilities outside the documents are not 0", KNAME[kern],
             outside);
    free(att);
    free(datt);
}

/* Tolerances as test_flash's: N(0,1) inputs, hs <= 32, fp32 sums of at most a few hundred
 * terms: 1e-5 forward, 3e-5 for gradients (sums over rows too). */
#define FWD_TOL 1e-5
#define GRAD_TOL 3e-5

/* Outputs and gradients of one kernel against the reference. */
static void check_reference(int kern, int B, int T, int NH, int NKV, int hs, int packed) {
    int32_t *seg = make_seg(B, T, 0.15);
    view a = make_att(B, T, NH, NKV, hs, packed, seg);
    size_t nl = (size_t)B * NH * T;
    float *dout = fbuf(a.no), *out = fbuf(a.no), *lse = fbuf(nl), *g = fbuf(a.nbuf);
    zt_fill_normal(dout, a.no, 1.0f);
    zt_fill_normal(g, a.nbuf, 1.0f);
    float *pre = fcopy(g, a.nbuf);
    zt_poison(out, a.no);
    zt_poison(lse, nl);
    run_kernel(kern, &a, dout, out, kern == FLASH ? lse : NULL, g);
    double *x = to_double(a.buf, a.nbuf), *dd = to_double(dout, a.no);
    double *ro = dbuf(a.no), *rl = dbuf(nl), *rg = dbuf(a.nbuf);
    reference(&a, x, dd, ro, rl, rg);
    double eo = zt_max_err(out, ro, a.no), el = kern == FLASH ? zt_max_err(lse, rl, nl) : 0;
    double eg = acc_err(g, pre, rg, a.nbuf);
    ZT_CHECK(eo <= FWD_TOL && el <= FWD_TOL && eg <= GRAD_TOL,
             "%s B=%d T=%d NH=%d NKV=%d hs=%d: out err %g lse err %g gradient err %g", KNAME[kern],
             B, T, NH, NKV, hs, eo, el, eg);
    printf("%-32s T=%3d NH=%d NKV=%d: out %.1e lse %.1e grads %.1e\n", KNAME[kern], T, NH, NKV, eo,
           el, eg);
    free(seg), free(a.buf), free(dout), free(out), free(lse), free(g), free(pre), free(x);
    free(dd), free(ro), free(rl), free(rg);
}

/* ---- finite differences -----------------------------------------------------------------------
 */

typedef struct fd_ctx {
    const view *a;
    double *x, *r, *out;
} fd_ctx;

static double fd_loss(void *p) {
    fd_ctx *c = p;
    reference(c->a, c->x, NULL, c->out, NULL, NULL);
    double L = 0;
    for (size_t i = 0; i < c->a->no; i++)
        L += c->out[i] * c->r[i];
    return L;
}

/* The kernel's gradients against central differences of the masked attention in double. */
static void check_fd(int kern, int NKV, int packed) {
    int B = 2, T = 9, NH = 2, hs = 4;
    int32_t *seg = make_seg(B, T, 0.3);
    view a = make_att(B, T, NH, NKV, hs, packed, seg);
    float *dout = fbuf(a.no), *out = fbuf(a.no), *lse = fbuf((size_t)B * NH * T);
    float *g = fbuf(a.nbuf);
    zt_fill_normal(dout, a.no, 1.0f);
    memset(g, 0, a.nbuf * sizeof *g);
    run_kernel(kern, &a, dout, out, lse, g);
    fd_ctx c = {&a, to_double(a.buf, a.nbuf), to_double(dout, a.no), dbuf(a.no)};
    double *fd = dbuf(a.nbuf);
    fd_grad(fd_loss, &c, c.x, a.nbuf, fd);
    /* fp32 dots of hs terms and row sums of O(1) values against a 1e-10 difference: 2e-5. */
    double e = acc_err(g, NULL, fd, a.nbuf);
    ZT_CHECK(e <= 2e-5, "%s: gradients vs finite differences err %g", KNAME[kern], e);
    printf("%-32s finite differences (T=%d, masked): err %.1e\n", KNAME[kern], T, e);
    free(seg), free(a.buf), free(dout), free(out), free(lse), free(g), free(c.x), free(c.r);
    free(c.out), free(fd);
}

/* ---- isolation and seg NULL ----------------------------------------------------------------- */

/* Rows of document (b0, its start s0) keep every bit when everything outside it changes. */
static void check_isolation(int kern, int NKV, int packed) {
    int B = 3, T = 150, NH = 4, hs = 8; /* T > 2 key blocks of flash */
    int32_t *seg = make_seg(B, T, 0.02);
    /* Row 0: documents [0, 37), [37, 90), [90, 140), [140, 150); the one looked at is [90, 140),
     * across flash's key-block boundary at 128. */
    for (int t = 0; t < T; t++)
        seg[t] = t < 37 ? 0 : t < 90 ? 37 : t < 140 ? 90 : 140;
    int b0 = 0, s0 = seg[100];
    view a = make_att(B, T, NH, NKV, hs, packed, seg);
    size_t nl = (size_t)B * NH * T;
    float *dout = fbuf(a.no), *o1 = fbuf(a.no), *l1 = fbuf(nl), *g1 = fbuf(a.nbuf);
    float *o2 = fbuf(a.no), *l2 = fbuf(nl), *g2 = fbuf(a.nbuf);
    zt_fill_normal(dout, a.no, 1.0f);
    memset(g1, 0, a.nbuf * 4), memset(g2, 0, a.nbuf * 4);
    run_kernel(kern, &a, dout, o1, l1, g1);
    /* New q, k, v and output gradients for every token of every other document. */
    size_t QD = (size_t)NH * hs;
    int changed = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (b == b0 && same_doc(seg, T, b, s0, t)) continue;
            changed++;
            for (int h = 0; h < NH; h++) {
                zt_fill_normal(a.q + at(&a, a.ldq, b, t, h), (size_t)hs, 3.0f);
                zt_fill_normal(dout + ((size_t)b * T + t) * QD + (size_t)h * hs, (size_t)hs, 3.0f);
            }
            for (int h = 0; h < NKV; h++) {
                zt_fill_normal(a.k + at(&a, a.ldkv, b, t, h), (size_t)hs, 3.0f);
                zt_fill_normal(a.v + at(&a, a.ldkv, b, t, h), (size_t)hs, 3.0f);
            }
        }
    run_kernel(kern, &a, dout, o2, l2, g2);
    int diff = 0, rows = 0;
    for (int t = s0; t < T && same_doc(seg, T, b0, s0, t); t++, rows++) {
        size_t bt = (size_t)b0 * T + t;
        diff += !bits_equal(o1 + bt * QD, o2 + bt * QD, QD * 4);
        diff += !bits_equal(g1 + bt * a.ldq, g2 + bt * a.ldq, QD * 4); /* dq */
        for (int h = 0; h < NH; h++)
            diff += kern == FLASH &&
                    l1[((size_t)b0 * NH + h) * T + t] != l2[((size_t)b0 * NH + h) * T + t];
        for (int h = 0; h < NKV; h++) {
            size_t kr = at(&a, a.ldkv, b0, t, h);
            diff += !bits_equal(g1 + (a.k - a.buf) + kr, g2 + (a.k - a.buf) + kr, (size_t)hs * 4);
            diff += !bits_equal(g1 + (a.v - a.buf) + kr, g2 + (a.v - a.buf) + kr, (size_t)hs * 4);
        }
    }
    ZT_CHECK(diff == 0 && rows > 1 && changed > T,
             "%s: a document of %d rows changed in %d places when %d other tokens changed",
             KNAME[kern], rows, diff, changed);
    printf("%-32s document of %d rows unchanged when %d other tokens change\n", KNAME[kern], rows,
           changed);
    free(seg), free(a.buf), free(dout), free(o1), free(l1), free(g1), free(o2), free(l2), free(g2);
}

/* seg all zero (one document per row) and seg NULL give the same bits. */
static void check_zero_seg(int kern, int NKV, int packed) {
    int B = 2, T = 130, NH = 4, hs = 8;
    int32_t *zero = zt_malloc((size_t)B * T * sizeof *zero);
    memset(zero, 0, (size_t)B * T * sizeof *zero);
    view a = make_att(B, T, NH, NKV, hs, packed, NULL);
    size_t nl = (size_t)B * NH * T;
    float *dout = fbuf(a.no), *o1 = fbuf(a.no), *l1 = fbuf(nl), *g1 = fbuf(a.nbuf);
    float *o2 = fbuf(a.no), *l2 = fbuf(nl), *g2 = fbuf(a.nbuf);
    zt_fill_normal(dout, a.no, 1.0f);
    memset(g1, 0, a.nbuf * 4), memset(g2, 0, a.nbuf * 4);
    run_kernel(kern, &a, dout, o1, l1, g1);
    a.seg = zero;
    run_kernel(kern, &a, dout, o2, l2, g2);
    ZT_CHECK(bits_equal(o1, o2, a.no * 4) && bits_equal(g1, g2, a.nbuf * 4) &&
                 (kern != FLASH || bits_equal(l1, l2, nl * 4)),
             "%s: seg all zero differs from seg NULL", KNAME[kern]);
    free(zero), free(a.buf), free(dout), free(o1), free(l1), free(g1), free(o2), free(l2), free(g2);
}

/* ---- flash in the CUDA kernels' order ----------------------------------------------------------
 */

/* cuda/flash_cuda.cu with masks: a thread per query row for forward, delta and dq (from the
 * block holding the row's document start), a thread per key row for dk and dv (query rows of
 * the key's document only), K and V read row-major; the same kernels/flash.h functions. */
static void check_device_order(int NKV, int packed) {
    int B = 2, T = 200, NH = 4, hs = 16, rep = NH / NKV;
    int32_t *seg = make_seg(B, T, 0.01);
    view a = make_att(B, T, NH, NKV, hs, packed, seg);
    size_t nl = (size_t)B * NH * T, ldo = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    float *dout = fbuf(a.no), *out = fbuf(a.no), *lse = fbuf(nl), *g = fbuf(a.nbuf);
    float *eo = fbuf(a.no), *el = fbuf(nl), *ed = fbuf(nl), *e = fbuf(a.nbuf);
    zt_fill_normal(dout, a.no, 1.0f);
    memset(g, 0, a.nbuf * 4); /* sums from zero, as the kernels' */
    memset(e, 0, a.nbuf * 4);
    run_kernel(FLASH, &a, dout, out, lse, g);
    size_t ko = (size_t)(a.k - a.buf), vo = (size_t)(a.v - a.buf);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                size_t bh = (size_t)b * NH + h, qo = at(&a, a.ldq, b, i, h);
                size_t oo = ((size_t)b * T + i) * ldo + (size_t)h * hs;
                size_t kb = at(&a, a.ldkv, b, 0, h / rep);
                int lo = seg[(size_t)b * T + i];
                float sc[ZS_FA_BK], dp[ZS_FA_BK], m = -INFINITY, l = 0.0f;
                memset(eo + oo, 0, (size_t)hs * 4);
                for (int j0 = zs_fa_first_block(lo); j0 <= i; j0 += ZS_FA_BK) {
                    int n = T - j0 < ZS_FA_BK ? T - j0 : ZS_FA_BK, f = 0;
                    int ni = zs_fa_span(i, lo, j0, n, &f);
                    zs_fa_dots(sc, a.q + qo, a.k + kb + (j0 + f) * a.ldkv, a.ldkv, 1, ni, hs,
                               scale);
                    zs_fa_fwd_block(sc, eo + oo, &m, &l, a.v + kb + (j0 + f) * a.ldkv, a.ldkv, ni,
                                    hs);
                }
                el[bh * T + i] = zs_fa_fwd_finish(eo + oo, m, l, hs);
                ed[bh * T + i] = zs_dot(dout + oo, out + oo, hs);
                for (int j0 = zs_fa_first_block(lo); j0 <= i; j0 += ZS_FA_BK) {
                    int n = T - j0 < ZS_FA_BK ? T - j0 : ZS_FA_BK, f = 0;
                    int ni = zs_fa_span(i, lo, j0, n, &f);
                    const float *kj = a.k + kb + (j0 + f) * a.ldkv;
                    zs_fa_dots(sc, a.q + qo, kj, a.ldkv, 1, ni, hs, scale);
                    zs_fa_dots(dp, dout + oo, a.v + kb + (j0 + f) * a.ldkv, a.ldkv, 1, ni, hs,
                               1.0f);
                    zs_fa_bwd_block(sc, dp, lse[bh * T + i], ed[bh * T + i], scale, ni);
                    for (int j = 0; j < ni; j++)
                        zs_axpy_row(e + qo, dp[j], kj + (size_t)j * a.ldkv, hs);
                }
            }
    for (int b = 0; b < B; b++)
        for (int gi = 0; gi < NKV; gi++)
            for (int j = 0; j < T; j++) {
                size_t kr = at(&a, a.ldkv, b, j, gi);
                for (int h = gi * rep; h < (gi + 1) * rep; h++)
                    for (int i = j; i < T && seg[(size_t)b * T + i] <= j; i++) {
                        size_t bh = (size_t)b * NH + h;
                        const float *qi = a.q + at(&a, a.ldq, b, i, h);
                        const float *dOi = dout + ((size_t)b * T + i) * ldo + (size_t)h * hs;
                        float s1, dp1;
                        zs_fa_dots(&s1, qi, a.k + kr, 1, 1, 1, hs, scale);
                        zs_fa_dots(&dp1, dOi, a.v + kr, 1, 1, 1, hs, 1.0f);
                        zs_fa_bwd_block(&s1, &dp1, lse[bh * T + i], ed[bh * T + i], scale, 1);
                        zs_axpy_row(e + ko + kr, dp1, qi, hs);
                        zs_axpy_row(e + vo + kr, s1, dOi, hs);
                    }
            }
    ZT_CHECK(bits_equal(out, eo, a.no * 4) && bits_equal(lse, el, nl * 4),
             "flash NKV=%d: masked forward differs from the device kernels' order", NKV);
    ZT_CHECK(bits_equal(g, e, a.nbuf * 4),
             "flash NKV=%d: masked dq | dk | dv differ from the device kernels' order", NKV);
    free(seg), free(a.buf), free(dout), free(out), free(lse), free(g), free(eo), free(el);
    free(ed), free(e);
}

/* ---- positions ---------------------------------------------------------------------------------
 */

static void check_rope(void) {
    int B = 3, T = 40, NH = 2, hs = 16;
    float theta = 10000.0f;
    size_t n = (size_t)B * T * NH * hs;
    int32_t *seg = make_seg(B, T, 0.1);
    float *x = fbuf(n), *out = fbuf(n), *back = fbuf(n), *o0 = fbuf(n), *o1 = fbuf(n);
    zt_fill_normal(x, n, 1.0f);
    zt_poison(out, n);
    ZT_OK(ops->rope_fwd(NULL, out, x, B, T, NH, hs, theta, seg));
    double worst = 0;
    for (int bt = 0; bt < B * T; bt++) {
        int pos = bt % T - seg[bt], half = hs / 2;
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < half; i++) {
                size_t o = ((size_t)bt * NH + h) * hs;
                double ang = pos * pow((double)theta, -2.0 * i / hs);
                double r1 = x[o + i] * cos(ang) - x[o + i + half] * sin(ang);
                double r2 = x[o + i + half] * cos(ang) + x[o + i] * sin(ang);
                worst = fmax(worst, fmax(fabs(out[o + i] - r1), fabs(out[o + i + half] - r2)));
            }
    }
    /* As test_ops_llama: fp32 angles of positions < 40 and fp32 cos/sin: 5e-5. */
    ZT_CHECK(worst <= 5e-5, "rope_fwd with document positions err %g", worst);
    ZT_OK(ops->rope_bwd(NULL, back, out, B, T, NH, hs, theta, seg));
    ZT_CHECK(zt_max_err_ff(back, x, n) <= 1e-5, "rope_bwd(rope_fwd(x)) != x with documents: %g",
             zt_max_err_ff(back, x, n));
    /* A document that starts at t gets the rotation the first row position gets. */
    int32_t *zero = zt_malloc((size_t)B * T * sizeof *zero);
    memset(zero, 0, (size_t)B * T * sizeof *zero);
    ZT_OK(ops->rope_fwd(NULL, o0, x, B, T, NH, hs, theta, NULL));
    ZT_OK(ops->rope_fwd(NULL, o1, x, B, T, NH, hs, theta, zero));
    ZT_CHECK(bits_equal(o0, o1, n * 4), "rope_fwd: seg all zero differs from seg NULL");
    free(seg), free(x), free(out), free(back), free(o0), free(o1), free(zero);
}

/* Small integers in floats: every sum is exact, so the reference is the exact answer. */
static void check_embedding(void) {
    int B = 3, T = 12, C = 70, V = 5;
    size_t ne = (size_t)V * C, np = (size_t)T * C, no = (size_t)B * T * C;
    int32_t *seg = make_seg(B, T, 0.3), tok[36];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    float *wte = fbuf(ne), *wpe = fbuf(np), *out = fbuf(no), *dout = fbuf(no);
    float *dwte = fbuf(ne), *dwpe = fbuf(np);
    for (size_t i = 0; i < ne; i++)
        wte[i] = (float)(int)zt_uniform(-50, 50);
    for (size_t i = 0; i < np; i++)
        wpe[i] = (float)(int)zt_uniform(-50, 50);
    for (size_t i = 0; i < no; i++)
        dout[i] = (float)(int)zt_uniform(-50, 50);
    memset(dwte, 0, ne * 4), memset(dwpe, 0, np * 4);
    zt_poison(out, no);
    ZT_OK(ops->embedding_fwd(NULL, out, tok, wte, wpe, B, T, C, seg));
    ZT_OK(ops->embedding_bwd(NULL, dwte, dwpe, dout, tok, B, T, C, seg));
    int bad = 0;
    double *rp = dbuf(np);
    memset(rp, 0, np * sizeof *rp);
    for (int bt = 0; bt < B * T; bt++) {
        int pos = bt % T - seg[bt];
        for (int c = 0; c < C; c++) {
            bad += out[(size_t)bt * C + c] != wte[tok[bt] * C + c] + wpe[pos * C + c];
            rp[pos * C + c] += dout[(size_t)bt * C + c];
        }
    }
    for (size_t i = 0; i < np; i++)
        bad += dwpe[i] != rp[i];
    ZT_CHECK(bad == 0, "embedding with document positions: %d wrong values", bad);
    /* seg all zero gives the bits of seg NULL. */
    int32_t *zero = zt_malloc((size_t)B * T * sizeof *zero);
    memset(zero, 0, (size_t)B * T * sizeof *zero);
    float *o0 = fbuf(no), *o1 = fbuf(no), *p0 = fbuf(np), *p1 = fbuf(np);
    zt_fill_normal(wpe, np, 1.0f), zt_fill_normal(dout, no, 1.0f);
    memset(p0, 0, np * 4), memset(p1, 0, np * 4);
    ZT_OK(ops->embedding_fwd(NULL, o0, tok, wte, wpe, B, T, C, NULL));
    ZT_OK(ops->embedding_fwd(NULL, o1, tok, wte, wpe, B, T, C, zero));
    ZT_OK(ops->embedding_bwd(NULL, NULL, p0, dout, tok, B, T, C, NULL));
    ZT_OK(ops->embedding_bwd(NULL, NULL, p1, dout, tok, B, T, C, zero));
    ZT_CHECK(bits_equal(o0, o1, no * 4) && bits_equal(p0, p1, np * 4),
             "embedding: seg all zero differs from seg NULL");
    free(seg), free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(rp);
    free(zero), free(o0), free(o1), free(p0), free(p1);
}

int main(void) {
    zt_init("docs_ops");
    ops = zs_ops_cpu();
    /* T = 130 and 200: partial key blocks of flash and documents across block boundaries. */
    check_reference(NAIVE_MHA, 2, 37, 4, 4, 8, 1);
    check_reference(NAIVE_GQA, 3, 40, 4, 2, 8, 0);
    check_reference(FLASH, 2, 130, 4, 4, 16, 1);
    check_reference(FLASH, 3, 200, 4, 2, 16, 0);
    check_reference(FLASH, 2, 100, 4, 1, 32, 0);
    check_fd(NAIVE_MHA, 2, 1);
    check_fd(NAIVE_GQA, 1, 0);
    check_fd(FLASH, 2, 1);
    check_fd(FLASH, 1, 0);
    for (int k = 0; k < NKERNELS; k++) {
        int packed = k != NAIVE_GQA, nkv = k == NAIVE_GQA ? 2 : 4;
        check_isolation(k, nkv, packed);
        check_zero_seg(k, nkv, packed);
    }
    check_isolation(FLASH, 2, 0);
    check_device_order(4, 1);
    check_device_order(2, 0);
    check_rope();
    check_embedding();
    return zt_finish();
}

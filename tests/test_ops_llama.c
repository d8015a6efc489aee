/* CPU ops of the LLaMA family (RMSNorm, RoPE, SwiGLU, grouped-query attention): forwards
 * against naive double-precision references on fresh random inputs with outputs poisoned
 * (NaN) first; backwards against central finite differences of those references on
 * L = sum(out * r); accumulating outputs pre-filled with random values (got - prefill must
 * equal the gradient); in-place and cross-op identities; bitwise independence from the
 * thread count; bad shapes rejected. */
#include "backend/ops.h"
#include "opstest.h"

#include <omp.h>
#include <string.h>

static const zs_ops *ops;

static float *rnd(size_t n, float std) {
    float *x = fbuf(n);
    zt_fill_normal(x, n, std);
    return x;
}

/* ---- RMSNorm --------------------------------------------------------------------------- */

typedef struct {
    int N, C;
    double eps, *x, *w, *r, *out, *rstd; /* out and rstd: filled by the reference */
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++)
            ss += x[i] * x[i];
        double rs = 1.0 / sqrt(ss / c->C + c->eps);
        if (c->rstd) c->rstd[n] = rs;
        for (int i = 0; i < c->C; i++) {
            double o = x[i] * rs * c->w[i];
            if (c->out) c->out[(size_t)n * c->C + i] = o;
            L += o * c->r[(size_t)n * c->C + i];
        }
    }
    return L;
}

static void test_rmsnorm(void) {
    /* C = 37: lane tails only past 32; C = 130 spans three 64-column blocks of dw; the second
     * shape has offset inputs (RMSNorm does not centre) and eps 1e-6. */
    int shapes[3][2] = {{5, 37}, {4, 130}, {33, 64}};
    for (int si = 0; si < 3; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)N * C;
        float eps = si == 1 ? 1e-6f : 1e-5f;
        float *x = rnd(n, 1.0f), *w = rnd(C, 1.0f), *r = rnd(n, 1.0f);
        for (size_t i = 0; i < n && si == 1; i++)
            x[i] += 2.0f;
        float *out = fbuf(n), *rstd = fbuf(N);
        zt_poison(out, n), zt_poison(rstd, N);
        rms_ctx c = {N,       C,      eps, to_double(x, n), to_double(w, C), to_double(r, n),
                     dbuf(n), dbuf(N)};
        rms_loss(&c);
        ZT_OK(ops->rmsnorm_fwd(NULL, out, rstd, x, w, N, C, eps));
        /* fp32 sum of squares in 8 lanes: ~(C/8) 2^-24 relative on rstd; out = x rstd w with
         * |out| up to ~10: 2e-5 mixed. */
        ZT_CHECK(zt_max_err(out, c.out, n) <= 2e-5, "rmsnorm out C=%d err %g", C,
                 zt_max_err(out, c.out, n));
        ZT_CHECK(zt_max_err(rstd, c.rstd, N) <= 1e-5, "rmsnorm rstd err %g",
                 zt_max_err(rstd, c.rstd, N));

        float *dx = rnd(n, 1.0f), *dw = rnd(C, 1.0f), *px = fcopy(dx, n), *pw = fcopy(dw, C);
        free(c.out), free(c.rstd);
        c.out = c.rstd = NULL;
        double *gx = dbuf(n), *gw = dbuf(C);
        fd_grad(rms_loss, &c, c.x, n, gx);
        fd_grad(rms_loss, &c, c.w, C, gw);
        ZT_OK(ops->rmsnorm_bwd(NULL, dx, dw, r, x, w, rstd, N, C));
        /* dx: a row mean of C products times rstd ~ 1: ~C 2^-24 of the terms' size, 2e-5 at
         * C = 130; dw sums N <= 33 O(1) terms: 1e-5. */
        ZT_CHECK(acc_err(dx, px, gx, n) <= 2e-5, "rmsnorm dinp C=%d err %g", C,
                 acc_err(dx, px, gx, n));
        ZT_CHECK(acc_err(dw, pw, gw, C) <= 1e-5, "rmsnorm dw C=%d err %g", C,
                 acc_err(dw, pw, gw, C));
        free(x), free(w), free(r), free(out), free(rstd), free(dx), free(dw), free(px), free(pw);
        free(c.x), free(c.w), free(c.r), free(gx), free(gw);
    }
    float z[4];
    ZT_CHECK(ops->rmsnorm_fwd(NULL, z, z, z, z, 1, 0, 1e-5f) == ZS_ERR_INVALID, "C = 0 rejected");
}

/* ---- RoPE ------------------------------------------------------------------------------ */

/* Hugging Face's formula, literally: out = x * cos + rotate_half(x) * sin, with
 * rotate_half(x) = cat(-x[half:], x[:half]) and cos, sin = cat(c, c), cat(s, s) over the
 * head; c_i, s_i of the angle t * theta^(-2i/hs), here in double. */
static void rope_ref(double *out, const double *x, int B, int T, int NH, int hs, double theta,
                     int inverse) {
    int half = hs / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                size_t off = (((size_t)b * T + t) * NH + h) * hs;
                for (int j = 0; j < hs; j++) {
                    int i = j % half;
                    double ang = t * pow(theta, -2.0 * i / hs) * (inverse ? -1 : 1);
                    double rot = j < half ? -x[off + j + half] : x[off + j - half];
                    out[off + j] = x[off + j] * cos(ang) + rot * sin(ang);
                }
            }
}

typedef struct {
    int B, T, NH, hs;
    double theta, *x, *r, *tmp;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->NH * c->hs;
    rope_ref(c->tmp, c->x, c->B, c->T, c->NH, c->hs, c->theta, 0);
    double L = 0;
    for (size_t i = 0; i < n; i++)
        L += c->tmp[i] * c->r[i];
    return L;
}

static void test_rope(void) {
    /* hs = 16 with theta 1e4 (LLaMA), hs = 6 with theta 5e5 (odd half), T up to 61. */
    int shapes[2][4] = {{2, 61, 3, 16}, {3, 9, 2, 6}};
    float thetas[2] = {10000.0f, 500000.0f};
    for (int si = 0; si < 2; si++) {
        int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], hs = shapes[si][3];
        size_t n = (size_t)B * T * NH * hs;
        float *x = rnd(n, 1.0f), *out = fbuf(n), *back = fbuf(n), *r = rnd(n, 1.0f);
        double *ref = dbuf(n), *xd = to_double(x, n);
        zt_poison(out, n);
        rope_ref(ref, xd, B, T, NH, hs, thetas[si], 0);
        ZT_OK(ops->rope_fwd(NULL, out, x, B, T, NH, hs, thetas[si], NULL));
        /* The angle t * inv_freq is formed in fp32 as HF forms it, off by ~t 2^-23 rad from
         * the double angle: at t = 60 that is 7e-6 times |x| ~ 4: 5e-5 mixed. */
        ZT_CHECK(zt_max_err(out, ref, n) <= 5e-5, "rope_fwd hs=%d err %g", hs,
                 zt_max_err(out, ref, n));
        float *inpl = fcopy(x, n);
        ZT_OK(ops->rope_fwd(NULL, inpl, inpl, B, T, NH, hs, thetas[si], NULL));
        ZT_CHECK(bits_equal(inpl, out, n * 4), "rope_fwd in place differs");
        /* Backward = transpose = inverse rotation: against finite differences, and undoing
         * the forward. */
        rope_ctx c = {B, T, NH, hs, thetas[si], xd, to_double(r, n), dbuf(n)};
        double *g = dbuf(n);
        fd_grad(rope_loss, &c, c.x, n, g);
        zt_poison(back, n);
        ZT_OK(ops->rope_bwd(NULL, back, r, B, T, NH, hs, thetas[si], NULL));
        /* The same fp32 angle as the forward against the double one: 5e-5 mixed. */
        ZT_CHECK(acc_err(back, NULL, g, n) <= 5e-5, "rope_bwd hs=%d err %g", hs,
                 acc_err(back, NULL, g, n));
        ZT_OK(ops->rope_bwd(NULL, inpl, inpl, B, T, NH, hs, thetas[si], NULL));
        /* R^T R x = x up to the roundings of two rotations: 1e-6 mixed. */
        ZT_CHECK(zt_max_err(inpl, xd, n) <= 1e-6, "rope_bwd(rope_fwd(x)) != x: %g",
                 zt_max_err(inpl, xd, n));
        free(x), free(out), free(back), free(r), free(ref), free(xd), free(inpl), free(c.r);
        free(c.tmp), free(g);
    }
    float z[8];
    ZT_CHECK(ops->rope_fwd(NULL, z, z, 1, 1, 1, 5, 1e4f, NULL) == ZS_ERR_INVALID,
             "odd hs rejected");
    ZT_CHECK(ops->rope_fwd(NULL, z, z, 1, 1, 1, 4, 0.0f, NULL) == ZS_ERR_INVALID,
             "theta 0 rejected");
}

/* ---- SwiGLU ---------------------------------------------------------------------------- */

static double silu_ref(double x) {
    return x / (1.0 + exp(-x));
}

typedef struct {
    size_t n;
    double *g, *u, *r;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    double L = 0;
    for (size_t i = 0; i < c->n; i++)
        L += silu_ref(c->g[i]) * c->u[i] * c->r[i];
    return L;
}

static void test_swiglu(void) {
    size_t n = 40001;
    float *g = rnd(n, 3.0f), *u = rnd(n, 1.0f), *r = rnd(n, 1.0f), *out = fbuf(n);
    g[0] = 0.0f, g[1] = 40.0f, g[2] = -40.0f, g[3] = 1e-7f, g[4] = -100.0f;
    double *ref = dbuf(n);
    for (size_t i = 0; i < n; i++)
        ref[i] = silu_ref(g[i]) * u[i];
    zt_poison(out, n);
    ZT_OK(ops->swiglu_fwd(NULL, out, g, u, n));
    /* sigmoid through exp(-|x|) without cancellation: a few roundings and exp's ~2 ulp,
     * 1e-6 mixed. */
    ZT_CHECK(zt_max_err(out, ref, n) <= 1e-6, "swiglu_fwd err %g", zt_max_err(out, ref, n));
    float *a = fcopy(g, n);
    ZT_OK(ops->swiglu_fwd(NULL, a, a, u, n));
    ZT_CHECK(bits_equal(a, out, n * 4), "swiglu_fwd with out == gate differs");

    /* Each gate/up element only affects its own term: one FD pass per input is exact. */
    n = 3000;
    swiglu_ctx c = {n, to_double(g, n), to_double(u, n), to_double(r, n)};
    double *gg = dbuf(n), *gu = dbuf(n);
    fd_grad(swiglu_loss, &c, c.g, n, gg);
    fd_grad(swiglu_loss, &c, c.u, n, gu);
    /* swiglu_bwd overwrites: the random prefill is never read */
    float *dg = rnd(n, 1.0f), *du = rnd(n, 1.0f);
    ZT_OK(ops->swiglu_bwd(NULL, dg, du, r, g, u, n));
    /* silu' = s (1 + x (1 - s)) with 1 - s formed exactly enough for |x| <= 40: 2e-6 mixed. */
    ZT_CHECK(acc_err(dg, NULL, gg, n) <= 2e-6, "swiglu dgate err %g", acc_err(dg, NULL, gg, n));
    ZT_CHECK(acc_err(du, NULL, gu, n) <= 2e-6, "swiglu dup err %g", acc_err(du, NULL, gu, n));
    free(g), free(u), free(r), free(out), free(ref), free(a), free(c.g), free(c.u), free(c.r);
    free(gg), free(gu), free(dg), free(du);
}

/* ---- grouped-query attention ----------------------------------------------------------- */

typedef struct {
    int B, T, NH, NKV, hs;
    double *q, *k, *v, *r, *out, *att; /* out, att: filled by the reference when non-NULL */
} gqa_ctx;

/* Naive causal attention in double; query head h uses kv head h / (NH / NKV). Returns
 * sum(out * r). */
static double gqa_loss(void *p) {
    gqa_ctx *c = p;
    int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, rep = NH / NKV;
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs;
    double scale = 1.0 / sqrt((double)hs), L = 0;
    double *s = dbuf(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->q + ((size_t)b * T + t) * QD + (size_t)h * hs;
                const double *k = c->k + (size_t)b * T * KD + (size_t)(h / rep) * hs;
                double sum = causal_scores(q, k, KD, hs, t, scale, s);
                if (c->att)
                    for (int t2 = 0; t2 < T; t2++)
                        c->att[(((size_t)b * NH + h) * T + t) * T + t2] =
                            t2 <= t ? s[t2] / sum : 0.0;
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        o += s[t2] / sum *
                             c->v[((size_t)b * T + t2) * KD + (size_t)(h / rep) * hs + i];
                    size_t oi = ((size_t)b * T + t) * QD + (size_t)h * hs + i;
                    if (c->out) c->out[oi] = o;
                    L += o * c->r[oi];
                }
            }
    free(s);
    return L;
}

static void test_attention_gqa(void) {
    /* {B, T, NH, NKV, hs}: groups of 3, multi-query (NKV = 1), plain multi-head (NKV = NH),
     * and hs = 5 (lane tails only). */
    int shapes[4][5] = {{2, 7, 6, 2, 8}, {1, 9, 4, 1, 8}, {2, 6, 3, 3, 8}, {1, 5, 4, 2, 5}};
    for (int si = 0; si < 4; si++) {
        int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2], NKV = shapes[si][3],
            hs = shapes[si][4];
        size_t nq = (size_t)B * T * NH * hs, nk = (size_t)B * T * NKV * hs;
        size_t na = (size_t)B * NH * T * T;
        float *q = rnd(nq, 1.5f), *k = rnd(nk, 1.5f), *v = rnd(nk, 1.0f), *r = rnd(nq, 1.0f);
        float *out = fbuf(nq), *att = fbuf(na), *datt = fbuf(na);
        zt_poison(out, nq), zt_poison(att, na);
        gqa_ctx c = {B, T, NH, NKV, hs, NULL, NULL, NULL, NULL, dbuf(nq), dbuf(na)};
        c.q = to_double(q, nq), c.k = to_double(k, nk), c.v = to_double(v, nk);
        c.r = to_double(r, nq);
        gqa_loss(&c);
        ZT_OK(ops->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs, NULL));
        /* As attention_fwd: fp32 dots of hs terms, exp ~2 ulp, rows of <= T terms: 1e-5. */
        ZT_CHECK(zt_max_err(out, c.out, nq) <= 1e-5, "gqa out NH=%d NKV=%d err %g", NH, NKV,
                 zt_max_err(out, c.out, nq));
        ZT_CHECK(zt_max_err(att, c.att, na) <= 1e-5, "gqa att NH=%d NKV=%d err %g", NH, NKV,
                 zt_max_err(att, c.att, na));
        free(c.out), free(c.att);
        c.out = c.att = NULL;

        double *gq = dbuf(nq), *gk = dbuf(nk), *gv = dbuf(nk);
        fd_grad(gqa_loss, &c, c.q, nq, gq);
        fd_grad(gqa_loss, &c, c.k, nk, gk);
        fd_grad(gqa_loss, &c, c.v, nk, gv);
        float *dq = rnd(nq, 1.0f), *dk = rnd(nk, 1.0f), *dv = rnd(nk, 1.0f);
        float *pq = fcopy(dq, nq), *pk = fcopy(dk, nk), *pv = fcopy(dv, nk);
        zt_poison(datt, na); /* scratch: whatever is in it must not matter */
        ZT_OK(ops->attention_gqa_bwd(NULL, dq, dk, dv, datt, r, q, k, v, att, B, T, NH, NKV, hs,
                                     NULL));
        /* fp32 dots of hs terms, sums over T rows and NH/NKV heads of O(1) values: 2e-5. */
        ZT_CHECK(acc_err(dq, pq, gq, nq) <= 2e-5, "gqa dq NH=%d NKV=%d err %g", NH, NKV,
                 acc_err(dq, pq, gq, nq));
        ZT_CHECK(acc_err(dk, pk, gk, nk) <= 2e-5, "gqa dk NH=%d NKV=%d err %g", NH, NKV,
                 acc_err(dk, pk, gk, nk));
        ZT_CHECK(acc_err(dv, pv, gv, nk) <= 2e-5, "gqa dv NH=%d NKV=%d err %g", NH, NKV,
                 acc_err(dv, pv, gv, nk));

        if (NKV == NH) {
            /* Same heads, same arithmetic in the same order as GPT-2's op on q | k | v. */
            int C = NH * hs;
            size_t n3 = (size_t)B * T * 3 * C;
            float *qkv = fbuf(n3), *o2 = fbuf(nq), *a2 = fbuf(na), *d3 = fbuf(n3);
            for (int bt = 0; bt < B * T; bt++) {
                memcpy(qkv + (size_t)bt * 3 * C, q + (size_t)bt * C, C * 4);
                memcpy(qkv + (size_t)bt * 3 * C + C, k + (size_t)bt * C, C * 4);
                memcpy(qkv + (size_t)bt * 3 * C + 2 * C, v + (size_t)bt * C, C * 4);
            }
            ZT_OK(ops->attention_fwd(NULL, o2, a2, qkv, B, T, C, NH, NULL));
            ZT_CHECK(bits_equal(o2, out, nq * 4) && bits_equal(a2, att, na * 4),
                     "gqa with NKV = NH differs from attention_fwd");
            memset(d3, 0, n3 * 4), memset(dq, 0, nq * 4), memset(dk, 0, nk * 4);
            memset(dv, 0, nk * 4);
            ZT_OK(ops->attention_bwd(NULL, d3, datt, r, qkv, att, B, T, C, NH, NULL));
            ZT_OK(ops->attention_gqa_bwd(NULL, dq, dk, dv, datt, r, q, k, v, att, B, T, NH, NKV, hs,
                                         NULL));
            int same = 1;
            for (int bt = 0; bt < B * T; bt++)
                same &= bits_equal(d3 + (size_t)bt * 3 * C, dq + (size_t)bt * C, C * 4) &&
                        bits_equal(d3 + (size_t)bt * 3 * C + C, dk + (size_t)bt * C, C * 4) &&
                        bits_equal(d3 + (size_t)bt * 3 * C + 2 * C, dv + (size_t)bt * C, C * 4);
            ZT_CHECK(same, "gqa_bwd with NKV = NH differs from attention_bwd");
            free(qkv), free(o2), free(a2), free(d3);
        }
        free(q), free(k), free(v), free(r), free(out), free(att), free(datt), free(c.q);
        free(c.k), free(c.v), free(c.r), free(gq), free(gk), free(gv), free(dq), free(dk);
        free(dv), free(pq), free(pk), free(pv);
    }
    float z[4];
    ZT_CHECK(ops->attention_gqa_fwd(NULL, z, z, z, z, z, 1, 1, 6, 4, 2, NULL) == ZS_ERR_INVALID,
             "NKV not dividing NH rejected");
}

/* ---- thread-count independence ---------------------------------------------------------- */

static void test_threads(void) {
    int N = 256, C = 768, B = 4, T = 64, NH = 8, NKV = 2, hs = 16, F = 4096;
    size_t nl = (size_t)N * C, nq = (size_t)B * T * NH * hs, nk = (size_t)B * T * NKV * hs;
    size_t na = (size_t)B * NH * T * T, nf = (size_t)N * F;
    float *x = rnd(nl, 1.0f), *w = rnd(C, 1.0f), *dout = rnd(nl, 1.0f), *rstd = fbuf(N);
    float *ln = fbuf(nl), *q = rnd(nq, 1.0f), *k = rnd(nk, 1.0f), *v = rnd(nk, 1.0f);
    float *ao = fbuf(nq), *att = fbuf(na), *datt = fbuf(na), *ar = rnd(nq, 1.0f);
    float *gt = rnd(nf, 2.0f), *up = rnd(nf, 1.0f), *dsw = rnd(nf, 1.0f);
    ZT_OK(ops->rmsnorm_fwd(NULL, ln, rstd, x, w, N, C, 1e-5f));
    ZT_OK(ops->attention_gqa_fwd(NULL, ao, att, q, k, v, B, T, NH, NKV, hs, NULL));
    float *dx[2], *dw[2], *dq[2], *dk[2], *dv[2], *rq[2], *fo[2], *dg[2], *du[2];
    int nt = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        dx[t] = fbuf(nl), dw[t] = fbuf(C), dq[t] = fbuf(nq), dk[t] = fbuf(nk), dv[t] = fbuf(nk);
        rq[t] = fbuf(nq), fo[t] = fbuf(nf), dg[t] = fbuf(nf), du[t] = fbuf(nf);
        memset(dx[t], 0, nl * 4), memset(dw[t], 0, C * 4), memset(dq[t], 0, nq * 4);
        memset(dk[t], 0, nk * 4), memset(dv[t], 0, nk * 4), memset(dg[t], 0, nf * 4);
        memset(du[t], 0, nf * 4);
        omp_set_num_threads(t == 0 ? 1 : 3);
        ZT_OK(ops->rmsnorm_bwd(NULL, dx[t], dw[t], dout, x, w, rstd, N, C));
        ZT_OK(ops->attention_gqa_bwd(NULL, dq[t], dk[t], dv[t], datt, ar, q, k, v, att, B, T, NH,
                                     NKV, hs, NULL));
        ZT_OK(ops->rope_fwd(NULL, rq[t], q, B, T, NH, hs, 10000.0f, NULL));
        ZT_OK(ops->swiglu_fwd(NULL, fo[t], gt, up, nf));
        ZT_OK(ops->swiglu_bwd(NULL, dg[t], du[t], dsw, gt, up, nf));
    }
    omp_set_num_threads(nt);
    ZT_CHECK(bits_equal(dx[0], dx[1], nl * 4) && bits_equal(dw[0], dw[1], C * 4),
             "rmsnorm_bwd depends on thread count");
    ZT_CHECK(bits_equal(dq[0], dq[1], nq * 4) && bits_equal(dk[0], dk[1], nk * 4) &&
                 bits_equal(dv[0], dv[1], nk * 4),
             "attention_gqa_bwd depends on thread count");
    ZT_CHECK(bits_equal(rq[0], rq[1], nq * 4), "rope_fwd depends on thread count");
    ZT_CHECK(bits_equal(fo[0], fo[1], nf * 4) && bits_equal(dg[0], dg[1], nf * 4) &&
                 bits_equal(du[0], du[1], nf * 4),
             "swiglu depends on thread count");
    for (int t = 0; t < 2; t++)
        free(dx[t]), free(dw[t]), free(dq[t]), free(dk[t]), free(dv[t]), free(rq[t]), free(fo[t]),
            free(dg[t]), free(du[t]);
    free(x), free(w), free(dout), free(rstd), free(ln), free(q), free(k), free(v), free(ao);
    free(att), free(datt), free(ar), free(gt), free(up), free(dsw);
}

/* embedding_fwd without a position table (LLaMA): a plain row lookup. */
static void test_embedding_no_wpe(void) {
    int B = 2, T = 5, C = 33, V = 7;
    float *wte = rnd((size_t)V * C, 1.0f), *out = fbuf((size_t)B * T * C);
    int32_t tok[10];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    zt_poison(out, (size_t)B * T * C);
    ZT_OK(ops->embedding_fwd(NULL, out, tok, wte, NULL, B, T, C, NULL));
    int same = 1;
    for (int i = 0; i < B * T; i++)
        same &= bits_equal(out + (size_t)i * C, wte + (size_t)tok[i] * C, C * 4);
    ZT_CHECK(same, "embedding_fwd with wpe NULL is not a row copy");
    free(wte), free(out);
}

int main(void) {
    zt_init("ops_llama");
    ops = zs_ops_cpu();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_attention_gqa();
    test_embedding_no_wpe();
    test_threads();
    return zt_finish();
}

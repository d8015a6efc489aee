/* CPU ops table, backward ops: every gradient is checked against central finite differences,
 * in double precision, of a naive double reference of the forward op on the scalar loss
 * L = sum(out * r) with random r. Gradient buffers are pre-filled with random values and the
 * op must add into them (got - prefill == FD gradient). Also: NULL gradients are skipped,
 * and the column-split reductions are bitwise independent of the thread count. */
#include "backend/ops.h"
#include "opstest.h"

#include <omp.h>
#include <string.h>

static const zs_ops *ops;

/* ---- bias and linear ----------------------------------------------------------------- */

typedef struct {
    int N, IC, OC;
    double *inp, *W, *bias, *r;
} linear_ctx;

static double linear_loss(void *p) {
    linear_ctx *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->bias[o];
            for (int i = 0; i < c->IC; i++)
                s += c->inp[n * c->IC + i] * c->W[o * c->IC + i];
            L += s * c->r[n * c->OC + o];
        }
    return L;
}

static void test_linear_bwd(void) {
    int N = 11, IC = 19, OC = 13;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = fbuf(ni), *W = fbuf(nw), *r = fbuf(no);
    float *dinp = fbuf(ni), *dW = fbuf(nw), *db = fbuf(OC);
    zt_fill_normal(inp, ni, 1.0f), zt_fill_normal(W, nw, 1.0f), zt_fill_normal(r, no, 1.0f);
    zt_fill_normal(dinp, ni, 1.0f), zt_fill_normal(dW, nw, 1.0f), zt_fill_normal(db, OC, 1.0f);
    float *pi = fcopy(dinp, ni), *pw = fcopy(dW, nw), *pb = fcopy(db, OC);
    linear_ctx c = {N, IC, OC, to_double(inp, ni), to_double(W, nw), dbuf(OC), to_double(r, no)};
    for (int o = 0; o < OC; o++)
        c.bias[o] = zt_normal();
    double *gi = dbuf(ni), *gw = dbuf(nw), *gb = dbuf(OC);
    fd_grad(linear_loss, &c, c.inp, ni, gi);
    fd_grad(linear_loss, &c, c.W, nw, gw);
    fd_grad(linear_loss, &c, c.bias, OC, gb);
    /* dout = r. */
    ZT_OK(zs_linear_bwd(ops, NULL, dinp, dW, db, r, inp, 0, W, N, IC, OC));
    /* fp32 sums of at most max(N, OC) = 13 O(1) products: ~1e-6; allow 1e-5 mixed. */
    ZT_CHECK(acc_err(dinp, pi, gi, ni) <= 1e-5, "linear dinp err %g", acc_err(dinp, pi, gi, ni));
    ZT_CHECK(acc_err(dW, pw, gw, nw) <= 1e-5, "linear dW err %g", acc_err(dW, pw, gw, nw));
    ZT_CHECK(acc_err(db, pb, gb, OC) <= 1e-5, "linear dbias err %g", acc_err(db, pb, gb, OC));

    /* Each gradient alone (others NULL) gives the same bits as all three together. */
    float *d1 = fcopy(pi, ni), *d2 = fcopy(pw, nw), *d3 = fcopy(pb, OC);
    ZT_OK(zs_linear_bwd(ops, NULL, d1, NULL, NULL, r, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd(ops, NULL, NULL, d2, NULL, r, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd(ops, NULL, NULL, NULL, d3, r, inp, 0, W, N, IC, OC));
    ZT_CHECK(bits_equal(d1, dinp, ni * 4) && bits_equal(d2, dW, nw * 4) &&
                 bits_equal(d3, db, OC * 4),
             "linear_bwd with NULL gradients differs");
    free(inp), free(W), free(r), free(dinp), free(dW), free(db), free(pi), free(pw), free(pb);
    free(c.inp), free(c.W), free(c.bias), free(c.r), free(gi), free(gw), free(gb);
    free(d1), free(d2), free(d3);
}

static void test_bias_bwd(void) {
    /* OC = 300 spans two column blocks of 256, the second partial. */
    int N = 37, OC = 300;
    size_t no = (size_t)N * OC;
    float *dout = fbuf(no), *db = fbuf(OC);
    zt_fill_normal(dout, no, 1.0f), zt_fill_normal(db, OC, 1.0f);
    float *pb = fcopy(db, OC);
    /* L = sum((x + bias) * dout): d/dbias = column sums of dout, here in double exactly. */
    double *want = dbuf(OC);
    for (int o = 0; o < OC; o++) {
        want[o] = 0;
        for (int n = 0; n < N; n++)
            want[o] += dout[n * OC + o];
    }
    ZT_OK(ops->bias_bwd(NULL, db, dout, N, OC));
    /* fp32 sum of 37 O(1) terms: ~37 2^-24 |terms| < 1e-5. */
    ZT_CHECK(acc_err(db, pb, want, OC) <= 1e-5, "bias_bwd err %g", acc_err(db, pb, want, OC));
    free(dout), free(db), free(pb), free(want);
}

/* ---- embedding ------------------------------------------------------------------------ */

typedef struct {
    int B, T, C;
    const int32_t *tok;
    double *wte, *wpe, *r;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    double L = 0;
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int i = 0; i < c->C; i++)
            L += (c->wte[c->tok[bt] * c->C + i] + c->wpe[(bt % c->T) * c->C + i]) *
                 c->r[bt * c->C + i];
    return L;
}

static void test_embedding_bwd(void) {
    int B = 3, T = 5, C = 70, V = 4; /* V = 4 < B*T: repeated tokens must add up */
    int32_t tok[15];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    tok[0] = tok[1] = 2;
    size_t ne = (size_t)V * C, np = (size_t)T * C, no = (size_t)B * T * C;
    float *r = fbuf(no), *dwte = fbuf(ne), *dwpe = fbuf(np);
    zt_fill_normal(r, no, 1.0f), zt_fill_normal(dwte, ne, 1.0f), zt_fill_normal(dwpe, np, 1.0f);
    float *pe = fcopy(dwte, ne), *pp = fcopy(dwpe, np);
    emb_ctx c = {B, T, C, tok, dbuf(ne), dbuf(np), to_double(r, no)};
    for (size_t i = 0; i < ne; i++)
        c.wte[i] = zt_normal();
    for (size_t i = 0; i < np; i++)
        c.wpe[i] = zt_normal();
    double *ge = dbuf(ne), *gp = dbuf(np);
    fd_grad(emb_loss, &c, c.wte, ne, ge);
    fd_grad(emb_loss, &c, c.wpe, np, gp);
    ZT_OK(ops->embedding_bwd(NULL, dwte, dwpe, r, tok, B, T, C, NULL));
    /* Sums of at most B*T = 15 O(1) terms in fp32: 1e-5. */
    ZT_CHECK(acc_err(dwte, pe, ge, ne) <= 1e-5, "embedding dwte err %g", acc_err(dwte, pe, ge, ne));
    ZT_CHECK(acc_err(dwpe, pp, gp, np) <= 1e-5, "embedding dwpe err %g", acc_err(dwpe, pp, gp, np));
    float *d1 = fcopy(pe, ne), *d2 = fcopy(pp, np);
    ZT_OK(ops->embedding_bwd(NULL, d1, NULL, r, tok, B, T, C, NULL));
    ZT_OK(ops->embedding_bwd(NULL, NULL, d2, r, tok, B, T, C, NULL));
    ZT_CHECK(bits_equal(d1, dwte, ne * 4) && bits_equal(d2, dwpe, np * 4),
             "embedding_bwd with a NULL gradient differs");
    free(r), free(dwte), free(dwpe), free(pe), free(pp), free(c.wte), free(c.wpe), free(c.r);
    free(ge), free(gp), free(d1), free(d2);
}

/* ---- layernorm ------------------------------------------------------------------------ */

typedef struct {
    int N, C;
    double *x, *w, *b, *r;
} ln_ctx;

static double ln_loss(void *p) {
    ln_ctx *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double mu = 0, var = 0;
        for (int i = 0; i < c->C; i++)
            mu += x[i];
        mu /= c->C;
        for (int i = 0; i < c->C; i++)
            var += (x[i] - mu) * (x[i] - mu);
        double rs = 1.0 / sqrt(var / c->C + 1e-5);
        for (int i = 0; i < c->C; i++)
            L += ((x[i] - mu) * rs * c->w[i] + c->b[i]) * c->r[(size_t)n * c->C + i];
    }
    return L;
}

static void test_layernorm_bwd(void) {
    int shapes[2][2] = {{5, 37}, {4, 130}};
    for (int si = 0; si < 2; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)N * C;
        float *x = fbuf(n), *w = fbuf(C), *b = fbuf(C), *r = fbuf(n), *out = fbuf(n);
        float *mean = fbuf(N), *rstd = fbuf(N), *dx = fbuf(n), *dw = fbuf(C), *db = fbuf(C);
        zt_fill_normal(x, n, 1.0f), zt_fill_normal(w, C, 1.0f), zt_fill_normal(b, C, 1.0f);
        for (size_t i = 0; i < n; i++)
            x[i] += 0.5f;
        zt_fill_normal(r, n, 1.0f), zt_fill_normal(dx, n, 1.0f);
        zt_fill_normal(dw, C, 1.0f), zt_fill_normal(db, C, 1.0f);
        float *px = fcopy(dx, n), *pw = fcopy(dw, C), *pb = fcopy(db, C);
        ZT_OK(ops->layernorm_fwd(NULL, out, mean, rstd, x, w, b, N, C));
        ln_ctx c = {N, C, to_double(x, n), to_double(w, C), to_double(b, C), to_double(r, n)};
        double *gx = dbuf(n), *gw = dbuf(C), *gb = dbuf(C);
        fd_grad(ln_loss, &c, c.x, n, gx);
        fd_grad(ln_loss, &c, c.w, C, gw);
        fd_grad(ln_loss, &c, c.b, C, gb);
        ZT_OK(ops->layernorm_bwd(NULL, dx, dw, db, r, x, w, mean, rstd, N, C));
        /* dx combines row means of C products scaled by rstd ~ 1: fp32 error ~ C 2^-24 times
         * the terms' size (~few), 2e-5 at C = 130; dw, db sum N = 5 terms: 1e-5. */
        ZT_CHECK(acc_err(dx, px, gx, n) <= 2e-5, "layernorm dinp C=%d err %g", C,
                 acc_err(dx, px, gx, n));
        ZT_CHECK(acc_err(dw, pw, gw, C) <= 1e-5, "layernorm dw err %g", acc_err(dw, pw, gw, C));
        ZT_CHECK(acc_err(db, pb, gb, C) <= 1e-5, "layernorm db err %g", acc_err(db, pb, gb, C));
        free(x), free(w), free(b), free(r), free(out), free(mean), free(rstd), free(dx);
        free(dw), free(db), free(px), free(pw), free(pb), free(c.x), free(c.w), free(c.b);
        free(c.r), free(gx), free(gw), free(gb);
    }
}

/* ---- gelu ----------------------------------------------------------------------------- */

typedef struct {
    size_t n;
    double *x, *r;
} gelu_ctx;

static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    double L = 0;
    for (size_t i = 0; i < c->n; i++) {
        double x = c->x[i];
        L += 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * c->r[i];
    }
    return L;
}

static void test_gelu_bwd(void) {
    size_t n = 2000;
    float *x = fbuf(n), *r = fbuf(n), *dx = fbuf(n);
    zt_fill_normal(x, n, 2.5f), zt_fill_normal(r, n, 1.0f), zt_fill_normal(dx, n, 1.0f);
    x[0] = 0.0f, x[1] = 12.0f, x[2] = -12.0f;
    float *px = NULL; /* gelu_bwd overwrites dx: nothing to subtract */
    gelu_ctx c = {n, to_double(x, n), to_double(r, n)};
    double *g = dbuf(n);
    /* Each x[i] only affects term i, so one FD pass over all i is exact per element. */
    fd_grad(gelu_loss, &c, c.x, n, g);
    ZT_OK(ops->gelu_bwd(NULL, dx, x, r, n));
    /* gelu' is computed without cancellation (kernels/gelu.h), measured ~2e-7 relative,
     * plus the accumulation's rounding: 2e-6 mixed. */
    ZT_CHECK(acc_err(dx, px, g, n) <= 2e-6, "gelu_bwd err %g", acc_err(dx, px, g, n));
    free(x), free(r), free(dx), free(px), free(c.x), free(c.r), free(g);
}

/* ---- attention ------------------------------------------------------------------------ */

typedef struct {
    int B, T, C, NH;
    double *qkv, *r;
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    double scale = 1.0 / sqrt((double)hs), L = 0;
    double *s = dbuf(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                const double *k = c->qkv + (size_t)b * T * 3 * C + C + h * hs;
                double sum = causal_scores(q, k, 3 * (size_t)C, hs, t, scale, s);
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        o +=
                            s[t2] / sum * c->qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    L += o * c->r[((size_t)b * T + t) * C + h * hs + i];
                }
            }
    free(s);
    return L;
}

static void test_attention_bwd(void) {
    int shapes[2][4] = {{2, 7, 24, 3}, {1, 6, 10, 2}}; /* hs = 8 and hs = 5 */
    for (int si = 0; si < 2; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
        float *qkv = fbuf(nq), *out = fbuf(no), *att = fbuf(na), *datt = fbuf(na);
        float *r = fbuf(no), *dq = fbuf(nq);
        zt_fill_normal(qkv, nq, 1.0f), zt_fill_normal(r, no, 1.0f), zt_fill_normal(dq, nq, 1.0f);
        float *pq = fcopy(dq, nq);
        ZT_OK(ops->attention_fwd(NULL, out, att, qkv, B, T, C, NH, NULL));
        att_ctx c = {B, T, C, NH, to_double(qkv, nq), to_double(r, no)};
        double *g = dbuf(nq);
        fd_grad(att_loss, &c, c.qkv, nq, g);
        zt_poison(datt, na); /* scratch: whatever is in it must not matter */
        ZT_OK(ops->attention_bwd(NULL, dq, datt, r, qkv, att, B, T, C, NH, NULL));
        /* fp32 dots of hs terms and sums over T rows of O(1) values: 2e-5 mixed. */
        ZT_CHECK(acc_err(dq, pq, g, nq) <= 2e-5, "attention dqkv (T=%d hs=%d) err %g", T, C / NH,
                 acc_err(dq, pq, g, nq));
        free(qkv), free(out), free(att), free(datt), free(r), free(dq), free(pq), free(c.qkv);
        free(c.r), free(g);
    }
}

/* ---- softmax + cross-entropy gradient ------------------------------------------------- */

typedef struct {
    int N, V, Vp;
    const int32_t *tg;
    double *x, dloss;
} xent_ctx;

static double xent_loss(void *p) {
    xent_ctx *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        if (c->tg[n] < 0) continue;
        const double *x = c->x + (size_t)n * c->Vp;
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < c->V; i++)
            mx = fmax(mx, x[i]);
        for (int i = 0; i < c->V; i++)
            sum += exp(x[i] - mx);
        L += c->dloss * (log(sum) + mx - x[c->tg[n]]);
    }
    return L;
}

static void test_softmax_xent_bwd(void) {
    int N = 4, V = 37, Vp = 48;
    int32_t tg[4] = {3, -1, 36, 0};
    size_t n = (size_t)N * Vp;
    float *lg = fbuf(n), *dl = fbuf(n), *ls = fbuf(N);
    zt_fill_normal(lg, n, 2.0f);
    xent_ctx c = {N, V, Vp, tg, to_double(lg, n), 0.3};
    double *g = dbuf(n);
    /* d (dloss * sum of losses) / d logits; padded columns and the masked row get 0. */
    fd_grad(xent_loss, &c, c.x, n, g);
    zt_poison(dl, n);
    ZT_OK(ops->softmax_xent(NULL, ls, dl, lg, tg, N, V, Vp, 0.3f));
    /* dloss * (p - onehot) with p <= 1 in fp32: 1e-6 absolute. */
    ZT_CHECK(zt_max_err(dl, g, n) <= 1e-6, "softmax_xent grad err %g", zt_max_err(dl, g, n));
    free(lg), free(dl), free(ls), free(c.x), free(g);
}

/* ---- thread-count independence of the reductions ------------------------------------- */

static void test_threads_bwd(void) {
    int N = 256, C = 768, OC = 2304, B = 4, T = 64, V = 50, AC = 64, NH = 4;
    size_t nl = (size_t)N * C, nb = (size_t)N * OC, nq = (size_t)B * T * 3 * AC,
           no = (size_t)B * T * AC, na = (size_t)B * NH * T * T;
    float *x = fbuf(nl), *w = fbuf(C), *b = fbuf(C), *dout = fbuf(nl), *mean = fbuf(N),
          *rstd = fbuf(N), *ln = fbuf(nl), *db_in = fbuf(nb), *qkv = fbuf(nq), *ao = fbuf(no),
          *att = fbuf(na), *datt = fbuf(na), *ar = fbuf(no);
    int32_t *tok = zt_malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    zt_fill_normal(x, nl, 1.0f), zt_fill_normal(w, C, 1.0f), zt_fill_normal(b, C, 1.0f);
    zt_fill_normal(dout, nl, 1.0f), zt_fill_normal(db_in, nb, 1.0f);
    zt_fill_normal(qkv, nq, 1.0f), zt_fill_normal(ar, no, 1.0f);
    ZT_OK(ops->layernorm_fwd(NULL, ln, mean, rstd, x, w, b, N, C));
    ZT_OK(ops->attention_fwd(NULL, ao, att, qkv, B, T, AC, NH, NULL));
    float *dx[2], *dw[2], *dbb[2], *dbias[2], *dwte[2], *dwpe[2], *dq[2];
    int nt = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        dx[k] = fbuf(nl), dw[k] = fbuf(C), dbb[k] = fbuf(C), dbias[k] = fbuf(OC);
        dwte[k] = fbuf((size_t)V * C), dwpe[k] = fbuf((size_t)T * C), dq[k] = fbuf(nq);
        memset(dx[k], 0, nl * 4), memset(dw[k], 0, C * 4), memset(dbb[k], 0, C * 4);
        memset(dbias[k], 0, OC * 4), memset(dwte[k], 0, (size_t)V * C * 4);
        memset(dwpe[k], 0, (size_t)T * C * 4), memset(dq[k], 0, nq * 4);
        omp_set_num_threads(k == 0 ? 1 : 3);
        ZT_OK(ops->layernorm_bwd(NULL, dx[k], dw[k], dbb[k], dout, x, w, mean, rstd, N, C));
        ZT_OK(ops->bias_bwd(NULL, dbias[k], db_in, N, OC));
        ZT_OK(ops->embedding_bwd(NULL, dwte[k], dwpe[k], dout, tok, N / T, T, C, NULL));
        ZT_OK(ops->attention_bwd(NULL, dq[k], datt, ar, qkv, att, B, T, AC, NH, NULL));
    }
    omp_set_num_threads(nt);
    ZT_CHECK(bits_equal(dx[0], dx[1], nl * 4) && bits_equal(dw[0], dw[1], C * 4) &&
                 bits_equal(dbb[0], dbb[1], C * 4),
             "layernorm_bwd depends on thread count");
    ZT_CHECK(bits_equal(dbias[0], dbias[1], OC * 4), "bias_bwd depends on thread count");
    ZT_CHECK(bits_equal(dwte[0], dwte[1], (size_t)V * C * 4) &&
                 bits_equal(dwpe[0], dwpe[1], (size_t)T * C * 4),
             "embedding_bwd depends on thread count");
    ZT_CHECK(bits_equal(dq[0], dq[1], nq * 4), "attention_bwd depends on thread count");
    for (int k = 0; k < 2; k++)
        free(dx[k]), free(dw[k]), free(dbb[k]), free(dbias[k]), free(dwte[k]), free(dwpe[k]),
            free(dq[k]);
    free(x), free(w), free(b), free(dout), free(mean), free(rstd), free(ln), free(db_in);
    free(qkv), free(ao), free(att), free(datt), free(ar), free(tok);
}

int main(void) {
    zt_init("ops_grad");
    ops = zs_ops_cpu();
    test_linear_bwd();
    test_bias_bwd();
    test_embedding_bwd();
    test_layernorm_bwd();
    test_gelu_bwd();
    test_attention_bwd();
    test_softmax_xent_bwd();
    test_threads_bwd();
    return zt_finish();
}

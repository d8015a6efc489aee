/* CPU ops table, forward ops: each against a naive double-precision reference on fresh
 * random inputs, outputs poisoned (NaN) before the call so an unwritten element fails; gemm
 * in all four transpose combinations with padded leading dimensions; the row-major linear
 * wrapper; and bitwise independence from the thread count. The optimizer's, casts, sums,
 * init and the token draw: test_ops_state.c. */
#include "backend/cpu/cpu.h"
#include "backend/ops.h"
#include "opstest.h"

#include <omp.h>
#include <string.h>

/* fp32 unit roundoff. */
#define U32 (1.0 / 16777216.0)

static const zs_ops *ops;

/* Number of i with |got[i] - ref[i]| > bound[i] (NaN counts), for per-element error bounds. */
static size_t count_over(const float *got, const double *ref, const double *bound, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= bound[i])) bad++;
    return bad;
}

/* ---- gemm ---------------------------------------------------------------------------- */

/* gemm in one arithmetic: the reference multiplies the rounded inputs in double, and the fp32
 * accumulation bound applies on top (an unrounded input would miss it by ~2^-9 relative). */
static void check_gemm(zs_gemm_math math, int ta, int tb, float alpha, float beta) {
    const zs_ops *t = ops->with_math(math);
    int m = 37, n = 29, k = 53;
    /* Leading dimensions larger than the minimum, so a swapped ld or m/k shows. */
    int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 5, ldc = m + 7;
    size_t na = (size_t)lda * (ta ? m : k), nb = (size_t)ldb * (tb ? k : n), nc = (size_t)ldc * n;
    float *A = fbuf(na), *B = fbuf(nb), *C = fbuf(nc), *C0 = fbuf(nc);
    double *ref = dbuf(nc), *bound = dbuf(nc);
    zt_fill_normal(A, na, 1.0f);
    zt_fill_normal(B, nb, 1.0f);
    zt_fill_normal(C0, nc, 1.0f);
    if (beta == 0.0f) zt_poison(C0, nc); /* beta = 0: C must not be read (BLAS convention) */
    memcpy(C, C0, nc * sizeof(float));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            size_t ci = i + (size_t)j * ldc;
            if (i >= m) { /* rows between m and ldc are not part of C: untouched */
                ref[ci] = C0[ci];
                bound[ci] = 0;
                continue;
            }
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                double a =
                    zt_gemm_round((int)math, ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda]);
                double b =
                    zt_gemm_round((int)math, tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb]);
                s += a * b;
                sa += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[ci];
            ref[ci] = alpha * s + beta * c0;
            /* Standard fp32 dot-product bound, |err| <= gamma_k sum|a b| (any summation order
             * or FMA use), plus the alpha/beta roundings, with a factor 2 of margin. */
            bound[ci] = 2.0 * ((k + 2) * U32 * fabs(alpha) * sa + 2 * U32 * fabs(beta * c0));
        }
    ZT_CHECK(t && t->gemm_math == math && strcmp(t->name, ops->name) == 0,
             "with_math(%d) gave another table", (int)math);
    ZT_OK(t->gemm(NULL, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
    size_t bad = 0;
    for (size_t i = 0; i < nc; i++) {
        int pad = (int)(i % ldc) >= m;
        if (pad ? !bits_equal(&C[i], &C0[i], sizeof(float))
                : !(fabs((double)C[i] - ref[i]) <= bound[i]))
            bad++;
    }
    ZT_CHECK(bad == 0, "gemm math=%d ta=%d tb=%d alpha=%g beta=%g: %zu elements out of bound",
             (int)math, ta, tb, alpha, beta, bad);
    free(A), free(B), free(C), free(C0), free(ref), free(bound);
}

/* op(X)'s rounded copy, column-major rows x cols, and its absolute values. */
static void round_op(zs_gemm_math math, const float *X, int ld, int trans, int rows, int cols,
                     float *r, float *abs_r) {
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) {
            float v = trans ? X[j + (size_t)i * ld] : X[i + (size_t)j * ld];
            r[i + (size_t)j * rows] = (float)zt_gemm_round((int)math, v);
            abs_r[i + (size_t)j * rows] = fabsf(r[i + (size_t)j * rows]);
        }
}

static void check_gemm_panels(zs_gemm_math math, int m, int n, int k, int trans) {
    int lda = trans ? k : m, ldb = trans ? n : k;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = fbuf(na), *B = fbuf(nb), *C = fbuf(nc), *Ar = fbuf(na), *Aa = fbuf(na),
          *Br = fbuf(nb), *Ba = fbuf(nb), *R = fbuf(nc), *S = fbuf(nc);
    zt_fill_normal(A, na, 1.0f);
    zt_fill_normal(B, nb, 1.0f);
    zt_fill_normal(C, nc, 1.0f);
    round_op(math, A, lda, trans, m, k, Ar, Aa);
    round_op(math, B, ldb, trans, k, n, Br, Ba);
    memcpy(R, C, nc * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        S[i] = fabsf(C[i]);
    ZT_OK(ops->gemm(NULL, 0, 0, m, n, k, 1.0f, Ar, m, Br, k, -1.0f, R, m));
    ZT_OK(ops->gemm(NULL, 0, 0, m, n, k, 1.0f, Aa, m, Ba, k, 1.0f, S, m));
    ZT_OK(
        ops->with_math(math)->gemm(NULL, trans, trans, m, n, k, 1.0f, A, lda, B, ldb, -1.0f, C, m));
    size_t bad = 0;
    for (size_t i = 0; i < nc; i++)
        if (!(fabs((double)C[i] - R[i]) <= 4.0 * (k + 2) * U32 * S[i])) bad++;
    ZT_CHECK(bad == 0, "gemm math=%d %dx%dx%d (panels): %zu elements out of bound", (int)math, m, n,
             k, bad);
    free(A), free(B), free(C), free(Ar), free(Aa), free(Br), free(Ba), free(R), free(S);
}

static void test_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int math = ZS_MATH_FP32; math <= ZS_MATH_BF16; math++) {
                check_gemm((zs_gemm_math)math, ta, tb, 0.75f, -0.5f);
                check_gemm((zs_gemm_math)math, ta, tb, 1.0f, 0.0f);
            }
        }
    ZT_CHECK(ops->gemm_math == ZS_MATH_FP32, "the default CPU table's gemm is fp32");
    /* Shapes past the rounded modes' panels (panels made small: 2048 floats, so 512 rows or
     * columns, and 4096 of k): several panels of m and n, one of m across panels of n, and of
     * k; each against sgemm of the whole rounded operands, within the fp32 bound of both. */
    zs_cpu_gemm_panel(2048);
    check_gemm_panels(ZS_MATH_TF32, 520, 530, 40, 0);
    check_gemm_panels(ZS_MATH_BF16, 37, 530, 40, 1);
    check_gemm_panels(ZS_MATH_BF16, 7, 5, 4200, 1);
    zs_cpu_gemm_panel(0);
    /* Rounding keeps infinities and NaN what they are (a NaN must not carry into infinity),
     * and rounds the largest finite values up to infinity only where the format overflows. */
    for (int math = ZS_MATH_TF32; math <= ZS_MATH_BF16; math++) {
        float a[4] = {INFINITY, NAN, -INFINITY, 3.0e38f}, one = 1.0f, c[4];
        zs_status st = ops->with_math((zs_gemm_math)math)
                           ->gemm(NULL, 0, 0, 4, 1, 1, 1.0f, a, 4, &one, 1, 0.0f, c, 4);
        ZT_CHECK(st == ZS_OK && isinf(c[0]) && c[0] > 0 && isnan(c[1]) && isinf(c[2]) && c[2] < 0 &&
                     isfinite(c[3]),
                 "math=%d specials: %g %g %g %g", math, c[0], c[1], c[2], c[3]);
        float nan_low = zs_bits_f32(0x7f800001u); /* a NaN whose payload rounding would lose */
        st = ops->with_math((zs_gemm_math)math)
                 ->gemm(NULL, 0, 0, 1, 1, 1, 1.0f, &nan_low, 1, &one, 1, 0.0f, c, 1);
        ZT_CHECK(st == ZS_OK && isnan(c[0]), "math=%d: NaN with a low payload became %g", math,
                 c[0]);
    }
    /* Bad arguments are reported, not passed to BLAS (which would print and carry on). */
    float x[16] = {0};
    ZT_CHECK(ops->gemm(NULL, 0, 0, 4, 2, 2, 1.0f, x, 3, x, 2, 0.0f, x, 4) == ZS_ERR_INVALID,
             "lda < m rejected");
    ZT_CHECK(ops->gemm(NULL, 1, 0, 2, 2, 4, 1.0f, x, 3, x, 4, 0.0f, x, 2) == ZS_ERR_INVALID,
             "transa: lda < k rejected");
    ZT_CHECK(ops->gemm(NULL, 2, 0, 2, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2) == ZS_ERR_INVALID,
             "trans flag 2 rejected");
    ZT_CHECK(ops->gemm(NULL, 0, 0, 0, 2, 2, 1.0f, x, 1, x, 2, 0.0f, x, 1) == ZS_OK, "m=0 no-op");
}

/* ---- linear (row-major wrapper) ------------------------------------------------------ */

static void test_linear_fwd(void) {
    int N = 9, IC = 23, OC = 17;
    float *inp = fbuf((size_t)N * IC), *W = fbuf((size_t)OC * IC), *bias = fbuf(OC),
          *out = fbuf((size_t)N * OC);
    double *ref = dbuf((size_t)N * OC), *bound = dbuf((size_t)N * OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        zt_fill_normal(inp, (size_t)N * IC, 1.0f);
        zt_fill_normal(W, (size_t)OC * IC, 1.0f);
        zt_fill_normal(bias, OC, 1.0f);
        zt_poison(out, (size_t)N * OC);
        for (int r = 0; r < N; r++)
            for (int o = 0; o < OC; o++) {
                double s = with_bias ? bias[o] : 0.0, sa = fabs(s);
                for (int i = 0; i < IC; i++) {
                    s += (double)inp[r * IC + i] * W[o * IC + i];
                    sa += fabs((double)inp[r * IC + i] * W[o * IC + i]);
                }
                ref[r * OC + o] = s;
                bound[r * OC + o] = 2.0 * (IC + 2) * U32 * sa; /* gamma_k bound, x2 margin */
            }
        ZT_OK(zs_linear_fwd(ops, NULL, out, inp, 0, W, with_bias ? bias : NULL, N, IC, OC));
        size_t bad = count_over(out, ref, bound, (size_t)N * OC);
        ZT_CHECK(bad == 0, "linear_fwd bias=%d: %zu elements out of bound", with_bias, bad);
    }
    ZT_CHECK(zs_linear_fwd(ops, NULL, out, inp, 0, W, NULL, -1, IC, OC) == ZS_ERR_INVALID,
             "negative N rejected");
    free(inp), free(W), free(bias), free(out), free(ref), free(bound);
}

/* ---- bias, embedding, residual, axpy, scale, fill, copy ------------------------------- */

static void test_bias_embedding(void) {
    int N = 13, OC = 300;
    float *out = fbuf((size_t)N * OC), *out0 = fbuf((size_t)N * OC), *bias = fbuf(OC);
    double *ref = dbuf((size_t)N * OC);
    zt_fill_normal(out0, (size_t)N * OC, 1.0f);
    zt_fill_normal(bias, OC, 1.0f);
    memcpy(out, out0, (size_t)N * OC * sizeof(float));
    for (int i = 0; i < N * OC; i++)
        ref[i] = (double)out0[i] + bias[i % OC];
    ZT_OK(ops->bias_fwd(NULL, out, bias, N, OC));
    /* One fp32 addition per element: error <= 2^-24 relative. */
    ZT_CHECK(zt_max_err(out, ref, (size_t)N * OC) <= U32, "bias_fwd err %g",
             zt_max_err(out, ref, (size_t)N * OC));

    int B = 3, T = 7, C = 37, V = 11;
    int32_t tokens[21];
    float *wte = fbuf((size_t)V * C), *wpe = fbuf((size_t)T * C), *emb = fbuf((size_t)B * T * C);
    double *eref = dbuf((size_t)B * T * C);
    for (int i = 0; i < B * T; i++)
        tokens[i] = (int32_t)zt_uniform(0, V);
    tokens[0] = V - 1; /* the last row is reachable */
    zt_fill_normal(wte, (size_t)V * C, 1.0f);
    zt_fill_normal(wpe, (size_t)T * C, 1.0f);
    zt_poison(emb, (size_t)B * T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++)
            eref[bt * C + c] = (double)wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
    ZT_OK(ops->embedding_fwd(NULL, emb, tokens, wte, wpe, B, T, C, NULL));
    ZT_CHECK(zt_max_err(emb, eref, (size_t)B * T * C) <= U32, "embedding_fwd err %g",
             zt_max_err(emb, eref, (size_t)B * T * C));
    free(out), free(out0), free(bias), free(ref), free(wte), free(wpe), free(emb), free(eref);
}

static void test_elementwise(void) {
    /* Sizes on both sides of the threading threshold. */
    size_t sizes[2] = {1001, 100003};
    for (int si = 0; si < 2; si++) {
        size_t n = sizes[si];
        float *a = fbuf(n), *b = fbuf(n), *out = fbuf(n), *y = fbuf(n);
        double *ref = dbuf(n);
        zt_fill_normal(a, n, 1.0f);
        zt_fill_normal(b, n, 1.0f);
        /* Every op below is one or two fp32 roundings per element. */
        zt_poison(out, n);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)a[i] + b[i];
        ZT_OK(ops->residual_fwd(NULL, out, a, b, n));
        ZT_CHECK(zt_max_err(out, ref, n) <= U32, "residual_fwd n=%zu", n);
        memcpy(y, a, n * sizeof(float)); /* out aliasing a, then b */
        ZT_OK(ops->residual_fwd(NULL, y, y, b, n));
        ZT_CHECK(bits_equal(y, out, n * sizeof(float)), "residual_fwd out == a");
        memcpy(y, b, n * sizeof(float));
        ZT_OK(ops->residual_fwd(NULL, y, a, y, n));
        ZT_CHECK(bits_equal(y, out, n * sizeof(float)), "residual_fwd out == b");

        zt_fill_normal(y, n, 1.0f);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)y[i] + (double)-0.375f * a[i];
        ZT_OK(ops->axpy(NULL, y, -0.375f, a, n));
        ZT_CHECK(zt_max_err(y, ref, n) <= 2 * U32, "axpy n=%zu err %g", n, zt_max_err(y, ref, n));

        for (size_t i = 0; i < n; i++)
            ref[i] = (double)a[i] * 1.7f;
        memcpy(y, a, n * sizeof(float));
        ZT_OK(ops->scale(NULL, y, 1.7f, n));
        ZT_CHECK(zt_max_err(y, ref, n) <= U32, "scale n=%zu", n);

        zt_poison(y, n);
        ZT_OK(ops->fill(NULL, y, -2.5f, n));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += y[i] != -2.5f;
        ZT_CHECK(bad == 0, "fill n=%zu: %zu wrong", n, bad);

        zt_poison(y, n);
        ZT_OK(ops->copy(NULL, y, a, n * sizeof(float)));
        ZT_CHECK(bits_equal(y, a, n * sizeof(float)), "copy n=%zu", n);
        free(a), free(b), free(out), free(y), free(ref);
    }
}

/* ---- layernorm, gelu ------------------------------------------------------------------ */

static void test_layernorm_fwd(void) {
    int shapes[2][2] = {{7, 67}, {64, 768}};
    for (int si = 0; si < 2; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t n = (size_t)N * C;
        float *x = fbuf(n), *w = fbuf(C), *b = fbuf(C), *out = fbuf(n), *mean = fbuf(N),
              *rstd = fbuf(N);
        double *ref = dbuf(n), *rm = dbuf(N), *rr = dbuf(N);
        zt_fill_normal(x, n, 2.0f);
        for (size_t i = 0; i < n; i++)
            x[i] += 3.0f; /* an offset mean exercises centring */
        zt_fill_normal(w, C, 1.0f);
        zt_fill_normal(b, C, 1.0f);
        zt_poison(out, n), zt_poison(mean, N), zt_poison(rstd, N);
        for (int r = 0; r < N; r++) {
            double mu = 0, var = 0;
            for (int c = 0; c < C; c++)
                mu += x[r * C + c];
            mu /= C;
            for (int c = 0; c < C; c++)
                var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
            double rs = 1.0 / sqrt(var / C + 1e-5);
            rm[r] = mu, rr[r] = rs;
            for (int c = 0; c < C; c++)
                ref[r * C + c] = (x[r * C + c] - mu) * rs * w[c] + b[c];
        }
        ZT_OK(ops->layernorm_fwd(NULL, out, mean, rstd, x, w, b, N, C));
        /* fp32 row sums over C in 8 lanes: relative error ~ (C/8) 2^-24 ~ 6e-6 at C = 768 on
         * mean and variance; out = xhat w + b with |xhat w| up to ~10: allow 2e-5 mixed. */
        ZT_CHECK(zt_max_err(out, ref, n) <= 2e-5, "layernorm out C=%d err %g", C,
                 zt_max_err(out, ref, n));
        ZT_CHECK(zt_max_err(mean, rm, N) <= 1e-5, "layernorm mean err %g", zt_max_err(mean, rm, N));
        ZT_CHECK(zt_max_err(rstd, rr, N) <= 1e-5, "layernorm rstd err %g", zt_max_err(rstd, rr, N));
        free(x), free(w), free(b), free(out), free(mean), free(rstd), free(ref), free(rm), free(rr);
    }
}

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_gelu_fwd(void) {
    size_t n = 70001;
    float *x = fbuf(n), *out = fbuf(n);
    double *ref = dbuf(n);
    zt_fill_normal(x, n, 3.0f);
    x[0] = 0.0f, x[1] = 30.0f, x[2] = -30.0f, x[3] = 1e-6f, x[4] = -1e-6f;
    zt_poison(out, n);
    for (size_t i = 0; i < n; i++)
        ref[i] = gelu_ref(x[i]);
    ZT_OK(ops->gelu_fwd(NULL, out, x, n));
    /* gelu goes through exp(-2|u|) without cancellation (kernels/gelu.h): a few fp32
     * roundings plus exp's ~2 ulp, measured ~1.3e-7 relative; allow 1e-6 mixed abs/rel. */
    ZT_CHECK(zt_max_err(out, ref, n) <= 1e-6, "gelu_fwd err %g", zt_max_err(out, ref, n));
    ZT_OK(ops->gelu_fwd(NULL, x, x, n)); /* in place gives the same bits */
    ZT_CHECK(bits_equal(x, out, n * sizeof(float)), "gelu_fwd in place");
    free(x), free(out), free(ref);
}

/* ---- attention ------------------------------------------------------------------------ */

static void attention_ref(double *out, double *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *s = dbuf(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += (double)q[i] * k[i];
                    s[t2] = d * scale;
                    mx = fmax(mx, s[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++)
                    sum += (s[t2] = exp(s[t2] - mx));
                double *arow = att + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 < T; t2++)
                    arow[t2] = t2 <= t ? s[t2] / sum : 0.0;
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        o += arow[t2] * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    out[((size_t)b * T + t) * C + h * hs + i] = o;
                }
            }
    free(s);
}

static void test_attention_fwd(void) {
    /* hs = 8 (full lanes) and hs = 5 (tails only). */
    int shapes[2][4] = {{2, 13, 32, 4}, {3, 9, 10, 2}};
    for (int si = 0; si < 2; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
        float *qkv = fbuf(nq), *out = fbuf(no), *att = fbuf(na);
        double *ro = dbuf(no), *ra = dbuf(na);
        zt_fill_normal(qkv, nq, 1.5f);
        zt_poison(out, no), zt_poison(att, na);
        attention_ref(ro, ra, qkv, B, T, C, NH);
        ZT_OK(ops->attention_fwd(NULL, out, att, qkv, B, T, C, NH, NULL));
        /* Scores are fp32 dots of hs terms (~hs 2^-24 relative), exp to ~2 ulp, rows of at
         * most T probabilities: 1e-5 mixed on both. */
        ZT_CHECK(zt_max_err(out, ro, no) <= 1e-5, "attention out err %g", zt_max_err(out, ro, no));
        ZT_CHECK(zt_max_err(att, ra, na) <= 1e-5, "attention att err %g", zt_max_err(att, ra, na));
        size_t nz = 0;
        for (int bh = 0; bh < B * NH; bh++)
            for (int t = 0; t < T; t++)
                for (int t2 = t + 1; t2 < T; t2++)
                    nz += att[((size_t)bh * T + t) * T + t2] != 0;
        ZT_CHECK(nz == 0, "attention: %zu nonzero probabilities above the diagonal", nz);
        free(qkv), free(out), free(att), free(ro), free(ra);
    }
    float x[4];
    ZT_CHECK(ops->attention_fwd(NULL, x, x, x, 1, 1, 10, 3, NULL) == ZS_ERR_INVALID,
             "C %% NH rejected");
}

/* ---- softmax + cross-entropy ---------------------------------------------------------- */

static void test_softmax_xent(void) {
    int N = 6, V = 1003, Vp = 1024;
    size_t n = (size_t)N * Vp;
    float dloss = 0.125f;
    int32_t targets[6] = {0, 17, -1, 1002, 500, 3};
    float *logits = fbuf(n), *dl = fbuf(n), *losses = fbuf(N), *l2 = fbuf(N), *inpl = fbuf(n);
    double *rl = dbuf(N), *rd = dbuf(n);
    zt_fill_normal(logits, n, 3.0f);
    for (int c = 0; c < V; c++)
        logits[4 * Vp + c] += 80.0f; /* large logits: needs max shift */
    for (int r = 0; r < N; r++)
        for (int c = V; c < Vp; c++)
            logits[(size_t)r * Vp + c] = NAN; /* padding is ignored */
    for (int r = 0; r < N; r++) {
        const float *x = logits + (size_t)r * Vp;
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < V; c++)
            mx = fmax(mx, x[c]);
        for (int c = 0; c < V; c++)
            sum += exp(x[c] - mx);
        int tg = targets[r];
        rl[r] = tg < 0 ? 0.0 : log(sum) + mx - x[tg];
        for (int c = 0; c < Vp; c++)
            rd[(size_t)r * Vp + c] =
                (tg < 0 || c >= V) ? 0.0 : dloss * (exp(x[c] - mx) / sum - (c == tg));
    }
    zt_poison(dl, n), zt_poison(losses, N);
    ZT_OK(ops->softmax_xent(NULL, losses, dl, logits, targets, N, V, Vp, dloss));
    /* Losses are log-sum-exp of fp32 terms summed in 8 lanes: absolute error ~ (V/8) 2^-24
     * from the sum plus the exp's 2 ulp, well under 1e-5 for losses of size ~10. Gradients
     * are dloss * p with p <= 1: 1e-6 absolute. */
    ZT_CHECK(zt_max_err(losses, rl, N) <= 1e-5, "softmax_xent loss err %g",
             zt_max_err(losses, rl, N));
    ZT_CHECK(zt_max_err(dl, rd, n) <= 1e-6, "softmax_xent dlogits err %g", zt_max_err(dl, rd, n));
    size_t nz = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < Vp; c++)
            if ((targets[r] < 0 || c >= V) && dl[(size_t)r * Vp + c] != 0.0f) nz++;
    ZT_CHECK(nz == 0 && losses[2] == 0.0f, "padded columns / masked row not exactly 0 (%zu)", nz);

    /* Without gradient: the same losses, bit for bit. */
    zt_poison(l2, N);
    ZT_OK(ops->softmax_xent(NULL, l2, NULL, logits, targets, N, V, Vp, dloss));
    ZT_CHECK(bits_equal(l2, losses, N * sizeof(float)), "losses without dlogits differ");
    /* In place (dlogits == logits): the same losses and gradient, bit for bit. */
    memcpy(inpl, logits, n * sizeof(float));
    zt_poison(l2, N);
    ZT_OK(ops->softmax_xent(NULL, l2, inpl, inpl, targets, N, V, Vp, dloss));
    ZT_CHECK(bits_equal(l2, losses, N * sizeof(float)), "in-place losses differ");
    ZT_CHECK(bits_equal(inpl, dl, n * sizeof(float)), "in-place dlogits differ");

    int32_t bad_t[6] = {0, 0, 0, V, 0, 0};
    ZT_CHECK(ops->softmax_xent(NULL, l2, NULL, logits, bad_t, N, V, Vp, dloss) == ZS_ERR_INVALID,
             "target >= V rejected");
    free(logits), free(dl), free(losses), free(l2), free(inpl), free(rl), free(rd);
}

/* ---- thread-count independence of the row-parallel forward ops ----------------------- */

static void test_threads_fwd(void) {
    int N = 64, C = 768, B = 2, T = 32, AC = 64, NH = 4, V = 8000, Vp = 8192, NS = 8;
    size_t nl = (size_t)N * C, nq = (size_t)B * T * 3 * AC, no = (size_t)B * T * AC,
           na = (size_t)B * NH * T * T, ns = (size_t)NS * Vp;
    float *x = fbuf(nl), *w = fbuf(C), *b = fbuf(C), *qkv = fbuf(nq), *lg = fbuf(ns);
    float *o[2], *mu[2], *rs[2], *ao[2], *aa[2], *ls[2], *dl[2];
    int32_t tg[8];
    for (int i = 0; i < NS; i++)
        tg[i] = (int32_t)zt_uniform(0, V);
    zt_fill_normal(x, nl, 1.0f), zt_fill_normal(w, C, 1.0f), zt_fill_normal(b, C, 1.0f);
    zt_fill_normal(qkv, nq, 1.0f), zt_fill_normal(lg, ns, 2.0f);
    int nt = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        o[k] = fbuf(nl), mu[k] = fbuf(N), rs[k] = fbuf(N), ao[k] = fbuf(no), aa[k] = fbuf(na);
        ls[k] = fbuf(NS), dl[k] = fbuf(ns);
        omp_set_num_threads(k == 0 ? 1 : 3);
        ZT_OK(ops->layernorm_fwd(NULL, o[k], mu[k], rs[k], x, w, b, N, C));
        ZT_OK(ops->attention_fwd(NULL, ao[k], aa[k], qkv, B, T, AC, NH, NULL));
        ZT_OK(ops->softmax_xent(NULL, ls[k], dl[k], lg, tg, NS, V, Vp, 1.0f / NS));
    }
    omp_set_num_threads(nt);
    ZT_CHECK(bits_equal(o[0], o[1], nl * 4) && bits_equal(mu[0], mu[1], N * 4) &&
                 bits_equal(rs[0], rs[1], N * 4),
             "layernorm_fwd depends on thread count");
    ZT_CHECK(bits_equal(ao[0], ao[1], no * 4) && bits_equal(aa[0], aa[1], na * 4),
             "attention_fwd depends on thread count");
    ZT_CHECK(bits_equal(ls[0], ls[1], NS * 4) && bits_equal(dl[0], dl[1], ns * 4),
             "softmax_xent depends on thread count");
    for (int k = 0; k < 2; k++)
        free(o[k]), free(mu[k]), free(rs[k]), free(ao[k]), free(aa[k]), free(ls[k]), free(dl[k]);
    free(x), free(w), free(b), free(qkv), free(lg);
}

int main(void) {
    zt_init("ops");
    ops = zs_ops_cpu();
    ZT_REQUIRE(ops != NULL && ops->name != NULL, "no CPU ops table");
    test_gemm();
    test_linear_fwd();
    test_bias_embedding();
    test_elementwise();
    test_layernorm_fwd();
    test_gelu_fwd();
    test_attention_fwd();
    test_softmax_xent();
    test_threads_fwd();
    ZT_OK(ops->sync(NULL));
    return zt_finish();
}

/* CPU ops table, forward ops: each against a naive double-precision reference on fresh
 * random inputs, outputs poisoned (NaN) before the call so an unwritten element fails; gemm
 * in all four transpose combinations with padded leading dimensions; the row-major linear
 * wrapper; casts, sumsq, init and AdamW; and bitwise independence from the thread count. */
#include "backend/cpu/cpu.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "core/philox.h"
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

/* ---- optimizer, casts, sumsq, init ---------------------------------------------------- */

static void test_adamw(void) {
    size_t n = 40001;
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    double *rp = dbuf(n), *rm = dbuf(n), *rv = dbuf(n);
    zt_fill_normal(p, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i], rm[i] = 0, rv[i] = 0, m[i] = 0, v[i] = 0;
    for (int t = 1; t <= 3; t++) {
        zt_fill_normal(g, n, 1.0f);
        if (t == 2) g[0] = 0.0f, m[0] = 0.0f, v[0] = 0.0f, rm[0] = 0, rv[0] = 0; /* vhat = 0 */
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            double gg = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gg;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gg * gg;
            double mh = rm[i] / bc1, vh = rv[i] / bc2;
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
        ZT_OK(ops->adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, gs, t));
        /* A handful of fp32 roundings per step on O(1) values; the ratio m/sqrt(v) is O(1)
         * and scaled by lr, so the parameter error stays near 2^-24 |p|: 2e-6 mixed. */
        ZT_CHECK(zt_max_err(p, rp, n) <= 2e-6, "adamw t=%d param err %g", t, zt_max_err(p, rp, n));
        ZT_CHECK(zt_max_err(m, rm, n) <= 2e-6, "adamw t=%d m err %g", t, zt_max_err(m, rm, n));
        ZT_CHECK(zt_max_err(v, rv, n) <= 2e-6, "adamw t=%d v err %g", t, zt_max_err(v, rv, n));
    }
    ZT_CHECK(ops->adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, gs, 0) == ZS_ERR_INVALID,
             "t = 0 rejected");
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

/* Round-to-nearest-even to bf16 computed independently: pick the nearer of the two
 * truncation neighbours in double, ties to the even one. */
static uint16_t bf16_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return 0;
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dlo = fabs((double)f - flo);
    /* Above the largest bf16, "hi" is infinity: f rounds there from the midpoint
     * (2 - 2^-8) 2^127 up (the midpoint itself ties to even, which is infinity). */
    double dhi = isinf(fhi)
                     ? (fabs((double)f) >= (2.0 - 1.0 / 256) * ldexp(1.0, 127) ? 0 : INFINITY)
                     : fabs((double)fhi - f);
    if (isinf(flo)) return (uint16_t)(lo >> 16);
    if (dlo < dhi) return (uint16_t)(lo >> 16);
    if (dhi < dlo) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static void test_cast(void) {
    size_t n = 50000;
    float *x = fbuf(n), *back = fbuf(n);
    zs_bf16 *h = zt_malloc(n * sizeof(zs_bf16));
    zt_fill_normal(x, n, 100.0f);
    /* Exact ties (low half 0x8000) with odd and even kept bits, huge values, inf, NaN. */
    uint32_t special[8] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu,
                           0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00001u};
    for (int i = 0; i < 8; i++)
        memcpy(&x[i], &special[i], 4);
    memset(h, 0xa5, n * sizeof(zs_bf16));
    ZT_OK(ops->cast(NULL, h, ZS_DTYPE_BF16, x, ZS_DTYPE_F32, n));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            bad += !isnan(zs_bf16_to_f32(h[i]));
            continue;
        }
        if (h[i].bits != bf16_ref(x[i]) && bad++ < 3)
            fprintf(stderr, "  f32 %08x -> bf16 %04x, want %04x\n", zs_f32_bits(x[i]), h[i].bits,
                    bf16_ref(x[i]));
    }
    ZT_CHECK(bad == 0, "f32 -> bf16: %zu elements not round-to-nearest-even", bad);
    zt_poison(back, n);
    ZT_OK(ops->cast(NULL, back, ZS_DTYPE_F32, h, ZS_DTYPE_BF16, n));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &back[i], 4);
        bad += u != (uint32_t)h[i].bits << 16;
    }
    ZT_CHECK(bad == 0, "bf16 -> f32 not exact: %zu", bad);
    zt_poison(back, n);
    ZT_OK(ops->cast(NULL, back, ZS_DTYPE_F32, x, ZS_DTYPE_F32, n));
    ZT_CHECK(bits_equal(back, x, n * sizeof(float)), "f32 -> f32 copy");
    zs_bf16 *h2 = zt_malloc(n * sizeof(zs_bf16));
    ZT_OK(ops->cast(NULL, h2, ZS_DTYPE_BF16, h, ZS_DTYPE_BF16, n));
    ZT_CHECK(bits_equal(h2, h, n * sizeof(zs_bf16)), "bf16 -> bf16 copy");
    ZT_CHECK(ops->cast(NULL, h2, ZS_DTYPE_BF16, x, ZS_DTYPE_I32, 4) == ZS_ERR_UNSUPPORTED,
             "i32 -> bf16 unsupported");
    free(x), free(back), free(h), free(h2);
}

/* adamw_segs: the same bits as one adamw per segment (decay where flagged), the gaps between
 * segments untouched, bad segment lists refused. */
static void test_adamw_segs(void) {
    size_t n = 9000;
    float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    float *p2 = fbuf(n), *m2 = fbuf(n), *v2 = fbuf(n);
    zt_fill_normal(p, n, 1.0f);
    zt_fill_normal(g, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        m[i] = v[i] = 0.0f;
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
    zs_adamw_segs s = {.n = 3, .lo = {0, 1000, 5000}, .hi = {900, 4096, 9000}, .decay = {1, 0, 1}};
    for (int t = 1; t <= 2; t++) {
        ZT_OK(ops->adamw_segs(NULL, p, g, m, v, &s, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t));
        for (int k = 0; k < s.n; k++) {
            size_t lo = (size_t)s.lo[k], len = (size_t)(s.hi[k] - s.lo[k]);
            ZT_OK(ops->adamw(NULL, p2 + lo, g + lo, m2 + lo, v2 + lo, len, 1e-2f, 0.9f, 0.95f,
                             1e-8f, s.decay[k] ? 0.1f : 0.0f, 0.7f, t));
        }
    }
    ZT_CHECK(!memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4),
             "adamw_segs differs from adamw per segment (gaps included)");
    zs_adamw_segs bad = {.n = 2, .lo = {10, 5}, .hi = {20, 30}, .decay = {0, 0}};
    ZT_CHECK(ops->adamw_segs(NULL, p, g, m, v, &bad, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1) ==
                 ZS_ERR_INVALID,
             "overlapping segments refused");
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

/* The token draw (kernels/sample.h, the CPU twin of the GPU's cuRAND draw): core/philox.h's
 * Philox-4x32-10 reproduces Random123's published known-answer vectors (the generator cuRAND's
 * Philox4_32_10 implements); greedy is the first maximum; and 8000 draws from softmax([0, 1, 2, 3])
 * land in each bucket within 5 standard deviations of its probability (a fixed seed:
 * deterministic). */
static void test_sample(void) {
    static const uint32_t kat[3][2][4] = {
        {{0, 0, 0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}};
    static const uint32_t keys[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    for (int v = 0; v < 3; v++) {
        zs_philox4 c;
        memcpy(c.v, kat[v][0], sizeof c.v);
        c = zs_philox4x32_10(c, keys[v][0], keys[v][1]);
        ZT_CHECK(!memcmp(c.v, kat[v][1], sizeof c.v), "philox4x32-10 KAT %d: %08x %08x %08x %08x",
                 v, c.v[0], c.v[1], c.v[2], c.v[3]);
    }
    float logits[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t tok = -1, count[4] = {0};
    ZT_OK(ops->sample(NULL, &tok, logits, 4, 0.0f, 1, 0));
    ZT_CHECK(tok == 3, "greedy draw %d, not the maximum 3", tok);
    double z = 1 + exp(1) + exp(2) + exp(3);
    int n = 8000;
    for (int i = 0; i < n; i++) {
        ZT_OK(ops->sample(NULL, &tok, logits, 4, 1.0f, 42, (uint64_t)i));
        ZT_REQUIRE(tok >= 0 && tok < 4, "draw %d out of range", tok);
        count[tok]++;
    }
    for (int k = 0; k < 4; k++) {
        double p = exp(k) / z, sd = sqrt(n * p * (1 - p));
        ZT_CHECK(fabs(count[k] - n * p) <= 5 * sd, "token %d drawn %d times of %d, expected %.0f",
                 k, count[k], n, n * p);
    }
}

static void test_sumsq(void) {
    size_t sizes[4] = {0, 5, 4096, 300007};
    for (int si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *x = fbuf(n);
        zt_fill_normal(x, n, 2.0f);
        long double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += (long double)x[i] * x[i];
        double got = NAN;
        ZT_OK(ops->sumsq(NULL, &got, x, n));
        /* Products are exact in double; n double additions: relative error <= n 2^-53 ~ 3e-11
         * at n = 3e5. */
        ZT_CHECK(fabs(got - (double)ref) <= 1e-10 * fmax(1.0, (double)ref),
                 "sumsq n=%zu: %.17g vs %.17Lg", n, got, ref);
        /* Fixed chunking: the same bits for 1, 2 and 3 threads. */
        double r1, r3;
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        ZT_OK(ops->sumsq(NULL, &r1, x, n));
        omp_set_num_threads(3);
        ZT_OK(ops->sumsq(NULL, &r3, x, n));
        omp_set_num_threads(nt);
        ZT_CHECK(bits_equal(&r1, &got, 8) && bits_equal(&r3, &got, 8),
                 "sumsq n=%zu depends on thread count", n);
        free(x);
    }
}

static void test_init_normal(void) {
    size_t n = 1 << 16;
    float std = 0.02f;
    uint64_t seed = 1234, sid = 7;
    float *x = fbuf(n), *part = fbuf(1000);
    zt_poison(x, n);
    ZT_OK(ops->init_normal(NULL, x, n, seed, sid, 0, std));
    size_t bad = 0;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        float want = std * zs_philox_normal(seed, sid, i);
        bad += !bits_equal(&x[i], &want, 4);
        s += x[i], s2 += (double)x[i] * x[i];
    }
    ZT_CHECK(bad == 0, "init_normal != std * zs_philox_normal: %zu", bad);
    /* Sample moments of 65536 normals: mean within 5 sigma (5 std/256), variance within 3%. */
    double mean = s / n, var = s2 / n - mean * mean;
    ZT_CHECK(fabs(mean) < 5 * std / 256 && fabs(var / (std * std) - 1) < 0.03,
             "init_normal moments mean %g var %g", mean, var);
    /* A shard initialised alone equals the same slice of the whole tensor. */
    zt_poison(part, 1000);
    ZT_OK(ops->init_normal(NULL, part, 1000, seed, sid, 30000, std));
    ZT_CHECK(bits_equal(part, x + 30000, 1000 * sizeof(float)), "init_normal shard != slice");
    free(x), free(part);
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
    test_adamw();
    test_adamw_segs();
    test_sample();
    test_cast();
    test_sumsq();
    test_init_normal();
    test_threads_fwd();
    ZT_OK(ops->sync(NULL));
    return zt_finish();
}

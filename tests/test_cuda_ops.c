/* The CUDA backend's model ops against the CPU backend (ctest label gpu; the harness, the
 * comparisons' rules and ZS_TEST_CUDA_FAKE: cuda_ops_util.h): gemm in each arithmetic and
 * transpose, its reduced precision and its operands cast in pieces; the linear layer; bias,
 * layer and RMS norms, GELU, SwiGLU; the loss; launches past the grid cap; bad arguments
 * refused. Embeddings, attention, RoPE and decoding: test_cuda_ops_attn.c; the table, memory,
 * streams, optimizer, casts, sums, init and sampling: test_cuda_ops_state.c. */
#include "backend/kernels/gelu.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "cuda_ops_util.h"

#include <string.h>

/* ---- gemm and the linear layer ------------------------------------------------------ */

/* gemm in one arithmetic against a double reference. Under the emulator (and the CPU stand-in)
 * the inputs are rounded exactly as ops.h documents, so the reference rounds them the same way
 * and the fp32 accumulation bound applies. A real GPU's tensor cores are only known to keep
 * TF32's 10 or bf16's 7 stored mantissa bits (truncating or rounding), so there the reference
 * takes the inputs as they are and the bound adds each product's input error, (2u + u^2)|a b|
 * with u = 2^-10 or 2^-7; cuBLAS may also pick a plain fp32 kernel for small shapes. */
static void check_gemm(zs_gemm_math math, int ta, int tb, float alpha, float beta) {
    int m = 37, n = 29, k = 53;
    int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 5, ldc = m + 7;
    size_t na = (size_t)lda * (ta ? m : k), nb = (size_t)ldb * (tb ? k : n), nc = (size_t)ldc * n;
    const char *g = getenv("ZS_GPU");
    int exact_rounding = co_fake || (g && strcmp(g, "emu") == 0);
    double u = math == ZS_MATH_FP32 || exact_rounding ? 0.0
               : math == ZS_MATH_TF32                 ? ldexp(1.0, -10)
                                                      : ldexp(1.0, -7);
    float *A = co_randn(na, 1.0f), *B = co_randn(nb, 1.0f), *C0 = co_randn(nc, 1.0f);
    if (beta == 0.0f) zt_poison(C0, nc);
    float *want = co_hf(nc);
    double *bound = co_hbuf(nc * sizeof(double));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            size_t ci = i + (size_t)j * ldc;
            if (i >= m) {
                want[ci] = C0[ci];
                bound[ci] = 0;
                continue;
            }
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                float a = ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                float b = tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                double ar = exact_rounding ? zt_gemm_round((int)math, a) : a;
                double br = exact_rounding ? zt_gemm_round((int)math, b) : b;
                s += ar * br;
                sa += fabs(ar * br);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[ci];
            want[ci] = (float)(alpha * s + beta * c0);
            bound[ci] = 2.0 * ((k + 2) * CO_U32 * fabs(alpha) * sa + 2 * CO_U32 * fabs(beta * c0)) +
                        (2 * u + u * u) * fabs(alpha) * sa + CO_U32 * fabs(alpha * s + beta * c0);
        }
    const zs_ops *t = co_gpu->with_math(math);
    ZT_CHECK(t && t->gemm_math == math && strcmp(t->name, co_gpu->name) == 0,
             "with_math(%d) gave another table", (int)math);
    float *dA = co_up(A, na), *dB = co_up(B, nb), *dC = co_up(C0, nc);
    ZT_OK(t->gemm(NULL, ta, tb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc));
    char what[64];
    snprintf(what, sizeof what, "gemm math=%d ta=%d tb=%d beta=%g", (int)math, ta, tb,
             (double)beta);
    co_expect_bounded(what, dC, want, bound, nc);
    co_release();
}

/* Reduced-precision GEMM arithmetic really in use, in a form that holds on a real GPU as on the
 * emulator: the result must stand off the fp32 product of the unrounded inputs by about what
 * rounding the inputs to bf16 (TF32) moves it, not only stay within check_gemm's bound (which
 * admits plain fp32). With inputs rounded to nearest (the emulator) the shift equals that of
 * the rounded reference; with truncated inputs (allowed on a GPU) it is larger; an fp32
 * product stays within fp32 rounding of the unrounded one, a thousand times less. So: the GPU's
 * mean distance to the fp32 product must be at least half the rounded reference's. */
static void check_gemm_precision(zs_gemm_math math) {
    int m = 64, n = 48, k = 96;
    /* On an H100, cuBLAS runs CUBLAS_COMPUTE_32F_FAST_16BF on fp32 operands as TF32 (its
     * choice, and a permitted one: TF32 keeps more bits than bf16; docs/cuda.md "On a real
     * GPU"), so there the bf16 table is held to TF32's shift: still a thousand times an fp32
     * product's, so plain fp32 (the gemm_32f mutant) is caught on both. (This product's
     * operands are rounded to bf16 before cuBLAS, ops.h ZS_GEMM_CAST_MAX, so a GPU computes
     * bf16 here: more shift than TF32's, which the check allows.) */
    const char *g = getenv("ZS_GPU");
    int ref = math == ZS_MATH_BF16 && g && !strcmp(g, "real") ? (int)ZS_MATH_TF32 : (int)math;
    float *A = co_randn((size_t)m * k, 1.0f), *B = co_randn((size_t)k * n, 1.0f);
    double off_gpu = 0, off_ref = 0;
    float *dC = co_dbuf((size_t)m * n * sizeof(float));
    ZT_OK(co_gpu->with_math(math)->gemm(NULL, 0, 0, m, n, k, 1.0f, co_up(A, (size_t)m * k), m,
                                        co_up(B, (size_t)k * n), k, 0.0f, dC, m));
    float *C = co_down(dC, (size_t)m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double exact = 0, rounded = 0;
            for (int p = 0; p < k; p++) {
                float a = A[i + (size_t)p * m], b = B[p + (size_t)j * k];
                exact += (double)a * b;
                rounded += zt_gemm_round(ref, a) * zt_gemm_round(ref, b);
            }
            off_gpu += fabs(C[i + (size_t)j * m] - exact);
            off_ref += fabs(rounded - exact);
        }
    ZT_CHECK(off_ref > 0 && off_gpu >= 0.5 * off_ref,
             "gemm math=%d: the result is %.3g from the fp32 product on average, where inputs "
             "rounded to the arithmetic (%d) move it %.3g: the reduced precision is not in use",
             (int)math, off_gpu / (m * n), ref, off_ref / (m * n));
    co_release();
}

/* The bf16 gemm's operands cast in pieces (ops.h zs_gemm_cast_plan): B and C by columns (A
 * whole), and A and B along k with C accumulating from beta. Each product is held to the
 * fp32 accumulation bound of its inputs rounded to bf16 (gamma_k of sum |a b|, plus beta's
 * term): a piece at the wrong offset, missing, or added twice is off by whole products. */
static void check_gemm_pieces(int transb, int m, int n, int k, float beta) {
    int lda = m, ldb = transb ? n : k;
    zs_gemm_cast p = zs_gemm_cast_plan(0, transb, m, n, k, lda, ldb);
    ZT_CHECK(p.elems > 0 && p.elems <= ZS_GEMM_CAST_MAX && (transb ? p.k_piece < k : p.n_piece < n),
             "gemm %dx%dx%d (transb %d): the plan casts %zu elements in pieces of n %d, k %d, "
             "not the pieces this check is for",
             m, n, k, transb, p.elems, p.n_piece, p.k_piece);
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = co_randn(na, 1.0f), *B = co_randn(nb, 1.0f), *C0 = co_randn(nc, 1.0f);
    float *dC = co_up(C0, nc);
    ZT_OK(co_gpu->with_math(ZS_MATH_BF16)
              ->gemm(NULL, 0, transb, m, n, k, 1.0f, co_up(A, na), lda, co_up(B, nb), ldb, beta, dC,
                     m));
    float *C = co_down(dC, nc);
    for (size_t i = 0; i < na; i++)
        A[i] = (float)zt_gemm_round(ZS_MATH_BF16, A[i]);
    for (size_t i = 0; i < nb; i++)
        B[i] = (float)zt_gemm_round(ZS_MATH_BF16, B[i]);
    double u = ldexp(1.0, -24), gam = (k + 2) * u / (1 - (k + 2) * u), worst = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double want = beta * C0[i + (size_t)j * m], mag = fabs(want);
            for (int q = 0; q < k; q++) {
                double a = A[i + (size_t)q * m];
                double b = transb ? B[j + (size_t)q * n] : B[q + (size_t)j * k];
                want += a * b, mag += fabs(a * b);
            }
            double off = fabs(C[i + (size_t)j * m] - want) / (2 * gam * mag + 1e-30);
            if (off > worst) worst = off;
        }
    ZT_CHECK(worst <= 1.0,
             "bf16 gemm %dx%dx%d (transb %d, pieces n %d k %d): an element is %.3g times its "
             "rounding bound from the product of the rounded inputs",
             m, n, k, transb, p.n_piece, p.k_piece, worst);
    co_release();
}

/* Row-major linear forward and backward through zs_linear_* (the shared mapping onto the
 * column-major gemm), CUDA against CPU. Each element's tolerance scales with the same
 * computation on absolute values (sum |a b| over its dot products, plus |initial value| for
 * accumulating outputs): gamma_(k+2) of that for each side, times 2 for two sides. In bf16
 * both sides round the same inputs (the GPU's backward through gemm_linear_bwd, dout rounded
 * once), so the bound is the same. A shape whose backward operands do not fit the scratch
 * together (zs_linear_bwd_cast_elems 0) takes the two gemms' own plans there. */
static void check_linear(zs_gemm_math math, int N, int IC, int OC) {
    const zs_ops *c = co_cpu->with_math(math), *g = co_gpu->with_math(math);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = co_randn(ni, 1.0f), *W = co_randn(nw, 0.5f), *bias = co_randn(OC, 1.0f);
    float *dout = co_randn(no, 1.0f), *dinp0 = co_randn(ni, 1.0f), *dW0 = co_randn(nw, 1.0f),
          *db0 = co_randn(OC, 1.0f);
    float *ainp = co_hf(ni), *aW = co_hf(nw), *ab = co_hf(OC), *adout = co_hf(no),
          *adinp = co_hf(ni), *adW = co_hf(nw), *adb = co_hf(OC);
#define ABS_OF(dst, src, n)                                                                        \
    for (size_t i = 0; i < (n); i++)                                                               \
    (dst)[i] = fabsf((src)[i])
    ABS_OF(ainp, inp, ni);
    ABS_OF(aW, W, nw);
    ABS_OF(ab, bias, (size_t)OC);
    ABS_OF(adout, dout, no);
    ABS_OF(adinp, dinp0, ni);
    ABS_OF(adW, dW0, nw);
    ABS_OF(adb, db0, (size_t)OC);
#undef ABS_OF
    /* CPU results and the absolute-value scales. */
    float *out = co_hf(no), *scale_o = co_hf(no);
    float *dinp = co_clone(dinp0, ni), *dW = co_clone(dW0, nw), *db = co_clone(db0, OC);
    ZT_OK(zs_linear_fwd(c, NULL, out, inp, 0, W, bias, N, IC, OC));
    ZT_OK(zs_linear_fwd(co_cpu, NULL, scale_o, ainp, 0, aW, ab, N, IC, OC));
    ZT_OK(zs_linear_bwd(c, NULL, dinp, dW, db, dout, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd(co_cpu, NULL, adinp, adW, adb, adout, ainp, 0, aW, N, IC, OC));
    /* CUDA. */
    float *d_inp = co_up(inp, ni), *d_W = co_up(W, nw), *d_b = co_up(bias, OC),
          *d_dout = co_up(dout, no);
    float *d_out = co_up(co_poisoned(no), no);
    float *d_dinp = co_up(dinp0, ni), *d_dW = co_up(dW0, nw), *d_db = co_up(db0, OC);
    ZT_OK(zs_linear_fwd(g, NULL, d_out, d_inp, 0, d_W, d_b, N, IC, OC));
    ZT_OK(zs_linear_bwd(g, NULL, d_dinp, d_dW, d_db, d_dout, d_inp, 0, d_W, N, IC, OC));
    double *bo = co_hbuf(no * sizeof(double)), *bi = co_hbuf(ni * sizeof(double)),
           *bw = co_hbuf(nw * sizeof(double));
    for (size_t i = 0; i < no; i++)
        bo[i] = 2.0 * 2.0 * (IC + 2) * CO_U32 * scale_o[i];
    for (size_t i = 0; i < ni; i++)
        bi[i] = 2.0 * 2.0 * (OC + 2) * CO_U32 * adinp[i];
    for (size_t i = 0; i < nw; i++)
        bw[i] = 2.0 * 2.0 * (N + 2) * CO_U32 * adW[i];
    co_expect_bounded("linear_fwd out", d_out, out, bo, no);
    co_expect_bounded("linear_bwd dinp", d_dinp, dinp, bi, ni);
    co_expect_bounded("linear_bwd dW", d_dW, dW, bw, nw);
    co_expect_bits("linear_bwd dbias (bias_bwd, column-owned)", d_db, db, OC);
    /* Overwriting dinp (never read: NaN there must not show) and without a bias gradient. */
    float *sdinp = co_hf(ni), *sdW = co_clone(dW0, nw), *d_sdinp = co_up(co_poisoned(ni), ni),
          *d_sdW = co_up(dW0, nw);
    ZT_OK(zs_linear_bwd_set(c, NULL, sdinp, sdW, NULL, dout, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd_set(g, NULL, d_sdinp, d_sdW, NULL, d_dout, d_inp, 0, d_W, N, IC, OC));
    co_expect_bounded("linear_bwd_set dinp", d_sdinp, sdinp, bi, ni);
    co_expect_bounded("linear_bwd_set dW", d_sdW, sdW, bw, nw);
    co_release();
}

/* A linear layer whose output went through a GELU (zs_linear_gelu_bwd_set, GPT-2's fc layer):
 * the bf16 table's one pass over the gradient (GELU's backward, the bias gradient and the
 * bf16 rounding of the gradient together) gives the bits of the separate ops on the same table
 * (gelu_bwd, then zs_linear_bwd_set), and the bias gradient the CPU's bits. N = 1100 rows: all
 * ZS_COLSUM_GROUPS partials, the first two twice, and a part of a segment. The separate ops
 * take the same gemm plans, so a shape too large for the one pass compares bits too. With h,
 * the input and the GELU's input are bf16 (--dtype bf16's record; gelu_bwd16 the part). */
static void check_linear_gelu(int N, int IC, int OC, int h) {
    const zs_ops *c = co_cpu->with_math(ZS_MATH_BF16), *g = co_gpu->with_math(ZS_MATH_BF16);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = co_randn(ni, 1.0f), *W = co_randn(nw, 0.5f), *pre = co_randn(no, 2.0f);
    float *dout = co_randn(no, 1.0f), *dW0 = co_randn(nw, 1.0f), *db0 = co_randn(OC, 1.0f);
    float *dinp = co_hf(ni), *dW = co_clone(dW0, nw), *db = co_clone(db0, OC), *tmp = co_hf(no);
    zs_bf16 *inp16 = zt_hbuf(ni * 2), *pre16 = zt_hbuf(no * 2);
    for (size_t i = 0; i < ni; i++)
        inp16[i] = zs_f32_to_bf16(inp[i]);
    for (size_t i = 0; i < no; i++)
        pre16[i] = zs_f32_to_bf16(pre[i]);
    const void *x = h ? (const void *)inp16 : inp, *gi = h ? (const void *)pre16 : pre;
    printf("linear_gelu N=%d IC=%d OC=%d%s\n", N, IC, OC, h ? " bf16" : "");
    ZT_OK(zs_linear_gelu_bwd_set(c, NULL, dinp, dW, db, dout, gi, tmp, x, h, W, N, IC, OC));
    void *d_inp = h ? zt_dup(inp16, ni * 2) : (void *)co_up(inp, ni);
    void *d_pre = h ? zt_dup(pre16, no * 2) : (void *)co_up(pre, no);
    float *d_W = co_up(W, nw), *d_dout = co_up(dout, no);
    float *u_dinp = co_up(co_poisoned(ni), ni), *u_dW = co_up(dW0, nw), *u_db = co_up(db0, OC),
          *u_tmp = co_up(co_poisoned(no), no);
    if (h)
        ZT_OK(g->gelu_bwd16(NULL, u_tmp, d_pre, d_dout, no));
    else
        ZT_OK(g->gelu_bwd(NULL, u_tmp, d_pre, d_dout, no));
    ZT_OK(zs_linear_bwd_set(g, NULL, u_dinp, u_dW, u_db, u_tmp, d_inp, h, d_W, N, IC, OC));
    float *f_dinp = co_up(co_poisoned(ni), ni), *f_dW = co_up(dW0, nw), *f_db = co_up(db0, OC),
          *f_tmp = co_up(co_poisoned(no), no);
    ZT_OK(zs_linear_gelu_bwd_set(g, NULL, f_dinp, f_dW, f_db, d_dout, d_pre, f_tmp, d_inp, h, d_W,
                                 N, IC, OC));
    co_expect_bits("linear_gelu_bwd dinp (one pass = gelu_bwd, then linear_bwd)", f_dinp,
                   co_down(u_dinp, ni), ni);
    co_expect_bits("linear_gelu_bwd dW (one pass = gelu_bwd, then linear_bwd)", f_dW,
                   co_down(u_dW, nw), nw);
    co_expect_bits("linear_gelu_bwd dbias (one pass = gelu_bwd, then linear_bwd)", f_db,
                   co_down(u_db, OC), OC);
    co_expect_bits("linear_gelu_bwd dbias (the CPU's)", f_db, db, OC);
    co_release();
}

/* ---- bias, norms, GELU, SwiGLU ------------------------------------------------------ */

/* OC 300: over one block of threads; 2056: the wide blocks' (ops_cuda.cu BIAS_BWD_WIDE_MIN),
 * the last one part full */
static void check_bias(int N, int OC) {
    size_t no = (size_t)N * OC;
    printf("bias N=%d OC=%d\n", N, OC);
    float *out0 = co_randn(no, 1.0f), *bias = co_randn(OC, 1.0f), *dout = co_randn(no, 1.0f),
          *db0 = co_randn(OC, 1.0f);
    float *out = co_clone(out0, no), *db = co_clone(db0, OC);
    ZT_OK(co_cpu->bias_fwd(NULL, out, bias, N, OC));
    ZT_OK(co_cpu->bias_bwd(NULL, db, dout, N, OC));
    float *d_out = co_up(out0, no), *d_db = co_up(db0, OC);
    ZT_OK(co_gpu->bias_fwd(NULL, d_out, co_up(bias, OC), N, OC));
    ZT_OK(co_gpu->bias_bwd(NULL, d_db, co_up(dout, no), N, OC));
    co_expect_bits("bias_fwd (accumulates)", d_out, out, no);
    co_expect_bits("bias_bwd (accumulates)", d_db, db, OC);
    co_release();
}

/* v[n] rounded to bf16 in place, and a device copy of the bf16 values: the operands of the
 * norms' bf16 backward (layernorm_bwd16, rmsnorm_bwd16). */
static void *up_rounded(float *v, size_t n) {
    zs_bf16 *h = co_hbuf(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        h[i] = zs_f32_to_bf16(v[i]);
        v[i] = zs_bf16_to_f32(h[i]);
    }
    void *d = co_dbuf(n * sizeof *h);
    co_h2d(d, h, n * sizeof *h);
    return d;
}

/* C not a multiple of the warp; 1100: past the 1024 a lane keeps in registers (cuda_internal.h
 * zs_cu_row_load), the rest read from memory at each pass */
static void check_layernorm(int N, int C) {
    printf("layernorm N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x = co_randn(n, 2.0f), *w = co_randn(C, 1.0f), *b = co_randn(C, 1.0f);
    for (size_t i = 0; i < n; i++)
        x[i] += 3.0f;
    float *out = co_poisoned(n), *mean = co_poisoned(N), *rstd = co_poisoned(N);
    float *d_out = co_up(out, n), *d_mean = co_up(mean, N), *d_rstd = co_up(rstd, N);
    float *d_x = co_up(x, n), *d_w = co_up(w, C);
    ZT_OK(co_cpu->layernorm_fwd(NULL, out, mean, rstd, x, w, b, N, C));
    ZT_OK(co_gpu->layernorm_fwd(NULL, d_out, d_mean, d_rstd, d_x, d_w, co_up(b, C), N, C));
    co_expect_bits("layernorm_fwd out", d_out, out, n);
    co_expect_bits("layernorm_fwd mean", d_mean, mean, N);
    co_expect_bits("layernorm_fwd rstd", d_rstd, rstd, N);
    float *dout = co_randn(n, 1.0f), *dinp0 = co_randn(n, 1.0f), *dw0 = co_randn(C, 1.0f),
          *db0 = co_randn(C, 1.0f);
    float *dinp = co_clone(dinp0, n), *dw = co_clone(dw0, C), *db = co_clone(db0, C);
    float *d_dinp = co_up(dinp0, n), *d_dw = co_up(dw0, C), *d_db = co_up(db0, C);
    ZT_OK(co_cpu->layernorm_bwd(NULL, dinp, dw, db, dout, x, w, mean, rstd, N, C));
    ZT_OK(co_gpu->layernorm_bwd(NULL, d_dinp, d_dw, d_db, co_up(dout, n), d_x, d_w, co_up(mean, N),
                                co_up(rstd, N), N, C));
    co_expect_bits("layernorm_bwd dinp", d_dinp, dinp, n);
    co_expect_bits("layernorm_bwd dw", d_dw, dw, C);
    co_expect_bits("layernorm_bwd db", d_db, db, C);
    /* layernorm_bwd16: dout and x stored bf16 (each where flagged) give the CPU's bits on
     * them widened, as the bf16 stack's backward needs (the kept input: models/stack.h) */
    ZT_CHECK(co_fake || co_gpu->layernorm_bwd16, "the CUDA table has no layernorm_bwd16");
    void *d_dout16 = up_rounded(dout, n), *d_x16 = up_rounded(x, n);
    const float *d_dout = co_up(dout, n), *d_xr = co_up(x, n);
    for (int f = 1; f < 4 && co_gpu->layernorm_bwd16; f++) { /* bit 0: dout bf16, 1: x bf16 */
        int d16 = f & 1, i16 = f >> 1; /* with d16, dinp rounded into d_r16 (GPT-2's dres) */
        zs_bf16 *d_r16 = d16 ? co_dbuf(n * sizeof(zs_bf16)) : NULL;
        dinp = co_clone(dinp0, n), dw = co_clone(dw0, C), db = co_clone(db0, C);
        d_dinp = co_up(dinp0, n), d_dw = co_up(dw0, C), d_db = co_up(db0, C);
        ZT_OK(co_cpu->layernorm_bwd(NULL, dinp, dw, db, dout, x, w, mean, rstd, N, C));
        ZT_OK(co_gpu->layernorm_bwd16(
            NULL, d_dinp, d_r16, d_dw, d_db, d16 ? d_dout16 : (void *)d_dout, d16,
            i16 ? d_x16 : (void *)d_xr, i16, d_w, co_up(mean, N), co_up(rstd, N), N, C));
        const float *got[3] = {d_dinp, d_dw, d_db}, *want[3] = {dinp, dw, db};
        static const char *name[3] = {"dinp", "dw", "db"};
        for (int k = 0; k < 3; k++) {
            char what[80];
            snprintf(what, sizeof what, "layernorm_bwd16 (dout16 %d, inp16 %d) %s", d16, i16,
                     name[k]);
            co_expect_bits(what, got[k], want[k], k ? (size_t)C : n);
        }
        if (d_r16) co_expect_rounded("layernorm_bwd16 dinp16", d_r16, dinp, n);
    }
    co_release();
}

static void check_rmsnorm(int N, int C) {
    printf("rmsnorm N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float eps = 1e-6f;
    float *x = co_randn(n, 2.0f), *w = co_randn(C, 1.0f);
    float *out = co_poisoned(n), *rstd = co_poisoned(N);
    float *d_out = co_up(out, n), *d_rstd = co_up(rstd, N), *d_x = co_up(x, n), *d_w = co_up(w, C);
    ZT_OK(co_cpu->rmsnorm_fwd(NULL, out, rstd, x, w, N, C, eps));
    ZT_OK(co_gpu->rmsnorm_fwd(NULL, d_out, d_rstd, d_x, d_w, N, C, eps));
    co_expect_bits("rmsnorm_fwd out", d_out, out, n);
    co_expect_bits("rmsnorm_fwd rstd", d_rstd, rstd, N);
    float *dout = co_randn(n, 1.0f), *dinp0 = co_randn(n, 1.0f), *dw0 = co_randn(C, 1.0f);
    float *dinp = co_clone(dinp0, n), *dw = co_clone(dw0, C);
    float *d_dinp = co_up(dinp0, n), *d_dw = co_up(dw0, C);
    ZT_OK(co_cpu->rmsnorm_bwd(NULL, dinp, dw, dout, x, w, rstd, N, C));
    ZT_OK(co_gpu->rmsnorm_bwd(NULL, d_dinp, d_dw, co_up(dout, n), d_x, d_w, co_up(rstd, N), N, C));
    co_expect_bits("rmsnorm_bwd dinp", d_dinp, dinp, n);
    co_expect_bits("rmsnorm_bwd dw", d_dw, dw, C);
    /* rmsnorm_bwd16: as layernorm_bwd16 in check_layernorm */
    ZT_CHECK(co_fake || co_gpu->rmsnorm_bwd16, "the CUDA table has no rmsnorm_bwd16");
    void *d_dout16 = up_rounded(dout, n), *d_x16 = up_rounded(x, n);
    const float *d_dout = co_up(dout, n), *d_xr = co_up(x, n);
    for (int f = 1; f < 4 && co_gpu->rmsnorm_bwd16; f++) { /* bit 0: dout bf16, bit 1: x bf16 */
        int d16 = f & 1, i16 = f >> 1;
        dinp = co_clone(dinp0, n), dw = co_clone(dw0, C);
        d_dinp = co_up(dinp0, n), d_dw = co_up(dw0, C);
        ZT_OK(co_cpu->rmsnorm_bwd(NULL, dinp, dw, dout, x, w, rstd, N, C));
        ZT_OK(co_gpu->rmsnorm_bwd16(NULL, d_dinp, d_dw, d16 ? d_dout16 : (void *)d_dout, d16,
                                    i16 ? d_x16 : (void *)d_xr, i16, d_w, co_up(rstd, N), N, C));
        char what[80];
        snprintf(what, sizeof what, "rmsnorm_bwd16 (dout16 %d, inp16 %d) dinp", d16, i16);
        co_expect_bits(what, d_dinp, dinp, n);
        snprintf(what, sizeof what, "rmsnorm_bwd16 (dout16 %d, inp16 %d) dw", d16, i16);
        co_expect_bits(what, d_dw, dw, C);
    }
    co_release();
}

/* Inputs over GELU's whole range, tails and zero included. */
static float *gelu_inputs(size_t n) {
    float *x = co_randn(n, 3.0f);
    static const float special[] = {0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-30f, 5.5f};
    for (size_t i = 0; i < sizeof special / sizeof *special && i < n; i++)
        x[i * 7 % n] = special[i];
    return x;
}

static void check_gelu(void) {
    size_t n = 10007;
    float *x = gelu_inputs(n), *out = co_poisoned(n), *d_x = co_up(x, n), *d_out = co_up(out, n);
    ZT_OK(co_cpu->gelu_fwd(NULL, out, x, n));
    ZT_OK(co_gpu->gelu_fwd(NULL, d_out, d_x, n));
    co_expect_bits("gelu_fwd", d_out, out, n);
    float *d_y = co_up(x, n);
    ZT_OK(co_gpu->gelu_fwd(NULL, d_y, d_y, n));
    co_expect_bits("gelu_fwd in place", d_y, out, n);
    /* gelu_bwd overwrites dinp (poisoned here), with the bits of accumulating into zeros */
    float *dout = co_randn(n, 1.0f), *dinp = co_poisoned(n), *d_dinp = co_up(dinp, n);
    float *zeros = co_hf(n);
    memset(zeros, 0, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        zeros[i] += zs_gelu_grad(x[i]) * dout[i];
    ZT_OK(co_cpu->gelu_bwd(NULL, dinp, x, dout, n));
    ZT_OK(co_gpu->gelu_bwd(NULL, d_dinp, d_x, co_up(dout, n), n));
    ZT_CHECK(memcmp(dinp, zeros, n * sizeof(float)) == 0,
             "gelu_bwd on the CPU is not gelu' * dout added to zeros, bit for bit");
    co_expect_bits("gelu_bwd (overwrites)", d_dinp, dinp, n);
    co_release();
}

static void check_swiglu(void) {
    size_t n = 5003;
    float *g = gelu_inputs(n), *u = co_randn(n, 1.0f), *out = co_poisoned(n);
    float *d_g = co_up(g, n), *d_u = co_up(u, n), *d_out = co_up(out, n);
    ZT_OK(co_cpu->swiglu_fwd(NULL, out, g, u, n));
    ZT_OK(co_gpu->swiglu_fwd(NULL, d_out, d_g, d_u, n));
    co_expect_bits("swiglu_fwd", d_out, out, n);
    float *d_g2 = co_up(g, n), *d_u2 = co_up(u, n);
    ZT_OK(co_gpu->swiglu_fwd(NULL, d_g2, d_g2, d_u, n));
    ZT_OK(co_gpu->swiglu_fwd(NULL, d_u2, d_g, d_u2, n));
    co_expect_bits("swiglu_fwd out = gate", d_g2, out, n);
    co_expect_bits("swiglu_fwd out = up", d_u2, out, n);
    float *dout = co_randn(n, 1.0f), *dg = co_poisoned(n), *du = co_poisoned(n);
    float *d_dg = co_up(co_poisoned(n), n),
          *d_du = co_up(co_poisoned(n), n); /* overwritten, never read */
    ZT_OK(co_cpu->swiglu_bwd(NULL, dg, du, dout, g, u, n));
    ZT_OK(co_gpu->swiglu_bwd(NULL, d_dg, d_du, co_up(dout, n), d_g, d_u, n));
    co_expect_bits("swiglu_bwd dgate", d_dg, dg, n);
    co_expect_bits("swiglu_bwd dup", d_du, du, n);
    co_release();
}

/* ---- loss --------------------------------------------------------------------------- */

/* Gradients are bitwise (exp, sums and divisions are shared); the loss adds logf(sum), where
 * CUDA's logf (1 ulp) and libm's (< 1 ulp) may differ by 2 ulp of a value near log(V) < 8. */
static void check_softmax_xent(int V, int Vp) {
    int N = 9;
    size_t nl = (size_t)N * Vp;
    float *logits = co_randn(nl, 2.0f);
    int32_t *tg = co_hbuf(N * sizeof(int32_t));
    for (int r = 0; r < N; r++)
        tg[r] = (int32_t)zt_uniform(0, V);
    tg[3] = -1; /* masked row */
    float dloss = 1.0f / N;
    float *loss = co_poisoned(N), *dl = co_poisoned(nl);
    float *d_logits = co_up(logits, nl), *d_loss = co_up(loss, N), *d_dl = co_up(dl, nl);
    int32_t *d_tg = co_upi(tg, N);
    char what[64];
    ZT_OK(co_cpu->softmax_xent(NULL, loss, dl, logits, tg, N, V, Vp, dloss));
    ZT_OK(co_gpu->softmax_xent(NULL, d_loss, d_dl, d_logits, d_tg, N, V, Vp, dloss));
    snprintf(what, sizeof what, "softmax_xent V=%d Vp=%d losses", V, Vp);
    co_expect_close(what, d_loss, loss, N, 8 * CO_U32);
    snprintf(what, sizeof what, "softmax_xent V=%d Vp=%d dlogits", V, Vp);
    co_expect_bits(what, d_dl, dl, nl);
    /* In place over the logits, and loss only. */
    float *d_inplace = co_up(logits, nl), *d_loss2 = co_up(co_poisoned(N), N),
          *d_loss3 = co_up(co_poisoned(N), N);
    ZT_OK(co_gpu->softmax_xent(NULL, d_loss2, d_inplace, d_inplace, d_tg, N, V, Vp, dloss));
    co_expect_bits("softmax_xent dlogits in place", d_inplace, dl, nl);
    ZT_OK(co_gpu->softmax_xent(NULL, d_loss3, NULL, d_logits, d_tg, N, V, Vp, dloss));
    co_expect_close("softmax_xent losses without gradient", d_loss3, loss, N, 8 * CO_U32);
    co_expect_bits("softmax_xent logits untouched without gradient", d_logits, logits, nl);
    if (!co_fake) {
        /* A target outside [-1, V) cannot be refused on the device: its row turns NaN. */
        int32_t bad = V;
        co_h2d(d_tg + 5, &bad, sizeof bad);
        ZT_OK(co_gpu->softmax_xent(NULL, d_loss, d_dl, d_logits, d_tg, N, V, Vp, dloss));
        float *l = co_down(d_loss, N), *g = co_down(d_dl, nl);
        ZT_CHECK(isnan(l[5]) && isnan(g[(size_t)5 * Vp]) && !isnan(l[4]),
                 "out-of-range target gives a NaN row, others unaffected");
    }
    co_release();
}

/* ---- launches over the grid cap ----------------------------------------------------- */

/* Launches over more than 65535 blocks of 256 threads (grids are capped there, so only a
 * grid-stride loop covers the rest): tensors the size of gpt2-124m's token embedding (50257 x
 * 768 = 38.6M elements), through fill, scale, axpy, the casts and AdamW, bitwise as the CPU. */
static void check_large(void) {
    size_t n = (size_t)50257 * 768;
    float *x = co_randn(n, 1.0f), *y = co_randn(n, 1.0f);
    float *d_x = co_up(x, n), *d_y = co_up(y, n);
    ZT_OK(co_cpu->scale(NULL, x, 0.75f, n));
    ZT_OK(co_gpu->scale(NULL, d_x, 0.75f, n));
    ZT_OK(co_cpu->axpy(NULL, y, -0.5f, x, n));
    ZT_OK(co_gpu->axpy(NULL, d_y, -0.5f, d_x, n));
    co_expect_bits("scale over 38.6M elements", d_x, x, n);
    co_expect_bits("axpy over 38.6M elements", d_y, y, n);
    zs_bf16 *d16 = co_dbuf(n * sizeof(zs_bf16));
    ZT_OK(co_gpu->cast(NULL, d16, ZS_DTYPE_BF16, d_y, ZS_DTYPE_F32, n));
    ZT_OK(co_gpu->fill(NULL, d_x, 3.0f, n));
    ZT_OK(co_gpu->cast(NULL, d_x, ZS_DTYPE_F32, d16, ZS_DTYPE_BF16, n));
    zs_bf16 *h16 = co_hbuf(n * sizeof(zs_bf16));
    ZT_OK(co_cpu->cast(NULL, h16, ZS_DTYPE_BF16, y, ZS_DTYPE_F32, n));
    ZT_OK(co_cpu->cast(NULL, x, ZS_DTYPE_F32, h16, ZS_DTYPE_BF16, n));
    co_expect_bits("cast f32 -> bf16 -> f32 over 38.6M elements", d_x, x, n);
    float *m = co_randn(n, 0.1f), *v = co_hf(n), *g = co_randn(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 97) * 1e-4f;
    float *d_m = co_up(m, n), *d_v = co_up(v, n);
    ZT_OK(co_cpu->adamw(NULL, y, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1));
    ZT_OK(co_gpu->adamw(NULL, d_y, co_up(g, n), d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                        1));
    co_expect_bits("adamw over 38.6M elements", d_y, y, n);
    co_release();
}

/* ---- argument validation ------------------------------------------------------------ */

static void check_errors(void) {
    float *d = co_dbuf(64 * sizeof(float));
    ZT_CHECK(co_gpu->gemm(NULL, 2, 0, 4, 4, 4, 1.0f, d, 4, d, 4, 0.0f, d, 4) == ZS_ERR_INVALID,
             "gemm: bad trans flag");
    ZT_CHECK(co_gpu->gemm(NULL, 0, 0, 4, 4, 4, 1.0f, d, 3, d, 4, 0.0f, d, 4) == ZS_ERR_INVALID,
             "gemm: lda < m");
    ZT_CHECK(co_gpu->layernorm_fwd(NULL, d, d, d, d, d, d, 4, 0) == ZS_ERR_INVALID,
             "layernorm: C = 0");
    ZT_CHECK(co_gpu->attention_fwd(NULL, d, d, d, 1, 2, 6, 4, NULL) == ZS_ERR_INVALID,
             "attention: C not a multiple of NH");
    ZT_CHECK(co_gpu->attention_gqa_fwd(NULL, d, d, d, d, d, 1, 2, 4, 3, 2, NULL) == ZS_ERR_INVALID,
             "attention_gqa: NKV does not divide NH");
    ZT_CHECK(co_gpu->rope_fwd(NULL, d, d, 1, 2, 1, 3, 10000.0f, NULL) == ZS_ERR_INVALID,
             "rope: odd hs");
    ZT_CHECK(co_gpu->adamw(NULL, d, d, d, d, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 0) ==
                 ZS_ERR_INVALID,
             "adamw: t = 0");
    ZT_CHECK(co_gpu->softmax_xent(NULL, d, d, d, (const int32_t *)d, 2, 5, 4, 1.0f) ==
                 ZS_ERR_INVALID,
             "softmax_xent: Vp < V");
    double r = -1.0, *d_r = co_dbuf(sizeof(double));
    ZT_CHECK(co_gpu->sumsq(NULL, NULL, d, 4) == ZS_ERR_INVALID, "sumsq: NULL result");
    ZT_OK(co_gpu->sumsq(NULL, d_r, d, 0));
    ZT_OK(co_gpu->sync(NULL));
    co_d2h(&r, d_r, sizeof r);
    ZT_CHECK(r == 0.0, "sumsq of nothing is 0");
    ZT_CHECK(co_gpu->decode_attention(NULL, d, d, d, d, d, d, d, 4, 3, 2, 0, 0.0f) ==
                 ZS_ERR_INVALID,
             "decode_attention: NKV does not divide NH");
    ZT_CHECK(co_gpu->decode_attention(NULL, d, d, d, d, d, d, d, 2, 2, 3, 0, 1e4f) ==
                 ZS_ERR_INVALID,
             "decode_attention: RoPE on an odd head size");
    co_release();
}

int main(void) {
    co_init("cuda_ops");
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int math = ZS_MATH_FP32; math <= ZS_MATH_BF16; math++) {
                check_gemm((zs_gemm_math)math, ta, tb, 0.7f, 0.0f);
                check_gemm((zs_gemm_math)math, ta, tb, -1.3f, 0.5f);
            }
        }
    check_gemm_precision(ZS_MATH_BF16);
    check_gemm_precision(ZS_MATH_TF32);
    /* The pieces take operands over 2^26 elements (a GB of memory, 20 s emulated): not in
     * the broken builds' runs (ZS_TEST_QUICK, emu_mutant_*), which the other gemm checks catch. */
    const char *quick = getenv("ZS_TEST_QUICK");
    if (!quick || !*quick) {
        check_gemm_pieces(0, 8, 1100, 65536, 1.0f); /* B by columns: 768 then 332 */
        check_gemm_pieces(1, 8, 8, 5000000, 0.5f);  /* along k: 4194304 then 805696 */
        /* a backward whose operands do not fit together: each gemm casts its own */
        ZT_CHECK(zs_linear_bwd_cast_elems(1100, 8, 65536, 0, 0) == 0,
                 "linear backward cast at once");
        check_linear(ZS_MATH_BF16, 1100, 8, 65536);
        check_linear_gelu(1100, 8, 65536, 0);
    } else {
        printf("cuda_ops: not run under ZS_TEST_QUICK: the bf16 gemm's operands in pieces\n");
    }
    check_linear(ZS_MATH_FP32, 70, 96, 80);
    check_linear(ZS_MATH_BF16, 70, 96, 80);
    check_linear_gelu(1100, 96, 80, 0);
    check_linear_gelu(1100, 96, 80, 1);
    check_linear_gelu(70, 16, 2056, 1);
    check_bias(33, 300);
    check_bias(70, 2056);
    check_layernorm(37, 203);
    check_layernorm(5, 1100);
    /* layer norm's column partials (kernels/layernorm.h): 18 segments, so groups 0 and 1 add
     * two each, the last one short, and more columns than a block's threads; then 273
     * segments, more than one batch of partials a group */
    check_layernorm(17 * 64 + 5, 300);
    check_layernorm(17 * 16 * 64 + 3, 8);
    check_rmsnorm(29, 203);
    check_rmsnorm(5, 1100);
    check_gelu();
    check_swiglu();
    check_softmax_xent(37, 40);
    check_softmax_xent(3001, 3072);
    check_softmax_xent(1001, 1001);   /* rows not 16-byte aligned: staged a float at a time */
    check_softmax_xent(60001, 60004); /* a row past the shared memory a block may opt in to */
    check_large();
    check_errors();
    return zt_finish();
}

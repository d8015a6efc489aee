/* The CUDA backend against its oracle, the CPU backend (ctest label gpu): every op of the
 * zs_ops table on fresh random inputs, outputs poisoned (NaN) before the call so an unwritten
 * element fails, accumulating outputs started from the same random values on both sides.
 * The attention kernels, RoPE and the position embedding run once more with document masks
 * (backend/ops.h "Documents": random documents and a padded row), bitwise against the CPU
 * (RoPE within its bound).
 *
 * Comparisons are bitwise wherever both backends run the same shared backend/kernels math in
 * the same order (elementwise ops, norms, attention, the column-owned weight and bias
 * gradients, AdamW, casts, sumsq): the CUDA build uses --fmad=false and IEEE division and
 * square root, so the arithmetic is the same operations with the same roundings. Tolerances,
 * with their reasons, remain where a library function differs between the host libm and
 * CUDA's (logf in the loss, cosf/sinf/powf in RoPE, logf/cosf in Philox init) and for gemm
 * (cuBLAS and OpenBLAS sum in different orders: the standard dot-product error bound).
 *
 * Exits 77 (skipped) without a visible CUDA device. ZS_TEST_CUDA_FAKE=1 runs the same harness
 * with the CPU table on host memory in the CUDA backend's place: it exercises this file's
 * indexing and bookkeeping on machines without a GPU and says nothing about the CUDA kernels. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/kernels/gelu.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "testutil.h"

#include <stddef.h>
#include <string.h>

/* fp32 unit roundoff. */
#define U32 (1.0 / 16777216.0)

static const zs_ops *cpu, *gpu;
static int fake;

/* ---- buffers: every allocation of a check is released by release() at its end ----------- */

#define MAX_BUFS 256
static void *g_dev[MAX_BUFS], *g_host[MAX_BUFS];
static int g_ndev, g_nhost;

static void *hbuf(size_t nbytes) {
    ZT_REQUIRE(g_nhost < MAX_BUFS, "too many host buffers in one check");
    return g_host[g_nhost++] = zt_malloc(nbytes);
}

static float *hf(size_t n) {
    return hbuf(n * sizeof(float));
}

static void *dbuf(size_t nbytes) {
    void *p = NULL;
    ZT_REQUIRE(g_ndev < MAX_BUFS, "too many device buffers in one check");
    if (fake)
        p = zt_malloc(nbytes ? nbytes : 1);
    else
        ZT_OK(zs_cuda_alloc(ZS_MEM_WORKSPACE, nbytes ? nbytes : 1, "test buffer", &p));
    return g_dev[g_ndev++] = p;
}

static void h2d(void *d, const void *h, size_t nbytes) {
    if (fake)
        memcpy(d, h, nbytes);
    else
        ZT_OK(zs_cuda_memcpy_h2d(d, h, nbytes));
}

static void d2h(void *h, const void *d, size_t nbytes) {
    if (fake)
        memcpy(h, d, nbytes);
    else
        ZT_OK(zs_cuda_memcpy_d2h(h, d, nbytes));
}

static void release(void) {
    for (int i = 0; i < g_ndev; i++)
        if (fake)
            free(g_dev[i]);
        else
            zs_cuda_free(g_dev[i]);
    for (int i = 0; i < g_nhost; i++)
        free(g_host[i]);
    g_ndev = g_nhost = 0;
}

/* Device copy of n host floats (or int32s). */
static float *up(const float *h, size_t n) {
    float *d = dbuf(n * sizeof(float));
    h2d(d, h, n * sizeof(float));
    return d;
}

static int32_t *upi(const int32_t *h, size_t n) {
    int32_t *d = dbuf(n * sizeof(int32_t));
    h2d(d, h, n * sizeof(int32_t));
    return d;
}

/* Host copy of n device floats, after the default stream's work is done. */
static float *down(const float *d, size_t n) {
    float *h = hf(n);
    ZT_OK(gpu->sync(NULL));
    d2h(h, d, n * sizeof(float));
    return h;
}

static float *randn(size_t n, float std) {
    float *x = hf(n);
    zt_fill_normal(x, n, std);
    return x;
}

static float *poisoned(size_t n) {
    float *x = hf(n);
    zt_poison(x, n);
    return x;
}

/* Document starts (backend/ops.h "Documents") for B rows of T, or NULL without documents: a
 * new document at t > 0 with probability 1/8; row 1 padded (m real tokens, then documents of
 * one). The host copy is *h (NULL without). */
static const int32_t *docs_seg(int docs, int B, int T, const int32_t **h) {
    *h = NULL;
    if (!docs) return NULL;
    int32_t *seg = hbuf((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        for (int t = 0; t < T; t++) {
            int32_t *r = seg + (size_t)b * T;
            r[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < 0.125 ? t : r[t - 1];
        }
    }
    *h = seg;
    return upi(seg, (size_t)B * T);
}

static float *clone(const float *x, size_t n) {
    float *y = hf(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* ---- comparisons -------------------------------------------------------------------- */

/* The device result d must equal the CPU's want bit for bit. */
static void expect_bits(const char *what, const float *d, const float *want, size_t n) {
    float *got = down(d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (!bad) first = i;
            bad++;
        }
    ZT_CHECK(bad == 0, "%s: %zu of %zu elements differ from the CPU, first at %zu: %.9g vs %.9g",
             what, bad, n, first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0);
}

/* Mixed error |got - want| / max(1, |want|) at most tol (NaN fails). */
static void expect_close(const char *what, const float *d, const float *want, size_t n,
                         double tol) {
    float *got = down(d, n);
    double err = zt_max_err_ff(got, want, n);
    ZT_CHECK(err <= tol, "%s: max error %.3g > %.3g", what, err, tol);
}

/* |got[i] - want[i]| <= bound[i] for every i (NaN fails); a bound of 0 asks for the same
 * bits (elements that must be left untouched, possibly NaN poison). */
static void expect_bounded(const char *what, const float *d, const float *want, const double *bound,
                           size_t n) {
    float *got = down(d, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (bound[i] == 0 ? memcmp(&got[i], &want[i], sizeof(float)) != 0
                          : !(fabs((double)got[i] - (double)want[i]) <= bound[i])) {
            if (!bad) first = i;
            bad++;
        }
    ZT_CHECK(bad == 0,
             "%s: %zu of %zu elements outside their bound, first at %zu: %.9g vs %.9g "
             "(bound %.3g)",
             what, bad, n, first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0,
             bad ? bound[first] : 0.0);
}

/* ---- the table, memory, streams ----------------------------------------------------- */

/* Every slot of the table is set (zs_ops is a name and function pointers only, so scanning it
 * by pointer-sized words also covers ops added after this test was written), but the
 * optional slots the CUDA bf16 table sets: gemm_linear_bwd, and gemm_linear_bwd16 with
 * softmax_xent16 (test_cuda_fused.c). */
static void check_table(void) {
    const unsigned char *p = (const unsigned char *)gpu;
    static const unsigned char zero[sizeof(void *)];
    /* Every function pointer, from with_math on (name and gemm_math come before). */
    for (size_t off = offsetof(zs_ops, with_math); off + sizeof(void *) <= sizeof(zs_ops);
         off += sizeof(void *))
        ZT_CHECK(off == offsetof(zs_ops, gemm16) || off == offsetof(zs_ops, gemm_linear_bwd) ||
                     off == offsetof(zs_ops, gemm_linear_bwd16) ||
                     off == offsetof(zs_ops, softmax_xent16) ||
                     memcmp(p + off, zero, sizeof(void *)),
                 "zs_ops slot at byte %zu is NULL", off);
    ZT_CHECK(gpu->with_math(ZS_MATH_BF16)->gemm16, "the %s bf16 table takes no bf16 input",
             gpu->name);
    ZT_CHECK(fake || gpu->with_math(ZS_MATH_BF16)->gemm_linear_bwd,
             "the CUDA bf16 table does not share dout between a linear layer's backward gemms");
    ZT_CHECK(strcmp(gpu->name, fake ? "cpu" : "cuda") == 0, "table name %s", gpu->name);
    ZT_CHECK(gpu->gemm_math == ZS_MATH_FP32, "the default table's gemm is fp32 (got %d)",
             (int)gpu->gemm_math);
}

/* The dense peak behind bench step's MFU: unknown on the emulated GPU (no clock), saying so;
 * on a known real GPU tensor-core arithmetics above fp32 and above a TFLOP/s. */
static void check_peak(void) {
    if (fake) return;
    char basis[192] = "";
    double p[3];
    for (int m = 0; m < 3; m++)
        p[m] = zs_cuda_peak_flops((zs_gemm_math)m, basis, sizeof basis);
    const char *g = getenv("ZS_GPU");
    if (g && !strcmp(g, "emu"))
        ZT_CHECK(p[0] == 0 && p[2] == 0 && strstr(basis, "peak unknown"),
                 "emulated GPU: peak %g, basis '%s'", p[2], basis);
    else if (p[2] > 0)
        ZT_CHECK(p[0] > 1e12 && p[1] > p[0] && p[2] > p[1], "peaks %g %g %g (%s)", p[0], p[1], p[2],
                 basis);
    printf("cuda_ops: peak: %s\n", basis);
}

static void check_memory(void) {
    if (fake) return;
    zs_mem_stats s0, s1, s2;
    size_t nbytes = ((size_t)1 << 20) + 3;
    void *p = NULL;
    zs_mem_get_stats(&s0);
    ZT_OK(zs_cuda_alloc(ZS_MEM_ACTIVATION, nbytes, "test activation", &p));
    zs_mem_get_stats(&s1);
    ZT_CHECK(s1.current[ZS_MEM_ACTIVATION] - s0.current[ZS_MEM_ACTIVATION] == nbytes,
             "alloc accounted %llu bytes, expected %zu",
             (unsigned long long)(s1.current[ZS_MEM_ACTIVATION] - s0.current[ZS_MEM_ACTIVATION]),
             nbytes);
    unsigned char *h = hbuf(nbytes);
    memset(h, 0xab, nbytes);
    ZT_OK(zs_cuda_memcpy_d2h(h, p, nbytes));
    size_t nonzero = 0;
    for (size_t i = 0; i < nbytes; i++)
        nonzero += h[i] != 0;
    ZT_CHECK(nonzero == 0, "zs_cuda_alloc: %zu bytes not zero-filled", nonzero);
    zs_cuda_free(p);
    zs_mem_get_stats(&s2);
    ZT_CHECK(s2.current[ZS_MEM_ACTIVATION] == s0.current[ZS_MEM_ACTIVATION],
             "free did not release the accounting");
    /* Over the cap: a clean ZS_ERR_OOM, nothing allocated or accounted. */
    zs_mem_set_cap(s2.total_current + 4096);
    p = (void *)1;
    zs_status st = zs_cuda_alloc(ZS_MEM_PARAM, (size_t)1 << 20, "over the cap", &p);
    ZT_CHECK(st == ZS_ERR_OOM && p == NULL, "over-cap alloc gave %s", zs_status_string(st));
    zs_mem_set_cap(0);
    zs_mem_get_stats(&s1);
    ZT_CHECK(s1.total_current == s2.total_current, "failed alloc left accounting behind");
    p = (void *)1;
    ZT_OK(zs_cuda_alloc(ZS_MEM_PARAM, 0, "empty", &p));
    ZT_CHECK(p == NULL, "zero-byte alloc returns NULL");
    zs_cuda_free(NULL);
    release();
}

/* An op queued on a created stream, then that stream synchronised. */
static void check_stream(void) {
    if (fake) return;
    size_t n = 300000;
    zs_stream_t *s = NULL;
    ZT_OK(zs_cuda_stream_create(&s));
    float *x = randn(n, 1.0f), *y = randn(n, 1.0f), *ref = clone(y, n);
    ZT_OK(cpu->axpy(NULL, ref, 0.75f, x, n));
    float *dx = up(x, n), *dy = up(y, n);
    ZT_OK(gpu->axpy(s, dy, 0.75f, dx, n));
    ZT_OK(gpu->sync(s));
    float *got = hf(n);
    ZT_OK(zs_cuda_memcpy_d2h(got, dy, n * sizeof(float)));
    ZT_CHECK(memcmp(got, ref, n * sizeof(float)) == 0, "axpy on a created stream");
    zs_cuda_stream_destroy(s);
    zs_cuda_stream_destroy(NULL);
    release();
}

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
    int exact_rounding = fake || (g && strcmp(g, "emu") == 0);
    double u = math == ZS_MATH_FP32 || exact_rounding ? 0.0
               : math == ZS_MATH_TF32                 ? ldexp(1.0, -10)
                                                      : ldexp(1.0, -7);
    float *A = randn(na, 1.0f), *B = randn(nb, 1.0f), *C0 = randn(nc, 1.0f);
    if (beta == 0.0f) zt_poison(C0, nc);
    float *want = hf(nc);
    double *bound = hbuf(nc * sizeof(double));
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
            bound[ci] = 2.0 * ((k + 2) * U32 * fabs(alpha) * sa + 2 * U32 * fabs(beta * c0)) +
                        (2 * u + u * u) * fabs(alpha) * sa + U32 * fabs(alpha * s + beta * c0);
        }
    const zs_ops *t = gpu->with_math(math);
    ZT_CHECK(t && t->gemm_math == math && strcmp(t->name, gpu->name) == 0,
             "with_math(%d) gave another table", (int)math);
    float *dA = up(A, na), *dB = up(B, nb), *dC = up(C0, nc);
    ZT_OK(t->gemm(NULL, ta, tb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc));
    char what[64];
    snprintf(what, sizeof what, "gemm math=%d ta=%d tb=%d beta=%g", (int)math, ta, tb,
             (double)beta);
    expect_bounded(what, dC, want, bound, nc);
    release();
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
    float *A = randn((size_t)m * k, 1.0f), *B = randn((size_t)k * n, 1.0f);
    double off_gpu = 0, off_ref = 0;
    float *dC = dbuf((size_t)m * n * sizeof(float));
    ZT_OK(gpu->with_math(math)->gemm(NULL, 0, 0, m, n, k, 1.0f, up(A, (size_t)m * k), m,
                                     up(B, (size_t)k * n), k, 0.0f, dC, m));
    float *C = down(dC, (size_t)m * n);
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
    release();
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
    float *A = randn(na, 1.0f), *B = randn(nb, 1.0f), *C0 = randn(nc, 1.0f);
    float *dC = up(C0, nc);
    ZT_OK(gpu->with_math(ZS_MATH_BF16)
              ->gemm(NULL, 0, transb, m, n, k, 1.0f, up(A, na), lda, up(B, nb), ldb, beta, dC, m));
    float *C = down(dC, nc);
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
    release();
}

/* Row-major linear forward and backward through zs_linear_* (the shared mapping onto the
 * column-major gemm), CUDA against CPU. Each element's tolerance scales with the same
 * computation on absolute values (sum |a b| over its dot products, plus |initial value| for
 * accumulating outputs): gamma_(k+2) of that for each side, times 2 for two sides. In bf16
 * both sides round the same inputs (the GPU's backward through gemm_linear_bwd, dout rounded
 * once), so the bound is the same. A shape whose backward operands do not fit the scratch
 * together (zs_linear_bwd_cast_elems 0) takes the two gemms' own plans there. */
static void check_linear(zs_gemm_math math, int N, int IC, int OC) {
    const zs_ops *c = cpu->with_math(math), *g = gpu->with_math(math);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn(ni, 1.0f), *W = randn(nw, 0.5f), *bias = randn(OC, 1.0f);
    float *dout = randn(no, 1.0f), *dinp0 = randn(ni, 1.0f), *dW0 = randn(nw, 1.0f),
          *db0 = randn(OC, 1.0f);
    float *ainp = hf(ni), *aW = hf(nw), *ab = hf(OC), *adout = hf(no), *adinp = hf(ni),
          *adW = hf(nw), *adb = hf(OC);
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
    float *out = hf(no), *scale_o = hf(no);
    float *dinp = clone(dinp0, ni), *dW = clone(dW0, nw), *db = clone(db0, OC);
    ZT_OK(zs_linear_fwd(c, NULL, out, inp, 0, W, bias, N, IC, OC));
    ZT_OK(zs_linear_fwd(cpu, NULL, scale_o, ainp, 0, aW, ab, N, IC, OC));
    ZT_OK(zs_linear_bwd(c, NULL, dinp, dW, db, dout, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd(cpu, NULL, adinp, adW, adb, adout, ainp, 0, aW, N, IC, OC));
    /* CUDA. */
    float *d_inp = up(inp, ni), *d_W = up(W, nw), *d_b = up(bias, OC), *d_dout = up(dout, no);
    float *d_out = up(poisoned(no), no);
    float *d_dinp = up(dinp0, ni), *d_dW = up(dW0, nw), *d_db = up(db0, OC);
    ZT_OK(zs_linear_fwd(g, NULL, d_out, d_inp, 0, d_W, d_b, N, IC, OC));
    ZT_OK(zs_linear_bwd(g, NULL, d_dinp, d_dW, d_db, d_dout, d_inp, 0, d_W, N, IC, OC));
    double *bo = hbuf(no * sizeof(double)), *bi = hbuf(ni * sizeof(double)),
           *bw = hbuf(nw * sizeof(double));
    for (size_t i = 0; i < no; i++)
        bo[i] = 2.0 * 2.0 * (IC + 2) * U32 * scale_o[i];
    for (size_t i = 0; i < ni; i++)
        bi[i] = 2.0 * 2.0 * (OC + 2) * U32 * adinp[i];
    for (size_t i = 0; i < nw; i++)
        bw[i] = 2.0 * 2.0 * (N + 2) * U32 * adW[i];
    expect_bounded("linear_fwd out", d_out, out, bo, no);
    expect_bounded("linear_bwd dinp", d_dinp, dinp, bi, ni);
    expect_bounded("linear_bwd dW", d_dW, dW, bw, nw);
    expect_bits("linear_bwd dbias (bias_bwd, column-owned)", d_db, db, OC);
    /* Overwriting dinp (never read: NaN there must not show) and without a bias gradient. */
    float *sdinp = hf(ni), *sdW = clone(dW0, nw), *d_sdinp = up(poisoned(ni), ni),
          *d_sdW = up(dW0, nw);
    ZT_OK(zs_linear_bwd_set(c, NULL, sdinp, sdW, NULL, dout, inp, 0, W, N, IC, OC));
    ZT_OK(zs_linear_bwd_set(g, NULL, d_sdinp, d_sdW, NULL, d_dout, d_inp, 0, d_W, N, IC, OC));
    expect_bounded("linear_bwd_set dinp", d_sdinp, sdinp, bi, ni);
    expect_bounded("linear_bwd_set dW", d_sdW, sdW, bw, nw);
    release();
}

/* A linear layer whose output went through a GELU (zs_linear_gelu_bwd_set, GPT-2's fc layer):
 * the bf16 table's one pass over the gradient (GELU's backward, the bias gradient and the
 * bf16 rounding of the gradient together) gives the bits of the separate ops on the same table
 * (gelu_bwd, then zs_linear_bwd_set), and the bias gradient the CPU's bits. N = 1100 rows: all
 * ZS_COLSUM_GROUPS partials, the first two twice, and a part of a segment. The separate ops
 * take the same gemm plans, so a shape too large for the one pass compares bits too. */
static void check_linear_gelu(int N, int IC, int OC) {
    const zs_ops *c = cpu->with_math(ZS_MATH_BF16), *g = gpu->with_math(ZS_MATH_BF16);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn(ni, 1.0f), *W = randn(nw, 0.5f), *pre = randn(no, 2.0f);
    float *dout = randn(no, 1.0f), *dW0 = randn(nw, 1.0f), *db0 = randn(OC, 1.0f);
    float *dinp = hf(ni), *dW = clone(dW0, nw), *db = clone(db0, OC), *tmp = hf(no);
    ZT_OK(zs_linear_gelu_bwd_set(c, NULL, dinp, dW, db, dout, pre, tmp, inp, 0, W, N, IC, OC));
    float *d_inp = up(inp, ni), *d_W = up(W, nw), *d_pre = up(pre, no), *d_dout = up(dout, no);
    float *u_dinp = up(poisoned(ni), ni), *u_dW = up(dW0, nw), *u_db = up(db0, OC),
          *u_tmp = up(poisoned(no), no);
    ZT_OK(g->gelu_bwd(NULL, u_tmp, d_pre, d_dout, no));
    ZT_OK(zs_linear_bwd_set(g, NULL, u_dinp, u_dW, u_db, u_tmp, d_inp, 0, d_W, N, IC, OC));
    float *f_dinp = up(poisoned(ni), ni), *f_dW = up(dW0, nw), *f_db = up(db0, OC),
          *f_tmp = up(poisoned(no), no);
    ZT_OK(zs_linear_gelu_bwd_set(g, NULL, f_dinp, f_dW, f_db, d_dout, d_pre, f_tmp, d_inp, 0, d_W,
                                 N, IC, OC));
    expect_bits("linear_gelu_bwd dinp (one pass = gelu_bwd, then linear_bwd)", f_dinp,
                down(u_dinp, ni), ni);
    expect_bits("linear_gelu_bwd dW (one pass = gelu_bwd, then linear_bwd)", f_dW, down(u_dW, nw),
                nw);
    expect_bits("linear_gelu_bwd dbias (one pass = gelu_bwd, then linear_bwd)", f_db,
                down(u_db, OC), OC);
    expect_bits("linear_gelu_bwd dbias (the CPU's)", f_db, db, OC);
    release();
}

/* ---- bias, embedding, norms, GELU --------------------------------------------------- */

static void check_bias(void) {
    int N = 33, OC = 300; /* OC over one block of threads */
    size_t no = (size_t)N * OC;
    float *out0 = randn(no, 1.0f), *bias = randn(OC, 1.0f), *dout = randn(no, 1.0f),
          *db0 = randn(OC, 1.0f);
    float *out = clone(out0, no), *db = clone(db0, OC);
    ZT_OK(cpu->bias_fwd(NULL, out, bias, N, OC));
    ZT_OK(cpu->bias_bwd(NULL, db, dout, N, OC));
    float *d_out = up(out0, no), *d_db = up(db0, OC);
    ZT_OK(gpu->bias_fwd(NULL, d_out, up(bias, OC), N, OC));
    ZT_OK(gpu->bias_bwd(NULL, d_db, up(dout, no), N, OC));
    expect_bits("bias_fwd (accumulates)", d_out, out, no);
    expect_bits("bias_bwd (accumulates)", d_db, db, OC);
    release();
}

static void check_embedding(int with_wpe, int grads, int docs) {
    int B = 3, T = 7, C = 70, V = 11; /* V small: tokens repeat */
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nbt = (size_t)B * T, no = nbt * C;
    int32_t *tok = hbuf(nbt * sizeof(int32_t));
    for (size_t i = 0; i < nbt; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    float *wte = randn((size_t)V * C, 1.0f), *wpe = with_wpe ? randn((size_t)T * C, 1.0f) : NULL;
    float *out = poisoned(no), *d_out = up(out, no);
    int32_t *d_tok = upi(tok, nbt);
    ZT_OK(cpu->embedding_fwd(NULL, out, tok, wte, wpe, B, T, C, seg));
    ZT_OK(gpu->embedding_fwd(NULL, d_out, d_tok, up(wte, (size_t)V * C),
                             wpe ? up(wpe, (size_t)T * C) : NULL, B, T, C, d_seg));
    expect_bits(with_wpe ? (docs ? "embedding_fwd (documents)" : "embedding_fwd")
                         : "embedding_fwd (no wpe)",
                d_out, out, no);
    /* grads: 1 dwte only, 2 dwpe only, 3 both. */
    float *dout = randn(no, 1.0f);
    float *dwte0 = randn((size_t)V * C, 1.0f), *dwpe0 = randn((size_t)T * C, 1.0f);
    float *dwte = clone(dwte0, (size_t)V * C), *dwpe = clone(dwpe0, (size_t)T * C);
    float *d_dwte = up(dwte0, (size_t)V * C), *d_dwpe = up(dwpe0, (size_t)T * C);
    ZT_OK(cpu->embedding_bwd(NULL, grads & 1 ? dwte : NULL, grads & 2 ? dwpe : NULL, dout, tok, B,
                             T, C, seg));
    ZT_OK(gpu->embedding_bwd(NULL, grads & 1 ? d_dwte : NULL, grads & 2 ? d_dwpe : NULL,
                             up(dout, no), d_tok, B, T, C, d_seg));
    expect_bits("embedding_bwd dwte", d_dwte, dwte, (size_t)V * C);
    expect_bits(docs ? "embedding_bwd dwpe (documents)" : "embedding_bwd dwpe", d_dwpe, dwpe,
                (size_t)T * C);
    release();
}

/* dwte over more rows than the GPU lists at a time (2048), more columns than a block owns
 * (256), ids on every part (id % 128): V = 1000, tokens drawn at random; and V = 1, one token
 * on every row, so one part holds the whole batch, repeated in every batch it walks. */
static void check_embedding_wte_rows(int V) {
    int B = 3, T = 1500, C = 300;
    size_t nbt = (size_t)B * T, no = nbt * C;
    int32_t *tok = hbuf(nbt * sizeof(int32_t));
    for (size_t i = 0; i < nbt; i++)
        tok[i] = (int32_t)zt_uniform(0, V);
    float *dout = randn(no, 1.0f), *dwte0 = randn((size_t)V * C, 1.0f);
    float *dwte = clone(dwte0, (size_t)V * C), *d_dwte = up(dwte0, (size_t)V * C);
    ZT_OK(cpu->embedding_bwd(NULL, dwte, NULL, dout, tok, B, T, C, NULL));
    ZT_OK(gpu->embedding_bwd(NULL, d_dwte, NULL, up(dout, no), upi(tok, nbt), B, T, C, NULL));
    expect_bits(V == 1 ? "embedding_bwd dwte (one token on every row)"
                       : "embedding_bwd dwte (4500 rows, 300 columns)",
                d_dwte, dwte, (size_t)V * C);
    release();
}

static void check_layernorm(void) {
    int N = 37, C = 203; /* C not a multiple of the 8 lanes */
    size_t n = (size_t)N * C;
    float *x = randn(n, 2.0f), *w = randn(C, 1.0f), *b = randn(C, 1.0f);
    for (size_t i = 0; i < n; i++)
        x[i] += 3.0f;
    float *out = poisoned(n), *mean = poisoned(N), *rstd = poisoned(N);
    float *d_out = up(out, n), *d_mean = up(mean, N), *d_rstd = up(rstd, N);
    float *d_x = up(x, n), *d_w = up(w, C);
    ZT_OK(cpu->layernorm_fwd(NULL, out, mean, rstd, x, w, b, N, C));
    ZT_OK(gpu->layernorm_fwd(NULL, d_out, d_mean, d_rstd, d_x, d_w, up(b, C), N, C));
    expect_bits("layernorm_fwd out", d_out, out, n);
    expect_bits("layernorm_fwd mean", d_mean, mean, N);
    expect_bits("layernorm_fwd rstd", d_rstd, rstd, N);
    float *dout = randn(n, 1.0f), *dinp0 = randn(n, 1.0f), *dw0 = randn(C, 1.0f),
          *db0 = randn(C, 1.0f);
    float *dinp = clone(dinp0, n), *dw = clone(dw0, C), *db = clone(db0, C);
    float *d_dinp = up(dinp0, n), *d_dw = up(dw0, C), *d_db = up(db0, C);
    ZT_OK(cpu->layernorm_bwd(NULL, dinp, dw, db, dout, x, w, mean, rstd, N, C));
    ZT_OK(gpu->layernorm_bwd(NULL, d_dinp, d_dw, d_db, up(dout, n), d_x, d_w, up(mean, N),
                             up(rstd, N), N, C));
    expect_bits("layernorm_bwd dinp", d_dinp, dinp, n);
    expect_bits("layernorm_bwd dw", d_dw, dw, C);
    expect_bits("layernorm_bwd db", d_db, db, C);
    release();
}

static void check_rmsnorm(void) {
    int N = 29, C = 203;
    size_t n = (size_t)N * C;
    float eps = 1e-6f;
    float *x = randn(n, 2.0f), *w = randn(C, 1.0f);
    float *out = poisoned(n), *rstd = poisoned(N);
    float *d_out = up(out, n), *d_rstd = up(rstd, N), *d_x = up(x, n), *d_w = up(w, C);
    ZT_OK(cpu->rmsnorm_fwd(NULL, out, rstd, x, w, N, C, eps));
    ZT_OK(gpu->rmsnorm_fwd(NULL, d_out, d_rstd, d_x, d_w, N, C, eps));
    expect_bits("rmsnorm_fwd out", d_out, out, n);
    expect_bits("rmsnorm_fwd rstd", d_rstd, rstd, N);
    float *dout = randn(n, 1.0f), *dinp0 = randn(n, 1.0f), *dw0 = randn(C, 1.0f);
    float *dinp = clone(dinp0, n), *dw = clone(dw0, C);
    float *d_dinp = up(dinp0, n), *d_dw = up(dw0, C);
    ZT_OK(cpu->rmsnorm_bwd(NULL, dinp, dw, dout, x, w, rstd, N, C));
    ZT_OK(gpu->rmsnorm_bwd(NULL, d_dinp, d_dw, up(dout, n), d_x, d_w, up(rstd, N), N, C));
    expect_bits("rmsnorm_bwd dinp", d_dinp, dinp, n);
    expect_bits("rmsnorm_bwd dw", d_dw, dw, C);
    release();
}

/* Inputs over GELU's whole range, tails and zero included. */
static float *gelu_inputs(size_t n) {
    float *x = randn(n, 3.0f);
    static const float special[] = {0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-30f, 5.5f};
    for (size_t i = 0; i < sizeof special / sizeof *special && i < n; i++)
        x[i * 7 % n] = special[i];
    return x;
}

static void check_gelu(void) {
    size_t n = 10007;
    float *x = gelu_inputs(n), *out = poisoned(n), *d_x = up(x, n), *d_out = up(out, n);
    ZT_OK(cpu->gelu_fwd(NULL, out, x, n));
    ZT_OK(gpu->gelu_fwd(NULL, d_out, d_x, n));
    expect_bits("gelu_fwd", d_out, out, n);
    float *d_y = up(x, n);
    ZT_OK(gpu->gelu_fwd(NULL, d_y, d_y, n));
    expect_bits("gelu_fwd in place", d_y, out, n);
    /* gelu_bwd overwrites dinp (poisoned here), with the bits of accumulating into zeros */
    float *dout = randn(n, 1.0f), *dinp = poisoned(n), *d_dinp = up(dinp, n);
    float *zeros = hf(n);
    memset(zeros, 0, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        zeros[i] += zs_gelu_grad(x[i]) * dout[i];
    ZT_OK(cpu->gelu_bwd(NULL, dinp, x, dout, n));
    ZT_OK(gpu->gelu_bwd(NULL, d_dinp, d_x, up(dout, n), n));
    ZT_CHECK(memcmp(dinp, zeros, n * sizeof(float)) == 0,
             "gelu_bwd on the CPU is not gelu' * dout added to zeros, bit for bit");
    expect_bits("gelu_bwd (overwrites)", d_dinp, dinp, n);
    release();
}

static void check_swiglu(void) {
    size_t n = 5003;
    float *g = gelu_inputs(n), *u = randn(n, 1.0f), *out = poisoned(n);
    float *d_g = up(g, n), *d_u = up(u, n), *d_out = up(out, n);
    ZT_OK(cpu->swiglu_fwd(NULL, out, g, u, n));
    ZT_OK(gpu->swiglu_fwd(NULL, d_out, d_g, d_u, n));
    expect_bits("swiglu_fwd", d_out, out, n);
    float *d_g2 = up(g, n), *d_u2 = up(u, n);
    ZT_OK(gpu->swiglu_fwd(NULL, d_g2, d_g2, d_u, n));
    ZT_OK(gpu->swiglu_fwd(NULL, d_u2, d_g, d_u2, n));
    expect_bits("swiglu_fwd out = gate", d_g2, out, n);
    expect_bits("swiglu_fwd out = up", d_u2, out, n);
    float *dout = randn(n, 1.0f), *dg = poisoned(n), *du = poisoned(n);
    float *d_dg = up(poisoned(n), n), *d_du = up(poisoned(n), n); /* overwritten, never read */
    ZT_OK(cpu->swiglu_bwd(NULL, dg, du, dout, g, u, n));
    ZT_OK(gpu->swiglu_bwd(NULL, d_dg, d_du, up(dout, n), d_g, d_u, n));
    expect_bits("swiglu_bwd dgate", d_dg, dg, n);
    expect_bits("swiglu_bwd dup", d_du, du, n);
    release();
}

/* ---- attention ---------------------------------------------------------------------- */

static void check_attention(int docs) {
    int B = 2, T = 13, C = 48, NH = 4; /* hs = 12: lane tails */
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = randn(nqkv, 1.0f), *out = poisoned(no), *att = poisoned(na);
    float *d_qkv = up(qkv, nqkv), *d_out = up(out, no), *d_att = up(att, na);
    ZT_OK(cpu->attention_fwd(NULL, out, att, qkv, B, T, C, NH, seg));
    ZT_OK(gpu->attention_fwd(NULL, d_out, d_att, d_qkv, B, T, C, NH, d_seg));
    expect_bits(docs ? "attention_fwd out (documents)" : "attention_fwd out", d_out, out, no);
    expect_bits(docs ? "attention_fwd att (documents)" : "attention_fwd att", d_att, att, na);
    float *dout = randn(no, 1.0f), *dqkv0 = randn(nqkv, 1.0f), *dqkv = clone(dqkv0, nqkv);
    float *d_dqkv = up(dqkv0, nqkv);
    ZT_OK(cpu->attention_bwd(NULL, dqkv, poisoned(na), dout, qkv, att, B, T, C, NH, seg));
    ZT_OK(gpu->attention_bwd(NULL, d_dqkv, up(poisoned(na), na), up(dout, no), d_qkv, up(att, na),
                             B, T, C, NH, d_seg));
    expect_bits(docs ? "attention_bwd dqkv (accumulates, documents)"
                     : "attention_bwd dqkv (accumulates)",
                d_dqkv, dqkv, nqkv);
    release();
}

static void check_attention_gqa(int NH, int NKV, int docs) {
    int B = 2, T = 11, hs = 10;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t nq = (size_t)B * T * NH * hs, nk = (size_t)B * T * NKV * hs, na = (size_t)B * NH * T * T;
    float *q = randn(nq, 1.0f), *k = randn(nk, 1.0f), *v = randn(nk, 1.0f);
    float *out = poisoned(nq), *att = poisoned(na);
    float *d_q = up(q, nq), *d_k = up(k, nk), *d_v = up(v, nk), *d_out = up(out, nq),
          *d_att = up(att, na);
    char what[96];
    const char *dw = docs ? " (documents)" : "";
    ZT_OK(cpu->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs, seg));
    ZT_OK(gpu->attention_gqa_fwd(NULL, d_out, d_att, d_q, d_k, d_v, B, T, NH, NKV, hs, d_seg));
    snprintf(what, sizeof what, "attention_gqa_fwd NH=%d NKV=%d out%s", NH, NKV, dw);
    expect_bits(what, d_out, out, nq);
    snprintf(what, sizeof what, "attention_gqa_fwd NH=%d NKV=%d att%s", NH, NKV, dw);
    expect_bits(what, d_att, att, na);
    float *dout = randn(nq, 1.0f), *dq0 = randn(nq, 1.0f), *dk0 = randn(nk, 1.0f),
          *dv0 = randn(nk, 1.0f);
    float *dq = clone(dq0, nq), *dk = clone(dk0, nk), *dv = clone(dv0, nk);
    float *d_dq = up(dq0, nq), *d_dk = up(dk0, nk), *d_dv = up(dv0, nk);
    ZT_OK(cpu->attention_gqa_bwd(NULL, dq, dk, dv, poisoned(na), dout, q, k, v, att, B, T, NH, NKV,
                                 hs, seg));
    ZT_OK(gpu->attention_gqa_bwd(NULL, d_dq, d_dk, d_dv, up(poisoned(na), na), up(dout, nq), d_q,
                                 d_k, d_v, up(att, na), B, T, NH, NKV, hs, d_seg));
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dq%s", NH, NKV, dw);
    expect_bits(what, d_dq, dq, nq);
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dk%s", NH, NKV, dw);
    expect_bits(what, d_dk, dk, nk);
    snprintf(what, sizeof what, "attention_gqa_bwd NH=%d NKV=%d dv%s", NH, NKV, dw);
    expect_bits(what, d_dv, dv, nk);
    release();
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
    float *qb = randn(nq, 1.0f), *kb = packed ? qb + QD : randn(nk, 1.0f),
          *vb = packed ? qb + QD + KD : randn(nk, 1.0f);
    float *d_qb = up(qb, nq), *d_kb = packed ? d_qb + QD : up(kb, nk),
          *d_vb = packed ? d_qb + QD + KD : up(vb, nk);
    float *out = poisoned(no), *lse = poisoned(nl), *d_out = up(out, no), *d_lse = up(lse, nl);
    char what[96];
    ZT_OK(cpu->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                   (int)ldkv, seg));
    ZT_OK(gpu->flash_attention_fwd(NULL, d_out, d_lse, d_qb, d_kb, d_vb, B, T, NH, NKV, hs,
                                   (int)ldq, (int)ldkv, d_seg));
    snprintf(what, sizeof what, "flash_attention_fwd NH=%d NKV=%d%s%s out", NH, NKV,
             packed ? " packed" : "", dw);
    expect_bits(what, d_out, out, no);
    snprintf(what, sizeof what, "flash_attention_fwd NH=%d NKV=%d%s%s lse", NH, NKV,
             packed ? " packed" : "", dw);
    expect_bits(what, d_lse, lse, nl);
    /* Gradients overwrite NaN prefills: the CPU's must all be finite, the GPU's its bits. */
    size_t ng = packed ? nq : nq + 2 * nk;
    float *g0 = poisoned(ng), *g = clone(g0, ng), *d_g = up(g0, ng), *dout = randn(no, 1.0f);
    size_t ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    ZT_OK(cpu->flash_attention_bwd(NULL, g, g + ok, g + ov, poisoned(nl), dout, qb, kb, vb, out,
                                   lse, B, T, NH, NKV, hs, (int)ldq, (int)ldkv, seg));
    ZT_OK(gpu->flash_attention_bwd(NULL, d_g, d_g + ok, d_g + ov, up(poisoned(nl), nl),
                                   up(dout, no), d_qb, d_kb, d_vb, d_out, d_lse, B, T, NH, NKV, hs,
                                   (int)ldq, (int)ldkv, d_seg));
    snprintf(what, sizeof what, "flash_attention_bwd NH=%d NKV=%d%s%s dq | dk | dv (overwrite)", NH,
             NKV, packed ? " packed" : "", dw);
    size_t left = 0;
    for (size_t i = 0; i < ng; i++)
        left += !isfinite(g[i]);
    ZT_CHECK(left == 0, "%s: %zu of %zu CPU gradients not overwritten", what, left, ng);
    expect_bits(what, d_g, g, ng);
    release();
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
    float *x = randn(n, 1.0f), *out = poisoned(n), *d_x = up(x, n), *d_out = up(out, n);
    double *bound = hbuf(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        size_t head = i / hs, j = i % hs, pj = j < (size_t)half ? j + half : j - half;
        double pair = fabs(x[i]) + fabs(x[head * hs + pj]);
        bound[i] = 2.0 * pair * (T * 5e-7 + 4 * U32) + 4 * U32;
    }
    ZT_OK(cpu->rope_fwd(NULL, out, x, B, T, NH, hs, theta, seg));
    ZT_OK(gpu->rope_fwd(NULL, d_out, d_x, B, T, NH, hs, theta, d_seg));
    expect_bounded(docs ? "rope_fwd (documents)" : "rope_fwd", d_out, out, bound, n);
    float *gpu_out = down(d_out, n);
    float *d_y = up(x, n);
    ZT_OK(gpu->rope_fwd(NULL, d_y, d_y, B, T, NH, hs, theta, d_seg));
    expect_bits("rope_fwd in place (against out of place)", d_y, gpu_out, n);
    float *din = poisoned(n), *d_din = up(din, n);
    ZT_OK(cpu->rope_bwd(NULL, din, x, B, T, NH, hs, theta, seg));
    ZT_OK(gpu->rope_bwd(NULL, d_din, d_x, B, T, NH, hs, theta, d_seg));
    expect_bounded(docs ? "rope_bwd (documents)" : "rope_bwd", d_din, din, bound, n);
    /* bwd(fwd(x)) = x up to rounding: the rotation is orthogonal. */
    ZT_OK(gpu->rope_bwd(NULL, d_y, d_y, B, T, NH, hs, theta, d_seg));
    expect_close("rope_bwd(rope_fwd(x)) in place", d_y, x, n, 1e-5);
    release();
}

/* ---- loss --------------------------------------------------------------------------- */

/* Gradients are bitwise (exp, sums and divisions are shared); the loss adds logf(sum), where
 * CUDA's logf (1 ulp) and libm's (< 1 ulp) may differ by 2 ulp of a value near log(V) < 8. */
static void check_softmax_xent(int V, int Vp) {
    int N = 9;
    size_t nl = (size_t)N * Vp;
    float *logits = randn(nl, 2.0f);
    int32_t *tg = hbuf(N * sizeof(int32_t));
    for (int r = 0; r < N; r++)
        tg[r] = (int32_t)zt_uniform(0, V);
    tg[3] = -1; /* masked row */
    float dloss = 1.0f / N;
    float *loss = poisoned(N), *dl = poisoned(nl);
    float *d_logits = up(logits, nl), *d_loss = up(loss, N), *d_dl = up(dl, nl);
    int32_t *d_tg = upi(tg, N);
    char what[64];
    ZT_OK(cpu->softmax_xent(NULL, loss, dl, logits, tg, N, V, Vp, dloss));
    ZT_OK(gpu->softmax_xent(NULL, d_loss, d_dl, d_logits, d_tg, N, V, Vp, dloss));
    snprintf(what, sizeof what, "softmax_xent V=%d Vp=%d losses", V, Vp);
    expect_close(what, d_loss, loss, N, 8 * U32);
    snprintf(what, sizeof what, "softmax_xent V=%d Vp=%d dlogits", V, Vp);
    expect_bits(what, d_dl, dl, nl);
    /* In place over the logits, and loss only. */
    float *d_inplace = up(logits, nl), *d_loss2 = up(poisoned(N), N), *d_loss3 = up(poisoned(N), N);
    ZT_OK(gpu->softmax_xent(NULL, d_loss2, d_inplace, d_inplace, d_tg, N, V, Vp, dloss));
    expect_bits("softmax_xent dlogits in place", d_inplace, dl, nl);
    ZT_OK(gpu->softmax_xent(NULL, d_loss3, NULL, d_logits, d_tg, N, V, Vp, dloss));
    expect_close("softmax_xent losses without gradient", d_loss3, loss, N, 8 * U32);
    expect_bits("softmax_xent logits untouched without gradient", d_logits, logits, nl);
    if (!fake) {
        /* A target outside [-1, V) cannot be refused on the device: its row turns NaN. */
        int32_t bad = V;
        h2d(d_tg + 5, &bad, sizeof bad);
        ZT_OK(gpu->softmax_xent(NULL, d_loss, d_dl, d_logits, d_tg, N, V, Vp, dloss));
        float *l = down(d_loss, N), *g = down(d_dl, nl);
        ZT_CHECK(isnan(l[5]) && isnan(g[(size_t)5 * Vp]) && !isnan(l[4]),
                 "out-of-range target gives a NaN row, others unaffected");
    }
    release();
}

/* ---- optimizer, casts, reductions, init --------------------------------------------- */

static void check_adamw(void) {
    size_t n = 3001;
    float *p = randn(n, 1.0f), *m = randn(n, 0.1f), *v = hf(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)zt_uniform(0, 0.01);
    float *d_p = up(p, n), *d_m = up(m, n), *d_v = up(v, n);
    for (int t = 1; t <= 3; t++) {
        float *g = randn(n, 1.0f);
        ZT_OK(cpu->adamw(NULL, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t));
        ZT_OK(
            gpu->adamw(NULL, d_p, up(g, n), d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t));
    }
    expect_bits("adamw param (3 steps)", d_p, p, n);
    expect_bits("adamw m", d_m, m, n);
    expect_bits("adamw v", d_v, v, n);
    release();
}

/* The fused launch over a unit's tensors: bitwise as the CPU, gaps left as they were. */
static void check_adamw_segs(void) {
    size_t n = 5000;
    float *p = randn(n, 1.0f), *m = randn(n, 0.1f), *v = hf(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)zt_uniform(0, 0.01);
    zs_adamw_segs s = {
        .n = 3, .lo = {16, 1040, 3000}, .hi = {1000, 2999, 4997}, .decay = {1, 0, 1}};
    float *d_p = up(p, n), *d_m = up(m, n), *d_v = up(v, n);
    for (int t = 1; t <= 3; t++) {
        float *g = randn(n, 1.0f);
        ZT_OK(cpu->adamw_segs(NULL, p, g, m, v, &s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t));
        ZT_OK(gpu->adamw_segs(NULL, d_p, up(g, n), d_m, d_v, &s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                              0.5f, t));
    }
    expect_bits("adamw_segs param (3 steps, gaps untouched)", d_p, p, n);
    expect_bits("adamw_segs m", d_m, m, n);
    expect_bits("adamw_segs v", d_v, v, n);
    release();
}

/* The bf16-gradient optimizer ops: sumsq16 by groups and adamw_segs16, bitwise as the CPU,
 * and on each backend bitwise as widening the gradients and calling sumsq / adamw_segs (what
 * the engine did before, chunk by chunk). */
static void check_bf16_optimizer(void) {
    size_t n = 100001, group = 16384, ng = (n + group - 1) / group;
    float *x = randn(n, 1.0f), *w = hf(n);
    zs_bf16 *h16 = hbuf(n * sizeof(zs_bf16));
    ZT_OK(cpu->cast(NULL, h16, ZS_DTYPE_BF16, x, ZS_DTYPE_F32, n));
    ZT_OK(cpu->cast(NULL, w, ZS_DTYPE_F32, h16, ZS_DTYPE_BF16, n));
    zs_bf16 *d16 = dbuf(n * sizeof(zs_bf16));
    h2d(d16, h16, n * sizeof(zs_bf16));
    double *want = hbuf(ng * sizeof(double)), *cpu_g = hbuf(ng * sizeof(double));
    double *got = hbuf(ng * sizeof(double)), *d_out = dbuf(ng * sizeof(double));
    for (size_t k = 0; k < ng; k++)
        ZT_OK(cpu->sumsq(NULL, &want[k], w + k * group,
                         n - k * group < group ? n - k * group : group));
    ZT_OK(cpu->sumsq16(NULL, cpu_g, h16, n, group));
    ZT_OK(gpu->sumsq16(NULL, d_out, d16, n, group));
    ZT_OK(gpu->sync(NULL));
    d2h(got, d_out, ng * sizeof(double));
    ZT_CHECK(memcmp(cpu_g, want, ng * sizeof(double)) == 0,
             "sumsq16 on the CPU is not sumsq of the widened groups, bit for bit");
    ZT_CHECK(memcmp(got, want, ng * sizeof(double)) == 0,
             "sumsq16 on the GPU differs from the CPU");
    ZT_CHECK(gpu->sumsq16(NULL, d_out, d16, n, 1000) == ZS_ERR_INVALID,
             "sumsq16: a group that is no multiple of the sumsq chunk is refused");
    /* AdamW over three segments with gaps, 3 steps */
    float *p = randn(n, 1.0f), *m = randn(n, 0.1f), *v = hf(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)zt_uniform(0, 0.01);
    float *p2 = clone(p, n), *m2 = clone(m, n), *v2 = clone(v, n);
    zs_adamw_segs s = {
        .n = 3, .lo = {16, 40000, 70000}, .hi = {39990, 69999, 100001}, .decay = {1, 0, 1}};
    float *d_p = up(p, n), *d_m = up(m, n), *d_v = up(v, n);
    for (int t = 1; t <= 3; t++) {
        ZT_OK(cpu->adamw_segs16(NULL, p, h16, m, v, &s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t));
        ZT_OK(cpu->adamw_segs(NULL, p2, w, m2, v2, &s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t));
        ZT_OK(gpu->adamw_segs16(NULL, d_p, d16, d_m, d_v, &s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
                                t));
    }
    ZT_CHECK(memcmp(p, p2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0 &&
                 memcmp(v, v2, n * sizeof(float)) == 0,
             "adamw_segs16 on the CPU is not adamw_segs of the widened gradients, bit for bit");
    expect_bits("adamw_segs16 param (3 steps, gaps untouched)", d_p, p, n);
    expect_bits("adamw_segs16 m", d_m, m, n);
    expect_bits("adamw_segs16 v", d_v, v, n);
    release();
}

static void check_cast(void) {
    size_t n = 4099;
    float *x = randn(n, 100.0f);
    static const uint32_t special[] = {
        0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u,
        0x80000000u, 0x00000001u, 0x3f808000u, /* tie, even: rounds down */
        0x3f818000u,                           /* tie, odd: rounds up */
        0x7f7fffffu,                           /* rounds to infinity */
        0x7f800001u,                           /* signalling NaN stays NaN */
    };
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) {
        float f;
        memcpy(&f, &special[i], sizeof f);
        x[i * 13] = f;
    }
    zs_bf16 *h16 = hbuf(n * sizeof(zs_bf16)), *g16 = hbuf(n * sizeof(zs_bf16));
    memset(g16, 0xff, n * sizeof(zs_bf16));
    zs_bf16 *d16 = dbuf(n * sizeof(zs_bf16));
    h2d(d16, g16, n * sizeof(zs_bf16));
    float *d_x = up(x, n);
    ZT_OK(cpu->cast(NULL, h16, ZS_DTYPE_BF16, x, ZS_DTYPE_F32, n));
    ZT_OK(gpu->cast(NULL, d16, ZS_DTYPE_BF16, d_x, ZS_DTYPE_F32, n));
    ZT_OK(gpu->sync(NULL));
    d2h(g16, d16, n * sizeof(zs_bf16));
    ZT_CHECK(memcmp(g16, h16, n * sizeof(zs_bf16)) == 0, "cast f32 -> bf16 bitwise");
    float *back = poisoned(n), *d_back = up(back, n);
    ZT_OK(cpu->cast(NULL, back, ZS_DTYPE_F32, h16, ZS_DTYPE_BF16, n));
    ZT_OK(gpu->cast(NULL, d_back, ZS_DTYPE_F32, d16, ZS_DTYPE_BF16, n));
    expect_bits("cast bf16 -> f32", d_back, back, n);
    float *d_same = up(poisoned(n), n);
    ZT_OK(gpu->cast(NULL, d_same, ZS_DTYPE_F32, d_x, ZS_DTYPE_F32, n));
    expect_bits("cast f32 -> f32 (copy)", d_same, x, n);
    zs_status st = gpu->cast(NULL, d_same, ZS_DTYPE_I32, d_x, ZS_DTYPE_F32, n);
    ZT_CHECK(st == ZS_ERR_UNSUPPORTED, "cast f32 -> i32 refused (got %s)", zs_status_string(st));
    release();
}

static void check_scale_fill_residual(void) {
    size_t n = 70001;
    float *a = randn(n, 1.0f), *b = randn(n, 1.0f), *y0 = randn(n, 1.0f);
    float *d_a = up(a, n), *d_b = up(b, n);
    /* residual: out of place, out = a, out = b */
    float *r = poisoned(n), *d_r = up(r, n);
    ZT_OK(cpu->residual_fwd(NULL, r, a, b, n));
    ZT_OK(gpu->residual_fwd(NULL, d_r, d_a, d_b, n));
    expect_bits("residual_fwd", d_r, r, n);
    float *d_a2 = up(a, n), *d_b2 = up(b, n);
    ZT_OK(gpu->residual_fwd(NULL, d_a2, d_a2, d_b, n));
    ZT_OK(gpu->residual_fwd(NULL, d_b2, d_a, d_b2, n));
    expect_bits("residual_fwd out = a", d_a2, r, n);
    expect_bits("residual_fwd out = b", d_b2, r, n);
    /* axpy accumulates */
    float *y = clone(y0, n), *d_y = up(y0, n);
    ZT_OK(cpu->axpy(NULL, y, -0.37f, a, n));
    ZT_OK(gpu->axpy(NULL, d_y, -0.37f, d_a, n));
    expect_bits("axpy", d_y, y, n);
    /* scale, fill */
    float *s = clone(a, n), *d_s = up(a, n);
    ZT_OK(cpu->scale(NULL, s, 1.0f / 3.0f, n));
    ZT_OK(gpu->scale(NULL, d_s, 1.0f / 3.0f, n));
    expect_bits("scale", d_s, s, n);
    float *f = poisoned(n), *d_f = up(f, n);
    ZT_OK(cpu->fill(NULL, f, -2.5f, n));
    ZT_OK(gpu->fill(NULL, d_f, -2.5f, n));
    expect_bits("fill", d_f, f, n);
    /* zero-length ops are no-ops, even with NULL buffers */
    ZT_OK(gpu->axpy(NULL, NULL, 1.0f, NULL, 0));
    ZT_OK(gpu->fill(NULL, NULL, 0.0f, 0));
    release();
}

/* The same chunk decomposition and order as the CPU: equal doubles, for sizes around the
 * chunk boundary; the result lands in device memory, in stream order, on a created stream
 * too (whose scratch grows with the largest call). */
static void check_sumsq(void) {
    static const size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 3 * 4096 + 17, 250001};
    zs_stream_t *s = NULL;
    if (!fake) ZT_OK(zs_cuda_stream_create(&s));
    for (int square = 0; square < 2; square++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            size_t n = sizes[si];
            float *x = randn(n ? n : 1, 3.0f), *d_x = up(x, n ? n : 1);
            double want = -1.0, got = -2.0, *d_got = dbuf(sizeof(double));
            ZT_OK((square ? cpu->sumsq : cpu->sum)(NULL, &want, x, n));
            ZT_OK((square ? gpu->sumsq : gpu->sum)(si % 2 ? s : NULL, d_got, d_x, n));
            ZT_OK(gpu->sync(si % 2 ? s : NULL));
            d2h(&got, d_got, sizeof got);
            ZT_CHECK(memcmp(&got, &want, sizeof got) == 0, "%s n=%zu: %.17g vs CPU %.17g",
                     square ? "sumsq" : "sum", n, got, want);
        }
    if (!fake) zs_cuda_stream_destroy(s);
    release();
}

/* One decoding position over a KV cache: the cache rows and the output as the CPU computes
 * them. Without RoPE every operation is shared arithmetic: bitwise. With RoPE (LLaMA) q and k
 * first turn through cosf/sinf/powf, whose CUDA versions differ by an ulp or two: the stored k
 * rows and the output are then compared within the RoPE bound scaled by the attention's
 * weights (at most the largest |v|). */
static void check_decode_attention(int NH, int NKV, float theta) {
    int hs = 8, cap = 12, pos = 7, QD = NH * hs, KD = NKV * hs;
    size_t nc = (size_t)cap * KD;
    float *q = randn(QD, 1.0f), *k = randn(KD, 1.0f), *v = randn(KD, 1.0f);
    float *kc = randn(nc, 1.0f), *vc = randn(nc, 1.0f), *out = poisoned(QD);
    float *sc = poisoned((size_t)NH * cap);
    float *d_q = up(q, QD), *d_k = up(k, KD), *d_v = up(v, KD), *d_kc = up(kc, nc);
    float *d_vc = up(vc, nc), *d_out = up(out, QD), *d_sc = up(sc, (size_t)NH * cap);
    ZT_OK(cpu->decode_attention(NULL, out, q, k, v, kc, vc, sc, NH, NKV, hs, pos, theta));
    ZT_OK(gpu->decode_attention(NULL, d_out, d_q, d_k, d_v, d_kc, d_vc, d_sc, NH, NKV, hs, pos,
                                theta));
    char what[80];
    snprintf(what, sizeof what, "decode_attention NH=%d NKV=%d theta=%g", NH, NKV, (double)theta);
    if (theta <= 0.0f) {
        expect_bits(what, d_out, out, QD);
        expect_bits("decode_attention: k cache", d_kc, kc, nc);
        expect_bits("decode_attention: v cache", d_vc, vc, nc);
    } else {
        /* RoPE's angle error (as check_rope) on |q|,|k| <= 4.5, through a softmax of scores
         * summed over hs terms: generous 1e-4 relative bound on values of order 1. */
        expect_close(what, d_out, out, QD, 1e-4);
        expect_close("decode_attention: k cache (rotated)", d_kc, kc, nc, 1e-5);
        expect_bits("decode_attention: v cache", d_vc, vc, nc);
    }
    release();
}

/* Drawing tokens: the device's cuRAND Philox draw and argmax against the CPU's computation of
 * the same stream (kernels/sample.h), over many indices and two temperatures: the same tokens. */
static void check_sample(void) {
    int V = 3001, n = 64, diff = 0, first = -1;
    float *logits = randn((size_t)V, 2.0f), *d_logits = up(logits, (size_t)V);
    int32_t *d_tok = dbuf(sizeof(int32_t));
    for (int k = 0; k < n; k++) {
        float temp = k == 0 ? 0.0f : k % 2 ? 0.7f : 1.5f;
        int32_t want = -1, got = -2;
        ZT_OK(cpu->sample(NULL, &want, logits, V, temp, 20241124, (uint64_t)k * 977));
        ZT_OK(gpu->sample(NULL, d_tok, d_logits, V, temp, 20241124, (uint64_t)k * 977));
        ZT_OK(gpu->sync(NULL));
        d2h(&got, d_tok, sizeof got);
        if (got != want && !diff++) first = k;
    }
    ZT_CHECK(diff == 0, "sample: %d of %d draws differ from the CPU's, first at draw %d", diff, n,
             first);
    release();
}

static void check_copy(void) {
    size_t nbytes = 1001;
    unsigned char *src = hbuf(nbytes), *got = hbuf(nbytes), *junk = hbuf(nbytes);
    for (size_t i = 0; i < nbytes; i++) {
        src[i] = (unsigned char)zt_uniform(0, 256);
        junk[i] = 0xa5;
    }
    void *d_src = dbuf(nbytes), *d_dst = dbuf(nbytes);
    h2d(d_src, src, nbytes);
    h2d(d_dst, junk, nbytes);
    ZT_OK(gpu->copy(NULL, d_dst, d_src, nbytes));
    ZT_OK(gpu->copy(NULL, d_src, d_src, nbytes)); /* dst == src: no-op */
    ZT_OK(gpu->sync(NULL));
    d2h(got, d_dst, nbytes);
    ZT_CHECK(memcmp(got, src, nbytes) == 0, "copy of %zu bytes", nbytes);
    if (!fake) {
        zs_status st = gpu->copy(NULL, (char *)d_dst + 1, d_dst, 100);
        ZT_CHECK(st == ZS_ERR_INVALID, "overlapping copy refused (got %s)", zs_status_string(st));
    }
    release();
}

/* Box-Muller through logf and cosf, which differ between libm and CUDA by ~1-2 ulp: with
 * r = sqrt(-2 log u1) <= 5.8 the value moves by about r * 2 ulp(1) + |value| * 1 ulp, under
 * 2e-6 * std; the bound is 1e-5 * std. The shard property (element i is the same value
 * whatever index0 a piece starts at) holds bitwise on the device. */
static void check_init_normal(void) {
    size_t n = 10000;
    uint64_t seed = 1234567, sid = 42, index0 = 98765;
    float std = 0.02f;
    float *want = poisoned(n), *d_x = up(want, n);
    ZT_OK(cpu->init_normal(NULL, want, n, seed, sid, index0, std));
    ZT_OK(gpu->init_normal(NULL, d_x, n, seed, sid, index0, std));
    float *got = down(d_x, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    ZT_CHECK(worst <= 1e-5 * std, "init_normal: max |diff| %.3g > %.3g", worst, 1e-5 * std);
    float *d_y = up(poisoned(n), n);
    size_t cut = 3333;
    ZT_OK(gpu->init_normal(NULL, d_y, cut, seed, sid, index0, std));
    ZT_OK(gpu->init_normal(NULL, d_y + cut, n - cut, seed, sid, index0 + cut, std));
    expect_bits("init_normal in two shards", d_y, got, n);
    release();
}

/* Launches over more than 65535 blocks of 256 threads (grids are capped there, so only a
 * grid-stride loop covers the rest): tensors the size of gpt2-124m's token embedding (50257 x
 * 768 = 38.6M elements), through fill, scale, axpy, the casts and AdamW, bitwise as the CPU. */
static void check_large(void) {
    size_t n = (size_t)50257 * 768;
    float *x = randn(n, 1.0f), *y = randn(n, 1.0f);
    float *d_x = up(x, n), *d_y = up(y, n);
    ZT_OK(cpu->scale(NULL, x, 0.75f, n));
    ZT_OK(gpu->scale(NULL, d_x, 0.75f, n));
    ZT_OK(cpu->axpy(NULL, y, -0.5f, x, n));
    ZT_OK(gpu->axpy(NULL, d_y, -0.5f, d_x, n));
    expect_bits("scale over 38.6M elements", d_x, x, n);
    expect_bits("axpy over 38.6M elements", d_y, y, n);
    zs_bf16 *d16 = dbuf(n * sizeof(zs_bf16));
    ZT_OK(gpu->cast(NULL, d16, ZS_DTYPE_BF16, d_y, ZS_DTYPE_F32, n));
    ZT_OK(gpu->fill(NULL, d_x, 3.0f, n));
    ZT_OK(gpu->cast(NULL, d_x, ZS_DTYPE_F32, d16, ZS_DTYPE_BF16, n));
    zs_bf16 *h16 = hbuf(n * sizeof(zs_bf16));
    ZT_OK(cpu->cast(NULL, h16, ZS_DTYPE_BF16, y, ZS_DTYPE_F32, n));
    ZT_OK(cpu->cast(NULL, x, ZS_DTYPE_F32, h16, ZS_DTYPE_BF16, n));
    expect_bits("cast f32 -> bf16 -> f32 over 38.6M elements", d_x, x, n);
    float *m = randn(n, 0.1f), *v = hf(n), *g = randn(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 97) * 1e-4f;
    float *d_m = up(m, n), *d_v = up(v, n);
    ZT_OK(cpu->adamw(NULL, y, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1));
    ZT_OK(gpu->adamw(NULL, d_y, up(g, n), d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1));
    expect_bits("adamw over 38.6M elements", d_y, y, n);
    release();
}

/* ---- argument validation ------------------------------------------------------------ */

static void check_errors(void) {
    float *d = dbuf(64 * sizeof(float));
    ZT_CHECK(gpu->gemm(NULL, 2, 0, 4, 4, 4, 1.0f, d, 4, d, 4, 0.0f, d, 4) == ZS_ERR_INVALID,
             "gemm: bad trans flag");
    ZT_CHECK(gpu->gemm(NULL, 0, 0, 4, 4, 4, 1.0f, d, 3, d, 4, 0.0f, d, 4) == ZS_ERR_INVALID,
             "gemm: lda < m");
    ZT_CHECK(gpu->layernorm_fwd(NULL, d, d, d, d, d, d, 4, 0) == ZS_ERR_INVALID,
             "layernorm: C = 0");
    ZT_CHECK(gpu->attention_fwd(NULL, d, d, d, 1, 2, 6, 4, NULL) == ZS_ERR_INVALID,
             "attention: C not a multiple of NH");
    ZT_CHECK(gpu->attention_gqa_fwd(NULL, d, d, d, d, d, 1, 2, 4, 3, 2, NULL) == ZS_ERR_INVALID,
             "attention_gqa: NKV does not divide NH");
    ZT_CHECK(gpu->rope_fwd(NULL, d, d, 1, 2, 1, 3, 10000.0f, NULL) == ZS_ERR_INVALID,
             "rope: odd hs");
    ZT_CHECK(gpu->adamw(NULL, d, d, d, d, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 0) ==
                 ZS_ERR_INVALID,
             "adamw: t = 0");
    ZT_CHECK(gpu->softmax_xent(NULL, d, d, d, (const int32_t *)d, 2, 5, 4, 1.0f) == ZS_ERR_INVALID,
             "softmax_xent: Vp < V");
    double r = -1.0, *d_r = dbuf(sizeof(double));
    ZT_CHECK(gpu->sumsq(NULL, NULL, d, 4) == ZS_ERR_INVALID, "sumsq: NULL result");
    ZT_OK(gpu->sumsq(NULL, d_r, d, 0));
    ZT_OK(gpu->sync(NULL));
    d2h(&r, d_r, sizeof r);
    ZT_CHECK(r == 0.0, "sumsq of nothing is 0");
    ZT_CHECK(gpu->decode_attention(NULL, d, d, d, d, d, d, d, 4, 3, 2, 0, 0.0f) == ZS_ERR_INVALID,
             "decode_attention: NKV does not divide NH");
    ZT_CHECK(gpu->decode_attention(NULL, d, d, d, d, d, d, d, 2, 2, 3, 0, 1e4f) == ZS_ERR_INVALID,
             "decode_attention: RoPE on an odd head size");
    release();
}

int main(void) {
    zt_init("cuda_ops");
    cpu = zs_ops_cpu();
    const char *f = getenv("ZS_TEST_CUDA_FAKE");
    fake = f && *f && strcmp(f, "0") != 0;
    if (fake) {
        printf("cuda_ops: ZS_TEST_CUDA_FAKE: CPU table stands in for CUDA (harness check only)\n");
        gpu = zs_ops_cpu();
    } else {
        zt_gpu_require();
        const zs_device *dev = NULL;
        /* The CUDA tables, and the device ledger as the one the checks read and cap. */
        ZT_OK(zs_backend_select("cuda", &gpu, &dev));
        ZT_REQUIRE(gpu != NULL, "zs_ops_cuda() is NULL in a CUDA build");
        ZT_OK(zs_cuda_set_device(0));
    }
    check_table();
    check_peak();
    check_memory();
    check_stream();
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
        check_linear_gelu(1100, 8, 65536);
    } else {
        printf("cuda_ops: not run under ZS_TEST_QUICK: the bf16 gemm's operands in pieces\n");
    }
    check_linear(ZS_MATH_FP32, 70, 96, 80);
    check_linear(ZS_MATH_BF16, 70, 96, 80);
    check_linear_gelu(1100, 96, 80);
    check_bias();
    for (int grads = 1; grads <= 3; grads++) {
        check_embedding(1, grads, 0);
        check_embedding(0, grads, 0);
        check_embedding(1, grads, 1);
    }
    check_embedding_wte_rows(1000);
    check_embedding_wte_rows(1);
    check_layernorm();
    check_rmsnorm();
    check_gelu();
    check_swiglu();
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
    check_softmax_xent(37, 40);
    check_softmax_xent(3001, 3072);
    check_adamw();
    check_adamw_segs();
    check_bf16_optimizer();
    check_cast();
    check_scale_fill_residual();
    check_sumsq();
    check_decode_attention(4, 4, 0.0f);
    check_decode_attention(6, 2, 10000.0f);
    check_sample();
    check_copy();
    check_init_normal();
    check_large();
    check_errors();
    return zt_finish();
}

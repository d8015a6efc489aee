/* bf16 GEMM inputs (docs/cuda.md "GEMM operands"): with --dtype bf16 a norm's, GELU's or
 * SwiGLU's output, which only GEMMs read, is stored in bf16 by its producer and taken as it is by
 * the bf16 table's gemm16, so it is half the bytes and never rounded again. The claim is that
 * this changes no bit, so every check here is bit for bit, on the table under test (the CPU's;
 * with the argument "cuda" the CUDA bf16 table's, against the CPU's too):
 *  - layernorm_fwd16, rmsnorm_fwd16, bias_gelu_fwd16 (with and without a bias, rows aligned or
 *    not) and swiglu_fwd16 store zs_f32_to_bf16 of their fp32 twins' outputs, and the same
 *    statistics or kept sums; swiglu_bwd16 and rope_bwd16 store their fp32 twins' gradients
 *    rounded;
 *  - gemm16 with A, B or both bf16, in all four transpose cases and with beta 0 and 1, equals
 *    gemm on the fp32 operands the bf16 ones were rounded from (on the CPU also with a small
 *    panel: its multi-panel path);
 *  - zs_linear_fwd and zs_linear_gelu_fwd with a bias equal their parts (gemm16, then bias_fwd
 *    or bias_gelu_fwd(16)): the CUDA table's bias in cuBLASLt's epilogue changes no bit, nor
 *    does its fallback where the bias is not 16-byte aligned; the one exception is the bf16
 *    GELU in cuBLASLt's epilogue, whose GELU is cuBLASLt's own (expect_gelu16 bounds it);
 *  - zs_linear_fwd / _bwd_set / _gelu_bwd_set with a bf16 input equal the fp32 input's (the
 *    CUDA table's fused backward, and its pieces of rows where W, dout and inp do not fit);
 *    zs_linear_bwd_g16 with a bf16 output gradient equals zs_linear_bwd(_set) with the fp32
 *    one it rounds, with fp32 and bf16 inputs (on CUDA its bias gradient from cuBLASLt's
 *    BGRADB epilogue, in the library's order: expect_bias_sums bounds it);
 *  - CUDA: gemm16's pieces past the scratch (ZS_GEMM_CAST_MAX), along m, n and k, equal the
 *    same products on bf16 operands (no rounding pass), the k pieces added in order.
 * Outputs are poisoned (NaN) first. */
#include "backend/cpu/cpu.h"
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/kernels/gelu.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const zs_ops *T;   /* the table under test (bf16 math) */
static const zs_ops *CPU; /* the CPU's bf16 table */
static int g_cuda;
static int g_real; /* a real GPU (ZS_GPU=real), not the emulated one */

/* A copy of h in the table's memory (the host's on the CPU). */
static void *up(const void *h, size_t nbytes) {
    if (!g_cuda) return memcpy(zt_hbuf(nbytes), h, nbytes);
    void *d = zt_dbuf(nbytes + 16);
    ZT_OK(zs_cuda_memcpy_h2d(d, h, nbytes));
    return d;
}

/* A host view of d once the table's work is done (d itself on the CPU). */
static void *down(const void *d, size_t nbytes) {
    ZT_OK(T->sync(NULL));
    return g_cuda ? zt_hcopy(d, nbytes) : (void *)d;
}

static float *randn(size_t n, float sd) {
    float *x = zt_hbuf(n * sizeof(float));
    zt_fill_normal(x, n, sd);
    return x;
}

static void *poison(size_t nbytes) {
    unsigned char *x = zt_hbuf(nbytes);
    memset(x, 0xff, nbytes); /* NaN as fp32 and as bf16 */
    return up(x, nbytes);
}

static zs_bf16 *rounded(const float *x, size_t n) {
    zs_bf16 *r = zt_hbuf(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = zs_f32_to_bf16(x[i]);
    return r;
}

/* The producers: each *_fwd16 stores its fp32 twin's values rounded, with the same statistics.
 * off shifts the buffers by one element, so no row of odd width is aligned. */
static void check_producers(int N, int C, int off) {
    char what[160];
    size_t n = (size_t)N * C;
    float *x = randn(n + 1, 1.0f) + off, *y = randn(n + 1, 1.0f) + off;
    float *w = randn((size_t)C, 1.0f), *b = randn((size_t)C, 0.5f);
    float *dx = up(x - off, (n + 1) * 4), *dy = up(y - off, (n + 1) * 4);
    float *dw = up(w, (size_t)C * 4), *db = up(b, (size_t)C * 4);
    float *o32 = poison((n + 1) * 4), *s1 = poison((size_t)N * 4), *s2 = poison((size_t)N * 4);
    zs_bf16 *o16 = (zs_bf16 *)poison((n + 1) * 2) + off;
    float *t1 = poison((size_t)N * 4), *t2 = poison((size_t)N * 4);
    dx += off, dy += off, o32 += off;

    ZT_OK(T->layernorm_fwd(NULL, o32, s1, s2, dx, dw, db, N, C));
    ZT_OK(T->layernorm_fwd16(NULL, o16, t1, t2, dx, dw, db, N, C));
    snprintf(what, sizeof what, "%s layernorm_fwd16 N=%d C=%d%s", T->name, N, C,
             off ? " unaligned" : "");
    zt_expect_bits(what, down(o16, n * 2), rounded(down(o32, n * 4), n), n * 2);
    zt_expect_bits(what, down(t1, (size_t)N * 4), down(s1, (size_t)N * 4), (size_t)N * 4);
    zt_expect_bits(what, down(t2, (size_t)N * 4), down(s2, (size_t)N * 4), (size_t)N * 4);

    ZT_OK(T->rmsnorm_fwd(NULL, o32, s1, dx, dw, N, C, 1e-6f));
    ZT_OK(T->rmsnorm_fwd16(NULL, o16, t1, dx, dw, N, C, 1e-6f));
    snprintf(what, sizeof what, "%s rmsnorm_fwd16 N=%d C=%d%s", T->name, N, C,
             off ? " unaligned" : "");
    zt_expect_bits(what, down(o16, n * 2), rounded(down(o32, n * 4), n), n * 2);
    zt_expect_bits(what, down(t1, (size_t)N * 4), down(s1, (size_t)N * 4), (size_t)N * 4);

    ZT_OK(T->swiglu_fwd(NULL, o32, dx, dy, n));
    ZT_OK(T->swiglu_fwd16(NULL, o16, dx, dy, n));
    snprintf(what, sizeof what, "%s swiglu_fwd16 n=%zu%s", T->name, n, off ? " unaligned" : "");
    zt_expect_bits(what, down(o16, n * 2), rounded(down(o32, n * 4), n), n * 2);

    { /* swiglu_bwd16: swiglu_bwd's two gradients, rounded (dout: x again) */
        float *g32 = (float *)poison((n + 1) * 4) + off, *u32 = (float *)poison((n + 1) * 4) + off;
        zs_bf16 *g16 = (zs_bf16 *)poison((n + 1) * 2) + off;
        zs_bf16 *u16 = (zs_bf16 *)poison((n + 1) * 2) + off;
        ZT_OK(T->swiglu_bwd(NULL, g32, u32, dx, dy, dx, n));
        ZT_OK(T->swiglu_bwd16(NULL, g16, u16, dx, dy, dx, n));
        snprintf(what, sizeof what, "%s swiglu_bwd16 n=%zu%s", T->name, n, off ? " unaligned" : "");
        zt_expect_bits(what, down(g16, n * 2), rounded(down(g32, n * 4), n), n * 2);
        zt_expect_bits(what, down(u16, n * 2), rounded(down(u32, n * 4), n), n * 2);
    }

    for (int with_bias = 0; with_bias < 2; with_bias++) {
        /* bias_gelu_fwd16: the sum and its GELU rounded, against bias_gelu_fwd's sum and GELU
         * rounded; gelu_bwd16 against gelu_bwd on the widened sums (dout: y) */
        float *p32 = (float *)up(x - off, (n + 1) * 4) + off;
        zs_bf16 *p16 = (zs_bf16 *)poison((n + 1) * 2) + off;
        float *g32 = (float *)poison((n + 1) * 4) + off, *g16 = (float *)poison((n + 1) * 4) + off;
        ZT_OK(T->bias_gelu_fwd(NULL, p32, o32, with_bias ? db : NULL, N, C));
        ZT_OK(T->bias_gelu_fwd16(NULL, p16, dx, o16, with_bias ? db : NULL, N, C));
        snprintf(what, sizeof what, "%s bias_gelu_fwd16 N=%d C=%d%s%s", T->name, N, C,
                 with_bias ? "" : " no bias", off ? " unaligned" : "");
        zs_bf16 *want16 = rounded(down(p32, n * 4), n);
        zt_expect_bits(what, down(p16, n * 2), want16, n * 2);
        zt_expect_bits(what, down(o16, n * 2), rounded(down(o32, n * 4), n), n * 2);
        float *wide = zt_hbuf((n + 1) * 4);
        for (size_t i = 0; i < n; i++)
            wide[i + off] = zs_bf16_to_f32(want16[i]);
        float *dwide = (float *)up(wide, (n + 1) * 4) + off;
        ZT_OK(T->gelu_bwd(NULL, g32, dwide, dy, n));
        ZT_OK(T->gelu_bwd16(NULL, g16, p16, dy, n));
        snprintf(what, sizeof what, "%s gelu_bwd16 n=%zu%s", T->name, n, off ? " unaligned" : "");
        zt_expect_bits(what, down(g16, n * 4), down(g32, n * 4), n * 4);
    }
    zt_release();
}

/* gemm16 against gemm on the fp32 operands (packed, as the models pass them). */
static void check_gemm16(int ta, int tb, int m, int n, int k, float beta) {
    char what[160];
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)m * n;
    float *A = randn(na, 1.0f), *B = randn(nb, 1.0f), *C0 = randn(nc, 1.0f);
    float *dA = up(A, na * 4), *dB = up(B, nb * 4);
    zs_bf16 *dA16 = up(rounded(A, na), na * 2), *dB16 = up(rounded(B, nb), nb * 2);
    float *want = up(C0, nc * 4);
    ZT_OK(T->gemm(NULL, ta, tb, m, n, k, 1.0f, dA, ar, dB, br, beta, want, m));
    float *w = memcpy(zt_hbuf(nc * 4), down(want, nc * 4), nc * 4);
    for (int mode = 1; mode < 4; mode++) { /* A bf16, B bf16, both */
        int a16 = mode & 1, b16 = mode >> 1;
        float *got = up(C0, nc * 4);
        ZT_OK(T->gemm16(NULL, ta, tb, m, n, k, 1.0f, a16 ? (void *)dA16 : dA, a16, ar,
                        b16 ? (void *)dB16 : dB, b16, br, beta, got, m));
        snprintf(what, sizeof what, "%s gemm16 %c%c m=%d n=%d k=%d beta=%g, %s bf16", T->name,
                 ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, beta,
                 a16 && b16 ? "both"
                 : a16      ? "A"
                            : "B");
        zt_expect_bits(what, down(got, nc * 4), w, nc * 4);
    }
    zt_release();
}

/* A linear layer with its input fp32 and bf16 (rounded from it): forward, backward (overwriting
 * dinp, with a bias) and the GELU form's backward (its input bf16 beside a bf16 input, fp32
 * beside fp32: values exact in bf16), bit for bit. */
static void check_linear(int N, int IC, int OC, int with_bias) {
    char what[160];
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = randn(ni, 1.0f), *W = randn(nw, 0.05f), *bias = randn((size_t)OC, 0.1f);
    float *g = randn(no, 1.0f), *pre = randn(no, 1.0f);
    float *dx = up(x, ni * 4), *dW = up(W, nw * 4),
          *db = with_bias ? up(bias, (size_t)OC * 4) : NULL;
    zs_bf16 *pre16 = rounded(pre, no); /* the GELU's input kept in bf16 beside a bf16 input */
    for (size_t i = 0; i < no; i++)
        pre[i] = zs_bf16_to_f32(pre16[i]);
    float *dg = up(g, no * 4), *dpre = up(pre, no * 4);
    zs_bf16 *dx16 = up(rounded(x, ni), ni * 2), *dpre16 = up(pre16, no * 2);
    float *out[2], *dinp[2], *gW[2], *gb[2], *tmp = poison(no * 4), *gW0 = randn(nw, 1.0f);
    for (int h = 0; h < 2; h++) {
        const void *in = h ? (const void *)dx16 : dx;
        out[h] = poison(no * 4), dinp[h] = poison(ni * 4);
        gW[h] = up(gW0, nw * 4), gb[h] = up(bias, (size_t)OC * 4);
        ZT_OK(zs_linear_fwd(T, NULL, out[h], in, h, dW, db, N, IC, OC));
        ZT_OK(zs_linear_bwd_set(T, NULL, dinp[h], gW[h], with_bias ? gb[h] : NULL, dg, in, h, dW, N,
                                IC, OC));
        ZT_OK(zs_linear_gelu_bwd_set(T, NULL, dinp[h], gW[h], with_bias ? gb[h] : NULL, dg,
                                     h ? (const void *)dpre16 : dpre, tmp, in, h, dW, N, IC, OC));
    }
    snprintf(what, sizeof what, "%s linear N=%d IC=%d OC=%d%s, bf16 input", T->name, N, IC, OC,
             with_bias ? " bias" : "");
    zt_expect_bits(what, down(out[1], no * 4),
                   memcpy(zt_hbuf(no * 4), down(out[0], no * 4), no * 4), no * 4);
    zt_expect_bits(what, down(dinp[1], ni * 4),
                   memcpy(zt_hbuf(ni * 4), down(dinp[0], ni * 4), ni * 4), ni * 4);
    zt_expect_bits(what, down(gW[1], nw * 4), memcpy(zt_hbuf(nw * 4), down(gW[0], nw * 4), nw * 4),
                   nw * 4);
    zt_release();
}

/* out^T = W in^T, as zs_linear_fwd multiplies: gemm16 with a bf16 input, else gemm. */
static zs_status product(const float *W, const void *in, int in16, float *out, int N, int IC,
                         int OC) {
    if (in16) return T->gemm16(NULL, 1, 0, OC, N, IC, 1.0f, W, 0, IC, in, 1, IC, 0.0f, out, OC);
    return T->gemm(NULL, 1, 0, OC, N, IC, 1.0f, W, IC, in, IC, 0.0f, out, OC);
}

/* got against want, two sums of the same products out^T = W x^T (+ bias) in fp32 in other
 * orders: each is within (IC - 1) u sum |w x| of the exact sum (u = 2^-24), and the bias's add
 * rounds once more, so they differ by at most 2 IC u sum |w x| + 2 u |want| (W and x as the
 * GEMM took them, rounded to bf16). */
static void expect_same_sums(const char *what, const float *got, const float *want, const float *W,
                             const float *x, int N, int IC, int OC) {
    const double u = 1.0 / 16777216.0;
    double worst = 0.0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double mag = 0.0;
            for (int i = 0; i < IC; i++)
                mag += fabs((double)zs_bf16_to_f32(zs_f32_to_bf16(W[(size_t)o * IC + i])) *
                            zs_bf16_to_f32(zs_f32_to_bf16(x[(size_t)n * IC + i])));
            size_t j = (size_t)n * OC + o;
            double d = fabs((double)got[j] - want[j]);
            double bound = 2.0 * IC * u * mag + 2.0 * u * fabs(want[j]);
            worst = d / bound > worst ? d / bound : worst;
        }
    ZT_CHECK(worst <= 1.0, "%s: %.3g of the bound between two orders of the sums", what, worst);
}

/* act (bf16) = bf16(gelu(s)) for the fp32 sums s that pre (bf16) holds rounded, whatever
 * GELU cuBLASLt's epilogue takes: |s - pre| <= ulp16(pre) / 2 and |gelu'| <= 1.13, so act is
 * within 0.57 ulp16(pre) of gelu(pre) (zs_gelu's), plus act's own rounding (ulp16(act) / 2) and
 * the epilogue GELU's fp32 error: up to 2^-12 |s| (0.5 s (1 + tanh u) cancels where s < 0, and
 * a GPU's hardware tanh is good to 2^-11 relative). Returns how many act are not
 * bf16(gelu(pre)), the GELU of the rounded sum. */
static size_t expect_gelu16(const char *what, const zs_bf16 *act, const zs_bf16 *pre, size_t n) {
    size_t bad = 0, apart = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        float p = zs_bf16_to_f32(pre[i]), a = zs_bf16_to_f32(act[i]), g = zs_gelu(p);
        int ep, ea;
        frexpf(p, &ep), frexpf(a, &ea);
        float tol = 0.57f * ldexpf(1.0f, ep - 8) + 0.5f * ldexpf(1.0f, ea - 8) +
                    ldexpf(fabsf(p) * 1.01f, -12);
        if (!(fabsf(a - g) <= tol) && bad++ == 0) worst = i;
        apart += act[i].bits != zs_f32_to_bf16(g).bits;
    }
    ZT_CHECK(!bad,
             "%s: %zu of %zu GELU outputs outside the bound from their kept input (first "
             "at %zu: pre %g, act %g)",
             what, bad, n, worst, zs_bf16_to_f32(pre[worst]), zs_bf16_to_f32(act[worst]));
    return apart;
}

/* The linear forward with a bias (linear_fwd_bias where the table has it: the CUDA bf16
 * table's cuBLASLt epilogue) against its parts on the same table: gemm16 (or gemm) and then
 * bias_fwd, and the GELU form against the product then bias_gelu_fwd(16) with the bias, bit for
 * bit but for the GELU epilogue's own GELU (expect_gelu16: the kept sums bit for bit, the
 * outputs within their bound); on a real GPU, where cuBLASLt may choose another kernel for the
 * product than cublasGemmEx, the outputs within two orders' bound (expect_same_sums). off 1
 * moves the bias off 16-byte alignment (the CUDA table's fallback: the parts). */
static void check_linear_bias(int N, int IC, int OC, int off) {
    char what[160];
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = randn(ni, 1.0f), *W = randn(nw, 0.05f), *bias = randn((size_t)OC + 1, 0.1f);
    float *dx = up(x, ni * 4), *dW = up(W, nw * 4),
          *db = (float *)up(bias, ((size_t)OC + 1) * 4) + off;
    zs_bf16 *dx16 = up(rounded(x, ni), ni * 2);
    for (int h = 0; h < 2; h++) {
        const void *in = h ? (const void *)dx16 : dx;
        float *got = poison(no * 4), *want = poison(no * 4), *tmp = poison(no * 4);
        void *pre = poison(no * 4), *act = poison(no * 4), *act0 = poison(no * 4);
        float *pre0 = poison(no * 4);
        zs_bf16 *pre16 = poison(no * 2);
        size_t an = no * (h ? 2 : 4);
        ZT_OK(zs_linear_fwd(T, NULL, got, in, h, dW, db, N, IC, OC));
        ZT_OK(product(dW, in, h, want, N, IC, OC));
        ZT_OK(T->bias_fwd(NULL, want, db, N, OC));
        ZT_OK(zs_linear_gelu_fwd(T, NULL, pre, act, tmp, in, h, dW, db, N, IC, OC));
        ZT_OK(product(dW, in, h, pre0, N, IC, OC));
        if (h) /* pre kept in bf16: the rounded sum */
            ZT_OK(T->bias_gelu_fwd16(NULL, pre16, pre0, act0, db, N, OC));
        else
            ZT_OK(T->bias_gelu_fwd(NULL, pre0, act0, db, N, OC));
        snprintf(what, sizeof what, "%s linear N=%d IC=%d OC=%d, bias%s, %s input: fused = parts",
                 T->name, N, IC, OC, off ? " unaligned" : "", h ? "bf16" : "fp32");
        if (g_real) {
            expect_same_sums(what, down(got, no * 4),
                             memcpy(zt_hbuf(no * 4), down(want, no * 4), no * 4), W, x, N, IC, OC);
            if (!h) {
                expect_same_sums(what, down(pre, no * 4),
                                 memcpy(zt_hbuf(no * 4), down(pre0, no * 4), no * 4), W, x, N, IC,
                                 OC);
            } else { /* the GELU of the epilogue's sums, whatever their order */
                expect_gelu16(what, down(act, an),
                              memcpy(zt_hbuf(no * 2), down(pre, no * 2), no * 2), no);
            }
            continue;
        }
        zt_expect_bits(what, down(got, no * 4), memcpy(zt_hbuf(no * 4), down(want, no * 4), no * 4),
                       no * 4);
        if (h)
            zt_expect_bits(what, down(pre, no * 2),
                           memcpy(zt_hbuf(no * 2), down(pre16, no * 2), no * 2), no * 2);
        else
            zt_expect_bits(what, down(pre, no * 4),
                           memcpy(zt_hbuf(no * 4), down(pre0, no * 4), no * 4), no * 4);
        if (h && T->linear_fwd_bias && !off) { /* cuBLASLt's GELU epilogue */
            zs_bf16 *a = down(act, an), *p = memcpy(zt_hbuf(no * 2), down(pre, no * 2), no * 2);
            size_t apart = expect_gelu16(what, a, p, no);
            ZT_CHECK(apart > 0,
                     "%s: no GELU output differs from the GELU of its rounded input, "
                     "so the epilogue's GELU is not of the unrounded sum",
                     what);
            continue;
        }
        zt_expect_bits(what, down(act, an), memcpy(zt_hbuf(an), down(act0, an), an), an);
    }
    zt_release();
}

/* A residual layer's forward (zs_linear_residual_fwd, no keep) against its parts on the same
 * table: the product, then bias_residual_fwd's x + (product + bias). Where the table takes it
 * in one GEMM (linear_fwd_bias with res: x the GEMM's C, the bias in its epilogue), the sum is
 * (product + x) + bias: each result is the fp32 sum of the IC exact products (bf16 times bf16),
 * x and the bias in some order, within (IC + 1) u S of the exact sum (S the sum of their
 * magnitudes), so the two differ by at most 2 (IC + 1) u S; on the emulated GPU the orders must
 * differ somewhere (the epilogue ran), and off 1 (the bias off 16-byte alignment: the parts)
 * gives the parts' bits. Without a bias (off 2: no epilogue), x + product commutes: the parts'
 * bits on the emulated GPU, whose sums of IC <= 64 products take x after them either way. Out
 * apart from x or x itself gives the same bits, and x apart is kept. */
static void check_linear_residual(int N, int IC, int OC, int off) {
    char what[160];
    const double u = 1.0 / 16777216.0;
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC, apart = 0, bad = 0;
    float *x = randn(ni, 1.0f), *W = randn(nw, 0.05f), *bias = randn((size_t)OC + 1, 0.1f);
    float *res = randn(no, 1.0f), *dres = up(res, no * 4), *dW = up(W, nw * 4),
          *db = off == 2 ? NULL : (float *)up(bias, ((size_t)OC + 1) * 4) + off;
    for (int h = 0; h < 2; h++) {
        const void *in = h ? up(rounded(x, ni), ni * 2) : up(x, ni * 4);
        float *got = poison(no * 4), *want = poison(no * 4), *tmp = poison(no * 4);
        float *same = up(res, no * 4); /* out is x */
        ZT_OK(zs_linear_residual_fwd(T, NULL, got, NULL, dres, tmp, in, h, dW, db, N, IC, OC));
        ZT_OK(zs_linear_residual_fwd(T, NULL, same, NULL, same, tmp, in, h, dW, db, N, IC, OC));
        ZT_OK(product(dW, in, h, tmp, N, IC, OC));
        ZT_OK(T->bias_residual_fwd(NULL, want, NULL, dres, tmp, db, N, OC));
        snprintf(what, sizeof what, "%s linear N=%d IC=%d OC=%d + residual, %s, %s input", T->name,
                 N, IC, OC,
                 off == 2 ? "no bias"
                 : off    ? "bias unaligned"
                          : "bias",
                 h ? "bf16" : "fp32");
        float *g = memcpy(zt_hbuf(no * 4), down(got, no * 4), no * 4);
        float *w = memcpy(zt_hbuf(no * 4), down(want, no * 4), no * 4);
        zt_expect_bits(what, down(same, no * 4), g, no * 4);
        zt_expect_bits(what, down(dres, no * 4), res, no * 4);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                size_t j = (size_t)n * OC + o;
                double mag = fabs(res[j]) + (db ? fabs(bias[o + off]) : 0.0);
                for (int i = 0; i < IC; i++)
                    mag += fabs((double)zs_bf16_to_f32(zs_f32_to_bf16(W[(size_t)o * IC + i])) *
                                zs_bf16_to_f32(zs_f32_to_bf16(x[(size_t)n * IC + i])));
                bad += !(fabs((double)g[j] - w[j]) <= 2.0 * (IC + 1) * u * mag);
                apart += g[j] != w[j];
            }
    }
    ZT_CHECK(!bad, "%s: %zu of %zu sums off their parts' by more than two orders' bound", what, bad,
             2 * no);
    if (!g_real && (off || !T->linear_fwd_bias))
        ZT_CHECK(!apart, "%s: %zu of %zu sums are not the parts' bits", what, apart, 2 * no);
    else if (!g_real)
        ZT_CHECK(apart > 0, "%s: every sum is the parts' bits, so the epilogue did not add x",
                 what);
    zt_release();
}

/* rope_bwd16 against rope_bwd rounded, on one table (the rotation's cosf/sinf are the table's
 * own), without and with documents (seg: a row's second document starts at t = 5). */
static void check_rope16(int B, int Tn, int NH, int hs) {
    char what[160];
    size_t n = (size_t)B * Tn * NH * hs;
    float *x = randn(n, 1.0f);
    int32_t *seg = zt_hbuf((size_t)B * Tn * sizeof(int32_t));
    for (int i = 0; i < B * Tn; i++)
        seg[i] = i % Tn < 5 ? 0 : 5;
    const float *dx = up(x, n * 4);
    const int32_t *dseg = up(seg, (size_t)B * Tn * sizeof(int32_t));
    for (int docs = 0; docs < 2; docs++) {
        float *o32 = poison(n * 4);
        zs_bf16 *o16 = poison(n * 2);
        ZT_OK(T->rope_bwd(NULL, o32, dx, B, Tn, NH, hs, 10000.0f, docs ? dseg : NULL));
        ZT_OK(T->rope_bwd16(NULL, o16, dx, B, Tn, NH, hs, 10000.0f, docs ? dseg : NULL));
        snprintf(what, sizeof what, "%s rope_bwd16 B=%d T=%d NH=%d hs=%d%s", T->name, B, Tn, NH, hs,
                 docs ? " documents" : "");
        zt_expect_bits(what, down(o16, n * 2), rounded(down(o32, n * 4), n), n * 2);
    }
    zt_release();
}

/* The bias gradient of a bf16 G (got) against the fp32 path's on its widened values (want):
 * the CPU's the same bits; the CUDA table's from cuBLASLt's BGRADB epilogue (gemm_lt_cuda.cu),
 * whose order of the N additions is the library's, so each column is held, as want is too, to
 * the bound of any order of fp32 additions: (N + 1) 2^-24 (|db0| + sum |g|) from the exact sum
 * db0 + sum g in double. */
static void expect_bias_sums(const char *what, const float *got, const float *want,
                             const float *db0, const float *g, int N, int OC) {
    if (!g_cuda) {
        zt_expect_bits(what, got, want, (size_t)OC * 4);
        return;
    }
    int bad = 0;
    for (int j = 0; j < OC; j++) {
        double sum = db0[j], mag = fabs(db0[j]);
        for (int n = 0; n < N; n++)
            sum += g[(size_t)n * OC + j], mag += fabs(g[(size_t)n * OC + j]);
        double bound = (N + 1) * ldexp(mag, -24);
        bad += !(fabs(got[j] - sum) <= bound) + !(fabs(want[j] - sum) <= bound);
    }
    ZT_CHECK(!bad,
             "%s: %d bias sums off their exact sums by more than (N + 1) 2^-24 of their "
             "magnitudes",
             what, bad);
}

/* zs_linear_bwd_g16, its output gradient stored in bf16 (rounded from the fp32 one), against
 * zs_linear_bwd_set / zs_linear_bwd on the fp32 gradient, with an fp32 and a bf16 input, bit for
 * bit: the same products in the same pieces (past the scratch too), without the rounding. With
 * a bias (a table with gemm_linear_bwd: GPT-2's c_attn after flash_attention_bwd16g) the fp32
 * gradient is the rounded one widened, so the bias sums take the same values, added in the
 * CPU's order there and, on the CUDA table, in cuBLASLt's (expect_bias_sums). */
static void check_linear_g16(int N, int IC, int OC) {
    char what[160];
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *x = randn(ni, 1.0f), *W = randn(nw, 0.05f), *g = randn(no, 1.0f);
    float *gW0 = randn(nw, 1.0f), *di0 = randn(ni, 1.0f), *gb0 = randn((size_t)OC, 1.0f);
    zs_bf16 *g16 = rounded(g, no);
    float *gr = zt_hbuf(no * 4);
    for (size_t i = 0; i < no; i++)
        gr[i] = zs_bf16_to_f32(g16[i]);
    float *dx = up(x, ni * 4), *dW = up(W, nw * 4), *dg = up(g, no * 4), *dgr = up(gr, no * 4);
    zs_bf16 *dx16 = up(rounded(x, ni), ni * 2), *dg16 = up(g16, no * 2);
    for (int bias = 0; bias < 1 + !!T->gemm_linear_bwd; bias++)
        for (int in16 = 0; in16 < 2; in16++)
            for (int set = 0; set < 2; set++) {
                const void *in = in16 ? (const void *)dx16 : dx;
                const float *d32 = bias ? dgr : dg;
                float *dinp[2], *gW[2], *gb[2] = {NULL, NULL};
                for (int h = 0; h < 2; h++) {
                    dinp[h] = up(di0, ni * 4), gW[h] = up(gW0, nw * 4);
                    if (bias) gb[h] = up(gb0, (size_t)OC * 4);
                    if (!h && set)
                        ZT_OK(zs_linear_bwd_set(T, NULL, dinp[h], gW[h], gb[h], d32, in, in16, dW,
                                                N, IC, OC));
                    else if (!h)
                        ZT_OK(zs_linear_bwd(T, NULL, dinp[h], gW[h], gb[h], d32, in, in16, dW, N,
                                            IC, OC));
                    else
                        ZT_OK(zs_linear_bwd_g16(T, NULL, dinp[h], 0, gW[h], gb[h], dg16, in, in16,
                                                dW, N, IC, OC, set));
                }
                snprintf(what, sizeof what, "%s linear_bwd_g16 N=%d IC=%d OC=%d%s%s%s", T->name, N,
                         IC, OC, in16 ? ", bf16 input" : "", set ? ", set" : "",
                         bias ? ", bias" : "");
                zt_expect_bits(what, down(dinp[1], ni * 4),
                               memcpy(zt_hbuf(ni * 4), down(dinp[0], ni * 4), ni * 4), ni * 4);
                zt_expect_bits(what, down(gW[1], nw * 4),
                               memcpy(zt_hbuf(nw * 4), down(gW[0], nw * 4), nw * 4), nw * 4);
                if (bias)
                    expect_bias_sums(what, down(gb[1], (size_t)OC * 4),
                                     memcpy(zt_hbuf((size_t)OC * 4), down(gb[0], (size_t)OC * 4),
                                            (size_t)OC * 4),
                                     gb0, gr, N, OC);
            }
    if (!T->gemm_linear_bwd) { /* a bias on a bf16 gradient: refused, naming the table */
        zs_status st = zs_linear_bwd_g16(T, NULL, up(di0, ni * 4), 0, up(gW0, nw * 4),
                                         up(gb0, (size_t)OC * 4), dg16, dx, 0, dW, N, IC, OC, 1);
        ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "gemm_linear_bwd"),
                 "%s linear_bwd_g16 with a bias: refused naming gemm_linear_bwd (%s)", T->name,
                 zs_last_error());
    }
    zt_release();
}

/* CUDA: gemm16 with its fp32 operand past the scratch, rounded in pieces, against gemm16 on
 * both operands bf16 (nothing to round) over the same pieces: along m or n each piece its own
 * rows or columns of C, along k the pieces' products added in order. dim and piece are what
 * zs_gemm16_plan's rule gives (docs/cuda.md): its own stored columns where the fp32 pair would
 * not be rounded at all, else the fp32 pair's own pieces (zs_gemm_cast_plan, piece -1 here),
 * which cuBLAS's choice of kernel by shape makes the only sure way to keep their bits. */
static void check_pieces(int ta, int tb, int a16, int m, int n, int k, int dim, int piece) {
    char what[200];
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)m * n;
    float *A = randn(na, 1.0f), *B = randn(nb, 1.0f);
    void *dA = a16 ? up(rounded(A, na), na * 2) : up(A, na * 4);
    void *dB = a16 ? up(B, nb * 4) : up(rounded(B, nb), nb * 2);
    const zs_bf16 *rA = a16 ? dA : up(rounded(A, na), na * 2);
    const zs_bf16 *rB = a16 ? up(rounded(B, nb), nb * 2) : dB;
    float *got = poison(nc * 4), *want = poison(nc * 4);
    if (piece < 0) {
        zs_gemm_cast f = zs_gemm_cast_plan(ta, tb, m, n, k, ar, br);
        piece = dim == ZS_SPLIT_K ? f.k_piece : f.n_piece;
    }
    int len = dim == ZS_SPLIT_M ? m : dim == ZS_SPLIT_N ? n : k;
    ZT_CHECK(piece > 0 && piece < len, "the plan splits %d (piece %d)", len, piece);
    ZT_OK(T->gemm16(NULL, ta, tb, m, n, k, 1.0f, dA, a16, ar, dB, !a16, br, 0.0f, got, m));
    for (int c0 = 0; piece > 0 && c0 < len; c0 += piece) {
        int nc0 = len - c0 < piece ? len - c0 : piece;
        size_t ao = 0, bo = 0, co = 0;
        if (dim == ZS_SPLIT_M)
            ao = ta ? (size_t)c0 * ar : (size_t)c0, co = (size_t)c0;
        else if (dim == ZS_SPLIT_N)
            bo = tb ? (size_t)c0 : (size_t)c0 * br, co = (size_t)c0 * m;
        else
            ao = ta ? (size_t)c0 : (size_t)c0 * ar, bo = tb ? (size_t)c0 * br : (size_t)c0;
        ZT_OK(T->gemm16(NULL, ta, tb, dim == ZS_SPLIT_M ? nc0 : m, dim == ZS_SPLIT_N ? nc0 : n,
                        dim == ZS_SPLIT_K ? nc0 : k, 1.0f, rA + ao, 1, ar, rB + bo, 1, br,
                        dim == ZS_SPLIT_K && c0 ? 1.0f : 0.0f, want + co, m));
    }
    snprintf(what, sizeof what, "cuda gemm16 %c%c m=%d n=%d k=%d, %s fp32 in pieces of %d along %c",
             ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, a16 ? "B" : "A", piece, "-mnk"[dim]);
    zt_expect_bits(what, down(got, nc * 4), memcpy(zt_hbuf(nc * 4), down(want, nc * 4), nc * 4),
                   nc * 4);
    zt_release();
}

int main(int argc, char **argv) {
    zt_init("gemm16");
    const zs_device *dev = NULL;
    const zs_ops *base = NULL;
    ZT_OK(zs_backend_select("cpu", &base, &dev));
    CPU = base->with_math(ZS_MATH_BF16);
    g_cuda = argc > 1 && !strcmp(argv[1], "cuda");
    g_real = g_cuda && getenv("ZS_GPU") && !strcmp(getenv("ZS_GPU"), "real");
    if (g_cuda) {
        zt_gpu_require();
        ZT_OK(zs_backend_select("cuda", &base, &dev));
        ZT_OK(zs_cuda_set_device(0));
    }
    T = base->with_math(ZS_MATH_BF16);
    ZT_CHECK(T->gemm16 && !base->with_math(ZS_MATH_FP32)->gemm16 &&
                 !base->with_math(ZS_MATH_TF32)->gemm16,
             "%s: gemm16 in the bf16 table only", T->name);
    check_producers(37, 300, 0);
    check_producers(5, 77, 1);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm16(ta, tb, 33, 20, 70, 0.0f);
            check_gemm16(ta, tb, 9, 130, 48, 1.0f);
        }
    if (!g_cuda) { /* panels of 4096 floats: several along m, n and k */
        zs_cpu_gemm_panel(4096);
        check_gemm16(1, 0, 300, 200, 5000, 0.0f);
        check_gemm16(0, 1, 200, 300, 5000, 1.0f);
        zs_cpu_gemm_panel(0);
    }
    ZT_CHECK(!T->linear_fwd_bias == !g_cuda && !CPU->linear_fwd_bias &&
                 !base->with_math(ZS_MATH_FP32)->linear_fwd_bias,
             "%s: linear_fwd_bias in the CUDA bf16 table only", T->name);
    check_linear(40, 24, 36, 1);
    check_linear(33, 48, 20, 0);
    check_linear_bias(40, 24, 36, 0);
    check_linear_bias(17, 64, 12, 1);
    check_linear_residual(40, 24, 36, 0);
    check_linear_residual(17, 64, 12, 1);
    check_linear_residual(33, 48, 20, 2);
    check_linear_g16(40, 24, 36);
    check_rope16(2, 11, 3, 16);
    check_rope16(1, 7, 2, 128);
    if (g_cuda && getenv("ZS_TEST_QUICK")) /* a broken build's run (emu_mutant_lt_no_bias) */
        printf("gemm16: not run under ZS_TEST_QUICK: the operands past the scratch, in pieces\n");
    else if (g_cuda) {
        /* W, dout and inp past the scratch, no bias: rows of dout (and inp) in pieces */
        check_linear(16640, 8, 4096, 0);
        check_linear_g16(16640, 8, 4096); /* the rows plan, dout's pieces taken as they are */
        check_pieces(1, 0, 0, 8200, 3, 8192, ZS_SPLIT_M, 8192);      /* W^T's own columns */
        check_pieces(0, 0, 1, 2, 16400, 4096, ZS_SPLIT_N, -1);       /* the pair's n pieces */
        check_pieces(0, 0, 0, 4, 2, 16781312, ZS_SPLIT_K, 16777216); /* A's own columns */
        check_pieces(0, 1, 1, 2, 4, 16781312, ZS_SPLIT_K, -1);       /* the pair's k pieces */
        check_pieces(1, 0, 0, 64, 70000, 1024, ZS_SPLIT_N, -1);      /* the same, A fp32 */
    }
    return zt_finish();
}

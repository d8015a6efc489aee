/* Fused ops of the CUDA tables (ctest label gpu; docs/cuda.md "GEMM operands" and "Kernels"):
 *  - bias_residual_fwd and bias_gelu_fwd, a linear layer's bias with the residual add or the
 *    GELU after it in one pass: bit for bit the CPU's, and the CPU's bit for bit its bias_fwd
 *    then residual_fwd or gelu_fwd; with and without a bias, in place, and with rows that break
 *    16-byte alignment (the scalar path); bias_residual_fwd's keep (the kept residual): the
 *    bf16 record and the widened sum bit for bit the two casts after the add;
 *  - the bf16 table's head, loss and head backward in bf16: linear_fwd_bias (out16, no bias)
 *    writes the logits in bf16, softmax_xent16 writes the loss's gradient rounded to bf16 in
 *    their place, and gemm_linear_bwd16 takes it for the head's two products, so neither the
 *    logits nor their gradient is ever stored in fp32;
 *  - the head into bf16: the bf16 table's gemm into fp32, rounded, bit for bit, from an fp32
 *    input and a bf16 one, and in pieces past the gemm scratch (the input's rows, W's rows);
 *  - softmax_xent16 on bf16 logits: the losses bit for bit softmax_xent's on their values, and
 *    every row's bf16 gradient zs_f32_to_bf16 of softmax_xent's fp32 one (masked rows, an
 *    invalid target's NaN row and the padded columns included), at vocabularies of one chunk,
 *    several, GPT-2's 50257 and past the shared memory a block may stage; without the
 *    gradient, the losses alike and the logits untouched;
 *  - round16 (the CPU's rounding of its logits): the GPU's bits the CPU's;
 *  - GPT-2's MLP backward in bf16 (zs_linear_bwd_set16, then zs_linear_gelu_bwd_set16): the
 *    GELU output's gradient written bf16 by the GEMM, bit for bit the fp32 one rounded, and
 *    all else bit for bit the fp32 path's with round16 in between (the CPU's way); the fc
 *    layer's input gradient written bf16 (dinp16) the fp32 one rounded;
 *  - GPT-2's c_attn backward (zs_linear_bwd_g16) writing its input gradient in bf16: the fp32
 *    one rounded, dW and dbias unchanged; refused where it would accumulate, and on the CPU;
 *  - zs_linear_bwd16_set where its operands fit: dinp and dW bit for bit zs_linear_bwd_set's
 *    on the fp32 gradient (the same rounded values into the same products);
 *  - in pieces (W's rows, then inp's rows, past the gemm scratch): dinp and dW against an fp64
 *    product of the same bf16 values, within fp32 accumulation's bound, so a piece missed,
 *    doubled or misplaced (an error of the order of a whole piece's sum) is caught;
 *  - the other tables have neither slot, and zs_linear_bwd16_set refuses them.
 * Outputs are poisoned (NaN) first. The race checker runs on this test. Exits 77 without a GPU. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/cpu/cpu.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const zs_ops *gpu; /* the bf16 table */

/* A host copy of d once the table's work is done. */
static void *dev_down(const void *d, size_t nbytes) {
    ZT_OK(gpu->sync(NULL));
    return zt_hcopy(d, nbytes);
}

static float *randn(size_t n, float sd) {
    float *x = zt_hbuf(n * sizeof(float));
    zt_fill_normal(x, n, sd);
    return x;
}

static float *poisoned(size_t n) {
    float *x = zt_hbuf(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* bias_residual_fwd (mode 0, mode 2 in place over a; 3 and 4 the same with keep) and
 * bias_gelu_fwd (mode 1): the GPU's against the CPU's, and the CPU's against its two ops (and
 * with keep the casts to bf16 and back after them). off shifts every buffer by one element, so
 * with OC odd no row is 16-byte aligned (nor keep's 8-byte). */
static void check_bias_act(const zs_ops *cpu, int mode, int N, int OC, int with_bias, int off) {
    char what[128], sub[200];
    size_t n = (size_t)N * OC;
    const int keep = mode >= 3, inplace = mode == 2 || mode == 4;
    zs_bf16 *want16 = (zs_bf16 *)zt_hbuf((n + 1) * 2) + off;
    zs_bf16 *cpu16 = keep ? (zs_bf16 *)zt_hbuf((n + 1) * 2) + off : NULL;
    float *a = randn(n + 1, 1.0f) + off, *b = randn(n + 1, 1.0f) + off;
    float *bias = with_bias ? randn((size_t)OC + 1, 1.0f) + off : NULL;
    float *want = (float *)zt_hbuf((n + 1) * 4) + off,
          *want_pre = (float *)zt_hbuf((n + 1) * 4) + off;
    float *got = (float *)zt_hbuf((n + 1) * 4) + off,
          *got_pre = (float *)zt_hbuf((n + 1) * 4) + off;
    /* the two ops the fused one stands for, on the CPU */
    memcpy(want_pre, b, n * 4);
    if (bias) ZT_OK(cpu->bias_fwd(NULL, want_pre, bias, N, OC));
    if (mode == 1)
        ZT_OK(cpu->gelu_fwd(NULL, want, want_pre, n));
    else
        ZT_OK(cpu->residual_fwd(NULL, want, a, want_pre, n));
    if (keep) {
        ZT_OK(cpu->cast(NULL, want16, ZS_DTYPE_BF16, want, ZS_DTYPE_F32, n));
        ZT_OK(cpu->cast(NULL, want, ZS_DTYPE_F32, want16, ZS_DTYPE_BF16, n));
    }
    /* the fused op on the CPU, then on the GPU */
    memcpy(got_pre, b, n * 4);
    float *cpu_out = got;
    if (inplace)
        memcpy(got, a, n * 4);
    else
        memcpy(got, poisoned(n), n * 4);
    if (mode == 1)
        ZT_OK(cpu->bias_gelu_fwd(NULL, got_pre, cpu_out, bias, N, OC));
    else
        ZT_OK(cpu->bias_residual_fwd(NULL, cpu_out, cpu16, inplace ? cpu_out : a, got_pre, bias, N,
                                     OC));
    float *d_a = (float *)zt_dup(a - off, (n + 1) * 4) + off;
    float *d_b = (float *)zt_dup(b - off, (n + 1) * 4) + off;
    float *d_bias = bias ? (float *)zt_dup(bias - off, ((size_t)OC + 1) * 4) + off : NULL;
    float *d_out = inplace ? d_a : (float *)zt_dup(poisoned(n + 1), (n + 1) * 4) + off;
    zs_bf16 *d16 = keep ? (zs_bf16 *)zt_dup(poisoned(n + 1), (n + 1) * 2) + off : NULL;
    if (mode == 1)
        ZT_OK(gpu->bias_gelu_fwd(NULL, d_b, d_out, d_bias, N, OC));
    else
        ZT_OK(gpu->bias_residual_fwd(NULL, d_out, d16, d_a, d_b, d_bias, N, OC));
    snprintf(what, sizeof what, "%s N=%d OC=%d%s%s%s%s",
             mode == 1 ? "bias_gelu_fwd" : "bias_residual_fwd", N, OC, with_bias ? "" : " no bias",
             inplace ? " in place" : "", keep ? " keep" : "", off ? " unaligned" : "");
    if (keep) {
        snprintf(sub, sizeof sub, "%s: the bf16 record (CPU, GPU) = the sum's cast", what);
        zt_expect_bits(sub, cpu16, want16, n * 2);
        zt_expect_bits(sub, (zs_bf16 *)dev_down(d16 - off, (n + 1) * 2) + off, want16, n * 2);
    }
    snprintf(sub, sizeof sub, "%s: the CPU's = its two ops", what);
    zt_expect_bits(sub, cpu_out, want, n * 4);
    snprintf(sub, sizeof sub, "%s: the GPU's = the CPU's", what);
    zt_expect_bits(sub, (float *)dev_down(d_out - off, (n + 1) * 4) + off, want, n * 4);
    if (mode == 1) {
        snprintf(sub, sizeof sub, "%s: the sum kept (CPU, GPU)", what);
        zt_expect_bits(sub, got_pre, want_pre, n * 4);
        zt_expect_bits(sub, (float *)dev_down(d_b - off, (n + 1) * 4) + off, want_pre, n * 4);
    }
    zt_release();
}

/* softmax_xent16 on bf16 logits against softmax_xent on their values widened: row 1 masked
 * (-1), the last row's target invalid (V: a NaN row) when N > 2, the rest random. With the
 * gradient, it replaces the logits; without, the logits stay as they were. */
static void check_xent16(int N, int V, int Vp) {
    char what[128];
    size_t nl = (size_t)N * Vp;
    float *logits = randn(nl, 3.0f);
    zs_bf16 *l16 = zt_hbuf(nl * sizeof(zs_bf16)), *want = zt_hbuf(nl * sizeof(zs_bf16));
    int32_t *tg = zt_hbuf((size_t)N * sizeof(int32_t));
    for (size_t i = 0; i < nl; i++) { /* the bf16 logits and their values */
        l16[i] = zs_f32_to_bf16(logits[i]);
        logits[i] = zs_bf16_to_f32(l16[i]);
    }
    for (int r = 0; r < N; r++)
        tg[r] = r == 1 ? -1 : r == N - 1 && N > 2 ? V : (int32_t)zt_uniform(0, V);
    float dloss = 1.0f / (float)N;
    float *d_logits = zt_dup(logits, nl * 4), *d_dl = zt_dup(poisoned(nl), nl * 4);
    zs_bf16 *d_io = zt_dup(l16, nl * sizeof(zs_bf16)), *d_keep = zt_dup(l16, nl * sizeof(zs_bf16));
    float *d_loss = zt_dup(poisoned(N), N * 4), *d_loss16 = zt_dup(poisoned(N), N * 4);
    float *d_loss0 = zt_dup(poisoned(N), N * 4);
    int32_t *d_tg = zt_dup(tg, (size_t)N * sizeof(int32_t));
    ZT_OK(gpu->softmax_xent(NULL, d_loss, d_dl, d_logits, d_tg, N, V, Vp, dloss));
    ZT_OK(gpu->softmax_xent16(NULL, d_loss16, d_io, d_tg, N, V, Vp, dloss, 1));
    ZT_OK(gpu->softmax_xent16(NULL, d_loss0, d_keep, d_tg, N, V, Vp, dloss, 0));
    float *dl = dev_down(d_dl, nl * 4);
    for (size_t i = 0; i < nl; i++)
        want[i] = zs_f32_to_bf16(dl[i]);
    snprintf(what, sizeof what, "softmax_xent16 N=%d V=%d Vp=%d dlogits (softmax_xent's, rounded)",
             N, V, Vp);
    zt_expect_bits(what, dev_down(d_io, nl * 2), want, nl * sizeof(zs_bf16));
    snprintf(what, sizeof what, "softmax_xent16 N=%d V=%d Vp=%d losses (softmax_xent's)", N, V, Vp);
    zt_expect_bits(what, dev_down(d_loss16, N * 4), dev_down(d_loss, N * 4), N * 4);
    snprintf(what, sizeof what, "softmax_xent16 N=%d V=%d Vp=%d without the gradient: losses", N, V,
             Vp);
    zt_expect_bits(what, dev_down(d_loss0, N * 4), dev_down(d_loss, N * 4), N * 4);
    snprintf(what, sizeof what, "softmax_xent16 N=%d V=%d Vp=%d without the gradient: logits kept",
             N, V, Vp);
    zt_expect_bits(what, dev_down(d_keep, nl * 2), l16, nl * sizeof(zs_bf16));
    zt_release();
}

/* A head into bf16 logits (linear_fwd_bias, out16, no bias): the bf16 table's gemm into fp32,
 * rounded, bit for bit, from an fp32 input and from its bf16 values (in16); at sizes past the
 * scratch, the input's rows in pieces (IC 4096, N 16640) and W's rows (OC 33024 x IC 2048),
 * zs_linear_fwd16_plan's. */
static void check_head16(int N, int IC, int OC, int in16) {
    char what[128];
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn(ni, 1.0f), *W = randn(nw, 0.5f);
    zs_bf16 *x16 = zt_hbuf(ni * sizeof(zs_bf16)), *want = zt_hbuf(no * sizeof(zs_bf16));
    for (size_t i = 0; i < ni; i++) { /* in16: the input's bf16, and the gemm on their values */
        x16[i] = zs_f32_to_bf16(inp[i]);
        inp[i] = in16 ? zs_bf16_to_f32(x16[i]) : inp[i];
    }
    float *d_inp = zt_dup(inp, ni * 4), *d_W = zt_dup(W, nw * 4), *d_ref = zt_dbuf(no * 4);
    zs_bf16 *d_x16 = zt_dup(x16, ni * sizeof(zs_bf16)), *d_out = zt_dbuf(no * sizeof(zs_bf16));
    ZT_OK(gpu->gemm(NULL, 1, 0, OC, N, IC, 1.0f, d_W, IC, d_inp, IC, 0.0f, d_ref, OC));
    ZT_OK(gpu->linear_fwd_bias(NULL, d_out, 1, NULL, in16 ? (const void *)d_x16 : d_inp, in16, d_W,
                               NULL, N, IC, OC, NULL, NULL));
    float *ref = dev_down(d_ref, no * 4);
    for (size_t i = 0; i < no; i++)
        want[i] = zs_f32_to_bf16(ref[i]);
    snprintf(what, sizeof what, "head16 N=%d IC=%d OC=%d in16=%d (gemm's, rounded)", N, IC, OC,
             in16);
    zt_expect_bits(what, dev_down(d_out, no * 2), want, no * sizeof(zs_bf16));
    zt_release();
}

/* got16[n] against want[n] rounded to bf16, bit for bit. */
static void expect_rounded(const char *what, int N, int C, const zs_bf16 *got16, const float *want,
                           size_t n) {
    char w[160];
    zs_bf16 *r = zt_hbuf(n * sizeof(zs_bf16));
    for (size_t i = 0; i < n; i++)
        r[i] = zs_f32_to_bf16(want[i]);
    snprintf(w, sizeof w, "%s N=%d C=%d (the fp32 dinp, rounded)", what, N, C);
    zt_expect_bits(w, got16, r, n * sizeof(zs_bf16));
}

/* GPT-2's c_attn backward with bf16 activations (gpt2.c): a bf16 output gradient (the
 * attention's, flash_attention_bwd16g) taken as it is, and dinp written bf16 for
 * layernorm_bwd16 (zs_linear_bwd_g16 with dinp16): bit for bit the fp32 dinp rounded, and dW
 * and dbias the fp32 dinp's call's. Refused: a bf16 dinp to accumulate into (set 0), and on the
 * CPU's table. */
static void check_qkv16(const zs_ops *cpu, int N, int C) {
    const int OC = 3 * C;
    size_t nc = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)C * OC;
    zs_bf16 *h = zt_hbuf((no + nc) * sizeof(zs_bf16)); /* dout, ln1 */
    float *a32 = randn(no + nc, 1.0f), *W = randn(nw, 0.3f);
    float *dW0 = randn(nw, 1.0f), *db0 = randn(OC, 1.0f);
    for (size_t i = 0; i < no + nc; i++)
        h[i] = zs_f32_to_bf16(a32[i]);
    zs_bf16 *d_h = zt_dup(h, (no + nc) * sizeof(zs_bf16));
    const zs_bf16 *dout = d_h, *ln1 = d_h + no;
    float *d_W = zt_dup(W, nw * 4), *dinp = zt_dup(poisoned(nc), nc * 4);
    float *dW[2] = {zt_dup(dW0, nw * 4), zt_dup(dW0, nw * 4)};
    float *db[2] = {zt_dup(db0, OC * 4), zt_dup(db0, OC * 4)};
    zs_bf16 *dinp16 = zt_dbuf(nc * 2);
    ZT_CHECK(zs_linear_dinp16_ok(gpu, N, C, OC, 1, 1), "dinp16_ok refused N=%d C=%d", N, C);
    ZT_OK(zs_linear_bwd_g16(gpu, NULL, dinp, 0, dW[0], db[0], dout, ln1, 1, d_W, N, C, OC, 1));
    ZT_OK(zs_linear_bwd_g16(gpu, NULL, dinp16, 1, dW[1], db[1], dout, ln1, 1, d_W, N, C, OC, 1));
    expect_rounded("qkv16: c_attn dinp16", N, C, dev_down(dinp16, nc * 2), dev_down(dinp, nc * 4),
                   nc);
    zt_expect_bits("qkv16: c_attn dW beside dinp16", dev_down(dW[1], nw * 4),
                   dev_down(dW[0], nw * 4), nw * 4);
    zt_expect_bits("qkv16: c_attn dbias beside dinp16", dev_down(db[1], OC * 4),
                   dev_down(db[0], OC * 4), (size_t)OC * 4);
    ZT_CHECK(zs_linear_bwd_g16(gpu, NULL, dinp16, 1, dW[1], db[1], dout, ln1, 1, d_W, N, C, OC,
                               0) == ZS_ERR_INVALID,
             "linear_bwd_g16 took a bf16 dinp to accumulate into");
    ZT_CHECK(!zs_linear_dinp16_ok(cpu, N, C, OC, 1, 1) &&
                 zs_linear_bwd_g16(cpu, NULL, h, 1, dW0, NULL, h, h, 1, W, N, C, OC, 1) ==
                     ZS_ERR_INVALID,
             "the CPU table took a bf16 input gradient");
    zt_release();
}

/* The DGELU GEMM (zs_linear_bwd_dgelu16, what gpt2.c runs on this table): c_proj's input
 * gradient through fc's GELU, G (bf16), with fc's bias gradient, then fc's backward on G as
 * it is (zs_linear_bwd_g16 without a bias), against check_mlp16's two-step path (two[]: the
 * fp32 path rounded by round16, autocast's way), from the same inputs. c_proj's dW and dbias
 * are its bits (the same products and pass). G is held to the GELU's gradient of the fp32
 * product d32 in double: within two bf16 ulps of it (cuBLASLt rounds once, half an ulp; a
 * fallback's two steps round the product, up to 2^-8 of it, then G, half an ulp), plus 2^-14 of the
 * product for the fp32 derivative, plus g' (C + 2) 2^-24 of the product's magnitudes for a GPU's
 * own sum order. fc's dbias is db0 plus G's column sums within those bounds summed, plus the fp32
 * sum's (N + 2) 2^-24 of the magnitudes. A GELU taken for its gradient, or a sum along the wrong
 * axis, is off by far more. Where cuBLASLt offers no algorithm (ZS_EMU_LT_REFUSE=208, its
 * DGELU_BGRAD), fc's dW, dbias and input gradient are the two-step path's bits. */
/* c_proj's dW (C x F) and dbias from dres's bf16 copy (G as it is; dbias by BGRADB or the bias
 * pass) against G's products and sums in double: within (N + 2) 2^-24 of their magnitudes with
 * dW0's and db0's, an fp32 sum in any order. The fp32 dres's sums, or the wrong axis, are not. */
static void check_proj16(int N, int C, const zs_bf16 *d_res16, const zs_bf16 *d_x, const float *dWp,
                         const float *dbp, const float *dW0, const float *db0) {
    const int F = 4 * C;
    zs_bf16 *g = dev_down(d_res16, (size_t)N * C * 2), *x = dev_down(d_x, (size_t)N * F * 2);
    float *dW = dev_down(dWp, (size_t)C * F * 4), *db = dev_down(dbp, (size_t)C * 4);
    int bad_w = 0, bad_b = 0;
    for (int c = 0; c < C; c++) {
        double want = db0[c], mag = fabs(db0[c]);
        for (int n = 0; n < N; n++)
            want += zs_bf16_to_f32(g[(size_t)n * C + c]), mag += fabs(zs_bf16_to_f32(g[n * C + c]));
        bad_b += !(fabs(db[c] - want) <= (N + 2) * ldexp(mag, -24));
        for (int f = 0; f < F; f++) {
            size_t i = (size_t)c * F + f;
            double w = dW0[i], m = fabs(dW0[i]);
            for (int n = 0; n < N; n++) {
                double p = (double)zs_bf16_to_f32(g[(size_t)n * C + c]) *
                           zs_bf16_to_f32(x[(size_t)n * F + f]);
                w += p, m += fabs(p);
            }
            bad_w += !(fabs(dW[i] - w) <= (N + 2) * ldexp(m, -24));
        }
    }
    ZT_CHECK(!bad_w && !bad_b, "dgelu (dres bf16) N=%d C=%d: %d of c_proj's dW, %d dbias off", N, C,
             bad_w, bad_b);
}

static void check_dgelu(int N, int C, const float *d32, const zs_bf16 *fch, const zs_bf16 *acts,
                        const float *d_dres, const zs_bf16 *d_res16, const float *d_Wp,
                        const float *d_Wf, const float *dW0, const float *db0,
                        float *const two[7]) {
    const int F = 4 * C;
    const char *refuse = getenv("ZS_EMU_LT_REFUSE");
    int refused = refuse && atoi(refuse) == 208;
    size_t nc = (size_t)N * C, nf = (size_t)N * F, nw = (size_t)C * F;
    const zs_bf16 *fch_gelu = acts, *ln2 = acts + 2 * nf, *d_fch = acts + nf;
    zs_bf16 *g16 = zt_dbuf(nf * 2);
    float *dWp = zt_dup(dW0, nw * 4), *dbp = zt_dup(db0, C * 4), *dWf = zt_dup(dW0, nw * 4);
    float *dbf = zt_dup(db0, F * 4), *dC = zt_dup(poisoned(nc), nc * 4);
    ZT_CHECK(zs_linear_dgelu_ok(gpu, N, F, C, 1), "linear_dgelu_ok refused N=%d C=%d", N, C);
    ZT_OK(zs_linear_bwd_dgelu16(gpu, NULL, g16, dbf, d_fch, dWp, dbp,
                                d_res16 ? (const void *)d_res16 : d_dres, d_res16 != NULL, fch_gelu,
                                1, d_Wp, N, F, C));
    ZT_OK(zs_linear_bwd_g16(gpu, NULL, dC, 0, dWf, NULL, g16, ln2, 1, d_Wf, N, C, F, 1));
    if (d_res16) {
        check_proj16(N, C, d_res16, fch_gelu, dWp, dbp, dW0, db0);
    } else {
        zt_expect_bits("dgelu: c_proj dW", dev_down(dWp, nw * 4), dev_down(two[1], nw * 4), nw * 4);
        zt_expect_bits("dgelu: c_proj dbias", dev_down(dbp, C * 4), dev_down(two[2], C * 4),
                       (size_t)C * 4);
    }
    /* the product's magnitudes: sum over C of |W_p| |dres| in their bf16 values */
    float *Wp = dev_down(d_Wp, nw * 4), *dres = dev_down(d_dres, nc * 4);
    zs_bf16 *g = dev_down(g16, nf * 2);
    float *dbf_got = dev_down(dbf, F * 4);
    int bad = 0, bad_sum = 0;
    for (int f = 0; f < F; f++) {
        double want = db0[f], mag = fabs(db0[f]), err = 0.0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * F + f;
            double x = zs_bf16_to_f32(fch[i]), u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            double t = tanh(u), dg = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) *
                                                           0.7978845608028654 *
                                                           (1.0 + 3.0 * 0.044715 * x * x);
            double pm = 0.0; /* c_proj's W is C x F: dinp[n, f] = sum_c dres[n, c] W[c, f] */
            for (int c = 0; c < C; c++)
                pm += fabs(zs_bf16_to_f32(zs_f32_to_bf16(Wp[(size_t)c * F + f])) *
                           zs_bf16_to_f32(zs_f32_to_bf16(dres[(size_t)n * C + c])));
            double v = dg * d32[i],
                   b = ldexp(fabs(d32[i]), -14) + fabs(dg) * (C + 2) * ldexp(pm, -24);
            int e;
            frexp(v, &e);
            bad += !(fabs(zs_bf16_to_f32(g[i]) - v) <= ldexp(1.0, e - 7) + b);
            want += v, mag += fabs(v), err += ldexp(1.0, e - 7) + b;
        }
        bad_sum += !(fabs(dbf_got[f] - want) <= err + (N + 2) * ldexp(mag, -24));
    }
    ZT_CHECK(!bad, "dgelu N=%d C=%d: %d of %zu of G off the GELU's gradient of the product", N, C,
             bad, nf);
    ZT_CHECK(!bad_sum, "dgelu N=%d C=%d: %d of %d of fc's dbias off G's sums", N, C, bad_sum, F);
    if (refused) { /* the fallback: the two steps' bits */
        zt_expect_bits("dgelu refused: fc dW", dev_down(dWf, nw * 4), dev_down(two[3], nw * 4),
                       nw * 4);
        zt_expect_bits("dgelu refused: fc dbias", dbf_got, dev_down(two[4], F * 4), (size_t)F * 4);
        zt_expect_bits("dgelu refused: fc dinp", dev_down(dC, nc * 4), dev_down(two[5], nc * 4),
                       nc * 4);
    }
    ZT_CHECK(!zs_linear_dgelu_ok(gpu->with_math(ZS_MATH_FP32), N, F, C, 1),
             "the fp32 table took a GELU's gradient in a GEMM");
}

/* GPT-2's MLP backward with bf16 activations (model gpt2.c): the c_proj's GEMM writing the
 * GELU output's gradient in bf16 (zs_linear_bwd_set16) and the fc layer's fused GELU backward
 * and bias reading it (zs_linear_gelu_bwd_set16), against the fp32 path on the same table
 * rounded in between by round16 (what a table without them, the CPU's, does): the bf16
 * gradient is the fp32 one rounded, and every other output (dW, dbias of both layers, the fc
 * layer's dinp) is the fp32 path's, bit for bit. 4C at 8192 takes bias_bwd's wide blocks. */
static void check_mlp16(int N, int C) {
    char what[128];
    const int F = 4 * C;
    size_t nc = (size_t)N * C, nf = (size_t)N * F, nw = (size_t)C * F;
    float *dres = randn(nc, 0.1f), *Wp = randn(nw, 0.3f), *Wf = randn(nw, 0.3f);
    float *dW0 = randn(nw, 1.0f), *db0 = randn(F, 1.0f);
    zs_bf16 *act = zt_hbuf((nf * 2 + nc) * sizeof(zs_bf16)); /* fch_gelu, fch, ln2 */
    float *a32 = randn(nf * 2 + nc, 1.0f);
    for (size_t i = 0; i < nf * 2 + nc; i++)
        act[i] = zs_f32_to_bf16(a32[i]);
    zs_bf16 *d_act = zt_dup(act, (nf * 2 + nc) * sizeof(zs_bf16));
    const zs_bf16 *fch_gelu = d_act, *fch = d_act + nf, *ln2 = d_act + 2 * nf;
    float *d_dres = zt_dup(dres, nc * 4), *d_Wp = zt_dup(Wp, nw * 4), *d_Wf = zt_dup(Wf, nw * 4);
    float *o[2][7]; /* per path: d (the GELU output's gradient), dWp, dbp, dWf, dbf, dC, dtmp */
    for (int k = 0; k < 2; k++) {
        o[k][0] = zt_dup(poisoned(nf), nf * 4), o[k][5] = zt_dup(poisoned(nc), nc * 4);
        o[k][1] = zt_dup(dW0, nw * 4), o[k][3] = zt_dup(dW0, nw * 4);
        o[k][2] = zt_dup(db0, C * 4), o[k][4] = zt_dup(db0, F * 4);
        o[k][6] = zt_dbuf(nf * 4);
    }
    ZT_OK(zs_linear_bwd_set(gpu, NULL, o[0][0], o[0][1], o[0][2], d_dres, fch_gelu, 1, d_Wp, N, F,
                            C));
    float *d32 = dev_down(o[0][0], nf * 4);
    ZT_OK(gpu->round16(NULL, o[0][0], nf));
    ZT_OK(zs_linear_gelu_bwd_set(gpu, NULL, o[0][5], o[0][3], o[0][4], o[0][0], fch, o[0][6], ln2,
                                 1, d_Wf, N, C, F));
    ZT_CHECK(zs_linear_bwd16_ok(gpu, N, F, C, 1), "linear_bwd16_ok refused N=%d C=%d", N, C);
    zs_bf16 *d16 = (zs_bf16 *)o[1][0];
    ZT_OK(
        zs_linear_bwd_set16(gpu, NULL, d16, o[1][1], o[1][2], d_dres, fch_gelu, 1, d_Wp, N, F, C));
    expect_rounded("mlp16: c_proj's bf16 dinp", N, C, dev_down(d16, nf * 2), d32, nf);
    ZT_OK(zs_linear_gelu_bwd_set16(gpu, NULL, o[1][5], 0, o[1][3], o[1][4], d16, fch, o[1][6], ln2,
                                   1, d_Wf, N, C, F));
    static const char *name[6] = {"", "c_proj dW", "c_proj dbias", "fc dW", "fc dbias", "fc dinp"};
    const size_t len[6] = {0, nw, (size_t)C, nw, (size_t)F, nc};
    for (int j = 1; j < 6; j++) {
        snprintf(what, sizeof what, "mlp16 N=%d C=%d: %s (the fp32 path's)", N, C, name[j]);
        zt_expect_bits(what, dev_down(o[1][j], len[j] * 4), dev_down(o[0][j], len[j] * 4),
                       len[j] * 4);
    }
    /* the fc layer's dinp written bf16 (what gpt2.c hands layernorm_bwd16): the fp32 one
     * rounded; dW and dbias, accumulating from the same start, the fp32 path's */
    float *dWf = zt_dup(dW0, nw * 4), *dbf = zt_dup(db0, F * 4);
    zs_bf16 *dc16 = zt_dbuf(nc * 2);
    ZT_OK(zs_linear_gelu_bwd_set16(gpu, NULL, dc16, 1, dWf, dbf, d16, fch, o[1][6], ln2, 1, d_Wf, N,
                                   C, F));
    expect_rounded("mlp16: fc dinp16", N, C, dev_down(dc16, nc * 2), dev_down(o[0][5], nc * 4), nc);
    zt_expect_bits("mlp16: fc dW beside dinp16", dev_down(dWf, nw * 4), dev_down(o[0][3], nw * 4),
                   nw * 4);
    zt_expect_bits("mlp16: fc dbias beside dinp16", dev_down(dbf, F * 4), dev_down(o[0][4], F * 4),
                   (size_t)F * 4);
    /* dinp16 only where it is set and the operands fit together */
    ZT_CHECK(gpu->gemm_linear_bwd(NULL, d16, 1, o[1][1], NULL, d_dres, 0, NULL, 0, NULL, fch_gelu,
                                  1, d_Wp, N, F, C, 1.0f) == ZS_ERR_INVALID,
             "linear_bwd took a bf16 dinp to accumulate into");
    /* then dres's bf16 copy (layernorm_bwd16's dinp16), as gpt2.c hands it where it can */
    check_dgelu(N, C, d32, act + nf, (zs_bf16 *)d_act, d_dres, NULL, d_Wp, d_Wf, dW0, db0, o[0]);
    zs_bf16 *r16 = zt_hbuf(nc * 2);
    for (size_t i = 0; i < nc; i++)
        r16[i] = zs_f32_to_bf16(dres[i]);
    check_dgelu(N, C, d32, act + nf, (zs_bf16 *)d_act, d_dres, zt_dup(r16, nc * 2), d_Wp, d_Wf, dW0,
                db0, o[0]);
    zt_release();
}

/* round16: zs_f32_to_bf16's bits widened, in place, as the CPU's (NaN, infinities, halfway
 * cases included); 4-aligned and not. */
static void check_round16(const zs_ops *cpu) {
    const size_t n = 1031;
    float *x = randn(n + 1, 10.0f);
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 1.00390625f; /* halfway: 1 + 2^-8 */
    float *want = zt_hbuf((n + 1) * 4);
    memcpy(want, x, (n + 1) * 4);
    ZT_OK(cpu->round16(NULL, want, n + 1));
    ZT_CHECK(isnan(want[0]) && want[1] == INFINITY && want[2] == -INFINITY && want[3] == 1.0f,
             "cpu round16: NaN, infinities, or a halfway case to even");
    for (int off = 0; off < 2; off++) {
        float *d = zt_dup(x, (n + 1) * 4);
        ZT_OK(gpu->round16(NULL, d + off, n + 1 - off));
        float *got = dev_down(d, (n + 1) * 4);
        zt_expect_bits(off ? "round16 (not 16-byte aligned)" : "round16", got + off, want + off,
                       (n + 1 - off) * 4);
    }
    zt_release();
}

/* The head's backward where its operands fit the scratch, bf16 gradient against fp32. */
static void check_fits(int N, int IC, int OC, int Vp_pad) {
    char what[128];
    const int ld = OC + Vp_pad; /* the bf16 rows' stride: 2 Vp in a model */
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *inp = randn(ni, 1.0f), *W = randn(nw, 0.5f), *dW0 = randn(nw, 1.0f);
    float *g32 = randn((size_t)N * OC, 0.01f);
    zs_bf16 *g16 = zt_hbuf((size_t)N * ld * sizeof(zs_bf16));
    for (int r = 0; r < N; r++)
        for (int c = 0; c < ld; c++) /* stride padding holds garbage, never read */
            g16[(size_t)r * ld + c] =
                c < OC ? zs_f32_to_bf16(g32[(size_t)r * OC + c]) : zs_f32_to_bf16(NAN);
    for (size_t i = 0; i < (size_t)N * OC; i++) /* the values the bf16 gradient holds */
        g32[i] = zs_bf16_to_f32(g16[i / OC * ld + i % OC]);
    float *d_inp = zt_dup(inp, ni * 4), *d_W = zt_dup(W, nw * 4), *d_g32 = zt_dup(g32, N * OC * 4);
    zs_bf16 *d_g16 = zt_dup(g16, (size_t)N * ld * sizeof(zs_bf16));
    float *a_dinp = zt_dup(poisoned(ni), ni * 4), *a_dW = zt_dup(dW0, nw * 4);
    float *b_dinp = zt_dup(poisoned(ni), ni * 4), *b_dW = zt_dup(dW0, nw * 4);
    ZT_OK(zs_linear_bwd_set(gpu, NULL, a_dinp, a_dW, NULL, d_g32, d_inp, 0, d_W, N, IC, OC));
    ZT_OK(zs_linear_bwd16_set(gpu, NULL, b_dinp, b_dW, d_g16, ld, d_inp, d_W, N, IC, OC));
    snprintf(what, sizeof what, "linear_bwd16 N=%d IC=%d OC=%d ld=%d dinp (linear_bwd_set's)", N,
             IC, OC, ld);
    zt_expect_bits(what, dev_down(b_dinp, ni * 4), dev_down(a_dinp, ni * 4), ni * 4);
    snprintf(what, sizeof what, "linear_bwd16 N=%d IC=%d OC=%d ld=%d dW (linear_bwd_set's)", N, IC,
             OC, ld);
    zt_expect_bits(what, dev_down(b_dW, nw * 4), dev_down(a_dW, nw * 4), nw * 4);
    zt_release();
}

/* |got - want| <= bound element by element (NaN fails). */
static void expect_within(const char *what, const float *got, const double *want,
                          const double *bound, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= bound[i])) {
            if (!bad) first = i;
            bad++;
        }
    ZT_CHECK(bad == 0, "%s: %zu of %zu off, first [%zu] %.9g, want %.9g within %.3g", what, bad, n,
             first, bad ? got[first] : 0.0, bad ? want[first] : 0.0, bad ? bound[first] : 0.0);
    if (!bad) printf("ok %s\n", what);
}

/* want[r, i] = init[r, i] + sum_k g[r gr + k gk] bf16(X[k, i]) in fp64 (R x IC, init NULL: 0),
 * and bound[r, i] fp32 accumulation's: (K + 2) 2^-24 of the sum of magnitudes, doubled. */
static void ref_product(double *want, double *bound, int R, int K, int IC, const zs_bf16 *g,
                        size_t gr, size_t gk, const float *X, const float *init) {
    for (int r = 0; r < R; r++)
        for (int i = 0; i < IC; i++) {
            double s = init ? init[(size_t)r * IC + i] : 0.0, m = fabs(s);
            for (int k = 0; k < K; k++) {
                double p = (double)zs_bf16_to_f32(g[r * gr + k * gk]) *
                           zs_bf16_to_f32(zs_f32_to_bf16(X[(size_t)k * IC + i]));
                s += p;
                m += fabs(p);
            }
            want[(size_t)r * IC + i] = s;
            bound[(size_t)r * IC + i] = 2.0 * (K + 2) * ldexp(m, -24);
        }
}

/* The head's backward past the scratch, in pieces, against fp64 products of the bf16 values:
 * fp32 accumulation over k terms is within (k + 2) 2^-24 of the sum of magnitudes (doubled). */
static void check_pieces(int N, int IC, int OC) {
    char what[160];
    int op = 0, np = 0;
    zs_linear_bwd16_pieces(N, IC, OC, &op, &np);
    ZT_CHECK(op > 0 && np > 0 && (op < OC || np < N), "N=%d IC=%d OC=%d: pieces %d, %d", N, IC, OC,
             op, np);
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, ng = (size_t)N * OC;
    float *inp = randn(ni, 1.0f), *W = randn(nw, 0.5f), *dW0 = randn(nw, 1.0f);
    zs_bf16 *g16 = zt_hbuf(ng * sizeof(zs_bf16));
    for (size_t i = 0; i < ng; i++)
        g16[i] = zs_f32_to_bf16((float)zt_normal() * 0.01f);
    float *d_dinp = zt_dup(poisoned(ni), ni * 4), *d_dW = zt_dup(dW0, nw * 4);
    ZT_OK(zs_linear_bwd16_set(gpu, NULL, d_dinp, d_dW, zt_dup(g16, ng * sizeof(zs_bf16)), OC,
                              zt_dup(inp, ni * 4), zt_dup(W, nw * 4), N, IC, OC));
    float *dinp = dev_down(d_dinp, ni * 4), *dW = dev_down(d_dW, nw * 4);
    double *want = zt_hbuf(ni * 8), *bound = zt_hbuf(ni * 8);
    ref_product(want, bound, N, OC, IC, g16, OC, 1, W, NULL); /* dinp = g W */
    snprintf(what, sizeof what, "linear_bwd16 N=%d IC=%d OC=%d dinp in pieces of %d rows of W", N,
             IC, OC, op);
    expect_within(what, dinp, want, bound, ni);
    want = zt_hbuf(nw * 8);
    bound = zt_hbuf(nw * 8);
    ref_product(want, bound, OC, N, IC, g16, 1, OC, inp, dW0); /* dW = dW0 + g^T inp */
    snprintf(what, sizeof what, "linear_bwd16 N=%d IC=%d OC=%d dW in pieces of %d rows of inp", N,
             IC, OC, np);
    expect_within(what, dW, want, bound, nw);
    zt_release();
}

/* Only the bf16 table has the pair; linear_bwd16 refuses the others by name. */
static void check_tables(const zs_ops *base) {
    ZT_CHECK(gpu->softmax_xent16 && gpu->gemm_linear_bwd16, "the bf16 table lacks the pair");
    const zs_ops *other[2] = {base->with_math(ZS_MATH_FP32), base->with_math(ZS_MATH_TF32)};
    for (int k = 0; k < 2; k++) {
        ZT_CHECK(!other[k]->softmax_xent16 && !other[k]->gemm_linear_bwd16,
                 "table of math %d has a bf16 loss gradient", (int)other[k]->gemm_math);
        float x = 0;
        zs_bf16 h = {0};
        ZT_CHECK(zs_linear_bwd16_set(other[k], NULL, &x, &x, &h, 1, &x, &x, 1, 1, 1) ==
                     ZS_ERR_INVALID,
                 "linear_bwd16 on the math %d table", (int)other[k]->gemm_math);
    }
    ZT_CHECK(zs_linear_bwd16_set(gpu, NULL, NULL, NULL, NULL, 3, NULL, NULL, 1, 1, 4) ==
                 ZS_ERR_INVALID,
             "linear_bwd16 took ld 3 for 4 rows");
}

int main(void) {
    zt_init("cuda_fused");
    zt_gpu_require();
    const zs_ops *base = NULL;
    const zs_device *dev = NULL;
    ZT_OK(zs_backend_select("cuda", &base, &dev));
    ZT_OK(zs_cuda_set_device(0));
    gpu = base->with_math(ZS_MATH_BF16);
    const zs_ops *cpu = NULL;
    ZT_OK(zs_backend_select("cpu", &cpu, &dev));
    for (int mode = 0; mode < 5; mode++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            check_bias_act(cpu, mode, 33, 300, with_bias, 0); /* 16-byte rows */
            check_bias_act(cpu, mode, 9, 77, with_bias, 1);   /* no row aligned */
        }
    check_tables(base);
    check_xent16(5, 37, 40);       /* within one chunk */
    check_xent16(4, 3001, 3072);   /* three chunks, the last one partly padding */
    check_xent16(3, 50257, 50304); /* GPT-2's vocabulary: 50 chunks */
    check_xent16(2, 60001, 60004); /* past the shared memory a block may opt in to: not staged */
    check_head16(33, 48, 40, 0);
    check_head16(33, 48, 40, 1);
    check_head16(16640, 4096, 3, 0); /* the input's rows in pieces */
    check_head16(6, 2048, 33024, 1); /* W's rows in pieces */
    check_head16(6, 2048, 33024, 0); /* and the fp32 input rounded once for them */
    check_round16(cpu);
    check_mlp16(33, 48);
    check_mlp16(7, 20);   /* rows of 80 and 20: no vector alignment to lean on */
    check_mlp16(5, 2048); /* 4C = 8192: bias_bwd's wide blocks */
    check_qkv16(cpu, 33, 48);
    check_qkv16(cpu, 7, 20); /* rows of 60 and 20: no vector alignment to lean on */
    ZT_CHECK(!zs_linear_bwd16_ok(cpu, 33, 192, 48, 1) &&
                 zs_linear_bwd_set16(cpu, NULL, (zs_bf16 *)&dev, NULL, NULL, NULL, NULL, 1, NULL,
                                     33, 192, 48) == ZS_ERR_INVALID,
             "the CPU table took a bf16 input gradient");
    ZT_CHECK(!zs_linear_bwd16_ok(gpu, 1 << 20, 8192, 2048, 1),
             "linear_bwd16_ok took operands past the gemm scratch");
    check_fits(33, 48, 40, 40); /* ld 2 OC, as a model lays it out */
    check_fits(7, 130, 300, 5); /* an odd ld */
    /* W's rows in pieces: 2048 x 33024 floats is past ZS_GEMM_CAST_MAX */
    check_pieces(6, 2048, 33024);
    /* inp's rows in pieces: 16640 rows of 4096 */
    check_pieces(16640, 4096, 3);
    return zt_finish();
}

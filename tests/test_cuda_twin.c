/* The bf16 table's twin (ops.h twin16; docs/cuda.md "GEMM operands"), ctest label gpu: the
 * engine hands the ops a widened unit's bf16 values, and the table's GEMMs read a weight that
 * lies inside the unit from them instead of rounding the widened copy again.
 *  - every entry point that rounds a weight (linear_fwd_bias, gemm16, gemm, gemm_linear_bwd,
 *    gemm_linear_bwd16) reads the twin: given a twin whose values are not the fp32 ones (the
 *    contract broken on purpose, so that the source shows), its result is bit for bit its result
 *    on the twin's values widened, and differs from its result on the fp32 ones;
 *  - dropped (n 0), the fp32 values are rounded again: the result on them;
 *  - a weight only partly inside the range is rounded from its own fp32 values; one whose twin
 *    is not 16-byte aligned still reads the twin (copied into the scratch), since a bf16
 *    compute copy does not widen the weights it has twins of (shard/engine_bf16.c);
 *  - a true twin (the fp32 values' own bf16) gives the bits of no twin;
 *  - the default stream keeps no twin (threads share it);
 *  - the embedding's forward reads wte and wpe from their twin, with fp32 values that are NaN:
 *    the bits of the fp32 tables of the twin's values;
 *  - widen_ranges gives cast's bits in each range, aligned or not, and more ranges than one
 *    launch takes, and leaves every element outside them as it was.
 * The race checker runs on this test. Exits 77 without a GPU. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { N = 64, IC = 48, OC = 40, LEAD = 16, UNIT = LEAD + OC * IC + LEAD };
enum { FWD_BIAS, GEMM16, GEMM, BWD, BWD16, N_ENTRY };
static const char *entry_name[N_ENTRY] = {"linear_fwd_bias", "gemm16", "gemm", "gemm_linear_bwd",
                                          "gemm_linear_bwd16"};

static const zs_ops *gpu; /* the bf16 table */

typedef struct operands { /* device copies of the activations and gradients */
    const float *inp, *bias, *dout;
    const zs_bf16 *x16, *dout16; /* inp's and dout's values rounded */
} operands;

/* Entry point e's weight-dependent result with the weight W on stream s, as a host copy of
 * *nbytes bytes. */
static void *run(int e, zs_stream_t *s, const float *W, const operands *o, size_t *nbytes) {
    size_t n_out = e >= BWD ? (size_t)N * IC : (size_t)N * OC;
    float *out = zt_dbuf(n_out * 4), *dW = zt_dbuf((size_t)OC * IC * 4);
    ZT_OK(gpu->fill(s, dW, 0.0f, (size_t)OC * IC));
    switch (e) {
    case FWD_BIAS:
        ZT_OK(gpu->linear_fwd_bias(s, out, 0, NULL, o->inp, 0, W, o->bias, N, IC, OC, NULL, NULL));
        break;
    case GEMM16: /* out^T = W x16^T, the fp32 operand beside a bf16 one */
        ZT_OK(gpu->gemm16(s, 1, 0, OC, N, IC, 1.0f, W, 0, IC, o->x16, 1, IC, 0.0f, out, OC));
        break;
    case GEMM: /* both fp32: the table rounds both (gemm_cast) */
        ZT_OK(gpu->gemm(s, 1, 0, OC, N, IC, 1.0f, W, IC, o->inp, IC, 0.0f, out, OC));
        break;
    case BWD: /* dinp reads W */
        ZT_OK(gpu->gemm_linear_bwd(s, out, 0, dW, NULL, o->dout, 0, NULL, 0, NULL, o->inp, 0, W, N,
                                   IC, OC, 0.0f));
        break;
    default:
        ZT_OK(gpu->gemm_linear_bwd16(s, out, NULL, o->dout16, OC, o->inp, W, N, IC, OC, 0.0f));
    }
    ZT_OK(gpu->sync(s));
    *nbytes = n_out * 4;
    return zt_hcopy(out, n_out * 4);
}

/* Entry point e with the weight at W under the twin (f32, b16, n) on s: the
 * result's bits are want's. */
static void expect_with(int e, const char *how, zs_stream_t *s, const float *f32,
                        const zs_bf16 *b16, size_t n, const float *W, const operands *o,
                        const void *want) {
    char what[160];
    size_t nb = 0;
    gpu->twin16(s, f32, b16, n);
    void *got = run(e, s, W, o, &nb);
    gpu->twin16(s, NULL, NULL, 0);
    snprintf(what, sizeof what, "%s: %s", entry_name[e], how);
    zt_expect_bits(what, got, want, nb);
}

static void check_entry(int e, zs_stream_t *s) {
    size_t nb = 0, nu = UNIT, nw = (size_t)OC * IC;
    float *u = zt_hbuf(nu * 4), *t = zt_hbuf(nu * 4), *a = zt_hbuf((size_t)N * IC * 4);
    float *bias = zt_hbuf(OC * 4), *g = zt_hbuf((size_t)N * OC * 4);
    zs_bf16 *t16 = zt_hbuf(nu * 2), *u16 = zt_hbuf(nu * 2), *a16 = zt_hbuf((size_t)N * IC * 2),
            *g16 = zt_hbuf((size_t)N * OC * 2);
    zt_fill_normal(u, nu, 0.5f);
    zt_fill_normal(t, nu, 0.5f);
    zt_fill_normal(a, (size_t)N * IC, 1.0f);
    zt_fill_normal(bias, OC, 1.0f);
    zt_fill_normal(g, (size_t)N * OC, 0.1f);
    for (size_t i = 0; i < nu; i++) { /* the unit holds bf16 values widened, as the engine's */
        u16[i] = zs_f32_to_bf16(u[i]);
        u[i] = zs_bf16_to_f32(u16[i]);
        t16[i] = zs_f32_to_bf16(t[i]);
        t[i] = zs_bf16_to_f32(t16[i]);
    }
    for (size_t i = 0; i < (size_t)N * IC; i++)
        a16[i] = zs_f32_to_bf16(a[i]);
    for (size_t i = 0; i < (size_t)N * OC; i++)
        g16[i] = zs_f32_to_bf16(g[i]);
    operands o = {zt_dup(a, (size_t)N * IC * 4), zt_dup(bias, OC * 4),
                  zt_dup(g, (size_t)N * OC * 4), zt_dup(a16, (size_t)N * IC * 2),
                  zt_dup(g16, (size_t)N * OC * 2)};
    float *d_u = zt_dup(u, nu * 4), *d_t = zt_dup(t, nu * 4);
    zs_bf16 *d_t16 = zt_dup(t16, nu * 2), *d_u16 = zt_dup(u16, nu * 2);
    float *W = d_u + LEAD;
    /* the results on the fp32 weight's values and on the twin's, without a twin */
    void *on_u = run(e, s, W, &o, &nb);
    void *on_t = run(e, s, d_t + LEAD, &o, &nb);
    ZT_CHECK(memcmp(on_u, on_t, nb) != 0, "%s: the two weights give the same result",
             entry_name[e]);
    expect_with(e, "read from a twin that differs", s, d_u, d_t16, nu, W, &o, on_t);
    expect_with(e, "a true twin gives the bits of none", s, d_u, d_u16, nu, W, &o, on_u);
    expect_with(e, "the weight's last element past the twin: its own values", s, d_u, d_t16,
                LEAD + nw - 1, W, &o, on_u);
    { /* the twin of W 2 bytes off 16-byte alignment: its values still */
        zs_bf16 *ts16 = zt_hbuf((nu + 1) * 2);
        ts16[0] = zs_f32_to_bf16(0.0f);
        memcpy(ts16 + 1, t16, nu * 2);
        expect_with(e, "a twin off 16-byte alignment, copied", s, d_u,
                    (zs_bf16 *)zt_dup(ts16, (nu + 1) * 2) + 1, nu, W, &o, on_t);
    }
    { /* dropped: the twin set, then cleared before the call */
        char what[160];
        size_t nd = 0;
        gpu->twin16(s, d_u, d_t16, nu);
        gpu->twin16(s, NULL, NULL, 0);
        snprintf(what, sizeof what, "%s: dropped, its own values", entry_name[e]);
        zt_expect_bits(what, run(e, s, W, &o, &nd), on_u, nb);
    }
    expect_with(e, "the default stream keeps none", NULL, d_u, d_t16, nu, W, &o, on_u);
    zt_release();
}

/* The embedding's forward on s with its tables' twin: its bits on the twin's values in fp32. */
static void check_embedding(zs_stream_t *s) {
    enum { B = 2, T = 5, C = 24, V = 11 };
    size_t nu = (size_t)(V + T) * C, no = (size_t)B * T * C; /* the unit: wte, then wpe */
    float *u = zt_hbuf(nu * 4);
    zs_bf16 *u16 = zt_hbuf(nu * 2);
    int32_t tok[B * T];
    zt_fill_normal(u, nu, 0.5f);
    for (size_t i = 0; i < nu; i++) {
        u16[i] = zs_f32_to_bf16(u[i]);
        u[i] = zs_bf16_to_f32(u16[i]);
    }
    for (int i = 0; i < B * T; i++)
        tok[i] = (7 * i + 3) % V;
    int32_t *d_tok = zt_dup(tok, sizeof tok);
    float *d_u = zt_dup(u, nu * 4), *d_nan = zt_dbuf(nu * 4), *out = zt_dbuf(no * 4);
    ZT_OK(gpu->fill(s, d_nan, NAN, nu));
    for (int wpe = 0; wpe < 2; wpe++) {
        char what[96];
        ZT_OK(gpu->embedding_fwd(s, out, d_tok, d_u, wpe ? d_u + V * C : NULL, B, T, C, NULL));
        ZT_OK(gpu->sync(s));
        void *want = zt_hcopy(out, no * 4);
        gpu->twin16(s, d_nan, zt_dup(u16, nu * 2), nu);
        ZT_OK(gpu->embedding_fwd(s, out, d_tok, d_nan, wpe ? d_nan + V * C : NULL, B, T, C, NULL));
        gpu->twin16(s, NULL, NULL, 0);
        ZT_OK(gpu->sync(s));
        snprintf(what, sizeof what, "embedding_fwd %s wpe: read from the twin",
                 wpe ? "with" : "without");
        zt_expect_bits(what, zt_hcopy(out, no * 4), want, no * 4);
    }
    zt_release();
}

/* widen_ranges against a cast a range, over ranges aligned and not, more than a launch takes. */
static void check_widen(zs_stream_t *s) {
    enum { NR = ZS_WIDEN_RANGES + 3, NW = 64 * NR };
    int64_t r[2 * NR];
    float *x = zt_hbuf(NW * 4), *want = zt_hbuf(NW * 4);
    zs_bf16 *x16 = zt_hbuf(NW * 2);
    zt_fill_normal(x, NW, 1.0f);
    for (int i = 0; i < NW; i++)
        x16[i] = zs_f32_to_bf16(x[i]);
    zt_fill_normal(want, NW, 1.0f); /* outside the ranges: as it was */
    float *d = zt_dup(want, NW * 4);
    for (int i = 0; i < NR; i++) { /* range i: in [64 i, 64 i + 64), start and length vary */
        r[2 * i] = 64 * i + (i % 5) * 3;
        r[2 * i + 1] = 1 + (i * 13) % 50;
        for (int64_t k = r[2 * i]; k < r[2 * i] + r[2 * i + 1]; k++)
            want[k] = zs_bf16_to_f32(x16[k]);
    }
    ZT_OK(gpu->widen_ranges(s, d, zt_dup(x16, NW * 2), r, NR));
    ZT_OK(gpu->sync(s));
    zt_expect_bits("widen_ranges", zt_hcopy(d, NW * 4), want, NW * 4);
    ZT_CHECK(gpu->widen_ranges(s, d, x16, r, -1) == ZS_ERR_INVALID,
             "widen_ranges: -1 ranges accepted");
    zt_release();
}

int main(void) {
    zt_init("cuda_twin");
    zt_gpu_require();
    const zs_ops *base = NULL;
    const zs_device *dev = NULL;
    zs_stream_t *s = NULL;
    ZT_OK(zs_backend_select("cuda", &base, &dev));
    ZT_OK(zs_cuda_set_device(0));
    gpu = base->with_math(ZS_MATH_BF16);
    ZT_CHECK(gpu->twin16 != NULL, "the bf16 table has no twin16");
    ZT_OK(zs_cuda_stream_create(&s));
    for (int e = 0; e < N_ENTRY; e++)
        check_entry(e, s);
    check_embedding(s);
    check_widen(s);
    zs_cuda_stream_destroy(s);
    return zt_finish();
}

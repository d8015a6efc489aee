/* Every CUDA launcher states the cost of its launch (ZS_COST, docs/cuda.md "The profiler"), and the
 * statements hold against what the emulated GPU's profiler measures (ctest label gpu, emulated
 * GPU only): each op of the table runs alone between zs_emu_profile_start and _stop on small
 * random cases, and for every launch recorded
 *  1. the launcher declared its cost (declared == 1), with no tensor-core FLOPs (none of the
 *     kernels uses tensor cores);
 *  2. the declared ideal bytes agree with the unique bytes the profiler saw (see check_rec in
 *     emucost.h for the tolerance, and for the kernels that touch more or less than their
 *     declaration by design, each with its reason, enumerated here on the host);
 *  3. the declared FLOPs have the right shape dependence: they scale exactly with the elements
 *     (or rows, or columns) between two sizes. One gemm's price (the emulator's cuBLAS model:
 *     2 m n k) is checked too, and the bf16 linear forward's bias in cuBLASLt's epilogue (no
 *     bias pass after the product).
 * This test: gemm, the elementwise ops, AdamW, sums, bias, norms, RoPE and softmax
 * cross-entropy. Every __global__ kernel of the .cu files in src/backend/cuda (read from the
 * sources) but the attention, cast and embedding ones must have been checked; attention, flash
 * attention, decoding and sampling (attention_cuda.cu, flash*_cuda.cu, decode_cuda.cu):
 * test_emu_costs_attn.c; casts and the embedding (cast_cuda.cu, embedding_cuda.cu):
 * test_emu_costs_mem.c. Exits 77 without a GPU. */
#include "backend/kernels/sumsq.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "emucost.h"

#include <stdint.h>
#include <string.h>

/* ---- gemm --------------------------------------------------------------------------- */

/* Not a kernel of ours: the emulator prices cuBLAS from the shape, 2 m n k on the fp32 pipes
 * in fp32 and on tensor cores in bf16. The bf16 gemm rounds A, then B, into its scratch first
 * (backend/ops.h ZS_GEMM_CAST_MAX): two cast launches, each checked as a kernel. */
static void check_gemm(void) {
    int m = 37, n = 29, k = 53;
    float *A = drand((size_t)m * k), *B = drand((size_t)k * n), *C = drand((size_t)m * n);
    for (int bf = 0; bf < 2; bf++) {
        prof_start();
        ZT_OK(gpu->with_math(bf ? ZS_MATH_BF16 : ZS_MATH_FP32)
                  ->gemm(NULL, 0, 0, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m));
        prof_stop();
        size_t want = bf ? 3 : 1, last = g_nrec ? g_nrec - 1 : 0;
        ZT_CHECK(g_nrec == want && !strncmp(g_rec[last].name, "cuBLAS gemm", 11),
                 "gemm: %zu records (want %zu), last '%s'", g_nrec, want,
                 g_nrec ? g_rec[last].name : "");
        for (size_t i = 0; i + 1 < g_nrec; i++) {
            ZT_CHECK(!strcmp(g_rec[i].name, "f32_to_bf16_kernel"),
                     "bf16 gemm: launch %zu is %s, not an operand's cast", i, g_rec[i].name);
            g_used[i] = 1;
            check_rec(&g_rec[i], 2, 0, NULL);
        }
        const zs_emu_record *r = &g_rec[last];
        double fl = bf ? r->mma_flops : r->flops;
        ZT_CHECK(fl == 2.0 * m * n * k && (bf ? r->flops : r->mma_flops) == 0,
                 "%s: %g FLOPs, %g on tensor cores; 2mnk = %g", r->name, r->flops, r->mma_flops,
                 2.0 * m * n * k);
        printf("  %-30s flops %.0f (2mnk)\n", r->name, fl);
    }
    zt_release();
}

/* The bf16 table's linear forward with a bias: W (and an fp32 input) rounded, then one
 * cuBLASLt product whose epilogue adds the bias (2 m n k on tensor cores, the bias read), and
 * no bias_fwd pass after it; with the GELU (v 4, 5: a bf16 input, its gelu output), that
 * epilogue's row ("gemm+bias+gelu") and no bias_gelu_fwd16 pass. */
static void check_linear_bias(void) {
    int N = 29, IC = 48, OC = 40;
    const zs_ops *o = gpu->with_math(ZS_MATH_BF16);
    float *W = drand((size_t)OC * IC), *x = drand((size_t)N * IC), *b = drand((size_t)OC);
    float *out = drand((size_t)N * OC), *tmp = drand((size_t)N * OC);
    zs_bf16 *act = (zs_bf16 *)drand((size_t)N * OC);
    ZT_CHECK(o->linear_fwd_bias != NULL, "the bf16 table has no linear_fwd_bias");
    if (!o->linear_fwd_bias) return;
    for (int v = 0; v < 6; v++) { /* in16, out16: a bf16 D is the epilogue's, no cast after */
        int in16 = v & 1, out16 = v >> 1 ? 1 : 0, gelu = v >= 4;
        const char *want = gelu ? "cuBLASLt gemm+bias+gelu bf16" : "cuBLASLt gemm+bias bf16";
        prof_start();
        ZT_OK(o->linear_fwd_bias(NULL, out, out16, tmp, x, in16, W, b, N, IC, OC, gelu ? act : NULL,
                                 NULL));
        prof_stop();
        size_t casts = in16 ? 1 : 2, last = g_nrec ? g_nrec - 1 : 0;
        ZT_CHECK(g_nrec == casts + 1 && !strncmp(g_rec[last].name, want, strlen(want)),
                 "linear_fwd_bias (in16 %d, out16 %d, gelu %d): %zu records (want %zu), last "
                 "'%s'",
                 in16, out16, gelu, g_nrec, casts + 1, g_nrec ? g_rec[last].name : "");
        for (size_t i = 0; i < last; i++) {
            ZT_CHECK(!strcmp(g_rec[i].name, "f32_to_bf16_kernel"),
                     "linear_fwd_bias: launch %zu is %s, not an operand's cast", i, g_rec[i].name);
            g_used[i] = 1;
            check_rec(&g_rec[i], 2, 0, NULL);
        }
        const zs_emu_record *r = &g_rec[last];
        ZT_CHECK(r->mma_flops == 2.0 * OC * N * IC && r->flops == 0,
                 "%s: %g FLOPs, %g on tensor cores; 2mnk = %g", r->name, r->flops, r->mma_flops,
                 2.0 * OC * N * IC);
        printf("  %-30s flops %.0f (2mnk)\n", r->name, r->mma_flops);
    }
    zt_release();
}

/* ---- elementwise ops: FLOPs proportional to n ------------------------------------------ */

enum {
    E_RESIDUAL,
    E_AXPY,
    E_SCALE,
    E_FILL,
    E_GELU_FWD,
    E_GELU_BWD,
    E_GELU_BWD16,
    E_GELU_FWD16,
    E_SWIGLU_FWD,
    E_SWIGLU_BWD,
    E_SWIGLU_BWD16,
    E_INIT,
    E_ADAMW,
    E_COUNT
};
static const char *const g_elem_kernel[E_COUNT] = {
    "residual_kernel",   "axpy_kernel",       "scale_kernel",      "fill_kernel",
    "gelu_fwd_kernel",   "gelu_bwd_kernel",   "gelu_bwd_kernel",   "bias_gelu16_kernel",
    "swiglu_fwd_kernel", "swiglu_bwd_kernel", "swiglu_bwd_kernel", "init_normal_kernel",
    "adamw_kernel"};
/* distinct buffers each touches */
static const int g_elem_bufs[E_COUNT] = {3, 2, 1, 1, 2, 3, 3, 3, 3, 5, 5, 1, 4};

/* One elementwise op over n elements; its FLOPs. */
static double run_elementwise(int op, size_t n) {
    float *a = drand(n), *b = drand(n), *c = drand(n), *d = drand(n), *e = drand(n);
    zs_bf16 *h = zt_dbuf(n * sizeof(zs_bf16)), *h2 = zt_dbuf(n * sizeof(zs_bf16));
    if (op == E_ADAMW) ZT_OK(gpu->fill(NULL, d, 0.01f, n)); /* v: a running mean of squares */
    prof_start();
    switch (op) {
    case E_RESIDUAL:
        ZT_OK(gpu->residual_fwd(NULL, a, b, c, n));
        break;
    case E_AXPY:
        ZT_OK(gpu->axpy(NULL, a, 0.5f, b, n));
        break;
    case E_SCALE:
        ZT_OK(gpu->scale(NULL, a, 0.5f, n));
        break;
    case E_FILL:
        ZT_OK(gpu->fill(NULL, a, 2.0f, n));
        break;
    case E_GELU_FWD:
        ZT_OK(gpu->gelu_fwd(NULL, a, b, n));
        break;
    case E_GELU_BWD:
        ZT_OK(gpu->gelu_bwd(NULL, a, b, c, n));
        break;
    case E_GELU_BWD16: /* the GELU's input in bf16: a 2-byte read */
        ZT_OK(gpu->gelu_bwd16(NULL, a, h, c, n));
        break;
    case E_GELU_FWD16: /* one row: pre read, pre16 and out written in bf16 */
        ZT_OK(gpu->bias_gelu_fwd16(NULL, h, b, h2, NULL, 1, (int)n));
        break;
    case E_SWIGLU_FWD:
        ZT_OK(gpu->swiglu_fwd(NULL, a, b, c, n));
        break;
    case E_SWIGLU_BWD:
        ZT_OK(gpu->swiglu_bwd(NULL, a, b, c, d, e, n));
        break;
    case E_SWIGLU_BWD16: /* the two gradients in bf16: 2-byte writes */
        ZT_OK(gpu->swiglu_bwd16(NULL, h, h2, c, d, e, n));
        break;
    case E_INIT:
        ZT_OK(gpu->init_normal(NULL, a, n, 7, 3, 11, 0.02f));
        break;
    case E_ADAMW:
        ZT_OK(gpu->adamw(NULL, a, b, c, d, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2));
        break;
    }
    prof_stop();
    const zs_emu_record *r = rec(g_elem_kernel[op]);
    check_rec(r, g_elem_bufs[op], 0, NULL);
    double fl = r->flops;
    zt_release();
    return fl;
}

static void check_elementwise(void) {
    size_t n1 = 3001, n2 = 7919;
    for (int op = 0; op < E_COUNT; op++) {
        double f1 = run_elementwise(op, n1), f2 = run_elementwise(op, n2);
        check_scaling(g_elem_kernel[op], f1, (double)n1, f2, (double)n2);
    }
}

/* The fused AdamW: FLOPs and bytes over the elements its segments cover (the gaps untouched),
 * per element as adamw's. Each segment is a range of each of the 4 buffers (k = 4 per
 * segment). */
static double run_adamw_segs(const zs_adamw_segs *s, size_t n) {
    float *p = drand(n), *g = drand(n), *m = drand(n), *v = zt_dbuf(n * sizeof(float));
    double covered = 0;
    for (int i = 0; i < s->n; i++)
        covered += (double)(s->hi[i] - s->lo[i]);
    ZT_OK(gpu->fill(NULL, v, 0.01f, n));
    prof_start();
    ZT_OK(gpu->adamw_segs(NULL, p, g, m, v, s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2));
    prof_stop();
    const zs_emu_record *r = rec("adamw_segs_kernel");
    check_rec(r, 4 * s->n, 0, NULL);
    zt_release();
    return r->flops / covered;
}

static void check_adamw_segs(void) {
    zs_adamw_segs s1 = {
        .n = 3, .lo = {16, 1040, 3001}, .hi = {1000, 2999, 4997}, .decay = {1, 0, 1}};
    zs_adamw_segs s2 = {.n = 2, .lo = {0, 4003}, .hi = {3001, 4500}, .decay = {0, 1}};
    double per1 = run_adamw_segs(&s1, 5000), per2 = run_adamw_segs(&s2, 4500);
    double per = run_elementwise(E_ADAMW, 1000) / 1000.0;
    ZT_CHECK(per1 == per2 && per1 == per,
             "adamw_segs: %g and %g FLOPs per covered element, adamw %g per element", per1, per2,
             per);
}

/* adamw_segs16: as adamw_segs, the gradient bf16 (widened as read; its 2-byte reads counted),
 * the same FLOPs per covered element; with the parameters rounded into another buffer or in
 * place over the gradient (round 1, 2), 2 bytes more written per covered element. */
static double run_adamw_segs16(const zs_adamw_segs *s, size_t n, int round) {
    float *p = drand(n), *m = drand(n), *v = zt_dbuf(n * sizeof(float)), *g32 = drand(n);
    zs_bf16 *g = zt_dbuf(n * sizeof(zs_bf16));
    double covered = 0;
    for (int i = 0; i < s->n; i++)
        covered += (double)(s->hi[i] - s->lo[i]);
    ZT_OK(gpu->fill(NULL, v, 0.01f, n));
    ZT_OK(gpu->cast(NULL, g, ZS_DTYPE_BF16, g32, ZS_DTYPE_F32, n));
    zs_bf16 *r16 = round == 2 ? g : round ? zt_dbuf(n * sizeof(zs_bf16)) : NULL;
    prof_start();
    ZT_OK(gpu->adamw_segs16(NULL, p, g, m, v, r16, s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2));
    prof_stop();
    const zs_emu_record *r = rec("adamw_segs16_kernel");
    check_rec(r, (round ? 5 : 4) * s->n, 0, NULL);
    zt_release();
    return r->flops / covered;
}

static void check_adamw_segs16(void) {
    zs_adamw_segs s1 = {
        .n = 3, .lo = {16, 1040, 3001}, .hi = {1000, 2999, 4997}, .decay = {1, 0, 1}};
    double per = run_elementwise(E_ADAMW, 1000) / 1000.0;
    for (int round = 0; round < 3; round++) {
        double per1 = run_adamw_segs16(&s1, 5000, round);
        ZT_CHECK(per1 == per, "adamw_segs16 (round %d): %g FLOPs per covered element, adamw %g",
                 round, per1, per);
    }
}

/* sumsq16 by groups: pieces (bf16 read, a double per piece written), then each group's total
 * (pieces read, a double per group written). Two sizes, 2 and 4 groups of 16384 (the last
 * short), so both FLOP counts scale with n. */
static void run_sumsq16(size_t n, double fl[2]) {
    size_t group = 4 * ZS_SUMSQ_CHUNK, ng = (n + group - 1) / group;
    float *x32 = drand(n);
    zs_bf16 *x = zt_dbuf(n * sizeof(zs_bf16));
    double *out = zt_dbuf(ng * sizeof(double));
    ZT_OK(gpu->cast(NULL, x, ZS_DTYPE_BF16, x32, ZS_DTYPE_F32, n));
    prof_start();
    ZT_OK(gpu->sumsq16(NULL, out, x, n, group));
    prof_stop();
    const zs_emu_record *a = rec("chunk_sums16_kernel"), *b = rec("group_totals_kernel");
    check_rec(a, 2, 0, NULL);
    check_rec(b, 2, 0, NULL);
    fl[0] = a->flops;
    fl[1] = b->flops;
    zt_release();
}

static void check_sumsq16(void) {
    size_t n1 = 8 * ZS_SUMSQ_CHUNK - 4096, n2 = 2 * n1; /* 7 and 14 pieces */
    double a[2], b[2];
    run_sumsq16(n1, a);
    run_sumsq16(n2, b);
    check_scaling("chunk_sums16_kernel", a[0], (double)n1, b[0], (double)n2);
    check_scaling("group_totals_kernel", a[1], (double)n1, b[1], (double)n2);
}

/* sum and sumsq: chunk partials (x read, one double per chunk written), then their total. Sizes
 * of 2 and 4 whole-ish chunks, so that the chunk count scales with n too. */
static void run_sums(size_t n, int square, double fl[2]) {
    float *x = drand(n);
    double *out = zt_dbuf(sizeof(double));
    prof_start();
    ZT_OK((square ? gpu->sumsq : gpu->sum)(NULL, out, x, n));
    prof_stop();
    const zs_emu_record *a = rec("chunk_sums_kernel"), *b = rec("chunks_total_kernel");
    check_rec(a, 2, 0, NULL);
    check_rec(b, 2, 0, NULL);
    fl[0] = a->flops;
    fl[1] = b->flops;
    zt_release();
}

static void check_sums(void) {
    size_t n1 = 2 * ZS_SUMSQ_CHUNK - 100, n2 = 2 * n1; /* 2 and 4 chunks */
    for (int square = 0; square < 2; square++) {
        double a[2], b[2];
        run_sums(n1, square, a);
        run_sums(n2, square, b);
        check_scaling("chunk_sums_kernel", a[0], (double)n1, b[0], (double)n2);
        check_scaling("chunks_total_kernel", a[1], (double)n1, b[1], (double)n2);
    }
}

/* ---- bias, norms: FLOPs proportional to rows (or to columns) ------------------------------ */

static void run_bias(int N, int OC, double fl[4]) {
    size_t no = (size_t)N * OC;
    float *out = drand(no), *bias = drand(OC), *dout = drand(no), *db = drand(OC);
    float *x = drand(no), *y = drand(no);
    prof_start();
    ZT_OK(gpu->bias_fwd(NULL, out, bias, N, OC));
    prof_stop();
    const zs_emu_record *f = rec("bias_fwd_kernel");
    check_rec(f, 2, 0, NULL);
    fl[0] = f->flops;
    /* bias_act_kernel, both forms: a + (b + bias) into out; pre += bias, out = gelu(pre) */
    prof_start();
    ZT_OK(gpu->bias_residual_fwd(NULL, out, NULL, x, y, bias, N, OC));
    prof_stop();
    const zs_emu_record *r = rec("bias_act_kernel");
    check_rec(r, 4, 0, NULL);
    fl[2] = r->flops;
    /* with keep (the kept residual): the sum's bf16 record written too, with and without a bias
     * (without one, no longer residual_kernel) */
    zs_bf16 *k16 = (zs_bf16 *)drand((no + 1) / 2);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        prof_start();
        ZT_OK(gpu->bias_residual_fwd(NULL, out, k16, x, y, with_bias ? bias : NULL, N, OC));
        prof_stop();
        check_rec(rec("bias_act_kernel"), with_bias ? 5 : 4, 0, NULL);
    }
    prof_start();
    ZT_OK(gpu->bias_gelu_fwd(NULL, y, out, bias, N, OC));
    prof_stop();
    const zs_emu_record *g = rec("bias_act_kernel");
    check_rec(g, 3, 0, NULL);
    fl[3] = g->flops;
    prof_start();
    ZT_OK(gpu->bias_bwd(NULL, db, dout, N, OC));
    prof_stop();
    const zs_emu_record *b = rec("bias_bwd_kernel");
    check_rec(b, 2, 0, NULL);
    fl[1] = b->flops;
    /* zs_linear_gelu_bwd_set16 (GPT-2's fc backward): dout and the GELU input read as bf16 */
    zs_bf16 *g16 = (zs_bf16 *)drand(no), *a16 = (zs_bf16 *)drand(no), *x16 = (zs_bf16 *)x;
    float *W = drand((size_t)OC * 8), *dW = drand((size_t)OC * 8); /* 8 inputs */
    prof_start();
    ZT_OK(zs_linear_gelu_bwd_set16(gpu->with_math(ZS_MATH_BF16), NULL, out, 0, dW, db, g16, a16, y,
                                   x16, 1, W, N, 8, OC));
    prof_stop();
    check_rec(rec("bias_bwd_kernel"), 4, 0, NULL);
    for (size_t i = 0; i < g_nrec; i++) /* W's rounding into the scratch */
        if (!strcmp(g_rec[i].name, "f32_to_bf16_kernel"))
            check_rec(&g_rec[i], 2, 0, NULL), g_used[i] = 1;
    zt_release();
}

/* Row kernels (a warp per row) scale with N, column kernels (a thread per column summing the
 * rows) with C: so three shapes, (N, C), (2N, C), (N, 2C). */
static void check_bias(void) {
    double a[4], b[4], c[4];
    run_bias(33, 300, a);
    run_bias(66, 300, b);
    run_bias(33, 601, c);
    check_scaling("bias_fwd_kernel", a[0], 33, b[0], 66);
    check_scaling("bias_act_kernel", a[2], 33, b[2], 66);
    check_scaling("bias_act_kernel", a[3], 33, b[3], 66);
    check_scaling("bias_bwd_kernel", a[1], 300, c[1], 601);
}

static void run_layernorm(int N, int C, double fl[3]) {
    size_t n = (size_t)N * C;
    float *x = drand(n), *w = drand(C), *b = drand(C), *out = drand(n);
    float *mean = drand(N), *rstd = drand(N), *dout = drand(n), *dinp = drand(n);
    float *dw = drand(C), *db = drand(C);
    prof_start();
    ZT_OK(gpu->layernorm_fwd(NULL, out, mean, rstd, x, w, b, N, C));
    prof_stop();
    const zs_emu_record *f = rec("layernorm_fwd_kernel");
    check_rec(f, 6, 0, NULL);
    fl[0] = f->flops;
    prof_start();
    ZT_OK(gpu->layernorm_bwd(NULL, dinp, dw, db, dout, x, w, mean, rstd, N, C));
    prof_stop();
    const zs_emu_record *r = rec("layernorm_bwd_seg_kernel"), *c = rec("layernorm_bwd_sum_kernel");
    check_rec(r, 6, 0, NULL);
    check_rec(c, 6, 0, NULL);
    fl[1] = r->flops;
    fl[2] = c->flops;
    /* layernorm_bwd16: the input bf16 (the stack's kept record), then dout too and dinp's bf16
     * copy written (GPT-2's residual gradient); 2 bytes an element declared for each */
    zs_bf16 *x16 = (zs_bf16 *)drand((n + 1) / 2), *d16 = (zs_bf16 *)drand((n + 1) / 2);
    zs_bf16 *r16 = (zs_bf16 *)drand((n + 1) / 2);
    for (int both = 0; both < 2; both++) {
        prof_start();
        ZT_OK(gpu->layernorm_bwd16(NULL, dinp, both ? r16 : NULL, dw, db,
                                   both ? (void *)d16 : (void *)dout, both, x16, 1, w, mean, rstd,
                                   N, C));
        prof_stop();
        check_rec(rec("layernorm_bwd_seg_kernel"), 6, 0, NULL);
        check_rec(rec("layernorm_bwd_sum_kernel"), 6, 0, NULL);
    }
    zt_release();
}

static void run_rmsnorm(int N, int C, double fl[3]) {
    size_t n = (size_t)N * C;
    float *x = drand(n), *w = drand(C), *out = drand(n), *rstd = drand(N);
    float *dout = drand(n), *dinp = drand(n), *dw = drand(C);
    prof_start();
    ZT_OK(gpu->rmsnorm_fwd(NULL, out, rstd, x, w, N, C, 1e-6f));
    prof_stop();
    const zs_emu_record *f = rec("rmsnorm_fwd_kernel");
    check_rec(f, 4, 0, NULL);
    fl[0] = f->flops;
    prof_start();
    ZT_OK(gpu->rmsnorm_bwd(NULL, dinp, dw, dout, x, w, rstd, N, C));
    prof_stop();
    const zs_emu_record *r = rec("rmsnorm_bwd_rows_kernel"), *c = rec("rmsnorm_bwd_cols_kernel");
    check_rec(r, 5, 0, NULL);
    check_rec(c, 4, 0, NULL);
    fl[1] = r->flops;
    fl[2] = c->flops;
    zs_bf16 *x16 = (zs_bf16 *)drand((n + 1) / 2), *d16 = (zs_bf16 *)drand((n + 1) / 2);
    for (int both = 0; both < 2; both++) { /* as run_layernorm's */
        prof_start();
        ZT_OK(gpu->rmsnorm_bwd16(NULL, dinp, dw, both ? (void *)d16 : (void *)dout, both, x16, 1, w,
                                 rstd, N, C));
        prof_stop();
        check_rec(rec("rmsnorm_bwd_rows_kernel"), 5, 0, NULL);
        check_rec(rec("rmsnorm_bwd_cols_kernel"), 4, 0, NULL);
    }
    zt_release();
}

static void check_norms(void) {
    int N = 37, C = 203; /* C not a multiple of the warp */
    double a[3], b[3], c[3];
    run_layernorm(N, C, a);
    run_layernorm(2 * N, C, b);
    run_layernorm(N, 2 * C, c);
    check_scaling("layernorm_fwd_kernel", a[0], N, b[0], 2 * N);
    check_scaling("layernorm_bwd_seg_kernel", a[1], N, b[1], 2 * N);
    check_scaling("layernorm_bwd_sum_kernel", a[2], C, c[2], 2 * C);
    run_rmsnorm(N, C, a);
    run_rmsnorm(2 * N, C, b);
    run_rmsnorm(N, 2 * C, c);
    check_scaling("rmsnorm_fwd_kernel", a[0], N, b[0], 2 * N);
    check_scaling("rmsnorm_bwd_rows_kernel", a[1], N, b[1], 2 * N);
    check_scaling("rmsnorm_bwd_cols_kernel", a[2], C, c[2], 2 * C);
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* bwd 0: rope_fwd, 1: rope_bwd, 2: rope_bwd16 (its output bf16: 2-byte writes). */
static double run_rope(int B, int docs, int bwd) {
    int T = 11, NH = 3, hs = 16;
    size_t n = (size_t)B * T * NH * hs;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    float *x = drand(n), *out = drand(n);
    zs_bf16 *out16 = zt_dbuf(n * sizeof(zs_bf16));
    prof_start();
    if (bwd == 2)
        ZT_OK(gpu->rope_bwd16(NULL, out16, x, B, T, NH, hs, 10000.0f, d_seg));
    else
        ZT_OK((bwd ? gpu->rope_bwd : gpu->rope_fwd)(NULL, out, x, B, T, NH, hs, 10000.0f, d_seg));
    prof_stop();
    const zs_emu_record *r = rec("rope_kernel");
    check_rec(r, 2 + docs, 0, NULL);
    zt_release();
    return r->flops;
}

static void check_rope(void) {
    for (int docs = 0; docs < 2; docs++)
        for (int bwd = 0; bwd < 3; bwd++)
            check_scaling("rope_kernel", run_rope(2, docs, bwd), 2, run_rope(5, docs, bwd), 5);
}

/* ---- softmax + cross-entropy ---------------------------------------------------------------- */

/* N rows of V = 37 real logits in Vp = 40, row 3 masked. mode 0: gradient out of place, 1: in
 * place over the logits, 2: loss only. */
static double run_softmax_xent(int N, int mode) {
    int V = 37, Vp = 40;
    size_t nl = (size_t)N * Vp;
    int32_t *tg = zt_hbuf((size_t)N * sizeof(int32_t));
    for (int r = 0; r < N; r++)
        tg[r] = r == 3 ? -1 : (int32_t)zt_uniform(0, V);
    int32_t *d_tg = zt_dup(tg, (size_t)N * sizeof(int32_t));
    /* mode 0: dlogits apart, 1: in place, 2: no gradient, 3: softmax_xent16 (bf16 logits, the
     * gradient in place) */
    const int es = mode == 3 ? 2 : 4;
    float *logits = drand(nl), *dl = mode == 0 ? drand(nl) : mode == 1 ? logits : NULL;
    float *loss = drand(N);
    zs_bf16 *l16 = NULL;
    if (mode == 3) { /* the values of drand's, rounded */
        float *h = zt_hcopy(logits, nl * 4);
        zs_bf16 *h16 = zt_hbuf(nl * sizeof(zs_bf16));
        for (size_t i = 0; i < nl; i++)
            h16[i] = zs_f32_to_bf16(h[i]);
        l16 = zt_dup(h16, nl * sizeof(zs_bf16));
    }
    /* The logits a real row reads: V of its Vp (the rows' partial sectors show); a masked row
     * reads none. The gradient takes each exponential again from the logits rather than reading
     * it back from dlogits, so dlogits is only written, in every mode. */
    sectors sx = sec_new(nl * es);
    for (int r = 0; r < N; r++)
        if (tg[r] >= 0) sec_add(&sx, (size_t)r * Vp * es, ((size_t)r * Vp + V) * es);
    double extra = sec_bytes(&sx) - (double)es * N * V;
    prof_start();
    if (mode == 3)
        ZT_OK(gpu->with_math(ZS_MATH_BF16)
                  ->softmax_xent16(NULL, loss, l16, d_tg, N, V, Vp, 1.0f / N, 1));
    else
        ZT_OK(gpu->softmax_xent(NULL, loss, dl, logits, d_tg, N, V, Vp, 1.0f / N));
    prof_stop();
    const zs_emu_record *r = rec("softmax_xent_kernel");
    check_rec(r, mode == 0 ? 4 : 3, extra, "logit rows' partial sectors, masked row unread");
    zt_release();
    return r->flops;
}

static void check_softmax_xent(void) {
    for (int mode = 0; mode < 4; mode++)
        check_scaling("softmax_xent_kernel", run_softmax_xent(9, mode), 9,
                      run_softmax_xent(18, mode), 18);
}

int main(void) {
    ec_start("emu_costs", EC_OPS);
    check_gemm();
    check_linear_bias();
    check_elementwise();
    check_adamw_segs();
    check_sums();
    check_bias();
    check_norms();
    check_rope();
    check_softmax_xent();
    check_adamw_segs16();
    check_sumsq16();
    return ec_finish();
}

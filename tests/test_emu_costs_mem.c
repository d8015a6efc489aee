/* The casts' and the embedding's launches state their costs (ZS_COST), and the statements hold
 * against what the emulated GPU's profiler measures: test_emu_costs.c's checks 1 to 3 (see its
 * list) for the kernels of cast_cuda.cu and embedding_cuda.cu (emucost.h EC_MEMORY), every one of
 * which must have been checked. Besides one range, widen_ranges widens several at once (the
 * gaps untouched), and the embedding's forward reads the bf16 twin of its tables where the
 * stream has one (2-byte reads). Exits 77 without a GPU. */
#include "backend/cuda_device.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "emucost.h"

#include <math.h>
#include <stdint.h>

static zs_stream_t *g_s; /* a stream of its own: the default one keeps no twin (ops.h twin16) */

/* ---- casts ---------------------------------------------------------------------------------- */

enum { C_TO_BF16, C_TO_F32, C_ROUND16, C_COUNT };
static const char *const g_cast_kernel[C_COUNT] = {"f32_to_bf16_kernel", "bf16_to_f32_kernel",
                                                   "round16_kernel"};
static const int g_cast_bufs[C_COUNT] = {2, 2, 1}; /* distinct buffers each touches */

/* One cast of n elements; its FLOPs. */
static double run_cast(int op, size_t n) {
    float *a = drand(n);
    zs_bf16 *h = zt_dbuf(n * sizeof(zs_bf16));
    prof_start();
    if (op == C_TO_BF16) ZT_OK(gpu->cast(NULL, h, ZS_DTYPE_BF16, a, ZS_DTYPE_F32, n));
    if (op == C_TO_F32) ZT_OK(gpu->cast(NULL, a, ZS_DTYPE_F32, h, ZS_DTYPE_BF16, n));
    if (op == C_ROUND16) ZT_OK(gpu->round16(NULL, a, n));
    prof_stop();
    const zs_emu_record *r = rec(g_cast_kernel[op]);
    check_rec(r, g_cast_bufs[op], 0, NULL);
    double fl = r->flops;
    zt_release();
    return fl;
}

/* widen_ranges over nr ranges of a buffer of n: 6 bytes an element of the ranges, each range
 * a part of both buffers (k = 2 a range); its FLOPs over the elements covered. */
static double run_widen(const int64_t *r, int nr, size_t n) {
    float *a = drand(n);
    zs_bf16 *h = zt_dbuf(n * sizeof(zs_bf16));
    double covered = 0;
    for (int i = 0; i < nr; i++)
        covered += (double)r[2 * i + 1];
    prof_start();
    ZT_OK(gpu->widen_ranges(NULL, a, h, r, nr));
    prof_stop();
    const zs_emu_record *rc = rec("bf16_to_f32_kernel");
    check_rec(rc, 2 * nr, 0, NULL);
    ZT_CHECK(fabs(rc->ideal_bytes - 6.0 * covered) < 0.5,
             "widen_ranges: %.0f bytes declared for %.0f elements", rc->ideal_bytes, covered);
    double fl = rc->flops / covered;
    zt_release();
    return fl;
}

static void check_casts(void) {
    size_t n1 = 3001, n2 = 7919;
    for (int op = 0; op < C_COUNT; op++)
        check_scaling(g_cast_kernel[op], run_cast(op, n1), (double)n1, run_cast(op, n2),
                      (double)n2);
    /* 16-byte aligned ranges (4 elements a thread) and ranges off it (one a thread) */
    const int64_t r1[] = {0, 1000, 1040, 999, 3001, 1996}, r2[] = {16, 4096, 8193, 3};
    double f1 = run_widen(r1, 3, 5000), f2 = run_widen(r2, 2, 8200);
    ZT_CHECK(f1 == 0 && f2 == 0, "widen_ranges declares FLOPs: %g and %g an element", f1, f2);
}

/* ---- embedding ---------------------------------------------------------------------------- */

/* Distinct tokens (so that the gathered wte rows are the ideal), C = 70 floats a row (280
 * bytes: rows start and end inside sectors, which the enumeration below counts). FLOPs: fl[0]
 * forward, fl[1] dwte, fl[2] dwpe. With twin the forward alone, on s, with wte and wpe in a
 * unit whose fp32 values are NaN and whose bf16 twin the kernel reads (2 bytes an element). */
static void run_embedding(int B, int with_wpe, int docs, int twin, double fl[3]) {
    int T = 7, C = 70, V = 64;
    size_t BT = (size_t)B * T, no = BT * C;
    ZT_REQUIRE(BT <= (size_t)V, "tokens must be distinct");
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    int32_t *tok = zt_hbuf((size_t)V * sizeof(int32_t));
    for (int i = 0; i < V; i++)
        tok[i] = i;
    for (int i = V - 1; i > 0; i--) { /* shuffle */
        int j = (int)zt_uniform(0, i + 1), t = tok[i];
        tok[i] = tok[j];
        tok[j] = t;
    }
    int32_t *d_tok = zt_dup(tok, BT * sizeof(int32_t));
    size_t es = twin ? 2 : 4, nu = (size_t)(V + T) * C; /* the unit: wte, then wpe */
    float *wte = drand(nu), *wpe = with_wpe ? wte + (size_t)V * C : NULL;
    zs_bf16 *u16 = zt_dbuf(nu * 2);
    if (twin) {
        ZT_OK(gpu->fill(g_s, wte, NAN, nu));
        ZT_OK(gpu->cast(g_s, u16, ZS_DTYPE_BF16, drand(nu), ZS_DTYPE_F32, nu));
        gpu->twin16(g_s, wte, u16, nu);
    }
    float *out = drand(no), *dout = drand(no), *dwte = drand((size_t)V * C);
    float *dwpe = drand((size_t)T * C);
    /* the wte rows of the tokens, and the wpe rows of the positions in their documents */
    sectors ste = sec_new((size_t)V * C * es), spe = sec_new((size_t)T * C * es);
    for (size_t bt = 0; bt < BT; bt++) {
        size_t pos = bt % T - (size_t)seg_lo(seg, bt);
        sec_add(&ste, (size_t)tok[bt] * C * es, ((size_t)tok[bt] + 1) * C * es);
        sec_add(&spe, pos * C * es, (pos + 1) * C * es);
    }
    double te = sec_bytes(&ste) - (double)es * BT * C, pe = sec_bytes(&spe) - (double)es * T * C;
    prof_start();
    ZT_OK(gpu->embedding_fwd(twin ? g_s : NULL, out, d_tok, wte, wpe, B, T, C, d_seg));
    prof_stop();
    if (twin) gpu->twin16(g_s, NULL, NULL, 0);
    const zs_emu_record *f = rec("embedding_fwd_kernel");
    check_rec(f, 3 + with_wpe + docs, te + (with_wpe ? pe : 0),
              docs ? "the wte rows' partial sectors; wpe: only the positions documents reach"
                   : "the wte rows' partial sectors (C = 70)");
    fl[0] = f->flops;
    if (twin) {
        zt_release();
        return;
    }
    prof_start();
    ZT_OK(gpu->embedding_bwd(NULL, dwte, with_wpe ? dwpe : NULL, dout, d_tok, B, T, C, d_seg));
    prof_stop();
    const zs_emu_record *w = rec("embedding_bwd_wte_kernel");
    check_rec(w, 3, 2 * te, "the dwte rows' partial sectors, read and written");
    fl[1] = w->flops;
    fl[2] = 0;
    if (with_wpe) {
        const zs_emu_record *p =
            rec(docs ? "embedding_bwd_wpe_seg_kernel" : "embedding_bwd_wpe_kernel");
        check_rec(p, 2 + docs, docs ? 2 * pe : 0,
                  "dwpe: only the positions documents reach, read and written");
        fl[2] = p->flops;
    }
    zt_release();
}

static void check_embedding(void) {
    double a[3], b[3];
    for (int docs = 0; docs < 2; docs++) {
        run_embedding(3, 1, docs, 0, a);
        run_embedding(6, 1, docs, 0, b);
        check_scaling("embedding_fwd_kernel", a[0], 3, b[0], 6);
        check_scaling("embedding_bwd_wte_kernel", a[1], 3, b[1], 6);
        check_scaling(docs ? "embedding_bwd_wpe_seg_kernel" : "embedding_bwd_wpe_kernel", a[2], 3,
                      b[2], 6);
    }
    run_embedding(3, 0, 0, 0, a); /* no position embedding: no FLOPs */
    ZT_CHECK(a[0] == 0, "embedding_fwd without wpe declares %g FLOPs", a[0]);
    for (int docs = 0; docs < 2; docs++) { /* the bf16 twin read */
        run_embedding(3, 1, docs, 1, a);
        run_embedding(6, 1, docs, 1, b);
        check_scaling("embedding_fwd_kernel", a[0], 3, b[0], 6);
    }
    run_embedding(3, 0, 0, 1, a);
}

int main(void) {
    ec_start("emu_costs_mem", EC_MEMORY);
    ZT_CHECK(gpu->widen_ranges != NULL, "the CUDA table has no widen_ranges");
    ZT_OK(zs_cuda_stream_create(&g_s));
    check_casts();
    check_embedding();
    zs_cuda_stream_destroy(g_s);
    return ec_finish();
}

/* Every CUDA launcher states the cost of its launch (ZS_COST, docs/cuda.md "The profiler"), and the
 * statements hold against what the emulated GPU's profiler measures (ctest label gpu, emulated
 * GPU only): each op of the table runs alone between zs_emu_profile_start and _stop on small
 * random cases, and for every launch recorded
 *  1. the launcher declared its cost (declared == 1), with no tensor-core FLOPs (none of the
 *     kernels uses tensor cores);
 *  2. the declared ideal bytes agree with the unique bytes the profiler saw (see check_rec for
 *     the tolerance, and for the kernels that touch more or less than their declaration by
 *     design, each with its reason, enumerated here on the host);
 *  3. the declared FLOPs have the right shape dependence: for attention, flash attention and
 *     decode attention they equal a count of the (query, key) pairs (and key blocks) the masks
 *     admit, enumerated here independently of the launchers' closed forms; elsewhere they
 *     scale exactly with the elements (or rows, or columns) between two sizes. One gemm's
 *     price (the emulator's cuBLAS model: 2 m n k) is checked too.
 * Every __global__ kernel of the .cu files in src/backend/cuda (read from the sources) must have
 * been checked. Exits 77 without a GPU. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/kernels/flash.h"
#include "backend/kernels/sumsq.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "emu_profile.h"
#include "testutil.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>

static const zs_ops *gpu;

/* ---- buffers: testutil's pool, every allocation of a check freed by zt_release(); device
 * buffers are 256-byte aligned (zt_dbuf checks), which the sector counts below rely on ---- */

static float *hf(size_t n) {
    return zt_hbuf(n * sizeof(float));
}

static float *randn(size_t n) {
    float *x = hf(n);
    zt_fill_normal(x, n, 1.0f);
    return x;
}

/* A device buffer of n random floats. */
static float *drand(size_t n) {
    return zt_dup(randn(n), n * sizeof(float));
}

/* Document starts (backend/ops.h "Documents"), as test_cuda_ops.c draws them: a new document at
 * t > 0 with probability 1/8, row 1 padded (m real tokens, then documents of one). NULL (and
 * *h NULL) without documents. */
static const int32_t *docs_seg(int docs, int B, int T, const int32_t **h) {
    *h = NULL;
    if (!docs) return NULL;
    int32_t *seg = zt_hbuf((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int m = b == 1 ? 1 + (int)zt_uniform(0, T) : T;
        int32_t *r = seg + (size_t)b * T;
        for (int t = 0; t < T; t++)
            r[t] = t == 0 ? 0 : t >= m ? t : zt_uniform(0, 1) < 0.125 ? t : r[t - 1];
    }
    *h = seg;
    return zt_dup(seg, (size_t)B * T * sizeof(int32_t));
}

static int seg_lo(const int32_t *seg, size_t bt) {
    return seg ? (int)seg[bt] : 0;
}

/* ---- the profiler's unit: unique 32-byte sectors of one buffer ---------------------------- */

typedef struct sectors {
    unsigned char *hit;
    size_t n;
} sectors;

static sectors sec_new(size_t nbytes) {
    sectors s = {zt_hbuf(nbytes / 32 + 1), nbytes / 32 + 1};
    memset(s.hit, 0, s.n);
    return s;
}

/* Bytes [lo, hi) of the buffer touched. */
static void sec_add(sectors *s, size_t lo, size_t hi) {
    for (size_t q = lo / 32; hi > lo && q <= (hi - 1) / 32; q++)
        s->hit[q] = 1;
}

static double sec_bytes(const sectors *s) {
    double n = 0;
    for (size_t q = 0; q < s->n; q++)
        n += s->hit[q];
    return 32.0 * n;
}

/* ---- the kernels of the sources, and the records of one profiled op --------------------- */

#define MAX_KERNELS 64
static struct kernel {
    char name[96];
    int seen;
    zs_emu_record first;
} g_k[MAX_KERNELS];
static int g_nk;

/* Every "__global__ void NAME(" (or "__global__ void ZS_BOUNDS(..) NAME(") of the .cu files in
 * src/backend/cuda (as emu_coverage.sh does),
 * found from this file's own path. */
static void load_kernels(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    ZT_REQUIRE(slash, "cannot find the source tree from %s", __FILE__);
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/../src/backend/cuda");
    DIR *d = opendir(dir);
    ZT_REQUIRE(d, "cannot open %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".cu") != 0) continue;
        char path[8192], line[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        ZT_REQUIRE(f, "cannot read %s", path);
        while (fgets(line, sizeof line, f)) {
            const char *g = strstr(line, "__global__ void ");
            if (!g) continue;
            g += strlen("__global__ void ");
            if (!strncmp(g, "ZS_BOUNDS(", 10) && strstr(g, ") ")) g = strstr(g, ") ") + 2;
            size_t n = strspn(g, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            if (n == 0 || g[n] != '(') continue;
            ZT_REQUIRE(g_nk < MAX_KERNELS && n < sizeof g_k[0].name, "too many kernels");
            memcpy(g_k[g_nk].name, g, n);
            g_k[g_nk++].name[n] = 0;
        }
        fclose(f);
    }
    closedir(d);
    ZT_REQUIRE(g_nk > 0, "no __global__ kernels found in %s", dir);
}

static struct kernel *kernel_named(const char *name) {
    for (int i = 0; i < g_nk; i++)
        if (!strcmp(g_k[i].name, name)) return &g_k[i];
    return NULL;
}

#define MAX_RECS 16
static zs_emu_record g_rec[MAX_RECS];
static int g_used[MAX_RECS];
static size_t g_nrec;

/* Every kernel launch of the last profiled op was checked. */
static void recs_all_checked(void) {
    for (size_t i = 0; i < g_nrec; i++)
        ZT_CHECK(g_used[i] || !kernel_named(g_rec[i].name), "launch of %s not checked",
                 g_rec[i].name);
    g_nrec = 0;
}

static void prof_start(void) {
    recs_all_checked();
    ZT_OK(gpu->sync(NULL));
    zs_emu_profile_start();
}

static void prof_stop(void) {
    zs_emu_profile_stop();
    g_nrec = zs_emu_profile_count();
    ZT_REQUIRE(g_nrec <= MAX_RECS, "%zu records from one op", g_nrec);
    for (size_t i = 0; i < g_nrec; i++) {
        ZT_REQUIRE(zs_emu_profile_get(i, &g_rec[i]) == 0, "record %zu", i);
        g_used[i] = 0;
    }
}

/* The one launch of kernel `name` in the last profiled op. */
static const zs_emu_record *rec(const char *name) {
    static zs_emu_record none;
    const zs_emu_record *r = NULL;
    int n = 0;
    for (size_t i = 0; i < g_nrec; i++)
        if (!strcmp(g_rec[i].name, name)) {
            r = &g_rec[i];
            g_used[i] = 1;
            n++;
        }
    ZT_CHECK(n == 1, "%d launches of %s recorded, expected 1", n, name);
    return r ? r : &none;
}

/* Checks 1 and 2 on one launch. The profiler measures unique 32-byte sectors (read and written
 * counted apart), the declaration counts elements. k is the number of distinct buffers the
 * kernel touches (one touched in separate ranges, as adamw_segs' segments, counts once per
 * range): each buffer's first and last sector may be partial, so the measured bytes
 * may differ from the ideal by up to 32 bytes a buffer (here buffers start 256-byte aligned, so
 * only the last one is partial, and the measured bytes are never below the ideal), and 2% more
 * above it. Required: declared <= measured + 32 k and measured <= declared + 32 k + 2%.
 *
 * `extra` is what the kernel touches beyond (or, when negative, short of) its declaration by
 * design, enumerated on the host sector by sector with its reason in `why`: scratch the kernel
 * writes and reads back (attention scores, an accumulator in its output), partial sectors of
 * row ranges (logits rows of which V of Vp are read, the causal triangle of att), and what data
 * in device memory spares it that the launcher cannot see (masked rows, document masks, whose
 * declaration is the upper bound without them). The tolerance applies around declared + extra;
 * extra is 0 for every kernel that touches exactly its ideal. */
static void check_rec(const zs_emu_record *r, int k, double extra, const char *why) {
    struct kernel *kn = kernel_named(r->name);
    double decl = r->ideal_bytes, want = decl + extra, got = r->dram_read + r->dram_write;
    ZT_CHECK(kn != NULL, "record '%s' is no __global__ kernel of src/backend/cuda", r->name);
    ZT_CHECK(r->declared == 1, "%s: no ZS_COST before its launch", r->name);
    /* tensor FLOPs: the declaration against the mma instructions the warps really executed */
    ZT_CHECK(r->mma_flops == r->mma_counted,
             "%s: %g tensor-core FLOPs declared, %g executed by its mma instructions", r->name,
             r->mma_flops, r->mma_counted);
    ZT_CHECK(r->blocks_run == r->blocks, "%s: %llu of %llu blocks ran", r->name,
             (unsigned long long)r->blocks_run, (unsigned long long)r->blocks);
    ZT_CHECK(want <= got + 32.0 * k && got <= want + 32.0 * k + 0.02 * want,
             "%s: declared %.0f B (%+.0f by design: %s), measured %.0f B (read %.0f, written "
             "%.0f), k=%d",
             r->name, decl, extra, why ? why : "none", got, r->dram_read, r->dram_write, k);
    printf("  %-30s declared %9.0f B  measured %9.0f B", r->name, decl, got);
    if (extra) printf("  (%+.0f B by design: %s)", extra, why);
    printf("  flops %.0f\n", r->flops);
    if (kn && !kn->seen++) kn->first = *r;
}

/* Check 3 for a kernel whose FLOPs are linear in a size s: f1 / s1 == f2 / s2 exactly (both
 * are integers in doubles, well under 2^53). */
static void check_scaling(const char *name, double f1, double s1, double f2, double s2) {
    ZT_CHECK(f1 * s2 == f2 * s1 && (f1 > 0 || f2 == 0),
             "%s: %.0f FLOPs at size %.0f but %.0f at %.0f: not proportional", name, f1, s1, f2,
             s2);
}

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

/* ---- elementwise ops: FLOPs proportional to n ------------------------------------------ */

enum {
    E_RESIDUAL,
    E_AXPY,
    E_SCALE,
    E_FILL,
    E_GELU_FWD,
    E_GELU_BWD,
    E_SWIGLU_FWD,
    E_SWIGLU_BWD,
    E_SWIGLU_BWD16,
    E_TO_BF16,
    E_TO_F32,
    E_INIT,
    E_ADAMW,
    E_COUNT
};
static const char *const g_elem_kernel[E_COUNT] = {
    "residual_kernel",   "axpy_kernel",        "scale_kernel",       "fill_kernel",
    "gelu_fwd_kernel",   "gelu_bwd_kernel",    "swiglu_fwd_kernel",  "swiglu_bwd_kernel",
    "swiglu_bwd_kernel", "f32_to_bf16_kernel", "bf16_to_f32_kernel", "init_normal_kernel",
    "adamw_kernel"};
/* distinct buffers each touches */
static const int g_elem_bufs[E_COUNT] = {3, 2, 1, 1, 2, 3, 3, 5, 5, 2, 2, 1, 4};

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
    case E_SWIGLU_FWD:
        ZT_OK(gpu->swiglu_fwd(NULL, a, b, c, n));
        break;
    case E_SWIGLU_BWD:
        ZT_OK(gpu->swiglu_bwd(NULL, a, b, c, d, e, n));
        break;
    case E_SWIGLU_BWD16: /* the two gradients in bf16: 2-byte writes */
        ZT_OK(gpu->swiglu_bwd16(NULL, h, h2, c, d, e, n));
        break;
    case E_TO_BF16:
        ZT_OK(gpu->cast(NULL, h, ZS_DTYPE_BF16, a, ZS_DTYPE_F32, n));
        break;
    case E_TO_F32:
        ZT_OK(gpu->cast(NULL, a, ZS_DTYPE_F32, h, ZS_DTYPE_BF16, n));
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
 * the same FLOPs per covered element. */
static double run_adamw_segs16(const zs_adamw_segs *s, size_t n) {
    float *p = drand(n), *m = drand(n), *v = zt_dbuf(n * sizeof(float)), *g32 = drand(n);
    zs_bf16 *g = zt_dbuf(n * sizeof(zs_bf16));
    double covered = 0;
    for (int i = 0; i < s->n; i++)
        covered += (double)(s->hi[i] - s->lo[i]);
    ZT_OK(gpu->fill(NULL, v, 0.01f, n));
    ZT_OK(gpu->cast(NULL, g, ZS_DTYPE_BF16, g32, ZS_DTYPE_F32, n));
    prof_start();
    ZT_OK(gpu->adamw_segs16(NULL, p, g, m, v, s, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2));
    prof_stop();
    const zs_emu_record *r = rec("adamw_segs16_kernel");
    check_rec(r, 4 * s->n, 0, NULL);
    zt_release();
    return r->flops / covered;
}

static void check_adamw_segs16(void) {
    zs_adamw_segs s1 = {
        .n = 3, .lo = {16, 1040, 3001}, .hi = {1000, 2999, 4997}, .decay = {1, 0, 1}};
    double per1 = run_adamw_segs16(&s1, 5000), per = run_elementwise(E_ADAMW, 1000) / 1000.0;
    ZT_CHECK(per1 == per, "adamw_segs16: %g FLOPs per covered element, adamw %g", per1, per);
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
    ZT_OK(gpu->bias_residual_fwd(NULL, out, x, y, bias, N, OC));
    prof_stop();
    const zs_emu_record *r = rec("bias_act_kernel");
    check_rec(r, 4, 0, NULL);
    fl[2] = r->flops;
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
    const zs_emu_record *r = rec("layernorm_bwd_rows_kernel"),
                        *c = rec("layernorm_bwd_cols_kernel");
    check_rec(r, 6, 0, NULL);
    check_rec(c, 6, 0, NULL);
    fl[1] = r->flops;
    fl[2] = c->flops;
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
    zt_release();
}

static void check_norms(void) {
    int N = 37, C = 203; /* C not a multiple of the warp */
    double a[3], b[3], c[3];
    run_layernorm(N, C, a);
    run_layernorm(2 * N, C, b);
    run_layernorm(N, 2 * C, c);
    check_scaling("layernorm_fwd_kernel", a[0], N, b[0], 2 * N);
    check_scaling("layernorm_bwd_rows_kernel", a[1], N, b[1], 2 * N);
    check_scaling("layernorm_bwd_cols_kernel", a[2], C, c[2], 2 * C);
    run_rmsnorm(N, C, a);
    run_rmsnorm(2 * N, C, b);
    run_rmsnorm(N, 2 * C, c);
    check_scaling("rmsnorm_fwd_kernel", a[0], N, b[0], 2 * N);
    check_scaling("rmsnorm_bwd_rows_kernel", a[1], N, b[1], 2 * N);
    check_scaling("rmsnorm_bwd_cols_kernel", a[2], C, c[2], 2 * C);
}

/* ---- embedding ---------------------------------------------------------------------------- */

/* Distinct tokens (so that the gathered wte rows are the ideal), C = 70 floats a row (280
 * bytes: rows start and end inside sectors, which the enumeration below counts). grads: 1 dwte,
 * 2 dwpe, 3 both. FLOPs: fl[0] forward, fl[1] dwte, fl[2] dwpe. */
static void run_embedding(int B, int with_wpe, int docs, double fl[3]) {
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
    float *wte = drand((size_t)V * C), *wpe = with_wpe ? drand((size_t)T * C) : NULL;
    float *out = drand(no), *dout = drand(no), *dwte = drand((size_t)V * C);
    float *dwpe = drand((size_t)T * C);
    /* the wte rows of the tokens, and the wpe rows of the positions in their documents */
    sectors ste = sec_new((size_t)V * C * 4), spe = sec_new((size_t)T * C * 4);
    for (size_t bt = 0; bt < BT; bt++) {
        size_t pos = bt % T - (size_t)seg_lo(seg, bt);
        sec_add(&ste, (size_t)tok[bt] * C * 4, ((size_t)tok[bt] + 1) * C * 4);
        sec_add(&spe, pos * C * 4, (pos + 1) * C * 4);
    }
    double te = sec_bytes(&ste) - 4.0 * BT * C, pe = sec_bytes(&spe) - 4.0 * T * C;
    prof_start();
    ZT_OK(gpu->embedding_fwd(NULL, out, d_tok, wte, wpe, B, T, C, d_seg));
    prof_stop();
    const zs_emu_record *f = rec("embedding_fwd_kernel");
    check_rec(f, 3 + with_wpe + docs, te + (with_wpe ? pe : 0),
              docs ? "the wte rows' partial sectors; wpe: only the positions documents reach"
                   : "the wte rows' partial sectors (C = 70)");
    fl[0] = f->flops;
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
        run_embedding(3, 1, docs, a);
        run_embedding(6, 1, docs, b);
        check_scaling("embedding_fwd_kernel", a[0], 3, b[0], 6);
        check_scaling("embedding_bwd_wte_kernel", a[1], 3, b[1], 6);
        check_scaling(docs ? "embedding_bwd_wpe_seg_kernel" : "embedding_bwd_wpe_kernel", a[2], 3,
                      b[2], 6);
    }
    run_embedding(3, 0, 0, a); /* no position embedding: no FLOPs */
    ZT_CHECK(a[0] == 0, "embedding_fwd without wpe declares %g FLOPs", a[0]);
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
    /* mode 0: dlogits apart, 1: in place, 2: no gradient, 3: softmax_xent16 (bf16 in place) */
    float *logits = drand(nl), *dl = mode == 0 ? drand(nl) : mode == 1 ? logits : NULL;
    float *loss = drand(N);
    /* The logits a real row reads: V of its Vp (the rows' partial sectors show); a masked row
     * reads none. The gradient takes each exponential again from the logits rather than reading
     * it back from dlogits, so dlogits is only written, in every mode. */
    sectors sx = sec_new(nl * 4);
    for (int r = 0; r < N; r++)
        if (tg[r] >= 0) sec_add(&sx, (size_t)r * Vp * 4, ((size_t)r * Vp + V) * 4);
    double extra = sec_bytes(&sx) - 4.0 * N * V;
    /* softmax_xent16 writes each row's Vp bf16 over the first half of the row's floats */
    sectors sw = sec_new(nl * 4);
    for (int r = 0; mode == 3 && r < N; r++)
        sec_add(&sw, (size_t)r * Vp * 4, (size_t)r * Vp * 4 + (size_t)Vp * 2);
    if (mode == 3) extra += sec_bytes(&sw) - 2.0 * N * Vp;
    prof_start();
    if (mode == 3)
        ZT_OK(gpu->with_math(ZS_MATH_BF16)
                  ->softmax_xent16(NULL, loss, logits, d_tg, N, V, Vp, 1.0f / N));
    else
        ZT_OK(gpu->softmax_xent(NULL, loss, dl, logits, d_tg, N, V, Vp, 1.0f / N));
    prof_stop();
    const zs_emu_record *r = rec("softmax_xent_kernel");
    check_rec(r, mode == 0 ? 4 : 3, extra,
              mode == 3 ? "logit rows' partial sectors, masked row unread, bf16 rows' partial "
                          "sectors"
                        : "logit rows' partial sectors, masked row unread");
    zt_release();
    return r->flops;
}

static void check_softmax_xent(void) {
    for (int mode = 0; mode < 4; mode++)
        check_scaling("softmax_xent_kernel", run_softmax_xent(9, mode), 9,
                      run_softmax_xent(18, mode), 18);
}

/* ---- attention -------------------------------------------------------------------------- */

/* The rows (b, h, t) of one attention call and the keys lo..t each admits: the pairs, and the
 * sectors of att (or datt, laid out alike: [(b NH + h) T + t] T + t2) they occupy. causal
 * ignores the document masks. */
static double attn_pairs_enum(int B, int NH, int T, const int32_t *seg, sectors *s) {
    double pairs = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int lo = seg_lo(seg, (size_t)b * T + t);
                size_t row = (((size_t)b * NH + h) * T + t) * T;
                pairs += t - lo + 1;
                if (s) sec_add(s, (row + lo) * 4, (row + t + 1) * 4);
            }
    return pairs;
}

/* Packed MHA (attention_fwd/bwd on q | k | v, NKV = NH) or GQA. B = 2, T = 70, hs = 12. FLOPs
 * (the kernels' per-row math, kernels/attention.h and common.h): forward per pair 4hs + 12
 * (q.k with its lanes' sum and scale, exp, sum, 1/sum scale, the out row), per row 8; backward
 * q per pair 4hs + 12 (dout.v, softmax backward, dq row), per row 7; backward kv per pair 4hs.
 * With document masks the launchers cannot see seg (device memory) and declare the causal
 * count, an upper bound: checked equal to the causal enumeration, and the admitted count is
 * printed beside it. */
static void check_attention(int NH, int NKV, int packed, int docs) {
    int B = 2, T = 70, hs = 12, C = NH * hs;
    size_t BT = (size_t)B * T, nq = BT * NH * hs, nk = BT * NKV * hs;
    size_t na = (size_t)B * NH * T * T;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    float *qkv = packed ? drand(BT * 3 * C) : NULL, *dqkv = packed ? drand(BT * 3 * C) : NULL;
    float *q = packed ? NULL : drand(nq), *k = packed ? NULL : drand(nk);
    float *v = packed ? NULL : drand(nk), *dq = packed ? NULL : drand(nq);
    float *dk = packed ? NULL : drand(nk), *dv = packed ? NULL : drand(nk);
    float *out = drand(nq), *att = drand(na), *datt = drand(na), *dout = drand(nq);
    sectors adm = sec_new(na * 4);
    double pairs = attn_pairs_enum(B, NH, T, seg, &adm),
           causal = attn_pairs_enum(B, NH, T, NULL, NULL);
    double rows = (double)B * NH * T, S = sec_bytes(&adm);
    double f_fwd = causal * (4.0 * hs + 12) + 8 * rows, f_q = causal * (4.0 * hs + 12) + 7 * rows;
    double f_kv = causal * 4.0 * hs;
    int nbuf = packed ? 1 : 3; /* q, k, v */
    char what[160];
    snprintf(what, sizeof what, "%s NH=%d NKV=%d%s: %.0f pairs admitted of %.0f causal",
             packed ? "attention" : "attention_gqa", NH, NKV, docs ? " documents" : "", pairs,
             causal);
    printf(" %s\n", what);
    prof_start();
    if (packed)
        ZT_OK(gpu->attention_fwd(NULL, out, att, qkv, B, T, C, NH, d_seg));
    else
        ZT_OK(gpu->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs, d_seg));
    prof_stop();
    const zs_emu_record *f = rec("attn_fwd_kernel");
    /* att is scratch too: the scores are written to it, then read back by the softmax and the
     * output rows (the admitted span of each row: S); the out rows are zeroed, then added to */
    check_rec(f, 2 + nbuf + docs, S + 4.0 * nq, "att (admitted pairs) and out read back");
    ZT_CHECK(f->flops == f_fwd, "attn_fwd_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             f->flops, f_fwd, what);
    prof_start();
    if (packed)
        ZT_OK(gpu->attention_bwd(NULL, dqkv, datt, dout, qkv, att, B, T, C, NH, d_seg));
    else
        ZT_OK(gpu->attention_gqa_bwd(NULL, dq, dk, dv, datt, dout, q, k, v, att, B, T, NH, NKV, hs,
                                     d_seg));
    prof_stop();
    const zs_emu_record *bq = rec("attn_bwd_q_kernel"), *bkv = rec("attn_bwd_kv_kernel");
    /* the declaration counts att read and datt written over the causal pairs; the kernel
     * touches the admitted ones, whose sectors are S, and reads datt back (softmax backward,
     * dq rows) */
    check_rec(bq, (packed ? 5 : 6) + docs, 3 * S - 8.0 * causal,
              "att read, datt written and read back over the admitted pairs' sectors");
    check_rec(bkv, (packed ? 5 : 6) + docs, 2 * S - 8.0 * causal,
              "att and datt read over the admitted pairs' sectors");
    ZT_CHECK(bq->flops == f_q, "attn_bwd_q_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bq->flops, f_q, what);
    ZT_CHECK(bkv->flops == f_kv, "attn_bwd_kv_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bkv->flops, f_kv, what);
    if (docs)
        printf("  with documents the kernels run %.0f, %.0f and %.0f FLOPs of those declared\n",
               pairs * (4.0 * hs + 12) + 8 * rows, pairs * (4.0 * hs + 12) + 7 * rows,
               pairs * 4.0 * hs);
    zt_release();
}

/* ---- flash attention ---------------------------------------------------------------------- */

/* Rows (b, h, i) with their admitted keys lo..i and the key blocks they visit (from the one
 * holding lo, kernels/flash.h). out[0] pairs, out[1] blocks, out[2] rows. */
static void fa_enum(int B, int NH, int T, const int32_t *seg, double out[3]) {
    out[0] = out[1] = out[2] = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int lo = seg_lo(seg, (size_t)b * T + i);
                out[0] += i - lo + 1;
                out[1] += i / ZS_FA_BK - lo / ZS_FA_BK + 1;
                out[2] += 1;
            }
}

/* FLOPs (kernels/flash.h): forward per pair 4hs + 4, per block visited hs + 11, per row
 * hs + 3; delta per row 2hs + 7; backward q per pair 6hs + 7; backward kv per pair 8hs + 7.
 * Documents as check_attention: the causal count is declared. T = 70 crosses a key block,
 * T = 150 with documents starts rows in a late one. */
static void check_flash(int NH, int NKV, int packed, int docs) {
    int B = 2, T = docs ? 150 : 70, hs = 12;
    const int32_t *seg = NULL, *d_seg = docs_seg(docs, B, T, &seg);
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    float *qb = drand(nq), *kb = packed ? qb + QD : drand(nk),
          *vb = packed ? qb + QD + KD : drand(nk);
    float *out = drand(no), *lse = drand(nl), *dout = drand(no), *delta = drand(nl);
    size_t ng = packed ? nq : nq + 2 * nk, ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    float *g = drand(ng);
    double adm[3], cau[3];
    fa_enum(B, NH, T, seg, adm);
    fa_enum(B, NH, T, NULL, cau);
    double f_fwd = cau[0] * (4.0 * hs + 4) + cau[1] * (hs + 11.0) + cau[2] * (hs + 3.0);
    double f_delta = cau[2] * (2.0 * hs + 7), f_q = cau[0] * (6.0 * hs + 7);
    double f_kv = cau[0] * (8.0 * hs + 7);
    int nbuf = packed ? 1 : 3;
    char what[160];
    snprintf(what, sizeof what,
             "flash NH=%d NKV=%d%s%s T=%d: %.0f pairs, %.0f blocks admitted of %.0f, %.0f causal",
             NH, NKV, packed ? " packed" : "", docs ? " documents" : "", T, adm[0], adm[1], cau[0],
             cau[1]);
    printf(" %s\n", what);
    prof_start();
    ZT_OK(gpu->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                   (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *f = rec("fa_fwd_kernel");
    /* the output rows are the online softmax's accumulator: zeroed, rescaled and added to in
     * place, so out is read back whole */
    sectors so = sec_new(no * 4);
    sec_add(&so, 0, no * 4);
    check_rec(f, 2 + nbuf + docs, sec_bytes(&so), "out read back (the accumulator)");
    ZT_CHECK(f->flops == f_fwd, "fa_fwd_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             f->flops, f_fwd, what);
    prof_start();
    ZT_OK(gpu->flash_attention_bwd(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out, lse, B, T,
                                   NH, NKV, hs, (int)ldq, (int)ldkv, d_seg));
    prof_stop();
    const zs_emu_record *d = rec("fa_delta_kernel"), *bq = rec("fa_bwd_q_kernel");
    const zs_emu_record *bkv = rec("fa_bwd_kv_kernel");
    check_rec(d, 3, 0, NULL);
    check_rec(bq, 4 + nbuf + docs, 0, NULL);
    check_rec(bkv, 4 + nbuf + docs, 0, NULL);
    ZT_CHECK(d->flops == f_delta, "fa_delta_kernel: %.0f FLOPs declared, %.0f enumerated", d->flops,
             f_delta);
    ZT_CHECK(bq->flops == f_q, "fa_bwd_q_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bq->flops, f_q, what);
    ZT_CHECK(bkv->flops == f_kv, "fa_bwd_kv_kernel: %.0f FLOPs declared, %.0f enumerated (%s)",
             bkv->flops, f_kv, what);
    if (docs)
        printf("  with documents the kernels run %.0f, %.0f and %.0f FLOPs of fwd, bwd q, bwd kv\n",
               adm[0] * (4.0 * hs + 4) + adm[1] * (hs + 11.0) + adm[2] * (hs + 3.0),
               adm[0] * (6.0 * hs + 7), adm[0] * (8.0 * hs + 7));
    zt_release();
}

/* The bf16 table's flash attention on tensor cores (flash_tc_cuda.cu), without documents (with
 * them the launchers declare the causal bound): the tensor FLOPs declared must equal those
 * the mma instructions executed, and the bytes each input once (K and V are staged again for
 * every query block, but their unique bytes are what DRAM must move). T = 150 is three 64-row
 * tiles, the last partial. */
static void check_flash_tc(int NH, int NKV, int packed) {
    int B = 2, T = 150, hs = 64;
    const zs_ops *tc = gpu->with_math(ZS_MATH_BF16);
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs, BT = (size_t)B * T;
    size_t ldq = packed ? QD + 2 * KD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nk = packed ? 0 : BT * KD, no = BT * QD, nl = (size_t)B * NH * T;
    float *qb = drand(nq), *kb = packed ? qb + QD : drand(nk),
          *vb = packed ? qb + QD + KD : drand(nk);
    float *out = drand(no), *lse = drand(nl), *dout = drand(no), *delta = drand(nl);
    size_t ng = packed ? nq : nq + 2 * nk, ok = packed ? QD : nq, ov = packed ? QD + KD : nq + nk;
    float *g = drand(ng);
    int nbuf = packed ? 1 : 3;
    printf(" flash on tensor cores NH=%d NKV=%d%s T=%d hs=%d\n", NH, NKV, packed ? " packed" : "",
           T, hs);
    prof_start();
    ZT_OK(tc->flash_attention_fwd(NULL, out, lse, qb, kb, vb, B, T, NH, NKV, hs, (int)ldq,
                                  (int)ldkv, NULL));
    prof_stop();
    const zs_emu_record *f = rec("fa_tc_fwd_kernel");
    check_rec(f, 2 + nbuf, 0, NULL);
    ZT_CHECK(f->mma_counted > 0 && f->flops > 0, "fa_tc_fwd_kernel: no tensor-core work");
    prof_start();
    ZT_OK(tc->flash_attention_bwd(NULL, g, g + ok, g + ov, delta, dout, qb, kb, vb, out, lse, B, T,
                                  NH, NKV, hs, (int)ldq, (int)ldkv, NULL));
    prof_stop();
    check_rec(rec("fa_tc_delta_kernel"), 3, 0, NULL);
    check_rec(rec("fa_tc_bwd_q_kernel"), 4 + nbuf, 0, NULL);
    check_rec(rec("fa_tc_bwd_kv_kernel"), 4 + nbuf, 0, NULL);
    zt_release();
}

/* ---- decoding ---------------------------------------------------------------------------- */

/* One position over a cache of cap rows. FLOPs: RoPE 12 per rotated pair (the angle's powf,
 * cosf, sinf and 3 more, the rotation 6) of q's NH and k's NKV heads; attention 4hs + 5 per
 * (head, cached row) pair (score and scale, exp and sum, 1/sum, the weighted row). fl[0]
 * kv_store, fl[1] kv_attend. */
static void run_decode(int NH, int NKV, float theta, int pos, double fl[2]) {
    int hs = 8, cap = 12, QD = NH * hs, KD = NKV * hs;
    size_t nc = (size_t)cap * KD;
    float *q = drand(QD), *k = drand(KD), *v = drand(KD), *kc = drand(nc), *vc = drand(nc);
    float *out = drand(QD), *sc = drand((size_t)NH * cap);
    double rotated = theta > 0 ? (double)(NH + NKV) * (hs / 2) : 0, pairs = 0;
    for (int h = 0; h < NH; h++)
        for (int j = 0; j <= pos; j++)
            pairs++;
    prof_start();
    ZT_OK(gpu->decode_attention(NULL, out, q, k, v, kc, vc, sc, NH, NKV, hs, pos, theta));
    prof_stop();
    const zs_emu_record *s = rec("kv_store_kernel"), *a = rec("kv_attend_kernel");
    check_rec(s, 5, 0, NULL);
    /* scores are written, then read back by the softmax and the weighted sum; the out row is
     * the weighted sum's accumulator, read back as it is added to */
    check_rec(a, 5, 4.0 * NH * (pos + 1) + 4.0 * QD, "scores and out read back");
    ZT_CHECK(s->flops == 12.0 * rotated, "kv_store_kernel: %.0f FLOPs declared, %.0f enumerated",
             s->flops, 12.0 * rotated);
    ZT_CHECK(a->flops == pairs * (4.0 * hs + 5),
             "kv_attend_kernel: %.0f FLOPs declared, %.0f enumerated", a->flops,
             pairs * (4.0 * hs + 5));
    fl[0] = s->flops;
    fl[1] = a->flops;
    zt_release();
}

static void check_decode(void) {
    double a[2], b[2];
    run_decode(4, 4, 0.0f, 7, a);
    run_decode(6, 2, 10000.0f, 7, b);
    run_decode(6, 2, 10000.0f, 3, a);
    check_scaling("kv_attend_kernel", a[1], 4, b[1], 8);
}

/* Sampling: greedy (comparisons only) and with a temperature, whose FLOPs are affine in V (the
 * weights and at most as many for the search, plus the block sum): equal steps of V give
 * equal steps of FLOPs. */
static double run_sample(int V, float temp) {
    float *logits = drand((size_t)V);
    int32_t *tok = zt_dbuf(sizeof(int32_t));
    prof_start();
    ZT_OK(gpu->sample(NULL, tok, logits, V, temp, 12345, 7));
    prof_stop();
    const zs_emu_record *r = rec("sample_kernel");
    check_rec(r, 2, 0, NULL);
    zt_release();
    return r->flops;
}

static void check_sample(void) {
    double g = run_sample(3001, 0.0f);
    ZT_CHECK(g == 0, "sample_kernel greedy: %g FLOPs declared", g);
    double f1 = run_sample(1001, 0.7f), f2 = run_sample(2001, 0.7f), f3 = run_sample(3001, 0.7f);
    ZT_CHECK(f2 - f1 == f3 - f2 && f2 > f1,
             "sample_kernel: %.0f, %.0f, %.0f FLOPs at V = 1001, 2001, 3001: not affine in V", f1,
             f2, f3);
}

int main(void) {
    zt_init("emu_costs");
    zt_gpu_require();
    const zs_device *dev = NULL;
    ZT_OK(zs_backend_select("cuda", &gpu, &dev));
    ZT_REQUIRE(gpu != NULL, "no CUDA ops table");
    ZT_OK(zs_cuda_set_device(0));
    load_kernels();
    printf("emu_costs: %d __global__ kernels in src/backend/cuda\n", g_nk);
    check_gemm();
    check_elementwise();
    check_adamw_segs();
    check_sums();
    check_bias();
    check_norms();
    check_embedding();
    check_rope();
    check_softmax_xent();
    for (int docs = 0; docs < 2; docs++) {
        check_attention(4, 4, 1, docs);
        check_attention(6, 2, 0, docs);
        check_flash(4, 4, 1, docs);
        check_flash(6, 2, 0, docs);
    }
    check_adamw_segs16();
    check_sumsq16();
    check_flash_tc(4, 4, 1);
    check_flash_tc(6, 2, 0);
    check_decode();
    check_sample();
    recs_all_checked();
    printf("emu_costs: per kernel (its first launch checked):\n");
    int missing = 0;
    for (int i = 0; i < g_nk; i++) {
        const zs_emu_record *r = &g_k[i].first;
        if (!g_k[i].seen) {
            missing++;
            printf("  %-30s NEVER CHECKED\n", g_k[i].name);
            continue;
        }
        printf("  %-30s %2d launches  declared %9.0f B  measured %9.0f B  flops %.0f\n",
               g_k[i].name, g_k[i].seen, r->ideal_bytes, r->dram_read + r->dram_write, r->flops);
    }
    ZT_CHECK(missing == 0, "%d of %d kernels never checked", missing, g_nk);
    return zt_finish();
}

/* Rank program for the multi-rank comm tests, started by `zshard run` or mpirun:
 *   comm_worker collectives [--comm B] [--async]  every collective against exact expectations
 *               [--registered | --mixed]          ... on zs_comm_mem_alloc buffers (every rank,
 *                                                 or even ranks only: the staged path)
 *               [--device cpu|cuda [--staged]]    ... on device buffers (comm/device.h): copied
 *                                                 in, the collective on device pointers,
 *                                                 copied out; --staged forces host staging
 *                                                 in 1000-byte pieces (automatic for shm on
 *                                                 cuda)
 *   comm_worker die --victim V [--registered]     V kills itself mid-job; others must report it
 *   comm_worker die-alloc --victim V              V dies instead of joining a zs_comm_mem_alloc
 *   comm_worker stuck --victim V                  V stops calling collectives (timeout path)
 *   comm_worker mismatch                          rank 1 calls a different collective
 *   comm_worker split | split-die --group S ...    zs_comm_split (comm_worker_split.c)
 * Data are small integers in floats, so every sum is exact and results are checked bit for
 * bit; outputs are poisoned before each call. Exit 0 = all checks passed. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "comm/device.h"
#include "comm/staged.h"
#include "comm_worker_split.h"
#include "core/alloc.h"
#include "testutil.h"
#include "zshard.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_n;
static zs_comm_t *g_c;
/* 0: plain buffers; 1: registered on every rank; 2: registered on even ranks only */
static int g_reg;
/* --device: collectives on device copies of the host buffers (mirror_*); --staged: through host
 * staging in small pieces */
static const zs_device *g_dev;
static int g_staged;
enum { MIRRORS = 8 };
static struct mirror {
    char *host, *dev;
    size_t nbytes;
} g_mir[MIRRORS];
static int g_nmir;

/* Device mode: a device buffer shadows host block [host, host + nbytes). */
static void mirror_add(void *host, size_t nbytes) {
    if (!g_dev) return;
    ZT_REQUIRE(g_nmir < MIRRORS, "too many mirrored buffers");
    struct mirror *m = &g_mir[g_nmir++];
    m->host = host;
    m->nbytes = nbytes;
    ZT_OK(g_dev->alloc(ZS_MEM_WORKSPACE, nbytes, "mirror", (void **)&m->dev));
    ZT_OK(g_dev->copy_h2d(NULL, m->dev, host, nbytes));
}

/* The device address of host address p (p itself outside device mode). */
static void *mirror_ptr(const void *p) {
    for (int i = 0; i < g_nmir; i++)
        if ((const char *)p >= g_mir[i].host && (const char *)p <= g_mir[i].host + g_mir[i].nbytes)
            return g_mir[i].dev + ((const char *)p - g_mir[i].host);
    return (void *)p;
}

/* Device mode reads results on a stream of its own, ordered after a collective only by what
 * the collective itself provides (its completion event, or the host wait of the staged path):
 * never through the legacy default stream, whose copies wait for every other stream's work and
 * would hide a collective that reports done before its last copy has landed. */
static zs_stream_t *g_rs;

static zs_status wait_work(zs_comm_work_t *w) {
    return g_dev ? zs_comm_work_wait_stream(w, g_rs) : zs_comm_work_wait(w);
}

/* Copy every mirror back to its host block and release them. */
static void mirror_pull(void) {
    for (int i = 0; i < g_nmir; i++) {
        ZT_OK(g_dev->copy_d2h(g_rs, g_mir[i].host, g_mir[i].dev, g_mir[i].nbytes));
        ZT_OK(g_dev->stream_sync(g_rs));
        g_dev->free(g_mir[i].dev);
    }
    g_nmir = 0;
}
static char *g_arena[2]; /* registered, ARENA bytes each */
enum { ARENA = 4 << 20 };

static int reg_here(void) {
    return g_reg == 1 || (g_reg == 2 && g_rank % 2 == 0);
}

static float val(int rank, size_t i) {
    return (float)((int)((i * 7 + (size_t)rank * 3) % 11) - 5);
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for small integers */
}

/* Element i of rank r's input, stored in dtype dt at buf. */
static void put(void *buf, zs_dtype dt, size_t i, float v) {
    if (dt == ZS_DTYPE_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = to_bf16(v);
}

static int same_bits(const void *buf, zs_dtype dt, size_t i, float want) {
    if (dt == ZS_DTYPE_F32) {
        float got = ((const float *)buf)[i];
        return memcmp(&got, &want, 4) == 0;
    }
    /* bf16 result: the fp32 value rounded to nearest even */
    uint32_t u;
    memcpy(&u, &want, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return ((const uint16_t *)buf)[i] == (uint16_t)(u >> 16);
}

static float reduced(size_t i, int avg) {
    float s = 0;
    for (int r = 0; r < g_n; r++)
        s += val(r, i);
    return avg ? s / (float)g_n : s;
}

static void poison(void *buf, size_t nbytes) {
    memset(buf, 0xff, nbytes); /* NaN in both dtypes */
}

static zs_status issue(int async, zs_comm_work_t **w, int kind, const void *s, void *r,
                       size_t count, zs_dtype dt, zs_reduce_op op, const char *tag) {
    s = mirror_ptr(s);
    r = mirror_ptr(r);
    switch (kind) {
    case 0:
        return async ? zs_comm_all_reduce_async(g_c, s, r, count, dt, op, NULL, tag, w)
                     : zs_comm_all_reduce(g_c, s, r, count, dt, op, NULL, tag);
    case 1:
        return async ? zs_comm_reduce_scatter_async(g_c, s, r, count, dt, op, NULL, tag, w)
                     : zs_comm_reduce_scatter(g_c, s, r, count, dt, op, NULL, tag);
    case 2:
        return async ? zs_comm_all_gather_async(g_c, s, r, count, dt, NULL, tag, w)
                     : zs_comm_all_gather(g_c, s, r, count, dt, NULL, tag);
    default:
        return async ? zs_comm_broadcast_async(g_c, s, r, count, dt, g_n - 1, NULL, tag, w)
                     : zs_comm_broadcast(g_c, s, r, count, dt, g_n - 1, NULL, tag);
    }
}

/* One collective (kind 0 AR, 1 RS, 2 AG, 3 bcast from the last rank) of `count`, checked. */
static void check_one(int kind, size_t count, zs_dtype dt, int avg, int inplace, int async) {
    size_t esz = zs_dtype_size(dt), n = (size_t)g_n, r = (size_t)g_rank;
    size_t in_elems = kind == 1 ? count * n : count;
    size_t out_elems = kind == 2 ? count * n : count;
    size_t big = (in_elems > out_elems ? in_elems : out_elems) + 1;
    char *a, *b;
    if (reg_here()) {
        /* anywhere inside a registered allocation counts: vary the offset, every other check
         * with ranks at different offsets within 32 bytes (no common streaming alignment) */
        size_t off = (size_t)((zt_checks + g_rank) % 4) * 64 + (size_t)(zt_checks % 2) * 4 * r;
        ZT_REQUIRE(big * esz + off <= ARENA, "arena too small for count %zu", count);
        a = g_arena[0] + off;
        b = g_arena[1] + off;
    } else {
        a = zt_malloc(big * esz);
        b = zt_malloc(big * esz);
    }
    poison(a, big * esz);
    poison(b, big * esz);
    /* Logical input element j of this rank (for RS: block q's element i is j = q*count + i;
     * its value is a function of i so every block's expectation is the same formula). */
    char *send, *recv;
    if (!inplace) {
        send = a;
        recv = b;
    } else if (kind == 1) {
        send = a;
        recv = a + r * count * esz;
    } else if (kind == 2) {
        recv = a;
        send = a + r * count * esz;
    } else {
        send = recv = a;
    }
    for (size_t j = 0; j < in_elems; j++) {
        /* reduce_scatter: block q's element i holds val(rank, i) + q */
        size_t i = kind == 1 ? j % count : j;
        put(send, dt, j, val(g_rank, i) + (kind == 1 ? (float)(j / count) : 0.0f));
    }
    zs_reduce_op op = avg ? ZS_REDUCE_AVG : ZS_REDUCE_SUM;
    zs_comm_work_t *w = NULL;
    char tag[48];
    snprintf(tag, sizeof tag, "k%d/c%zu/%s", kind, count, zs_dtype_name(dt));
    mirror_add(a, big * esz);
    mirror_add(b, big * esz);
    ZT_OK(issue(async, &w, kind, send, recv, count, dt, op, tag));
    if (async) ZT_OK(wait_work(w));
    mirror_pull();
    int bad = 0;
    for (size_t i = 0; i < out_elems && bad < 3; i++) {
        float want;
        if (kind == 0)
            want = reduced(i, avg);
        else if (kind == 1) {
            /* block r of every rank: val(p, i) + r */
            float s = 0;
            for (int p = 0; p < g_n; p++)
                s += val(p, i) + (float)r;
            want = avg ? s / (float)g_n : s;
        } else if (kind == 2)
            want = val((int)(i / count), i % count);
        else
            want = val(g_n - 1, i);
        if (!same_bits(recv, dt, i, want)) {
            bad++;
            ZT_CHECK(0, "rank %d kind %d count %zu %s avg %d inplace %d async %d: elem %zu wrong",
                     g_rank, kind, count, zs_dtype_name(dt), avg, inplace, async, i);
        }
    }
    zt_checks++;
    if (!reg_here()) {
        free(a);
        free(b);
    }
}

/* all_reduce == reduce_scatter then all_gather, bit for bit, on random non-integer data; with
 * registered buffers (on every rank) also equal to the same collectives on plain buffers, i.e.
 * the direct path gives the staged path's bits. */
static void check_ar_equals_rs_ag(size_t count_per_rank, zs_dtype dt) {
    size_t n = (size_t)g_n, total = count_per_rank * n, esz = zs_dtype_size(dt);
    float *x = zt_malloc(total * sizeof(float));
    char *in = zt_malloc(total * esz), *ar = zt_malloc(total * esz), *rs = zt_malloc(total * esz),
         *ag = zt_malloc(total * esz);
    char *rin = NULL, *rar = NULL, *rrs = NULL, *rag = NULL;
    if (reg_here()) {
        ZT_REQUIRE(4 * total * esz <= ARENA, "arena too small");
        rin = g_arena[0];
        rrs = g_arena[0] + total * esz;
        rar = g_arena[1];
        rag = g_arena[1] + total * esz;
    } else if (g_reg) { /* --mixed, odd rank: same calls on plain memory */
        rin = zt_malloc(total * esz);
        rrs = zt_malloc(total * esz);
        rar = zt_malloc(total * esz);
        rag = zt_malloc(total * esz);
    }
    zt_fill_normal(x, total, 1.0f);
    for (size_t i = 0; i < total; i++) {
        if (dt == ZS_DTYPE_F32)
            ((float *)in)[i] = x[i];
        else
            ((uint16_t *)in)[i] = to_bf16(x[i]);
    }
    char *buf[4] = {in, ar, rs, ag};
    for (int i = 0; i < 4; i++)
        mirror_add(buf[i], total * esz);
    ZT_OK(zs_comm_all_reduce(g_c, mirror_ptr(in), mirror_ptr(ar), total, dt, ZS_REDUCE_AVG, NULL,
                             "ar"));
    ZT_OK(zs_comm_reduce_scatter(g_c, mirror_ptr(in), mirror_ptr(rs), count_per_rank, dt,
                                 ZS_REDUCE_AVG, NULL, "rs"));
    ZT_OK(zs_comm_all_gather(g_c, mirror_ptr(rs), mirror_ptr(ag), count_per_rank, dt, NULL, "ag"));
    mirror_pull();
    ZT_CHECK(memcmp(ar, ag, total * esz) == 0, "all_reduce != reduce_scatter+all_gather (%zu %s)",
             count_per_rank, zs_dtype_name(dt));
    if (rin) {
        memcpy(rin, in, total * esz);
        ZT_OK(zs_comm_all_reduce(g_c, rin, rar, total, dt, ZS_REDUCE_AVG, NULL, "reg ar"));
        ZT_OK(zs_comm_reduce_scatter(g_c, rin, rrs, count_per_rank, dt, ZS_REDUCE_AVG, NULL, "rs"));
        ZT_OK(zs_comm_all_gather(g_c, rrs, rag, count_per_rank, dt, NULL, "reg ag"));
        ZT_CHECK(memcmp(rar, ar, total * esz) == 0 && memcmp(rrs, rs, count_per_rank * esz) == 0,
                 "registered (direct) results differ from plain (staged) ones (%zu %s)",
                 count_per_rank, zs_dtype_name(dt));
        ZT_CHECK(memcmp(rag, ag, total * esz) == 0, "registered all_gather differs (%zu %s)",
                 count_per_rank, zs_dtype_name(dt));
        /* in place on registered memory: the same bits again */
        ZT_OK(zs_comm_all_reduce(g_c, rin, rin, total, dt, ZS_REDUCE_AVG, NULL, "reg ar ip"));
        ZT_CHECK(memcmp(rin, ar, total * esz) == 0, "registered in-place all_reduce differs");
        if (!reg_here()) {
            free(rin);
            free(rrs);
            free(rar);
            free(rag);
        }
    }
    free(x);
    free(in);
    free(ar);
    free(rs);
    free(ag);
}

/* Several async collectives in flight at once, waited in issue order; with ZS_COMM_DELAY_MS
 * set the first must still be pending right after issue (a missing wait would show). */
static void check_async_pipeline(void) {
    enum { K = 6, C = 5000 };
    float *in[K], *out[K];
    zs_comm_work_t *w[K];
    for (int k = 0; k < K; k++) {
        in[k] = reg_here() ? (float *)g_arena[0] + k * C : zt_malloc(C * sizeof(float));
        out[k] = reg_here() ? (float *)g_arena[1] + k * C : zt_malloc(C * sizeof(float));
        for (size_t i = 0; i < C; i++)
            in[k][i] = val(g_rank, i) + (float)k;
        poison(out[k], C * sizeof(float));
    }
    if (g_dev) /* K/2 mirrors of two pipelines' buffers each would do; keep it simple */
        for (int k = 0; k < K / 2; k++) {
            mirror_add(in[k], C * sizeof(float));
            mirror_add(out[k], C * sizeof(float));
        }
    for (int k = 0; k < K; k++) {
        if (g_dev && k == K / 2) { /* the second half after the first half's copies */
            for (int j = 0; j < K / 2; j++)
                ZT_OK(wait_work(w[j]));
            mirror_pull();
            for (int j = K / 2; j < K; j++) {
                mirror_add(in[j], C * sizeof(float));
                mirror_add(out[j], C * sizeof(float));
            }
        }
        ZT_OK(zs_comm_all_reduce_async(g_c, mirror_ptr(in[k]), mirror_ptr(out[k]), C, ZS_DTYPE_F32,
                                       ZS_REDUCE_SUM, NULL, "pipe", &w[k]));
    }
    if (getenv("ZS_COMM_DELAY_MS") && g_n > 1) {
        int done = 1;
        ZT_OK(zs_comm_work_test(w[K - 1], &done));
        ZT_CHECK(!done, "last async work finished immediately despite the injected delay");
    }
    for (int k = g_dev ? K / 2 : 0; k < K; k++)
        ZT_OK(wait_work(w[k]));
    if (g_dev) mirror_pull();
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < C; i++) {
            float want = reduced(i, 0) + (float)(k * g_n);
            if (memcmp(&out[k][i], &want, 4)) {
                ZT_CHECK(0, "async pipeline %d elem %zu", k, i);
                break;
            }
        }
        if (!reg_here()) {
            free(in[k]);
            free(out[k]);
        }
    }
}

/* zs_comm_mem_alloc itself: per-rank sizes (one rank asks for none), accounting in the
 * category, zero fill, collectives on buffers allocated after a free. Any backend (mpi and a
 * world of one get zs_alloc memory, with the same contract). */
static void check_alloc_cycle(void) {
    size_t nb = g_rank == 1 ? 0 : 4096 * (size_t)(g_rank + 1) + 12, C = 1000, n = (size_t)g_n;
    zs_mem_stats m0, m1;
    char *p = NULL;
    float *q = NULL, *r = NULL;
    zs_mem_get_stats(&m0);
    ZT_OK(zs_comm_mem_alloc(g_c, ZS_MEM_GRAD, nb, "cycle p", (void **)&p));
    zs_mem_get_stats(&m1);
    ZT_CHECK(m1.current[ZS_MEM_GRAD] - m0.current[ZS_MEM_GRAD] == nb, "accounted %llu, not %zu",
             (unsigned long long)(m1.current[ZS_MEM_GRAD] - m0.current[ZS_MEM_GRAD]), nb);
    ZT_CHECK((p == NULL) == (nb == 0), "size %zu gave %p", nb, (void *)p);
    for (size_t i = 0; i < nb; i++)
        if (p[i]) {
            ZT_CHECK(0, "registered memory not zero-filled at %zu", i);
            break;
        }
    ZT_OK(zs_comm_mem_alloc(g_c, ZS_MEM_COMM, C * n * sizeof(float), "cycle q", (void **)&q));
    zs_comm_mem_free(g_c, p);
    zs_mem_get_stats(&m1);
    ZT_CHECK(m1.current[ZS_MEM_GRAD] == m0.current[ZS_MEM_GRAD], "free did not release");
    ZT_OK(zs_comm_mem_alloc(g_c, ZS_MEM_COMM, C * sizeof(float), "cycle r", (void **)&r));
    for (size_t i = 0; i < C; i++)
        r[i] = val(g_rank, i);
    poison(q, C * n * sizeof(float));
    ZT_OK(zs_comm_all_gather(g_c, r, q, C, ZS_DTYPE_F32, NULL, "cycle ag"));
    ZT_OK(zs_comm_all_reduce(g_c, r, r, C, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "cycle ar"));
    for (size_t i = 0; i < C * n; i++) {
        float want = val((int)(i / C), i % C);
        if (memcmp(&q[i], &want, 4)) {
            ZT_CHECK(0, "all_gather after free/alloc: elem %zu", i);
            break;
        }
    }
    for (size_t i = 0; i < C; i++) {
        float want = reduced(i, 0);
        if (memcmp(&r[i], &want, 4)) {
            ZT_CHECK(0, "all_reduce after free/alloc: elem %zu", i);
            break;
        }
    }
    zs_comm_mem_free(g_c, q);
    zs_comm_mem_free(g_c, r);
    zs_mem_get_stats(&m1);
    ZT_CHECK(m1.current[ZS_MEM_COMM] == m0.current[ZS_MEM_COMM], "comm bytes not released");
}

/* One rank over its memory cap: every rank gets ZS_ERR_OOM naming it, and the communicator
 * stays usable (shm, world > 1: elsewhere the allocation is local). */
static void check_alloc_over_cap(void) {
    zs_mem_stats m;
    void *p = (void *)1;
    zs_mem_get_stats(&m);
    if (g_rank == g_n - 1) zs_mem_set_cap(m.total_current + 4096);
    zs_status st = zs_comm_mem_alloc(g_c, ZS_MEM_COMM, 1 << 20, "too big", &p);
    if (g_rank == g_n - 1) zs_mem_set_cap(m.cap);
    char want[64];
    snprintf(want, sizeof want, "rank %d: device memory cap", g_n - 1);
    ZT_CHECK(st == ZS_ERR_OOM && p == NULL && strstr(zs_last_error(), want),
             "over-cap allocation: %s: %s", zs_status_string(st), zs_last_error());
    zs_mem_stats m1;
    zs_mem_get_stats(&m1);
    ZT_CHECK(m1.current[ZS_MEM_COMM] == m.current[ZS_MEM_COMM], "failed allocation leaked");
    check_one(0, 1000, ZS_DTYPE_F32, 0, 1, 0);
}

static int run_collectives(int async_only) {
    /* 70001 f32 and 131075 bf16 are over SHM_STREAM_MIN bytes: streaming stores */
    size_t counts[] = {0, 1, 3, (size_t)g_n, 7, 1000, 4099, 70001, 131075};
    zs_dtype dts[] = {ZS_DTYPE_F32, ZS_DTYPE_BF16};
    if (g_reg) /* collective: every rank allocates, even those that then use plain memory */
        for (int i = 0; i < 2; i++)
            ZT_OK(zs_comm_mem_alloc(g_c, ZS_MEM_COMM, ARENA, "arena", (void **)&g_arena[i]));
    for (int d = 0; d < 2; d++)
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
            for (int kind = 0; kind < 4; kind++)
                for (int inplace = 0; inplace < 2; inplace++)
                    for (int async = async_only; async < 2; async++) {
                        /* nccl's average is its own rounding (a pre-multiplied sum) */
                        int navg = kind < 2 && zs_comm_get_backend(g_c) != ZS_COMM_NCCL ? 2 : 1;
                        for (int avg = 0; avg < navg; avg++)
                            check_one(kind, counts[ci], dts[d], avg, inplace, async);
                    }
    ZT_OK(zs_comm_barrier(g_c, NULL, "mid"));
    if (zs_comm_get_backend(g_c) == ZS_COMM_SHM) {
        check_ar_equals_rs_ag(1, ZS_DTYPE_F32);
        check_ar_equals_rs_ag(12345, ZS_DTYPE_F32);
        check_ar_equals_rs_ag(12345, ZS_DTYPE_BF16);
    }
    check_async_pipeline();
    if (g_reg) {
        check_alloc_cycle();
        if (zs_comm_get_backend(g_c) == ZS_COMM_SHM && g_n > 1) check_alloc_over_cap();
        for (int i = 0; i < 2; i++)
            zs_comm_mem_free(g_c, g_arena[i]);
    }
    return 0;
}

/* Failure modes: every rank loops over tagged all_reduces; the victim misbehaves. */
static int run_failure(const char *mode, int victim) {
    float xs[256], *x = xs;
    if (g_reg) ZT_OK(zs_comm_mem_alloc(g_c, ZS_MEM_COMM, sizeof xs, "x", (void **)&x));
    if (g_dev) ZT_OK(g_dev->alloc(ZS_MEM_COMM, sizeof xs, "x", (void **)&x));
    for (int it = 0;; it++) {
        char tag[32];
        snprintf(tag, sizeof tag, "unit.%d", it % 12);
        for (int i = 0; i < 256; i++)
            xs[i] = (float)g_rank;
        if (x != xs && g_dev) ZT_OK(g_dev->copy_h2d(NULL, x, xs, sizeof xs));
        if (x != xs && !g_dev) memcpy(x, xs, sizeof xs);
        if (g_rank == victim && it == 20) {
            if (!strcmp(mode, "die") || !strcmp(mode, "die-alloc")) raise(SIGKILL);
            if (!strcmp(mode, "stuck")) sleep(600);
        }
        zs_status st;
        if (!strcmp(mode, "die-alloc") && it == 20) {
            void *p = NULL;
            st = zs_comm_mem_alloc(g_c, ZS_MEM_COMM, 1024, tag, &p);
        } else if (!strcmp(mode, "mismatch") && g_rank == 1 && it == 5)
            st = zs_comm_all_gather(g_c, x + g_rank, x, 1, ZS_DTYPE_F32, NULL, tag);
        else
            st = zs_comm_all_reduce(g_c, x, x, 256, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, tag);
        if (st != ZS_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", zs_last_error());
            /* a later call must fail at once with the same (sticky) error */
            zs_status again = zs_comm_barrier(g_c, NULL, "after");
            printf("rank %d: FAILED %s: %s | again: %s\n", g_rank, zs_status_string(st), msg,
                   zs_status_string(again));
            fflush(stdout);
            return 3;
        }
        if (it > 100000) return 0;
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "collectives";
    zs_comm_config cfg = zs_comm_config_default();
    int victim = 1, async_only = 0, group = 1;
    zs_comm_backend split_comm = ZS_COMM_AUTO;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--comm") && i + 1 < argc)
            ZT_OK(zs_comm_backend_parse(argv[++i], &cfg.backend));
        else if (!strcmp(argv[i], "--victim") && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--split-comm") && i + 1 < argc)
            ZT_OK(zs_comm_backend_parse(argv[++i], &split_comm));
        else if (!strcmp(argv[i], "--async"))
            async_only = 1;
        else if (!strcmp(argv[i], "--registered"))
            g_reg = 1;
        else if (!strcmp(argv[i], "--mixed"))
            g_reg = 2;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            const zs_ops *ops;
            ZT_OK(zs_backend_select(argv[++i], &ops, &g_dev));
        } else if (!strcmp(argv[i], "--staged"))
            g_staged = 1;
    }
    zt_init("comm_worker");
    ZT_OK(zs_comm_create(&cfg, &g_c));
    g_rank = zs_comm_rank(g_c);
    g_n = zs_comm_world_size(g_c);
    if (g_dev) {
        int stage = g_staged || !g_dev->host_memory;
        zs_mem_stats m0, m1;
        zs_mem_get_ledger_stats(ZS_LEDGER_HOST, &m0);
        if (g_dev->host_memory == 0) {
            int ndev = zs_cuda_device_count();
            ZT_REQUIRE(ndev > 0, "--device cuda: no device");
            ZT_OK(zs_cuda_set_device(zs_comm_local_rank(g_c) % ndev));
        }
        ZT_OK(zs_comm_set_device(g_c, g_dev, stage, 1000));
        ZT_OK(g_dev->stream_create(&g_rs));
        zs_mem_get_ledger_stats(ZS_LEDGER_HOST, &m1);
        uint64_t want = stage && zs_comm_get_backend(g_c) != ZS_COMM_NCCL
                            ? zs_comm_staging_bytes(g_n, 1000)
                            : 0;
        ZT_CHECK(m1.current[ZS_MEM_COMM] - m0.current[ZS_MEM_COMM] == want,
                 "staging accounted %llu host bytes, want %llu",
                 (unsigned long long)(m1.current[ZS_MEM_COMM] - m0.current[ZS_MEM_COMM]),
                 (unsigned long long)want);
    }
    int rc = 0;
    if (!strcmp(mode, "collectives"))
        rc = run_collectives(async_only);
    else if (!strncmp(mode, "split", 5))
        rc = cw_run_split(g_c, mode, group, victim, split_comm, g_dev);
    else
        rc = run_failure(mode, victim);
    zs_comm_destroy(g_c);
    if (rc) return rc;
    return zt_finish();
}

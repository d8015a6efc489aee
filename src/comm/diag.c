/* Diagnostics: the ring of the last 64 collectives of this rank (written once on failure to
 * a file, or printed with debug logging, so a desynchronised program shows what each rank
 * was doing), and check mode, which
 * all-gathers each collective's descriptor first and reports the first mismatch instead of
 * hanging or corrupting data. */
#include "comm/comm_internal.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

#include <stdlib.h>
#include <string.h>

void zs_ring_begin(zs_comm_t *c, const zs_coll *op) {
    pthread_mutex_lock(&c->ring_lock);
    zs_ring_entry *e = &c->ring[c->ring_n % ZS_COMM_RING];
    c->ring_n++;
    e->seq = op->seq;
    e->kind = op->kind;
    e->count = op->count;
    e->dt = op->dt;
    memcpy(e->tag, op->tag, sizeof e->tag);
    e->t_start = zs_now_s() - c->t0;
    e->t_end = -1;
    e->st = ZS_OK;
    pthread_mutex_unlock(&c->ring_lock);
}

void zs_ring_end(zs_comm_t *c, const zs_coll *op, zs_status st) {
    pthread_mutex_lock(&c->ring_lock);
    /* The entry is the newest with this seq (collectives run one at a time). */
    for (uint64_t i = 0; i < ZS_COMM_RING && i < c->ring_n; i++) {
        zs_ring_entry *e = &c->ring[(c->ring_n - 1 - i) % ZS_COMM_RING];
        if (e->seq == op->seq) {
            e->t_end = zs_now_s() - c->t0;
            e->st = st;
            break;
        }
    }
    pthread_mutex_unlock(&c->ring_lock);
}

static void ring_write(zs_comm_t *c, FILE *f, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        const zs_ring_entry *e = &c->ring[(c->ring_n - n + i) % ZS_COMM_RING];
        char end[32], line[256];
        if (e->t_end < 0)
            snprintf(end, sizeof end, "running");
        else
            snprintf(end, sizeof end, "%.6f", e->t_end);
        snprintf(line, sizeof line,
                 "  #%-6llu %-14s count %-10zu %-4s tag '%s' start %.6f end %s %s",
                 (unsigned long long)e->seq, zs_coll_name(e->kind), e->count,
                 e->kind == ZS_COLL_MEM_ALLOC ? "B" : zs_dtype_name(e->dt), e->tag, e->t_start, end,
                 e->t_end < 0 ? "" : zs_status_string(e->st));
        if (f)
            fprintf(f, "%s\n", line);
        else
            ZS_LOG_E("%s", line);
    }
}

void zs_ring_dump(zs_comm_t *c, char *where, size_t cap) {
    pthread_mutex_lock(&c->ring_lock);
    where[0] = '\0';
    if (c->ring_printed) {
        pthread_mutex_unlock(&c->ring_lock);
        return;
    }
    c->ring_printed = 1;
    uint64_t n = c->ring_n < ZS_COMM_RING ? c->ring_n : ZS_COMM_RING;
    /* Dozens of lines per rank would bury the one line that matters, so by default the ring
     * goes to a file of its own (path in the error line); debug logging prints it. */
    FILE *f = NULL;
    char path[600];
    if (zs_log_get_level() < ZS_LOG_DEBUG) {
        const char *dir = getenv("ZS_COMM_RING_DIR");
        if (!dir || !*dir) dir = getenv("TMPDIR");
        if (!dir || !*dir) dir = "/tmp";
        snprintf(path, sizeof path, "%.400s/zshard-ring-%s-rank%d.txt", dir, c->env.job_key,
                 c->env.rank);
        f = fopen(path, "w");
    }
    if (f) {
        fprintf(f,
                "last %llu collectives of rank %d (oldest first; times in s since comm "
                "creation):\n",
                (unsigned long long)n, c->env.rank);
        ring_write(c, f, n);
        fclose(f);
        snprintf(where, cap, "; last %llu collectives of rank %d written to %s",
                 (unsigned long long)n, c->env.rank, path);
    } else {
        ZS_LOG_E("last %llu collectives of rank %d (oldest first; times in s since comm "
                 "creation):",
                 (unsigned long long)n, c->env.rank);
        ring_write(c, NULL, n);
    }
    pthread_mutex_unlock(&c->ring_lock);
}

/* What each rank tells the others in check mode. 96 bytes = 48 bf16 "elements": the
 * backend's all_gather moves it as plain 16-bit words, bit for bit. */
typedef struct check_desc {
    uint32_t magic;
    uint32_t kind;
    uint64_t count;
    uint32_t dt;
    uint32_t op;
    int32_t root;
    uint32_t pad;
    uint64_t seq;
    char tag[ZS_COMM_TAG_LEN];
    char pad2[8];
} check_desc;

_Static_assert(sizeof(check_desc) == 96, "check descriptor is 48 bf16 words");

static void describe(const check_desc *d, char *buf, size_t cap) {
    snprintf(buf, cap, "%s(count %llu, %s%s%s, root %d, tag '%.*s')",
             zs_coll_name((zs_coll_kind)d->kind), (unsigned long long)d->count,
             zs_dtype_name((zs_dtype)d->dt),
             d->kind == ZS_COLL_ALL_REDUCE || d->kind == ZS_COLL_REDUCE_SCATTER ? ", " : "",
             d->kind == ZS_COLL_ALL_REDUCE || d->kind == ZS_COLL_REDUCE_SCATTER
                 ? (d->op == ZS_REDUCE_AVG ? "avg" : "sum")
                 : "",
             d->root, ZS_COMM_TAG_LEN, d->tag);
}

static int same(const check_desc *a, const check_desc *b) {
    if (a->kind != b->kind || a->seq != b->seq) return 0;
    /* sizes of a registered allocation may differ per rank */
    if (a->kind == ZS_COLL_BARRIER || a->kind == ZS_COLL_MEM_ALLOC) return 1;
    if (a->count != b->count || a->dt != b->dt) return 0;
    if ((a->kind == ZS_COLL_ALL_REDUCE || a->kind == ZS_COLL_REDUCE_SCATTER) && a->op != b->op)
        return 0;
    return a->kind != ZS_COLL_BROADCAST || a->root == b->root;
}

zs_status zs_comm_check_op(zs_comm_t *c, const zs_coll *op) {
    zs_status st = ZS_OK;
    int n = c->env.world_size;
    check_desc mine, *all = NULL;
    memset(&mine, 0, sizeof mine);
    mine.magic = 0x5a43484bu; /* "ZCHK" */
    mine.kind = (uint32_t)op->kind;
    mine.count = op->count;
    mine.dt = (uint32_t)op->dt;
    mine.op = (uint32_t)op->op;
    mine.root = op->root;
    mine.seq = op->seq;
    memcpy(mine.tag, op->tag, sizeof mine.tag);
    if (c->backend == ZS_COMM_NCCL) {
        static int warned = 0;
        if (!warned) ZS_LOG_W("ZS_COMM_CHECK: not supported by the nccl backend; ignored");
        warned = 1;
        return ZS_OK;
    }
    all = calloc((size_t)n, sizeof *all);
    ZS_REQUIRE(all, ZS_ERR_OOM, "check mode: out of memory");
    zs_coll g;
    memset(&g, 0, sizeof g);
    g.kind = ZS_COLL_ALL_GATHER;
    g.send = &mine;
    g.recv = all;
    g.count = sizeof mine / 2;
    g.dt = ZS_DTYPE_BF16;
    g.seq = op->seq;
    snprintf(g.tag, sizeof g.tag, "check");
    ZS_CHECK(c->ops->run(c, &g));
    for (int r = 0; r < n; r++) {
        if (all[r].magic == mine.magic && same(&all[r], &all[0])) continue;
        char a[256], b[256];
        describe(&all[0], a, sizeof a);
        describe(&all[r], b, sizeof b);
        ZS_REQUIRE(0, ZS_ERR_COMM,
                   "collective mismatch (ZS_COMM_CHECK): rank 0 called %s #%llu but rank %d "
                   "called %s #%llu",
                   a, (unsigned long long)all[0].seq, r, b, (unsigned long long)all[r].seq);
    }
fail:
    free(all);
    return st;
}

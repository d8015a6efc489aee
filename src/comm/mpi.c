/* mpi backend: CPU ranks across hosts. Collectives map to MPI's non-blocking ones, polled
 * with MPI_Test against the comm's deadline, so a dead or stuck peer ends in ZS_ERR_TIMEOUT
 * instead of a hang. bf16 is widened to fp32 around reductions (bf16 sums accumulate in
 * fp32, as the API promises); the reduction order is MPI's, not rank order. */
#include "comm/comm_internal.h"
#include "core/alloc.h"
#include "core/bf16.h"
#include "core/status.h"
#include "core/timer.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mpi_ctx {
    MPI_Comm comm;
    float *tmp_in, *tmp_out; /* fp32 staging for bf16 reductions (and in-place RS) */
    size_t tmp_elems;
} mpi_ctx;

static int g_we_initialized = 0;

static void finalize_at_exit(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

static zs_status mpi_err(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return zs_error(ZS_ERR_COMM, "mpi: %s failed: %s", what, msg);
}

#define MPI_TRY(call)                                                                              \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) {                                                              \
            st = mpi_err(mpi_rc_, #call);                                                          \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static zs_status mpi_init(zs_comm_t *c) {
    zs_status st = ZS_OK;
    mpi_ctx *m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "mpi: out of memory");
    c->impl = m;
    m->comm = MPI_COMM_NULL;
    int inited = 0, provided = 0, rank = 0, size = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* SERIALIZED suffices: the comm queue runs one collective at a time. */
        MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided));
        if (!g_we_initialized) atexit(finalize_at_exit);
        g_we_initialized = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    ZS_REQUIRE(provided >= MPI_THREAD_SERIALIZED, ZS_ERR_UNSUPPORTED,
               "mpi: the MPI library gives thread level %d, zshard needs MPI_THREAD_SERIALIZED",
               provided);
    if (c->split_handle) { /* a group: the MPI_Comm_split every parent rank made */
        m->comm = *(MPI_Comm *)c->split_handle;
        free(c->split_handle);
        c->split_handle = NULL;
    } else {
        MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &rank);
    MPI_Comm_size(m->comm, &size);
    /* Ranks started by zshard run (train --nproc) or torchrun are separate MPI worlds of one:
     * say how they were started and what works instead, not only that MPI disagrees. */
    ZS_REQUIRE(size == c->env.world_size && rank == c->env.rank, ZS_ERR_COMM,
               "mpi: these %d ranks were started by %s, not by an MPI launcher, so MPI sees "
               "each alone (rank %d of %d): --comm mpi needs `mpirun -np %d zshard ...` or "
               "srun; without it, leave out --comm (shm on one host, gloo across hosts)",
               c->env.world_size,
               !strcmp(c->env.source, "torchrun") ? "zshard run (--nproc) or torchrun"
                                                  : c->env.source,
               rank, size, c->env.world_size);
fail:
    return st;
}

static void mpi_fini(zs_comm_t *c) {
    mpi_ctx *m = c->impl;
    if (!m) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && m->comm != MPI_COMM_NULL && c->failed == ZS_OK) MPI_Comm_free(&m->comm);
    zs_free(m->tmp_in);
    zs_free(m->tmp_out);
    free(m);
    c->impl = NULL;
}

static zs_status ensure_tmp(mpi_ctx *m, size_t elems) {
    zs_status st = ZS_OK;
    if (elems <= m->tmp_elems) return ZS_OK;
    zs_free(m->tmp_in);
    zs_free(m->tmp_out);
    m->tmp_in = m->tmp_out = NULL;
    m->tmp_elems = 0;
    ZS_CHECK(zs_alloc(ZS_MEM_COMM, elems * sizeof(float), "mpi fp32 staging", (void **)&m->tmp_in));
    ZS_CHECK(
        zs_alloc(ZS_MEM_COMM, elems * sizeof(float), "mpi fp32 staging", (void **)&m->tmp_out));
    m->tmp_elems = elems;
fail:
    return st;
}

/* Poll a request until done or the deadline: MPI's own waits have no timeout. */
static zs_status wait_req(zs_comm_t *c, MPI_Request *req, const char *what) {
    double start = zs_now_s(), deadline = start + c->timeout_s;
    long polls = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_err(rc, what);
        if (done) return ZS_OK;
        if (++polls > 1000) {
            /* past the fast path: yield the core to ranks that share it */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            if (zs_now_s() > deadline)
                return zs_error(ZS_ERR_TIMEOUT,
                                "mpi: %s did not complete within %.1f s (a peer is dead, stuck or "
                                "not calling it; MPI does not say which rank)",
                                what, c->timeout_s);
        }
    }
}

static void widen(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = zs_bits_f32((uint32_t)src[i] << 16);
}

static void narrow_avg(void *dst, const float *src, size_t n, zs_dtype dt, int avg, int world) {
    if (dt == ZS_DTYPE_F32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = avg ? src[i] / (float)world : src[i];
    } else {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = zs_f32_to_bf16(avg ? src[i] / (float)world : src[i]).bits;
    }
}

static zs_status mpi_run(zs_comm_t *c, const zs_coll *op) {
    zs_status st = ZS_OK;
    mpi_ctx *m = c->impl;
    const int n = c->env.world_size, r = c->env.rank, avg = op->op == ZS_REDUCE_AVG;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const char *send = op->send;
    char *recv = op->recv;
    MPI_Request req = MPI_REQUEST_NULL;
    ZS_REQUIRE(count * (size_t)n <= INT_MAX, ZS_ERR_UNSUPPORTED,
               "mpi: %zu elements exceed MPI's int counts", count * (size_t)n);
    const int cnt = (int)count;
    MPI_Datatype raw = op->dt == ZS_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T;
    switch (op->kind) {
    case ZS_COLL_BARRIER:
        MPI_TRY(MPI_Ibarrier(m->comm, &req));
        break;
    case ZS_COLL_BROADCAST:
        /* count 0: the buffers may be NULL, which memcpy may not be given even for 0 bytes */
        if (r == op->root && send != recv && count) memcpy(recv, send, count * esz);
        MPI_TRY(MPI_Ibcast(recv, cnt, raw, op->root, m->comm, &req));
        break;
    case ZS_COLL_ALL_GATHER:
        if (send == recv + (size_t)r * count * esz)
            MPI_TRY(MPI_Iallgather(MPI_IN_PLACE, 0, raw, recv, cnt, raw, m->comm, &req));
        else
            MPI_TRY(MPI_Iallgather(send, cnt, raw, recv, cnt, raw, m->comm, &req));
        break;
    case ZS_COLL_ALL_REDUCE:
        if (op->dt == ZS_DTYPE_F32) {
            MPI_TRY(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, cnt, MPI_FLOAT,
                                   MPI_SUM, m->comm, &req));
            ZS_CHECK(wait_req(c, &req, "MPI_Iallreduce"));
            if (avg) narrow_avg(recv, (const float *)recv, count, op->dt, avg, n);
            return ZS_OK;
        }
        ZS_CHECK(ensure_tmp(m, count));
        if (op->dt != ZS_DTYPE_F32)
            widen(m->tmp_in, (const uint16_t *)send, count);
        else if (count) /* 0 elements: no staging buffer (NULL), which memcpy may not take */
            memcpy(m->tmp_in, send, count * esz);
        MPI_TRY(MPI_Iallreduce(m->tmp_in, m->tmp_out, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req));
        ZS_CHECK(wait_req(c, &req, "MPI_Iallreduce"));
        narrow_avg(recv, m->tmp_out, count, op->dt, avg, n);
        return ZS_OK;
    case ZS_COLL_REDUCE_SCATTER:
        if (op->dt == ZS_DTYPE_F32 && recv != send + (size_t)r * count * esz) {
            MPI_TRY(MPI_Ireduce_scatter_block(send, recv, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req));
            ZS_CHECK(wait_req(c, &req, "MPI_Ireduce_scatter_block"));
            if (avg) narrow_avg(recv, (const float *)recv, count, op->dt, avg, n);
            return ZS_OK;
        }
        /* fp32 staging: MPI forbids send/recv aliasing (in place), and bf16 widens. */
        ZS_CHECK(ensure_tmp(m, count * (size_t)n));
        if (op->dt != ZS_DTYPE_F32)
            widen(m->tmp_in, (const uint16_t *)send, count * (size_t)n);
        else if (count) /* 0 elements: no staging buffer (NULL), which memcpy may not take */
            memcpy(m->tmp_in, send, count * (size_t)n * esz);
        MPI_TRY(MPI_Ireduce_scatter_block(m->tmp_in, m->tmp_out, cnt, MPI_FLOAT, MPI_SUM, m->comm,
                                          &req));
        ZS_CHECK(wait_req(c, &req, "MPI_Ireduce_scatter_block"));
        narrow_avg(recv, m->tmp_out, count, op->dt, avg, n);
        return ZS_OK;
    default:
        ZS_REQUIRE(0, ZS_ERR_INTERNAL, "mpi: unknown collective %d", (int)op->kind);
    }
    ZS_CHECK(wait_req(c, &req, zs_coll_name(op->kind)));
fail:
    return st;
}

zs_status zs_comm_mpi_bcast_bytes(void *buf, size_t nbytes, int root) {
    zs_status st = ZS_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided));
        if (!g_we_initialized) atexit(finalize_at_exit);
        g_we_initialized = 1;
    }
    ZS_REQUIRE(nbytes <= INT_MAX, ZS_ERR_INVALID, "mpi: broadcast of %zu bytes", nbytes);
    MPI_TRY(MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, MPI_COMM_WORLD));
fail:
    return st;
}

/* zs_comm_split's half on an mpi parent: every rank of the parent splits its MPI communicator
 * (rank order within a color by key, then parent rank, as comm_split.c orders them). */
static zs_status mpi_split(zs_comm_t *parent, int color, int key, void **handle) {
    zs_status st = ZS_OK;
    mpi_ctx *m = parent->impl;
    MPI_Comm *sub = malloc(sizeof *sub);
    ZS_REQUIRE(sub, ZS_ERR_OOM, "mpi: out of memory");
    MPI_TRY(MPI_Comm_split(m->comm, color, key, sub));
    *handle = sub;
    sub = NULL;
fail:
    free(sub);
    return st;
}

static void mpi_split_free(void *handle) {
    MPI_Comm *sub = handle;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && *sub != MPI_COMM_NULL) MPI_Comm_free(sub);
    free(sub);
}

static const zs_comm_backend_ops g_mpi_ops = {
    .name = "mpi",
    .init = mpi_init,
    .fini = mpi_fini,
    .run = mpi_run,
    .mark_failed = NULL,
    .sync = NULL,
    .needs_thread = 1,
    .split = mpi_split,
    .split_free = mpi_split_free,
};

const zs_comm_backend_ops *zs_comm_mpi_ops(void) {
    return &g_mpi_ops;
}

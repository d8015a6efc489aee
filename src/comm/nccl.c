/* nccl backend: CUDA ranks, one GPU each. The unique id travels through the TCP store (or
 * MPI under mpirun without a master address). Collectives are enqueued on the caller's
 * stream (or the comm's own); waiting polls the stream and NCCL's async error against the
 * deadline and aborts the NCCL communicator on timeout, so a dead peer cannot hang us.
 * bf16 reductions are NCCL's own (its partial sums between hops are bf16). */
#include "backend/cuda_device.h"
#include "comm/comm_internal.h"
#include "comm/store.h"
#include "core/status.h"
#include "core/timer.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZS_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t cu_rc_ = (call);                                                               \
        if (cu_rc_ != cudaSuccess) {                                                               \
            st = zs_error(ZS_ERR_CUDA, "%s failed: %s (at %s:%d)", #call,                          \
                          cudaGetErrorString(cu_rc_), __FILE__, __LINE__);                         \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define ZS_NCCL_CHECK(call)                                                                        \
    do {                                                                                           \
        ncclResult_t nc_rc_ = (call);                                                              \
        if (nc_rc_ != ncclSuccess) {                                                               \
            st = zs_error(nc_rc_ == ncclRemoteError || nc_rc_ == ncclSystemError ? ZS_ERR_COMM     \
                                                                                 : ZS_ERR_CUDA,    \
                          "%s failed: %s (at %s:%d)", #call, ncclGetErrorString(nc_rc_), __FILE__, \
                          __LINE__);                                                               \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

typedef struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;
    float *scratch; /* one float on the device, for barrier */
    int aborted;
} nccl_ctx;

int zs_comm_nccl_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

static zs_status exchange_id(zs_comm_t *c, ncclUniqueId *id) {
    zs_status st = ZS_OK;
    zs_store *store = NULL;
    int owned = 0;
    if (c->env.rank == 0) ZS_NCCL_CHECK(ncclGetUniqueId(id));
    if (c->env.world_size == 1) return ZS_OK;
    if (c->env.master_port > 0) {
        ZS_CHECK(zs_comm_store_open(c, &store, &owned));
        if (c->env.rank == 0)
            ZS_CHECK(zs_store_set(store, "nccl/id", id, sizeof *id));
        else
            ZS_CHECK(zs_store_get(store, "nccl/id", id, sizeof *id, NULL));
        ZS_CHECK(zs_store_barrier(store, "nccl/id", c->env.world_size));
    } else {
        ZS_CHECK(zs_comm_mpi_bcast_bytes(id, sizeof *id, 0));
    }
fail:
    zs_comm_store_close(store, owned);
    return st;
}

static zs_status nccl_init(zs_comm_t *c) {
    zs_status st = ZS_OK;
    ncclUniqueId id;
    nccl_ctx *x = calloc(1, sizeof *x);
    ZS_REQUIRE(x, ZS_ERR_OOM, "nccl: out of memory");
    c->impl = x;
    int ndev = zs_comm_nccl_device_count();
    ZS_REQUIRE(ndev > 0, ZS_ERR_UNSUPPORTED, "nccl: no CUDA device is visible");
    ZS_CUDA_CHECK(cudaSetDevice(c->device % ndev));
    ZS_CUDA_CHECK(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    ZS_CUDA_CHECK(cudaMalloc((void **)&x->scratch, sizeof(float)));
    memset(&id, 0, sizeof id);
    ZS_CHECK(exchange_id(c, &id));
    ZS_NCCL_CHECK(ncclCommInitRank(&x->comm, c->env.world_size, id, c->env.rank));
fail:
    return st;
}

static void nccl_fini(zs_comm_t *c) {
    nccl_ctx *x = c->impl;
    if (!x) return;
    if (x->comm) {
        if (x->aborted || c->failed != ZS_OK)
            ncclCommAbort(x->comm);
        else
            ncclCommDestroy(x->comm);
    }
    if (x->scratch) cudaFree(x->scratch);
    if (x->stream) cudaStreamDestroy(x->stream);
    free(x);
    c->impl = NULL;
}

/* The op's stream (the communicator's device stream when a device is attached), else the
 * backend's own. */
static cudaStream_t stream_of(nccl_ctx *x, const zs_coll *op) {
    return op->stream ? (cudaStream_t)zs_cuda_stream_handle(op->stream) : x->stream;
}

static zs_status nccl_run(zs_comm_t *c, const zs_coll *op) {
    zs_status st = ZS_OK;
    nccl_ctx *x = c->impl;
    cudaStream_t s = stream_of(x, op);
    ncclDataType_t dt = op->dt == ZS_DTYPE_F32 ? ncclFloat32 : ncclBfloat16;
    ncclRedOp_t rop = op->op == ZS_REDUCE_AVG ? ncclAvg : ncclSum;
    size_t count = op->count; /* elements, as NCCL counts */
#ifdef ZS_MUTANT_NCCL_BYTES   /* the tests' deliberately broken build: a count in bytes */
    count *= zs_dtype_size(op->dt);
#endif
    switch (op->kind) {
    case ZS_COLL_ALL_GATHER:
        ZS_NCCL_CHECK(ncclAllGather(op->send, op->recv, count, dt, x->comm, s));
        break;
    case ZS_COLL_REDUCE_SCATTER:
        ZS_NCCL_CHECK(ncclReduceScatter(op->send, op->recv, count, dt, rop, x->comm, s));
        break;
    case ZS_COLL_ALL_REDUCE:
        ZS_NCCL_CHECK(ncclAllReduce(op->send, op->recv, count, dt, rop, x->comm, s));
        break;
    case ZS_COLL_BROADCAST:
        ZS_NCCL_CHECK(ncclBroadcast(op->send, op->recv, count, dt, op->root, x->comm, s));
        break;
    case ZS_COLL_BARRIER:
        ZS_NCCL_CHECK(ncclAllReduce(x->scratch, x->scratch, 1, ncclFloat32, ncclSum, x->comm, s));
        break;
    default:
        ZS_REQUIRE(0, ZS_ERR_INTERNAL, "nccl: unknown collective %d", (int)op->kind);
    }
fail:
    return st;
}

/* Wait for the stream to pass the collective, bounded; a peer that died leaves NCCL spinning
 * forever, so on an async error or the timeout the communicator is aborted. Either failure
 * names the collective, its sequence number and tag, and NCCL's own account of it. */
static zs_status nccl_sync(zs_comm_t *c, const zs_coll *op) {
    zs_status st = ZS_OK;
    nccl_ctx *x = c->impl;
    cudaStream_t s = stream_of(x, op);
    double deadline = zs_now_s() + c->timeout_s;
    char what[160];
    snprintf(what, sizeof what, "nccl: %s #%llu (tag '%s', %zu x %s) on rank %d",
             zs_coll_name(op->kind), (unsigned long long)op->seq, op->tag, op->count,
             zs_dtype_name(op->dt), c->env.rank);
    for (;;) {
        cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess) break;
        ZS_REQUIRE(q == cudaErrorNotReady, ZS_ERR_CUDA, "%s: the stream failed: %s", what,
                   cudaGetErrorString(q));
        ncclResult_t async_rc = ncclSuccess;
        ZS_NCCL_CHECK(ncclCommGetAsyncError(x->comm, &async_rc));
        if (async_rc != ncclSuccess) {
            const char *last = ncclGetLastError(x->comm);
            st = zs_error(async_rc == ncclRemoteError || async_rc == ncclSystemError ? ZS_ERR_COMM
                                                                                     : ZS_ERR_CUDA,
                          "%s: %s (NCCL: %s)", what, ncclGetErrorString(async_rc),
                          last && *last ? last : "no detail");
            ncclCommAbort(x->comm);
            x->comm = NULL;
            x->aborted = 1;
            goto fail;
        }
        if (zs_now_s() > deadline) {
            ncclCommAbort(x->comm);
            x->comm = NULL;
            x->aborted = 1;
            ZS_REQUIRE(0, ZS_ERR_TIMEOUT,
                       "%s did not complete within %.1f s (a peer is dead or stuck)", what,
                       c->timeout_s);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
fail:
    if (st != ZS_OK) zs_comm_fail(c, st, zs_last_error());
    return st;
}

static zs_status nccl_query(zs_comm_t *c, const zs_coll *op, int *done) {
    zs_status st = ZS_OK;
    nccl_ctx *x = c->impl;
    cudaError_t q = cudaStreamQuery(stream_of(x, op));
    *done = q == cudaSuccess;
    ZS_REQUIRE(q == cudaSuccess || q == cudaErrorNotReady, ZS_ERR_CUDA, "nccl: stream failed: %s",
               cudaGetErrorString(q));
fail:
    return st;
}

/* A peer lost since the last look (ncclCommGetAsyncError), as the failure of the communicator. */
static zs_status nccl_health(zs_comm_t *c) {
    zs_status st = ZS_OK;
    nccl_ctx *x = c->impl;
    ncclResult_t async_rc = ncclSuccess;
    if (!x || !x->comm) return zs_comm_check_failed(c);
    ZS_NCCL_CHECK(ncclCommGetAsyncError(x->comm, &async_rc));
    if (async_rc != ncclSuccess) {
        const char *last = ncclGetLastError(x->comm);
        st = zs_error(ZS_ERR_COMM, "nccl on rank %d: %s (NCCL: %s)", c->env.rank,
                      ncclGetErrorString(async_rc), last && *last ? last : "no detail");
        ncclCommAbort(x->comm);
        x->comm = NULL;
        x->aborted = 1;
        zs_comm_fail(c, st, zs_last_error());
    }
fail:
    return st;
}

static const zs_comm_backend_ops g_nccl_ops = {
    .name = "nccl",
    .init = nccl_init,
    .fini = nccl_fini,
    .run = nccl_run,
    .mark_failed = NULL,
    .sync = nccl_sync,
    .query = nccl_query,
    .health = nccl_health,
    .needs_thread = 0,
};

const zs_comm_backend_ops *zs_comm_nccl_ops(void) {
    return &g_nccl_ops;
}

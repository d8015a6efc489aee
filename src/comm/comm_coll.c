/* The collectives' front door: argument checks (NCCL's in-place rules), submission to the
 * rank's queue, and the public blocking and asynchronous wrappers (docs/comm.md). */
#include "comm/comm_internal.h"
#include "comm/device.h"
#include "comm/staged.h"
#include "comm/store.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *zs_coll_name(zs_coll_kind k) {
    switch (k) {
    case ZS_COLL_ALL_GATHER:
        return "all_gather";
    case ZS_COLL_REDUCE_SCATTER:
        return "reduce_scatter";
    case ZS_COLL_ALL_REDUCE:
        return "all_reduce";
    case ZS_COLL_BROADCAST:
        return "broadcast";
    case ZS_COLL_BARRIER:
        return "barrier";
    case ZS_COLL_CHECK:
        return "check";
    case ZS_COLL_MEM_ALLOC:
        return "mem_alloc";
    }
    return "unknown";
}

/* ---- argument checks -------------------------------------------------------------------- */

static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

static zs_status validate(zs_comm_t *c, const zs_coll *op) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(c, ZS_ERR_INVALID, "%s: communicator is NULL", zs_coll_name(op->kind));
    const char *name = zs_coll_name(op->kind);
    size_t n = (size_t)c->env.world_size;
    if (op->kind == ZS_COLL_BARRIER) return ZS_OK;
    ZS_REQUIRE(op->dt == ZS_DTYPE_F32 || op->dt == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "%s: dtype %s is not supported (f32 or bf16)", name, zs_dtype_name(op->dt));
    ZS_REQUIRE(op->op == ZS_REDUCE_SUM || op->op == ZS_REDUCE_AVG, ZS_ERR_INVALID,
               "%s: unknown reduce op %d", name, (int)op->op);
    ZS_REQUIRE(op->count <= SIZE_MAX / 4 / n, ZS_ERR_INVALID, "%s: count %zu is too large", name,
               op->count);
    size_t esz = zs_dtype_size(op->dt), cnt = op->count * esz;
    const char *s = op->send;
    char *r = op->recv;
    int is_root = op->kind != ZS_COLL_BROADCAST || op->root == c->env.rank;
    if (op->kind == ZS_COLL_BROADCAST)
        ZS_REQUIRE(op->root >= 0 && op->root < c->env.world_size, ZS_ERR_INVALID,
                   "broadcast: root %d is not a rank of the world of %zu", op->root, n);
    if (op->count == 0) return ZS_OK;
    ZS_REQUIRE(r && (s || !is_root), ZS_ERR_INVALID, "%s: NULL buffer with count %zu", name,
               op->count);
    switch (op->kind) {
    case ZS_COLL_ALL_GATHER:
        ZS_REQUIRE(s == r + (size_t)c->env.rank * cnt || !overlaps(s, cnt, r, cnt * n),
                   ZS_ERR_INVALID,
                   "all_gather: send overlaps recv but is not the in-place position "
                   "recv + rank*count");
        break;
    case ZS_COLL_REDUCE_SCATTER:
        ZS_REQUIRE(r == s + (size_t)c->env.rank * cnt || !overlaps(s, cnt * n, r, cnt),
                   ZS_ERR_INVALID,
                   "reduce_scatter: recv overlaps send but is not the in-place position "
                   "send + rank*count");
        break;
    default:
        ZS_REQUIRE(!is_root || s == r || !overlaps(s, cnt, r, cnt), ZS_ERR_INVALID,
                   "%s: send and recv overlap without being equal (in place)", name);
        break;
    }
fail:
    return st;
}

static zs_status submit(zs_comm_t *c, zs_coll_kind kind, const void *send, void *recv, size_t count,
                        zs_dtype dt, zs_reduce_op op, int root, zs_stream_t *stream,
                        const char *tag, zs_comm_work_t **work) {
    zs_status st = ZS_OK;
    zs_coll co;
    memset(&co, 0, sizeof co);
    co.kind = kind;
    co.send = send;
    co.recv = recv;
    co.count = count;
    co.dt = dt;
    co.op = op;
    co.root = root;
    co.stream = stream;
    snprintf(co.tag, sizeof co.tag, "%s", tag ? tag : "");
    if (work) *work = NULL;
    ZS_CHECK(validate(c, &co));
    ZS_CHECK(zs_comm_check_failed(c));
    ZS_CHECK(zs_queue_submit(c, &co, work));
fail:
    return st;
}

zs_status zs_comm_all_gather(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                             zs_stream_t *stream, const char *tag) {
    return submit(c, ZS_COLL_ALL_GATHER, send, recv, count, dt, ZS_REDUCE_SUM, 0, stream, tag,
                  NULL);
}
zs_status zs_comm_reduce_scatter(zs_comm_t *c, const void *send, void *recv, size_t count,
                                 zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                 const char *tag) {
    return submit(c, ZS_COLL_REDUCE_SCATTER, send, recv, count, dt, op, 0, stream, tag, NULL);
}
zs_status zs_comm_all_reduce(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                             zs_reduce_op op, zs_stream_t *stream, const char *tag) {
    return submit(c, ZS_COLL_ALL_REDUCE, send, recv, count, dt, op, 0, stream, tag, NULL);
}
zs_status zs_comm_broadcast(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                            int root, zs_stream_t *stream, const char *tag) {
    return submit(c, ZS_COLL_BROADCAST, send, recv, count, dt, ZS_REDUCE_SUM, root, stream, tag,
                  NULL);
}
zs_status zs_comm_barrier(zs_comm_t *c, zs_stream_t *stream, const char *tag) {
    return submit(c, ZS_COLL_BARRIER, NULL, NULL, 0, ZS_DTYPE_F32, ZS_REDUCE_SUM, 0, stream, tag,
                  NULL);
}

static zs_status need_work(zs_comm_work_t **work) {
    return work ? ZS_OK : zs_error(ZS_ERR_INVALID, "async collective: work pointer is NULL");
}

zs_status zs_comm_all_gather_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                   zs_dtype dt, zs_stream_t *stream, const char *tag,
                                   zs_comm_work_t **work) {
    zs_status st = need_work(work);
    if (st != ZS_OK) return st;
    return submit(c, ZS_COLL_ALL_GATHER, send, recv, count, dt, ZS_REDUCE_SUM, 0, stream, tag,
                  work);
}
zs_status zs_comm_reduce_scatter_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                       zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                       const char *tag, zs_comm_work_t **work) {
    zs_status st = need_work(work);
    if (st != ZS_OK) return st;
    return submit(c, ZS_COLL_REDUCE_SCATTER, send, recv, count, dt, op, 0, stream, tag, work);
}
zs_status zs_comm_all_reduce_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                   zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                   const char *tag, zs_comm_work_t **work) {
    zs_status st = need_work(work);
    if (st != ZS_OK) return st;
    return submit(c, ZS_COLL_ALL_REDUCE, send, recv, count, dt, op, 0, stream, tag, work);
}
zs_status zs_comm_broadcast_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                  zs_dtype dt, int root, zs_stream_t *stream, const char *tag,
                                  zs_comm_work_t **work) {
    zs_status st = need_work(work);
    if (st != ZS_OK) return st;
    return submit(c, ZS_COLL_BROADCAST, send, recv, count, dt, ZS_REDUCE_SUM, root, stream, tag,
                  work);
}

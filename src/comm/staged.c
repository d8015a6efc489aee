/* Collectives on device buffers through host staging (staged.h). */
#include "comm/staged.h"

#include "core/status.h"

#include <string.h>

#define STAGING_DEFAULT_CHUNK ((size_t)4 << 20)

uint64_t zs_comm_staging_bytes(int world_size, size_t chunk_bytes) {
    if (!chunk_bytes) chunk_bytes = STAGING_DEFAULT_CHUNK;
    chunk_bytes = (chunk_bytes + 3) / 4 * 4;
    return 2 * (uint64_t)world_size * chunk_bytes;
}

zs_status zs_comm_staging_init(zs_comm_staging *s, zs_comm_t *c, const zs_device *dev,
                               zs_stream_t *stream, size_t chunk_bytes) {
    zs_status st = ZS_OK;
    memset(s, 0, sizeof *s);
    ZS_REQUIRE(c && dev, ZS_ERR_INVALID, "comm staging: NULL communicator or device");
    s->dev = dev;
    s->stream = stream;
    /* Whole elements of every dtype (bf16 and fp32) fit a piece. */
    s->chunk_bytes = chunk_bytes ? (chunk_bytes + 3) / 4 * 4 : STAGING_DEFAULT_CHUNK;
    size_t nb = (size_t)c->env.world_size * s->chunk_bytes;
    ZS_CHECK(dev->host_alloc(ZS_MEM_COMM, nb, "comm staging (in)", &s->in));
    ZS_CHECK(dev->host_alloc(ZS_MEM_COMM, nb, "comm staging (out)", &s->out));
    return ZS_OK;
fail:
    zs_comm_staging_free(s);
    return st;
}

void zs_comm_staging_free(zs_comm_staging *s) {
    if (!s || !s->dev) return;
    s->dev->host_free(s->in);
    s->dev->host_free(s->out);
    s->in = s->out = NULL;
}

/* The host collective of one piece, straight to the backend (the caller is already the thread
 * that executes c's collectives, with the outer op's ring entry and sequence number). */
static zs_status run_piece(zs_comm_t *c, const zs_coll *op, zs_coll_kind kind, const void *send,
                           void *recv, size_t n) {
    zs_coll p = *op;
    p.kind = kind;
    p.send = send;
    p.recv = recv;
    p.count = n;
    p.stream = NULL;
    return c->ops->run(c, &p);
}

/* Contiguous collectives (all_reduce, broadcast): pieces of world x piece elements. */
static zs_status flat(zs_comm_t *c, zs_comm_staging *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    int bcast = op->kind == ZS_COLL_BROADCAST, rank = c->env.rank;
    size_t esz = zs_dtype_size(op->dt);
    size_t per = s->chunk_bytes / esz * (size_t)c->env.world_size, count = op->count, k0 = 0;
    do { /* once even for count 0: every rank issues the same collectives */
        size_t n = count - k0 < per ? count - k0 : per;
        if (!bcast || rank == op->root)
            ZS_CHECK(d->copy_d2h(s->stream, s->in, (const char *)op->send + k0 * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        ZS_CHECK(run_piece(c, op, op->kind, s->in, s->out, n));
        ZS_CHECK(d->copy_h2d(s->stream, (char *)op->recv + k0 * esz, s->out, n * esz));
        ZS_CHECK(d->stream_sync(s->stream)); /* s->out is reused by the next piece */
    } while ((k0 += per) < count);
fail:
    return st;
}

/* reduce_scatter: piece [k0, k0+n) of every rank's block j gathers into the staging input as
 * block j, so the host collective's result is piece [k0, k0+n) of this rank's output. In place
 * (recv = send + rank*count) is safe: a piece is written only after every block's copy of it
 * has been read, and later pieces read other offsets. */
static zs_status reduce_scatter(zs_comm_t *c, zs_comm_staging *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    int world = c->env.world_size;
    size_t esz = zs_dtype_size(op->dt), per = s->chunk_bytes / esz, count = op->count, k0 = 0;
    do {
        size_t n = count - k0 < per ? count - k0 : per;
        for (int j = 0; j < world; j++)
            ZS_CHECK(d->copy_d2h(s->stream, (char *)s->in + (size_t)j * n * esz,
                                 (const char *)op->send + ((size_t)j * count + k0) * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        ZS_CHECK(run_piece(c, op, ZS_COLL_REDUCE_SCATTER, s->in, s->out, n));
        ZS_CHECK(d->copy_h2d(s->stream, (char *)op->recv + k0 * esz, s->out, n * esz));
#ifdef ZS_MUTANT_STAGED_NO_SYNC /* broken build: the last piece's copy back not waited for */
        if (k0 + per < count)
#endif
            ZS_CHECK(d->stream_sync(s->stream));
    } while ((k0 += per) < count);
fail:
    return st;
}

/* all_gather: piece [k0, k0+n) of every rank, scattered back to block j of recv. In place
 * (send = recv + rank*count): this rank's own block is rewritten with the values it holds. */
static zs_status all_gather(zs_comm_t *c, zs_comm_staging *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    int world = c->env.world_size;
    size_t esz = zs_dtype_size(op->dt), per = s->chunk_bytes / esz, count = op->count, k0 = 0;
    do {
        size_t n = count - k0 < per ? count - k0 : per;
        ZS_CHECK(d->copy_d2h(s->stream, s->in, (const char *)op->send + k0 * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        ZS_CHECK(run_piece(c, op, ZS_COLL_ALL_GATHER, s->in, s->out, n));
        for (int j = 0; j < world; j++)
            ZS_CHECK(d->copy_h2d(s->stream, (char *)op->recv + ((size_t)j * count + k0) * esz,
                                 (const char *)s->out + (size_t)j * n * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
    } while ((k0 += per) < count);
fail:
    return st;
}

zs_status zs_comm_staged_run(zs_comm_t *c, zs_comm_staging *s, const zs_coll *op) {
    switch (op->kind) {
    case ZS_COLL_ALL_REDUCE:
    case ZS_COLL_BROADCAST:
        return flat(c, s, op);
    case ZS_COLL_REDUCE_SCATTER:
        return reduce_scatter(c, s, op);
    case ZS_COLL_ALL_GATHER:
        return all_gather(c, s, op);
    default: /* barrier and the internal kinds hold no device buffers */
        return c->ops->run(c, op);
    }
}

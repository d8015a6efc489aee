/* Collectives on device buffers through host staging (staged.h). */
#include "comm/staged.h"

#include "core/status.h"

#include <string.h>

#define STAGING_DEFAULT_CHUNK ((size_t)4 << 20)

uint64_t zs_comm_staging_bytes(int world_size, size_t chunk_bytes) {
    if (!chunk_bytes) chunk_bytes = STAGING_DEFAULT_CHUNK;
    return 2 * (uint64_t)world_size * chunk_bytes;
}

zs_status zs_comm_staging_init(zs_comm_staging *s, zs_comm_t *comm, const zs_device *dev,
                               zs_stream_t *stream, size_t chunk_bytes) {
    zs_status st = ZS_OK;
    memset(s, 0, sizeof *s);
    ZS_REQUIRE(comm && dev, ZS_ERR_INVALID, "comm staging: NULL communicator or device");
    s->comm = comm;
    s->dev = dev;
    s->stream = stream;
    /* Whole elements of every dtype (bf16 and fp32) fit a piece. */
    s->chunk_bytes = chunk_bytes ? (chunk_bytes + 3) / 4 * 4 : STAGING_DEFAULT_CHUNK;
    size_t nb = (size_t)zs_comm_world_size(comm) * s->chunk_bytes;
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

/* Elements per rank and piece. */
static size_t piece_elems(const zs_comm_staging *s, zs_dtype dt) {
    return s->chunk_bytes / zs_dtype_size(dt);
}

/* Contiguous collectives (all_reduce, broadcast): pieces of world x piece elements. */
static zs_status flat(zs_comm_staging *s, int bcast_root, const void *send, void *recv,
                      size_t count, zs_dtype dt, zs_reduce_op op, const char *tag) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    size_t esz = zs_dtype_size(dt), per = piece_elems(s, dt) * zs_comm_world_size(s->comm);
    int rank = zs_comm_rank(s->comm);
    size_t k0 = 0;
    do { /* once even for count 0: every rank issues the same collectives */
        size_t n = count - k0 < per ? count - k0 : per;
        if (bcast_root < 0 || rank == bcast_root)
            ZS_CHECK(d->copy_d2h(s->stream, s->in, (const char *)send + k0 * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        if (bcast_root < 0)
            ZS_CHECK(zs_comm_all_reduce(s->comm, s->in, s->out, n, dt, op, NULL, tag));
        else
            ZS_CHECK(zs_comm_broadcast(s->comm, s->in, s->out, n, dt, bcast_root, NULL, tag));
        ZS_CHECK(d->copy_h2d(s->stream, (char *)recv + k0 * esz, s->out, n * esz));
        ZS_CHECK(d->stream_sync(s->stream)); /* s->out is reused by the next piece */
    } while ((k0 += per) < count);
fail:
    return st;
}

zs_status zs_comm_staged_all_reduce(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                    zs_dtype dt, zs_reduce_op op, const char *tag) {
    return flat(s, -1, send, recv, count, dt, op, tag);
}

zs_status zs_comm_staged_broadcast(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                   zs_dtype dt, int root, const char *tag) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(root >= 0 && root < zs_comm_world_size(s->comm), ZS_ERR_INVALID,
               "staged broadcast: root %d is not a rank of %d", root, zs_comm_world_size(s->comm));
    ZS_CHECK(flat(s, root, send, recv, count, dt, ZS_REDUCE_SUM, tag));
fail:
    return st;
}

/* reduce_scatter: piece [k0, k0+n) of every rank's block j gathers into the staging input
 * as block j, so the host collective's result is piece [k0, k0+n) of this rank's output.
 * In place (recv = send + rank*count) is safe: a piece is written only after every block's
 * copy of it has been read, and later pieces read other offsets. */
zs_status zs_comm_staged_reduce_scatter(zs_comm_staging *s, const void *send, void *recv,
                                        size_t count, zs_dtype dt, zs_reduce_op op,
                                        const char *tag) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    int world = zs_comm_world_size(s->comm);
    size_t esz = zs_dtype_size(dt), per = piece_elems(s, dt);
    size_t k0 = 0;
    do { /* once even for count 0: every rank issues the same collectives */
        size_t n = count - k0 < per ? count - k0 : per;
        for (int j = 0; j < world; j++)
            ZS_CHECK(d->copy_d2h(s->stream, (char *)s->in + (size_t)j * n * esz,
                                 (const char *)send + ((size_t)j * count + k0) * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        ZS_CHECK(zs_comm_reduce_scatter(s->comm, s->in, s->out, n, dt, op, NULL, tag));
        ZS_CHECK(d->copy_h2d(s->stream, (char *)recv + k0 * esz, s->out, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
    } while ((k0 += per) < count);
fail:
    return st;
}

/* all_gather: piece [k0, k0+n) of every rank, scattered back to block j of recv. In place
 * (send = recv + rank*count): this rank's own block is rewritten with the values it holds. */
zs_status zs_comm_staged_all_gather(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                    zs_dtype dt, const char *tag) {
    zs_status st = ZS_OK;
    const zs_device *d = s->dev;
    int world = zs_comm_world_size(s->comm);
    size_t esz = zs_dtype_size(dt), per = piece_elems(s, dt);
    size_t k0 = 0;
    do { /* once even for count 0: every rank issues the same collectives */
        size_t n = count - k0 < per ? count - k0 : per;
        ZS_CHECK(d->copy_d2h(s->stream, s->in, (const char *)send + k0 * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
        ZS_CHECK(zs_comm_all_gather(s->comm, s->in, s->out, n, dt, NULL, tag));
        for (int j = 0; j < world; j++)
            ZS_CHECK(d->copy_h2d(s->stream, (char *)recv + ((size_t)j * count + k0) * esz,
                                 (const char *)s->out + (size_t)j * n * esz, n * esz));
        ZS_CHECK(d->stream_sync(s->stream));
    } while ((k0 += per) < count);
fail:
    return st;
}

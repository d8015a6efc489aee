/* The engine's collectives, with the world of one handled here so callers need not branch,
 * and host values (a loss, a hash, checkpoint pieces) through a device scratch
 * (docs/architecture.md "Stages"). */
#include "shard/engine_internal.h"

#include "comm/device.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_engine_gather(zs_engine_t *e, const void *send, void *recv, size_t count, zs_dtype dt,
                           const char *tag, zs_comm_work_t **work) {
    *work = NULL;
    if (!e->comm)
        return send == recv ? ZS_OK
                            : e->ops->copy(e->stream, recv, send, count * zs_dtype_size(dt));
    return zs_comm_all_gather_async(e->comm, send, recv, count, dt, e->stream, tag, work);
}

zs_status zs_engine_wait(zs_comm_work_t **work) {
    zs_status st = ZS_OK;
    if (*work) st = zs_comm_work_wait(*work);
    *work = NULL;
    return st;
}

zs_status zs_engine_wait_stream(zs_engine_t *e, zs_comm_work_t **work) {
    zs_status st = ZS_OK;
    if (*work) st = zs_comm_work_wait_stream(*work, e->stream);
    *work = NULL;
    return st;
}

/* Host values take part in collectives through hx, a piece of at most ZS_ENGINE_HOST_CHUNK bytes
 * per rank at a time: copied in, the collective on device memory, copied out. */
zs_status zs_engine_all_gather_bytes(zs_engine_t *e, const void *send, void *recv, size_t nbytes) {
    zs_status st = ZS_OK;
    const zs_device *d = e->dev;
    ZS_REQUIRE(nbytes % 4 == 0, ZS_ERR_INTERNAL, "engine: all_gather_bytes of %zu bytes", nbytes);
    if (!e->hcomm) {
        memcpy(recv, send, nbytes);
        return ZS_OK;
    }
    char *in = e->hx, *out = e->hx + (size_t)e->hworld * ZS_ENGINE_HOST_CHUNK;
    size_t off = 0;
    do { /* once even for 0 bytes: every rank issues the same collectives */
        size_t n = nbytes - off < ZS_ENGINE_HOST_CHUNK ? nbytes - off : ZS_ENGINE_HOST_CHUNK;
        ZS_CHECK(d->copy_h2d(e->stream, in, (const char *)send + off, n));
        /* An all-gather only moves bytes, so any 4-byte payload travels as "f32" unchanged. */
        ZS_CHECK(
            zs_comm_all_gather(e->hcomm, in, out, n / 4, ZS_DTYPE_F32, e->stream, "engine:bytes"));
        for (int r = 0; r < e->hworld; r++)
            ZS_CHECK(d->copy_d2h(e->stream, (char *)recv + (size_t)r * nbytes + off,
                                 out + (size_t)r * n, n));
        ZS_CHECK(d->stream_sync(e->stream));
    } while ((off += ZS_ENGINE_HOST_CHUNK) < nbytes);
fail:
    return st;
}

zs_status zs_engine_broadcast_host(zs_engine_t *e, float *buf, size_t count, int root) {
    zs_status st = ZS_OK;
    const zs_device *d = e->dev;
    if (!e->hcomm) return ZS_OK;
    size_t per = ZS_ENGINE_HOST_CHUNK * (size_t)e->hworld / sizeof(float), k0 = 0;
    float *x = (float *)(void *)e->hx;
    do {
        size_t n = count - k0 < per ? count - k0 : per;
        ZS_CHECK(d->copy_h2d(e->stream, x, buf + k0, n * sizeof(float)));
        ZS_CHECK(
            zs_comm_broadcast(e->hcomm, x, x, n, ZS_DTYPE_F32, root, e->stream, "engine:bcast"));
        ZS_CHECK(d->copy_d2h(e->stream, buf + k0, x, n * sizeof(float)));
        ZS_CHECK(d->stream_sync(e->stream));
    } while ((k0 += per) < count);
fail:
    return st;
}

zs_status zs_engine_allsum(zs_engine_t *e, double local, double *global) {
    zs_status st = ZS_OK;
    double *all = calloc((size_t)e->hworld, sizeof *all);
    if (!all) return zs_error(ZS_ERR_OOM, "engine: out of memory");
    ZS_CHECK(zs_engine_all_gather_bytes(e, &local, all, sizeof local));
    double sum = 0.0;
    for (int r = 0; r < e->hworld; r++)
        sum += all[r]; /* rank order: identical everywhere */
    *global = sum;
fail:
    free(all);
    return st;
}

/* shm collectives (docs/architecture.md "The CPU path"). A message is processed in windows that fit
 * a rank's staging slot; windows alternate between the two slots of each rank, so window k+1 is
 * staged while peers still read window k. Per window of an all_reduce:
 *   A  copy the slices of my input that other ranks reduce into my slot   -> signal
 *   B  reduce my own slice, reading the N inputs in rank order            -> signal
 *   C  copy every rank's reduced slice into my output                     -> signal
 * reduce_scatter is A and B (B writes straight to recv), all_gather and broadcast are A and
 * C. Each rank's progress word counts completed phases; every rank performs the same phases
 * for the same collective, so "peer p finished phase X of window k" is a plain number.
 * Every element is reduced by zs_reduce_* in rank order, whatever the op, so all_reduce is
 * bitwise reduce_scatter + all_gather. */
#include "comm/shm.h"
#include "core/status.h"

#include <string.h>

#define ALIGN_ELEMS 32 /* slice boundaries on 64/128-byte multiples */

static void reduce(zs_dtype dt, void *out, const void *const *in, int n, size_t count, int avg,
                   int world, int stream) {
    if (dt == ZS_DTYPE_F32)
        zs_reduce_f32((float *const *)&out, 1, (const float *const *)in, n, count, avg, world,
                      stream);
    else
        zs_reduce_bf16((uint16_t *const *)&out, 1, (const uint16_t *const *)in, n, count, avg,
                       world, stream);
}

static void copy(void *dst, const void *src, size_t nbytes) {
    if (dst != src && nbytes) memcpy(dst, src, nbytes);
}

/* Before refilling my slot of parity k&1, every peer must have finished window k-2, the
 * last reader of that slot (for k < 2: the previous collective, i.e. base). */
static zs_status wait_slot_free(shm_ctx *s, uint32_t base, size_t k, uint32_t nphase) {
    uint32_t target = k >= 2 ? base + (uint32_t)((k - 1) * nphase) : base;
    return shm_wait_all(s, target);
}

static size_t ar_bound(size_t len, int q, int n) {
    if (q >= n) return len;
    return (len * (size_t)q / (size_t)n) / ALIGN_ELEMS * ALIGN_ELEMS;
}

static zs_status all_reduce(shm_ctx *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const int n = s->world, r = s->rank, avg = op->op == ZS_REDUCE_AVG;
    const size_t esz = zs_dtype_size(op->dt);
    const size_t W = s->slot_bytes / esz / ALIGN_ELEMS * ALIGN_ELEMS;
    const size_t nwin = (op->count + W - 1) / W;
    const uint32_t base = s->progress;
    const char *send = op->send;
    char *recv = op->recv;
    const void *in[1024];
    void (*mv)(void *, const void *, size_t) =
        op->count * esz >= SHM_STREAM_MIN ? shm_copy_stream : copy;
    for (size_t k = 0; k < nwin; k++) {
        const size_t w0 = k * W, len = op->count - w0 < W ? op->count - w0 : W;
        const int b = (int)(k & 1);
        char *mine = shm_slot(s, r, b);
        ZS_CHECK(wait_slot_free(s, base, k, 3));
        for (int q = 0; q < n; q++) {
            size_t lo = ar_bound(len, q, n), hi = ar_bound(len, q + 1, n);
            if (q != r) copy(mine + lo * esz, send + (w0 + lo) * esz, (hi - lo) * esz);
        }
        shm_signal(s);
        ZS_CHECK(shm_wait_all(s, base + (uint32_t)(3 * k + 1)));
        size_t lo = ar_bound(len, r, n), hi = ar_bound(len, r + 1, n);
        for (int p = 0; p < n; p++)
            in[p] = p == r ? send + (w0 + lo) * esz : shm_slot(s, p, b) + lo * esz;
        /* My own slice's place in my slot held nothing in phase A: the result goes there,
         * through the cache, since every peer reads it next. */
        reduce(op->dt, mine + lo * esz, in, n, hi - lo, avg, n, 0);
        shm_signal(s);
        ZS_CHECK(shm_wait_all(s, base + (uint32_t)(3 * k + 2)));
        for (int q = 0; q < n; q++) {
            size_t qlo = ar_bound(len, q, n), qhi = ar_bound(len, q + 1, n);
            mv(recv + (w0 + qlo) * esz, shm_slot(s, q, b) + qlo * esz, (qhi - qlo) * esz);
        }
        shm_signal(s);
    }
fail:
    return st;
}

static zs_status reduce_scatter(shm_ctx *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const int n = s->world, r = s->rank, avg = op->op == ZS_REDUCE_AVG;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const size_t w = s->slot_bytes / esz / (size_t)n / ALIGN_ELEMS * ALIGN_ELEMS;
    const size_t nwin = (count + w - 1) / w;
    const uint32_t base = s->progress;
    const char *send = op->send;
    char *recv = op->recv;
    const void *in[1024];
    const int stream = count * esz >= SHM_STREAM_MIN;
    for (size_t k = 0; k < nwin; k++) {
        const size_t j0 = k * w, len = count - j0 < w ? count - j0 : w;
        const int b = (int)(k & 1);
        char *mine = shm_slot(s, r, b);
        ZS_CHECK(wait_slot_free(s, base, k, 2));
        for (int q = 0; q < n; q++)
            if (q != r)
                copy(mine + (size_t)q * w * esz, send + ((size_t)q * count + j0) * esz, len * esz);
        shm_signal(s);
        ZS_CHECK(shm_wait_all(s, base + (uint32_t)(2 * k + 1)));
        for (int p = 0; p < n; p++)
            in[p] = p == r ? send + ((size_t)r * count + j0) * esz
                           : shm_slot(s, p, b) + (size_t)r * w * esz;
        reduce(op->dt, recv + j0 * esz, in, n, len, avg, n, stream);
        shm_signal(s);
    }
fail:
    return st;
}

/* all_gather and broadcast: A stages the data (every rank, or the root), C copies it out. */
static zs_status gather_like(shm_ctx *s, const zs_coll *op) {
    zs_status st = ZS_OK;
    const int n = s->world, r = s->rank, bcast = op->kind == ZS_COLL_BROADCAST;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const size_t w = s->slot_bytes / esz / ALIGN_ELEMS * ALIGN_ELEMS;
    const size_t nwin = (count + w - 1) / w;
    const uint32_t base = s->progress;
    const char *send = op->send;
    char *recv = op->recv;
    void (*mv)(void *, const void *, size_t) =
        count * esz * (bcast ? 1 : (size_t)n) >= SHM_STREAM_MIN ? shm_copy_stream : copy;
    for (size_t k = 0; k < nwin; k++) {
        const size_t j0 = k * w, len = count - j0 < w ? count - j0 : w;
        const int b = (int)(k & 1);
        if (!bcast || r == op->root) {
            ZS_CHECK(wait_slot_free(s, base, k, 2));
            copy(shm_slot(s, r, b), send + j0 * esz, len * esz);
            /* own block: straight from send (a no-op when in place) */
            size_t own = bcast ? j0 : (size_t)r * count + j0;
            copy(recv + own * esz, send + j0 * esz, len * esz);
        }
        shm_signal(s);
        if (bcast) {
            if (r != op->root) {
                ZS_CHECK(shm_wait_peer(s, op->root, base + (uint32_t)(2 * k + 1)));
                mv(recv + j0 * esz, shm_slot(s, op->root, b), len * esz);
            }
        } else {
            ZS_CHECK(shm_wait_all(s, base + (uint32_t)(2 * k + 1)));
            for (int q = 0; q < n; q++)
                if (q != r) mv(recv + ((size_t)q * count + j0) * esz, shm_slot(s, q, b), len * esz);
        }
        shm_signal(s);
    }
fail:
    return st;
}

/* A world of one: the result is the input (AVG divides by 1, exact). */
static zs_status run_local(const zs_coll *op) {
    size_t nbytes = op->count * zs_dtype_size(op->dt);
    if (op->kind != ZS_COLL_BARRIER) copy(op->recv, op->send, nbytes);
    return ZS_OK;
}

zs_status shm_run(zs_comm_t *c, const zs_coll *op) {
    shm_ctx *s = c->impl;
    zs_status st;
    if (s->world == 1) return run_local(op);
    if (s->world > 1024) return zs_error(ZS_ERR_UNSUPPORTED, "shm: more than 1024 ranks");
    if (op->kind == ZS_COLL_MEM_ALLOC) return shm_reg_alloc(s, op);
    if (op->kind != ZS_COLL_BARRIER && op->kind != ZS_COLL_CHECK) {
        int done = 0;
        st = shm_direct(s, op, &done); /* registered buffers, when every rank's are */
        if (st != ZS_OK || done) return st;
    }
    switch (op->kind) {
    case ZS_COLL_ALL_REDUCE:
        st = all_reduce(s, op);
        break;
    case ZS_COLL_REDUCE_SCATTER:
        st = reduce_scatter(s, op);
        break;
    case ZS_COLL_ALL_GATHER:
    case ZS_COLL_BROADCAST:
        st = gather_like(s, op);
        break;
    case ZS_COLL_BARRIER:
        shm_signal(s);
        st = shm_wait_all(s, s->progress);
        break;
    default:
        st = zs_error(ZS_ERR_INTERNAL, "shm: unknown collective %d", (int)op->kind);
    }
    return st;
}

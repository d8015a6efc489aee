/* Direct collectives on registered buffers (zs_comm_mem_alloc). Once a communicator has made
 * an allocation, every collective starts with a publish phase: each rank writes where its
 * send and recv buffers lie in its registered allocations (allocation number and offset, or
 * none), then a barrier. When the buffers the collective reads are registered on every rank,
 * each rank reads its peers' buffers in place through its own mappings, with no staging copy:
 *   reduce_scatter  reduce block r of every rank's send, in rank order, into my recv
 *   all_gather      copy every rank's send into my recv
 *   all_reduce      reduce slice r of every rank's send into slice r of every rank's recv
 *                   (only rank r reads or writes slice r anywhere, so in place is safe)
 *   broadcast       copy the root's send
 * A closing barrier keeps every buffer untouched by its owner until all peers have read it.
 * Otherwise every rank takes the staged path (shm_coll.c): the decision reads the same
 * published descriptors everywhere. Reductions use the same zs_reduce_* in rank order as the
 * staged path, element by element, so both paths give the same bits. */
#include "comm/shm.h"
#include "core/status.h"

#include <stdint.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define ALIGN_ELEMS 32 /* slice boundaries on 64/128-byte multiples: no shared cache lines */
#define MAX_WORLD 1024

static size_t slice_bound(size_t len, int q, int n) {
    if (q >= n) return len;
    return (len * (size_t)q / (size_t)n) / ALIGN_ELEMS * ALIGN_ELEMS;
}

static void copy(void *dst, const void *src, size_t nbytes) {
    if (dst != src && nbytes) memcpy(dst, src, nbytes);
}

void shm_copy_stream(void *dst, const void *src, size_t nbytes) {
#if defined(__AVX__)
    char *d = dst;
    const char *p = src;
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    if (dst == src || nbytes < 4096) {
        copy(dst, src, nbytes);
        return;
    }
    memcpy(d, p, head);
    size_t i = head;
    for (; i + 32 <= nbytes; i += 32)
        _mm256_stream_si256((__m256i *)(void *)(d + i),
                            _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
    memcpy(d + i, p + i, nbytes - i);
    _mm_sfence(); /* order the streaming stores before the signal that publishes them */
#else
    copy(dst, src, nbytes);
#endif
}

/* The reduction of the N inputs in[] (rank order) into the nout outputs out[]. */
static void reduce(const zs_coll *op, int n, char *const *out, int nout, char *const *in,
                   size_t count, int stream) {
    const int avg = op->op == ZS_REDUCE_AVG;
    if (op->dt == ZS_DTYPE_F32)
        zs_reduce_f32((float *const *)out, nout, (const float *const *)in, n, count, avg, n,
                      stream);
    else
        zs_reduce_bf16((uint16_t *const *)out, nout, (const uint16_t *const *)in, n, count, avg, n,
                       stream);
}

/* Push: rank r reduces slice r of every rank's send and writes the result straight into
 * slice r of every rank's recv. Only rank r reads or writes slice r anywhere, so in place
 * (send == recv on some or all ranks) is safe, and nothing waits between the publish
 * barrier and the closing one. Each rank reads its slice of the N inputs once and writes N
 * copies of the result, with no all-gather read of the other slices (3/4 of the message at
 * 4 ranks) that reducing into its own recv and then copying would need. */
static void all_reduce(shm_ctx *s, const zs_coll *op, char *const *src, char *const *dst) {
    const int n = s->world, r = s->rank;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const size_t lo = slice_bound(count, r, n), hi = slice_bound(count, r + 1, n);
    char *in[MAX_WORLD], *out[MAX_WORLD];
    for (int p = 0; p < n; p++) {
        in[p] = src[p] + lo * esz;
        out[p] = dst[p] + lo * esz;
    }
    reduce(op, n, out, n, in, hi - lo, count * esz >= SHM_STREAM_MIN);
}

/* Windows of each rank's block, every rank in step (a barrier per window), so each block's
 * window is read from memory once and by the other ranks from the last-level cache. */
static zs_status all_gather(shm_ctx *s, const zs_coll *op, char *const *src, uint32_t base) {
    zs_status st = ZS_OK;
    const int n = s->world, r = s->rank;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const size_t W = s->slot_bytes / esz / ALIGN_ELEMS * ALIGN_ELEMS;
    char *recv = op->recv;
    void (*mv)(void *, const void *, size_t) =
        count * esz * (size_t)n >= SHM_STREAM_MIN ? shm_copy_stream : copy;
    for (size_t k = 0, j0 = 0; j0 < count; k++, j0 += W) {
        const size_t len = count - j0 < W ? count - j0 : W;
        if (k > 0) ZS_CHECK(shm_wait_all(s, base + (uint32_t)k));
        for (int q = 0; q < n; q++) {
            const char *from = q == r ? (const char *)op->send : src[q];
            mv(recv + ((size_t)q * count + j0) * esz, from + j0 * esz, len * esz);
        }
        shm_signal(s);
    }
fail:
    return st;
}

/* Bytes of send and recv that the collective touches on each rank. */
static void extents(const zs_coll *op, int n, size_t *sbytes, size_t *rbytes) {
    size_t b = op->count * zs_dtype_size(op->dt);
    *sbytes = op->kind == ZS_COLL_REDUCE_SCATTER ? b * (size_t)n : b;
    *rbytes = op->kind == ZS_COLL_ALL_GATHER ? b * (size_t)n : b;
}

/* Peer p's buffer (allocation id, offset off, nbytes long) as mapped here. */
static zs_status resolve(shm_ctx *s, int p, uint32_t id, uint64_t off, size_t nbytes,
                         const char *which, char **out) {
    zs_status st = ZS_OK;
    const shm_region *g = shm_reg_by_id(s, id);
    ZS_REQUIRE(g && g->view[p], ZS_ERR_INVALID,
               "rank %d's %s buffer lies in registered allocation #%u, which this rank has "
               "freed (zs_comm_mem_free must be called in the same order on every rank)",
               p, which, id);
    ZS_REQUIRE(off <= g->view_bytes[p] && nbytes <= g->view_bytes[p] - off, ZS_ERR_INTERNAL,
               "rank %d's %s buffer runs past its registered allocation #%u", p, which, id);
    *out = g->view[p] + off;
fail:
    return st;
}

static void publish(shm_ctx *s, const zs_coll *op, struct shm_desc *d) {
    size_t sb, rb, off = 0;
    const shm_region *g;
    extents(op, s->world, &sb, &rb);
    int src = op->kind != ZS_COLL_BROADCAST || op->root == s->rank;
    g = src ? shm_reg_find(s, op->send, sb, &off) : NULL;
    d->send_id = g ? g->id : 0;
    d->send_off = off;
    g = shm_reg_find(s, op->recv, rb, &off);
    d->recv_id = g ? g->id : 0;
    d->recv_off = off;
}

zs_status shm_direct(shm_ctx *s, const zs_coll *op, int *done) {
    zs_status st = ZS_OK;
    const int n = s->world, r = s->rank, root = op->kind == ZS_COLL_BROADCAST ? op->root : -1;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const uint32_t base = s->progress;
    char *src[MAX_WORLD], *dst[MAX_WORLD], *in[MAX_WORLD];
    char *recv = op->recv;
    size_t sb, rb;
    int direct = 1;
    *done = 0;
    /* Phases depend only on the collective (allocations are collective), never on buffers. */
    if (s->reg_seq == 0 || count == 0) return ZS_OK;
    extents(op, n, &sb, &rb);
    const int parity = (int)(s->pub_n++ & 1);
    publish(s, op, &s->hdr->ranks[r].desc[parity]);
    shm_signal(s);
    ZS_CHECK(shm_wait_all(s, base + 1));
    for (int p = 0; p < n && direct; p++) {
        const struct shm_desc *d = &s->hdr->ranks[p].desc[parity];
        int need_send = root < 0 || p == root, need_recv = op->kind == ZS_COLL_ALL_REDUCE;
        if ((need_send && !d->send_id) || (need_recv && !d->recv_id)) direct = 0;
        if (direct && need_send)
            ZS_CHECK(resolve(s, p, d->send_id, d->send_off, sb, "send", &src[p]));
        if (direct && need_recv)
            ZS_CHECK(resolve(s, p, d->recv_id, d->recv_off, rb, "recv", &dst[p]));
    }
    if (!direct) return ZS_OK;
    *done = 1;
    switch (op->kind) {
    case ZS_COLL_REDUCE_SCATTER:
        for (int p = 0; p < n; p++)
            in[p] = src[p] + (size_t)r * count * esz;
        reduce(op, n, &recv, 1, in, count, count * esz >= SHM_STREAM_MIN);
        shm_signal(s);
        break;
    case ZS_COLL_BROADCAST:
        copy(recv, src[root], count * esz);
        shm_signal(s);
        break;
    case ZS_COLL_ALL_GATHER:
        ZS_CHECK(all_gather(s, op, src, base + 1));
        break;
    default:
        all_reduce(s, op, src, dst);
        shm_signal(s); /* my slice is in every recv */
        break;
    }
    /* Closing barrier (all_gather's last window ends with one): no rank returns, letting its
     * caller reuse its buffers, while a peer may still read them. */
    ZS_CHECK(shm_wait_all(s, s->progress));
fail:
    return st;
}

/* bf16 gradients (--reduce-dtype bf16; the mixed-precision column of docs/architecture.md
 * "Memory accounting"): gradients are stored and reduced in bf16. Backward still accumulates
 * each unit into an fp32 buffer from the gradient pool (a tied unit's uses add up there in
 * full precision); when the unit's backward ends, that buffer is rounded to bf16 once:
 *   ddp, 1  into the persistent bf16 full gradients (added to them after the first
 *           micro-batch), all-reduced / reduce-scattered in bf16 after the last one;
 *   2, 3    into a slot of the bf16 reduction pool (the fp32 slot is free again at once),
 *           reduce-scattered in bf16 as each unit ends, and folded into the bf16 gradient
 *           shard (added to it after the first micro-batch).
 * bf16 collectives sum in fp32 and round once, so an all-reduce's slice is the bits of the
 * matching reduce-scatter and every stage steps on the same gradient bits.
 *
 * The squared norm (sumsq16) and Adam (adamw_segs16) read the bf16 gradients directly,
 * widening each element as they go, one launch per unit; the norm keeps one partial sum per
 * ZS_ENGINE_CAST_CHUNK elements from the start of the rank's shard, the same offsets on every
 * stage, so the sums give the same bits everywhere. Accumulating into bf16 (micro-batches after
 * the first) goes through one small fp32 scratch (ZS_ENGINE_CAST_CHUNK elements, twice) chunk
 * by chunk, so nothing of the size of a unit is ever widened. */
#include "shard/engine_internal.h"

#include "core/alloc.h"
#include "core/status.h"

zs_status zs_engine_grad16_create(zs_engine_t *e) {
    if (!e->g16) return ZS_OK;
    return e->dev->alloc(ZS_MEM_WORKSPACE, 2 * ZS_ENGINE_CAST_CHUNK * sizeof(float),
                         "bf16 gradient scratch", (void **)&e->gscratch);
}

void zs_engine_grad16_destroy(zs_engine_t *e) {
    e->dev->free(e->gscratch);
    e->gscratch = NULL;
}

static size_t chunk_len(size_t n, size_t i) {
    return n - i < ZS_ENGINE_CAST_CHUNK ? n - i : ZS_ENGINE_CAST_CHUNK;
}

zs_status zs_engine_acc16(zs_engine_t *e, zs_bf16 *dst, const void *src, zs_dtype src_dt,
                          size_t n) {
    zs_status st = ZS_OK;
    float *a = e->gscratch, *b = e->gscratch + ZS_ENGINE_CAST_CHUNK;
    for (size_t i = 0; i < n; i += ZS_ENGINE_CAST_CHUNK) {
        size_t c = chunk_len(n, i);
        const float *add = b;
        if (src_dt == ZS_DTYPE_BF16)
            ZS_CHECK(e->ops->cast(e->stream, b, ZS_DTYPE_F32, (const zs_bf16 *)src + i,
                                  ZS_DTYPE_BF16, c));
        else
            add = (const float *)src + i;
        ZS_CHECK(e->ops->cast(e->stream, a, ZS_DTYPE_F32, dst + i, ZS_DTYPE_BF16, c));
        ZS_CHECK(e->ops->axpy(e->stream, a, 1.0f, add, c));
        ZS_CHECK(e->ops->cast(e->stream, dst + i, ZS_DTYPE_BF16, a, ZS_DTYPE_F32, c));
    }
fail:
    return st;
}

int zs_engine_sumsq16_parts(size_t n) {
    return n ? (int)((n + ZS_ENGINE_CAST_CHUNK - 1) / ZS_ENGINE_CAST_CHUNK) : 1;
}

/* One part per cast chunk, as when each chunk was widened into the scratch and summed: the
 * parts keep their bits (and the host adds them as before), in one pass over the shard. */
zs_status zs_engine_sumsq16(zs_engine_t *e, const zs_bf16 *g, size_t n, double *out) {
    return e->ops->sumsq16(e->stream, out, g, n, ZS_ENGINE_CAST_CHUNK);
}

/* The unit's fp32 gradients in pool slot k are complete for this micro-batch (ddp, 1):
 * round them into the persistent bf16 gradients and free the slot. */
zs_status zs_engine_fold16(zs_engine_t *e, int unit, int k) {
    zs_status st = ZS_OK;
    slot *s = &e->gslots[k];
    size_t P = (size_t)e->layout->units[unit].padded;
    if (e->micro_k > 0)
        ZS_CHECK(zs_engine_acc16(e, e->units[unit].g16, s->buf, ZS_DTYPE_F32, P));
    else
        ZS_CHECK(
            e->ops->cast(e->stream, e->units[unit].g16, ZS_DTYPE_BF16, s->buf, ZS_DTYPE_F32, P));
    s->unit = -1;
    s->state = SLOT_EMPTY;
    e->units[unit].gslot = -1;
fail:
    return st;
}

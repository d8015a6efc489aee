/* The bf16 compute copy (--dtype bf16, docs/architecture.md "Precision"): after every step each
 * rank rounds its fp32 master values to bf16 and the copy is all-gathered as bf16 (ZeRO-1/2 into
 * the full bf16 parameters, in place; ZeRO-3 keeps the bf16 shard and gathers it per unit on
 * acquire; zs_engine_regather_unit, engine_step.c). On the CPU bf16 is storage only: an acquired unit is widened into one fp32 buffer, and
 * the model computes in fp32 on values that are exactly the bf16 ones. Every stage rounds the same
 * fp32 masters at the same point, so every stage computes on the same bits. */
#include "shard/engine_internal.h"

#include "core/alloc.h"
#include "core/status.h"

zs_status zs_engine_bf16_create(zs_engine_t *e) {
    zs_status st = ZS_OK;
    int64_t cap = 0;
    if (!e->bf16) return ZS_OK;
    for (int u = 0; u < e->layout->n_units; u++)
        if (e->layout->units[u].padded > cap) cap = e->layout->units[u].padded;
    /* Registered: visit_params gathers fp32 master shards into it. */
    ZS_CHECK(
        zs_engine_buf_alloc(e, ZS_MEM_GATHERED, (size_t)cap * 4, "fp32 compute params", &e->cbuf));
    e->cunit = -1;
fail:
    return st;
}

void zs_engine_bf16_destroy(zs_engine_t *e) {
    zs_engine_buf_free(e, e->cbuf);
    e->cbuf = NULL;
}

zs_status zs_engine_widen(zs_engine_t *e, int unit, const zs_bf16 *src, float **params) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(!e->c_in_use, ZS_ERR_INTERNAL,
               "engine: unit %s acquired while unit %s is still in use (a bf16 compute copy "
               "widens one unit at a time)",
               e->layout->units[unit].name, e->layout->units[e->cunit].name);
    if (e->cunit != unit) {
        ZS_CHECK(e->ops->cast(e->stream, e->cbuf, ZS_DTYPE_F32, src, ZS_DTYPE_BF16,
                              (size_t)e->layout->units[unit].padded));
        e->cunit = unit;
    }
    e->c_in_use = 1;
    /* src stays as it is while the unit is in use (its slot is not evicted, a step waits for
     * the release), and so does the buffer, so the GEMMs may read the weights' bf16 values
     * from src instead of rounding the buffer's again (docs/cuda.md "GEMM operands"). */
    if (e->ops->twin16)
        e->ops->twin16(e->stream, e->cbuf, src, (size_t)e->layout->units[unit].padded);
    *params = e->cbuf;
fail:
    return st;
}

void zs_engine_unwiden(zs_engine_t *e) {
    if (e->c_in_use && e->ops->twin16) e->ops->twin16(e->stream, NULL, NULL, 0);
    e->c_in_use = 0;
}

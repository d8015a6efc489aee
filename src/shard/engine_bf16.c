/* The bf16 compute copy (--dtype bf16, docs/architecture.md "Precision"): after every step each
 * rank rounds its fp32 master values to bf16 and the copy is all-gathered as bf16 (ZeRO-1/2 into
 * the full bf16 parameters, in place; ZeRO-3 keeps the bf16 shard and gathers it per unit on
 * acquire; zs_engine_regather_unit, engine_step.c). An acquired unit is widened into one fp32
 * buffer, and the model computes in fp32 on values that are exactly the bf16 ones. On a table
 * whose bf16 GEMMs read weights from the bf16 copy itself (ops.h twin16), the tensors the model
 * reads only so (zs_tensor_desc.twin_read: GEMM weights, embedding tables) are not widened.
 * Every stage rounds the same fp32 masters at the same point, so every stage computes on the
 * same bits. */
#include "shard/engine_internal.h"

#include "core/alloc.h"
#include "core/status.h"

#include <math.h>

/* The ranges r[0, 2 nr) of src widened into the compute buffer. */
static zs_status widen_list(zs_engine_t *e, const zs_bf16 *src, const int64_t *r, int nr) {
    zs_status st = ZS_OK;
    if (e->ops->widen_ranges) return e->ops->widen_ranges(e->stream, e->cbuf, src, r, nr);
    for (int i = 0; i < nr; i++)
        ZS_CHECK(e->ops->cast(e->stream, e->cbuf + r[2 * i], ZS_DTYPE_F32, src + r[2 * i],
                              ZS_DTYPE_BF16, (size_t)r[2 * i + 1]));
fail:
    return st;
}

/* Whether widening may skip the twin-read tensors (zs_tensor_desc.twin_read): the table
 * registers twins and its GEMMs, in bf16, read their weights from them. */
static int twin_skips(const zs_engine_t *e) {
    return e->ops->twin16 && e->ops->gemm_math == ZS_MATH_BF16;
}

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
    /* Where widening skips the twin-read tensors, their fp32 places start as NaN, so a read
     * that should have gone to the twin poisons the loss instead of passing unseen (a later
     * unit of another layout may still leave its values there). */
    if (twin_skips(e)) ZS_CHECK(e->ops->fill(e->stream, e->cbuf, NAN, (size_t)cap));
fail:
    return st;
}

void zs_engine_bf16_destroy(zs_engine_t *e) {
    zs_engine_buf_free(e, e->cbuf);
    e->cbuf = NULL;
}

/* Widen the unit's tensors but the twin-read ones: each run of neighbouring tensors (the
 * alignment gaps between them with them) a range of one widen_ranges launch, or a cast each
 * where the table has no such op. Only those are read as fp32. */
static zs_status widen_some(zs_engine_t *e, int unit, const zs_bf16 *src) {
    zs_status st = ZS_OK;
    const zs_unit_desc *ud = &e->layout->units[unit];
    const zs_tensor_desc *t = &e->layout->tensors[ud->first_tensor];
    int64_t r[2 * ZS_WIDEN_RANGES];
    int nr = 0;
    for (int i = 0; i < ud->n_tensors; i++) {
        if (t[i].twin_read) continue;
        if (nr && !t[i - 1].twin_read) { /* continues the run of tensor i - 1 */
            r[2 * nr - 1] = t[i].offset + t[i].count - r[2 * nr - 2];
        } else {
            if (nr == ZS_WIDEN_RANGES) { /* full: widen these first */
                ZS_CHECK(widen_list(e, src, r, nr));
                nr = 0;
            }
            r[2 * nr] = t[i].offset;
            r[2 * nr + 1] = t[i].count;
            nr++;
        }
    }
    ZS_CHECK(widen_list(e, src, r, nr));
fail:
    return st;
}

zs_status zs_engine_widen(zs_engine_t *e, int unit, const zs_bf16 *src, float **params) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(!e->c_in_use, ZS_ERR_INTERNAL,
               "engine: unit %s acquired while unit %s is still in use (a bf16 compute copy "
               "widens one unit at a time)",
               e->layout->units[unit].name, e->layout->units[e->cunit].name);
    if (e->cunit != unit) {
        if (twin_skips(e))
            ZS_CHECK(widen_some(e, unit, src));
        else
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

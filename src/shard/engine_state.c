/* The engine's state: parameter initialisation (the same values on any world size and
 * stage), the state ranges that checkpoints read and write, and the parameter hash
 * (docs/architecture.md "Determinism", "Checkpoints"). */
#include "shard/engine_internal.h"

#include "comm/device.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_engine_init_params(zs_engine_t *e, uint64_t seed) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *t = &l->tensors[ti];
        unit_state *us = &e->units[t->unit];
        /* Offloaded masters are host memory: the CPU's ops initialise them, to the same
         * values. */
        const zs_ops *ops = us->off ? e->hops : e->ops;
        zs_stream_t *s = us->off ? NULL : e->stream;
        /* This rank initialises only the part of the tensor inside its optimizer range. */
        int64_t lo = t->offset > us->opt_base ? t->offset : us->opt_base;
        int64_t hi = t->offset + t->count;
        if (hi > us->opt_base + us->opt_n) hi = us->opt_base + us->opt_n;
        if (hi <= lo) continue;
        float *p = us->master + (lo - us->opt_base);
        size_t n = (size_t)(hi - lo);
        int64_t i0 = lo - t->offset; /* element index inside the tensor */
        switch (t->init) {
        case ZS_INIT_ZEROS:
            ZS_CHECK(ops->fill(s, p, 0.0f, n));
            break;
        case ZS_INIT_ONES:
            ZS_CHECK(ops->fill(s, p, 1.0f, n));
            break;
        case ZS_INIT_NORMAL:
            /* Philox stream = tensor index, counter = element index: the value of element i
             * does not depend on which rank, world size or stage computes it. */
            ZS_CHECK(ops->init_normal(s, p, n, seed, (uint64_t)ti, (uint64_t)i0, t->init_std));
            if (t->zero_from < i0 + (int64_t)n) {
                int64_t z = t->zero_from > i0 ? t->zero_from : i0;
                ZS_CHECK(ops->fill(s, p + (z - i0), 0.0f, (size_t)(i0 + (int64_t)n - z)));
            }
            break;
        case ZS_INIT_VALUES: /* written by the module (src/shard/module.c) after this */
            break;
        }
    }
    ZS_CHECK(e->ops->sync(e->stream));
    ZS_CHECK(zs_engine_regather_params(e, 1));
fail:
    return st;
}

/* ---- state access for checkpoints ------------------------------------------------------ */

void zs_engine_state_range(const zs_engine_t *e, int unit, int64_t *lo, int64_t *n) {
    *lo = e->units[unit].opt_base;
    *n = e->units[unit].opt_n;
}

/* The device pointer to element `at` of state kind of unit, after checking the range. */
static zs_status state_at(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                          float **out) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(unit >= 0 && unit < e->layout->n_units && kind >= 0 && kind < ZS_STATE_NKINDS,
               ZS_ERR_INTERNAL, "engine: unit %d, state kind %d out of range", unit, kind);
    unit_state *us = &e->units[unit];
    ZS_REQUIRE(count >= 0 && at >= us->opt_base && at + count <= us->opt_base + us->opt_n,
               ZS_ERR_INTERNAL,
               "engine: state [%lld, %lld) of unit %s is outside this rank's range", (long long)at,
               (long long)(at + count), e->layout->units[unit].name);
    float *base = kind == ZS_STATE_MASTER ? us->master : kind == ZS_STATE_ADAM_M ? us->m : us->v;
    *out = base + (at - us->opt_base);
    ZS_CHECK(zs_engine_drain(e));
    ZS_CHECK(zs_engine_offload_sync(e)); /* no upload reads the host state any more */
fail:
    return st;
}

zs_status zs_engine_state_read(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                               float *host) {
    zs_status st = ZS_OK;
    float *p = NULL;
    ZS_CHECK(state_at(e, unit, kind, at, count, &p));
    if (e->units[unit].off) { /* host memory */
        memcpy(host, p, (size_t)count * sizeof(float));
        return ZS_OK;
    }
    ZS_CHECK(e->dev->copy_d2h(e->stream, host, p, (size_t)count * sizeof(float)));
    ZS_CHECK(e->dev->stream_sync(e->stream));
fail:
    return st;
}

zs_status zs_engine_state_write(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                                const float *host) {
    zs_status st = ZS_OK;
    float *p = NULL;
    ZS_CHECK(state_at(e, unit, kind, at, count, &p));
    if (e->units[unit].off) { /* host memory; state_changed uploads the masters */
        memcpy(p, host, (size_t)count * sizeof(float));
        return ZS_OK;
    }
    ZS_CHECK(e->dev->copy_h2d(e->stream, p, host, (size_t)count * sizeof(float)));
    ZS_CHECK(e->dev->stream_sync(e->stream)); /* the caller may reuse host at once */
fail:
    return st;
}

zs_status zs_engine_state_changed(zs_engine_t *e) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_engine_drain(e));
    ZS_CHECK(zs_engine_regather_params(e, 1));
fail:
    return st;
}

/* ---- parameter hash ----------------------------------------------------------------------- */

zs_status zs_engine_unit_values(zs_engine_t *e, int u, float *host) {
    zs_status st = ZS_OK;
    const zs_unit_desc *ud = &e->layout->units[u];
    unit_state *us = &e->units[u];
    ZS_CHECK(zs_engine_drain(e));
    /* ZeRO-3 gathers the unit into the largest pool slot, which the drain left empty: no
     * extra memory, so a run that fits its cap also fits while hashing or saving. With a bf16
     * compute copy the fp32 masters are gathered into the (fp32) compute buffer instead. */
    int gather = e->bf16 ? e->cfg.stage != ZS_STAGE_DDP : !e->persist_params;
    const float *src = e->bf16 ? us->master : us->param;
    if (e->bf16 && us->off && !gather) { /* DDP: the whole unit's master, on the host */
        ZS_CHECK(zs_engine_offload_sync(e));
        memcpy(host, us->master, (size_t)ud->padded * sizeof(float));
        return ZS_OK;
    }
    if (gather) {
        float *full = e->bf16 ? e->cbuf : e->pslots[0].buf;
        const float *mine = e->bf16 ? us->master : us->dparam;
        zs_comm_work_t *w = NULL;
        e->cunit = -1;
        if (us->off && (e->bf16 || e->offload_params)) {
            /* The host master goes up into this rank's slice of the buffer, gathered in
             * place. */
            float *slice = full + us->opt_base;
            ZS_CHECK(e->dev->copy_h2d(e->stream, slice, us->master, (size_t)ud->shard * 4));
            mine = slice;
        }
        ZS_CHECK(zs_engine_gather(e, mine, full, (size_t)ud->shard, ZS_DTYPE_F32, ud->name, &w));
        ZS_CHECK(zs_engine_wait_stream(e, &w));
        src = full;
    }
    ZS_CHECK(e->dev->copy_d2h(e->stream, host, src, (size_t)ud->padded * sizeof(float)));
    ZS_CHECK(e->dev->stream_sync(e->stream));
fail:
    return st;
}

zs_status zs_engine_visit_params(zs_engine_t *e, zs_param_visitor fn, void *ctx) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    int64_t cap = 0;
    for (int u = 0; u < l->n_units; u++)
        if (l->units[u].padded > cap) cap = l->units[u].padded;
    float *host = malloc((size_t)cap * sizeof *host);
    ZS_REQUIRE(host, ZS_ERR_OOM, "engine: out of memory visiting the parameters");
    for (int u = 0; u < l->n_units; u++) {
        ZS_CHECK(zs_engine_unit_values(e, u, host));
        const zs_unit_desc *ud = &l->units[u];
        for (int i = 0; i < ud->n_tensors; i++) {
            const zs_tensor_desc *td = &l->tensors[ud->first_tensor + i];
            ZS_CHECK(fn(td, host + td->offset, ctx));
        }
    }
fail:
    free(host);
    return st;
}

static zs_status hash_tensor(const zs_tensor_desc *td, const float *data, void *ctx) {
    const unsigned char *b = (const unsigned char *)data;
    uint64_t x = *(uint64_t *)ctx;
    size_t n = (size_t)td->count * 4;
    for (size_t i = 0; i < n; i++) {
        x ^= b[i];
        x *= 0x100000001b3ull;
    }
    *(uint64_t *)ctx = x;
    return ZS_OK;
}

zs_status zs_engine_param_hash(zs_engine_t *e, uint64_t *hash) {
    uint64_t h = 0xcbf29ce484222325ull;
    zs_status st = zs_engine_visit_params(e, hash_tensor, &h);
    *hash = h;
    return st;
}

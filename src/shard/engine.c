/* Shard engine, single-process form: world size 1, where every stage keeps the full unit
 * locally. Multi-rank stages (ZeRO-1/2/3 with gathers and reduce-scatters) plug in behind the
 * same calls. */
#include "shard/engine.h"

#include "core/alloc.h"
#include "core/philox.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct unit_state {
    float *param; /* full fp32 parameters: with one rank these are the master copy */
    float *grad;  /* full fp32 gradients */
    float *m, *v; /* Adam moments */
} unit_state;

struct zs_engine {
    const zs_layout *layout;
    const zs_ops *ops;
    zs_stream_t *stream;
    zs_engine_config cfg;
    unit_state *units;
};

zs_engine_config zs_engine_config_default(void) {
    zs_engine_config c;
    memset(&c, 0, sizeof c);
    c.stage = ZS_STAGE_DDP;
    c.rank = 0;
    c.world_size = 1;
    c.prefetch = 1;
    return c;
}

zs_status zs_engine_create(const zs_layout *layout, const zs_ops *ops, zs_stream_t *stream,
                           const zs_engine_config *cfg, zs_engine_t **out) {
    zs_status st = ZS_OK;
    zs_engine_t *e = NULL;
    *out = NULL;
    ZS_REQUIRE(cfg->world_size == 1, ZS_ERR_UNSUPPORTED,
               "engine: world size %d needs the communication layer (not in this build)",
               cfg->world_size);
    ZS_REQUIRE(layout->world_size == cfg->world_size, ZS_ERR_INTERNAL,
               "engine: layout finalized for %d ranks, engine has %d", layout->world_size,
               cfg->world_size);
    e = calloc(1, sizeof *e);
    ZS_REQUIRE(e, ZS_ERR_OOM, "engine: out of memory");
    e->layout = layout;
    e->ops = ops;
    e->stream = stream;
    e->cfg = *cfg;
    e->units = calloc((size_t)layout->n_units, sizeof *e->units);
    ZS_REQUIRE(e->units, ZS_ERR_OOM, "engine: out of memory");
    for (int u = 0; u < layout->n_units; u++) {
        size_t nb = (size_t)layout->units[u].padded * sizeof(float);
        unit_state *us = &e->units[u];
        ZS_CHECK(zs_alloc(ZS_MEM_PARAM, nb, layout->units[u].name, (void **)&us->param));
        ZS_CHECK(zs_alloc(ZS_MEM_GRAD, nb, layout->units[u].name, (void **)&us->grad));
        ZS_CHECK(zs_alloc(ZS_MEM_OPTIM_STATE, nb, "adam m", (void **)&us->m));
        ZS_CHECK(zs_alloc(ZS_MEM_OPTIM_STATE, nb, "adam v", (void **)&us->v));
    }
    *out = e;
    return ZS_OK;
fail:
    zs_engine_destroy(e);
    return st;
}

void zs_engine_destroy(zs_engine_t *e) {
    if (!e) return;
    if (e->units)
        for (int u = 0; u < e->layout->n_units; u++) {
            zs_free(e->units[u].param);
            zs_free(e->units[u].grad);
            zs_free(e->units[u].m);
            zs_free(e->units[u].v);
        }
    free(e->units);
    free(e);
}

const zs_layout *zs_engine_layout(const zs_engine_t *e) {
    return e->layout;
}

zs_status zs_engine_init_params(zs_engine_t *e, uint64_t seed) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *t = &l->tensors[ti];
        float *p = e->units[t->unit].param + t->offset;
        switch (t->init) {
        case ZS_INIT_ZEROS: ZS_CHECK(e->ops->fill(e->stream, p, 0.0f, (size_t)t->count)); break;
        case ZS_INIT_ONES: ZS_CHECK(e->ops->fill(e->stream, p, 1.0f, (size_t)t->count)); break;
        case ZS_INIT_NORMAL:
            /* The Philox stream is the tensor's index: adding a tensor later in the layout
             * never changes the values of the ones before it. */
            ZS_CHECK(e->ops->init_normal(e->stream, p, (size_t)t->count, seed, (uint64_t)ti, 0,
                                         t->init_std));
            if (t->zero_from < t->count)
                ZS_CHECK(e->ops->fill(e->stream, p + t->zero_from, 0.0f,
                                      (size_t)(t->count - t->zero_from)));
            break;
        }
    }
    ZS_CHECK(e->ops->sync(e->stream));
fail:
    return st;
}

static zs_status check_unit(const zs_engine_t *e, int unit) {
    if (unit < 0 || unit >= e->layout->n_units)
        return zs_error(ZS_ERR_INTERNAL, "engine: unit %d out of range [0, %d)", unit,
                        e->layout->n_units);
    return ZS_OK;
}

zs_status zs_engine_forward_begin(zs_engine_t *e, int unit, float **params) {
    zs_status st = check_unit(e, unit);
    if (st == ZS_OK) *params = e->units[unit].param;
    return st;
}

zs_status zs_engine_forward_end(zs_engine_t *e, int unit) {
    return check_unit(e, unit);
}

zs_status zs_engine_backward_begin(zs_engine_t *e, int unit, float **params, float **grads) {
    zs_status st = check_unit(e, unit);
    if (st == ZS_OK) {
        *params = e->units[unit].param;
        *grads = e->units[unit].grad;
    }
    return st;
}

zs_status zs_engine_backward_end(zs_engine_t *e, int unit) {
    return check_unit(e, unit);
}

zs_status zs_engine_zero_grad(zs_engine_t *e) {
    zs_status st = ZS_OK;
    for (int u = 0; u < e->layout->n_units; u++)
        ZS_CHECK(e->ops->fill(e->stream, e->units[u].grad, 0.0f,
                              (size_t)e->layout->units[u].padded));
fail:
    return st;
}

zs_status zs_engine_step(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t,
                         float *grad_norm) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    /* Norm per unit shard, summed in unit order: the same decomposition every stage and
     * world size uses, so clipping is identical across stages. */
    double sumsq = 0.0;
    for (int u = 0; u < l->n_units; u++) {
        double part = 0.0;
        ZS_CHECK(e->ops->sumsq(e->stream, &part, e->units[u].grad, (size_t)l->units[u].shard));
        sumsq += part;
    }
    double norm = sqrt(sumsq);
    *grad_norm = (float)norm;
    ZS_REQUIRE(isfinite(norm), ZS_ERR_INVALID,
               "gradient norm is not finite at step %d (diverged: lower --lr?)", t);
    float scale = zs_clip_scale(norm, clip);
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *td = &l->tensors[ti];
        unit_state *us = &e->units[td->unit];
        int64_t o = td->offset;
        ZS_CHECK(zs_adamw_update(e->ops, e->stream, us->param + o, us->grad + o, us->m + o,
                                 us->v + o, (size_t)td->count, h, td->decay, scale, t));
    }
    ZS_CHECK(e->ops->sync(e->stream));
fail:
    return st;
}

uint64_t zs_engine_param_hash(zs_engine_t *e) {
    const zs_layout *l = e->layout;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *td = &l->tensors[ti];
        const unsigned char *b = (const unsigned char *)(e->units[td->unit].param + td->offset);
        size_t nb = (size_t)td->count * sizeof(float);
        for (size_t i = 0; i < nb; i++) {
            h ^= b[i];
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

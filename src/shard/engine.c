/* Shard engine: what each stage stores and which collective runs when (DESIGN.md §4).
 *
 *   stage  full params        full grads           master / Adam m, v    collectives
 *   ddp    persistent         persistent           full                  all-reduce per unit
 *   1      persistent         persistent           shard                 reduce-scatter per unit,
 *                                                                        all-gather after step
 *   2      persistent         pooled per unit      shard + grad shard    reduce-scatter per unit
 *                                                                        per micro-batch, gather
 *   3      pooled per unit    pooled per unit      shard + grad shard    gather before fwd/bwd
 *
 * All of it lives in this file and engine_pool.c; models only call begin/end. Collectives
 * are asynchronous and waited only when their result is needed. */
#include "shard/engine_internal.h"

#include "core/alloc.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_engine_buf_alloc(zs_engine_t *e, zs_mem_category cat, size_t nbytes, const char *what,
                              float **out) {
    if (e->comm) return zs_comm_mem_alloc(e->comm, cat, nbytes, what, (void **)out);
    return zs_alloc(cat, nbytes, what, (void **)out);
}

void zs_engine_buf_free(zs_engine_t *e, float *p) {
    if (e->comm)
        zs_comm_mem_free(e->comm, p);
    else
        zs_free(p);
}

zs_engine_config zs_engine_config_default(void) {
    zs_engine_config c;
    memset(&c, 0, sizeof c);
    c.stage = ZS_STAGE_DDP;
    c.world_size = 1;
    c.prefetch = 1;
    c.param_dtype = ZS_DTYPE_F32;
    c.grad_dtype = ZS_DTYPE_F32;
    return c;
}

const zs_layout *zs_engine_layout(const zs_engine_t *e) {
    return e->layout;
}

uint64_t zs_engine_param_gathers(const zs_engine_t *e) {
    return e->n_param_gathers;
}

zs_status zs_engine_create(const zs_layout *layout, const zs_ops *ops, zs_stream_t *stream,
                           const zs_engine_config *cfg, zs_engine_t **out) {
    zs_status st = ZS_OK;
    zs_engine_t *e = NULL;
    *out = NULL;
    ZS_REQUIRE(cfg->world_size >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world_size,
               ZS_ERR_INVALID, "engine: rank %d of world %d", cfg->rank, cfg->world_size);
    ZS_REQUIRE(cfg->world_size == 1 || cfg->comm, ZS_ERR_INVALID,
               "engine: %d ranks need a communicator", cfg->world_size);
    ZS_REQUIRE(layout->world_size == cfg->world_size, ZS_ERR_INTERNAL,
               "engine: layout finalized for %d ranks, engine has %d", layout->world_size,
               cfg->world_size);
    ZS_REQUIRE(cfg->prefetch >= 0 && cfg->prefetch <= 8, ZS_ERR_INVALID,
               "--prefetch %d must be in [0, 8]", cfg->prefetch);
    ZS_REQUIRE(cfg->stage >= ZS_STAGE_DDP && cfg->stage <= ZS_STAGE_3, ZS_ERR_INVALID,
               "engine: unknown stage %d", (int)cfg->stage);
    ZS_REQUIRE(cfg->param_dtype == ZS_DTYPE_F32 || cfg->param_dtype == ZS_DTYPE_BF16,
               ZS_ERR_INVALID, "engine: compute dtype %s is not fp32 or bf16",
               zs_dtype_name(cfg->param_dtype));
    ZS_REQUIRE(cfg->grad_dtype == ZS_DTYPE_F32 || cfg->grad_dtype == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "engine: gradient dtype %s is not fp32 or bf16", zs_dtype_name(cfg->grad_dtype));
    e = calloc(1, sizeof *e);
    ZS_REQUIRE(e, ZS_ERR_OOM, "engine: out of memory");
    e->layout = layout;
    e->ops = ops;
    e->stream = stream;
    e->cfg = *cfg;
    e->comm = cfg->world_size > 1 ? cfg->comm : NULL;
    e->rank = cfg->rank;
    e->world = cfg->world_size;
    e->micro_K = 1;
    e->persist_params = cfg->stage != ZS_STAGE_3;
    e->persist_grads = cfg->stage == ZS_STAGE_DDP || cfg->stage == ZS_STAGE_1;
    e->bf16 = cfg->param_dtype == ZS_DTYPE_BF16;
    e->g16 = cfg->grad_dtype == ZS_DTYPE_BF16;
    e->pool_grads = !e->persist_grads || e->g16;
    e->cunit = -1;
    e->units = calloc((size_t)layout->n_units, sizeof *e->units);
    ZS_REQUIRE(e->units, ZS_ERR_OOM, "engine: out of memory");
    for (int u = 0; u < layout->n_units; u++) {
        const zs_unit_desc *ud = &layout->units[u];
        unit_state *us = &e->units[u];
        size_t P = (size_t)ud->padded, S = (size_t)ud->shard;
        us->pslot = us->gslot = -1;
        /* Allocation order is the layout's on every rank, as the collective
         * zs_comm_mem_alloc requires. */
        if (e->persist_params && e->bf16)
            ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM, P * 2, ud->name, (float **)&us->p16));
        else if (e->persist_params)
            ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM, P * 4, ud->name, &us->param));
        if (e->persist_grads && e->g16)
            ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_GRAD, P * 2, ud->name, (float **)&us->g16));
        else if (e->persist_grads)
            ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_GRAD, P * 4, ud->name, &us->grad));
        else if (e->g16)
            ZS_CHECK(zs_alloc(ZS_MEM_GRAD_SHARD, S * 2, ud->name, (void **)&us->gs16));
        else
            ZS_CHECK(zs_alloc(ZS_MEM_GRAD_SHARD, S * 4, ud->name, (void **)&us->gshard));
        if (e->bf16) {
            /* bf16 compute copy: the fp32 master is its own buffer at every stage (full for
             * DDP, the shard otherwise); ZeRO-3 also keeps the bf16 shard it gathers. */
            int full = cfg->stage == ZS_STAGE_DDP;
            us->opt_base = full ? 0 : (int64_t)e->rank * ud->shard;
            us->opt_n = full ? (int64_t)P : ud->shard;
            ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, (size_t)us->opt_n * 4, ud->name,
                                         &us->master));
            us->master_owned = 1;
            if (!e->persist_params)
                ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, S * 2, ud->name,
                                             (float **)&us->p16));
        } else if (cfg->stage == ZS_STAGE_DDP) {
            /* DDP: every rank updates the full unit; its master copy is the full params. */
            us->master = us->param;
            us->opt_base = 0;
            us->opt_n = (int64_t)P;
        } else {
            us->opt_base = (int64_t)e->rank * ud->shard;
            us->opt_n = ud->shard;
            if (e->persist_params)
                us->master = us->param + us->opt_base; /* fp32: a slice */
            else {
                ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, S * 4, ud->name, &us->master));
                us->master_owned = 1;
            }
        }
        ZS_CHECK(zs_alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam m", (void **)&us->m));
        ZS_CHECK(zs_alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam v", (void **)&us->v));
    }
    ZS_CHECK(zs_engine_pools_create(e));
    *out = e;
    return ZS_OK;
fail:
    zs_engine_destroy(e);
    return st;
}

void zs_engine_destroy(zs_engine_t *e) {
    if (!e) return;
    zs_engine_drain(e);
    if (e->units)
        for (int u = 0; u < e->layout->n_units; u++) {
            unit_state *us = &e->units[u];
            zs_engine_buf_free(e, us->param);
            zs_engine_buf_free(e, (float *)us->p16);
            zs_engine_buf_free(e, us->grad);
            zs_engine_buf_free(e, (float *)us->g16);
            zs_free(us->gshard);
            zs_free(us->gs16);
            if (us->master_owned) zs_engine_buf_free(e, us->master);
            zs_free(us->m);
            zs_free(us->v);
        }
    zs_engine_pools_destroy(e);
    free(e->units);
    free(e->order);
    free(e);
}

/* ---- collectives, with the world of one handled here so callers need not branch ------- */

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

zs_status zs_engine_all_gather_bytes(zs_engine_t *e, const void *send, void *recv, size_t nbytes) {
    if (nbytes % 4)
        return zs_error(ZS_ERR_INTERNAL, "engine: all_gather_bytes of %zu bytes", nbytes);
    if (!e->comm) {
        memcpy(recv, send, nbytes);
        return ZS_OK;
    }
    /* An all-gather only moves bytes, so any 4-byte payload travels as "f32" unchanged. */
    return zs_comm_all_gather(e->comm, send, recv, nbytes / 4, ZS_DTYPE_F32, e->stream,
                              "engine:bytes");
}

zs_status zs_engine_allsum(zs_engine_t *e, double local, double *global) {
    zs_status st = ZS_OK;
    double *all = calloc((size_t)e->world, sizeof *all);
    if (!all) return zs_error(ZS_ERR_OOM, "engine: out of memory");
    ZS_CHECK(zs_engine_all_gather_bytes(e, &local, all, sizeof local));
    double sum = 0.0;
    for (int r = 0; r < e->world; r++)
        sum += all[r]; /* rank order: identical everywhere */
    *global = sum;
fail:
    free(all);
    return st;
}

/* ZeRO-1/2 keep full params: (re)assemble them from every rank's master shard, one
 * asynchronous all-gather per unit (in place: each rank's shard is already in its slice).
 * With wait == 0 each unit's gather is waited for at its next acquisition. */
static zs_status regather_params(zs_engine_t *e, int wait) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    if (e->bf16) return zs_engine_round_params(e, wait);
    if (!e->persist_params || e->cfg.stage == ZS_STAGE_DDP) return ZS_OK;
    for (int u = 0; u < l->n_units; u++) {
        unit_state *us = &e->units[u];
        ZS_CHECK(zs_engine_gather(e, us->master, us->param, (size_t)l->units[u].shard, ZS_DTYPE_F32,
                                  l->units[u].name, &us->work));
        if (wait) ZS_CHECK(zs_engine_wait(&us->work));
    }
fail:
    return st;
}

/* ---- initialisation ------------------------------------------------------------------- */

zs_status zs_engine_init_params(zs_engine_t *e, uint64_t seed) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *t = &l->tensors[ti];
        unit_state *us = &e->units[t->unit];
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
            ZS_CHECK(e->ops->fill(e->stream, p, 0.0f, n));
            break;
        case ZS_INIT_ONES:
            ZS_CHECK(e->ops->fill(e->stream, p, 1.0f, n));
            break;
        case ZS_INIT_NORMAL:
            /* Philox stream = tensor index, counter = element index: the value of element i
             * does not depend on which rank, world size or stage computes it. */
            ZS_CHECK(e->ops->init_normal(e->stream, p, n, seed, (uint64_t)ti, (uint64_t)i0,
                                         t->init_std));
            if (t->zero_from < i0 + (int64_t)n) {
                int64_t z = t->zero_from > i0 ? t->zero_from : i0;
                ZS_CHECK(
                    e->ops->fill(e->stream, p + (z - i0), 0.0f, (size_t)(i0 + (int64_t)n - z)));
            }
            break;
        case ZS_INIT_VALUES: /* written by the module (src/shard/module.c) after this */
            break;
        }
    }
    ZS_CHECK(e->ops->sync(e->stream));
    ZS_CHECK(regather_params(e, 1));
fail:
    return st;
}

/* ---- optimizer step --------------------------------------------------------------------- */

zs_status zs_engine_zero_grad(zs_engine_t *e) {
    zs_status st = ZS_OK;
    if (!e->recorded) {
        e->recording = 1;
        e->n_order = 0;
    }
    if (e->persist_grads && !e->g16) /* bf16: the first micro-batch overwrites */
        for (int u = 0; u < e->layout->n_units; u++)
            ZS_CHECK(e->ops->fill(e->stream, e->units[u].grad, 0.0f,
                                  (size_t)e->layout->units[u].padded));
fail:
    return st;
}

void zs_engine_micro_begin(zs_engine_t *e, int k, int K) {
    e->micro_k = k;
    e->micro_K = K;
}

/* This rank's reduced gradient shard of unit u (fp32 or, with bf16 gradients, bf16),
 * valid once its reduction has finished. */
static const void *grad_shard(zs_engine_t *e, int u) {
    unit_state *us = &e->units[u];
    int64_t mine = (int64_t)e->rank * e->layout->units[u].shard;
    if (e->g16) return e->persist_grads ? (const void *)(us->g16 + mine) : us->gs16;
    return e->persist_grads ? (const void *)(us->grad + mine) : us->gshard;
}

zs_status zs_engine_step(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t,
                         float *grad_norm) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    ZS_CHECK(zs_engine_drain(e));
    e->recording = 0;
    e->recorded = 1;

    /* Global norm through the shard decomposition: each rank sums its shard of every unit
     * in unit order, then the per-rank sums are added in rank order. DDP does the same on
     * its all-reduced gradients, so every stage clips by the same bits. */
    double local = 0.0, part = 0.0;
    for (int u = 0; u < l->n_units; u++) {
        size_t S = (size_t)l->units[u].shard;
        if (e->g16)
            ZS_CHECK(zs_engine_sumsq16(e, grad_shard(e, u), S, &part));
        else
            ZS_CHECK(e->ops->sumsq(e->stream, &part, grad_shard(e, u), S));
        local += part;
    }
    double sumsq = 0.0;
    ZS_CHECK(zs_engine_allsum(e, local, &sumsq));
    double norm = sqrt(sumsq);
    *grad_norm = (float)norm;
    ZS_REQUIRE(isfinite(norm), ZS_ERR_INVALID,
               "gradient norm is not finite at step %d (diverged: lower --lr?)", t);
    float scale = zs_clip_scale(norm, clip);

    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *td = &l->tensors[ti];
        unit_state *us = &e->units[td->unit];
        int64_t lo = td->offset > us->opt_base ? td->offset : us->opt_base;
        int64_t hi = td->offset + td->count;
        if (hi > us->opt_base + us->opt_n) hi = us->opt_base + us->opt_n;
        if (hi <= lo) continue; /* padding and other ranks' elements are never touched */
        int64_t o = lo - us->opt_base;
        size_t n = (size_t)(hi - lo);
        if (e->g16) {
            const zs_bf16 *g = e->persist_grads ? us->g16 + lo : us->gs16 + o;
            ZS_CHECK(zs_engine_adamw16(e, us->master + o, g, us->m + o, us->v + o, n, h, td->decay,
                                       scale, t));
            continue;
        }
        const float *g = e->persist_grads ? us->grad + lo : us->gshard + o;
        ZS_CHECK(zs_adamw_update(e->ops, e->stream, us->master + o, g, us->m + o, us->v + o, n, h,
                                 td->decay, scale, t));
    }
    ZS_CHECK(e->ops->sync(e->stream));
    /* ZeRO-1/2: bring every rank's updated shard back into the full params, asynchronously;
     * the next forward_begin of each unit waits for its own gather only. */
    ZS_CHECK(regather_params(e, 0));
fail:
    return st;
}

/* ---- state access for checkpoints ------------------------------------------------------ */

zs_status zs_engine_state(zs_engine_t *e, int unit, float **master, float **m, float **v,
                          int64_t *lo, int64_t *n) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(unit >= 0 && unit < e->layout->n_units, ZS_ERR_INTERNAL,
               "engine: unit %d out of range", unit);
    ZS_CHECK(zs_engine_drain(e));
    unit_state *us = &e->units[unit];
    *master = us->master;
    *m = us->m;
    *v = us->v;
    *lo = us->opt_base;
    *n = us->opt_n;
fail:
    return st;
}

zs_status zs_engine_state_changed(zs_engine_t *e) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_engine_drain(e));
    ZS_CHECK(regather_params(e, 1));
fail:
    return st;
}

/* ---- parameter hash ----------------------------------------------------------------------- */

zs_status zs_engine_visit_params(zs_engine_t *e, zs_param_visitor fn, void *ctx) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    ZS_CHECK(zs_engine_drain(e));
    /* ZeRO-3 gathers each unit into the largest pool slot, which the drain left empty: no
     * extra memory, so a run that fits its cap also fits while hashing or saving. With a bf16
     * compute copy the fp32 masters are gathered into the (fp32) compute buffer instead. */
    int gather = e->bf16 ? e->cfg.stage != ZS_STAGE_DDP : !e->persist_params;
    float *full = !gather ? NULL : e->bf16 ? e->cbuf : e->pslots[0].buf;
    e->cunit = -1;
    for (int u = 0; u < l->n_units; u++) {
        unit_state *us = &e->units[u];
        const float *p = e->bf16 ? us->master : us->param;
        if (gather) {
            zs_comm_work_t *w = NULL;
            ZS_CHECK(zs_engine_gather(e, us->master, full, (size_t)l->units[u].shard, ZS_DTYPE_F32,
                                      l->units[u].name, &w));
            ZS_CHECK(zs_engine_wait(&w));
            p = full;
        }
        const zs_unit_desc *ud = &l->units[u];
        for (int i = 0; i < ud->n_tensors; i++) {
            const zs_tensor_desc *td = &l->tensors[ud->first_tensor + i];
            ZS_CHECK(fn(td, p + td->offset, ctx));
        }
    }
fail:
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

/* Shard engine: what each stage stores and which collective runs when (docs/architecture.md
 * "Stages").
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

#include "comm/device.h"
#include "core/alloc.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_engine_buf_alloc(zs_engine_t *e, zs_mem_category cat, size_t nbytes, const char *what,
                              float **out) {
    if (e->comm) return zs_comm_mem_alloc(e->comm, cat, nbytes, what, (void **)out);
    return e->dev->alloc(cat, nbytes, what, (void **)out);
}

void zs_engine_buf_free(zs_engine_t *e, float *p) {
    if (e->comm)
        zs_comm_mem_free(e->comm, p);
    else
        e->dev->free(p);
}

/* Partial sums the gradient norm adds per unit: one, or one per cast chunk of a bf16 shard. */
static int norm_parts(const zs_layout *l, int g16) {
    int n = 0;
    for (int u = 0; u < l->n_units; u++)
        n += g16 ? zs_engine_sumsq16_parts((size_t)l->units[u].shard) : 1;
    return n;
}

uint64_t zs_engine_scratch_bytes(const zs_layout *layout, int world, zs_dtype grad_dtype,
                                 uint64_t *comm, uint64_t *workspace) {
    *comm = world > 1 ? 2 * (uint64_t)world * ZS_ENGINE_HOST_CHUNK : 0;
    *workspace = (uint64_t)norm_parts(layout, grad_dtype == ZS_DTYPE_BF16) * sizeof(double);
    return *comm + *workspace;
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

uint64_t zs_engine_param_gathers(const zs_engine_t *e) {
    return e->n_param_gathers;
}

zs_status zs_engine_create(const zs_layout *layout, const zs_ops *ops, const zs_device *dev,
                           zs_stream_t *stream, const zs_engine_config *cfg, zs_engine_t **out) {
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
    e->dev = dev ? dev : zs_device_cpu();
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
            ZS_CHECK(e->dev->alloc(ZS_MEM_GRAD_SHARD, S * 2, ud->name, (void **)&us->gs16));
        else
            ZS_CHECK(e->dev->alloc(ZS_MEM_GRAD_SHARD, S * 4, ud->name, (void **)&us->gshard));
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
        ZS_CHECK(
            e->dev->alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam m", (void **)&us->m));
        ZS_CHECK(
            e->dev->alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam v", (void **)&us->v));
    }
    ZS_CHECK(zs_engine_pools_create(e));
    if (e->comm)
        ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_COMM, 2 * (size_t)e->world * ZS_ENGINE_HOST_CHUNK,
                                     "host-value scratch", (float **)&e->hx));
    e->n_parts = norm_parts(layout, e->g16);
    ZS_CHECK(e->dev->alloc(ZS_MEM_WORKSPACE, (size_t)e->n_parts * sizeof(double),
                           "gradient norm partial sums", (void **)&e->norm_parts));
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
            e->dev->free(us->gshard);
            e->dev->free(us->gs16);
            if (us->master_owned) zs_engine_buf_free(e, us->master);
            e->dev->free(us->m);
            e->dev->free(us->v);
        }
    zs_engine_pools_destroy(e);
    zs_engine_buf_free(e, (float *)e->hx);
    e->dev->free(e->norm_parts);
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
    if (!e->comm) {
        memcpy(recv, send, nbytes);
        return ZS_OK;
    }
    char *in = e->hx, *out = e->hx + (size_t)e->world * ZS_ENGINE_HOST_CHUNK;
    size_t off = 0;
    do { /* once even for 0 bytes: every rank issues the same collectives */
        size_t n = nbytes - off < ZS_ENGINE_HOST_CHUNK ? nbytes - off : ZS_ENGINE_HOST_CHUNK;
        ZS_CHECK(d->copy_h2d(e->stream, in, (const char *)send + off, n));
        /* An all-gather only moves bytes, so any 4-byte payload travels as "f32" unchanged. */
        ZS_CHECK(
            zs_comm_all_gather(e->comm, in, out, n / 4, ZS_DTYPE_F32, e->stream, "engine:bytes"));
        for (int r = 0; r < e->world; r++)
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
    if (!e->comm) return ZS_OK;
    size_t per = ZS_ENGINE_HOST_CHUNK * (size_t)e->world / sizeof(float), k0 = 0;
    float *x = (float *)(void *)e->hx;
    do {
        size_t n = count - k0 < per ? count - k0 : per;
        ZS_CHECK(d->copy_h2d(e->stream, x, buf + k0, n * sizeof(float)));
        ZS_CHECK(
            zs_comm_broadcast(e->comm, x, x, n, ZS_DTYPE_F32, root, e->stream, "engine:bcast"));
        ZS_CHECK(d->copy_d2h(e->stream, buf + k0, x, n * sizeof(float)));
        ZS_CHECK(d->stream_sync(e->stream));
    } while ((k0 += per) < count);
fail:
    return st;
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

/* One fused AdamW launch (adamw_segs, adamw_segs16 for bf16 gradients) over a group of
 * segments, rebased to its first one. */
static zs_status launch_segs(zs_engine_t *e, zs_adamw_segs *g, float *param, const void *grad,
                             float *m, float *v, const zs_adamw_hparams *h, float scale, int t) {
    int64_t off = g->lo[0];
    for (int k = 0; k < g->n; k++) {
        g->lo[k] -= off;
        g->hi[k] -= off;
    }
    zs_status st = e->g16
                       ? e->ops->adamw_segs16(e->stream, param + off, (const zs_bf16 *)grad + off,
                                              m + off, v + off, g, h->lr, h->beta1, h->beta2,
                                              h->eps, h->weight_decay, scale, t)
                       : e->ops->adamw_segs(e->stream, param + off, (const float *)grad + off,
                                            m + off, v + off, g, h->lr, h->beta1, h->beta2, h->eps,
                                            h->weight_decay, scale, t);
    g->n = 0;
    return st;
}

/* AdamW on elements [a, b) of unit u's optimizer range, given as pointers to element a of the
 * master, gradient and moments: the unit's tensors inside it, in launches of at most
 * ZS_ADAMW_SEGS tensors. */
static zs_status step_range(zs_engine_t *e, int u, int64_t a, int64_t b, float *param,
                            const void *grad, float *m, float *v, const zs_adamw_hparams *h,
                            float scale, int t) {
    zs_status st = ZS_OK;
    const zs_unit_desc *ud = &e->layout->units[u];
    int64_t base = e->units[u].opt_base + a, end = e->units[u].opt_base + b;
    zs_adamw_segs g;
    g.n = 0;
    for (int i = 0; i < ud->n_tensors; i++) {
        const zs_tensor_desc *td = &e->layout->tensors[ud->first_tensor + i];
        int64_t lo = td->offset > base ? td->offset : base;
        int64_t hi = td->offset + td->count < end ? td->offset + td->count : end;
        if (hi <= lo) continue; /* padding and other ranks' elements are never touched */
        if (g.n == ZS_ADAMW_SEGS) ZS_CHECK(launch_segs(e, &g, param, grad, m, v, h, scale, t));
        g.lo[g.n] = lo - base;
        g.hi[g.n] = hi - base;
        g.decay[g.n++] = (unsigned char)(td->decay != 0);
    }
    if (g.n) ZS_CHECK(launch_segs(e, &g, param, grad, m, v, h, scale, t));
fail:
    return st;
}

zs_status zs_engine_step(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t,
                         float *grad_norm) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    double *parts = NULL;
    ZS_CHECK(zs_engine_drain(e));
    e->recording = 0;
    e->recorded = 1;

    /* Global norm through the shard decomposition: each rank sums its shard of every unit
     * in unit order, then the per-rank sums are added in rank order. DDP does the same on
     * its all-reduced gradients, so every stage clips by the same bits. The partial sums are
     * computed on the device and come back in one copy. */
    int p = 0;
    for (int u = 0; u < l->n_units; u++) {
        size_t S = (size_t)l->units[u].shard;
        if (e->g16) {
            ZS_CHECK(zs_engine_sumsq16(e, grad_shard(e, u), S, e->norm_parts + p));
            p += zs_engine_sumsq16_parts(S);
        } else {
            ZS_CHECK(e->ops->sumsq(e->stream, e->norm_parts + p, grad_shard(e, u), S));
            p++;
        }
    }
    parts = malloc((size_t)e->n_parts * sizeof *parts);
    ZS_REQUIRE(parts, ZS_ERR_OOM, "engine: out of memory");
    ZS_CHECK(e->dev->copy_d2h(e->stream, parts, e->norm_parts, (size_t)e->n_parts * sizeof *parts));
    ZS_CHECK(e->dev->stream_sync(e->stream));
#ifdef ZS_MUTANT_HOST_READ /* the tests' deliberately broken build: device memory read on the host \
                            */
    parts[0] = e->norm_parts[0];
#endif
    double local = 0.0;
    p = 0;
    for (int u = 0; u < l->n_units; u++) {
        int k = e->g16 ? zs_engine_sumsq16_parts((size_t)l->units[u].shard) : 1;
        double part = 0.0;
        for (int i = 0; i < k; i++)
            part = e->g16 ? part + parts[p + i] : parts[p + i];
        local += part;
        p += k;
    }
    double sumsq = 0.0;
    ZS_CHECK(zs_engine_allsum(e, local, &sumsq));
    double norm = sqrt(sumsq);
    *grad_norm = (float)norm;
    /* the caller names the step ("step 2: ..."); the message does not repeat it */
    ZS_REQUIRE(isfinite(norm), ZS_ERR_INVALID,
               "gradient norm is not finite: the run diverged (lower --lr, or --grad-clip)");
    float scale = zs_clip_scale(norm, clip);

    /* AdamW: one fused launch per unit over its tensors' elements in this rank's range (bf16
     * gradients widened as read); padding between tensors is never touched. */
    for (int u = 0; u < l->n_units; u++) {
        unit_state *us = &e->units[u];
        const void *g =
            e->g16 ? (const void *)(e->persist_grads ? us->g16 + us->opt_base : us->gs16)
                   : (const void *)(e->persist_grads ? us->grad + us->opt_base : us->gshard);
        ZS_CHECK(step_range(e, u, 0, us->opt_n, us->master, g, us->m, us->v, h, scale, t));
    }
    /* ZeRO-1/2: bring every rank's updated shard back into the full params, asynchronously
     * (ordered after the update by the comm layer); the next forward_begin of each unit waits
     * for its own gather only. */
    ZS_CHECK(regather_params(e, 0));
fail:
    free(parts);
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
fail:
    return st;
}

zs_status zs_engine_state_read(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                               float *host) {
    zs_status st = ZS_OK;
    float *p = NULL;
    ZS_CHECK(state_at(e, unit, kind, at, count, &p));
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
    ZS_CHECK(e->dev->copy_h2d(e->stream, p, host, (size_t)count * sizeof(float)));
    ZS_CHECK(e->dev->stream_sync(e->stream)); /* the caller may reuse host at once */
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
    if (gather) {
        float *full = e->bf16 ? e->cbuf : e->pslots[0].buf;
        zs_comm_work_t *w = NULL;
        e->cunit = -1;
        ZS_CHECK(
            zs_engine_gather(e, us->master, full, (size_t)ud->shard, ZS_DTYPE_F32, ud->name, &w));
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

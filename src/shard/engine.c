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
 * This file holds the storage of each stage (create, destroy); engine_pool.c acquires and
 * releases units, engine_step.c runs the gradient norm and AdamW, engine_state.c initialises,
 * reads and writes the state (checkpoints, the hash), engine_coll.c the collectives and host
 * values. Models only call begin/end. Collectives are asynchronous and waited only when their
 * result is needed. */
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

uint64_t zs_engine_param_gathers(const zs_engine_t *e) {
    return e->n_param_gathers;
}

zs_status zs_engine_create(const zs_layout *layout, const zs_ops *ops, const zs_device *dev,
                           zs_stream_t *stream, const zs_engine_comms *comms,
                           const zs_module_config *cfg, zs_engine_t **out) {
    zs_status st = ZS_OK;
    zs_engine_t *e = NULL;
    zs_comm_t *comm = comms ? comms->shard : NULL, *hcomm = comms ? comms->world : NULL;
    zs_comm_t *xcomm = comms ? comms->replica : NULL;
    int world = comm ? zs_comm_world_size(comm) : 1;
    *out = NULL;
    ZS_REQUIRE(layout->world_size == world, ZS_ERR_INTERNAL,
               "engine: layout finalized for %d ranks, engine has %d", layout->world_size, world);
    ZS_REQUIRE(!xcomm || zs_comm_world_size(xcomm) == 1 || cfg->stage != ZS_STAGE_DDP,
               ZS_ERR_INVALID,
               "--shard-group: ddp replicates everything already; shard within groups with "
               "--stage 1, 2 or 3");
    ZS_REQUIRE(cfg->prefetch >= 0 && cfg->prefetch <= 8, ZS_ERR_INVALID,
               "--prefetch %d must be in [0, 8]", cfg->prefetch);
    ZS_REQUIRE(cfg->stage >= ZS_STAGE_DDP && cfg->stage <= ZS_STAGE_3, ZS_ERR_INVALID,
               "engine: unknown stage %d", (int)cfg->stage);
    ZS_REQUIRE(cfg->param_dtype == ZS_DTYPE_F32 || cfg->param_dtype == ZS_DTYPE_BF16,
               ZS_ERR_INVALID, "engine: compute dtype %s is not fp32 or bf16",
               zs_dtype_name(cfg->param_dtype));
    ZS_REQUIRE(cfg->grad_dtype == ZS_DTYPE_F32 || cfg->grad_dtype == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "engine: gradient dtype %s is not fp32 or bf16", zs_dtype_name(cfg->grad_dtype));
    ZS_CHECK(zs_offload_check(cfg->offload, cfg->offload_fraction, (int)cfg->stage,
                              (dev ? dev : zs_device_cpu())->host_memory));
    e = calloc(1, sizeof *e);
    ZS_REQUIRE(e, ZS_ERR_OOM, "engine: out of memory");
    e->layout = layout;
    e->ops = ops;
    e->dev = dev ? dev : zs_device_cpu();
    e->stream = stream;
    e->cfg = *cfg;
    e->cfg.device = e->cfg.name = NULL; /* the caller's strings; the engine reads neither */
    e->comm = world > 1 ? comm : NULL;
    e->rank = comm ? zs_comm_rank(comm) : 0;
    e->world = world;
    e->xcomm = xcomm && zs_comm_world_size(xcomm) > 1 ? xcomm : NULL;
    e->replica = e->xcomm ? zs_comm_rank(e->xcomm) : 0;
    e->hworld = hcomm ? zs_comm_world_size(hcomm) : 1;
    e->hcomm = e->hworld > 1 ? hcomm : NULL;
    e->micro_K = 1;
    e->persist_params = cfg->stage != ZS_STAGE_3;
    e->persist_grads = cfg->stage == ZS_STAGE_DDP || cfg->stage == ZS_STAGE_1;
    e->bf16 = cfg->param_dtype == ZS_DTYPE_BF16;
    e->g16 = cfg->grad_dtype == ZS_DTYPE_BF16;
    e->pool_grads = !e->persist_grads || e->g16;
    e->cunit = -1;
    e->units = calloc((size_t)layout->n_units, sizeof *e->units);
    ZS_REQUIRE(e->units, ZS_ERR_OOM, "engine: out of memory");
    e->offload_params = cfg->offload == ZS_OFFLOAD_PARAMS;
    if (cfg->offload != ZS_OFFLOAD_NONE) {
        unsigned char *off = malloc((size_t)layout->n_units);
        ZS_REQUIRE(off, ZS_ERR_OOM, "engine: out of memory");
        e->offload = zs_offload_choose(layout, cfg->offload_fraction, off) > 0;
        for (int u = 0; u < layout->n_units; u++)
            e->units[u].off = off[u];
        free(off);
    }
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
        /* The optimizer range: the whole unit for DDP, this rank's shard otherwise. */
        int full = cfg->stage == ZS_STAGE_DDP;
        us->opt_base = full ? 0 : (int64_t)e->rank * ud->shard;
        us->opt_n = full ? (int64_t)P : ud->shard;
        if (e->bf16) {
            /* bf16 compute copy: the fp32 master is its own buffer at every stage (on the host
             * with offload); ZeRO-3 also keeps the bf16 shard it gathers. */
            if (!us->off) {
                ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, (size_t)us->opt_n * 4, ud->name,
                                             &us->master));
                us->master_owned = 1;
            }
            if (!e->persist_params && us->off && e->offload_params) /* rounded on the host */
                ZS_CHECK(
                    e->dev->host_alloc(ZS_MEM_PARAM_SHARD, S * 2, ud->name, (void **)&us->p16));
            else if (!e->persist_params)
                ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, S * 2, ud->name,
                                             (float **)&us->p16));
        } else {
            /* fp32: the device's copy of the range is the full params (DDP), their slice
             * (ZeRO-1/2) or a shard of its own (ZeRO-3); it is the master unless offloaded. */
            if (e->persist_params)
                us->dparam = us->param + us->opt_base;
            else if (us->off && e->offload_params)
                us->dparam = NULL; /* --offload params: gathered from the host master */
            else {
                ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_PARAM_SHARD, S * 4, ud->name, &us->dparam));
                us->dparam_owned = 1;
            }
            if (!us->off) us->master = us->dparam;
        }
        if (us->off) {
            ZS_CHECK(zs_engine_offload_unit_alloc(e, u));
            continue;
        }
        ZS_CHECK(
            e->dev->alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam m", (void **)&us->m));
        ZS_CHECK(
            e->dev->alloc(ZS_MEM_OPTIM_STATE, (size_t)us->opt_n * 4, "adam v", (void **)&us->v));
    }
    ZS_CHECK(zs_engine_offload_create(e));
    ZS_CHECK(zs_engine_pools_create(e));
    if (e->hcomm)
        ZS_CHECK(zs_comm_mem_alloc(e->hcomm, ZS_MEM_COMM,
                                   2 * (size_t)e->hworld * ZS_ENGINE_HOST_CHUNK,
                                   "host-value scratch", (void **)&e->hx));
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
    zs_engine_ahead_destroy(e); /* before any state it steps is freed */
    zs_engine_drain(e);
    if (e->units)
        for (int u = 0; u < e->layout->n_units; u++) {
            unit_state *us = &e->units[u];
            zs_engine_buf_free(e, us->param);
            if (us->off && e->offload_params)
                e->dev->host_free(us->p16);
            else
                zs_engine_buf_free(e, (float *)us->p16);
            zs_engine_buf_free(e, us->grad);
            zs_engine_buf_free(e, (float *)us->g16);
            e->dev->free(us->gshard);
            e->dev->free(us->gs16);
            if (us->master_owned) zs_engine_buf_free(e, us->master);
            if (us->dparam_owned) zs_engine_buf_free(e, us->dparam);
            if (!us->off) {
                e->dev->free(us->m);
                e->dev->free(us->v);
            }
        }
    zs_engine_offload_destroy(e);
    zs_engine_pools_destroy(e);
    if (e->hcomm) zs_comm_mem_free(e->hcomm, e->hx);
    e->dev->free(e->norm_parts);
    free(e->units);
    free(e->order);
    free(e);
}

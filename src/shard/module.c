/* The public sharding API (include/zshard/module.h): units declared by the caller, a module
 * that shards them through the shard engine, and the calls a model makes around each unit.
 * GPT-2 and LLaMA run on these same calls, so every model test exercises this file. */
#include "shard/module.h"

#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "comm/device.h"
#include "core/alloc.h"
#include "core/status.h"
#include "shard/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct zs_module {
    zs_layout layout;
    zs_engine_t *engine;
    zs_comm_t *comm; /* the caller's; NULL for a world of one */
    /* HSDP (cfg.shard_group < world): the module's own split of comm into the shard group
     * (ranks rank / S) and the replica group (ranks rank % S); both NULL when flat. */
    zs_comm_t *scomm, *xcomm;
    const zs_ops *ops;
    const zs_device *dev;
    zs_stream_t *stream; /* the compute stream (the CPU's is NULL) */
    zs_module_config cfg;
    char name[32];
    int rank, world;
    int shard_rank, shard_world, replica; /* in the shard group; the group's index */
    int step;                             /* optimizer steps taken */
};

zs_status zs_mesh_shard_group(const zs_module_config *cfg, int world, int local, int *S) {
    zs_status st = ZS_OK;
    int s = cfg->shard_group, r = cfg->replicate;
    *S = world;
    ZS_REQUIRE(s >= ZS_SHARD_GROUP_HOST && r >= 0, ZS_ERR_INVALID,
               "--shard-group %d, --replicate %d: must be positive", s, r);
    if (s == ZS_SHARD_GROUP_HOST) {
        ZS_REQUIRE(local >= 1 && world % local == 0, ZS_ERR_INVALID,
                   "--shard-group host: %d ranks on this host do not divide the world of %d "
                   "(every host must run the same number of ranks)",
                   local, world);
        s = local;
    }
    if (r > 0) {
        ZS_REQUIRE(world % r == 0 && (!s || s * r == world), ZS_ERR_INVALID,
                   s ? "--replicate %d x --shard-group %d must be the world size %d"
                     : "--replicate %d must divide the world size %d",
                   r, s ? s : world, world);
        s = world / r;
    }
    if (!s) return ZS_OK;
    ZS_REQUIRE(s <= world && world % s == 0, ZS_ERR_INVALID,
               "--shard-group %d must divide the world size %d", s, world);
    *S = s;
fail:
    return st;
}

/* HSDP's 2-D mesh (docs/sharding.md "Hybrid sharding"): groups of S consecutive ranks shard,
 * and rank r's replicas are the ranks with r's place in the other groups, ordered by group. */
static zs_status make_mesh(zs_module_t *m) {
    zs_status st = ZS_OK;
    int S = m->world;
    ZS_CHECK(zs_mesh_shard_group(&m->cfg, m->world, m->comm ? zs_comm_local_world_size(m->comm) : 1,
                                 &S));
    m->shard_rank = m->rank % S;
    m->shard_world = S;
    m->replica = m->rank / S;
    if (S == m->world) return ZS_OK; /* flat; the engine refuses replicas it cannot serve */
    ZS_CHECK(zs_comm_split(m->comm, m->rank / S, m->rank, NULL, &m->scomm));
    ZS_CHECK(zs_comm_split(m->comm, m->rank % S, m->rank, NULL, &m->xcomm));
    zs_comm_t *both[2] = {m->scomm, m->xcomm};
    for (int i = 0; i < 2; i++)
        if (zs_comm_device(both[i]) != m->dev)
            ZS_CHECK(zs_comm_set_device(both[i], m->dev, !m->dev->host_memory, 0));
fail:
    return st;
}

/* ---- units ------------------------------------------------------------------------------- */

zs_tensor_spec zs_tensor_spec_default(void) {
    zs_tensor_spec t;
    memset(&t, 0, sizeof t);
    t.ndim = 1;
    t.dtype = ZS_DTYPE_F32;
    t.init = ZS_INIT_ZEROS;
    t.zero_from = -1;
    return t;
}

zs_status zs_units_create(zs_units_t **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return zs_error(ZS_ERR_OOM, "units: out of memory");
    zs_layout_init(&(*out)->layout);
    return ZS_OK;
}

void zs_units_destroy(zs_units_t *u) {
    if (!u) return;
    for (int i = 0; i < u->layout.n_tensors && u->values; i++)
        free(u->values[i]);
    free(u->values);
    zs_layout_free(&u->layout);
    free(u);
}

zs_status zs_units_add_unit(zs_units_t *u, const char *name, int n_uses) {
    if (!u || !name || !*name || strlen(name) >= ZS_MAX_NAME)
        return zs_error(ZS_ERR_INVALID, "units: a unit needs a name of 1 to %d bytes",
                        ZS_MAX_NAME - 1);
    for (int i = 0; i < u->layout.n_units; i++)
        if (!strcmp(u->layout.units[i].name, name))
            return zs_error(ZS_ERR_INVALID, "units: unit '%s' declared twice", name);
    if (n_uses < 1 || n_uses > 64)
        return zs_error(ZS_ERR_INVALID, "units: unit '%s': n_uses %d is not in [1, 64]", name,
                        n_uses);
    return zs_layout_add_unit(&u->layout, name, n_uses);
}

zs_status zs_units_add_tensor(zs_units_t *u, const zs_tensor_spec *t) {
    zs_status st = ZS_OK;
    zs_layout *l = u ? &u->layout : NULL;
    ZS_REQUIRE(l && t && t->name && *t->name && strlen(t->name) < ZS_MAX_NAME, ZS_ERR_INVALID,
               "units: a tensor needs a name of 1 to %d bytes", ZS_MAX_NAME - 1);
    ZS_REQUIRE(l->n_units > 0, ZS_ERR_INVALID, "units: tensor '%s' added before any unit", t->name);
    ZS_REQUIRE(zs_layout_find(l, t->name) < 0, ZS_ERR_INVALID, "units: tensor '%s' declared twice",
               t->name);
    ZS_REQUIRE(t->ndim >= 1 && t->ndim <= ZS_MAX_DIMS, ZS_ERR_INVALID,
               "units: tensor '%s' has %d dimensions (1 to %d)", t->name, t->ndim, ZS_MAX_DIMS);
    ZS_REQUIRE(t->dtype == ZS_DTYPE_F32, ZS_ERR_INVALID,
               "units: tensor '%s': dtype %s (master weights are f32; choose the compute copy "
               "with zs_module_config.param_dtype)",
               t->name, zs_dtype_name(t->dtype));
    ZS_REQUIRE(t->init >= ZS_INIT_ZEROS && t->init <= ZS_INIT_VALUES, ZS_ERR_INVALID,
               "units: tensor '%s': unknown init %d", t->name, (int)t->init);
    ZS_REQUIRE(t->init != ZS_INIT_VALUES || t->values, ZS_ERR_INVALID,
               "units: tensor '%s': ZS_INIT_VALUES without values", t->name);
    ZS_CHECK(zs_layout_add_tensor(l, t->name, t->ndim, t->shape, t->decay ? 1 : 0, t->init,
                                  t->init_std));
    zs_tensor_desc *d = &l->tensors[l->n_tensors - 1];
    if (t->zero_from >= 0 && t->zero_from < d->count) d->zero_from = t->zero_from;
    if (u->cap_values < l->cap_tensors) {
        float **v = realloc(u->values, (size_t)l->cap_tensors * sizeof *v);
        ZS_REQUIRE(v, ZS_ERR_OOM, "units: out of memory");
        memset(v + u->cap_values, 0, (size_t)(l->cap_tensors - u->cap_values) * sizeof *v);
        u->values = v;
        u->cap_values = l->cap_tensors;
    }
    if (t->init == ZS_INIT_VALUES) {
        float *copy = malloc((size_t)d->count * sizeof *copy);
        ZS_REQUIRE(copy, ZS_ERR_OOM, "units: tensor '%s': out of memory", t->name);
        memcpy(copy, t->values, (size_t)d->count * sizeof *copy);
        u->values[l->n_tensors - 1] = copy;
    }
fail:
    return st;
}

zs_status zs_units_from_layout(const zs_layout *l, zs_units_t **out) {
    zs_status st = ZS_OK;
    zs_units_t *u = NULL;
    ZS_CHECK(zs_units_create(&u));
    ZS_CHECK(zs_layout_copy(l, &u->layout));
    *out = u;
    return ZS_OK;
fail:
    zs_units_destroy(u);
    *out = NULL;
    return st;
}

/* ---- the module -------------------------------------------------------------------------- */

zs_module_config zs_module_config_default(void) {
    zs_module_config c;
    memset(&c, 0, sizeof c);
    c.stage = ZS_STAGE_DDP;
    c.prefetch = 1;
    c.param_dtype = ZS_DTYPE_F32;
    c.grad_dtype = ZS_DTYPE_F32;
    c.seed = 1337;
    return c;
}

/* Overwrite this rank's master range of tensor ti with full values (then state_changed). */
static zs_status write_master(zs_module_t *m, int ti, const float *values) {
    const zs_tensor_desc *t = &m->layout.tensors[ti];
    int64_t lo, n;
    zs_engine_state_range(m->engine, t->unit, &lo, &n);
    int64_t a = t->offset > lo ? t->offset : lo;
    int64_t b = t->offset + t->count < lo + n ? t->offset + t->count : lo + n;
    if (b <= a) return ZS_OK;
    return zs_engine_state_write(m->engine, t->unit, ZS_STATE_MASTER, a, b - a,
                                 values + (a - t->offset));
}

zs_status zs_module_create(const zs_units_t *units, zs_comm_t *comm, const zs_module_config *cfg,
                           zs_module_t **out) {
    zs_status st = ZS_OK;
    zs_module_t *m = NULL;
    zs_module_config defaults = zs_module_config_default();
    if (!cfg) cfg = &defaults;
    *out = NULL;
    ZS_REQUIRE(units && units->layout.n_units > 0, ZS_ERR_INVALID,
               "module: no units declared (zs_units_add_unit)");
    for (int u = 0; u < units->layout.n_units; u++)
        ZS_REQUIRE(units->layout.units[u].n_tensors > 0, ZS_ERR_INVALID,
                   "module: unit '%s' has no tensors", units->layout.units[u].name);
    m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "module: out of memory");
    m->cfg = *cfg;
    m->cfg.device = NULL;
    m->cfg.name = NULL;
    snprintf(m->name, sizeof m->name, "%s", cfg->name && *cfg->name ? cfg->name : "module");
    m->rank = comm ? zs_comm_rank(comm) : 0;
    m->world = comm ? zs_comm_world_size(comm) : 1;
    m->comm = m->world > 1 ? comm : NULL;
    ZS_CHECK(zs_backend_select(cfg->device, &m->ops, &m->dev));
    /* The GEMMs of models on this module compute in the compute copy's precision: bf16 inputs
     * for a bf16 copy, TF32 when asked for an fp32 one. */
    m->ops = m->ops->with_math(cfg->param_dtype == ZS_DTYPE_BF16 ? ZS_MATH_BF16
                               : cfg->tf32                       ? ZS_MATH_TF32
                                                                 : ZS_MATH_FP32);
    if (!m->dev->host_memory) {
        /* One GPU per local rank where there are enough, else ranks share them. */
        int ndev = zs_cuda_device_count(), local = comm ? zs_comm_local_rank(comm) : 0;
        ZS_REQUIRE(ndev > 0, ZS_ERR_UNSUPPORTED, "module: device %s: no device is visible",
                   cfg->device);
        ZS_CHECK(zs_cuda_set_device(local % ndev));
    }
    /* The communicator carries this device's buffers (staged through host memory for host
     * backends when the device's memory is not host memory). */
    if (m->comm && zs_comm_device(m->comm) != m->dev)
        ZS_CHECK(zs_comm_set_device(m->comm, m->dev, !m->dev->host_memory, 0));
    ZS_CHECK(m->dev->stream_create(&m->stream));
    ZS_CHECK(make_mesh(m));
    ZS_CHECK(zs_layout_copy(&units->layout, &m->layout));
    ZS_CHECK(zs_layout_finalize(&m->layout, m->shard_world));

    zs_engine_comms ec = {
        .shard = m->scomm ? m->scomm : m->comm, .replica = m->xcomm, .world = m->comm};
    ZS_CHECK(zs_engine_create(&m->layout, m->ops, m->dev, m->stream, &ec, &m->cfg, &m->engine));
    ZS_CHECK(zs_engine_init_params(m->engine, cfg->seed));
    int any_values = 0;
    for (int i = 0; i < m->layout.n_tensors && units->values; i++)
        if (units->values[i]) {
            ZS_CHECK(write_master(m, i, units->values[i]));
            any_values = 1;
        }
    /* The caller's values are on every rank: no collective needed to place them, only to
     * rebuild the stage's full copies, which every rank does (the flag is the same). */
    if (any_values) ZS_CHECK(zs_engine_state_changed(m->engine));
    *out = m;
    return ZS_OK;
fail:
    zs_module_destroy(m);
    return st;
}

void zs_module_destroy(zs_module_t *m) {
    if (!m) return;
    zs_engine_destroy(m->engine);
    zs_comm_destroy(m->scomm);
    zs_comm_destroy(m->xcomm);
    if (m->dev) m->dev->stream_destroy(m->stream);
    zs_layout_free(&m->layout);
    free(m);
}

const zs_layout *zs_module_layout(const zs_module_t *m) {
    return &m->layout;
}

uint64_t zs_module_param_gathers(const zs_module_t *m) {
    return zs_engine_param_gathers(m->engine);
}

int zs_module_rank(const zs_module_t *m) {
    return m->rank;
}

int zs_module_world_size(const zs_module_t *m) {
    return m->world;
}

void zs_module_mesh_text(const zs_module_t *m, char *out, size_t n) {
    if (!m->scomm) {
        snprintf(out, n, "%s", "");
        return;
    }
    snprintf(out, n, "shard group %s (%s), replica group %s (%s)",
             zs_comm_backend_name(zs_comm_get_backend(m->scomm)), zs_comm_backend_reason(m->scomm),
             zs_comm_backend_name(zs_comm_get_backend(m->xcomm)), zs_comm_backend_reason(m->xcomm));
}

void zs_module_mesh(const zs_module_t *m, int *shard_rank, int *shard_world, int *replica) {
    *shard_rank = m->shard_rank;
    *shard_world = m->shard_world;
    *replica = m->replica;
}

int zs_module_num_units(const zs_module_t *m) {
    return m->layout.n_units;
}

int zs_module_num_tensors(const zs_module_t *m) {
    return m->layout.n_tensors;
}

int zs_module_unit_find(const zs_module_t *m, const char *name) {
    for (int u = 0; name && u < m->layout.n_units; u++)
        if (!strcmp(m->layout.units[u].name, name)) return u;
    return -1;
}

zs_status zs_module_tensor_at(const zs_module_t *m, int index, zs_tensor_info *out) {
    if (index < 0 || index >= m->layout.n_tensors)
        return zs_error(ZS_ERR_INVALID, "module: tensor index %d of %d", index,
                        m->layout.n_tensors);
    const zs_tensor_desc *t = &m->layout.tensors[index];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->index = index;
    out->unit = t->unit;
    out->offset = t->offset;
    out->count = t->count;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof t->shape);
    out->decay = t->decay;
    return ZS_OK;
}

zs_status zs_module_tensor(const zs_module_t *m, const char *name, zs_tensor_info *out) {
    int i = name ? zs_layout_find(&m->layout, name) : -1;
    if (i < 0) return zs_error(ZS_ERR_INVALID, "module %s: no tensor named '%s'", m->name, name);
    return zs_module_tensor_at(m, i, out);
}

int64_t zs_module_num_params(const zs_module_t *m) {
    return m->layout.total_params;
}

int64_t zs_module_num_padded(const zs_module_t *m) {
    return m->layout.total_padded;
}

static zs_status check_unit(const zs_module_t *m, int unit) {
    if (unit < 0 || unit >= m->layout.n_units)
        return zs_error(ZS_ERR_INVALID, "module %s: unit %d of %d", m->name, unit,
                        m->layout.n_units);
    return ZS_OK;
}

zs_status zs_module_forward_begin(zs_module_t *m, int unit, float **params) {
    zs_status st = check_unit(m, unit);
    return st != ZS_OK ? st : zs_engine_forward_begin(m->engine, unit, params);
}

zs_status zs_module_forward_end(zs_module_t *m, int unit) {
    zs_status st = check_unit(m, unit);
    return st != ZS_OK ? st : zs_engine_forward_end(m->engine, unit);
}

zs_status zs_module_backward_begin(zs_module_t *m, int unit, float **params, float **grads) {
    zs_status st = check_unit(m, unit);
    return st != ZS_OK ? st : zs_engine_backward_begin(m->engine, unit, params, grads);
}

zs_status zs_module_backward_end(zs_module_t *m, int unit) {
    zs_status st = check_unit(m, unit);
    return st != ZS_OK ? st : zs_engine_backward_end(m->engine, unit);
}

zs_status zs_module_zero_grad(zs_module_t *m) {
    /* A step is one micro-batch unless micro_begin says otherwise. */
    zs_engine_micro_begin(m->engine, 0, 1);
    return zs_engine_zero_grad(m->engine);
}

zs_status zs_module_micro_begin(zs_module_t *m, int k, int K) {
    if (K < 1 || k < 0 || k >= K)
        return zs_error(ZS_ERR_INVALID, "module %s: micro-batch %d of %d", m->name, k, K);
    zs_engine_micro_begin(m->engine, k, K);
    return ZS_OK;
}

zs_adamw_config zs_adamw_config_default(void) {
    zs_adamw_config h = {.lr = 1e-3f,
                         .beta1 = 0.9f,
                         .beta2 = 0.95f,
                         .eps = 1e-8f,
                         .weight_decay = 0.1f,
                         .grad_clip = 1.0f};
    return h;
}

static zs_adamw_hparams hparams(const zs_adamw_config *h) {
    zs_adamw_hparams hp = {.lr = h->lr,
                           .beta1 = h->beta1,
                           .beta2 = h->beta2,
                           .eps = h->eps,
                           .weight_decay = h->weight_decay};
    return hp;
}

zs_status zs_module_step(zs_module_t *m, const zs_adamw_config *h, float *grad_norm) {
    zs_status st = ZS_OK;
    float norm = 0.0f;
    ZS_REQUIRE(h, ZS_ERR_INVALID, "module %s: step needs optimizer settings", m->name);
    zs_adamw_hparams hp = hparams(h);
    ZS_CHECK(zs_engine_step(m->engine, &hp, h->grad_clip, m->step + 1, &norm));
    m->step++;
    if (grad_norm) *grad_norm = norm;
fail:
    return st;
}

zs_status zs_module_step_ahead(zs_module_t *m, const zs_adamw_config *h) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(h, ZS_ERR_INVALID, "module %s: step_ahead needs optimizer settings", m->name);
    zs_adamw_hparams hp = hparams(h);
    ZS_CHECK(zs_engine_step_ahead(m->engine, &hp, h->grad_clip, m->step + 1));
fail:
    return st;
}

int zs_module_steps_done(const zs_module_t *m) {
    return m->step;
}

zs_status zs_module_allsum(zs_module_t *m, double local, double *global) {
    return zs_engine_allsum(m->engine, local, global);
}

zs_status zs_module_param_hash(zs_module_t *m, uint64_t *hash) {
    return zs_engine_param_hash(m->engine, hash);
}

/* Look a tensor up by name and check the caller's element count. */
static zs_status find_sized(const zs_module_t *m, const char *name, size_t count, int *index) {
    int i = name ? zs_layout_find(&m->layout, name) : -1;
    if (i < 0) return zs_error(ZS_ERR_INVALID, "module %s: no tensor named '%s'", m->name, name);
    if ((int64_t)count != m->layout.tensors[i].count)
        return zs_error(ZS_ERR_INVALID, "module %s: tensor '%s' has %lld elements, not %zu",
                        m->name, name, (long long)m->layout.tensors[i].count, count);
    *index = i;
    return ZS_OK;
}

zs_status zs_module_get_param(zs_module_t *m, const char *name, float *out, size_t count) {
    zs_status st = ZS_OK;
    float *full = NULL;
    int i = -1;
    ZS_CHECK(find_sized(m, name, count, &i));
    const zs_tensor_desc *t = &m->layout.tensors[i];
    const zs_unit_desc *ud = &m->layout.units[t->unit];
    /* The unit's full master values (gathered at the sharded stages), then the tensor. */
    full = malloc((size_t)ud->padded * sizeof *full);
    ZS_REQUIRE(full, ZS_ERR_OOM, "module %s: get_param '%s': out of memory", m->name, name);
    ZS_CHECK(zs_engine_unit_values(m->engine, t->unit, full));
    memcpy(out, full + t->offset, count * sizeof(float));
fail:
    free(full);
    return st;
}

zs_status zs_module_set_param(zs_module_t *m, const char *name, const float *values, size_t count) {
    zs_status st = ZS_OK;
    float *tmp = NULL;
    int i = -1;
    ZS_CHECK(find_sized(m, name, count, &i));
    if (m->world > 1) {
        /* Rank 0's values win, so ranks that computed them differently still agree. */
        tmp = malloc(count * sizeof *tmp);
        ZS_REQUIRE(tmp, ZS_ERR_OOM, "module %s: set_param '%s': out of memory", m->name, name);
        memcpy(tmp, values, count * sizeof *tmp);
        ZS_CHECK(zs_engine_broadcast_host(m->engine, tmp, count, 0));
        values = tmp;
    }
    ZS_CHECK(write_master(m, i, values));
    ZS_CHECK(zs_engine_state_changed(m->engine));
fail:
    free(tmp);
    return st;
}

const char *zs_module_name(const zs_module_t *m) {
    return m->name;
}

zs_stage zs_module_stage(const zs_module_t *m) {
    return m->cfg.stage;
}

uint64_t zs_module_seed(const zs_module_t *m) {
    return m->cfg.seed;
}

zs_status zs_module_all_gather_bytes(zs_module_t *m, const void *send, void *recv, size_t nbytes) {
    return zs_engine_all_gather_bytes(m->engine, send, recv, nbytes);
}

void zs_module_state_range(const zs_module_t *m, int unit, int64_t *lo, int64_t *n) {
    zs_engine_state_range(m->engine, unit, lo, n);
}

zs_status zs_module_state_read(zs_module_t *m, int unit, int kind, int64_t at, int64_t count,
                               float *host) {
    return zs_engine_state_read(m->engine, unit, kind, at, count, host);
}

zs_status zs_module_state_write(zs_module_t *m, int unit, int kind, int64_t at, int64_t count,
                                const float *host) {
    return zs_engine_state_write(m->engine, unit, kind, at, count, host);
}

const zs_ops *zs_module_ops(const zs_module_t *m) {
    return m->ops;
}

const zs_device *zs_module_dev(const zs_module_t *m) {
    return m->dev;
}

zs_stream_t *zs_module_stream(const zs_module_t *m) {
    return m->stream;
}

zs_status zs_module_state_changed(zs_module_t *m, int steps_done) {
    zs_status st = zs_engine_state_changed(m->engine);
    if (st == ZS_OK) m->step = steps_done;
    return st;
}

zs_status zs_module_gather_mem(zs_module_t *m, zs_mem_stats *all) {
    zs_mem_stats mine;
    zs_mem_get_stats(&mine);
    return zs_engine_all_gather_bytes(m->engine, &mine, all, sizeof mine);
}

zs_status zs_module_gather_host_mem(zs_module_t *m, zs_mem_stats *all) {
    zs_mem_stats mine;
    zs_mem_get_ledger_stats(ZS_LEDGER_HOST, &mine);
    return zs_engine_all_gather_bytes(m->engine, &mine, all, sizeof mine);
}

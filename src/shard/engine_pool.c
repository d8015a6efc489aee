/* Acquiring units around forward and backward: ZeRO-3's gathered-parameter pool with
 * prefetch along the recorded acquisition order, the full-gradient pool of ZeRO-2/3 with
 * reduce-scatter as each unit's backward ends, and DDP/ZeRO-1's per-unit reductions.
 *
 * Pools are allocated once. Slot capacities are the largest unit sizes in decreasing order,
 * so any set of units that may be alive together fits, and the bound on gathered memory is
 * exactly: params (prefetch + 1) units; fp32 grads 2 units (one computing, one reducing)
 * plus one per tied unit, whose gradient accumulates over its uses. With bf16 gradients the
 * fp32 slot is needed only while a unit computes: 1 unit plus one per tied unit, and at
 * ZeRO-2/3 a separate pool of 2 bf16 slots holds the rounded copies being reduced. */
#include "shard/engine_internal.h"

#include "core/alloc.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

static zs_status make_slots(zs_engine_t *e, slot **out, int n, size_t elem, const char *what) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    int64_t *sizes = malloc((size_t)l->n_units * sizeof *sizes);
    ZS_REQUIRE(sizes, ZS_ERR_OOM, "engine: out of memory");
    for (int u = 0; u < l->n_units; u++)
        sizes[u] = l->units[u].padded;
    qsort(sizes, (size_t)l->n_units, sizeof *sizes, cmp_desc);
    *out = calloc((size_t)n, sizeof **out);
    ZS_REQUIRE(*out, ZS_ERR_OOM, "engine: out of memory");
    for (int i = 0; i < n; i++) {
        slot *s = &(*out)[i];
        s->cap = sizes[i < l->n_units ? i : l->n_units - 1];
        s->unit = -1;
        ZS_CHECK(zs_engine_buf_alloc(e, ZS_MEM_GATHERED, (size_t)s->cap * elem, what, &s->buf));
    }
fail:
    free(sizes);
    return st;
}

zs_status zs_engine_pools_create(zs_engine_t *e) {
    zs_status st = ZS_OK;
    if (!e->persist_params) {
        e->n_pslots = e->cfg.prefetch + 1;
        /* bf16: ZeRO-3 gathers the bf16 copy, so its slots hold 2-byte elements. */
        ZS_CHECK(make_slots(e, &e->pslots, e->n_pslots, e->bf16 ? 2 : 4, "gathered params"));
    }
    if (e->pool_grads) {
        int tied = 0;
        for (int u = 0; u < e->layout->n_units; u++)
            tied += e->layout->units[u].n_uses > 1;
        /* With bf16 gradients a unit's fp32 slot is rounded and freed as soon as its backward
         * ends: one computing slot (plus the tied units') is enough. */
        e->n_gslots = (e->g16 ? 1 : 2) + tied;
        ZS_CHECK(make_slots(e, &e->gslots, e->n_gslots, 4, "unit gradients"));
        if (e->g16 && !e->persist_grads) {
            e->n_rslots = 2;
            ZS_CHECK(make_slots(e, &e->rslots, e->n_rslots, 2, "unit gradients (bf16)"));
        }
    }
    ZS_CHECK(zs_engine_bf16_create(e));
    ZS_CHECK(zs_engine_grad16_create(e));
fail:
    return st;
}

void zs_engine_pools_destroy(zs_engine_t *e) {
    for (int i = 0; e->pslots && i < e->n_pslots; i++)
        zs_engine_buf_free(e, e->pslots[i].buf);
    for (int i = 0; e->gslots && i < e->n_gslots; i++)
        zs_engine_buf_free(e, e->gslots[i].buf);
    for (int i = 0; e->rslots && i < e->n_rslots; i++)
        zs_engine_buf_free(e, e->rslots[i].buf);
    zs_engine_bf16_destroy(e);
    zs_engine_grad16_destroy(e);
    free(e->pslots);
    free(e->gslots);
    free(e->rslots);
    e->pslots = e->gslots = e->rslots = NULL;
}

/* ---- acquisition order and prefetch ---------------------------------------------------- */

static void record(zs_engine_t *e, int ev) {
    if (!e->recording) return;
    if (e->n_order == e->cap_order) {
        int cap = e->cap_order ? 2 * e->cap_order : 64;
        int *o = realloc(e->order, (size_t)cap * sizeof *o);
        if (!o) { /* without a recording ZeRO-3 just does not prefetch */
            e->recording = 0;
            return;
        }
        e->order = o;
        e->cap_order = cap;
    }
    e->order[e->n_order++] = ev;
}

/* Move the cursor to event ev: the next recorded event in the common case, else a search
 * (e.g. evaluation, which runs only the forward part). -1 if ev was never recorded. */
static void locate(zs_engine_t *e, int ev) {
    if (!e->recorded) {
        e->cursor = -1;
        return;
    }
    if (e->cursor + 1 < e->n_order && e->cursor >= -1 && e->order[e->cursor + 1] == ev) {
        e->cursor++;
        return;
    }
    for (int i = 0; i < e->n_order; i++)
        if (e->order[i] == ev) {
            e->cursor = i;
            return;
        }
    e->cursor = -1;
}

static int in_window(const zs_engine_t *e, int unit) {
    if (e->cursor < 0) return 0;
    for (int j = 0; j <= e->cfg.prefetch && e->cursor + j < e->n_order; j++)
        if (e->order[e->cursor + j] / 2 == unit) return 1;
    return 0;
}

/* ---- gathered-parameter pool (ZeRO-3) -------------------------------------------------- */

/* A slot for `need` elements: not in use; an empty one if possible, else one whose unit is
 * not about to be used, smallest fitting, least recently used. -1 if none qualifies. */
static int pick_pslot(zs_engine_t *e, int64_t need, int avoid_window) {
    int best = -1;
    for (int i = 0; i < e->n_pslots; i++) {
        slot *s = &e->pslots[i];
        if (s->in_use || s->cap < need) continue;
        if (avoid_window && s->unit >= 0 && in_window(e, s->unit)) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        slot *b = &e->pslots[best];
        int se = s->unit < 0, be = b->unit < 0;
        if (se != be) {
            if (se) best = i;
            continue;
        }
        if (s->cap != b->cap) {
            if (s->cap < b->cap) best = i;
            continue;
        }
        if (s->tick < b->tick) best = i;
    }
    return best;
}

static zs_status evict_and_gather(zs_engine_t *e, int k, int unit) {
    zs_status st = ZS_OK;
    slot *s = &e->pslots[k];
    if (s->unit >= 0) {
        ZS_CHECK(zs_engine_wait_stream(e, &s->work));
        e->units[s->unit].pslot = -1;
    }
    const zs_unit_desc *ud = &e->layout->units[unit];
    s->unit = unit;
    s->state = SLOT_PENDING;
    s->tick = ++e->tick;
    e->units[unit].pslot = k;
    e->n_param_gathers++;
    unit_state *us = &e->units[unit];
    zs_dtype dt = e->bf16 ? ZS_DTYPE_BF16 : ZS_DTYPE_F32;
    const void *mine = e->bf16 ? (const void *)us->p16 : us->dparam;
    if (us->off && e->offload_params) {
        /* --offload params: this rank's shard comes up from the host into its own slice of
         * the slot (ordered before the gather on the same stream), gathered in place. */
        size_t nb = (size_t)ud->shard * zs_dtype_size(dt);
        char *slice = (char *)s->buf + (size_t)e->rank * nb;
        ZS_CHECK(
            e->dev->copy_h2d(e->stream, slice, e->bf16 ? (const void *)us->p16 : us->master, nb));
        mine = slice;
    }
    ZS_CHECK(zs_engine_gather(e, mine, s->buf, (size_t)ud->shard, dt, ud->name, &s->work));
fail:
    return st;
}

static zs_status acquire_params(zs_engine_t *e, int unit, int phase, float **params) {
    zs_status st = ZS_OK;
    unit_state *us = &e->units[unit];
    if (e->persist_params) {
        ZS_CHECK(zs_engine_wait_stream(e, &us->work)); /* the post-step gather of this unit */
        if (e->bf16) return zs_engine_widen(e, unit, us->p16, params);
        *params = us->param;
        return ZS_OK;
    }
    int ev = unit * 2 + phase;
    record(e, ev);
    locate(e, ev);
    if (us->pslot < 0) {
        int k = pick_pslot(e, e->layout->units[unit].padded, 0);
        ZS_REQUIRE(k >= 0, ZS_ERR_INTERNAL,
                   "engine: no gathered-parameter slot free for unit %s (units not released?)",
                   e->layout->units[unit].name);
        ZS_CHECK(evict_and_gather(e, k, unit));
    }
    slot *s = &e->pslots[us->pslot];
    ZS_CHECK(zs_engine_wait_stream(e, &s->work));
    s->state = SLOT_READY;
    s->in_use = 1;
    s->tick = ++e->tick;
    *params = s->buf;
    if (e->bf16) ZS_CHECK(zs_engine_widen(e, unit, (const zs_bf16 *)s->buf, params));
    /* Prefetch the next units along the recorded order while this one computes. */
    for (int j = 1; j <= e->cfg.prefetch && e->cursor >= 0 && e->cursor + j < e->n_order; j++) {
        int v = e->order[e->cursor + j] / 2;
        if (e->units[v].pslot >= 0) continue;
        int k = pick_pslot(e, e->layout->units[v].padded, 1);
        if (k < 0) break;
        ZS_CHECK(evict_and_gather(e, k, v));
    }
fail:
    return st;
}

static void release_params(zs_engine_t *e, int unit) {
    int k = e->units[unit].pslot;
    if (e->bf16 && e->cunit == unit) zs_engine_unwiden(e);
    if (!e->persist_params && k >= 0) e->pslots[k].in_use = 0;
}

/* ---- gradient pool (ZeRO-2/3) ---------------------------------------------------------- */

/* The pool whose slots hold reductions in flight: the bf16 one with bf16 gradients. */
static slot *reducing_pool(zs_engine_t *e, int *n) {
    *n = e->g16 ? e->n_rslots : e->n_gslots;
    return e->g16 ? e->rslots : e->gslots;
}

/* Fold a finished reduce-scatter into the unit's gradient shard: copy this rank's block
 * after the first micro-batch's, add it after later ones. The stream waits for the
 * collective; with host != 0 the host does too (bounded by the comm timeout), as a drain must
 * before anything syncs the stream. */
static zs_status finalize_slot(zs_engine_t *e, slot *s, int host) {
    zs_status st = ZS_OK;
    if (host) ZS_CHECK(zs_engine_wait(&s->work));
    ZS_CHECK(zs_engine_wait_stream(e, &s->work));
    unit_state *us = &e->units[s->unit];
    size_t S = (size_t)e->layout->units[s->unit].shard, off = (size_t)e->rank * S;
    if (e->g16) {
        const zs_bf16 *mine = (const zs_bf16 *)(void *)s->buf + off;
        if (s->accumulate)
            ZS_CHECK(zs_engine_acc16(e, us->gs16, mine, ZS_DTYPE_BF16, S));
        else
            ZS_CHECK(e->ops->copy(e->stream, us->gs16, mine, S * 2));
    } else if (s->accumulate) {
        ZS_CHECK(e->ops->axpy(e->stream, us->gshard, 1.0f, s->buf + off, S));
    } else {
        ZS_CHECK(e->ops->copy(e->stream, us->gshard, s->buf + off, S * 4));
    }
    /* The shard is final: with replicas, its all-reduce across them starts while the backward
     * goes on; with offload (and no replicas, whose sum comes first) it can go down. */
    if (e->xcomm && s->last) ZS_CHECK(zs_engine_replicate_unit(e, s->unit));
    if (e->offload && s->last && !e->xcomm) ZS_CHECK(zs_engine_offload_down(e, s->unit));
    s->unit = -1;
    s->state = SLOT_EMPTY;
fail:
    return st;
}

static int oldest_reducing(const slot *pool, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        const slot *s = &pool[i];
        if (s->state != SLOT_REDUCING) continue;
        if (best < 0 || s->tick < pool[best].tick) best = i;
    }
    return best;
}

/* An empty slot of pool for `need` elements (the smallest that fits); if none, fold the
 * oldest reductions until one is free. Reductions finish in issue order, so folding the
 * oldest first keeps the accumulation order of every shard element fixed. -1 if none. */
static zs_status free_slot(zs_engine_t *e, slot *pool, int n, int64_t need, int *out) {
    zs_status st = ZS_OK;
    int k = -1, r;
    for (int i = 0; i < n; i++)
        if (pool[i].state == SLOT_EMPTY && pool[i].cap >= need &&
            (k < 0 || pool[i].cap < pool[k].cap))
            k = i;
    while (k < 0 && (r = oldest_reducing(pool, n)) >= 0) {
        ZS_CHECK(finalize_slot(e, &pool[r], 0));
        if (pool[r].cap >= need) k = r;
    }
fail:
    *out = k;
    return st;
}

static zs_status acquire_grads(zs_engine_t *e, int unit, float **grads) {
    zs_status st = ZS_OK;
    unit_state *us = &e->units[unit];
    if (!e->pool_grads) {
        *grads = us->grad;
        return ZS_OK;
    }
    if (us->gslot < 0) {
        int64_t need = e->layout->units[unit].padded;
        int k = -1;
        ZS_CHECK(free_slot(e, e->gslots, e->n_gslots, need, &k));
        ZS_REQUIRE(k >= 0, ZS_ERR_INTERNAL, "engine: no gradient slot free for unit %s",
                   e->layout->units[unit].name);
        slot *s = &e->gslots[k];
        ZS_CHECK(e->ops->fill(e->stream, s->buf, 0.0f, (size_t)need));
        s->unit = unit;
        s->state = SLOT_ACTIVE;
        us->gslot = k;
    }
    *grads = e->gslots[us->gslot].buf;
fail:
    return st;
}

/* The unit's backward is complete for this micro-batch: start reducing its gradients. */
static zs_status reduce_unit(zs_engine_t *e, int unit) {
    zs_status st = ZS_OK;
    unit_state *us = &e->units[unit];
    const zs_unit_desc *ud = &e->layout->units[unit];
    size_t S = (size_t)ud->shard;
    int last = e->micro_k >= e->micro_K - 1;
    int64_t mine = (int64_t)e->rank * ud->shard;
    zs_dtype dt = e->g16 ? ZS_DTYPE_BF16 : ZS_DTYPE_F32;
    size_t esz = zs_dtype_size(dt);
    if (e->persist_grads) {
        if (e->g16) ZS_CHECK(zs_engine_fold16(e, unit, us->gslot));
        if (!last) return ZS_OK; /* DDP / ZeRO-1 accumulate locally, reduce once per step */
        if (!e->comm) return e->offload && !e->xcomm ? zs_engine_offload_down(e, unit) : ZS_OK;
        char *g = e->g16 ? (char *)us->g16 : (char *)us->grad;
        if (e->cfg.stage == ZS_STAGE_DDP)
            ZS_CHECK(zs_comm_all_reduce_async(e->comm, g, g, (size_t)ud->padded, dt, ZS_REDUCE_SUM,
                                              e->stream, ud->name, &us->work));
        else
            ZS_CHECK(zs_comm_reduce_scatter_async(e->comm, g, g + (size_t)mine * esz, S, dt,
                                                  ZS_REDUCE_SUM, e->stream, ud->name, &us->work));
        return ZS_OK;
    }
    slot *s = &e->gslots[us->gslot];
    if (e->g16) { /* round once into the reduction pool; the bf16 copy travels and is kept */
        int k = -1;
        ZS_CHECK(free_slot(e, e->rslots, e->n_rslots, ud->padded, &k));
        ZS_REQUIRE(k >= 0, ZS_ERR_INTERNAL, "engine: no bf16 gradient slot free for unit %s",
                   ud->name);
        ZS_CHECK(e->ops->cast(e->stream, e->rslots[k].buf, ZS_DTYPE_BF16, s->buf, ZS_DTYPE_F32,
                              (size_t)ud->padded));
        s->unit = -1;
        s->state = SLOT_EMPTY;
        s = &e->rslots[k];
        s->unit = unit;
    }
    char *g = (char *)s->buf;
    s->state = SLOT_REDUCING;
    s->accumulate = e->micro_k > 0;
    s->last = last;
    s->tick = ++e->tick;
    us->gslot = -1;
    if (e->comm)
        ZS_CHECK(zs_comm_reduce_scatter_async(e->comm, g, g + (size_t)mine * esz, S, dt,
                                              ZS_REDUCE_SUM, e->stream, ud->name, &s->work));
fail:
    return st;
}

/* ---- the calls models make ------------------------------------------------------------- */

/* The unit is in range: zs_module_* checked it, once, with the user's names. */
zs_status zs_engine_forward_begin(zs_engine_t *e, int unit, float **params) {
    return acquire_params(e, unit, 0, params);
}

zs_status zs_engine_forward_end(zs_engine_t *e, int unit) {
    release_params(e, unit);
    return ZS_OK;
}

zs_status zs_engine_backward_begin(zs_engine_t *e, int unit, float **params, float **grads) {
    zs_status st = ZS_OK;
    ZS_CHECK(acquire_params(e, unit, 1, params));
    ZS_CHECK(acquire_grads(e, unit, grads));
fail:
    return st;
}

zs_status zs_engine_backward_end(zs_engine_t *e, int unit) {
    zs_status st = ZS_OK;
    release_params(e, unit);
    unit_state *us = &e->units[unit];
    /* A tied unit is reduced only after its last use, so both uses' gradients are summed. */
    if (++us->uses_done < e->layout->units[unit].n_uses) return ZS_OK;
    us->uses_done = 0;
    ZS_CHECK(reduce_unit(e, unit));
fail:
    return st;
}

zs_status zs_engine_drain(zs_engine_t *e) {
    zs_status st = ZS_OK;
    if (!e->units) return ZS_OK;
    for (int u = 0; u < e->layout->n_units; u++)
        ZS_CHECK(zs_engine_wait(&e->units[u].work));
    int n = 0, r;
    slot *pool = reducing_pool(e, &n);
    while ((r = oldest_reducing(pool, n)) >= 0)
        ZS_CHECK(finalize_slot(e, &pool[r], 1));
    for (int u = 0; u < e->layout->n_units; u++) /* HSDP: the replicas' all-reduces */
        ZS_CHECK(zs_engine_wait(&e->units[u].xwork));
    for (int i = 0; i < e->n_gslots; i++)
        ZS_REQUIRE(e->gslots[i].state == SLOT_EMPTY, ZS_ERR_INTERNAL,
                   "engine: unit %s's backward did not end before the step",
                   e->layout->units[e->gslots[i].unit].name);
    /* The step changes the master shards, so gathered copies become stale: drop them. */
    e->cunit = -1;
    zs_engine_unwiden(e);
    for (int i = 0; i < e->n_pslots; i++) {
        slot *s = &e->pslots[i];
        ZS_CHECK(zs_engine_wait(&s->work));
        if (s->unit >= 0) e->units[s->unit].pslot = -1;
        s->unit = -1;
        s->state = SLOT_EMPTY;
        s->in_use = 0;
    }
    ZS_CHECK(e->ops->sync(e->stream));
fail:
    return st;
}

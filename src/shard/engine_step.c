/* The engine's step: gradients zeroed per step, HSDP's replica all-reduce, the global gradient
 * norm (summed in rank order), clipping and AdamW over each rank's optimizer range, and ZeRO-1/2's
 * gather of the updated parameters (docs/architecture.md "Stages", "Determinism"). */
#include "shard/engine_internal.h"

#include "comm/device.h"
#include "core/log.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

zs_bf16 *zs_engine_round_to(const zs_engine_t *e, int u) {
    const unit_state *us = &e->units[u];
    if (!e->bf16 || !e->g16) return NULL; /* fp32 gradients: the cast below rounds */
    if (!us->off) return e->persist_params ? us->p16 + us->opt_base : us->p16;
    return e->offload_params ? us->p16 : (zs_bf16 *)us->hg; /* host copies (engine_offload.c) */
}

zs_status zs_engine_regather_unit(zs_engine_t *e, int u, int wait, int rounded) {
    zs_status st = ZS_OK;
    unit_state *us = &e->units[u];
    const zs_unit_desc *ud = &e->layout->units[u];
    /* ZeRO-1/2 gather every rank's range into the full params, in place; DDP holds them all
     * already and ZeRO-3 gathers each unit when it is acquired. */
    int gather = e->persist_params && e->cfg.stage != ZS_STAGE_DDP;
    if (us->off) ZS_CHECK(zs_engine_offload_upload(e, u, rounded)); /* rounded on the host */
    if (e->bf16) {
        zs_bf16 *mine = e->persist_params ? us->p16 + us->opt_base : us->p16;
        if (!us->off && !rounded)
            ZS_CHECK(e->ops->cast(e->stream, mine, ZS_DTYPE_BF16, us->master, ZS_DTYPE_F32,
                                  (size_t)us->opt_n));
        if (gather)
            ZS_CHECK(zs_engine_gather(e, mine, us->p16, (size_t)ud->shard, ZS_DTYPE_BF16, ud->name,
                                      &us->work));
    } else if (gather) {
        ZS_CHECK(zs_engine_gather(e, us->dparam, us->param, (size_t)ud->shard, ZS_DTYPE_F32,
                                  ud->name, &us->work));
    }
    if (wait) ZS_CHECK(zs_engine_wait(&us->work));
fail:
    return st;
}

zs_status zs_engine_regather_params(zs_engine_t *e, int wait) {
    zs_status st = ZS_OK;
    e->cunit = -1; /* a widened bf16 copy is stale from here on */
    for (int u = 0; u < e->layout->n_units; u++)
        ZS_CHECK(zs_engine_regather_unit(e, u, wait, 0));
fail:
    return st;
}

zs_status zs_engine_zero_grad(zs_engine_t *e) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_engine_ahead_finish(e)); /* a step announced and never taken is dropped */
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

const void *zs_engine_step_grad(const zs_engine_t *e, int u) {
    const unit_state *us = &e->units[u];
    if (e->g16) return e->persist_grads ? (const void *)(us->g16 + us->opt_base) : us->gs16;
    return e->persist_grads ? (const void *)(us->grad + us->opt_base) : us->gshard;
}

/* One fused AdamW launch (adamw_segs, adamw_segs16 for bf16 gradients) over a group of
 * segments, rebased to its first one; with bf16 gradients the updated parameters rounded into
 * round (indexed as param) when it is not NULL. */
static zs_status launch_segs(zs_engine_t *e, int host, zs_adamw_segs *g, float *param,
                             const void *grad, float *m, float *v, zs_bf16 *round,
                             const zs_adamw_hparams *h, float scale, int t) {
    int64_t off = g->lo[0];
    for (int k = 0; k < g->n; k++) {
        g->lo[k] -= off;
        g->hi[k] -= off;
    }
    /* Offloaded state is stepped on the host, by the CPU's ops: the same arithmetic
     * (kernels/adamw.h), so the same bits as the device's step. */
    const zs_ops *ops = host ? e->hops : e->ops;
    zs_stream_t *s = host ? NULL : e->stream;
    zs_status st =
        e->g16 ? ops->adamw_segs16(s, param + off, (const zs_bf16 *)grad + off, m + off, v + off,
                                   round ? round + off : NULL, g, h->lr, h->beta1, h->beta2, h->eps,
                                   h->weight_decay, scale, t)
               : ops->adamw_segs(s, param + off, (const float *)grad + off, m + off, v + off, g,
                                 h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, scale, t);
    g->n = 0;
    return st;
}

/* AdamW on elements [a, b) of unit u's optimizer range, given as pointers to element a of the
 * master, gradient and moments: the unit's tensors inside it, in launches of at most
 * ZS_ADAMW_SEGS tensors. round (bf16 gradients only; NULL: none) receives the whole range's
 * compute copy, indexed as the master: the tensors' elements rounded by the step itself. The
 * padding between them never changes, so its rounding made before stays true, except where
 * round is the gradient itself (offload's host copy, rounded in place): there the padding is
 * rounded from the master after the step (the gradient's padding is not the parameters'). */
static zs_status step_range(zs_engine_t *e, int u, int64_t a, int64_t b, float *param,
                            const void *grad, float *m, float *v, zs_bf16 *round,
                            const zs_adamw_hparams *h, float scale, int t) {
    zs_status st = ZS_OK;
    const zs_unit_desc *ud = &e->layout->units[u];
    int64_t base = e->units[u].opt_base + a, end = e->units[u].opt_base + b;
    int off = e->units[u].off, in_place = round && (const void *)round == grad;
    zs_adamw_segs g;
    g.n = 0;
    for (int i = 0; i < ud->n_tensors; i++) {
        const zs_tensor_desc *td = &e->layout->tensors[ud->first_tensor + i];
        int64_t lo = td->offset > base ? td->offset : base;
        int64_t hi = td->offset + td->count < end ? td->offset + td->count : end;
        if (hi <= lo) continue; /* padding and other ranks' elements are never touched */
        if (g.n == ZS_ADAMW_SEGS)
            ZS_CHECK(launch_segs(e, off, &g, param, grad, m, v, round, h, scale, t));
        g.lo[g.n] = lo - base;
        g.hi[g.n] = hi - base;
        g.decay[g.n++] = (unsigned char)(td->decay != 0);
    }
    if (g.n) ZS_CHECK(launch_segs(e, off, &g, param, grad, m, v, round, h, scale, t));
    /* In place (on the host, in order): the gaps between the tensors, from the master. A gap
     * that overlaps a tensor (were they out of order) rounds its new values again, the same
     * bits. */
    for (int64_t done = base, i = 0; in_place && done < end; i++) {
        int64_t next = end, after = end;
        if (i < ud->n_tensors) {
            const zs_tensor_desc *td = &e->layout->tensors[ud->first_tensor + i];
            next = td->offset > done ? td->offset : done;
            after = td->offset + td->count;
        }
        if (next > end) next = end;
        if (next > done)
            ZS_CHECK(e->hops->cast(NULL, round + (done - base), ZS_DTYPE_BF16,
                                   param + (done - base), ZS_DTYPE_F32, (size_t)(next - done)));
        if (after > done) done = after;
    }
fail:
    return st;
}

zs_status zs_engine_host_step(zs_engine_t *e, int u, const zs_adamw_hparams *h, float scale,
                              int t) {
    zs_status st = ZS_OK;
    unit_state *us = &e->units[u];
#ifndef ZS_MUTANT_NO_DOWN_WAIT /* the tests' broken build: the host steps before the copy */
    ZS_CHECK(e->dev->event_sync(us->ev_down));
#endif
    zs_engine_host_range(e, "AdamW");
    st = step_range(e, u, 0, us->opt_n, us->master, us->hg, us->m, us->v, zs_engine_round_to(e, u),
                    h, scale, t);
    zs_engine_host_range(e, NULL);
    ZS_CHECK(st);
fail:
    return st;
}

/* HSDP: unit u's reduced gradient shard summed over the replica group, in its rank order
 * (docs/sharding.md "Hybrid sharding"). Each rank of the group issues these in the same unit
 * order: its backward's, then the step's for the rest. */
zs_status zs_engine_replicate_unit(zs_engine_t *e, int u) {
    unit_state *us = &e->units[u];
    void *g = (void *)grad_shard(e, u);
    us->replicated = 1;
    return zs_comm_all_reduce_async(e->xcomm, g, g, (size_t)e->layout->units[u].shard,
                                    e->g16 ? ZS_DTYPE_BF16 : ZS_DTYPE_F32, ZS_REDUCE_SUM, e->stream,
                                    e->layout->units[u].name, &us->xwork);
}

/* The step's part: the all-reduces the backward did not start (ZeRO-1's shards, final only
 * once the drain has waited for their reduce-scatters), then the stream waits for all. */
static zs_status replicate_grads(zs_engine_t *e) {
    zs_status st = ZS_OK;
    for (int u = 0; u < e->layout->n_units; u++)
        if (!e->units[u].replicated) ZS_CHECK(zs_engine_replicate_unit(e, u));
    for (int u = 0; u < e->layout->n_units; u++) {
        ZS_CHECK(zs_engine_wait_stream(e, &e->units[u].xwork));
        e->units[u].replicated = 0;
    }
fail:
    return st;
}

zs_status zs_engine_step(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t,
                         float *grad_norm) {
    zs_status st = ZS_OK;
    const zs_layout *l = e->layout;
    double *parts = NULL;
    int queued = zs_engine_ahead_queued(e); /* host steps queued during the backward */
    ZS_CHECK(zs_engine_drain(e));
    if (e->xcomm) ZS_CHECK(replicate_grads(e));
    e->recording = 0;
    e->recorded = 1;
    /* Offload: the gradients not down yet go while the device sums their squares. */
    if (e->offload) {
        int n_off = 0;
        for (int u = 0; u < l->n_units; u++)
            n_off += e->units[u].off;
        if (e->ahead_armed)
            ZS_LOG_D("offload: step %d: %d of %d offloaded units queued for their host step "
                     "during the backward",
                     t, queued, n_off);
        ZS_CHECK(zs_engine_offload_fetch(e));
    }

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
    /* Replicas hold the same shards: only the first group's count, and the zeros the others
     * add leave the sum's bits those of the group alone (a flat run's at R = 1). */
    double sumsq = 0.0;
    ZS_CHECK(zs_engine_allsum(e, e->replica ? 0.0 : local, &sumsq));
    double norm = sqrt(sumsq);
    *grad_norm = (float)norm;
    /* the caller names the step ("step 2: ..."); the message does not repeat it */
    ZS_REQUIRE(isfinite(norm), ZS_ERR_INVALID,
               "gradient norm is not finite: the run diverged (lower --lr, or --grad-clip)");
    float scale = zs_clip_scale(norm, clip);

    /* AdamW: one fused launch per unit over its tensors' elements in this rank's range (bf16
     * gradients widened as read); padding between tensors is never touched. */
    e->cunit = -1; /* a widened bf16 copy is stale from here on */
    for (int u = 0; u < l->n_units; u++) {
        unit_state *us = &e->units[u];
        if (!us->off) {
            ZS_CHECK(step_range(e, u, 0, us->opt_n, us->master, zs_engine_step_grad(e, u), us->m,
                                us->v, zs_engine_round_to(e, u), h, scale, t));
        } else {
            /* Offloaded: stepped on the host once its gradients are down (during the backward
             * when stepped ahead); it goes up (and, at ZeRO-1/2, out to the other ranks) while
             * the host steps the next unit. */
            int ahead = 0;
            ZS_CHECK(zs_engine_ahead_take(e, u, h, t, &ahead));
            if (!ahead) ZS_CHECK(zs_engine_host_step(e, u, h, scale, t));
        }
        /* ZeRO-1/2 bring every rank's updated range back into the full params, asynchronously
         * (ordered after the update by the comm layer); the next forward_begin of each unit
         * waits for its own gather only. */
        ZS_CHECK(zs_engine_regather_unit(e, u, 0, zs_engine_round_to(e, u) != NULL));
    }
fail:
    free(parts);
    zs_status done = zs_engine_ahead_finish(e); /* no host step outlives the step */
    return st != ZS_OK ? st : done;
}

/* Engine internals shared by engine.c (state, init, step) and engine_pool.c (acquiring units,
 * the gathered-parameter and gradient pools, prefetch). */
#ifndef ZS_SHARD_ENGINE_INTERNAL_H
#define ZS_SHARD_ENGINE_INTERNAL_H

#include "core/bf16.h"
#include "shard/engine.h"

typedef struct zs_ahead zs_ahead;

typedef struct unit_state {
    float *param;  /* full params, persistent (ddp, 1, 2) or NULL */
    float *grad;   /* full grads, persistent (ddp, 1) or NULL */
    float *gshard; /* fp32 gradient shard (2, 3) or NULL */
    zs_bf16 *g16;  /* bf16 gradients: full, persistent (ddp, 1) or NULL */
    zs_bf16 *gs16; /* bf16 gradients: the gradient shard (2, 3) or NULL */
    float *master; /* fp32 master: full (ddp), slice of param (1, 2), own (3 and bf16); with
                      offload, pinned host memory of its own at every stage */
    /* fp32 compute copy of the optimizer range on the device, what ZeRO-1/2/3 gather: the
     * master itself without offload; with it, the slice of param (ddp, 1, 2) or a shard of its
     * own (3). bf16: NULL (p16 is the compute copy). */
    float *dparam;
    zs_bf16 *p16; /* bf16 compute copy: full (ddp, 1, 2) or this rank's shard (3); fp32: NULL */
    int master_owned, dparam_owned;
    float *m, *v; /* Adam moments over [opt_base, opt_base + opt_n) of the unit (host: offload) */
    int64_t opt_base, opt_n;
    /* Offload (engine_offload.c): the gradient range's host copy (pinned; the reduce dtype),
     * which after the host step carries the bf16 compute copy up; events marking the range
     * final on the compute stream, its download and the compute copy's upload on the offload
     * stream; whether this step's download has been queued (during the backward). */
    void *hg;
    zs_event_t *ev_ready, *ev_down, *ev_up;
    int fetched;
    int off; /* this unit's optimizer state is offloaded (--offload-fraction chooses) */
    zs_comm_work_t *work; /* pending reduction (ddp, 1) or post-step gather (1, 2) */
    /* HSDP: the gradient shard's all-reduce across the replicas, issued as soon as the shard is
     * final (ZeRO-2/3: its last reduce-scatter folded, during the backward; else in the step),
     * and whether it was issued this step. */
    zs_comm_work_t *xwork;
    int replicated;
    int uses_done;        /* backward uses seen in this micro-batch */
    int pslot, gslot;     /* pool slots holding the unit's gathered params / full grads */
} unit_state;

typedef enum slot_state {
    SLOT_EMPTY = 0,
    SLOT_PENDING,
    SLOT_READY,
    SLOT_ACTIVE,
    SLOT_REDUCING
} slot_state;

typedef struct slot {
    float *buf;  /* elements of the pool's dtype: fp32, or bf16 in the reduction pool */
    int64_t cap; /* elements */
    int unit;    /* -1 when empty */
    slot_state state;
    int in_use;     /* params: between begin and end */
    int accumulate; /* grads: add into the shard (later micro-batch) instead of copy */
    int last;       /* grads: the step's last micro-batch (the shard is final once folded) */
    uint64_t tick;  /* last use (params) or reduction issue (grads) */
    zs_comm_work_t *work;
} slot;

struct zs_engine {
    const zs_layout *layout;
    const zs_ops *ops;
    const zs_device *dev;
    zs_stream_t *stream;
    zs_module_config cfg; /* stage, prefetch and the dtypes are the engine's part */
    /* comm: the shard group (NULL for a group of one), whose rank and size the layout's shards
     * follow. xcomm: the replica group (NULL: none), replica this rank's index in it (its
     * group's). hcomm: the world, for host values (NULL for a world of one). */
    zs_comm_t *comm, *xcomm, *hcomm;
    int rank, world, replica, hworld;
    int persist_params, persist_grads;
    unit_state *units;
    /* pslots: ZeRO-3's gathered parameters. gslots: fp32 unit gradients being computed (and,
     * with fp32 gradients at ZeRO-2/3, reduced in place). rslots: with bf16 gradients at
     * ZeRO-2/3, the rounded bf16 copies being reduce-scattered. */
    slot *pslots, *gslots, *rslots;
    int n_pslots, n_gslots, n_rslots;
    int micro_k, micro_K;
    uint64_t tick;
    /* Order of unit acquisitions recorded during the first training step (unit*2 + phase,
     * phase 0 forward, 1 backward); ZeRO-3 prefetches along it afterwards. */
    int *order, n_order, cap_order, recording, recorded, cursor;
    uint64_t n_param_gathers; /* ZeRO-3 unit gathers issued (prefetches included) */
    /* bf16 compute copy: the acquired unit widened to fp32 (the largest unit's size). */
    int bf16;
    float *cbuf;
    int cunit, c_in_use; /* unit whose values cbuf holds (-1: none); acquired now */
    /* bf16 gradients: every stage computes each unit's gradients in an fp32 pool slot
     * (pool_grads) and rounds them once when the unit's backward ends; gscratch is the
     * 2 * ZS_ENGINE_CAST_CHUNK fp32 scratch for arithmetic on bf16 values. */
    int g16, pool_grads;
    float *gscratch;
    /* Host values in collectives go through hx (device, 2 x hworld x ZS_ENGINE_HOST_CHUNK bytes);
     * the gradient norm's partial sums land in norm_parts (device, n_parts doubles) and come
     * back in one copy per step. */
    char *hx;
    double *norm_parts;
    int n_parts;
    /* --offload optimizer: the offloaded units' (unit_state.off) master and Adam states on the
     * host, stepped by the CPU's ops (hops) while ostream carries gradients down and compute
     * copies up. offload: any unit is. */
    int offload;
    int offload_params; /* --offload params: offloaded units' parameter shards on the host */
    const zs_ops *hops;
    zs_stream_t *ostream;
    /* The host step during the backward (engine_ahead.c): its worker, created at the first
     * zs_engine_step_ahead; armed from then until the step. */
    zs_ahead *ahead;
    int ahead_armed;
};

/* Buffers that collectives read or write: registered with the communicator (peers read them
 * in place, no staging copy) when there is one, plain accounted memory otherwise. */
zs_status zs_engine_buf_alloc(zs_engine_t *e, zs_mem_category cat, size_t nbytes, const char *what,
                              float **out);
void zs_engine_buf_free(zs_engine_t *e, float *p);

zs_status zs_engine_pools_create(zs_engine_t *e);
void zs_engine_pools_destroy(zs_engine_t *e);
/* Wait for every outstanding collective and fold finished gradient reductions into the
 * shards. Leaves no work in flight. */
zs_status zs_engine_drain(zs_engine_t *e);
/* all-gather count elements of dtype dt per rank (async; a copy when world is one). */
zs_status zs_engine_gather(zs_engine_t *e, const void *send, void *recv, size_t count, zs_dtype dt,
                           const char *tag, zs_comm_work_t **work);
/* The host waits for *work (bounded by the comm timeout; reports a failed peer). */
zs_status zs_engine_wait(zs_comm_work_t **work);
/* The engine's stream waits for *work; the host does not, where the device allows. */
zs_status zs_engine_wait_stream(zs_engine_t *e, zs_comm_work_t **work);

/* After the masters changed (a step, init, a checkpoint load), bring each unit's compute copy
 * up to date (engine_step.c): with offload upload it; round it to bf16 with a bf16 copy; and at
 * ZeRO-1/2 all-gather every rank's range into the full params, asynchronously (with wait == 0
 * each unit's gather is waited for at its next acquisition). rounded: the step wrote the bf16
 * copy already (zs_engine_round_to), so only its upload and gather are left. */
zs_status zs_engine_regather_unit(zs_engine_t *e, int unit, int wait, int rounded);
/* Where unit u's step rounds its bf16 compute copy as it updates the master (adamw_segs16's
 * round, indexed as the master: the device copy, or offload's host one), or NULL where the
 * step does not (fp32 parameters or gradients) and regather's cast (rounded 0) does it. */
zs_bf16 *zs_engine_round_to(const zs_engine_t *e, int unit);
zs_status zs_engine_regather_params(zs_engine_t *e, int wait);

/* bf16 compute copy (engine_bf16.c): the fp32 widening buffer; widening an acquired unit's
 * bf16 values (src) into the buffer, src handed to the ops as the buffer's twin (ops.h twin16)
 * while the unit is in use; and the end of that use (the twin dropped). */
zs_status zs_engine_bf16_create(zs_engine_t *e);
void zs_engine_bf16_destroy(zs_engine_t *e);
zs_status zs_engine_widen(zs_engine_t *e, int unit, const zs_bf16 *src, float **params);
void zs_engine_unwiden(zs_engine_t *e);

/* Offload (engine_offload.c): the host state of unit u (master, m, v, the gradient's host copy)
 * and its events, allocated in create's order; the stream and the CPU's ops. fetch queues every
 * unit's gradient range down (after the drain); upload queues unit u's compute copy up from its
 * host master and makes the engine's stream wait for it; sync waits for the offload stream. */
zs_status zs_engine_offload_unit_alloc(zs_engine_t *e, int unit);
zs_status zs_engine_offload_create(zs_engine_t *e);
void zs_engine_offload_destroy(zs_engine_t *e);
zs_status zs_engine_offload_down(zs_engine_t *e, int unit);
zs_status zs_engine_offload_fetch(zs_engine_t *e);
zs_status zs_engine_offload_upload(zs_engine_t *e, int unit, int rounded);
zs_status zs_engine_offload_sync(zs_engine_t *e);
/* Host work of the engine, named for the device's profiler (device.h's range_push): begin
 * with a name, end with NULL. */
static inline void zs_engine_host_range(const zs_engine_t *e, const char *name) {
    if (!e->dev->range_push) return;
    if (name)
        e->dev->range_push(name);
    else
        e->dev->range_pop();
}
/* A hand-off between the engine's host threads, for the device's profiler (device.h's
 * host_mark / host_after). */
static inline void zs_engine_host_mark(const zs_engine_t *e, const void *key) {
    if (e->dev->host_mark) e->dev->host_mark(key);
}
static inline void zs_engine_host_after(const zs_engine_t *e, const void *key) {
    if (e->dev->host_after) e->dev->host_after(key);
}
/* AdamW of offloaded unit u on the host once its download is over (engine_step.c). */
zs_status zs_engine_host_step(zs_engine_t *e, int unit, const zs_adamw_hparams *h, float scale,
                              int t);

/* The host step during the backward (engine_ahead.c): push queues unit u's host step (its
 * download queued) when armed; take waits for it in the step (taken: it was stepped ahead);
 * finish waits for every queued unit and disarms; queued counts the units queued so far;
 * destroy stops the worker. */
zs_status zs_engine_ahead_push(zs_engine_t *e, int unit);
zs_status zs_engine_ahead_take(zs_engine_t *e, int unit, const zs_adamw_hparams *h, int t,
                               int *taken);
zs_status zs_engine_ahead_finish(zs_engine_t *e);
int zs_engine_ahead_queued(zs_engine_t *e);
void zs_engine_ahead_destroy(zs_engine_t *e);
/* The gradient range the step reads for unit u: this rank's reduced shard (fp32, or bf16). */
const void *zs_engine_step_grad(const zs_engine_t *e, int unit);
/* HSDP: start unit u's gradient shard's all-reduce across the replicas (engine_step.c). */
zs_status zs_engine_replicate_unit(zs_engine_t *e, int unit);

/* bf16 gradients (engine_grad16.c): dst = bf16(dst + src) for src fp32 or bf16; the squared
 * norm of n bf16 values; rounding a finished pool slot into the persistent bf16 gradients of
 * unit (ddp, 1; frees the slot). The step widens bf16 gradients chunk by chunk (engine.c). */
zs_status zs_engine_grad16_create(zs_engine_t *e);
void zs_engine_grad16_destroy(zs_engine_t *e);
zs_status zs_engine_acc16(zs_engine_t *e, zs_bf16 *dst, const void *src, zs_dtype src_dt, size_t n);
/* Partial sums of squares of n bf16 values into out[0 .. zs_engine_sumsq16_parts(n)) (device),
 * chunk by chunk. */
zs_status zs_engine_sumsq16(zs_engine_t *e, const zs_bf16 *g, size_t n, double *out);
int zs_engine_sumsq16_parts(size_t n);
zs_status zs_engine_fold16(zs_engine_t *e, int unit, int k);

#endif

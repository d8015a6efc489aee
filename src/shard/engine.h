/* The shard engine (docs/architecture.md "Stages"): owns every unit's parameters, gradients and
 * optimizer state, and decides per stage what is stored where and which collective runs when.
 * Models call it around each unit and never branch on the stage:
 *
 *   forward_begin(u) -> full params of u ... forward_end(u)
 *   backward_begin(u) -> full params and the full gradient buffer of u (accumulate into it)
 *   ... backward_end(u); then step().
 *
 * A unit with n_uses > 1 (a tied embedding) may be acquired that many times per pass; its
 * gradient accumulates all uses before it is reduced. */
#ifndef ZS_SHARD_ENGINE_H
#define ZS_SHARD_ENGINE_H

#include "backend/device.h"
#include "backend/ops.h"
#include "optim/optim.h"
#include "shard/layout.h"

typedef struct zs_engine zs_engine_t;

/* Elements of the fp32 scratch (allocated twice, workspace) through which bf16 gradients are
 * summed, normed and stepped chunk by chunk. */
#define ZS_ENGINE_CAST_CHUNK 16384

/* Bytes per rank of the device scratch through which host values (losses, norms, records of
 * checkpoints and memory statistics) take part in collectives, twice (send and receive). */
#define ZS_ENGINE_HOST_CHUNK 4096

/* Device bytes the engine allocates besides model states and pools: the host-collective scratch
 * (comm) and the gradient-norm partial sums (workspace). The estimator adds them. */
uint64_t zs_engine_scratch_bytes(const zs_layout *layout, int world, zs_dtype grad_dtype,
                                 uint64_t *comm, uint64_t *workspace);

/* --offload-fraction (docs/sharding.md "Offload"): the units whose optimizer state goes to the
 * host, off[u] = 1: the first units in layout order while the share of the padded elements
 * taken so far is under fraction (0, or >= 1: every unit). The same on every rank and world
 * size. Returns how many. */
int zs_offload_choose(const zs_layout *layout, double fraction, unsigned char *off);
/* Whether an offload request can be carried out: a known mode, a fraction in [0, 1] (0: all)
 * given only with a mode, params only at ZeRO-3, and a device whose memory is not the host's
 * (host_memory 0). The one check the engine and the estimator share. */
zs_status zs_offload_check(zs_offload mode, double fraction, int stage, int host_memory);

/* The communicators an engine runs on (docs/sharding.md "Hybrid sharding"). shard: gathers and
 * reduce-scatters, its rank and size the layout's (NULL: a group of one). replica: the same
 * shard on the other groups, across which the gradient shard is all-reduced after its
 * reduce-scatter (NULL: no replicas, flat ZeRO). world: host values (losses, checkpoint records,
 * memory statistics; NULL: a world of one). Flat: shard and world are the same communicator. */
typedef struct zs_engine_comms {
    zs_comm_t *shard, *replica, *world;
} zs_engine_comms;

/* Allocates persistent state for the stage (accounted by category) on dev (NULL: the CPU), whose
 * ops are ops and whose work goes on stream. The engine reads its part of the module's settings
 * (zs_module_config, include/zshard.h): stage, prefetch, param_dtype and grad_dtype.
 * - param_dtype BF16: the compute copy is bf16, rounded from the fp32 master after every step and
 *   all-gathered as bf16; each acquired unit is widened into one fp32 buffer, so begin still
 *   returns fp32 and only one unit may be acquired at a time.
 * - grad_dtype BF16: full gradients, gradient shards and collectives are bf16; backward still
 *   accumulates each unit in an fp32 pool buffer, rounded once when the unit's backward ends.
 * comms (NULL: a world of one) give the ranks and sizes; their buffers must live on the same
 * device (comm/device.h). The layout must be finalized for the shard group's size and outlive
 * the engine. Everything the engine hands out (begin's parameters and gradients) is device
 * memory. */
zs_status zs_engine_create(const zs_layout *layout, const zs_ops *ops, const zs_device *dev,
                           zs_stream_t *stream, const zs_engine_comms *comms,
                           const zs_module_config *cfg, zs_engine_t **out);
void zs_engine_destroy(zs_engine_t *e);

/* Initialise this rank's master parameters from the layout's init rules: element i of tensor
 * t is a pure function of (seed, t, i), so every world size and stage gets the same model. */
zs_status zs_engine_init_params(zs_engine_t *e, uint64_t seed);

/* Acquire and release unit `unit` for its forward or backward (engine_pool.c). The unit must be
 * in [0, n_units): zs_module_* checks what users pass, once, and naming the module. */
zs_status zs_engine_forward_begin(zs_engine_t *e, int unit, float **params);
zs_status zs_engine_forward_end(zs_engine_t *e, int unit);
zs_status zs_engine_backward_begin(zs_engine_t *e, int unit, float **params, float **grads);
zs_status zs_engine_backward_end(zs_engine_t *e, int unit);

/* Clear accumulated gradients before the first micro-batch of a step. */
zs_status zs_engine_zero_grad(zs_engine_t *e);

/* Declare that micro-batch k (0-based) of K is about to run: DDP and ZeRO-1 reduce only
 * after the last one; ZeRO-2/3 reduce-scatter every one into the gradient shard. */
void zs_engine_micro_begin(zs_engine_t *e, int k, int K);

/* Sum of one double per rank of the world, added in rank order: the same bits on every rank and
 * every stage (used for the loss and the gradient norm). Host values. */
zs_status zs_engine_allsum(zs_engine_t *e, double local, double *global);

/* Gather nbytes (a multiple of 4) of host memory from every rank of the world into host
 * recv[world * nbytes], rank order (through the device scratch). */
zs_status zs_engine_all_gather_bytes(zs_engine_t *e, const void *send, void *recv, size_t nbytes);
/* World rank root's count floats of host memory to every rank's host buf (in place). */
zs_status zs_engine_broadcast_host(zs_engine_t *e, float *buf, size_t count, int root);

/* Optimizer step on this rank's shard: global gradient norm through the shard
 * decomposition (returned in *grad_norm, before clipping), clipping by clip (<= 0: off),
 * AdamW with h, step counter t (1-based). */
zs_status zs_engine_step(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t,
                         float *grad_norm);

/* The coming step's settings, before its backward (engine_ahead.c): with offloaded units and no
 * clip (clip <= 0), each is stepped on the host as soon as its gradients are down, during the
 * backward. The step must then be called with the same h and t. Otherwise nothing happens. */
zs_status zs_engine_step_ahead(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t);

/* FNV-1a 64 over the full fp32 master parameters in layout order, padding excluded.
 * Collective: every rank must call it (sharded stages gather each unit's master shards). */
zs_status zs_engine_param_hash(zs_engine_t *e, uint64_t *hash);

/* Visit every tensor's full fp32 master values (host memory) in layout order. Collective:
 * sharded stages gather each unit (into an idle pool buffer) before visiting its tensors. */
typedef zs_status (*zs_param_visitor)(const zs_tensor_desc *t, const float *data, void *ctx);
zs_status zs_engine_visit_params(zs_engine_t *e, zs_param_visitor fn, void *ctx);

/* The full fp32 master values of unit u (padded elements) into host memory. Collective. */
zs_status zs_engine_unit_values(zs_engine_t *e, int unit, float *host);

/* This rank's optimizer state of unit u covers the unit's flat elements [*lo, *lo + *n): DDP
 * the whole padded unit, the sharded stages [rank*S, (rank+1)*S). */
void zs_engine_state_range(const zs_engine_t *e, int unit, int64_t *lo, int64_t *n);

/* State kinds of a unit: the fp32 master, Adam m and v. */
enum { ZS_STATE_MASTER = 0, ZS_STATE_ADAM_M, ZS_STATE_ADAM_V, ZS_STATE_NKINDS };

/* Copy count elements of state kind of unit u, starting at flat element `at` (inside this
 * rank's range), to host memory / from host memory. Drains pending work first, so values read
 * are the post-step ones. For checkpoints and get/set of parameters. */
zs_status zs_engine_state_read(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                               float *host);
zs_status zs_engine_state_write(zs_engine_t *e, int unit, int kind, int64_t at, int64_t count,
                                const float *host);

/* Call on every rank after writing master values (checkpoint load): rebuilds the full
 * parameters of ZeRO-1/2 and drops ZeRO-3's gathered copies. Collective. */
zs_status zs_engine_state_changed(zs_engine_t *e);

/* Number of ZeRO-3 unit all-gathers issued so far (prefetches included; 0 for other stages).
 * Tests use it to show that activation checkpointing adds no gather. */
uint64_t zs_engine_param_gathers(const zs_engine_t *e);

#endif

/* zshard public sharding API (FSDP's fully_shard for C): declare a model's parameters as units
 * of named tensors, shard them over a communicator at a stage (DDP, ZeRO-1/2/3), and run your
 * own forward and backward between begin/end calls. GPT-2 and LLaMA inside zshard use exactly
 * these calls. Included by zshard.h; pure C11. Life cycle and rules: docs/embedding.md. */
#ifndef ZSHARD_MODULE_H
#define ZSHARD_MODULE_H

#ifndef ZSHARD_H
#error "include <zshard.h>, not <zshard/module.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- units: what a model declares --------------------------------------------------------
 * A unit is the granule of sharding: its tensors live in one flat fp32 buffer, in declaration
 * order, each tensor 64-byte aligned; ZeRO-3 gathers a whole unit before its forward and its
 * backward. Typical units: the embedding, one per block, the head. */

#define ZS_MAX_TENSOR_DIMS 4
#define ZS_MAX_TENSOR_NAME 64 /* bytes, NUL included */

typedef enum zs_init_kind {
    ZS_INIT_ZEROS = 0,
    ZS_INIT_ONES,
    ZS_INIT_NORMAL, /* init_std * N(0,1) through Philox(seed, tensor index, element index) */
    ZS_INIT_VALUES, /* the caller's values (zs_tensor_spec.values), copied at declaration */
} zs_init_kind;

typedef struct zs_tensor_spec {
    const char *name; /* unique within the module; copied (< ZS_MAX_TENSOR_NAME bytes) */
    int ndim;         /* 1 .. ZS_MAX_TENSOR_DIMS */
    int64_t shape[ZS_MAX_TENSOR_DIMS];
    zs_dtype dtype; /* ZS_DTYPE_F32: master weights are fp32 (the compute copy is the module's
                       param_dtype) */
    int decay;      /* 1: AdamW weight decay applies (matrices), 0: not (biases, norms) */
    zs_init_kind init;
    float init_std;      /* ZS_INIT_NORMAL */
    int64_t zero_from;   /* ZS_INIT_NORMAL: elements at index >= zero_from start at 0 (padded
                            vocabulary rows); -1 = none */
    const float *values; /* ZS_INIT_VALUES: count = prod(shape) floats, copied */
} zs_tensor_spec;

/* {ndim 1, dtype F32, decay 0, ZS_INIT_ZEROS, zero_from -1}; set name and shape. */
zs_tensor_spec zs_tensor_spec_default(void);

typedef struct zs_units zs_units_t;

zs_status zs_units_create(zs_units_t **out);
void zs_units_destroy(zs_units_t *u); /* NULL accepted */
/* Start a unit. n_uses: times it is acquired per forward (2 for an embedding tied to the
 * output head: its gradient then accumulates both uses before it is reduced). */
zs_status zs_units_add_unit(zs_units_t *u, const char *name, int n_uses);
/* Add a tensor to the last unit. ZS_ERR_INVALID for a duplicate name, a bad shape or dtype. */
zs_status zs_units_add_tensor(zs_units_t *u, const zs_tensor_spec *t);

/* ---- the sharded module ------------------------------------------------------------------ */

typedef struct zs_module zs_module_t;

/* zs_module_config, the module's settings, is in zshard.h: zs_train_config carries one. */

zs_module_config zs_module_config_default(void);

/* Shard units over comm (NULL: a world of one) at cfg's stage, allocate the persistent state
 * (accounted in zs_mem_get_stats' categories) and initialise the parameters: element i of
 * tensor t is a pure function of (seed, t, i), so every world size and stage starts from the
 * same model. Collective. units is copied (destroy it when you like); comm must outlive the
 * module. On error *out is NULL and zs_last_error() says why. */
zs_status zs_module_create(const zs_units_t *units, zs_comm_t *comm, const zs_module_config *cfg,
                           zs_module_t **out);
/* Waits for outstanding collectives, frees everything. Not collective. NULL accepted. */
void zs_module_destroy(zs_module_t *m);

int zs_module_rank(const zs_module_t *m);
int zs_module_world_size(const zs_module_t *m);
int zs_module_num_units(const zs_module_t *m);
int zs_module_num_tensors(const zs_module_t *m);
/* Index of the unit with that name, or -1. */
int zs_module_unit_find(const zs_module_t *m, const char *name);

/* Where a tensor lives: element offset inside its unit's full flat buffer (the pointer that
 * forward_begin/backward_begin return), 16-element aligned. */
typedef struct zs_tensor_info {
    const char *name; /* owned by the module */
    int index, unit;
    int64_t offset, count; /* elements */
    int ndim;
    int64_t shape[ZS_MAX_TENSOR_DIMS];
    int decay;
} zs_tensor_info;

zs_status zs_module_tensor(const zs_module_t *m, const char *name, zs_tensor_info *out);
zs_status zs_module_tensor_at(const zs_module_t *m, int index, zs_tensor_info *out);

/* Real parameters (Ψ) and the flat elements with alignment and shard padding, all ranks. */
int64_t zs_module_num_params(const zs_module_t *m);
int64_t zs_module_num_padded(const zs_module_t *m);

/* One training step, for every rank in the same order of calls:
 *   zero_grad; for each micro-batch k of K: micro_begin(k, K), then per unit in your order
 *   forward_begin(u) -> fp32 params[unit elements] ... forward_end(u), and in reverse
 *   backward_begin(u) -> params and grads ... (ADD your gradients into grads) backward_end(u);
 *   then step.
 * The pointers are valid until the matching end. At most one unit acquired at a time with a
 * bf16 compute copy; otherwise up to prefetch + 1 units. Never write params. With a bf16
 * compute copy on a GPU, the built-in models' weight matrices and embedding tables
 * (zs_trainer_module's units) are read from the bf16 copy, and their places in params do not
 * hold them (they start as NaN; docs/sharding.md "Mixed precision"): zs_module_get_param reads
 * them. Units you declare are widened whole. The gradients are summed over ranks (not
 * averaged): scale your loss by 1 / (tokens in the global batch). Every rank must acquire the
 * same units in the same order: each call may run a collective. */
zs_status zs_module_forward_begin(zs_module_t *m, int unit, float **params);
zs_status zs_module_forward_end(zs_module_t *m, int unit);
zs_status zs_module_backward_begin(zs_module_t *m, int unit, float **params, float **grads);
zs_status zs_module_backward_end(zs_module_t *m, int unit);
/* Clear the accumulated gradients before the first micro-batch of a step. */
zs_status zs_module_zero_grad(zs_module_t *m);
/* Micro-batch k (0-based) of K is about to run: DDP and ZeRO-1 reduce after the last one
 * only, ZeRO-2/3 reduce-scatter every one into the gradient shard. Without the call a step is
 * one micro-batch. */
zs_status zs_module_micro_begin(zs_module_t *m, int k, int K);

typedef struct zs_adamw_config {
    float lr; /* the caller's learning rate for this step (any schedule) */
    float beta1, beta2, eps;
    float weight_decay; /* on tensors declared with decay = 1 */
    float grad_clip;    /* global-norm clip; <= 0 disables */
} zs_adamw_config;

/* {lr 1e-3, betas 0.9/0.95, eps 1e-8, weight_decay 0.1, grad_clip 1.0} */
zs_adamw_config zs_adamw_config_default(void);

/* AdamW on this rank's shard: the global gradient norm through the shard decomposition (the
 * same bits at every stage; *grad_norm before clipping, may be NULL), clipping, the update,
 * then whatever the stage needs to make full parameters available again. Collective.
 * Increments zs_module_steps_done (Adam's bias-correction t). */
zs_status zs_module_step(zs_module_t *m, const zs_adamw_config *h, float *grad_norm);
int zs_module_steps_done(const zs_module_t *m);
/* Optional, before the backward of a step (after zs_module_zero_grad): the step's settings,
 * known early. With --offload (zs_module_config.offload) and no clip (grad_clip <= 0), each
 * offloaded unit is then stepped on the host as soon as its gradients are down, while the
 * backward goes on; zs_module_step must follow with the same settings (ZS_ERR_INVALID
 * otherwise), and computes the same bits as without this call. Otherwise it does nothing. */
zs_status zs_module_step_ahead(zs_module_t *m, const zs_adamw_config *h);

/* Sum of one double per rank, added in rank order: the same bits on every rank and stage (a
 * loss, a token count). Collective. */
zs_status zs_module_allsum(zs_module_t *m, double local, double *global);

/* FNV-1a 64 over the full fp32 master parameters, declaration order, padding excluded: equal
 * hashes mean bitwise-equal models. Collective; every rank gets it. */
zs_status zs_module_param_hash(zs_module_t *m, uint64_t *hash);

/* Full fp32 master values of a tensor by name, count = its element count. get: every rank
 * receives them; set: every rank passes the same values (rank 0's are used), which replace
 * the master weights (Adam state is kept). Both collective. */
zs_status zs_module_get_param(zs_module_t *m, const char *name, float *out, size_t count);
zs_status zs_module_set_param(zs_module_t *m, const char *name, const float *values, size_t count);

/* Memory statistics of every rank, rank order, into all[world_size]. Collective. */
zs_status zs_module_gather_mem(zs_module_t *m, zs_mem_stats *all);
/* The same for host memory (pinned staging and --offload's state on a GPU rank; on CPU ranks
 * the host is the device and this equals zs_module_gather_mem). Collective. */
zs_status zs_module_gather_host_mem(zs_module_t *m, zs_mem_stats *all);

/* Checkpoints (docs/checkpoint.md): save_dir/step_NNNNNNNN with the module's unit layout and
 * tensor names in manifest.json, one zstd file per rank (fp32 master, Adam m and v); `latest`
 * and `keep` as zs_trainer_save. Resume loads any saved world size and stage into a module
 * declared with the same units (ZS_ERR_INVALID naming the first tensor that differs), and the
 * step count. Both collective. */
zs_status zs_module_save(zs_module_t *m, const char *save_dir, int keep);
zs_status zs_module_resume(zs_module_t *m, const char *path);

/* sizeof of a public struct by its name ("zs_train_config", "zs_module_config", ...), 0 for an
 * unknown name: foreign-function wrappers (python/) check their mirrored layouts with it. */
size_t zs_struct_size(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* ZSHARD_MODULE_H */

/* zshard public API: sharded data-parallel training of transformer language models.
 * Pure C11; no CUDA, NCCL, cuBLAS or MPI header leaks through this file. Devices, streams
 * and communicators cross it as opaque handles. */
#ifndef ZSHARD_H
#define ZSHARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZS_VERSION_MAJOR 0
#define ZS_VERSION_MINOR 1
#define ZS_VERSION_PATCH 0

/* ---- status ------------------------------------------------------------------------- */

typedef enum zs_status {
    ZS_OK = 0,
    ZS_ERR_INVALID,     /* bad argument, flag, config or input data */
    ZS_ERR_OOM,         /* allocation failed or would exceed the --device-mem cap */
    ZS_ERR_IO,          /* file missing, unreadable, truncated, or a write failed */
    ZS_ERR_FORMAT,      /* a file was read but its contents are malformed */
    ZS_ERR_COMM,        /* a collective failed or a peer died */
    ZS_ERR_TIMEOUT,     /* a wait exceeded its deadline */
    ZS_ERR_CUDA,        /* a CUDA, cuBLAS or NCCL call failed */
    ZS_ERR_UNSUPPORTED, /* valid request this build or backend cannot do */
    ZS_ERR_INTERNAL,    /* a bug: an invariant did not hold */
} zs_status;

/* Short fixed name of a status ("ZS_ERR_IO"). Never NULL. */
const char *zs_status_string(zs_status st);

/* Human message of the last error recorded on the calling thread ("" if none). The
 * pointer stays valid until the next zshard call on this thread. */
const char *zs_last_error(void);

/* ---- dtypes and memory categories ---------------------------------------------------- */

typedef enum zs_dtype {
    ZS_DTYPE_F32 = 0,
    ZS_DTYPE_BF16,
    ZS_DTYPE_U16,
    ZS_DTYPE_I32,
    ZS_DTYPE_F16, /* IEEE half: safetensors/HF import and export only */
} zs_dtype;

size_t zs_dtype_size(zs_dtype dt);
const char *zs_dtype_name(zs_dtype dt);

/* Every allocation names one of these (docs/architecture.md "Memory accounting"). */
typedef enum zs_mem_category {
    ZS_MEM_PARAM = 0,   /* full compute-dtype parameters, persistent */
    ZS_MEM_PARAM_SHARD, /* this rank's fp32 master-parameter shard */
    ZS_MEM_GRAD,        /* full gradients, persistent */
    ZS_MEM_GRAD_SHARD,  /* this rank's gradient shard (fp32, or bf16 with --reduce-dtype bf16) */
    ZS_MEM_OPTIM_STATE, /* Adam m and v */
    ZS_MEM_GATHERED,    /* transient gathered units / per-unit full gradients */
    ZS_MEM_ACTIVATION,  /* activations kept for backward */
    ZS_MEM_WORKSPACE,   /* scratch, logits, data batches */
    ZS_MEM_COMM,        /* communication buffers */
    ZS_MEM_NCAT
} zs_mem_category;

const char *zs_mem_category_name(zs_mem_category cat);

typedef struct zs_mem_stats {
    uint64_t current[ZS_MEM_NCAT]; /* bytes allocated now */
    uint64_t peak[ZS_MEM_NCAT];    /* highest value of current[c] so far */
    uint64_t total_current;        /* sum over categories now */
    uint64_t total_peak;           /* highest total so far (not the sum of peaks) */
    uint64_t cap;                  /* 0 = no cap */
} zs_mem_stats;

/* Process-wide accounting of all zshard allocations. Thread safe. */
void zs_mem_get_stats(zs_mem_stats *out);
/* Limit the total bytes zshard may hold at once; 0 removes the cap. */
void zs_mem_set_cap(uint64_t nbytes);
/* Reset peaks to the current values (e.g. after setup, to measure steady state). */
void zs_mem_reset_peaks(void);

/* Parse "4G", "512M", "1.5GiB", "1000000" into bytes. */
zs_status zs_parse_bytes(const char *text, uint64_t *out);

/* ---- model configuration ------------------------------------------------------------- */

typedef enum zs_arch {
    ZS_ARCH_GPT2 = 0,
    ZS_ARCH_LLAMA,
    ZS_ARCH_CUSTOM, /* a zs_module's own units (checkpoints written by zs_module_save) */
} zs_arch;

/* Whether the output head reuses the token embedding (tied) or has its own [padded_vocab,
 * n_embd] lm_head.weight (untied). ARCH, the zero value, is each architecture's own default:
 * GPT-2 tied, LLaMA untied, so every preset and every zero-initialized config keeps its layout.
 * Read it through zs_model_tied(), never directly. */
typedef enum zs_tie {
    ZS_TIE_ARCH = 0,
    ZS_TIE_ON = 1,
    ZS_TIE_OFF = 2,
} zs_tie;

typedef struct zs_model_config {
    zs_arch arch;
    int n_layer;
    int n_head;
    int n_embd;
    int max_seq;      /* positions */
    int vocab;        /* real vocabulary size */
    int padded_vocab; /* vocab rounded up to a multiple of 64, for the GEMMs */
    int n_kv_head;    /* LLaMA grouped-query attention (divides n_head); GPT-2: n_head */
    int ffn_hidden;   /* MLP inner width; GPT-2: 4 * n_embd */
    float rope_theta; /* LLaMA rotary base (e.g. 10000) */
    float norm_eps;   /* LLaMA RMSNorm epsilon (e.g. 1e-5) */
    char name[32];
    zs_tie tie_embeddings; /* output head tied to the token embedding; ZS_TIE_ARCH = default */
} zs_model_config;

/* 1 if cfg's output head is the token embedding (tie_embeddings resolved against the
 * architecture's default), else 0. */
int zs_model_tied(const zs_model_config *cfg);

/* Fill *cfg from a preset name (gpt2-tiny, gpt2-mini, gpt2-small6, gpt2-124m, gpt2-355m,
 * gpt2-774m, gpt2-1558m, llama-tiny, llama-60m, llama-1b, llama-7b), or, for a name ending in
 * ".json", from that model config file (zs_model_config_load). vocab is set by the caller
 * (it comes from the data); padded_vocab is derived by zs_model_config_set_vocab. */
zs_status zs_model_preset(const char *name, zs_model_config *cfg);
/* Read a model config file: one flat JSON object (docs/models.md), e.g.
 * {"arch": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 2, "n_embd": 256,
 *  "ffn_hidden": 688, "max_seq": 512, "rope_theta": 10000, "norm_eps": 1e-5}.
 * ZS_ERR_IO if unreadable, ZS_ERR_FORMAT if not such an object, ZS_ERR_INVALID for an
 * unknown, missing or inconsistent field; zs_last_error() names the file and the field.
 * "tie_embeddings": true/false sets cfg->tie_embeddings (absent: ZS_TIE_ARCH). */
zs_status zs_model_config_load(const char *path, zs_model_config *cfg);
void zs_model_config_set_vocab(zs_model_config *cfg, int vocab);
/* Comma-separated list of preset names, for help texts. */
const char *zs_model_preset_names(void);
/* Number of real (unpadded) parameters. */
int64_t zs_model_num_params(const zs_model_config *cfg);

/* ---- memory estimate ------------------------------------------------------------------ */

/* Predicted per-rank peak bytes by category for a training configuration, from the same unit
 * layout the engine uses and the model's activation formulas (docs/architecture.md "Memory
 * accounting"). */
typedef struct zs_mem_estimate {
    uint64_t bytes[ZS_MEM_NCAT];
    uint64_t model_states; /* param + param_shard + grad + grad_shard + optim_state */
    uint64_t total;
    int64_t params; /* real parameters (Ψ) */
    int64_t padded; /* Ψ plus alignment and shard padding */
    /* With --offload: the pinned host memory the engine holds beside the device's (the master,
     * Adam m and v, the gradient shard's host copy), by category; zero without offload. */
    uint64_t host_bytes[ZS_MEM_NCAT];
    uint64_t host_total;
} zs_mem_estimate;

/* batch is the global batch; it must divide by world_size x grad_accum. */
zs_status zs_mem_estimate_compute(const zs_model_config *cfg, int world_size, int stage, int batch,
                                  int seq, int grad_accum, int prefetch, zs_mem_estimate *out);

/* Activation checkpointing (docs/sharding.md): NONE keeps every activation backward reads;
 * BLOCK keeps only each transformer block's input and recomputes the block's forward inside
 * its backward (with the parameters its backward acquires anyway). */
typedef enum zs_recompute {
    ZS_RECOMPUTE_NONE = 0,
    ZS_RECOMPUTE_BLOCK,
} zs_recompute;

/* Causal attention kernel (docs/models.md). FLASH, the default, keeps O(T) per head (each
 * row's output and log-sum-exp) and recomputes the probabilities block by block in backward;
 * NAIVE keeps every head's T x T probabilities for backward (the earlier kernel, kept so that
 * benchmarks can compare the two in one run). */
typedef enum zs_attention {
    ZS_ATTENTION_FLASH = 0,
    ZS_ATTENTION_NAIVE,
} zs_attention;

/* How training data becomes samples (docs/data.md). NONE: every step draws random windows of
 * the token stream. The others read the data as documents (token shards: a document ends with
 * the end-of-text id, inclusive; byte-level text: with a separator line) and walk their samples
 * in epochs, each a permutation seeded by (seed, epoch):
 *  PACK    non-overlapping windows of seq tokens over the documents, attention kept inside
 *          each document (a block-diagonal causal mask), positions restarting at each document
 *          start, and the target that crosses into the next document left out of the loss;
 *  CONCAT  the same windows without masks: running positions, every target counts;
 *  PAD     one document per row, a longer one continued in further rows of seq tokens (each
 *          row its own sequence), the rest padded; padding takes no part in attention or loss.
 * With any of them the loss is the mean over the real targets of the whole global batch. */
typedef enum zs_docs_mode {
    ZS_DOCS_NONE = 0,
    ZS_DOCS_PACK,
    ZS_DOCS_CONCAT,
    ZS_DOCS_PAD,
} zs_docs_mode;

/* "none", "pack", "concat", "pad" and back (ZS_ERR_INVALID naming the choices). */
const char *zs_docs_mode_name(zs_docs_mode m);
zs_status zs_docs_mode_parse(const char *name, zs_docs_mode *out);

/* Where a GPU rank keeps its training state (docs/sharding.md "Offload"). OPTIMIZER (ZeRO-Offload,
 * FSDP's optimizer offload): the fp32 master and Adam m, v of the rank's range live in pinned host
 * memory; each step copies the gradient shard to the host, runs AdamW there (the arithmetic of the
 * device's step, so the bits are the same) and uploads the updated compute copy. PARAMS (ZeRO-3
 * only; ZeRO-Infinity's parameter offload, FSDP's CPUOffload): the same, and the rank's parameter
 * shard stays on the host too, copied to the device just before each all-gather. Refused on CPU
 * ranks, whose device memory is host memory already. */
typedef enum zs_offload {
    ZS_OFFLOAD_NONE = 0,
    ZS_OFFLOAD_OPTIMIZER = 1,
    ZS_OFFLOAD_PARAMS = 2
} zs_offload;
/* "none", "optimizer", "params" (the --offload values); "?" for anything else. */
const char *zs_offload_name(zs_offload mode);

/* Training settings that change memory but not the model. All-zero = fp32, no recompute,
 * flash attention. */
typedef struct zs_mem_options {
    zs_recompute recompute;
    zs_attention attention;
    zs_dtype dtype;        /* compute copy of the parameters: F32 or BF16 */
    zs_dtype reduce_dtype; /* gradients (storage and reduction): F32 or BF16 */
    const char *comm;      /* backend as --comm: NULL/"auto" (or $ZS_COMM) means shm on one host,
                              whose staging slots count in ZS_MEM_COMM; mpi/nccl count none */
    const char *device;    /* "cpu" (NULL too) or "cuda": the device whose memory is predicted.
                              On a GPU, host memory (the comm backends' and the tokens' pinned
                              staging) is not part of it; the reductions' scratch is. */
    zs_docs_mode docs;     /* PACK and PAD add each token's document start to the batch */
    zs_offload offload;    /* OPTIMIZER, PARAMS: the offloaded state counted in host_bytes */
    double offload_fraction; /* as zs_module_config's: 0 = all */
    /* The shard group's size S (zs_mesh_shard_group; 0: the world), and the hosts the ranks are
     * spread over (0, 1: one): with "auto", communicators across hosts count gloo's staging,
     * those within one shm's. */
    int shard_group;
    int nnodes;
} zs_mem_options;

/* The model-state formula (docs/architecture.md "Memory accounting") for a stage and opts' dtypes
 * (NULL: fp32): per-rank bytes = a·Ψ + b·Ψ/N, e.g. ZeRO-1 fp32 a = 8, b = 8; ZeRO-2 bf16 params and
 * grads a = 2, b = 14. Computed from the bytes per parameter of each state, independently of the
 * layout and the estimator, so tests and benchmarks can hold both to it. */
void zs_mem_formula(int stage, const zs_mem_options *opts, int *a, int *b);

/* zs_mem_estimate_compute with options; opts NULL = all defaults. */
zs_status zs_mem_estimate_compute_opts(const zs_model_config *cfg, int world_size, int stage,
                                       int batch, int seq, int grad_accum, int prefetch,
                                       const zs_mem_options *opts, zs_mem_estimate *out);

/* What would fit under cap bytes per rank when the configuration given does not: each
 * single change that fits, as the flags a user would add (--recompute block, a larger
 * --grad-accum, i.e. a smaller micro-batch, a higher --stage, more ranks with --stage 3), with
 * its per-rank total, separated by "; "; if none does alone, the smallest world size at which
 * ZeRO-3 with --recompute block and a micro-batch of one fits. Writes a NUL-terminated text of
 * at most n bytes to out ("" when the configuration already fits). */
void zs_mem_fit_hint(const zs_model_config *cfg, int world_size, int stage, int batch, int seq,
                     int grad_accum, int prefetch, const zs_mem_options *opts, uint64_t cap,
                     char *out, size_t n);

/* ---- training ------------------------------------------------------------------------ */

typedef enum zs_stage {
    ZS_STAGE_DDP = 0,
    ZS_STAGE_1 = 1,
    ZS_STAGE_2 = 2,
    ZS_STAGE_3 = 3,
} zs_stage;

/* The sharded module's settings, read by the module API (include/zshard/module.h) and the
 * engine: a trainer reads its own and hands this part on as it is (docs/architecture.md
 * "Layers"). */
typedef struct zs_module_config {
    zs_stage stage;       /* ZS_STAGE_DDP (default), 1, 2, 3 */
    int prefetch;         /* ZeRO-3 units gathered ahead of the current one (default 1) */
    zs_dtype param_dtype; /* compute copy: F32 (default) or BF16; begin always returns fp32 */
    zs_dtype grad_dtype;  /* gradient storage and reduction: F32 (default) or BF16 */
    uint64_t seed;        /* init seed (default 1337) */
    const char *device;   /* "cpu" (default, NULL too) or "cuda": where parameters, gradients
                             and optimizer state live and the pointers begin returns point.
                             In a zs_train_config: also "auto", and NULL = auto
                             (zs_device_choose) */
    const char *name;     /* recorded in checkpoints (default "module"); a trainer's is its
                             model's name */
    int tf32;             /* fp32 compute copy: GEMMs of models built on the module take TF32
                             inputs (a bf16 copy always takes bf16 GEMMs) */
    zs_offload offload;   /* NONE (default), OPTIMIZER or PARAMS: state in host memory */
    double offload_fraction; /* with offload: the share of the optimizer state offloaded, in
                                (0, 1]; 0 = all. Whole units in layout order, the first ones
                                until the share is reached (zs_offload_choose) */
    int shard_group; /* HSDP (docs/sharding.md "Hybrid sharding"): each group of shard_group
                        consecutive ranks splits the state as the stage says, and the groups
                        replicate it (the gradient shard all-reduced across them); a divisor of
                        the world size, stages 1-3. ZS_SHARD_GROUP_HOST: the ranks of each
                        host. 0 (default), or the world size: flat */
    int replicate;   /* HSDP's other face: the number of groups (world = replicate x
                        shard_group); 0: from shard_group */
} zs_module_config;

/* zs_module_config.shard_group: one group per host, of its LOCAL_WORLD_SIZE ranks. */
#define ZS_SHARD_GROUP_HOST (-1)

/* The shard group's size S that cfg's shard_group and replicate give at world ranks, local of
 * them per host (zs_module_create's mesh); ZS_ERR_INVALID, naming the flag, when they do not
 * divide the world or contradict each other. */
zs_status zs_mesh_shard_group(const zs_module_config *cfg, int world, int local, int *S);

typedef struct zs_train_config {
    zs_model_config model;
    zs_module_config module; /* the module's part: stage, prefetch, param_dtype (--dtype),
                                grad_dtype (--reduce-dtype), seed (also the data order's),
                                device, tf32; its name is the model's */
    const char *data_path;   /* text file, or llm.c token shard (.bin); NULL: batches come
                                from memory (zs_trainer_step_batch) or none (generation), with
                                the vocabulary of `vocab`, else model.vocab */
    const char *val_path;    /* optional separate validation shard; NULL = split data_path */
    int vocab;               /* token shards: tokenizer vocabulary; 0 = GPT-2's 50257 */
    double val_fraction;     /* tail fraction held out for validation when splitting */
    int batch;               /* global batch: sequences per optimizer step, all ranks */
    int seq;                 /* sequence length */
    int steps;               /* optimizer steps */
    int grad_accum;          /* micro-batches per step */
    float lr;                /* peak learning rate */
    float min_lr_frac;       /* cosine floor as a fraction of lr */
    int warmup;              /* linear warmup steps */
    float weight_decay;      /* applied to matrices only */
    float beta1, beta2, eps; /* Adam */
    float grad_clip;         /* global-norm clip; <= 0 disables */
    uint64_t device_mem;     /* per-rank cap in bytes; 0 = none. The cap is process-wide
                                (zs_mem_set_cap) while the trainer lives; destroy restores
                                the cap it found */
    const char *comm;       /* "auto", "shm", "mpi", "nccl" (NULL = auto / ZS_COMM) */
    double comm_timeout_s;  /* 0 = the comm default (300 s or ZS_COMM_TIMEOUT) */
    zs_recompute recompute; /* activation checkpointing (ZS_RECOMPUTE_NONE) */
    zs_attention attention; /* attention kernel (ZS_ATTENTION_FLASH) */
    /* Documents and epochs (docs/data.md); data_path is required for any docs mode. */
    zs_docs_mode docs;   /* NONE (default): random windows, as without these fields */
    int epochs;          /* > 0 (docs modes): train epochs x steps-per-epoch steps, or `steps`
                            when that is positive and smaller (zs_trainer_total_steps) */
    int64_t eos_id;      /* token shards: the id that ends a document; -1 (default):
                            dataset.json's beside data_path, else 50256 for GPT-2's vocabulary */
    int64_t pad_id;      /* the input id of padding; -1 (default): dataset.json's pad_id, else
                            the end-of-document id (text: the separator line's first byte) */
    const char *doc_sep; /* byte-level text: a line equal to this ends a document (the line
                            belongs to the document it ends); NULL: text has no documents */
} zs_train_config;

/* The compute device for `device` ("cpu", "cuda", "auto" or NULL = auto): *chosen becomes
 * "cpu" or "cuda" (a static string) and why (n bytes) a one-line reason for the banner. auto
 * picks a CUDA device when one is visible, else the CPU. "cuda" without one is
 * ZS_ERR_UNSUPPORTED with zs_last_error() saying exactly why (no CUDA backend in this build, no
 * visible device). Anything else is ZS_ERR_INVALID. */
zs_status zs_device_choose(const char *device, const char **chosen, char *why, size_t n);

zs_train_config zs_train_config_default(void);

typedef struct zs_trainer zs_trainer_t;

typedef struct zs_step_stats {
    int step;   /* 1-based index of the step just taken */
    float loss; /* mean training loss of the step's global batch */
    float lr;
    float grad_norm; /* global norm before clipping */
    double ms;       /* wall time of the step */
    double tokens_per_s;
    int64_t targets; /* real targets the loss averages: batch x seq, fewer with documents */
} zs_step_stats;

/* Builds model, data, optimizer. Allocates all persistent state (accounted). On error
 * *out is NULL and zs_last_error() says why. */
zs_status zs_trainer_create(const zs_train_config *cfg, zs_trainer_t **out);
void zs_trainer_destroy(zs_trainer_t *t);
/* One optimizer step over the global batch of step (current step + 1). */
zs_status zs_trainer_step(zs_trainer_t *t, zs_step_stats *stats);
/* Mean loss over n_batches fixed validation batches, at most zs_trainer_val_batches(t): each
 * window (or document sample) of the split counts once, the last batch's rows past the split
 * are empty. zs_trainer_last_eval says how many batches and real targets it took. */
zs_status zs_trainer_eval(zs_trainer_t *t, int n_batches, float *loss);
/* Generate n_tokens after prompt (byte text for byte-level data), greedy if temperature<=0.
 * Writes a NUL-terminated string of at most cap bytes to out (raw bytes for byte models,
 * token ids as text otherwise). */
zs_status zs_trainer_sample(zs_trainer_t *t, const char *prompt, int n_tokens, float temperature,
                            uint64_t seed, char *out, size_t cap);
/* FNV-1a 64 hash of all fp32 master parameters in unit layout order (padding excluded).
 * Collective across ranks (sharded stages gather the shards); every rank gets the hash. */
zs_status zs_trainer_param_hash(zs_trainer_t *t, uint64_t *hash);
/* Write all fp32 master parameters, layout order, raw little-endian floats, to path (rank 0
 * writes; collective). A debugging and testing aid: compare runs element by element. */
zs_status zs_trainer_dump_params(zs_trainer_t *t, const char *path);
/* Collective: *any = 1 on every rank when flag is non-zero on at least one rank, else 0
 * (e.g. "a rank was asked to stop": all ranks then stop after the same step). One small
 * all-reduce; no communication in a world of one. */
zs_status zs_trainer_any(zs_trainer_t *t, int flag, int *any);
/* This process's rank and the world size (1 and 0 without a launcher). */
int zs_trainer_rank(const zs_trainer_t *t);
int zs_trainer_world_size(const zs_trainer_t *t);
/* HSDP's shard group size (the world size when flat) and the hosts the ranks are on. */
int zs_trainer_shard_group(const zs_trainer_t *t);
int zs_trainer_nnodes(const zs_trainer_t *t);
/* HSDP's mesh in words for banners ("2 replicas x shard groups of 2 ranks; shard group shm (...),
 * replica group gloo (...)"); "" when flat. Owned by t. */
const char *zs_trainer_mesh(const zs_trainer_t *t);
/* The communication backend the trainer's communicator runs on ("local" for one process,
 * "shm", "gloo", "mpi", "nccl") and why it was chosen ("" for "local": zs_comm_backend_reason),
 * and the device it computes on with the reason it was chosen (zs_device_choose). */
const char *zs_trainer_comm_name(const zs_trainer_t *t);
const char *zs_trainer_comm_reason(const zs_trainer_t *t);
const char *zs_trainer_device(const zs_trainer_t *t, const char **why);
/* Memory statistics of every rank, rank order, into all[world_size]. Collective. */
zs_status zs_trainer_gather_mem(zs_trainer_t *t, zs_mem_stats *all);
/* Host memory (pinned staging, --offload's state) of every rank the same way. Collective. */
zs_status zs_trainer_gather_host_mem(zs_trainer_t *t, zs_mem_stats *all);
const zs_model_config *zs_trainer_model(const zs_trainer_t *t);
/* Vocabulary size that the data implies (256 for text, 50257 for GPT-2 token shards). */
int zs_trainer_vocab(const zs_trainer_t *t);

/* ---- training from memory (docs/embedding.md) -------------------------------------------
 * Batches are [rows, seq] int32 token ids in [0, vocab), row-major; targets[i] is the token
 * that should follow tokens[i]. The global batch of a step is cfg.batch rows. Each rank
 * passes either its own slice, rows = batch / world_size (rank r holds global rows
 * [r * rows, (r + 1) * rows), the same rule as the data loader), or the whole global batch,
 * rows = batch, of which each rank uses that same slice. Every call here is collective.
 * Batches from memory are plain streams: no document masks, every target in [0, vocab), and
 * the loss divides by batch x seq. Documents (cfg.docs) come from data_path. */

/* One optimizer step on the given batch; the loss in stats is the global batch's mean.
 * Micro-batches (cfg.grad_accum) are consecutive rows of the rank's slice. */
zs_status zs_trainer_step_batch(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                                int rows, zs_step_stats *stats);
/* Mean loss over the global batch without a gradient pass (rows as in step_batch). */
zs_status zs_trainer_eval_batch(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                                int rows, float *loss);
/* Logits of every position for this rank's own tokens[rows, seq] (rows >= 1, any number, seq
 * <= cfg.seq; ranks may pass different tokens but the same rows and seq): writes
 * logits[rows, seq, vocab] (the real vocabulary, fp32). */
zs_status zs_trainer_forward_logits(zs_trainer_t *t, const int32_t *tokens, int rows, int seq,
                                    float *logits);
/* Learning rate of the following steps: lr > 0 replaces the schedule, 0 restores it. */
zs_status zs_trainer_set_lr(zs_trainer_t *t, float lr);
/* Full fp32 values of a parameter by name (docs/models.md's names, e.g. "wte.weight"), count
 * = its elements; set replaces the master weights with rank 0's values. Collective. */
zs_status zs_trainer_get_param(zs_trainer_t *t, const char *name, float *out, size_t count);
zs_status zs_trainer_set_param(zs_trainer_t *t, const char *name, const float *values,
                               size_t count);
/* The trainer's sharded module (include/zshard/module.h): tensor names and shapes
 * (zs_module_tensor_at), memory, hashes. Owned by the trainer. */
struct zs_module *zs_trainer_module(zs_trainer_t *t);

/* Communicators and collectives: zs_comm_* (docs/comm.md). */
#include "zshard/comm.h"

/* ---- checkpoints (docs/checkpoint.md) -------------------------------------------------- */

/* Save the trainer's state (fp32 master parameters, Adam m and v, step, seed, settings) as
 * save_dir/step_NNNNNNNN: every rank writes its own zstd file in parallel, rank 0 writes
 * manifest.json, publishes the directory by an atomic rename after fsync, points
 * save_dir/latest at it and keeps the newest `keep` checkpoints (keep <= 0: all). A crash at
 * any instant leaves the previous checkpoint loadable. Collective: every rank calls it. */
zs_status zs_trainer_save(zs_trainer_t *t, const char *save_dir, int keep);
/* Record the run's configuration, one JSON object (e.g. `zshard train --print-config`'s
 * settings), in the manifest of every later save as "run_config". Copied; NULL clears it. A
 * record only: resuming reads its settings from the manifest's own fields. */
zs_status zs_trainer_set_run_config(zs_trainer_t *t, const char *json);
/* Load a checkpoint into a freshly created trainer: path is a checkpoint directory or a save
 * dir (its `latest`). Any saved world size and stage loads at this run's world size and stage;
 * the model config must match. Continues bitwise-identically at the same world size and
 * stage. Collective. */
zs_status zs_trainer_resume(zs_trainer_t *t, const char *path);
/* Optimizer steps taken so far (the checkpoint's step after a resume). */
int zs_trainer_steps_done(const zs_trainer_t *t);

/* ---- weights from elsewhere -------------------------------------------------
 * A weights source is a zshard checkpoint (directory or save dir), a safetensors file, a
 * Hugging Face model directory (config.json + model.safetensors, or its sharded index) or an
 * llm.c model file; which one is decided by what the path holds. */

/* The model config a source describes. hint (NULL = none) supplies what a bare safetensors
 * file does not say (heads; LLaMA's positions, rope_theta, norm_eps); for a Hugging Face
 * directory every field of hint that is set must agree with config.json. */
zs_status zs_model_config_from(const char *path, const zs_model_config *hint, zs_model_config *cfg);
/* Load only the weights of a source into a freshly created trainer: the step stays 0, Adam's
 * m and v stay zero, and the run's own schedule applies (fine-tuning). The model must be the
 * source's (zs_model_config_from). Any world size and stage. A zshard checkpoint is read by
 * every rank for its own range; any other source is first converted by rank 0 into a
 * temporary checkpoint under $TMPDIR (else /tmp), which is removed afterwards, so with ranks
 * on several hosts use a zshard checkpoint (`zshard ckpt import`). Collective. */
zs_status zs_trainer_init_from(zs_trainer_t *t, const char *path);
/* Text generation. Every rank calls it (ZeRO-3 gathers are collective) and gets the same
 * tokens: sampling draws from Philox(seed, token index), so a seed fixes the output. */
typedef struct zs_gen_config {
    int max_tokens;     /* new tokens at most */
    float temperature;  /* <= 0: greedy (argmax) */
    int top_k;          /* keep the k most likely tokens; 0 = all */
    float top_p;        /* keep the smallest set whose probability reaches p; >= 1 = all */
    uint64_t seed;      /* sampling stream */
    int eos;            /* stop after generating this token; -1 = never */
    double max_seconds; /* stop once generation has taken this long; 0 = no limit */
    int no_cache;       /* 1: recompute the whole window for every token (no KV cache; the
                           reference the cache is tested against, and the CUDA path) */
} zs_gen_config;

zs_gen_config zs_gen_config_default(void);
/* Continue prompt[n_prompt] (token ids, at least one) by up to cfg->max_tokens tokens into
 * out[cap] (cap >= max_tokens); *n_out receives how many. The context is the last `seq`
 * tokens of the run's configuration (the model's window). On the CPU a KV cache of `seq`
 * positions (zs_trainer_generate_info) makes each token one forward over one position; when
 * it fills, the last seq/2 tokens are fed again and generation goes on. Without the cache
 * (cfg->no_cache, or a CUDA run) the window is recomputed for every token. */
zs_status zs_trainer_generate(zs_trainer_t *t, const zs_gen_config *cfg, const int32_t *prompt,
                              int n_prompt, int32_t *out, int cap, int *n_out);
/* One line on the last zs_trainer_generate: cache or not, the cache's bytes, and under
 * ZeRO-3 whether the whole model was gathered once or each unit once per token. Owned by t. */
const char *zs_trainer_generate_info(const zs_trainer_t *t);
/* Windows of seq+1 tokens in the validation split (what zs_trainer_eval cycles through); with
 * documents, the validation split's samples (windows or rows). */
int64_t zs_trainer_val_windows(const zs_trainer_t *t);
/* The validation batches that cover the split once (the last one partly), at least 1. */
int zs_trainer_val_batches(const zs_trainer_t *t);
/* The last zs_trainer_eval's batches (after the cap) and the real targets its mean is over. */
void zs_trainer_last_eval(const zs_trainer_t *t, int *batches, int64_t *targets);

/* Where the data stands (docs modes; all zero without them). After step s (1-based) the run is
 * in epoch `epoch` (1-based) and has taken `position` of its `samples` samples; the global
 * batch of a step holds `batch` samples, the last step of an epoch fewer (its remaining rows
 * are empty: no targets, so they change nothing). `fingerprint` identifies the training data
 * and the document settings (a resume on other data is refused). */
typedef struct zs_data_position {
    int64_t epoch, position, samples, steps_per_epoch;
    int64_t documents; /* in the training split */
    uint64_t fingerprint;
} zs_data_position;
/* The position after `step` (0: before the first step). */
zs_status zs_trainer_data_position(const zs_trainer_t *t, int64_t step, zs_data_position *out);
/* The run's length in steps: cfg.steps, or with cfg.epochs the steps of that many epochs
 * (capped by a positive cfg.steps). */
int zs_trainer_total_steps(const zs_trainer_t *t);

#ifdef __cplusplus
}
#endif

/* The sharding API for your own model: units, zs_module_* (docs/embedding.md). */
#include "zshard/module.h"

#endif /* ZSHARD_H */

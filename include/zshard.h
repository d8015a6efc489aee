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
} zs_dtype;

size_t zs_dtype_size(zs_dtype dt);
const char *zs_dtype_name(zs_dtype dt);

/* Every allocation names one of these (DESIGN.md §8). */
typedef enum zs_mem_category {
    ZS_MEM_PARAM = 0,   /* full compute-dtype parameters, persistent */
    ZS_MEM_PARAM_SHARD, /* this rank's fp32 master-parameter shard */
    ZS_MEM_GRAD,        /* full gradients, persistent */
    ZS_MEM_GRAD_SHARD,  /* this rank's fp32 gradient shard */
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
} zs_arch;

typedef struct zs_model_config {
    zs_arch arch;
    int n_layer;
    int n_head;
    int n_embd;
    int max_seq;      /* positions */
    int vocab;        /* real vocabulary size */
    int padded_vocab; /* vocab rounded up to a multiple of 64, for the GEMMs */
    char name[32];
} zs_model_config;

/* Fill *cfg from a preset name: gpt2-tiny, gpt2-mini, gpt2-124m, gpt2-355m, gpt2-774m,
 * gpt2-1558m. vocab is set by the caller (it comes from the data); padded_vocab is derived
 * by zs_model_config_set_vocab. */
zs_status zs_model_preset(const char *name, zs_model_config *cfg);
void zs_model_config_set_vocab(zs_model_config *cfg, int vocab);
/* Comma-separated list of preset names, for help texts. */
const char *zs_model_preset_names(void);
/* Number of real (unpadded) parameters. */
int64_t zs_model_num_params(const zs_model_config *cfg);

/* ---- training ------------------------------------------------------------------------ */

typedef enum zs_stage {
    ZS_STAGE_DDP = 0,
    ZS_STAGE_1 = 1,
    ZS_STAGE_2 = 2,
    ZS_STAGE_3 = 3,
} zs_stage;

typedef struct zs_train_config {
    zs_model_config model;
    const char *data_path;   /* text file, or llm.c token shard (.bin) */
    const char *val_path;    /* optional separate validation shard; NULL = split data_path */
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
    uint64_t seed;
    zs_stage stage;
    uint64_t device_mem;     /* per-rank cap in bytes; 0 = none */
} zs_train_config;

zs_train_config zs_train_config_default(void);

typedef struct zs_trainer zs_trainer_t;

typedef struct zs_step_stats {
    int step;         /* 1-based index of the step just taken */
    float loss;       /* mean training loss of the step's global batch */
    float lr;
    float grad_norm;  /* global norm before clipping */
    double ms;        /* wall time of the step */
    double tokens_per_s;
} zs_step_stats;

/* Builds model, data, optimizer. Allocates all persistent state (accounted). On error
 * *out is NULL and zs_last_error() says why. */
zs_status zs_trainer_create(const zs_train_config *cfg, zs_trainer_t **out);
void zs_trainer_destroy(zs_trainer_t *t);
/* One optimizer step over the global batch of step (current step + 1). */
zs_status zs_trainer_step(zs_trainer_t *t, zs_step_stats *stats);
/* Mean loss over n_batches fixed validation batches. */
zs_status zs_trainer_eval(zs_trainer_t *t, int n_batches, float *loss);
/* Generate n_tokens after prompt (byte text for byte-level data), greedy if temperature<=0.
 * Writes a NUL-terminated string of at most cap bytes to out (raw bytes for byte models,
 * token ids as text otherwise). */
zs_status zs_trainer_sample(zs_trainer_t *t, const char *prompt, int n_tokens,
                            float temperature, uint64_t seed, char *out, size_t cap);
/* FNV-1a 64 hash of all fp32 master parameters in unit layout order (padding excluded). */
uint64_t zs_trainer_param_hash(zs_trainer_t *t);
const zs_model_config *zs_trainer_model(const zs_trainer_t *t);
/* Vocabulary size that the data implies (256 for text, 50257 for GPT-2 token shards). */
int zs_trainer_vocab(const zs_trainer_t *t);

#ifdef __cplusplus
}
#endif
#endif /* ZSHARD_H */

/* The trainer's state, shared by trainer.c and the other files of src/train (checkpoint
 * glue, estimator) that need to reach the engine, the layout or the step counter. */
#ifndef ZS_TRAIN_TRAINER_INTERNAL_H
#define ZS_TRAIN_TRAINER_INTERNAL_H

#include "backend/device.h"
#include "backend/ops.h"
#include "data/data.h"
#include "data/docs.h"
#include "ckpt/ckpt.h"
#include "models/model.h"
#include "shard/module.h"
#include "train/docs_setup.h"
#include "zshard.h"

struct zs_trainer {
    zs_train_config cfg;
    zs_model_config model_cfg;
    const zs_ops *ops;
    const zs_device *dev;
    zs_stream_t *stream; /* the module's compute stream */
    zs_dataset data;
    zs_layout layout;
    zs_module_t *engine; /* the model's sharded parameters: only zs_module_* calls */
    zs_model_t *model;
    zs_comm_t *comm; /* NULL for a world of one */
    int rank, world;
    int shard, nnodes; /* the shard group's size (HSDP; the world when flat); hosts */
    int micro; /* sequences per micro-batch on this rank */
    /* trainer_io.c: pinned host staging of the tokens (two, alternating; h_ev[j] marks the
     * upload that last read buffer j), the device's token buffers, and the loss sum of each
     * micro-batch of a step in device memory with its host copy. */
    int32_t *h_in[2], *h_tg[2];
    zs_event_t *h_ev[2];
    int turn;
    int32_t *d_in, *d_tg;
    double *d_loss, *h_loss;
    int n_loss;
    int step;             /* optimizer steps taken */
    int has_data;         /* 0: no data_path, batches come from memory */
    int cap_set;          /* cfg.device_mem set the process-wide cap; destroy restores: */
    uint64_t cap_before;  /* the cap before it (one process may make several trainers) */
    float lr_override;    /* > 0: every step uses it instead of the schedule */
    const char *device;   /* zs_device_choose's choice */
    char device_why[256]; /* and its reason, for the banner */
    char mesh[640];       /* HSDP's groups in words (zs_trainer_mesh); "" when flat */
    char gen_info[256];   /* zs_trainer_generate_info */
    char *run_config;     /* zs_trainer_set_run_config: a JSON object for the manifests */
    int eval_batches;     /* the last zs_trainer_eval: batches after the cap, */
    int64_t eval_targets; /* and the real targets its mean is over */
    /* Documents (cfg.docs, trainer_docs.c): the rules, both splits' samples, the epoch layout,
     * the fingerprint of the training data (computed once, when first needed) and the token's
     * document starts staged and on the device (PACK and PAD only; NULL otherwise). */
    zs_doc_rules docr;
    zs_doc_index dtrain, dval;
    int64_t steps_per_epoch;
    uint64_t fingerprint;
    int fingerprint_done;
    int32_t *h_seg[2], *d_seg;
    FILE *trace; /* ZS_DATA_TRACE: every rank's samples, step by step (tests) */
};

/* Device traffic (trainer_io.c). io_next returns the host staging buffers of the next upload
 * (fill rows x seq tokens and targets there); io_upload copies them to d_in/d_tg; io_pass uploads
 * and runs forward (+ backward) writing micro-batch k's loss sum to d_loss[k]; io_losses adds the
 * first n loss sums in order (one copy back). io_bytes: what io_create allocates in the compute
 * ledger (for the estimator). */
zs_status zs_trainer_io_create(zs_trainer_t *t);
void zs_trainer_io_destroy(zs_trainer_t *t);
zs_status zs_trainer_io_next(zs_trainer_t *t, int32_t **in, int32_t **tg);
zs_status zs_trainer_io_upload(zs_trainer_t *t, int rows, int seq, int targets);
zs_status zs_trainer_io_pass(zs_trainer_t *t, int rows, int seq, float dloss, int backward, int k);
/* The staging buffer of the next upload's document starts (NULL unless the run masks). */
int32_t *zs_trainer_io_seg(zs_trainer_t *t);
zs_status zs_trainer_io_losses(zs_trainer_t *t, int n, double *sum);
uint64_t zs_trainer_io_bytes(int micro, int seq, int grad_accum, int host_memory, int seg);
/* Whether a docs mode masks attention (and so stages document starts): PACK and PAD. */
int zs_trainer_io_masks(zs_docs_mode docs);

/* Documents (trainer_docs.c). setup: after the data is open, resolve the rules, move the split
 * to a document boundary, index both splits, and fix the run's steps (cfg.epochs). */
zs_status zs_trainer_docs_setup(zs_trainer_t *t, const zs_docs_meta *meta);
void zs_trainer_docs_free(zs_trainer_t *t);
/* Fill t->micro rows of step `step`'s global batch from slot `first` (this rank's micro-batch);
 * the real targets of the whole global batch of a step (every rank computes it alike). */
zs_status zs_trainer_docs_fill(zs_trainer_t *t, int64_t step, int first, int32_t *in, int32_t *tg,
                               int32_t *seg);
int64_t zs_trainer_docs_targets(const zs_trainer_t *t, int64_t step);
/* Validation batch k (0-based) with documents: its rows from slot `first`; the real targets of
 * the whole global batch. */
void zs_trainer_docs_val_fill(zs_trainer_t *t, int64_t k, int first, int32_t *in, int32_t *tg,
                              int32_t *seg);
int64_t zs_trainer_docs_val_targets(const zs_trainer_t *t, int64_t k);
/* The checkpoint's data record (ckpt.h zs_ckpt_info) and the check of a resumed one. */
void zs_trainer_docs_info(const zs_trainer_t *t, zs_ckpt_info *in);
zs_status zs_trainer_docs_check(const zs_trainer_t *t, const zs_ckpt_info *in, const char *dir);

/* One optimizer step; tokens/targets NULL: the data's batch of the step, else this rank's
 * [batch / world, seq] rows from memory (validated by the caller). */
zs_status zs_trainer_step_rows(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                               zs_step_stats *stats);

#endif

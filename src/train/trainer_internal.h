/* The trainer's state, shared by trainer.c and the other files of src/train (checkpoint
 * glue, estimator) that need to reach the engine, the layout or the step counter. */
#ifndef ZS_TRAIN_TRAINER_INTERNAL_H
#define ZS_TRAIN_TRAINER_INTERNAL_H

#include "backend/ops.h"
#include "data/data.h"
#include "models/model.h"
#include "shard/module.h"
#include "zshard.h"

struct zs_trainer {
    zs_train_config cfg;
    zs_model_config model_cfg;
    const zs_ops *ops;
    zs_stream_t *stream;
    zs_dataset data;
    zs_layout layout;
    zs_module_t *engine; /* the model's sharded parameters: only zs_module_* calls */
    zs_model_t *model;
    zs_comm_t *comm; /* NULL for a world of one */
    int rank, world;
    int micro;       /* sequences per micro-batch on this rank */
    int32_t *inputs; /* [micro, seq] */
    int32_t *targets;
    int step;             /* optimizer steps taken */
    int has_data;         /* 0: no data_path, batches come from memory */
    float lr_override;    /* > 0: every step uses it instead of the schedule */
    const char *device;   /* zs_device_choose's choice */
    char device_why[160]; /* and its reason, for the banner */
    char gen_info[256];   /* zs_trainer_generate_info */
};

/* One optimizer step; tokens/targets NULL: the data's batch of the step, else this rank's
 * [batch / world, seq] rows from memory (validated by the caller). */
zs_status zs_trainer_step_rows(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                               zs_step_stats *stats);

#endif

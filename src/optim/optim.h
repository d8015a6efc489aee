/* AdamW's hyper-parameters, the learning-rate schedule (linear warmup + cosine decay) and the
 * global-norm clipping factor. The update itself runs through the ops table's adamw_segs on
 * each rank's own shard (the shared arithmetic: backend/kernels/adamw.h); weight decay follows
 * the per-tensor flag of the unit layout. */
#ifndef ZS_OPTIM_H
#define ZS_OPTIM_H

#include "backend/ops.h"

typedef struct zs_adamw_hparams {
    float lr;
    float beta1, beta2, eps;
    float weight_decay; /* applied only where the layout's decay flag is set */
} zs_adamw_hparams;

/* Learning rate for 1-based step `step` of `total`: linear warmup over `warmup` steps from
 * lr/warmup to lr, then cosine decay to lr * min_frac at step `total`. */
float zs_lr_schedule(int step, int total, int warmup, float lr, float min_frac);

/* Factor that scales gradients so their global norm is at most clip (1 if clip <= 0 or the
 * norm is already below it, or the norm is not finite). */
float zs_clip_scale(double global_norm, float clip);

#endif

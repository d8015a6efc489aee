/* LR schedule, clipping factor and the AdamW range update. */
#include "optim/optim.h"

#include "core/status.h"

#include <math.h>

float zs_lr_schedule(int step, int total, int warmup, float lr, float min_frac) {
    if (warmup > 0 && step <= warmup) return lr * (float)step / (float)warmup;
    if (total <= warmup) return lr;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    if (progress > 1.0) progress = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * progress));
    double min_lr = (double)lr * min_frac;
    return (float)(min_lr + coeff * ((double)lr - min_lr));
}

float zs_clip_scale(double global_norm, float clip) {
    if (clip <= 0.0f || !isfinite(global_norm) || global_norm <= (double)clip) return 1.0f;
    return (float)((double)clip / (global_norm + 1e-6));
}

zs_status zs_adamw_update(const zs_ops *ops, zs_stream_t *s, float *param, const float *grad,
                          float *m, float *v, size_t n, const zs_adamw_hparams *h, int decay,
                          float grad_scale, int t) {
    if (n == 0) return ZS_OK;
    return ops->adamw(s, param, grad, m, v, n, h->lr, h->beta1, h->beta2, h->eps,
                      decay ? h->weight_decay : 0.0f, grad_scale, t);
}

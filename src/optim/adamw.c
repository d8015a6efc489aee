/* LR schedule and clipping factor (the AdamW arithmetic itself: backend/kernels/adamw.h). */
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

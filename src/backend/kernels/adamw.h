/* One AdamW element update (decoupled weight decay, bias-corrected), shared by the CPU loop
 * and the CUDA kernel. */
#ifndef ZS_BACKEND_KERNELS_ADAMW_H
#define ZS_BACKEND_KERNELS_ADAMW_H

#include "backend/kernels/common.h"

/* 1 - beta^t, the bias correction of step t >= 1, computed in double then rounded once. */
static ZS_HD float zs_adamw_bias_correction(float beta, int t) {
    return (float)(1.0 - pow((double)beta, (double)t));
}

/* g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * param -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * param), with bc = 1 - beta^t. */
static ZS_HD void zs_adamw_elem(float *param, float *m, float *v, float grad, float lr, float beta1,
                                float beta2, float eps, float wd, float grad_scale, float bc1,
                                float bc2) {
    float g = grad * grad_scale;
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    *param -= lr * (mhat / (sqrtf(vhat) + eps) + wd * *param);
}

#endif

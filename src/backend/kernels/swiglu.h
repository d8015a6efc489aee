/* SwiGLU gate of LLaMA's MLP, per element: silu(gate) * up with silu(x) = x * sigmoid(x), and
 * its derivative; shared by the CPU loops and the CUDA kernels. */
#ifndef ZS_BACKEND_KERNELS_SWIGLU_H
#define ZS_BACKEND_KERNELS_SWIGLU_H

#include "backend/kernels/common.h"

/* sigmoid through e = exp(-|x|) in (0, 1]: neither branch overflows or cancels. */
static ZS_HD float zs_sigmoid(float x) {
    float e = zs_expf(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

static ZS_HD float zs_silu(float x) {
    return x * zs_sigmoid(x);
}

/* d silu / dx = sigmoid(x) (1 + x (1 - sigmoid(x))). */
static ZS_HD float zs_silu_grad(float x) {
    float sg = zs_sigmoid(x);
    return sg * (1.0f + x * (1.0f - sg));
}

#endif

/* GPT-2's tanh-approximation GELU and its derivative, per element, shared by the CPU loops
 * and the CUDA kernels. */
#ifndef ZS_BACKEND_KERNELS_GELU_H
#define ZS_BACKEND_KERNELS_GELU_H

#include "backend/kernels/common.h"

#define ZS_GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define ZS_GELU_CUBIC 0.044715f

/* Both functions go through e = exp(-2|u|) in (0, 1] rather than tanh(u): with
 * s = (u < 0 ? e : 1), (1 + tanh u) / 2 = s / (1 + e) and sech^2 u = 4e / (1 + e)^2, neither of
 * which cancels, so the result keeps fp32 relative accuracy for large |x| (1 - tanh^2 near 1
 * would lose it all) and the loops vectorise. */

/* gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static ZS_HD float zs_gelu(float x) {
    float u = ZS_GELU_SQRT_2_OVER_PI * (x + ZS_GELU_CUBIC * x * x * x);
    float e = zs_expf(-2.0f * fabsf(u));
    float s = u < 0.0f ? e : 1.0f;
    return x * s / (1.0f + e);
}

/* d gelu / dx = (1 + tanh u) / 2 + x/2 sech^2(u) du/dx. */
static ZS_HD float zs_gelu_grad(float x) {
    float u = ZS_GELU_SQRT_2_OVER_PI * (x + ZS_GELU_CUBIC * x * x * x);
    float e = zs_expf(-2.0f * fabsf(u));
    float s = u < 0.0f ? e : 1.0f;
    float inv = 1.0f / (1.0f + e);
    float du = ZS_GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * ZS_GELU_CUBIC * x * x);
    return s * inv + 0.5f * x * (4.0f * e * inv * inv) * du;
}

#endif

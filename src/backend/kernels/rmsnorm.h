/* RMSNorm of one row of C values (LLaMA's norm: no mean subtraction, no bias), forward and
 * the input gradient of backward, shared by the CPU loops and the CUDA kernels. The weight
 * gradient is a column sum over rows; the caller reduces it in a fixed order. */
#ifndef ZS_BACKEND_KERNELS_RMSNORM_H
#define ZS_BACKEND_KERNELS_RMSNORM_H

#include "backend/kernels/common.h"

/* out = x * rstd * w over one row (Hugging Face's order: normalise, then scale by w);
 * returns rstd = 1 / sqrt(mean(x^2) + eps). */
static ZS_HD float zs_rmsnorm_row_fwd(float *ZS_RESTRICT out, const float *ZS_RESTRICT x,
                                      const float *ZS_RESTRICT w, int C, float eps) {
    float rstd = 1.0f / sqrtf(zs_dot(x, x, C) / (float)C + eps);
    for (int i = 0; i < C; i++)
        out[i] = x[i] * rstd * w[i];
    return rstd;
}

/* dinp += d out / d x applied to dout, for one row:
 * dinp = rstd * (g - xhat * mean(g * xhat)) with g = w * dout and xhat = x * rstd
 * (from d rstd / d x_j = -rstd^3 x_j / C). */
static ZS_HD void zs_rmsnorm_row_bwd(float *ZS_RESTRICT dinp, const float *ZS_RESTRICT dout,
                                     const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                     float rstd, int C) {
    float agx[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= C; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            agx[j] += w[i + j] * dout[i + j] * (x[i + j] * rstd);
    for (; i < C; i++)
        agx[i % ZS_LANES] += w[i] * dout[i] * (x[i] * rstd);
    float mgx = zs_lanes_sum(agx) / (float)C;
    for (i = 0; i < C; i++)
        dinp[i] += rstd * (w[i] * dout[i] - (x[i] * rstd) * mgx);
}

#endif

/* Layer norm of one row of C values, forward and the input gradient of backward. The weight
 * and bias gradients are column sums over rows; the caller reduces them (in a fixed order)
 * with zs_layernorm_xhat. */
#ifndef ZS_BACKEND_KERNELS_LAYERNORM_H
#define ZS_BACKEND_KERNELS_LAYERNORM_H

#include "backend/kernels/common.h"

#define ZS_LAYERNORM_EPS 1e-5f

/* Normalised input (x - mean) * rstd. */
static ZS_HD float zs_layernorm_xhat(float x, float mean, float rstd) {
    return (x - mean) * rstd;
}

/* out = (x - mean) * rstd * w + b over one row; returns mean and rstd. The variance is
 * computed from the centred values (two passes), not E[x^2] - mean^2, which cancels. */
static ZS_HD void zs_layernorm_row_fwd(float *ZS_RESTRICT out, float *mean_out, float *rstd_out,
                                       const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                       const float *ZS_RESTRICT b, int C) {
    float mean = zs_sum(x, C) / (float)C;
    float acc[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= C; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++) {
            float d = x[i + j] - mean;
            acc[j] += d * d;
        }
    for (; i < C; i++)
        acc[i % ZS_LANES] += (x[i] - mean) * (x[i] - mean);
    float rstd = 1.0f / sqrtf(zs_lanes_sum(acc) / (float)C + ZS_LAYERNORM_EPS);
    for (i = 0; i < C; i++)
        out[i] = zs_layernorm_xhat(x[i], mean, rstd) * w[i] + b[i];
    *mean_out = mean;
    *rstd_out = rstd;
}

/* dinp += d out / d x applied to dout, for one row:
 * dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = w * dout. */
static ZS_HD void zs_layernorm_row_bwd(float *ZS_RESTRICT dinp, const float *ZS_RESTRICT dout,
                                       const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                       float mean, float rstd, int C) {
    float ag[ZS_LANES] = {0}, agx[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= C; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++) {
            float g = w[i + j] * dout[i + j];
            ag[j] += g;
            agx[j] += g * zs_layernorm_xhat(x[i + j], mean, rstd);
        }
    for (; i < C; i++) {
        float g = w[i] * dout[i];
        ag[i % ZS_LANES] += g;
        agx[i % ZS_LANES] += g * zs_layernorm_xhat(x[i], mean, rstd);
    }
    float mg = zs_lanes_sum(ag) / (float)C;
    float mgx = zs_lanes_sum(agx) / (float)C;
    for (i = 0; i < C; i++) {
        float xh = zs_layernorm_xhat(x[i], mean, rstd);
        dinp[i] += rstd * (w[i] * dout[i] - mg - xh * mgx);
    }
}

#endif

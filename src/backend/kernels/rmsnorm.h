/* RMSNorm of one row of C values (LLaMA's norm: no mean subtraction, no bias), forward and
 * the input gradient of backward, shared by the CPU loops and the CUDA kernels. The weight
 * gradient is a column sum over rows; the caller reduces it in a fixed order. */
#ifndef ZS_BACKEND_KERNELS_RMSNORM_H
#define ZS_BACKEND_KERNELS_RMSNORM_H

#include "backend/kernels/common.h"

/* 1 / sqrt(mean(x^2) + eps) from the row's sum of squares. */
static ZS_HD float zs_rmsnorm_rstd(float sumsq, int C, float eps) {
    return 1.0f / sqrtf(sumsq / (float)C + eps);
}

/* One row's rstd = 1 / sqrt(mean(x^2) + eps), its sums in the order of a warp per row. */
static ZS_HD float zs_rmsnorm_row_rstd(const float *ZS_RESTRICT x, int C, float eps) {
    float acc[ZS_WARP] = {0};
    ZS_LANE_SUM(acc, ZS_WARP, C, i, x[i] * x[i]);
    return zs_rmsnorm_rstd(zs_tree(acc, ZS_WARP), C, eps);
}

/* out = x * rstd * w over one row (Hugging Face's order: normalise, then scale by w);
 * returns rstd. */
static ZS_HD float zs_rmsnorm_row_fwd(float *ZS_RESTRICT out, const float *ZS_RESTRICT x,
                                      const float *ZS_RESTRICT w, int C, float eps) {
    float rstd = zs_rmsnorm_row_rstd(x, C, eps);
    for (int i = 0; i < C; i++)
        out[i] = x[i] * rstd * w[i];
    return rstd;
}

/* One element of the input gradient: rstd * (g - xhat * mean(g * xhat)), g = w * dout. */
static ZS_HD float zs_rmsnorm_dinp(float g, float xhat, float mgx, float rstd) {
    return rstd * (g - xhat * mgx);
}

/* dinp += d out / d x applied to dout, for one row, with xhat = x * rstd (from d rstd / d x_j =
 * -rstd^3 x_j / C); warp-order sums. */
static ZS_HD void zs_rmsnorm_row_bwd(float *ZS_RESTRICT dinp, const float *ZS_RESTRICT dout,
                                     const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                     float rstd, int C) {
    float agx[ZS_WARP] = {0};
    ZS_LANE_SUM(agx, ZS_WARP, C, i, w[i] * dout[i] * (x[i] * rstd));
    float mgx = zs_tree(agx, ZS_WARP) / (float)C;
    for (int i = 0; i < C; i++)
        dinp[i] += zs_rmsnorm_dinp(w[i] * dout[i], x[i] * rstd, mgx, rstd);
}

#endif

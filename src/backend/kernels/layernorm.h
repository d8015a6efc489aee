/* Layer norm of one row of C values, forward and the input gradient of backward. The weight
 * and bias gradients are column sums over rows; the caller reduces them in the order below
 * with zs_layernorm_xhat. */
#ifndef ZS_BACKEND_KERNELS_LAYERNORM_H
#define ZS_BACKEND_KERNELS_LAYERNORM_H

#include "backend/kernels/common.h"

#define ZS_LAYERNORM_EPS 1e-5f

/* Normalised input (x - mean) * rstd. */
static ZS_HD float zs_layernorm_xhat(float x, float mean, float rstd) {
    return (x - mean) * rstd;
}

/* One row's mean and rstd. The variance is computed from the centred values (two passes), not
 * E[x^2] - mean^2, which cancels. Sums run in the order of a warp per row (common.h). */
static ZS_HD void zs_layernorm_row_stats(float *mean_out, float *rstd_out,
                                         const float *ZS_RESTRICT x, int C) {
    float acc[ZS_WARP] = {0}, sq[ZS_WARP] = {0};
    ZS_LANE_SUM(acc, ZS_WARP, C, i, x[i]);
    float mean = zs_tree(acc, ZS_WARP) / (float)C;
    ZS_LANE_SUM(sq, ZS_WARP, C, i, (x[i] - mean) * (x[i] - mean));
    acc[0] = zs_tree(sq, ZS_WARP);
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(acc[0] / (float)C + ZS_LAYERNORM_EPS);
}

/* out = (x - mean) * rstd * w + b over one row; returns mean and rstd. */
static ZS_HD void zs_layernorm_row_fwd(float *ZS_RESTRICT out, float *mean_out, float *rstd_out,
                                       const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                       const float *ZS_RESTRICT b, int C) {
    zs_layernorm_row_stats(mean_out, rstd_out, x, C);
    float mean = *mean_out, rstd = *rstd_out;
    for (int i = 0; i < C; i++)
        out[i] = zs_layernorm_xhat(x[i], mean, rstd) * w[i] + b[i];
}

/* The input gradient of one element: rstd * (g - mean(g) - xhat * mean(g * xhat)). */
static ZS_HD float zs_layernorm_dinp(float g, float xhat, float mg, float mgx, float rstd) {
    return rstd * (g - mg - xhat * mgx);
}

/* dinp += d out / d x applied to dout, for one row, with g = w * dout (warp-order sums). */
static ZS_HD void zs_layernorm_row_bwd(float *ZS_RESTRICT dinp, const float *ZS_RESTRICT dout,
                                       const float *ZS_RESTRICT x, const float *ZS_RESTRICT w,
                                       float mean, float rstd, int C) {
    float ag[ZS_WARP] = {0}, agx[ZS_WARP] = {0};
    ZS_LANE_SUM(ag, ZS_WARP, C, i, w[i] * dout[i]);
    ZS_LANE_SUM(agx, ZS_WARP, C, i, w[i] * dout[i] * zs_layernorm_xhat(x[i], mean, rstd));
    float mg = zs_tree(ag, ZS_WARP) / (float)C;
    float mgx = zs_tree(agx, ZS_WARP) / (float)C;
    for (int i = 0; i < C; i++)
        dinp[i] +=
            zs_layernorm_dinp(w[i] * dout[i], zs_layernorm_xhat(x[i], mean, rstd), mg, mgx, rstd);
}

/* The order of the weight and bias gradients' column sums: kernels/common.h's, one level
 * deeper, so that a GPU can sum a segment's rows while it has them for dinp (one pass over
 * dout and the input, not two). Rows fall in segments of ZS_COLSUM_SEG; segment s adds its
 * rows in index order into a 0-started partial; partial s goes to group s % ZS_COLSUM_GROUPS,
 * which adds its partials in segment order into a 0-started sum; zs_colsum_finish adds the
 * groups. zs_layernorm_segments(N) partials a column; a GPU keeps dw's and db's in its stream's
 * scratch, zs_layernorm_bwd_scratch(N, C) doubles of it. */
static ZS_HD int zs_layernorm_segments(int N) {
    return (N + ZS_COLSUM_SEG - 1) / ZS_COLSUM_SEG;
}
static ZS_HD size_t zs_layernorm_bwd_scratch(int N, int C) {
    return (size_t)zs_layernorm_segments(N) * (size_t)C; /* 2 floats a (segment, column) */
}

#endif

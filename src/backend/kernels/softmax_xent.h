/* Fused softmax + cross-entropy of one row of logits: the loss, and optionally the gradient
 * written over a buffer that may be the logits themselves (three passes: max, exp and sum,
 * scale), in the order the GPU's block-per-row kernel adds. */
#ifndef ZS_BACKEND_KERNELS_SOFTMAX_XENT_H
#define ZS_BACKEND_KERNELS_SOFTMAX_XENT_H

#include "backend/kernels/common.h"

/* y[i] = exp(y[i] - mx) in place; returns the sum (fp32 lanes, fixed order). */
static ZS_HD float zs_exp_sub_inplace(float *y, int n, float mx) {
    float acc[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++) {
            float e = zs_expf(y[i + j] - mx);
            y[i + j] = e;
            acc[j] += e;
        }
    for (; i < n; i++) {
        y[i] = zs_expf(y[i] - mx);
        acc[i % ZS_LANES] += y[i];
    }
    return zs_lanes_sum(acc);
}

/* Loss of one row with real columns [0, V) of Vp; target -1 masks it (loss 0). If dlogits
 * is non-NULL it receives dloss * (softmax - onehot(target)) over [0, V) and 0 over [V, Vp).
 * dlogits may equal logits; otherwise the two must not overlap. The maximum and the sum of
 * exponentials run in the order of one block of ZS_ROW_THREADS per row (common.h); each
 * gradient element is exp(x - max) * (dloss / sum), then minus dloss at the target. */
static ZS_HD float zs_softmax_xent_row(float *dlogits, const float *logits, int target, int V,
                                       int Vp, float dloss) {
    if (target < 0) {
        if (dlogits)
            for (int i = 0; i < Vp; i++)
                dlogits[i] = 0.0f;
        return 0.0f;
    }
    float acc[ZS_ROW_THREADS];
    for (int j = 0; j < ZS_ROW_THREADS; j++)
        acc[j] = -INFINITY;
    for (int i = 0; i < V; i++) {
        float *a = &acc[i % ZS_ROW_THREADS];
        *a = logits[i] > *a ? logits[i] : *a;
    }
    float mx = zs_block_tree_max(acc);
    float xt = logits[target] - mx; /* read before an in-place gradient overwrites it */
    for (int j = 0; j < ZS_ROW_THREADS; j++)
        acc[j] = 0.0f;
    if (dlogits) {
        if (dlogits != logits)
            for (int i = 0; i < V; i++)
                dlogits[i] = logits[i];
        ZS_LANE_SUM(acc, ZS_ROW_THREADS, V, i, (dlogits[i] = zs_expf(dlogits[i] - mx)));
    } else {
        ZS_LANE_SUM(acc, ZS_ROW_THREADS, V, i, zs_expf(logits[i] - mx));
    }
    float sum = zs_block_tree(acc);
    if (dlogits) {
        float k = dloss / sum;
        for (int i = 0; i < V; i++)
            dlogits[i] *= k;
        dlogits[target] -= dloss;
        for (int i = V; i < Vp; i++)
            dlogits[i] = 0.0f;
    }
    return logf(sum) - xt;
}

#endif

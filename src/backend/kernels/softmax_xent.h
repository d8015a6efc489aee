/* Fused softmax + cross-entropy of one row of logits: the loss, and optionally the gradient
 * written over a buffer that may be the logits themselves (three passes: max, exp and sum,
 * scale). */
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

/* sum_i exp(x[i] - mx) (fp32 lanes, fixed order). */
static ZS_HD float zs_exp_sub_sum(const float *x, int n, float mx) {
    float acc[ZS_LANES] = {0};
    int i = 0;
    for (; i + ZS_LANES <= n; i += ZS_LANES)
        for (int j = 0; j < ZS_LANES; j++)
            acc[j] += zs_expf(x[i + j] - mx);
    for (; i < n; i++)
        acc[i % ZS_LANES] += zs_expf(x[i] - mx);
    return zs_lanes_sum(acc);
}

/* Loss of one row with real columns [0, V) of Vp; target -1 masks it (loss 0). If dlogits
 * is non-NULL it receives dloss * (softmax - onehot(target)) over [0, V) and 0 over [V, Vp).
 * dlogits may equal logits; otherwise the two must not overlap. */
static ZS_HD float zs_softmax_xent_row(float *dlogits, const float *logits, int target, int V,
                                       int Vp, float dloss) {
    if (target < 0) {
        if (dlogits)
            for (int i = 0; i < Vp; i++)
                dlogits[i] = 0.0f;
        return 0.0f;
    }
    float mx = zs_max(logits, V);
    float xt = logits[target] - mx; /* read before an in-place gradient overwrites it */
    float sum;
    if (dlogits) {
        if (dlogits != logits)
            for (int i = 0; i < V; i++)
                dlogits[i] = logits[i];
        sum = zs_exp_sub_inplace(dlogits, V, mx);
        float k = dloss / sum;
        for (int i = 0; i < V; i++)
            dlogits[i] *= k;
        dlogits[target] -= dloss;
        for (int i = V; i < Vp; i++)
            dlogits[i] = 0.0f;
    } else {
        sum = zs_exp_sub_sum(logits, V, mx);
    }
    return logf(sum) - xt;
}

#endif

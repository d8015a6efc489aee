/* Causal-softmax rows of attention, forward and backward, shared by the CPU loops and the
 * CUDA kernels. A row t attends to its keys lo..t (lo = 0 without document masks, else the
 * start of its document, backend/ops.h "Documents"); every other entry is 0. */
#ifndef ZS_BACKEND_KERNELS_ATTENTION_H
#define ZS_BACKEND_KERNELS_ATTENTION_H

#include "backend/kernels/softmax_xent.h"

/* Scores s[lo..t] (already scaled) become probabilities in place; s[0..lo) and s[t+1..T)
 * are set to 0. With lo = 0 this is the plain causal row, operation for operation. */
static ZS_HD void zs_causal_softmax_span(float *s, int lo, int t, int T) {
    int n = t - lo + 1;
    float mx = zs_max(s + lo, n);
    float inv = 1.0f / zs_exp_sub_inplace(s + lo, n, mx);
    for (int i = lo; i <= t; i++)
        s[i] *= inv;
    for (int i = 0; i < lo; i++)
        s[i] = 0.0f;
    for (int i = t + 1; i < T; i++)
        s[i] = 0.0f;
}

/* Softmax backward of one row: given p[lo..t] and dp[lo..t] (d loss / d p), overwrite them in
 * dp with d loss / d scores = p * (dp - sum_j p_j dp_j), times scale (the score scaling). */
static ZS_HD void zs_causal_softmax_span_bwd(float *ZS_RESTRICT dp, const float *ZS_RESTRICT p,
                                             int lo, int t, float scale) {
    int n = t - lo + 1;
    float s = zs_dot(p + lo, dp + lo, n);
    for (int i = lo; i <= t; i++)
        dp[i] = p[i] * (dp[i] - s) * scale;
}

#endif

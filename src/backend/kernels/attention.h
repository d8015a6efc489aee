/* Causal-softmax rows of attention, forward and backward, shared by the CPU loops and the
 * CUDA kernels. A row t attends to positions 0..t; entries above the diagonal are 0. */
#ifndef ZS_BACKEND_KERNELS_ATTENTION_H
#define ZS_BACKEND_KERNELS_ATTENTION_H

#include "backend/kernels/softmax_xent.h"

/* Scores s[0..t] (already scaled) become probabilities in place; s[t+1..T) is set to 0. */
static ZS_HD void zs_causal_softmax_row(float *s, int t, int T) {
    int n = t + 1;
    float mx = zs_max(s, n);
    float inv = 1.0f / zs_exp_sub_inplace(s, n, mx);
    for (int i = 0; i < n; i++)
        s[i] *= inv;
    for (int i = n; i < T; i++)
        s[i] = 0.0f;
}

/* Softmax backward of one row: given p[0..t] and dp[0..t] (d loss / d p), overwrite dp with
 * d loss / d scores = p * (dp - sum_j p_j dp_j), times scale (the score scaling). */
static ZS_HD void zs_causal_softmax_row_bwd(float *ZS_RESTRICT dp, const float *ZS_RESTRICT p,
                                            int t, float scale) {
    int n = t + 1;
    float s = zs_dot(p, dp, n);
    for (int i = 0; i < n; i++)
        dp[i] = p[i] * (dp[i] - s) * scale;
}

#endif

/* One decoding position of attention over a KV cache (the `decode_attention` op), shared by the
 * CPU loop and the CUDA kernel: per query head, scores against the cached keys of positions
 * 0..pos, a softmax, and the weighted sum of the cached values. Head h reads kv head
 * h / (NH / NKV) (grouped-query attention; GPT-2 has NKV = NH). The sums run over positions in
 * order, so both backends add the same terms in the same order. */
#ifndef ZS_BACKEND_KERNELS_KVATTN_H
#define ZS_BACKEND_KERNELS_KVATTN_H

#include "backend/kernels/rope.h"

/* y[hs] = softmax(q . K_j * scale, j = 0..pos) weighted sum of V_j for one head; K_j and V_j are
 * rows of stride KD, already offset to this head's kv head. sc[pos + 1] is scratch. */
static ZS_HD void zs_kv_attend_head(float *ZS_RESTRICT y, float *ZS_RESTRICT sc,
                                    const float *ZS_RESTRICT q, const float *kc, const float *vc,
                                    int KD, int hs, int pos, float scale) {
    float mx = -INFINITY;
    for (int j = 0; j <= pos; j++) {
        const float *kr = kc + (size_t)j * KD;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++)
            dot += q[i] * kr[i];
        sc[j] = dot * scale;
        mx = sc[j] > mx ? sc[j] : mx;
    }
    float sum = 0.0f;
    for (int j = 0; j <= pos; j++) {
        sc[j] = zs_expf(sc[j] - mx);
        sum += sc[j];
    }
    for (int i = 0; i < hs; i++)
        y[i] = 0.0f;
    for (int j = 0; j <= pos; j++) {
        const float *vr = vc + (size_t)j * KD;
        const float pj = sc[j] / sum;
        for (int i = 0; i < hs; i++)
            y[i] += pj * vr[i];
    }
}

/* RoPE of one head at position pos, in place (the decode path's one row). */
static ZS_HD void zs_kv_rope_head(float *x, int hs, int pos, float theta) {
    for (int i = 0; i < hs / 2; i++) {
        float c, s;
        zs_rope_cos_sin(&c, &s, pos, i, hs, theta);
        zs_rope_pair(&x[i], &x[i + hs / 2], x[i], x[i + hs / 2], c, s);
    }
}

#endif

/* Rotary position embedding (RoPE) in Hugging Face's rotate_half layout, shared by the CPU
 * loops and the CUDA kernels. Within one head of hs values, element i and element i + hs/2
 * form a pair rotated by the angle pos * theta^(-2i/hs):
 *   out[i]        = x[i] cos - x[i + hs/2] sin
 *   out[i + hs/2] = x[i + hs/2] cos + x[i] sin
 * (HF: q * cos + rotate_half(q) * sin). This is the layout of HF's q_proj/k_proj rows, so
 * weights import and export without permuting; Meta's original checkpoints interleave the
 * pairs instead (i, i+1) and HF's conversion script permutes them. */
#ifndef ZS_BACKEND_KERNELS_ROPE_H
#define ZS_BACKEND_KERNELS_ROPE_H

#include "backend/kernels/common.h"

/* cos and sin of pair i's angle at position pos, computed in fp32 the way HF does:
 * inv_freq = 1 / theta^((2i) / hs), angle = pos * inv_freq. */
static ZS_HD void zs_rope_cos_sin(float *c, float *s, int pos, int i, int hs, float theta) {
    float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
    float ang = (float)pos * inv_freq;
    *c = cosf(ang);
    *s = sinf(ang);
}

/* Rotate one pair (x1, x2) = (x[i], x[i + hs/2]) by the angle with cosine c and sine s (s
 * already negated for the inverse rotation). The CUDA kernels call this per pair. */
static ZS_HD void zs_rope_pair(float *o1, float *o2, float x1, float x2, float c, float s) {
    *o1 = x1 * c - x2 * s;
    *o2 = x2 * c + x1 * s;
}

/* Rotate one head (hs = 2 * half values) by the per-pair cos/sin; inverse != 0 rotates by
 * the negative angle (the transpose, which is the backward). out may equal x. */
static ZS_HD void zs_rope_head(float *out, const float *x, const float *cs, const float *sn,
                               int half, int inverse) {
    float sg = inverse ? -1.0f : 1.0f;
    for (int i = 0; i < half; i++)
        zs_rope_pair(&out[i], &out[i + half], x[i], x[i + half], cs[i], sg * sn[i]);
}

#endif

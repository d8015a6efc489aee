/* CPU causal attention with grouped-query heads (LLaMA): q[B,T,NH*hs], k and v
 * [B,T,NKV*hs] in separate buffers; query head h reads key/value head h / (NH / NKV), as
 * Hugging Face's repeat_kv does. Forward runs each (batch, query head) pair as a task.
 * Backward runs each (batch, kv head) pair as a task that walks its NH / NKV query heads in
 * order: the key/value gradient a group shares is then written by one task only, so no
 * atomics and no dependence on the thread count. Row t reads keys lo..t, lo its document's
 * start (seg, backend/ops.h "Documents") or 0. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/attention.h"
#include "core/status.h"

#include <math.h>
#include <string.h>

static zs_status check_shape(const char *op, int B, int T, int NH, int NKV, int hs) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && NH >= 1 && NKV >= 1 && hs >= 1 && NH % NKV == 0, ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d NH=%d NKV=%d hs=%d (NKV must divide NH)", op, B, T, NH, NKV,
               hs);
fail:
    return st;
}

zs_status zs_cpu_attention_gqa_fwd(zs_stream_t *s, float *out, float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_shape("attention_gqa_fwd", B, T, NH, NKV, hs));
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs;
    int rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / rep;
        const float *qb = q + (size_t)b * T * QD + (size_t)h * hs;
        const float *kb = k + (size_t)b * T * KD + (size_t)g * hs;
        const float *vb = v + (size_t)b * T * KD + (size_t)g * hs;
        for (int t = 0; t < T; t++) {
            const float *qt = qb + t * QD;
            float *p = att + ((size_t)bh * T + t) * T;
            int lo = zs_seg_lo(seg, (size_t)b * T + t);
            for (int t2 = lo; t2 <= t; t2++)
                p[t2] = zs_dot(qt, kb + t2 * KD, hs) * scale;
            zs_causal_softmax_span(p, lo, t, T);
            float *o = out + ((size_t)b * T + t) * QD + (size_t)h * hs;
            memset(o, 0, (size_t)hs * sizeof *o);
            for (int t2 = lo; t2 <= t; t2++)
                zs_axpy_row(o, p[t2], vb + t2 * KD, hs);
        }
    }
fail:
    return st;
}

zs_status zs_cpu_attention_gqa_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *datt,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *att, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_shape("attention_gqa_bwd", B, T, NH, NKV, hs));
    size_t QD = (size_t)NH * hs, KD = (size_t)NKV * hs;
    int rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (int bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV;
        size_t koff = (size_t)b * T * KD + (size_t)g * hs;
        const float *kb = k + koff, *vb = v + koff;
        float *dkb = dk + koff, *dvb = dv + koff;
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            size_t qoff = (size_t)b * T * QD + (size_t)h * hs;
            size_t bh = (size_t)b * NH + h;
            for (int t = 0; t < T; t++) {
                const float *p = att + (bh * T + t) * T;
                float *dp = datt + (bh * T + t) * T;
                const float *dO = dout + qoff + t * QD;
                int lo = zs_seg_lo(seg, (size_t)b * T + t);
                /* out_t = sum_t2 p[t2] v_t2: gradients to p and to v. */
                for (int t2 = lo; t2 <= t; t2++) {
                    dp[t2] = zs_dot(dO, vb + t2 * KD, hs);
                    zs_axpy_row(dvb + t2 * KD, p[t2], dO, hs);
                }
                zs_causal_softmax_span_bwd(dp, p, lo, t, scale);
                /* scores[t2] = scale q_t . k_t2 (scale already folded into dp). */
                const float *qt = q + qoff + t * QD;
                float *dqt = dq + qoff + t * QD;
                for (int t2 = lo; t2 <= t; t2++) {
                    zs_axpy_row(dqt, dp[t2], kb + t2 * KD, hs);
                    zs_axpy_row(dkb + t2 * KD, dp[t2], qt, hs);
                }
            }
        }
    }
fail:
    return st;
}

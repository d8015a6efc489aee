/* CPU causal multi-head attention. Each (batch, head) pair is an independent task: its
 * rows of q, k, v are strided views into qkv[B,T,3C] (q | k | v, head h at columns
 * h*hs..(h+1)*hs of each), and its gradients land in disjoint columns of dqkv, so the pairs
 * run in parallel without atomics and the results do not depend on the thread count. Row t
 * reads keys lo..t, lo its document's start (seg, backend/ops.h "Documents") or 0. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/attention.h"
#include "core/status.h"

#include <math.h>
#include <string.h>

static zs_status check_shape(const char *op, int B, int T, int C, int NH) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 1 && NH >= 1 && C % NH == 0, ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d C=%d NH=%d (C must be a multiple of NH)", op, B, T, C, NH);
fail:
    return st;
}

zs_status zs_cpu_attention_fwd(zs_stream_t *s, float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_shape("attention_fwd", B, T, C, NH));
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        for (int t = 0; t < T; t++) {
            const float *q = base + t * C3;
            float *p = att + ((size_t)bh * T + t) * T;
            int lo = zs_seg_lo(seg, (size_t)b * T + t);
            for (int t2 = lo; t2 <= t; t2++)
                p[t2] = zs_dot(q, base + t2 * C3 + C, hs) * scale;
            zs_causal_softmax_span(p, lo, t, T);
            float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
            memset(o, 0, (size_t)hs * sizeof *o);
            for (int t2 = lo; t2 <= t; t2++)
                zs_axpy_row(o, p[t2], base + t2 * C3 + 2 * C, hs);
        }
    }
fail:
    return st;
}

zs_status zs_cpu_attention_bwd(zs_stream_t *s, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_shape("attention_bwd", B, T, C, NH));
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static) if ((size_t)B * NH * T * T * hs >= ZS_CPU_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        const float *base = qkv + off;
        float *dbase = dqkv + off;
        for (int t = 0; t < T; t++) {
            const float *p = att + ((size_t)bh * T + t) * T;
            float *dp = datt + ((size_t)bh * T + t) * T;
            const float *dO = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
            int lo = zs_seg_lo(seg, (size_t)b * T + t);
            /* out_t = sum_t2 p[t2] v_t2: gradients to p and to v. */
            for (int t2 = lo; t2 <= t; t2++) {
                dp[t2] = zs_dot(dO, base + t2 * C3 + 2 * C, hs);
                zs_axpy_row(dbase + t2 * C3 + 2 * C, p[t2], dO, hs);
            }
            zs_causal_softmax_span_bwd(dp, p, lo, t, scale);
            /* scores[t2] = scale q_t . k_t2 (scale already folded into dp). */
            const float *q = base + t * C3;
            float *dq = dbase + t * C3;
            for (int t2 = lo; t2 <= t; t2++) {
                zs_axpy_row(dq, dp[t2], base + t2 * C3 + C, hs);
                zs_axpy_row(dbase + t2 * C3 + C, dp[t2], q, hs);
            }
        }
    }
fail:
    return st;
}

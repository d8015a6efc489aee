/* The CPU's decode_attention (ops.h): one position of attention over a KV cache, the twin of
 * cuda/decode_cuda.cu over the shared math of kernels/kvattn.h. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/kvattn.h"
#include "backend/kernels/sample.h"
#include "core/status.h"

#include <string.h>

zs_status zs_kv_attention_check(int NH, int NKV, int hs, int pos, float theta) {
    if (NH < 1 || NKV < 1 || NH % NKV || hs < 1 || pos < 0 ||
        (theta > 0.0f && (hs % 2 || hs / 2 > 512)))
        return zs_error(ZS_ERR_INVALID,
                        "decode_attention: bad shape NH=%d NKV=%d hs=%d pos=%d theta=%g (NKV must "
                        "divide NH; with RoPE hs is even and at most 1024)",
                        NH, NKV, hs, pos, (double)theta);
    return ZS_OK;
}

zs_status zs_cpu_decode_attention(zs_stream_t *s, float *out, float *q, float *k, const float *v,
                                  float *kc, float *vc, float *scores, int NH, int NKV, int hs,
                                  int pos, float theta) {
    zs_status st = zs_kv_attention_check(NH, NKV, hs, pos, theta);
    if (st != ZS_OK) return st;
    const int KD = NKV * hs, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hs);
    if (theta > 0.0f) {
        for (int h = 0; h < NH; h++)
            zs_kv_rope_head(q + (size_t)h * hs, hs, pos, theta);
        for (int h = 0; h < NKV; h++)
            zs_kv_rope_head(k + (size_t)h * hs, hs, pos, theta);
    }
    memcpy(kc + (size_t)pos * KD, k, (size_t)KD * sizeof(float));
    memcpy(vc + (size_t)pos * KD, v, (size_t)KD * sizeof(float));
#pragma omp parallel for schedule(static) if ((size_t)NH * (pos + 1) * hs >= 65536)
    for (int h = 0; h < NH; h++) {
        const size_t kv = (size_t)(h / group) * hs;
        zs_kv_attend_head(out + (size_t)h * hs, scores + (size_t)h * (pos + 1), q + (size_t)h * hs,
                          kc + kv, vc + kv, KD, hs, pos, scale);
    }
    return ZS_OK;
}

zs_status zs_cpu_sample(zs_stream_t *s, int32_t *token, const float *logits, int V,
                        float temperature, uint64_t seed, uint64_t index) {
    zs_status st = ZS_OK;
    (void)s;
    ZS_REQUIRE(V >= 1 && token && logits, ZS_ERR_INVALID, "sample: V=%d or a NULL buffer", V);
    if (!(temperature > 0.0f)) {
        *token = zs_sample_argmax(logits, V);
        return ZS_OK;
    }
    float acc[ZS_ROW_THREADS];
    for (int j = 0; j < ZS_ROW_THREADS; j++)
        acc[j] = -INFINITY;
    for (int i = 0; i < V; i++) {
        float *a = &acc[i % ZS_ROW_THREADS];
        *a = logits[i] > *a ? logits[i] : *a;
    }
    float mx = zs_block_tree_max(acc);
    for (int j = 0; j < ZS_ROW_THREADS; j++)
        acc[j] = 0.0f;
    ZS_LANE_SUM(acc, ZS_ROW_THREADS, V, i, zs_sample_weight(logits[i], mx, temperature));
    float total = zs_block_tree(acc);
    float u = zs_curand_first_uniform(seed, index);
    *token = zs_sample_search(logits, V, mx, temperature, u * total);
fail:
    return st;
}

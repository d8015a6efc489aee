/* CUDA decode_attention (ops.h): one position of attention over a KV cache, the twin of
 * cpu/decode_cpu.c over kernels/kvattn.h. Two kernels in stream order: a thread per head
 * rotates q and k (RoPE at pos) and a thread per kv head stores k and v as cache row pos; then
 * a thread per query head attends over rows 0..pos in the CPU's order. Simple, like the other
 * row kernels here: decoding one token is latency-bound on the weights' GEMVs, not on this. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/kvattn.h"

static __global__ void kv_store_kernel(float *q, float *k, const float *v, float *kc, float *vc,
                                       int NH, int NKV, int hs, int pos, float theta) {
    ZS_CU_FOR(h, (size_t)NH) {
        if (theta > 0.0f) zs_kv_rope_head(q + h * hs, hs, pos, theta);
        if (h >= (size_t)NKV) continue;
        float *kh = k + h * hs;
        if (theta > 0.0f) zs_kv_rope_head(kh, hs, pos, theta);
        size_t row = (size_t)pos * NKV * hs + h * hs;
        for (int i = 0; i < hs; i++) {
            kc[row + i] = kh[i];
            vc[row + i] = v[h * hs + i];
        }
    }
}

static __global__ void kv_attend_kernel(float *out, float *scores, const float *q, const float *kc,
                                        const float *vc, int NH, int NKV, int hs, int pos,
                                        float scale) {
    ZS_CU_FOR(h, (size_t)NH) {
        size_t kv = (size_t)(h / (size_t)(NH / NKV)) * hs;
        zs_kv_attend_head(out + h * hs, scores + h * (size_t)(pos + 1), q + h * hs, kc + kv,
                          vc + kv, NKV * hs, hs, pos, scale);
    }
}

zs_status zs_cu_decode_attention(zs_stream_t *s, float *out, float *q, float *k, const float *v,
                                 float *kc, float *vc, float *scores, int NH, int NKV, int hs,
                                 int pos, float theta) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_CHECK(zs_kv_attention_check(NH, NKV, hs, pos, theta));
    ZS_REQUIRE(out && q && k && v && kc && vc && scores, ZS_ERR_INVALID,
               "decode_attention: NULL buffer");
    ZS_LAUNCH(kv_store_kernel, zs_cu_blocks((size_t)NH), ZS_CU_THREADS, 0, cs, q, k, v, kc, vc, NH,
              NKV, hs, pos, theta);
    ZS_CUDA_CHECK_LAUNCH(kv_store_kernel);
    ZS_LAUNCH(kv_attend_kernel, zs_cu_blocks((size_t)NH), ZS_CU_THREADS, 0, cs, out, scores, q, kc,
              vc, NH, NKV, hs, pos, 1.0f / sqrtf((float)hs));
    ZS_CUDA_CHECK_LAUNCH(kv_attend_kernel);
fail:
    return st;
}

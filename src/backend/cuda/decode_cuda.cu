/* CUDA decoding ops (ops.h): decode_attention, one position of attention over a KV cache, and
 * sample, the next token drawn with cuRAND's device API: the twins of cpu/decode_cpu.c over
 * kernels/kvattn.h and kernels/sample.h. Two kernels in stream order: a thread per head
 * rotates q and k (RoPE at pos) and a thread per kv head stores k and v as cache row pos; then
 * a thread per query head attends over rows 0..pos in the CPU's order. Simple, like the other
 * row kernels here: decoding one token is latency-bound on the weights' GEMVs, not on this.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/kvattn.h"
#include "backend/kernels/sample.h"

#include <curand_kernel.h>

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
    /* RoPE: 12 per pair (the angle 6, the rotation 6) of q's and k's heads, rotated in place
     * (read and written); v read; the cache rows at pos written */
    ZS_COST(theta > 0.0f ? 6.0 * hs * (NH + NKV) : 0.0, 0,
            4.0 * (theta > 0.0f ? 2.0 * hs * (NH + NKV) : (double)hs * NKV) + 12.0 * hs * NKV);
    ZS_LAUNCH(kv_store_kernel, zs_cu_blocks((size_t)NH), ZS_CU_THREADS, 0, cs, q, k, v, kc, vc, NH,
              NKV, hs, pos, theta);
    ZS_CUDA_CHECK_LAUNCH(kv_store_kernel);
    /* per head and cached row: the score (2hs + 1), the softmax (4), the weighted row (2hs);
     * q and the cache rows 0..pos read, scores and out written */
    ZS_COST((double)NH * (pos + 1) * (4.0 * hs + 5.0), 0,
            4.0 * (2.0 * NH * hs + 2.0 * (pos + 1.0) * NKV * hs + (double)NH * (pos + 1)));
    ZS_LAUNCH(kv_attend_kernel, zs_cu_blocks((size_t)NH), ZS_CU_THREADS, 0, cs, out, scores, q, kc,
              vc, NH, NKV, hs, pos, 1.0f / sqrtf((float)hs));
    ZS_CUDA_CHECK_LAUNCH(kv_attend_kernel);
fail:
    return st;
}

/* One block of ZS_ROW_THREADS: the maximum and the total of the weights through block
 * reductions (the CPU twin's order), cuRAND's Philox uniform, then thread 0 searches in index
 * order. The token stays on the device: only it is copied back, or it feeds the next embedding
 * directly. */
static __global__ void sample_kernel(int32_t *token, const float *logits, int V, float temperature,
                                     unsigned long long seed, unsigned long long index) {
    ZS_SHARED(float, red, ZS_ROW_THREADS / ZS_WARP);
    int t = (int)threadIdx.x;
    if (!(temperature > 0.0f)) {
        if (t == 0) *token = zs_sample_argmax(logits, V);
        return;
    }
    float m = -INFINITY, w = 0.0f;
    for (int i = t; i < V; i += ZS_ROW_THREADS)
        m = logits[i] > m ? logits[i] : m;
    float mx = zs_cu_block_reduce(m, red, 1);
    for (int i = t; i < V; i += ZS_ROW_THREADS)
        w += zs_sample_weight(logits[i], mx, temperature);
    float total = zs_cu_block_reduce(w, red, 0);
    if (t == 0) {
        curandStatePhilox4_32_10_t st;
        curand_init(seed, index, 0, &st);
        float u = curand_uniform(&st);
        *token = zs_sample_search(logits, V, mx, temperature, u * total);
    }
}

zs_status zs_cu_sample(zs_stream_t *s, int32_t *token, const float *logits, int V,
                       float temperature, uint64_t seed, uint64_t index) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(V >= 1 && token && logits, ZS_ERR_INVALID, "sample: V=%d or a NULL buffer", V);
    /* With a temperature: 4 per logit for the weights and at most as many for the search (it
     * stops at the drawn token), the block sum, the draw (3); greedy: comparisons only. */
    ZS_COST(temperature > 0.0f ? 8.0 * V + 12.0 * ZS_ROW_THREADS + 3.0 : 0.0, 0, 4.0 * (V + 1.0));
    ZS_LAUNCH(sample_kernel, 1, ZS_ROW_THREADS, 0, zs_cu_stream(s), token, logits, V, temperature,
              (unsigned long long)seed, (unsigned long long)index);
    ZS_CUDA_CHECK_LAUNCH(sample_kernel);
fail:
    return st;
}

/* Internal to the CPU backend: the ops defined in nn_cpu.c and attention_cpu.c that
 * ops_cpu.c puts into the table, and the shared threading threshold. */
#ifndef ZS_BACKEND_CPU_H
#define ZS_BACKEND_CPU_H

/* Vectorising the loops here relies on -fno-trapping-math, set for the library in
 * CMakeLists.txt (with trapping math GCC will not if-convert a float comparison). */

#include "backend/ops.h"

/* Elementwise loops shorter than this run on one thread: an OpenMP fork/join costs a few
 * microseconds, more than streaming 32k floats. */
#define ZS_CPU_PAR_MIN ((size_t)1 << 15)

/* The host AdamW step (adamw_cpu.c): kernels/adamw.h's update of [lo, hi) with fp32 gradients
 * g32 or bf16 ones g16 (the other NULL), with bf16 gradients the updated parameters rounded
 * into r16 when it is not NULL (r16 may be g16: in place), on the caller's OpenMP threads in contiguous parts
 * (one thread below ZS_CPU_PAR_MIN elements), in the instruction set zs_cpu_adamw_isa() names.
 * Every set gives the same bits. */
typedef struct zs_cpu_adamw_hp {
    float lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2;
} zs_cpu_adamw_hp;
enum { ZS_CPU_ISA_AVX2 = 0, ZS_CPU_ISA_AVX512 = 1 };
void zs_cpu_adamw_run(float *p, const float *g32, const zs_bf16 *g16, float *m, float *v,
                      zs_bf16 *r16, int64_t lo, int64_t hi, const zs_cpu_adamw_hp *h);
/* The set in use: AVX-512 where the CPU has x86-64-v4, unless ZS_CPU_ISA=avx2 (read once). */
int zs_cpu_adamw_isa(void);
/* Use isa from now on where the CPU has it (else AVX2); returns the set in use. For tests
 * and bench optim --isa. */
int zs_cpu_adamw_set_isa(int isa);
const char *zs_cpu_isa_name(int isa);
/* Whether this CPU (and its OS) runs x86-64-v4 code: AVX-512 F, BW, CD, DQ and VL. */
int zs_cpu_has_avx512(void);

zs_status zs_cpu_embedding_fwd(zs_stream_t *s, float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int B, int T, int C, const int32_t *seg);
zs_status zs_cpu_embedding_bwd(zs_stream_t *s, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, const int32_t *seg);
zs_status zs_cpu_layernorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int N, int C);
zs_status zs_cpu_layernorm_fwd(zs_stream_t *s, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C);
zs_status zs_cpu_layernorm_bwd(zs_stream_t *s, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
zs_status zs_cpu_gelu_fwd(zs_stream_t *s, float *out, const float *inp, size_t n);
zs_status zs_cpu_bias_gelu_fwd16(zs_stream_t *s, zs_bf16 *pre16, const float *pre, zs_bf16 *out,
                                 const float *bias, int N, int OC);
zs_status zs_cpu_bias_gelu_fwd(zs_stream_t *s, float *pre, float *out, const float *bias, int N,
                               int OC);
zs_status zs_cpu_gelu_bwd(zs_stream_t *s, float *dinp, const float *inp, const float *dout,
                          size_t n);
zs_status zs_cpu_gelu_bwd16(zs_stream_t *s, float *dinp, const zs_bf16 *inp, const float *dout,
                            size_t n);
zs_status zs_cpu_softmax_xent(zs_stream_t *s, float *losses, float *dlogits, const float *logits,
                              const int32_t *targets, int N, int V, int Vp, float dloss);
zs_status zs_cpu_attention_fwd(zs_stream_t *s, float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH, const int32_t *seg);
zs_status zs_cpu_attention_bwd(zs_stream_t *s, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               const int32_t *seg);

/* LLaMA-family ops: llama_cpu.c and attention_gqa_cpu.c. */
zs_status zs_cpu_rmsnorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *rstd, const float *inp,
                               const float *w, int N, int C, float eps);
zs_status zs_cpu_rmsnorm_fwd(zs_stream_t *s, float *out, float *rstd, const float *inp,
                             const float *w, int N, int C, float eps);
zs_status zs_cpu_rmsnorm_bwd(zs_stream_t *s, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int N, int C);
zs_status zs_cpu_rope_fwd(zs_stream_t *s, float *out, const float *inp, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg);
zs_status zs_cpu_rope_bwd(zs_stream_t *s, float *dinp, const float *dout, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg);
zs_status zs_cpu_rope_bwd16(zs_stream_t *s, zs_bf16 *dinp, const float *dout, int B, int T, int NH,
                            int hs, float theta, const int32_t *seg);
zs_status zs_cpu_swiglu_fwd16(zs_stream_t *s, zs_bf16 *out, const float *gate, const float *up,
                              size_t n);
zs_status zs_cpu_swiglu_fwd(zs_stream_t *s, float *out, const float *gate, const float *up,
                            size_t n);
zs_status zs_cpu_swiglu_bwd16(zs_stream_t *s, zs_bf16 *dgate, zs_bf16 *dup, const float *dout,
                              const float *gate, const float *up, size_t n);
zs_status zs_cpu_swiglu_bwd(zs_stream_t *s, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n);
zs_status zs_cpu_attention_gqa_fwd(zs_stream_t *s, float *out, float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg);
zs_status zs_cpu_attention_gqa_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *datt,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *att, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg);

/* Memory-efficient attention: flash_cpu.c. */
zs_status zs_cpu_flash_attention_fwd(zs_stream_t *s, float *out, float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int NH, int NKV,
                                     int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cpu_flash_attention_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                     const float *dout, const float *q, const float *k,
                                     const float *v, const float *out, const float *lse, int B,
                                     int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                     const int32_t *seg);
zs_status zs_cpu_flash_attention_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                                       const float *k, const float *v, int B, int T, int NH,
                                       int NKV, int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cpu_flash_attention_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv,
                                       float *delta, const float *dout, const float *q,
                                       const float *k, const float *v, const zs_bf16 *out,
                                       const float *lse, int B, int T, int NH, int NKV, int hs,
                                       int ldq, int ldkv, const int32_t *seg);

/* gemm_cpu.c: the gemm of each arithmetic, and the shape checks every one makes. */
#define ZS_CPU_GEMM_ARGS                                                                           \
    zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha, const float *A,      \
        int lda, const float *B, int ldb, float beta, float *C, int ldc
zs_status zs_cpu_gemm_fp32(ZS_CPU_GEMM_ARGS);
zs_status zs_cpu_gemm_tf32(ZS_CPU_GEMM_ARGS);
zs_status zs_cpu_gemm_bf16(ZS_CPU_GEMM_ARGS);
/* ops.h gemm16: the bf16 gemm with either operand stored as bf16 (widened as packed). */
zs_status zs_cpu_gemm16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                        const void *A, int a16, int lda, const void *B, int b16, int ldb,
                        float beta, float *C, int ldc);
/* The rounded modes' panel size in floats (0: the default, 16 MiB); tests make it small to
 * reach the multi-panel paths with small shapes. */
void zs_cpu_gemm_panel(size_t floats);

/* decode_cpu.c; zs_kv_attention_check is decode_attention's shape check, shared by backends. */
zs_status zs_cpu_sample(zs_stream_t *s, int32_t *token, const float *logits, int V,
                        float temperature, uint64_t seed, uint64_t index);
zs_status zs_cpu_decode_attention(zs_stream_t *s, float *out, float *q, float *k, const float *v,
                                  float *kc, float *vc, float *scores, int NH, int NKV, int hs,
                                  int pos, float theta);

#endif

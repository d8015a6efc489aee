/* The CUDA backend's ops table: gemm through cuBLAS (plain fp32, the column-major arguments
 * of ops.h as they are), and bias, elementwise, optimizer, cast, sum-of-squares, fill/copy
 * and Philox-init kernels over the shared per-element math in backend/kernels. Network ops
 * live in nn_cuda.cu and attention_cuda.cu. Each op has three layers: a static __global__
 * kernel, a static launcher that takes the stream, checks its preconditions and the launch,
 * and the op that validates shapes. Every op is asynchronous on its stream. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/adamw.h"
#include "backend/kernels/common.h"
#include "backend/kernels/sumsq.h"
#include "core/bf16.h"
#include "core/philox.h"

/* ---- gemm --------------------------------------------------------------------------- */

/* gemm in the table's arithmetic (ops.h, zs_gemm_math): plain fp32 (CUBLAS_COMPUTE_32F), or the
 * inputs down-converted to TF32 or bf16 on tensor cores with fp32 accumulation
 * (CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF). */
static zs_status cu_gemm_math(cublasComputeType_t compute, zs_stream_t *s, int transa, int transb,
                              int m, int n, int k, float alpha, const float *A, int lda,
                              const float *B, int ldb, float beta, float *C, int ldc) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    int locked = 0;
    ZS_CHECK(zs_gemm_check(transa, transb, m, n, k, A, lda, B, ldb, C, ldc));
    if (m == 0 || n == 0) return ZS_OK;
    ZS_CHECK(zs_cu_blas_lock(&h));
    locked = 1;
    ZS_CUBLAS_CHECK(cublasSetStream(h, zs_cu_stream(s)));
#ifdef ZS_MUTANT_SWAP_TRANS /* the tests' deliberately broken build: transposes swapped */
    {
        int t = transa;
        transa = transb;
        transb = t;
    }
#endif
    /* k == 0 is C = beta C, as in BLAS; beta == 0 does not read C. */
    ZS_CUBLAS_CHECK(cublasGemmEx(h, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_32F,
                                 lda, B, CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc, compute,
                                 CUBLAS_GEMM_DEFAULT));
fail:
    if (locked) zs_cu_blas_unlock();
    return st;
}

static zs_status cu_gemm(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc) {
    return cu_gemm_math(CUBLAS_COMPUTE_32F, s, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                        C, ldc);
}

static zs_status cu_gemm_tf32(zs_stream_t *s, int transa, int transb, int m, int n, int k,
                              float alpha, const float *A, int lda, const float *B, int ldb,
                              float beta, float *C, int ldc) {
    return cu_gemm_math(CUBLAS_COMPUTE_32F_FAST_TF32, s, transa, transb, m, n, k, alpha, A, lda, B,
                        ldb, beta, C, ldc);
}

static zs_status cu_gemm_bf16(zs_stream_t *s, int transa, int transb, int m, int n, int k,
                              float alpha, const float *A, int lda, const float *B, int ldb,
                              float beta, float *C, int ldc) {
#ifndef ZS_MUTANT_GEMM_32F
    return cu_gemm_math(CUBLAS_COMPUTE_32F_FAST_16BF, s, transa, transb, m, n, k, alpha, A, lda, B,
                        ldb, beta, C, ldc);
#else /* broken build: the bf16 arithmetic asked for, fp32 computed */
    return cu_gemm_math(CUBLAS_COMPUTE_32F, s, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                        beta, C, ldc);
#endif
}

/* ---- bias --------------------------------------------------------------------------- */

static __global__ void bias_fwd_kernel(float *out, const float *bias, size_t total, int OC) {
    ZS_CU_FOR(i, total) {
        out[i] += bias[i % (size_t)OC];
    }
}

/* One thread per column sums the rows in index order into a zero-started float, then adds it
 * to dbias: the CPU's order, so the bits match and no atomics are needed. */
static __global__ void bias_bwd_kernel(float *dbias, const float *dout, int N, int OC) {
    ZS_CU_FOR(c, (size_t)OC) {
        float acc = 0.0f;
        for (int r = 0; r < N; r++)
            acc += dout[(size_t)r * OC + c];
        dbias[c] += acc;
    }
}

static zs_status launch_bias_fwd(cudaStream_t cs, float *out, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    size_t total = (size_t)N * OC;
    if (total == 0) return ZS_OK;
    ZS_REQUIRE(out && bias, ZS_ERR_INVALID, "bias_fwd: NULL buffer");
    ZS_LAUNCH(bias_fwd_kernel, zs_cu_blocks(total), ZS_CU_THREADS, 0, cs, out, bias, total, OC);
    ZS_CUDA_CHECK_LAUNCH(bias_fwd_kernel);
fail:
    return st;
}

static zs_status launch_bias_bwd(cudaStream_t cs, float *dbias, const float *dout, int N, int OC) {
    zs_status st = ZS_OK;
    if (OC == 0) return ZS_OK;
    ZS_REQUIRE(dbias && (dout || N == 0), ZS_ERR_INVALID, "bias_bwd: NULL buffer");
    ZS_LAUNCH(bias_bwd_kernel, zs_cu_blocks((size_t)OC), ZS_CU_THREADS, 0, cs, dbias, dout, N, OC);
    ZS_CUDA_CHECK_LAUNCH(bias_bwd_kernel);
fail:
    return st;
}

static zs_status cu_bias_fwd(zs_stream_t *s, float *out, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_fwd: negative shape N=%d OC=%d", N, OC);
    ZS_CHECK(launch_bias_fwd(zs_cu_stream(s), out, bias, N, OC));
fail:
    return st;
}

static zs_status cu_bias_bwd(zs_stream_t *s, float *dbias, const float *dout, int N, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_bwd: negative shape N=%d OC=%d", N, OC);
    ZS_CHECK(launch_bias_bwd(zs_cu_stream(s), dbias, dout, N, OC));
fail:
    return st;
}

/* ---- elementwise: residual, axpy, scale, fill --------------------------------------- */

/* out may alias a or b: each thread reads its element before writing it. */
static __global__ void residual_kernel(float *out, const float *a, const float *b, size_t n) {
    ZS_CU_FOR(i, n) {
        out[i] = a[i] + b[i];
    }
}

static __global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n) {
    ZS_CU_FOR(i, n) {
        y[i] += alpha * x[i];
    }
}

static __global__ void scale_kernel(float *x, float a, size_t n) {
    ZS_CU_FOR(i, n) {
        x[i] *= a;
    }
}

static __global__ void fill_kernel(float *x, float value, size_t n) {
    ZS_CU_FOR(i, n) {
        x[i] = value;
    }
}

static zs_status launch_residual(cudaStream_t cs, float *out, const float *a, const float *b,
                                 size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && a && b, ZS_ERR_INVALID, "residual_fwd: NULL buffer");
    ZS_LAUNCH(residual_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, a, b, n);
    ZS_CUDA_CHECK_LAUNCH(residual_kernel);
fail:
    return st;
}

static zs_status launch_axpy(cudaStream_t cs, float *y, float alpha, const float *x, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(y && x, ZS_ERR_INVALID, "axpy: NULL buffer");
    ZS_LAUNCH(axpy_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, y, alpha, x, n);
    ZS_CUDA_CHECK_LAUNCH(axpy_kernel);
fail:
    return st;
}

static zs_status launch_scale(cudaStream_t cs, float *x, float a, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "scale: NULL buffer");
    ZS_LAUNCH(scale_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, a, n);
    ZS_CUDA_CHECK_LAUNCH(scale_kernel);
fail:
    return st;
}

static zs_status launch_fill(cudaStream_t cs, float *x, float value, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "fill: NULL buffer");
    ZS_LAUNCH(fill_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, value, n);
    ZS_CUDA_CHECK_LAUNCH(fill_kernel);
fail:
    return st;
}

static zs_status cu_residual_fwd(zs_stream_t *s, float *out, const float *a, const float *b,
                                 size_t n) {
    return launch_residual(zs_cu_stream(s), out, a, b, n);
}

static zs_status cu_axpy(zs_stream_t *s, float *y, float alpha, const float *x, size_t n) {
    return launch_axpy(zs_cu_stream(s), y, alpha, x, n);
}

static zs_status cu_scale(zs_stream_t *s, float *x, float a, size_t n) {
    return launch_scale(zs_cu_stream(s), x, a, n);
}

static zs_status cu_fill(zs_stream_t *s, float *x, float value, size_t n) {
    return launch_fill(zs_cu_stream(s), x, value, n);
}

/* ---- AdamW -------------------------------------------------------------------------- */

static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float grad_scale, float bc1, float bc2) {
    ZS_CU_FOR(i, n) {
        zs_adamw_elem(&param[i], &m[i], &v[i], grad[i], lr, beta1, beta2, eps, wd, grad_scale, bc1,
                      bc2);
    }
}

static zs_status launch_adamw(cudaStream_t cs, float *param, const float *grad, float *m, float *v,
                              size_t n, float lr, float beta1, float beta2, float eps, float wd,
                              float grad_scale, float bc1, float bc2) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(param && grad && m && v, ZS_ERR_INVALID, "adamw: NULL buffer");
    ZS_LAUNCH(adamw_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, param, grad, m, v, n, lr, beta1,
              beta2, eps, wd, grad_scale, bc1, bc2);
    ZS_CUDA_CHECK_LAUNCH(adamw_kernel);
fail:
    return st;
}

static zs_status cu_adamw(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps, float wd,
                          float grad_scale, int t) {
    zs_status st = ZS_OK;
    float bc1, bc2;
    ZS_REQUIRE(t >= 1, ZS_ERR_INVALID, "adamw: step t must be >= 1 (got %d)", t);
    /* The bias corrections come from the host's pow, as on the CPU backend: the device's
     * double pow may differ in the last bit, and this keeps the update bitwise equal. */
    bc1 = zs_adamw_bias_correction(beta1, t);
    bc2 = zs_adamw_bias_correction(beta2, t);
    ZS_CHECK(launch_adamw(zs_cu_stream(s), param, grad, m, v, n, lr, beta1, beta2, eps, wd,
                          grad_scale, bc1, bc2));
fail:
    return st;
}

/* A unit's tensors in one launch: a thread per element of the covered span finds its segment
 * (at most ZS_ADAMW_SEGS, a short scan) and updates it, or leaves padding alone. */
static __global__ void adamw_segs_kernel(float *param, const float *grad, float *m, float *v,
                                         zs_adamw_segs segs, float lr, float beta1, float beta2,
                                         float eps, float wd, float grad_scale, float bc1,
                                         float bc2) {
    size_t n = segs.n ? (size_t)segs.hi[segs.n - 1] : 0;
    ZS_CU_FOR(i, n) {
        int k = 0;
        while (k < segs.n && (int64_t)i >= segs.hi[k])
            k++;
        if (k == segs.n || (int64_t)i < segs.lo[k]) continue;
        zs_adamw_elem(&param[i], &m[i], &v[i], grad[i], lr, beta1, beta2, eps,
                      segs.decay[k] ? wd : 0.0f, grad_scale, bc1, bc2);
    }
}

static zs_status cu_adamw_segs(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                               const zs_adamw_segs *segs, float lr, float beta1, float beta2,
                               float eps, float wd, float grad_scale, int t) {
    zs_status st = ZS_OK;
    size_t n = 0;
    ZS_CHECK(zs_adamw_segs_check(segs, t));
    n = segs->n ? (size_t)segs->hi[segs->n - 1] : 0;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(param && grad && m && v, ZS_ERR_INVALID, "adamw_segs: NULL buffer");
    /* Bias corrections from the host's pow, as adamw. */
    ZS_LAUNCH(adamw_segs_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, zs_cu_stream(s), param, grad, m,
              v, *segs, lr, beta1, beta2, eps, wd, grad_scale, zs_adamw_bias_correction(beta1, t),
              zs_adamw_bias_correction(beta2, t));
    ZS_CUDA_CHECK_LAUNCH(adamw_segs_kernel);
fail:
    return st;
}

/* ---- cast --------------------------------------------------------------------------- */

static __global__ void f32_to_bf16_kernel(zs_bf16 *out, const float *in, size_t n) {
    ZS_CU_FOR(i, n) {
        out[i] = zs_f32_to_bf16(in[i]);
    }
}

static __global__ void bf16_to_f32_kernel(float *out, const zs_bf16 *in, size_t n) {
    ZS_CU_FOR(i, n) {
        out[i] = zs_bf16_to_f32(in[i]);
    }
}

static zs_status launch_f32_to_bf16(cudaStream_t cs, zs_bf16 *out, const float *in, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && in, ZS_ERR_INVALID, "cast: NULL buffer");
    ZS_LAUNCH(f32_to_bf16_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, in, n);
    ZS_CUDA_CHECK_LAUNCH(f32_to_bf16_kernel);
fail:
    return st;
}

static zs_status launch_bf16_to_f32(cudaStream_t cs, float *out, const zs_bf16 *in, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && in, ZS_ERR_INVALID, "cast: NULL buffer");
    ZS_LAUNCH(bf16_to_f32_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, in, n);
    ZS_CUDA_CHECK_LAUNCH(bf16_to_f32_kernel);
fail:
    return st;
}

static zs_status cu_cast(zs_stream_t *s, void *out, zs_dtype out_dt, const void *in, zs_dtype in_dt,
                         size_t n) {
    zs_status st = ZS_OK;
    size_t es;
    if (out_dt == in_dt) {
        es = zs_dtype_size(in_dt);
        ZS_REQUIRE(es > 0, ZS_ERR_INVALID, "cast: unknown dtype %d", (int)in_dt);
        if (n && out != in)
            ZS_CUDA_CHECK(
                cudaMemcpyAsync(out, in, n * es, cudaMemcpyDeviceToDevice, zs_cu_stream(s)));
    } else if (out_dt == ZS_DTYPE_BF16 && in_dt == ZS_DTYPE_F32) {
        ZS_CHECK(launch_f32_to_bf16(zs_cu_stream(s), (zs_bf16 *)out, (const float *)in, n));
    } else if (out_dt == ZS_DTYPE_F32 && in_dt == ZS_DTYPE_BF16) {
        ZS_CHECK(launch_bf16_to_f32(zs_cu_stream(s), (float *)out, (const zs_bf16 *)in, n));
    } else {
        ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported", zs_dtype_name(in_dt),
                   zs_dtype_name(out_dt));
    }
fail:
    return st;
}

/* ---- sum of squares, sum ----------------------------------------------------------- */

/* One thread per ZS_SUMSQ_CHUNK chunk (zs_sumsq_chunk / zs_sum_chunk, as on the CPU), then one
 * thread adds the chunk sums in index order into *out: the CPU's decomposition exactly, so the
 * same bits, and no atomics. The partials live in the stream's scratch. Strided reads make the
 * first pass slow next to a tree reduction; it runs once per unit and step, where determinism
 * across backends is worth more. */
static __global__ void chunk_sums_kernel(double *part, const float *x, size_t n, size_t nchunk,
                                         int square) {
    ZS_CU_FOR(c, nchunk) {
        size_t i0 = c * ZS_SUMSQ_CHUNK, m = n - i0 < ZS_SUMSQ_CHUNK ? n - i0 : ZS_SUMSQ_CHUNK;
        part[c] = square ? zs_sumsq_chunk(x + i0, m) : zs_sum_chunk(x + i0, m);
    }
}

static __global__ void chunks_total_kernel(double *total, const double *part, size_t nchunk) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double t = 0.0;
    for (size_t c = 0; c < nchunk; c++)
        t += part[c];
    *total = t;
}

static zs_status launch_chunked(cudaStream_t cs, double *out, double *part, const float *x,
                                size_t n, size_t nchunk, int square) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(part && x && nchunk >= 1, ZS_ERR_INVALID, "sumsq: bad launch arguments");
    ZS_LAUNCH(chunk_sums_kernel, zs_cu_blocks(nchunk), ZS_CU_THREADS, 0, cs, part, x, n, nchunk,
              square);
    ZS_CUDA_CHECK_LAUNCH(chunk_sums_kernel);
    ZS_LAUNCH(chunks_total_kernel, 1, 1, 0, cs, out, part, nchunk);
    ZS_CUDA_CHECK_LAUNCH(chunks_total_kernel);
fail:
    return st;
}

static zs_status chunked(zs_stream_t *s, const char *op, double *out, const float *x, size_t n,
                         int square) {
    zs_status st = ZS_OK;
    size_t nchunk = (n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
    double *part = NULL;
    ZS_REQUIRE(out != NULL, ZS_ERR_INVALID, "%s: NULL output", op);
    if (n == 0) {
        ZS_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, zs_cu_stream(s)));
        return ZS_OK;
    }
    ZS_CHECK(zs_cu_scratch(s, nchunk, &part));
    ZS_CHECK(launch_chunked(zs_cu_stream(s), out, part, x, n, nchunk, square));
fail:
    return st;
}

static zs_status cu_sumsq(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked(s, "sumsq", out, x, n, 1);
}

static zs_status cu_sum(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked(s, "sum", out, x, n, 0);
}

/* ---- copy, init, sync --------------------------------------------------------------- */

static zs_status cu_copy(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    zs_status st = ZS_OK;
    if (nbytes == 0 || dst == src) return ZS_OK;
    ZS_REQUIRE(dst && src, ZS_ERR_INVALID, "copy: NULL buffer");
    /* cudaMemcpy does not allow overlap (memmove does, on the CPU): refuse it loudly. */
    ZS_REQUIRE((const char *)dst + nbytes <= (const char *)src ||
                   (const char *)src + nbytes <= (const char *)dst,
               ZS_ERR_INVALID, "copy: source and destination overlap (%zu bytes)", nbytes);
    ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, zs_cu_stream(s)));
fail:
    return st;
}

static __global__ void init_normal_kernel(float *x, size_t n, uint64_t seed, uint64_t stream_id,
                                          uint64_t index0, float std) {
    ZS_CU_FOR(i, n) {
        x[i] = std * zs_philox_normal(seed, stream_id, index0 + i);
    }
}

static zs_status launch_init_normal(cudaStream_t cs, float *x, size_t n, uint64_t seed,
                                    uint64_t stream_id, uint64_t index0, float std) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "init_normal: NULL buffer");
    ZS_LAUNCH(init_normal_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, n, seed, stream_id,
              index0, std);
    ZS_CUDA_CHECK_LAUNCH(init_normal_kernel);
fail:
    return st;
}

static zs_status cu_init_normal(zs_stream_t *s, float *x, size_t n, uint64_t seed,
                                uint64_t stream_id, uint64_t index0, float std) {
    return launch_init_normal(zs_cu_stream(s), x, n, seed, stream_id, index0, std);
}

static zs_status cu_sync(zs_stream_t *s) {
    zs_status st = ZS_OK;
    ZS_CUDA_CHECK(cudaStreamSynchronize(zs_cu_stream(s)));
fail:
    return st;
}

/* ---- the table ---------------------------------------------------------------------- */

/* Designated initializers (C++20) must follow ops.h's field order: a reordered or renamed field
 * fails to compile here instead of landing in the wrong slot. The three tables differ in their
 * gemm's arithmetic only. */
static const zs_ops *cuda_with_math(zs_gemm_math math);

#define CUDA_TABLE(math, gemm_fn)                                                                  \
    {                                                                                              \
        .name = "cuda", .gemm_math = math, .with_math = cuda_with_math, .gemm = gemm_fn,           \
        .bias_fwd = cu_bias_fwd, .bias_bwd = cu_bias_bwd, .embedding_fwd = zs_cu_embedding_fwd,    \
        .embedding_bwd = zs_cu_embedding_bwd, .layernorm_fwd = zs_cu_layernorm_fwd,                \
        .layernorm_bwd = zs_cu_layernorm_bwd, .gelu_fwd = zs_cu_gelu_fwd,                          \
        .gelu_bwd = zs_cu_gelu_bwd, .attention_fwd = zs_cu_attention_fwd,                          \
        .attention_bwd = zs_cu_attention_bwd, .residual_fwd = cu_residual_fwd, .axpy = cu_axpy,    \
        .softmax_xent = zs_cu_softmax_xent, .adamw = cu_adamw, .adamw_segs = cu_adamw_segs,        \
        .cast = cu_cast, .scale = cu_scale, .sumsq = cu_sumsq, .sum = cu_sum, .fill = cu_fill,     \
        .copy = cu_copy, .init_normal = cu_init_normal, .sync = cu_sync,                           \
        .rmsnorm_fwd = zs_cu_rmsnorm_fwd, .rmsnorm_bwd = zs_cu_rmsnorm_bwd,                        \
        .rope_fwd = zs_cu_rope_fwd, .rope_bwd = zs_cu_rope_bwd, .swiglu_fwd = zs_cu_swiglu_fwd,    \
        .swiglu_bwd = zs_cu_swiglu_bwd, .attention_gqa_fwd = zs_cu_attention_gqa_fwd,              \
        .attention_gqa_bwd = zs_cu_attention_gqa_bwd,                                              \
        .flash_attention_fwd = zs_cu_flash_attention_fwd,                                          \
        .flash_attention_bwd = zs_cu_flash_attention_bwd,                                          \
        .decode_attention = zs_cu_decode_attention, .sample = zs_cu_sample,                        \
    }

static const zs_ops cuda_ops[3] = {CUDA_TABLE(ZS_MATH_FP32, cu_gemm),
                                   CUDA_TABLE(ZS_MATH_TF32, cu_gemm_tf32),
                                   CUDA_TABLE(ZS_MATH_BF16, cu_gemm_bf16)};

static const zs_ops *cuda_with_math(zs_gemm_math math) {
    return &cuda_ops[math == ZS_MATH_TF32 ? 1 : math == ZS_MATH_BF16 ? 2 : 0];
}

extern "C" const zs_ops *zs_ops_cuda(void) {
    return cuda_with_math(ZS_MATH_FP32);
}

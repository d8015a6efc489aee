/* Internal to the CUDA backend (CUDA C++ only): the check macros, the stream handle, launch
 * geometry and the ops each .cu file contributes to the table in ops_cuda.cu. Project C
 * headers are included with C linkage; system headers come first so that libstdc++'s math.h
 * wrapper is never opened inside extern "C". */
#ifndef ZS_BACKEND_CUDA_INTERNAL_H
#define ZS_BACKEND_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef ZS_CUDA_EMU
/* The emulated GPU of the tests (tests/cuda_emu, docs/cuda.md): the same sources built as host
 * C++, launches and shared memory through the macros below. */
#include "cuda_emu.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/cuda_device.h"
#include "backend/kernels/common.h"
#include "backend/ops.h"
#include "core/alloc.h"
#include "core/bf16.h"
#include "core/status.h"
}

/* A failed CUDA runtime call: record its text, the CUDA error and file:line, jump to fail.
 * (In C++ a goto may not skip an initialised declaration: functions using these declare
 * their locals before the first check.) */
#define ZS_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t zs_cu_rc_ = (call);                                                            \
        if (zs_cu_rc_ != cudaSuccess) {                                                            \
            st = zs_error(ZS_ERR_CUDA, "%s failed: %s (at %s:%d)", #call,                          \
                          cudaGetErrorString(zs_cu_rc_), __FILE__, __LINE__);                      \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* A failed cuBLAS call, likewise. */
#define ZS_CUBLAS_CHECK(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t zs_cb_rc_ = (call);                                                         \
        if (zs_cb_rc_ != CUBLAS_STATUS_SUCCESS) {                                                  \
            st = zs_error(ZS_ERR_CUDA, "%s failed: %s (at %s:%d)", #call,                          \
                          cublasGetStatusString(zs_cb_rc_), __FILE__, __LINE__);                   \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Check the kernel launch just made (configuration errors, no device, ...). Errors raised
 * while the kernel runs surface at the next synchronising call (sync, sumsq, copies). */
#define ZS_CUDA_CHECK_LAUNCH(kernel)                                                               \
    do {                                                                                           \
        cudaError_t zs_cu_rc_ = cudaGetLastError();                                                \
        if (zs_cu_rc_ != cudaSuccess) {                                                            \
            st = zs_error(ZS_ERR_CUDA, "launch of %s failed: %s (at %s:%d)", #kernel,              \
                          cudaGetErrorString(zs_cu_rc_), __FILE__, __LINE__);                      \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Every kernel launch: kernel<<<grid, block, shmem, stream>>>(args...) for nvcc, a queued
 * launch on the emulated GPU otherwise. */
#ifdef ZS_CUDA_EMU
#define ZS_LAUNCH(kernel, grid, block, shmem, stream, ...)                                         \
    zs_emu_launch(#kernel, kernel, grid, block, shmem, stream, __VA_ARGS__)
#else
#define ZS_LAUNCH(kernel, grid, block, shmem, stream, ...)                                         \
    kernel<<<grid, block, shmem, stream>>>(__VA_ARGS__)
#endif

/* Every launcher states the cost of its launch (docs/cuda.md "The profiler") just before it: the
 * FLOPs on the fp32 pipes, the FLOPs on tensor cores, and the ideal bytes (each input read once,
 * each output written once), from its shapes. The emulated GPU's profiler records them beside the
 * traffic it counts (docs/cuda.md, "The profiler"); a real build compiles them away. */
#ifdef ZS_CUDA_EMU
#define ZS_COST(flops, mma_flops, bytes)                                                           \
    zs_emu_declare_cost((double)(flops), (double)(mma_flops), (double)(bytes))
#else
#define ZS_COST(flops, mma_flops, bytes) ((void)0)
#endif

/* ZS_UNROLL before a loop of a fixed count: unrolled by nvcc (so that arrays it indexes stay in
 * registers); the emulated build's host compiler decides for itself. */
#ifdef ZS_CUDA_EMU
#define ZS_UNROLL
#else
#define ZS_UNROLL _Pragma("unroll")
#endif

/* Shared memory: ZS_SHARED(float, buf, 32) declares a block-wide array buf[32], aligned as its
 * type; ZS_SHARED_ALIGNED(uint16_t, buf, 64, 16) one aligned to 16 bytes at least, for loads
 * and stores wider than the type (the emulated GPU places every array at exactly the alignment
 * declared, so a wider access without it is a misaligned address there);
 * ZS_SHARED_DYN(float, buf) names the launch's dynamic shared memory. Kernels use these, never
 * __shared__ itself, so the emulated build gives every thread of a block the same (poisoned)
 * memory. */
#ifdef ZS_CUDA_EMU
#define ZS_SHARED_ALIGNED(type, name, count, align)                                                \
    static const char zs_site_##name = 0;                                                          \
    type *name = (type *)zs_emu_shared(&zs_site_##name, sizeof(type) * (count),                    \
                                       (align) > alignof(type) ? (align) : alignof(type), #name)
#define ZS_SHARED(type, name, count) ZS_SHARED_ALIGNED(type, name, count, alignof(type))
#define ZS_SHARED_DYN(type, name) type *name = (type *)zs_emu_dyn_shared()
#else
#define ZS_SHARED_ALIGNED(type, name, count, align)                                                \
    __shared__ __align__(align)                                                                    \
    type name[count]
#define ZS_SHARED(type, name, count) __shared__ type name[count]
#define ZS_SHARED_DYN(type, name)                                                                  \
    extern __shared__ __align__(16) unsigned char zs_dyn_smem_[];                                  \
    type *name = (type *)zs_dyn_smem_
#endif

/* The opaque zs_stream_t of ops.h: the CUDA stream and the device scratch buffers of the work
 * queued on it, grown on demand in stream order and accounted as workspace: its reductions'
 * partials (sumsq and sum's chunk sums), and a bf16 gemm's operands (ops.h
 * ZS_GEMM_CAST_MAX); and the bf16 twin of an fp32 range its GEMMs read (ops.h twin16). */
struct zs_stream {
    cudaStream_t stream;
    double *scratch;
    size_t scratch_n; /* doubles */
    zs_bf16 *gemm16;
    size_t gemm16_n; /* bf16 elements */
    const float *twin_f32;
    const zs_bf16 *twin_b16;
    size_t twin_n; /* elements; 0: no twin */
};

/* NULL is CUDA's default stream. */
static inline cudaStream_t zs_cu_stream(zs_stream_t *s) {
    return s ? s->stream : (cudaStream_t)0;
}

/* At least n doubles of s's scratch (the default stream has one of its own), in stream order. */
zs_status zs_cu_scratch(zs_stream_t *s, size_t n, double **out);
/* At least n bf16 elements of s's gemm operand scratch, likewise. */
zs_status zs_cu_gemm_scratch(zs_stream_t *s, size_t n, zs_bf16 **out);
/* ops.h twin16 (s NULL: the default stream keeps none, since threads share it). */
void zs_cu_twin16(zs_stream_t *s, const float *f32, const zs_bf16 *b16, size_t n);
/* The bf16 values of x[0, n) as s's twin holds them, at any alignment; NULL where x is not
 * wholly inside the twin's fp32 range. Inside it, x's fp32 values need not be there (a bf16
 * compute copy leaves the twin-read tensors unwidened, shard/engine_bf16.c): read the twin. */
const zs_bf16 *zs_cu_twin_at(zs_stream_t *s, const float *x, size_t n);
/* zs_cu_twin_at's, where it is 16-byte aligned as a scratch operand is; else NULL. */
const zs_bf16 *zs_cu_twin_of(zs_stream_t *s, const float *x, size_t n);

/* Threads per block of every kernel here: simple kernels, one thread per element, row or
 * column. */
#define ZS_CU_THREADS 256
/* Grid-stride loops cover any n; the grid is capped so its size fits every device. */
#define ZS_CU_MAX_BLOCKS 65535u

/* Blocks for n work items (n > 0). */
static inline unsigned zs_cu_blocks(size_t n) {
    size_t b = (n + ZS_CU_THREADS - 1) / ZS_CU_THREADS;
    return b > ZS_CU_MAX_BLOCKS ? ZS_CU_MAX_BLOCKS : (unsigned)b;
}

/* Row kernels of norms: one warp per row, ZS_CU_THREADS / ZS_WARP rows per block, one block
 * for every such group of rows (not grid-stride: a grid too small leaves rows undone). */
#define ZS_CU_ROWS (ZS_CU_THREADS / ZS_WARP)
static inline unsigned zs_cu_row_blocks(size_t rows) {
#ifdef ZS_MUTANT_GRID_DOWN /* the tests' deliberately broken build: the grid rounded down */
    return (unsigned)(rows / ZS_CU_ROWS);
#else
    return (unsigned)((rows + ZS_CU_ROWS - 1) / ZS_CU_ROWS);
#endif
}

/* The row of warp `threadIdx.x / ZS_WARP` of this block, or N (past the end). Lanes of a warp
 * share their row, so a warp returns whole and its shuffles see every lane. */
static __device__ __forceinline__ size_t zs_cu_warp_row(size_t N) {
    size_t r = (size_t)blockIdx.x * ZS_CU_ROWS + threadIdx.x / ZS_WARP;
    return r < N ? r : N;
}

/* An input element widened to fp32: fp32 as it is, bf16 exactly (zs_bf16_to_f32). */
static __device__ __forceinline__ float zs_cu_widen(float v) {
    return v;
}
static __device__ __forceinline__ float zs_cu_widen(zs_bf16 v) {
    return zs_bf16_to_f32(v);
}

/* A norm's row as its warp walks it, lane l taking elements l, l + 32, ... in the CPU twin's
 * order: zs_cu_row_load keeps the lane's first ZS_CU_ROW_KEEP of them in registers (the first
 * 1024 of the row: GPT-2 small and medium rows whole), and zs_cu_row_each calls f(i, x[i]) for
 * each of the lane's elements in order, from the registers, then from memory past them. So a
 * kernel that passes over a row of 1024 or less two or three times reads it from memory once.
 * (64 kept, 2048 wide, took 168 registers in layernorm_fwd_kernel, one block an SM, or spilled
 * under __launch_bounds__; 32 take 121, no spill: nvcc 13, sm_90.) */
#define ZS_CU_ROW_KEEP 32
/* (a bf16 row is widened as it is read: zs_cu_widen) */
template <typename T>
static __device__ __forceinline__ void zs_cu_row_load(float (&v)[ZS_CU_ROW_KEEP], const T *x, int C,
                                                      int lane) {
    ZS_UNROLL
    for (int k = 0; k < ZS_CU_ROW_KEEP; k++)
        if (lane + k * ZS_WARP < C) v[k] = zs_cu_widen(x[lane + k * ZS_WARP]);
}
template <typename T, typename F>
static __device__ __forceinline__ void zs_cu_row_each(const float (&v)[ZS_CU_ROW_KEEP], const T *x,
                                                      int C, int lane, F f) {
    ZS_UNROLL
    for (int k = 0; k < ZS_CU_ROW_KEEP; k++)
        if (lane + k * ZS_WARP < C) f(lane + k * ZS_WARP, v[k]);
    for (int i = lane + ZS_CU_ROW_KEEP * ZS_WARP; i < C; i += ZS_WARP)
        f(i, zs_cu_widen(x[i]));
}

/* An output element stored as fp32, or rounded to bf16 (zs_f32_to_bf16) where a producer writes
 * the next GEMM's bf16 input (ops.h gemm16); zs_cu_put4 stores four at element 4 i (16-byte,
 * or for bf16 8-byte, aligned). */
static __device__ __forceinline__ void zs_cu_put(float *p, float v) {
    *p = v;
}
static __device__ __forceinline__ void zs_cu_put(zs_bf16 *p, float v) {
    *p = zs_f32_to_bf16(v);
}
static __device__ __forceinline__ void zs_cu_put4(float *p, size_t i, float4 v) {
    ((float4 *)p)[i] = v;
}
static __device__ __forceinline__ void zs_cu_put4(zs_bf16 *p, size_t i, float4 v) {
    uint32_t lo = (uint32_t)zs_f32_to_bf16(v.x).bits | (uint32_t)zs_f32_to_bf16(v.y).bits << 16;
    uint32_t hi = (uint32_t)zs_f32_to_bf16(v.z).bits | (uint32_t)zs_f32_to_bf16(v.w).bits << 16;
    ((uint2 *)p)[i] = make_uint2(lo, hi);
}

/* FLOPs of zs_cu_warp_sum over a warp and of zs_cu_block_reduce (sum) over a block. */
#define ZS_CU_WARP_SUM_FLOPS (5.0 * ZS_WARP)
#define ZS_CU_BLOCK_SUM_FLOPS (12.0 * ZS_ROW_THREADS)

/* The butterfly of kernels/common.h across a warp: every lane ends with the warp's total, added
 * in the CPU twin's order (lane i + lane i ^ d, d = 16, 8, 4, 2, 1). */
static __device__ __forceinline__ float zs_cu_warp_sum(float v) {
    for (int d = ZS_WARP / 2; d >= 1; d /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

static __device__ __forceinline__ float zs_cu_warp_max(float v) {
    for (int d = ZS_WARP / 2; d >= 1; d /= 2) {
        float o = __shfl_xor_sync(0xffffffffu, v, d);
        v = o > v ? o : v;
    }
    return v;
}

/* Block of ZS_ROW_THREADS: each warp's butterfly, the warp totals through red (shared, one per
 * warp), then the butterfly over them, computed by every thread: all return the same bits as
 * zs_block_tree. The first barrier publishes the warp totals, the second lets red be reused. */
static __device__ __forceinline__ float zs_cu_block_reduce(float v, float *red, int is_max) {
    int lane = (int)threadIdx.x % ZS_WARP, w = (int)threadIdx.x / ZS_WARP;
    float t[ZS_ROW_THREADS / ZS_WARP];
    v = is_max ? zs_cu_warp_max(v) : zs_cu_warp_sum(v);
    if (lane == 0) red[w] = v;
#ifndef ZS_MUTANT_NO_SYNC /* the tests' deliberately broken build: a missing barrier */
    __syncthreads();
#endif
    for (int k = 0; k < ZS_ROW_THREADS / ZS_WARP; k++)
        t[k] = red[k];
#ifndef ZS_MUTANT_NO_TRAILING_SYNC /* broken build: red overwritten while others still read it */
    __syncthreads();
#endif
    return is_max ? zs_tree_max(t, ZS_ROW_THREADS / ZS_WARP) : zs_tree(t, ZS_ROW_THREADS / ZS_WARP);
}

/* Column sums in kernels/common.h's order (bias and norm-weight gradients): a block of
 * ZS_CU_COLS columns times ZS_COLSUM_GROUPS partial sums (ZS_CU_COL_THREADS = 128 threads; a
 * warp reads four rows of 8 consecutive floats, one whole 32-byte sector each); the partials
 * meet in shared memory and the first group's threads add them in group order. Eight columns
 * a block, not sixteen: a 768-column sum is 96 blocks rather than 48, so it spreads over most
 * of an H100's 132 SMs (each SM pulls only its share of the memory bandwidth); the order of
 * each column's adds, and so its bits, does not depend on the width. */
#define ZS_CU_COLS 8
#define ZS_CU_COL_THREADS (ZS_CU_COLS * ZS_COLSUM_GROUPS)
/* rmsnorm_bwd_cols reads this many rows of a segment ahead (all loads in flight), then adds
 * them in order: one load's latency per batch, not per row. The other column sums size their
 * own batch by the registers they hold: bias_bwd BIAS_BWD_BATCH (ops_cuda.cu), layer norm's
 * LN_COL_BATCH (nn_cuda.cu). */
#define ZS_CU_COL_BATCH 16
/* ZS_BOUNDS(threads, blocks) between "__global__ void" and a kernel's name: nvcc's
 * __launch_bounds__, at most `threads` a block and registers for `blocks` blocks an SM. A
 * kernel that keeps a batch of loads in flight needs the registers: unbounded, ptxas keeps a
 * kernel of 256-thread blocks near 32 registers (eight blocks an SM) and issues its loads a few
 * at a time between the adds. Nothing emulated. */
#ifdef ZS_CUDA_EMU
#define ZS_BOUNDS(threads, blocks)
#else
#define ZS_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#endif
static inline unsigned zs_cu_col_blocks(size_t cols) {
    return (unsigned)((cols + ZS_CU_COLS - 1) / ZS_CU_COLS);
}

/* Grid-stride loop over [0, n) with a size_t index. */
#ifndef ZS_MUTANT_NO_GRID_STRIDE
#define ZS_CU_FOR(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)
#else /* broken build: one element per thread, so a capped grid leaves the tail undone */
#define ZS_CU_FOR(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i = (n))
#endif

/* The process's cuBLAS handle (created on first use for the current device) and the lock
 * that serialises setting its stream and enqueuing on it. device.cu. */
zs_status zs_cu_blas_lock(cublasHandle_t *out);
void zs_cu_blas_unlock(void);
/* The process's cuBLASLt handle, created on first use; called with the lock held. */
zs_status zs_cu_blaslt(cublasLtHandle_t *out);

/* The gemms of the tables (gemm_cuda.cu; ops.h gemm, linear_fwd_bias, gemm_linear_bwd,
 * gemm_linear_bwd_dgelu, gemm_linear_bwd16). */
zs_status zs_cu_gemm(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
zs_status zs_cu_gemm_tf32(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc);
zs_status zs_cu_gemm_bf16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc);
zs_status zs_cu_gemm16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                       const void *A, int a16, int lda, const void *B, int b16, int ldb, float beta,
                       float *C, int ldc);
zs_status zs_cu_linear_fwd_bias(zs_stream_t *s, void *out, int out16, float *tmp, const void *inp,
                                int in16, const float *W, const float *bias, int N, int IC, int OC,
                                zs_bf16 *gelu, const float *res);
zs_status zs_cu_gemm_linear_bwd_bf16(zs_stream_t *s, void *dinp, int dinp16, float *dW,
                                     float *dbias, const void *dout, int dout16,
                                     const void *gelu_inp, int gelu16, float *dtmp, const void *inp,
                                     int inp16, const float *W, int N, int IC, int OC,
                                     float dinp_beta);
zs_status zs_cu_gemm_linear_bwd_dgelu(zs_stream_t *s, zs_bf16 *dinp, float *dinp_dbias,
                                      const zs_bf16 *gelu_pre, float *dW, float *dbias,
                                      const void *dout, int dout16, const void *inp, int inp16,
                                      const float *W, int N, int IC, int OC);
zs_status zs_cu_gemm_linear_bwd16(zs_stream_t *s, float *dinp, float *dW, const zs_bf16 *dout,
                                  int ldd, const float *inp, const float *W, int N, int IC, int OC,
                                  float dinp_beta);
/* The kernels those share: n floats rounded to bf16 (zs_f32_to_bf16; cast_cuda.cu), and
 * (ops_cuda.cu) ops.h bias_fwd, bias_gelu_fwd16, and bias_bwd with dout (bf16 where dout16; or
 * gelu_bwd's gradient of gelu_inp from it) rounded into cast[N * OC] in the pass that sums its
 * columns (dbias NULL: no sums). */
zs_status zs_cu_f32_to_bf16(cudaStream_t cs, zs_bf16 *out, const float *in, size_t n);
/* ops.h cast, widen_ranges and round16 (cast_cuda.cu). */
zs_status zs_cu_cast(zs_stream_t *s, void *out, zs_dtype out_dt, const void *in, zs_dtype in_dt,
                     size_t n);
zs_status zs_cu_widen_ranges(zs_stream_t *s, float *out, const zs_bf16 *in, const int64_t *ranges,
                             int nr);
zs_status zs_cu_round16(zs_stream_t *s, float *x, size_t n);
zs_status zs_cu_bias_fwd(zs_stream_t *s, float *out, const float *bias, int N, int OC);
zs_status zs_cu_bias_residual_fwd(zs_stream_t *s, float *out, zs_bf16 *keep, const float *a,
                                  const float *b, const float *bias, int N, int OC);
zs_status zs_cu_bias_gelu_fwd16(zs_stream_t *s, zs_bf16 *pre16, const float *pre, zs_bf16 *out,
                                const float *bias, int N, int OC);
zs_status zs_cu_bias_bwd_cast(zs_stream_t *s, float *dbias, const void *dout, int dout16, int N,
                              int OC, zs_bf16 *cast, const void *gelu_inp, int gelu16);
/* out[i] = a[i] + b[i] (ops.h residual_fwd). */
zs_status zs_cu_add(zs_stream_t *s, float *out, const float *a, const float *b, size_t n);

/* One cuBLASLt product on bf16 A and B with an epilogue (gemm_lt_cuda.cu): its descriptors, and
 * the heuristic's algorithm among those that take the operands' own alignment; found 0 where
 * cuBLASLt offers none (the caller's fallback then runs). */
typedef enum {
    ZS_LT_BIAS,
    ZS_LT_GELU_AUX_BIAS,
    ZS_LT_BGRADB,
    ZS_LT_DGELU_BGRAD,
    ZS_LT_DEFAULT /* none: the product alone (a residual's, its C apart from D) */
} zs_lt_epilogue;
typedef struct zs_lt_call {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t heur;
    int found;
} zs_lt_call;
/* C (m x n, ld ldc; bf16 where c16, else fp32) = op(A) op(B), with epi: + bias[i] on row i (an
 * fp32 bias); GELU_AUX_BIAS: C (bf16) the GELU of that sum, aux (bf16, ld ldc) the sum; BGRADB:
 * bias[j] = op(B)'s column j summed along k (written, not added); DGELU_BGRAD: C (bf16) the
 * GELU's gradient of aux (bf16, ld ldc, read) times the product, bias[i] = row i of that summed
 * (written). */
zs_status zs_cu_lt_plan(zs_lt_call *c, zs_lt_epilogue epi, int transa, int transb, int m, int n,
                        int k, const void *A, int lda, const void *B, int ldb, const void *C,
                        int c16, int ldc, const float *bias, void *aux);
void zs_cu_lt_free(zs_lt_call *c);
/* The largest power of two up to 256 that divides p's address (the alignment zs_cu_lt_plan
 * promises cuBLASLt for an operand at p). */
uint32_t zs_cu_lt_align(const void *p);
/* dW^T (IC x OC) += x^T g (x N x IC, g N x OC, both bf16) by cublasLtMatmul, and dbias += g's
 * column sums from the same call's BGRADB epilogue (through the stream's reduction scratch; the
 * sums in cuBLASLt's order); *done 0, nothing launched, where cuBLASLt has no algorithm. Called
 * with the cuBLAS lock held (gemm_cuda.cu). */
zs_status zs_cu_lt_dw_bgrad(zs_stream_t *s, float *dW, float *dbias, const zs_bf16 *x,
                            const zs_bf16 *g, int N, int IC, int OC, int *done);
/* The input gradient of a layer whose input went through a GELU (GPT-2's c_proj after fc's
 * GELU): dinp (N x IC, bf16) = gelu'(pre) (g W), pre (N x IC, bf16) the GELU's input as
 * GELU_AUX_BIAS kept it, g (N x OC) and w (OC x IC) bf16, from cublasLtMatmul's DGELU_BGRAD
 * epilogue on the fp32 sums before their one rounding, and dbias[IC] += dinp's column sums (the
 * GELU layer's bias gradient, through the stream's reduction scratch, in cuBLASLt's order); *done
 * 0, nothing launched, where cuBLASLt has no algorithm. Called with the cuBLAS lock held. */
zs_status zs_cu_lt_dinp_dgelu(zs_stream_t *s, zs_bf16 *dinp, float *dbias, const zs_bf16 *pre,
                              const zs_bf16 *w, const zs_bf16 *g, int N, int IC, int OC, int *done);

/* Network ops (nn_cuda.cu; the embedding in embedding_cuda.cu; RMSNorm, RoPE and SwiGLU in
 * llama_cuda.cu). */
zs_status zs_cu_embedding_fwd(zs_stream_t *s, float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int B, int T, int C, const int32_t *seg);
zs_status zs_cu_embedding_bwd(zs_stream_t *s, float *dwte, float *dwpe, const float *dout,
                              const int32_t *tokens, int B, int T, int C, const int32_t *seg);
zs_status zs_cu_layernorm_fwd(zs_stream_t *s, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C);
zs_status zs_cu_layernorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C);
zs_status zs_cu_layernorm_bwd(zs_stream_t *s, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int N, int C);
zs_status zs_cu_layernorm_bwd16(zs_stream_t *s, float *dinp, zs_bf16 *dinp16, float *dw, float *db,
                                const void *dout, int dout16, const void *inp, int inp16,
                                const float *w, const float *mean, const float *rstd, int N, int C);
zs_status zs_cu_gelu_fwd(zs_stream_t *s, float *out, const float *inp, size_t n);
zs_status zs_cu_gelu_bwd(zs_stream_t *s, float *dinp, const float *inp, const float *dout,
                         size_t n);
zs_status zs_cu_gelu_bwd16(zs_stream_t *s, float *dinp, const zs_bf16 *inp, const float *dout,
                           size_t n);
zs_status zs_cu_softmax_xent(zs_stream_t *s, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int N, int V, int Vp, float dloss);
zs_status zs_cu_softmax_xent16(zs_stream_t *s, float *losses, zs_bf16 *logits,
                               const int32_t *targets, int N, int V, int Vp, float dloss, int grad);
zs_status zs_cu_rmsnorm_fwd(zs_stream_t *s, float *out, float *rstd, const float *inp,
                            const float *w, int N, int C, float eps);
zs_status zs_cu_rmsnorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *rstd, const float *inp,
                              const float *w, int N, int C, float eps);
zs_status zs_cu_rmsnorm_bwd(zs_stream_t *s, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int N, int C);
zs_status zs_cu_rmsnorm_bwd16(zs_stream_t *s, float *dinp, float *dw, const void *dout, int dout16,
                              const void *inp, int inp16, const float *w, const float *rstd, int N,
                              int C);
zs_status zs_cu_rope_fwd(zs_stream_t *s, float *out, const float *inp, int B, int T, int NH, int hs,
                         float theta, const int32_t *seg);
zs_status zs_cu_rope_bwd(zs_stream_t *s, float *dinp, const float *dout, int B, int T, int NH,
                         int hs, float theta, const int32_t *seg);
zs_status zs_cu_rope_bwd16(zs_stream_t *s, zs_bf16 *dinp, const float *dout, int B, int T, int NH,
                           int hs, float theta, const int32_t *seg);
zs_status zs_cu_swiglu_fwd(zs_stream_t *s, float *out, const float *gate, const float *up,
                           size_t n);
zs_status zs_cu_swiglu_fwd16(zs_stream_t *s, zs_bf16 *out, const float *gate, const float *up,
                             size_t n);
zs_status zs_cu_swiglu_bwd16(zs_stream_t *s, zs_bf16 *dgate, zs_bf16 *dup, const float *dout,
                             const float *gate, const float *up, size_t n);
zs_status zs_cu_swiglu_bwd(zs_stream_t *s, float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, size_t n);

/* AdamW and the sums (optim_cuda.cu): the ops table's adamw, adamw_segs, adamw_segs16, sumsq,
 * sum and sumsq16 (backend/ops.h). */
zs_status zs_cu_adamw(zs_stream_t *s, float *param, const float *grad, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                      int t);
zs_status zs_cu_adamw_segs(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                           const zs_adamw_segs *segs, float lr, float beta1, float beta2, float eps,
                           float wd, float grad_scale, int t);
zs_status zs_cu_adamw_segs16(zs_stream_t *s, float *param, const zs_bf16 *grad, float *m, float *v,
                             zs_bf16 *round, const zs_adamw_segs *segs, float lr, float beta1,
                             float beta2, float eps, float wd, float grad_scale, int t);
zs_status zs_cu_sumsq(zs_stream_t *s, double *out, const float *x, size_t n);
zs_status zs_cu_sum(zs_stream_t *s, double *out, const float *x, size_t n);
zs_status zs_cu_sumsq16(zs_stream_t *s, double *out, const zs_bf16 *x, size_t n, size_t group);

/* Attention (attention_cuda.cu). */
zs_status zs_cu_attention_fwd(zs_stream_t *s, float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH, const int32_t *seg);
zs_status zs_cu_attention_bwd(zs_stream_t *s, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH,
                              const int32_t *seg);
zs_status zs_cu_attention_gqa_fwd(zs_stream_t *s, float *out, float *att, const float *q,
                                  const float *k, const float *v, int B, int T, int NH, int NKV,
                                  int hs, const int32_t *seg);
zs_status zs_cu_attention_gqa_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *datt,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const float *att, int B, int T, int NH, int NKV, int hs,
                                  const int32_t *seg);

/* Memory-efficient attention (flash_cuda.cu). */
zs_status zs_cu_flash_attention_fwd(zs_stream_t *s, float *out, float *lse, const float *q,
                                    const float *k, const float *v, int B, int T, int NH, int NKV,
                                    int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cu_flash_attention_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                    const float *dout, const float *q, const float *k,
                                    const float *v, const float *out, const float *lse, int B,
                                    int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                    const int32_t *seg);
/* The two with a bf16 out (ops.h flash_attention_fwd16/bwd16), and bwd16 with dq, dk, dv
 * written in bf16 too (flash_attention_bwd16g). */
zs_status zs_cu_flash_attention_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                                      const float *k, const float *v, int B, int T, int NH, int NKV,
                                      int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cu_flash_attention_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const zs_bf16 *out, const float *lse, int B,
                                      int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                      const int32_t *seg);
zs_status zs_cu_flash_attention_bwd16g(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv,
                                       float *delta, const float *dout, const float *q,
                                       const float *k, const float *v, const zs_bf16 *out,
                                       const float *lse, int B, int T, int NH, int NKV, int hs,
                                       int ldq, int ldkv, const int32_t *seg);

/* Flash attention on tensor cores, bf16 products (flash_tc_cuda.cu): the bf16 table's
 * flash_attention_fwd/bwd, on tensor cores for the head sizes zs_cu_flash_tc_eligible accepts,
 * else the fp32 kernels (zs_cu_flash_attention_fwd/bwd). */
int zs_cu_flash_tc_eligible(int hs);
zs_status zs_cu_flash_tc_fwd(zs_stream_t *s, float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int NH, int NKV, int hs, int ldq,
                             int ldkv, const int32_t *seg);
zs_status zs_cu_flash_tc_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                             const float *dout, const float *q, const float *k, const float *v,
                             const float *out, const float *lse, int B, int T, int NH, int NKV,
                             int hs, int ldq, int ldkv, const int32_t *seg);
/* The two with a bf16 out (ops.h flash_attention_fwd16/bwd16), and bwd16g, else
 * zs_cu_flash_attention_*16*. */
zs_status zs_cu_flash_tc_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                               const float *k, const float *v, int B, int T, int NH, int NKV,
                               int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cu_flash_tc_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                               const float *dout, const float *q, const float *k, const float *v,
                               const zs_bf16 *out, const float *lse, int B, int T, int NH, int NKV,
                               int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cu_flash_tc_bwd16g(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv, float *delta,
                                const float *dout, const float *q, const float *k, const float *v,
                                const zs_bf16 *out, const float *lse, int B, int T, int NH, int NKV,
                                int hs, int ldq, int ldkv, const int32_t *seg);
/* fwd16 and bwd16g with q, k and v in bf16 (ops.h flash_attention_fwd16q/bwd16q; bwd16q's dO
 * too), for the head sizes zs_cu_flash_tc_eligible accepts only. */
zs_status zs_cu_flash_tc_fwd16q(zs_stream_t *s, zs_bf16 *out, float *lse, const zs_bf16 *q,
                                const zs_bf16 *k, const zs_bf16 *v, int B, int T, int NH, int NKV,
                                int hs, int ldq, int ldkv, const int32_t *seg);
zs_status zs_cu_flash_tc_bwd16q(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv, float *delta,
                                const zs_bf16 *dout, const zs_bf16 *q, const zs_bf16 *k,
                                const zs_bf16 *v, const zs_bf16 *out, const float *lse, int B,
                                int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                const int32_t *seg);

/* Decoding with a KV cache and drawing tokens (decode_cuda.cu). */
zs_status zs_cu_sample(zs_stream_t *s, int32_t *token, const float *logits, int V,
                       float temperature, uint64_t seed, uint64_t index);
zs_status zs_cu_decode_attention(zs_stream_t *s, float *out, float *q, float *k, const float *v,
                                 float *kc, float *vc, float *scores, int NH, int NKV, int hs,
                                 int pos, float theta);

#endif

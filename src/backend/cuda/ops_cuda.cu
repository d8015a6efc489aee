/* The CUDA backend's ops tables, and bias, elementwise, fill/copy and Philox-init kernels over
 * the shared per-element math in backend/kernels. The gemms (cuBLAS) live in gemm_cuda.cu, casts
 * in cast_cuda.cu, network ops in nn_cuda.cu, embedding_cuda.cu and llama_cuda.cu, attention in
 * attention_cuda.cu and flash*_cuda.cu, AdamW and the sums of the gradient norm and the loss in
 * optim_cuda.cu. Each op is a static __global__ kernel and the op itself, which checks shapes and
 * buffers and launches it. Every op is asynchronous on its stream.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/adamw.h"
#include "backend/kernels/common.h"
#include "backend/kernels/gelu.h"
#include "backend/kernels/sumsq.h"
#include "core/bf16.h"
#include "core/philox.h"

/* ---- bias --------------------------------------------------------------------------- */

static zs_status cu_residual_fwd(zs_stream_t *s, float *out, const float *a, const float *b,
                                 size_t n);

/* out[i] += bias[i % OC]: 4 elements a thread (16-byte accesses) where rows are 16-byte
 * aligned (vec: OC a multiple of 4, both buffers aligned), else one. */
static __global__ void bias_fwd_kernel(float *out, const float *bias, size_t total, int OC,
                                       int vec) {
    if (vec) {
        unsigned oc4 = (unsigned)OC / 4;
        ZS_CU_FOR(i, total / 4) {
            float4 o = ((float4 *)out)[i], b = ((const float4 *)bias)[i % oc4];
            ((float4 *)out)[i] = make_float4(o.x + b.x, o.y + b.y, o.z + b.z, o.w + b.w);
        }
        return;
    }
    ZS_CU_FOR(i, total) {
        out[i] += bias[i % (size_t)OC];
    }
}

/* The column sums of dout in kernels/common.h's order (cuda_internal.h, ZS_CU_COLS): thread
 * (column, group) adds the rows of its group's segments in index order, then the first group
 * adds the partials in group order into dbias. The CPU's bits, no atomics. Each thread's sum is
 * a chain of N / 16 dependent adds, so what bounds the kernel is the loads in flight per
 * thread: a whole segment's (64 registers, ZS_BOUNDS), where ptxas left unbounded issued about
 * 8 (4.9 ms a gpt2-124m step on an H100, docs/cuda.md "On a real GPU").
 * With cast non-NULL it also writes each element it reads, rounded to bf16, at the same index
 * of cast: the bf16 linear backward's dout operand from the one pass that sums it. With
 * gelu_inp non-NULL the element is gelu_bwd's 0 + gelu'(gelu_inp) dout (nn_cuda.cu, the same
 * bits), so a GELU's backward costs no pass of its own; dbias NULL skips the sums. */
#define BIAS_BWD_BATCH ZS_COLSUM_SEG
/* COLS columns a block: ZS_CU_COLS, or twice that where the columns are many
 * (BIAS_BWD_WIDE_MIN: still 128 blocks or more, about an H100's 132 SMs), so a warp's row of a
 * bf16 operand (the cast, the GELU's bf16 input) is a whole 32-byte sector rather than half. */
#define BIAS_BWD_WIDE (2 * ZS_CU_COLS)
#define BIAS_BWD_WIDE_MIN (128 * BIAS_BWD_WIDE)
/* (the kernel's name stays on the line of "__global__ void": emu_coverage.sh reads it) */
// clang-format off
template <typename GeluT, typename DoutT>
static __global__ void ZS_BOUNDS(BIAS_BWD_WIDE * ZS_COLSUM_GROUPS, 1) bias_bwd_kernel(float *dbias,
        const DoutT *dout, int N, int OC, zs_bf16 *cast, const GeluT *gelu_inp) {
    // clang-format on
    ZS_SHARED(float, part, ZS_COLSUM_GROUPS *(BIAS_BWD_WIDE + 1));
    const int cols = (int)blockDim.x / ZS_COLSUM_GROUPS; /* ZS_CU_COLS or BIAS_BWD_WIDE */
    /* a bf16 GELU input: half the rows in flight, where the whole segment's addresses and
     * values spilled (ptxas -v, sm_90); 32 rows of 6 bytes a thread still cover the latency */
    constexpr int BATCH = sizeof(GeluT) == sizeof(float) ? BIAS_BWD_BATCH : BIAS_BWD_BATCH / 2;
    int tx = (int)threadIdx.x % cols, w = (int)threadIdx.x / cols;
    int c = (int)blockIdx.x * cols + tx;
    float acc = 0.0f;
    for (int s0 = w * ZS_COLSUM_SEG; s0 < N && c < OC; s0 += ZS_COLSUM_GROUPS * ZS_COLSUM_SEG) {
        int end = s0 + ZS_COLSUM_SEG < N ? s0 + ZS_COLSUM_SEG : N;
        /* BATCH rows' loads in flight, then added in order */
        for (int r0 = s0; r0 < end; r0 += BATCH) {
            float v[BATCH];
            ZS_UNROLL
            for (int u = 0; u < BATCH; u++) /* past the segment: a row read, unused */
                v[u] = zs_cu_widen(dout[(size_t)(r0 + u < end ? r0 + u : r0) * OC + c]);
            if (gelu_inp) {
                ZS_UNROLL
                for (int u = 0; u < BATCH; u++)
                    v[u] = 0.0f + zs_gelu_grad(zs_cu_widen(
                                      gelu_inp[(size_t)(r0 + u < end ? r0 + u : r0) * OC + c])) *
                                      v[u];
            }
            ZS_UNROLL
            for (int u = 0; u < BATCH; u++)
                if (r0 + u < end) acc += v[u];
            if (cast) {
                ZS_UNROLL
                for (int u = 0; u < BATCH; u++)
                    if (r0 + u < end) cast[(size_t)(r0 + u) * OC + c] = zs_f32_to_bf16(v[u]);
            }
        }
    }
    part[w * (cols + 1) + tx] = acc;
    __syncthreads();
    if (w == 0 && c < OC && dbias) zs_colsum_finish(dbias + c, part + tx, (size_t)cols + 1, 1);
}

/* keep[4 i..4 i + 3] = v rounded to bf16 (8-byte aligned), and those values widened returned:
 * the two casts of the kept residual (ops.h bias_residual_fwd). */
static __device__ __forceinline__ float4 keep4(zs_bf16 *keep, size_t i, float4 v) {
    zs_cu_put4(keep, i, v);
    return make_float4(zs_bf16_to_f32(zs_f32_to_bf16(v.x)), zs_bf16_to_f32(zs_f32_to_bf16(v.y)),
                       zs_bf16_to_f32(zs_f32_to_bf16(v.z)), zs_bf16_to_f32(zs_f32_to_bf16(v.w)));
}

/* out[i] = a[i] + (b[i] + bias[i % OC]) (bias_fwd's sum, then residual's; a[i] + b[i] where bias
 * is NULL), rounded to bf16 into keep and widened back where keep is non-NULL; and with pre
 * non-NULL the GELU's form instead: pre[i] += bias (none where bias is NULL), out[i] =
 * gelu(pre[i]). 4 elements a thread where rows and buffers
 * are aligned (vec), else one. out may alias a or b: each thread reads its elements before
 * writing them. */
static __global__ void bias_act_kernel(float *out, zs_bf16 *keep, const float *a, const float *b,
                                       float *pre, const float *bias, size_t total, int OC,
                                       int vec) {
    if (vec) {
        unsigned oc4 = (unsigned)OC / 4;
        ZS_CU_FOR(i, total / 4) {
            if (pre) {
                float4 x = ((float4 *)pre)[i];
                if (bias) {
                    float4 c = ((const float4 *)bias)[i % oc4];
                    x = make_float4(x.x + c.x, x.y + c.y, x.z + c.z, x.w + c.w);
                    ((float4 *)pre)[i] = x;
                }
                zs_cu_put4(out, i,
                           make_float4(zs_gelu(x.x), zs_gelu(x.y), zs_gelu(x.z), zs_gelu(x.w)));
            } else {
                float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
                if (bias) {
                    float4 c = ((const float4 *)bias)[i % oc4];
                    y = make_float4(y.x + c.x, y.y + c.y, y.z + c.z, y.w + c.w);
                }
                float4 v = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
                zs_cu_put4(out, i, keep ? keep4(keep, i, v) : v);
            }
        }
        return;
    }
    ZS_CU_FOR(i, total) {
        if (pre) {
            float x = pre[i];
            if (bias) {
                x += bias[i % (size_t)OC];
                pre[i] = x;
            }
            zs_cu_put(&out[i], zs_gelu(x));
        } else {
            float v = a[i] + (bias ? b[i] + bias[i % (size_t)OC] : b[i]);
            if (keep) {
                zs_bf16 k = zs_f32_to_bf16(v);
                keep[i] = k;
                v = zs_bf16_to_f32(k);
            }
            zs_cu_put(&out[i], v);
        }
    }
}

/* ops.h bias_residual_fwd (pre NULL; keep: the sum also rounded, with or without a bias) and
 * bias_gelu_fwd (a, b, keep NULL) with a bias; without a bias or keep, residual_fwd's and
 * gelu_fwd's own kernels. */
static zs_status bias_act(zs_stream_t *s, float *out, zs_bf16 *keep, const float *a, const float *b,
                          float *pre, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t total = (size_t)N * OC;
    int vec;
    const char *what = pre ? "bias_gelu_fwd" : "bias_residual_fwd";
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "%s: negative shape N=%d OC=%d", what, N, OC);
    if (total == 0) return ZS_OK;
    if (!bias && !keep) /* without a bias, their own kernels */
        return pre ? zs_cu_gelu_fwd(s, out, pre, total) : cu_residual_fwd(s, out, a, b, total);
    ZS_REQUIRE(out && (pre ? !keep : a && b), ZS_ERR_INVALID, "%s: NULL buffer", what);
    /* two adds an element and the bias read (one add without it); GELU: one add and zs_gelu's
     * 10, pre read and written (read only without a bias) and out written; keep written */
    ZS_COST(pre ? 11.0 * total : (bias ? 2.0 : 1.0) * total, 0,
            (8.0 + (pre && !bias ? 0.0 : 4.0) + (keep ? 2.0 : 0.0)) * total +
                (bias ? 4.0 * OC : 0.0));
    vec = OC % 4 == 0 && (uintptr_t)out % 16 == 0 && (!bias || (uintptr_t)bias % 16 == 0) &&
          (!keep || (uintptr_t)keep % 8 == 0) &&
          (pre ? (uintptr_t)pre % 16 == 0 : (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0);
    ZS_LAUNCH(bias_act_kernel, zs_cu_blocks(vec ? total / 4 : total), ZS_CU_THREADS, 0, cs, out,
              keep, a, b, pre, bias, total, OC, vec);
    ZS_CUDA_CHECK_LAUNCH(bias_act_kernel);
fail:
    return st;
}

/* ops.h bias_residual_fwd. */
zs_status zs_cu_bias_residual_fwd(zs_stream_t *s, float *out, zs_bf16 *keep, const float *a,
                                  const float *b, const float *bias, int N, int OC) {
    return bias_act(s, out, keep, a, b, (float *)NULL, bias, N, OC);
}

/* ops.h bias_gelu_fwd. */
static zs_status cu_bias_gelu_fwd(zs_stream_t *s, float *pre, float *out, const float *bias, int N,
                                  int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(pre || (size_t)N * OC == 0, ZS_ERR_INVALID, "bias_gelu_fwd: NULL buffer");
    return bias_act(s, out, (zs_bf16 *)NULL, NULL, NULL, pre, bias, N, OC);
fail:
    return st;
}

/* ops.h bias_gelu_fwd16: x = pre + bias (bias NULL: none) in fp32, pre16 = bf16(x) and out =
 * bf16(gelu(x)), as cuBLASLt's GELU epilogue takes it. 4 elements a thread where rows and buffers
 * are aligned (vec), else one. */
static __global__ void bias_gelu16_kernel(zs_bf16 *out, zs_bf16 *pre16, const float *pre,
                                          const float *bias, size_t total, int OC, int vec) {
    if (vec) {
        unsigned oc4 = (unsigned)OC / 4;
        ZS_CU_FOR(i, total / 4) {
            float4 x = ((const float4 *)pre)[i];
            if (bias) {
                float4 c = ((const float4 *)bias)[i % oc4];
                x = make_float4(x.x + c.x, x.y + c.y, x.z + c.z, x.w + c.w);
            }
            keep4(pre16, i, x);
            zs_cu_put4(out, i, make_float4(zs_gelu(x.x), zs_gelu(x.y), zs_gelu(x.z), zs_gelu(x.w)));
        }
        return;
    }
    ZS_CU_FOR(i, total) {
        float x = bias ? pre[i] + bias[i % (size_t)OC] : pre[i];
        pre16[i] = zs_f32_to_bf16(x);
        out[i] = zs_f32_to_bf16(zs_gelu(x));
    }
}

zs_status zs_cu_bias_gelu_fwd16(zs_stream_t *s, zs_bf16 *pre16, const float *pre, zs_bf16 *out,
                                const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t total = (size_t)N * OC;
    int vec;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_gelu_fwd16: negative shape N=%d OC=%d", N,
               OC);
    if (total == 0) return ZS_OK;
    ZS_REQUIRE(out && pre16 && pre, ZS_ERR_INVALID, "bias_gelu_fwd16: NULL buffer");
    /* zs_gelu's 10 and the bias's add an element; pre read (fp32), pre16 and out written */
    ZS_COST((bias ? 11.0 : 10.0) * total, 0, 8.0 * total + (bias ? 4.0 * OC : 0.0));
    vec = OC % 4 == 0 && (uintptr_t)out % 8 == 0 && (uintptr_t)pre16 % 8 == 0 &&
          (!bias || (uintptr_t)bias % 16 == 0) && (uintptr_t)pre % 16 == 0;
    ZS_LAUNCH(bias_gelu16_kernel, zs_cu_blocks(vec ? total / 4 : total), ZS_CU_THREADS, 0, cs, out,
              pre16, pre, bias, total, OC, vec);
    ZS_CUDA_CHECK_LAUNCH(bias_gelu16_kernel);
fail:
    return st;
}

zs_status zs_cu_bias_fwd(zs_stream_t *s, float *out, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t total = (size_t)N * OC;
    int vec;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_fwd: negative shape N=%d OC=%d", N, OC);
    if (total == 0) return ZS_OK;
    ZS_REQUIRE(out && bias, ZS_ERR_INVALID, "bias_fwd: NULL buffer");
    ZS_COST(total, 0, 4.0 * (2.0 * total + OC)); /* out read and written */
    vec = OC % 4 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)bias % 16 == 0;
    ZS_LAUNCH(bias_fwd_kernel, zs_cu_blocks(vec ? total / 4 : total), ZS_CU_THREADS, 0, cs, out,
              bias, total, OC, vec);
    ZS_CUDA_CHECK_LAUNCH(bias_fwd_kernel);
fail:
    return st;
}

/* bias_bwd_kernel's launch, wide where the columns are many. */
template <typename GeluT, typename DoutT>
static zs_status bias_bwd(cudaStream_t cs, float *dbias, const DoutT *dout, int N, int OC,
                          zs_bf16 *cast, const GeluT *gelu_inp) {
    zs_status st = ZS_OK;
    int cols = OC >= BIAS_BWD_WIDE_MIN ? BIAS_BWD_WIDE : ZS_CU_COLS;
    ZS_LAUNCH((bias_bwd_kernel<GeluT, DoutT>), (unsigned)((OC + cols - 1) / cols),
              (unsigned)cols * ZS_COLSUM_GROUPS, 0, cs, dbias, dout, N, OC, cast, gelu_inp);
    ZS_CUDA_CHECK_LAUNCH(bias_bwd_kernel);
fail:
    return st;
}

/* bias_bwd (dbias may be NULL when cast is not) of dout, bf16 where dout16, and with cast
 * non-NULL the gradient rounded to bf16 into cast[N * OC] in the same pass; with gelu_inp the
 * gradient is gelu_bwd's of dout (gelu_bwd16's where gelu16). */
zs_status zs_cu_bias_bwd_cast(zs_stream_t *s, float *dbias, const void *dout, int dout16, int N,
                              int OC, zs_bf16 *cast, const void *gelu_inp, int gelu16) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    double n = (double)N * OC;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_bwd: negative shape N=%d OC=%d", N, OC);
    if (OC == 0) return ZS_OK;
    ZS_REQUIRE((dbias || cast) && (dout || N == 0), ZS_ERR_INVALID, "bias_bwd: NULL buffer");
    /* N adds into each column's partials, the partials' total, one into dbias (read and
     * written); zs_gelu_grad's 21 and 2 an element, gelu_inp read; the bf16 copy written */
    ZS_COST((dbias ? (double)(N + ZS_COLSUM_GROUPS + 1) * OC : 0.0) + (gelu_inp ? 23.0 * n : 0.0),
            0,
            (dbias ? 8.0 * OC : 0.0) + n * ((dout16 ? 2.0 : 4.0) + (cast ? 2.0 : 0.0) +
                                            (gelu_inp ? (gelu16 ? 2.0 : 4.0) : 0.0)));
    if (dout16 && gelu16)
        return bias_bwd(cs, dbias, (const zs_bf16 *)dout, N, OC, cast, (const zs_bf16 *)gelu_inp);
    if (dout16)
        return bias_bwd(cs, dbias, (const zs_bf16 *)dout, N, OC, cast, (const float *)gelu_inp);
    if (gelu16)
        return bias_bwd(cs, dbias, (const float *)dout, N, OC, cast, (const zs_bf16 *)gelu_inp);
    return bias_bwd(cs, dbias, (const float *)dout, N, OC, cast, (const float *)gelu_inp);
fail:
    return st;
}

static zs_status cu_bias_bwd(zs_stream_t *s, float *dbias, const float *dout, int N, int OC) {
    return zs_cu_bias_bwd_cast(s, dbias, dout, 0, N, OC, NULL, NULL, 0);
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

zs_status zs_cu_add(zs_stream_t *s, float *out, const float *a, const float *b, size_t n) {
    return cu_residual_fwd(s, out, a, b, n);
}

static zs_status cu_residual_fwd(zs_stream_t *s, float *out, const float *a, const float *b,
                                 size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && a && b, ZS_ERR_INVALID, "residual_fwd: NULL buffer");
    ZS_COST(n, 0, 12.0 * n);
    ZS_LAUNCH(residual_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, a, b, n);
    ZS_CUDA_CHECK_LAUNCH(residual_kernel);
fail:
    return st;
}

static zs_status cu_axpy(zs_stream_t *s, float *y, float alpha, const float *x, size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(y && x, ZS_ERR_INVALID, "axpy: NULL buffer");
    ZS_COST(2.0 * n, 0, 12.0 * n); /* y read and written */
    ZS_LAUNCH(axpy_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, y, alpha, x, n);
    ZS_CUDA_CHECK_LAUNCH(axpy_kernel);
fail:
    return st;
}

static zs_status cu_scale(zs_stream_t *s, float *x, float a, size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "scale: NULL buffer");
    ZS_COST(n, 0, 8.0 * n);
    ZS_LAUNCH(scale_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, a, n);
    ZS_CUDA_CHECK_LAUNCH(scale_kernel);
fail:
    return st;
}

static zs_status cu_fill(zs_stream_t *s, float *x, float value, size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "fill: NULL buffer");
    ZS_COST(0, 0, 4.0 * n);
    ZS_LAUNCH(fill_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, value, n);
    ZS_CUDA_CHECK_LAUNCH(fill_kernel);
fail:
    return st;
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

static zs_status cu_init_normal(zs_stream_t *s, float *x, size_t n, uint64_t seed,
                                uint64_t stream_id, uint64_t index0, float std) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "init_normal: NULL buffer");
    /* Box-Muller: two uniforms (2 each), logf, sqrtf, cosf and 4 more, times std: 11 */
    ZS_COST(11.0 * n, 0, 4.0 * n);
    ZS_LAUNCH(init_normal_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, x, n, seed, stream_id,
              index0, std);
    ZS_CUDA_CHECK_LAUNCH(init_normal_kernel);
fail:
    return st;
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
 * gemm's arithmetic and, for bf16, in flash attention on tensor cores. */
static const zs_ops *cuda_with_math(zs_gemm_math math);

#define CUDA_TABLE(math, gemm_fn, gemm16_fn, linear_bias_fn, linear_bwd_fn, linear_dgelu_fn,       \
                   linear_bwd16_fn, xent16_fn, flash_fwd, flash_bwd, flash_fwd16, flash_bwd16,     \
                   flash_bwd16g, qkv16_hs, flash_fwd16q, flash_bwd16q)                             \
    {                                                                                              \
        .name = "cuda", .gemm_math = math, .with_math = cuda_with_math, .gemm = gemm_fn,           \
        .gemm16 = gemm16_fn, .linear_fwd_bias = linear_bias_fn, .gemm_linear_bwd = linear_bwd_fn,  \
        .gemm_linear_bwd_dgelu = linear_dgelu_fn, .gemm_linear_bwd16 = linear_bwd16_fn,            \
        .twin16 = zs_cu_twin16, .bias_fwd = zs_cu_bias_fwd, .bias_bwd = cu_bias_bwd,               \
        .bias_residual_fwd = zs_cu_bias_residual_fwd, .bias_gelu_fwd = cu_bias_gelu_fwd,           \
        .bias_gelu_fwd16 = zs_cu_bias_gelu_fwd16, .embedding_fwd = zs_cu_embedding_fwd,            \
        .embedding_bwd = zs_cu_embedding_bwd, .layernorm_fwd = zs_cu_layernorm_fwd,                \
        .layernorm_fwd16 = zs_cu_layernorm_fwd16, .layernorm_bwd = zs_cu_layernorm_bwd,            \
        .layernorm_bwd16 = zs_cu_layernorm_bwd16, .gelu_fwd = zs_cu_gelu_fwd,                      \
        .gelu_bwd = zs_cu_gelu_bwd, .gelu_bwd16 = zs_cu_gelu_bwd16,                                \
        .attention_fwd = zs_cu_attention_fwd, .attention_bwd = zs_cu_attention_bwd,                \
        .residual_fwd = cu_residual_fwd, .axpy = cu_axpy, .softmax_xent = zs_cu_softmax_xent,      \
        .softmax_xent16 = xent16_fn, .adamw = zs_cu_adamw, .adamw_segs = zs_cu_adamw_segs,         \
        .adamw_segs16 = zs_cu_adamw_segs16, .cast = zs_cu_cast,                                    \
        .widen_ranges = zs_cu_widen_ranges, .round16 = zs_cu_round16, .scale = cu_scale,           \
        .sumsq = zs_cu_sumsq, .sum = zs_cu_sum, .sumsq16 = zs_cu_sumsq16, .fill = cu_fill,         \
        .copy = cu_copy, .init_normal = cu_init_normal, .sync = cu_sync,                           \
        .rmsnorm_fwd = zs_cu_rmsnorm_fwd, .rmsnorm_fwd16 = zs_cu_rmsnorm_fwd16,                    \
        .rmsnorm_bwd = zs_cu_rmsnorm_bwd, .rmsnorm_bwd16 = zs_cu_rmsnorm_bwd16,                    \
        .rope_fwd = zs_cu_rope_fwd, .rope_bwd = zs_cu_rope_bwd, .rope_bwd16 = zs_cu_rope_bwd16,    \
        .swiglu_fwd = zs_cu_swiglu_fwd, .swiglu_fwd16 = zs_cu_swiglu_fwd16,                        \
        .swiglu_bwd = zs_cu_swiglu_bwd, .swiglu_bwd16 = zs_cu_swiglu_bwd16,                        \
        .attention_gqa_fwd = zs_cu_attention_gqa_fwd,                                              \
        .attention_gqa_bwd = zs_cu_attention_gqa_bwd, .flash_attention_fwd = flash_fwd,            \
        .flash_attention_bwd = flash_bwd, .flash_attention_fwd16 = flash_fwd16,                    \
        .flash_attention_bwd16 = flash_bwd16, .flash_attention_bwd16g = flash_bwd16g,              \
        .flash_qkv16_hs = qkv16_hs, .flash_attention_fwd16q = flash_fwd16q,                        \
        .flash_attention_bwd16q = flash_bwd16q, .decode_attention = zs_cu_decode_attention,        \
        .sample = zs_cu_sample,                                                                    \
    }

static const zs_ops cuda_ops[3] = {
    CUDA_TABLE(ZS_MATH_FP32, zs_cu_gemm, NULL, NULL, NULL, NULL, NULL, NULL,
               zs_cu_flash_attention_fwd, zs_cu_flash_attention_bwd, zs_cu_flash_attention_fwd16,
               zs_cu_flash_attention_bwd16, NULL, NULL, NULL, NULL),
    CUDA_TABLE(ZS_MATH_TF32, zs_cu_gemm_tf32, NULL, NULL, NULL, NULL, NULL, NULL,
               zs_cu_flash_attention_fwd, zs_cu_flash_attention_bwd, zs_cu_flash_attention_fwd16,
               zs_cu_flash_attention_bwd16, NULL, NULL, NULL, NULL),
    CUDA_TABLE(ZS_MATH_BF16, zs_cu_gemm_bf16, zs_cu_gemm16, zs_cu_linear_fwd_bias,
               zs_cu_gemm_linear_bwd_bf16, zs_cu_gemm_linear_bwd_dgelu, zs_cu_gemm_linear_bwd16,
               zs_cu_softmax_xent16, zs_cu_flash_tc_fwd, zs_cu_flash_tc_bwd, zs_cu_flash_tc_fwd16,
               zs_cu_flash_tc_bwd16, zs_cu_flash_tc_bwd16g, zs_cu_flash_tc_eligible,
               zs_cu_flash_tc_fwd16q, zs_cu_flash_tc_bwd16q)};

static const zs_ops *cuda_with_math(zs_gemm_math math) {
    return &cuda_ops[math == ZS_MATH_TF32 ? 1 : math == ZS_MATH_BF16 ? 2 : 0];
}

extern "C" const zs_ops *zs_ops_cuda(void) {
    return cuda_with_math(ZS_MATH_FP32);
}

/* CUDA optimizer and reduction ops: AdamW (one tensor, fused over segments, with bf16
 * gradients) over kernels/adamw.h's per-element update, and the sums of squares (gradient norm)
 * and sums (loss) over fixed chunks added in the CPU twin's order (kernels/sumsq.h), so the bits
 * match the CPU's. Every op is asynchronous on its stream.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0. */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/adamw.h"
#include "backend/kernels/common.h"
#include "backend/kernels/sumsq.h"
#include "core/bf16.h"

/* ---- AdamW -------------------------------------------------------------------------- */

static __global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float grad_scale, float bc1, float bc2) {
    ZS_CU_FOR(i, n) {
        zs_adamw_elem(&param[i], &m[i], &v[i], grad[i], lr, beta1, beta2, eps, wd, grad_scale, bc1,
                      bc2);
    }
}

zs_status zs_cu_adamw(zs_stream_t *s, float *param, const float *grad, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                      int t) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    float bc1, bc2;
    ZS_REQUIRE(t >= 1, ZS_ERR_INVALID, "adamw: step t must be >= 1 (got %d)", t);
    /* The bias corrections come from the host's pow, as on the CPU backend: the device's
     * double pow may differ in the last bit, and this keeps the update bitwise equal. */
    bc1 = zs_adamw_bias_correction(beta1, t);
    bc2 = zs_adamw_bias_correction(beta2, t);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(param && grad && m && v, ZS_ERR_INVALID, "adamw: NULL buffer");
    /* zs_adamw_elem: 19 FLOPs; grad read, param, m and v read and written */
    ZS_COST(19.0 * n, 0, 28.0 * n);
    ZS_LAUNCH(adamw_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, param, grad, m, v, n, lr, beta1,
              beta2, eps, wd, grad_scale, bc1, bc2);
    ZS_CUDA_CHECK_LAUNCH(adamw_kernel);
fail:
    return st;
}

/* The segment holding element i (at most ZS_ADAMW_SEGS, a short scan), or -1 in padding. */
static __device__ __forceinline__ int adamw_seg_of(const zs_adamw_segs &segs, size_t i) {
    int k = 0;
    while (k < segs.n && (int64_t)i >= segs.hi[k])
        k++;
    return k == segs.n || (int64_t)i < segs.lo[k] ? -1 : k;
}

/* A unit's tensors in one launch: a thread per element of the covered span finds its segment
 * and updates it, or leaves padding alone. */
static __global__ void adamw_segs_kernel(float *param, const float *grad, float *m, float *v,
                                         zs_adamw_segs segs, float lr, float beta1, float beta2,
                                         float eps, float wd, float grad_scale, float bc1,
                                         float bc2) {
    ZS_CU_FOR(i, segs.n ? (size_t)segs.hi[segs.n - 1] : 0) {
        int k = adamw_seg_of(segs, i);
        if (k >= 0)
            zs_adamw_elem(&param[i], &m[i], &v[i], grad[i], lr, beta1, beta2, eps,
                          segs.decay[k] ? wd : 0.0f, grad_scale, bc1, bc2);
    }
}

/* Elements the segments cover, for ZS_COST (compiled away in a real build: [[maybe_unused]]). */
[[maybe_unused]] static inline double adamw_segs_covered(const zs_adamw_segs *segs) {
    double n = 0;
    for (int k = 0; k < segs->n; k++)
        n += (double)(segs->hi[k] - segs->lo[k]);
    return n;
}

zs_status zs_cu_adamw_segs(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                           const zs_adamw_segs *segs, float lr, float beta1, float beta2, float eps,
                           float wd, float grad_scale, int t) {
    zs_status st = ZS_OK;
    size_t n = 0;
    ZS_CHECK(zs_adamw_segs_check(segs, t));
    n = segs->n ? (size_t)segs->hi[segs->n - 1] : 0;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(param && grad && m && v, ZS_ERR_INVALID, "adamw_segs: NULL buffer");
    /* Bias corrections from the host's pow, as adamw. Costs as adamw, over the elements the
     * segments cover (the padding between them is not touched). */
    ZS_COST(19.0 * adamw_segs_covered(segs), 0, 28.0 * adamw_segs_covered(segs));
    ZS_LAUNCH(adamw_segs_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, zs_cu_stream(s), param, grad, m,
              v, *segs, lr, beta1, beta2, eps, wd, grad_scale, zs_adamw_bias_correction(beta1, t),
              zs_adamw_bias_correction(beta2, t));
    ZS_CUDA_CHECK_LAUNCH(adamw_segs_kernel);
fail:
    return st;
}

/* adamw_segs with bf16 gradients widened as read (one launch per unit where the fp32 path of
 * old cast them chunk by chunk into a scratch first), and the updated parameter rounded into
 * round when it is not NULL (it may be grad: each thread reads its element before it writes). */
static __global__ void adamw_segs16_kernel(float *param, const zs_bf16 *grad, float *m, float *v,
                                           zs_bf16 *round, zs_adamw_segs segs, float lr,
                                           float beta1, float beta2, float eps, float wd,
                                           float grad_scale, float bc1, float bc2) {
    ZS_CU_FOR(i, segs.n ? (size_t)segs.hi[segs.n - 1] : 0) {
        int k = adamw_seg_of(segs, i);
        if (k < 0) continue;
        float p = param[i];
        zs_adamw_elem(&p, &m[i], &v[i], zs_bf16_to_f32(grad[i]), lr, beta1, beta2, eps,
                      segs.decay[k] ? wd : 0.0f, grad_scale, bc1, bc2);
        param[i] = p;
        if (round) round[i] = zs_f32_to_bf16(p);
    }
}

zs_status zs_cu_adamw_segs16(zs_stream_t *s, float *param, const zs_bf16 *grad, float *m, float *v,
                             zs_bf16 *round, const zs_adamw_segs *segs, float lr, float beta1,
                             float beta2, float eps, float wd, float grad_scale, int t) {
    zs_status st = ZS_OK;
    size_t n = 0;
    ZS_CHECK(zs_adamw_segs_check(segs, t));
    n = segs->n ? (size_t)segs->hi[segs->n - 1] : 0;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(param && grad && m && v, ZS_ERR_INVALID, "adamw_segs16: NULL buffer");
    /* as adamw_segs, the gradient read as 2 bytes; the rounding one more write of 2 (in place
     * over the gradient, its bytes are distinct all the same: read once, written once) */
    ZS_COST(19.0 * adamw_segs_covered(segs), 0, (round ? 28.0 : 26.0) * adamw_segs_covered(segs));
    ZS_LAUNCH(adamw_segs16_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, zs_cu_stream(s), param, grad,
              m, v, round, *segs, lr, beta1, beta2, eps, wd, grad_scale,
              zs_adamw_bias_correction(beta1, t), zs_adamw_bias_correction(beta2, t));
    ZS_CUDA_CHECK_LAUNCH(adamw_segs16_kernel);
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

static zs_status chunked(zs_stream_t *s, const char *op, double *out, const float *x, size_t n,
                         int square) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t nchunk = (n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
    double *part = NULL;
    ZS_REQUIRE(out != NULL, ZS_ERR_INVALID, "%s: NULL output", op);
    if (n == 0) {
        ZS_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, zs_cu_stream(s)));
        return ZS_OK;
    }
    ZS_CHECK(zs_cu_scratch(s, nchunk, &part));
    ZS_REQUIRE(part && x && nchunk >= 1, ZS_ERR_INVALID, "sumsq: bad launch arguments");
    /* per element a double add (and a multiply when squaring), 7 adds joining a chunk's lanes */
    ZS_COST((square ? 2.0 : 1.0) * n + 7.0 * nchunk, 0, 4.0 * n + 8.0 * nchunk);
    ZS_LAUNCH(chunk_sums_kernel, zs_cu_blocks(nchunk), ZS_CU_THREADS, 0, cs, part, x, n, nchunk,
              square);
    ZS_CUDA_CHECK_LAUNCH(chunk_sums_kernel);
    ZS_COST(nchunk, 0, 8.0 * nchunk + 8.0);
    ZS_LAUNCH(chunks_total_kernel, 1, 1, 0, cs, out, part, nchunk);
    ZS_CUDA_CHECK_LAUNCH(chunks_total_kernel);
fail:
    return st;
}

/* sumsq16: every ZS_SUMSQ_CHUNK piece of every group in one launch (piece j of group k is
 * part[k * per + j], per = group / ZS_SUMSQ_CHUNK), then each group's pieces added in order by
 * one thread a group: chunked's bits for each group (0 + a lone piece is the piece).
 *
 * zs_sumsq16_chunk's order puts element i of a piece into lane i % ZS_LANES, in index order,
 * then joins the 8 lanes as ((0+1)+(2+3))+((4+5)+(6+7)). Here 8 threads share a piece, thread
 * l holding lane l: it walks elements l, l+8, ... in order, SQ_UNROLL loads in flight before
 * their adds, and three butterfly shuffles join the lanes in that tree (a + b is b + a in
 * IEEE, so every lane ends with the same bits). One thread a piece, each walking its 4096
 * elements with one load in flight, was latency-bound: 2.37 ms a gpt2-124m step on an H200,
 * where the 248 MB it reads take 0.05 ms (docs/cuda.md "On a real GPU"). */
#define SQ_THREADS 256
#define SQ_UNROLL 8
static __global__ void chunk_sums16_kernel(double *part, const zs_bf16 *x, size_t n, size_t group,
                                           size_t ngroups) {
    size_t per = group / ZS_SUMSQ_CHUNK, npieces = ngroups * per;
    size_t step = (size_t)gridDim.x * blockDim.x / ZS_LANES;
    size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / ZS_LANES;
    unsigned l = threadIdx.x % ZS_LANES;
    /* The loop runs while any piece of the warp's four is left, so that the whole warp
     * shuffles together; a thread past the last piece walks an empty one. */
    for (size_t w0 = first - threadIdx.x % 32u / ZS_LANES; w0 < npieces; w0 += step) {
        size_t c = w0 + threadIdx.x % 32u / ZS_LANES;
        size_t k = c / per, g0 = k * group, start = g0 + (c % per) * ZS_SUMSQ_CHUNK;
        size_t end = c < npieces && g0 + group < n ? g0 + group : n;
        if (c >= npieces || start > end) start = end; /* no piece here */
        size_t len = end - start < ZS_SUMSQ_CHUNK ? end - start : ZS_SUMSQ_CHUNK, i = l;
        const uint16_t *p = (const uint16_t *)(x + start);
        double acc = 0.0;
        for (; i + (SQ_UNROLL - 1) * ZS_LANES < len; i += SQ_UNROLL * ZS_LANES) {
            uint16_t h[SQ_UNROLL];
            ZS_UNROLL
            for (int u = 0; u < SQ_UNROLL; u++)
                h[u] = p[i + (size_t)u * ZS_LANES];
            ZS_UNROLL
            for (int u = 0; u < SQ_UNROLL; u++) {
                zs_bf16 v;
                v.bits = h[u];
                double d = (double)zs_bf16_to_f32(v);
                acc += d * d;
            }
        }
        for (; i < len; i += ZS_LANES) { /* the tail */
            zs_bf16 v;
            v.bits = p[i];
            double d = (double)zs_bf16_to_f32(v);
            acc += d * d;
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1, ZS_LANES);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2, ZS_LANES);
        acc += __shfl_xor_sync(0xffffffffu, acc, 4, ZS_LANES);
        if (l == 0 && start < end) part[c] = acc;
    }
}

static __global__ void group_totals_kernel(double *out, const double *part, size_t n, size_t group,
                                           size_t ngroups) {
    size_t per = group / ZS_SUMSQ_CHUNK;
    ZS_CU_FOR(k, ngroups) {
        size_t len = n - k * group < group ? n - k * group : group;
        size_t np = (len + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
        double t = 0.0;
        for (size_t j = 0; j < np; j++)
            t += part[k * per + j];
        out[k] = t;
    }
}

zs_status zs_cu_sumsq16(zs_stream_t *s, double *out, const zs_bf16 *x, size_t n, size_t group) {
    zs_status st = ZS_OK;
    size_t ngroups, per, blocks;
    double *part = NULL;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_REQUIRE(out && group > 0 && group % ZS_SUMSQ_CHUNK == 0, ZS_ERR_INVALID,
               "sumsq16: group %zu is not a positive multiple of %d", group, ZS_SUMSQ_CHUNK);
    if (n == 0) {
        ZS_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, cs));
        return ZS_OK;
    }
    ZS_REQUIRE(x != NULL, ZS_ERR_INVALID, "sumsq16: NULL input");
    ngroups = (n + group - 1) / group;
    per = group / ZS_SUMSQ_CHUNK;
    ZS_CHECK(zs_cu_scratch(s, ngroups * per, &part));
    /* per element a widening, a multiply and a double add; 7 adds joining a piece's lanes */
    ZS_COST(2.0 * n + 7.0 * ((n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK), 0,
            2.0 * n + 8.0 * ((n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK));
    blocks = (ngroups * per * ZS_LANES + SQ_THREADS - 1) / SQ_THREADS;
    ZS_LAUNCH(chunk_sums16_kernel,
              (unsigned)(blocks < ZS_CU_MAX_BLOCKS ? blocks : ZS_CU_MAX_BLOCKS), SQ_THREADS, 0, cs,
              part, x, n, group, ngroups);
    ZS_CUDA_CHECK_LAUNCH(chunk_sums16_kernel);
    ZS_COST((double)((n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK), 0,
            8.0 * ((n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK) + 8.0 * ngroups);
    ZS_LAUNCH(group_totals_kernel, zs_cu_blocks(ngroups), ZS_CU_THREADS, 0, cs, out, part, n, group,
              ngroups);
    ZS_CUDA_CHECK_LAUNCH(group_totals_kernel);
fail:
    return st;
}

zs_status zs_cu_sumsq(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked(s, "sumsq", out, x, n, 1);
}

zs_status zs_cu_sum(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked(s, "sum", out, x, n, 0);
}

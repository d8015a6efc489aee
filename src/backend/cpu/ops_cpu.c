/* The CPU backend's ops tables: gemm through OpenBLAS (gemm_cpu.c, one table per arithmetic), bias,
 * elementwise and optimizer ops, casts and Philox init as OpenMP loops over the shared per-element
 * math in backend/kernels. Network ops live in nn_cpu.c and attention_cpu.c. Every op is
 * synchronous; the stream argument is ignored (NULL on the CPU). */
#include "backend/cpu/cpu.h"
#include "backend/kernels/adamw.h"
#include "backend/kernels/common.h"
#include "backend/kernels/sumsq.h"
#include "core/bf16.h"
#include "core/philox.h"
#include "core/status.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* Columns per task in the column-parallel reductions: each task owns its columns outright and
 * sums rows in index order, so no atomics and no dependence on scheduling. */
#define ZS_COL_BLOCK 256

static zs_status cpu_bias_fwd(zs_stream_t *s, float *out, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_fwd: negative shape N=%d OC=%d", N, OC);
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++)
        zs_axpy_row(out + (size_t)r * OC, 1.0f, bias, OC);
fail:
    return st;
}

/* bias_fwd then residual_fwd, a row at a time: a + (b + bias), the same two roundings; with
 * keep, the sum rounded to bf16 into keep and back into out (a cast each way). */
static zs_status cpu_bias_residual_fwd(zs_stream_t *s, float *out, zs_bf16 *keep, const float *a,
                                       const float *b, const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    (void)s;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_residual_fwd: negative shape N=%d OC=%d", N,
               OC);
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        float *o = out + (size_t)r * OC;
        const float *x = a + (size_t)r * OC, *y = b + (size_t)r * OC;
        for (int c = 0; c < OC; c++)
            o[c] = x[c] + (bias ? y[c] + bias[c] : y[c]);
        if (!keep) continue;
        zs_bf16 *k = keep + (size_t)r * OC;
        for (int c = 0; c < OC; c++) {
            k[c] = zs_f32_to_bf16(o[c]);
            o[c] = zs_bf16_to_f32(k[c]);
        }
    }
fail:
    return st;
}

static zs_status cpu_bias_bwd(zs_stream_t *s, float *dbias, const float *dout, int N, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_bwd: negative shape N=%d OC=%d", N, OC);
    int nblk = (OC + ZS_COL_BLOCK - 1) / ZS_COL_BLOCK;
    /* in kernels/common.h's column-sum order (rotating partials), as the GPU adds */
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= ZS_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * ZS_COL_BLOCK;
        int nc = OC - c0 < ZS_COL_BLOCK ? OC - c0 : ZS_COL_BLOCK;
        float acc[ZS_COLSUM_GROUPS][ZS_COL_BLOCK] = {{0}};
        for (int r = 0; r < N; r++)
            zs_axpy_row(acc[zs_colsum_group(r)], 1.0f, dout + (size_t)r * OC + c0, nc);
        zs_colsum_finish(dbias + c0, &acc[0][0], ZS_COL_BLOCK, nc);
    }
fail:
    return st;
}

static zs_status cpu_residual_fwd(zs_stream_t *s, float *out, const float *a, const float *b,
                                  size_t n) {
    /* out may alias a or b: each element is read before it is written, index by index. */
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
    return ZS_OK;
}

static zs_status cpu_axpy(zs_stream_t *s, float *y, float alpha, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
    return ZS_OK;
}

static zs_status cpu_adamw(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                           size_t n, float lr, float beta1, float beta2, float eps, float wd,
                           float grad_scale, int t) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(t >= 1, ZS_ERR_INVALID, "adamw: step t must be >= 1 (got %d)", t);
    zs_cpu_adamw_hp h = {lr, beta1, beta2, eps, wd, grad_scale, zs_adamw_bias_correction(beta1, t),
                         zs_adamw_bias_correction(beta2, t)};
    zs_cpu_adamw_run(param, grad, NULL, m, v, NULL, 0, (int64_t)n, &h);
fail:
    return st;
}

/* adamw_segs over fp32 gradients (g32) or bf16 ones widened as read (g16; the other NULL). */
static zs_status adamw_segs_any(float *param, const float *g32, const zs_bf16 *g16, float *m,
                                float *v, zs_bf16 *round, const zs_adamw_segs *segs, float lr,
                                float beta1, float beta2, float eps, float wd, float grad_scale,
                                int t) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_adamw_segs_check(segs, t));
    zs_cpu_adamw_hp h = {lr, beta1, beta2, eps, wd, grad_scale, zs_adamw_bias_correction(beta1, t),
                         zs_adamw_bias_correction(beta2, t)};
    for (int k = 0; k < segs->n; k++) {
        h.wd = segs->decay[k] ? wd : 0.0f;
        zs_cpu_adamw_run(param, g32, g16, m, v, round, segs->lo[k], segs->hi[k], &h);
    }
fail:
    return st;
}

static zs_status cpu_adamw_segs(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                                const zs_adamw_segs *segs, float lr, float beta1, float beta2,
                                float eps, float wd, float grad_scale, int t) {
    return adamw_segs_any(param, grad, NULL, m, v, NULL, segs, lr, beta1, beta2, eps, wd,
                          grad_scale, t);
}

static zs_status cpu_adamw_segs16(zs_stream_t *s, float *param, const zs_bf16 *grad, float *m,
                                  float *v, zs_bf16 *round, const zs_adamw_segs *segs, float lr,
                                  float beta1, float beta2, float eps, float wd, float grad_scale,
                                  int t) {
    return adamw_segs_any(param, NULL, grad, m, v, round, segs, lr, beta1, beta2, eps, wd,
                          grad_scale, t);
}

static zs_status cpu_round16(zs_stream_t *s, float *x, size_t n) {
    zs_status st = ZS_OK;
    (void)s;
    ZS_REQUIRE(x || n == 0, ZS_ERR_INVALID, "round16: NULL buffer");
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] = zs_bf16_to_f32(zs_f32_to_bf16(x[i]));
fail:
    return st;
}

static zs_status cpu_cast(zs_stream_t *s, void *out, zs_dtype out_dt, const void *in,
                          zs_dtype in_dt, size_t n) {
    zs_status st = ZS_OK;
    if (out_dt == in_dt) {
        size_t es = zs_dtype_size(in_dt);
        ZS_REQUIRE(es > 0, ZS_ERR_INVALID, "cast: unknown dtype %d", (int)in_dt);
        if (n) memcpy(out, in, n * es);
    } else if (out_dt == ZS_DTYPE_BF16 && in_dt == ZS_DTYPE_F32) {
        zs_bf16 *o = (zs_bf16 *)out;
        const float *x = (const float *)in;
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            o[i] = zs_f32_to_bf16(x[i]);
    } else if (out_dt == ZS_DTYPE_F32 && in_dt == ZS_DTYPE_BF16) {
        float *o = (float *)out;
        const zs_bf16 *x = (const zs_bf16 *)in;
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            o[i] = zs_bf16_to_f32(x[i]);
    } else {
        ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported", zs_dtype_name(in_dt),
                   zs_dtype_name(out_dt));
    }
fail:
    return st;
}

static zs_status cpu_scale(zs_stream_t *s, float *x, float a, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
    return ZS_OK;
}

/* sumsq and sum: chunk sums (in parallel), then the chunks added in index order. */
static zs_status chunked(const char *op, double *out, const float *x, size_t n, int square) {
    zs_status st = ZS_OK;
    double *part = NULL;
    size_t nchunk = (n + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
    ZS_REQUIRE(out != NULL, ZS_ERR_INVALID, "%s: NULL output", op);
    if (nchunk <= 1) {
        *out = square ? zs_sumsq_chunk(x, n) : zs_sum_chunk(x, n);
        return ZS_OK;
    }
    part = malloc(nchunk * sizeof *part);
    ZS_REQUIRE(part != NULL, ZS_ERR_OOM, "%s: cannot allocate %zu partial sums", op, nchunk);
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t c = 0; c < nchunk; c++) {
        size_t i0 = c * ZS_SUMSQ_CHUNK, m = n - i0 < ZS_SUMSQ_CHUNK ? n - i0 : ZS_SUMSQ_CHUNK;
        part[c] = square ? zs_sumsq_chunk(x + i0, m) : zs_sum_chunk(x + i0, m);
    }
    double total = 0.0;
    for (size_t c = 0; c < nchunk; c++)
        total += part[c];
    *out = total;
fail:
    free(part);
    return st;
}

static zs_status cpu_sumsq(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked("sumsq", out, x, n, 1);
}

static zs_status cpu_sum(zs_stream_t *s, double *out, const float *x, size_t n) {
    return chunked("sum", out, x, n, 0);
}

/* Each group as `chunked` sums it: its ZS_SUMSQ_CHUNK pieces, then their sums in order (one
 * piece alone is its own sum). */
static zs_status cpu_sumsq16(zs_stream_t *s, double *out, const zs_bf16 *x, size_t n,
                             size_t group) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(out && group > 0 && group % ZS_SUMSQ_CHUNK == 0, ZS_ERR_INVALID,
               "sumsq16: group %zu is not a positive multiple of %d", group, ZS_SUMSQ_CHUNK);
    size_t ng = n ? (n + group - 1) / group : 1;
    if (n == 0) out[0] = 0.0;
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t k = 0; k < (n ? ng : 0); k++) {
        size_t g0 = k * group, len = n - g0 < group ? n - g0 : group;
        size_t np = (len + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK;
        double total = 0.0;
        for (size_t c = 0; c < np; c++) {
            size_t i0 = c * ZS_SUMSQ_CHUNK,
                   m = len - i0 < ZS_SUMSQ_CHUNK ? len - i0 : ZS_SUMSQ_CHUNK;
            double part = zs_sumsq16_chunk(x + g0 + i0, m);
            total = np == 1 ? part : total + part;
        }
        out[k] = total;
    }
fail:
    return st;
}

static zs_status cpu_fill(zs_stream_t *s, float *x, float value, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return ZS_OK;
}

static zs_status cpu_copy(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    if (nbytes && dst != src) memmove(dst, src, nbytes);
    return ZS_OK;
}

static zs_status cpu_init_normal(zs_stream_t *s, float *x, size_t n, uint64_t seed,
                                 uint64_t stream_id, uint64_t index0, float std) {
#pragma omp parallel for schedule(static) if (n >= 4096)
    for (size_t i = 0; i < n; i++)
        x[i] = std * zs_philox_normal(seed, stream_id, index0 + i);
    return ZS_OK;
}

static zs_status cpu_sync(zs_stream_t *s) {
    return ZS_OK;
}

/* The three tables differ in their gemm's arithmetic only (gemm_cpu.c); the bf16 one also takes
 * bf16 operands (gemm16). */
static const zs_ops *cpu_with_math(zs_gemm_math math);

#define CPU_TABLE(math, gemm_fn, gemm16_fn)                                                        \
    {                                                                                              \
        .name = "cpu", .gemm_math = math, .with_math = cpu_with_math, .gemm = gemm_fn,             \
        .gemm16 = gemm16_fn, .bias_fwd = cpu_bias_fwd, .bias_bwd = cpu_bias_bwd,                   \
        .bias_residual_fwd = cpu_bias_residual_fwd, .bias_gelu_fwd = zs_cpu_bias_gelu_fwd,         \
        .bias_gelu_fwd16 = zs_cpu_bias_gelu_fwd16, .layernorm_fwd16 = zs_cpu_layernorm_fwd16,      \
        .rmsnorm_fwd16 = zs_cpu_rmsnorm_fwd16, .swiglu_fwd16 = zs_cpu_swiglu_fwd16,                \
        .embedding_fwd = zs_cpu_embedding_fwd, .embedding_bwd = zs_cpu_embedding_bwd,              \
        .layernorm_fwd = zs_cpu_layernorm_fwd, .layernorm_bwd = zs_cpu_layernorm_bwd,              \
        .gelu_fwd = zs_cpu_gelu_fwd, .gelu_bwd = zs_cpu_gelu_bwd, .gelu_bwd16 = zs_cpu_gelu_bwd16, \
        .attention_fwd = zs_cpu_attention_fwd, .attention_bwd = zs_cpu_attention_bwd,              \
        .residual_fwd = cpu_residual_fwd, .axpy = cpu_axpy, .softmax_xent = zs_cpu_softmax_xent,   \
        .adamw = cpu_adamw, .adamw_segs = cpu_adamw_segs, .adamw_segs16 = cpu_adamw_segs16,        \
        .cast = cpu_cast, .round16 = cpu_round16, .scale = cpu_scale, .sumsq = cpu_sumsq,          \
        .sum = cpu_sum, .sumsq16 = cpu_sumsq16, .fill = cpu_fill, .copy = cpu_copy,                \
        .init_normal = cpu_init_normal, .sync = cpu_sync, .rmsnorm_fwd = zs_cpu_rmsnorm_fwd,       \
        .rmsnorm_bwd = zs_cpu_rmsnorm_bwd, .rope_fwd = zs_cpu_rope_fwd,                            \
        .rope_bwd = zs_cpu_rope_bwd, .rope_bwd16 = zs_cpu_rope_bwd16,                              \
        .swiglu_fwd = zs_cpu_swiglu_fwd, .swiglu_bwd = zs_cpu_swiglu_bwd,                          \
        .swiglu_bwd16 = zs_cpu_swiglu_bwd16, .attention_gqa_fwd = zs_cpu_attention_gqa_fwd,        \
        .attention_gqa_bwd = zs_cpu_attention_gqa_bwd,                                             \
        .flash_attention_fwd = zs_cpu_flash_attention_fwd,                                         \
        .flash_attention_bwd = zs_cpu_flash_attention_bwd,                                         \
        .flash_attention_fwd16 = zs_cpu_flash_attention_fwd16,                                     \
        .flash_attention_bwd16 = zs_cpu_flash_attention_bwd16,                                     \
        .decode_attention = zs_cpu_decode_attention, .sample = zs_cpu_sample,                      \
    }

static const zs_ops cpu_ops[3] = {CPU_TABLE(ZS_MATH_FP32, zs_cpu_gemm_fp32, NULL),
                                  CPU_TABLE(ZS_MATH_TF32, zs_cpu_gemm_tf32, NULL),
                                  CPU_TABLE(ZS_MATH_BF16, zs_cpu_gemm_bf16, zs_cpu_gemm16)};

static const zs_ops *cpu_with_math(zs_gemm_math math) {
    return &cpu_ops[math == ZS_MATH_TF32 ? 1 : math == ZS_MATH_BF16 ? 2 : 0];
}

const zs_ops *zs_ops_cpu(void) {
    return cpu_with_math(ZS_MATH_FP32);
}

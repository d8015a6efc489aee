/* CUDA LLaMA ops: RMSNorm, RoPE and SwiGLU, over the same backend/kernels functions as the CPU
 * twins in cpu/llama_cpu.c. RMSNorm runs a warp per row with the butterfly the CPU twin follows
 * (kernels/common.h), so the bits match; its weight gradient gives each thread a column and
 * sums rows in index order, as the CPU does: no atomics.
 * ZS_COST: as nn_cuda.cu (1 FLOP per + - * / and sqrtf/expf/powf/cosf/sinf/rsqrt, else 0; a
 * warp's butterfly is ZS_CU_WARP_SUM_FLOPS). */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/rope.h"
#include "backend/kernels/swiglu.h"

/* Largest head size RoPE accepts, the CPU backend's limit (ops.h: hs at most 1024). */
#define ROPE_MAX_HALF 512

/* ---- RMSNorm ------------------------------------------------------------------------ */

/* A warp per row, as layer norm (kernels/rmsnorm.h's lanes), the row read from memory once. */
template <typename OutT>
static __global__ void rmsnorm_fwd_kernel(OutT *out, float *rstd, const float *inp, const float *w,
                                          int N, int C, float eps) {
    size_t r = zs_cu_warp_row((size_t)N);
    if (r == (size_t)N) return;
    int lane = (int)threadIdx.x % ZS_WARP;
    const float *x = inp + r * C;
    float v[ZS_CU_ROW_KEEP], q = 0.0f;
    zs_cu_row_load(v, x, C, lane);
    zs_cu_row_each(v, x, C, lane, [&](int, float xi) { q += xi * xi; });
    float rs = zs_rmsnorm_rstd(zs_cu_warp_sum(q), C, eps);
    zs_cu_row_each(v, x, C, lane,
                   [&](int i, float xi) { zs_cu_put(&out[r * C + i], xi * rs * w[i]); });
    if (lane == 0) rstd[r] = rs;
}

/* dout and the input each fp32 or bf16, widened as read (rmsnorm_bwd16). */
template <typename DoutT, typename InT>
static __global__ void rmsnorm_bwd_rows_kernel(float *dinp, const DoutT *dout, const InT *inp,
                                               const float *w, const float *rstd, int N, int C) {
    size_t r = zs_cu_warp_row((size_t)N);
    if (r == (size_t)N) return;
    int lane = (int)threadIdx.x % ZS_WARP;
    const InT *x = inp + r * C;
    const DoutT *d = dout + r * C;
    float rs = rstd[r], agx = 0.0f;
    for (int i = lane; i < C; i += ZS_WARP)
        agx += w[i] * zs_cu_widen(d[i]) * (zs_cu_widen(x[i]) * rs);
    float mgx = zs_cu_warp_sum(agx) / (float)C;
    for (int i = lane; i < C; i += ZS_WARP)
        dinp[r * C + i] +=
            zs_rmsnorm_dinp(w[i] * zs_cu_widen(d[i]), zs_cu_widen(x[i]) * rs, mgx, rs);
}

/* dw: column sums in kernels/common.h's order, as bias_bwd_kernel (ops_cuda.cu); a whole
 * batch's rstd read 16 bytes at a time where it is 16-byte aligned (vec), as
 * layer norm's column kernel once read its mean and rstd. */
template <typename DoutT, typename InT>
static __global__ void rmsnorm_bwd_cols_kernel(float *dw, const DoutT *dout, const InT *inp,
                                               const float *rstd, int N, int C, int vec) {
    ZS_SHARED(float, pw, ZS_COLSUM_GROUPS *(ZS_CU_COLS + 1));
    int tx = (int)threadIdx.x % ZS_CU_COLS, g = (int)threadIdx.x / ZS_CU_COLS;
    int c = (int)blockIdx.x * ZS_CU_COLS + tx;
    float aw = 0.0f;
    for (int s0 = g * ZS_COLSUM_SEG; s0 < N && c < C; s0 += ZS_COLSUM_GROUPS * ZS_COLSUM_SEG) {
        int end = s0 + ZS_COLSUM_SEG < N ? s0 + ZS_COLSUM_SEG : N;
        for (int r0 = s0; r0 < end; r0 += ZS_CU_COL_BATCH) { /* loads in flight, then in order */
            float d[ZS_CU_COL_BATCH], x[ZS_CU_COL_BATCH], rs[ZS_CU_COL_BATCH];
            int whole = vec && r0 + ZS_CU_COL_BATCH <= end;
            ZS_UNROLL
            for (int u = 0; u < ZS_CU_COL_BATCH; u++) {
                int r = r0 + u < end ? r0 + u : r0; /* past the segment: a row read, unused */
                d[u] = zs_cu_widen(dout[(size_t)r * C + c]);
                x[u] = zs_cu_widen(inp[(size_t)r * C + c]);
                if (whole && u % 4 == 0) {
                    float4 b = *(const float4 *)(rstd + r);
                    rs[u] = b.x, rs[u + 1] = b.y, rs[u + 2] = b.z, rs[u + 3] = b.w;
                } else if (!whole) {
                    rs[u] = rstd[r];
                }
            }
            ZS_UNROLL
            for (int u = 0; u < ZS_CU_COL_BATCH; u++)
                if (r0 + u < end) aw += d[u] * (x[u] * rs[u]);
        }
    }
    pw[g * (ZS_CU_COLS + 1) + tx] = aw;
    __syncthreads();
    if (g == 0 && c < C) zs_colsum_finish(dw + c, pw + tx, ZS_CU_COLS + 1, 1);
}

/* out fp32, or bf16 (rmsnorm_fwd16). */
template <typename OutT>
static zs_status rmsnorm_fwd(zs_stream_t *s, OutT *out, float *rstd, const float *inp,
                             const float *w, int N, int C, float eps) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_REQUIRE(N >= 0 && C >= 1 && eps >= 0.0f, ZS_ERR_INVALID,
               "rmsnorm_fwd: bad shape N=%d C=%d or eps %g", N, C, (double)eps);
    if (N == 0) return ZS_OK;
    ZS_REQUIRE(out && rstd && inp && w, ZS_ERR_INVALID, "rmsnorm_fwd: NULL buffer");
    /* per row: 4 per element, a butterfly and 4 scalar ops in each lane */
    ZS_COST((double)N * (4.0 * C + ZS_CU_WARP_SUM_FLOPS + 4.0 * ZS_WARP), 0,
            (4.0 + sizeof(OutT)) * N * C + 4.0 * (C + N));
    ZS_LAUNCH(rmsnorm_fwd_kernel<OutT>, zs_cu_row_blocks((size_t)N), ZS_CU_THREADS, 0, cs, out,
              rstd, inp, w, N, C, eps);
    ZS_CUDA_CHECK_LAUNCH(rmsnorm_fwd_kernel);
fail:
    return st;
}

zs_status zs_cu_rmsnorm_fwd(zs_stream_t *s, float *out, float *rstd, const float *inp,
                            const float *w, int N, int C, float eps) {
    return rmsnorm_fwd(s, out, rstd, inp, w, N, C, eps);
}

zs_status zs_cu_rmsnorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *rstd, const float *inp,
                              const float *w, int N, int C, float eps) {
    return rmsnorm_fwd(s, out, rstd, inp, w, N, C, eps);
}

/* rmsnorm_bwd with dout and inp each fp32 or bf16 (rmsnorm_bwd16). */
template <typename DoutT, typename InT>
static zs_status rmsnorm_bwd(zs_stream_t *s, float *dinp, float *dw, const DoutT *dout,
                             const InT *inp, const float *w, const float *rstd, int N, int C) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    const double io = (double)sizeof(DoutT) + sizeof(InT); /* an element of dout and inp */
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "rmsnorm_bwd: bad shape N=%d C=%d", N, C);
    if (N == 0) return ZS_OK;
    ZS_REQUIRE(dinp && dw && dout && inp && w && rstd, ZS_ERR_INVALID, "rmsnorm_bwd: NULL buffer");
    /* per row: 10 per element, a butterfly and its division; dinp read and written */
    ZS_COST((double)N * (10.0 * C + ZS_CU_WARP_SUM_FLOPS + ZS_WARP), 0,
            (io + 8.0) * N * C + 4.0 * (C + N));
    ZS_LAUNCH((rmsnorm_bwd_rows_kernel<DoutT, InT>), zs_cu_row_blocks((size_t)N), ZS_CU_THREADS, 0,
              cs, dinp, dout, inp, w, rstd, N, C);
    ZS_CUDA_CHECK_LAUNCH(rmsnorm_bwd_rows_kernel);
    /* per column: 3 per row, the partials' total, 1 into dw (read and written) */
    ZS_COST((double)C * (3.0 * N + ZS_COLSUM_GROUPS + 1.0), 0, io * N * C + 4.0 * (N + 2.0 * C));
    ZS_LAUNCH((rmsnorm_bwd_cols_kernel<DoutT, InT>), zs_cu_col_blocks((size_t)C), ZS_CU_COL_THREADS,
              0, cs, dw, dout, inp, rstd, N, C, ((uintptr_t)rstd & 15) == 0);
    ZS_CUDA_CHECK_LAUNCH(rmsnorm_bwd_cols_kernel);
fail:
    return st;
}

zs_status zs_cu_rmsnorm_bwd(zs_stream_t *s, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int N, int C) {
    return rmsnorm_bwd(s, dinp, dw, dout, inp, w, rstd, N, C);
}

zs_status zs_cu_rmsnorm_bwd16(zs_stream_t *s, float *dinp, float *dw, const void *dout, int dout16,
                              const void *inp, int inp16, const float *w, const float *rstd, int N,
                              int C) {
    const zs_bf16 *d16 = (const zs_bf16 *)dout, *x16 = (const zs_bf16 *)inp;
    const float *d32 = (const float *)dout, *x32 = (const float *)inp;
    if (dout16 && inp16) return rmsnorm_bwd(s, dinp, dw, d16, x16, w, rstd, N, C);
    if (dout16) return rmsnorm_bwd(s, dinp, dw, d16, x32, w, rstd, N, C);
    if (inp16) return rmsnorm_bwd(s, dinp, dw, d32, x16, w, rstd, N, C);
    return rmsnorm_bwd(s, dinp, dw, d32, x32, w, rstd, N, C);
}

/* ---- RoPE --------------------------------------------------------------------------- */

/* A thread per rotated pair (b, t, h, i): it computes its own cos/sin (the CPU shares one
 * table per position; the values are the same function of (t, i)) and rotates x[i] with
 * x[i + hs/2]. In place is safe: a pair is read whole before it is written. OutT bf16: the
 * rotated pair rounded (rope_bwd16). */
template <typename OutT>
static __global__ void rope_kernel(OutT *out, const float *inp, const int32_t *seg, int T, int NH,
                                   int hs, float theta, int inverse, size_t npairs) {
    ZS_CU_FOR(p, npairs) {
        int half = hs / 2;
        int i = (int)(p % (size_t)half);
        size_t rest = p / (size_t)half; /* (b*T + t)*NH + h */
        int h = (int)(rest % (size_t)NH);
        size_t bt = rest / (size_t)NH;
        int t = (int)(bt % (size_t)T) - zs_seg_lo(seg, bt); /* the position in its document */
        size_t off = bt * (size_t)NH * hs + (size_t)h * hs;
        float c, sn;
        zs_rope_cos_sin(&c, &sn, t, i, hs, theta);
        float sg = inverse ? -1.0f : 1.0f, o1, o2;
        zs_rope_pair(&o1, &o2, inp[off + i], inp[off + i + half], c, sg * sn);
        zs_cu_put(&out[off + i], o1);
        zs_cu_put(&out[off + i + half], o2);
    }
}

template <typename OutT>
static zs_status rope(zs_stream_t *s, const char *op, OutT *out, const float *inp, int B, int T,
                      int NH, int hs, float theta, int inverse, const int32_t *seg) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t npairs = (size_t)B * T * NH * (hs / 2);
    ZS_REQUIRE(B >= 0 && T >= 0 && NH >= 1 && hs >= 2 && hs % 2 == 0 && hs / 2 <= ROPE_MAX_HALF &&
                   theta > 0.0f,
               ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d NH=%d hs=%d (hs even, at most %d) or theta %g", op, B, T,
               NH, hs, 2 * ROPE_MAX_HALF, (double)theta);
    if (npairs == 0) return ZS_OK;
    ZS_REQUIRE(out && inp, ZS_ERR_INVALID, "%s: NULL buffer", op);
    /* per pair: the angle (powf, cosf, sinf and 3 more), the sign, the rotation (6); two
     * values read and two written */
    ZS_COST(13.0 * npairs, 0,
            (8.0 + 2.0 * sizeof(OutT)) * npairs + (seg ? 4.0 * (double)B * T : 0.0));
    ZS_LAUNCH(rope_kernel<OutT>, zs_cu_blocks(npairs), ZS_CU_THREADS, 0, cs, out, inp, seg, T, NH,
              hs, theta, inverse, npairs);
    ZS_CUDA_CHECK_LAUNCH(rope_kernel);
fail:
    return st;
}

zs_status zs_cu_rope_fwd(zs_stream_t *s, float *out, const float *inp, int B, int T, int NH, int hs,
                         float theta, const int32_t *seg) {
    return rope(s, "rope_fwd", out, inp, B, T, NH, hs, theta, 0, seg);
}

zs_status zs_cu_rope_bwd(zs_stream_t *s, float *dinp, const float *dout, int B, int T, int NH,
                         int hs, float theta, const int32_t *seg) {
    return rope(s, "rope_bwd", dinp, dout, B, T, NH, hs, theta, 1, seg);
}

zs_status zs_cu_rope_bwd16(zs_stream_t *s, zs_bf16 *dinp, const float *dout, int B, int T, int NH,
                           int hs, float theta, const int32_t *seg) {
    return rope(s, "rope_bwd16", dinp, dout, B, T, NH, hs, theta, 1, seg);
}

/* ---- SwiGLU ------------------------------------------------------------------------- */

/* out may alias gate or up: each thread reads its elements before writing. */
template <typename OutT>
static __global__ void swiglu_fwd_kernel(OutT *out, const float *gate, const float *up, size_t n) {
    ZS_CU_FOR(i, n) {
        zs_cu_put(&out[i], zs_silu(gate[i]) * up[i]);
    }
}

/* dgate, dup fp32 or bf16 (swiglu_bwd16: the fp32 values rounded). */
template <typename OutT>
static __global__ void swiglu_bwd_kernel(OutT *dgate, OutT *dup, const float *dout,
                                         const float *gate, const float *up, size_t n) {
    ZS_CU_FOR(i, n) {
        float g = gate[i], d = dout[i];
        zs_cu_put(&dgate[i], 0.0f + d * up[i] * zs_silu_grad(g)); /* ops.h: += into zeros */
        zs_cu_put(&dup[i], 0.0f + d * zs_silu(g));
    }
}

/* out fp32, or bf16 (swiglu_fwd16). */
template <typename OutT>
static zs_status swiglu_fwd(zs_stream_t *s, OutT *out, const float *gate, const float *up,
                            size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && gate && up, ZS_ERR_INVALID, "swiglu_fwd: NULL buffer");
    ZS_COST(6.0 * n, 0, (8.0 + sizeof(OutT)) * n); /* zs_silu 5, times up */
    ZS_LAUNCH(swiglu_fwd_kernel<OutT>, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, gate, up, n);
    ZS_CUDA_CHECK_LAUNCH(swiglu_fwd_kernel);
fail:
    return st;
}

zs_status zs_cu_swiglu_fwd(zs_stream_t *s, float *out, const float *gate, const float *up,
                           size_t n) {
    return swiglu_fwd(s, out, gate, up, n);
}

zs_status zs_cu_swiglu_fwd16(zs_stream_t *s, zs_bf16 *out, const float *gate, const float *up,
                             size_t n) {
    return swiglu_fwd(s, out, gate, up, n);
}

template <typename OutT>
static zs_status swiglu_bwd(zs_stream_t *s, OutT *dgate, OutT *dup, const float *dout,
                            const float *gate, const float *up, size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(dgate && dup && dout && gate && up, ZS_ERR_INVALID, "swiglu_bwd: NULL buffer");
    /* zs_silu_grad 8 and zs_silu 5, 5 more; dout, gate, up read, dgate and dup written */
    ZS_COST(18.0 * n, 0, (12.0 + 2.0 * sizeof(OutT)) * n);
    ZS_LAUNCH(swiglu_bwd_kernel<OutT>, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, dgate, dup, dout,
              gate, up, n);
    ZS_CUDA_CHECK_LAUNCH(swiglu_bwd_kernel);
fail:
    return st;
}

zs_status zs_cu_swiglu_bwd(zs_stream_t *s, float *dgate, float *dup, const float *dout,
                           const float *gate, const float *up, size_t n) {
    return swiglu_bwd(s, dgate, dup, dout, gate, up, n);
}

zs_status zs_cu_swiglu_bwd16(zs_stream_t *s, zs_bf16 *dgate, zs_bf16 *dup, const float *dout,
                             const float *gate, const float *up, size_t n) {
    return swiglu_bwd(s, dgate, dup, dout, gate, up, n);
}

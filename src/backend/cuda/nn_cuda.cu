/* CUDA network ops: layer norm, GELU and the fused softmax + cross-entropy (the embedding is in
 * embedding_cuda.cu, the LLaMA ops in llama_cuda.cu), over the same backend/kernels functions as
 * the CPU twins in cpu/nn_cpu.c. Norms run a warp per row and the softmax a block per row, with
 * warp shuffles and block reductions whose order the CPU twins follow (kernels/common.h), so the
 * bits match. Reductions over rows (layer norm's weight gradients) give each thread a column
 * and sum rows in index order, as the CPU does: no atomics.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf/tanhf/powf/cosf/sinf/rsqrt, else 0.
 * Row reductions count what every thread runs: a warp's butterfly is 5 adds in each of its 32
 * lanes (ZS_CU_WARP_SUM_FLOPS), a block's 5 + 7 in each of its 256 threads
 * (ZS_CU_BLOCK_SUM_FLOPS). */
#include "backend/cuda/cuda_internal.h"
#include "backend/kernels/gelu.h"
#include "backend/kernels/layernorm.h"
#include "backend/kernels/softmax_xent.h"

/* ---- layer norm --------------------------------------------------------------------- */

/* A warp per row: lane l takes elements l, l + 32, ... (the CPU twin's lanes, kernels/
 * layernorm.h), the butterfly gives every lane the row's sums. The row is read from memory once
 * (zs_cu_row_load), its three passes run over the lane's registers. */
template <typename OutT>
static __global__ void layernorm_fwd_kernel(OutT *out, float *mean, float *rstd, const float *inp,
                                            const float *w, const float *b, int N, int C) {
    size_t r = zs_cu_warp_row((size_t)N);
    if (r == (size_t)N) return;
    int lane = (int)threadIdx.x % ZS_WARP;
    const float *x = inp + r * C;
    float v[ZS_CU_ROW_KEEP], s = 0.0f, q = 0.0f;
    zs_cu_row_load(v, x, C, lane);
    zs_cu_row_each(v, x, C, lane, [&](int, float xi) { s += xi; });
    float mu = zs_cu_warp_sum(s) / (float)C;
    zs_cu_row_each(v, x, C, lane, [&](int, float xi) { q += (xi - mu) * (xi - mu); });
    float rs = 1.0f / sqrtf(zs_cu_warp_sum(q) / (float)C + ZS_LAYERNORM_EPS);
    zs_cu_row_each(v, x, C, lane, [&](int i, float xi) {
        zs_cu_put(&out[r * C + i], zs_layernorm_xhat(xi, mu, rs) * w[i] + b[i]);
    });
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/* dinp, and each segment's partials of dw and db (kernels/layernorm.h's order): a block per
 * segment of ZS_COLSUM_SEG rows (grid-stride). Its warps take its rows as a row kernel does,
 * then its threads the columns, adding the segment's rows (from L2) in index order; dout and
 * the input come from DRAM once (docs/cuda.md "Layer norm's backward"), each fp32 or bf16
 * (widened as read: layernorm_bwd16). Two blocks an SM (128 registers; ptxas -v, sm_90): fp32
 * dout with an fp32 input, and bf16 dout with an fp32 one, do not spill; the bf16 input with an
 * fp32 dout (the stack's kept input, models/stack.h) spills 32 bytes a thread to L1, and with a
 * bf16 dout 12 (half the column pass's rows in flight spilled more). The name stays on the
 * "__global__" line. */
#define LN_SEG_BATCH 16 /* rows' loads in flight in the column pass */
/* dinp[i] += v, and the sum rounded into dinp16[i] where dinp16 is non-NULL (ops.h
 * layernorm_bwd16: GPT-2's residual gradient as the projections' backward read it). */
static __device__ __forceinline__ void ln_dinp_add(float *dinp, zs_bf16 *dinp16, size_t i,
                                                   float v) {
    float sum = dinp[i] + v;
    dinp[i] = sum;
    if (dinp16) dinp16[i] = zs_f32_to_bf16(sum);
}
                        // clang-format off
template <typename DoutT, typename InT>
static __global__ void ZS_BOUNDS(ZS_CU_THREADS, 2) layernorm_bwd_seg_kernel(float *dinp,
        zs_bf16 *dinp16, float *pw, float *pb, const DoutT *dout, const InT *inp, const float *w,
        const float *mean, const float *rstd, int N, int C, int nseg) {
    // clang-format on
    ZS_SHARED(float, smu, ZS_COLSUM_SEG);
    ZS_SHARED(float, srs, ZS_COLSUM_SEG);
    int lane = (int)threadIdx.x % ZS_WARP, wp = (int)threadIdx.x / ZS_WARP;
    for (int s = (int)blockIdx.x; s < nseg; s += (int)gridDim.x) {
        int r0 = s * ZS_COLSUM_SEG, n = N - r0 < ZS_COLSUM_SEG ? N - r0 : ZS_COLSUM_SEG;
        for (int k = wp; k < n; k += ZS_CU_ROWS) {
            size_t r = (size_t)r0 + k;
            const InT *x = inp + r * C;
            const DoutT *d = dout + r * C;
            float mu = mean[r], rs = rstd[r], ag = 0.0f, agx = 0.0f;
            /* the lane's first ZS_CU_ROW_KEEP of x and of g = w dout kept in registers */
            float xk[ZS_CU_ROW_KEEP], gk[ZS_CU_ROW_KEEP];
            zs_cu_row_load(xk, x, C, lane);
            ZS_UNROLL
            for (int j = 0; j < ZS_CU_ROW_KEEP; j++)
                if (lane + j * ZS_WARP < C)
                    gk[j] = w[lane + j * ZS_WARP] * zs_cu_widen(d[lane + j * ZS_WARP]);
            ZS_UNROLL
            for (int j = 0; j < ZS_CU_ROW_KEEP; j++)
                if (lane + j * ZS_WARP < C) {
                    ag += gk[j];
                    agx += gk[j] * zs_layernorm_xhat(xk[j], mu, rs);
                }
            for (int i = lane + ZS_CU_ROW_KEEP * ZS_WARP; i < C; i += ZS_WARP) {
                float di = zs_cu_widen(d[i]);
                ag += w[i] * di;
                agx += w[i] * di * zs_layernorm_xhat(zs_cu_widen(x[i]), mu, rs);
            }
            float mg = zs_cu_warp_sum(ag) / (float)C, mgx = zs_cu_warp_sum(agx) / (float)C;
            ZS_UNROLL
            for (int j = 0; j < ZS_CU_ROW_KEEP; j++)
                if (lane + j * ZS_WARP < C)
                    ln_dinp_add(
                        dinp, dinp16, r * C + lane + j * ZS_WARP,
                        zs_layernorm_dinp(gk[j], zs_layernorm_xhat(xk[j], mu, rs), mg, mgx, rs));
            for (int i = lane + ZS_CU_ROW_KEEP * ZS_WARP; i < C; i += ZS_WARP)
                ln_dinp_add(dinp, dinp16, r * C + i,
                            zs_layernorm_dinp(w[i] * zs_cu_widen(d[i]),
                                              zs_layernorm_xhat(zs_cu_widen(x[i]), mu, rs), mg, mgx,
                                              rs));
            if (lane == 0) smu[k] = mu, srs[k] = rs;
        }
        __syncthreads();
        for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
            float aw = 0.0f, ab = 0.0f;
            for (int k0 = 0; k0 < n; k0 += LN_SEG_BATCH) { /* loads in flight, then in order */
                float dv[LN_SEG_BATCH], xv[LN_SEG_BATCH];
                ZS_UNROLL
                for (int u = 0; u < LN_SEG_BATCH; u++) {
                    size_t r = (size_t)r0 + (k0 + u < n ? k0 + u : k0); /* past n: unused */
                    dv[u] = zs_cu_widen(dout[r * C + c]);
                    xv[u] = zs_cu_widen(inp[r * C + c]);
                }
                ZS_UNROLL
                for (int u = 0; u < LN_SEG_BATCH; u++)
                    if (k0 + u < n) {
                        aw += dv[u] * zs_layernorm_xhat(xv[u], smu[k0 + u], srs[k0 + u]);
                        ab += dv[u];
                    }
            }
            pw[(size_t)s * C + c] = aw;
            pb[(size_t)s * C + c] = ab;
        }
        __syncthreads(); /* smu and srs are the next segment's */
    }
}

/* dw and db from the partials: thread (column, group) adds its group's in segment order, 16
 * loads in flight; the first group adds the groups into dw and db (zs_colsum_finish). */
#define LN_SUM_BATCH 16
static __global__ void layernorm_bwd_sum_kernel(float *dw, float *db, const float *pw,
                                                const float *pb, int nseg, int C) {
    ZS_SHARED(float, sw, ZS_COLSUM_GROUPS *(ZS_CU_COLS + 1));
    ZS_SHARED(float, sb, ZS_COLSUM_GROUPS *(ZS_CU_COLS + 1));
    int tx = (int)threadIdx.x % ZS_CU_COLS, g = (int)threadIdx.x / ZS_CU_COLS;
    int c = (int)blockIdx.x * ZS_CU_COLS + tx;
    float aw = 0.0f, ab = 0.0f;
    for (int s0 = g; s0 < nseg && c < C; s0 += LN_SUM_BATCH * ZS_COLSUM_GROUPS) {
        float vw[LN_SUM_BATCH], vb[LN_SUM_BATCH];
        ZS_UNROLL
        for (int u = 0; u < LN_SUM_BATCH; u++) {
            int s = s0 + u * ZS_COLSUM_GROUPS;
            size_t at = (size_t)(s < nseg ? s : s0) * C + c; /* past the last: unused */
            vw[u] = pw[at];
            vb[u] = pb[at];
        }
        ZS_UNROLL
        for (int u = 0; u < LN_SUM_BATCH; u++)
            if (s0 + u * ZS_COLSUM_GROUPS < nseg) {
                aw += vw[u];
                ab += vb[u];
            }
    }
    sw[g * (ZS_CU_COLS + 1) + tx] = aw;
    sb[g * (ZS_CU_COLS + 1) + tx] = ab;
    __syncthreads();
    if (g == 0 && c < C) {
        zs_colsum_finish(dw + c, sw + tx, ZS_CU_COLS + 1, 1);
        zs_colsum_finish(db + c, sb + tx, ZS_CU_COLS + 1, 1);
    }
}

/* out fp32, or bf16 (layernorm_fwd16). */
template <typename OutT>
static zs_status layernorm_fwd(zs_stream_t *s, OutT *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "layernorm_fwd: bad shape N=%d C=%d", N, C);
    if (N == 0) return ZS_OK;
    ZS_REQUIRE(out && mean && rstd && inp && w && b, ZS_ERR_INVALID, "layernorm_fwd: NULL buffer");
    /* per row: 9 per element (sum, squared deviation, normalise), two butterflies and 5
     * scalar ops in each lane */
    ZS_COST((double)N * (9.0 * C + 2.0 * ZS_CU_WARP_SUM_FLOPS + 5.0 * ZS_WARP), 0,
            (4.0 + sizeof(OutT)) * N * C + 4.0 * (2.0 * C + 2.0 * N));
    ZS_LAUNCH(layernorm_fwd_kernel<OutT>, zs_cu_row_blocks((size_t)N), ZS_CU_THREADS, 0, cs, out,
              mean, rstd, inp, w, b, N, C);
    ZS_CUDA_CHECK_LAUNCH(layernorm_fwd_kernel);
fail:
    return st;
}

zs_status zs_cu_layernorm_fwd(zs_stream_t *s, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C) {
    return layernorm_fwd(s, out, mean, rstd, inp, w, b, N, C);
}

zs_status zs_cu_layernorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C) {
    return layernorm_fwd(s, out, mean, rstd, inp, w, b, N, C);
}

/* layernorm_bwd with dout and inp each fp32 or bf16 (layernorm_bwd16). */
template <typename DoutT, typename InT>
static zs_status layernorm_bwd(zs_stream_t *s, float *dinp, zs_bf16 *dinp16, float *dw, float *db,
                               const DoutT *dout, const InT *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    int nseg = zs_layernorm_segments(N);
    unsigned grid = nseg < (int)ZS_CU_MAX_BLOCKS ? (unsigned)nseg : ZS_CU_MAX_BLOCKS;
    double *part = NULL;
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "layernorm_bwd: bad shape N=%d C=%d", N, C);
    if (N == 0) return ZS_OK;
    ZS_REQUIRE(dinp && dw && db && dout && inp && w && mean && rstd, ZS_ERR_INVALID,
               "layernorm_bwd: NULL buffer");
    ZS_CHECK(zs_cu_scratch(s, zs_layernorm_bwd_scratch(N, C), &part));
    /* 15 an element and the row's butterflies, 5 an element of the column pass; dout and the
     * input read, dinp read and written (and its bf16 copy written), the partials written */
    ZS_COST((double)N * (20.0 * C + 2.0 * (ZS_CU_WARP_SUM_FLOPS + ZS_WARP)), 0,
            (sizeof(DoutT) + sizeof(InT) + (dinp16 ? 10.0 : 8.0)) * N * C +
                4.0 * (C + 2.0 * N + 2.0 * nseg * C));
    ZS_LAUNCH((layernorm_bwd_seg_kernel<DoutT, InT>), grid, ZS_CU_THREADS, 0, cs, dinp, dinp16,
              (float *)part, (float *)part + (size_t)nseg * C, dout, inp, w, mean, rstd, N, C,
              nseg);
    ZS_CUDA_CHECK_LAUNCH(layernorm_bwd_seg_kernel);
    /* per column: 2 a segment, the groups' totals, 2 into dw and db (read and written) */
    ZS_COST((double)C * (2.0 * nseg + 2.0 * ZS_COLSUM_GROUPS + 2.0), 0,
            4.0 * (2.0 * nseg * C + 4.0 * C));
    ZS_LAUNCH(layernorm_bwd_sum_kernel, zs_cu_col_blocks((size_t)C), ZS_CU_COL_THREADS, 0, cs, dw,
              db, (float *)part, (float *)part + (size_t)nseg * C, nseg, C);
    ZS_CUDA_CHECK_LAUNCH(layernorm_bwd_sum_kernel);
fail:
    return st;
}

zs_status zs_cu_layernorm_bwd(zs_stream_t *s, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int N, int C) {
    return layernorm_bwd(s, dinp, NULL, dw, db, dout, inp, w, mean, rstd, N, C);
}

zs_status zs_cu_layernorm_bwd16(zs_stream_t *s, float *dinp, zs_bf16 *dinp16, float *dw, float *db,
                                const void *dout, int dout16, const void *inp, int inp16,
                                const float *w, const float *mean, const float *rstd, int N,
                                int C) {
    const zs_bf16 *d16 = (const zs_bf16 *)dout, *x16 = (const zs_bf16 *)inp;
    const float *d32 = (const float *)dout, *x32 = (const float *)inp;
    if (dout16 && inp16)
        return layernorm_bwd(s, dinp, dinp16, dw, db, d16, x16, w, mean, rstd, N, C);
    if (dout16) return layernorm_bwd(s, dinp, dinp16, dw, db, d16, x32, w, mean, rstd, N, C);
    if (inp16) return layernorm_bwd(s, dinp, dinp16, dw, db, d32, x16, w, mean, rstd, N, C);
    return layernorm_bwd(s, dinp, dinp16, dw, db, d32, x32, w, mean, rstd, N, C);
}

/* ---- GELU --------------------------------------------------------------------------- */

/* out may alias inp: each thread reads its element before writing it. */
static __global__ void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
    ZS_CU_FOR(i, n) {
        out[i] = zs_gelu(inp[i]);
    }
}

/* gelu_bwd (InT float) and gelu_bwd16 (zs_bf16, widened). */
template <typename InT>
static __global__ void gelu_bwd_kernel(float *dinp, const InT *inp, const float *dout, size_t n) {
    ZS_CU_FOR(i, n) { /* ops.h: the bits of += into zeros */
        dinp[i] = 0.0f + zs_gelu_grad(zs_cu_widen(inp[i])) * dout[i];
    }
}

zs_status zs_cu_gelu_fwd(zs_stream_t *s, float *out, const float *inp, size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && inp, ZS_ERR_INVALID, "gelu_fwd: NULL buffer");
    ZS_COST(10.0 * n, 0, 8.0 * n); /* zs_gelu: 10 */
    ZS_LAUNCH(gelu_fwd_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, out, inp, n);
    ZS_CUDA_CHECK_LAUNCH(gelu_fwd_kernel);
fail:
    return st;
}

template <typename InT>
static zs_status gelu_bwd(zs_stream_t *s, float *dinp, const InT *inp, const float *dout,
                          size_t n) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(dinp && inp && dout, ZS_ERR_INVALID, "gelu_bwd: NULL buffer");
    /* zs_gelu_grad 21, times dout, 0 + (dinp written) */
    ZS_COST(23.0 * n, 0, (8.0 + sizeof(InT)) * n);
    ZS_LAUNCH(gelu_bwd_kernel<InT>, zs_cu_blocks(n), ZS_CU_THREADS, 0, cs, dinp, inp, dout, n);
    ZS_CUDA_CHECK_LAUNCH(gelu_bwd_kernel);
fail:
    return st;
}

zs_status zs_cu_gelu_bwd(zs_stream_t *s, float *dinp, const float *inp, const float *dout,
                         size_t n) {
    return gelu_bwd(s, dinp, inp, dout, n);
}

zs_status zs_cu_gelu_bwd16(zs_stream_t *s, float *dinp, const zs_bf16 *inp, const float *dout,
                           size_t n) {
    return gelu_bwd(s, dinp, inp, dout, n);
}

/* ---- softmax + cross-entropy -------------------------------------------------------- */

/* One row's passes, from x (device memory, or the row staged in shared memory): the maximum and
 * the sum of exponentials through block reductions in the CPU twin's order
 * (kernels/softmax_xent.h), then with dx the gradient elementwise, each thread writing only the
 * elements it reads itself (so in place is safe: every other read ended at the reductions'
 * barriers). */
template <typename T, typename U>
static __device__ void xent_row(float *losses, T *dx, const U *x, float *red, size_t r, int tg,
                                int V, int Vp, float dloss) {
    int t = (int)threadIdx.x;
    float xt = zs_cu_widen(x[tg]), m = -INFINITY, s = 0.0f;
    for (int i = t; i < V; i += ZS_ROW_THREADS) {
        float v = zs_cu_widen(x[i]);
        m = v > m ? v : m;
    }
#ifndef ZS_MUTANT_SMEM_RMW
    float mx = zs_cu_block_reduce(m, red, 1);
#else /* broken build: the block maximum by a plain read-modify-write of one shared float */
    ZS_SHARED(float, bmax, 1);
    if (t == 0) *bmax = -INFINITY;
    __syncthreads();
    if (m > *bmax) *bmax = m;
    __syncthreads();
    float mx = *bmax;
#endif
    for (int i = t; i < V; i += ZS_ROW_THREADS)
        s += zs_expf(zs_cu_widen(x[i]) - mx);
    float sum = zs_cu_block_reduce(s, red, 0);
    if (dx) {
        /* each exponential again, the same bits as storing it in the sum's pass and reading it
         * back, for a read where that took a write and a read (1.65 GB at gpt2-124m's size) */
        float k = dloss / sum;
        for (int i = t; i < V; i += ZS_ROW_THREADS) {
            float g = zs_expf(zs_cu_widen(x[i]) - mx) * k;
            zs_cu_put(dx + i, i == tg ? g - dloss : g);
        }
        for (int i = V + t; i < Vp; i += ZS_ROW_THREADS)
            zs_cu_put(dx + i, 0.0f);
    }
#ifdef ZS_MUTANT_XENT_LATE_TARGET /* broken build: the target's logit read after dx took it */
    xt = zs_cu_widen(x[tg]);
#endif
    if (t == 0) losses[r] = logf(sum) - (xt - mx);
}

/* The row's V logits into shared memory, widened, a vector a thread where the row is aligned. */
static __device__ void xent_stage(float *row, const float *x, int V) {
    int t = (int)threadIdx.x, n4 = ((uintptr_t)x & 15) == 0 ? V / 4 : 0;
    for (int j = t; j < n4; j += ZS_ROW_THREADS)
        ((float4 *)row)[j] = ((const float4 *)x)[j];
    for (int i = 4 * n4 + t; i < V; i += ZS_ROW_THREADS)
        row[i] = x[i];
}
static __device__ void xent_stage(float *row, const zs_bf16 *x, int V) {
    int t = (int)threadIdx.x, n4 = ((uintptr_t)x & 7) == 0 ? V / 4 : 0;
    for (int j = t; j < n4; j += ZS_ROW_THREADS) { /* 8 bytes in, 16 out: whole wavefronts */
        uint2 q = ((const uint2 *)x)[j];
        ((float4 *)row)[j] =
            make_float4(__uint_as_float(q.x << 16), /* lower element low */
                        __uint_as_float(q.x & 0xffff0000u), __uint_as_float(q.y << 16),
                        __uint_as_float(q.y & 0xffff0000u));
    }
    for (int i = 4 * n4 + t; i < V; i += ZS_ROW_THREADS)
        row[i] = zs_bf16_to_f32(x[i]);
}

/* A block of ZS_ROW_THREADS per row (xent_row), over fp32 logits (softmax_xent: fp32 dlogits,
 * apart or in place) or bf16 ones (softmax_xent16: bf16 dlogits in place). The CPU validates
 * targets before computing; here they are device memory, so a target outside [-1, V) cannot
 * stop the op: its row gets a NaN loss and NaN gradient (never an out-of-bounds read), which
 * the loss check in training reports. With stage, the row's V logits are first copied into
 * dynamic shared memory, widened, and every pass reads them there: the row comes from DRAM once
 * where three passes read it three times (a second pass cannot hit L2 with 8 blocks an SM of
 * 201 KB rows in flight, docs/cuda.md "What 45% would take at gpt2-124m's shape"). All of the
 * row is read before the first barrier. Each thread still takes elements t, t + ZS_ROW_THREADS,
 * ... in each pass: the same sums, the same bits. */
template <typename T>
static __global__ void softmax_xent_kernel(float *losses, T *dlogits, const T *logits,
                                           const int32_t *targets, int N, int V, int Vp,
                                           float dloss, int stage) {
#ifndef ZS_MUTANT_SMEM_SHORT
    ZS_SHARED(float, red, ZS_ROW_THREADS / ZS_WARP);
#else /* broken build: the warps' partials in an array one element too small */
    ZS_SHARED(float, red, ZS_ROW_THREADS / ZS_WARP - 1);
#endif
    size_t r = blockIdx.x, off = r * Vp;
    int t = (int)threadIdx.x, tg = targets[r];
    const T *x = logits + off;
    T *dx = dlogits ? dlogits + off : NULL;
    (void)N;
    if (tg < -1 || tg >= V) { /* the whole block takes this branch */
        if (t == 0) losses[r] = __int_as_float(0x7fc00000);
        for (int i = t; dx && i < Vp; i += ZS_ROW_THREADS)
            zs_cu_put(dx + i, __int_as_float(0x7fc00000));
        return;
    }
    if (tg < 0) { /* masked row */
        if (t == 0) losses[r] = 0.0f;
        for (int i = t; dx && i < Vp; i += ZS_ROW_THREADS)
            zs_cu_put(dx + i, 0.0f);
    } else if (stage) { /* the whole block takes this branch */
        ZS_SHARED_DYN(float, row);
        xent_stage(row, x, V);
        __syncthreads();
        xent_row(losses, dx, (const float *)row, red, r, tg, V, Vp, dloss);
    } else { /* as it is in device memory */
        xent_row(losses, dx, x, red, r, tg, V, Vp, dloss);
    }
}

/* The shared memory a block of softmax_xent_kernel may take for its row: the device's opt-in
 * limit less 1 KiB for the kernel's own arrays; 0 where the device cannot be asked. */
static size_t xent_stage_max(void) {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return optin > 1024 ? (size_t)optin - 1024 : 0;
}

/* softmax_xent (dlogits non-NULL, or NULL: losses only) and softmax_xent16 (T bf16: the logits
 * and the gradient in place of them) in one kernel, the row staged in shared memory where it
 * fits. */
template <typename T>
static zs_status launch_softmax_xent(zs_stream_t *s, float *losses, T *dlogits, const T *logits,
                                     const int32_t *targets, int N, int V, int Vp, float dloss) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t row_bytes = 0, stage_max = 0; /* the row staged in shared memory, where it fits */
    int stage = 0;
    ZS_REQUIRE(N >= 0 && V >= 1 && Vp >= V, ZS_ERR_INVALID,
               "softmax_xent: bad shape N=%d V=%d Vp=%d", N, V, Vp);
    if (N == 0) return ZS_OK;
    ZS_REQUIRE(losses && logits && targets, ZS_ERR_INVALID, "softmax_xent: NULL buffer");
    /* Every row counted as a real one (targets live in device memory; a masked row reads no
     * logits and computes nothing): 3 per logit (exp of the difference, sum), the block sum,
     * the loss (3); with the gradient 3 per logit (the exp of the difference again, the scale),
     * 1 at the target and dloss / sum in every thread. Logits read V of each row (twice with
     * the gradient, the same bytes), dlogits written Vp (4 bytes each, 2 in bf16). */
    ZS_COST((double)N * (3.0 * V + ZS_CU_BLOCK_SUM_FLOPS + 3.0 +
                         (dlogits ? 3.0 * V + 1.0 + ZS_ROW_THREADS : 0.0)),
            0, (4.0 * 2.0 + (double)sizeof(T) * (V + (dlogits ? Vp : 0))) * N);
    row_bytes = (size_t)V * sizeof(float);
    stage_max = xent_stage_max();
    stage = row_bytes <= stage_max;
    if (stage) /* the whole opt-in, the same from every host thread: none lowers another's */
        ZS_CUDA_CHECK(cudaFuncSetAttribute((const void *)softmax_xent_kernel<T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)stage_max));
    ZS_LAUNCH(softmax_xent_kernel<T>, (unsigned)N, ZS_ROW_THREADS, stage ? row_bytes : 0, cs,
              losses, dlogits, logits, targets, N, V, Vp, dloss, stage);
    ZS_CUDA_CHECK_LAUNCH(softmax_xent_kernel);
fail:
    return st;
}

zs_status zs_cu_softmax_xent(zs_stream_t *s, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int N, int V, int Vp, float dloss) {
    return launch_softmax_xent<float>(s, losses, dlogits, logits, targets, N, V, Vp, dloss);
}

zs_status zs_cu_softmax_xent16(zs_stream_t *s, float *losses, zs_bf16 *logits,
                               const int32_t *targets, int N, int V, int Vp, float dloss,
                               int grad) {
    return launch_softmax_xent<zs_bf16>(s, losses, grad ? logits : NULL, logits, targets, N, V, Vp,
                                        dloss);
}

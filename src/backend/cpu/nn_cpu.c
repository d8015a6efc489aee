/* CPU network ops: token+position embedding, layer norm, GELU and the fused softmax +
 * cross-entropy. Rows run in parallel; reductions over rows (weight, bias and embedding
 * gradients) are split by columns instead, each column summed in row order, so results
 * are bitwise the same for any thread count. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/gelu.h"
#include "backend/kernels/layernorm.h"
#include "backend/kernels/softmax_xent.h"
#include "core/status.h"

#include <string.h>

/* Columns per task of the column-parallel reductions (C = 768 gives 12 tasks). */
#define NN_COL_BLOCK 64

zs_status zs_cpu_embedding_fwd(zs_stream_t *s, float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int B, int T, int C, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 0, ZS_ERR_INVALID,
               "embedding_fwd: negative shape B=%d T=%d C=%d", B, T, C);
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= ZS_CPU_PAR_MIN)
    for (int bt = 0; bt < B * T; bt++) {
        const float *te = wte + (size_t)tokens[bt] * C;
        float *o = out + (size_t)bt * C;
        if (!wpe) {
            memcpy(o, te, (size_t)C * sizeof *o);
            continue;
        }
        /* The position in its document: t - seg (t without document masks). */
        const float *pe = wpe + (size_t)(bt % T - zs_seg_lo(seg, (size_t)bt)) * C;
        for (int c = 0; c < C; c++)
            o[c] = te[c] + pe[c];
    }
fail:
    return st;
}

zs_status zs_cpu_embedding_bwd(zs_stream_t *s, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 0, ZS_ERR_INVALID,
               "embedding_bwd: negative shape B=%d T=%d C=%d", B, T, C);
    int nblk = (C + NN_COL_BLOCK - 1) / NN_COL_BLOCK;
    /* A token repeated in the batch adds into the same row: split by columns, not rows. */
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= ZS_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * NN_COL_BLOCK;
        int nc = C - c0 < NN_COL_BLOCK ? C - c0 : NN_COL_BLOCK;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C + c0;
            if (dwte) zs_axpy_row(dwte + (size_t)tokens[bt] * C + c0, 1.0f, d, nc);
            if (dwpe)
                zs_axpy_row(dwpe + (size_t)(bt % T - zs_seg_lo(seg, (size_t)bt)) * C + c0, 1.0f, d,
                            nc);
        }
    }
fail:
    return st;
}

/* layernorm_fwd into out32, or rounded to bf16 into out16 (the other NULL). */
static zs_status layernorm_fwd(float *out32, zs_bf16 *out16, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "layernorm_fwd: bad shape N=%d C=%d", N, C);
#pragma omp parallel for schedule(static) if ((size_t)N * C >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        if (out32) {
            zs_layernorm_row_fwd(out32 + (size_t)r * C, &mean[r], &rstd[r], x, w, b, C);
            continue;
        }
        zs_bf16 *y = out16 + (size_t)r * C;
        zs_layernorm_row_stats(&mean[r], &rstd[r], x, C);
        for (int i = 0; i < C; i++)
            y[i] = zs_f32_to_bf16(zs_layernorm_xhat(x[i], mean[r], rstd[r]) * w[i] + b[i]);
    }
fail:
    return st;
}

zs_status zs_cpu_layernorm_fwd(zs_stream_t *s, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C) {
    return layernorm_fwd(out, NULL, mean, rstd, inp, w, b, N, C);
}

zs_status zs_cpu_layernorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int N, int C) {
    return layernorm_fwd(NULL, out, mean, rstd, inp, w, b, N, C);
}

zs_status zs_cpu_layernorm_bwd(zs_stream_t *s, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "layernorm_bwd: bad shape N=%d C=%d", N, C);
    int par = (size_t)N * C >= ZS_CPU_PAR_MIN;
    int nblk = (C + NN_COL_BLOCK - 1) / NN_COL_BLOCK;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < N; r++)
            zs_layernorm_row_bwd(dinp + (size_t)r * C, dout + (size_t)r * C, inp + (size_t)r * C, w,
                                 mean[r], rstd[r], C);
#pragma omp for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * NN_COL_BLOCK;
            int nc = C - c0 < NN_COL_BLOCK ? C - c0 : NN_COL_BLOCK;
            /* kernels/layernorm.h's column-sum order (segment partials), as the GPU adds */
            float aw[ZS_COLSUM_GROUPS][NN_COL_BLOCK] = {{0}};
            float ab[ZS_COLSUM_GROUPS][NN_COL_BLOCK] = {{0}};
            for (int r0 = 0; r0 < N; r0 += ZS_COLSUM_SEG) {
                int end = N - r0 < ZS_COLSUM_SEG ? N : r0 + ZS_COLSUM_SEG;
                float sw[NN_COL_BLOCK] = {0}, sb[NN_COL_BLOCK] = {0};
                for (int r = r0; r < end; r++) {
                    const float *d = dout + (size_t)r * C + c0;
                    const float *x = inp + (size_t)r * C + c0;
                    float mu = mean[r], rs = rstd[r];
                    for (int c = 0; c < nc; c++) {
                        sw[c] += d[c] * zs_layernorm_xhat(x[c], mu, rs);
                        sb[c] += d[c];
                    }
                }
                float *pw = aw[zs_colsum_group(r0)], *pb = ab[zs_colsum_group(r0)];
                for (int c = 0; c < nc; c++) {
                    pw[c] += sw[c];
                    pb[c] += sb[c];
                }
            }
            zs_colsum_finish(dw + c0, &aw[0][0], NN_COL_BLOCK, nc);
            zs_colsum_finish(db + c0, &ab[0][0], NN_COL_BLOCK, nc);
        }
    }
fail:
    return st;
}

zs_status zs_cpu_gelu_fwd(zs_stream_t *s, float *out, const float *inp, size_t n) {
    /* In place gets its own loop so the compiler sees one array and vectorises without an
     * overlap check (which an exact alias would fail). */
    if (out == inp) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            out[i] = zs_gelu(out[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++)
            out[i] = zs_gelu(inp[i]);
    }
    return ZS_OK;
}

/* bias_fwd then gelu_fwd, a row at a time (the same bits: gelu of the rounded sum). */
zs_status zs_cpu_bias_gelu_fwd(zs_stream_t *s, float *pre, float *out, const float *bias, int N,
                               int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_gelu_fwd: negative shape N=%d OC=%d", N,
               OC);
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        float *x = pre + (size_t)r * OC;
        if (bias)
            for (int c = 0; c < OC; c++)
                x[c] += bias[c];
        for (int c = 0; c < OC; c++)
            out[(size_t)r * OC + c] = zs_gelu(x[c]);
    }
fail:
    return st;
}

/* ops.h bias_gelu_fwd16: the fp32 sum rounded into pre16, and its GELU rounded into out. */
zs_status zs_cpu_bias_gelu_fwd16(zs_stream_t *s, zs_bf16 *pre16, const float *pre, zs_bf16 *out,
                                 const float *bias, int N, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && OC >= 0, ZS_ERR_INVALID, "bias_gelu_fwd16: negative shape N=%d OC=%d", N,
               OC);
    ZS_REQUIRE(pre || (size_t)N * OC == 0, ZS_ERR_INVALID, "bias_gelu_fwd16: NULL input");
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * OC;
        for (int c = 0; c < OC; c++) {
            float x = bias ? pre[o + c] + bias[c] : pre[o + c];
            pre16[o + c] = zs_f32_to_bf16(x);
            out[o + c] = zs_f32_to_bf16(zs_gelu(x));
        }
    }
fail:
    return st;
}

zs_status zs_cpu_gelu_bwd(zs_stream_t *s, float *dinp, const float *inp, const float *dout,
                          size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dinp[i] = 0.0f + zs_gelu_grad(inp[i]) * dout[i]; /* ops.h: the bits of += into zeros */
    return ZS_OK;
}

zs_status zs_cpu_gelu_bwd16(zs_stream_t *s, float *dinp, const zs_bf16 *inp, const float *dout,
                            size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dinp[i] = 0.0f + zs_gelu_grad(zs_bf16_to_f32(inp[i])) * dout[i];
    return ZS_OK;
}

zs_status zs_cpu_softmax_xent(zs_stream_t *s, float *losses, float *dlogits, const float *logits,
                              const int32_t *targets, int N, int V, int Vp, float dloss) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && V >= 1 && Vp >= V, ZS_ERR_INVALID,
               "softmax_xent: bad shape N=%d V=%d Vp=%d", N, V, Vp);
    for (int r = 0; r < N; r++)
        ZS_REQUIRE(targets[r] >= -1 && targets[r] < V, ZS_ERR_INVALID,
                   "softmax_xent: target %d of row %d outside [-1, %d)", (int)targets[r], r, V);
#pragma omp parallel for schedule(static) if ((size_t)N * Vp >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        size_t off = (size_t)r * Vp;
        losses[r] = zs_softmax_xent_row(dlogits ? dlogits + off : NULL, logits + off, targets[r], V,
                                        Vp, dloss);
    }
fail:
    return st;
}

/* CPU ops for LLaMA-family models: RMSNorm, rotary position embedding and the SwiGLU gate,
 * as OpenMP loops over the shared per-row and per-element math in backend/kernels. Rows run
 * in parallel; the RMSNorm weight gradient is split by columns, each column summed in row
 * order, so results are bitwise the same for any thread count. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/rope.h"
#include "backend/kernels/swiglu.h"
#include "core/status.h"

/* Columns per task of the weight-gradient reduction. */
#define RMS_COL_BLOCK 64

/* Largest head size RoPE accepts: the per-position cos/sin tables live on the stack. */
#define ROPE_MAX_HALF 512

/* rmsnorm_fwd into out32, or rounded to bf16 into out16 (the other NULL). */
static zs_status rmsnorm_fwd(float *out32, zs_bf16 *out16, float *rstd, const float *inp,
                             const float *w, int N, int C, float eps) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && C >= 1 && eps >= 0.0f, ZS_ERR_INVALID,
               "rmsnorm_fwd: bad shape N=%d C=%d or eps %g", N, C, (double)eps);
#pragma omp parallel for schedule(static) if ((size_t)N * C >= ZS_CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        if (out32) {
            rstd[r] = zs_rmsnorm_row_fwd(out32 + (size_t)r * C, x, w, C, eps);
            continue;
        }
        zs_bf16 *y = out16 + (size_t)r * C;
        float rs = rstd[r] = zs_rmsnorm_row_rstd(x, C, eps);
        for (int i = 0; i < C; i++)
            y[i] = zs_f32_to_bf16(x[i] * rs * w[i]);
    }
fail:
    return st;
}

zs_status zs_cpu_rmsnorm_fwd(zs_stream_t *s, float *out, float *rstd, const float *inp,
                             const float *w, int N, int C, float eps) {
    return rmsnorm_fwd(out, NULL, rstd, inp, w, N, C, eps);
}

zs_status zs_cpu_rmsnorm_fwd16(zs_stream_t *s, zs_bf16 *out, float *rstd, const float *inp,
                               const float *w, int N, int C, float eps) {
    return rmsnorm_fwd(NULL, out, rstd, inp, w, N, C, eps);
}

zs_status zs_cpu_rmsnorm_bwd(zs_stream_t *s, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int N, int C) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && C >= 1, ZS_ERR_INVALID, "rmsnorm_bwd: bad shape N=%d C=%d", N, C);
    int par = (size_t)N * C >= ZS_CPU_PAR_MIN;
    int nblk = (C + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < N; r++)
            zs_rmsnorm_row_bwd(dinp + (size_t)r * C, dout + (size_t)r * C, inp + (size_t)r * C, w,
                               rstd[r], C);
#pragma omp for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * RMS_COL_BLOCK;
            int nc = C - c0 < RMS_COL_BLOCK ? C - c0 : RMS_COL_BLOCK;
            /* kernels/common.h's column-sum order, as the GPU adds */
            float aw[ZS_COLSUM_GROUPS][RMS_COL_BLOCK] = {{0}};
            for (int r = 0; r < N; r++) {
                const float *d = dout + (size_t)r * C + c0;
                const float *x = inp + (size_t)r * C + c0;
                float rs = rstd[r], *pw = aw[zs_colsum_group(r)];
                for (int c = 0; c < nc; c++)
                    pw[c] += d[c] * (x[c] * rs);
            }
            zs_colsum_finish(dw + c0, &aw[0][0], RMS_COL_BLOCK, nc);
        }
    }
fail:
    return st;
}

/* Forward (inverse 0) and backward (inverse 1) share one loop: the backward of a rotation is
 * the rotation by the negative angle. Positions are parallel; each computes its cos/sin
 * table once and applies it to every batch row and head at that position. With document masks
 * (seg) a row's position is t - seg, so each (row, t) computes the table of its own position:
 * the same function of (position, pair), hence the same values. out16: out is bf16, each
 * head rotated in fp32 and rounded (rope_bwd16). */
static void rope_head_out(void *out, int out16, size_t off, const float *x, const float *cs,
                          const float *sn, int half, int inverse) {
    if (!out16) {
        zs_rope_head((float *)out + off, x, cs, sn, half, inverse);
        return;
    }
    float r[2 * ROPE_MAX_HALF];
    zs_rope_head(r, x, cs, sn, half, inverse);
    zs_bf16 *o = (zs_bf16 *)out + off;
    for (int i = 0; i < 2 * half; i++)
        o[i] = zs_f32_to_bf16(r[i]);
}

static zs_status rope(const char *op, void *out, int out16, const float *inp, int B, int T, int NH,
                      int hs, float theta, int inverse, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && NH >= 1 && hs >= 2 && hs % 2 == 0 && hs / 2 <= ROPE_MAX_HALF &&
                   theta > 0.0f,
               ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d NH=%d hs=%d (hs even, at most %d) or theta %g", op, B, T,
               NH, hs, 2 * ROPE_MAX_HALF, (double)theta);
    int half = hs / 2;
    size_t D = (size_t)NH * hs;
    if (seg) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= ZS_CPU_PAR_MIN)
        for (long bt = 0; bt < (long)B * T; bt++) {
            float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
            int pos = (int)(bt % T) - seg[bt];
            for (int i = 0; i < half; i++)
                zs_rope_cos_sin(&cs[i], &sn[i], pos, i, hs, theta);
            for (int h = 0; h < NH; h++) {
                size_t off = (size_t)bt * D + (size_t)h * hs;
                rope_head_out(out, out16, off, inp + off, cs, sn, half, inverse);
            }
        }
        return ZS_OK;
    }
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= ZS_CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
        for (int i = 0; i < half; i++)
            zs_rope_cos_sin(&cs[i], &sn[i], t, i, hs, theta);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                size_t off = ((size_t)b * T + t) * D + (size_t)h * hs;
                rope_head_out(out, out16, off, inp + off, cs, sn, half, inverse);
            }
    }
fail:
    return st;
}

zs_status zs_cpu_rope_fwd(zs_stream_t *s, float *out, const float *inp, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg) {
    return rope("rope_fwd", out, 0, inp, B, T, NH, hs, theta, 0, seg);
}

zs_status zs_cpu_rope_bwd(zs_stream_t *s, float *dinp, const float *dout, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg) {
    return rope("rope_bwd", dinp, 0, dout, B, T, NH, hs, theta, 1, seg);
}

zs_status zs_cpu_rope_bwd16(zs_stream_t *s, zs_bf16 *dinp, const float *dout, int B, int T, int NH,
                            int hs, float theta, const int32_t *seg) {
    return rope("rope_bwd16", dinp, 1, dout, B, T, NH, hs, theta, 1, seg);
}

zs_status zs_cpu_swiglu_fwd(zs_stream_t *s, float *out, const float *gate, const float *up,
                            size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = zs_silu(gate[i]) * up[i];
    return ZS_OK;
}

zs_status zs_cpu_swiglu_fwd16(zs_stream_t *s, zs_bf16 *out, const float *gate, const float *up,
                              size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = zs_f32_to_bf16(zs_silu(gate[i]) * up[i]);
    return ZS_OK;
}

zs_status zs_cpu_swiglu_bwd(zs_stream_t *s, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], d = dout[i];
        dgate[i] = 0.0f + d * up[i] * zs_silu_grad(g); /* ops.h: the bits of += into zeros */
        dup[i] = 0.0f + d * zs_silu(g);
    }
    return ZS_OK;
}

zs_status zs_cpu_swiglu_bwd16(zs_stream_t *s, zs_bf16 *dgate, zs_bf16 *dup, const float *dout,
                              const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ZS_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], d = dout[i];
        dgate[i] = zs_f32_to_bf16(0.0f + d * up[i] * zs_silu_grad(g)); /* swiglu_bwd's, rounded */
        dup[i] = zs_f32_to_bf16(0.0f + d * zs_silu(g));
    }
    return ZS_OK;
}

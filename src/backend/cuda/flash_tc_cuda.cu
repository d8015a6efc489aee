/* The tensor-core attention's forward (flash_tc_cuda.h, docs/cuda.md "Kernels"): a block of
 * 8 warps per 128 query rows of one head, over the key blocks in order, the online softmax in
 * registers; and the launchers of both directions' eligibility and the forward. */
#include "backend/cuda/flash_tc_cuda.h"

/* ---- forward ------------------------------------------------------------------------------ */

/* Two blocks an SM: registers capped at 128 a thread (about 25 spilled at head size 64, where
 * unbounded it takes 172), 16 warps an SM instead of 8; 3.04 against 3.37 ms of a gpt2-124m
 * step's forward attention on an H100 (docs/cuda.md, "On a real GPU"). */
/* (the kernel's name stays on the line of "__global__ void": emu_coverage.sh reads it) */
// clang-format off
template <int HS>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 2) fa_tc_fwd_kernel(float *out, float *lse,
        const float *q, const float *k, const float *v, const int32_t *seg, tc_view a) {
    // clang-format on
    ZS_SHARED_ALIGNED(uint16_t, ks, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* K [key][dim] */
    ZS_SHARED_ALIGNED(uint16_t, vs, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* V [key][dim] */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bh = (int)blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / (a.NH / a.NKV);
    int q0 = (int)blockIdx.x * FA_TC_ROWS, row0 = q0 + w * 16, r[2] = {row0 + g, row0 + g + 8};
    int lo[2];
    for (int i = 0; i < 2; i++)
        lo[i] = r[i] < a.T ? zs_seg_lo(seg, (size_t)b * a.T + r[i]) : 0;

    /* load: this warp's 16 query rows as A fragments */
    zs_mma_a qa[HS / 16];
    tc_load_a<HS>(qa, q + tc_qrow(a, b, 0, h), a.ldq, row0, a.T);
    /* the running maximum of the raw scores, and the sum of 2^((s - m) scale2) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    zs_mma_c o[HS / 8];
    ZS_UNROLL
    for (int dt = 0; dt < HS / 8; dt++)
        zs_mma_zero(o[dt]);

    /* document starts never decrease along a row, so row q0's block is the first any reads */
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + FA_TC_ROWS - 1 < a.T - 1 ? q0 + FA_TC_ROWS - 1 : a.T - 1;
    const float *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    float4 kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block, in flight */
    tc_fetch<HS>(kr, kb, a.ldkv, first, a.T, a.vec);
    tc_fetch<HS>(vr, vb, a.ldkv, first, a.T, a.vec);
    for (int j0 = first; j0 <= last; j0 += ZS_FA_BK) {
        tc_kv_step<HS>(ks, vs, kr, vr, kb, vb, a, j0, last);

        /* a warp whose rows all precede the block (or lie past T) has nothing to add */
        if (row0 >= a.T || j0 > row0 + 15) continue;

        /* MMA: scores S = Q K^T, 16 rows x 64 keys in 8 n-tiles */
        zs_mma_c s[8];
        tc_mma_rows<HS>(s, qa, ks);

        /* online softmax: mask (edge blocks only), the rows' maxima over their 4 lanes */
        float mx[2] = {m[0], m[1]};
        if (!tc_block_full(a, seg, b, row0, j0)) tc_mask_rows(s, a, r, lo, j0, t);
        ZS_UNROLL
        for (int x = 0; x < 32; x++) {
            float v = s[x >> 2].x[x & 3];
            mx[(x & 3) >> 1] = v > mx[(x & 3) >> 1] ? v : mx[(x & 3) >> 1];
        }
        /* rescale by alpha = 2^((m_old - m_new) scale2); a row with no key yet keeps
         * m = -inf, and its 2^(s scale2 - ms) is taken with ms = 0 so that -inf gives 0 */
        float alpha[2], ms[2];
        ZS_UNROLL
        for (int i = 0; i < 2; i++) {
            for (int d = 1; d <= 2; d *= 2) {
                float y = __shfl_xor_sync(0xffffffffu, mx[i], d);
                mx[i] = y > mx[i] ? y : mx[i];
            }
            ms[i] = mx[i] == -INFINITY ? 0.0f : mx[i] * a.scale2;
            alpha[i] = mx[i] == -INFINITY ? 0.0f : zs_cu_exp2((m[i] - mx[i]) * a.scale2);
            m[i] = mx[i];
            l[i] *= alpha[i];
        }
        ZS_UNROLL
        for (int x = 0; x < 32; x++) {
            int nt = x >> 2, e = x & 3;
            float p = zs_cu_exp2(fmaf(s[nt].x[e], a.scale2, -ms[e >> 1]));
            s[nt].x[e] = p;
            l[e >> 1] += p;
        }
        ZS_UNROLL
        for (int x = 0; x < HS / 2; x++)
            o[x >> 2].x[x & 3] *= alpha[(x & 3) >> 1];

        /* MMA: O += P V (P rounded to bf16 in registers) */
        tc_mma_p<HS>(o, s, vs);
    }

    /* store: O / l and lse = m scale + log l, l summed over the row's 4 lanes */
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    for (int i = 0; i < 2; i++) {
        if (r[i] >= a.T) continue;
        float inv = 1.0f / l[i];
        float *orow = out + tc_orow(a, b, r[i], h);
        for (int dt = 0; dt < HS / 8; dt++)
            *(float2 *)(orow + dt * 8 + 2 * t) =
                make_float2(o[dt].x[2 * i] * inv, o[dt].x[2 * i + 1] * inv);
        if (t == 0) lse[(size_t)bh * a.T + r[i]] = m[i] * a.scale + zs_logf(l[i]);
    }
}

/* ---- launchers ---------------------------------------------------------------------------- */

int zs_cu_flash_tc_eligible(int hs) {
    return hs == 16 || hs == 32 || hs == 64;
}

template <int HS>
static zs_status tc_fwd(cudaStream_t cs, float *out, float *lse, const float *q, const float *k,
                        const float *v, const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    dim3 grid((unsigned)((a.T + FA_TC_ROWS - 1) / FA_TC_ROWS), (unsigned)(a.B * a.NH));
    double units = tc_units_q(a.T) * a.B * a.NH; /* (16 rows x 64 keys) */
    /* per unit: S = Q K^T and O += P V, 2 x 16 x 64 x HS each; the softmax's max, fmaf, exp2
     * and sum 5 per score (the mask on edge blocks aside) plus the rescale, HS per row; per
     * row the finish */
    ZS_COST(units * (16.0 * 64.0 * 5.0 + 16.0 * HS) + (double)a.B * a.NH * a.T * (HS + 3.0),
            units * 4.0 * 16.0 * 64.0 * HS,
            4.0 * ((double)a.B * a.T * (a.NH * HS * 2.0 + a.NKV * HS * 2.0 + a.NH) +
                   (seg ? (double)a.B * a.T : 0.0)));
    ZS_LAUNCH(fa_tc_fwd_kernel<HS>, grid, FA_TC_THREADS, 0, cs, out, lse, q, k, v, seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_fwd_kernel);
fail:
    return st;
}

zs_status zs_cu_flash_tc_fwd(zs_stream_t *s, float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int NH, int NKV, int hs, int ldq,
                             int ldkv, const int32_t *seg) {
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    if ((size_t)B * NH * T == 0) return ZS_OK;
    a.vec = tc_aligned(q, a.ldq) && tc_aligned(k, a.ldkv) && tc_aligned(v, a.ldkv);
    switch (hs) {
    case 16:
        return tc_fwd<16>(cs, out, lse, q, k, v, seg, a);
    case 32:
        return tc_fwd<32>(cs, out, lse, q, k, v, seg, a);
    default:
        return tc_fwd<64>(cs, out, lse, q, k, v, seg, a);
    }
}

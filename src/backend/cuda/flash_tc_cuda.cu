/* The tensor-core attention's forward (flash_tc_cuda.h, docs/cuda.md "Kernels"): a block of
 * 8 warps per 256 query rows of one head (32 a warp, in two 16-row tiles), over the key blocks
 * in order, the online softmax in registers; and the launchers of both directions' eligibility
 * and the forward. */
#include "backend/cuda/flash_tc_cuda.h"

/* ---- forward ------------------------------------------------------------------------------ */

/* A forward warp takes FA_FWD_RT tiles of 16 query rows: each B fragment an ldmatrix brings
 * from the staged K or V block feeds FA_FWD_RT mma instead of one, so the block's shared-memory
 * reads per FLOP fall by that factor (shared memory bounded the 16-row warp: docs/cuda.md, "The
 * profiler"). A block of FA_TC_WARPS warps takes FA_FWD_ROWS = 256 rows. Each row's arithmetic
 * is the 16-row warp's, in the same order: the same bits. */
#define FA_FWD_RT 2
#define FA_FWD_ROWS (16 * FA_FWD_RT * FA_TC_WARPS)

/* The online softmax of one 16-row tile (rows row0..; this lane's r[0], r[1]) over one key
 * block's scores s: mask (edge blocks only), the rows' maxima over their 4 lanes, the rescale
 * of l and o by alpha = 2^((m_old - m_new) scale2), and s replaced by P. A row with no key yet
 * keeps m = -inf, and its 2^(s scale2 - ms) is taken with ms = 0 so that -inf gives 0. */
template <int HS>
static __device__ __forceinline__ void
tc_softmax_tile(zs_mma_c *s, float *m, float *l, zs_mma_c *o, const tc_view &a, const int32_t *seg,
                int b, int row0, const int *r, const int *lo, int j0, int t) {
    float mx[2] = {m[0], m[1]};
    if (!tc_block_full(a, seg, b, row0, j0)) tc_mask_rows(s, a, r, lo, j0, t);
    ZS_UNROLL
    for (int x = 0; x < 32; x++) {
        float v = s[x >> 2].x[x & 3];
        mx[(x & 3) >> 1] = v > mx[(x & 3) >> 1] ? v : mx[(x & 3) >> 1];
    }
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
}

/* One block an SM: 8 warps of 32 rows hold twice the 16-row warp's accumulators (255
 * registers a thread at head size 64, nothing spilled: ptxas -v for sm_90). The body is shared
 * by the fp32-out kernel and the bf16-out one. */
template <int HS, typename OT, typename QT>
static __device__ __forceinline__ void tc_fwd_rows(OT *out, float *lse, const QT *q, const QT *k,
                                                   const QT *v, const int32_t *seg,
                                                   const tc_view &a) {
    ZS_SHARED_ALIGNED(uint16_t, ks, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* K [key][dim] */
    ZS_SHARED_ALIGNED(uint16_t, vs, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* V [key][dim] */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bh = (int)blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / (a.NH / a.NKV);
    int q0 = (int)blockIdx.x * FA_FWD_ROWS, row0 = q0 + w * 16 * FA_FWD_RT;

    /* load: each tile's 16 query rows as A fragments; the running maximum of the raw scores,
     * and the sum of 2^((s - m) scale2) */
    int r[FA_FWD_RT][2], lo[FA_FWD_RT][2];
    zs_mma_a qa[FA_FWD_RT][HS / 16];
    float m[FA_FWD_RT][2], l[FA_FWD_RT][2];
    zs_mma_c o[FA_FWD_RT][HS / 8];
    ZS_UNROLL
    for (int rt = 0; rt < FA_FWD_RT; rt++) {
        for (int i = 0; i < 2; i++) {
            r[rt][i] = row0 + 16 * rt + g + 8 * i;
            lo[rt][i] = r[rt][i] < a.T ? zs_seg_lo(seg, (size_t)b * a.T + r[rt][i]) : 0;
            m[rt][i] = -INFINITY;
            l[rt][i] = 0.0f;
        }
        tc_load_a<HS>(qa[rt], q + tc_qrow(a, b, 0, h), a.ldq, row0 + 16 * rt, a.T, a.vec);
        ZS_UNROLL
        for (int dt = 0; dt < HS / 8; dt++)
            zs_mma_zero(o[rt][dt]);
    }

    /* document starts never decrease along a row, so row q0's block is the first any reads */
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + FA_FWD_ROWS - 1 < a.T - 1 ? q0 + FA_FWD_ROWS - 1 : a.T - 1;
    const QT *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    typename tc_reg<QT>::t kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block */
    tc_fetch<HS>(kr, kb, a.ldkv, first, a.T, a.vec);
    tc_fetch<HS>(vr, vb, a.ldkv, first, a.T, a.vec);
    for (int j0 = first; j0 <= last; j0 += ZS_FA_BK) {
        tc_kv_step<HS>(ks, vs, kr, vr, kb, vb, a, j0, last);

        /* a tile whose rows all precede the block (or lie past T) has nothing to add */
        bool act[FA_FWD_RT], any = false;
        ZS_UNROLL
        for (int rt = 0; rt < FA_FWD_RT; rt++) {
            int t0 = row0 + 16 * rt;
            act[rt] = t0 < a.T && j0 <= t0 + 15;
            any = any || act[rt];
        }
        if (!any) continue;

        /* MMA: scores S = Q K^T, 16 rows x 64 keys in 8 n-tiles a tile */
        zs_mma_c s[FA_FWD_RT][8];
        tc_mma_rows_rt<HS, FA_FWD_RT>(s, qa, act, ks);
        ZS_UNROLL
        for (int rt = 0; rt < FA_FWD_RT; rt++)
            if (act[rt])
                tc_softmax_tile<HS>(s[rt], m[rt], l[rt], o[rt], a, seg, b, row0 + 16 * rt, r[rt],
                                    lo[rt], j0, t);

        /* MMA: O += P V (P rounded to bf16 in registers) */
        tc_mma_p_rt<HS, FA_FWD_RT>(o, s, act, vs);
    }

    /* store: O / l and lse = m scale + log l, l summed over the row's 4 lanes */
    ZS_UNROLL
    for (int rt = 0; rt < FA_FWD_RT; rt++)
        for (int i = 0; i < 2; i++) {
            float lt = l[rt][i];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            bool in = r[rt][i] < a.T;
            tc_store_row<HS>(in ? out + tc_orow(a, b, r[rt][i], h) : out, o[rt], i, 1.0f / lt,
                             -0.0f, t, in);
            if (in && t == 0) lse[(size_t)bh * a.T + r[rt][i]] = m[rt][i] * a.scale + zs_logf(lt);
        }
}

/* (the kernel's name stays on the line of "__global__ void": emu_coverage.sh reads it) */
// clang-format off
template <int HS>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_fwd_kernel(float *out, float *lse,
        const float *q, const float *k, const float *v, const int32_t *seg, tc_view a) {
    // clang-format on
    tc_fwd_rows<HS>(out, lse, q, k, v, seg, a);
}

// clang-format off
template <int HS, typename QT>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_fwd16_kernel(zs_bf16 *out, float *lse,
        const QT *q, const QT *k, const QT *v, const int32_t *seg, tc_view a) {
    // clang-format on
    tc_fwd_rows<HS>(out, lse, q, k, v, seg, a);
}

/* ---- launchers ---------------------------------------------------------------------------- */

int zs_cu_flash_tc_eligible(int hs) {
    return hs == 16 || hs == 32 || hs == 64;
}

template <int HS, typename OT, typename QT>
static zs_status tc_fwd(cudaStream_t cs, OT *out, float *lse, const QT *q, const QT *k, const QT *v,
                        const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    dim3 grid((unsigned)((a.T + FA_FWD_ROWS - 1) / FA_FWD_ROWS), (unsigned)(a.B * a.NH));
    double units = tc_units_q(a.T) * a.B * a.NH; /* (16 rows x 64 keys) */
    /* per unit: S = Q K^T and O += P V, 2 x 16 x 64 x HS each; the softmax's max, fmaf, exp2
     * and sum 5 per score (the mask on edge blocks aside) plus the rescale, HS per row; per
     * row the finish */
    ZS_COST(units * (16.0 * 64.0 * 5.0 + 16.0 * HS) + (double)a.B * a.NH * a.T * (HS + 3.0),
            units * 4.0 * 16.0 * 64.0 * HS,
            sizeof(QT) * (double)a.B * a.T * (a.NH * HS + a.NKV * HS * 2.0) +
                4.0 * ((double)a.B * a.T * a.NH + (seg ? (double)a.B * a.T : 0.0)) +
                sizeof(OT) * (double)a.B * a.T * a.NH * HS);
    if (sizeof(OT) == sizeof(float)) { /* (fp32 q, k and v: zs_cu_flash_tc_fwd) */
        ZS_LAUNCH(fa_tc_fwd_kernel<HS>, grid, FA_TC_THREADS, 0, cs, (float *)out, lse,
                  (const float *)q, (const float *)k, (const float *)v, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_tc_fwd_kernel);
    } else {
        ZS_LAUNCH((fa_tc_fwd16_kernel<HS, QT>), grid, FA_TC_THREADS, 0, cs, (zs_bf16 *)out, lse, q,
                  k, v, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_tc_fwd16_kernel);
    }
fail:
    return st;
}

/* Both forwards on tensor cores (the callers send other head sizes to the fp32 kernels). */
template <typename OT, typename QT>
static zs_status tc_fwd_any(zs_stream_t *s, const char *op, OT *out, float *lse, const QT *q,
                            const QT *k, const QT *v, int B, int T, int NH, int NKV, int hs,
                            int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    ZS_CHECK(zs_flash_attention_check(op, B, T, NH, NKV, hs, ldq, ldkv));
    ZS_REQUIRE(out && lse && q && k && v, ZS_ERR_INVALID, "%s: NULL buffer", op);
    ZS_REQUIRE(((uintptr_t)out & 7) == 0, ZS_ERR_INVALID,
               "%s: out %p is not 8-byte aligned (the tensor-core kernel stores rows in 8-byte "
               "pieces)",
               op, (void *)out);
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
fail:
    return st;
}

zs_status zs_cu_flash_tc_fwd(zs_stream_t *s, float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int NH, int NKV, int hs, int ldq,
                             int ldkv, const int32_t *seg) {
    if (!zs_cu_flash_tc_eligible(hs))
        return zs_cu_flash_attention_fwd(s, out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg);
    return tc_fwd_any(s, "flash_attention_fwd", out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv,
                      seg);
}

zs_status zs_cu_flash_tc_fwd16(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                               const float *k, const float *v, int B, int T, int NH, int NKV,
                               int hs, int ldq, int ldkv, const int32_t *seg) {
    if (!zs_cu_flash_tc_eligible(hs))
        return zs_cu_flash_attention_fwd16(s, out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv, seg);
    return tc_fwd_any(s, "flash_attention_fwd16", out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv,
                      seg);
}

zs_status zs_cu_flash_tc_fwd16q(zs_stream_t *s, zs_bf16 *out, float *lse, const zs_bf16 *q,
                                const zs_bf16 *k, const zs_bf16 *v, int B, int T, int NH, int NKV,
                                int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(tc_qkv16_check("flash_attention_fwd16q", hs));
    return tc_fwd_any(s, "flash_attention_fwd16q", out, lse, q, k, v, B, T, NH, NKV, hs, ldq, ldkv,
                      seg);
fail:
    return st;
}

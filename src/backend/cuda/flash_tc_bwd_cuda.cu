/* The tensor-core attention's backward (flash_tc_cuda.h, docs/cuda.md "Kernels"): delta, then
 * dq (a block per 256 query rows over the key blocks in order) and dk, dv (a block per 128 keys
 * of a kv head over the group's query heads and blocks in order), without atomics. */
#include "backend/cuda/flash_tc_cuda.h"

/* ---- backward: delta, dq, dk and dv --------------------------------------------------------- */

/* delta = dO.O per row: a warp per row, lanes over the head's elements, the warp's butterfly. */
static __global__ void fa_tc_delta_kernel(float *delta, const float *dout, const float *out,
                                          tc_view a) {
    int lane = (int)threadIdx.x % 32;
    size_t rows = (size_t)a.B * a.NH * a.T;
    for (size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; idx < rows;
         idx += (size_t)gridDim.x * blockDim.x / 32) {
        int i = (int)(idx % (size_t)a.T);
        size_t bh = idx / (size_t)a.T;
        int b = (int)(bh / (size_t)a.NH), h = (int)(bh % (size_t)a.NH);
        size_t o = tc_orow(a, b, i, h);
        float acc = 0.0f;
        for (int e = lane; e < a.hs; e += 32)
            acc += dout[o + e] * out[o + e];
        acc = zs_cu_warp_sum(acc);
        if (lane == 0) delta[idx] = acc;
    }
}

/* A dq warp takes BQ_RT tiles of 16 query rows, as the forward's do (flash_tc_cuda.cu): each K
 * or V fragment an ldmatrix brings from the staged block feeds BQ_RT mma instead of one, so the
 * block's shared-memory reads per FLOP fall by that factor. To hold twice the accumulators in
 * registers, a warp takes each key block in parts of 8 BQ_NT keys (scores, mask, dS and dq +=
 * dS K per part); dq's k-steps still add in key order, so each row's arithmetic is the 16-row
 * warp's over whole blocks: the same bits. A block of FA_TC_WARPS warps takes BQ_ROWS = 256. */
#define BQ_RT 2
#define BQ_NT 2
#define BQ_ROWS (16 * BQ_RT * FA_TC_WARPS)

/* dq for a block of BQ_ROWS query rows of one head, over its key blocks in order:
 * S = Q K^T, P = 2^(S scale2 - lse log2 e), dP = dO V^T, dS = P (dP - delta), dq = scale dS K
 * (written once, as 0 + the sum: ops.h's bits of accumulating into zeros). One block an SM. */
/* (the kernel's name stays on the line of "__global__ void": emu_coverage.sh reads it) */
// clang-format off
template <int HS>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_bwd_q_kernel(float *dq,
        const float *dout, const float *q, const float *k, const float *v, const float *lse,
        const float *delta, const int32_t *seg, tc_view a) {
    // clang-format on
    ZS_SHARED_ALIGNED(uint16_t, ks, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* K [key][dim] */
    ZS_SHARED_ALIGNED(uint16_t, vs, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* V [key][dim] */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bh = (int)blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / (a.NH / a.NKV);
    int q0 = (int)blockIdx.x * BQ_ROWS, row0 = q0 + w * 16 * BQ_RT;
    int r[BQ_RT][2], lo[BQ_RT][2];
    float rl[BQ_RT][2], rd[BQ_RT][2]; /* the rows' lse (times log2 e) and delta */
    zs_mma_a qa[BQ_RT][HS / 16], da[BQ_RT][HS / 16];
    zs_mma_c acc[BQ_RT][HS / 8];
    ZS_UNROLL
    for (int rt = 0; rt < BQ_RT; rt++) {
        for (int i = 0; i < 2; i++) {
            r[rt][i] = row0 + 16 * rt + g + 8 * i;
            bool in = r[rt][i] < a.T;
            lo[rt][i] = in ? zs_seg_lo(seg, (size_t)b * a.T + r[rt][i]) : 0;
            rl[rt][i] = in ? lse[(size_t)bh * a.T + r[rt][i]] * FA_LOG2E : 0.0f;
            rd[rt][i] = in ? delta[(size_t)bh * a.T + r[rt][i]] : 0.0f;
        }
        tc_load_a<HS>(qa[rt], q + tc_qrow(a, b, 0, h), a.ldq, row0 + 16 * rt, a.T);
        tc_load_a<HS>(da[rt], dout + tc_orow(a, b, 0, h), (size_t)a.NH * a.hs, row0 + 16 * rt, a.T);
        ZS_UNROLL
        for (int dt = 0; dt < HS / 8; dt++)
            zs_mma_zero(acc[rt][dt]);
    }
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + BQ_ROWS - 1 < a.T - 1 ? q0 + BQ_ROWS - 1 : a.T - 1;
    const float *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    float4 kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block, in flight */
    tc_fetch<HS>(kr, kb, a.ldkv, first, a.T, a.vec);
    tc_fetch<HS>(vr, vb, a.ldkv, first, a.T, a.vec);
    for (int j0 = first; j0 <= last; j0 += ZS_FA_BK) {
        tc_kv_step<HS>(ks, vs, kr, vr, kb, vb, a, j0, last);
        /* a tile whose rows all precede the block (or lie past T) has nothing to add */
        bool act[BQ_RT], full[BQ_RT], any = false;
        ZS_UNROLL
        for (int rt = 0; rt < BQ_RT; rt++) {
            int t0 = row0 + 16 * rt;
            act[rt] = t0 < a.T && j0 <= t0 + 15;
            full[rt] = act[rt] && tc_block_full(a, seg, b, t0, j0);
            any = any || act[rt];
        }
        if (!any) continue;
        ZS_UNROLL
        for (int k0 = 0; k0 < FA_TC_TILE; k0 += 8 * BQ_NT) {
            const int off = k0 * (HS + FA_PAD);
            zs_mma_c s[BQ_RT][BQ_NT], dp[BQ_RT][BQ_NT];
            tc_mma_rows_rt<HS, BQ_RT, BQ_NT>(s, qa, act, ks + off);
            tc_mma_rows_rt<HS, BQ_RT, BQ_NT>(dp, da, act, vs + off);
            ZS_UNROLL
            for (int rt = 0; rt < BQ_RT; rt++) {
                if (!act[rt]) continue;
                if (!full[rt]) tc_mask_rows<BQ_NT>(s[rt], a, r[rt], lo[rt], j0 + k0, t);
                ZS_UNROLL
                for (int x = 0; x < 4 * BQ_NT; x++) {
                    int nt = x >> 2, e = x & 3, i = e >> 1;
                    float p = zs_cu_exp2(fmaf(s[rt][nt].x[e], a.scale2, -rl[rt][i]));
                    s[rt][nt].x[e] = p * (dp[rt][nt].x[e] - rd[rt][i]); /* dS */
                }
            }
            tc_mma_p_rt<HS, BQ_RT, BQ_NT>(acc, s, act, ks + off);
        }
    }
    ZS_UNROLL
    for (int rt = 0; rt < BQ_RT; rt++)
        for (int i = 0; i < 2; i++) {
            if (r[rt][i] >= a.T) continue;
            float *row = dq + tc_qrow(a, b, r[rt][i], h);
            for (int dt = 0; dt < HS / 8; dt++) {
                row[dt * 8 + 2 * t] = 0.0f + acc[rt][dt].x[2 * i] * a.scale;
                row[dt * 8 + 2 * t + 1] = 0.0f + acc[rt][dt].x[2 * i + 1] * a.scale;
            }
        }
}

/* Whether a warp's 16 keys key0.. are seen by every query of the block i0..i0+63: the block
 * starts at or after the last key, its last query's document starts at or before the first key
 * (the largest start of the block; slo holds T past T), and no key lies past T. */
static __device__ __forceinline__ bool tc_block_full_kv(const tc_view &a, const int *slo, int key0,
                                                        int i0) {
    return i0 >= key0 + 15 && key0 + 15 < a.T && slo[FA_TC_TILE - 1] <= key0;
}

/* The (head, query block) a dk/dv block visits after (h, i0): the next query block of the head
 * while one is below T and its queries can see the keys from j0 on (queries of later documents
 * cannot; starts never decrease), else the next head's first block, the one holding j0. */
static __device__ __forceinline__ void tc_kv_next(const tc_view &a, const int32_t *seg, int b,
                                                  int j0, int &h, int &i0) {
    i0 += ZS_FA_BK;
    if (i0 >= a.T || zs_seg_lo(seg, (size_t)b * a.T + i0) > j0 + FA_TC_ROWS - 1) {
        h++;
        i0 = j0;
    }
}

/* dk and dv for a block of 128 key rows of one kv head, over the group's query heads and, in
 * each, the query blocks that can see them, in order: S^T = K Q^T, P^T = 2^(S^T scale2 -
 * lse log2 e), dP^T = V dO^T, dS^T = P^T (dP^T - delta), dv = P^T dO, dk = scale dS^T Q (written
 * once, as dq). The next block's Q and dO (and their rows' lse, delta and document starts) load
 * while this one computes, as the key blocks of the forward do. */
template <int HS>
static __global__ void fa_tc_bwd_kv_kernel(float *dk, float *dv, const float *dout, const float *q,
                                           const float *k, const float *v, const float *lse,
                                           const float *delta, const int32_t *seg, tc_view a) {
    ZS_SHARED_ALIGNED(uint16_t, qs, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* Q [query][dim] */
    ZS_SHARED_ALIGNED(uint16_t, ds, FA_TC_TILE * (HS + FA_PAD),
                      FA_SMEM_ALIGN); /* dO [query][dim] */
    ZS_SHARED(float, sl, FA_TC_TILE); /* the queries' lse, times log2 e */
    ZS_SHARED(float, sd, FA_TC_TILE); /* and delta */
    ZS_SHARED(int, slo, FA_TC_TILE);  /* and document starts (T past T) */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bg = (int)blockIdx.y, b = bg / a.NKV, kvh = bg % a.NKV, rep = a.NH / a.NKV;
    int j0 = (int)blockIdx.x * FA_TC_ROWS, key0 = j0 + w * 16, c[2] = {key0 + g, key0 + g + 8};
    zs_mma_a ka[HS / 16], va[HS / 16];
    tc_load_a<HS>(ka, k + tc_kvrow(a, b, 0, kvh), a.ldkv, key0, a.T);
    tc_load_a<HS>(va, v + tc_kvrow(a, b, 0, kvh), a.ldkv, key0, a.T);
    zs_mma_c dka[HS / 8], dva[HS / 8];
    ZS_UNROLL
    for (int dt = 0; dt < HS / 8; dt++) {
        zs_mma_zero(dka[dt]);
        zs_mma_zero(dva[dt]);
    }
    size_t ldo = (size_t)a.NH * a.hs;
    int hend = (kvh + 1) * rep, h = kvh * rep, i0 = j0;
    /* the block in flight: Q and dO rows, and (threads below 64) one query's lse, delta, start */
    float4 qr[FA_TC_PER(HS)], dr[FA_TC_PER(HS)];
    float nl = 0.0f, nd = 0.0f;
    int nlo = a.T, e = (int)threadIdx.x;
    tc_fetch<HS>(qr, q + tc_qrow(a, b, 0, h), a.ldq, i0, a.T, a.vec);
    tc_fetch<HS>(dr, dout + tc_orow(a, b, 0, h), ldo, i0, a.T, a.vec);
    if (e < FA_TC_TILE && i0 + e < a.T) {
        size_t bh = (size_t)b * a.NH + h;
        nl = lse[bh * a.T + i0 + e] * FA_LOG2E;
        nd = delta[bh * a.T + i0 + e];
        nlo = zs_seg_lo(seg, (size_t)b * a.T + i0 + e);
    }
    while (h < hend) {
        __syncthreads();
        tc_put<HS>(qs, qr);
        tc_put<HS>(ds, dr);
        if (e < FA_TC_TILE) {
            sl[e] = nl;
            sd[e] = nd;
            slo[e] = nlo;
        }
        __syncthreads();
        int hn = h, in = i0;
        tc_kv_next(a, seg, b, j0, hn, in);
        if (hn < hend) {
            tc_fetch<HS>(qr, q + tc_qrow(a, b, 0, hn), a.ldq, in, a.T, a.vec);
            tc_fetch<HS>(dr, dout + tc_orow(a, b, 0, hn), ldo, in, a.T, a.vec);
            nl = nd = 0.0f;
            nlo = a.T;
            if (e < FA_TC_TILE && in + e < a.T) {
                size_t bh = (size_t)b * a.NH + hn;
                nl = lse[bh * a.T + in + e] * FA_LOG2E;
                nd = delta[bh * a.T + in + e];
                nlo = zs_seg_lo(seg, (size_t)b * a.T + in + e);
            }
        }
        /* a warp whose keys all follow the block's queries (or lie past T) adds nothing */
        if (key0 < a.T && i0 + FA_TC_TILE - 1 >= key0) {
            zs_mma_c s[8], dp[8];
            tc_mma_rows<HS>(s, ka, qs);
            tc_mma_rows<HS>(dp, va, ds);
            if (!tc_block_full_kv(a, slo, key0, i0)) {
                ZS_UNROLL
                for (int y = 0; y < 32; y++) {
                    int nt = y >> 2, x = y & 3;
                    int kr = c[x >> 1], qi = nt * 8 + 2 * t + (x & 1), i = i0 + qi;
                    bool ok = i >= kr && slo[qi] <= kr && i < a.T && kr < a.T;
                    s[nt].x[x] = ok ? s[nt].x[x] : -INFINITY;
                }
            }
            ZS_UNROLL
            for (int y = 0; y < 32; y++) {
                int nt = y >> 2, x = y & 3, qi = nt * 8 + 2 * t + (x & 1);
                float p = zs_cu_exp2(fmaf(s[nt].x[x], a.scale2, -sl[qi]));
                s[nt].x[x] = p;                           /* P^T */
                dp[nt].x[x] = p * (dp[nt].x[x] - sd[qi]); /* dS^T */
            }
            tc_mma_p<HS>(dva, s, ds);
            tc_mma_p<HS>(dka, dp, qs);
        }
        h = hn;
        i0 = in;
    }
    for (int i = 0; i < 2; i++) {
        if (c[i] >= a.T) continue;
        size_t off = tc_kvrow(a, b, c[i], kvh);
        for (int dt = 0; dt < HS / 8; dt++)
            for (int x = 0; x < 2; x++) {
                dk[off + dt * 8 + 2 * t + x] = 0.0f + dka[dt].x[2 * i + x] * a.scale;
                dv[off + dt * 8 + 2 * t + x] = 0.0f + dva[dt].x[2 * i + x];
            }
    }
}

/* ---- launcher ----------------------------------------------------------------------------- */

template <int HS>
static zs_status tc_bwd(cudaStream_t cs, float *dq, float *dk, float *dv, float *delta,
                        const float *dout, const float *q, const float *k, const float *v,
                        const float *out, const float *lse, const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T;
    dim3 gq((unsigned)((a.T + BQ_ROWS - 1) / BQ_ROWS), (unsigned)(a.B * a.NH));
    dim3 gkv((unsigned)((a.T + FA_TC_ROWS - 1) / FA_TC_ROWS), (unsigned)(a.B * a.NKV));
    double uq = tc_units_q(a.T) * a.B * a.NH, ukv = tc_units_kv(a.T) * a.B * a.NH;
    double qe = (double)a.B * a.T * a.NH * HS, kve = (double)a.B * a.T * a.NKV * HS;
    double sege = seg ? (double)a.B * a.T : 0.0;
    ZS_COST(rows * 2.0 * HS, 0, 4.0 * (2.0 * qe + (double)rows));
    ZS_LAUNCH(fa_tc_delta_kernel, zs_cu_blocks(rows * 32), ZS_CU_THREADS, 0, cs, delta, dout, out,
              a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_delta_kernel);
    /* per unit: S, dP and dq, 2 x 16 x 64 x HS each; p (fmaf, exp2) and dS 6 per score */
    ZS_COST(uq * 16.0 * 64.0 * 6.0 + qe * 2.0, uq * 6.0 * 16.0 * 64.0 * HS,
            4.0 * (3.0 * qe + 2.0 * kve + 2.0 * (double)rows + sege)); /* dq written */
    ZS_LAUNCH(fa_tc_bwd_q_kernel<HS>, gq, FA_TC_THREADS, 0, cs, dq, dout, q, k, v, lse, delta, seg,
              a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_q_kernel);
    /* per unit: S^T, dP^T, dv and dk, 2 x 16 x 64 x HS each */
    ZS_COST(ukv * 16.0 * 64.0 * 6.0 + kve * 3.0, ukv * 8.0 * 16.0 * 64.0 * HS,
            4.0 * (2.0 * qe + 4.0 * kve + 2.0 * (double)rows + sege)); /* dk, dv written */
    ZS_LAUNCH(fa_tc_bwd_kv_kernel<HS>, gkv, FA_TC_THREADS, 0, cs, dk, dv, dout, q, k, v, lse, delta,
              seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_kv_kernel);
fail:
    return st;
}

zs_status zs_cu_flash_tc_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                             const float *dout, const float *q, const float *k, const float *v,
                             const float *out, const float *lse, int B, int T, int NH, int NKV,
                             int hs, int ldq, int ldkv, const int32_t *seg) {
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    if ((size_t)B * NH * T == 0) return ZS_OK;
    a.vec = tc_aligned(q, a.ldq) && tc_aligned(k, a.ldkv) && tc_aligned(v, a.ldkv) &&
            tc_aligned(dout, (size_t)NH * hs);
    switch (hs) {
    case 16:
        return tc_bwd<16>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    case 32:
        return tc_bwd<32>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    default:
        return tc_bwd<64>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    }
}

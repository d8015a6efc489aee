/* The tensor-core attention's backward (flash_tc_cuda.h, docs/cuda.md "Kernels"): delta, then
 * dq (a block per 256 query rows over the key blocks in order) and dk, dv (a block per 128 keys
 * of a kv head over the group's query heads and blocks in order, or for long sequences one
 * kernel for each, a block per 256 keys), without atomics. */
#include "backend/cuda/flash_tc_cuda.h"

/* ---- backward: delta, dq, dk and dv --------------------------------------------------------- */

/* delta = dO.O per row: a warp per row, lanes over the head's elements, the warp's butterfly;
 * dO and out fp32, or bf16 (out: flash_attention_bwd16; dO too: bwd16q) widened as read. */
template <typename DT, typename OT>
static __device__ __forceinline__ void tc_delta_rows(float *delta, const DT *dout, const OT *out,
                                                     const tc_view &a) {
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
            acc += zs_cu_widen(dout[o + e]) * zs_cu_widen(out[o + e]);
        acc = zs_cu_warp_sum(acc);
        if (lane == 0) delta[idx] = acc;
    }
}

static __global__ void fa_tc_delta_kernel(float *delta, const float *dout, const float *out,
                                          tc_view a) {
    tc_delta_rows(delta, dout, out, a);
}

template <typename DT>
static __global__ void fa_tc_delta16_kernel(float *delta, const DT *dout, const zs_bf16 *out,
                                            tc_view a) {
    tc_delta_rows(delta, dout, out, a);
}

/* A gradient row from a lane's fragments, 0 + each times scale (ops.h's bits of accumulating
 * into zeros): tc_store_row's 8-byte stores where the rows are 8-byte aligned (wide), else an
 * element a store. Every lane calls it (the shuffle); a row past T (in false) stores nothing. */
template <int HS, typename GT>
static __device__ __forceinline__ void tc_store_grad(GT *row, const zs_mma_c *o, int i, float scale,
                                                     int t, bool in, bool wide) {
    if (wide) {
        tc_store_row<HS>(row, o, i, scale, 0.0f, t, in);
        return;
    }
    if (!in) return;
    for (int dt = 0; dt < HS / 8; dt++) {
        zs_cu_put(row + dt * 8 + 2 * t, 0.0f + o[dt].x[2 * i] * scale);
        zs_cu_put(row + dt * 8 + 2 * t + 1, 0.0f + o[dt].x[2 * i + 1] * scale);
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
template <int HS, typename GT, typename QT>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_bwd_q_kernel(GT *dq,
        const QT *dout, const QT *q, const QT *k, const QT *v, const float *lse,
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
        tc_load_a<HS>(qa[rt], q + tc_qrow(a, b, 0, h), a.ldq, row0 + 16 * rt, a.T, a.vec);
        tc_load_a<HS>(da[rt], dout + tc_orow(a, b, 0, h), (size_t)a.NH * a.hs, row0 + 16 * rt, a.T,
                      a.vec);
        ZS_UNROLL
        for (int dt = 0; dt < HS / 8; dt++)
            zs_mma_zero(acc[rt][dt]);
    }
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + BQ_ROWS - 1 < a.T - 1 ? q0 + BQ_ROWS - 1 : a.T - 1;
    const QT *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    typename tc_reg<QT>::t kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block */
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
            bool in = r[rt][i] < a.T;
            tc_store_grad<HS>(in ? dq + tc_qrow(a, b, r[rt][i], h) : dq, acc[rt], i, a.scale, t, in,
                              a.wide);
        }
}

/* dk and dv, key-parallel: a block of 8 warps takes 16 RT keys a warp of one kv head and walks
 * the group's query heads and, in each, the query blocks that can see its keys, in order:
 * S^T = K Q^T, P^T = 2^(S^T scale2 - lse log2 e), dv = P^T dO; dP^T = V dO^T, dS^T = P^T (dP^T -
 * delta), dk = scale dS^T Q (each written once, as dq). Two forms (tc_kv_split chooses):
 *  - one kernel for both (fa_tc_bwd_kv), a tile of 16 keys a warp (RT = 1): 4 products per
 *    (query block, key tile), each B fragment an ldmatrix brings from the staged Q or dO block
 *    feeding one mma; K's and V's fragments and both accumulators fill the registers;
 *  - two kernels, dv's (fa_tc_bwd_dv: S^T and dv) and dk's (fa_tc_bwd_dk: S^T, dP^T and dk),
 *    two tiles a warp (RT = 2, as dq's warp): each fragment feeds both tiles' mma, so the
 *    shared-memory reads per product halve, for 5 products where one kernel took 4, and Q and
 *    dO read twice from memory.
 * A warp takes each query block in parts of 8 KV_NT queries (scores, mask, P^T, dS^T, then
 * dv += P^T dO and dk += dS^T Q per part); dk's and dv's k-steps add in query order, 16 queries
 * at a time, in every form: the same bits. The next block's Q and dO (and their rows' lse,
 * delta and document starts) load while this one computes, as the key blocks of the forward
 * do. One block an SM. */
#define KV_NT 2
#define KV_ROWS(RT) (16 * FA_TC_WARPS * (RT))

/* Whether a tile's 16 keys key0.. are seen by every query of the block i0..i0+63: the block
 * starts at or after the last key, its last query's document starts at or before the first key
 * (the largest start of the block; slo holds T past T), and no key lies past T. */
static __device__ __forceinline__ bool tc_block_full_kv(const tc_view &a, const int *slo, int key0,
                                                        int i0) {
    return i0 >= key0 + 15 && key0 + 15 < a.T && slo[FA_TC_TILE - 1] <= key0;
}

/* The (head, query block) a dk/dv block of keys j0..jl visits after (h, i0): the next query
 * block of the head while one is below T and its queries can see the keys (queries of later
 * documents cannot; starts never decrease), else the next head's first block, the one holding
 * j0. */
static __device__ __forceinline__ void tc_kv_next(const tc_view &a, const int32_t *seg, int b,
                                                  int j0, int jl, int &h, int &i0) {
    i0 += ZS_FA_BK;
    if (i0 >= a.T || zs_seg_lo(seg, (size_t)b * a.T + i0) > jl) {
        h++;
        i0 = j0;
    }
}

/* The scores a key-parallel tile may not use set to -inf: this lane's keys kr[0], kr[1] (g and
 * g + 8 of the tile) against queries i0 + q0 + 8 nt + 2 t (+1) of KV_NT n-tiles: queries before
 * the key, queries whose document starts after it (slo, indexed in the block), and either past
 * T. For the blocks tc_block_full_kv is false of. */
static __device__ __forceinline__ void tc_mask_keys(zs_mma_c *s, const tc_view &a, const int *kr,
                                                    const int *slo, int i0, int q0, int t) {
    ZS_UNROLL
    for (int y = 0; y < 4 * KV_NT; y++) {
        int nt = y >> 2, x = y & 3, c = kr[x >> 1], qi = q0 + nt * 8 + 2 * t + (x & 1), i = i0 + qi;
        bool ok = i >= c && slo[qi] <= c && i < a.T && c < a.T;
        s[nt].x[x] = ok ? s[nt].x[x] : -INFINITY;
    }
}

/* The key-parallel body: dk where DK, dv where DV, RT tiles of 16 keys a warp. */
template <int HS, int RT, bool DK, bool DV, typename GT, typename QT>
static __device__ __forceinline__ void
tc_bwd_kv(GT *dk, GT *dv, const QT *dout, const QT *q, const QT *k, const QT *v, const float *lse,
          const float *delta, const int32_t *seg, const tc_view &a) {
    ZS_SHARED_ALIGNED(uint16_t, qs, FA_TC_TILE * (HS + FA_PAD), FA_SMEM_ALIGN); /* Q [query][dim] */
    ZS_SHARED_ALIGNED(uint16_t, ds, FA_TC_TILE * (HS + FA_PAD),
                      FA_SMEM_ALIGN);               /* dO [query][dim] */
    ZS_SHARED(float, sl, FA_TC_TILE);               /* the queries' lse, times log2 e */
    ZS_SHARED(float, sd, FA_TC_TILE);               /* and delta (dk) */
    ZS_SHARED(int, slo, FA_TC_TILE);                /* and document starts (T past T) */
    const int DKT = DK ? RT : 1, DVT = DV ? RT : 1; /* array extents where unused */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bg = (int)blockIdx.y, b = bg / a.NKV, kvh = bg % a.NKV, rep = a.NH / a.NKV;
    int j0 = (int)blockIdx.x * KV_ROWS(RT), key0 = j0 + w * 16 * RT;
    int c[RT][2];
    zs_mma_a ka[RT][HS / 16], va[DKT][HS / 16]; /* K's fragments, and V's for dk */
    zs_mma_c dka[DKT][HS / 8], dva[DVT][HS / 8];
    ZS_UNROLL
    for (int rt = 0; rt < RT; rt++) {
        c[rt][0] = key0 + 16 * rt + g;
        c[rt][1] = key0 + 16 * rt + g + 8;
        tc_load_a<HS>(ka[rt], k + tc_kvrow(a, b, 0, kvh), a.ldkv, key0 + 16 * rt, a.T, a.vec);
        if (DK)
            tc_load_a<HS>(va[rt], v + tc_kvrow(a, b, 0, kvh), a.ldkv, key0 + 16 * rt, a.T, a.vec);
        ZS_UNROLL
        for (int dt = 0; dt < HS / 8; dt++) {
            if (DK) zs_mma_zero(dka[rt][dt]);
            if (DV) zs_mma_zero(dva[rt][dt]);
        }
    }
    size_t ldo = (size_t)a.NH * a.hs;
    int hend = (kvh + 1) * rep, h = kvh * rep, i0 = j0;
    /* the block in flight: Q and dO rows, and (threads below 64) one query's lse, delta, start */
    typename tc_reg<QT>::t qr[FA_TC_PER(HS)];
    typename tc_reg<QT>::t dr[FA_TC_PER(HS)];
    float nl = 0.0f, nd = 0.0f;
    int nlo = a.T, e = (int)threadIdx.x;
    tc_fetch<HS>(qr, q + tc_qrow(a, b, 0, h), a.ldq, i0, a.T, a.vec);
    tc_fetch<HS>(dr, dout + tc_orow(a, b, 0, h), ldo, i0, a.T, a.vec);
    if (e < FA_TC_TILE && i0 + e < a.T) {
        size_t bh = (size_t)b * a.NH + h;
        nl = lse[bh * a.T + i0 + e] * FA_LOG2E;
        if (DK) nd = delta[bh * a.T + i0 + e];
        nlo = zs_seg_lo(seg, (size_t)b * a.T + i0 + e);
    }
    while (h < hend) {
        __syncthreads();
        tc_put<HS>(qs, qr);
        tc_put<HS>(ds, dr);
        if (e < FA_TC_TILE) {
            sl[e] = nl;
            if (DK) sd[e] = nd;
            slo[e] = nlo;
        }
        __syncthreads();
        int hn = h, in = i0;
        tc_kv_next(a, seg, b, j0, j0 + KV_ROWS(RT) - 1, hn, in);
        if (hn < hend) {
            tc_fetch<HS>(qr, q + tc_qrow(a, b, 0, hn), a.ldq, in, a.T, a.vec);
            tc_fetch<HS>(dr, dout + tc_orow(a, b, 0, hn), ldo, in, a.T, a.vec);
            nl = nd = 0.0f;
            nlo = a.T;
            if (e < FA_TC_TILE && in + e < a.T) {
                size_t bh = (size_t)b * a.NH + hn;
                nl = lse[bh * a.T + in + e] * FA_LOG2E;
                if (DK) nd = delta[bh * a.T + in + e];
                nlo = zs_seg_lo(seg, (size_t)b * a.T + in + e);
            }
        }
        /* a tile whose keys all follow the block's queries (or lie past T) adds nothing */
        bool act[RT], full[RT], any = false;
        ZS_UNROLL
        for (int rt = 0; rt < RT; rt++) {
            int k0 = key0 + 16 * rt;
            act[rt] = k0 < a.T && i0 + FA_TC_TILE - 1 >= k0;
            full[rt] = act[rt] && tc_block_full_kv(a, slo, k0, i0);
            any = any || act[rt];
        }
        if (any) {
            ZS_UNROLL
            for (int q0 = 0; q0 < FA_TC_TILE; q0 += 8 * KV_NT) {
                const int off = q0 * (HS + FA_PAD);
                zs_mma_c s[RT][KV_NT], dp[DKT][KV_NT];
                tc_mma_rows_rt<HS, RT, KV_NT>(s, ka, act, qs + off);
                if (DK) tc_mma_rows_rt<HS, RT, KV_NT>(dp, va, act, ds + off);
                /* this lane's queries' lse and delta, read once for the warp's tiles */
                float ql[2 * KV_NT], qd[2 * KV_NT];
                ZS_UNROLL
                for (int z = 0; z < 2 * KV_NT; z++) {
                    int qi = q0 + (z >> 1) * 8 + 2 * t + (z & 1);
                    ql[z] = sl[qi];
                    qd[z] = DK ? sd[qi] : 0.0f;
                }
                ZS_UNROLL
                for (int rt = 0; rt < RT; rt++) {
                    if (!act[rt]) continue;
                    if (!full[rt]) tc_mask_keys(s[rt], a, c[rt], slo, i0, q0, t);
                    ZS_UNROLL
                    for (int y = 0; y < 4 * KV_NT; y++) {
                        int nt = y >> 2, x = y & 3, z = nt * 2 + (x & 1);
                        float p = zs_cu_exp2(fmaf(s[rt][nt].x[x], a.scale2, -ql[z]));
                        s[rt][nt].x[x] = p;                                      /* P^T */
                        if (DK) dp[rt][nt].x[x] = p * (dp[rt][nt].x[x] - qd[z]); /* dS^T */
                    }
                }
                if (DV) tc_mma_p_rt<HS, RT, KV_NT>(dva, s, act, ds + off);
                if (DK) tc_mma_p_rt<HS, RT, KV_NT>(dka, dp, act, qs + off);
            }
        }
        h = hn;
        i0 = in;
    }
    ZS_UNROLL
    for (int rt = 0; rt < RT; rt++)
        for (int i = 0; i < 2; i++) {
            bool in = c[rt][i] < a.T;
            size_t off = in ? tc_kvrow(a, b, c[rt][i], kvh) : 0;
            if (DK) tc_store_grad<HS>(dk + off, dka[rt], i, a.scale, t, in, a.wide);
            if (DV) tc_store_grad<HS>(dv + off, dva[rt], i, 1.0f, t, in, a.wide);
        }
}

/* The three kernels (the names stay on the lines of "__global__ void": emu_coverage.sh reads
 * them): both gradients on one tile a warp, or each on two. */
// clang-format off
template <int HS, typename GT, typename QT>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_bwd_kv_kernel(GT *dk, GT *dv,
        const QT *dout, const QT *q, const QT *k, const QT *v, const float *lse,
        const float *delta, const int32_t *seg, tc_view a) {
    tc_bwd_kv<HS, 1, true, true>(dk, dv, dout, q, k, v, lse, delta, seg, a);
}
template <int HS, typename GT, typename QT>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_bwd_dk_kernel(GT *dk,
        const QT *dout, const QT *q, const QT *k, const QT *v, const float *lse,
        const float *delta, const int32_t *seg, tc_view a) {
    tc_bwd_kv<HS, 2, true, false>(dk, (GT *)NULL, dout, q, k, v, lse, delta, seg, a);
}
template <int HS, typename GT, typename QT>
static __global__ void ZS_BOUNDS(FA_TC_THREADS, 1) fa_tc_bwd_dv_kernel(GT *dv,
        const QT *dout, const QT *q, const QT *k, const float *lse, const int32_t *seg,
        tc_view a) {
    tc_bwd_kv<HS, 2, false, true>((GT *)NULL, dv, dout, q, k, (const QT *)NULL, lse, NULL, seg, a);
}
// clang-format on

/* ---- launcher ----------------------------------------------------------------------------- */

/* Whether dk and dv take their two kernels: where the queries a key block meets are many (T of
 * 1024 and more), the fused kernel is bound by shared memory and the two by the tensor cores
 * or L2; below, the second reading of Q and dO from memory costs more than that saves.
 * Predicted for one H100 (docs/cuda.md "Kernels", head size 64, gpt2-124m's heads): at T = 512
 * the fused kernel takes 31% less time than the two, at 1024 the two 16% less, at 2048 40% less
 * (38% at LLaMA-1B's shape at 4096). */
static bool tc_kv_split(const tc_view &a) {
    return a.T >= ZS_FA_TC_KV_SPLIT_T;
}

/* delta's launch (priced at the kernels' HS): dO and out both fp32, or out bf16 with dO fp32 or
 * bf16 (bwd16q). */
template <int HS>
static zs_status tc_delta(cudaStream_t cs, float *delta, const float *dout, const float *out,
                          const tc_view &a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T;
    ZS_COST(2.0 * HS * rows, 0, 4.0 * (2.0 * HS + 1.0) * rows);
    ZS_LAUNCH(fa_tc_delta_kernel, zs_cu_blocks(rows * 32), ZS_CU_THREADS, 0, cs, delta, dout, out,
              a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_delta_kernel);
fail:
    return st;
}

template <int HS, typename DT>
static zs_status tc_delta(cudaStream_t cs, float *delta, const DT *dout, const zs_bf16 *out,
                          const tc_view &a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T;
    ZS_COST(2.0 * HS * rows, 0, ((sizeof(DT) + sizeof(zs_bf16)) * HS + 4.0) * rows);
    ZS_LAUNCH((fa_tc_delta16_kernel<DT>), zs_cu_blocks(rows * 32), ZS_CU_THREADS, 0, cs, delta,
              dout, out, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_delta16_kernel);
fail:
    return st;
}

/* dq, dk and dv (GT) fp32, or bf16 (flash_attention_bwd16g), each written once. */
template <int HS, typename OT, typename GT, typename QT>
static zs_status tc_bwd(cudaStream_t cs, GT *dq, GT *dk, GT *dv, float *delta, const QT *dout,
                        const QT *q, const QT *k, const QT *v, const OT *out, const float *lse,
                        const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    dim3 gq((unsigned)((a.T + BQ_ROWS - 1) / BQ_ROWS), (unsigned)(a.B * a.NH));
    double uq = tc_units_q(a.T) * a.B * a.NH, ukv = tc_units_kv(a.T) * a.B * a.NH;
    double qe = (double)a.B * a.T * a.NH * HS, kve = (double)a.B * a.T * a.NKV * HS;
    double sege = seg ? (double)a.B * a.T : 0.0, rows = qe / HS; /* delta and lse rows */
    const double qb = sizeof(QT); /* bytes of a q, k, v or dO element */
    bool split = tc_kv_split(a);
    int kvr = KV_ROWS(split ? 2 : 1);
    dim3 gkv((unsigned)((a.T + kvr - 1) / kvr), (unsigned)(a.B * a.NKV));
    ZS_CHECK(tc_delta<HS>(cs, delta, dout, out, a));
    /* per unit: S, dP and dq, 2 x 16 x 64 x HS each; p (fmaf, exp2) and dS 6 per score */
    ZS_COST(uq * 16.0 * 64.0 * 6.0 + qe * 2.0, uq * 6.0 * 16.0 * 64.0 * HS,
            qb * (2.0 * qe + 2.0 * kve) + 4.0 * (2.0 * rows + sege) + sizeof(GT) * qe);
    ZS_LAUNCH((fa_tc_bwd_q_kernel<HS, GT, QT>), gq, FA_TC_THREADS, 0, cs, dq, dout, q, k, v, lse,
              delta, seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_q_kernel);
    if (!split) {
        /* per unit: S^T, dP^T, dv and dk, 2 x 16 x 64 x HS each */
        ZS_COST(ukv * 16.0 * 64.0 * 6.0 + kve * 3.0, ukv * 8.0 * 16.0 * 64.0 * HS,
                qb * (2.0 * qe + 2.0 * kve) + 4.0 * (2.0 * rows + sege) + 2.0 * sizeof(GT) * kve);
        ZS_LAUNCH((fa_tc_bwd_kv_kernel<HS, GT, QT>), gkv, FA_TC_THREADS, 0, cs, dk, dv, dout, q, k,
                  v, lse, delta, seg, a);
        ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_kv_kernel);
        return ZS_OK;
    }
    /* per unit: S^T and dv; p (fmaf, exp2) 4 per score */
    ZS_COST(ukv * 16.0 * 64.0 * 4.0 + kve, ukv * 4.0 * 16.0 * 64.0 * HS,
            qb * (2.0 * qe + kve) + 4.0 * (rows + sege) + sizeof(GT) * kve);
    ZS_LAUNCH((fa_tc_bwd_dv_kernel<HS, GT, QT>), gkv, FA_TC_THREADS, 0, cs, dv, dout, q, k, lse,
              seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_dv_kernel);
    /* per unit: S^T, dP^T and dk; p and dS 6 per score */
    ZS_COST(ukv * 16.0 * 64.0 * 6.0 + kve * 2.0, ukv * 6.0 * 16.0 * 64.0 * HS,
            qb * (2.0 * qe + 2.0 * kve) + 4.0 * (2.0 * rows + sege) + sizeof(GT) * kve);
    ZS_LAUNCH((fa_tc_bwd_dk_kernel<HS, GT, QT>), gkv, FA_TC_THREADS, 0, cs, dk, dout, q, k, v, lse,
              delta, seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_dk_kernel);
fail:
    return st;
}

template <typename OT, typename GT, typename QT>
static zs_status tc_bwd_any(zs_stream_t *s, const char *op, GT *dq, GT *dk, GT *dv, float *delta,
                            const QT *dout, const QT *q, const QT *k, const QT *v, const OT *out,
                            const float *lse, int B, int T, int NH, int NKV, int hs, int ldq,
                            int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    ZS_CHECK(zs_flash_attention_check(op, B, T, NH, NKV, hs, ldq, ldkv));
    ZS_REQUIRE(dq && dk && dv && delta && dout && q && k && v && out && lse, ZS_ERR_INVALID,
               "%s: NULL buffer", op);
    if ((size_t)B * NH * T == 0) return ZS_OK;
    a.vec = tc_aligned(q, a.ldq) && tc_aligned(k, a.ldkv) && tc_aligned(v, a.ldkv) &&
            tc_aligned(dout, (size_t)NH * hs);
    a.wide = ((uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dv) % 8 == 0 &&
             a.ldq * sizeof(GT) % 8 == 0 && a.ldkv * sizeof(GT) % 8 == 0;
    switch (hs) {
    case 16:
        return tc_bwd<16>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    case 32:
        return tc_bwd<32>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    default:
        return tc_bwd<64>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    }
fail:
    return st;
}

zs_status zs_cu_flash_tc_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                             const float *dout, const float *q, const float *k, const float *v,
                             const float *out, const float *lse, int B, int T, int NH, int NKV,
                             int hs, int ldq, int ldkv, const int32_t *seg) {
    if (!zs_cu_flash_tc_eligible(hs))
        return zs_cu_flash_attention_bwd(s, dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                                         NKV, hs, ldq, ldkv, seg);
    return tc_bwd_any(s, "flash_attention_bwd", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T,
                      NH, NKV, hs, ldq, ldkv, seg);
}

zs_status zs_cu_flash_tc_bwd16(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                               const float *dout, const float *q, const float *k, const float *v,
                               const zs_bf16 *out, const float *lse, int B, int T, int NH, int NKV,
                               int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    if (!zs_cu_flash_tc_eligible(hs))
        return zs_cu_flash_attention_bwd16(s, dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                                           NKV, hs, ldq, ldkv, seg);
    ZS_CHECK(zs_flash_attention_check16("flash_attention_bwd16", B, T, NH, NKV, hs, ldq, ldkv));
    return tc_bwd_any(s, "flash_attention_bwd16", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T,
                      NH, NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

zs_status zs_cu_flash_tc_bwd16g(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv, float *delta,
                                const float *dout, const float *q, const float *k, const float *v,
                                const zs_bf16 *out, const float *lse, int B, int T, int NH, int NKV,
                                int hs, int ldq, int ldkv, const int32_t *seg) {
    zs_status st = ZS_OK;
    if (!zs_cu_flash_tc_eligible(hs))
        return zs_cu_flash_attention_bwd16g(s, dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH,
                                            NKV, hs, ldq, ldkv, seg);
    ZS_CHECK(zs_flash_attention_check16("flash_attention_bwd16g", B, T, NH, NKV, hs, ldq, ldkv));
    return tc_bwd_any(s, "flash_attention_bwd16g", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T,
                      NH, NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

zs_status zs_cu_flash_tc_bwd16q(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv, float *delta,
                                const zs_bf16 *dout, const zs_bf16 *q, const zs_bf16 *k,
                                const zs_bf16 *v, const zs_bf16 *out, const float *lse, int B,
                                int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                const int32_t *seg) {
    zs_status st = ZS_OK;
    ZS_CHECK(tc_qkv16_check("flash_attention_bwd16q", hs));
    return tc_bwd_any(s, "flash_attention_bwd16q", dq, dk, dv, delta, dout, q, k, v, out, lse, B, T,
                      NH, NKV, hs, ldq, ldkv, seg);
fail:
    return st;
}

/* Causal attention on tensor cores, FlashAttention-2 style, for the bf16 table (--dtype bf16;
 * docs/cuda.md "Kernels"): the ops flash_attention_fwd/bwd with the contract of ops.h, their
 * inputs rounded to bf16 for the products (Q, K, V, dO, and the probabilities P and score
 * gradients dS between products), every product accumulated in fp32 by mma.sync m16n8k16
 * (mma_cuda.h), the softmax in fp32. The fp32 table keeps flash_cuda.cu's kernels, bitwise
 * the CPU's.
 *
 * Tiles: a block of 8 warps takes 128 rows (query rows forward and for dq, key rows for dk/dv),
 * 16 per warp, against key (or query) blocks of ZS_FA_BK = 64 staged in shared memory, the
 * CPU's blocks: a row's first block is the one holding its document's start, as on the CPU,
 * and the online softmax rescales at the same block boundaries. 128 rows share each staged
 * block (half the re-reads of 64); a warp whose 16 rows the causal mask leaves nothing of in a
 * block skips it. Blocks are staged in shared memory as bf16, rows
 * padded by FA_PAD elements so that the fragment loads of a warp hit 32 different banks; Q
 * (forward, dq) or K and V (dk/dv) stay in registers as A fragments; a product's fp32 result
 * becomes the next product's A fragment in registers (mma_cuda.h).
 *
 * Determinism without atomics: dq has its own kernel (a block per 128 query rows, looping over
 * key blocks in order), dk and dv theirs (a block per 128 keys of a kv head, looping over the
 * group's query heads and their query blocks in order), at the price of recomputing the scores
 * and dP = dO V^T in both (18 hs FLOPs per (query, key) pair in all, against FlashAttention-2's
 * 14 hs with atomic dq). Head sizes 16, 32 and 64 (the shared tiles of the dk/dv kernel fill 37
 * KiB at 64); others take flash_cuda.cu's kernels.
 * ZS_COST: 1 FLOP per + - * / and sqrtf/expf/zs_expf/logf, else 0; tensor FLOPs 2 m n k per
 * product. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/mma_cuda.h"
#include "backend/kernels/flash.h"

#define FA_TC_WARPS 8                 /* a block's warps, 16 rows each (an mma's m) */
#define FA_TC_ROWS (16 * FA_TC_WARPS) /* a block's rows: 128 */
#define FA_TC_THREADS (32 * FA_TC_WARPS)
#define FA_TC_TILE ZS_FA_BK /* the rows of a staged (key or query) block: 64 */
#define FA_PAD 8            /* bf16 elements of padding per shared row (16 bytes) */
#define FA_TC_MAX_HS 64

/* One call's strided views, as flash_cuda.cu's. */
typedef struct tc_view {
    int B, T, NH, NKV, hs;
    size_t ldq, ldkv;
    float scale;
} tc_view;

static __device__ __forceinline__ size_t tc_qrow(const tc_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * a.ldq + (size_t)h * a.hs;
}
static __device__ __forceinline__ size_t tc_kvrow(const tc_view &a, int b, int j, int g) {
    return ((size_t)b * a.T + j) * a.ldkv + (size_t)g * a.hs;
}
static __device__ __forceinline__ size_t tc_orow(const tc_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
}

/* The bf16 register (two elements) at p of a shared row: p is 4-byte aligned. */
static __device__ __forceinline__ uint32_t tc_ld2(const uint16_t *p) {
    return *(const uint32_t *)p;
}

/* Staging rows [r0, r0 + 64) of a strided fp32 matrix (row stride ld) as bf16 into
 * sm[64][HS + FA_PAD] (row-major) and/or smt[HS][64 + FA_PAD] (transposed), in two halves:
 * tc_fetch loads a thread's HS / 4 elements into registers (consecutive threads, consecutive
 * columns of a row: coalesced; rows past T zeros), all of them in flight at once, and tc_put
 * rounds and stores them. Between the two the kernels compute on the block staged before, so
 * the loads' latency hides behind the products; a load followed at once by its store would
 * wait out each load's latency in turn, the shared store being a possible alias of the next
 * load (10x the predicted time on an H100, docs/cuda.md "On a real GPU"). */
#define FA_TC_PER(HS) (FA_TC_TILE * (HS) / FA_TC_THREADS)
template <int HS, int N = FA_TC_PER(HS)>
static __device__ __forceinline__ void tc_fetch(float *buf, const float *__restrict__ src,
                                                size_t ld, int r0, int T, int u0 = 0) {
ZS_UNROLL
    for (int u = 0; u < N; u++) {
        int e = (int)threadIdx.x + (u0 + u) * FA_TC_THREADS, r = e / HS, d = e % HS;
        buf[u] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}
template <int HS, int N = FA_TC_PER(HS)>
static __device__ __forceinline__ void tc_put(uint16_t *sm, uint16_t *smt, const float *buf,
                                              int u0 = 0) {
ZS_UNROLL
    for (int u = 0; u < N; u++) {
        int e = (int)threadIdx.x + (u0 + u) * FA_TC_THREADS, r = e / HS, d = e % HS;
        uint16_t bits = zs_f32_to_bf16(buf[u]).bits;
        if (sm) sm[r * (HS + FA_PAD) + d] = bits;
        if (smt) smt[d * (FA_TC_TILE + FA_PAD) + r] = bits;
    }
}
/* Both halves at once, in rounds of up to 8 loads in flight (for a kernel whose registers
 * cannot hold a whole block's). */
template <int HS>
static __device__ __forceinline__ void tc_stage(uint16_t *sm, uint16_t *smt, const float *src,
                                                size_t ld, int r0, int T) {
    constexpr int N = FA_TC_PER(HS) < 8 ? FA_TC_PER(HS) : 8;
    float buf[N];
    for (int u0 = 0; u0 < FA_TC_PER(HS); u0 += N) {
        tc_fetch<HS, N>(buf, src, ld, r0, T, u0);
        tc_put<HS, N>(sm, smt, buf, u0);
    }
}

/* The A fragments of a warp's 16 rows of a strided fp32 matrix (rows past T zero), one per
 * 16 columns, rounded to bf16. */
template <int HS>
static __device__ __forceinline__ void tc_load_a(zs_mma_a *f, const float *src, size_t ld, int row0,
                                                 int T) {
    int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int ks = 0; ks < HS / 16; ks++)
        for (int r = 0; r < 4; r++) {
            int row = row0 + g + (r & 1) * 8, col = ks * 16 + 2 * t + (r >> 1) * 8;
            float lo = 0.0f, hi = 0.0f;
            if (row < T) {
                lo = src[(size_t)row * ld + col];
                hi = src[(size_t)row * ld + col + 1];
            }
            f[ks].x[r] = zs_pack_bf16(lo, hi);
        }
}

/* c[nt] = A (16 x HS, registers) times the transpose of 8 rows nt*8.. of a row-major shared
 * block sm[64][HS + FA_PAD], for the 8 n-tiles: scores Q K^T (or K Q^T, V dO^T, dO V^T). */
template <int HS>
static __device__ __forceinline__ void tc_mma_rows(zs_mma_c *c, const zs_mma_a *a,
                                                   const uint16_t *sm) {
    int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int nt = 0; nt < 8; nt++) {
        zs_mma_zero(c[nt]);
        const uint16_t *row = sm + (nt * 8 + g) * (HS + FA_PAD) + 2 * t;
        for (int ks = 0; ks < HS / 16; ks++) {
            zs_mma_b b;
            b.x[0] = tc_ld2(row + ks * 16);
            b.x[1] = tc_ld2(row + ks * 16 + 8);
            zs_mma_16816(c[nt], a[ks], b);
        }
    }
}

/* acc[dt] += P (16 x 64, the fp32 fragments p of 8 n-tiles, rounded to bf16) times a 64 x HS
 * block given transposed in shared memory, smt[HS][64 + FA_PAD]: P V, dS K, P^T dO, dS^T Q. */
template <int HS>
static __device__ __forceinline__ void tc_mma_p(zs_mma_c *acc, const zs_mma_c *p,
                                                const uint16_t *smt) {
    int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int kk = 0; kk < 4; kk++) {
        zs_mma_a pa;
        pa.x[0] = zs_pack_bf16(p[2 * kk].x[0], p[2 * kk].x[1]);
        pa.x[1] = zs_pack_bf16(p[2 * kk].x[2], p[2 * kk].x[3]);
        pa.x[2] = zs_pack_bf16(p[2 * kk + 1].x[0], p[2 * kk + 1].x[1]);
        pa.x[3] = zs_pack_bf16(p[2 * kk + 1].x[2], p[2 * kk + 1].x[3]);
        for (int dt = 0; dt < HS / 8; dt++) {
            const uint16_t *col = smt + (dt * 8 + g) * (FA_TC_TILE + FA_PAD) + kk * 16 + 2 * t;
            zs_mma_b b;
            b.x[0] = tc_ld2(col);
            b.x[1] = tc_ld2(col + 8);
            zs_mma_16816(acc[dt], pa, b);
        }
    }
}

/* ---- forward ------------------------------------------------------------------------------ */

template <int HS>
static __global__ void fa_tc_fwd_kernel(float *out, float *lse, const float *q, const float *k,
                                        const float *v, const int32_t *seg, tc_view a) {
    ZS_SHARED(uint16_t, ks, FA_TC_TILE * (HS + FA_PAD)); /* K block [key][dim] */
    ZS_SHARED(uint16_t, vt, HS * (FA_TC_TILE + FA_PAD)); /* V block [dim][key] */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bh = (int)blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / (a.NH / a.NKV);
    int q0 = (int)blockIdx.x * FA_TC_ROWS, row0 = q0 + w * 16, r[2] = {row0 + g, row0 + g + 8};
    int lo[2];
    for (int i = 0; i < 2; i++)
        lo[i] = r[i] < a.T ? zs_seg_lo(seg, (size_t)b * a.T + r[i]) : 0;

    /* load: this warp's 16 query rows as A fragments */
    zs_mma_a qa[HS / 16];
    tc_load_a<HS>(qa, q + tc_qrow(a, b, 0, h), a.ldq, row0, a.T);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    zs_mma_c o[HS / 8];
    for (int dt = 0; dt < HS / 8; dt++)
        zs_mma_zero(o[dt]);

    /* document starts never decrease along a row, so row q0's block is the first any reads */
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + FA_TC_ROWS - 1 < a.T - 1 ? q0 + FA_TC_ROWS - 1 : a.T - 1;
    const float *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    float kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block, in flight */
    tc_fetch<HS>(kr, kb, a.ldkv, first, a.T);
    tc_fetch<HS>(vr, vb, a.ldkv, first, a.T);
    for (int j0 = first; j0 <= last; j0 += ZS_FA_BK) {
        /* store: the key block (the previous one's readers are done); load the next one */
        __syncthreads();
        tc_put<HS>(ks, NULL, kr);
        tc_put<HS>(NULL, vt, vr);
        __syncthreads();
        if (j0 + ZS_FA_BK <= last) {
            tc_fetch<HS>(kr, kb, a.ldkv, j0 + ZS_FA_BK, a.T);
            tc_fetch<HS>(vr, vb, a.ldkv, j0 + ZS_FA_BK, a.T);
        }

        /* a warp whose rows all precede the block (or lie past T) has nothing to add */
        if (row0 >= a.T || j0 > row0 + 15) continue;

        /* MMA: scores S = Q K^T, 16 rows x 64 keys in 8 n-tiles */
        zs_mma_c s[8];
        tc_mma_rows<HS>(s, qa, ks);

        /* online softmax: mask, the block's row maxima over the 4 lanes of a row, rescale */
        float mx[2] = {-INFINITY, -INFINITY};
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 4; e++) {
                int i = e >> 1, j = j0 + nt * 8 + 2 * t + (e & 1);
                bool ok = j <= r[i] && j >= lo[i] && r[i] < a.T;
                float x = ok ? s[nt].x[e] * a.scale : -INFINITY;
                s[nt].x[e] = x;
                mx[i] = x > mx[i] ? x : mx[i];
            }
        float alpha[2];
        for (int i = 0; i < 2; i++) {
            for (int d = 1; d <= 2; d *= 2) {
                float y = __shfl_xor_sync(0xffffffffu, mx[i], d);
                mx[i] = y > mx[i] ? y : mx[i];
            }
            float mn = mx[i] > m[i] ? mx[i] : m[i];
            /* a row with no key yet keeps m = -inf and everything at 0 */
            alpha[i] = m[i] == -INFINITY ? 0.0f : zs_expf(m[i] - mn);
            m[i] = mn;
            l[i] *= alpha[i];
        }
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 4; e++) {
                int i = e >> 1;
                float p = s[nt].x[e] == -INFINITY ? 0.0f : zs_expf(s[nt].x[e] - m[i]);
                s[nt].x[e] = p;
                l[i] += p;
            }
        for (int dt = 0; dt < HS / 8; dt++)
            for (int e = 0; e < 4; e++)
                o[dt].x[e] *= alpha[e >> 1];

        /* MMA: O += P V (P rounded to bf16 in registers) */
        tc_mma_p<HS>(o, s, vt);
    }

    /* store: O / l and lse = m + log l, l summed over the row's 4 lanes */
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    for (int i = 0; i < 2; i++) {
        if (r[i] >= a.T) continue;
        float inv = 1.0f / l[i];
        float *orow = out + tc_orow(a, b, r[i], h);
        for (int dt = 0; dt < HS / 8; dt++) {
            orow[dt * 8 + 2 * t] = o[dt].x[2 * i] * inv;
            orow[dt * 8 + 2 * t + 1] = o[dt].x[2 * i + 1] * inv;
        }
        if (t == 0) lse[(size_t)bh * a.T + r[i]] = m[i] + zs_logf(l[i]);
    }
}

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

/* dq for a block of 128 query rows of one head, over its key blocks in order:
 * S = Q K^T, P = exp(S scale - lse), dP = dO V^T, dS = P (dP - delta), dq += scale dS K. */
template <int HS>
static __global__ void fa_tc_bwd_q_kernel(float *dq, const float *dout, const float *q,
                                          const float *k, const float *v, const float *lse,
                                          const float *delta, const int32_t *seg, tc_view a) {
    ZS_SHARED(uint16_t, ks, FA_TC_TILE * (HS + FA_PAD)); /* K [key][dim]: for Q K^T */
    ZS_SHARED(uint16_t, kt, HS * (FA_TC_TILE + FA_PAD)); /* K [dim][key]: for dS K */
    ZS_SHARED(uint16_t, vs, FA_TC_TILE * (HS + FA_PAD)); /* V [key][dim]: for dO V^T */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bh = (int)blockIdx.y, b = bh / a.NH, h = bh % a.NH, kvh = h / (a.NH / a.NKV);
    int q0 = (int)blockIdx.x * FA_TC_ROWS, row0 = q0 + w * 16, r[2] = {row0 + g, row0 + g + 8};
    int lo[2];
    float rl[2], rd[2]; /* the rows' lse and delta */
    for (int i = 0; i < 2; i++) {
        bool in = r[i] < a.T;
        lo[i] = in ? zs_seg_lo(seg, (size_t)b * a.T + r[i]) : 0;
        rl[i] = in ? lse[(size_t)bh * a.T + r[i]] : 0.0f;
        rd[i] = in ? delta[(size_t)bh * a.T + r[i]] : 0.0f;
    }
    zs_mma_a qa[HS / 16], da[HS / 16];
    tc_load_a<HS>(qa, q + tc_qrow(a, b, 0, h), a.ldq, row0, a.T);
    tc_load_a<HS>(da, dout + tc_orow(a, b, 0, h), (size_t)a.NH * a.hs, row0, a.T);
    zs_mma_c acc[HS / 8];
    for (int dt = 0; dt < HS / 8; dt++)
        zs_mma_zero(acc[dt]);
    int first = zs_fa_first_block(zs_seg_lo(seg, (size_t)b * a.T + q0));
    int last = q0 + FA_TC_ROWS - 1 < a.T - 1 ? q0 + FA_TC_ROWS - 1 : a.T - 1;
    const float *kb = k + tc_kvrow(a, b, 0, kvh), *vb = v + tc_kvrow(a, b, 0, kvh);
    float kr[FA_TC_PER(HS)], vr[FA_TC_PER(HS)]; /* the next key block, in flight */
    tc_fetch<HS>(kr, kb, a.ldkv, first, a.T);
    tc_fetch<HS>(vr, vb, a.ldkv, first, a.T);
    for (int j0 = first; j0 <= last; j0 += ZS_FA_BK) {
        __syncthreads();
        tc_put<HS>(ks, kt, kr);
        tc_put<HS>(vs, NULL, vr);
        __syncthreads();
        if (j0 + ZS_FA_BK <= last) {
            tc_fetch<HS>(kr, kb, a.ldkv, j0 + ZS_FA_BK, a.T);
            tc_fetch<HS>(vr, vb, a.ldkv, j0 + ZS_FA_BK, a.T);
        }
        if (row0 >= a.T || j0 > row0 + 15) continue; /* nothing this warp's rows can see */
        zs_mma_c s[8], dp[8];
        tc_mma_rows<HS>(s, qa, ks);
        tc_mma_rows<HS>(dp, da, vs);
        for (int nt = 0; nt < 8; nt++)
            for (int e = 0; e < 4; e++) {
                int i = e >> 1, j = j0 + nt * 8 + 2 * t + (e & 1);
                bool ok = j <= r[i] && j >= lo[i] && r[i] < a.T;
                float p = ok ? zs_expf(s[nt].x[e] * a.scale - rl[i]) : 0.0f;
                s[nt].x[e] = p * (dp[nt].x[e] - rd[i]); /* dS */
            }
        tc_mma_p<HS>(acc, s, kt);
    }
    for (int i = 0; i < 2; i++) {
        if (r[i] >= a.T) continue;
        float *row = dq + tc_qrow(a, b, r[i], h);
        for (int dt = 0; dt < HS / 8; dt++) {
            row[dt * 8 + 2 * t] += acc[dt].x[2 * i] * a.scale;
            row[dt * 8 + 2 * t + 1] += acc[dt].x[2 * i + 1] * a.scale;
        }
    }
}

/* dk and dv for a block of 128 key rows of one kv head, over the group's query heads and, in
 * each, the query blocks that can see them, in order: S^T = K Q^T, P^T = exp(S^T scale - lse),
 * dP^T = V dO^T, dS^T = P^T (dP^T - delta), dv += P^T dO, dk += scale dS^T Q. */
template <int HS>
static __global__ void fa_tc_bwd_kv_kernel(float *dk, float *dv, const float *dout, const float *q,
                                           const float *k, const float *v, const float *lse,
                                           const float *delta, const int32_t *seg, tc_view a) {
    ZS_SHARED(uint16_t, qs, FA_TC_TILE * (HS + FA_PAD));  /* Q [query][dim]: K Q^T */
    ZS_SHARED(uint16_t, qt, HS * (FA_TC_TILE + FA_PAD));  /* Q [dim][query]: dS^T Q */
    ZS_SHARED(uint16_t, ds, FA_TC_TILE * (HS + FA_PAD));  /* dO [query][dim]: V dO^T */
    ZS_SHARED(uint16_t, dtr, HS * (FA_TC_TILE + FA_PAD)); /* dO [dim][query]: P^T dO */
    ZS_SHARED(float, sl, FA_TC_TILE);                     /* the queries' lse */
    ZS_SHARED(float, sd, FA_TC_TILE);                     /* and delta */
    ZS_SHARED(int, slo, FA_TC_TILE);                      /* and document starts */
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int bg = (int)blockIdx.y, b = bg / a.NKV, kvh = bg % a.NKV, rep = a.NH / a.NKV;
    int j0 = (int)blockIdx.x * FA_TC_ROWS, key0 = j0 + w * 16, c[2] = {key0 + g, key0 + g + 8};
    zs_mma_a ka[HS / 16], va[HS / 16];
    tc_load_a<HS>(ka, k + tc_kvrow(a, b, 0, kvh), a.ldkv, key0, a.T);
    tc_load_a<HS>(va, v + tc_kvrow(a, b, 0, kvh), a.ldkv, key0, a.T);
    zs_mma_c dka[HS / 8], dva[HS / 8];
    for (int dt = 0; dt < HS / 8; dt++) {
        zs_mma_zero(dka[dt]);
        zs_mma_zero(dva[dt]);
    }
    for (int h = kvh * rep; h < (kvh + 1) * rep; h++) {
        size_t bh = (size_t)b * a.NH + h;
        for (int i0 = j0; i0 < a.T; i0 += ZS_FA_BK) {
            /* queries of later documents cannot see these keys; starts never decrease */
            if (zs_seg_lo(seg, (size_t)b * a.T + i0) > j0 + FA_TC_ROWS - 1) break;
            __syncthreads();
            tc_stage<HS>(qs, qt, q + tc_qrow(a, b, 0, h), a.ldq, i0, a.T);
            tc_stage<HS>(ds, dtr, dout + tc_orow(a, b, 0, h), (size_t)a.NH * a.hs, i0, a.T);
            for (int e = (int)threadIdx.x; e < FA_TC_TILE; e += FA_TC_THREADS) {
                bool in = i0 + e < a.T;
                sl[e] = in ? lse[bh * a.T + i0 + e] : 0.0f;
                sd[e] = in ? delta[bh * a.T + i0 + e] : 0.0f;
                slo[e] = in ? zs_seg_lo(seg, (size_t)b * a.T + i0 + e) : a.T;
            }
            __syncthreads();
            /* a warp whose keys all follow the block's queries (or lie past T) adds nothing */
            if (key0 >= a.T || i0 + FA_TC_TILE - 1 < key0) continue;
            zs_mma_c s[8], dp[8];
            tc_mma_rows<HS>(s, ka, qs);
            tc_mma_rows<HS>(dp, va, ds);
            for (int nt = 0; nt < 8; nt++)
                for (int e = 0; e < 4; e++) {
                    int kr = c[e >> 1], qi = nt * 8 + 2 * t + (e & 1), i = i0 + qi;
                    bool ok = i >= kr && slo[qi] <= kr && i < a.T && kr < a.T;
                    float p = ok ? zs_expf(s[nt].x[e] * a.scale - sl[qi]) : 0.0f;
                    s[nt].x[e] = p;                           /* P^T */
                    dp[nt].x[e] = p * (dp[nt].x[e] - sd[qi]); /* dS^T */
                }
            tc_mma_p<HS>(dva, s, dtr);
            tc_mma_p<HS>(dka, dp, qt);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (c[i] >= a.T) continue;
        size_t off = tc_kvrow(a, b, c[i], kvh);
        for (int dt = 0; dt < HS / 8; dt++)
            for (int e = 0; e < 2; e++) {
                dk[off + dt * 8 + 2 * t + e] += dka[dt].x[2 * i + e] * a.scale;
                dv[off + dt * 8 + 2 * t + e] += dva[dt].x[2 * i + e];
            }
    }
}

/* ---- launchers --------------------------------------------------------------------------------
 */

int zs_cu_flash_tc_eligible(int hs) {
    return hs == 16 || hs == 32 || hs == 64;
}

static tc_view tc_make(int B, int T, int NH, int NKV, int hs, int ldq, int ldkv) {
    tc_view a;
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.hs = hs;
    a.ldq = (size_t)ldq;
    a.ldkv = (size_t)ldkv;
    a.scale = 1.0f / sqrtf((float)hs);
    return a;
}

/* The units of work of one head, a unit being a warp's 16 rows against one staged block of 64,
 * causal bound (document masks visit fewer; their starts are device memory). Query-parallel
 * kernels (forward, dq): the warp of rows 16g.. (below T) visits the key blocks up to its last
 * row's. Key-parallel (dk, dv): the warp of keys 16g.. visits the query blocks from the one
 * holding its first key to the last. */
static double tc_units_q(int T) {
    double u = 0;
    for (int g = 0; 16 * g < T; g++)
        u += (16 * g + 15 < T - 1 ? 16 * g + 15 : T - 1) / FA_TC_TILE + 1;
    return u;
}
static double tc_units_kv(int T) {
    double u = 0, nb = (double)((T + FA_TC_TILE - 1) / FA_TC_TILE);
    for (int g = 0; 16 * g < T; g++)
        u += nb - (16 * g) / FA_TC_TILE;
    return u;
}

template <int HS>
static zs_status tc_fwd(cudaStream_t cs, float *out, float *lse, const float *q, const float *k,
                        const float *v, const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    dim3 grid((unsigned)((a.T + FA_TC_ROWS - 1) / FA_TC_ROWS), (unsigned)(a.B * a.NH));
    double units = tc_units_q(a.T) * a.B * a.NH; /* (16 rows x 64 keys) */
    /* per unit: S = Q K^T and O += P V, 2 x 16 x 64 x HS each; the softmax's scale, mask,
     * max, exp, sum and rescale about 8 per score plus HS per row; per row the finish */
    ZS_COST(units * (16.0 * 64.0 * 8.0 + 16.0 * HS) + (double)a.B * a.NH * a.T * (HS + 3.0),
            units * 4.0 * 16.0 * 64.0 * HS,
            4.0 * ((double)a.B * a.T * (a.NH * HS * 2.0 + a.NKV * HS * 2.0 + a.NH) +
                   (seg ? (double)a.B * a.T : 0.0)));
    ZS_LAUNCH(fa_tc_fwd_kernel<HS>, grid, FA_TC_THREADS, 0, cs, out, lse, q, k, v, seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_fwd_kernel);
fail:
    return st;
}

template <int HS>
static zs_status tc_bwd(cudaStream_t cs, float *dq, float *dk, float *dv, float *delta,
                        const float *dout, const float *q, const float *k, const float *v,
                        const float *out, const float *lse, const int32_t *seg, const tc_view &a) {
    zs_status st = ZS_OK;
    size_t rows = (size_t)a.B * a.NH * a.T;
    dim3 gq((unsigned)((a.T + FA_TC_ROWS - 1) / FA_TC_ROWS), (unsigned)(a.B * a.NH));
    dim3 gkv((unsigned)((a.T + FA_TC_ROWS - 1) / FA_TC_ROWS), (unsigned)(a.B * a.NKV));
    double uq = tc_units_q(a.T) * a.B * a.NH, ukv = tc_units_kv(a.T) * a.B * a.NH;
    double qe = (double)a.B * a.T * a.NH * HS, kve = (double)a.B * a.T * a.NKV * HS;
    double sege = seg ? (double)a.B * a.T : 0.0;
    ZS_COST(rows * 2.0 * HS, 0, 4.0 * (2.0 * qe + (double)rows));
    ZS_LAUNCH(fa_tc_delta_kernel, zs_cu_blocks(rows * 32), ZS_CU_THREADS, 0, cs, delta, dout, out,
              a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_delta_kernel);
    /* per unit: S, dP and dq, 2 x 16 x 64 x HS each; p and dS about 6 per score */
    ZS_COST(uq * 16.0 * 64.0 * 6.0 + qe * 2.0, uq * 6.0 * 16.0 * 64.0 * HS,
            4.0 * (4.0 * qe + 2.0 * kve + 2.0 * (double)rows + sege));
    ZS_LAUNCH(fa_tc_bwd_q_kernel<HS>, gq, FA_TC_THREADS, 0, cs, dq, dout, q, k, v, lse, delta, seg,
              a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_q_kernel);
    /* per unit: S^T, dP^T, dv and dk, 2 x 16 x 64 x HS each */
    ZS_COST(ukv * 16.0 * 64.0 * 6.0 + kve * 3.0, ukv * 8.0 * 16.0 * 64.0 * HS,
            4.0 * (2.0 * qe + 6.0 * kve + 2.0 * (double)rows + sege));
    ZS_LAUNCH(fa_tc_bwd_kv_kernel<HS>, gkv, FA_TC_THREADS, 0, cs, dk, dv, dout, q, k, v, lse, delta,
              seg, a);
    ZS_CUDA_CHECK_LAUNCH(fa_tc_bwd_kv_kernel);
fail:
    return st;
}

zs_status zs_cu_flash_tc_fwd(zs_stream_t *s, float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int NH, int NKV, int hs, int ldq,
                             int ldkv, const int32_t *seg) {
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    if ((size_t)B * NH * T == 0) return ZS_OK;
    switch (hs) {
    case 16:
        return tc_fwd<16>(cs, out, lse, q, k, v, seg, a);
    case 32:
        return tc_fwd<32>(cs, out, lse, q, k, v, seg, a);
    default:
        return tc_fwd<64>(cs, out, lse, q, k, v, seg, a);
    }
}

zs_status zs_cu_flash_tc_bwd(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                             const float *dout, const float *q, const float *k, const float *v,
                             const float *out, const float *lse, int B, int T, int NH, int NKV,
                             int hs, int ldq, int ldkv, const int32_t *seg) {
    tc_view a = tc_make(B, T, NH, NKV, hs, ldq, ldkv);
    cudaStream_t cs = zs_cu_stream(s);
    if ((size_t)B * NH * T == 0) return ZS_OK;
    switch (hs) {
    case 16:
        return tc_bwd<16>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    case 32:
        return tc_bwd<32>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    default:
        return tc_bwd<64>(cs, dq, dk, dv, delta, dout, q, k, v, out, lse, seg, a);
    }
}

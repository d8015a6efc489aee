/* Causal attention on tensor cores, FlashAttention-2 style, for the bf16 table (--dtype bf16;
 * docs/cuda.md "Kernels"): the ops flash_attention_fwd/bwd with the contract of ops.h, their
 * inputs rounded to bf16 for the products (Q, K, V, dO, and the probabilities P and score
 * gradients dS between products), every product accumulated in fp32 by mma.sync m16n8k16
 * (mma_cuda.h), the softmax in fp32 as FlashAttention-2 takes it: 2^(s scale log2 e - m),
 * one fmaf and the special-function unit's exp2 per score (mma_cuda.h, zs_cu_exp2). Q, K and V
 * are fp32, or bf16 (flash_attention_fwd16q/bwd16q: GPT-2's kept qkv), which the rounding leaves
 * as they are: the same bits. The fp32 table keeps flash_cuda.cu's kernels, bitwise the CPU's.
 *
 * Tiles: a block of 8 warps takes 256 rows, two tiles of 16 a warp (query rows for the forward
 * and dq, key rows for dk's and dv's own kernels), or 128, 16 a warp (key rows for the fused
 * dk/dv kernel of short sequences), against key (or query) blocks of
 * ZS_FA_BK = 64 staged in shared memory, the CPU's blocks: a row's first block is the one holding
 * its document's start, as on the CPU, and the online softmax rescales at the same block
 * boundaries. A block's rows share each staged block (a quarter of the re-reads of 64 rows at
 * 256); a tile whose 16 rows the causal mask leaves nothing of in a block skips it, and only the
 * blocks on the diagonal, at a document's start or past T are masked element by element. Blocks are
 * staged in shared memory as bf16, row-major, rows padded by FA_PAD elements so that the 8 rows an
 * ldmatrix reads hit 32 different banks; the products' B fragments come from them by ldmatrix.x4
 * (transposing for P V, dS K, P^T dO and dS^T Q); Q (forward, dq) or K and V (dk/dv) stay in
 * registers as A fragments; a product's fp32 result becomes the next product's A fragment in
 * registers (mma_cuda.h). The next block loads into registers while this one computes (16-byte
 * loads where rows are aligned).
 *
 * Determinism without atomics: dq has its own kernel (a block per 256 query rows, looping over
 * key blocks in order), dk and dv theirs (a block per 128 keys of a kv head, looping over the
 * group's query heads and their query blocks in order; from T = 1024 one kernel each, a block
 * per 256 keys, flash_tc_bwd_cuda.cu), at the price of recomputing the scores and dP = dO V^T in
 * both (18 hs FLOPs per (query, key) pair in all, 20 hs with dk's and dv's kernels apart, against
 * FlashAttention-2's 14 hs with atomic dq). Head sizes 16, 32 and 64 (the shared tiles of the dk/dv
 * kernel fill 19 KiB at 64); others take flash_cuda.cu's kernels. ZS_COST: 1 FLOP per + - * / and
 * sqrtf/expf/exp2/logf, an fmaf 2, else 0; tensor FLOPs 2 m n k per product.
 *
 * This header holds what the forward (flash_tc_cuda.cu) and the backward (flash_tc_bwd_cuda.cu)
 * share: the tiles, the staging, the fragments and products, and the launchers' view. */
#ifndef ZS_BACKEND_CUDA_FLASH_TC_H
#define ZS_BACKEND_CUDA_FLASH_TC_H

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/mma_cuda.h"
#include "backend/kernels/flash.h"

#define FA_TC_WARPS 8                 /* a block's warps, 16 rows each (an mma's m) */
#define FA_TC_ROWS (16 * FA_TC_WARPS) /* a block's rows: 128 */
#define FA_TC_THREADS (32 * FA_TC_WARPS)
#define FA_TC_TILE ZS_FA_BK /* the rows of a staged (key or query) block: 64 */
#define FA_PAD 8            /* bf16 elements of padding per shared row (16 bytes) */
/* the shared tiles take 4-byte fragment loads and 8-byte stores */
#ifdef ZS_MUTANT_SMEM_ALIGN
#define FA_SMEM_ALIGN 2 /* the tiles' element alignment only: a misaligned store (emulator) */
#else
#define FA_SMEM_ALIGN 16
#endif

/* One call's strided views, as flash_cuda.cu's. */
typedef struct tc_view {
    int B, T, NH, NKV, hs;
    size_t ldq, ldkv;
    float scale;
    float scale2; /* scale log2(e): exp(x scale) = 2^(x scale2) */
    bool vec;     /* every row of q, k, v, dO starts 16-byte aligned: 16-byte loads */
    bool wide;    /* every row of dq, dk, dv starts 8-byte aligned: 8-byte stores */
} tc_view;

#define FA_LOG2E 1.44269504088896341f

static __device__ __forceinline__ size_t tc_qrow(const tc_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * a.ldq + (size_t)h * a.hs;
}
static __device__ __forceinline__ size_t tc_kvrow(const tc_view &a, int b, int j, int g) {
    return ((size_t)b * a.T + j) * a.ldkv + (size_t)g * a.hs;
}
static __device__ __forceinline__ size_t tc_orow(const tc_view &a, int b, int i, int h) {
    return ((size_t)b * a.T + i) * ((size_t)a.NH * a.hs) + (size_t)h * a.hs;
}

/* Staging rows [r0, r0 + 64) of a strided fp32 matrix (row stride ld) as bf16 into
 * sm[64][HS + FA_PAD] (row-major), in two halves:
 * tc_fetch loads a thread's HS / 16 groups of 4 consecutive columns of a row into registers
 * (one 16-byte load each where the view is aligned, a.vec; consecutive threads, consecutive
 * groups: coalesced; rows past T zeros), all of them in flight at once, and tc_put rounds them
 * in pairs (cvt.rn.bf16x2) and stores them. Between the two the kernels compute on the block
 * staged before, so the loads' latency hides behind the products; a load followed at once by
 * its store would wait out each load's latency in turn, the shared store being a possible
 * alias of the next load (10x the predicted time on an H100, docs/cuda.md "On a real GPU"). */
#define FA_TC_PER(HS) (FA_TC_TILE * (HS) / 4 / FA_TC_THREADS)
template <int HS>
static __device__ __forceinline__ void tc_fetch(float4 *buf, const float *__restrict__ src,
                                                size_t ld, int r0, int T, bool vec) {
    ZS_UNROLL
    for (int u = 0; u < FA_TC_PER(HS); u++) {
        int e = (int)threadIdx.x + u * FA_TC_THREADS, r = e / (HS / 4), d = e % (HS / 4) * 4;
        const float *p = src + (size_t)(r0 + r) * ld + d;
        if (r0 + r >= T)
            buf[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        else if (vec)
            buf[u] = *(const float4 *)p;
        else
            buf[u] = make_float4(p[0], p[1], p[2], p[3]);
    }
}
/* The same from a bf16 view (GPT-2's kept qkv, flash_attention_fwd16q), into half the
 * registers: 4 elements an 8-byte load where the view is aligned, stored by tc_put as they are,
 * the bits of an fp32 view holding the same values (rounding a bf16 value returns it). The
 * registers a block in flight takes: tc_reg. */
template <typename QT> struct tc_reg { typedef float4 t; };
template <> struct tc_reg<zs_bf16> { typedef uint2 t; };
template <int HS>
static __device__ __forceinline__ void tc_fetch(uint2 *buf, const zs_bf16 *__restrict__ src,
                                                size_t ld, int r0, int T, bool vec) {
    ZS_UNROLL
    for (int u = 0; u < FA_TC_PER(HS); u++) {
        int e = (int)threadIdx.x + u * FA_TC_THREADS, r = e / (HS / 4), d = e % (HS / 4) * 4;
        const zs_bf16 *p = src + (size_t)(r0 + r) * ld + d;
        if (r0 + r >= T)
            buf[u] = make_uint2(0u, 0u);
        else if (vec)
            buf[u] = *(const uint2 *)p;
        else /* (not p[0] | p[1] << 16: a host compiler merges that into one load) */
            buf[u] = make_uint2(zs_pack_bf16(zs_bf16_to_f32(p[0]), zs_bf16_to_f32(p[1])),
                                zs_pack_bf16(zs_bf16_to_f32(p[2]), zs_bf16_to_f32(p[3])));
    }
}
template <int HS> static __device__ __forceinline__ void tc_put(uint16_t *sm, const uint2 *buf) {
    ZS_UNROLL
    for (int u = 0; u < FA_TC_PER(HS); u++) {
        int e = (int)threadIdx.x + u * FA_TC_THREADS, r = e / (HS / 4), d = e % (HS / 4) * 4;
        *(uint2 *)(sm + r * (HS + FA_PAD) + d) = buf[u];
    }
}
template <int HS> static __device__ __forceinline__ void tc_put(uint16_t *sm, const float4 *buf) {
    ZS_UNROLL
    for (int u = 0; u < FA_TC_PER(HS); u++) {
        int e = (int)threadIdx.x + u * FA_TC_THREADS, r = e / (HS / 4), d = e % (HS / 4) * 4;
        uint32_t lo = zs_pack_bf16(buf[u].x, buf[u].y), hi = zs_pack_bf16(buf[u].z, buf[u].w);
        *(uint2 *)(sm + r * (HS + FA_PAD) + d) = make_uint2(lo, hi);
    }
}

/* The A fragments of a warp's 16 rows of a strided fp32 matrix (rows past T zero), one per
 * 16 columns, rounded to bf16: each lane's pair of columns in one 8-byte load where the view is
 * aligned (vec; a row's 4 lanes then read 32 contiguous bytes, a whole sector), else in two. */
template <int HS>
static __device__ __forceinline__ void tc_load_a(zs_mma_a *f, const float *src, size_t ld, int row0,
                                                 int T, bool vec) {
    int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int ks = 0; ks < HS / 16; ks++)
        for (int r = 0; r < 4; r++) {
            int row = row0 + g + (r & 1) * 8, col = ks * 16 + 2 * t + (r >> 1) * 8;
            float2 x = make_float2(0.0f, 0.0f);
            if (row < T && vec)
                x = *(const float2 *)(src + (size_t)row * ld + col);
            else if (row < T)
                x = make_float2(src[(size_t)row * ld + col], src[(size_t)row * ld + col + 1]);
            f[ks].x[r] = zs_pack_bf16(x.x, x.y);
        }
}

/* The same from a bf16 view: a lane's pair as it is, one 4-byte load where the view is aligned
 * (vec), else two (rounding a bf16 value returns it). */
template <int HS>
static __device__ __forceinline__ void tc_load_a(zs_mma_a *f, const zs_bf16 *src, size_t ld,
                                                 int row0, int T, bool vec) {
    int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int ks = 0; ks < HS / 16; ks++)
        for (int r = 0; r < 4; r++) {
            int row = row0 + g + (r & 1) * 8, col = ks * 16 + 2 * t + (r >> 1) * 8;
            const zs_bf16 *p = src + (size_t)row * ld + col;
            uint32_t x = 0;
            if (row < T && vec)
                x = *(const uint32_t *)p;
            else if (row < T) /* (as tc_fetch's) */
                x = zs_pack_bf16(zs_bf16_to_f32(p[0]), zs_bf16_to_f32(p[1]));
            f[ks].x[r] = x;
        }
}

/* c0 += a b0 and c1 += a b1, the two B fragments an ldmatrix.x4 loaded: r[0], r[1] and r[2],
 * r[3]. */
static __device__ __forceinline__ void tc_mma2(zs_mma_c &c0, zs_mma_c &c1, const zs_mma_a &a,
                                               const uint32_t *r) {
    zs_mma_b b0, b1;
    b0.x[0] = r[0];
    b0.x[1] = r[1];
    b1.x[0] = r[2];
    b1.x[1] = r[3];
    zs_mma_16816(c0, a, b0);
    zs_mma_16816(c1, a, b1);
}

/* c[rt][nt] = A_rt (16 x HS, registers) times the transpose of 8 rows nt*8.. of a row-major
 * shared block sm[8 NT][HS + FA_PAD], for the NT n-tiles (8: a whole staged block of 64) and
 * each of RT row tiles whose act[rt] holds (warp-uniform): scores Q K^T (or K Q^T, V dO^T,
 * dO V^T). The B fragments of two n-tiles come in one ldmatrix.x4, shared by the RT tiles: lane
 * l points at row l % 8 of n-tile nt + l / 16, columns ks 16 + 8 ((l / 8) % 2).. */
template <int HS, int RT, int NT = 8>
static __device__ __forceinline__ void tc_mma_rows_rt(zs_mma_c (*c)[NT],
                                                      const zs_mma_a (*a)[HS / 16], const bool *act,
                                                      const uint16_t *sm) {
    int lane = (int)threadIdx.x % 32, j = lane / 8, i = lane % 8;
    const uint16_t *base = sm + ((j >> 1) * 8 + i) * (HS + FA_PAD) + (j & 1) * 8;
    ZS_UNROLL
    for (int nt = 0; nt < NT; nt += 2) {
        ZS_UNROLL
        for (int rt = 0; rt < RT; rt++) {
            zs_mma_zero(c[rt][nt]);
            zs_mma_zero(c[rt][nt + 1]);
        }
        ZS_UNROLL
        for (int ks = 0; ks < HS / 16; ks++) {
            uint32_t r[4];
            zs_ldmatrix_x4<false>(r, base + nt * 8 * (HS + FA_PAD) + ks * 16);
            ZS_UNROLL
            for (int rt = 0; rt < RT; rt++)
                if (act[rt]) tc_mma2(c[rt][nt], c[rt][nt + 1], a[rt][ks], r);
        }
    }
}

/* acc[rt][dt] += P_rt (16 x 8 NT, the fp32 fragments p[rt] of NT n-tiles, rounded to bf16)
 * times a row-major shared block sm[8 NT][HS + FA_PAD], for each of RT row tiles whose act[rt]
 * holds: P V, dS K, P^T dO, dS^T Q. The B fragments (k: the block's rows, n: its columns) of
 * two column tiles come in one transposing ldmatrix.x4, shared by the RT tiles: lane l points
 * at row kk 16 + 8 ((l / 8) % 2) + l % 8, columns (dt + l / 16) 8.. Each acc element adds its
 * k-steps of 16 rows in order, so a block taken in parts of 8 NT rows, in order, sums as the
 * whole block does. */
template <int HS, int RT, int NT = 8>
static __device__ __forceinline__ void tc_mma_p_rt(zs_mma_c (*acc)[HS / 8], const zs_mma_c (*p)[NT],
                                                   const bool *act, const uint16_t *sm) {
    int lane = (int)threadIdx.x % 32, j = lane / 8, i = lane % 8;
    const uint16_t *base = sm + ((j & 1) * 8 + i) * (HS + FA_PAD) + (j >> 1) * 8;
    ZS_UNROLL
    for (int kk = 0; kk < NT / 2; kk++) {
        zs_mma_a pa[RT];
        ZS_UNROLL
        for (int rt = 0; rt < RT; rt++) {
            pa[rt].x[0] = zs_pack_bf16(p[rt][2 * kk].x[0], p[rt][2 * kk].x[1]);
            pa[rt].x[1] = zs_pack_bf16(p[rt][2 * kk].x[2], p[rt][2 * kk].x[3]);
            pa[rt].x[2] = zs_pack_bf16(p[rt][2 * kk + 1].x[0], p[rt][2 * kk + 1].x[1]);
            pa[rt].x[3] = zs_pack_bf16(p[rt][2 * kk + 1].x[2], p[rt][2 * kk + 1].x[3]);
        }
        ZS_UNROLL
        for (int dt = 0; dt < HS / 8; dt += 2) {
            uint32_t r[4];
            zs_ldmatrix_x4<true>(r, base + kk * 16 * (HS + FA_PAD) + dt * 8);
            ZS_UNROLL
            for (int rt = 0; rt < RT; rt++)
                if (act[rt]) tc_mma2(acc[rt][dt], acc[rt][dt + 1], pa[rt], r);
        }
    }
}

/* One step of a query-parallel kernel's walk over key blocks: store the block in flight (kr,
 * vr) as the shared tiles ks and vs once the previous block's readers are done, then start
 * loading the next one, if j0's is not the last. */
template <int HS, typename QT, typename RT>
static __device__ __forceinline__ void tc_kv_step(uint16_t *ks, uint16_t *vs, RT *kr, RT *vr,
                                                  const QT *kb, const QT *vb, const tc_view &a,
                                                  int j0, int last) {
    __syncthreads();
    tc_put<HS>(ks, kr);
    tc_put<HS>(vs, vr);
    __syncthreads();
    if (j0 + ZS_FA_BK <= last) {
        tc_fetch<HS>(kr, kb, a.ldkv, j0 + ZS_FA_BK, a.T, a.vec);
        tc_fetch<HS>(vr, vb, a.ldkv, j0 + ZS_FA_BK, a.T, a.vec);
    }
}

/* Whether a warp's 16 rows row0.. see every key of the block j0..j0+63: the block ends before
 * the first row, starts at or after the last row's document start (starts never decrease along
 * rows, so the last row's is the largest), and no row lies past T. Only such blocks skip the
 * per-element mask: on the diagonal and at a document's start the mask runs as before. */
static __device__ __forceinline__ bool tc_block_full(const tc_view &a, const int32_t *seg, int b,
                                                     int row0, int j0) {
    if (j0 + FA_TC_TILE - 1 > row0 || row0 + 15 >= a.T) return false;
    return j0 >= zs_seg_lo(seg, (size_t)b * a.T + row0 + 15);
}

/* The scores a query-parallel warp may not use set to -inf: this lane's rows r[0], r[1] (g and
 * g + 8 of the warp) against keys j0 + 8 nt + 2 t (+1) of NT n-tiles: keys after the row, keys
 * before its document's start lo, and rows past T. For the blocks tc_block_full is false of. */
template <int NT = 8>
static __device__ __forceinline__ void tc_mask_rows(zs_mma_c *s, const tc_view &a, const int *r,
                                                    const int *lo, int j0, int t) {
    ZS_UNROLL
    for (int x = 0; x < 4 * NT; x++) {
        int nt = x >> 2, e = x & 3, i = e >> 1, j = j0 + nt * 8 + 2 * t + (e & 1);
        bool ok = j <= r[i] && j >= lo[i] && r[i] < a.T;
        s[nt].x[e] = ok ? s[nt].x[e] : -INFINITY;
    }
}

/* ---- the launchers' side ---------------------------------------------------------------- */

static inline tc_view tc_make(int B, int T, int NH, int NKV, int hs, int ldq, int ldkv) {
    tc_view a;
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.hs = hs;
    a.ldq = (size_t)ldq;
    a.ldkv = (size_t)ldkv;
    a.scale = 1.0f / sqrtf((float)hs);
    a.scale2 = a.scale * FA_LOG2E;
    a.vec = a.wide = false; /* set by the launchers, which see the pointers */
    return a;
}

/* The units of work of one head, a unit being a warp's 16 rows against one staged block of 64,
 * causal bound (document masks visit fewer; their starts are device memory). Query-parallel
 * kernels (forward, dq): the warp of rows 16g.. (below T) visits the key blocks up to its last
 * row's. Key-parallel (dk, dv): the warp of keys 16g.. visits the query blocks from the one
 * holding its first key to the last. */
static inline double tc_units_q(int T) {
    double u = 0;
    for (int g = 0; 16 * g < T; g++)
        u += (16 * g + 15 < T - 1 ? 16 * g + 15 : T - 1) / FA_TC_TILE + 1;
    return u;
}
static inline double tc_units_kv(int T) {
    double u = 0, nb = (double)((T + FA_TC_TILE - 1) / FA_TC_TILE);
    for (int g = 0; 16 * g < T; g++)
        u += nb - (16 * g) / FA_TC_TILE;
    return u;
}

/* Row r's HS outputs from this lane's fragments (columns dt * 8 + 2t and + 1, element i of
 * the pair's rows), each o inv + add (the forward: inv = 1 / l and add -0, which changes no
 * value; the backward's gradients: inv its scale and add +0, ops.h's bits of accumulating
 * into zeros), at an 8-byte aligned row (the launchers check). fp32:
 * float2 stores, a row's 4 lanes 32 contiguous bytes a fragment. bf16 (flash_attention_fwd16), each
 * value rounded once: lanes t and t ^ 1 swap the packed pairs of two fragments first, so that each
 * lane stores 4 contiguous values and a row's 4 lanes again write 32 contiguous bytes, a whole
 * sector. Every lane calls it (the shuffle); a row past T (in false) stores nothing. */
template <int HS>
static __device__ __forceinline__ void tc_store_row(float *orow, const zs_mma_c *o, int i,
                                                    float inv, float add, int t, bool in) {
    if (!in) return;
    ZS_UNROLL
    for (int dt = 0; dt < HS / 8; dt++)
        *(float2 *)(orow + dt * 8 + 2 * t) =
            make_float2(o[dt].x[2 * i] * inv + add, o[dt].x[2 * i + 1] * inv + add);
}

static __device__ __forceinline__ uint32_t tc_pack2(float x, float y) {
    return (uint32_t)zs_f32_to_bf16(x).bits | (uint32_t)zs_f32_to_bf16(y).bits << 16;
}

template <int HS>
static __device__ __forceinline__ void tc_store_row(zs_bf16 *orow, const zs_mma_c *o, int i,
                                                    float inv, float add, int t, bool in) {
    ZS_UNROLL
    for (int dt = 0; dt < HS / 8; dt += 2) {
        uint32_t u0 = tc_pack2(o[dt].x[2 * i] * inv + add, o[dt].x[2 * i + 1] * inv + add);
        uint32_t u1 = tc_pack2(o[dt + 1].x[2 * i] * inv + add, o[dt + 1].x[2 * i + 1] * inv + add);
        /* even t stores fragment dt's columns 2t .. 2t + 3, odd t fragment dt + 1's
         * 2(t - 1) .. 2t + 1: each takes the half it lacks from its neighbour */
        uint32_t got = __shfl_xor_sync(0xffffffffu, (t & 1) ? u0 : u1, 1);
        if (!in) continue;
        bool odd = t & 1;
        *(uint2 *)(orow + dt * 8 + (odd ? 8 + 2 * (t - 1) : 2 * t)) =
            make_uint2(odd ? got : u0, odd ? u1 : got);
    }
}

/* bf16 q, k and v take the tensor-core kernels only (ops.h flash_qkv16_hs): ZS_OK for the head
 * sizes they take, else ZS_ERR_INVALID naming op and hs. */
static inline zs_status tc_qkv16_check(const char *op, int hs) {
    if (zs_cu_flash_tc_eligible(hs)) return ZS_OK;
    return zs_error(ZS_ERR_INVALID,
                    "%s: head size %d: bf16 q, k and v take the tensor-core kernels only (head "
                    "sizes 16, 32 and 64)",
                    op, hs);
}

/* Whether rows of a view at p with row stride ld (in elements) all start aligned for the loads
 * of 4 elements tc_fetch makes, 16 bytes (fp32) or 8 (bf16) (head offsets h hs are: hs is a
 * multiple of 16). */
template <typename T> static inline bool tc_aligned(const T *p, size_t ld) {
#ifdef ZS_MUTANT_ALIGN
    return p != NULL || ld != 0; /* 16-byte loads from any row: a misaligned read (emulator) */
#endif
    return (uintptr_t)p % (4 * sizeof(T)) == 0 && ld % 4 == 0;
}

#endif

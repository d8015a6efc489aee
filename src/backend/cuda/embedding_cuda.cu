/* CUDA token and position embedding: the forward gathers rows of wte (and wpe), reading the
 * bf16 twin of either where the stream has one (ops.h twin16: a bf16 compute copy's widened
 * unit need not hold them, shard/engine_bf16.c); the backward sums rows in the CPU twin's
 * order (cpu/nn_cpu.c), with no atomics, so the bits match. ZS_COST as in nn_cuda.cu. */
#include "backend/cuda/cuda_internal.h"

/* wte and wpe as stored: fp32, or the bf16 twin (widened exactly, the same values). */
template <typename TE, typename PE>
static __global__ void embedding_fwd_kernel(float *out, const int32_t *tokens, const TE *wte,
                                            const PE *wpe, const int32_t *seg, int T, int C,
                                            size_t total) {
    ZS_CU_FOR(i, total) {
        size_t bt = i / (size_t)C, c = i % (size_t)C;
        float te = zs_cu_widen(wte[(size_t)tokens[bt] * C + c]);
        size_t pos = bt % (size_t)T - (size_t)zs_seg_lo(seg, bt); /* in its document */
        out[i] = wpe ? te + zs_cu_widen(wpe[pos * C + c]) : te;
    }
}

template <typename TE, typename PE>
static zs_status launch_embedding_fwd(cudaStream_t cs, float *out, const int32_t *tokens,
                                      const TE *wte, const PE *wpe, const int32_t *seg, int B,
                                      int T, int C) {
    zs_status st = ZS_OK;
    size_t total = (size_t)B * T * C;
    /* Ideal for distinct tokens (wte: one row per token) and without documents (wpe: rows
     * 0..T-1; with seg only the positions the documents reach, which device memory hides). */
    ZS_COST(wpe ? (double)total : 0.0, 0,
            4.0 * ((double)B * T + total + (seg ? (double)B * T : 0.0)) +
                (double)sizeof(TE) * total + (wpe ? (double)sizeof(PE) * T * C : 0.0));
    ZS_LAUNCH((embedding_fwd_kernel<TE, PE>), zs_cu_blocks(total), ZS_CU_THREADS, 0, cs, out,
              tokens, wte, wpe, seg, T, C, total);
    ZS_CUDA_CHECK_LAUNCH(embedding_fwd_kernel);
fail:
    return st;
}

/* A token repeated in the batch adds into the same row of dwte, the rows b*T+t in order, as
 * on the CPU. Tokens are split by id % WTE_PARTS, and block (p, y) owns the tokens of part p
 * and WTE_COLS columns from y * WTE_COLS, a thread a column. It lists its part's rows
 * WTE_CHUNK at a time in shared memory, in row order (ballots, no atomics), and each thread
 * walks the list WTE_BATCH rows at a time with every load of the batch in flight at once (the
 * rows' dout values, and the dwte values they add to), then the adds in row order, a token
 * met earlier in the batch continuing from that row's sum, then the stores in row order (the
 * last of a token's holds its total): the bits of one row at a time. One thread a column
 * over every row, 24 warps on the whole GPU, took 1.74 ms a gpt2-124m step on an H200; so
 * did the row at a time before it on an H100 (docs/cuda.md "On a real GPU"). A batch of one
 * repeated token still lands on one part, and walks as slowly as that did. */
#define WTE_PARTS 128
#define WTE_COLS 256
#define WTE_CHUNK 2048
#define WTE_BATCH 32
#define WTE_WARP_ROWS (WTE_CHUNK / (WTE_COLS / 32)) /* rows a warp lists: 256 */
static __global__ void embedding_bwd_wte_kernel(float *dwte, const float *dout,
                                                const int32_t *tokens, int BT, int C) {
    ZS_SHARED(int32_t, lrow, WTE_CHUNK);
    ZS_SHARED(int32_t, ltok, WTE_CHUNK);
    ZS_SHARED(int, wcount, WTE_COLS / 32);
    unsigned part = blockIdx.x, lane = threadIdx.x % 32u, w = threadIdx.x / 32u;
    size_t c = (size_t)blockIdx.y * WTE_COLS + threadIdx.x;
    for (int r0 = 0; r0 < BT; r0 += WTE_CHUNK) {
        /* list this chunk's rows of the part: warp w the rows r0 + 256 w + ... in order */
        int tk[WTE_WARP_ROWS / 32];
        unsigned hit[WTE_WARP_ROWS / 32];
        int mine = 0, off = 0, total = 0;
        ZS_UNROLL
        for (int k = 0; k < WTE_WARP_ROWS / 32; k++) {
            int row = r0 + (int)(w * WTE_WARP_ROWS + k * 32 + lane);
            tk[k] = row < BT ? tokens[row] : 0;
        }
        ZS_UNROLL
        for (int k = 0; k < WTE_WARP_ROWS / 32; k++) {
            int row = r0 + (int)(w * WTE_WARP_ROWS + k * 32 + lane);
            hit[k] = __ballot_sync(0xffffffffu, row < BT && (unsigned)tk[k] % WTE_PARTS == part);
            mine += __popc(hit[k]);
        }
        if (lane == 0) wcount[w] = mine;
        __syncthreads();
        for (unsigned v = 0; v < WTE_COLS / 32; v++) {
            off += v < w ? wcount[v] : 0;
            total += wcount[v];
        }
        ZS_UNROLL
        for (int k = 0; k < WTE_WARP_ROWS / 32; k++) {
            if (hit[k] >> lane & 1u) {
                int at = off + __popc(hit[k] & ((1u << lane) - 1u));
                lrow[at] = r0 + (int)(w * WTE_WARP_ROWS + k * 32 + lane);
                ltok[at] = tk[k];
            }
            off += __popc(hit[k]);
        }
        __syncthreads();
        for (int b0 = 0; c < (size_t)C && b0 < total; b0 += WTE_BATCH) {
            int n = total - b0 < WTE_BATCH ? total - b0 : WTE_BATCH;
            int32_t tok[WTE_BATCH];
            float d[WTE_BATCH], v[WTE_BATCH];
            ZS_UNROLL
            for (int u = 0; u < WTE_BATCH; u++) {
                int e = u < n ? b0 + u : b0;
                tok[u] = ltok[e];
                d[u] = dout[(size_t)lrow[e] * C + c];
            }
            ZS_UNROLL
            for (int u = 0; u < WTE_BATCH; u++)
                v[u] = dwte[(size_t)tok[u] * C + c];
            ZS_UNROLL
            for (int u = 0; u < WTE_BATCH; u++) {
                float base = v[u];
                ZS_UNROLL
                for (int q = 0; q < u; q++)
                    if (tok[q] == tok[u]) base = v[q]; /* the latest earlier row's sum */
                v[u] = base + d[u];
            }
            ZS_UNROLL
            for (int u = 0; u < WTE_BATCH; u++)
                if (u < n) dwte[(size_t)tok[u] * C + c] = v[u];
        }
        __syncthreads(); /* the list is read before the next chunk's overwrites it */
    }
}

/* With document masks positions repeat inside a row, so a thread owns a column of dwpe and
 * walks the rows b*T+t in order, as for dwte (and the CPU, for either). */
static __global__ void embedding_bwd_wpe_seg_kernel(float *dwpe, const float *dout,
                                                    const int32_t *seg, int BT, int T, int C) {
    ZS_CU_FOR(c, (size_t)C) {
        for (int bt = 0; bt < BT; bt++)
            dwpe[(size_t)(bt % T - seg[bt]) * C + c] += dout[(size_t)bt * C + c];
    }
}

/* dwpe[t, c] sums the batch rows b in order. */
static __global__ void embedding_bwd_wpe_kernel(float *dwpe, const float *dout, int B, int T,
                                                int C) {
    ZS_CU_FOR(i, (size_t)T * C) {
        for (int b = 0; b < B; b++)
            dwpe[i] += dout[(size_t)b * T * C + i];
    }
}

zs_status zs_cu_embedding_fwd(zs_stream_t *s, float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int B, int T, int C, const int32_t *seg) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    size_t total = (size_t)B * T * C;
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 0, ZS_ERR_INVALID,
               "embedding_fwd: negative shape B=%d T=%d C=%d", B, T, C);
    if (total == 0) return ZS_OK;
    ZS_REQUIRE(out && tokens && wte, ZS_ERR_INVALID, "embedding_fwd: NULL buffer");
    {
        /* A twin holds the whole table when it holds its first row (a unit's widened buffer). */
#ifndef ZS_MUTANT_EMBED_NO_TWIN
        const zs_bf16 *te = zs_cu_twin_at(s, wte, (size_t)C);
#else /* broken build: wte's fp32 places, which a bf16 compute copy leaves NaN */
        const zs_bf16 *te = NULL;
#endif
        const zs_bf16 *pe = wpe ? zs_cu_twin_at(s, wpe, (size_t)T * C) : NULL;
        if (te && pe)
            ZS_CHECK(launch_embedding_fwd(cs, out, tokens, te, pe, seg, B, T, C));
        else if (te)
            ZS_CHECK(launch_embedding_fwd(cs, out, tokens, te, wpe, seg, B, T, C));
        else if (pe)
            ZS_CHECK(launch_embedding_fwd(cs, out, tokens, wte, pe, seg, B, T, C));
        else
            ZS_CHECK(launch_embedding_fwd(cs, out, tokens, wte, wpe, seg, B, T, C));
    }
fail:
    return st;
}

zs_status zs_cu_embedding_bwd(zs_stream_t *s, float *dwte, float *dwpe, const float *dout,
                              const int32_t *tokens, int B, int T, int C, const int32_t *seg) {
    zs_status st = ZS_OK;
    cudaStream_t cs = zs_cu_stream(s);
    ZS_REQUIRE(B >= 0 && T >= 0 && C >= 0, ZS_ERR_INVALID,
               "embedding_bwd: negative shape B=%d T=%d C=%d", B, T, C);
    if ((size_t)B * T * C == 0) return ZS_OK;
    ZS_REQUIRE(dout && (tokens || !dwte), ZS_ERR_INVALID, "embedding_bwd: NULL buffer");
    if (dwte) {
        /* dwte rows of distinct tokens, read and written */
        ZS_COST((double)B * T * C, 0, 4.0 * ((double)B * T + 3.0 * B * T * C));
        ZS_LAUNCH(embedding_bwd_wte_kernel,
                  dim3(WTE_PARTS, (unsigned)((C + WTE_COLS - 1) / WTE_COLS)), WTE_COLS, 0, cs, dwte,
                  dout, tokens, B * T, C);
        ZS_CUDA_CHECK_LAUNCH(embedding_bwd_wte_kernel);
    }
    if (dwpe && seg) {
        /* dwpe rows 0..T-1 read and written: at most, the longest document's in fact */
        ZS_COST((double)B * T * C, 0, 4.0 * ((double)B * T + (double)B * T * C + 2.0 * T * C));
        ZS_LAUNCH(embedding_bwd_wpe_seg_kernel, zs_cu_blocks((size_t)C), ZS_CU_THREADS, 0, cs, dwpe,
                  dout, seg, B * T, T, C);
        ZS_CUDA_CHECK_LAUNCH(embedding_bwd_wpe_seg_kernel);
    } else if (dwpe) {
        ZS_COST((double)B * T * C, 0, 4.0 * ((double)B * T * C + 2.0 * T * C));
        ZS_LAUNCH(embedding_bwd_wpe_kernel, zs_cu_blocks((size_t)T * C), ZS_CU_THREADS, 0, cs, dwpe,
                  dout, B, T, C);
        ZS_CUDA_CHECK_LAUNCH(embedding_bwd_wpe_kernel);
    }
fail:
    return st;
}

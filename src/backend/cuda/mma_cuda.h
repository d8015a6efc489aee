/* Tensor-core products for the CUDA kernels (docs/cuda.md, "Kernels"): one warp-level
 * mma.sync.aligned.m16n8k16 (bf16 inputs, fp32 accumulation) behind one function, and the bf16
 * packing its fragments need. Under nvcc it is the PTX instruction (sm_80 and later); on the
 * emulated GPU the emulator's warp collective with the same fragment layouts.
 *
 * Fragments, per the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"),
 * for lane l of the warp, g = l / 4 and t = l % 4 (the two bf16 of a register: lower element in
 * the lower half):
 *  - A (16 x 16, row-major), 4 registers: (row g, cols 2t, 2t+1), (g+8, 2t..), (g, 2t+8..),
 *    (g+8, 2t+8..);
 *  - B (16 x 8, k x n), 2 registers: (k 2t, 2t+1; n g), (k 2t+8, 2t+9; n g);
 *  - C and D (16 x 8 fp32), 4 floats: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
 * So the C fragments of two neighbouring n-tiles are, rounded to bf16, the A fragment of the
 * k-step they span: a product's result feeds the next product without leaving registers. */
#ifndef ZS_BACKEND_CUDA_MMA_H
#define ZS_BACKEND_CUDA_MMA_H

#include "backend/cuda/cuda_internal.h"
#include "core/bf16.h"

typedef struct zs_mma_a {
    uint32_t x[4];
} zs_mma_a;
typedef struct zs_mma_b {
    uint32_t x[2];
} zs_mma_b;
typedef struct zs_mma_c {
    float x[4];
} zs_mma_c;

/* d += a b over one warp; every lane of the warp must call it together. */
static __device__ __forceinline__ void zs_mma_16816(zs_mma_c &d, const zs_mma_a &a,
                                                    const zs_mma_b &b) {
#ifdef ZS_CUDA_EMU
    zs_emu_mma_bf16_16816(ZS_EMU_SITE, d.x, a.x, b.x, d.x);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
#endif
}

/* Two floats as one bf16x2 register (lo in the lower half), each rounded to nearest even as
 * zs_f32_to_bf16 rounds on the CPU: on a GPU one cvt.rn.bf16x2.f32 (sm_80), the same bits for
 * every number (a NaN stays a NaN, its payload aside). */
static __device__ __forceinline__ uint32_t zs_pack_bf16(float lo, float hi) {
#ifdef ZS_CUDA_EMU
    return (uint32_t)zs_f32_to_bf16(lo).bits | ((uint32_t)zs_f32_to_bf16(hi).bits << 16);
#else
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}

/* 2^x as the attention kernels' softmax takes it (FlashAttention-2's exp2 with the scale folded
 * into one fmaf before it): on a GPU the special-function unit's ex2.approx.ftz (relative error
 * about 2^-22, -inf gives 0, results below FLT_MIN flushed to 0), one instruction where
 * zs_expf's polynomial takes about twenty; on the emulated GPU exp2f flushed the same way, so
 * the two may differ in the last bit (docs/cuda.md, "What runs where"). Each is
 * deterministic: a GPU run repeats its own bits. */
static __device__ __forceinline__ float zs_cu_exp2(float x) {
#ifdef ZS_CUDA_EMU
    float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

/* Four 8 x 8 matrices of 16-bit elements from shared memory, a warp's collective load
 * (ldmatrix.sync.aligned.m8n8.x4.shared.b16; every lane of the warp calls it together): lane l
 * gives p, the address of row l % 8 of matrix l / 8 (8 elements, 16 bytes, 16-byte aligned), and
 * receives in r[j] two elements of matrix j: row l / 4's columns 2 (l % 4) and 2 (l % 4) + 1, or
 * with trans, column l / 4's rows 2 (l % 4) and 2 (l % 4) + 1 (the lower element in the lower
 * half). Either is an mma B fragment's register: the non-transposed form from a block stored
 * [n][k], the transposed one from a block stored [k][n]. On the emulated GPU the same exchange
 * as shuffles of the row addresses, one 4-byte load a lane per matrix (each matrix's 8 rows of
 * 16 bytes, one shared-memory wavefront, as the hardware reads it, transposed or not), and for
 * trans shuffles of the loaded words (docs/cuda.md, "The profiler"). */
template <bool trans>
static __device__ __forceinline__ void zs_ldmatrix_x4(uint32_t r[4], const uint16_t *p) {
#ifdef ZS_CUDA_EMU
    int lane = (int)threadIdx.x % 32;
    ZS_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint16_t *row = __shfl_sync(0xffffffffu, p, j * 8 + lane / 4);
        uint32_t w = *(const uint32_t *)(row + 2 * (lane % 4));
        if (!trans) {
            r[j] = w;
        } else { /* rows 2 (l % 4), +1 of column l / 4, from the lanes that hold them */
            int sh = (lane / 4) % 2 * 16;
            uint32_t lo = __shfl_sync(0xffffffffu, w, 8 * (lane % 4) + lane / 8);
            uint32_t hi = __shfl_sync(0xffffffffu, w, 8 * (lane % 4) + 4 + lane / 8);
            r[j] = (lo >> sh & 0xffffu) | (hi >> sh & 0xffffu) << 16;
        }
    }
#else
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

/* A zero accumulator. */
static __device__ __forceinline__ void zs_mma_zero(zs_mma_c &c) {
    c.x[0] = c.x[1] = c.x[2] = c.x[3] = 0.0f;
}

#endif

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
 * zs_f32_to_bf16 rounds on the CPU. */
static __device__ __forceinline__ uint32_t zs_pack_bf16(float lo, float hi) {
    return (uint32_t)zs_f32_to_bf16(lo).bits | ((uint32_t)zs_f32_to_bf16(hi).bits << 16);
}

/* A zero accumulator. */
static __device__ __forceinline__ void zs_mma_zero(zs_mma_c &c) {
    c.x[0] = c.x[1] = c.x[2] = c.x[3] = 0.0f;
}

#endif

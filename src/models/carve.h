/* Carving one allocation into a model's activation or workspace buffers, shared by the
 * architectures so the byte counts the estimator reports and what create allocates are one
 * computation. */
#ifndef ZS_MODELS_CARVE_H
#define ZS_MODELS_CARVE_H

#include "backend/device.h"
#include "backend/ops.h"
#include "core/alloc.h"

#include <stdint.h>

/* n floats (rounded up to 64 bytes) from base at *total; with base NULL only counts. */
static inline float *zs_carve(float *base, uint64_t *total, uint64_t n) {
    float *p = base ? base + *total : NULL;
    *total += (n + 15) / 16 * 16;
    return p;
}

/* A GEMM's input that only GEMMs read (a norm's, GELU's or SwiGLU's output): n bf16 values in
 * n / 2 floats' room where act16 (--dtype bf16, backend/ops.h gemm16), else n floats. */
static inline void *zs_carve_in(float *base, uint64_t *total, uint64_t n, int act16) {
    return zs_carve(base, total, act16 ? (n + 1) / 2 : n);
}

/* Whether the attention's output (the projection's input) is kept in bf16: with act16 where
 * flash attention writes it (ops.h flash_attention_fwd16, for head sizes up to
 * ZS_FA_OUT16_MAX_HS); the naive kernels write fp32. */
static inline int zs_attn_out16(int act16, int naive, int hs) {
    return act16 && !naive && hs <= ZS_FA_OUT16_MAX_HS;
}

/* The two allocations every model carves on its device: activations (na bytes) and workspace
 * (ns). */
static inline zs_status zs_model_alloc_buffers(const zs_device *dev, uint64_t na, uint64_t ns,
                                               float **arena, float **scratch) {
    zs_status st = dev->alloc(ZS_MEM_ACTIVATION, na, "activations", (void **)arena);
    if (st == ZS_OK)
        st = dev->alloc(ZS_MEM_WORKSPACE, ns, "logits and activation gradients", (void **)scratch);
    return st;
}

#endif

/* Carving one allocation into a model's activation or workspace buffers, shared by the
 * architectures so the byte counts the estimator reports and what create allocates are one
 * computation. */
#ifndef ZS_MODELS_CARVE_H
#define ZS_MODELS_CARVE_H

#include "backend/device.h"
#include "core/alloc.h"

#include <stdint.h>

/* n floats (rounded up to 64 bytes) from base at *total; with base NULL only counts. */
static inline float *zs_carve(float *base, uint64_t *total, uint64_t n) {
    float *p = base ? base + *total : NULL;
    *total += (n + 15) / 16 * 16;
    return p;
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

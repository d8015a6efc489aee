/* Unit layout (docs/architecture.md "Units and flat buffers"): a model's parameters as an ordered
 * list of units, each a flat buffer of tensors in declaration order, every tensor aligned, every
 * unit padded to a multiple of world_size x align elements so each rank owns an equal contiguous
 * shard. The one function that computes it is zs_layout_finalize; the estimator, the checkpoint
 * manifest and the resharder all go through it. */
#ifndef ZS_SHARD_LAYOUT_H
#define ZS_SHARD_LAYOUT_H

#include "zshard.h"

#include <stdint.h>

#define ZS_LAYOUT_ALIGN 16 /* elements: 64 bytes of fp32 */
#define ZS_MAX_NAME ZS_MAX_TENSOR_NAME
#define ZS_MAX_DIMS ZS_MAX_TENSOR_DIMS

/* zs_init_kind (zeros, ones, normal, caller's values) is public: include/zshard/module.h. */

typedef struct zs_tensor_desc {
    char name[ZS_MAX_NAME];
    int ndim;
    int64_t shape[ZS_MAX_DIMS];
    int64_t count;  /* elements */
    int64_t offset; /* element offset inside its unit's flat buffer */
    int unit;       /* owning unit */
    int decay;      /* 1: weight decay applies (matrices) */
    zs_init_kind init;
    float init_std;
    int64_t zero_from; /* elements at index >= zero_from init to 0 (e.g. padded vocab rows) */
    /* 1: the model reads it only as a GEMM weight or an embedding table, ops a table with
     * twin16 and bf16 GEMMs reads from the bf16 twin; a bf16 compute copy then skips widening
     * it (shard/engine_bf16.c, docs/cuda.md "GEMM operands"). Set by the built-in models. */
    int twin_read;
} zs_tensor_desc;

typedef struct zs_unit_desc {
    char name[ZS_MAX_NAME];
    int first_tensor; /* index into tensors[] */
    int n_tensors;
    int64_t used;   /* elements up to the end of the last tensor (alignment gaps included) */
    int64_t padded; /* flat length: used rounded up to world_size * ZS_LAYOUT_ALIGN */
    int64_t shard;  /* padded / world_size: each rank's contiguous slice */
    int n_uses;     /* times the unit is acquired per forward (2 for a tied embedding) */
} zs_unit_desc;

typedef struct zs_layout {
    int n_units, cap_units;
    zs_unit_desc *units;
    int n_tensors, cap_tensors;
    zs_tensor_desc *tensors;
    int world_size;
    int64_t total_padded; /* sum of units' padded lengths */
    int64_t total_params; /* sum of tensor counts (real parameters) */
} zs_layout;

/* Builder: start a unit, then add its tensors. Allocation failures are reported by
 * zs_layout_finalize (the builder never fails halfway silently). */
void zs_layout_init(zs_layout *l);
zs_status zs_layout_add_unit(zs_layout *l, const char *name, int n_uses);
zs_status zs_layout_add_tensor(zs_layout *l, const char *name, int ndim, const int64_t *shape,
                               int decay, zs_init_kind init, float init_std);
/* Compute offsets, alignment and padding for world_size ranks. */
zs_status zs_layout_finalize(zs_layout *l, int world_size);
void zs_layout_free(zs_layout *l);
/* Deep copy of src's units and tensors, not finalized (finalize it for a world size). */
zs_status zs_layout_copy(const zs_layout *src, zs_layout *dst);
/* Index of the tensor with that name, or -1. */
int zs_layout_find(const zs_layout *l, const char *name);

#endif

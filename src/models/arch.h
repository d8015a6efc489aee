/* What an architecture gives the generic model of model.c: one table of its own parts (layout,
 * activation carving, block forward and backward, final norm), and a model struct that starts
 * with the zs_model_base every architecture shares. model.c builds the model, carves its
 * buffers and runs the pass (embedding, the block stack of stack.h, final norm and output head)
 * through the table; an architecture file writes only what differs (docs/models.md). */
#ifndef ZS_MODELS_ARCH_H
#define ZS_MODELS_ARCH_H

#include "models/model.h"
#include "models/stack.h"

#define ZS_MAX_BLOCK_TENSORS 16

/* The state every architecture shares; an architecture's struct holds it as its first member,
 * so model.c and the architecture see the same object. */
typedef struct zs_model_base {
    zs_model_config cfg;
    const zs_ops *ops;
    zs_stream_t *s;
    zs_module_t *engine;
    int recompute; /* ZS_RECOMPUTE_BLOCK: recompute each block inside its backward */
    int naive;     /* ZS_ATTENTION_NAIVE: keep T x T probabilities (else flash) */
    int act16;     /* bf16 activations: inputs only GEMMs read are stored in bf16 (zs_carve_in) */
    int tied;      /* head = the token embedding (unit 0, acquired twice), else the final unit's
                      last tensor */
    int64_t toff[ZS_MAX_BLOCK_TENSORS]; /* element offsets of block tensors within a block unit */
    int64_t off_embed;                  /* token embedding in unit 0 */
    int64_t off_pos;                    /* learned positions in unit 0, or -1 (none) */
    int64_t off_norm[2];                /* the final norm's tensors in the final unit */
    int64_t off_head;                   /* the output head: off_embed when tied */
    float *arena;   /* one activation allocation, carved by the architecture's table */
    zs_resid resid; /* the kept block inputs: embedding output, then each block's output */
    void *layers;   /* n_layer activation records of the architecture's layer_size */
    float *lnf;     /* [BT,C] final norm output */
    float *losses;  /* [BT] */
    float *scratch; /* workspace: logits and activation gradients, reused per layer */
    float *logits;  /* [BT,Vp]; backward overwrites it with dlogits in place */
    float *dres;    /* [BT,C] gradient of the residual stream */
    float *dC;      /* [BT,C] temporary: a projection's output or input gradient */
    float *datt;    /* naive: [B,NH,T,T] probability gradients; flash: [B,NH,T] delta rows */
    const int32_t *seg; /* this pass's document starts (device memory), or NULL */
} zs_model_base;

typedef struct zs_arch_impl {
    zs_arch arch;
    size_t model_size;  /* sizeof the architecture's struct (zs_model_base first) */
    size_t layer_size;  /* sizeof its per-layer activation record */
    int block_tensors;  /* tensors in a block unit, in toff order */
    int norm_tensors;   /* tensors of the final norm (1 or 2), first in the final unit */
    int learned_pos;    /* unit 0 holds learned positions after the token embedding */
    zs_status (*layout)(const zs_model_config *c, int world_size, zs_layout *out);
    /* The block's linear layers as its forward and backward call them with bf16 activations
     * (count: per block; naive: the naive attention); returns how many, at most
     * ZS_MODEL_MAX_LINEARS - 1. */
    int (*block_linears)(const zs_model_config *c, int naive, zs_linear_dims *out);
    /* One block's activation record, carved at *n (base NULL: count only), its GEMM-only inputs
     * in bf16 where act16 (zs_carve_in). */
    void (*carve_block)(const zs_model_config *c, int B, int T, int naive, int act16, float *base,
                        uint64_t *n, void *acts);
    /* After the shared buffers: the final norm's statistics (arena) and the architecture's
     * activation gradients (workspace), as zs_carve. */
    void (*carve_final)(zs_model_base *b, int B, int T, float *base, uint64_t *n);
    void (*carve_scratch)(zs_model_base *b, int B, int T, float *base, uint64_t *n);
    zs_block_fwd_fn block_fwd;
    zs_block_bwd_fn block_bwd;
    /* The final norm of the kept stream x into b->lnf (p at the final unit's parameters), and
     * its backward from b->dC into b->dres, parameter gradients into g (x NULL: x16 is its bf16
     * record, as block_bwd's). */
    zs_status (*norm_fwd)(zs_model_base *b, const float *p, const float *x, int BT);
    zs_status (*norm_bwd)(zs_model_base *b, const float *p, float *g, const float *x,
                          const zs_bf16 *x16, int BT);
    /* Optional (NULL: never): whether block_bwd and norm_bwd can read their kept input as its
     * bf16 record (x NULL, x16 set: models/stack.h) with ops o. */
    int (*bwd_reads16)(const zs_ops *o);
} zs_arch_impl;

extern const zs_arch_impl zs_gpt2_arch;
extern const zs_arch_impl zs_llama_arch;

/* Layer l's activation record of model b (the architecture's layer type). */
static inline void *zs_model_layer(const zs_model_base *b, size_t layer_size, int l) {
    return (char *)b->layers + (size_t)l * layer_size;
}

/* Real (padded-vocabulary) parameter count of a LLaMA layout, without building it. */
int64_t zs_llama_num_params(const zs_model_config *cfg);

#endif

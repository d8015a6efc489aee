/* The stack of transformer blocks, shared by the architectures: the residual stream kept
 * between blocks and the loops that run the blocks forward and backward (with activation
 * checkpointing), so every model keeps its activations and recomputes the same way.
 *
 * The residual stream between blocks is the one activation every block keeps for its backward
 * (block l's input is kept tensor l: the embedding output for l = 0, block l-1's output
 * after).
 *
 * fp32 (--dtype fp32): kept tensor l is an fp32 buffer that is written and read in place.
 * bf16 (--dtype bf16): kept tensors are bf16, half the bytes. Each is produced in one of two
 * fp32 working buffers (ping-pong by l), rounded into its bf16 record, and the working buffer
 * is replaced by the rounded values, so the next block computes on exactly what backward will
 * read back. Backward widens kept tensor l into working buffer l & 1 (or, where the blocks'
 * backward reads it as stored and nothing recomputes, leaves it bf16: zs_stack's x16); block
 * l's recomputed output then goes to the other one. The stream is thus bf16 at every block
 * boundary with or without recompute, and --recompute block stays bitwise equal to none. */
#ifndef ZS_MODELS_RESID_H
#define ZS_MODELS_RESID_H

#include "backend/ops.h"
#include "core/bf16.h"
#include "shard/module.h"

typedef struct zs_resid {
    int bf16;
    int n_kept;     /* n_layer + 1 */
    float **f32;    /* fp32: the kept tensors [n_kept][BT*C] */
    zs_bf16 **b16;  /* bf16: the kept tensors */
    float *work[2]; /* bf16: fp32 working buffers [BT*C] */
} zs_resid;

/* Allocate the pointer arrays for n_layer blocks (zs_resid_free releases them). */
zs_status zs_resid_init(zs_resid *r, int n_layer, int bf16);
void zs_resid_free(zs_resid *r);

/* Carve kept tensor l ([n] elements each) from the activation arena at *total, as zs_carve
 * (base NULL: count only), and, for l == 0 in bf16, the two working buffers. */
void zs_resid_carve(zs_resid *r, int l, float *base, uint64_t *total, uint64_t n);

/* Where kept tensor l is produced (the embedding for l = 0, block l-1 otherwise). */
float *zs_resid_out(const zs_resid *r, int l);

/* In bf16, kept tensor l's record, which a block's last residual add writes as it rounds its
 * output (ops.h bias_residual_fwd's keep); NULL in fp32. */
zs_bf16 *zs_resid_rec(const zs_resid *r, int l);

/* Kept tensor l has been produced in zs_resid_out(r, l) (n elements): in bf16, round it into
 * its record and replace the working values by the rounded ones (the embedding's output, l = 0;
 * blocks round theirs as they write them). Returns the fp32 values the next block reads. */
zs_status zs_resid_keep(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x);

/* Kept tensor l as fp32 for backward (in bf16, widened into working buffer l & 1). */
zs_status zs_resid_load(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x);

/* Kept tensor l for a backward that reads it once, as zs_resid_load, or where as16 and it is
 * kept in bf16, its record as it is: *x16 the record and *x NULL, with no widening (*x16 NULL
 * otherwise). */
zs_status zs_resid_load_for(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                            int as16, const float **x, const zs_bf16 **x16);

/* A block's forward from input x with full parameters p into the activations of layer l, its
 * output to out (in bf16 rounded, its record written: zs_resid_rec(l + 1)); its backward
 * (d loss / d out in the model's gradient buffer on entry, d loss / d x on exit), accumulating
 * parameter gradients into g, with x fp32, or with x NULL and x16 its bf16 record (zs_stack's
 * x16). */
typedef zs_status (*zs_block_fwd_fn)(void *model, const float *p, const float *x, int l, float *out,
                                     int B, int T);
typedef zs_status (*zs_block_bwd_fn)(void *model, const float *p, float *g, const float *x,
                                     const zs_bf16 *x16, int l, int B, int T);

typedef struct zs_stack {
    zs_resid *resid;
    zs_module_t *engine;
    const zs_ops *ops;
    zs_stream_t *s;
    int n_layer, first_unit; /* block l is engine unit first_unit + l */
    int recompute;           /* rebuild each block's activations inside its backward */
    int x16; /* the blocks' backward reads a bf16 kept input as it is (zs_resid_load_for) */
    zs_block_fwd_fn fwd;
    zs_block_bwd_fn bwd;
    void *model;
} zs_stack;

/* The embedding output is in zs_resid_out(resid, 0): keep it, run every block, keep each
 * output. *x is the last block's output, the final norm's input. */
zs_status zs_stack_forward(const zs_stack *k, int B, int T, size_t n, const float **x);

/* Every block's backward, last to first: acquire the block, rebuild its activations from its
 * kept input when recomputing (with the parameters backward_begin returned: in ZeRO-3 the
 * backward's own gather, no extra one), run its backward, release it. */
zs_status zs_stack_backward(const zs_stack *k, int B, int T, size_t n);

#endif

/* The residual stream between blocks: the one activation every block keeps for its backward
 * (block l's input is kept tensor l: the embedding output for l = 0, block l-1's output
 * after). Shared by the architectures, so they keep it the same way.
 *
 * fp32 (--dtype fp32): kept tensor l is an fp32 buffer that is written and read in place.
 * bf16 (--dtype bf16): kept tensors are bf16, half the bytes. Each is produced in one of two
 * fp32 working buffers (ping-pong by l), rounded into its bf16 record, and the working buffer
 * is replaced by the rounded values, so the next block computes on exactly what backward will
 * read back. Backward widens kept tensor l into working buffer l & 1; block l's recomputed
 * output then goes to the other one. The stream is therefore bf16 at every block boundary
 * whether or not blocks are recomputed, and --recompute block stays bitwise equal to none. */
#ifndef ZS_MODELS_RESID_H
#define ZS_MODELS_RESID_H

#include "backend/ops.h"
#include "core/bf16.h"

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

/* Kept tensor l has been produced in zs_resid_out(r, l) (n elements): in bf16, round it into
 * its record and replace the working values by the rounded ones. Returns the fp32 values the
 * next block reads. */
zs_status zs_resid_keep(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x);

/* Kept tensor l as fp32 for backward (in bf16, widened into working buffer l & 1). */
zs_status zs_resid_load(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x);

#endif

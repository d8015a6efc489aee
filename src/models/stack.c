/* The stack of blocks: the residual stream kept between them, fp32 or bf16, and the loops
 * that run them (see stack.h). */
#include "models/stack.h"

#include "core/status.h"
#include "models/carve.h"

#include <stdlib.h>

zs_status zs_resid_init(zs_resid *r, int n_layer, int bf16) {
    r->bf16 = bf16;
    r->n_kept = n_layer + 1;
    r->f32 = calloc((size_t)r->n_kept, sizeof *r->f32);
    r->b16 = calloc((size_t)r->n_kept, sizeof *r->b16);
    r->work[0] = r->work[1] = NULL;
    if (!r->f32 || !r->b16) {
        zs_resid_free(r);
        return zs_error(ZS_ERR_OOM, "model: out of memory");
    }
    return ZS_OK;
}

void zs_resid_free(zs_resid *r) {
    free(r->f32);
    free(r->b16);
    r->f32 = NULL;
    r->b16 = NULL;
}

void zs_resid_carve(zs_resid *r, int l, float *base, uint64_t *total, uint64_t n) {
    if (!r->bf16) {
        float *p = zs_carve(base, total, n);
        if (r->f32) r->f32[l] = p;
        return;
    }
    if (l == 0) {
        r->work[0] = zs_carve(base, total, n);
        r->work[1] = zs_carve(base, total, n);
    }
    /* n bf16 values take n / 2 floats' room (rounded up by the carve). */
    float *p = zs_carve(base, total, (n + 1) / 2);
    if (r->b16) r->b16[l] = (zs_bf16 *)(void *)p;
}

float *zs_resid_out(const zs_resid *r, int l) {
    return r->bf16 ? r->work[l & 1] : r->f32[l];
}

zs_bf16 *zs_resid_rec(const zs_resid *r, int l) {
    return r->bf16 && r->b16 ? r->b16[l] : NULL;
}

zs_status zs_resid_keep(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x) {
    zs_status st = ZS_OK;
    *x = zs_resid_out(r, l);
    if (!r->bf16) return ZS_OK;
    ZS_CHECK(o->cast(s, r->b16[l], ZS_DTYPE_BF16, r->work[l & 1], ZS_DTYPE_F32, n));
    ZS_CHECK(o->cast(s, r->work[l & 1], ZS_DTYPE_F32, r->b16[l], ZS_DTYPE_BF16, n));
fail:
    return st;
}

zs_status zs_resid_load(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                        const float **x) {
    zs_status st = ZS_OK;
    *x = zs_resid_out(r, l);
    if (!r->bf16) return ZS_OK;
    ZS_CHECK(o->cast(s, r->work[l & 1], ZS_DTYPE_F32, r->b16[l], ZS_DTYPE_BF16, n));
fail:
    return st;
}

zs_status zs_resid_load_for(const zs_resid *r, const zs_ops *o, zs_stream_t *s, int l, size_t n,
                            int as16, const float **x, const zs_bf16 **x16) {
    *x16 = as16 ? zs_resid_rec(r, l) : NULL;
    if (*x16) {
        *x = NULL;
        return ZS_OK;
    }
    return zs_resid_load(r, o, s, l, n, x);
}

zs_status zs_stack_forward(const zs_stack *k, int B, int T, size_t n, const float **x) {
    zs_status st = ZS_OK;
    float *p = NULL;
    ZS_CHECK(zs_resid_keep(k->resid, k->ops, k->s, 0, n, x));
    for (int l = 0; l < k->n_layer; l++) {
        ZS_CHECK(zs_module_forward_begin(k->engine, k->first_unit + l, &p));
        ZS_CHECK(k->fwd(k->model, p, *x, l, zs_resid_out(k->resid, l + 1), B, T));
        ZS_CHECK(zs_module_forward_end(k->engine, k->first_unit + l));
        /* the block's last residual add rounded its output and wrote the record (zs_resid_rec) */
        *x = zs_resid_out(k->resid, l + 1);
    }
fail:
    return st;
}

zs_status zs_stack_backward(const zs_stack *k, int B, int T, size_t n) {
    zs_status st = ZS_OK;
    float *p = NULL, *g = NULL;
    const float *x = NULL;
    const zs_bf16 *x16 = NULL;
    for (int l = k->n_layer - 1; l >= 0; l--) {
        /* a recomputed forward reads x in fp32, so its backward does too */
        ZS_CHECK(
            zs_resid_load_for(k->resid, k->ops, k->s, l, n, k->x16 && !k->recompute, &x, &x16));
        ZS_CHECK(zs_module_backward_begin(k->engine, k->first_unit + l, &p, &g));
        /* The same ops on the same inputs and parameters give the forward's bits. */
        if (k->recompute) ZS_CHECK(k->fwd(k->model, p, x, l, zs_resid_out(k->resid, l + 1), B, T));
        ZS_CHECK(k->bwd(k->model, p, g, x, x16, l, B, T));
        ZS_CHECK(zs_module_backward_end(k->engine, k->first_unit + l));
    }
fail:
    return st;
}

/* The residual stream kept between blocks, fp32 or bf16 (see resid.h). */
#include "models/resid.h"

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

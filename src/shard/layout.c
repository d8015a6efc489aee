/* Builds the unit layout: tensor offsets with alignment, unit padding for even shards. */
#include "shard/layout.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

void zs_layout_init(zs_layout *l) {
    memset(l, 0, sizeof *l);
}

void zs_layout_free(zs_layout *l) {
    if (!l) return;
    free(l->units);
    free(l->tensors);
    memset(l, 0, sizeof *l);
}

zs_status zs_layout_add_unit(zs_layout *l, const char *name, int n_uses) {
    if (l->n_units == l->cap_units) {
        int cap = l->cap_units ? 2 * l->cap_units : 16;
        zs_unit_desc *u = realloc(l->units, (size_t)cap * sizeof *u);
        if (!u) return zs_error(ZS_ERR_OOM, "layout: out of memory adding unit %s", name);
        l->units = u;
        l->cap_units = cap;
    }
    zs_unit_desc *u = &l->units[l->n_units++];
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    u->first_tensor = l->n_tensors;
    u->n_uses = n_uses < 1 ? 1 : n_uses;
    return ZS_OK;
}

zs_status zs_layout_add_tensor(zs_layout *l, const char *name, int ndim, const int64_t *shape,
                               int decay, zs_init_kind init, float init_std) {
    if (l->n_units == 0)
        return zs_error(ZS_ERR_INTERNAL, "layout: tensor %s added before any unit", name);
    if (ndim < 1 || ndim > ZS_MAX_DIMS)
        return zs_error(ZS_ERR_INTERNAL, "layout: tensor %s has %d dims", name, ndim);
    if (l->n_tensors == l->cap_tensors) {
        int cap = l->cap_tensors ? 2 * l->cap_tensors : 64;
        zs_tensor_desc *t = realloc(l->tensors, (size_t)cap * sizeof *t);
        if (!t) return zs_error(ZS_ERR_OOM, "layout: out of memory adding tensor %s", name);
        l->tensors = t;
        l->cap_tensors = cap;
    }
    zs_tensor_desc *t = &l->tensors[l->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return zs_error(ZS_ERR_INVALID, "layout: tensor %s has dimension %d of size %lld", name,
                            d, (long long)shape[d]);
        t->shape[d] = shape[d];
        t->count *= shape[d];
    }
    t->unit = l->n_units - 1;
    t->decay = decay;
    t->init = init;
    t->init_std = init_std;
    t->zero_from = t->count;
    l->units[t->unit].n_tensors++;
    return ZS_OK;
}

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

zs_status zs_layout_finalize(zs_layout *l, int world_size) {
    if (world_size < 1)
        return zs_error(ZS_ERR_INVALID, "layout: world size %d must be >= 1", world_size);
    l->world_size = world_size;
    l->total_padded = 0;
    l->total_params = 0;
    for (int u = 0; u < l->n_units; u++) {
        zs_unit_desc *ud = &l->units[u];
        int64_t off = 0;
        for (int i = 0; i < ud->n_tensors; i++) {
            zs_tensor_desc *t = &l->tensors[ud->first_tensor + i];
            /* Each tensor starts 64-byte aligned so ops get aligned pointers. */
            off = round_up(off, ZS_LAYOUT_ALIGN);
            t->offset = off;
            off += t->count;
            l->total_params += t->count;
        }
        ud->used = off;
        /* Pad to world_size x align: every rank gets an equal shard that is itself aligned.
         * No model size is rejected for not dividing evenly; padding is zero, never updated. */
        ud->padded = round_up(off > 0 ? off : 1, (int64_t)world_size * ZS_LAYOUT_ALIGN);
        ud->shard = ud->padded / world_size;
        l->total_padded += ud->padded;
    }
    return ZS_OK;
}

zs_status zs_layout_copy(const zs_layout *src, zs_layout *dst) {
    zs_status st = ZS_OK;
    zs_layout_init(dst);
    for (int u = 0; u < src->n_units; u++) {
        const zs_unit_desc *ud = &src->units[u];
        ZS_CHECK(zs_layout_add_unit(dst, ud->name, ud->n_uses));
        for (int i = 0; i < ud->n_tensors; i++) {
            const zs_tensor_desc *t = &src->tensors[ud->first_tensor + i];
            ZS_CHECK(zs_layout_add_tensor(dst, t->name, t->ndim, t->shape, t->decay, t->init,
                                          t->init_std));
            dst->tensors[dst->n_tensors - 1].zero_from = t->zero_from;
            dst->tensors[dst->n_tensors - 1].twin_read = t->twin_read;
        }
    }
    return ZS_OK;
fail:
    zs_layout_free(dst);
    return st;
}

int zs_layout_find(const zs_layout *l, const char *name) {
    for (int i = 0; i < l->n_tensors; i++)
        if (!strcmp(l->tensors[i].name, name)) return i;
    return -1;
}

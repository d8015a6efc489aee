/* safetensors headers: parsing and validating a file's header (8-byte little-endian length,
 * JSON header, data section). The header is untrusted: dtypes, shapes and offsets are checked
 * against the data section before any tensor is read (docs/checkpoint.md). */
#include "ckpt/convert.h"

#include "ckpt/json.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int size;
} DTYPES[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
              {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},      {"U16", 2},
              {"U32", 4}, {"U64", 8}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

void zs_st_header_free(zs_st_header *h) {
    if (!h) return;
    free(h->e);
    memset(h, 0, sizeof *h);
}

static int cmp_begin(const void *a, const void *b) {
    const zs_st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static zs_status parse_meta(const zs_json *m, const char *what, zs_st_header *h) {
    static const char *ikeys[] = {"zshard.n_head", "zshard.n_kv_head", "zshard.ffn_hidden",
                                  "zshard.max_seq", "zshard.vocab"};
    if (m->type != ZS_JSON_OBJECT)
        return zs_error(ZS_ERR_FORMAT, "%s: __metadata__ is not an object", what);
    int *idst[] = {&h->meta_n_head, &h->meta_n_kv_head, &h->meta_ffn_hidden, &h->meta_max_seq,
                   &h->meta_vocab};
    for (const zs_json *c = m->child; c; c = c->next) {
        if (c->type != ZS_JSON_STRING)
            return zs_error(ZS_ERR_FORMAT, "%s: __metadata__ value '%s' is not a string", what,
                            c->key);
        char *end = NULL;
        if (!strcmp(c->key, "zshard.arch"))
            snprintf(h->meta_arch, sizeof h->meta_arch, "%s", c->str);
        for (int k = 0; k < 5; k++) {
            if (strcmp(c->key, ikeys[k])) continue;
            long v = strtol(c->str, &end, 10);
            if (*end || v <= 0 || v > (1 << 24))
                return zs_error(ZS_ERR_FORMAT, "%s: __metadata__ %s = '%s' is not a count", what,
                                c->key, c->str);
            *idst[k] = (int)v;
        }
        int theta = !strcmp(c->key, "zshard.rope_theta"), eps = !strcmp(c->key, "zshard.norm_eps");
        if (theta || eps) {
            double v = strtod(c->str, &end);
            if (*end || !(v > 0) || v > 1e12)
                return zs_error(ZS_ERR_FORMAT,
                                "%s: __metadata__ %s = '%s' is not a positive "
                                "number",
                                what, c->key, c->str);
            *(theta ? &h->meta_rope_theta : &h->meta_norm_eps) = v;
        }
    }
    return ZS_OK;
}

static zs_status parse_entry(const zs_json *v, const char *what, uint64_t data_size,
                             zs_st_entry *e) {
    zs_status st = ZS_OK;
    const char *dt;
    ZS_REQUIRE(strlen(v->key) < sizeof e->name, ZS_ERR_FORMAT, "%s: tensor name too long", what);
    snprintf(e->name, sizeof e->name, "%s", v->key);
    ZS_REQUIRE(v->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: tensor %s: not an object", what,
               e->name);
    ZS_CHECK(zs_json_get_str(v, "dtype", what, &dt));
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES && !e->elem_size; i++)
        if (!strcmp(dt, DTYPES[i].name)) {
            snprintf(e->dtype, sizeof e->dtype, "%s", dt);
            e->elem_size = DTYPES[i].size;
        }
    ZS_REQUIRE(e->elem_size, ZS_ERR_FORMAT, "%s: tensor %s: unknown dtype '%.16s'", what, e->name,
               dt);
    const zs_json *sh = zs_json_get(v, "shape"), *off = zs_json_get(v, "data_offsets");
    ZS_REQUIRE(sh && sh->type == ZS_JSON_ARRAY && sh->n <= ZS_ST_MAX_DIMS, ZS_ERR_FORMAT,
               "%s: tensor %s: shape is not an array of at most %d sizes", what, e->name,
               ZS_ST_MAX_DIMS);
    uint64_t numel = 1;
    e->ndim = sh->n;
    int d = 0;
    for (const zs_json *x = sh->child; x; x = x->next, d++) {
        ZS_REQUIRE(x->type == ZS_JSON_NUMBER && x->is_int && x->ival >= 0, ZS_ERR_FORMAT,
                   "%s: tensor %s: shape has a non-integer or negative size", what, e->name);
        e->shape[d] = x->ival;
        ZS_REQUIRE(x->ival == 0 || numel <= UINT64_MAX / (uint64_t)x->ival / 8, ZS_ERR_FORMAT,
                   "%s: tensor %s: shape overflows", what, e->name);
        numel *= (uint64_t)x->ival;
    }
    ZS_REQUIRE(off && off->type == ZS_JSON_ARRAY && off->n == 2, ZS_ERR_FORMAT,
               "%s: tensor %s: data_offsets is not [begin, end]", what, e->name);
    const zs_json *b = off->child, *en = b->next;
    ZS_REQUIRE(b->type == ZS_JSON_NUMBER && b->is_int && b->ival >= 0 &&
                   en->type == ZS_JSON_NUMBER && en->is_int && en->ival >= b->ival,
               ZS_ERR_FORMAT, "%s: tensor %s: data_offsets are not 0 <= begin <= end", what,
               e->name);
    e->begin = (uint64_t)b->ival;
    e->end = (uint64_t)en->ival;
    ZS_REQUIRE(e->end <= data_size, ZS_ERR_FORMAT,
               "%s: tensor %s: data_offsets [%llu, %llu] lie outside the file's %llu data bytes",
               what, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
               (unsigned long long)data_size);
    ZS_REQUIRE(e->end - e->begin == numel * (uint64_t)e->elem_size, ZS_ERR_FORMAT,
               "%s: tensor %s: %llu bytes for %llu %s values", what, e->name,
               (unsigned long long)(e->end - e->begin), (unsigned long long)numel, e->dtype);
fail:
    return st;
}

zs_status zs_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
                      zs_st_header *out) {
    zs_status st = ZS_OK;
    zs_json *root = NULL;
    memset(out, 0, sizeof *out);
    ZS_REQUIRE(len >= 8 && file_size >= 8, ZS_ERR_FORMAT, "%s: truncated: no 8-byte header length",
               what);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    ZS_REQUIRE(hlen >= 2 && hlen <= ZS_ST_MAX_HEADER, ZS_ERR_FORMAT,
               "%s: header length %llu is not a safetensors header", what,
               (unsigned long long)hlen);
    ZS_REQUIRE(hlen <= file_size - 8 && hlen <= len - 8, ZS_ERR_FORMAT,
               "%s: truncated: header of %llu bytes, file has %llu", what, (unsigned long long)hlen,
               (unsigned long long)file_size);
    out->data_start = 8 + hlen;
    uint64_t data_size = file_size - out->data_start;
    /* Writers pad the header with spaces; the JSON parser skips trailing whitespace. */
    st = zs_json_parse((const char *)buf + 8, (size_t)hlen, &root);
    if (st != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(st, "%s: bad JSON header: %s", what, msg);
        goto fail;
    }
    ZS_REQUIRE(root->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: header is not a JSON object",
               what);
    out->e = calloc((size_t)(root->n ? root->n : 1), sizeof *out->e);
    ZS_REQUIRE(out->e, ZS_ERR_OOM, "%s: out of memory", what);
    for (const zs_json *v = root->child; v; v = v->next) {
        if (!strcmp(v->key, "__metadata__")) {
            ZS_CHECK(parse_meta(v, what, out));
            continue;
        }
        ZS_CHECK(parse_entry(v, what, data_size, &out->e[out->n]));
        for (int i = 0; i < out->n; i++)
            ZS_REQUIRE(strcmp(out->e[i].name, out->e[out->n].name), ZS_ERR_FORMAT,
                       "%s: tensor %s appears twice", what, out->e[i].name);
        out->n++;
    }
    /* Tensors must not share bytes (the format forbids it; an overlap means a bad file). */
    zs_st_entry *sorted = malloc((size_t)(out->n ? out->n : 1) * sizeof *sorted);
    ZS_REQUIRE(sorted, ZS_ERR_OOM, "%s: out of memory", what);
    memcpy(sorted, out->e, (size_t)out->n * sizeof *sorted);
    qsort(sorted, (size_t)out->n, sizeof *sorted, cmp_begin);
    int overlap = -1;
    for (int i = 1; i < out->n && overlap < 0; i++)
        if (sorted[i].begin < sorted[i - 1].end && sorted[i].end > sorted[i].begin) overlap = i;
    char a[128] = "", b2[128] = "";
    if (overlap > 0) {
        snprintf(a, sizeof a, "%s", sorted[overlap - 1].name);
        snprintf(b2, sizeof b2, "%s", sorted[overlap].name);
    }
    free(sorted);
    ZS_REQUIRE(overlap < 0, ZS_ERR_FORMAT, "%s: tensors %s and %s overlap", what, a, b2);
    zs_json_free(root);
    return ZS_OK;
fail:
    zs_json_free(root);
    zs_st_header_free(out);
    return st;
}

/* Reading manifest.json: untrusted input, validated completely before anything is used. The
 * format and version come first (so a newer checkpoint gets a clear message), then the
 * manifest's own checksum, then every field; the layout and the frame lists must equal the
 * ones this zshard derives from the recorded model config and world size. */
#include "ckpt/ckpt.h"

#include "ckpt/crc32c.h"
#include "ckpt/json.h"
#include "core/status.h"
#include "models/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define CRC_KEY ",\n\"manifest_crc32c\":\""

/* Offset of the last CRC_KEY in text, or -1. */
static int64_t find_crc_key(const char *text, size_t len) {
    size_t kl = strlen(CRC_KEY);
    for (size_t i = len >= kl ? len - kl + 1 : 0; i-- > 0;)
        if (!memcmp(text + i, CRC_KEY, kl)) return (int64_t)i;
    return -1;
}

static int parse_hex32(const char *s, uint32_t *out) {
    if (strlen(s) != 8) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static zs_status check_crc(const char *text, size_t len, const char *what) {
    int64_t at = find_crc_key(text, len);
    size_t kl = strlen(CRC_KEY);
    char hex[9] = {0};
    uint32_t want;
    if (at < 0 || (size_t)at + kl + 8 > len)
        return zs_error(ZS_ERR_FORMAT,
                        "%s: no manifest_crc32c field (damaged or not written by "
                        "zshard)",
                        what);
    memcpy(hex, text + at + (int64_t)kl, 8);
    if (!parse_hex32(hex, &want))
        return zs_error(ZS_ERR_FORMAT, "%s: malformed manifest_crc32c", what);
    uint32_t got = zs_crc32c(0, text, (size_t)at);
    if (got != want)
        return zs_error(ZS_ERR_FORMAT,
                        "%s: checksum mismatch (crc32c %08x, recorded %08x): the "
                        "manifest is damaged",
                        what, got, want);
    return ZS_OK;
}

#define GETI(obj, key, lo, hi, dst)                                                                \
    do {                                                                                           \
        int64_t v_;                                                                                \
        ZS_CHECK(zs_json_get_int((obj), (key), (lo), (hi), what, &v_));                            \
        (dst) = v_;                                                                                \
    } while (0)
#define GETD(obj, key, dst) ZS_CHECK(zs_json_get_num((obj), (key), what, &(dst)))

static zs_status parse_model(const zs_json *root, int64_t version, const char *what,
                             zs_model_config *c) {
    zs_status st = ZS_OK;
    const char *s;
    const zs_json *m = zs_json_get(root, "model");
    ZS_REQUIRE(m && m->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: missing \"model\" object", what);
    memset(c, 0, sizeof *c);
    ZS_CHECK(zs_json_get_str(m, "arch", what, &s));
    ZS_REQUIRE(!strcmp(s, "gpt2") || !strcmp(s, "llama") || !strcmp(s, "custom"), ZS_ERR_FORMAT,
               "%s: model arch '%s' is not supported (gpt2, llama, custom)", what, s);
    c->arch = !strcmp(s, "llama")    ? ZS_ARCH_LLAMA
              : !strcmp(s, "custom") ? ZS_ARCH_CUSTOM
                                     : ZS_ARCH_GPT2;
    ZS_CHECK(zs_json_get_str(m, "name", what, &s));
    ZS_REQUIRE(strlen(s) < sizeof c->name, ZS_ERR_FORMAT, "%s: model name too long", what);
    snprintf(c->name, sizeof c->name, "%s", s);
    if (c->arch == ZS_ARCH_CUSTOM) return ZS_OK; /* its layout is its description */
    GETI(m, "n_layer", 1, 1024, c->n_layer);
    GETI(m, "n_head", 1, 4096, c->n_head);
    GETI(m, "n_kv_head", 1, 4096, c->n_kv_head);
    GETI(m, "n_embd", 1, 65536, c->n_embd);
    GETI(m, "ffn_hidden", 1, 1 << 20, c->ffn_hidden);
    double theta, eps;
    GETD(m, "rope_theta", theta);
    GETD(m, "norm_eps", eps);
    c->rope_theta = (float)theta;
    c->norm_eps = (float)eps;
    GETI(m, "max_seq", 1, 1 << 20, c->max_seq);
    GETI(m, "vocab", 1, 1 << 24, c->vocab);
    int padded = 0;
    GETI(m, "padded_vocab", 1, 1 << 25, padded);
    zs_model_config_set_vocab(c, c->vocab);
    /* Written as the resolved choice, so a reader never depends on a default; version 1 had
     * no field and each architecture's own head (GPT-2 tied, LLaMA untied). */
    if (version >= 2) {
        const zs_json *tie = zs_json_get(m, "tie_embeddings");
        ZS_REQUIRE(tie && tie->type == ZS_JSON_BOOL, ZS_ERR_FORMAT,
                   "%s: model.tie_embeddings must be true or false", what);
        c->tie_embeddings = tie->boolean ? ZS_TIE_ON : ZS_TIE_OFF;
    }
    ZS_REQUIRE(padded == c->padded_vocab, ZS_ERR_FORMAT,
               "%s: padded_vocab %d does not match vocab %d (expected %d)", what, padded, c->vocab,
               c->padded_vocab);
    ZS_REQUIRE(c->n_embd % c->n_head == 0, ZS_ERR_FORMAT, "%s: %d heads do not divide width %d",
               what, c->n_head, c->n_embd);
    if (zs_model_config_validate(c) != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(ZS_ERR_FORMAT, "%s: %s", what, msg);
        goto fail;
    }
fail:
    return st;
}

static zs_status parse_info(const zs_json *root, int64_t version, const char *what,
                            zs_ckpt_info *in) {
    zs_status st = ZS_OK;
    const char *s;
    memset(in, 0, sizeof *in);
    ZS_CHECK(zs_json_get_str(root, "source", what, &s));
    snprintf(in->source, sizeof in->source, "%s", s);
    GETI(root, "step", 0, INT32_MAX, in->step);
    ZS_CHECK(zs_json_get_str(root, "seed", what, &s));
    char *end = NULL;
    errno = 0;
    in->seed = strtoull(s, &end, 10);
    ZS_REQUIRE(*s >= '0' && *s <= '9' && !*end && !errno, ZS_ERR_FORMAT,
               "%s: seed '%s' is not an unsigned integer", what, s);
    GETI(root, "data_position", 0, INT64_MAX, in->data_position);
    GETI(root, "world_size", 1, 65536, in->world_size);
    ZS_CHECK(zs_json_get_str(root, "stage", what, &s));
    ZS_REQUIRE(zs_ckpt_stage_parse(s, &in->stage) == ZS_OK, ZS_ERR_FORMAT, "%s: stage '%s'", what,
               s);
    const zs_json *dt = zs_json_get(root, "dtypes");
    for (int k = 0; k < ZS_CKPT_NKINDS; k++) {
        ZS_CHECK(zs_json_get_str(dt, zs_ckpt_kind_name(k), what, &s));
        ZS_REQUIRE(!strcmp(s, "f32"), ZS_ERR_FORMAT, "%s: dtype '%s' of %s is not supported (f32)",
                   what, s, zs_ckpt_kind_name(k));
    }
    ZS_CHECK(parse_model(root, version, what, &in->model));
    const zs_json *t = zs_json_get(root, "training");
    ZS_REQUIRE(t && t->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: missing \"training\" object",
               what);
    GETI(t, "batch", 0, INT32_MAX, in->batch);
    GETI(t, "seq", 0, INT32_MAX, in->seq);
    GETI(t, "grad_accum", 0, INT32_MAX, in->grad_accum);
    GETI(t, "total_steps", 0, INT32_MAX, in->total_steps);
    GETI(t, "warmup", 0, INT32_MAX, in->warmup);
    GETD(t, "lr", in->lr);
    GETD(t, "min_lr_frac", in->min_lr_frac);
    GETD(t, "next_lr", in->next_lr);
    GETD(t, "beta1", in->beta1);
    GETD(t, "beta2", in->beta2);
    GETD(t, "eps", in->eps);
    GETD(t, "weight_decay", in->weight_decay);
    GETD(t, "grad_clip", in->grad_clip);
    const zs_json *dj = zs_json_get(root, "data"); /* optional: runs with documents */
    if (dj) {
        ZS_REQUIRE(dj->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: \"data\" is not an object",
                   what);
        ZS_CHECK(zs_json_get_str(dj, "docs", what, &s));
        ZS_REQUIRE(strlen(s) < sizeof in->docs, ZS_ERR_FORMAT, "%s: data.docs '%s'", what, s);
        snprintf(in->docs, sizeof in->docs, "%s", s);
        GETI(dj, "epochs", 0, INT64_MAX, in->epochs);
        GETI(dj, "epoch", 0, INT64_MAX, in->epoch);
        GETI(dj, "position", 0, INT64_MAX, in->epoch_position);
        GETI(dj, "samples", 0, INT64_MAX, in->samples);
        GETI(dj, "steps_per_epoch", 0, INT64_MAX, in->steps_per_epoch);
        ZS_CHECK(zs_json_get_str(dj, "fingerprint", what, &s));
        end = NULL;
        errno = 0;
        in->fingerprint = strtoull(s, &end, 16);
        ZS_REQUIRE(strlen(s) == 16 && !*end && !errno, ZS_ERR_FORMAT,
                   "%s: data.fingerprint '%s' is not 16 hex digits", what, s);
        GETI(dj, "eos_id", -1, 1 << 24, in->eos_id);
        GETI(dj, "pad_id", -1, 1 << 24, in->pad_id);
        const zs_json *sep = zs_json_get(dj, "doc_sep");
        ZS_REQUIRE(sep && (sep->type == ZS_JSON_NULL ||
                           (sep->type == ZS_JSON_STRING && sep->len < sizeof in->doc_sep &&
                            strlen(sep->str) == sep->len)),
                   ZS_ERR_FORMAT, "%s: data.doc_sep must be null or a short string", what);
        in->has_doc_sep = sep->type == ZS_JSON_STRING;
        if (in->has_doc_sep) snprintf(in->doc_sep, sizeof in->doc_sep, "%s", sep->str);
        in->has_docs = 1;
    }
    const zs_json *z = zs_json_get(root, "compression");
    ZS_CHECK(zs_json_get_str(z, "codec", what, &s));
    ZS_REQUIRE(!strcmp(s, "zstd"), ZS_ERR_FORMAT, "%s: codec '%s' is not supported (zstd)", what,
               s);
    GETI(z, "level", -131072, 22, in->level);
    GETI(z, "block_elems", ZS_CKPT_MIN_BLOCK, ZS_CKPT_MAX_BLOCK, in->block_elems);
    ZS_CHECK(zs_json_get_str(root, "checksum", what, &s));
    ZS_REQUIRE(!strcmp(s, "crc32c"), ZS_ERR_FORMAT, "%s: checksum '%s' is not supported (crc32c)",
               what, s);
fail:
    return st;
}

/* The recorded layout must be the one the model config gives: same units, tensors, shapes,
 * offsets and padding. */
static zs_status check_layout(const zs_json *root, const char *what, const zs_layout *l) {
    zs_status st = ZS_OK;
    const zs_json *lay = zs_json_get(root, "layout"), *units = zs_json_get(lay, "units");
    int64_t align = 0;
    GETI(lay, "align", 1, 1 << 20, align);
    ZS_REQUIRE(align == ZS_LAYOUT_ALIGN, ZS_ERR_FORMAT, "%s: layout align %lld (expected %d)", what,
               (long long)align, ZS_LAYOUT_ALIGN);
    ZS_REQUIRE(units && units->type == ZS_JSON_ARRAY && units->n == l->n_units, ZS_ERR_FORMAT,
               "%s: layout has %d units, its model config gives %d", what,
               units && units->type == ZS_JSON_ARRAY ? units->n : -1, l->n_units);
    const zs_json *uj = units->child;
    for (int u = 0; u < l->n_units; u++, uj = uj->next) {
        const zs_unit_desc *ud = &l->units[u];
        const char *name;
        int64_t used, padded, shard;
        ZS_CHECK(zs_json_get_str(uj, "name", what, &name));
        GETI(uj, "used", 0, INT64_MAX, used);
        GETI(uj, "padded", 0, INT64_MAX, padded);
        GETI(uj, "shard", 0, INT64_MAX, shard);
        ZS_REQUIRE(!strcmp(name, ud->name) && used == ud->used && padded == ud->padded &&
                       shard == ud->shard,
                   ZS_ERR_FORMAT,
                   "%s: unit %d ('%s', used %lld, padded %lld) disagrees with the layout of its "
                   "model config ('%s', used %lld, padded %lld)",
                   what, u, name, (long long)used, (long long)padded, ud->name, (long long)ud->used,
                   (long long)ud->padded);
        const zs_json *ts = zs_json_get(uj, "tensors");
        ZS_REQUIRE(ts && ts->type == ZS_JSON_ARRAY && ts->n == ud->n_tensors, ZS_ERR_FORMAT,
                   "%s: unit %s: wrong number of tensors", what, ud->name);
        const zs_json *tj = ts->child;
        for (int i = 0; i < ud->n_tensors; i++, tj = tj->next) {
            const zs_tensor_desc *td = &l->tensors[ud->first_tensor + i];
            int64_t off;
            ZS_CHECK(zs_json_get_str(tj, "name", what, &name));
            GETI(tj, "offset", 0, INT64_MAX, off);
            const zs_json *sh = zs_json_get(tj, "shape");
            int ok = !strcmp(name, td->name) && off == td->offset && sh &&
                     sh->type == ZS_JSON_ARRAY && sh->n == td->ndim;
            const zs_json *dj = ok ? sh->child : NULL;
            for (int d = 0; ok && d < td->ndim; d++, dj = dj->next)
                ok = dj->type == ZS_JSON_NUMBER && dj->is_int && dj->ival == td->shape[d];
            ZS_REQUIRE(ok, ZS_ERR_FORMAT,
                       "%s: tensor '%s' disagrees with the layout of its model config (%s)", what,
                       name, td->name);
        }
    }
fail:
    return st;
}

/* A custom model's units as the manifest lists them (names and shapes); finalizing them for
 * the recorded world size must then give the recorded offsets and padding (check_layout). */
static zs_status parse_custom_layout(const zs_json *root, const char *what, zs_layout *l) {
    zs_status st = ZS_OK;
    const zs_json *units = zs_json_get(zs_json_get(root, "layout"), "units");
    zs_layout_init(l);
    ZS_REQUIRE(units && units->type == ZS_JSON_ARRAY && units->n > 0 && units->n <= 1 << 16,
               ZS_ERR_FORMAT, "%s: custom model without a \"layout\" unit list", what);
    for (const zs_json *uj = units->child; uj; uj = uj->next) {
        const char *name;
        ZS_CHECK(zs_json_get_str(uj, "name", what, &name));
        ZS_REQUIRE(strlen(name) < ZS_MAX_NAME, ZS_ERR_FORMAT, "%s: unit name too long", what);
        ZS_CHECK(zs_layout_add_unit(l, name, 1));
        const zs_json *ts = zs_json_get(uj, "tensors");
        ZS_REQUIRE(ts && ts->type == ZS_JSON_ARRAY && ts->n > 0 && ts->n <= 1 << 16, ZS_ERR_FORMAT,
                   "%s: unit %s: no tensor list", what, name);
        for (const zs_json *tj = ts->child; tj; tj = tj->next) {
            const zs_json *sh = zs_json_get(tj, "shape");
            int64_t shape[ZS_MAX_DIMS];
            ZS_CHECK(zs_json_get_str(tj, "name", what, &name));
            ZS_REQUIRE(strlen(name) < ZS_MAX_NAME, ZS_ERR_FORMAT, "%s: tensor name too long", what);
            ZS_REQUIRE(sh && sh->type == ZS_JSON_ARRAY && sh->n >= 1 && sh->n <= ZS_MAX_DIMS,
                       ZS_ERR_FORMAT, "%s: tensor %s: bad shape", what, name);
            int d = 0;
            for (const zs_json *dj = sh->child; dj; dj = dj->next, d++) {
                ZS_REQUIRE(dj->type == ZS_JSON_NUMBER && dj->is_int && dj->ival > 0 &&
                               dj->ival <= (1ll << 40),
                           ZS_ERR_FORMAT, "%s: tensor %s: bad shape", what, name);
                shape[d] = dj->ival;
            }
            ZS_CHECK(zs_layout_add_tensor(l, name, sh->n, shape, 0, ZS_INIT_ZEROS, 0.0f));
        }
    }
    ZS_CHECK(zs_layout_finalize(l, 1));
    ZS_REQUIRE(l->total_padded < (1ll << 40), ZS_ERR_FORMAT, "%s: unreasonable layout", what);
fail:
    return st;
}

static zs_status parse_files(const zs_json *root, const char *what, zs_manifest *m) {
    zs_status st = ZS_OK;
    const zs_json *files = zs_json_get(root, "files");
    ZS_REQUIRE(files && files->type == ZS_JSON_ARRAY && files->n == m->n_files, ZS_ERR_FORMAT,
               "%s: expected %d entries in \"files\" (one per rank)", what, m->n_files);
    const zs_json *fj = files->child;
    for (int r = 0; r < m->n_files; r++, fj = fj->next) {
        zs_ckpt_file *f = &m->files[r];
        const char *s;
        int64_t rank, size;
        ZS_CHECK(zs_json_get_str(fj, "name", what, &s));
        ZS_REQUIRE(!strcmp(s, f->name), ZS_ERR_FORMAT, "%s: file %d is named '%s', expected '%s'",
                   what, r, s, f->name);
        GETI(fj, "rank", 0, INT32_MAX, rank);
        ZS_REQUIRE(rank == r, ZS_ERR_FORMAT, "%s: %s has rank %lld", what, f->name,
                   (long long)rank);
        GETI(fj, "size", 0, INT64_MAX, size);
        f->size = (uint64_t)size;
        ZS_CHECK(zs_json_get_str(fj, "crc32c", what, &s));
        ZS_REQUIRE(parse_hex32(s, &f->crc), ZS_ERR_FORMAT, "%s: %s: malformed crc32c '%s'", what,
                   f->name, s);
        const zs_json *frames = zs_json_get(fj, "frames");
        ZS_REQUIRE(frames && frames->type == ZS_JSON_ARRAY && frames->n == f->n_frames,
                   ZS_ERR_FORMAT, "%s: %s: expected %d frames", what, f->name, f->n_frames);
        const zs_json *e = frames->child;
        uint64_t pos = 0;
        for (int i = 0; i < f->n_frames; i++, e = e->next) {
            zs_ckpt_frame *fr = &f->frames[i];
            int64_t v[7];
            ZS_REQUIRE(e->type == ZS_JSON_ARRAY && e->n == 7, ZS_ERR_FORMAT,
                       "%s: %s: frame %d is not [unit,kind,lo,count,offset,csize,crc32c]", what,
                       f->name, i);
            const zs_json *x = e->child;
            for (int k = 0; k < 7; k++, x = x->next) {
                ZS_REQUIRE(x->type == ZS_JSON_NUMBER && x->is_int && x->ival >= 0, ZS_ERR_FORMAT,
                           "%s: %s: frame %d: field %d is not a non-negative integer", what,
                           f->name, i, k);
                v[k] = x->ival;
            }
            ZS_REQUIRE(v[0] == fr->unit && v[1] == fr->kind && v[2] == fr->lo &&
                           v[3] == fr->count && (uint64_t)v[4] == pos,
                       ZS_ERR_FORMAT, "%s: %s: frame %d is out of place", what, f->name, i);
            uint64_t bound = ZSTD_compressBound((size_t)fr->count * 4);
            ZS_REQUIRE(v[5] >= 1 && (uint64_t)v[5] <= bound && v[6] <= 0xffffffffll, ZS_ERR_FORMAT,
                       "%s: %s: frame %d has an impossible size", what, f->name, i);
            fr->offset = pos;
            fr->csize = (uint64_t)v[5];
            fr->crc = (uint32_t)v[6];
            pos += fr->csize;
        }
        ZS_REQUIRE(pos == f->size, ZS_ERR_FORMAT,
                   "%s: %s: frames add up to %llu bytes, size says "
                   "%llu",
                   what, f->name, (unsigned long long)pos, (unsigned long long)f->size);
    }
fail:
    return st;
}

zs_status zs_manifest_parse(const char *text, size_t len, const char *what, zs_manifest *out) {
    zs_status st = ZS_OK;
    zs_json *root = NULL;
    zs_ckpt_info info;
    zs_layout custom;
    const char *s;
    int64_t version = 0;
    memset(out, 0, sizeof *out);
    zs_layout_init(&custom);
    st = zs_json_parse(text, len, &root);
    if (st != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        /* A damaged file more likely broke the JSON than made it say something else. */
        if (find_crc_key(text, len) >= 0 && check_crc(text, len, what) != ZS_OK) goto fail;
        st = zs_error(st, "%s: %s", what, msg);
        goto fail;
    }
    ZS_REQUIRE(root->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: not a JSON object", what);
    ZS_CHECK(zs_json_get_str(root, "format", what, &s));
    ZS_REQUIRE(!strcmp(s, ZS_CKPT_FORMAT), ZS_ERR_FORMAT, "%s: format '%s' is not '%s'", what, s,
               ZS_CKPT_FORMAT);
    ZS_CHECK(zs_json_get_int(root, "format_version", 0, INT32_MAX, what, &version));
    ZS_REQUIRE(version >= ZS_CKPT_VERSION_OLDEST && version <= ZS_CKPT_VERSION, ZS_ERR_FORMAT,
               "%s: format version %lld is not supported (this zshard reads versions %d to %d)",
               what, (long long)version, ZS_CKPT_VERSION_OLDEST, ZS_CKPT_VERSION);
    ZS_CHECK(check_crc(text, len, what));
    ZS_CHECK(parse_info(root, version, what, &info));
    const zs_json *files = zs_json_get(root, "files");
    ZS_REQUIRE(files && files->type == ZS_JSON_ARRAY && files->n == info.world_size, ZS_ERR_FORMAT,
               "%s: expected %d entries in \"files\" (one per rank)", what, info.world_size);
    int64_t listed = 0;
    for (const zs_json *f = files->child; f; f = f->next) {
        const zs_json *fr = zs_json_get(f, "frames");
        listed += fr && fr->type == ZS_JSON_ARRAY ? fr->n : 0;
    }
    if (info.model.arch == ZS_ARCH_CUSTOM) {
        ZS_CHECK(parse_custom_layout(root, what, &custom));
        info.layout = &custom;
    }
    st = zs_manifest_init_bounded(out, &info, listed);
    if (st != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(ZS_ERR_FORMAT, "%s: %s", what, msg);
        goto fail;
    }
    ZS_CHECK(check_layout(root, what, &out->layout));
    ZS_CHECK(parse_files(root, what, out));
    zs_json_free(root);
    zs_layout_free(&custom);
    return ZS_OK;
fail:
    zs_json_free(root);
    zs_layout_free(&custom);
    zs_manifest_free(out);
    return st;
}

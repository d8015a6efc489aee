/* safetensors import: a GPT-2 or LLaMA in Hugging Face layout (one file or shards) as a step-0
 * zshard checkpoint, its config inferred from the tensors and any hint. Headers are parsed and
 * checked by st_header.c before any tensor is read. */
#include "ckpt/convert.h"

#include "ckpt/json.h"
#include "core/bf16.h"
#include "core/status.h"
#include "models/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_import {
    const char *path; /* the whole, in messages */
    int fd;           /* fds[0] */
    int nfiles;
    int *fds;
    const char *const *paths;
    uint64_t *data_start; /* per file */
    zs_st_header h;       /* every file's entries, each carrying its file index */
    zs_layout layout;
    zs_arch layout_arch;
    int tied; /* the layout's head is the embedding (no lm_head.weight) */
    zs_ext_tensor *map;
    const zs_st_entry **src; /* per layout tensor */
    int unit;                /* unit held in `full` */
    float *full;
    void *raw;
} st_import;

static const zs_st_entry *find(const zs_st_header *h, const char *hf_name) {
    /* Accept both GPT2LMHeadModel ("transformer.h.0...") and GPT2Model ("h.0...") names. */
    const char *bare = strchr(hf_name, '.') ? strchr(hf_name, '.') + 1 : hf_name;
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->e[i].name, hf_name) || !strcmp(h->e[i].name, bare)) return &h->e[i];
    return NULL;
}

static zs_status pread_all(int fd, const char *path, void *buf, size_t n, uint64_t at) {
    char *p = buf;
    while (n) {
        ssize_t k = pread(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return zs_error(ZS_ERR_IO, "%s: read failed at byte %llu: %s", path,
                            (unsigned long long)at, k < 0 ? strerror(errno) : "truncated");
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return ZS_OK;
}

/* IEEE half to float, exactly (every half is a float). */
static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return zs_bits_f32(sign | 0x7f800000u | m << 13);
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* subnormal (or zero): exact in float */
        return sign ? -v : v;
    }
    return zs_bits_f32(sign | (e + 112) << 23 | m << 13);
}

/* Decode n values of dtype F32 (kind 0), BF16 (1) or F16 (2) from raw into dst. */
static void decode(const void *raw, int kind, size_t n, float *dst) {
    if (kind == 0) {
        memcpy(dst, raw, n * 4);
        return;
    }
    const uint16_t *s = raw;
    for (size_t i = 0; i < n; i++)
        dst[i] = kind == 1 ? zs_bits_f32((uint32_t)s[i] << 16) : half_to_f32(s[i]);
}

static zs_status load_unit(st_import *im, int u) {
    zs_status st = ZS_OK;
    const zs_unit_desc *ud = &im->layout.units[u];
    memset(im->full, 0, (size_t)ud->padded * sizeof *im->full);
    for (int i = 0; i < ud->n_tensors; i++) {
        int ti = ud->first_tensor + i;
        const zs_tensor_desc *t = &im->layout.tensors[ti];
        const zs_ext_tensor *x = &im->map[ti];
        const zs_st_entry *e = im->src[ti];
        int64_t n = x->rows * (t->ndim == 2 ? t->shape[1] : 1);
        int fi = im->nfiles ? e->file : 0;
        ZS_CHECK(pread_all(im->nfiles ? im->fds[fi] : im->fd, im->nfiles ? im->paths[fi] : im->path,
                           im->raw, (size_t)(e->end - e->begin),
                           (im->nfiles ? im->data_start[fi] : im->h.data_start) + e->begin));
        float *dst = im->full + t->offset;
        int bf16 = !strcmp(e->dtype, "BF16") ? 1 : !strcmp(e->dtype, "F16") ? 2 : 0;
        if (!x->transpose) {
            decode(im->raw, bf16, (size_t)n, dst);
            continue;
        }
        /* HF Conv1D [in, out] -> zshard [out, in]. */
        int64_t O = t->shape[0], I = t->shape[1];
        float *tmp = dst + 0; /* decode row by row of the source into the transposed place */
        for (int64_t r = 0; r < I; r++) {
            float row[4096];
            for (int64_t c0 = 0; c0 < O; c0 += 4096) {
                int64_t cn = O - c0 < 4096 ? O - c0 : 4096;
                decode((const char *)im->raw + (size_t)(r * O + c0) * (size_t)e->elem_size, bf16,
                       (size_t)cn, row);
                for (int64_t c = 0; c < cn; c++)
                    tmp[(c0 + c) * I + r] = row[c];
            }
        }
    }
    im->unit = u;
fail:
    return st;
}

static zs_status import_source(void *ctx, int unit, int kind, int64_t lo, int64_t n, float *dst) {
    st_import *im = ctx;
    if (kind != ZS_CKPT_MASTER) {
        memset(dst, 0, (size_t)n * sizeof *dst); /* Adam state starts at zero */
        return ZS_OK;
    }
    if (im->unit != unit) {
        zs_status st = load_unit(im, unit);
        if (st != ZS_OK) return st;
    }
    memcpy(dst, im->full + lo, (size_t)n * sizeof *dst);
    return ZS_OK;
}

static int count_layers(const zs_st_header *h, const char *fmt) {
    int layers = 0;
    for (int i = 0; i < h->n; i++) {
        const char *nm = h->e[i].name;
        int l;
        if (!strncmp(nm, "transformer.", 12)) nm += 12;
        if (sscanf(nm, fmt, &l) == 1 && l >= 0 && l < 1024 && l + 1 > layers) layers = l + 1;
    }
    return layers;
}

static zs_status read_entry(const st_import *im, const zs_st_entry *e, void *buf) {
    int fi = im->nfiles ? e->file : 0;
    return pread_all(im->nfiles ? im->fds[fi] : im->fd, im->nfiles ? im->paths[fi] : im->path, buf,
                     (size_t)(e->end - e->begin),
                     (im->nfiles ? im->data_start[fi] : im->h.data_start) + e->begin);
}

/* The file's own output head: exactly "lm_head.weight" (find() would also take a bare
 * "weight"), or NULL. */
static const zs_st_entry *find_head(const zs_st_header *h) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->e[i].name, "lm_head.weight")) return &h->e[i];
    return NULL;
}

/* *same = a and b hold the same dtype, shape and bytes (a head saved next to the embedding it
 * is tied to). */
static zs_status same_tensor(const st_import *im, const zs_st_entry *a, const zs_st_entry *b,
                             int *same) {
    zs_status st = ZS_OK;
    void *x = NULL, *y = NULL;
    *same = a && b && !strcmp(a->dtype, b->dtype) && a->ndim == b->ndim &&
            a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1];
    if (*same) {
        size_t n = (size_t)(a->end - a->begin);
        x = malloc(n ? n : 1);
        y = malloc(n ? n : 1);
        ZS_REQUIRE(x && y, ZS_ERR_OOM, "%s: out of memory", im->path);
        ZS_CHECK(read_entry(im, a, x));
        ZS_CHECK(read_entry(im, b, y));
        *same = !memcmp(x, y, n);
    }
fail:
    free(x);
    free(y);
    return st;
}

/* Metadata first, then the hint; 0 if neither has it. */
static int pick(int meta, const zs_model_config *hint, int hint_value) {
    return meta > 0 ? meta : hint && hint_value > 0 ? hint_value : 0;
}

/* The model config from the tensors present: shapes give most of it; the heads (and for
 * LLaMA the positions, rope_theta and norm_eps) come from zshard metadata or the hint. */
static zs_status infer_config(const st_import *im, const zs_model_config *hint,
                              zs_model_config *c) {
    zs_status st = ZS_OK;
    const zs_st_header *h = &im->h;
    const zs_st_entry *emb = find(h, "model.embed_tokens.weight"), *wpe = NULL, *kp = NULL,
                      *gp = NULL;
    memset(c, 0, sizeof *c);
    if (emb) {
        c->arch = ZS_ARCH_LLAMA;
        c->n_layer = count_layers(h, "model.layers.%d.");
        kp = find(h, "model.layers.0.self_attn.k_proj.weight");
        gp = find(h, "model.layers.0.mlp.gate_proj.weight");
        ZS_REQUIRE(emb->ndim == 2 && kp && gp && kp->ndim == 2 && gp->ndim == 2, ZS_ERR_FORMAT,
                   "%s: not a LLaMA: no 2-D embed_tokens, k_proj and gate_proj of layer 0",
                   im->path);
        c->ffn_hidden = (int)(gp->shape[0] < (1 << 20) ? gp->shape[0] : 0);
        c->max_seq = pick(h->meta_max_seq, hint, hint ? hint->max_seq : 0);
        c->rope_theta = (float)(h->meta_rope_theta > 0 ? h->meta_rope_theta
                                : hint                 ? (double)hint->rope_theta
                                                       : 0.0);
        c->norm_eps = (float)(h->meta_norm_eps > 0 ? h->meta_norm_eps
                              : hint               ? (double)hint->norm_eps
                                                   : 0.0);
    } else {
        emb = find(h, "transformer.wte.weight");
        wpe = find(h, "transformer.wpe.weight");
        ZS_REQUIRE(emb && wpe && emb->ndim == 2 && wpe->ndim == 2 && emb->shape[1] == wpe->shape[1],
                   ZS_ERR_FORMAT,
                   "%s: neither a GPT-2 (2-D wte.weight and wpe.weight of equal width) nor a "
                   "LLaMA (model.embed_tokens.weight)",
                   im->path);
        c->arch = ZS_ARCH_GPT2;
        c->n_layer = count_layers(h, "h.%d.");
        c->max_seq = (int)(wpe->shape[0] < (1 << 20) ? wpe->shape[0] : 0);
    }
    c->n_embd = (int)(emb->shape[1] < 65536 ? emb->shape[1] : 0);
    int vocab =
        h->meta_vocab ? h->meta_vocab : (int)(emb->shape[0] < (1 << 24) ? emb->shape[0] : 0);
    ZS_REQUIRE(c->n_layer > 0 && c->n_embd > 0 && vocab > 0 && vocab <= emb->shape[0],
               ZS_ERR_FORMAT, "%s: implausible shapes (embedding [%lld, %lld], %d layers)",
               im->path, (long long)emb->shape[0], (long long)emb->shape[1], c->n_layer);
    zs_model_config_set_vocab(c, vocab);
    c->n_head = pick(h->meta_n_head, hint, hint ? hint->n_head : 0);
    ZS_REQUIRE(c->n_head > 0 && (c->arch == ZS_ARCH_GPT2 ||
                                 (c->max_seq > 0 && c->rope_theta > 0 && c->norm_eps > 0)),
               ZS_ERR_INVALID,
               "%s: the %s is not in the file: pass --model NAME (a preset or config .json)%s",
               im->path,
               c->arch == ZS_ARCH_GPT2 ? "number of attention heads"
                                       : "number of heads, positions, rope_theta or norm_eps",
               c->arch == ZS_ARCH_GPT2 ? " or --heads N" : "");
    if (c->arch == ZS_ARCH_GPT2) {
        c->n_kv_head = c->n_head;
        c->ffn_hidden = 4 * c->n_embd;
    } else {
        int64_t head_dim = c->n_embd / c->n_head;
        c->n_kv_head =
            head_dim > 0 && kp && kp->shape[0] % head_dim == 0 ? (int)(kp->shape[0] / head_dim) : 0;
    }
    /* Without a config.json the file says whether the head is tied: a LLaMA with no
     * lm_head.weight is tied (transformers does not save a tied head), a GPT-2 is untied when
     * its lm_head.weight differs from wte (a tied one is saved either way). */
    const zs_st_entry *head = find_head(h);
    int tied = !head;
    if (head && c->arch == ZS_ARCH_GPT2) ZS_CHECK(same_tensor(im, emb, head, &tied));
    c->tie_embeddings = tied ? ZS_TIE_ON : ZS_TIE_OFF;
    ZS_REQUIRE(
        !hint || hint->tie_embeddings == ZS_TIE_ARCH || zs_model_tied(hint) == tied, ZS_ERR_INVALID,
        "%s: tie_embeddings is %s there (%s) but %s in the flags", im->path, tied ? "on" : "off",
        tied ? "no separate lm_head.weight" : "an lm_head.weight of its own", tied ? "off" : "on");
    zs_model_name_for(c);
    if (zs_model_config_validate(c) != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(ZS_ERR_FORMAT, "%s: %s", im->path, msg);
    }
fail:
    return st;
}

static zs_status check_tensors(st_import *im) {
    zs_status st = ZS_OK;
    for (int i = 0; i < im->layout.n_tensors; i++) {
        const zs_ext_tensor *x = &im->map[i];
        const zs_st_entry *e = find(&im->h, x->hf_name);
        ZS_REQUIRE(e, ZS_ERR_FORMAT, "%s: tensor %s is missing", im->path, x->hf_name);
        ZS_REQUIRE(!strcmp(e->dtype, "F32") || !strcmp(e->dtype, "BF16") ||
                       !strcmp(e->dtype, "F16"),
                   ZS_ERR_FORMAT, "%s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                   im->path, e->name, e->dtype);
        int ok = e->ndim == x->ndim;
        for (int d = 0; ok && d < x->ndim; d++)
            ok = e->shape[d] == x->hf_shape[d];
        ZS_REQUIRE(ok, ZS_ERR_FORMAT, "%s: tensor %s has shape [%lld%s%lld], expected [%lld%s%lld]",
                   im->path, e->name, (long long)e->shape[0], e->ndim > 1 ? "," : "",
                   e->ndim > 1 ? (long long)e->shape[1] : 0LL, (long long)x->hf_shape[0],
                   x->ndim > 1 ? "," : "", x->ndim > 1 ? (long long)x->hf_shape[1] : 0LL);
        im->src[i] = e;
    }
    /* A tied layout reads no lm_head.weight; a file that holds one anyway must hold the
     * embedding there, as transformers does, or dropping it would change the model. */
    const zs_st_entry *head = im->tied ? find_head(&im->h) : NULL;
    if (head) {
        int same = 0;
        ZS_CHECK(same_tensor(im, im->src[0], head, &same));
        ZS_REQUIRE(same, ZS_ERR_FORMAT,
                   "%s: lm_head.weight differs from the token embedding %s, but tie_embeddings "
                   "is on (config.json's tie_word_embeddings): an untied head",
                   im->path, im->src[0]->name);
    }
    for (int j = 0; j < im->h.n; j++) {
        int used = zs_ext_ignored(im->h.e[j].name);
        for (int i = 0; i < im->layout.n_tensors && !used; i++)
            used = im->src[i] == &im->h.e[j];
        ZS_REQUIRE(used, ZS_ERR_FORMAT, "%s: unexpected tensor %s for a %s", im->path,
                   im->h.e[j].name, zs_ckpt_arch_name(im->layout_arch));
    }
fail:
    return st;
}

/* Open file and parse its header into im (im->fd, im->h); the caller frees both. */
static zs_status open_header(st_import *im, const char *file) {
    zs_status st = ZS_OK;
    uint8_t *hdr = NULL;
    struct stat sb;
    im->path = file;
    im->unit = -1;
    im->fd = open(file, O_RDONLY | O_CLOEXEC);
    ZS_REQUIRE(im->fd >= 0, ZS_ERR_IO, "%s: cannot open: %s", file, strerror(errno));
    ZS_REQUIRE(fstat(im->fd, &sb) == 0, ZS_ERR_IO, "%s: stat failed", file);
    uint8_t len8[8];
    ZS_REQUIRE(sb.st_size >= 8, ZS_ERR_FORMAT, "%s: truncated: %lld bytes", file,
               (long long)sb.st_size);
    ZS_CHECK(pread_all(im->fd, file, len8, 8, 0));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    size_t want = 8 + (size_t)(hlen < ZS_ST_MAX_HEADER ? hlen : 0);
    if (want > (uint64_t)sb.st_size) want = (size_t)sb.st_size;
    hdr = malloc(want);
    ZS_REQUIRE(hdr, ZS_ERR_OOM, "%s: out of memory", file);
    ZS_CHECK(pread_all(im->fd, file, hdr, want, 0));
    ZS_CHECK(zs_st_parse(hdr, want, (uint64_t)sb.st_size, file, &im->h));
fail:
    free(hdr);
    return st;
}

zs_status zs_st_config(const char *file, const zs_model_config *hint, zs_model_config *cfg) {
    zs_status st = ZS_OK;
    st_import im;
    memset(&im, 0, sizeof im);
    im.fd = -1;
    ZS_CHECK(open_header(&im, file));
    ZS_CHECK(infer_config(&im, hint, cfg));
fail:
    if (im.fd >= 0) close(im.fd);
    zs_st_header_free(&im.h);
    return st;
}

/* Everything after the model config: layout, name map, tensor checks, the checkpoint. */
static zs_status import_as(st_import *im, const zs_model_config *cfg, const char *out) {
    zs_status st = ZS_OK;
    zs_model_config c = *cfg;
    ZS_CHECK(zs_model_layout(&c, 1, &im->layout));
    im->layout_arch = c.arch;
    im->tied = zs_model_tied(&c);
    im->map = calloc((size_t)im->layout.n_tensors, sizeof *im->map);
    im->src = calloc((size_t)im->layout.n_tensors, sizeof *im->src);
    ZS_REQUIRE(im->map && im->src, ZS_ERR_OOM, "%s: out of memory", im->path);
    ZS_CHECK(zs_ext_map(&im->layout, &c, im->map));
    ZS_CHECK(check_tensors(im));
    int64_t biggest_unit = 0, biggest_raw = 1;
    for (int u = 0; u < im->layout.n_units; u++)
        if (im->layout.units[u].padded > biggest_unit) biggest_unit = im->layout.units[u].padded;
    for (int i = 0; i < im->layout.n_tensors; i++)
        if ((int64_t)(im->src[i]->end - im->src[i]->begin) > biggest_raw)
            biggest_raw = (int64_t)(im->src[i]->end - im->src[i]->begin);
    im->full = malloc((size_t)biggest_unit * sizeof *im->full);
    im->raw = malloc((size_t)biggest_raw);
    ZS_REQUIRE(im->full && im->raw, ZS_ERR_OOM, "%s: out of memory", im->path);
    zs_ckpt_info info;
    zs_ckpt_info_import(&info, &c);
    ZS_CHECK(zs_ckpt_build(out, &info, import_source, im));
fail:
    return st;
}

static void import_free(st_import *im) {
    free(im->full);
    free(im->raw);
    free(im->map);
    free(im->src);
    zs_layout_free(&im->layout);
    zs_st_header_free(&im->h);
}

zs_status zs_st_import(const char *file, const char *out, const zs_model_config *hint) {
    zs_status st = ZS_OK;
    st_import im;
    memset(&im, 0, sizeof im);
    im.fd = -1;
    ZS_CHECK(open_header(&im, file));
    zs_model_config c;
    ZS_CHECK(infer_config(&im, hint, &c));
    ZS_CHECK(import_as(&im, &c, out));
fail:
    if (im.fd >= 0) close(im.fd);
    import_free(&im);
    return st;
}

zs_status zs_st_import_files(const char *const *files, int nfiles, const char *what,
                             const zs_model_config *cfg, const char *out) {
    zs_status st = ZS_OK;
    st_import im, one;
    memset(&im, 0, sizeof im);
    memset(&one, 0, sizeof one);
    im.fd = -1;
    one.fd = -1;
    im.path = what;
    im.unit = -1;
    ZS_REQUIRE(nfiles >= 1 && nfiles <= ZS_ST_MAX_FILES, ZS_ERR_FORMAT, "%s: %d files", what,
               nfiles);
    im.nfiles = nfiles;
    im.paths = files;
    im.fds = malloc((size_t)nfiles * sizeof *im.fds);
    im.data_start = calloc((size_t)nfiles, sizeof *im.data_start);
    ZS_REQUIRE(im.fds && im.data_start, ZS_ERR_OOM, "%s: out of memory", what);
    for (int f = 0; f < nfiles; f++)
        im.fds[f] = -1;
    /* Every file's header, merged into one list whose entries remember their file. */
    for (int f = 0; f < nfiles; f++) {
        memset(&one, 0, sizeof one);
        one.fd = -1;
        ZS_CHECK(open_header(&one, files[f]));
        im.fds[f] = one.fd;
        one.fd = -1;
        im.data_start[f] = one.h.data_start;
        zs_st_entry *e = realloc(im.h.e, (size_t)(im.h.n + one.h.n + 1) * sizeof *e);
        ZS_REQUIRE(e, ZS_ERR_OOM, "%s: out of memory", what);
        im.h.e = e;
        for (int j = 0; j < one.h.n; j++) {
            for (int i = 0; i < im.h.n; i++)
                ZS_REQUIRE(strcmp(im.h.e[i].name, one.h.e[j].name), ZS_ERR_FORMAT,
                           "%s: tensor %s is in both %s and %s", what, one.h.e[j].name,
                           files[im.h.e[i].file], files[f]);
            im.h.e[im.h.n] = one.h.e[j];
            im.h.e[im.h.n].file = f;
            im.h.n++;
        }
        zs_st_header_free(&one.h);
    }
    ZS_CHECK(import_as(&im, cfg, out));
fail:
    if (one.fd >= 0) close(one.fd);
    zs_st_header_free(&one.h);
    for (int f = 0; im.fds && f < nfiles; f++)
        if (im.fds[f] >= 0) close(im.fds[f]);
    free(im.fds);
    free(im.data_start);
    import_free(&im);
    return st;
}

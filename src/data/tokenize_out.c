/* What `zshard tokenize` writes: llm.c token shards filled as the tokens come (the header's
 * count patched when a shard is complete) under temporary names renamed into place, and
 * dataset.json, the description the training side reads. */
#include "core/status.h"
#include "data/data.h"
#include "data/tokenize_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_TOKENS 65536

struct zs_shard_writer {
    char path[4096], tmp[4200];
    FILE *f;
    int bits;
    int64_t count;
    unsigned char buf[BUF_TOKENS * 4];
    size_t nbuf;
};

static zs_status write_header(zs_shard_writer_t *w) {
    int32_t h[256] = {0};
    h[0] = w->bits == 16 ? ZS_LLMC_SHARD_MAGIC : ZS_LLMC_SHARD32_MAGIC;
    h[1] = w->bits == 16 ? ZS_LLMC_SHARD_VERSION : ZS_LLMC_SHARD32_VERSION;
    h[2] = (int32_t)w->count;
    if (fwrite(h, sizeof h, 1, w->f) != 1)
        return zs_error(ZS_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    return ZS_OK;
}

zs_status zs_shard_writer_open(const char *path, int bits, zs_shard_writer_t **out) {
    zs_status st = ZS_OK;
    zs_shard_writer_t *w = calloc(1, sizeof *w);
    *out = NULL;
    ZS_REQUIRE(w, ZS_ERR_OOM, "shard writer: out of memory");
    ZS_REQUIRE(bits == 16 || bits == 32, ZS_ERR_INVALID, "shard writer: %d-bit tokens", bits);
    ZS_REQUIRE(strlen(path) < sizeof w->path, ZS_ERR_INVALID, "%s: path too long", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->bits = bits;
    w->f = fopen(w->tmp, "wb");
    ZS_REQUIRE(w->f, ZS_ERR_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
    ZS_CHECK(write_header(w));
    *out = w;
    return ZS_OK;
fail:
    zs_shard_writer_abort(w);
    return st;
}

static zs_status flush(zs_shard_writer_t *w) {
    if (w->nbuf && fwrite(w->buf, 1, w->nbuf, w->f) != w->nbuf)
        return zs_error(ZS_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    w->nbuf = 0;
    return ZS_OK;
}

zs_status zs_shard_writer_append(zs_shard_writer_t *w, const int32_t *ids, size_t n) {
    size_t width = (size_t)w->bits / 8;
    /* llm.c's header holds the count as an int32. */
    if (w->count + (int64_t)n > INT32_MAX)
        return zs_error(ZS_ERR_INVALID, "%s: more than %d tokens in one shard", w->path, INT32_MAX);
    for (size_t i = 0; i < n; i++) {
        if (w->nbuf + width > sizeof w->buf) {
            zs_status st = flush(w);
            if (st != ZS_OK) return st;
        }
        uint32_t v = (uint32_t)ids[i];
        if (w->bits == 16) {
            uint16_t s = (uint16_t)v;
            memcpy(w->buf + w->nbuf, &s, 2);
        } else {
            memcpy(w->buf + w->nbuf, &v, 4);
        }
        w->nbuf += width;
    }
    w->count += (int64_t)n;
    return ZS_OK;
}

int64_t zs_shard_writer_count(const zs_shard_writer_t *w) {
    return w->count;
}

zs_status zs_shard_writer_close(zs_shard_writer_t *w) {
    zs_status st = ZS_OK;
    if (!w) return ZS_OK;
    ZS_CHECK(flush(w));
    ZS_REQUIRE(fseek(w->f, 0, SEEK_SET) == 0, ZS_ERR_IO, "%s: cannot seek", w->tmp);
    ZS_CHECK(write_header(w));
    ZS_REQUIRE(fflush(w->f) == 0, ZS_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    int r = fclose(w->f);
    w->f = NULL;
    ZS_REQUIRE(r == 0, ZS_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    ZS_REQUIRE(rename(w->tmp, w->path) == 0, ZS_ERR_IO, "%s: cannot rename to %s: %s", w->tmp,
               w->path, strerror(errno));
    free(w);
    return ZS_OK;
fail:
    zs_shard_writer_abort(w);
    return st;
}

void zs_shard_writer_abort(zs_shard_writer_t *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    free(w);
}

/* ---- one split's shards -------------------------------------------------------------------- */

zs_status zs_split_out_append(zs_split_out *o, const int32_t *ids, size_t n) {
    zs_status st = ZS_OK;
    while (n) {
        if (!o->w) {
            char path[4400];
            ZS_REQUIRE(o->n_files < ZS_TOKENIZE_MAX_SHARDS, ZS_ERR_INVALID,
                       "%s: more than %d %s shards: give a larger --shard-size", o->dir,
                       ZS_TOKENIZE_MAX_SHARDS, o->name);
            if (o->n_files == o->cap_files) {
                int cap = o->cap_files ? 2 * o->cap_files : 16;
                char(*g)[32] = realloc(o->files, (size_t)cap * sizeof *g);
                ZS_REQUIRE(g, ZS_ERR_OOM, "tokenize: out of memory");
                o->files = g;
                o->cap_files = cap;
            }
            snprintf(o->files[o->n_files], sizeof o->files[0], "%s_%06d.bin", o->name, o->n_files);
            snprintf(path, sizeof path, "%s/%s", o->dir, o->files[o->n_files]);
            ZS_CHECK(zs_shard_writer_open(path, o->bits, &o->w));
            o->n_files++;
        }
        int64_t room = o->shard_size - zs_shard_writer_count(o->w);
        size_t take = (int64_t)n < room ? n : (size_t)room;
        ZS_CHECK(zs_shard_writer_append(o->w, ids, take));
        ids += take;
        n -= take;
        if (zs_shard_writer_count(o->w) == o->shard_size) {
            zs_shard_writer_t *w = o->w;
            o->w = NULL;
            ZS_CHECK(zs_shard_writer_close(w));
        }
    }
fail:
    return st;
}

zs_status zs_split_out_finish(zs_split_out *o) {
    zs_shard_writer_t *w = o->w;
    o->w = NULL;
    return zs_shard_writer_close(w);
}

void zs_split_out_remove(zs_split_out *o) {
    zs_shard_writer_abort(o->w);
    o->w = NULL;
    for (int i = 0; i < o->n_files; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", o->dir, o->files[i]);
        unlink(path);
    }
}

/* ---- dataset.json -------------------------------------------------------------------------- */

static void jstr(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void jid(FILE *f, int id) {
    if (id < 0)
        fprintf(f, "null");
    else
        fprintf(f, "%d", id);
}

zs_status zs_dataset_json_write(const char *dir, const zs_dataset_info *info,
                                const zs_tokenize_stats *s, const zs_split_out out[2]) {
    zs_status st = ZS_OK;
    char path[4400], tmp[4500];
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    fprintf(f, "{\n  \"format\": \"zshard-tokens\",\n  \"version\": 1,\n  \"tokenizer\": ");
    jstr(f, info->tokenizer);
    fprintf(f, ",\n  \"vocab_size\": %d,\n  \"eos_id\": %d,\n  \"bos_id\": ", info->vocab_size,
            info->eos_id);
    jid(f, info->bos_id);
    fprintf(f, ",\n  \"pad_id\": ");
    jid(f, info->pad_id);
    fprintf(f, ",\n  \"doc_boundary\": \"eos_after\",\n  \"bits\": %d,\n", info->bits);
    for (int k = 0; k < 2; k++) {
        fprintf(f, "  \"%s\": {\"files\": [", k ? "val" : "train");
        for (int i = 0; i < out[k].n_files; i++) {
            fprintf(f, "%s", i ? ", " : "");
            jstr(f, out[k].files[i]);
        }
        fprintf(f, "], \"documents\": %lld, \"tokens\": %lld},\n", (long long)s->docs[k],
                (long long)s->tokens[k]);
    }
    fprintf(f, "  \"shard_size\": %lld,\n  \"template\": {\"before\": [",
            (long long)info->shard_size);
    for (int i = 0; i < info->n_pre; i++)
        fprintf(f, "%s%d", i ? ", " : "", info->pre[i]);
    fprintf(f, "], \"after\": [");
    for (int i = 0; i < info->n_post; i++)
        fprintf(f, "%s%d", i ? ", " : "", info->post[i]);
    fprintf(f,
            "]},\n  \"split\": {\"rule\": \"splitmix64(splitmix64(seed) ^ index) / 2^64 < "
            "val_frac\", \"seed\": %llu, \"val_frac\": %.17g},\n",
            (unsigned long long)info->seed, info->val_frac);
    fprintf(f, "  \"documents_seen\": %lld,\n  \"skipped\": {", (long long)s->docs_seen);
    for (int k = 1; k < ZS_DOC_SKIP_COUNT; k++)
        fprintf(f, "%s\"%s\": %lld", k > 1 ? ", " : "", zs_doc_skip_name((zs_doc_skip)k),
                (long long)s->skipped[k]);
    fprintf(f,
            "},\n  \"utf8_replaced\": %lld,\n  \"unk_tokens\": %lld,\n"
            "  \"byte_fallback_tokens\": %lld,\n  \"dropped_chars\": %lld,\n"
            "  \"eos_in_text\": %lld,\n  \"text_bytes\": %lld,\n  \"inputs\": [",
            (long long)s->utf8_replaced, (long long)s->unk, (long long)s->byte_fallback,
            (long long)s->dropped, (long long)s->eos_in_text, (long long)s->text_bytes);
    for (int i = 0; i < info->n_inputs; i++) {
        fprintf(f, "%s", i ? ", " : "");
        jstr(f, info->inputs[i]);
    }
    fprintf(f, "],\n  \"doc_sep\": ");
    if (info->doc_sep)
        jstr(f, info->doc_sep);
    else
        fprintf(f, "null");
    fprintf(f, ",\n  \"field\": ");
    jstr(f, info->field);
    fprintf(f, ",\n  \"created_by\": \"zshard %d.%d.%d tokenize\"\n}\n", ZS_VERSION_MAJOR,
            ZS_VERSION_MINOR, ZS_VERSION_PATCH);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    f = NULL;
    ZS_REQUIRE(!bad, ZS_ERR_IO, "%s: write failed", tmp);
    ZS_REQUIRE(rename(tmp, path) == 0, ZS_ERR_IO, "%s: cannot rename: %s", tmp, strerror(errno));
fail:
    if (f) fclose(f);
    if (st != ZS_OK) unlink(tmp);
    return st;
}

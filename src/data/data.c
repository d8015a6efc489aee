/* Loading text and llm.c token shards (uint16 and uint32, one file or a sorted pattern), the
 * train/val split, and per-step batches. */
#include "data/data.h"

#include "core/philox.h"
#include "core/status.h"

#include <errno.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define STREAM_BATCH 0x64617461ull /* "data": keeps batch draws apart from init streams */

static zs_status read_file(const char *path, unsigned char **buf, int64_t *len) {
    zs_status st = ZS_OK;
    FILE *f = NULL;
    unsigned char *b = NULL;
    struct stat sb;
    *buf = NULL;
    *len = 0;
    ZS_REQUIRE(stat(path, &sb) == 0, ZS_ERR_IO, "data file %s: %s", path, strerror(errno));
    ZS_REQUIRE(S_ISREG(sb.st_mode), ZS_ERR_IO, "data file %s: not a regular file", path);
    ZS_REQUIRE(sb.st_size > 0, ZS_ERR_INVALID, "data file %s: file is empty", path);
    f = fopen(path, "rb");
    ZS_REQUIRE(f, ZS_ERR_IO, "data file %s: %s", path, strerror(errno));
    b = malloc((size_t)sb.st_size);
    ZS_REQUIRE(b, ZS_ERR_OOM, "data file %s: out of memory for %lld bytes", path,
               (long long)sb.st_size);
    ZS_REQUIRE(fread(b, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size, ZS_ERR_IO,
               "data file %s: read failed", path);
    fclose(f);
    *buf = b;
    *len = sb.st_size;
    return ZS_OK;
fail:
    if (f) fclose(f);
    free(b);
    return st;
}

static int looks_like_shard(const unsigned char *b, int64_t len, const char *path) {
    size_t pl = strlen(path);
    int32_t magic = 0;
    if (len >= 4) memcpy(&magic, b, 4);
    return magic == ZS_LLMC_SHARD_MAGIC || magic == ZS_LLMC_SHARD32_MAGIC ||
           (pl > 4 && !strcmp(path + pl - 4, ".bin"));
}

/* Both formats share the header: 256 int32 of magic, version, token count. The magic names
 * the token width and each width has exactly one version. */
static zs_status parse_shard(const char *path, const unsigned char *b, int64_t len, zs_tokens *out,
                             int *bits) {
    zs_status st = ZS_OK;
    int32_t hdr[256];
    out->tok = NULL;
    out->n = 0;
    ZS_REQUIRE(len >= (int64_t)sizeof hdr, ZS_ERR_FORMAT,
               "token shard %s: truncated header (%lld bytes, need 1024)", path, (long long)len);
    memcpy(hdr, b, sizeof hdr);
    int wide = hdr[0] == ZS_LLMC_SHARD32_MAGIC;
    ZS_REQUIRE(hdr[0] == ZS_LLMC_SHARD_MAGIC || wide, ZS_ERR_FORMAT,
               "token shard %s: bad magic %d (expected %d for uint16 tokens or %d for uint32)",
               path, hdr[0], ZS_LLMC_SHARD_MAGIC, ZS_LLMC_SHARD32_MAGIC);
    int want = wide ? ZS_LLMC_SHARD32_VERSION : ZS_LLMC_SHARD_VERSION;
    ZS_REQUIRE(hdr[1] == want, ZS_ERR_FORMAT,
               "token shard %s: unsupported version %d of the %s format (expected %d)", path,
               hdr[1], wide ? "uint32" : "uint16", want);
    ZS_REQUIRE(hdr[2] > 0, ZS_ERR_FORMAT, "token shard %s: token count %d", path, hdr[2]);
    int64_t es = wide ? 4 : 2, need = (int64_t)sizeof hdr + (int64_t)hdr[2] * es;
    ZS_REQUIRE(len >= need, ZS_ERR_FORMAT,
               "token shard %s: truncated body (%lld bytes, header promises %lld)", path,
               (long long)len, (long long)need);
    out->tok = malloc((size_t)hdr[2] * sizeof *out->tok);
    ZS_REQUIRE(out->tok, ZS_ERR_OOM, "token shard %s: out of memory", path);
    if (wide) {
        memcpy(out->tok, b + sizeof hdr, (size_t)hdr[2] * 4);
    } else {
        const unsigned char *p = b + sizeof hdr;
        for (int64_t i = 0; i < hdr[2]; i++) {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            out->tok[i] = v;
        }
    }
    out->n = hdr[2];
    if (bits) *bits = wide ? 32 : 16;
    return ZS_OK;
fail:
    free(out->tok);
    out->tok = NULL;
    out->n = 0;
    return st;
}

zs_status zs_llmc_shard_read_bits(const char *path, zs_tokens *out, int *bits) {
    unsigned char *b = NULL;
    int64_t len = 0;
    zs_status st = read_file(path, &b, &len);
    if (st == ZS_OK) st = parse_shard(path, b, len, out, bits);
    free(b);
    return st;
}

zs_status zs_llmc_shard_read(const char *path, zs_tokens *out) {
    return zs_llmc_shard_read_bits(path, out, NULL);
}

static zs_status write_shard(const char *path, int32_t magic, int32_t version, const void *tok,
                             size_t es, int64_t n) {
    zs_status st = ZS_OK;
    int32_t hdr[256] = {magic, version, (int32_t)n};
    FILE *f = NULL;
    ZS_REQUIRE(n > 0 && n < INT32_MAX, ZS_ERR_INVALID,
               "token shard %s: %lld tokens (the header holds 1 .. 2^31-1)", path, (long long)n);
    f = fopen(path, "wb");
    ZS_REQUIRE(f, ZS_ERR_IO, "token shard %s: %s", path, strerror(errno));
    ZS_REQUIRE(fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, es, (size_t)n, f) == (size_t)n,
               ZS_ERR_IO, "token shard %s: write failed", path);
    ZS_REQUIRE(fclose(f) == 0, ZS_ERR_IO, "token shard %s: close failed", path);
    return ZS_OK;
fail:
    if (f) fclose(f);
    return st;
}

zs_status zs_llmc_shard_write(const char *path, const uint16_t *tok, int64_t n) {
    return write_shard(path, ZS_LLMC_SHARD_MAGIC, ZS_LLMC_SHARD_VERSION, tok, 2, n);
}

zs_status zs_llmc_shard32_write(const char *path, const uint32_t *tok, int64_t n) {
    return write_shard(path, ZS_LLMC_SHARD32_MAGIC, ZS_LLMC_SHARD32_VERSION, tok, 4, n);
}

/* One file. shard_vocab: the tokenizer's vocabulary for token shards (0: the format's
 * default). *kind: 0 text, 16 or 32 for shards. */
static zs_status load_one(const char *path, int shard_vocab, zs_tokens *out, int *vocab,
                          int *kind) {
    zs_status st = ZS_OK;
    unsigned char *b = NULL;
    int64_t len = 0;
    ZS_CHECK(read_file(path, &b, &len));
    if (looks_like_shard(b, len, path)) {
        ZS_CHECK(parse_shard(path, b, len, out, kind));
        *vocab = shard_vocab ? shard_vocab : *kind == 32 ? ZS_LLAMA3_VOCAB : ZS_GPT2_VOCAB;
        ZS_REQUIRE(*kind == 32 || *vocab <= 65536, ZS_ERR_INVALID,
                   "--vocab %d: token shard %s holds uint16 tokens, so its vocabulary is at "
                   "most 65536 (the uint32 format, magic %d, holds larger ones)",
                   *vocab, path, ZS_LLMC_SHARD32_MAGIC);
        for (int64_t i = 0; i < out->n; i++)
            ZS_REQUIRE(out->tok[i] < (uint32_t)*vocab, ZS_ERR_FORMAT,
                       "token shard %s: token %lld = %u is outside the %s vocabulary of %d "
                       "tokens%s",
                       path, (long long)i, out->tok[i],
                       shard_vocab   ? "--vocab"
                       : *kind == 32 ? "Llama-3"
                                     : "GPT-2",
                       *vocab, shard_vocab ? "" : " (--vocab N declares another tokenizer's)");
    } else {
        /* Byte-level tokenizer: every byte is its own token, vocabulary 256. */
        out->tok = malloc((size_t)len * sizeof *out->tok);
        ZS_REQUIRE(out->tok, ZS_ERR_OOM, "data file %s: out of memory", path);
        for (int64_t i = 0; i < len; i++)
            out->tok[i] = b[i];
        out->n = len;
        *vocab = 256;
        *kind = 0;
    }
fail:
    free(b);
    return st;
}

static int has_glob(const char *p) {
    return strpbrk(p, "*?[") != NULL;
}

/* A path or a pattern: the files in sorted order (glob sorts), read one after another into
 * one token stream. Every shard must agree on the vocabulary; text cannot join shards. */
static zs_status load_tokens(const char *path, int shard_vocab, zs_tokens *out, int *vocab,
                             int *is_text) {
    zs_status st = ZS_OK;
    glob_t g;
    int globbed = 0, kind = 0;
    zs_tokens part = {NULL, 0};
    memset(out, 0, sizeof *out);
    if (!has_glob(path)) {
        ZS_CHECK(load_one(path, shard_vocab, out, vocab, &kind));
        *is_text = kind == 0;
        return ZS_OK;
    }
    int rc = glob(path, GLOB_ERR, NULL, &g);
    globbed = rc == 0;
    ZS_REQUIRE(rc != GLOB_NOMATCH, ZS_ERR_IO, "data pattern %s: no file matches", path);
    ZS_REQUIRE(rc == 0, ZS_ERR_IO, "data pattern %s: cannot list the files", path);
    int64_t cap = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *f = g.gl_pathv[i];
        int v = 0;
        ZS_CHECK(load_one(f, shard_vocab, &part, &v, &kind));
        ZS_REQUIRE(kind != 0, ZS_ERR_INVALID,
                   "data pattern %s: %s is not a token shard (a pattern joins token shards only)",
                   path, f);
        ZS_REQUIRE(i == 0 || v == *vocab, ZS_ERR_INVALID,
                   "data pattern %s: %s has vocabulary %d but %s has %d (pass --vocab N)", path, f,
                   v, g.gl_pathv[0], *vocab);
        *vocab = v;
        if (out->n + part.n > cap) {
            int64_t nc = (out->n + part.n) * 2;
            uint32_t *t = realloc(out->tok, (size_t)nc * sizeof *t);
            ZS_REQUIRE(t, ZS_ERR_OOM, "data pattern %s: out of memory", path);
            out->tok = t;
            cap = nc;
        }
        memcpy(out->tok + out->n, part.tok, (size_t)part.n * sizeof *part.tok);
        out->n += part.n;
        free(part.tok);
        part.tok = NULL;
    }
    *is_text = 0;
    globfree(&g);
    return ZS_OK;
fail:
    if (globbed) globfree(&g);
    free(part.tok);
    free(out->tok);
    out->tok = NULL;
    out->n = 0;
    return st;
}

zs_status zs_dataset_open(const char *path, const char *val_path, double val_fraction,
                          zs_dataset *d) {
    return zs_dataset_open_vocab(path, val_path, val_fraction, 0, d);
}

zs_status zs_dataset_open_vocab(const char *path, const char *val_path, double val_fraction,
                                int vocab, zs_dataset *d) {
    zs_status st = ZS_OK;
    memset(d, 0, sizeof *d);
    ZS_REQUIRE(path && *path, ZS_ERR_INVALID, "no data file given (--data FILE)");
    ZS_REQUIRE(vocab == 0 || (vocab >= 2 && vocab <= ZS_MAX_VOCAB), ZS_ERR_INVALID,
               "--vocab %d: the vocabulary must be in [2, %d]", vocab, ZS_MAX_VOCAB);
    snprintf(d->path, sizeof d->path, "%s", path);
    ZS_CHECK(load_tokens(path, vocab, &d->train, &d->vocab, &d->is_text));
    ZS_REQUIRE(!vocab || !d->is_text, ZS_ERR_INVALID,
               "--vocab %d: %s is text, read byte by byte (vocabulary 256); --vocab applies to "
               "token shards",
               vocab, path);
    if (val_path) {
        int v2 = 0, t2 = 0;
        ZS_CHECK(load_tokens(val_path, vocab, &d->val, &v2, &t2));
        ZS_REQUIRE(v2 == d->vocab, ZS_ERR_INVALID,
                   "validation file %s has vocabulary %d but training data %s has %d", val_path, v2,
                   path, d->vocab);
    } else {
        ZS_REQUIRE(val_fraction > 0 && val_fraction < 1, ZS_ERR_INVALID,
                   "validation fraction %g must be in (0, 1)", val_fraction);
        int64_t nval = (int64_t)((double)d->train.n * val_fraction);
        /* The held-out tail is copied so both splits own their memory. */
        d->val.tok = malloc((size_t)(nval ? nval : 1) * sizeof *d->val.tok);
        ZS_REQUIRE(d->val.tok, ZS_ERR_OOM, "data file %s: out of memory", path);
        memcpy(d->val.tok, d->train.tok + d->train.n - nval, (size_t)nval * sizeof *d->val.tok);
        d->val.n = nval;
        d->train.n -= nval;
    }
    return ZS_OK;
fail:
    zs_dataset_close(d);
    return st;
}

void zs_dataset_close(zs_dataset *d) {
    if (!d) return;
    free(d->train.tok);
    free(d->val.tok);
    d->train.tok = d->val.tok = NULL;
    d->train.n = d->val.n = 0;
}

zs_status zs_dataset_check(const zs_dataset *d, int T) {
    if (d->train.n < (int64_t)T + 1)
        return zs_error(ZS_ERR_INVALID,
                        "data file %s: training split has %lld tokens, shorter than one sequence"
                        " of %d (+1) tokens",
                        d->path, (long long)d->train.n, T);
    if (d->val.n < (int64_t)T + 1)
        return zs_error(ZS_ERR_INVALID,
                        "data file %s: validation split has %lld tokens, shorter than one "
                        "sequence of %d (+1) tokens",
                        d->path, (long long)d->val.n, T);
    return ZS_OK;
}

static void copy_window(const zs_tokens *t, int64_t off, int T, int32_t *in, int32_t *tg) {
    for (int j = 0; j < T; j++) {
        in[j] = t->tok[off + j];
        tg[j] = t->tok[off + j + 1];
    }
}

void zs_batch_train(const zs_dataset *d, uint64_t seed, int64_t step, int global_batch, int T,
                    int first, int count, int32_t *inputs, int32_t *targets) {
    uint64_t span = (uint64_t)(d->train.n - T); /* valid starts: [0, n - T - 1] */
    for (int i = 0; i < count; i++) {
        uint64_t idx = (uint64_t)step * (uint64_t)global_batch + (uint64_t)(first + i);
        int64_t off = (int64_t)(zs_philox_u64(seed, STREAM_BATCH, idx) % span);
        copy_window(&d->train, off, T, inputs + (size_t)i * T, targets + (size_t)i * T);
    }
}

void zs_batch_val(const zs_dataset *d, int64_t k, int global_batch, int T, int first, int count,
                  int32_t *inputs, int32_t *targets) {
    int64_t windows = (d->val.n - 1) / T; /* >= 1 after zs_dataset_check */
    for (int i = 0; i < count; i++) {
        int64_t w = k * global_batch + first + i;
        copy_window(&d->val, w < windows ? w * T : 0, T, inputs + (size_t)i * T,
                    targets + (size_t)i * T);
        if (w >= windows)
            for (int j = 0; j < T; j++)
                targets[(size_t)i * T + j] = -1;
    }
}

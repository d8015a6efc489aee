/* Loading text and llm.c token shards, the train/val split, and per-step batches. */
#include "data/data.h"

#include "core/philox.h"
#include "core/status.h"

#include <errno.h>
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
    return magic == ZS_LLMC_SHARD_MAGIC || (pl > 4 && !strcmp(path + pl - 4, ".bin"));
}

static zs_status parse_shard(const char *path, const unsigned char *b, int64_t len,
                             zs_tokens *out) {
    zs_status st = ZS_OK;
    int32_t hdr[256];
    out->tok = NULL;
    out->n = 0;
    ZS_REQUIRE(len >= (int64_t)sizeof hdr, ZS_ERR_FORMAT,
               "token shard %s: truncated header (%lld bytes, need 1024)", path, (long long)len);
    memcpy(hdr, b, sizeof hdr);
    ZS_REQUIRE(hdr[0] == ZS_LLMC_SHARD_MAGIC, ZS_ERR_FORMAT,
               "token shard %s: bad magic %d (expected %d)", path, hdr[0], ZS_LLMC_SHARD_MAGIC);
    ZS_REQUIRE(hdr[1] == ZS_LLMC_SHARD_VERSION, ZS_ERR_FORMAT,
               "token shard %s: unsupported version %d (expected %d)", path, hdr[1],
               ZS_LLMC_SHARD_VERSION);
    ZS_REQUIRE(hdr[2] > 0, ZS_ERR_FORMAT, "token shard %s: token count %d", path, hdr[2]);
    int64_t need = (int64_t)sizeof hdr + (int64_t)hdr[2] * 2;
    ZS_REQUIRE(len >= need, ZS_ERR_FORMAT,
               "token shard %s: truncated body (%lld bytes, header promises %lld)", path,
               (long long)len, (long long)need);
    out->tok = malloc((size_t)hdr[2] * 2);
    ZS_REQUIRE(out->tok, ZS_ERR_OOM, "token shard %s: out of memory", path);
    memcpy(out->tok, b + sizeof hdr, (size_t)hdr[2] * 2);
    out->n = hdr[2];
    return ZS_OK;
fail:
    free(out->tok);
    out->tok = NULL;
    out->n = 0;
    return st;
}

zs_status zs_llmc_shard_read(const char *path, zs_tokens *out) {
    unsigned char *b = NULL;
    int64_t len = 0;
    zs_status st = read_file(path, &b, &len);
    if (st == ZS_OK) st = parse_shard(path, b, len, out);
    free(b);
    return st;
}

zs_status zs_llmc_shard_write(const char *path, const uint16_t *tok, int64_t n) {
    zs_status st = ZS_OK;
    int32_t hdr[256] = {ZS_LLMC_SHARD_MAGIC, ZS_LLMC_SHARD_VERSION, (int32_t)n};
    FILE *f = fopen(path, "wb");
    ZS_REQUIRE(f, ZS_ERR_IO, "token shard %s: %s", path, strerror(errno));
    ZS_REQUIRE(fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, 2, (size_t)n, f) == (size_t)n,
               ZS_ERR_IO, "token shard %s: write failed", path);
    ZS_REQUIRE(fclose(f) == 0, ZS_ERR_IO, "token shard %s: close failed", path);
    return ZS_OK;
fail:
    if (f) fclose(f);
    return st;
}

/* shard_vocab: the tokenizer's vocabulary for token shards (0: GPT-2's). */
static zs_status load_tokens(const char *path, int shard_vocab, zs_tokens *out, int *vocab,
                             int *is_text) {
    zs_status st = ZS_OK;
    unsigned char *b = NULL;
    int64_t len = 0;
    ZS_CHECK(read_file(path, &b, &len));
    if (looks_like_shard(b, len, path)) {
        ZS_CHECK(parse_shard(path, b, len, out));
        *vocab = shard_vocab ? shard_vocab : ZS_GPT2_VOCAB;
        *is_text = 0;
        for (int64_t i = 0; i < out->n; i++)
            ZS_REQUIRE(out->tok[i] < *vocab, ZS_ERR_FORMAT,
                       "token shard %s: token %lld = %u is outside the %s vocabulary of %d "
                       "tokens%s",
                       path, (long long)i, out->tok[i], shard_vocab ? "--vocab" : "GPT-2", *vocab,
                       shard_vocab ? "" : " (--vocab N declares another tokenizer's)");
    } else {
        /* Byte-level tokenizer: every byte is its own token, vocabulary 256. */
        out->tok = malloc((size_t)len * 2);
        ZS_REQUIRE(out->tok, ZS_ERR_OOM, "data file %s: out of memory", path);
        for (int64_t i = 0; i < len; i++)
            out->tok[i] = b[i];
        out->n = len;
        *vocab = 256;
        *is_text = 1;
    }
fail:
    free(b);
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
    ZS_REQUIRE(vocab == 0 || (vocab >= 2 && vocab <= 65536), ZS_ERR_INVALID,
               "--vocab %d: token shards hold uint16 tokens, so the vocabulary must be in "
               "[2, 65536]",
               vocab);
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
        d->val.tok = malloc((size_t)(nval ? nval : 1) * 2);
        ZS_REQUIRE(d->val.tok, ZS_ERR_OOM, "data file %s: out of memory", path);
        memcpy(d->val.tok, d->train.tok + d->train.n - nval, (size_t)nval * 2);
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
        int64_t w = (k * global_batch + first + i) % windows;
        copy_window(&d->val, w * T, T, inputs + (size_t)i * T, targets + (size_t)i * T);
    }
}

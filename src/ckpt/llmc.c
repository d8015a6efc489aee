/* llm.c's GPT-2 model file: a header of 256 int32 (magic 20240326, version 3 = fp32 or
 * 5 = bf16, max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size),
 * then the 16 parameter tensors in llm.c's order, block tensors stacked over layers. Weights
 * are [out, in] as in zshard, so no transposes. Parsing and import live here. */
#include "ckpt/convert.h"

#include "core/status.h"
#include "models/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

zs_status zs_llmc_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
                        zs_llmc_header *out) {
    zs_status st = ZS_OK;
    zs_layout l;
    zs_layout_init(&l);
    memset(out, 0, sizeof *out);
    ZS_REQUIRE(len >= ZS_LLMC_HEADER_BYTES && file_size >= ZS_LLMC_HEADER_BYTES, ZS_ERR_FORMAT,
               "%s: truncated: shorter than llm.c's %d-byte header", what, ZS_LLMC_HEADER_BYTES);
    int32_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = le32(buf + 4 * i);
    ZS_REQUIRE(h[0] == ZS_LLMC_MAGIC, ZS_ERR_FORMAT,
               "%s: wrong magic %d: not an llm.c model file (expected %d)", what, h[0],
               ZS_LLMC_MAGIC);
    ZS_REQUIRE(h[1] == ZS_LLMC_VERSION_F32 || h[1] == ZS_LLMC_VERSION_BF16, ZS_ERR_FORMAT,
               "%s: unsupported llm.c model version %d (3 = fp32 and 5 = bf16 are supported)", what,
               h[1]);
    out->version = h[1];
    zs_model_config *c = &out->cfg;
    c->arch = ZS_ARCH_GPT2;
    c->max_seq = h[2];
    c->n_layer = h[4];
    c->n_head = h[5];
    c->n_embd = h[6];
    ZS_REQUIRE(h[2] > 0 && h[2] <= (1 << 20) && h[3] > 0 && h[3] <= (1 << 24) && h[4] > 0 &&
                   h[4] <= 1024 && h[5] > 0 && h[6] > 0 && h[6] <= 65536 && h[6] % h[5] == 0,
               ZS_ERR_FORMAT,
               "%s: implausible model sizes (seq %d, vocab %d, layers %d, heads %d, width %d)",
               what, h[2], h[3], h[4], h[5], h[6]);
    c->n_kv_head = c->n_head;
    c->ffn_hidden = 4 * c->n_embd;
    zs_model_config_set_vocab(c, h[3]);
    ZS_REQUIRE(h[7] == c->padded_vocab, ZS_ERR_UNSUPPORTED,
               "%s: padded vocabulary %d: zshard pads %d to %d (a multiple of 64)", what, h[7],
               h[3], c->padded_vocab);
    zs_model_name_for(c);
    ZS_CHECK(zs_model_layout(c, 1, &l));
    uint64_t want =
        ZS_LLMC_HEADER_BYTES + (uint64_t)l.total_params * (h[1] == ZS_LLMC_VERSION_F32 ? 4u : 2u);
    ZS_REQUIRE(file_size >= want, ZS_ERR_FORMAT,
               "%s: truncated: %llu bytes, the header announces %llu", what,
               (unsigned long long)file_size, (unsigned long long)want);
    ZS_REQUIRE(file_size == want, ZS_ERR_FORMAT,
               "%s: %llu bytes, the header announces %llu (trailing data)", what,
               (unsigned long long)file_size, (unsigned long long)want);
fail:
    zs_layout_free(&l);
    return st;
}

typedef struct llmc_import {
    const char *path;
    int fd;
    int bf16;
    zs_layout layout;
    uint64_t *file_off; /* per layout tensor: byte offset in the file */
    int unit;
    float *full;
    uint16_t *raw;
} llmc_import;

static zs_status read_tensor(llmc_import *im, int ti, float *dst) {
    const zs_tensor_desc *t = &im->layout.tensors[ti];
    size_t es = im->bf16 ? 2 : 4, n = (size_t)t->count * es;
    void *buf = im->bf16 ? (void *)im->raw : (void *)dst;
    char *p = buf;
    uint64_t at = im->file_off[ti];
    while (n) {
        ssize_t k = pread(im->fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return zs_error(ZS_ERR_IO, "%s: read failed at byte %llu: %s", im->path,
                            (unsigned long long)at, k < 0 ? strerror(errno) : "truncated");
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    if (im->bf16)
        for (int64_t i = 0; i < t->count; i++) {
            uint32_t u = (uint32_t)im->raw[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    return ZS_OK;
}

static zs_status llmc_source(void *ctx, int unit, int kind, int64_t lo, int64_t n, float *dst) {
    zs_status st = ZS_OK;
    llmc_import *im = ctx;
    if (kind != ZS_CKPT_MASTER) {
        memset(dst, 0, (size_t)n * sizeof *dst);
        return ZS_OK;
    }
    if (im->unit != unit) {
        const zs_unit_desc *ud = &im->layout.units[unit];
        memset(im->full, 0, (size_t)ud->padded * sizeof *im->full);
        for (int i = 0; i < ud->n_tensors; i++) {
            int ti = ud->first_tensor + i;
            const zs_tensor_desc *t = &im->layout.tensors[ti];
            ZS_CHECK(read_tensor(im, ti, im->full + t->offset));
            /* Padded vocabulary rows are zero in zshard (they never get a gradient); llm.c
             * writes zeros there too, but do not trust a file to. */
            memset(im->full + t->offset + t->zero_from, 0,
                   (size_t)(t->count - t->zero_from) * sizeof(float));
        }
        im->unit = unit;
    }
    memcpy(dst, im->full + lo, (size_t)n * sizeof *dst);
fail:
    return st;
}

zs_status zs_llmc_import(const char *file, const char *out) {
    zs_status st = ZS_OK;
    llmc_import im;
    uint8_t hdr[ZS_LLMC_HEADER_BYTES];
    struct stat sb;
    int *order = NULL;
    memset(&im, 0, sizeof im);
    im.path = file;
    im.unit = -1;
    im.fd = open(file, O_RDONLY | O_CLOEXEC);
    ZS_REQUIRE(im.fd >= 0, ZS_ERR_IO, "%s: cannot open: %s", file, strerror(errno));
    ZS_REQUIRE(fstat(im.fd, &sb) == 0, ZS_ERR_IO, "%s: stat failed", file);
    size_t got = sb.st_size < ZS_LLMC_HEADER_BYTES ? (size_t)sb.st_size : ZS_LLMC_HEADER_BYTES;
    ZS_REQUIRE(pread(im.fd, hdr, got, 0) == (ssize_t)got, ZS_ERR_IO, "%s: read failed", file);
    zs_llmc_header h;
    ZS_CHECK(zs_llmc_parse(hdr, got, (uint64_t)sb.st_size, file, &h));
    im.bf16 = h.version == ZS_LLMC_VERSION_BF16;
    ZS_CHECK(zs_model_layout(&h.cfg, 1, &im.layout));
    order = malloc((size_t)im.layout.n_tensors * sizeof *order);
    im.file_off = malloc((size_t)im.layout.n_tensors * sizeof *im.file_off);
    ZS_REQUIRE(order && im.file_off, ZS_ERR_OOM, "%s: out of memory", file);
    ZS_CHECK(zs_llmc_order(&im.layout, &h.cfg, order));
    uint64_t at = ZS_LLMC_HEADER_BYTES;
    int64_t biggest_t = 1, biggest_u = 1;
    for (int k = 0; k < im.layout.n_tensors; k++) {
        const zs_tensor_desc *t = &im.layout.tensors[order[k]];
        im.file_off[order[k]] = at;
        at += (uint64_t)t->count * (im.bf16 ? 2u : 4u);
        if (t->count > biggest_t) biggest_t = t->count;
    }
    for (int u = 0; u < im.layout.n_units; u++)
        if (im.layout.units[u].padded > biggest_u) biggest_u = im.layout.units[u].padded;
    im.full = malloc((size_t)biggest_u * sizeof *im.full);
    im.raw = im.bf16 ? malloc((size_t)biggest_t * 2) : NULL;
    ZS_REQUIRE(im.full && (!im.bf16 || im.raw), ZS_ERR_OOM, "%s: out of memory", file);
    zs_ckpt_info info;
    zs_ckpt_info_import(&info, &h.cfg);
    ZS_CHECK(zs_ckpt_build(out, &info, llmc_source, &im));
fail:
    if (im.fd >= 0) close(im.fd);
    free(order);
    free(im.file_off);
    free(im.full);
    free(im.raw);
    zs_layout_free(&im.layout);
    return st;
}

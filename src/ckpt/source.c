/* Any source of weights behind one door, for `train --init-from`, `eval` and `generate`: a
 * zshard checkpoint, a safetensors file, a Hugging Face model directory or an llm.c model
 * file. The kind comes from what the path holds (a manifest, config.json, a magic number),
 * never from its name, and each kind's own reader validates it fully. */
#include "ckpt/convert.h"

#include "core/status.h"
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The forms every command that reads weights accepts, for messages. */
#define ZS_SOURCE_FORMS                                                                            \
    "a checkpoint (SAVE_DIR, SAVE_DIR/latest or SAVE_DIR/step_N), a safetensors file, a "          \
    "Hugging Face model directory or an llm.c model file"

zs_status zs_source_kind_of(const char *path, zs_source_kind *kind) {
    zs_status st = ZS_OK;
    struct stat sb;
    char buf[4200];
    int fd = -1;
    ZS_REQUIRE(path && *path, ZS_ERR_INVALID, "no weights source given (%s)", ZS_SOURCE_FORMS);
    ZS_REQUIRE(stat(path, &sb) == 0, ZS_ERR_IO, "%s: %s", path, strerror(errno));
    /* A save dir, one of its step dirs, or its `latest` file all name a checkpoint. */
    if (zs_ckpt_resolve(path, buf, sizeof buf) == ZS_OK) {
        *kind = ZS_SOURCE_CKPT;
        return ZS_OK;
    }
    if (S_ISDIR(sb.st_mode)) {
        ZS_CHECK(zs_path_join(buf, sizeof buf, path, "config.json"));
        ZS_REQUIRE(stat(buf, &sb) == 0, ZS_ERR_FORMAT,
                   "%s: no checkpoint (manifest.json, latest, step_*) and no Hugging Face "
                   "config.json in it; expected %s",
                   path, ZS_SOURCE_FORMS);
        *kind = ZS_SOURCE_HF_DIR;
        return ZS_OK;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    ZS_REQUIRE(fd >= 0, ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t m[9] = {0};
    ssize_t got = pread(fd, m, sizeof m, 0);
    ZS_REQUIRE(got >= 4, ZS_ERR_FORMAT, "%s: %lld bytes, not a weights file; expected %s", path,
               (long long)sb.st_size, ZS_SOURCE_FORMS);
    int32_t magic = (int32_t)((uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 |
                              (uint32_t)m[3] << 24);
    if (magic == ZS_LLMC_MAGIC) {
        *kind = ZS_SOURCE_LLMC;
        goto fail;
    }
    ZS_REQUIRE(magic != ZS_LLMC_SHARD_MAGIC && magic != ZS_LLMC_SHARD32_MAGIC, ZS_ERR_FORMAT,
               "%s: an llm.c token shard (training data, give it to --data), not weights; "
               "expected %s",
               path, ZS_SOURCE_FORMS);
    /* safetensors: an 8-byte little-endian header length that fits the file, then '{'. */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | m[i];
    ZS_REQUIRE(got == 9 && hlen >= 2 && hlen <= (uint64_t)sb.st_size - 8 && m[8] == '{',
               ZS_ERR_FORMAT, "%s: not a format zshard reads weights from; expected %s", path,
               ZS_SOURCE_FORMS);
    *kind = ZS_SOURCE_SAFETENSORS;
fail:
    if (fd >= 0) close(fd);
    return st;
}

zs_status zs_source_config(const char *path, const zs_model_config *hint, zs_model_config *cfg) {
    zs_status st = ZS_OK;
    zs_source_kind kind;
    zs_ckpt_reader *r = NULL;
    ZS_CHECK(zs_source_kind_of(path, &kind));
    switch (kind) {
    case ZS_SOURCE_CKPT:
        ZS_CHECK(zs_ckpt_reader_open(path, &r));
        *cfg = zs_ckpt_reader_manifest(r)->info.model;
        break;
    case ZS_SOURCE_SAFETENSORS:
        ZS_CHECK(zs_st_config(path, hint, cfg));
        break;
    case ZS_SOURCE_HF_DIR:
        ZS_CHECK(zs_hf_config(path, hint, cfg));
        break;
    case ZS_SOURCE_LLMC: {
        uint8_t hdr[ZS_LLMC_HEADER_BYTES];
        struct stat sb;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ZS_REQUIRE(fd >= 0, ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        ssize_t got = fstat(fd, &sb) == 0 ? pread(fd, hdr, sizeof hdr, 0) : -1;
        close(fd);
        ZS_REQUIRE(got >= 0, ZS_ERR_IO, "%s: read failed", path);
        zs_llmc_header h;
        ZS_CHECK(zs_llmc_parse(hdr, (size_t)got, (uint64_t)sb.st_size, path, &h));
        *cfg = h.cfg;
        break;
    }
    }
fail:
    zs_ckpt_reader_close(r);
    return st;
}

zs_status zs_source_import(const char *path, const zs_model_config *hint, const char *out) {
    zs_status st = ZS_OK;
    zs_source_kind kind;
    ZS_CHECK(zs_source_kind_of(path, &kind));
    switch (kind) {
    case ZS_SOURCE_CKPT:
        ZS_REQUIRE(0, ZS_ERR_INTERNAL, "%s: already a zshard checkpoint", path);
        break;
    case ZS_SOURCE_SAFETENSORS:
        ZS_CHECK(zs_st_import(path, out, hint));
        break;
    case ZS_SOURCE_HF_DIR:
        ZS_CHECK(zs_hf_import(path, out, hint));
        break;
    case ZS_SOURCE_LLMC:
        ZS_CHECK(zs_llmc_import(path, out));
        break;
    }
fail:
    return st;
}

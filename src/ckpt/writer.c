/* Writing one rank file of a checkpoint: each block of a unit's shard becomes an independent
 * zstd frame (so a reader at another world size decompresses only what it needs), appended in
 * the manifest's canonical frame order, with a CRC32C per frame and over the whole file. */
#include "ckpt/ckpt.h"

#include "ckpt/crc32c.h"
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

struct zs_ckpt_writer {
    char path[4096];
    int fd;
    int finished;
    int created; /* we created path: remove it if never finished */
    zs_ckpt_file *file;
    int next;       /* next frame to write */
    uint64_t pos;   /* bytes written */
    uint32_t crc;   /* running CRC32C of the file */
    int kill_after; /* test hook, -1 = off */
    ZSTD_CCtx *cctx;
    void *cbuf;
    size_t cbuf_cap;
    float *zeros; /* one block of zeros for data == NULL */
    int64_t zeros_n;
};

zs_status zs_ckpt_writer_open(const char *path, int level, zs_ckpt_file *file,
                              zs_ckpt_writer **out) {
    zs_status st = ZS_OK;
    zs_ckpt_writer *w = calloc(1, sizeof *w);
    *out = NULL;
    ZS_REQUIRE(w, ZS_ERR_OOM, "%s: out of memory", path);
    w->fd = -1;
    w->kill_after = -1;
    w->file = file;
    snprintf(w->path, sizeof w->path, "%s", path);
    int64_t biggest = 1;
    for (int i = 0; i < file->n_frames; i++)
        if (file->frames[i].count > biggest) biggest = file->frames[i].count;
    w->cbuf_cap = ZSTD_compressBound((size_t)biggest * 4);
    w->cbuf = malloc(w->cbuf_cap);
    w->cctx = ZSTD_createCCtx();
    ZS_REQUIRE(w->cbuf && w->cctx, ZS_ERR_OOM, "%s: out of memory", path);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level);
    /* zstd's own XXH64 content checksum too: a second, independent check after decoding. */
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZS_REQUIRE(w->fd >= 0, ZS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    w->created = 1;
    *out = w;
    return ZS_OK;
fail:
    zs_ckpt_writer_destroy(w);
    return st;
}

void zs_ckpt_writer_kill_after(zs_ckpt_writer *w, int frames) {
    w->kill_after = frames;
}

static zs_status write_all(zs_ckpt_writer *w, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return zs_error(ZS_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return ZS_OK;
}

zs_status zs_ckpt_writer_put(zs_ckpt_writer *w, int unit, int kind, const float *data,
                             int64_t count) {
    zs_status st = ZS_OK;
    while (count > 0) {
        ZS_ASSERT(w->next < w->file->n_frames);
        zs_ckpt_frame *fr = &w->file->frames[w->next];
        ZS_ASSERT(fr->unit == unit && fr->kind == kind && fr->count <= count);
        const float *src = data;
        if (!src) {
            if (w->zeros_n < fr->count) {
                free(w->zeros);
                w->zeros = calloc((size_t)fr->count, sizeof(float));
                ZS_REQUIRE(w->zeros, ZS_ERR_OOM, "%s: out of memory", w->path);
                w->zeros_n = fr->count;
            }
            src = w->zeros;
        }
        size_t c = ZSTD_compress2(w->cctx, w->cbuf, w->cbuf_cap, src, (size_t)fr->count * 4);
        ZS_REQUIRE(!ZSTD_isError(c), ZS_ERR_INTERNAL, "%s: zstd: %s", w->path,
                   ZSTD_getErrorName(c));
        ZS_CHECK(write_all(w, w->cbuf, c));
        fr->offset = w->pos;
        fr->csize = c;
        fr->crc = zs_crc32c(0, w->cbuf, c);
        w->crc = zs_crc32c(w->crc, w->cbuf, c);
        w->pos += c;
        w->next++;
        count -= fr->count;
        if (data) data += fr->count;
        /* Fault injection for the crash tests: die like a killed process, mid-file. */
        if (w->kill_after >= 0 && w->next >= w->kill_after) raise(SIGKILL);
    }
fail:
    return st;
}

zs_status zs_ckpt_writer_finish(zs_ckpt_writer *w) {
    zs_status st = ZS_OK;
    ZS_ASSERT(w->next == w->file->n_frames);
    ZS_REQUIRE(fsync(w->fd) == 0, ZS_ERR_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    int rc = close(w->fd);
    w->fd = -1;
    ZS_REQUIRE(rc == 0, ZS_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    w->file->size = w->pos;
    w->file->crc = w->crc;
    w->finished = 1;
fail:
    return st;
}

void zs_ckpt_writer_destroy(zs_ckpt_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (!w->finished && w->created) unlink(w->path);
    ZSTD_freeCCtx(w->cctx);
    free(w->cbuf);
    free(w->zeros);
    free(w);
}

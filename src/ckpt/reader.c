/* Reading a checkpoint at any world size: a requested element range of a unit is mapped onto
 * the saved ranks' shards and frames through the layout; only overlapping frames are read
 * (pread) and decompressed, each checked against its CRC32C first. The last decompressed
 * frame is kept, so reading a unit tensor by tensor decodes each frame once. */
#include "ckpt/ckpt.h"

#include "ckpt/crc32c.h"
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

struct zs_ckpt_reader {
    char dir[4096];
    zs_manifest m;
    int *fds;
    int *base; /* [unit * NKINDS + kind]: first frame of that unit/kind in any file */
    ZSTD_DCtx *dctx;
    void *cbuf;
    size_t cbuf_cap;
    float *dbuf; /* one decompressed frame */
    int cache_file, cache_frame;
};

const zs_manifest *zs_ckpt_reader_manifest(const zs_ckpt_reader *r) {
    return &r->m;
}

const char *zs_ckpt_reader_dir(const zs_ckpt_reader *r) {
    return r->dir;
}

zs_status zs_ckpt_reader_open(const char *path, zs_ckpt_reader **out) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = calloc(1, sizeof *r);
    *out = NULL;
    ZS_REQUIRE(r, ZS_ERR_OOM, "checkpoint %s: out of memory", path);
    r->cache_file = -1;
    ZS_CHECK(zs_ckpt_resolve(path, r->dir, sizeof r->dir));
    ZS_CHECK(zs_manifest_load(r->dir, &r->m));
    const zs_manifest *m = &r->m;
    r->fds = malloc((size_t)m->n_files * sizeof *r->fds);
    r->base = malloc((size_t)m->layout.n_units * ZS_CKPT_NKINDS * sizeof *r->base);
    ZS_REQUIRE(r->fds && r->base, ZS_ERR_OOM, "checkpoint %s: out of memory", path);
    for (int i = 0; i < m->n_files; i++)
        r->fds[i] = -1;
    for (int i = m->files[0].n_frames - 1; i >= 0; i--) {
        const zs_ckpt_frame *fr = &m->files[0].frames[i];
        r->base[fr->unit * ZS_CKPT_NKINDS + fr->kind] = i;
    }
    for (int i = 0; i < m->n_files; i++) {
        const zs_ckpt_file *f = &m->files[i];
        char fp[4200];
        struct stat sb;
        snprintf(fp, sizeof fp, "%s/%s", r->dir, f->name);
        r->fds[i] = open(fp, O_RDONLY | O_CLOEXEC);
        ZS_REQUIRE(r->fds[i] >= 0, ZS_ERR_IO, "checkpoint %s: %s: %s", r->dir, f->name,
                   errno == ENOENT ? "missing" : strerror(errno));
        ZS_REQUIRE(fstat(r->fds[i], &sb) == 0, ZS_ERR_IO, "%s: stat failed", fp);
        ZS_REQUIRE((uint64_t)sb.st_size >= f->size, ZS_ERR_IO,
                   "checkpoint %s: %s: truncated (%lld bytes, the manifest records %llu)", r->dir,
                   f->name, (long long)sb.st_size, (unsigned long long)f->size);
        ZS_REQUIRE((uint64_t)sb.st_size == f->size, ZS_ERR_FORMAT,
                   "checkpoint %s: %s: %lld bytes, the manifest records %llu", r->dir, f->name,
                   (long long)sb.st_size, (unsigned long long)f->size);
    }
    int64_t biggest = 1;
    for (int i = 0; i < m->files[0].n_frames; i++)
        if (m->files[0].frames[i].count > biggest) biggest = m->files[0].frames[i].count;
    r->cbuf_cap = ZSTD_compressBound((size_t)biggest * 4);
    r->cbuf = malloc(r->cbuf_cap);
    r->dbuf = malloc((size_t)biggest * 4);
    r->dctx = ZSTD_createDCtx();
    ZS_REQUIRE(r->cbuf && r->dbuf && r->dctx, ZS_ERR_OOM, "checkpoint %s: out of memory", path);
    *out = r;
    return ZS_OK;
fail:
    zs_ckpt_reader_close(r);
    return st;
}

void zs_ckpt_reader_close(zs_ckpt_reader *r) {
    if (!r) return;
    for (int i = 0; r->fds && i < r->m.n_files; i++)
        if (r->fds[i] >= 0) close(r->fds[i]);
    free(r->fds);
    free(r->base);
    ZSTD_freeDCtx(r->dctx);
    free(r->cbuf);
    free(r->dbuf);
    zs_manifest_free(&r->m);
    free(r);
}

/* Read frame i of file q into cbuf and check its CRC; with decode also decompress into dbuf. */
static zs_status load_frame(zs_ckpt_reader *r, int q, int i, int decode) {
    zs_status st = ZS_OK;
    if (decode && r->cache_file == q && r->cache_frame == i) return ZS_OK;
    const zs_ckpt_file *f = &r->m.files[q];
    const zs_ckpt_frame *fr = &f->frames[i];
    const char *un = r->m.layout.units[fr->unit].name, *kn = zs_ckpt_kind_name(fr->kind);
    r->cache_file = -1;
    size_t got = 0;
    while (got < fr->csize) {
        ssize_t k =
            pread(r->fds[q], (char *)r->cbuf + got, fr->csize - got, (off_t)(fr->offset + got));
        if (k < 0 && errno == EINTR) continue;
        ZS_REQUIRE(k > 0, ZS_ERR_IO, "checkpoint %s: %s: read failed at byte %llu: %s", r->dir,
                   f->name, (unsigned long long)(fr->offset + got),
                   k < 0 ? strerror(errno) : "unexpected end of file (truncated)");
        got += (size_t)k;
    }
    uint32_t crc = zs_crc32c(0, r->cbuf, fr->csize);
    ZS_REQUIRE(crc == fr->crc, ZS_ERR_FORMAT,
               "checkpoint %s: %s: checksum mismatch in frame %d (unit %s, %s, bytes %llu..%llu): "
               "the file is damaged",
               r->dir, f->name, i, un, kn, (unsigned long long)fr->offset,
               (unsigned long long)(fr->offset + fr->csize));
    if (!decode) return ZS_OK;
    size_t n = ZSTD_decompressDCtx(r->dctx, r->dbuf, (size_t)fr->count * 4, r->cbuf, fr->csize);
    ZS_REQUIRE(!ZSTD_isError(n) && n == (size_t)fr->count * 4, ZS_ERR_FORMAT,
               "checkpoint %s: %s: frame %d (unit %s, %s) does not decode to %lld values: %s",
               r->dir, f->name, i, un, kn, (long long)fr->count,
               ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong length");
    r->cache_file = q;
    r->cache_frame = i;
fail:
    return st;
}

zs_status zs_ckpt_read(zs_ckpt_reader *r, int unit, int kind, int64_t lo, int64_t n, float *dst) {
    zs_status st = ZS_OK;
    const zs_manifest *m = &r->m;
    ZS_ASSERT(unit >= 0 && unit < m->layout.n_units && kind >= 0 && kind < ZS_CKPT_NKINDS);
    ZS_ASSERT(lo >= 0 && n >= 0);
    const zs_unit_desc *ud = &m->layout.units[unit];
    int64_t S = ud->shard, B = m->info.block_elems, end = lo + n, idx = lo;
    while (idx < end) {
        if (idx >= ud->used) {
            /* Padding (of this layout or of a reader's wider one) is zero by definition. */
            memset(dst + (idx - lo), 0, (size_t)(end - idx) * sizeof *dst);
            break;
        }
        int q = (int)(idx / S);
        int i = r->base[unit * ZS_CKPT_NKINDS + kind] + (int)((idx - (int64_t)q * S) / B);
        const zs_ckpt_frame *fr = &m->files[q].frames[i];
        ZS_ASSERT(fr->unit == unit && fr->kind == kind && idx >= fr->lo &&
                  idx < fr->lo + fr->count);
        ZS_CHECK(load_frame(r, q, i, 1));
        int64_t stop = fr->lo + fr->count;
        if (stop > end) stop = end;
        if (stop > ud->used) stop = ud->used;
        memcpy(dst + (idx - lo), r->dbuf + (idx - fr->lo), (size_t)(stop - idx) * sizeof *dst);
        idx = stop;
    }
fail:
    return st;
}

zs_status zs_ckpt_verify(zs_ckpt_reader *r) {
    zs_status st = ZS_OK;
    for (int q = 0; q < r->m.n_files; q++) {
        const zs_ckpt_file *f = &r->m.files[q];
        uint32_t crc = 0;
        for (int i = 0; i < f->n_frames; i++) {
            ZS_CHECK(load_frame(r, q, i, 1));
            crc = zs_crc32c(crc, r->cbuf, f->frames[i].csize);
        }
        ZS_REQUIRE(crc == f->crc, ZS_ERR_FORMAT,
                   "checkpoint %s: %s: checksum mismatch (crc32c %08x, manifest %08x)", r->dir,
                   f->name, crc, f->crc);
    }
fail:
    return st;
}

zs_status zs_ckpt_param_hash(zs_ckpt_reader *r, uint64_t *hash) {
    zs_status st = ZS_OK;
    const zs_layout *l = &r->m.layout;
    int64_t chunk = r->m.info.block_elems;
    float *buf = malloc((size_t)chunk * sizeof *buf);
    uint64_t x = 0xcbf29ce484222325ull;
    ZS_REQUIRE(buf, ZS_ERR_OOM, "checkpoint %s: out of memory", r->dir);
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *t = &l->tensors[ti];
        for (int64_t o = 0; o < t->count; o += chunk) {
            int64_t n = t->count - o < chunk ? t->count - o : chunk;
            ZS_CHECK(zs_ckpt_read(r, t->unit, ZS_CKPT_MASTER, t->offset + o, n, buf));
            const unsigned char *b = (const unsigned char *)buf;
            for (size_t i = 0; i < (size_t)n * 4; i++) {
                x ^= b[i];
                x *= 0x100000001b3ull;
            }
        }
    }
    *hash = x;
fail:
    free(buf);
    return st;
}

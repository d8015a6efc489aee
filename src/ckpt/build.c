/* Writing whole checkpoints outside a training job (import, offline reshard) and the
 * write-to-temporary-then-rename helpers of the exporters. A checkpoint is built rank file by
 * rank file with one shard in memory at a time, then published like a saved one. */
#include "ckpt/convert.h"

#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void zs_ckpt_info_import(zs_ckpt_info *info, const zs_model_config *c) {
    memset(info, 0, sizeof *info);
    info->model = *c;
    info->world_size = 1;
    info->stage = ZS_STAGE_DDP;
    info->level = ZS_CKPT_LEVEL;
    info->block_elems = ZS_CKPT_BLOCK_ELEMS;
    snprintf(info->source, sizeof info->source, "import");
}

zs_status zs_ckpt_build(const char *out, const zs_ckpt_info *info, zs_ckpt_source src, void *ctx) {
    zs_status st = ZS_OK;
    zs_manifest m;
    zs_ckpt_writer *w = NULL;
    float *buf = NULL;
    char tmp[4096], path[4400];
    int staged = 0;
    memset(&m, 0, sizeof m);
    ZS_CHECK(zs_manifest_init(&m, info));
    ZS_CHECK(zs_ckpt_stage(out, 0, tmp, sizeof tmp));
    staged = 1;
    int64_t biggest = 0;
    for (int u = 0; u < m.layout.n_units; u++)
        if (m.layout.units[u].shard > biggest) biggest = m.layout.units[u].shard;
    buf = malloc((size_t)biggest * sizeof *buf);
    ZS_REQUIRE(buf, ZS_ERR_OOM, "%s: out of memory for a shard of %lld values", out,
               (long long)biggest);
    for (int r = 0; r < m.n_files; r++) {
        ZS_CHECK(zs_path_join(path, sizeof path, tmp, m.files[r].name));
        ZS_CHECK(zs_ckpt_writer_open(path, info->level, &m.files[r], &w));
        for (int u = 0; u < m.layout.n_units; u++) {
            int64_t S = m.layout.units[u].shard;
            for (int k = 0; k < ZS_CKPT_NKINDS; k++) {
                float *data = NULL;
                if (src) {
                    ZS_CHECK(src(ctx, u, k, (int64_t)r * S, S, buf));
                    data = buf;
                }
                ZS_CHECK(zs_ckpt_writer_put(w, u, k, data, S));
            }
        }
        ZS_CHECK(zs_ckpt_writer_finish(w));
        zs_ckpt_writer_destroy(w);
        w = NULL;
    }
    ZS_CHECK(zs_path_join(path, sizeof path, tmp, ZS_CKPT_MANIFEST));
    ZS_CHECK(zs_manifest_write(&m, path));
    ZS_CHECK(zs_ckpt_publish(tmp, out, 0));
    staged = 0;
fail:
    zs_ckpt_writer_destroy(w);
    if (staged) zs_ckpt_remove_dir(tmp);
    free(buf);
    zs_manifest_free(&m);
    return st;
}

static zs_status reshard_source(void *ctx, int unit, int kind, int64_t lo, int64_t n, float *dst) {
    return zs_ckpt_read(ctx, unit, kind, lo, n, dst);
}

zs_status zs_ckpt_reshard(const char *in, const char *out, int world_size, zs_stage stage) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = NULL;
    ZS_REQUIRE(world_size >= 1 && world_size <= 65536, ZS_ERR_INVALID,
               "reshard: --nproc %d must be in [1, 65536]", world_size);
    ZS_CHECK(zs_ckpt_reader_open(in, &r));
    zs_ckpt_info info = zs_ckpt_reader_manifest(r)->info;
    info.world_size = world_size;
    info.stage = stage;
    snprintf(info.source, sizeof info.source, "reshard");
    ZS_CHECK(zs_ckpt_build(out, &info, reshard_source, r));
fail:
    zs_ckpt_reader_close(r);
    return st;
}

zs_status zs_out_open(const char *path, char *tmp, size_t cap, int *fd) {
    int n = snprintf(tmp, cap, "%s.tmp", path);
    *fd = -1;
    if (n < 0 || (size_t)n >= cap) return zs_error(ZS_ERR_INVALID, "%s: path too long", path);
    if (access(path, F_OK) == 0)
        return zs_error(ZS_ERR_INVALID, "%s already exists (not overwritten)", path);
    *fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (*fd < 0)
        return zs_error(ZS_ERR_IO, "%s: cannot create it (staged as %s): %s", path, tmp,
                        strerror(errno));
    return ZS_OK;
}

zs_status zs_out_write(int fd, const char *path, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return zs_error(ZS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return ZS_OK;
}

zs_status zs_out_commit(int fd, const char *tmp, const char *path) {
    zs_status st = ZS_OK;
    int rc = fsync(fd);
    rc |= close(fd);
    ZS_REQUIRE(rc == 0, ZS_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    ZS_REQUIRE(rename(tmp, path) == 0, ZS_ERR_IO, "cannot rename %s to %s: %s", tmp, path,
               strerror(errno));
    return ZS_OK;
fail:
    unlink(tmp);
    return st;
}

void zs_out_abort(int fd, const char *tmp) {
    if (fd >= 0) close(fd);
    unlink(tmp);
}

/* Crash safety on the file system: a checkpoint is written into `<final>.tmp`, every file and
 * the directory are fsynced, and only then is it renamed to its final name (atomically
 * exchanged with an older one of the same name) and the parent fsynced. `latest` is a one-line
 * file replaced by rename. A crash at any instant leaves either the old state or the new one;
 * staging directories are never taken for checkpoints (their names end in .tmp). */
#include "ckpt/ckpt.h"

#include "core/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void zs_ckpt_step_name(int64_t step, char *buf, size_t cap) {
    snprintf(buf, cap, "step_%08lld", (long long)step);
}

zs_status zs_path_join(char *out, size_t cap, const char *dir, const char *name) {
    /* "ck/" + "step_1" is "ck/step_1", not "ck//step_1". */
    size_t d = strlen(dir);
    while (d > 1 && dir[d - 1] == '/')
        d--;
    int n = snprintf(out, cap, "%.*s/%s", (int)d, dir, name);
    if (n < 0 || (size_t)n >= cap)
        return zs_error(ZS_ERR_INVALID, "path too long: %s/%s", dir, name);
    return ZS_OK;
}

zs_status zs_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zs_error(ZS_ERR_IO, "%s: cannot open to fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return zs_error(ZS_ERR_IO, "%s: fsync failed: %s", path, strerror(err));
    return ZS_OK;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void parent_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

static zs_status mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return zs_error(ZS_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return zs_error(ZS_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    if (!is_dir(buf)) return zs_error(ZS_ERR_IO, "%s: not a directory", buf);
    return ZS_OK;
}

zs_status zs_ckpt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? ZS_OK : zs_error(ZS_ERR_IO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (zs_path_join(p, sizeof p, dir, e->d_name) == ZS_OK) unlink(p);
    }
    closedir(d);
    if (rmdir(dir) != 0 && errno != ENOENT)
        return zs_error(ZS_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
    return ZS_OK;
}

zs_status zs_ckpt_stage(const char *final, int replace, char *tmp, size_t cap) {
    zs_status st = ZS_OK;
    char parent[4096];
    ZS_REQUIRE(strlen(final) + 5 < cap, ZS_ERR_INVALID, "%s: path too long", final);
    snprintf(tmp, cap, "%s.tmp", final);
    ZS_REQUIRE(replace || !exists(final), ZS_ERR_INVALID, "%s already exists (not overwritten)",
               final);
    parent_of(final, parent, sizeof parent);
    ZS_CHECK(mkdirs(parent));
    /* A staging dir left by a crash is garbage: it was never renamed into place. */
    ZS_CHECK(zs_ckpt_remove_dir(tmp));
    ZS_REQUIRE(mkdir(tmp, 0755) == 0, ZS_ERR_IO, "%s: cannot create directory: %s", tmp,
               strerror(errno));
fail:
    return st;
}

zs_status zs_ckpt_publish(const char *tmp, const char *final, int replace) {
    zs_status st = ZS_OK;
    char parent[4096];
    parent_of(final, parent, sizeof parent);
    ZS_CHECK(zs_fsync_path(tmp));
    if (replace && exists(final)) {
        /* Swap atomically so a checkpoint of this name exists at every instant, then drop the
         * old one (now under the staging name). */
        ZS_REQUIRE(renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0, ZS_ERR_IO,
                   "cannot replace %s: %s", final, strerror(errno));
        ZS_CHECK(zs_fsync_path(parent));
        ZS_CHECK(zs_ckpt_remove_dir(tmp));
    } else {
        ZS_REQUIRE(rename(tmp, final) == 0, ZS_ERR_IO, "cannot rename %s to %s: %s", tmp, final,
                   strerror(errno));
    }
    ZS_CHECK(zs_fsync_path(parent));
fail:
    return st;
}

static int parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step_", 5) || strlen(name) < 13) return 0;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10) return 0;
        v = v * 10 + (*p - '0');
    }
    *step = v;
    return 1;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

zs_status zs_ckpt_set_latest(const char *save_dir, const char *name, int keep) {
    zs_status st = ZS_OK;
    char tmp[4200], fin[4200], p[4400];
    int64_t *steps = NULL, cur = -1;
    int n = 0, cap = 0, fd = -1;
    DIR *d = NULL;
    ZS_CHECK(zs_path_join(tmp, sizeof tmp, save_dir, "latest.tmp"));
    ZS_CHECK(zs_path_join(fin, sizeof fin, save_dir, "latest"));
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZS_REQUIRE(fd >= 0, ZS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t len = strlen(name);
    ZS_REQUIRE(write(fd, name, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0,
               ZS_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    close(fd);
    fd = -1;
    ZS_REQUIRE(rename(tmp, fin) == 0, ZS_ERR_IO, "cannot rename %s to %s: %s", tmp, fin,
               strerror(errno));
    ZS_CHECK(zs_fsync_path(save_dir));

    /* Prune: keep the newest `keep` checkpoints (never the one just written), and remove
     * staging directories that crashes left behind. */
    parse_step_name(name, &cur);
    d = opendir(save_dir);
    ZS_REQUIRE(d, ZS_ERR_IO, "%s: %s", save_dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        size_t nl = strlen(e->d_name);
        if (nl > 4 && !strcmp(e->d_name + nl - 4, ".tmp") && !strncmp(e->d_name, "step_", 5)) {
            if (zs_path_join(p, sizeof p, save_dir, e->d_name) == ZS_OK) zs_ckpt_remove_dir(p);
            continue;
        }
        if (!parse_step_name(e->d_name, &s)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *ns = realloc(steps, (size_t)cap * sizeof *ns);
            ZS_REQUIRE(ns, ZS_ERR_OOM, "out of memory");
            steps = ns;
        }
        steps[n++] = s;
    }
    if (keep > 0 && n > keep) {
        qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
        for (int i = keep; i < n; i++) {
            if (steps[i] == cur) continue;
            char nm[64];
            zs_ckpt_step_name(steps[i], nm, sizeof nm);
            ZS_CHECK(zs_path_join(p, sizeof p, save_dir, nm));
            ZS_CHECK(zs_ckpt_remove_dir(p));
        }
        ZS_CHECK(zs_fsync_path(save_dir));
    }
fail:
    if (fd >= 0) close(fd);
    if (d) closedir(d);
    free(steps);
    return st;
}

static int has_manifest(const char *dir) {
    char p[4400];
    return zs_path_join(p, sizeof p, dir, ZS_CKPT_MANIFEST) == ZS_OK && exists(p);
}

zs_status zs_ckpt_resolve(const char *path, char *out, size_t cap) {
    zs_status st = ZS_OK;
    char p[4200], name[256] = "";
    DIR *d = NULL;
    /* SAVE_DIR/latest names the save dir's newest checkpoint, as users naturally type it. */
    size_t len = strlen(path);
    if (len >= 6 && !strcmp(path + len - 6, "latest") && (len == 6 || path[len - 7] == '/') &&
        !is_dir(path) && exists(path) && len < sizeof p) {
        snprintf(p, sizeof p, "%.*s", len == 6 ? 1 : (int)(len - 7), len == 6 ? "." : path);
        if (!p[0]) snprintf(p, sizeof p, "/");
        return zs_ckpt_resolve(p, out, cap);
    }
    ZS_REQUIRE(is_dir(path), ZS_ERR_IO,
               "checkpoint %s: %s (a checkpoint is SAVE_DIR, SAVE_DIR/latest or SAVE_DIR/step_N)",
               path, exists(path) ? "not a checkpoint directory" : "no such directory");
    if (has_manifest(path)) {
        snprintf(out, cap, "%s", path);
        return ZS_OK;
    }
    ZS_CHECK(zs_path_join(p, sizeof p, path, "latest"));
    FILE *f = fopen(p, "r");
    if (f) {
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
        if (name[0] && !strchr(name, '/') && zs_path_join(p, sizeof p, path, name) == ZS_OK &&
            has_manifest(p)) {
            snprintf(out, cap, "%s", p);
            return ZS_OK;
        }
    }
    /* No usable `latest` (e.g. a crash between publishing and updating it): the newest
     * complete checkpoint. Incomplete ones are still named *.tmp and do not match. */
    int64_t best = -1, s;
    d = opendir(path);
    ZS_REQUIRE(d, ZS_ERR_IO, "checkpoint %s: %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (parse_step_name(e->d_name, &s) && s > best &&
            zs_path_join(p, sizeof p, path, e->d_name) == ZS_OK && has_manifest(p))
            best = s;
    }
    ZS_REQUIRE(best >= 0, ZS_ERR_IO,
               "checkpoint %s: no %s, no `latest` and no complete step_* checkpoint in it", path,
               ZS_CKPT_MANIFEST);
    zs_ckpt_step_name(best, name, sizeof name);
    ZS_CHECK(zs_path_join(out, cap, path, name));
fail:
    if (d) closedir(d);
    return st;
}

/* The fuzz targets' shared helpers (input.h): parts of an input, and a scratch folder whose
 * files are rewritten for every input. Writing a small file to a folder the page cache holds
 * costs microseconds, far below what any of these parsers does with it. */
#include "input.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const uint8_t *zf_part(const uint8_t *data, size_t size, int k, int last, size_t *n) {
    const size_t sl = sizeof ZF_SEP - 1;
    const uint8_t *p = data, *end = data + size;
    *n = 0;
    for (int i = 0; i < k; i++) {
        const uint8_t *s = memmem(p, (size_t)(end - p), ZF_SEP, sl);
        if (!s) return NULL;
        p = s + sl;
    }
    const uint8_t *s = last ? NULL : memmem(p, (size_t)(end - p), ZF_SEP, sl);
    *n = (size_t)((s ? s : end) - p);
    return p;
}

char *zf_strndup(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = 0;
    return s;
}

static char g_dir[4096];

static void remove_dir(void) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[8192];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
}

const char *zf_dir(void) {
    if (!g_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/zshard-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(g_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return g_dir;
}

const char *zf_path(const char *name) {
    static char p[8192];
    snprintf(p, sizeof p, "%s/%s", zf_dir(), name);
    return p;
}

const char *zf_write(const char *name, const uint8_t *data, size_t n) {
    const char *p = zf_path(name);
    if (!data) {
        unlink(p);
        return p;
    }
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(p);
        abort();
    }
    return p;
}

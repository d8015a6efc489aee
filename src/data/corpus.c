/* Reading a corpus as a stream of documents (corpus.h): the file list (files, folders,
 * patterns), then one document at a time from a buffered reader, with UTF-8 repair. */
#include "core/status.h"
#include "data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define READ_CHUNK (1 << 20)

struct zs_corpus {
    zs_corpus_config cfg;
    char **files;
    int n_files, cap_files;
    int64_t total_bytes, bytes_read, next_index;
    /* The open file. */
    int cur; /* index of the open file, -1 before the first */
    FILE *f;
    int jsonl, whole, at_eof;
    int64_t line_no;
    char *rbuf; /* read buffer: rbuf[rpos, rlen) not yet consumed */
    size_t rpos, rlen;
    char *line; /* the current line, capped at max_doc_bytes + 1 */
    size_t line_len, line_cap;
    int line_long; /* the line was longer than the cap (the rest was discarded) */
    char *doc;     /* the document being built (separator mode) or read (whole file) */
    size_t doc_len, doc_cap;
    char *fixed; /* the repaired document */
    size_t fixed_cap;
    char *field; /* JSONL field value */
    size_t field_cap;
    struct stat skip; /* cfg.skip_dir's identity, when it exists (have_skip) */
    int have_skip;
    char left_out[ZS_CORPUS_MAX_LEFT_OUT][600]; /* folders left out, "DIR (why)" */
    int n_left_out;
};

const char *zs_doc_skip_name(zs_doc_skip s) {
    static const char *names[] = {"ok",           "empty",          "too_long",
                                  "invalid_json", "truncated_json", "missing_field",
                                  "not_string",   "binary_file"};
    return s >= 0 && s < ZS_DOC_SKIP_COUNT ? names[s] : "?";
}

zs_corpus_config zs_corpus_config_default(void) {
    zs_corpus_config c = {0};
    c.format = ZS_CORPUS_AUTO;
    c.field = "text";
    c.max_doc_bytes = (size_t)64 << 20;
    return c;
}

/* ---- the file list ------------------------------------------------------------------------- */

static zs_status add_file(zs_corpus_t *c, const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (int i = 0; i < c->cfg.n_exclude; i++)
        if (fnmatch(c->cfg.exclude[i], base, 0) == 0) return ZS_OK;
    if (c->n_files == c->cap_files) {
        int cap = c->cap_files ? 2 * c->cap_files : 64;
        char **g = realloc(c->files, (size_t)cap * sizeof *g);
        if (!g) return zs_error(ZS_ERR_OOM, "corpus: out of memory");
        c->files = g;
        c->cap_files = cap;
    }
    c->files[c->n_files] = strdup(path);
    if (!c->files[c->n_files]) return zs_error(ZS_ERR_OOM, "corpus: out of memory");
    c->n_files++;
    struct stat s;
    if (stat(path, &s) == 0) c->total_bytes += (int64_t)s.st_size;
    return ZS_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether dir holds token shards described by a zshard dataset.json. */
static int token_folder(const char *dir) {
    char p[4200], head[4096];
    snprintf(p, sizeof p, "%s/dataset.json", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = 0;
    return strstr(head, "\"zshard-tokens\"") != NULL;
}

/* Whether the walk leaves folder dir out: the skip_dir (an output folder inside the inputs
 * would feed the run its own shards), or a token folder (an earlier run's output: its
 * dataset.json and shards are not text). Noted for the summary. */
static int left_out(zs_corpus_t *c, const char *dir) {
    struct stat s;
    const char *why = NULL;
    if (c->have_skip && stat(dir, &s) == 0 && s.st_dev == c->skip.st_dev &&
        s.st_ino == c->skip.st_ino)
        why = "the output folder";
    else if (token_folder(dir))
        why = "token shards: it holds a zshard dataset.json";
    if (!why) return 0;
    if (c->n_left_out < ZS_CORPUS_MAX_LEFT_OUT)
        snprintf(c->left_out[c->n_left_out], sizeof c->left_out[0], "%s (%s)", dir, why);
    c->n_left_out++;
    return 1;
}

/* A folder's regular files, recursively, in byte order of their paths. Hidden entries and
 * symbolic links are left out (as `find` does without -L): a link usually repeats a file
 * that is there already (fortune's .u8 links) or leads out of the folder. So are the output
 * folder and token folders (left_out). */
static zs_status walk(zs_corpus_t *c, const char *dir, int depth) {
    zs_status st = ZS_OK;
    char **names = NULL;
    int n = 0, cap = 0;
    if (left_out(c, dir)) return ZS_OK;
    DIR *d = opendir(dir);
    ZS_REQUIRE(d, ZS_ERR_IO, "%s: cannot read the folder: %s", dir, strerror(errno));
    ZS_REQUIRE(depth < 64, ZS_ERR_INVALID, "%s: folders nested deeper than 64", dir);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(names, (size_t)cap * sizeof *g);
            ZS_REQUIRE(g, ZS_ERR_OOM, "corpus: out of memory");
            names = g;
        }
        size_t L = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(L);
        ZS_REQUIRE(names[n], ZS_ERR_OOM, "corpus: out of memory");
        snprintf(names[n], L, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        n++;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        struct stat s;
        if (lstat(names[i], &s) != 0 || S_ISLNK(s.st_mode)) continue;
        if (S_ISDIR(s.st_mode))
            ZS_CHECK(walk(c, names[i], depth + 1));
        else if (S_ISREG(s.st_mode))
            ZS_CHECK(add_file(c, names[i]));
    }
fail:
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (d) closedir(d);
    return st;
}

static zs_status add_input(zs_corpus_t *c, const char *in) {
    zs_status st = ZS_OK;
    struct stat s;
    if (strpbrk(in, "*?[")) {
        glob_t g;
        int r = glob(in, 0, NULL, &g);
        if (r == GLOB_NOMATCH) return zs_error(ZS_ERR_IO, "%s: the pattern matches no file", in);
        if (r != 0) return zs_error(ZS_ERR_IO, "%s: cannot expand the pattern", in);
        for (size_t i = 0; i < g.gl_pathc && st == ZS_OK; i++) {
            if (stat(g.gl_pathv[i], &s) == 0 && S_ISDIR(s.st_mode))
                st = walk(c, g.gl_pathv[i], 0);
            else if (stat(g.gl_pathv[i], &s) == 0 && S_ISREG(s.st_mode))
                st = add_file(c, g.gl_pathv[i]);
        }
        globfree(&g);
        return st;
    }
    if (stat(in, &s) != 0) return zs_error(ZS_ERR_IO, "%s: %s", in, strerror(errno));
    if (S_ISDIR(s.st_mode)) return walk(c, in, 0);
    if (!S_ISREG(s.st_mode)) return zs_error(ZS_ERR_IO, "%s: not a regular file or folder", in);
    return add_file(c, in);
}

zs_status zs_corpus_open(const zs_corpus_config *cfg, zs_corpus_t **out) {
    zs_status st = ZS_OK;
    zs_corpus_t *c = calloc(1, sizeof *c);
    *out = NULL;
    ZS_REQUIRE(c, ZS_ERR_OOM, "corpus: out of memory");
    c->cfg = *cfg;
    c->cur = -1;
    c->have_skip = cfg->skip_dir && stat(cfg->skip_dir, &c->skip) == 0 && S_ISDIR(c->skip.st_mode);
    ZS_REQUIRE(cfg->n_inputs > 0, ZS_ERR_INVALID, "corpus: no input files");
    ZS_REQUIRE(cfg->max_doc_bytes > 0 && cfg->max_doc_bytes < ((size_t)1 << 40), ZS_ERR_INVALID,
               "corpus: max_doc_bytes %zu is out of range", cfg->max_doc_bytes);
    for (int i = 0; i < cfg->n_inputs; i++)
        ZS_CHECK(add_input(c, cfg->inputs[i]));
    ZS_REQUIRE(c->n_files > 0, ZS_ERR_IO, "corpus: the inputs hold no files (%s%s)%s%s",
               cfg->inputs[0], cfg->n_inputs > 1 ? ", ..." : "",
               c->n_left_out ? ": left out " : "", c->n_left_out ? c->left_out[0] : "");
    c->rbuf = malloc(READ_CHUNK);
    ZS_REQUIRE(c->rbuf, ZS_ERR_OOM, "corpus: out of memory");
    *out = c;
    return ZS_OK;
fail:
    zs_corpus_close(c);
    return st;
}

void zs_corpus_close(zs_corpus_t *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++)
        free(c->files[i]);
    free(c->files);
    if (c->f) fclose(c->f);
    free(c->rbuf);
    free(c->line);
    free(c->doc);
    free(c->fixed);
    free(c->field);
    free(c);
}

int zs_corpus_file_count(const zs_corpus_t *c) {
    return c->n_files;
}

int zs_corpus_left_out_count(const zs_corpus_t *c) {
    return c->n_left_out;
}

const char *zs_corpus_left_out(const zs_corpus_t *c, int i) {
    return i >= 0 && i < c->n_left_out && i < ZS_CORPUS_MAX_LEFT_OUT ? c->left_out[i] : "";
}
const char *zs_corpus_file(const zs_corpus_t *c, int i) {
    return i >= 0 && i < c->n_files ? c->files[i] : "";
}
int64_t zs_corpus_total_bytes(const zs_corpus_t *c) {
    return c->total_bytes;
}
int64_t zs_corpus_bytes_read(const zs_corpus_t *c) {
    return c->bytes_read;
}

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* Length of the well-formed sequence at s[0, n) (Unicode's table 3-7), or 0 when ill-formed;
 * *sub gets the length of its maximal ill-formed subpart then (at least 1). */
static size_t wf(const unsigned char *s, size_t n, size_t *sub) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *sub = 1;
        return 0;
    }
    size_t k = 1;
    for (; k < len && k < n; k++) {
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == len) return len;
    *sub = k;
    return 0;
}

int zs_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t sub;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = wf(u + i, n - i, &sub);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

int64_t zs_utf8_repair(const char *in, size_t n, char *out, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)in;
    size_t o = 0, sub = 0;
    int64_t bad = 0;
    for (size_t i = 0; i < n;) {
        size_t k = u[i] < 0x80 ? 1 : wf(u + i, n - i, &sub);
        if (k) {
            memcpy(out + o, in + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += sub;
            bad++;
        }
    }
    out[o] = 0;
    *out_n = o;
    return bad;
}

/* ---- reading ------------------------------------------------------------------------------- */

static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    char *g = realloc(*p, c);
    if (!g) return 0;
    *p = g;
    *cap = c;
    return 1;
}

static zs_status fill(zs_corpus_t *c) {
    if (c->at_eof) return ZS_OK;
    c->rlen = fread(c->rbuf, 1, READ_CHUNK, c->f);
    c->rpos = 0;
    if (c->rlen < READ_CHUNK) {
        if (ferror(c->f))
            return zs_error(ZS_ERR_IO, "%s: read failed: %s", c->files[c->cur], strerror(errno));
        c->at_eof = 1;
    }
    c->bytes_read += (int64_t)c->rlen;
    return ZS_OK;
}

/* The next line into c->line (without its '\n'; at most max_doc_bytes + 1 bytes kept, the
 * rest dropped with line_long set). *have = 0 at the end of the file. */
static zs_status read_line(zs_corpus_t *c, int *have) {
    size_t cap_keep = c->cfg.max_doc_bytes + 1;
    c->line_len = 0;
    c->line_long = 0;
    *have = 0;
    for (;;) {
        if (c->rpos == c->rlen) {
            if (c->at_eof) return ZS_OK;
            zs_status st = fill(c);
            if (st != ZS_OK) return st;
            if (c->rlen == 0) return ZS_OK;
        }
        char *s = c->rbuf + c->rpos, *nl = memchr(s, '\n', c->rlen - c->rpos);
        size_t take = nl ? (size_t)(nl - s) : c->rlen - c->rpos;
        size_t keep = c->line_len + take <= cap_keep ? take : cap_keep - c->line_len;
        if (keep < take) c->line_long = 1;
        if (!grow(&c->line, &c->line_cap, c->line_len + keep + 1))
            return zs_error(ZS_ERR_OOM, "corpus: out of memory for a line");
        memcpy(c->line + c->line_len, s, keep);
        c->line_len += keep;
        c->line[c->line_len] = 0;
        c->rpos += take + (nl != NULL);
        if (!*have) c->line_no++; /* counted where it starts: a last line may lack its '\n' */
        *have = 1;
        if (nl) return ZS_OK;
    }
}

static void set_doc(zs_corpus_t *c, zs_doc *d, const char *text, size_t len, int64_t line);

static zs_status open_next_file(zs_corpus_t *c, int *have) {
    if (c->f) fclose(c->f), c->f = NULL;
    *have = 0;
    if (++c->cur >= c->n_files) return ZS_OK;
    const char *path = c->files[c->cur];
    c->f = fopen(path, "rb");
    if (!c->f) return zs_error(ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    c->at_eof = 0;
    c->rpos = c->rlen = 0;
    c->line_no = 0;
    size_t L = strlen(path);
    c->jsonl = c->cfg.format == ZS_CORPUS_JSONL ||
               (c->cfg.format == ZS_CORPUS_AUTO && ((L > 6 && !strcmp(path + L - 6, ".jsonl")) ||
                                                    (L > 7 && !strcmp(path + L - 7, ".ndjson"))));
    c->whole = !c->jsonl && !c->cfg.doc_sep;
    *have = 1;
    return fill(c);
}

/* A file with a NUL byte in its first 8 KiB is not text (git's test): it is one skipped
 * document, and nothing more is read from it. */
static int binary_file(zs_corpus_t *c, zs_doc *d) {
    if (!memchr(c->rbuf, 0, c->rlen < 8192 ? c->rlen : 8192)) return 0;
    set_doc(c, d, "", 0, 0);
    d->skip = ZS_DOC_BINARY;
    snprintf(d->why, sizeof d->why, "a NUL byte in its first 8 KiB: not text");
    c->rpos = c->rlen;
    c->at_eof = 1;
    return 1;
}

static void set_doc(zs_corpus_t *c, zs_doc *d, const char *text, size_t len, int64_t line) {
    memset(d, 0, sizeof *d);
    d->index = c->next_index++;
    d->file = c->cur;
    d->line = line;
    d->text = "";
    if (len > c->cfg.max_doc_bytes) {
        d->skip = ZS_DOC_TOO_LONG;
        snprintf(d->why, sizeof d->why, "longer than %zu bytes", c->cfg.max_doc_bytes);
        return;
    }
    if (zs_utf8_valid(text, len)) {
        d->text = text;
        d->len = len;
    } else if (grow(&c->fixed, &c->fixed_cap, 3 * len + 1)) {
        d->replaced = zs_utf8_repair(text, len, c->fixed, &d->len);
        d->text = c->fixed;
    } else {
        d->skip = ZS_DOC_TOO_LONG;
        snprintf(d->why, sizeof d->why, "out of memory repairing its UTF-8");
        return;
    }
    size_t i = 0;
    while (i < d->len && strchr(" \t\r\n\v\f", d->text[i]) && d->text[i])
        i++;
    if (i == d->len) {
        d->skip = ZS_DOC_EMPTY;
        snprintf(d->why, sizeof d->why, d->len ? "only white space" : "no text");
        d->text = "";
        d->len = 0;
    }
}

/* The whole file as one document (read in chunks; one past the limit is enough to know). */
static zs_status whole_file(zs_corpus_t *c, zs_doc *d) {
    size_t limit = c->cfg.max_doc_bytes + 1;
    c->doc_len = 0;
    for (;;) {
        if (c->rpos == c->rlen) {
            if (c->at_eof) break;
            zs_status st = fill(c);
            if (st != ZS_OK) return st;
            if (c->rlen == 0) break;
        }
        size_t take = c->rlen - c->rpos;
        size_t keep = c->doc_len + take <= limit ? take : limit - c->doc_len;
        if (!grow(&c->doc, &c->doc_cap, c->doc_len + keep + 1))
            return zs_error(ZS_ERR_OOM, "corpus: out of memory reading %s", c->files[c->cur]);
        memcpy(c->doc + c->doc_len, c->rbuf + c->rpos, keep);
        c->doc_len += keep;
        c->rpos += take;
    }
    if (!c->doc) grow(&c->doc, &c->doc_cap, 1);
    if (!c->doc) return zs_error(ZS_ERR_OOM, "corpus: out of memory");
    c->doc[c->doc_len] = 0;
    set_doc(c, d, c->doc, c->doc_len, 0);
    return ZS_OK;
}

static int is_sep(const zs_corpus_t *c) {
    size_t L = strlen(c->cfg.doc_sep), n = c->line_len;
    if (n && c->line[n - 1] == '\r') n--;
    return !c->line_long && n == L && !memcmp(c->line, c->cfg.doc_sep, L);
}

zs_status zs_corpus_next(zs_corpus_t *c, zs_doc *d, int *have) {
    zs_status st = ZS_OK;
    *have = 0;
    for (;;) {
        if (!c->f || (c->rpos == c->rlen && c->at_eof)) {
            int more;
            ZS_CHECK(open_next_file(c, &more));
            if (!more) return ZS_OK;
            if (binary_file(c, d)) {
                *have = 1;
                return ZS_OK;
            }
            if (c->whole) {
                ZS_CHECK(whole_file(c, d));
                *have = 1;
                return ZS_OK;
            }
        }
        int got;
        if (c->jsonl) {
            ZS_CHECK(read_line(c, &got));
            if (!got) continue;
            size_t n = c->line_len;
            /* A UTF-8 byte-order mark before the first line is not part of it (as Python's
             * utf-8-sig reads it): an editor's BOM must not make line 1 invalid JSON. */
            if (c->line_no == 1 && n >= 3 && !memcmp(c->line, "\xEF\xBB\xBF", 3)) {
                memmove(c->line, c->line + 3, n - 3);
                n -= 3;
                c->line_len = n;
                c->line[n] = 0;
            }
            int blank = 1;
            for (size_t i = 0; i < n && blank; i++)
                blank = strchr(" \t\r", c->line[i]) && c->line[i];
            if (blank) continue; /* blank lines separate nothing in JSONL */
            if (c->line_long) {
                set_doc(c, d, "", 0, c->line_no);
                d->skip = ZS_DOC_TOO_LONG;
                snprintf(d->why, sizeof d->why, "a line longer than %zu bytes",
                         c->cfg.max_doc_bytes);
                *have = 1;
                return ZS_OK;
            }
            char why[200];
            size_t flen = 0;
            zs_doc_skip sk = zs_jsonl_field(c->line, n, c->cfg.field, &c->field, &c->field_cap,
                                            &flen, why, sizeof why);
            if (sk == ZS_DOC_OK) {
                set_doc(c, d, c->field, flen, c->line_no);
            } else {
                set_doc(c, d, "", 0, c->line_no);
                d->skip = sk;
                snprintf(d->why, sizeof d->why, "%s", why);
            }
            *have = 1;
            return ZS_OK;
        }
        /* Separator lines: a document is the lines between them, the line break that ends
         * its last line left out; the end of a file ends one too. */
        c->doc_len = 0;
        int64_t first = 0, long_doc = 0, lines = 0;
        for (;;) {
            ZS_CHECK(read_line(c, &got));
            if (!got || is_sep(c)) break;
            if (!lines++) first = c->line_no;
            size_t add = c->line_len + 1;
            if (c->line_long || c->doc_len + add > c->cfg.max_doc_bytes + 2) {
                long_doc = 1;
                continue;
            }
            if (!grow(&c->doc, &c->doc_cap, c->doc_len + add + 1))
                return zs_error(ZS_ERR_OOM, "corpus: out of memory");
            memcpy(c->doc + c->doc_len, c->line, c->line_len);
            c->doc_len += c->line_len;
            c->doc[c->doc_len++] = '\n';
        }
        if (!got && lines == 0) continue; /* nothing after the last separator */
        if (lines == 0) first = c->line_no;
        if (c->doc_len) c->doc_len--; /* the last line's '\n' */
        if (c->doc_len && c->doc[c->doc_len - 1] == '\r') c->doc_len--;
        if (!c->doc) grow(&c->doc, &c->doc_cap, 1);
        if (!c->doc) return zs_error(ZS_ERR_OOM, "corpus: out of memory");
        c->doc[c->doc_len] = 0;
        if (long_doc) {
            set_doc(c, d, "", 0, first);
            d->skip = ZS_DOC_TOO_LONG;
            snprintf(d->why, sizeof d->why, "longer than %zu bytes", c->cfg.max_doc_bytes);
        } else {
            set_doc(c, d, c->doc, c->doc_len, first);
        }
        *have = 1;
        return ZS_OK;
    }
fail:
    return st;
}

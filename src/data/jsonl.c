/* One JSONL line: the string value of a named top-level field, without building a tree. A
 * line that ends before its object closes is "truncated" (what a file cut mid-write leaves);
 * any other departure from JSON is "invalid", with the byte where it was found. */
#include "data/corpus.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R_OK, R_TRUNC, R_BAD };

typedef struct sink {
    char *buf; /* NULL: discard */
    size_t cap, len;
    int grow;     /* buf is malloc'd and may be grown (*pbuf, *pcap updated) */
    int overflow; /* a fixed buffer ran out */
    char **pbuf;
    size_t *pcap;
} sink;

typedef struct parser {
    const char *s;
    size_t n, i;
    char *why;
    size_t wcap;
} parser;

static int fail(parser *p, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *p, int r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, p->wcap, fmt, ap);
    va_end(ap);
    return r;
}

static void ws(parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\r'))
        p->i++;
}

static int put(sink *k, const char *b, size_t len) {
    if (!k || (!k->buf && !k->grow)) return 1;
    if (k->len + len + 1 > k->cap) {
        if (!k->grow) {
            k->overflow = 1;
            return 1;
        }
        size_t c = k->cap ? k->cap : 256;
        while (c < k->len + len + 1)
            c *= 2;
        char *g = realloc(k->buf, c);
        if (!g) return 0;
        k->buf = g;
        k->cap = c;
        *k->pbuf = g;
        *k->pcap = c;
    }
    memcpy(k->buf + k->len, b, len);
    k->len += len;
    k->buf[k->len] = 0;
    return 1;
}

static int put_cp(sink *k, unsigned cp) {
    char b[4];
    size_t n;
    if (cp < 0x80)
        b[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    return put(k, b, n);
}

/* Four hex digits at s[i]: the value, -1 if not hex, -2 if the line ends first. */
static long hex4(const parser *p, size_t i) {
    long v = 0;
    for (size_t k = 0; k < 4; k++) {
        if (i + k >= p->n) return -2;
        char c = p->s[i + k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string at s[i] == '"', unescaped into k. A lone surrogate escape becomes U+FFFD (it has
 * no UTF-8 form). */
static int string(parser *p, sink *k) {
    size_t start = p->i++;
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            return R_OK;
        }
        if (c < 0x20)
            return fail(p, R_BAD, "control character 0x%02X inside a string at byte %zu", c,
                        p->i + 1);
        if (c != '\\') {
            size_t e = p->i;
            while (e < p->n && p->s[e] != '"' && p->s[e] != '\\' && (unsigned char)p->s[e] >= 0x20)
                e++;
            if (!put(k, p->s + p->i, e - p->i)) return fail(p, R_BAD, "out of memory");
            p->i = e;
            continue;
        }
        if (p->i + 1 >= p->n) break;
        char esc = p->s[p->i + 1];
        const char *simple = strchr("\"\\/bfnrt", esc);
        if (simple && esc) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            if (!put(k, &to[simple - "\"\\/bfnrt"], 1)) return fail(p, R_BAD, "out of memory");
            p->i += 2;
            continue;
        }
        if (esc != 'u') return fail(p, R_BAD, "invalid escape '\\%c' at byte %zu", esc, p->i + 1);
        long v = hex4(p, p->i + 2);
        if (v == -2) break;
        if (v < 0) return fail(p, R_BAD, "invalid \\u escape at byte %zu", p->i + 1);
        p->i += 6;
        unsigned cp = (unsigned)v;
        if (cp >= 0xD800 && cp <= 0xDBFF && p->i + 1 < p->n && p->s[p->i] == '\\' &&
            p->s[p->i + 1] == 'u') {
            long lo = hex4(p, p->i + 2);
            if (lo == -2) break;
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
                p->i += 6;
            }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        if (!put_cp(k, cp)) return fail(p, R_BAD, "out of memory");
    }
    return fail(p, R_TRUNC, "the line ends inside the string that starts at byte %zu", start + 1);
}

static int value(parser *p, int depth, const char **type);

static int container(parser *p, int depth, char open) {
    char close = open == '{' ? '}' : ']';
    if (depth > 256) return fail(p, R_BAD, "nested deeper than 256 levels");
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return R_OK;
    }
    for (;;) {
        int r;
        const char *type;
        ws(p);
        if (p->i >= p->n) break;
        if (open == '{') {
            if (p->s[p->i] != '"') return fail(p, R_BAD, "expected a key at byte %zu", p->i + 1);
            if ((r = string(p, NULL)) != R_OK) return r;
            ws(p);
            if (p->i >= p->n) break;
            if (p->s[p->i] != ':') return fail(p, R_BAD, "expected ':' at byte %zu", p->i + 1);
            p->i++;
        }
        if ((r = value(p, depth + 1, &type)) != R_OK) return r;
        ws(p);
        if (p->i >= p->n) break;
        if (p->s[p->i] == close) {
            p->i++;
            return R_OK;
        }
        if (p->s[p->i] != ',')
            return fail(p, R_BAD, "expected ',' or '%c' at byte %zu", close, p->i + 1);
        p->i++;
    }
    return fail(p, R_TRUNC, "the line ends inside an %s", open == '{' ? "object" : "array");
}

static int literal(parser *p, const char *word) {
    size_t L = strlen(word), have = p->n - p->i < L ? p->n - p->i : L;
    if (memcmp(p->s + p->i, word, have))
        return fail(p, R_BAD, "invalid JSON value at byte %zu", p->i + 1);
    if (have < L) return fail(p, R_TRUNC, "the line ends inside '%s'", word);
    p->i += L;
    return R_OK;
}

static int number(parser *p) {
    size_t s = p->i;
    if (p->s[p->i] == '-') p->i++;
    size_t digits = p->i;
    while (p->i < p->n && strchr("0123456789.eE+-", p->s[p->i]) && p->s[p->i])
        p->i++;
    if (p->i == digits) {
        if (p->i >= p->n) return fail(p, R_TRUNC, "the line ends inside a number");
        return fail(p, R_BAD, "invalid JSON value at byte %zu", s + 1);
    }
    return R_OK;
}

static int value(parser *p, int depth, const char **type) {
    ws(p);
    if (p->i >= p->n) return fail(p, R_TRUNC, "the line ends where a value should be");
    char c = p->s[p->i];
    *type = c == '"'               ? "a string"
            : c == '{'             ? "an object"
            : c == '['             ? "an array"
            : c == 't' || c == 'f' ? "a boolean"
            : c == 'n'             ? "null"
                                   : "a number";
    if (c == '"') return string(p, NULL);
    if (c == '{' || c == '[') return container(p, depth, c);
    if (c == 't') return literal(p, "true");
    if (c == 'f') return literal(p, "false");
    if (c == 'n') return literal(p, "null");
    return number(p);
}

zs_doc_skip zs_jsonl_field(const char *line, size_t n, const char *field, char **out, size_t *cap,
                           size_t *out_n, char *why, size_t why_cap) {
    parser p = {line, n, 0, why, why_cap};
    const char *found_type = NULL;
    int r = R_OK;
    why[0] = 0;
    *out_n = 0;
    ws(&p);
    if (p.i >= n || line[p.i] != '{') {
        /* line[0, n) need not be NUL-terminated: at most the 10 bytes it has */
        fail(&p, R_BAD, "not a JSON object (starts with '%.*s')",
             (int)(n - p.i < 10 ? n - p.i : 10), line + p.i);
        return ZS_DOC_BAD_JSON;
    }
    p.i++;
    ws(&p);
    int empty = p.i < n && line[p.i] == '}';
    if (empty) p.i++;
    while (!empty) {
        ws(&p);
        if (p.i >= n) {
            r = fail(&p, R_TRUNC, "the line ends inside the object");
            break;
        }
        if (line[p.i] != '"') {
            r = fail(&p, R_BAD, "expected a key at byte %zu", p.i + 1);
            break;
        }
        char key[256];
        sink ks = {key, sizeof key, 0, 0, 0, NULL, NULL};
        if ((r = string(&p, &ks)) != R_OK) break;
        int match = !ks.overflow && ks.len == strlen(field) && !memcmp(key, field, ks.len);
        ws(&p);
        if (p.i >= n) {
            r = fail(&p, R_TRUNC, "the line ends after a key");
            break;
        }
        if (line[p.i] != ':') {
            r = fail(&p, R_BAD, "expected ':' at byte %zu", p.i + 1);
            break;
        }
        p.i++;
        ws(&p);
        if (match && p.i < n && line[p.i] == '"') {
            sink vs = {*out, *cap, 0, 1, 0, out, cap};
            if ((r = string(&p, &vs)) != R_OK) break;
            if (!*out) { /* an empty string never touched the buffer */
                *out = malloc(1);
                if (*out) (*out)[0] = 0, *cap = 1;
            }
            *out_n = vs.len;
            found_type = "a string";
        } else {
            const char *type;
            if ((r = value(&p, 1, &type)) != R_OK) break;
            if (match) found_type = type;
        }
        ws(&p);
        if (p.i >= n) {
            r = fail(&p, R_TRUNC, "the line ends inside the object");
            break;
        }
        if (line[p.i] == '}') {
            p.i++;
            break;
        }
        if (line[p.i] != ',') {
            r = fail(&p, R_BAD, "expected ',' or '}' at byte %zu", p.i + 1);
            break;
        }
        p.i++;
    }
    if (r == R_TRUNC) return ZS_DOC_TRUNCATED_JSON;
    if (r == R_BAD) return ZS_DOC_BAD_JSON;
    ws(&p);
    if (p.i < n) {
        fail(&p, R_BAD, "text after the object at byte %zu", p.i + 1);
        return ZS_DOC_BAD_JSON;
    }
    if (!found_type) {
        snprintf(why, why_cap, "no field '%s'", field);
        return ZS_DOC_NO_FIELD;
    }
    if (strcmp(found_type, "a string")) {
        snprintf(why, why_cap, "field '%s' is %s", field, found_type);
        return ZS_DOC_NOT_STRING;
    }
    if (!*out) {
        snprintf(why, why_cap, "out of memory");
        return ZS_DOC_TOO_LONG;
    }
    return ZS_DOC_OK;
}

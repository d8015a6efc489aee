/* Strict recursive-descent JSON parser with bounded depth, exact int64 integers, and \u
 * escapes decoded to UTF-8 (surrogate pairs joined; lone surrogates rejected). */
#include "ckpt/json.h"

#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s;
    size_t len, pos;
    int depth;
} parser;

static zs_status perr(const parser *p, const char *what) {
    return zs_error(ZS_ERR_FORMAT, "invalid JSON at byte %zu: %s", p->pos, what);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(const parser *p) {
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static zs_status literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return perr(p, "bad literal");
    p->pos += n;
    return ZS_OK;
}

static int hex4(const parser *p, size_t at, unsigned *out) {
    if (p->len < at + 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[at + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parse a string literal at p->pos (the opening quote) into a new NUL-terminated buffer. */
static zs_status parse_string(parser *p, char **out, size_t *out_len) {
    zs_status st = ZS_OK;
    size_t start = ++p->pos, end = start;
    /* First pass: find the closing quote; the decoded text is never longer than the raw. */
    while (end < p->len && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) {
        p->pos = p->len;
        return perr(p, "unterminated string");
    }
    char *o = malloc(end - start + 1);
    if (!o) return zs_error(ZS_ERR_OOM, "JSON: out of memory");
    size_t n = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        ZS_REQUIRE(c >= 0x20, ZS_ERR_FORMAT,
                   "invalid JSON at byte %zu: control character in string", p->pos);
        if (c != '\\') {
            o[n++] = (char)c;
            p->pos++;
            continue;
        }
        char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"':
            o[n++] = '"';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '/':
            o[n++] = '/';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            ZS_REQUIRE(p->pos + 4 <= end && hex4(p, p->pos, &cp), ZS_ERR_FORMAT,
                       "invalid JSON at byte %zu: bad \\u escape", p->pos);
            p->pos += 4;
            if (cp >= 0xd800 && cp < 0xdc00) {
                ZS_REQUIRE(p->pos + 6 <= end && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' &&
                               hex4(p, p->pos + 2, &lo) && lo >= 0xdc00 && lo < 0xe000,
                           ZS_ERR_FORMAT, "invalid JSON at byte %zu: lone surrogate", p->pos);
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else
                ZS_REQUIRE(cp < 0xdc00 || cp >= 0xe000, ZS_ERR_FORMAT,
                           "invalid JSON at byte %zu: lone surrogate", p->pos);
            /* A \u escape (6 raw bytes) never decodes to more than 4 bytes. */
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            ZS_REQUIRE(0, ZS_ERR_FORMAT, "invalid JSON at byte %zu: bad escape", p->pos - 1);
        }
    }
    p->pos = end + 1;
    o[n] = '\0';
    *out = o;
    *out_len = n;
    return ZS_OK;
fail:
    free(o);
    return st;
}

static zs_status parse_number(parser *p, zs_json *v) {
    size_t start = p->pos;
    if (peek(p) == '-') p->pos++;
    if (peek(p) == '0')
        p->pos++;
    else if (peek(p) >= '1' && peek(p) <= '9')
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    else
        return perr(p, "bad number");
    int integral = 1;
    if (peek(p) == '.') {
        integral = 0;
        p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) return perr(p, "bad number");
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        integral = 0;
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) return perr(p, "bad number");
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    }
    char buf[64];
    size_t n = p->pos - start;
    if (n >= sizeof buf) return perr(p, "number too long");
    memcpy(buf, p->s + start, n);
    buf[n] = '\0';
    v->type = ZS_JSON_NUMBER;
    v->num = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->ival = (int64_t)x;
        }
    }
    return ZS_OK;
}

static zs_status parse_value(parser *p, zs_json **out);

static zs_status parse_container(parser *p, zs_json *v, int object) {
    zs_status st = ZS_OK;
    char close = object ? '}' : ']';
    zs_json **tail = &v->child;
    p->pos++;
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        return ZS_OK;
    }
    for (;;) {
        char *key = NULL;
        size_t klen = 0;
        skip_ws(p);
        if (object) {
            if (peek(p) != '"') return perr(p, "expected a member name");
            ZS_CHECK(parse_string(p, &key, &klen));
            skip_ws(p);
            if (peek(p) != ':') {
                free(key);
                return perr(p, "expected ':'");
            }
            p->pos++;
        }
        zs_json *child = NULL;
        st = parse_value(p, &child);
        if (st != ZS_OK) {
            free(key);
            zs_json_free(child);
            return st;
        }
        child->key = key;
        *tail = child;
        tail = &child->next;
        v->n++;
        skip_ws(p);
        if (peek(p) == ',') {
            p->pos++;
            continue;
        }
        if (peek(p) == close) {
            p->pos++;
            return ZS_OK;
        }
        return perr(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
fail:
    return st;
}

static zs_status parse_value(parser *p, zs_json **out) {
    zs_status st = ZS_OK;
    *out = NULL;
    skip_ws(p);
    zs_json *v = calloc(1, sizeof *v);
    if (!v) return zs_error(ZS_ERR_OOM, "JSON: out of memory");
    *out = v; /* the caller frees it, even half-built */
    switch (peek(p)) {
    case '{':
    case '[':
        ZS_REQUIRE(p->depth < ZS_JSON_MAX_DEPTH, ZS_ERR_FORMAT,
                   "invalid JSON at byte %zu: nested deeper than %d", p->pos, ZS_JSON_MAX_DEPTH);
        p->depth++;
        v->type = peek(p) == '{' ? ZS_JSON_OBJECT : ZS_JSON_ARRAY;
        st = parse_container(p, v, v->type == ZS_JSON_OBJECT);
        p->depth--;
        return st;
    case '"':
        v->type = ZS_JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    case 't':
        v->type = ZS_JSON_BOOL;
        v->boolean = 1;
        return literal(p, "true");
    case 'f':
        v->type = ZS_JSON_BOOL;
        return literal(p, "false");
    case 'n':
        return literal(p, "null");
    case -1:
        return perr(p, "unexpected end of input");
    default:
        return parse_number(p, v);
    }
fail:
    return st;
}

zs_status zs_json_parse(const char *text, size_t len, zs_json **out) {
    parser p = {text, len, 0, 0};
    zs_json *v = NULL;
    zs_status st = parse_value(&p, &v);
    if (st == ZS_OK) {
        skip_ws(&p);
        if (p.pos != p.len) st = perr(&p, "trailing characters after the value");
    }
    if (st != ZS_OK) {
        zs_json_free(v);
        v = NULL;
    }
    *out = v;
    return st;
}

void zs_json_free(zs_json *v) {
    /* Siblings iteratively, children recursively: recursion depth is the nesting depth,
     * which the parser bounds. */
    while (v) {
        zs_json *next = v->next;
        zs_json_free(v->child);
        free(v->key);
        free(v->str);
        free(v);
        v = next;
    }
}

const zs_json *zs_json_get(const zs_json *v, const char *key) {
    if (!v || v->type != ZS_JSON_OBJECT) return NULL;
    for (const zs_json *c = v->child; c; c = c->next)
        if (!strcmp(c->key, key)) return c;
    return NULL;
}

const zs_json *zs_json_at(const zs_json *v, int i) {
    if (!v || v->type != ZS_JSON_ARRAY || i < 0) return NULL;
    const zs_json *c = v->child;
    while (c && i--)
        c = c->next;
    return c;
}

zs_status zs_json_get_int(const zs_json *obj, const char *key, int64_t lo, int64_t hi,
                          const char *what, int64_t *out) {
    const zs_json *v = zs_json_get(obj, key);
    if (!v) return zs_error(ZS_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
    if (v->type != ZS_JSON_NUMBER || !v->is_int)
        return zs_error(ZS_ERR_FORMAT, "%s: field \"%s\" is not an integer", what, key);
    if (v->ival < lo || v->ival > hi)
        return zs_error(ZS_ERR_FORMAT, "%s: field \"%s\" = %lld is outside [%lld, %lld]", what, key,
                        (long long)v->ival, (long long)lo, (long long)hi);
    *out = v->ival;
    return ZS_OK;
}

zs_status zs_json_get_num(const zs_json *obj, const char *key, const char *what, double *out) {
    const zs_json *v = zs_json_get(obj, key);
    if (!v) return zs_error(ZS_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
    if (v->type != ZS_JSON_NUMBER || !isfinite(v->num))
        return zs_error(ZS_ERR_FORMAT, "%s: field \"%s\" is not a finite number", what, key);
    *out = v->num;
    return ZS_OK;
}

zs_status zs_json_get_str(const zs_json *obj, const char *key, const char *what, const char **out) {
    const zs_json *v = zs_json_get(obj, key);
    if (!v) return zs_error(ZS_ERR_FORMAT, "%s: missing field \"%s\"", what, key);
    if (v->type != ZS_JSON_STRING || strlen(v->str) != v->len)
        return zs_error(ZS_ERR_FORMAT, "%s: field \"%s\" is not a string", what, key);
    *out = v->str;
    return ZS_OK;
}

const char *zs_json_num(char buf[ZS_JSON_NUM_CAP], const char *fmt, double v) {
    if (!isfinite(v))
        snprintf(buf, ZS_JSON_NUM_CAP, "null");
    else
        snprintf(buf, ZS_JSON_NUM_CAP, fmt, v);
    return buf;
}

void zs_json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) /* DEL too: YAML reads these strings as well */
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

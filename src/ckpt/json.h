/* A small strict JSON reader (RFC 8259) for checkpoint manifests and safetensors headers, and
 * a few helpers to write JSON. Input is untrusted: every failure is a ZS_ERR_FORMAT with the
 * byte position, nesting is bounded, numbers keep their exact integer value when they have
 * one, and nothing reads past the given length (no NUL terminator needed). */
#ifndef ZS_CKPT_JSON_H
#define ZS_CKPT_JSON_H

#include "zshard.h"

#include <stdint.h>
#include <stdio.h>

#define ZS_JSON_MAX_DEPTH 64

typedef enum zs_json_type {
    ZS_JSON_NULL = 0,
    ZS_JSON_BOOL,
    ZS_JSON_NUMBER,
    ZS_JSON_STRING,
    ZS_JSON_ARRAY,
    ZS_JSON_OBJECT,
} zs_json_type;

typedef struct zs_json zs_json;
struct zs_json {
    zs_json_type type;
    char *key;  /* member name inside an object (NUL-terminated), else NULL */
    char *str;  /* string value (NUL-terminated; may contain \u0000 as a NUL) */
    size_t len; /* string length in bytes */
    double num; /* number value */
    int is_int; /* the number is an integer that fits int64 exactly: see ival */
    int64_t ival;
    int boolean;
    int n;          /* members of an array or object */
    zs_json *child; /* first member */
    zs_json *next;  /* next sibling */
};

/* Parse text[0, len) as one JSON value (surrounding whitespace allowed). On error *out is
 * NULL and the message says where ("invalid JSON at byte 17: expected ':'"). */
zs_status zs_json_parse(const char *text, size_t len, zs_json **out);
void zs_json_free(zs_json *v);

/* Member of an object by name (first match), or NULL (also when v is not an object). */
const zs_json *zs_json_get(const zs_json *v, const char *key);
/* Element i of an array, or NULL. Linear in i: iterate child/next for whole arrays. */
const zs_json *zs_json_at(const zs_json *v, int i);

/* Typed member access for validation: each returns ZS_ERR_FORMAT naming the key (prefixed
 * with `what`, e.g. the file) when it is missing, of another type, or out of [lo, hi]. */
zs_status zs_json_get_int(const zs_json *obj, const char *key, int64_t lo, int64_t hi,
                          const char *what, int64_t *out);
zs_status zs_json_get_num(const zs_json *obj, const char *key, const char *what, double *out);
zs_status zs_json_get_str(const zs_json *obj, const char *key, const char *what, const char **out);

/* Write s as a JSON string literal (quotes and escapes). */
void zs_json_write_string(FILE *f, const char *s);

/* v printed with the printf format fmt (one double conversion) into buf, or "null" when v is
 * NaN or infinite (JSON has no such numbers; writers list the fields in a "nonfinite" array).
 * Returns buf. */
#define ZS_JSON_NUM_CAP 40
const char *zs_json_num(char buf[ZS_JSON_NUM_CAP], const char *fmt, double v);

#endif

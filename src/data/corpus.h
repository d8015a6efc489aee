/* A corpus as documents: text files, folders (walked recursively), glob patterns and JSONL
 * files, read as a stream. One document per text file, per JSONL line (one string field), or
 * per run of lines between separator lines. Every document comes out as valid UTF-8 (each
 * maximal invalid sequence replaced by U+FFFD, as Python's and Rust's lossy decoders do), or
 * as a skipped one with the reason. Memory: one document and one read buffer. */
#ifndef ZS_DATA_CORPUS_H
#define ZS_DATA_CORPUS_H

#define ZS_CORPUS_MAX_LEFT_OUT 8 /* left-out folders remembered by name */

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef enum zs_corpus_format {
    ZS_CORPUS_AUTO = 0, /* .jsonl / .ndjson files are JSONL, the others text */
    ZS_CORPUS_TEXT,
    ZS_CORPUS_JSONL,
} zs_corpus_format;

/* Why a document was skipped (ZS_DOC_OK: it was not). */
typedef enum zs_doc_skip {
    ZS_DOC_OK = 0,
    ZS_DOC_EMPTY,          /* no bytes, or only white space */
    ZS_DOC_TOO_LONG,       /* over max_doc_bytes */
    ZS_DOC_BAD_JSON,       /* a JSONL line that is not a JSON object */
    ZS_DOC_TRUNCATED_JSON, /* a JSONL line that ends inside its object */
    ZS_DOC_NO_FIELD,       /* a JSONL object without the field */
    ZS_DOC_NOT_STRING,     /* a JSONL field that is not a string */
    ZS_DOC_BINARY,         /* a text file with a NUL byte in its first 8 KiB */
    ZS_DOC_SKIP_COUNT
} zs_doc_skip;

/* The name of a skip reason as the summary and dataset.json spell it ("empty", ...). */
const char *zs_doc_skip_name(zs_doc_skip s);

typedef struct zs_corpus_config {
    const char *const *inputs; /* files, folders, glob patterns */
    int n_inputs;
    zs_corpus_format format;
    const char *field;          /* JSONL: the field holding the text ["text"] */
    const char *doc_sep;        /* text: a line equal to this ends a document; NULL: one per file */
    size_t max_doc_bytes;       /* longer documents are skipped [64 MiB] */
    const char *const *exclude; /* files whose name matches one of these globs are left out */
    int n_exclude;
    /* A folder left out of the walk (tokenize's output folder; NULL: none). Folders holding a
     * zshard dataset.json (token shards) are left out too; zs_corpus_left_out names both. */
    const char *skip_dir;
} zs_corpus_config;

zs_corpus_config zs_corpus_config_default(void);

typedef struct zs_doc {
    const char *text; /* valid UTF-8, text[len] == 0; valid until the next call */
    size_t len;
    int64_t index; /* position among all documents of the corpus, skipped ones included */
    int file;      /* index into the file list */
    int64_t line;  /* 1-based line where it starts; 0 for a whole file */
    zs_doc_skip skip;
    char why[200];    /* a skipped document: what was wrong, e.g. "field 'text' is a number" */
    int64_t replaced; /* invalid UTF-8 sequences replaced by U+FFFD */
    int eos_in_text;  /* filled in by the caller that encodes it */
} zs_doc;

typedef struct zs_corpus zs_corpus_t;

/* Expands the inputs into the sorted list of files (a folder: its regular files, recursively,
 * hidden ones and symbolic links inside it left out; a pattern: its matches, in order).
 * ZS_ERR_IO names an input that does not exist, a pattern that matches nothing, an
 * unreadable folder; ZS_ERR_INVALID an empty list. */
zs_status zs_corpus_open(const zs_corpus_config *cfg, zs_corpus_t **out);
/* The next document: *have = 1 and *d filled, or *have = 0 at the end. ZS_ERR_IO when a file
 * cannot be read (named). */
zs_status zs_corpus_next(zs_corpus_t *c, zs_doc *d, int *have);
int zs_corpus_file_count(const zs_corpus_t *c);
/* The folders the walk left out (the skip_dir, token folders), with the reason: "DIR (why)". */
int zs_corpus_left_out_count(const zs_corpus_t *c);
const char *zs_corpus_left_out(const zs_corpus_t *c, int i);
const char *zs_corpus_file(const zs_corpus_t *c, int i);
int64_t zs_corpus_total_bytes(const zs_corpus_t *c); /* sizes of all files, for progress */
int64_t zs_corpus_bytes_read(const zs_corpus_t *c);
void zs_corpus_close(zs_corpus_t *c);

/* UTF-8 repair: copies in[0, n) to out (room for 3n + 1 bytes) with every maximal ill-formed
 * subsequence replaced by U+FFFD; returns how many were replaced and sets *out_n. */
int64_t zs_utf8_repair(const char *in, size_t n, char *out, size_t *out_n);
/* 1 when s[0, n) is well-formed UTF-8. */
int zs_utf8_valid(const char *s, size_t n);

/* JSONL (jsonl.c): the string value of `field` in the JSON object line[0, n), unescaped into
 * *out (malloc'd, grown as needed, *cap its size), *out_n bytes. Returns ZS_DOC_OK or the
 * reason the line has none, with a detail in why. Duplicate keys: the last one counts, as
 * Python's json does. */
zs_doc_skip zs_jsonl_field(const char *line, size_t n, const char *field, char **out, size_t *cap,
                           size_t *out_n, char *why, size_t why_cap);

#endif

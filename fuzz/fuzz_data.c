/* libFuzzer target for the readers behind `zshard tokenize` and document training: a JSONL line's
 * field (src/data/jsonl.c, from memory), a corpus file read as documents (src/data/corpus.c:
 * JSONL lines or text with a separator line, UTF-8 repair, the size limit) and the dataset.json
 * that `zshard tokenize` writes beside its shards (src/train/docs_setup.c). The first byte picks
 * the reader; the rest is cut at ZF_SEP (fuzz/input.h):
 *   0: a JSONL line, then the field name      2: a text file, then the separator line
 *   1: a JSONL file, then the field name      3: a dataset.json
 * The corpus reader and dataset.json take files, so those inputs are written to a scratch
 * folder. Replayed over fuzz/corpus_data by the ctest fuzz_data; scripts/fuzz.sh runs it. */
#include "data/corpus.h"
#include "input.h"
#include "train/docs_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void jsonl_line(const uint8_t *line, size_t n, const char *field) {
    char *out = NULL, why[200];
    size_t cap = 0, out_n = 0;
    zs_doc_skip s =
        zs_jsonl_field((const char *)line, n, field, &out, &cap, &out_n, why, sizeof why);
    if (s == ZS_DOC_OK && out_n && !out) abort(); /* a field's text must be where it says */
    free(out);
    /* The UTF-8 repair every document goes through, on the raw line. */
    char *fixed = malloc(3 * n + 1);
    size_t fn;
    if (!fixed) return;
    zs_utf8_repair((const char *)line, n, fixed, &fn);
    if (!zs_utf8_valid(fixed, fn)) abort();
    free(fixed);
}

static void corpus_file(const char *name, const uint8_t *text, size_t n, zs_corpus_format format,
                        const char *field, const char *sep) {
    char path[8192];
    snprintf(path, sizeof path, "%s", zf_write(name, text, n));
    const char *inputs[] = {path};
    zs_corpus_config c = zs_corpus_config_default();
    c.inputs = inputs;
    c.n_inputs = 1;
    c.format = format;
    c.field = field;
    c.doc_sep = sep;
    c.max_doc_bytes = 512; /* small, so that the too-long path is reached */
    zs_corpus_t *cp = NULL;
    if (zs_corpus_open(&c, &cp) != ZS_OK) return;
    zs_doc d;
    int have = 1;
    while (have && zs_corpus_next(cp, &d, &have) == ZS_OK)
        if (have && d.skip == ZS_DOC_OK && !zs_utf8_valid(d.text, d.len)) abort();
    zs_corpus_close(cp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    data++, size--;
    size_t n0, n1;
    const uint8_t *p0 = zf_part(data, size, 0, 0, &n0), *p1 = zf_part(data, size, 1, 1, &n1);
    char *arg = p1 ? zf_strndup(p1, n1) : NULL;
    if (which == 0) {
        jsonl_line(p0, n0, arg ? arg : "text");
    } else if (which == 1) {
        corpus_file("in.jsonl", p0, n0, ZS_CORPUS_JSONL, arg ? arg : "text", NULL);
    } else if (which == 2) {
        corpus_file("in.txt", p0, n0, ZS_CORPUS_TEXT, "text", arg);
    } else {
        zf_write("dataset.json", data, size);
        char shards[8192];
        snprintf(shards, sizeof shards, "%s/train_*.bin", zf_dir());
        zs_docs_meta m;
        zs_docs_meta_read(shards, &m);
    }
    free(arg);
    return 0;
}

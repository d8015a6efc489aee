/* The trainer's documents (docs/data.md): dataset.json beside --data (what `zshard tokenize`
 * writes: vocabulary, end-of-document and padding ids), the document rules a run resolves from
 * it and from its flags, both splits' indexes, the epoch layout and the data record a
 * checkpoint keeps. */
#include "train/docs_setup.h"

#include "ckpt/json.h"
#include "core/status.h"
#include "data/docs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define META_MAX_BYTES (16 << 20) /* a dataset.json lists files; far below this */

/* dir/dataset.json of a data path or pattern (the directory part of it). */
static void meta_path(const char *data, char *out, size_t cap) {
    const char *slash = strrchr(data, '/');
    if (slash)
        snprintf(out, cap, "%.*s/dataset.json", (int)(slash - data), data);
    else
        snprintf(out, cap, "dataset.json");
}

/* An optional id: an integer in [0, hi), or null / absent (-1). */
static zs_status opt_id(const zs_json *root, const char *key, int64_t hi, const char *what,
                        int64_t *out) {
    zs_status st = ZS_OK;
    const zs_json *v = zs_json_get(root, key);
    *out = -1;
    if (!v || v->type == ZS_JSON_NULL) return ZS_OK;
    ZS_REQUIRE(v->type == ZS_JSON_NUMBER && v->is_int && v->ival >= 0 && v->ival < hi,
               ZS_ERR_FORMAT, "%s: %s must be null or an id in [0, %lld)", what, key,
               (long long)hi);
    *out = v->ival;
fail:
    return st;
}

zs_status zs_docs_meta_read(const char *data_path, zs_docs_meta *m) {
    zs_status st = ZS_OK;
    FILE *f = NULL;
    char *text = NULL;
    zs_json *root = NULL;
    struct stat sb;
    memset(m, 0, sizeof *m);
    m->eos_id = m->pad_id = m->bos_id = -1;
    if (!data_path) return ZS_OK;
    meta_path(data_path, m->path, sizeof m->path);
    if (stat(m->path, &sb) != 0) return ZS_OK; /* none: the flags and defaults decide */
    const char *what = m->path;
    ZS_REQUIRE(S_ISREG(sb.st_mode) && sb.st_size > 0 && sb.st_size <= META_MAX_BYTES, ZS_ERR_FORMAT,
               "%s: not a dataset description (an empty or huge file)", what);
    f = fopen(m->path, "rb");
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: %s", what, strerror(errno));
    text = malloc((size_t)sb.st_size);
    ZS_REQUIRE(text, ZS_ERR_OOM, "%s: out of memory", what);
    ZS_REQUIRE(fread(text, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size, ZS_ERR_IO,
               "%s: read failed", what);
    st = zs_json_parse(text, (size_t)sb.st_size, &root);
    if (st != ZS_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        ZS_REQUIRE(0, ZS_ERR_FORMAT, "%s: %s", what, msg);
    }
    const char *s = NULL;
    int64_t v = 0;
    ZS_CHECK(zs_json_get_str(root, "format", what, &s));
    ZS_REQUIRE(!strcmp(s, "zshard-tokens"), ZS_ERR_FORMAT,
               "%s: format '%s' is not zshard-tokens (the description `zshard tokenize` writes)",
               what, s);
    ZS_CHECK(zs_json_get_int(root, "version", 1, 1 << 20, what, &v));
    ZS_REQUIRE(v == 1, ZS_ERR_FORMAT, "%s: version %lld is newer than this zshard reads (1)", what,
               (long long)v);
    ZS_CHECK(zs_json_get_int(root, "vocab_size", 2, ZS_MAX_VOCAB, what, &v));
    m->vocab = (int)v;
    ZS_CHECK(zs_json_get_int(root, "bits", 16, 32, what, &v));
    ZS_REQUIRE(v == 16 || v == 32, ZS_ERR_FORMAT, "%s: bits %lld is not 16 or 32", what,
               (long long)v);
    ZS_REQUIRE(v == 32 || m->vocab <= 65536, ZS_ERR_FORMAT,
               "%s: vocab_size %d does not fit 16-bit tokens", what, m->vocab);
    m->bits = (int)v;
    ZS_CHECK(opt_id(root, "eos_id", m->vocab, what, &m->eos_id));
    ZS_CHECK(opt_id(root, "bos_id", m->vocab, what, &m->bos_id));
    ZS_CHECK(opt_id(root, "pad_id", m->vocab, what, &m->pad_id));
    ZS_CHECK(zs_json_get_str(root, "doc_boundary", what, &s));
    ZS_REQUIRE(!strcmp(s, "eos_after"), ZS_ERR_FORMAT,
               "%s: doc_boundary '%s' is not eos_after (a document ends with eos_id), the only "
               "rule this zshard reads",
               what, s);
    m->found = 1;
fail:
    if (f) fclose(f);
    free(text);
    zs_json_free(root);
    return st;
}

zs_status zs_docs_resolve(const zs_train_config *c, const zs_docs_meta *m, int vocab, int is_text,
                          zs_doc_rules *r) {
    zs_status st = ZS_OK;
    const char *data = c->data_path;
    memset(r, 0, sizeof *r);
    r->mode = c->docs;
    r->seq = c->seq;
    r->sep = c->doc_sep;
    ZS_REQUIRE(!c->doc_sep || strlen(c->doc_sep) < 64, ZS_ERR_INVALID,
               "--doc-sep: a separator line of at most 63 bytes");
    ZS_REQUIRE(!c->doc_sep || is_text, ZS_ERR_INVALID,
               "--doc-sep applies to byte-level text; %s holds token shards, whose documents "
               "end with an id (--eos-id)",
               data);
    ZS_REQUIRE(c->eos_id < vocab && c->pad_id < vocab, ZS_ERR_INVALID,
               "--eos-id %lld / --pad-id %lld: ids of %s are below its vocabulary of %d",
               (long long)c->eos_id, (long long)c->pad_id, data, vocab);
    /* The flag, else the tokenizer's own description. Token shards without dataset.json have
     * no end id by default, not even GPT-2's 50256 for a 50257 vocabulary: shards of another
     * tokenizer that lost their dataset.json (an interrupted tokenize of old) read as GPT-2's
     * and became one document. */
    r->eos_id = c->eos_id >= 0 ? c->eos_id : m->found && m->eos_id >= 0 ? m->eos_id : -1;
    if (c->docs == ZS_DOCS_PACK || c->docs == ZS_DOCS_PAD) {
        ZS_REQUIRE(!is_text || zs_docs_have_boundaries(r), ZS_ERR_INVALID,
                   "--docs %s: %s is byte-level text, whose documents zshard cannot tell: give "
                   "--doc-sep LINE (a line equal to LINE ends a document, e.g. --doc-sep %% for "
                   "fortune files), --eos-id BYTE, or use --docs concat",
                   zs_docs_mode_name(c->docs), data);
        ZS_REQUIRE(zs_docs_have_boundaries(r), ZS_ERR_INVALID,
                   "--docs %s: the token shards %s have no dataset.json beside them (what "
                   "`zshard tokenize` writes last; shards without one may be an interrupted "
                   "run's), so their end-of-document id is unknown: give --eos-id N (50256, "
                   "<|endoftext|>, for llm.c's GPT-2 shards)",
                   zs_docs_mode_name(c->docs), data);
    }
    r->pad_id = (int32_t)(c->pad_id >= 0               ? c->pad_id
                          : m->found && m->pad_id >= 0 ? m->pad_id
                          : r->sep && *r->sep          ? (unsigned char)r->sep[0]
                          : r->sep                     ? '\n'
                          : r->eos_id >= 0             ? r->eos_id
                                                       : 0);
fail:
    return st;
}

/* Reading tokenizer files: GPT-2's vocab.json + merges.txt, and tokenizer.json (model BPE with
 * its normalizer, pre-tokenizer, post-processor and decoder). Anything the encoder would not
 * reproduce faithfully is refused at load with the file and the JSON field named, rather than
 * giving different ids later. */
#include "ckpt/json.h"
#include "core/status.h"
#include "data/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define META "\xE2\x96\x81" /* '▁' U+2581, SentencePiece's space */

static zs_status read_all(const char *path, char **buf, size_t *len) {
    zs_status st = ZS_OK;
    FILE *f = fopen(path, "rb");
    *buf = NULL;
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: cannot open", path);
    ZS_REQUIRE(fseek(f, 0, SEEK_END) == 0, ZS_ERR_IO, "%s: cannot seek", path);
    long n = ftell(f);
    ZS_REQUIRE(n >= 0 && fseek(f, 0, SEEK_SET) == 0, ZS_ERR_IO, "%s: cannot size", path);
    *buf = malloc((size_t)n + 1);
    ZS_REQUIRE(*buf, ZS_ERR_OOM, "%s: out of memory for %ld bytes", path, n);
    ZS_REQUIRE(fread(*buf, 1, (size_t)n, f) == (size_t)n, ZS_ERR_IO, "%s: read failed", path);
    (*buf)[n] = 0;
    *len = (size_t)n;
fail:
    if (f) fclose(f);
    if (st != ZS_OK) free(*buf), *buf = NULL;
    return st;
}

static zs_status parse_file(const char *path, zs_json **root) {
    char *buf;
    size_t len;
    zs_status st = read_all(path, &buf, &len);
    if (st != ZS_OK) return st;
    st = zs_json_parse(buf, len, root);
    free(buf);
    if (st != ZS_OK) {
        char msg[512]; /* zs_error writes the buffer zs_last_error() points into */
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        return zs_error(st, "%s: %s", path, msg);
    }
    return ZS_OK;
}

static int exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

static const char *jstr(const zs_json *o, const char *key) {
    const zs_json *v = zs_json_get(o, key);
    return v && v->type == ZS_JSON_STRING ? v->str : NULL;
}

static int jbool(const zs_json *o, const char *key, int def) {
    const zs_json *v = zs_json_get(o, key);
    return v && v->type == ZS_JSON_BOOL ? v->boolean : def;
}

/* Largest id in a token -> id object, checked to be non-negative integers. */
static zs_status vocab_size(const zs_tokenizer_t *t, const zs_json *vocab, const char *field,
                            int *n) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(vocab && vocab->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT,
               "%s: %s is missing or not an object", t->what, field);
    for (const zs_json *v = vocab->child; v; v = v->next) {
        ZS_REQUIRE(v->type == ZS_JSON_NUMBER && v->is_int && v->ival >= 0 && v->ival < (1 << 24),
                   ZS_ERR_FORMAT, "%s: %s['%s'] is not a token id", t->what, field, v->key);
        if (v->ival + 1 > *n) *n = (int)v->ival + 1;
    }
fail:
    return st;
}

static zs_status add_vocab(zs_tokenizer_t *t, const zs_json *vocab) {
    zs_status st = ZS_OK;
    for (const zs_json *v = vocab->child; v; v = v->next)
        ZS_CHECK(zs_tok_add_token(t, (int)v->ival, v->key, strlen(v->key)));
fail:
    return st;
}

/* normalized: matched in normalized text (Hugging Face's default for a non-special token). */
static void mark_added(zs_tokenizer_t *t, int id, int special, int normalized) {
    for (int a = 0; a < t->n_added; a++)
        if (t->added[a] == id) return;
    t->added[t->n_added++] = id;
    t->special[id] = (unsigned char)special;
    t->added_norm[id] = (unsigned char)normalized;
}

/* ---- GPT-2 files ------------------------------------------------------------------------- */

static zs_status load_gpt2(zs_tokenizer_t *t, const char *vocab_path, const char *merges_path) {
    zs_status st = ZS_OK;
    zs_json *root = NULL;
    char *m = NULL;
    size_t mlen;
    int n = 0, rank = 0;
    snprintf(t->what, sizeof t->what, "%s", vocab_path);
    ZS_CHECK(parse_file(vocab_path, &root));
    ZS_CHECK(vocab_size(t, root, "the vocabulary", &n));
    ZS_CHECK(zs_tok_alloc(t, n));
    ZS_CHECK(add_vocab(t, root));
    ZS_CHECK(zs_tok_build_hash(t));
    /* GPT-2's tokenizer treats <|endoftext|> as a special token although vocab.json lists
     * it with the others: it is matched whole in text and is the EOS. */
    int eot = zs_tok_lookup(t, "<|endoftext|>", 13);
    if (eot >= 0) mark_added(t, eot, 1, 0);
    t->byte_level = 1;
    t->split = ZS_TOK_SPLIT_GPT2;
    t->dec[t->n_dec++].kind = ZS_TOK_DEC_BYTELEVEL;

    snprintf(t->what, sizeof t->what, "%s", merges_path);
    ZS_CHECK(read_all(merges_path, &m, &mlen));
    size_t lines = 1;
    for (size_t i = 0; i < mlen; i++)
        lines += m[i] == '\n';
    ZS_CHECK(zs_tok_merges_alloc(t, lines));
    for (size_t i = 0, line = 1; i < mlen; line++) {
        size_t e = i;
        while (e < mlen && m[e] != '\n')
            e++;
        size_t end = e > i && m[e - 1] == '\r' ? e - 1 : e;
        const char *s = m + i;
        size_t L = end - i;
        i = e + 1;
        if (L == 0 || (line == 1 && L >= 9 && !memcmp(s, "#version:", 9))) continue;
        const char *sp = memchr(s, ' ', L);
        ZS_REQUIRE(sp && sp > s && sp + 1 < s + L && !memchr(sp + 1, ' ', (size_t)(s + L - sp - 1)),
                   ZS_ERR_FORMAT, "%s: line %zu is not two tokens separated by one space: '%.*s'",
                   merges_path, line, (int)L, s);
        ZS_CHECK(
            zs_tok_add_merge(t, rank++, s, (size_t)(sp - s), sp + 1, (size_t)(s + L - sp - 1)));
    }
    ZS_REQUIRE(rank > 0, ZS_ERR_FORMAT, "%s: no merges", merges_path);
    snprintf(t->what, sizeof t->what, "%s", vocab_path);
fail:
    zs_json_free(root);
    free(m);
    return st;
}

/* ---- tokenizer.json ---------------------------------------------------------------------- */

static zs_status unsupported(const zs_tokenizer_t *t, const char *field, const char *type,
                             const char *supported) {
    return zs_error(ZS_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (supported: %s)", t->what,
                    field, type ? type : "(no type)", supported);
}

static zs_status model(zs_tokenizer_t *t, const zs_json *root) {
    zs_status st = ZS_OK;
    const zs_json *m = zs_json_get(root, "model"), *merges,
                  *added = zs_json_get(root, "added_tokens");
    ZS_REQUIRE(m && m->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: no 'model' object", t->what);
    const char *type = jstr(m, "type");
    if (type && strcmp(type, "BPE")) return unsupported(t, "model.type", type, "BPE");
    merges = zs_json_get(m, "merges");
    ZS_REQUIRE(merges && merges->type == ZS_JSON_ARRAY, ZS_ERR_FORMAT,
               "%s: model.merges is missing or not an array", t->what);
    const char *pre = jstr(m, "continuing_subword_prefix"), *suf = jstr(m, "end_of_word_suffix");
    if (pre && *pre) return unsupported(t, "model.continuing_subword_prefix", pre, "null");
    if (suf && *suf) return unsupported(t, "model.end_of_word_suffix", suf, "null");
    int n = 0;
    ZS_CHECK(vocab_size(t, zs_json_get(m, "vocab"), "model.vocab", &n));
    ZS_REQUIRE(!added || added->type == ZS_JSON_ARRAY, ZS_ERR_FORMAT,
               "%s: added_tokens is not an array", t->what);
    for (const zs_json *a = added ? added->child : NULL; a; a = a->next) {
        const zs_json *id = zs_json_get(a, "id");
        ZS_REQUIRE(id && id->is_int && id->ival >= 0 && id->ival < (1 << 24) && jstr(a, "content"),
                   ZS_ERR_FORMAT, "%s: added_tokens has an entry without an id and content",
                   t->what);
        if (id->ival + 1 > n) n = (int)id->ival + 1;
    }
    ZS_CHECK(zs_tok_alloc(t, n));
    ZS_CHECK(add_vocab(t, zs_json_get(m, "vocab")));
    for (const zs_json *a = added ? added->child : NULL; a; a = a->next) {
        const char *c = jstr(a, "content");
        int id = (int)zs_json_get(a, "id")->ival;
        ZS_CHECK(zs_tok_add_token(t, id, c, strlen(c)));
        int special = jbool(a, "special", 0);
        mark_added(t, id, special, jbool(a, "normalized", !special));
    }
    ZS_CHECK(zs_tok_build_hash(t));
    ZS_CHECK(zs_tok_merges_alloc(t, (size_t)merges->n));
    int rank = 0;
    for (const zs_json *e = merges->child; e; e = e->next, rank++) {
        /* Two forms: "a b" (older files) and ["a", "b"] (tokenizers >= 0.20, which allows
         * spaces inside tokens). */
        if (e->type == ZS_JSON_STRING) {
            const char *sp = strchr(e->str, ' ');
            ZS_REQUIRE(sp && sp > e->str && sp[1] && !strchr(sp + 1, ' '), ZS_ERR_FORMAT,
                       "%s: model.merges[%d] '%s' is not two tokens separated by one space",
                       t->what, rank, e->str);
            ZS_CHECK(
                zs_tok_add_merge(t, rank, e->str, (size_t)(sp - e->str), sp + 1, strlen(sp + 1)));
        } else {
            const zs_json *a = zs_json_at(e, 0), *b = zs_json_at(e, 1);
            ZS_REQUIRE(e->type == ZS_JSON_ARRAY && e->n == 2 && a->type == ZS_JSON_STRING &&
                           b->type == ZS_JSON_STRING,
                       ZS_ERR_FORMAT, "%s: model.merges[%d] is neither \"a b\" nor [a, b]", t->what,
                       rank);
            ZS_CHECK(zs_tok_add_merge(t, rank, a->str, a->len, b->str, b->len));
        }
    }
    t->byte_fallback = jbool(m, "byte_fallback", 0);
    t->ignore_merges = jbool(m, "ignore_merges", 0);
    t->fuse_unk = jbool(m, "fuse_unk", 0);
    const char *unk = jstr(m, "unk_token");
    t->unk = unk ? zs_tok_lookup(t, unk, strlen(unk)) : -1;
    ZS_REQUIRE(!unk || t->unk >= 0, ZS_ERR_FORMAT, "%s: model.unk_token '%s' is not a token",
               t->what, unk);
fail:
    return st;
}

static int is_str(const zs_json *o, const char *key, const char *want) {
    const char *s = jstr(o, key);
    return s && !strcmp(s, want);
}

static zs_status normalizer(zs_tokenizer_t *t, const zs_json *n) {
    if (!n || n->type == ZS_JSON_NULL) return ZS_OK;
    const char *type = jstr(n, "type");
    if (type && !strcmp(type, "Sequence")) {
        const zs_json *list = zs_json_get(n, "normalizers");
        for (const zs_json *c = list ? list->child : NULL; c; c = c->next) {
            zs_status st = normalizer(t, c);
            if (st != ZS_OK) return st;
        }
        return ZS_OK;
    }
    if (type && !strcmp(type, "Prepend") && is_str(n, "prepend", META)) {
        t->prepend = ZS_TOK_PREPEND_ALWAYS;
        return ZS_OK;
    }
    const zs_json *pat = zs_json_get(n, "pattern");
    if (type && !strcmp(type, "Replace") && is_str(pat, "String", " ") &&
        is_str(n, "content", META)) {
        t->replace_space = 1;
        return ZS_OK;
    }
    return unsupported(t, "normalizer.type", type,
                       "null, Prepend '\xE2\x96\x81', Replace ' ' -> '\xE2\x96\x81', Sequence");
}

static const char *k_gpt2_re =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *k_llama3_re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *k_qwen2_re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static zs_status metaspace_prepend(zs_tokenizer_t *t, const zs_json *p) {
    const char *scheme = jstr(p, "prepend_scheme");
    if (!is_str(p, "replacement", META))
        return unsupported(t, "Metaspace replacement", jstr(p, "replacement"), "'\xE2\x96\x81'");
    t->replace_space = 1;
    if (scheme ? !strcmp(scheme, "always") : jbool(p, "add_prefix_space", 1))
        t->prepend = ZS_TOK_PREPEND_META;
    else if (scheme && !strcmp(scheme, "first"))
        t->prepend = ZS_TOK_PREPEND_FIRST;
    else if (scheme && strcmp(scheme, "never"))
        return unsupported(t, "Metaspace prepend_scheme", scheme, "always, first, never");
    return ZS_OK;
}

static zs_status pre_tokenizer(zs_tokenizer_t *t, const zs_json *p) {
    if (!p || p->type == ZS_JSON_NULL) return ZS_OK;
    const char *type = jstr(p, "type");
    if (type && !strcmp(type, "Sequence")) {
        const zs_json *list = zs_json_get(p, "pretokenizers");
        for (const zs_json *c = list ? list->child : NULL; c; c = c->next) {
            zs_status st = pre_tokenizer(t, c);
            if (st != ZS_OK) return st;
        }
        return ZS_OK;
    }
    if (type && !strcmp(type, "ByteLevel")) {
        t->byte_level = 1;
        t->prefix_space = jbool(p, "add_prefix_space", 0);
        if (jbool(p, "use_regex", 1)) {
            if (t->split != ZS_TOK_SPLIT_NONE)
                return unsupported(t, "pre_tokenizer", "two splitting pre-tokenizers", "one");
            t->split = ZS_TOK_SPLIT_GPT2;
        }
        return ZS_OK;
    }
    if (type && !strcmp(type, "Split")) {
        const char *re = jstr(zs_json_get(p, "pattern"), "Regex");
        zs_tok_split s = !re                        ? ZS_TOK_SPLIT_NONE
                         : !strcmp(re, k_gpt2_re)   ? ZS_TOK_SPLIT_GPT2
                         : !strcmp(re, k_llama3_re) ? ZS_TOK_SPLIT_LLAMA3
                         : !strcmp(re, k_qwen2_re)  ? ZS_TOK_SPLIT_QWEN2
                                                    : ZS_TOK_SPLIT_NONE;
        if (s == ZS_TOK_SPLIT_NONE)
            return unsupported(t, "pre_tokenizer Split pattern", re ? re : "(not a Regex)",
                               "the GPT-2, Llama-3 and Qwen2 regexes");
        if (!is_str(p, "behavior", "Isolated") || jbool(p, "invert", 0))
            return unsupported(t, "pre_tokenizer Split behavior", jstr(p, "behavior"),
                               "Isolated, invert false");
        if (t->split != ZS_TOK_SPLIT_NONE)
            return unsupported(t, "pre_tokenizer", "two splitting pre-tokenizers", "one");
        t->split = s;
        return ZS_OK;
    }
    if (type && !strcmp(type, "Metaspace")) {
        zs_status st = metaspace_prepend(t, p);
        if (st == ZS_OK && jbool(p, "split", 1)) t->split = ZS_TOK_SPLIT_METASPACE;
        return st;
    }
    return unsupported(t, "pre_tokenizer.type", type,
                       "null, ByteLevel, Split, Metaspace, Sequence");
}

static zs_status post_processor(zs_tokenizer_t *t, const zs_json *p) {
    if (!p || p->type == ZS_JSON_NULL) return ZS_OK;
    const char *type = jstr(p, "type");
    if (type && !strcmp(type, "ByteLevel")) return ZS_OK; /* offsets only */
    if (type && !strcmp(type, "Sequence")) {
        const zs_json *list = zs_json_get(p, "processors");
        for (const zs_json *c = list ? list->child : NULL; c; c = c->next) {
            zs_status st = post_processor(t, c);
            if (st != ZS_OK) return st;
        }
        return ZS_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing"))
        return unsupported(t, "post_processor.type", type,
                           "null, ByteLevel, TemplateProcessing, Sequence");
    /* The "single" template: special tokens before and after the sequence $A. */
    const zs_json *single = zs_json_get(p, "single");
    int after = 0;
    t->n_pre = t->n_post = 0;
    for (const zs_json *it = single ? single->child : NULL; it; it = it->next) {
        if (zs_json_get(it, "Sequence")) {
            after = 1;
            continue;
        }
        const char *name = jstr(zs_json_get(it, "SpecialToken"), "id");
        int id = name ? zs_tok_lookup(t, name, strlen(name)) : -1;
        int *n = after ? &t->n_post : &t->n_pre, *v = after ? t->post : t->pre;
        if (id < 0 || *n == ZS_TOK_MAX_TEMPLATE)
            return zs_error(ZS_ERR_FORMAT, "%s: post_processor.single: '%s' is not a token",
                            t->what, name ? name : "(no SpecialToken id)");
        v[(*n)++] = id;
    }
    return ZS_OK;
}

static zs_status decoder(zs_tokenizer_t *t, const zs_json *d) {
    if (!d || d->type == ZS_JSON_NULL) return ZS_OK;
    const char *type = jstr(d, "type");
    if (type && !strcmp(type, "Sequence")) {
        const zs_json *list = zs_json_get(d, "decoders");
        for (const zs_json *c = list ? list->child : NULL; c; c = c->next) {
            zs_status st = decoder(t, c);
            if (st != ZS_OK) return st;
        }
        return ZS_OK;
    }
    if (t->n_dec == ZS_TOK_MAX_DEC) return unsupported(t, "decoder", "9 or more steps", "8");
    zs_tok_dec *o = &t->dec[t->n_dec];
    memset(o, 0, sizeof *o);
    const char *from = NULL, *to = NULL;
    if (type && !strcmp(type, "ByteLevel"))
        o->kind = ZS_TOK_DEC_BYTELEVEL;
    else if (type && !strcmp(type, "ByteFallback"))
        o->kind = ZS_TOK_DEC_BYTEFALLBACK;
    else if (type && !strcmp(type, "Fuse"))
        o->kind = ZS_TOK_DEC_FUSE;
    else if (type && !strcmp(type, "Replace")) {
        o->kind = ZS_TOK_DEC_REPLACE;
        from = jstr(zs_json_get(d, "pattern"), "String");
        to = jstr(d, "content");
    } else if (type && !strcmp(type, "Strip")) {
        o->kind = ZS_TOK_DEC_STRIP;
        from = jstr(d, "content");
        const zs_json *a = zs_json_get(d, "start"), *b = zs_json_get(d, "stop");
        o->start = a && a->is_int ? (int)a->ival : 0;
        o->stop = b && b->is_int ? (int)b->ival : 0;
    } else if (type && !strcmp(type, "Metaspace")) {
        o->kind = ZS_TOK_DEC_METASPACE;
        const char *scheme = jstr(d, "prepend_scheme");
        o->strip_first = scheme ? strcmp(scheme, "never") != 0 : jbool(d, "add_prefix_space", 1);
    } else
        return unsupported(t, "decoder.type", type,
                           "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
    if ((o->kind == ZS_TOK_DEC_REPLACE || o->kind == ZS_TOK_DEC_STRIP) &&
        (!from || strlen(from) >= sizeof o->from || (to && strlen(to) >= sizeof o->to)))
        return zs_error(ZS_ERR_FORMAT, "%s: decoder %s: pattern/content missing or too long",
                        t->what, type);
    if (from) strcpy(o->from, from);
    if (to) strcpy(o->to, to);
    t->n_dec++;
    return ZS_OK;
}

static zs_status load_json(zs_tokenizer_t *t, const char *path) {
    zs_status st = ZS_OK;
    zs_json *root = NULL;
    snprintf(t->what, sizeof t->what, "%s", path);
    ZS_CHECK(parse_file(path, &root));
    ZS_REQUIRE(root->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: not a JSON object", path);
    ZS_CHECK(model(t, root));
    ZS_CHECK(normalizer(t, zs_json_get(root, "normalizer")));
    ZS_CHECK(pre_tokenizer(t, zs_json_get(root, "pre_tokenizer")));
    ZS_CHECK(post_processor(t, zs_json_get(root, "post_processor")));
    ZS_CHECK(decoder(t, zs_json_get(root, "decoder")));
    const char *pad = jstr(zs_json_get(root, "padding"), "pad_token");
    if (pad) t->pad = zs_tok_lookup(t, pad, strlen(pad));
fail:
    zs_json_free(root);
    return st;
}

/* ---- entry points ------------------------------------------------------------------------ */

/* eos_token of tokenizer_config.json: a string or {"content": ...}. Absent file: no change. */
static zs_status config_eos(zs_tokenizer_t *t, const char *dir) {
    char p[4200];
    zs_json *root = NULL;
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    if (!exists(p)) return ZS_OK;
    zs_status st = parse_file(p, &root);
    if (st != ZS_OK) return st;
    const zs_json *e = zs_json_get(root, "eos_token");
    const char *name = e && e->type == ZS_JSON_STRING ? e->str : jstr(e, "content");
    if (name) {
        t->eos = zs_tok_lookup(t, name, strlen(name));
        if (t->eos < 0) st = zs_error(ZS_ERR_FORMAT, "%s: eos_token '%s' is not a token", p, name);
    }
    e = zs_json_get(root, "pad_token");
    name = e && e->type == ZS_JSON_STRING ? e->str : jstr(e, "content");
    if (name && st == ZS_OK) {
        t->pad = zs_tok_lookup(t, name, strlen(name));
        if (t->pad < 0) st = zs_error(ZS_ERR_FORMAT, "%s: pad_token '%s' is not a token", p, name);
    }
    zs_json_free(root);
    return st;
}

zs_status zs_tokenizer_load(const char *path, zs_tokenizer_t **out) {
    zs_status st = ZS_OK;
    char dir[4096], a[4200], b[4200];
    struct stat s;
    zs_tokenizer_t *t = calloc(1, sizeof *t);
    *out = NULL;
    ZS_REQUIRE(t, ZS_ERR_OOM, "tokenizer: out of memory");
    t->unk = t->eos = t->pad = -1;
    ZS_REQUIRE(stat(path, &s) == 0, ZS_ERR_IO, "tokenizer %s: no such file or directory", path);
    snprintf(dir, sizeof dir, "%s", path);
    const char *base = path;
    if (!S_ISDIR(s.st_mode)) {
        char *slash = strrchr(dir, '/');
        base = slash ? path + (slash - dir) + 1 : path;
        if (slash)
            *slash = 0;
        else
            strcpy(dir, ".");
    }
    snprintf(a, sizeof a, "%s/vocab.json", dir);
    snprintf(b, sizeof b, "%s/merges.txt", dir);
    if (S_ISDIR(s.st_mode)) {
        char j[4200];
        snprintf(j, sizeof j, "%s/tokenizer.json", dir);
        ZS_REQUIRE(exists(j) || exists(a) || exists(b), ZS_ERR_IO,
                   "tokenizer %s: the directory has neither tokenizer.json nor vocab.json + "
                   "merges.txt",
                   path);
        if (exists(j))
            ZS_CHECK(load_json(t, j));
        else
            ZS_CHECK(load_gpt2(t, a, b));
    } else if (!strcmp(base, "vocab.json") || !strcmp(base, "merges.txt")) {
        ZS_CHECK(load_gpt2(t, a, b));
    } else {
        ZS_CHECK(load_json(t, path));
    }
    ZS_CHECK(config_eos(t, dir));
    static const char *eos_names[] = {"<|endoftext|>", "</s>", "<|end_of_text|>"};
    for (int i = 0; t->eos < 0 && i < 3; i++)
        t->eos = zs_tok_lookup(t, eos_names[i], strlen(eos_names[i]));
    static const char *pad_names[] = {"<pad>", "<|pad|>", "[PAD]", "<|padding|>"};
    for (int i = 0; t->pad < 0 && i < 4; i++)
        t->pad = zs_tok_lookup(t, pad_names[i], strlen(pad_names[i]));
    ZS_CHECK(zs_tok_finish(t));
    *out = t;
    return ZS_OK;
fail:
    zs_tokenizer_destroy(t);
    return st;
}

void zs_tokenizer_destroy(zs_tokenizer_t *t) {
    if (!t) return;
    for (int i = 0; t->tok && i < t->n; i++)
        free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->special);
    free(t->added);
    free(t->hash);
    free(t->mkey);
    free(t->mrank);
    free(t->mid);
    free(t->added_norm);
    free(t->araw);
    free(t->anorm);
    for (int i = 0; t->anorm_str && i < t->anorm_at[256]; i++)
        free(t->anorm_str[i]);
    free(t->anorm_str);
    free(t->anorm_len);
    free(t->cp_id);
    free(t);
}

int zs_tokenizer_vocab_size(const zs_tokenizer_t *t) {
    return t->n;
}
int zs_tokenizer_eos(const zs_tokenizer_t *t) {
    return t->eos;
}
int zs_tokenizer_bos(const zs_tokenizer_t *t) {
    return t->n_pre == 1 ? t->pre[0] : -1;
}
int zs_tokenizer_pad(const zs_tokenizer_t *t) {
    return t->pad;
}
void zs_tokenizer_template(const zs_tokenizer_t *t, const int **pre, int *n_pre, const int **post,
                           int *n_post) {
    *pre = t->pre;
    *n_pre = t->n_pre;
    *post = t->post;
    *n_post = t->n_post;
}
const char *zs_tokenizer_token(const zs_tokenizer_t *t, int id) {
    return id >= 0 && id < t->n ? t->tok[id] : NULL;
}
int zs_tokenizer_id(const zs_tokenizer_t *t, const char *token) {
    return zs_tok_lookup(t, token, strlen(token));
}

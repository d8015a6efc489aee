/* The tokenizer's tables (token strings, the string -> id hash, the merges) that
 * tokenizer_load.c fills, and decoding ids back to text. Encoding is tokenizer_encode.c. */
#include "core/status.h"
#include "data/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tables ------------------------------------------------------------------------------ */

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 33);
}

zs_status zs_tok_alloc(zs_tokenizer_t *t, int n) {
    zs_status st = ZS_OK;
    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->tok_len = calloc((size_t)n, sizeof *t->tok_len);
    t->special = calloc((size_t)n, 1);
    t->added = calloc((size_t)n, sizeof *t->added);
    t->added_norm = calloc((size_t)n, 1);
    ZS_REQUIRE(t->tok && t->tok_len && t->special && t->added && t->added_norm, ZS_ERR_OOM,
               "%s: out of memory for %d tokens", t->what, n);
    t->n = n;
fail:
    return st;
}

zs_status zs_tok_add_token(zs_tokenizer_t *t, int id, const char *s, size_t len) {
    zs_status st = ZS_OK;
    ZS_ASSERT(id >= 0 && id < t->n);
    ZS_REQUIRE(!t->tok[id] || ((size_t)t->tok_len[id] == len && !memcmp(t->tok[id], s, len)),
               ZS_ERR_FORMAT, "%s: id %d is given to two tokens, '%s' and '%.*s'", t->what, id,
               t->tok[id], (int)len, s);
    if (t->tok[id]) return ZS_OK;
    ZS_REQUIRE(len < (1u << 20), ZS_ERR_FORMAT, "%s: token %d is %zu bytes long", t->what, id, len);
    t->tok[id] = malloc(len + 1);
    ZS_REQUIRE(t->tok[id], ZS_ERR_OOM, "%s: out of memory", t->what);
    memcpy(t->tok[id], s, len);
    t->tok[id][len] = 0;
    t->tok_len[id] = (int)len;
fail:
    return st;
}

zs_status zs_tok_build_hash(zs_tokenizer_t *t) {
    zs_status st = ZS_OK;
    size_t cap = 16;
    while (cap < 2 * (size_t)t->n)
        cap *= 2;
    t->hash = calloc(cap, sizeof *t->hash);
    ZS_REQUIRE(t->hash, ZS_ERR_OOM, "%s: out of memory", t->what);
    t->hash_cap = cap;
    for (int id = 0; id < t->n; id++) {
        if (!t->tok[id]) continue;
        size_t h = fnv(t->tok[id], (size_t)t->tok_len[id]) & (cap - 1);
        /* The same string under two ids (an added token repeating a vocabulary entry) keeps
         * the first id, which is what a lookup of that string gives in Hugging Face too. */
        if (zs_tok_lookup(t, t->tok[id], (size_t)t->tok_len[id]) >= 0) continue;
        while (t->hash[h])
            h = (h + 1) & (cap - 1);
        t->hash[h] = (uint32_t)id + 1;
    }
fail:
    return st;
}

int zs_tok_lookup(const zs_tokenizer_t *t, const char *s, size_t len) {
    if (!t->hash) return -1;
    size_t m = t->hash_cap - 1, h = fnv(s, len) & m;
    for (; t->hash[h]; h = (h + 1) & m) {
        int id = (int)t->hash[h] - 1;
        if ((size_t)t->tok_len[id] == len && !memcmp(t->tok[id], s, len)) return id;
    }
    return -1;
}

zs_status zs_tok_merges_alloc(zs_tokenizer_t *t, size_t count) {
    zs_status st = ZS_OK;
    size_t cap = 16;
    while (cap < 2 * count)
        cap *= 2;
    t->mkey = calloc(cap, sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mid = malloc(cap * sizeof *t->mid);
    ZS_REQUIRE(t->mkey && t->mrank && t->mid, ZS_ERR_OOM, "%s: out of memory for %zu merges",
               t->what, count);
    t->mcap = cap;
fail:
    return st;
}

int32_t zs_tok_merge_find(const zs_tokenizer_t *t, int32_t a, int32_t b, int32_t *merged) {
    if (!t->mcap) return -1;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t h = mix(key) & (t->mcap - 1); t->mkey[h]; h = (h + 1) & (t->mcap - 1)) {
        if (t->mkey[h] == key) {
            *merged = t->mid[h];
            return t->mrank[h];
        }
    }
    return -1;
}

zs_status zs_tok_add_merge(zs_tokenizer_t *t, int rank, const char *a, size_t na, const char *b,
                           size_t nb) {
    zs_status st = ZS_OK;
    char *ab = malloc(na + nb + 1);
    ZS_REQUIRE(ab, ZS_ERR_OOM, "%s: out of memory", t->what);
    memcpy(ab, a, na);
    memcpy(ab + na, b, nb);
    int ia = zs_tok_lookup(t, a, na), ib = zs_tok_lookup(t, b, nb);
    int iab = zs_tok_lookup(t, ab, na + nb);
    int32_t old;
    ZS_REQUIRE(ia >= 0 && ib >= 0 && iab >= 0, ZS_ERR_FORMAT,
               "%s: merge %d ('%.*s' '%.*s'): '%.*s' is not in the vocabulary", t->what, rank,
               (int)na, a, (int)nb, b,
               ia < 0   ? (int)na
               : ib < 0 ? (int)nb
                        : (int)(na + nb),
               ia < 0   ? a
               : ib < 0 ? b
                        : ab);
    if (zs_tok_merge_find(t, ia, ib, &old) >= 0) goto fail; /* a repeat: the first rank stands */
    uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
    size_t h = mix(key) & (t->mcap - 1);
    while (t->mkey[h])
        h = (h + 1) & (t->mcap - 1);
    t->mkey[h] = key;
    t->mrank[h] = rank;
    t->mid[h] = iab;
fail:
    free(ab);
    return st;
}

/* ---- decode ------------------------------------------------------------------------------ */

/* Decoders work on the list of token strings, as Hugging Face's decode_chain does: most act
 * on each token, Fuse joins them, so a Strip after Fuse acts on the whole text once. */
typedef struct sbuf {
    char *s;
    size_t n;
} sbuf;

static size_t find(const char *s, size_t n, const char *pat, size_t np) {
    for (size_t i = 0; np && i + np <= n; i++)
        if (!memcmp(s + i, pat, np)) return i;
    return n;
}

static zs_status replace_all(sbuf *b, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to);
    char *o = malloc(b->n / (nf ? nf : 1) * (nt + 1) + b->n + 1);
    if (!o) return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < b->n;) {
        size_t j = find(b->s + i, b->n - i, from, nf);
        memcpy(o + k, b->s + i, j), k += j, i += j;
        if (i < b->n) memcpy(o + k, to, nt), k += nt, i += nf;
    }
    free(b->s);
    b->s = o;
    b->n = k;
    return ZS_OK;
}

static void byte_level_back(sbuf *b, const int *inv) {
    /* A token with a char outside the byte map (an added token such as a special) keeps its
     * own bytes, as Hugging Face's ByteLevel decoder does. Each char is at least one byte, so
     * the second pass writes in place behind its reading position. */
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (size_t i = 0; i < b->n;) {
            uint32_t cp;
            i += zs_tok_utf8((const unsigned char *)b->s + i, b->n - i, &cp);
            if (cp >= 324 || inv[cp] < 0) return;
            if (pass) b->s[k] = (char)inv[cp];
            k++;
        }
        if (pass) b->n = k;
    }
}

static void apply_one(const zs_tok_dec *d, sbuf *b, int first, const int *inv) {
    size_t nf = strlen(d->from);
    if (d->kind == ZS_TOK_DEC_BYTELEVEL) byte_level_back(b, inv);
    if (d->kind == ZS_TOK_DEC_BYTEFALLBACK && b->n == 6 && !memcmp(b->s, "<0x", 3) &&
        b->s[5] == '>') {
        unsigned v;
        char hex[3] = {b->s[3], b->s[4], 0};
        if (sscanf(hex, "%2x", &v) == 1) b->s[0] = (char)v, b->n = 1;
    }
    if (d->kind == ZS_TOK_DEC_STRIP) {
        size_t lead = 0, trail = 0;
        for (int k = 0; k < d->start && lead + nf <= b->n && !memcmp(b->s + lead, d->from, nf); k++)
            lead += nf;
        for (int k = 0; k < d->stop && lead + trail + nf <= b->n &&
                        !memcmp(b->s + b->n - trail - nf, d->from, nf);
             k++)
            trail += nf;
        memmove(b->s, b->s + lead, b->n - lead - trail);
        b->n -= lead + trail;
    }
    if (d->kind == ZS_TOK_DEC_METASPACE && first && d->strip_first && b->n && b->s[0] == ' ')
        memmove(b->s, b->s + 1, --b->n);
}

zs_status zs_tokenizer_decode(const zs_tokenizer_t *t, const int32_t *idv, int count,
                              int skip_special, char **text, size_t *nbytes) {
    zs_status st = ZS_OK;
    int inv[324], n = 0;
    sbuf *b = calloc((size_t)(count > 0 ? count : 1), sizeof *b);
    char *o = NULL;
    *text = NULL;
    *nbytes = 0;
    ZS_REQUIRE(b, ZS_ERR_OOM, "tokenizer: out of memory");
    for (int i = 0; i < 324; i++)
        inv[i] = -1;
    for (unsigned c = 0; c < 256; c++)
        inv[zs_tok_byte_char(c)] = (int)c;
    for (int i = 0; i < count; i++) {
        int id = idv[i];
        ZS_REQUIRE(id >= 0 && id < t->n && t->tok[id], ZS_ERR_INVALID,
                   "%s: token id %d is not in the vocabulary (%d ids)", t->what, id, t->n);
        if (skip_special && t->special[id]) continue;
        b[n].n = (size_t)t->tok_len[id];
        b[n].s = malloc(b[n].n + 1);
        ZS_REQUIRE(b[n].s, ZS_ERR_OOM, "tokenizer: out of memory");
        memcpy(b[n].s, t->tok[id], b[n].n);
        n++;
    }
    for (int k = 0; k < t->n_dec; k++) {
        const zs_tok_dec *d = &t->dec[k];
        if (d->kind == ZS_TOK_DEC_FUSE) {
            /* Joined in the final pass; later decoders then see one token. */
            size_t all = 0;
            for (int i = 0; i < n; i++)
                all += b[i].n;
            char *f = malloc(all + 1);
            ZS_REQUIRE(f, ZS_ERR_OOM, "tokenizer: out of memory");
            size_t at = 0;
            for (int i = 0; i < n; i++)
                memcpy(f + at, b[i].s, b[i].n), at += b[i].n;
            for (int i = 0; i < n; i++)
                free(b[i].s), b[i].s = NULL;
            if (n)
                b[0].s = f, b[0].n = all, n = 1;
            else
                free(f);
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (d->kind == ZS_TOK_DEC_REPLACE) ZS_CHECK(replace_all(&b[i], d->from, d->to));
            if (d->kind == ZS_TOK_DEC_METASPACE) ZS_CHECK(replace_all(&b[i], "\xE2\x96\x81", " "));
            apply_one(d, &b[i], i == 0, inv);
        }
    }
    size_t all = 0;
    for (int i = 0; i < n; i++)
        all += b[i].n;
    o = malloc(all + 1);
    ZS_REQUIRE(o, ZS_ERR_OOM, "tokenizer: out of memory");
    all = 0;
    for (int i = 0; i < n; i++)
        memcpy(o + all, b[i].s, b[i].n), all += b[i].n;
    o[all] = 0;
    *text = o;
    *nbytes = all;
    o = NULL;
fail:
    for (int i = 0; b && i < count; i++)
        free(b[i].s);
    free(b);
    free(o);
    return st;
}

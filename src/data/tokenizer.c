/* BPE encoding and decoding over the tables tokenizer_load.c fills: added tokens are cut out
 * of the raw text first, each remaining piece is normalized ('▁' conventions), split into
 * words (pretok.c), mapped to byte-level chars when the model is byte-level, and each word's
 * symbols are merged by rank, lowest first, leftmost among equals, as Hugging Face does. */
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
    ZS_REQUIRE(t->tok && t->tok_len && t->special && t->added, ZS_ERR_OOM,
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

static int merge_find(const zs_tokenizer_t *t, int a, int b, int *merged) {
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
    int iab = zs_tok_lookup(t, ab, na + nb), old;
    ZS_REQUIRE(ia >= 0 && ib >= 0 && iab >= 0, ZS_ERR_FORMAT,
               "%s: merge %d ('%.*s' '%.*s'): '%.*s' is not in the vocabulary", t->what, rank,
               (int)na, a, (int)nb, b,
               ia < 0   ? (int)na
               : ib < 0 ? (int)nb
                        : (int)(na + nb),
               ia < 0   ? a
               : ib < 0 ? b
                        : ab);
    if (merge_find(t, ia, ib, &old) >= 0) goto fail; /* a repeat: the first rank stands */
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

/* ---- encode ------------------------------------------------------------------------------ */

typedef struct ids {
    int32_t *v;
    int n, cap;
} ids;

static zs_status push(ids *o, int32_t id) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        int32_t *g = realloc(o->v, (size_t)cap * sizeof *g);
        if (!g) return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
        o->v = g;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return ZS_OK;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 map in
 * order to U+0100.., so every byte is a visible char (space is 'Ġ' U+0120). */
static uint32_t byte_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    return 256 + k;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

typedef struct enc {
    const zs_tokenizer_t *t;
    const char *text;
    ids *out;
    ids sym;       /* the word's symbols being merged */
    int32_t *rank; /* rank of the pair (sym[i], sym[i+1]), -1 if none */
    int rcap;
} enc;

/* The initial symbols of one char: its token, else its bytes as <0xNN>, else <unk>. */
static zs_status char_symbols(enc *e, const char *s, size_t n) {
    const zs_tokenizer_t *t = e->t;
    int id = zs_tok_lookup(t, s, n);
    if (id >= 0) return push(&e->sym, id);
    if (t->byte_fallback) {
        for (size_t i = 0; i < n; i++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)s[i]);
            int b = zs_tok_lookup(t, hex, 6);
            if (b < 0)
                return zs_error(ZS_ERR_FORMAT, "%s: byte_fallback is set but %s is not a token",
                                t->what, hex);
            zs_status st = push(&e->sym, b);
            if (st != ZS_OK) return st;
        }
        return ZS_OK;
    }
    if (t->unk >= 0) {
        /* fuse_unk as SentencePiece does: a run of unknown chars is one <unk>. */
        if (e->sym.n && e->sym.v[e->sym.n - 1] == t->unk) return ZS_OK;
        return push(&e->sym, t->unk);
    }
    return zs_error(ZS_ERR_INVALID,
                    "%s: the text has '%.*s', which is no token, and the tokenizer has neither "
                    "byte_fallback nor an unk_token",
                    t->what, (int)n, s);
}

static zs_status bpe_word(enc *e, const char *w, size_t n) {
    zs_status st = ZS_OK;
    const zs_tokenizer_t *t = e->t;
    int whole = t->ignore_merges ? zs_tok_lookup(t, w, n) : -1;
    if (whole >= 0) return push(e->out, whole);
    e->sym.n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = zs_tok_utf8((const unsigned char *)w + i, n - i, &cp);
        ZS_CHECK(char_symbols(e, w + i, k));
        i += k;
    }
    if (e->sym.n > e->rcap) {
        int32_t *g = realloc(e->rank, (size_t)e->sym.n * sizeof *g);
        ZS_REQUIRE(g, ZS_ERR_OOM, "tokenizer: out of memory");
        e->rank = g;
        e->rcap = e->sym.n;
    }
    int32_t *s = e->sym.v, *r = e->rank, m;
    int ns = e->sym.n;
    for (int i = 0; i + 1 < ns; i++)
        r[i] = merge_find(t, s[i], s[i + 1], &m);
    for (;;) {
        int best = -1;
        for (int i = 0; i + 1 < ns; i++)
            if (r[i] >= 0 && (best < 0 || r[i] < r[best])) best = i;
        if (best < 0) break;
        merge_find(t, s[best], s[best + 1], &s[best]);
        memmove(s + best + 1, s + best + 2, (size_t)(ns - best - 2) * sizeof *s);
        memmove(r + best + 1, r + best + 2, (size_t)(ns - best - 2) * sizeof *r);
        ns--;
        if (best > 0) r[best - 1] = merge_find(t, s[best - 1], s[best], &m);
        if (best + 1 < ns) r[best] = merge_find(t, s[best], s[best + 1], &m);
    }
    for (int i = 0; i < ns; i++)
        ZS_CHECK(push(e->out, s[i]));
fail:
    return st;
}

static zs_status emit_word(void *ctx, size_t start, size_t len) {
    enc *e = ctx;
    const char *w = e->text + start;
    if (!e->t->byte_level) return bpe_word(e, w, len);
    char *m = malloc(2 * len + 1); /* each byte's char is at most 2 UTF-8 bytes (< U+0144) */
    if (!m) return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        k += put_utf8(m + k, byte_char((unsigned char)w[i]));
    zs_status st = bpe_word(e, m, k);
    free(m);
    return st;
}

/* One stretch of text between added tokens: normalize, pre-tokenize, merge. */
static zs_status encode_piece(enc *e, const char *s, size_t n, int at_start) {
    const zs_tokenizer_t *t = e->t;
    static const char meta[] = "\xE2\x96\x81"; /* '▁' U+2581 */
    if (n == 0) return ZS_OK;
    char *b = malloc(3 * n + 4);
    if (!b) return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
    size_t k = 0;
    int starts_meta = t->replace_space ? s[0] == ' ' : n >= 3 && !memcmp(s, meta, 3);
    if (t->prepend == ZS_TOK_PREPEND_ALWAYS ||
        (t->prepend == ZS_TOK_PREPEND_META && !starts_meta) ||
        (t->prepend == ZS_TOK_PREPEND_FIRST && at_start && !starts_meta))
        memcpy(b, meta, 3), k = 3;
    else if (t->prefix_space && s[0] != ' ')
        b[k++] = ' ';
    for (size_t i = 0; i < n; i++) {
        if (t->replace_space && s[i] == ' ')
            memcpy(b + k, meta, 3), k += 3;
        else
            b[k++] = s[i];
    }
    e->text = b;
    zs_status st = zs_tok_pretokenize(t->split, b, k, emit_word, e);
    free(b);
    return st;
}

zs_status zs_tokenizer_encode(const zs_tokenizer_t *t, const char *text, size_t nbytes,
                              int add_special, int32_t **out_ids, int *count) {
    zs_status st = ZS_OK;
    ids out = {0};
    enc e = {.t = t, .out = &out};
    *out_ids = NULL;
    *count = 0;
    for (int i = 0; add_special && i < t->n_pre; i++)
        ZS_CHECK(push(&out, t->pre[i]));
    size_t piece = 0;
    for (size_t i = 0; i <= nbytes;) {
        /* The longest added token starting here, as the Aho-Corasick leftmost-longest match
         * Hugging Face uses would pick. */
        int best = -1;
        for (int a = 0; i < nbytes && a < t->n_added; a++) {
            int id = t->added[a];
            size_t L = (size_t)t->tok_len[id];
            if (L && L <= nbytes - i && !memcmp(text + i, t->tok[id], L) &&
                (best < 0 || L > (size_t)t->tok_len[best]))
                best = id;
        }
        if (best < 0 && i < nbytes) {
            i++;
            continue;
        }
        ZS_CHECK(encode_piece(&e, text + piece, i - piece, piece == 0));
        if (best < 0) break;
        ZS_CHECK(push(&out, best));
        i += (size_t)t->tok_len[best];
        piece = i;
    }
    for (int i = 0; add_special && i < t->n_post; i++)
        ZS_CHECK(push(&out, t->post[i]));
    *out_ids = out.v ? out.v : malloc(sizeof(int32_t));
    ZS_REQUIRE(*out_ids, ZS_ERR_OOM, "tokenizer: out of memory");
    *count = out.n;
    out.v = NULL;
fail:
    free(out.v);
    free(e.sym.v);
    free(e.rank);
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
        inv[byte_char(c)] = (int)c;
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

/* Encoding, as Hugging Face tokenizers does it: added tokens are cut out of the raw text first,
 * each remaining piece is normalized ('▁' conventions) and split on the added tokens that
 * match normalized text, split into words (pretok.c), mapped to byte-level chars when the
 * model is byte-level, and each word's symbols are merged by rank, lowest first, leftmost
 * among equals. The merge runs over a linked list of symbols with a heap of candidate pairs,
 * O(n log n) in the word's length: a SentencePiece-style model has no pre-tokenizer split, so
 * a whole document can be one word. */
#include "core/status.h"
#include "data/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META "\xE2\x96\x81" /* '▁' U+2581 */

struct zs_tok_encoder {
    const zs_tokenizer_t *t;
    int32_t *out; /* the ids of the current call */
    size_t n_out, cap_out;
    char *norm; /* a normalized piece */
    size_t cap_norm;
    char *word; /* a byte-level word as chars, for the ignore_merges lookup */
    size_t cap_word;
    int32_t *sym, *prev, *next; /* the word's symbols: id (-1 once merged away), links */
    size_t cap_sym;
    uint64_t *heap; /* candidate merges: rank << 32 | position, smallest first */
    size_t n_heap, cap_heap;
    zs_tok_cpbuf cps;
    const char *text; /* the piece emit_word's offsets are into */
    zs_tok_counts counts;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *g = realloc(*p, c * elem);
    if (!g) return 0;
    *p = g;
    *cap = c;
    return 1;
}

#define GROW(p, cap, need)                                                                         \
    do {                                                                                           \
        if (!grow((void **)&(p), &(cap), (need), sizeof *(p)))                                     \
            return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");                               \
    } while (0)

static zs_status push(zs_tok_encoder_t *e, int32_t id) {
    GROW(e->out, e->cap_out, e->n_out + 1);
    e->out[e->n_out++] = id;
    return ZS_OK;
}

uint32_t zs_tok_byte_char(unsigned b) {
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

/* ---- tables built after loading ----------------------------------------------------------- */

/* The normalizer on s[0, n) into o (room for 3n + 3 bytes): Prepend '▁' and Replace ' ' ->
 * '▁' as the settings say. at_start: the piece begins the text (Metaspace "first"). */
static size_t normalize(const zs_tokenizer_t *t, const char *s, size_t n, int at_start, char *o) {
    size_t k = 0;
    if (n == 0) return 0;
    int starts_meta = t->replace_space ? s[0] == ' ' : n >= 3 && !memcmp(s, META, 3);
    if (t->prepend == ZS_TOK_PREPEND_ALWAYS ||
        (t->prepend == ZS_TOK_PREPEND_META && !starts_meta) ||
        (t->prepend == ZS_TOK_PREPEND_FIRST && at_start && !starts_meta))
        memcpy(o, META, 3), k = 3;
    else if (t->prefix_space && s[0] != ' ')
        o[k++] = ' ';
    for (size_t i = 0; i < n; i++) {
        if (t->replace_space && s[i] == ' ')
            memcpy(o + k, META, 3), k += 3;
        else
            o[k++] = s[i];
    }
    return k;
}

/* Order the n strings s[i] (len[i] bytes, never empty) by first byte, longest first, into
 * order[]; at[b] .. at[b + 1] is first byte b's range. */
static void index_by_byte(char **s, const int *len, int n, int *order, int at[257]) {
    int count[256] = {0};
    for (int i = 0; i < n; i++)
        count[(unsigned char)s[i][0]]++;
    at[0] = 0;
    for (int b = 0; b < 256; b++)
        at[b + 1] = at[b] + count[b];
    int fill[256];
    memcpy(fill, at, sizeof fill);
    for (int i = 0; i < n; i++)
        order[fill[(unsigned char)s[i][0]]++] = i;
    /* Within a first byte, longest first (insertion sort: few tokens share a first byte in
     * the families read here, and Llama-3's 256 specials all start with '<'). */
    for (int b = 0; b < 256; b++)
        for (int i = at[b] + 1; i < at[b + 1]; i++) {
            int v = order[i], j = i;
            while (j > at[b] && len[order[j - 1]] < len[v])
                order[j] = order[j - 1], j--;
            order[j] = v;
        }
}

zs_status zs_tok_finish(zs_tokenizer_t *t) {
    zs_status st = ZS_OK;
    int n = t->n_added, nr = 0, nn = 0;
    int *tmp_ids = calloc((size_t)(n + 1), sizeof *tmp_ids);
    int *tmp_len = calloc((size_t)(n + 1), sizeof *tmp_len);
    char **tmp_s = calloc((size_t)(n + 1), sizeof *tmp_s);
    int *order = calloc((size_t)(n + 1), sizeof *order);
    t->araw = malloc((size_t)(n + 1) * sizeof *t->araw);
    t->anorm = malloc((size_t)(n + 1) * sizeof *t->anorm);
    t->anorm_str = calloc((size_t)(n + 1), sizeof *t->anorm_str);
    t->anorm_len = calloc((size_t)(n + 1), sizeof *t->anorm_len);
    t->cp_id = malloc(0x10000 * sizeof *t->cp_id);
    ZS_REQUIRE(tmp_ids && tmp_len && tmp_s && order && t->araw && t->anorm && t->anorm_str &&
                   t->anorm_len && t->cp_id,
               ZS_ERR_OOM, "%s: out of memory", t->what);
    int norm_ok =
        !t->prefix_space && t->prepend != ZS_TOK_PREPEND_META && t->prepend != ZS_TOK_PREPEND_FIRST;
    /* Raw added tokens. */
    for (int a = 0; a < n; a++) {
        int id = t->added[a];
        if ((t->added_norm[id] && norm_ok) || !t->tok_len[id]) continue;
        tmp_ids[nr] = id, tmp_s[nr] = t->tok[id], tmp_len[nr] = t->tok_len[id], nr++;
    }
    index_by_byte(tmp_s, tmp_len, nr, order, t->araw_at);
    for (int i = 0; i < nr; i++)
        t->araw[i] = tmp_ids[order[i]];
    /* Normalized ones: matched in normalized text by their normalized content. Where the
     * pre-tokenizer also changes each piece (ByteLevel's prefix space, Metaspace's '▁'), they
     * are matched in the raw text as the others (docs/tokenizer.md). */
    for (int a = 0; a < n; a++) {
        int id = t->added[a];
        if (!t->added_norm[id] || !t->tok_len[id] || !norm_ok) continue;
        char *c = malloc(3 * (size_t)t->tok_len[id] + 4);
        ZS_REQUIRE(c, ZS_ERR_OOM, "%s: out of memory", t->what);
        size_t k = normalize(t, t->tok[id], (size_t)t->tok_len[id], 1, c);
        tmp_ids[nn] = id, tmp_s[nn] = c, tmp_len[nn] = (int)k, nn++;
    }
    index_by_byte(tmp_s, tmp_len, nn, order, t->anorm_at);
    for (int i = 0; i < nn; i++) {
        t->anorm[i] = tmp_ids[order[i]];
        t->anorm_str[i] = tmp_s[order[i]];
        t->anorm_len[i] = tmp_len[order[i]];
        tmp_s[order[i]] = NULL;
    }
    /* One-char tokens: each byte's char (byte-level) and the code points below U+10000. */
    for (unsigned b = 0; b < 256; b++) {
        char c[4];
        size_t k = put_utf8(c, zs_tok_byte_char(b));
        t->byte_id[b] = zs_tok_lookup(t, c, k);
    }
    for (uint32_t cp = 0; cp < 0x10000; cp++) {
        char c[4];
        t->cp_id[cp] = -1;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        size_t k = put_utf8(c, cp);
        t->cp_id[cp] = zs_tok_lookup(t, c, k);
    }
fail:
    for (int i = 0; i < nn; i++)
        free(tmp_s[i]);
    free(tmp_ids);
    free(tmp_len);
    free(tmp_s);
    free(order);
    return st;
}

/* ---- merges -------------------------------------------------------------------------------- */

static void heap_push(zs_tok_encoder_t *e, uint64_t v) {
    uint64_t *h = e->heap;
    size_t i = e->n_heap++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(zs_tok_encoder_t *e) {
    uint64_t *h = e->heap, top = h[0], v = h[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = v;
    return top;
}

/* Merge e->sym[0, n) in place; returns the number of symbols left. Every merge pushes at most
 * two candidates, so the heap holds fewer than 3n entries. */
static size_t merge_word(zs_tok_encoder_t *e, size_t n) {
    const zs_tokenizer_t *t = e->t;
    int32_t *s = e->sym, *prev = e->prev, *next = e->next, m;
    if (n < 2) return n;
    e->n_heap = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = zs_tok_merge_find(t, s[i], s[i + 1], &m);
        if (r >= 0) heap_push(e, (uint64_t)r << 32 | i);
    }
    while (e->n_heap) {
        uint64_t top = heap_pop(e);
        int32_t rank = (int32_t)(top >> 32), p = (int32_t)(top & 0xFFFFFFFFu);
        int32_t q = next[p];
        /* A candidate is stale when its left symbol was merged away or either symbol changed:
         * then the pair at p now has another rank (ranks are unique per pair). */
        if (s[p] < 0 || q < 0 || zs_tok_merge_find(t, s[p], s[q], &m) != rank) continue;
        s[p] = m;
        s[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        int32_t r, l = prev[p];
        if (l >= 0 && (r = zs_tok_merge_find(t, s[l], s[p], &m)) >= 0)
            heap_push(e, (uint64_t)r << 32 | (uint32_t)l);
        if (next[p] >= 0 && (r = zs_tok_merge_find(t, s[p], s[next[p]], &m)) >= 0)
            heap_push(e, (uint64_t)r << 32 | (uint32_t)p);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        s[k++] = s[i];
    return k;
}

/* ---- words --------------------------------------------------------------------------------- */

static zs_status sym_room(zs_tok_encoder_t *e, size_t need) {
    if (need <= e->cap_sym) return ZS_OK;
    size_t cap = e->cap_sym;
    int32_t *a = e->sym, *b = e->prev, *c = e->next;
    if (!grow((void **)&a, &cap, need, sizeof *a)) return zs_error(ZS_ERR_OOM, "tokenizer: oom");
    e->sym = a;
    cap = e->cap_sym;
    if (!grow((void **)&b, &cap, need, sizeof *b)) return zs_error(ZS_ERR_OOM, "tokenizer: oom");
    e->prev = b;
    cap = e->cap_sym;
    if (!grow((void **)&c, &cap, need, sizeof *c)) return zs_error(ZS_ERR_OOM, "tokenizer: oom");
    e->next = c;
    e->cap_sym = cap;
    GROW(e->heap, e->cap_heap, 3 * cap);
    return ZS_OK;
}

/* The initial symbols of word w[0, n), as Hugging Face's BPE makes them: each char's token;
 * else, with byte_fallback, its bytes' <0xNN> tokens (when all exist); else the unk token
 * (consecutive ones fused when fuse_unk), put in when the next known char comes; else the
 * char is dropped. Returns the symbol count. */
static zs_status word_symbols(zs_tok_encoder_t *e, const char *w, size_t n, size_t *ns) {
    const zs_tokenizer_t *t = e->t;
    size_t k = 0;
    int pending_unk = 0;
    zs_status st = sym_room(e, n + 1);
    if (st != ZS_OK) return st;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = zs_tok_utf8((const unsigned char *)w + i, n - i, &cp);
        int32_t id;
        if (cp < 0x10000 && (len > 1 || cp < 0x80))
            id = t->cp_id[cp];
        else
            id = zs_tok_lookup(t, w + i, len);
        if (id >= 0) {
            if (pending_unk) e->sym[k++] = t->unk, pending_unk = 0, e->counts.unk++;
            e->sym[k++] = id;
        } else {
            int all = t->byte_fallback;
            int32_t bid[4];
            for (size_t j = 0; all && j < len; j++) {
                char hex[8];
                snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)w[i + j]);
                bid[j] = zs_tok_lookup(t, hex, 6);
                all = bid[j] >= 0;
            }
            if (all) {
                /* Hugging Face puts these in before a pending unk token (it flushes that only
                 * when a known char comes). */
                for (size_t j = 0; j < len; j++)
                    e->sym[k++] = bid[j];
                e->counts.byte_fallback += (int64_t)len;
            } else if (t->unk >= 0) {
                if (pending_unk && !t->fuse_unk) e->sym[k++] = t->unk, e->counts.unk++;
                pending_unk = 1;
            } else {
                e->counts.dropped++;
            }
        }
        i += len;
    }
    if (pending_unk) e->sym[k++] = t->unk, e->counts.unk++;
    *ns = k;
    return ZS_OK;
}

static zs_status bpe_word(zs_tok_encoder_t *e, const char *w, size_t n) {
    const zs_tokenizer_t *t = e->t;
    size_t ns;
    if (t->ignore_merges) {
        int whole = zs_tok_lookup(t, w, n);
        if (whole >= 0) return push(e, whole);
    }
    zs_status st = word_symbols(e, w, n, &ns);
    if (st != ZS_OK) return st;
    ns = merge_word(e, ns);
    if (ns == 0)
        return ZS_OK; /* every char dropped (no unk, no byte fallback): e->out may be NULL */
    GROW(e->out, e->cap_out, e->n_out + ns);
    memcpy(e->out + e->n_out, e->sym, ns * sizeof *e->sym);
    e->n_out += ns;
    return ZS_OK;
}

/* A byte-level word: the bytes' chars are the symbols. When every byte's char is a token (a
 * byte-level vocabulary has all 256) the symbols come from a table, and the chars are spelled
 * out only for ignore_merges' whole-word lookup. */
static zs_status byte_level_word(zs_tok_encoder_t *e, const unsigned char *w, size_t n) {
    const zs_tokenizer_t *t = e->t;
    int all = 1;
    for (size_t i = 0; i < n && all; i++)
        all = t->byte_id[w[i]] >= 0;
    if (all && !t->ignore_merges) {
        zs_status st = sym_room(e, n + 1);
        if (st != ZS_OK) return st;
        for (size_t i = 0; i < n; i++)
            e->sym[i] = t->byte_id[w[i]];
        size_t ns = merge_word(e, n);
        if (ns == 0) return ZS_OK;
        GROW(e->out, e->cap_out, e->n_out + ns);
        memcpy(e->out + e->n_out, e->sym, ns * sizeof *e->sym);
        e->n_out += ns;
        return ZS_OK;
    }
    GROW(e->word, e->cap_word, 2 * n + 1); /* each byte's char is at most 2 bytes (< U+0144) */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += put_utf8(e->word + k, zs_tok_byte_char(w[i]));
    return bpe_word(e, e->word, k);
}

static zs_status emit_word(void *ctx, size_t start, size_t len) {
    zs_tok_encoder_t *e = ctx;
    const char *w = e->text + start;
    if (e->t->byte_level) return byte_level_word(e, (const unsigned char *)w, len);
    return bpe_word(e, w, len);
}

static zs_status split_words(zs_tok_encoder_t *e, const char *s, size_t n) {
    e->text = s;
    return zs_tok_pretokenize(e->t->split, s, n, emit_word, e, &e->cps);
}

/* The added token at s[i] (longest first) from an index, or -1. */
static int added_at(const int *ids, const int at[257], char *const *str, const int *len,
                    const zs_tokenizer_t *t, const char *s, size_t i, size_t n, size_t *L) {
    unsigned b = (unsigned char)s[i];
    for (int k = at[b]; k < at[b + 1]; k++) {
        const char *c = str ? str[k] : t->tok[ids[k]];
        size_t l = (size_t)(len ? len[k] : t->tok_len[ids[k]]);
        if (l <= n - i && !memcmp(s + i, c, l)) {
            *L = l;
            return ids[k];
        }
    }
    return -1;
}

/* One stretch of text between raw added tokens: normalize, cut at normalized added tokens,
 * pre-tokenize, merge. */
static zs_status encode_piece(zs_tok_encoder_t *e, const char *s, size_t n, int at_start) {
    const zs_tokenizer_t *t = e->t;
    if (n == 0) return ZS_OK;
    GROW(e->norm, e->cap_norm, 3 * n + 4);
    size_t k = normalize(t, s, n, at_start, e->norm);
    const char *b = e->norm;
    if (t->anorm_at[256] == 0) return split_words(e, b, k);
    size_t piece = 0;
    for (size_t i = 0; i < k;) {
        size_t L = 0;
        int id = added_at(t->anorm, t->anorm_at, t->anorm_str, t->anorm_len, t, b, i, k, &L);
        if (id < 0) {
            i++;
            continue;
        }
        zs_status st = split_words(e, b + piece, i - piece);
        if (st == ZS_OK) st = push(e, id);
        if (st != ZS_OK) return st;
        i += L;
        piece = i;
    }
    return split_words(e, b + piece, k - piece);
}

/* ---- entry points -------------------------------------------------------------------------- */

zs_status zs_tok_encoder_create(const zs_tokenizer_t *t, zs_tok_encoder_t **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
    (*out)->t = t;
    return ZS_OK;
}

void zs_tok_encoder_destroy(zs_tok_encoder_t *e) {
    if (!e) return;
    free(e->out);
    free(e->norm);
    free(e->word);
    free(e->sym);
    free(e->prev);
    free(e->next);
    free(e->heap);
    free(e->cps.cp);
    free(e->cps.off);
    free(e);
}

const zs_tok_counts *zs_tok_encoder_counts(const zs_tok_encoder_t *e) {
    return &e->counts;
}

zs_status zs_tok_encoder_encode(zs_tok_encoder_t *e, const char *text, size_t nbytes,
                                int add_special, const int32_t **ids, size_t *count) {
    zs_status st = ZS_OK;
    const zs_tokenizer_t *t = e->t;
    e->n_out = 0;
    *ids = NULL;
    *count = 0;
    for (int i = 0; add_special && i < t->n_pre; i++)
        ZS_CHECK(push(e, t->pre[i]));
    size_t piece = 0;
    for (size_t i = 0; i < nbytes;) {
        /* The leftmost-longest raw added token, as Hugging Face's Aho-Corasick match. */
        size_t L = 0;
        int id = t->araw_at[256] ? added_at(t->araw, t->araw_at, NULL, NULL, t, text, i, nbytes, &L)
                                 : -1;
        if (id < 0) {
            i++;
            continue;
        }
        ZS_CHECK(encode_piece(e, text + piece, i - piece, piece == 0));
        ZS_CHECK(push(e, id));
        i += L;
        piece = i;
    }
    ZS_CHECK(encode_piece(e, text + piece, nbytes - piece, piece == 0));
    for (int i = 0; add_special && i < t->n_post; i++)
        ZS_CHECK(push(e, t->post[i]));
    *ids = e->out;
    *count = e->n_out;
fail:
    return st;
}

zs_status zs_tokenizer_encode(const zs_tokenizer_t *t, const char *text, size_t nbytes,
                              int add_special, int32_t **ids, int *count) {
    zs_tok_encoder_t *e = NULL;
    const int32_t *v;
    size_t n = 0;
    *ids = NULL;
    *count = 0;
    zs_status st = zs_tok_encoder_create(t, &e);
    if (st == ZS_OK) st = zs_tok_encoder_encode(e, text, nbytes, add_special, &v, &n);
    if (st == ZS_OK && n > (size_t)(1 << 30))
        st = zs_error(ZS_ERR_INVALID, "tokenizer: %zu tokens are too many for one call", n);
    if (st == ZS_OK) {
        *ids = malloc((n ? n : 1) * sizeof **ids);
        if (!*ids) st = zs_error(ZS_ERR_OOM, "tokenizer: out of memory");
    }
    if (st == ZS_OK) {
        if (n) memcpy(*ids, v, n * sizeof **ids); /* v may be NULL when nothing was encoded */
        *count = (int)n;
    }
    zs_tok_encoder_destroy(e);
    return st;
}

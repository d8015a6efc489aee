/* Documents and samples (docs.h, docs/data.md): the document index of a split, the row of
 * one sample (pack and concat windows, pad rows), the per-epoch permutation and the split
 * moved to a document boundary. */
#include "data/docs.h"

#include "core/philox.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

#define STREAM_EPOCH 0x65706f63ull /* "epoc": the epoch permutations' Philox stream */
#define FEISTEL_ROUNDS 6

static const char *const MODE_NAMES[] = {"none", "pack", "concat", "pad"};

const char *zs_docs_mode_name(zs_docs_mode m) {
    return m >= ZS_DOCS_NONE && m <= ZS_DOCS_PAD ? MODE_NAMES[m] : "?";
}

zs_status zs_docs_mode_parse(const char *name, zs_docs_mode *out) {
    for (int m = ZS_DOCS_NONE; m <= ZS_DOCS_PAD; m++)
        if (name && !strcmp(name, MODE_NAMES[m])) {
            *out = (zs_docs_mode)m;
            return ZS_OK;
        }
    return zs_error(ZS_ERR_INVALID, "--docs '%s' is not one of pack, concat, pad (or none)",
                    name ? name : "");
}

int zs_docs_have_boundaries(const zs_doc_rules *r) {
    return r->sep || r->eos_id >= 0;
}

/* Whether a document ends with token i: it is the newline of a separator line (text with a
 * separator), else the end-of-document id. A line's one trailing CR is not part of it (CRLF
 * files), as tokenize reads lines (corpus.c). */
static int ends_doc(const zs_tokens *t, const zs_doc_rules *r, size_t seplen, int64_t i) {
    if (!r->sep) return r->eos_id >= 0 && t->tok[i] == (uint64_t)r->eos_id;
    if (t->tok[i] != '\n') return 0;
    int64_t e = i > 0 && t->tok[i - 1] == '\r' ? i - 1 : i; /* the line's end, CR left out */
    if (e < (int64_t)seplen) return 0;
    int64_t s = e - (int64_t)seplen; /* the separator's first byte; a line starts there */
    if (s > 0 && t->tok[s - 1] != '\n') return 0;
    for (size_t k = 0; k < seplen; k++)
        if (t->tok[s + (int64_t)k] != (unsigned char)r->sep[k]) return 0;
    return 1;
}

/* Rows of a document of len tokens: its len - 1 targets in rows of at most T. */
static int64_t doc_rows(int64_t len, int T) {
    return len < 2 ? 0 : (len - 1 + T - 1) / T;
}

zs_status zs_docs_index(const zs_tokens *t, const zs_doc_rules *r, const char *what,
                        zs_doc_index *ix) {
    zs_status st = ZS_OK;
    const int T = r->seq;
    size_t seplen = r->sep ? strlen(r->sep) : 0;
    memset(ix, 0, sizeof *ix);
    ix->tok = t;
    ZS_REQUIRE(T > 0, ZS_ERR_INVALID, "documents: sequence length %d", T);
    /* Count, then record, the documents: one ends after every marker, and a trailing run
     * without one is the last. */
    int64_t n = 0;
    for (int64_t i = 0; i < t->n; i++)
        n += ends_doc(t, r, seplen, i) || i == t->n - 1;
    ix->n_docs = n;
    ix->start = malloc((size_t)(n + 1) * sizeof *ix->start);
    ZS_REQUIRE(ix->start, ZS_ERR_OOM, "documents of %s: out of memory for %lld starts", what,
               (long long)n);
    int64_t d = 0;
    ix->start[0] = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (ends_doc(t, r, seplen, i) || i == t->n - 1) ix->start[++d] = i + 1;
    if (r->mode == ZS_DOCS_PAD) {
        ix->row_first = malloc((size_t)(n + 1) * sizeof *ix->row_first);
        ZS_REQUIRE(ix->row_first, ZS_ERR_OOM, "documents of %s: out of memory", what);
        ix->row_first[0] = 0;
        for (int64_t k = 0; k < n; k++)
            ix->row_first[k + 1] = ix->row_first[k] + doc_rows(ix->start[k + 1] - ix->start[k], T);
        ix->n_samples = ix->row_first[n];
        ZS_REQUIRE(ix->n_samples > 0, ZS_ERR_INVALID,
                   "%s: none of its %lld documents has two tokens, so --docs pad has nothing to "
                   "predict",
                   what, (long long)n);
    } else {
        ix->n_samples = t->n > T ? (t->n - 1) / T : 0;
        ZS_REQUIRE(ix->n_samples > 0, ZS_ERR_INVALID,
                   "%s: %lld tokens are shorter than one window of %d (+1) tokens", what,
                   (long long)t->n, T);
    }
    return ZS_OK;
fail:
    zs_docs_index_free(ix);
    return st;
}

void zs_docs_index_free(zs_doc_index *ix) {
    if (!ix) return;
    free(ix->start);
    free(ix->row_first);
    memset(ix, 0, sizeof *ix);
}

/* The first k with a[k] > x in sorted a[0, n) (n if none). */
static int64_t upper_bound(const int64_t *a, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* An empty row: padding that attends to itself only and predicts nothing. */
static int empty_row(const zs_doc_rules *r, int32_t *in, int32_t *tg, int32_t *seg) {
    for (int j = 0; j < r->seq; j++) {
        in[j] = r->pad_id;
        tg[j] = -1;
        if (seg) seg[j] = j;
    }
    return 0;
}

/* Window w: tokens [w T, w T + T] as T inputs and their next tokens. In PACK a token at a
 * document start begins a segment, and the target that is the next document's first token is
 * left out (HF's packing with position_ids). */
static int window_row(const zs_doc_index *ix, const zs_doc_rules *r, int64_t w, int32_t *in,
                      int32_t *tg, int32_t *seg) {
    const int T = r->seq;
    const int64_t o = w * T, *start = ix->start;
    const uint32_t *tok = ix->tok->tok;
    int pack = r->mode == ZS_DOCS_PACK, real = 0;
    /* start[k] is the next document start after o + j - 1 (start[n_docs], the split's end, is
     * past every token a window reads). */
    int64_t k = upper_bound(start, ix->n_docs + 1, o);
    for (int j = 0; j < T; j++) {
        int begins = j > 0 && start[k] == o + j;
        k += begins;
        int crosses = pack && start[k] == o + j + 1;
        in[j] = (int32_t)tok[o + j];
        tg[j] = crosses ? -1 : (int32_t)tok[o + j + 1];
        if (seg) seg[j] = !pack || j == 0 ? 0 : begins ? j : seg[j - 1];
        real += !crosses;
    }
    return real;
}

/* Pad row: document d's chunk c, its targets in the first m positions, padding after. */
static int pad_row(const zs_doc_index *ix, const zs_doc_rules *r, int64_t row, int32_t *in,
                   int32_t *tg, int32_t *seg) {
    const int T = r->seq;
    int64_t d = upper_bound(ix->row_first, ix->n_docs + 1, row) - 1;
    int64_t c = row - ix->row_first[d];
    int64_t s = ix->start[d] + c * T, len = ix->start[d + 1] - s;
    int m = len - 1 < T ? (int)(len - 1) : T;
    const uint32_t *tok = ix->tok->tok;
    for (int j = 0; j < T; j++) {
        int real = j < m;
        in[j] = real ? (int32_t)tok[s + j] : r->pad_id;
        tg[j] = real ? (int32_t)tok[s + j + 1] : -1;
        if (seg) seg[j] = real ? 0 : j;
    }
    return m;
}

int zs_docs_row(const zs_doc_index *ix, const zs_doc_rules *r, int64_t sample, int32_t *in,
                int32_t *tg, int32_t *seg) {
    if (sample < 0 || sample >= ix->n_samples) return empty_row(r, in, tg, seg);
    if (r->mode == ZS_DOCS_PAD) return pad_row(ix, r, sample, in, tg, seg);
    return window_row(ix, r, sample, in, tg, seg);
}

int zs_docs_row_targets(const zs_doc_index *ix, const zs_doc_rules *r, int64_t sample) {
    const int T = r->seq;
    if (sample < 0 || sample >= ix->n_samples) return 0;
    if (r->mode == ZS_DOCS_PAD) {
        int64_t d = upper_bound(ix->row_first, ix->n_docs + 1, sample) - 1;
        int64_t len = ix->start[d + 1] - ix->start[d] - (sample - ix->row_first[d]) * T;
        return len - 1 < T ? (int)(len - 1) : T;
    }
    if (r->mode != ZS_DOCS_PACK) return T;
    /* One target is left out per document start in (o + 1 .. o + T). */
    int64_t o = sample * T;
    int64_t a = upper_bound(ix->start, ix->n_docs + 1, o);
    int64_t b = upper_bound(ix->start, ix->n_docs + 1, o + T);
    return T - (int)(b - a);
}

/* One Feistel round function: Philox of (seed, epoch, round, half). */
static uint64_t round_fn(uint64_t seed, int64_t epoch, int round, uint64_t half) {
    uint64_t stream = STREAM_EPOCH ^ ((uint64_t)epoch << 32);
    return zs_philox_u64(seed, stream, ((uint64_t)round << 56) | half);
}

int64_t zs_docs_permute(uint64_t seed, int64_t epoch, int64_t n, int64_t pos) {
    if (n <= 1) return 0;
    /* The smallest even bit count whose domain holds n: two halves of `half` bits, a domain
     * below 4n, so cycle walking takes under four tries on average. */
    int bits = 2;
    while (bits < 62 && ((int64_t)1 << bits) < n)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1, x = (uint64_t)pos;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
            uint64_t next = L ^ (round_fn(seed, epoch, k, R) & mask);
            L = R;
            R = next;
        }
        x = (L << half) | R;
    } while (x >= (uint64_t)n); /* a bijection of the domain: the walk comes back into [0, n) */
    return (int64_t)x;
}

int64_t zs_docs_steps_per_epoch(int64_t n, int batch) {
    return (n + batch - 1) / batch;
}

int64_t zs_docs_step_sample(uint64_t seed, int64_t n, int batch, int64_t step, int i) {
    int64_t spe = zs_docs_steps_per_epoch(n, batch);
    int64_t epoch = (step - 1) / spe, pos = (step - 1) % spe * batch + i;
    return pos < n ? zs_docs_permute(seed, epoch, n, pos) : -1;
}

zs_status zs_docs_align_split(zs_dataset *d, const zs_doc_rules *r) {
    if (!zs_docs_have_boundaries(r) || d->train.n == 0 || d->val.n < 2) return ZS_OK;
    /* The tail was copied from the end of the training tokens, which d->train.tok still holds:
     * move the cut to just after the first document end at or after it. */
    size_t seplen = r->sep ? strlen(r->sep) : 0;
    zs_tokens all = {d->train.tok, d->train.n + d->val.n};
    int64_t cut = d->train.n, i = cut - 1;
    while (i < all.n - 2 && !ends_doc(&all, r, seplen, i))
        i++;
    if (!ends_doc(&all, r, seplen, i)) return ZS_OK; /* no boundary in the tail: keep the cut */
    int64_t k = i + 1 - cut;
    d->train.n += k;
    memmove(d->val.tok, d->val.tok + k, (size_t)(d->val.n - k) * sizeof *d->val.tok);
    d->val.n -= k;
    return ZS_OK;
}

uint64_t zs_docs_fingerprint(const zs_tokens *train, const zs_doc_rules *r) {
    uint64_t h = 1469598103934665603ull;
    const uint64_t prime = 1099511628211ull;
#define MIX(v)                                                                                     \
    do {                                                                                           \
        uint64_t v_ = (uint64_t)(v);                                                               \
        for (int b_ = 0; b_ < 8; b_++) {                                                           \
            h ^= (v_ >> (8 * b_)) & 0xff;                                                          \
            h *= prime;                                                                            \
        }                                                                                          \
    } while (0)
    MIX(r->mode);
    MIX(r->seq);
    MIX(r->sep ? -2 : r->eos_id);
    MIX(r->pad_id);
    for (const char *c = r->sep; c && *c; c++)
        MIX((unsigned char)*c);
    MIX(train->n);
    /* A token at a time (not a byte): one multiply per token, about a second per 10^9. */
    for (int64_t i = 0; i < train->n; i++) {
        h ^= train->tok[i];
        h *= prime;
    }
#undef MIX
    return h;
}

/* Pre-tokenization: the regexes of GPT-2, Llama-3 and Qwen2 written as hand matchers (no
 * regex engine in a C library), and the Metaspace split. \p{L}, \p{N} and \s are the Unicode
 * general categories and White_Space property of unicode_class.c (generated from the Unicode
 * database), as the Oniguruma engine of Hugging Face tokenizers reads them. */
#include "core/status.h"
#include "data/tokenizer_internal.h"

#include <stdlib.h>

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER }; /* zs_tok_unicode_class's values */

static int cls(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return C_SPACE;
        return C_OTHER;
    }
    return zs_tok_unicode_class(cp);
}

size_t zs_tok_utf8(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 1 || len == 0 || len > n) {
        *cp = c;
        return 1;
    }
    uint32_t v = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = c;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = c;
        return 1;
    }
    *cp = v;
    return len;
}

/* The text decoded once: code point i spans bytes off[i] .. off[i + 1]. */
typedef zs_tok_cpbuf cps;

static int cl(const cps *c, size_t i) {
    return i < c->n ? cls(c->cp[i]) : -1;
}
static int is_nl(const cps *c, size_t i) {
    return i < c->n && (c->cp[i] == '\r' || c->cp[i] == '\n');
}
static size_t run(const cps *c, size_t i, int k) {
    while (i < c->n && cls(c->cp[i]) == k)
        i++;
    return i;
}
/* Simple case folding of the letters the contractions use: ASCII, and U+017F (long s), which
 * folds to 's' in the case-insensitive match of Llama-3's pattern. */
static uint32_t lower(uint32_t cp) {
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp == 0x17F ? 's' : cp;
}

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for Llama-3/Qwen2): end index, or 0. */
static size_t contraction(const cps *c, size_t i, int icase) {
    if (c->cp[i] != '\'' || i + 1 >= c->n) return 0;
    uint32_t a = c->cp[i + 1], b = i + 2 < c->n ? c->cp[i + 2] : 0;
    if (icase) a = lower(a), b = lower(b);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

/* \s+(?!\S) then \s+ at a whitespace code point i: a run that reaches the end of the text or
 * is one long is taken whole; otherwise its last whitespace stays for the next word (so
 * "  hello" gives " " and " hello"). */
static size_t spaces(const cps *c, size_t i) {
    size_t e = run(c, i, C_SPACE);
    return e == c->n || e - i == 1 ? e : e - 1;
}

static size_t match_gpt2(const cps *c, size_t i) {
    size_t e;
    if ((e = contraction(c, i, 0))) return e;
    size_t j = i + (c->cp[i] == ' ');
    int k = cl(c, j);
    if (k == C_LETTER || k == C_NUMBER || k == C_OTHER) return run(c, j, k);
    return spaces(c, i);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+ with D = 3 (Llama-3) or 1 (Qwen2). */
static size_t match_llama3(const cps *c, size_t i, size_t digits) {
    size_t e;
    if ((e = contraction(c, i, 1))) return e;
    int k = cl(c, i);
    if (k == C_LETTER) return run(c, i, C_LETTER);
    if (k != C_NUMBER && !is_nl(c, i) && cl(c, i + 1) == C_LETTER) return run(c, i + 1, C_LETTER);
    if (k == C_NUMBER) {
        for (e = i; e < c->n && e - i < digits && cls(c->cp[e]) == C_NUMBER; e++) {
        }
        return e;
    }
    size_t j = i + (c->cp[i] == ' ');
    if (cl(c, j) == C_OTHER) {
        e = run(c, j, C_OTHER);
        while (is_nl(c, e))
            e++;
        return e;
    }
    /* k is C_SPACE here. \s*[\r\n]+ ends after the run's last newline, when it has one. */
    size_t end = run(c, i, C_SPACE), last = end;
    for (size_t q = i; q < end; q++)
        if (is_nl(c, q)) last = q;
    if (last != end) return last + 1;
    return spaces(c, i);
}

static zs_status split_regex(zs_tok_split split, const char *text, size_t n, zs_tok_emit_fn emit,
                             void *ctx, zs_tok_cpbuf *c) {
    zs_status st = ZS_OK;
    if (n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < n + 1)
            cap *= 2;
        uint32_t *cp = realloc(c->cp, cap * sizeof *cp);
        if (cp) c->cp = cp;
        size_t *off = cp ? realloc(c->off, cap * sizeof *off) : NULL;
        if (off) c->off = off;
        ZS_REQUIRE(cp && off, ZS_ERR_OOM, "tokenizer: out of memory splitting %zu bytes", n);
        c->cap = cap;
    }
    c->n = 0;
    for (size_t b = 0; b < n; c->n++) {
        c->off[c->n] = b;
        b += zs_tok_utf8((const unsigned char *)text + b, n - b, &c->cp[c->n]);
    }
    c->off[c->n] = n;
    for (size_t i = 0; i < c->n;) {
        size_t e = split == ZS_TOK_SPLIT_GPT2     ? match_gpt2(c, i)
                   : split == ZS_TOK_SPLIT_LLAMA3 ? match_llama3(c, i, 3)
                                                  : match_llama3(c, i, 1);
        ZS_ASSERT(e > i && e <= c->n);
        ZS_CHECK(emit(ctx, c->off[i], c->off[e] - c->off[i]));
        i = e;
    }
fail:
    return st;
}

zs_status zs_tok_pretokenize(zs_tok_split split, const char *text, size_t n, zs_tok_emit_fn emit,
                             void *ctx, zs_tok_cpbuf *buf) {
    if (n == 0) return ZS_OK;
    if (split == ZS_TOK_SPLIT_NONE) return emit(ctx, 0, n);
    if (split == ZS_TOK_SPLIT_METASPACE) {
        /* Each '▁' (E2 96 81) starts a new word, which keeps it (MergedWithNext). */
        size_t start = 0;
        for (size_t i = 1; i + 2 < n; i++) {
            if ((unsigned char)text[i] == 0xE2 && (unsigned char)text[i + 1] == 0x96 &&
                (unsigned char)text[i + 2] == 0x81) {
                zs_status st = emit(ctx, start, i - start);
                if (st != ZS_OK) return st;
                start = i;
            }
        }
        return emit(ctx, start, n - start);
    }
    if (buf) return split_regex(split, text, n, emit, ctx, buf);
    zs_tok_cpbuf own = {0};
    zs_status st = split_regex(split, text, n, emit, ctx, &own);
    free(own.cp);
    free(own.off);
    return st;
}

/* Pre-tokenization: the regexes of GPT-2, Llama-3 and Qwen2 written as hand matchers (no
 * regex engine in a C library), and the Metaspace split. Character classes are exact for
 * ASCII; beyond it, a code point is a letter unless a table below lists it as a space, a
 * number, or punctuation/symbol/mark. The tables cover Latin-1, general punctuation, currency,
 * arrows, math, box drawing, dingbats, emoji, CJK punctuation, fullwidth forms, combining
 * diacritics and the common decimal digits; scripts whose combining marks are not listed
 * (Indic vowel signs, Thai, Hebrew/Arabic points) can split differently from Hugging Face's
 * Unicode tables, and then give a different, still valid, encoding. */
#include "core/status.h"
#include "data/tokenizer_internal.h"

#include <stdlib.h>

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

typedef struct range {
    uint32_t lo, hi;
} range;

static const range k_space[] = {{0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                {0x205F, 0x205F}, {0x3000, 0x3000}};
/* Nd of common scripts, and the No/Nl forms users type: superscripts, fractions, Roman
 * numerals, circled numbers. */
static const range k_number[] = {
    {0xB2, 0xB3},     {0xB9, 0xB9},      {0xBC, 0xBE},     {0x660, 0x669},   {0x6F0, 0x6F9},
    {0x7C0, 0x7C9},   {0x966, 0x96F},    {0x9E6, 0x9EF},   {0xA66, 0xA6F},   {0xAE6, 0xAEF},
    {0xB66, 0xB6F},   {0xBE6, 0xBF2},    {0xC66, 0xC6F},   {0xCE6, 0xCEF},   {0xD66, 0xD78},
    {0xE50, 0xE59},   {0xED0, 0xED9},    {0xF20, 0xF33},   {0x1040, 0x1049}, {0x17E0, 0x17E9},
    {0x1810, 0x1819}, {0x2070, 0x2070},  {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189},
    {0x2460, 0x249B}, {0x24EA, 0x24FF},  {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029},
    {0xFF10, 0xFF19}, {0x1D7CE, 0x1D7FF}};
/* Punctuation, symbols, marks and format characters: neither L nor N nor space. */
static const range k_other[] = {
    {0x80, 0x84},     {0x86, 0x9F},       {0xA1, 0xA9},      {0xAB, 0xB1},     {0xB4, 0xB4},
    {0xB6, 0xB8},     {0xBB, 0xBB},       {0xBF, 0xBF},      {0xD7, 0xD7},     {0xF7, 0xF7},
    {0x2C2, 0x2C5},   {0x2D2, 0x2DF},     {0x2E5, 0x2EB},    {0x2ED, 0x2ED},   {0x2EF, 0x36F},
    {0x375, 0x375},   {0x37E, 0x37E},     {0x384, 0x385},    {0x387, 0x387},   {0x483, 0x489},
    {0x55A, 0x55F},   {0x589, 0x58A},     {0x5BE, 0x5BE},    {0x5C0, 0x5C0},   {0x5C3, 0x5C3},
    {0x5C6, 0x5C6},   {0x5F3, 0x5F4},     {0x600, 0x60F},    {0x61B, 0x61F},   {0x66A, 0x66D},
    {0x6D4, 0x6D4},   {0x964, 0x965},     {0x970, 0x970},    {0xE3F, 0xE3F},   {0xE4F, 0xE4F},
    {0x200B, 0x200F}, {0x2010, 0x2027},   {0x202A, 0x202E},  {0x2030, 0x205E}, {0x2060, 0x206F},
    {0x207A, 0x207E}, {0x208A, 0x208E},   {0x20A0, 0x20FF},  {0x2100, 0x2101}, {0x2103, 0x2106},
    {0x2108, 0x2109}, {0x2114, 0x2114},   {0x2116, 0x2118},  {0x211E, 0x2123}, {0x2125, 0x2125},
    {0x2127, 0x2127}, {0x2129, 0x2129},   {0x212E, 0x212E},  {0x213A, 0x213B}, {0x2140, 0x2144},
    {0x214A, 0x214D}, {0x214F, 0x214F},   {0x218A, 0x218B},  {0x2190, 0x245F}, {0x249C, 0x24E9},
    {0x2500, 0x2775}, {0x2794, 0x2BFF},   {0x2E00, 0x2E7F},  {0x3001, 0x3006}, {0x3008, 0x3020},
    {0x302A, 0x3030}, {0x3036, 0x3037},   {0x303D, 0x303F},  {0x3099, 0x309C}, {0x30A0, 0x30A0},
    {0x30FB, 0x30FB}, {0xFE00, 0xFE0F},   {0xFE10, 0xFE19},  {0xFE20, 0xFE6B}, {0xFEFF, 0xFEFF},
    {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20},   {0xFF3B, 0xFF40},  {0xFF5B, 0xFF65}, {0xFFE0, 0xFFEE},
    {0xFFF9, 0xFFFD}, {0x1F000, 0x1FAFF}, {0xE0000, 0xE007F}};

static int in_ranges(uint32_t cp, const range *r, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define NRANGE(a) (sizeof(a) / sizeof((a)[0]))

static int cls(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        /* \s in the regex crate: \t \n \v \f \r and space (and U+001C..U+001F are not). */
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return C_SPACE;
        return C_OTHER;
    }
    if (in_ranges(cp, k_space, NRANGE(k_space))) return C_SPACE;
    if (in_ranges(cp, k_number, NRANGE(k_number))) return C_NUMBER;
    if (in_ranges(cp, k_other, NRANGE(k_other))) return C_OTHER;
    return C_LETTER;
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
typedef struct cps {
    uint32_t *cp;
    size_t *off;
    size_t n;
} cps;

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
static uint32_t lower(uint32_t cp) {
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
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
                             void *ctx) {
    zs_status st = ZS_OK;
    cps c = {malloc((n + 1) * sizeof *c.cp), malloc((n + 1) * sizeof *c.off), 0};
    ZS_REQUIRE(c.cp && c.off, ZS_ERR_OOM, "tokenizer: out of memory splitting %zu bytes", n);
    for (size_t b = 0; b < n; c.n++) {
        c.off[c.n] = b;
        b += zs_tok_utf8((const unsigned char *)text + b, n - b, &c.cp[c.n]);
    }
    c.off[c.n] = n;
    for (size_t i = 0; i < c.n;) {
        size_t e = split == ZS_TOK_SPLIT_GPT2     ? match_gpt2(&c, i)
                   : split == ZS_TOK_SPLIT_LLAMA3 ? match_llama3(&c, i, 3)
                                                  : match_llama3(&c, i, 1);
        ZS_ASSERT(e > i && e <= c.n);
        ZS_CHECK(emit(ctx, c.off[i], c.off[e] - c.off[i]));
        i = e;
    }
fail:
    free(c.cp);
    free(c.off);
    return st;
}

zs_status zs_tok_pretokenize(zs_tok_split split, const char *text, size_t n, zs_tok_emit_fn emit,
                             void *ctx) {
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
    return split_regex(split, text, n, emit, ctx);
}

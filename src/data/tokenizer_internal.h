/* The tokenizer's tables and pipeline settings, shared by tokenizer.c (BPE, encode, decode),
 * tokenizer_load.c (the files) and pretok.c (the pre-tokenization patterns). */
#ifndef ZS_DATA_TOKENIZER_INTERNAL_H
#define ZS_DATA_TOKENIZER_INTERNAL_H

#include "data/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* Pre-tokenization splits, each a hand-written matcher of one regex (pretok.c). */
typedef enum zs_tok_split {
    ZS_TOK_SPLIT_NONE = 0,  /* the whole piece is one word */
    ZS_TOK_SPLIT_GPT2,      /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|... */
    ZS_TOK_SPLIT_LLAMA3,    /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...  */
    ZS_TOK_SPLIT_QWEN2,     /* Llama-3's with \p{N} one digit at a time */
    ZS_TOK_SPLIT_METASPACE, /* Metaspace split=true: a word starts at each '▁' */
} zs_tok_split;

/* How '▁' is put in front of a piece of text (SentencePiece conventions). */
typedef enum zs_tok_prepend {
    ZS_TOK_PREPEND_NONE = 0,
    ZS_TOK_PREPEND_ALWAYS, /* normalizer Prepend: every non-empty piece, unconditionally */
    ZS_TOK_PREPEND_META,   /* Metaspace "always": every piece not already starting with '▁' */
    ZS_TOK_PREPEND_FIRST,  /* Metaspace "first": only the piece at the start of the text */
} zs_tok_prepend;

typedef enum zs_tok_dec_kind {
    ZS_TOK_DEC_BYTELEVEL,    /* byte-level chars back to bytes */
    ZS_TOK_DEC_REPLACE,      /* each occurrence of `from` becomes `to` */
    ZS_TOK_DEC_BYTEFALLBACK, /* a <0xNN> token becomes that byte */
    ZS_TOK_DEC_FUSE,         /* all tokens become one string */
    ZS_TOK_DEC_STRIP,        /* up to `start` leading and `stop` trailing `from` chars removed */
    ZS_TOK_DEC_METASPACE,    /* '▁' -> ' ', the first token's leading space removed */
} zs_tok_dec_kind;

typedef struct zs_tok_dec {
    zs_tok_dec_kind kind;
    char from[8], to[8];
    int start, stop;
    int strip_first; /* Metaspace: prepend scheme not "never" */
} zs_tok_dec;

#define ZS_TOK_MAX_DEC 8
#define ZS_TOK_MAX_TEMPLATE 4

struct zs_tokenizer {
    char what[320]; /* the file named in messages */
    int n;          /* id table size: largest id + 1 */
    char **tok;     /* id -> token string, NULL for an unused id */
    int *tok_len;
    unsigned char *special; /* id -> 1 for an added token marked special */
    int *added;             /* ids of added tokens, matched in the raw text before anything */
    int n_added;
    uint32_t *hash; /* open addressing: string -> id + 1, 0 = empty */
    size_t hash_cap;
    uint64_t *mkey; /* merges: (left id << 32 | right id) + 1, 0 = empty */
    int32_t *mrank, *mid;
    size_t mcap;

    unsigned char *added_norm; /* id -> 1 for an added token matched after normalization */
    /* Added tokens indexed by first byte, longest first: raw ones (matched in the text) at
     * araw[araw_at[b] .. araw_at[b + 1]), normalized ones likewise in anorm (their content
     * normalized as the text is). */
    int *araw, araw_at[257], *anorm, anorm_at[257];
    char **anorm_str; /* anorm[i]'s normalized content */
    int *anorm_len;
    int32_t byte_id[256]; /* byte-level: the token of each byte's char, -1 if none */
    int32_t *cp_id;       /* code point < 0x10000 -> its one-char token, -1 if none */

    int byte_level;         /* pieces are mapped byte -> char before BPE */
    int prefix_space;       /* ByteLevel add_prefix_space */
    zs_tok_split split;     /* pre-tokenization */
    zs_tok_prepend prepend; /* SentencePiece '▁' in front */
    int replace_space;      /* ' ' -> '▁' (normalizer Replace or Metaspace) */
    int byte_fallback;      /* an unknown char becomes its <0xNN> byte tokens */
    int ignore_merges;      /* a word that is itself a token skips the merges (Llama-3) */
    int fuse_unk;           /* consecutive unknown chars give one unk token */
    int unk, eos, pad;      /* ids or -1 */
    int pre[ZS_TOK_MAX_TEMPLATE], n_pre, post[ZS_TOK_MAX_TEMPLATE], n_post; /* template */
    zs_tok_dec dec[ZS_TOK_MAX_DEC];
    int n_dec;
};

/* Tables (tokenizer.c). zs_tok_alloc sizes the id table for n ids; add_token copies s. */
zs_status zs_tok_alloc(zs_tokenizer_t *t, int n);
zs_status zs_tok_add_token(zs_tokenizer_t *t, int id, const char *s, size_t len);
zs_status zs_tok_build_hash(zs_tokenizer_t *t);
zs_status zs_tok_merges_alloc(zs_tokenizer_t *t, size_t count);
/* Add merge number `rank` of the strings a and b; both and their concatenation must be
 * tokens (else ZS_ERR_FORMAT naming them). A repeated pair keeps its first rank. */
zs_status zs_tok_add_merge(zs_tokenizer_t *t, int rank, const char *a, size_t na, const char *b,
                           size_t nb);
int zs_tok_lookup(const zs_tokenizer_t *t, const char *s, size_t len);

/* After the files are read: the added-token indexes and the one-char lookup tables that
 * encoding uses (tokenizer_encode.c). */
zs_status zs_tok_finish(zs_tokenizer_t *t);
/* GPT-2's bytes_to_unicode: the char that stands for byte b in byte-level tokens. */
uint32_t zs_tok_byte_char(unsigned b);
int32_t zs_tok_merge_find(const zs_tokenizer_t *t, int32_t a, int32_t b, int32_t *merged);

/* Code points of a piece of text, kept between calls so that splitting does not allocate. */
typedef struct zs_tok_cpbuf {
    uint32_t *cp;
    size_t *off;
    size_t n, cap;
} zs_tok_cpbuf;

/* Split text[0, n) into words by the pattern: calls emit(ctx, start, len) for each, in
 * order, covering every byte (pretok.c). buf may be NULL (then allocated for this call). */
typedef zs_status (*zs_tok_emit_fn)(void *ctx, size_t start, size_t len);
zs_status zs_tok_pretokenize(zs_tok_split split, const char *text, size_t n, zs_tok_emit_fn emit,
                             void *ctx, zs_tok_cpbuf *buf);
/* The class of a code point for the regexes: 0 \p{L}, 1 \p{N}, 2 \s, 3 other
 * (unicode_class.c, generated), and the Unicode version of that table. */
int zs_tok_unicode_class(uint32_t cp);
const char *zs_tok_unicode_version(void);
/* One UTF-8 code point at s[0, n): its length in bytes; an invalid byte is one code point of
 * that byte's value (Latin-1), so every byte string splits somewhere. */
size_t zs_tok_utf8(const unsigned char *s, size_t n, uint32_t *cp);

#endif

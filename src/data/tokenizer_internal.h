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

    int byte_level;         /* pieces are mapped byte -> char before BPE */
    int prefix_space;       /* ByteLevel add_prefix_space */
    zs_tok_split split;     /* pre-tokenization */
    zs_tok_prepend prepend; /* SentencePiece '▁' in front */
    int replace_space;      /* ' ' -> '▁' (normalizer Replace or Metaspace) */
    int byte_fallback;      /* an unknown char becomes its <0xNN> byte tokens */
    int ignore_merges;      /* a word that is itself a token skips the merges (Llama-3) */
    int unk, eos;           /* ids or -1 */
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

/* Split text[0, n) into words by the pattern: calls emit(ctx, start, len) for each, in
 * order, covering every byte (pretok.c). */
typedef zs_status (*zs_tok_emit_fn)(void *ctx, size_t start, size_t len);
zs_status zs_tok_pretokenize(zs_tok_split split, const char *text, size_t n, zs_tok_emit_fn emit,
                             void *ctx);
/* One UTF-8 code point at s[0, n): its length in bytes; an invalid byte is one code point of
 * that byte's value (Latin-1), so every byte string splits somewhere. */
size_t zs_tok_utf8(const unsigned char *s, size_t n, uint32_t *cp);

#endif

/* Hugging Face tokenizers read in C: GPT-2's vocab.json + merges.txt, and a tokenizer.json
 * whose model is BPE with either the ByteLevel pre-tokenizer/decoder (GPT-2, Llama-3) or the
 * SentencePiece conventions (LLaMA-2: '▁' for spaces, <0xNN> byte fallback). Used by
 * `zshard generate --tokenizer`; docs/tokenizer.md lists what is supported and how it can
 * differ from the Rust implementation. */
#ifndef ZS_DATA_TOKENIZER_H
#define ZS_DATA_TOKENIZER_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zs_tokenizer zs_tokenizer_t;

/* Load from `path`: a directory holding tokenizer.json (preferred) or vocab.json +
 * merges.txt; a tokenizer.json file; or vocab.json / merges.txt (its sibling is read too).
 * A tokenizer_config.json next to the files supplies the EOS token when it names one.
 * Errors: ZS_ERR_IO (missing/unreadable file), ZS_ERR_FORMAT (malformed, the file and field
 * named), ZS_ERR_UNSUPPORTED (a model, normalizer, pre-tokenizer or decoder this reader does
 * not implement, named). */
zs_status zs_tokenizer_load(const char *path, zs_tokenizer_t **out);
void zs_tokenizer_destroy(zs_tokenizer_t *t);

/* Largest token id + 1, over the model's vocabulary and the added tokens. */
int zs_tokenizer_vocab_size(const zs_tokenizer_t *t);
/* The end-of-text token id, or -1 when the files name none. */
int zs_tokenizer_eos(const zs_tokenizer_t *t);
/* Token string of id as stored in the files (byte-level or '▁' form), NULL when unknown. */
const char *zs_tokenizer_token(const zs_tokenizer_t *t, int id);
/* Id of a token string (vocabulary or added token), -1 when absent. */
int zs_tokenizer_id(const zs_tokenizer_t *t, const char *token);

/* Encode text[0, nbytes) (UTF-8; an invalid byte is a char of its own, which the byte-level
 * path maps as any byte and byte fallback gives as its <0xNN>). Added tokens (<|endoftext|>, <s>,
 * ...) found in the text become their single id. add_special applies the tokenizer.json's
 * post-processor template (e.g. LLaMA's leading <s>). *ids is malloc'd (caller frees), *count
 * elements. */
zs_status zs_tokenizer_encode(const zs_tokenizer_t *t, const char *text, size_t nbytes,
                              int add_special, int32_t **ids, int *count);

/* The id the template puts in front of a sequence (LLaMA's <s>, Llama-3's <|begin_of_text|>)
 * when it puts exactly one there, else -1. */
int zs_tokenizer_bos(const zs_tokenizer_t *t);
/* The padding token: tokenizer_config.json's pad_token, tokenizer.json's padding.pad_token,
 * else an added token named <pad>, <|pad|>, [PAD] or <|padding|>; -1 when none. */
int zs_tokenizer_pad(const zs_tokenizer_t *t);
/* The template's tokens before (*n_pre of them) and after (*n_post) the sequence. */
void zs_tokenizer_template(const zs_tokenizer_t *t, const int **pre, int *n_pre, const int **post,
                           int *n_post);

/* An encoder: one per thread, its buffers reused from call to call (encoding a corpus
 * document by document allocates only while the buffers grow). The tokenizer is shared,
 * read-only, by any number of encoders. */
typedef struct zs_tok_encoder zs_tok_encoder_t;
/* What the encoder met, summed over its calls. */
typedef struct zs_tok_counts {
    int64_t unk;           /* unk tokens emitted (a char with no token and no byte fallback) */
    int64_t byte_fallback; /* <0xNN> tokens emitted for chars with no token */
    int64_t dropped;       /* chars dropped: no token, no byte fallback, no unk (as HF does) */
} zs_tok_counts;
zs_status zs_tok_encoder_create(const zs_tokenizer_t *t, zs_tok_encoder_t **out);
void zs_tok_encoder_destroy(zs_tok_encoder_t *e);
/* As zs_tokenizer_encode; *ids points into the encoder and stays valid until its next call. */
zs_status zs_tok_encoder_encode(zs_tok_encoder_t *e, const char *text, size_t nbytes,
                                int add_special, const int32_t **ids, size_t *count);
const zs_tok_counts *zs_tok_encoder_counts(const zs_tok_encoder_t *e);

/* Decode ids back to bytes (not necessarily valid UTF-8: a sample may stop mid-character).
 * skip_special drops added tokens marked special. *text is malloc'd and NUL-terminated;
 * *nbytes excludes the NUL. An id outside the vocabulary is ZS_ERR_INVALID. */
zs_status zs_tokenizer_decode(const zs_tokenizer_t *t, const int32_t *ids, int count,
                              int skip_special, char **text, size_t *nbytes);

#endif

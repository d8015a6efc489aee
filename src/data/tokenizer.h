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

/* Encode text[0, nbytes) (UTF-8; invalid bytes are taken as Latin-1 code points by the
 * byte-level path and by byte fallback). Added tokens (<|endoftext|>, <s>, ...) found in the
 * text become their single id. add_special applies the tokenizer.json's post-processor
 * template (e.g. LLaMA's leading <s>). *ids is malloc'd (caller frees), *count elements. */
zs_status zs_tokenizer_encode(const zs_tokenizer_t *t, const char *text, size_t nbytes,
                              int add_special, int32_t **ids, int *count);

/* Decode ids back to bytes (not necessarily valid UTF-8: a sample may stop mid-character).
 * skip_special drops added tokens marked special. *text is malloc'd and NUL-terminated;
 * *nbytes excludes the NUL. An id outside the vocabulary is ZS_ERR_INVALID. */
zs_status zs_tokenizer_decode(const zs_tokenizer_t *t, const int32_t *ids, int count,
                              int skip_special, char **text, size_t *nbytes);

#endif

/* Training data: a byte-level text file or llm.c token shards (uint16, GPT-2; uint32,
 * Llama-3), one file or many matched by a pattern, split into train/validation, and the
 * deterministic batch of each step. The global batch of step s is a pure function of
 * (seed, s) and is the same for every world size; rank r takes its contiguous slice. */
#ifndef ZS_DATA_H
#define ZS_DATA_H

#include "zshard.h"

#include <stdint.h>

#define ZS_LLMC_SHARD_MAGIC 20240520
#define ZS_LLMC_SHARD_VERSION 1
#define ZS_GPT2_VOCAB 50257
/* llm.c's 32-bit token shard (its "llama-3" format, dev/data/data_common.py): the same 256
 * int32 header with this magic and version, then uint32 tokens. */
#define ZS_LLMC_SHARD32_MAGIC 20240801
#define ZS_LLMC_SHARD32_VERSION 7
#define ZS_LLAMA3_VOCAB 128256
/* Largest --vocab: far above Llama-3's 128,256 and Gemma's 262,144, small enough that
 * vocab x width stays an int64 with room to spare. */
#define ZS_MAX_VOCAB (1 << 24)

typedef struct zs_tokens {
    uint32_t *tok; /* token ids, < vocab (uint16 shards and text are widened on load) */
    int64_t n;
} zs_tokens;

typedef struct zs_dataset {
    zs_tokens train, val;
    int vocab;   /* 256 for text; token shards: 50257 (GPT-2) or the one given */
    int is_text; /* 1: byte-level text, tokens are the bytes */
    char path[512];
} zs_dataset;

/* Load path: an llm.c token shard if it starts with a shard magic (or ends in .bin), else a
 * byte-level text file. A path with a glob character (*?[) names many shards, taken in
 * sorted order as one stream, each validated on its own (mixing 16- and 32-bit shards is
 * fine; mixing shards and text is not). If val_path is NULL the last val_fraction of the
 * tokens is held out for validation. Errors name the file and the problem. */
zs_status zs_dataset_open(const char *path, const char *val_path, double val_fraction,
                          zs_dataset *out);
/* The same with the vocabulary of token shards given (vocab 0: GPT-2's 50257 for uint16
 * shards, Llama-3's 128256 for uint32 ones; a text file refuses any other): every token must
 * be below it. vocab is at most ZS_MAX_VOCAB, and at most 65536 for uint16 shards. */
zs_status zs_dataset_open_vocab(const char *path, const char *val_path, double val_fraction,
                                int vocab, zs_dataset *out);
void zs_dataset_close(zs_dataset *d);

/* Read one llm.c token shard (header of 256 int32: magic, version, count; uint16 tokens, or
 * uint32 for the 32-bit format). *bits receives 16 or 32 (NULL allowed). */
zs_status zs_llmc_shard_read(const char *path, zs_tokens *out);
zs_status zs_llmc_shard_read_bits(const char *path, zs_tokens *out, int *bits);
/* Write one (used by tests and tools): uint16 tokens, or the 32-bit format. */
zs_status zs_llmc_shard_write(const char *path, const uint16_t *tok, int64_t n);
zs_status zs_llmc_shard32_write(const char *path, const uint32_t *tok, int64_t n);

/* Check that the split holds at least one sequence of T+1 tokens. */
zs_status zs_dataset_check(const zs_dataset *d, int T);

/* Sequences [first, first+count) of the global training batch of step `step` (1-based),
 * each T inputs and T next-token targets. Sequence i of the step starts at an offset drawn
 * by Philox from (seed, step, i): independent of the number of ranks. */
void zs_batch_train(const zs_dataset *d, uint64_t seed, int64_t step, int global_batch, int T,
                    int first, int count, int32_t *inputs, int32_t *targets);
/* Validation batch k (0-based): consecutive non-overlapping windows, the same every run. A
 * row past the split's last window is empty (targets -1: no loss), so each window counts once
 * however many batches are asked for. */
void zs_batch_val(const zs_dataset *d, int64_t k, int global_batch, int T, int first, int count,
                  int32_t *inputs, int32_t *targets);

#endif

/* A corpus to llm.c token shards (`zshard tokenize`): documents read as a stream, encoded by
 * a pool of threads with a Hugging Face tokenizer, written in input order into train and val
 * shards of a fixed number of tokens, with dataset.json describing them. The output is the
 * same bytes whatever the thread count; memory is bounded by the documents in flight, never
 * by the corpus. docs/tokenizer.md states the rules. */
#ifndef ZS_DATA_TOKENIZE_H
#define ZS_DATA_TOKENIZE_H

#include "data/corpus.h"
#include "zshard.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define ZS_TOKENIZE_MAX_BAD 8 /* skipped documents remembered by place for the summary */

typedef struct zs_tokenize_stats {
    int64_t docs_seen;   /* documents read, skipped ones included */
    int64_t docs[2];     /* kept documents: [0] train, [1] val */
    int64_t tokens[2];   /* tokens written, BOS/EOS included */
    int64_t shards[2];   /* shard files written */
    int64_t text_bytes;  /* UTF-8 bytes of the kept documents */
    int64_t bytes_read;  /* bytes read from the files */
    int64_t total_bytes; /* size of all input files */
    int files;
    int64_t skipped[ZS_DOC_SKIP_COUNT];
    int64_t utf8_replaced; /* invalid UTF-8 sequences replaced by U+FFFD */
    int64_t unk, byte_fallback, dropped;
    int64_t eos_in_text; /* kept documents whose text holds the EOS token itself */
    double seconds;
    int n_bad; /* the first skipped documents: "file:line: reason" */
    char bad[ZS_TOKENIZE_MAX_BAD][320];
    int n_left_out; /* folders of the inputs left out: the output folder, token folders */
    char left_out[ZS_CORPUS_MAX_LEFT_OUT][600];
} zs_tokenize_stats;

typedef void (*zs_tokenize_progress_fn)(void *ctx, const zs_tokenize_stats *s, int done);

typedef struct zs_tokenize_config {
    zs_corpus_config corpus;
    const char *tokenizer; /* a directory or file that zs_tokenizer_load reads */
    const char *out_dir;   /* created if missing */
    int64_t shard_size;    /* tokens per shard file (the last one of a split may hold fewer) */
    double val_frac;       /* share of documents in val, by the hash rule [0.1] */
    uint64_t seed;         /* of the split rule */
    int threads;           /* encoding threads, >= 1 */
    int strict;            /* a skipped document is an error instead */
    int overwrite;         /* replace earlier shards and dataset.json in out_dir */
    const char *eos;       /* an EOS token to use instead of the tokenizer's, or NULL */
    zs_tokenize_progress_fn progress; /* called from one thread, every progress_s seconds */
    void *progress_ctx;
    double progress_s;
    /* When *cancel turns non-zero (a signal handler's store: the signal's number), the job
     * stops within a batch, removes every shard it began, writes no dataset.json and fails
     * naming the signal (zs_tokenize_interrupted says so). NULL: never. */
    volatile sig_atomic_t *cancel;
} zs_tokenize_config;

zs_tokenize_config zs_tokenize_config_default(void);

/* 1 when the document of this index goes to val: splitmix64(splitmix64(seed) ^ index), its top
 * 53 bits as a fraction in [0, 1), below val_frac. */
int zs_tokenize_is_val(uint64_t seed, int64_t index, double val_frac);

/* Runs the whole job. On failure nothing it wrote is left behind, and the error names the
 * file, line and reason. */
zs_status zs_tokenize_run(const zs_tokenize_config *cfg, zs_tokenize_stats *stats);
/* The signal that stopped the last zs_tokenize_run of cfg through cfg->cancel, or 0. */
int zs_tokenize_interrupted(const zs_tokenize_config *cfg);

/* llm.c shard written as it fills: header (256 int32: magic, version, count), then tokens
 * (uint16 or uint32). Written under a temporary name, renamed when closed. */
typedef struct zs_shard_writer zs_shard_writer_t;
zs_status zs_shard_writer_open(const char *path, int bits, zs_shard_writer_t **out);
zs_status zs_shard_writer_append(zs_shard_writer_t *w, const int32_t *ids, size_t n);
int64_t zs_shard_writer_count(const zs_shard_writer_t *w);
/* Completes the file (count in the header) and renames it into place. */
zs_status zs_shard_writer_close(zs_shard_writer_t *w);
/* Drops the temporary file. */
void zs_shard_writer_abort(zs_shard_writer_t *w);

#endif

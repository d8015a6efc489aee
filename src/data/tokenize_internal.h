/* Shared by tokenize.c (the pipeline) and tokenize_out.c (the files it writes). */
#ifndef ZS_DATA_TOKENIZE_INTERNAL_H
#define ZS_DATA_TOKENIZE_INTERNAL_H

#include "data/tokenize.h"

#define ZS_TOKENIZE_MAX_SHARDS 1000000 /* six digits in the file names */

/* One split's output: shards name_000000.bin, name_000001.bin, ... in dir. */
typedef struct zs_split_out {
    const char *dir, *name;
    int bits;
    int64_t shard_size;
    zs_shard_writer_t *w; /* the shard being filled, NULL between shards */
    char (*files)[32];    /* names of the shards begun, n_files of them */
    int n_files, cap_files;
} zs_split_out;

/* Appends tokens, opening and closing shards as they fill. */
zs_status zs_split_out_append(zs_split_out *o, const int32_t *ids, size_t n);
/* Closes the last, partly filled shard. */
zs_status zs_split_out_finish(zs_split_out *o);
/* Removes every shard the split began (after a failure). */
void zs_split_out_remove(zs_split_out *o);

/* What dataset.json says besides the counts. */
typedef struct zs_dataset_info {
    const char *tokenizer;
    int vocab_size, eos_id, bos_id, pad_id, bits;
    const int *pre, *post;
    int n_pre, n_post;
    int64_t shard_size;
    uint64_t seed;
    double val_frac;
    const char *const *inputs;
    int n_inputs;
    const char *doc_sep, *field;
} zs_dataset_info;

zs_status zs_dataset_json_write(const char *dir, const zs_dataset_info *info,
                                const zs_tokenize_stats *s, const zs_split_out out[2]);

#endif

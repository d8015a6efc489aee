/* `zshard train`'s flags as one table: the command line, a --config file and --print-config all
 * read and write train_opts through it, so a flag has one name, one type, one range and one
 * parser wherever it is given. */
#ifndef ZS_CLI_TRAIN_FLAGS_H
#define ZS_CLI_TRAIN_FLAGS_H

#include "cli/train_args.h"

#include <stddef.h>
#include <stdio.h>

typedef enum train_flag_kind {
    TF_SWITCH,    /* int set to 1 (true/false in a config file) */
    TF_INT,       /* int, within [lo, hi] */
    TF_FLOAT,     /* float */
    TF_DOUBLE,    /* double */
    TF_U64,       /* uint64_t */
    TF_STR,       /* const char * */
    TF_STAGE,     /* zs_stage: ddp|1|2|3 */
    TF_DTYPE,     /* zs_dtype: fp32|bf16 */
    TF_RECOMPUTE, /* zs_recompute: none|block */
    TF_ATTENTION, /* zs_attention: flash|naive */
    TF_DEVICE,    /* const char *: cpu|cuda|auto */
    TF_TIE,       /* int: ZS_TIE_ON/OFF, 0 = the model's */
    TF_BYTES,     /* uint64_t from a size such as 4G */
    TF_I64,       /* int64_t within [lo, hi]; shown only when >= 0 (-1: unset) */
    TF_DOCS,      /* zs_docs_mode: pack|concat|pad|none */
} train_flag_kind;

typedef struct train_flag {
    const char *name; /* the long flag without "--", and the config file's key */
    train_flag_kind kind;
    size_t off;       /* the field in train_opts */
    unsigned given;   /* ZS_GIVEN_* set when given */
    long long lo, hi; /* TF_INT's range when lo < hi; TF_DOUBLE: (1, 0) must be positive,
                         (0, -1) must be >= 0 */
    size_t set_off;   /* an int of train_opts set to 1 when the flag is given, or 0 for none */
} train_flag;

/* The flag named `name` (without "--"; a config key may spell '-' as '_'), or NULL. */
const train_flag *zs_train_flag_find(const char *name);
/* The valid name nearest to `name` by edit distance (for "did you mean"). */
const char *zs_train_flag_nearest(const char *name);
/* Number of flags and the i-th, in help order. */
int zs_train_flag_count(void);
const train_flag *zs_train_flag_at(int i);

/* Give flag f the value `text` (NULL for a switch without a value: true). `what` names the
 * setting in messages ("--batch", or "run.yaml:3: batch"). Returns 0 or the printed usage
 * error's exit status (2). */
int zs_train_flag_apply(train_opts *o, const train_flag *f, const char *text, const char *what);

/* The effective value of flag f in *o as text (numbers written so they parse back to the same
 * bits); 0 when the flag has no value to show (an unset path). */
int zs_train_flag_value(const train_opts *o, const train_flag *f, char *buf, size_t cap);

/* The effective configuration: as a YAML document that `--config` reads back into the same run,
 * and as one JSON object (the log's and the checkpoint manifest's record). */
void zs_train_config_write_yaml(const train_opts *o, FILE *f);
/* JSON object text, malloc'd (caller frees); NULL when out of memory. */
char *zs_train_config_json(const train_opts *o);

#endif

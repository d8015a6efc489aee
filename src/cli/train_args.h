/* `zshard train`'s options: the flags it takes, their defaults and checks (train_args.c), and
 * the parsed result the training loop (train.c) runs from. */
#ifndef ZS_CLI_TRAIN_ARGS_H
#define ZS_CLI_TRAIN_ARGS_H

#include "zshard.h"

#include <stdio.h>

typedef struct train_opts {
    zs_train_config cfg;
    const char *model_name;
    const char *log_path;
    const char *dump_path;
    const char *prompt;
    int val_every, val_batches, sample_every, sample_len, print_every;
    float temperature;
    double sample_budget; /* fraction of the training time one sample may take */
    int sample_len_set;   /* --sample-len given: sample even a model over 1e9 parameters */
    int quiet;
    int no_sample; /* --quiet as the user gave it: the same on every rank */
    int nproc, max_restarts;
    int mem_report;
    int reduce_dtype_set; /* --reduce-dtype given; else it follows --dtype */
    const char *save_dir, *resume, *init_from;
    int model_set; /* --model given */
    int tie;       /* --tie-embeddings: ZS_TIE_ON/OFF, 0 = the model's own */
    int save_every, keep;
} train_opts;

/* The help text. */
void zs_train_usage(FILE *f);
/* argv -> *o (defaults first). Returns 0, -1 when --help was printed, or the exit status of a
 * usage error (already printed). */
int zs_train_parse(int argc, char **argv, train_opts *o);

#endif

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
    int profile_step;     /* --profile-step N: the emulated GPU's predicted table of step N */
    int reduce_dtype_set; /* --reduce-dtype given; else it follows --dtype */
    const char *shard_group; /* --shard-group S|host, read into cfg.module.shard_group */
    const char *save_dir, *resume, *init_from;
    int model_set; /* --model given */
    int tie;       /* --tie-embeddings: ZS_TIE_ON/OFF, 0 = the model's own */
    int save_every, keep;
    unsigned given;          /* ZS_GIVEN_* of the flags given explicitly (resume compares them) */
    const char *override;    /* --override: settings a resume may change (batch,seq,seed) */
    int verbose;             /* --verbose: debug logging */
    const char *config_path; /* --config FILE: settings read before the flags */
    int print_config;        /* --print-config: print the effective configuration and stop */
    char doc_sep[64];        /* a resumed run's --doc-sep, taken from its checkpoint */
} train_opts;

/* Flags whose value a resumed run takes from its checkpoint unless given. */
enum {
    ZS_GIVEN_BATCH = 1u << 0,
    ZS_GIVEN_SEQ = 1u << 1,
    ZS_GIVEN_SEED = 1u << 2,
    ZS_GIVEN_STEPS = 1u << 3,
    ZS_GIVEN_ACCUM = 1u << 4,
    ZS_GIVEN_LR = 1u << 5,
    ZS_GIVEN_MIN_LR = 1u << 6,
    ZS_GIVEN_WARMUP = 1u << 7,
    ZS_GIVEN_WD = 1u << 8,
    ZS_GIVEN_CLIP = 1u << 9,
    ZS_GIVEN_DOCS = 1u << 10, /* --docs, --eos-id, --pad-id, --doc-sep, --epochs */
    ZS_GIVEN_EOS = 1u << 11,
    ZS_GIVEN_PAD = 1u << 12,
    ZS_GIVEN_SEP = 1u << 13,
    ZS_GIVEN_EPOCHS = 1u << 14,
};

/* --shard-group's text (NULL: not given) into o->cfg.module.shard_group: a size >= 1, or "host"
 * (ZS_SHARD_GROUP_HOST). Returns 0, or the exit status of the printed usage error. */
int zs_train_shard_group(train_opts *o, const char *cmd);

/* The help text. */
void zs_train_usage(FILE *f);
/* argv -> *o (defaults first). Returns 0, -1 when --help was printed, or the exit status of a
 * usage error (already printed). */
int zs_train_parse(int argc, char **argv, train_opts *o);
/* With --resume (already resolved): take the model and the settings the flags did not give
 * from the checkpoint, refuse a changed batch, seq or seed (unless --override names it), and
 * write the changes the flags make ("--lr 0.001 -> 0.005, ...") to `changes` (train_resume.c).
 * Returns 0, or the exit status of the printed error. */
int zs_train_resume_settings(train_opts *o, char *changes, size_t cap);

#endif

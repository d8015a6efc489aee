/* `zshard train`'s flags: the help text and argv -> train_opts with every check that needs
 * no data (numbers in range, choices, combinations). */
#include "cli/train_args.h"

#include "args/args.h"
#include "cli/train_flags.h"
#include "core/alloc.h"
#include "data/data.h"
#include "core/log.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table's help, then the model presets. */
void zs_train_usage(FILE *f) {
    zs_flag_help(zs_train_flags(), f);
    fprintf(f, "model presets (--model): %s\n", zs_model_preset_names());
}

int zs_train_shard_group(train_opts *o, const char *cmd) {
    const char *v = o->shard_group;
    if (!v) return 0;
    if (!strcmp(v, "host")) {
        o->cfg.module.shard_group = ZS_SHARD_GROUP_HOST;
        return 0;
    }
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 1 << 20)
        return zs_flag_fail(2, "%s: --shard-group '%s': a number of ranks (>= 1), or host", cmd, v);
    o->cfg.module.shard_group = (int)n;
    return 0;
}

int zs_train_parse(int argc, char **argv, train_opts *o) {
    memset(o, 0, sizeof *o);
    o->nproc = 1;
    o->cfg = zs_train_config_default();
    o->model_name = "gpt2-tiny";
    o->val_every = 50;
    o->val_batches = 8;
    o->sample_len = 200;
    o->print_every = 10;
    o->temperature = 0.8f;
    o->sample_budget = 0.02;
    for (int i = 1; i < argc; i++)
        if (zs_arg_is_help(argv[i])) { /* the help with the presets */
            zs_train_usage(stdout);
            return -1;
        }
    /* A --config file first, whatever its place among the flags, so that flags override it. */
    int rc = zs_flag_parse(zs_train_flags(), argc, argv, 1, o, NULL);
    if (rc) return rc;
    o->no_sample = o->quiet; /* --quiet as the user gave it: the same on every rank */
    if (o->verbose) zs_log_set_level(ZS_LOG_DEBUG);
    if (!o->cfg.data_path) return zs_flag_fail(2, "train: --data FILE is required");
    /* --epochs without --steps: the epochs decide the length (the trainer counts the steps). */
    if ((o->given & ZS_GIVEN_EPOCHS) && !(o->given & ZS_GIVEN_STEPS)) o->cfg.steps = 0;
    if (o->val_every < 0 || o->sample_every < 0 || o->print_every < 0)
        return zs_flag_fail(2, "train: --val-every, --sample-every, --print-every must be >= 0");
    if (o->val_batches < 1) return zs_flag_fail(2, "train: --val-batches must be positive");
    if (o->save_every < 0 || o->keep < 0)
        return zs_flag_fail(2, "train: --save-every and --keep must be >= 0");
    if ((o->save_every || o->keep) && !o->save_dir)
        return zs_flag_fail(2, "train: --save-every and --keep need --save-dir");
    if (o->resume && !strcmp(o->resume, "auto") && !o->save_dir)
        return zs_flag_fail(2, "train: --resume auto needs --save-dir");
    if (o->resume && !strcmp(o->resume, "latest")) {
        if (!o->save_dir) return zs_flag_fail(2, "train: --resume latest needs --save-dir");
        o->resume = o->save_dir;
    }
    if ((rc = zs_train_shard_group(o, "train"))) return rc;
    /* As FSDP's MixedPrecision: gradients follow the compute dtype unless told otherwise. */
    if (!o->reduce_dtype_set) o->cfg.module.grad_dtype = o->cfg.module.param_dtype;
    if (o->sample_len < 0) return zs_flag_fail(2, "train: --sample-len must be >= 0");
    if (!(o->sample_budget >= 0)) return zs_flag_fail(2, "train: --sample-budget must be >= 0");
    if (zs_model_preset(o->model_name, &o->cfg.model) != ZS_OK)
        return zs_flag_fail(2, "train: %s", zs_last_error());
    if (o->tie && o->cfg.model.tie_embeddings && o->tie != (int)o->cfg.model.tie_embeddings)
        return zs_flag_fail(2, "train: --tie-embeddings %s contradicts %s's tie_embeddings",
                           o->tie == ZS_TIE_ON ? "on" : "off", o->model_name);
    if (o->tie) o->cfg.model.tie_embeddings = (zs_tie)o->tie;
    if (o->init_from && o->resume && strcmp(o->resume, "auto"))
        return zs_flag_fail(2, "train: --init-from and --resume: pick one (--resume continues a "
                              "run with its optimizer, --init-from starts one from weights)");
    return 0;
}

/* `zshard train`'s flags: the help text and argv -> train_opts with every check that needs
 * no data (numbers in range, choices, combinations). */
#include "cli/train_args.h"

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "cli/train_flags.h"
#include "core/alloc.h"
#include "data/data.h"
#include "core/log.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zs_train_usage(FILE *f) {
    fprintf(f,
            "usage: zshard train --data FILE [options]\n"
            "       zshard train --config FILE [options]\n"
            "\n"
            "configuration:\n"
            "  --config FILE       settings from a YAML or JSON file whose keys are the long\n"
            "                      flags below (save-every or save_every); flags given on the\n"
            "                      command line override it\n"
            "  --print-config      print the effective settings as such a file and stop\n"
            "model and data:\n"
            "  --model NAME        preset (%s) [gpt2-tiny]\n"
            "  --tie-embeddings on|off  output head tied to the token embedding, or its own\n"
            "                      lm_head.weight [the model's: GPT-2 on, LLaMA off]\n"
            "  --data FILE         byte-level text file, or llm.c token shard (.bin, uint16 or\n"
            "                      uint32 tokens); a quoted pattern ('dir/train_*.bin') joins\n"
            "                      many shards in sorted order\n"
            "  --val-data FILE     separate validation file [last --val-frac of --data]\n"
            "  --val-frac F        held-out tail fraction when splitting [0.1]\n"
            "  --vocab N           token shards: the tokenizer's vocabulary, e.g. 32000 for\n"
            "                      LLaMA-2's, up to 16777216 with uint32 shards [50257 for\n"
            "                      uint16 shards, 128256 for uint32]; text is always 256\n"
            "                      bytes\n"
            "documents and epochs (docs/data.md):\n"
            "  --docs MODE         read the data as documents, walked in epochs: pack (windows\n"
            "                      over the documents; attention and positions stay inside each\n"
            "                      document, the target across a boundary is left out), concat\n"
            "                      (the same windows, unmasked) or pad (a document per row, a\n"
            "                      longer one split into more rows, the rest padded) [none:\n"
            "                      random windows]\n"
            "  --epochs N          train N epochs (each sample once per epoch, in an order drawn\n"
            "                      from --seed and the epoch); --steps, when given, caps them\n"
            "  --eos-id N          the id that ends a document [dataset.json's beside --data,\n"
            "                      else 50256 for GPT-2 shards]\n"
            "  --pad-id N          the input id of padding [dataset.json's, else the end id]\n"
            "  --doc-sep LINE      byte-level text: a line equal to LINE ends a document, e.g.\n"
            "                      --doc-sep %% for fortune files\n"
            "batch and schedule:\n"
            "  --batch N           global batch: sequences per optimizer step, summed over all\n"
            "                      ranks and micro-batches [8]\n"
            "  --seq T             sequence length [64]\n"
            "  --steps N           optimizer steps [100; with --epochs, their steps]\n"
            "  --grad-accum K      micro-batches per step [1]\n"
            "  --lr LR             peak learning rate [1e-3]\n"
            "  --min-lr-frac F     cosine floor as a fraction of --lr [0.1]\n"
            "  --warmup N          linear warmup steps [10]\n"
            "  --weight-decay W    AdamW decay on matrices [0.1]\n"
            "  --grad-clip C       global-norm clip, 0 = off [1.0]\n"
            "  --seed S            init and data seed [1337]\n"
            "distribution:\n"
            "  --stage S           ddp|1|2|3 [ddp]\n"
            "  --nproc N           start N local ranks through the launcher (zshard run) [1]\n"
            "  --max-restarts N    restart the whole job up to N times after a rank fails,\n"
            "                      resuming from --save-dir's latest checkpoint [0]\n"
            "  --prefetch N        ZeRO-3 units gathered ahead of the current one [1]\n"
            "  --dtype D           fp32|bf16: compute copy of the parameters and of the\n"
            "                      residual stream kept between blocks, and GEMMs on bf16\n"
            "                      inputs with fp32 accumulation (tensor cores on a GPU);\n"
            "                      fp32 master and Adam state either way [fp32]\n"
            "  --tf32              fp32 GEMMs with TF32 inputs (tensor cores on a GPU; the\n"
            "                      same rounding on the CPU) [off]\n"
            "  --reduce-dtype D    fp32|bf16: gradient storage and reduction [--dtype]\n"
            "  --recompute M       none|block: block keeps only each block's input and\n"
            "                      recomputes the block in its backward [none]\n"
            "  --attention K       flash|naive: flash keeps O(T) per head and recomputes\n"
            "                      probabilities in backward; naive keeps T x T [flash]\n"
            "  --device D          cpu|cuda|auto: auto takes a CUDA device when one is\n"
            "                      visible, else the CPU (docs/cuda.md) [auto]\n"
            "  --comm NAME         auto|shm|gloo|mpi|nccl [auto, or $ZS_COMM]\n"
            "  --comm-timeout S    seconds before a stuck collective fails [300]\n"
            "evaluation and output:\n"
            "  --val-every N       validation loss every N steps, 0 = only at the end [50]\n"
            "  --val-batches N     batches per validation [8]\n"
            "  --sample-every N    generate a sample every N steps, 0 = only at the end [0]\n"
            "  --sample-len N      tokens per sample [200; 0 for models over 1e9 parameters,\n"
            "                      whose sample only runs when --sample-len is given]\n"
            "  --sample-budget F   a sample stops after F x the training time so far (KV-cache\n"
            "                      decoding; at least one token), 0 = no limit [0.02]\n"
            "  --prompt TEXT       sample prompt (text data) [newline]\n"
            "  --temperature F     sampling temperature, 0 = greedy [0.8]\n"
            "  --print-every N     plain progress line every N steps when not a terminal [10]\n"
            "  --log FILE          JSONL log: one record per step and a final summary\n"
            "  --dump-params FILE  at the end, write all fp32 parameters (layout order, raw)\n"
            "  --device-mem SIZE   per-rank memory cap, e.g. 4G; over it fails at startup\n"
            "  --mem-report        at the end, per-rank measured peak bytes by category next to\n"
            "                      the estimate (zshard mem)\n"
            "  --profile-step N    on the emulated GPU (the tests' zshard-emu): every kernel of\n"
            "                      step N with its traffic and predicted H100 time, as a table\n"
            "                      per rank (docs/cuda.md \"The profiler\") [0 = none]\n"
            "  --quiet             no progress output and no sample, only errors and the\n"
            "                      summary\n"
            "  --verbose           debug logging; a failed collective prints its ring here\n"
            "                      instead of writing it to a file\n"
            "checkpoints (docs/checkpoint.md):\n"
            "  --save-dir D        save checkpoints as D/step_NNNNNNNN (and at the end)\n"
            "  --save-every K      also save every K steps [0 = only at the end]\n"
            "  --keep N            keep the newest N checkpoints in --save-dir [0 = all]\n"
            "  --resume D|latest   continue from a checkpoint dir, a save dir's latest, or\n"
            "                      `latest` in --save-dir (any world size and stage)\n"
            "  --resume auto       --save-dir's latest checkpoint if it has one, else start\n"
            "                      from scratch (what a restarted job does by itself)\n"
            "                      A resumed run continues the stored one: model, --batch,\n"
            "                      --seq, --seed and the schedule come from the checkpoint;\n"
            "                      a different --steps, --lr, --warmup, --min-lr-frac,\n"
            "                      --weight-decay, --grad-clip or --grad-accum is taken and\n"
            "                      listed, a different --batch, --seq or --seed refused\n"
            "  --override LIST     let a resume change these too: batch,seq,seed\n"
            "  --init-from PATH    start from these weights with a fresh optimizer at step 0\n"
            "                      (fine-tuning): a zshard checkpoint, a safetensors file, a\n"
            "                      Hugging Face directory or an llm.c model file; the model\n"
            "                      is the source's (a --model must agree with it)\n"
            "SIGINT/SIGTERM finish the current step, save a checkpoint (with --save-dir) and\n"
            "stop with status 128+signal; a second signal stops at once.\n",
            zs_model_preset_names());
}

/* The last --config file read; train_opts points into its strings, so it lives until the next
 * zs_train_parse that reads one (the CLI parses once). */
static zs_config g_config;

/* --config FILE: every entry through the flag table, named "FILE:LINE: key" in messages. */
static int apply_config(train_opts *o, const char *path) {
    zs_config_free(&g_config);
    int rc = zs_config_load(path, &g_config);
    if (rc) return rc;
    for (int i = 0; i < g_config.n; i++) {
        const zs_config_entry *e = &g_config.e[i];
        char what[1200];
        snprintf(what, sizeof what, "%s:%d: %s", path, e->line, e->key);
        if (!strcmp(e->key, "config") || !strcmp(e->key, "print-config") ||
            !strcmp(e->key, "print_config") || !strcmp(e->key, "help"))
            return zs_cli_fail(2, "%s: not a setting (give it on the command line)", what);
        const train_flag *f = zs_train_flag_find(e->key);
        if (!f)
            return zs_cli_fail(2,
                               "%s:%d: unknown key '%s' (did you mean '%s'? the keys are "
                               "train's long flags: zshard train --help)",
                               path, e->line, e->key, zs_train_flag_nearest(e->key));
        if (!e->value) {
            if (f->kind != TF_STR) return zs_cli_fail(2, "%s: has no value", what);
            continue; /* null: the flag's default */
        }
        /* "3" in quotes is a string in YAML and JSON alike, not the number a user meant */
        if (e->quoted && (f->kind == TF_SWITCH || f->kind == TF_INT || f->kind == TF_FLOAT ||
                          f->kind == TF_DOUBLE || f->kind == TF_U64 || f->kind == TF_I64))
            return zs_cli_fail(2, "%s: \"%s\" is in quotes, so a string: write the %s without them",
                               what, e->value, f->kind == TF_SWITCH ? "true or false" : "number");
        if ((rc = zs_train_flag_apply(o, f, e->value, what))) return rc;
    }
    return 0;
}

static int is_bool_word(const char *t) {
    return zs_arg_bool_word(t);
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
    /* The file first, whatever its place among the flags, so that flags override it. */
    for (int i = 1; i < argc; i++) {
        if (zs_arg_is_help(argv[i])) {
            zs_train_usage(stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--config")) {
            const char *v = zs_arg_value(argc, argv, &i);
            if (!v) return 2;
            if (o->config_path) return zs_cli_fail(2, "train: --config given twice");
            o->config_path = v;
        }
    }
    if (o->config_path) {
        int rc = apply_config(o, o->config_path);
        if (rc) return rc;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strcmp(a, "--print-config")) {
            o->print_config = 1;
            continue;
        }
        if (strncmp(a, "--", 2)) return zs_cli_fail(2, "train: unexpected argument '%s'", a);
        const train_flag *f = zs_train_flag_find(a + 2);
        if (!f || strchr(a + 2, '_')) /* flags are spelled with '-' on the command line */
            return zs_cli_fail(2, "train: unknown flag '%s' (see zshard train --help)", a);
        const char *v = NULL;
        if (f->kind == TF_SWITCH) {
            /* --quiet, or --quiet=false (split into two words by main) */
            if (i + 1 < argc && is_bool_word(argv[i + 1])) v = argv[++i];
        } else if (!(v = zs_arg_value(argc, argv, &i))) {
            return 2;
        }
        int rc = zs_train_flag_apply(o, f, v, a);
        if (rc) return rc;
    }
    if (o->verbose) zs_log_set_level(ZS_LOG_DEBUG);
    if (!o->cfg.data_path) return zs_cli_fail(2, "train: --data FILE is required");
    /* --epochs without --steps: the epochs decide the length (the trainer counts the steps). */
    if ((o->given & ZS_GIVEN_EPOCHS) && !(o->given & ZS_GIVEN_STEPS)) o->cfg.steps = 0;
    if (o->val_every < 0 || o->sample_every < 0 || o->print_every < 0)
        return zs_cli_fail(2, "train: --val-every, --sample-every, --print-every must be >= 0");
    if (o->val_batches < 1) return zs_cli_fail(2, "train: --val-batches must be positive");
    if (o->save_every < 0 || o->keep < 0)
        return zs_cli_fail(2, "train: --save-every and --keep must be >= 0");
    if ((o->save_every || o->keep) && !o->save_dir)
        return zs_cli_fail(2, "train: --save-every and --keep need --save-dir");
    if (o->resume && !strcmp(o->resume, "auto") && !o->save_dir)
        return zs_cli_fail(2, "train: --resume auto needs --save-dir");
    if (o->resume && !strcmp(o->resume, "latest")) {
        if (!o->save_dir) return zs_cli_fail(2, "train: --resume latest needs --save-dir");
        o->resume = o->save_dir;
    }
    /* As FSDP's MixedPrecision: gradients follow the compute dtype unless told otherwise. */
    if (!o->reduce_dtype_set) o->cfg.reduce_dtype = o->cfg.dtype;
    if (o->sample_len < 0) return zs_cli_fail(2, "train: --sample-len must be >= 0");
    if (!(o->sample_budget >= 0)) return zs_cli_fail(2, "train: --sample-budget must be >= 0");
    if (zs_model_preset(o->model_name, &o->cfg.model) != ZS_OK)
        return zs_cli_fail(2, "train: %s", zs_last_error());
    if (o->tie && o->cfg.model.tie_embeddings && o->tie != (int)o->cfg.model.tie_embeddings)
        return zs_cli_fail(2, "train: --tie-embeddings %s contradicts %s's tie_embeddings",
                           o->tie == ZS_TIE_ON ? "on" : "off", o->model_name);
    if (o->tie) o->cfg.model.tie_embeddings = (zs_tie)o->tie;
    if (o->init_from && o->resume && strcmp(o->resume, "auto"))
        return zs_cli_fail(2, "train: --init-from and --resume: pick one (--resume continues a "
                              "run with its optimizer, --init-from starts one from weights)");
    return 0;
}

/* The table of `zshard train`'s flags (train_flags.h): one row per flag with its type, field,
 * range, help and the ZS_GIVEN_* bit a resume compares; the argument library (flags.h) parses
 * and prints them, this file adds the YAML and JSON writers of --print-config and the log. */
#include "cli/train_flags.h"

#include "ckpt/json.h"
#include "data/data.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define OFF(field) offsetof(train_opts, field)
#define NONE 0, 0, 0, 0
#define POS 0, 1, INT_MAX, 0    /* an int >= 1 */
#define NONNEG 0, 0, INT_MAX, 0 /* an int >= 0 */
#define SECTION(title) {title, ZS_FLAG_SECTION, 0, NONE, NULL, NULL, 0, NULL}

/* Help order. `set_off` marks flags whose presence itself matters (--model given, ...). */
static const zs_flag FLAGS[] = {
    SECTION("configuration"),
    {"config", ZS_FLAG_STR, OFF(config_path), NONE, "FILE",
     "settings from a YAML or JSON file whose keys are the long\n"
     "flags below (save-every or save_every); flags given on the\n"
     "command line override it", ZS_FLAG_CLI_ONLY, NULL},
    {"print-config", ZS_FLAG_SWITCH, OFF(print_config), NONE, NULL,
     "print the effective settings as such a file and stop", ZS_FLAG_CLI_ONLY, NULL},
    SECTION("model and data"),
    {"model", ZS_FLAG_STR, OFF(model_name), 0, 0, 0, OFF(model_set), "NAME",
     "preset (the list below) [gpt2-tiny]", 0, NULL},
    {"tie-embeddings", ZS_FLAG_TIE, OFF(tie), NONE, "on|off",
     "output head tied to the token embedding, or its own\n"
     "lm_head.weight [the model's: GPT-2 on, LLaMA off]", 0, NULL},
    {"data", ZS_FLAG_STR, OFF(cfg.data_path), NONE, "FILE",
     "byte-level text file, or llm.c token shard (.bin, uint16 or\n"
     "uint32 tokens); a quoted pattern ('dir/train_*.bin') joins\n"
     "many shards in sorted order", 0, NULL},
    {"val-data", ZS_FLAG_STR, OFF(cfg.val_path), NONE, "FILE",
     "separate validation file [last --val-frac of --data]", 0, NULL},
    {"val-frac", ZS_FLAG_DOUBLE, OFF(cfg.val_fraction), 0, 0, 1, 0, "F",
     "held-out tail fraction when splitting [0.1]", 0, NULL},
    {"vocab", ZS_FLAG_INT, OFF(cfg.vocab), NONNEG, "N",
     "token shards: the tokenizer's vocabulary, e.g. 32000 for\n"
     "LLaMA-2's, up to 16777216 with uint32 shards [50257 for\n"
     "uint16 shards, 128256 for uint32]; text is always 256\n"
     "bytes", 0, NULL},
    SECTION("documents and epochs (docs/data.md)"),
    {"docs", ZS_FLAG_DOCS, OFF(cfg.docs), ZS_GIVEN_DOCS, 0, 0, 0, "MODE",
     "read the data as documents, walked in epochs: pack (windows\n"
     "over the documents; attention and positions stay inside each\n"
     "document, the target across a boundary is left out), concat\n"
     "(the same windows, unmasked) or pad (a document per row, a\n"
     "longer one split into more rows, the rest padded) [none:\n"
     "random windows]", 0, NULL},
    {"epochs", ZS_FLAG_INT, OFF(cfg.epochs), ZS_GIVEN_EPOCHS, 1, 1 << 30, 0, "N",
     "train N epochs (each sample once per epoch, in an order drawn\n"
     "from --seed and the epoch); --steps, when given, caps them", 0, NULL},
    {"eos-id", ZS_FLAG_I64, OFF(cfg.eos_id), ZS_GIVEN_EOS, 0, ZS_MAX_VOCAB - 1, 0, "N",
     "the id that ends a document [dataset.json's beside --data,\n"
     "else 50256 for GPT-2 shards]", 0, NULL},
    {"pad-id", ZS_FLAG_I64, OFF(cfg.pad_id), ZS_GIVEN_PAD, 0, ZS_MAX_VOCAB - 1, 0, "N",
     "the input id of padding [dataset.json's, else the end id]", 0, NULL},
    {"doc-sep", ZS_FLAG_STR, OFF(cfg.doc_sep), ZS_GIVEN_SEP, 0, 0, 0, "LINE",
     "byte-level text: a line equal to LINE ends a document, e.g.\n"
     "--doc-sep % for fortune files", 0, NULL},
    SECTION("batch and schedule"),
    {"batch", ZS_FLAG_INT, OFF(cfg.batch), ZS_GIVEN_BATCH, 1, INT_MAX, 0, "N",
     "global batch: sequences per optimizer step, summed over all\n"
     "ranks and micro-batches [8]", 0, NULL},
    {"seq", ZS_FLAG_INT, OFF(cfg.seq), ZS_GIVEN_SEQ, 1, INT_MAX, 0, "T",
     "sequence length [64]", 0, NULL},
    {"steps", ZS_FLAG_INT, OFF(cfg.steps), ZS_GIVEN_STEPS, 1, INT_MAX, 0, "N",
     "optimizer steps [100; with --epochs, their steps]", 0, NULL},
    {"grad-accum", ZS_FLAG_INT, OFF(cfg.grad_accum), ZS_GIVEN_ACCUM, 1, INT_MAX, 0, "K",
     "micro-batches per step [1]", 0, NULL},
    {"lr", ZS_FLAG_FLOAT, OFF(cfg.lr), ZS_GIVEN_LR, 1, 0, 0, "LR", "peak learning rate [1e-3]", 0,
     NULL},
    {"min-lr-frac", ZS_FLAG_FLOAT, OFF(cfg.min_lr_frac), ZS_GIVEN_MIN_LR, 0, 0, 0, "F",
     "cosine floor as a fraction of --lr [0.1]", 0, NULL},
    {"warmup", ZS_FLAG_INT, OFF(cfg.warmup), ZS_GIVEN_WARMUP, 0, INT_MAX, 0, "N",
     "linear warmup steps [10]", 0, NULL},
    {"weight-decay", ZS_FLAG_FLOAT, OFF(cfg.weight_decay), ZS_GIVEN_WD, 0, 0, 0, "W",
     "AdamW decay on matrices [0.1]", 0, NULL},
    {"grad-clip", ZS_FLAG_FLOAT, OFF(cfg.grad_clip), ZS_GIVEN_CLIP, 0, 0, 0, "C",
     "global-norm clip, 0 = off [1.0]", 0, NULL},
    {"seed", ZS_FLAG_U64, OFF(cfg.module.seed), ZS_GIVEN_SEED, 0, 0, 0, "S",
     "init and data seed [1337]", 0, NULL},
    SECTION("distribution"),
    {"stage", ZS_FLAG_STAGE, OFF(cfg.module.stage), NONE, "S", "ddp|1|2|3 [ddp]", 0, NULL},
    {"nproc", ZS_FLAG_INT, OFF(nproc), 0, 1, 256, 0, "N",
     "start N local ranks through the launcher (zshard run) [1]", 0, NULL},
    {"shard-group", ZS_FLAG_STR, OFF(shard_group), NONE, "S|host",
     "hybrid sharding (HSDP): split the state as --stage says\n"
     "within each group of S consecutive ranks, replicate it\n"
     "across the groups; host: a group per host (docs/sharding.md\n"
     "\"Hybrid sharding\") [the whole world]", 0, NULL},
    {"replicate", ZS_FLAG_INT, OFF(cfg.module.replicate), NONNEG, "R",
     "HSDP's other face: R groups, each of world / R ranks [1]", 0, NULL},
    {"max-restarts", ZS_FLAG_INT, OFF(max_restarts), 0, 0, 1000, 0, "N",
     "restart the whole job up to N times after a rank fails,\n"
     "resuming from --save-dir's latest checkpoint [0]", 0, NULL},
    {"prefetch", ZS_FLAG_INT, OFF(cfg.module.prefetch), NONNEG, "N",
     "ZeRO-3 units gathered ahead of the current one [1]", 0, NULL},
    {"dtype", ZS_FLAG_DTYPE, OFF(cfg.module.param_dtype), NONE, "D",
     "fp32|bf16: compute copy of the parameters and of the\n"
     "residual stream kept between blocks, and GEMMs on bf16\n"
     "inputs with fp32 accumulation (tensor cores on a GPU);\n"
     "fp32 master and Adam state either way [fp32]", 0, NULL},
    {"tf32", ZS_FLAG_SWITCH, OFF(cfg.module.tf32), NONE, NULL,
     "fp32 GEMMs with TF32 inputs (tensor cores on a GPU; the\n"
     "same rounding on the CPU) [off]", 0, NULL},
    {"reduce-dtype", ZS_FLAG_DTYPE, OFF(cfg.module.grad_dtype), 0, 0, 0, OFF(reduce_dtype_set), "D",
     "fp32|bf16: gradient storage and reduction [--dtype]", 0, NULL},
    {"offload", ZS_FLAG_OFFLOAD, OFF(cfg.module.offload), NONE, "O",
     "none|optimizer|params: optimizer keeps the fp32 master\n"
     "and Adam state in pinned host memory and steps them on\n"
     "the host; params (--stage 3) also the parameter shard,\n"
     "copied up before each gather (GPU ranks;\n"
     "docs/sharding.md \"Offload\") [none]", 0, NULL},
    {"offload-fraction", ZS_FLAG_DOUBLE, OFF(cfg.module.offload_fraction), 0, 1, 0, 0, "F",
     "with --offload: offload the first units in\n"
     "layout order until this share of the optimizer state,\n"
     "in (0, 1]; the rest stays on the GPU [1]", 0, NULL},
    {"recompute", ZS_FLAG_RECOMPUTE, OFF(cfg.recompute), NONE, "M",
     "none|block: block keeps only each block's input and\n"
     "recomputes the block in its backward [none]", 0, NULL},
    {"attention", ZS_FLAG_ATTENTION, OFF(cfg.attention), NONE, "K",
     "flash|naive: flash keeps O(T) per head and recomputes\n"
     "probabilities in backward; naive keeps T x T [flash]", 0, NULL},
    {"device", ZS_FLAG_DEVICE, OFF(cfg.module.device), NONE, "D",
     "cpu|cuda|auto: auto takes a CUDA device when one is\n"
     "visible, else the CPU (docs/cuda.md) [auto]", 0, NULL},
    {"comm", ZS_FLAG_STR, OFF(cfg.comm), NONE, "NAME", "auto|shm|gloo|mpi|nccl [auto, or $ZS_COMM]",
     0, NULL},
    {"comm-timeout", ZS_FLAG_DOUBLE, OFF(cfg.comm_timeout_s), 0, 1, 0, 0, "S",
     "seconds before a stuck collective fails [300]", 0, NULL},
    SECTION("evaluation and output"),
    {"val-every", ZS_FLAG_INT, OFF(val_every), NONNEG, "N",
     "validation loss every N steps, 0 = only at the end [50]", 0, NULL},
    {"val-batches", ZS_FLAG_INT, OFF(val_batches), POS, "N", "batches per validation [8]", 0, NULL},
    {"sample-every", ZS_FLAG_INT, OFF(sample_every), NONNEG, "N",
     "generate a sample every N steps, 0 = only at the end [0]", 0, NULL},
    {"sample-len", ZS_FLAG_INT, OFF(sample_len), 0, 0, INT_MAX, OFF(sample_len_set), "N",
     "tokens per sample [200; 0 for models over 1e9 parameters,\n"
     "whose sample only runs when --sample-len is given]", 0, NULL},
    {"sample-budget", ZS_FLAG_DOUBLE, OFF(sample_budget), 0, 0, -1, 0, "F",
     "a sample stops after F x the training time so far (KV-cache\n"
     "decoding; at least one token), 0 = no limit [0.02]", 0, NULL},
    {"prompt", ZS_FLAG_STR, OFF(prompt), NONE, "TEXT", "sample prompt (text data) [newline]", 0,
     NULL},
    {"temperature", ZS_FLAG_FLOAT, OFF(temperature), NONE, "F",
     "sampling temperature, 0 = greedy [0.8]", 0, NULL},
    {"print-every", ZS_FLAG_INT, OFF(print_every), NONNEG, "N",
     "plain progress line every N steps when not a terminal [10]", 0, NULL},
    {"log", ZS_FLAG_STR, OFF(log_path), NONE, "FILE",
     "JSONL log: one record per step and a final summary", 0, NULL},
    {"dump-params", ZS_FLAG_STR, OFF(dump_path), NONE, "FILE",
     "at the end, write all fp32 parameters (layout order, raw)", 0, NULL},
    {"device-mem", ZS_FLAG_BYTES, OFF(cfg.device_mem), NONE, "SIZE",
     "per-rank memory cap, e.g. 4G; over it fails at startup", 0, NULL},
    {"mem-report", ZS_FLAG_SWITCH, OFF(mem_report), NONE, NULL,
     "at the end, per-rank measured peak bytes by category next to\n"
     "the estimate (zshard mem)", 0, NULL},
    {"profile-step", ZS_FLAG_INT, OFF(profile_step), NONNEG, "N",
     "on the emulated GPU (the tests' zshard-emu): every kernel of\n"
     "step N with its traffic and predicted H100 time, as a table\n"
     "per rank (docs/cuda.md \"The profiler\") [0 = none]", 0, NULL},
    {"quiet", ZS_FLAG_SWITCH, OFF(quiet), NONE, NULL,
     "no progress output and no sample, only errors and the\n"
     "summary", 0, NULL},
    {"verbose", ZS_FLAG_SWITCH, OFF(verbose), NONE, NULL,
     "debug logging; a failed collective prints its ring here\n"
     "instead of writing it to a file", 0, NULL},
    SECTION("checkpoints (docs/checkpoint.md)"),
    {"save-dir", ZS_FLAG_STR, OFF(save_dir), NONE, "D",
     "save checkpoints as D/step_NNNNNNNN (and at the end)", 0, NULL},
    {"save-every", ZS_FLAG_INT, OFF(save_every), NONNEG, "K",
     "also save every K steps [0 = only at the end]", 0, NULL},
    {"keep", ZS_FLAG_INT, OFF(keep), NONNEG, "N",
     "keep the newest N checkpoints in --save-dir [0 = all]", 0, NULL},
    {"resume", ZS_FLAG_STR, OFF(resume), NONE, "D|latest|auto",
     "continue from a checkpoint dir, a save dir's latest, or\n"
     "`latest` in --save-dir (any world size and stage); auto:\n"
     "--save-dir's latest checkpoint if it has one, else start\n"
     "from scratch (what a restarted job does by itself).\n"
     "A resumed run continues the stored one: model, --batch,\n"
     "--seq, --seed and the schedule come from the checkpoint;\n"
     "a different --steps, --lr, --warmup, --min-lr-frac,\n"
     "--weight-decay, --grad-clip or --grad-accum is taken and\n"
     "listed, a different --batch, --seq or --seed refused", 0, NULL},
    {"override", ZS_FLAG_STR, OFF(override), NONE, "LIST",
     "let a resume change these too: batch,seq,seed", 0, NULL},
    {"init-from", ZS_FLAG_STR, OFF(init_from), NONE, "PATH",
     "start from these weights with a fresh optimizer at step 0\n"
     "(fine-tuning): a zshard checkpoint, a safetensors file, a\n"
     "Hugging Face directory or an llm.c model file; the model\n"
     "is the source's (a --model must agree with it)", 0, NULL},
};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0] };

static const zs_flag_table TABLE = {
    .cmd = "train",
    .rows = FLAGS,
    .count = NFLAGS,
    .usage = "usage: zshard train --data FILE [options]\n"
             "       zshard train --config FILE [options]\n"
             "\n",
    .footer = "SIGINT/SIGTERM finish the current step, save a checkpoint (with --save-dir) and\n"
              "stop with status 128+signal; a second signal stops at once.\n",
    .given_off = offsetof(train_opts, given),
};

/* train's table. */
const zs_flag_table *zs_train_flags(void) {
    return &TABLE;
}

/* Whether a value is written bare (numbers, booleans, choices) or as a quoted string. */
static int quoted(const zs_flag *f) {
    return f->kind == ZS_FLAG_STR || f->kind == ZS_FLAG_DEVICE;
}

/* The model is printed when it is this run's choice, not the source's (--resume/--init-from
 * take it from their checkpoint or weights, and a --model then has to agree). */
static int shown(const train_opts *o, const zs_flag *f) {
    if (f->kind == ZS_FLAG_SECTION || (f->opt & ZS_FLAG_CLI_ONLY)) return 0;
    if (!strcmp(f->name, "model")) return o->model_set || (!o->resume && !o->init_from);
    /* --epochs without --steps: the epochs decide the length (steps 0 until the trainer
     * counts them). */
    if (!strcmp(f->name, "steps")) return o->cfg.steps > 0;
    if (!strcmp(f->name, "epochs")) return o->cfg.epochs > 0;
    if (!strcmp(f->name, "docs")) return o->cfg.docs != ZS_DOCS_NONE;
    return 1;
}

/* A double-quoted YAML scalar. JSON's escapes are YAML's too, but libyaml refuses some code
 * points raw (DEL, the C1 controls) and folds others as line breaks (NEL, U+2028, U+2029):
 * those are written as \uXXXX, so that every value reads back the same (fuzz_config found
 * a prompt holding U+009E). */
static void yaml_write_string(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* U+0080..U+009F */
            fprintf(f, "\\u%04x", (unsigned)p[1]);
            p += 2;
        } else if (c == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
            fprintf(f, "\\u%04x", 0x2000u + (unsigned)(p[2] - 0x80));
            p += 3;
        } else if (c == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf)) {
            fprintf(f, "\\u%04x", 0xffc0u + (unsigned)(p[2] - 0x80));
            p += 3;
        } else {
            fputc((int)c, f);
            p++;
        }
    }
    fputc('"', f);
}

void zs_train_config_write_yaml(const train_opts *o, FILE *f) {
    char v[4200];
    fprintf(f, "# zshard train: the effective configuration; `zshard train --config FILE` runs "
               "it again,\n# and flags given on the command line with it override it (at any place).\n");
    if (!shown(o, zs_flag_find(&TABLE, "model")))
        fprintf(f, "# model: the checkpoint's or the weights' (--resume / --init-from)\n");
    for (int i = 0; i < NFLAGS; i++) {
        const zs_flag *fl = &FLAGS[i];
        if (!shown(o, fl) || !zs_flag_value(o, fl, v, sizeof v)) continue;
        fprintf(f, "%s: ", fl->name);
        if (quoted(fl))
            yaml_write_string(f, v);
        else
            fputs(v, f);
        fputc('\n', f);
    }
}

char *zs_train_config_json(const train_opts *o) {
    char *buf = NULL, v[4200];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fputc('{', f);
    int n = 0;
    for (int i = 0; i < NFLAGS; i++) {
        const zs_flag *fl = &FLAGS[i];
        if (!shown(o, fl) || !zs_flag_value(o, fl, v, sizeof v)) continue;
        fprintf(f, "%s\"%s\":", n++ ? "," : "", fl->name);
        if (quoted(fl) || fl->kind == ZS_FLAG_STAGE || fl->kind == ZS_FLAG_DTYPE ||
            fl->kind == ZS_FLAG_DOCS || fl->kind == ZS_FLAG_RECOMPUTE ||
            fl->kind == ZS_FLAG_ATTENTION || fl->kind == ZS_FLAG_TIE || fl->kind == ZS_FLAG_OFFLOAD)
            zs_json_write_string(f, v);
        else if (fl->kind == ZS_FLAG_U64)
            zs_json_write_string(f, v); /* a 64-bit seed does not survive a double */
        else
            fputs(v, f);
    }
    fputc('}', f);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

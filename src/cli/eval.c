/* `zshard eval SRC --data FILE`: loss and perplexity of a model (any weights source) on a
 * token or text file, through the trainer's own validation path, so the figure equals the
 * `val loss` a training run prints for the same batches, and is the same at any world size
 * and stage up to the order of the final sum. */
#include "ckpt/ckpt.h"
#include "ckpt/json.h"
#include "args/args.h"
#include "cli/cli.h"
#include "args/flags.h"
#include "cli/train_ops.h"
#include "core/status.h"
#include "zshard.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int eval_run(zs_train_config *cfgp, const char *src, const char *data, const char *val,
                    const char *split, int batches, int json);

/* A string setting of the run that wrote checkpoint dir (its manifest's "run_config", the
 * train flags as given): 1 and the value in out, or 0 when absent or null. */
static int run_setting(const char *dir, const char *key, char *out, size_t cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *text = NULL;
    size_t n = 0;
    int found = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long L = ftell(f);
        if (L > 0 && L < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)L)))
            n = fread(text, 1, (size_t)L, f);
    }
    fclose(f);
    zs_json *root = NULL;
    if (text && zs_json_parse(text, n, &root) == ZS_OK) {
        const zs_json *v = zs_json_get(zs_json_get(root, "run_config"), key);
        if (v && v->type == ZS_JSON_STRING) {
            snprintf(out, cap, "%s", v->str);
            found = 1;
        }
    }
    zs_json_free(root);
    free(text);
    zs_error_clear();
    return found;
}

/* What eval reads from the command line. */
typedef struct eval_opts {
    zs_train_config cfg;
    const char *src, *model, *split, *tok, *doc_sep, *field, *config_path;
    float vf;
    int batches, nproc, json, batch_set, seq_set, docs_set, eos_set, pad_set;
} eval_opts;

/* --batches N|all: all (-1) covers the split once. */
static int parse_batches(void *opts, const char *v, const char *what) {
    eval_opts *o = opts;
    if (!strcmp(v, "all")) {
        o->batches = -1;
        return 0;
    }
    return zs_arg_int_range(what, v, 1, 1 << 30, &o->batches);
}

/* SRC: the one word that is no flag. */
static int eval_src(void *opts, const char *a) {
    eval_opts *o = opts;
    if (o->src) return zs_cli_fail(2, "eval: unexpected argument '%s'", a);
    o->src = a;
    return 0;
}

#define EO(field) offsetof(eval_opts, field)
static const zs_flag EVAL_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(EO(config_path)),
    {.name = "data", .kind = ZS_FLAG_STR, .off = EO(cfg.data_path), .arg = "FILE",
     .help = "text or token shards (a quoted pattern joins shards); with\n"
             "--tokenizer, text files, a folder or JSONL to tokenize"},
    {.name = "tokenizer", .kind = ZS_FLAG_STR, .off = EO(tok), .arg = "PATH",
     .help = "a Hugging Face tokenizer: --data (and --val-data) are\n"
             "tokenized as `zshard tokenize` does (documents, EOS after\n"
             "each, BOS where the template has one) into a temporary\n"
             "folder, removed at the end"},
    {.name = "doc-sep", .kind = ZS_FLAG_STR, .off = EO(doc_sep), .arg = "LINE",
     .help = "a line equal to LINE ends a document: with --tokenizer, as\n"
             "`zshard tokenize` reads it [one document per file];\n"
             "without, byte-level text's rule for --docs, as train's"},
    {.name = "field", .kind = ZS_FLAG_STR, .off = EO(field), .arg = "NAME",
     .help = "with --tokenizer: the JSONL field holding the text [text]"},
    {.name = "split", .kind = ZS_FLAG_STR, .off = EO(split), .arg = "val|all",
     .help = "val: the held-out tail that `train` validates on (the last\n"
             "--val-frac, or all of --val-data); all: the whole file [val]"},
    {.name = "val-data", .kind = ZS_FLAG_STR, .off = EO(cfg.val_path), .arg = "FILE",
     .help = "a separate validation file (as train)"},
    {.name = "val-frac", .kind = ZS_FLAG_FLOAT, .off = EO(vf), .arg = "F",
     .help = "held-out fraction, as train [0.1]"},
    {.name = "vocab", .kind = ZS_FLAG_INT, .off = EO(cfg.vocab), .lo = 0, .hi = INT_MAX,
     .arg = "N", .help = "token shards: the tokenizer's vocabulary [the model's]"},
    {.name = "batch", .kind = ZS_FLAG_INT, .off = EO(cfg.batch), .lo = 1, .hi = INT_MAX,
     .set_off = EO(batch_set), .arg = "N",
     .help = "sequences per batch, all ranks [a zshard checkpoint's\n"
             "training batch, else 8]"},
    {.name = "seq", .kind = ZS_FLAG_INT, .off = EO(cfg.seq), .lo = 1, .hi = INT_MAX,
     .set_off = EO(seq_set), .arg = "T", .help = "sequence length [the checkpoint's, else 64]"},
    {.name = "batches", .kind = ZS_FLAG_CUSTOM, .parse = parse_batches, .arg = "N|all",
     .help = "batches: N, or all to cover the split once [8, as train's\n"
             "--val-batches: the defaults give train's validation loss]"},
    {.name = "docs", .kind = ZS_FLAG_DOCS, .off = EO(cfg.docs), .set_off = EO(docs_set),
     .arg = "MODE",
     .help = "pack|concat|pad: documents as train reads them, the loss the\n"
             "mean over the real targets (docs/data.md) [a zshard\n"
             "checkpoint's, else none: windows of the stream]"},
    {.name = "eos-id", .kind = ZS_FLAG_I64, .off = EO(cfg.eos_id), .lo = 0, .hi = (1 << 24) - 1,
     .set_off = EO(eos_set), .arg = "N",
     .help = "document end id, as train [the checkpoint's, else train's]"},
    {.name = "pad-id", .kind = ZS_FLAG_I64, .off = EO(cfg.pad_id), .lo = 0, .hi = (1 << 24) - 1,
     .set_off = EO(pad_set), .arg = "N",
     .help = "padding id, as train [the checkpoint's, else train's]"},
    {.name = "model", .kind = ZS_FLAG_STR, .off = EO(model), .arg = "NAME",
     .help = "must agree with SRC (supplies heads for a bare safetensors)"},
    {.name = "device", .kind = ZS_FLAG_DEVICE, .off = EO(cfg.module.device), .arg = "cpu|cuda|auto",
     .help = "where it computes (as train) [auto]"},
    {.name = "nproc", .kind = ZS_FLAG_INT, .off = EO(nproc), .lo = 1, .hi = 256, .arg = "N",
     .help = "ranks, as train [1]"},
    {.name = "stage", .kind = ZS_FLAG_STAGE, .off = EO(cfg.module.stage), .arg = "ddp|1|2|3",
     .help = "sharding, as train [ddp]"},
    {.name = "json", .kind = ZS_FLAG_SWITCH, .off = EO(json),
     .help = "one JSON object on stdout instead of text"},
};

static const zs_flag_table EVAL_TABLE = {
    .cmd = "eval",
    .rows = EVAL_FLAGS,
    .count = sizeof EVAL_FLAGS / sizeof EVAL_FLAGS[0],
    .usage = "usage: zshard eval SRC --data FILE [options]\n"
             "SRC: a zshard checkpoint (or save dir), a safetensors file, a Hugging Face\n"
             "directory or an llm.c model file; the model is the source's.\n",
    .positional = eval_src,
};

int zs_cli_eval(int argc, char **argv) {
    eval_opts o = {.cfg = zs_train_config_default(), .split = "val", .vf = 0.1f, .batches = 8,
                   .nproc = 1};
    o.cfg.steps = 1;
    int rc = zs_flag_parse(&EVAL_TABLE, argc, argv, 1, &o, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    zs_train_config cfg = o.cfg;
    const char *src = o.src, *model = o.model, *split = o.split, *tok = o.tok;
    const char *doc_sep = o.doc_sep, *field = o.field;
    int batches = o.batches, nproc = o.nproc, json = o.json, batch_set = o.batch_set;
    int seq_set = o.seq_set, docs_set = o.docs_set, eos_set = o.eos_set, pad_set = o.pad_set;
    float vf = o.vf;
    static char sep_buf[64];
    if (!src) return zs_cli_fail(2, "eval: a weights source SRC is required (zshard eval --help)");
    if (!cfg.data_path) return zs_cli_fail(2, "eval: --data FILE is required");
    if (strcmp(split, "val") && strcmp(split, "all"))
        return zs_cli_fail(2, "eval: --split '%s' is not val or all", split);
    if (!strcmp(split, "all")) {
        if (cfg.val_path) return zs_cli_fail(2, "eval: --split all and --val-data: pick one");
        cfg.val_path = cfg.data_path; /* the whole file is the evaluation set */
    }
    cfg.val_fraction = vf;
    /* --doc-sep: with --tokenizer, the text's separator line for tokenizing (the shards then end
     * documents with EOS); without, the byte-level text's document rule, as train's. */
    if (!tok && doc_sep) cfg.doc_sep = doc_sep;
    if (nproc > 1 && !zs_cli_relaunched()) return zs_cli_relaunch("eval", argc, argv, nproc, 0);
    zs_cli_threads_setup();
    if ((rc = zs_cli_model_from("eval", src, model, &cfg.model))) return rc;
    /* A zshard checkpoint's batch, sequence length and documents, so that the defaults reproduce
     * the validation loss its training run logged. */
    char dir[4200];
    zs_manifest m;
    if (zs_ckpt_resolve(src, dir, sizeof dir) == ZS_OK && zs_manifest_load(dir, &m) == ZS_OK) {
        if (m.info.batch > 0 && !batch_set) cfg.batch = m.info.batch;
        if (m.info.seq > 0 && !seq_set) cfg.seq = m.info.seq;
        /* And its documents, so that the loss is the one its run validated. */
        if (m.info.has_docs && !docs_set && zs_docs_mode_parse(m.info.docs, &cfg.docs) != ZS_OK)
            cfg.docs = ZS_DOCS_NONE;
        if (m.info.has_docs && cfg.docs != ZS_DOCS_NONE) {
            if (!eos_set) cfg.eos_id = m.info.eos_id;
            if (!pad_set) cfg.pad_id = m.info.pad_id;
            if (!tok && !cfg.doc_sep && m.info.has_doc_sep) {
                snprintf(sep_buf, sizeof sep_buf, "%s", m.info.doc_sep);
                cfg.doc_sep = sep_buf;
            }
        }
        zs_manifest_free(&m);
    }
    /* The run's own validation set: --data the run's data without --val-data evaluates what the
     * run validated on (its --val-data), as the logged val_loss did. */
    static char run_val[4200];
    char run_data[4200];
    if (!cfg.val_path && !tok && zs_ckpt_resolve(src, dir, sizeof dir) == ZS_OK &&
        run_setting(dir, "data", run_data, sizeof run_data) && !strcmp(run_data, cfg.data_path) &&
        run_setting(dir, "val-data", run_val, sizeof run_val)) {
        cfg.val_path = run_val;
        fprintf(stderr,
                "eval: %s validated on --val-data %s: evaluating that (give --val-data to choose "
                "another)\n",
                src, run_val);
    }
    zs_error_clear(); /* SRC need not be a zshard checkpoint */
    const char *val_name = cfg.val_path && strcmp(split, "all") ? cfg.val_path : NULL;
    if (!cfg.vocab && cfg.model.vocab != 256) cfg.vocab = cfg.model.vocab;
    if (!tok && field) return zs_cli_fail(2, "eval: --field applies with --tokenizer");
    zs_cli_temp_shards td = {0}, tv = {0};
    const char *data_name = cfg.data_path;
    if (tok) {
        const char *data = cfg.data_path;
        if ((rc = zs_cli_text_to_shards("eval", data, tok, doc_sep, field, &td))) return rc;
        /* said here, naming the tokenizer, not later as the temporary shards' dataset.json */
        if (td.vocab != cfg.model.vocab) {
            zs_cli_temp_shards_remove(&td);
            return zs_cli_fail(1,
                               "eval: --tokenizer %s has %d ids and the model of %s %d: it is "
                               "not the tokenizer the model was trained with (its ids would mean "
                               "other tokens)",
                               tok, td.vocab, src, cfg.model.vocab);
        }
        cfg.data_path = td.pattern;
        if (cfg.val_path && !strcmp(cfg.val_path, data))
            cfg.val_path = td.pattern;
        else if (cfg.val_path) {
            if ((rc = zs_cli_text_to_shards("eval", cfg.val_path, tok, doc_sep, field, &tv))) {
                zs_cli_temp_shards_remove(&td);
                return rc;
            }
            cfg.val_path = tv.pattern;
        }
        fprintf(stderr, "eval: %s tokenized with %s: %lld document%s, %lld tokens%s\n", data,
                tok, (long long)td.documents, td.documents == 1 ? "" : "s", (long long)td.tokens,
                td.skipped ? " (some skipped: zshard tokenize shows which)" : "");
    }
    rc = eval_run(&cfg, src, data_name, val_name, split, batches, json);
    zs_cli_temp_shards_remove(&td);
    zs_cli_temp_shards_remove(&tv);
    return rc;
}

/* The evaluation itself; data is the --data the user gave (the text, when tokenized), val its
 * --val-data (what the val split then is), or NULL. */
static int eval_run(zs_train_config *cfgp, const char *src, const char *data, const char *val,
                    const char *split, int batches, int json) {
    zs_train_config cfg = *cfgp;
    zs_trainer_t *t = NULL;
    float loss = 0.0f;
    zs_status st = zs_trainer_create(&cfg, &t);
    if (st == ZS_OK) st = zs_trainer_init_from(t, src);
    int asked = batches;
    int64_t targets = 0;
    /* all: the split once, the last batch partly (zs_trainer_eval caps any count there) */
    if (st == ZS_OK && batches < 0) batches = zs_trainer_val_batches(t);
    if (st == ZS_OK) st = zs_trainer_eval(t, batches, &loss);
    if (st == ZS_OK) zs_trainer_last_eval(t, &batches, &targets);
    if (st != ZS_OK) {
        zs_trainer_destroy(t);
        return zs_cli_fail(1, "eval: %s", zs_last_error());
    }
    const zs_model_config *mc = zs_trainer_model(t);
    if (zs_trainer_rank(t) == 0) {
        double tokens = (double)targets; /* the real targets the mean is over */
        if (asked > batches)
            fprintf(stderr,
                    "eval: the %s split holds %lld %s, %d batch%s of %d: evaluated those, "
                    "each once, not --batches %d\n",
                    split, (long long)zs_trainer_val_windows(t),
                    cfg.docs ? "samples" : "windows", batches, batches == 1 ? "" : "es",
                    cfg.batch, asked);
        const char *docs = zs_docs_mode_name(cfg.docs);
        if (json) {
            /* Valid JSON whatever the values: null, named in "nonfinite". */
            char lb[ZS_JSON_NUM_CAP], pb[ZS_JSON_NUM_CAP];
            double ppl = exp((double)loss);
            printf("{\"loss\":%s,\"perplexity\":%s,\"batches\":%d,\"batch\":%d,\"seq\":%d,"
                   "\"tokens\":%.0f,\"split\":\"%s\",\"model\":",
                   zs_json_num(lb, "%.9g", loss), zs_json_num(pb, "%.9g", ppl), batches, cfg.batch,
                   cfg.seq, tokens, split);
            zs_json_write_string(stdout, mc->name);
            printf(",\"world_size\":%d,\"docs\":\"%s\"", zs_trainer_world_size(t), docs);
            if (!isfinite(loss) || !isfinite(ppl))
                printf(",\"nonfinite\":[%s%s%s]", isfinite(loss) ? "" : "\"loss\"",
                       !isfinite(loss) && !isfinite(ppl) ? "," : "",
                       isfinite(ppl) ? "" : "\"perplexity\"");
            printf("}\n");
        } else
            printf("eval: %s on %s (%s%s%s): loss %.4f | perplexity %.3f | %d batches of %d "
                   "x %d | %.0f targets\n",
                   src, val ? val : data, val ? "--val-data" : !strcmp(split, "all") ? "all split" : "val split",
                   cfg.docs ? ", --docs " : "", cfg.docs ? docs : "",
                   (double)loss, exp((double)loss), batches, cfg.batch, cfg.seq, tokens);
    }
    zs_trainer_destroy(t);
    if (!isfinite(loss))
        return zs_cli_fail(1, "eval: the loss of %s is %s: its weights are not usable", src,
                           isnan(loss) ? "NaN" : "infinite");
    return 0;
}

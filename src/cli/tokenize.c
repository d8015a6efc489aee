/* `zshard tokenize INPUT... --tokenizer PATH --out DIR`: a corpus of text files, folders,
 * patterns or JSONL into llm.c token shards and dataset.json, with a progress bar on a
 * terminal and a summary at the end. The work is src/data/tokenize.c's. */
#include "args/args.h"
#include "cli/cli.h"
#include "args/flags.h"
#include "core/status.h"
#include "data/tokenize.h"
#include "zshard.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct progress {
    int tty;
    int shown;
} progress;

static void human(char *b, size_t n, double v) {
    if (v >= 1e9)
        snprintf(b, n, "%.2fG", v / 1e9);
    else if (v >= 1e6)
        snprintf(b, n, "%.2fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(b, n, "%.1fk", v / 1e3);
    else
        snprintf(b, n, "%.0f", v);
}

static void on_progress(void *ctx, const zs_tokenize_stats *s, int done) {
    progress *p = ctx;
    char docs[32], toks[32];
    human(docs, sizeof docs, (double)(s->docs[0] + s->docs[1]));
    human(toks, sizeof toks, (double)(s->tokens[0] + s->tokens[1]));
    double mb = (double)s->bytes_read / 1e6, rate = s->seconds > 0 ? mb / s->seconds : 0;
    double frac = s->total_bytes > 0 ? (double)s->bytes_read / (double)s->total_bytes : 0;
    if (frac > 1) frac = 1;
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30 + 0.5);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %3.0f%% | %s docs | %s tokens | %.1f MB at %.2f MB/s  ", bar,
                100 * frac, docs, toks, mb, rate);
        if (done) fprintf(stderr, "\n");
    } else if (!done) {
        fprintf(stderr, "tokenize: %3.0f%% | %s docs | %s tokens | %.1f MB at %.2f MB/s\n",
                100 * frac, docs, toks, mb, rate);
    }
    fflush(stderr);
    p->shown = 1;
}

static void summary(const zs_tokenize_config *c, const zs_tokenize_stats *s) {
    int64_t docs = s->docs[0] + s->docs[1], toks = s->tokens[0] + s->tokens[1];
    double mb = (double)s->bytes_read / 1e6;
    printf("tokenize: %lld document%s (%lld train, %lld val), %lld tokens (%lld train, %lld "
           "val), %.1f tokens per document\n",
           (long long)docs, docs == 1 ? "" : "s", (long long)s->docs[0], (long long)s->docs[1],
           (long long)toks,
           (long long)s->tokens[0], (long long)s->tokens[1],
           docs ? (double)toks / (double)docs : 0.0);
    printf("  read %d file%s, %.2f MB in %.2f s (%.2f MB/s) with %d thread%s\n", s->files,
           s->files == 1 ? "" : "s", mb, s->seconds, s->seconds > 0 ? mb / s->seconds : 0.0,
           c->threads, c->threads == 1 ? "" : "s");
    printf("  wrote %s/: %lld train shard%s, %lld val shard%s of up to %lld tokens, "
           "dataset.json\n",
           c->out_dir, (long long)s->shards[0], s->shards[0] == 1 ? "" : "s",
           (long long)s->shards[1], s->shards[1] == 1 ? "" : "s", (long long)c->shard_size);
    printf("  unknown tokens %lld, byte-fallback tokens %lld, dropped chars %lld, invalid UTF-8 "
           "replaced %lld\n",
           (long long)s->unk, (long long)s->byte_fallback, (long long)s->dropped,
           (long long)s->utf8_replaced);
    int64_t skipped = 0;
    for (int k = 1; k < ZS_DOC_SKIP_COUNT; k++)
        skipped += s->skipped[k];
    printf("  skipped %lld document%s", (long long)skipped, skipped == 1 ? "" : "s");
    const char *sep = " (";
    for (int k = 1; k < ZS_DOC_SKIP_COUNT; k++)
        if (s->skipped[k]) {
            printf("%s%s %lld", sep, zs_doc_skip_name((zs_doc_skip)k), (long long)s->skipped[k]);
            sep = ", ";
        }
    printf("%s\n", skipped ? ")" : "");
    for (int i = 0; i < s->n_bad; i++)
        printf("    %s\n", s->bad[i]);
    if (skipped > s->n_bad) printf("    ... and %lld more\n", (long long)(skipped - s->n_bad));
    for (int i = 0; i < s->n_left_out && i < ZS_CORPUS_MAX_LEFT_OUT; i++)
        printf("  note: left out %s\n", s->left_out[i]);
    if (s->n_left_out > ZS_CORPUS_MAX_LEFT_OUT)
        printf("  note: ... and %d more folders left out\n", s->n_left_out - ZS_CORPUS_MAX_LEFT_OUT);
    if (s->eos_in_text)
        printf("  note: %lld document%s hold the EOS token's text itself, encoded as the EOS: "
               "each reads as two documents\n",
               (long long)s->eos_in_text, s->eos_in_text == 1 ? "" : "s");
    if (docs && !s->docs[0])
        printf("  note: no document went to train (--val-frac %g): a validation-only set; train "
               "reads it with --val-data\n",
               c->val_frac);
    if (docs && !s->docs[1] && c->val_frac > 0)
        printf("  note: no document went to val (--val-frac %g of %lld)\n", c->val_frac,
               (long long)docs);
}

/* SIGINT, SIGTERM, SIGHUP: the job stops and removes what it wrote (zs_tokenize_config's
 * cancel); a second signal ends the process at once. */
static volatile sig_atomic_t g_cancel;
static void on_signal(int sig) {
    if (g_cancel) _exit(128 + sig);
    g_cancel = sig;
}

/* What tokenize reads from the command line. */
typedef struct tok_opts {
    zs_tokenize_config c;
    const char **inputs, **excl, *config_path;
    int n_in, n_ex, quiet, threads_set;
    float vf;
} tok_opts;

/* INPUT...: every word that is no flag ("-" included). */
static int tok_input(void *opts, const char *a) {
    tok_opts *o = opts;
    o->inputs[o->n_in++] = a;
    return 0;
}

/* --exclude GLOB, repeatable. */
static int parse_exclude(void *opts, const char *v, const char *what) {
    tok_opts *o = opts;
    o->excl[o->n_ex++] = v;
    return 0;
}

/* --format auto|text|jsonl. */
static int parse_format(void *opts, const char *v, const char *what) {
    tok_opts *o = opts;
    if (!strcmp(v, "auto"))
        o->c.corpus.format = ZS_CORPUS_AUTO;
    else if (!strcmp(v, "text"))
        o->c.corpus.format = ZS_CORPUS_TEXT;
    else if (!strcmp(v, "jsonl"))
        o->c.corpus.format = ZS_CORPUS_JSONL;
    else
        return zs_cli_fail(2, "%s: '%s' is not one of auto, text, jsonl", what, v);
    return 0;
}

/* --shard-size N in [1, 2^31 - 1]. */
static int parse_shard_size(void *opts, const char *v, const char *what) {
    tok_opts *o = opts;
    uint64_t u = 0;
    int rc = zs_arg_u64(what, v, &u);
    if (!rc && (u < 1 || u > 2147483647u))
        rc = zs_cli_fail(2, "%s: %s is out of range [1, 2147483647]", what, v);
    if (!rc) o->c.shard_size = (int64_t)u;
    return rc;
}

/* --val-frac F in [0, 1]. */
static int parse_val_frac(void *opts, const char *v, const char *what) {
    tok_opts *o = opts;
    int rc = zs_arg_float(what, v, &o->vf);
    if (!rc && (o->vf < 0 || o->vf > 1))
        rc = zs_cli_fail(2, "%s: %s is out of range [0, 1]", what, v);
    return rc;
}

/* --max-doc-bytes B: a size in [1, 64G]. */
static int parse_max_doc(void *opts, const char *v, const char *what) {
    tok_opts *o = opts;
    uint64_t u = 0;
    if (zs_parse_bytes(v, &u) != ZS_OK || u < 1 || u > ((uint64_t)1 << 36))
        return zs_cli_fail(2, "%s: '%s' is not a size in [1, 64G]", what, v);
    o->c.corpus.max_doc_bytes = (size_t)u;
    return 0;
}

#define TO(field) offsetof(tok_opts, field)
static const zs_flag TOK_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(TO(config_path)),
    {.name = "tokenizer", .kind = ZS_FLAG_STR, .off = TO(c.tokenizer), .arg = "PATH",
     .help = "a Hugging Face tokenizer: a folder with tokenizer.json or\n"
             "vocab.json + merges.txt, or one of those files (required)"},
    {.name = "out", .kind = ZS_FLAG_STR, .off = TO(c.out_dir), .arg = "DIR",
     .help = "the output folder, created if missing (required)"},
    {.name = "doc-sep", .kind = ZS_FLAG_STR, .off = TO(c.corpus.doc_sep), .arg = "LINE",
     .help = "text files: a line equal to LINE ends a document, e.g. %\n"
             "(fortune files) or '' (blank lines) [one document per file]"},
    {.name = "field", .kind = ZS_FLAG_STR, .off = TO(c.corpus.field), .arg = "NAME",
     .help = "JSONL: the string field holding the text [text]"},
    {.name = "exclude", .kind = ZS_FLAG_CUSTOM, .parse = parse_exclude, .arg = "GLOB",
     .help = "leave out files whose name matches, e.g. '*.dat' (repeat\n"
             "for more)"},
    {.name = "format", .kind = ZS_FLAG_CUSTOM, .parse = parse_format, .arg = "F",
     .help = "auto, text or jsonl: how to read every input [auto: .jsonl\n"
             "and .ndjson files are JSONL, the others text]"},
    {.name = "shard-size", .kind = ZS_FLAG_CUSTOM, .parse = parse_shard_size, .arg = "N",
     .help = "tokens per shard file [100000000]"},
    {.name = "val-frac", .kind = ZS_FLAG_CUSTOM, .parse = parse_val_frac, .arg = "F",
     .help = "share of documents that go to val, chosen by a hash of each\n"
             "document's index and --seed [0.1]"},
    {.name = "seed", .kind = ZS_FLAG_U64, .off = TO(c.seed), .arg = "S",
     .help = "seed of that choice [1337]"},
    {.name = "threads", .kind = ZS_FLAG_INT, .off = TO(c.threads), .lo = 1, .hi = 1024,
     .set_off = TO(threads_set), .arg = "N",
     .help = "encoding threads [the cores this process may use]; the\n"
             "output is the same bytes for any N"},
    {.name = "eos", .kind = ZS_FLAG_STR, .off = TO(c.eos), .arg = "TOKEN",
     .help = "the end-of-document token [the tokenizer's EOS]"},
    {.name = "max-doc-bytes", .kind = ZS_FLAG_CUSTOM, .parse = parse_max_doc, .arg = "B",
     .help = "longer documents are skipped, e.g. 64M [64M]"},
    {.name = "strict", .kind = ZS_FLAG_SWITCH, .off = TO(c.strict),
     .help = "a document that would be skipped (empty, bad JSONL line,\n"
             "missing or non-string field, too long, binary file) is an\n"
             "error instead"},
    {.name = "overwrite", .kind = ZS_FLAG_SWITCH, .off = TO(c.overwrite),
     .help = "replace the shards and dataset.json of an earlier run in DIR"},
    {.name = "quiet", .kind = ZS_FLAG_SWITCH, .off = TO(quiet), .help = "no progress display"},
};

static const zs_flag_table TOK_TABLE = {
    .cmd = "tokenize",
    .rows = TOK_FLAGS,
    .count = sizeof TOK_FLAGS / sizeof TOK_FLAGS[0],
    .usage = "usage: zshard tokenize INPUT... --tokenizer PATH --out DIR [options]\n"
             "INPUT: text files, folders (their files, recursively; hidden files and links\n"
             "left out), quoted patterns ('data/*.txt'), JSONL files (.jsonl, .ndjson).\n"
             "Writes DIR/train_000000.bin ..., DIR/val_000000.bin ... (llm.c token shards:\n"
             "uint16 when the vocabulary fits, else uint32) and DIR/dataset.json. Each document\n"
             "is the tokenizer's template (e.g. LLaMA's <s>) around its tokens, then the EOS.\n",
    .footer = "Invalid UTF-8 is read as U+FFFD, one per maximal invalid sequence (as Python's\n"
              "errors='replace'). docs/tokenizer.md has the rules.\n",
    .positional = tok_input,
};

int zs_cli_tokenize(int argc, char **argv) {
    tok_opts o = {.c = zs_tokenize_config_default(), .vf = 0.1f};
    o.inputs = calloc((size_t)argc + 1, sizeof *o.inputs);
    o.excl = calloc((size_t)argc + 1, sizeof *o.excl);
    if (!o.inputs || !o.excl) {
        free(o.inputs);
        free(o.excl);
        return zs_cli_fail(1, "tokenize: out of memory");
    }
    int rc = zs_flag_parse(&TOK_TABLE, argc, argv, 1, &o, NULL);
    if (rc < 0) {
        free(o.inputs);
        free(o.excl);
        return 0;
    }
    zs_tokenize_config c = o.c;
    const char **inputs = o.inputs, **excl = o.excl;
    int n_in = o.n_in, n_ex = o.n_ex, quiet = o.quiet, threads_set = o.threads_set;
    float vf = o.vf;
    if (!rc && !n_in) rc = zs_cli_fail(2, "tokenize: no INPUT given (zshard tokenize --help)");
    if (!rc && !c.tokenizer) rc = zs_cli_fail(2, "tokenize: --tokenizer PATH is required");
    if (!rc && !c.out_dir) rc = zs_cli_fail(2, "tokenize: --out DIR is required");
    if (rc) {
        free(inputs);
        free(excl);
        return rc;
    }
    c.val_frac = vf;
    if (!threads_set) c.threads = zs_cli_cores();
    c.corpus.inputs = inputs;
    c.corpus.n_inputs = n_in;
    c.corpus.exclude = excl;
    c.corpus.n_exclude = n_ex;
    progress p = {isatty(2), 0};
    if (!quiet) {
        c.progress = on_progress;
        c.progress_ctx = &p;
        c.progress_s = p.tty ? 0.2 : 10;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    c.cancel = &g_cancel;
    zs_tokenize_stats s;
    zs_status st = zs_tokenize_run(&c, &s);
    if (st != ZS_OK) {
        int sig = zs_tokenize_interrupted(&c);
        if (p.shown && p.tty) fprintf(stderr, "\n");
        free(inputs);
        free(excl);
        /* 128 + the signal, as the shell reports a process it ended */
        const char *e = zs_last_error(); /* the library's own messages may name the command */
        return zs_cli_fail(sig ? 128 + sig : 1, "%s%s", strncmp(e, "tokenize: ", 10) ? "tokenize: " : "",
                           e);
    }
    summary(&c, &s);
    free(inputs);
    free(excl);
    return 0;
}

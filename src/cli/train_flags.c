/* The table of `zshard train`'s flags (train_flags.h): one row per flag with its type, field,
 * range and the ZS_GIVEN_* bit a resume compares; one parser and one printer per type. */
#include "cli/train_flags.h"

#include "cli/args.h"
#include "cli/cli.h"
#include "ckpt/json.h"
#include "core/alloc.h"
#include "core/status.h"
#include "core/log.h"
#include "data/data.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OFF(field) offsetof(train_opts, field)
#define NONE 0, 0, 0, 0
#define POS 0, 1, INT_MAX, 0    /* an int >= 1 */
#define NONNEG 0, 0, INT_MAX, 0 /* an int >= 0 */

/* Help order. `set_off` marks flags whose presence itself matters (--model given, ...). */
static const train_flag FLAGS[] = {
    {"model", TF_STR, OFF(model_name), 0, 0, 0, OFF(model_set)},
    {"tie-embeddings", TF_TIE, OFF(tie), NONE},
    {"data", TF_STR, OFF(cfg.data_path), NONE},
    {"val-data", TF_STR, OFF(cfg.val_path), NONE},
    {"val-frac", TF_DOUBLE, OFF(cfg.val_fraction), 0, 0, 1, 0},
    {"vocab", TF_INT, OFF(cfg.vocab), NONNEG},
    {"docs", TF_DOCS, OFF(cfg.docs), ZS_GIVEN_DOCS, 0, 0, 0},
    {"epochs", TF_INT, OFF(cfg.epochs), ZS_GIVEN_EPOCHS, 1, 1 << 30, 0},
    {"eos-id", TF_I64, OFF(cfg.eos_id), ZS_GIVEN_EOS, 0, ZS_MAX_VOCAB - 1, 0},
    {"pad-id", TF_I64, OFF(cfg.pad_id), ZS_GIVEN_PAD, 0, ZS_MAX_VOCAB - 1, 0},
    {"doc-sep", TF_STR, OFF(cfg.doc_sep), ZS_GIVEN_SEP, 0, 0, 0},
    {"batch", TF_INT, OFF(cfg.batch), ZS_GIVEN_BATCH, 1, INT_MAX, 0},
    {"seq", TF_INT, OFF(cfg.seq), ZS_GIVEN_SEQ, 1, INT_MAX, 0},
    {"steps", TF_INT, OFF(cfg.steps), ZS_GIVEN_STEPS, 1, INT_MAX, 0},
    {"grad-accum", TF_INT, OFF(cfg.grad_accum), ZS_GIVEN_ACCUM, 1, INT_MAX, 0},
    {"lr", TF_FLOAT, OFF(cfg.lr), ZS_GIVEN_LR, 1, 0, 0},
    {"min-lr-frac", TF_FLOAT, OFF(cfg.min_lr_frac), ZS_GIVEN_MIN_LR, 0, 0, 0},
    {"warmup", TF_INT, OFF(cfg.warmup), ZS_GIVEN_WARMUP, 0, INT_MAX, 0},
    {"weight-decay", TF_FLOAT, OFF(cfg.weight_decay), ZS_GIVEN_WD, 0, 0, 0},
    {"grad-clip", TF_FLOAT, OFF(cfg.grad_clip), ZS_GIVEN_CLIP, 0, 0, 0},
    {"seed", TF_U64, OFF(cfg.seed), ZS_GIVEN_SEED, 0, 0, 0},
    {"stage", TF_STAGE, OFF(cfg.stage), NONE},
    {"nproc", TF_INT, OFF(nproc), 0, 1, 256, 0},
    {"max-restarts", TF_INT, OFF(max_restarts), 0, 0, 1000, 0},
    {"prefetch", TF_INT, OFF(cfg.prefetch), NONNEG},
    {"dtype", TF_DTYPE, OFF(cfg.dtype), NONE},
    {"tf32", TF_SWITCH, OFF(cfg.tf32), NONE},
    {"reduce-dtype", TF_DTYPE, OFF(cfg.reduce_dtype), 0, 0, 0, OFF(reduce_dtype_set)},
    {"recompute", TF_RECOMPUTE, OFF(cfg.recompute), NONE},
    {"attention", TF_ATTENTION, OFF(cfg.attention), NONE},
    {"device", TF_DEVICE, OFF(cfg.device), NONE},
    {"comm", TF_STR, OFF(cfg.comm), NONE},
    {"comm-timeout", TF_DOUBLE, OFF(cfg.comm_timeout_s), 0, 1, 0, 0},
    {"val-every", TF_INT, OFF(val_every), NONNEG},
    {"val-batches", TF_INT, OFF(val_batches), POS},
    {"sample-every", TF_INT, OFF(sample_every), NONNEG},
    {"sample-len", TF_INT, OFF(sample_len), 0, 0, INT_MAX, OFF(sample_len_set)},
    {"sample-budget", TF_DOUBLE, OFF(sample_budget), 0, 0, -1, 0},
    {"prompt", TF_STR, OFF(prompt), NONE},
    {"temperature", TF_FLOAT, OFF(temperature), NONE},
    {"print-every", TF_INT, OFF(print_every), NONNEG},
    {"log", TF_STR, OFF(log_path), NONE},
    {"dump-params", TF_STR, OFF(dump_path), NONE},
    {"device-mem", TF_BYTES, OFF(cfg.device_mem), NONE},
    {"mem-report", TF_SWITCH, OFF(mem_report), NONE},
    {"profile-step", TF_INT, OFF(profile_step), NONNEG},
    {"quiet", TF_SWITCH, OFF(quiet), NONE},
    {"verbose", TF_SWITCH, OFF(verbose), NONE},
    {"save-dir", TF_STR, OFF(save_dir), NONE},
    {"save-every", TF_INT, OFF(save_every), NONNEG},
    {"keep", TF_INT, OFF(keep), NONNEG},
    {"resume", TF_STR, OFF(resume), NONE},
    {"override", TF_STR, OFF(override), NONE},
    {"init-from", TF_STR, OFF(init_from), NONE},
};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0] };

int zs_train_flag_count(void) {
    return NFLAGS;
}

const train_flag *zs_train_flag_at(int i) {
    return i >= 0 && i < NFLAGS ? &FLAGS[i] : NULL;
}

/* Config files may write keys as YAML and Python do (save_dir); flags are save-dir. */
static int same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '_' || *a == '-') && (*b == '_' || *b == '-'))) return 0;
    return !*a && !*b;
}

const train_flag *zs_train_flag_find(const char *name) {
    for (int i = 0; i < NFLAGS; i++)
        if (same_name(name, FLAGS[i].name)) return &FLAGS[i];
    return NULL;
}

/* Levenshtein distance, '_' and '-' equal, case-insensitive; names are short. */
static int distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];
    if (la > 63) la = 63;
    if (lb > 63) lb = 63;
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            char x = (char)tolower((unsigned char)a[i - 1]),
                 y = (char)tolower((unsigned char)b[j - 1]);
            int same = x == y || ((x == '_' || x == '-') && (y == '_' || y == '-'));
            int v = d[i - 1][j - 1] + !same;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *zs_train_flag_nearest(const char *name) {
    const char *best = FLAGS[0].name;
    int bd = INT_MAX;
    for (int i = 0; i < NFLAGS; i++) {
        int dd = distance(name, FLAGS[i].name);
        if (dd < bd) bd = dd, best = FLAGS[i].name;
    }
    return best;
}

/* true/false as YAML 1.1 and JSON write them; -1 for anything else. */
static int parse_bool(const char *t) {
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(t, yes[i])) return 1;
        if (!strcasecmp(t, no[i])) return 0;
    }
    return -1;
}

int zs_train_flag_apply(train_opts *o, const train_flag *f, const char *text, const char *what) {
    char *base = (char *)o;
    void *p = base + f->off;
    int rc = 0;
    switch (f->kind) {
    case TF_SWITCH: {
        int b = text ? parse_bool(text) : 1;
        if (b < 0) return zs_cli_fail(2, "%s: '%s' is not true or false", what, text);
        *(int *)p = b;
        if (!strcmp(f->name, "quiet")) o->no_sample = b;
        break;
    }
    case TF_INT: {
        /* parsed wide, so that a number past int says the flag's range, not int's */
        char *end = NULL;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end) return zs_cli_fail(2, "%s: '%s' is not an integer", what, text);
        long long lo = f->lo < f->hi ? f->lo : INT_MIN, hi = f->lo < f->hi ? f->hi : INT_MAX;
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX) /* not a typo of a small number */
            return zs_cli_fail(2, "%s: '%s' is out of range [%lld, %lld]", what, text, lo, hi);
        if (v < lo || v > hi) {
            if (hi == INT_MAX)
                return zs_cli_fail(2, "%s must be %s", what, lo == 1 ? "positive" : ">= 0");
            return zs_cli_fail(2, "%s: %lld is out of range [%lld, %lld]", what, v, lo, hi);
        }
        *(int *)p = (int)v;
        break;
    }
    case TF_FLOAT: {
        float v = 0.0f;
        if ((rc = zs_arg_float(what, text, &v))) return rc;
        /* (1, 0): must be positive, as TF_DOUBLE; the check here names the file and line */
        if (f->lo == 1 && f->hi == 0 && !(v > 0))
            return zs_cli_fail(2, "%s: %s must be positive", what, text);
        *(float *)p = v;
        break;
    }
    case TF_DOUBLE: {
        char *end = NULL;
        double v = strtod(text, &end);
        if (end == text || *end || !isfinite(v))
            return zs_cli_fail(2, "%s: '%s' is not a number", what, text);
        if (f->lo == 1 && f->hi == 0 && !(v > 0))
            return zs_cli_fail(2, "%s must be positive", what);
        if (f->lo == 0 && f->hi == -1 && !(v >= 0)) return zs_cli_fail(2, "%s must be >= 0", what);
        if (f->lo == 0 && f->hi == 1 && !(v > 0 && v < 1)) /* a fraction, open (0, 1) */
            return zs_cli_fail(2, "%s: %s must be in (0, 1)", what, text);
        *(double *)p = v;
        break;
    }
    case TF_U64:
        if ((rc = zs_arg_u64(what, text, (uint64_t *)p))) return rc;
        break;
    case TF_STR:
        *(const char **)p = text;
        break;
    case TF_STAGE:
        if ((rc = zs_arg_stage(what, text, (zs_stage *)p))) return rc;
        break;
    case TF_DTYPE:
        if ((rc = zs_arg_dtype(what, text, 0, (zs_dtype *)p))) return rc;
        break;
    case TF_RECOMPUTE:
        if ((rc = zs_arg_recompute(what, text, (zs_recompute *)p))) return rc;
        break;
    case TF_ATTENTION:
        if ((rc = zs_arg_attention(what, text, (zs_attention *)p))) return rc;
        break;
    case TF_DEVICE:
        if ((rc = zs_arg_device(what, text, (const char **)p))) return rc;
        break;
    case TF_TIE:
        if ((rc = zs_arg_tie(what, text, (int *)p))) return rc;
        break;
    case TF_BYTES:
        if (zs_parse_bytes(text, (uint64_t *)p) != ZS_OK)
            return zs_cli_fail(2, "%s: %s", what, zs_last_error());
        break;
    case TF_I64: {
        int v = 0;
        if ((rc = zs_arg_int_range(what, text, (int)f->lo, (int)f->hi, &v))) return rc;
        *(int64_t *)p = v;
        break;
    }
    case TF_DOCS:
        if (zs_docs_mode_parse(text, (zs_docs_mode *)p) != ZS_OK)
            return zs_cli_fail(2, "%s: '%s' is not one of pack, concat, pad, none", what, text);
        break;
    }
    o->given |= f->given;
    if (f->set_off) *(int *)(base + f->set_off) = 1;
    return 0;
}

/* The shortest decimal that reads back as the same float. */
static void float_text(float v, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

static void double_text(double v, char *buf, size_t cap) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

int zs_train_flag_value(const train_opts *o, const train_flag *f, char *buf, size_t cap) {
    const char *base = (const char *)o;
    const void *p = base + f->off;
    static const char *stages[] = {"ddp", "1", "2", "3"};
    switch (f->kind) {
    case TF_SWITCH:
        snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false");
        return 1;
    case TF_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        return 1;
    case TF_FLOAT:
        float_text(*(const float *)p, buf, cap);
        return 1;
    case TF_DOUBLE:
        if (*(const double *)p == 0 && f->lo == 1 && f->hi == 0) return 0; /* unset: default */
        double_text(*(const double *)p, buf, cap);
        return 1;
    case TF_U64:
        snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p);
        return 1;
    case TF_STR:
    case TF_DEVICE:
        if (!*(const char *const *)p) return 0;
        snprintf(buf, cap, "%s", *(const char *const *)p);
        return 1;
    case TF_STAGE:
        snprintf(buf, cap, "%s", stages[*(const zs_stage *)p & 3]);
        return 1;
    case TF_DTYPE:
        snprintf(buf, cap, "%s", *(const zs_dtype *)p == ZS_DTYPE_BF16 ? "bf16" : "fp32");
        return 1;
    case TF_RECOMPUTE:
        snprintf(buf, cap, "%s", *(const zs_recompute *)p == ZS_RECOMPUTE_BLOCK ? "block" : "none");
        return 1;
    case TF_ATTENTION:
        snprintf(buf, cap, "%s",
                 *(const zs_attention *)p == ZS_ATTENTION_NAIVE ? "naive" : "flash");
        return 1;
    case TF_TIE:
        if (!*(const int *)p) return 0; /* the model's own */
        snprintf(buf, cap, "%s", *(const int *)p == ZS_TIE_ON ? "on" : "off");
        return 1;
    case TF_BYTES:
        if (!*(const uint64_t *)p) return 0;
        snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p);
        return 1;
    case TF_I64:
        if (*(const int64_t *)p < 0) return 0;
        snprintf(buf, cap, "%" PRId64, *(const int64_t *)p);
        return 1;
    case TF_DOCS:
        snprintf(buf, cap, "%s", zs_docs_mode_name(*(const zs_docs_mode *)p));
        return 1;
    }
    return 0;
}

/* Whether a value is written bare (numbers, booleans, choices) or as a quoted string. */
static int quoted(const train_flag *f) {
    return f->kind == TF_STR || f->kind == TF_DEVICE;
}

/* The model is printed when it is this run's choice, not the source's (--resume/--init-from
 * take it from their checkpoint or weights, and a --model then has to agree). */
static int shown(const train_opts *o, const train_flag *f) {
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
    if (!shown(o, zs_train_flag_find("model")))
        fprintf(f, "# model: the checkpoint's or the weights' (--resume / --init-from)\n");
    for (int i = 0; i < NFLAGS; i++) {
        const train_flag *fl = &FLAGS[i];
        if (!shown(o, fl) || !zs_train_flag_value(o, fl, v, sizeof v)) continue;
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
        const train_flag *fl = &FLAGS[i];
        if (!shown(o, fl) || !zs_train_flag_value(o, fl, v, sizeof v)) continue;
        fprintf(f, "%s\"%s\":", n++ ? "," : "", fl->name);
        if (quoted(fl) || fl->kind == TF_STAGE || fl->kind == TF_DTYPE || fl->kind == TF_DOCS ||
            fl->kind == TF_RECOMPUTE || fl->kind == TF_ATTENTION || fl->kind == TF_TIE)
            zs_json_write_string(f, v);
        else if (fl->kind == TF_U64)
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

/* The argument library (flags.h): rows of any command's flags, found, suggested, applied,
 * printed and parsed from argv or a --config file by one set of functions. */
#include "args/flags.h"

#include "args/args.h"
#include "args/config.h"
#include "core/alloc.h"
#include "core/status.h"
#include "data/data.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void (*g_printer)(const char *line);

/* Route error lines to fn (NULL: stderr). */
void zs_flag_set_printer(void (*fn)(const char *line)) {
    g_printer = fn;
}

/* "zshard: <msg>" on stderr (or to the printer); returns code. */
int zs_flag_vfail(int code, const char *fmt, va_list ap) {
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (g_printer)
        g_printer(msg);
    else
        fprintf(stderr, "zshard: %s\n", msg);
    return code;
}

/* zs_flag_vfail with its arguments inline. */
int zs_flag_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zs_flag_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

/* Config files may write keys as YAML and Python do (save_dir); flags are save-dir. */
static int same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '_' || *a == '-') && (*b == '_' || *b == '-'))) return 0;
    return !*a && !*b;
}

/* Rows that are flags (not section headings). */
static int is_flag(const zs_flag *f) {
    return f->kind != ZS_FLAG_SECTION;
}

/* Find a flag row by name ('_' and '-' alike). */
const zs_flag *zs_flag_find(const zs_flag_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (is_flag(&t->rows[i]) && same_name(name, t->rows[i].name)) return &t->rows[i];
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

/* The visible long flag nearest to name. */
const char *zs_flag_nearest(const zs_flag_table *t, const char *name) {
    const char *best = "help";
    int bd = INT_MAX;
    for (int i = 0; i < t->count; i++) {
        const zs_flag *f = &t->rows[i];
        if (!is_flag(f) || (f->opt & ZS_FLAG_HIDDEN) || !f->name[1]) continue;
        int dd = distance(name, f->name);
        if (dd < bd) bd = dd, best = f->name;
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

/* An int within the row's range, with train's messages. */
static int apply_int(const zs_flag *f, const char *text, const char *what, int *out) {
    /* parsed wide, so that a number past int says the flag's range, not int's */
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end) return zs_flag_fail(2, "%s: '%s' is not an integer", what, text);
    long long lo = f->lo < f->hi ? f->lo : INT_MIN, hi = f->lo < f->hi ? f->hi : INT_MAX;
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX) /* not a typo of a small number */
        return zs_flag_fail(2, "%s: '%s' is out of range [%lld, %lld]", what, text, lo, hi);
    if (v < lo || v > hi) {
        if (hi == INT_MAX && (lo == 0 || lo == 1))
            return zs_flag_fail(2, "%s must be %s", what, lo == 1 ? "positive" : ">= 0");
        return zs_flag_fail(2, "%s: %lld is out of range [%lld, %lld]", what, v, lo, hi);
    }
    *out = (int)v;
    return 0;
}

/* A double within the row's range. */
static int apply_double(const zs_flag *f, const char *text, const char *what, double *out) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v))
        return zs_flag_fail(2, "%s: '%s' is not a number", what, text);
    if (f->lo == 1 && f->hi == 0 && !(v > 0)) return zs_flag_fail(2, "%s must be positive", what);
    if (f->lo == 0 && f->hi == -1 && !(v >= 0)) return zs_flag_fail(2, "%s must be >= 0", what);
    if (f->lo == 0 && f->hi == 1 && !(v > 0 && v < 1)) /* a fraction, open (0, 1) */
        return zs_flag_fail(2, "%s: %s must be in (0, 1)", what, text);
    *out = v;
    return 0;
}

/* Parse text by the row's kind into its field. */
static int apply_kind(void *opts, const zs_flag *f, const char *text, const char *what) {
    void *p = (char *)opts + f->off;
    int rc = 0;
    switch (f->kind) {
    case ZS_FLAG_SWITCH: {
        int b = text ? parse_bool(text) : 1;
        if (b < 0) return zs_flag_fail(2, "%s: '%s' is not true or false", what, text);
        *(int *)p = b;
        return 0;
    }
    case ZS_FLAG_INT:
        return apply_int(f, text, what, (int *)p);
    case ZS_FLAG_FLOAT: {
        float v = 0.0f;
        if ((rc = zs_arg_float(what, text, &v))) return rc;
        /* (1, 0): must be positive, as DOUBLE; the check here names the file and line */
        if (f->lo == 1 && f->hi == 0 && !(v > 0))
            return zs_flag_fail(2, "%s: %s must be positive", what, text);
        *(float *)p = v;
        return 0;
    }
    case ZS_FLAG_DOUBLE:
        return apply_double(f, text, what, (double *)p);
    case ZS_FLAG_U64:
        return zs_arg_u64(what, text, (uint64_t *)p);
    case ZS_FLAG_STR:
        *(const char **)p = text;
        return 0;
    case ZS_FLAG_STAGE:
        return zs_arg_stage(what, text, (zs_stage *)p);
    case ZS_FLAG_DTYPE:
        return zs_arg_dtype(what, text, 0, (zs_dtype *)p);
    case ZS_FLAG_RECOMPUTE:
        return zs_arg_recompute(what, text, (zs_recompute *)p);
    case ZS_FLAG_OFFLOAD:
        return zs_arg_offload(what, text, (zs_offload *)p);
    case ZS_FLAG_ATTENTION:
        return zs_arg_attention(what, text, (zs_attention *)p);
    case ZS_FLAG_DEVICE:
        return zs_arg_device(what, text, (const char **)p);
    case ZS_FLAG_TIE:
        return zs_arg_tie(what, text, (int *)p);
    case ZS_FLAG_BYTES:
        if (zs_parse_bytes(text, (uint64_t *)p) != ZS_OK)
            return zs_flag_fail(2, "%s: %s", what, zs_last_error());
        return 0;
    case ZS_FLAG_I64: {
        int v = 0;
        if ((rc = zs_arg_int_range(what, text, (int)f->lo, (int)f->hi, &v))) return rc;
        *(int64_t *)p = v;
        return 0;
    }
    case ZS_FLAG_DOCS:
        if (zs_docs_mode_parse(text, (zs_docs_mode *)p) != ZS_OK)
            return zs_flag_fail(2, "%s: '%s' is not one of pack, concat, pad, none", what, text);
        return 0;
    case ZS_FLAG_CUSTOM:
        return f->parse(opts, text, what);
    case ZS_FLAG_SECTION:
        break;
    }
    return 0;
}

/* Apply one value to one row, then its given bits and set flag. */
int zs_flag_apply(const zs_flag_table *t, void *opts, const zs_flag *f, const char *text,
                  const char *what) {
    int rc = apply_kind(opts, f, text, what);
    if (rc) return rc;
    if (f->given) *(unsigned *)((char *)opts + t->given_off) |= f->given;
    if (f->set_off) *(int *)((char *)opts + f->set_off) = 1;
    if (t->seen) t->seen(opts, f);
    return 0;
}

/* The shortest decimal that reads back as the same float. */
static void float_text(float v, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

/* The shortest decimal that reads back as the same double. */
static void double_text(double v, char *buf, size_t cap) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The row's value as text; 0 when there is none to show. */
int zs_flag_value(const void *opts, const zs_flag *f, char *buf, size_t cap) {
    const void *p = (const char *)opts + f->off;
    static const char *stages[] = {"ddp", "1", "2", "3"};
    switch (f->kind) {
    case ZS_FLAG_SWITCH:
        snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false");
        return 1;
    case ZS_FLAG_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        return 1;
    case ZS_FLAG_FLOAT:
        float_text(*(const float *)p, buf, cap);
        return 1;
    case ZS_FLAG_DOUBLE:
        if (*(const double *)p == 0 && f->lo == 1 && f->hi == 0) return 0; /* unset: default */
        double_text(*(const double *)p, buf, cap);
        return 1;
    case ZS_FLAG_U64:
        snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p);
        return 1;
    case ZS_FLAG_STR:
    case ZS_FLAG_DEVICE:
        if (!*(const char *const *)p) return 0;
        snprintf(buf, cap, "%s", *(const char *const *)p);
        return 1;
    case ZS_FLAG_STAGE:
        snprintf(buf, cap, "%s", stages[*(const zs_stage *)p & 3]);
        return 1;
    case ZS_FLAG_DTYPE:
        snprintf(buf, cap, "%s", *(const zs_dtype *)p == ZS_DTYPE_BF16 ? "bf16" : "fp32");
        return 1;
    case ZS_FLAG_RECOMPUTE:
        snprintf(buf, cap, "%s", *(const zs_recompute *)p == ZS_RECOMPUTE_BLOCK ? "block" : "none");
        return 1;
    case ZS_FLAG_OFFLOAD:
        snprintf(buf, cap, "%s", zs_offload_name(*(const zs_offload *)p));
        return 1;
    case ZS_FLAG_ATTENTION:
        snprintf(buf, cap, "%s",
                 *(const zs_attention *)p == ZS_ATTENTION_NAIVE ? "naive" : "flash");
        return 1;
    case ZS_FLAG_TIE:
        if (!*(const int *)p) return 0; /* the model's own */
        snprintf(buf, cap, "%s", *(const int *)p == ZS_TIE_ON ? "on" : "off");
        return 1;
    case ZS_FLAG_BYTES:
        if (!*(const uint64_t *)p) return 0;
        snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p);
        return 1;
    case ZS_FLAG_I64:
        if (*(const int64_t *)p < 0) return 0;
        snprintf(buf, cap, "%" PRId64, *(const int64_t *)p);
        return 1;
    case ZS_FLAG_DOCS:
        snprintf(buf, cap, "%s", zs_docs_mode_name(*(const zs_docs_mode *)p));
        return 1;
    case ZS_FLAG_CUSTOM:
    case ZS_FLAG_SECTION:
        break;
    }
    return 0;
}

/* The help: usage, rows as "  --name ARG  help" (continuations indented), footer. */
void zs_flag_help(const zs_flag_table *t, FILE *f) {
    enum { COL = 22 };
    if (t->usage) fputs(t->usage, f);
    for (int i = 0; i < t->count; i++) {
        const zs_flag *r = &t->rows[i];
        if (r->kind == ZS_FLAG_SECTION) {
            fprintf(f, "%s:\n", r->name);
            continue;
        }
        if (r->opt & ZS_FLAG_HIDDEN) continue;
        int n = fprintf(f, "  %s%s%s%s", r->name[1] ? "--" : "-", r->name, r->arg ? " " : "",
                        r->arg ? r->arg : "");
        const char *h = r->help ? r->help : "";
        fprintf(f, "%*s", n < COL ? COL - n : 2, "");
        for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
            fprintf(f, "%.*s\n%*s", (int)(nl - h), h, COL, "");
        fprintf(f, "%s\n", h);
    }
    if (t->footer) fputs(t->footer, f);
}

static zs_config g_config; /* the last file read: options point into its strings */

/* A config file's entries through the rows. */
int zs_flag_config(const zs_flag_table *t, void *opts, const char *path) {
    zs_config_free(&g_config);
    int rc = zs_config_load(path, &g_config);
    if (rc) return rc;
    for (int i = 0; i < g_config.n; i++) {
        const zs_config_entry *e = &g_config.e[i];
        char what[1200];
        snprintf(what, sizeof what, "%s:%d: %s", path, e->line, e->key);
        const zs_flag *f = zs_flag_find(t, e->key);
        if ((f && (f->opt & ZS_FLAG_CLI_ONLY)) || !strcmp(e->key, "help"))
            return zs_flag_fail(2, "%s: not a setting (give it on the command line)", what);
        if (!f)
            return zs_flag_fail(2,
                                "%s:%d: unknown key '%s' (did you mean '%s'? the keys are "
                                "%s's long flags: zshard %s --help)",
                                path, e->line, e->key, zs_flag_nearest(t, e->key), t->cmd, t->cmd);
        if (!e->value) {
            if (f->kind != ZS_FLAG_STR) return zs_flag_fail(2, "%s: has no value", what);
            continue; /* null: the flag's default */
        }
        /* "3" in quotes is a string in YAML and JSON alike, not the number a user meant */
        zs_flag_kind k = f->kind;
        if (e->quoted && (k == ZS_FLAG_SWITCH || k == ZS_FLAG_INT || k == ZS_FLAG_FLOAT ||
                          k == ZS_FLAG_DOUBLE || k == ZS_FLAG_U64 || k == ZS_FLAG_I64))
            return zs_flag_fail(2, "%s: \"%s\" is in quotes, so a string: write the %s without them",
                                what, e->value, k == ZS_FLAG_SWITCH ? "true or false" : "number");
        if ((rc = zs_flag_apply(t, opts, f, e->value, what))) return rc;
    }
    return 0;
}

/* The row an argv word names: "--name" (long) or "-x" (a one-letter row); NULL otherwise. */
static const zs_flag *flag_of(const zs_flag_table *t, const char *a) {
    const zs_flag *f = NULL;
    if (!strncmp(a, "--", 2) && a[2]) {
        f = zs_flag_find(t, a + 2);
        if (f && (!f->name[1] || strchr(a + 2, '_'))) f = NULL; /* '-' on the command line */
    } else if (a[0] == '-' && a[1] && !a[2]) {
        f = zs_flag_find(t, a + 1);
        if (f && f->name[1]) f = NULL;
    }
    return f;
}

/* Whether a is a flag-shaped word ("--x", "-x"), not a positional ("-" is one: stdin). */
static int flag_shaped(const char *a) {
    return a[0] == '-' && a[1];
}

/* argv through the table (see flags.h). */
int zs_flag_parse(const zs_flag_table *t, int argc, char **argv, int first, void *opts,
                  int *rest) {
    const zs_flag *cfg = zs_flag_find(t, "config");
    const char *cfg_path = NULL;
    int end = argc;
    for (int i = first; i < argc; i++) {
        if (t->stop_at_dashes && !strcmp(argv[i], "--")) {
            end = i;
            break;
        }
        if (zs_arg_is_help(argv[i])) {
            zs_flag_help(t, stdout);
            return -1;
        }
        if (cfg && !strcmp(argv[i], "--config")) {
            const char *v = zs_arg_value(argc, argv, &i);
            if (!v) return 2;
            if (cfg_path) return zs_flag_fail(2, "%s: --config given twice", t->cmd);
            cfg_path = v;
        }
    }
    if (rest) *rest = end < argc ? end + 1 : argc;
    int rc = 0;
    if (cfg_path && (rc = zs_flag_config(t, opts, cfg_path))) return rc;
    for (int i = first; i < end; i++) {
        const char *a = argv[i], *v = NULL;
        if (!flag_shaped(a)) {
            if (t->positional) {
                if ((rc = t->positional(opts, a))) return rc;
                continue;
            }
            return zs_flag_fail(2, "%s: unexpected argument '%s' (see zshard %s --help)", t->cmd,
                                a, t->cmd);
        }
        const zs_flag *f = flag_of(t, a);
        if (!f)
            return zs_flag_fail(2, "%s: unknown flag '%s' (did you mean --%s? see zshard %s --help)",
                                t->cmd, a, zs_flag_nearest(t, a + strspn(a, "-")), t->cmd);
        if (f->kind == ZS_FLAG_SWITCH) {
            /* --quiet, or --quiet=false (split into two words by main) */
            if (i + 1 < end && zs_arg_bool_word(argv[i + 1])) v = argv[++i];
        } else if (!(v = zs_arg_value(end, argv, &i))) {
            return 2;
        }
        if (f == cfg) continue; /* read above */
        if ((rc = zs_flag_apply(t, opts, f, v, a))) return rc;
    }
    return 0;
}

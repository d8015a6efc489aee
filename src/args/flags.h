/* The argument library every command and benchmark parses its flags with: a table of rows
 * (name, type, field offset into the command's own options struct, range, help), and one
 * parser for argv and --config files, one help printer and one error printer over it, so that
 * `--flag value`, `--flag=value` (split by main), `--help`, "did you mean", switches written
 * `--quiet=false` and range messages behave the same on every command. It depends on no
 * command: train, eval, ..., and bench/ build on it. */
#ifndef ZS_CLI_FLAGS_H
#define ZS_CLI_FLAGS_H

#include "zshard.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef enum zs_flag_kind {
    ZS_FLAG_SWITCH,    /* int set to 1 (true/false given as a value or in a config file) */
    ZS_FLAG_INT,       /* int, within [lo, hi] when lo < hi */
    ZS_FLAG_FLOAT,     /* float; (lo, hi) = (1, 0): must be positive */
    ZS_FLAG_DOUBLE,    /* double; (1, 0) positive, (0, -1) >= 0, (0, 1) in the open (0, 1) */
    ZS_FLAG_U64,       /* uint64_t */
    ZS_FLAG_STR,       /* const char * */
    ZS_FLAG_STAGE,     /* zs_stage: ddp|1|2|3 */
    ZS_FLAG_DTYPE,     /* zs_dtype: fp32|bf16 */
    ZS_FLAG_RECOMPUTE, /* zs_recompute: none|block */
    ZS_FLAG_ATTENTION, /* zs_attention: flash|naive */
    ZS_FLAG_DEVICE,    /* const char *: cpu|cuda|auto */
    ZS_FLAG_TIE,       /* int: ZS_TIE_ON/OFF, 0 = the model's */
    ZS_FLAG_BYTES,     /* uint64_t from a size such as 4G */
    ZS_FLAG_I64,       /* int64_t within [lo, hi]; shown only when >= 0 (-1: unset) */
    ZS_FLAG_DOCS,      /* zs_docs_mode: pack|concat|pad|none */
    ZS_FLAG_OFFLOAD,   /* zs_offload: none|optimizer|params */
    ZS_FLAG_CUSTOM,    /* the row's own parse function */
    ZS_FLAG_SECTION,   /* not a flag: a heading in the help text (name is its title) */
} zs_flag_kind;

/* Row options. */
enum {
    ZS_FLAG_HIDDEN = 1u << 0,    /* accepted but left out of the help (another spelling) */
    ZS_FLAG_CLI_ONLY = 1u << 1,  /* command line only: not a config key, not written */
};

typedef struct zs_flag {
    const char *name;    /* the long flag without "--" (one letter: a short flag "-n"); the
                            config file's key */
    zs_flag_kind kind;
    size_t off;          /* the field in the command's options struct */
    unsigned given;      /* bits or'ed into the table's given mask when the flag is given */
    long long lo, hi;    /* the range (see the kinds) */
    size_t set_off;      /* an int of the options set to 1 when the flag is given, or 0 */
    const char *arg;     /* the value's name in the help ("N", "FILE"); NULL for a switch */
    const char *help;    /* what it does [default]; '\n' continues on an indented line */
    unsigned opt;        /* ZS_FLAG_HIDDEN, ZS_FLAG_CLI_ONLY */
    /* ZS_FLAG_CUSTOM: give the value `text` to opts; `what` names the setting in messages.
     * Returns 0, or the printed usage error's exit status. */
    int (*parse)(void *opts, const char *text, const char *what);
} zs_flag;

/* The --config row every command's table starts with: a YAML or JSON file whose keys are the
 * table's long flags, read before the command line (which overrides it). off: a const char *
 * field of the options (its offsetof). */
#define ZS_FLAG_CONFIG_ROW(offset)                                                                 \
    {                                                                                              \
        .name = "config", .kind = ZS_FLAG_STR, .off = (offset), .arg = "FILE",                     \
        .help = "settings from a YAML or JSON file whose keys are the long\n"                      \
                "flags below; flags given on the command line override it",                        \
        .opt = ZS_FLAG_CLI_ONLY                                                                    \
    }

typedef struct zs_flag_table {
    const char *cmd;    /* "train", "bench step": messages' prefix and `zshard CMD --help` */
    const zs_flag *rows;
    int count;
    const char *usage;  /* the help text above the rows */
    const char *footer; /* and below them, or NULL */
    size_t given_off;   /* the unsigned mask of the options that rows' given bits go to, when
                           any row has some */
    /* A word that is no flag (SRC, INPUT...): 0 taken, else the printed error's status; NULL:
     * "CMD: unexpected argument". */
    int (*positional)(void *opts, const char *arg);
    /* Called after each flag or config key is applied (mem names the ones it ignores). */
    void (*seen)(void *opts, const zs_flag *f);
    int stop_at_dashes; /* a bare "--" ends the flags (zshard run: the command follows) */
} zs_flag_table;

/* Print "zshard: <msg>" (one line on stderr, or to the printer set below); returns code. */
int zs_flag_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int zs_flag_vfail(int code, const char *fmt, va_list ap);
/* Send error lines (without the newline) to fn instead of stderr; NULL restores stderr. */
void zs_flag_set_printer(void (*fn)(const char *line));

/* The row named `name` (without "--"; a config key may spell '-' as '_'), or NULL. */
const zs_flag *zs_flag_find(const zs_flag_table *t, const char *name);
/* The visible flag name nearest to `name` by edit distance (for "did you mean"). */
const char *zs_flag_nearest(const zs_flag_table *t, const char *name);

/* Give row f the value `text` (NULL for a switch without a value: true). `what` names the
 * setting in messages ("--batch", or "run.yaml:3: batch"). Returns 0 or the printed usage
 * error's exit status (2). */
int zs_flag_apply(const zs_flag_table *t, void *opts, const zs_flag *f, const char *text,
                  const char *what);

/* The value of row f in opts as text (numbers written so they parse back to the same bits);
 * 0 when the flag has no value to show (an unset path, a custom row). */
int zs_flag_value(const void *opts, const zs_flag *f, char *buf, size_t cap);

/* The help text: usage, one entry per visible row (section headings between), footer. */
void zs_flag_help(const zs_flag_table *t, FILE *f);

/* argv[first..argc) into opts (defaults set by the caller): --help/-h prints the help and
 * returns -1; a "config" row reads its file first, wherever it stands, so that flags
 * override it; then every flag through its row. Returns 0, -1, or the printed error's exit
 * status. With stop_at_dashes, *rest is the index after a bare "--" (argc when none). */
int zs_flag_parse(const zs_flag_table *t, int argc, char **argv, int first, void *opts,
                  int *rest);

/* The entries of config file `path` through the table's rows, named "FILE:LINE: key" in
 * messages. The file's strings stay alive until the next call (a command parses once).
 * Returns 0, or the printed error's exit status. */
int zs_flag_config(const zs_flag_table *t, void *opts, const char *path);

#endif

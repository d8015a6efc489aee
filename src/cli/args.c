/* Flag value parsing shared by the subcommands. */
#include "cli/args.h"
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

int zs_arg_int(const char *flag, const char *text, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < INT_MIN || v > INT_MAX)
        return zs_cli_fail(2, "%s: '%s' is not an integer", flag, text);
    *out = (int)v;
    return 0;
}

int zs_arg_float(const char *flag, const char *text, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v))
        return zs_cli_fail(2, "%s: '%s' is not a number", flag, text);
    *out = (float)v;
    return 0;
}

int zs_arg_u64(const char *flag, const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (text[0] == '-') return zs_cli_fail(2, "%s: '%s' must not be negative", flag, text);
    unsigned long long v = strtoull(text, &end, 0);
    if (end == text || *end || errno)
        return zs_cli_fail(2, "%s: '%s' is not a non-negative integer", flag, text);
    *out = (uint64_t)v;
    return 0;
}

const char *zs_arg_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        zs_cli_fail(2, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* Flag value parsing shared by the subcommands. */
#include "args/args.h"
#include "args/flags.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int zs_arg_int(const char *flag, const char *text, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end) return zs_flag_fail(2, "%s: '%s' is not an integer", flag, text);
    /* A number too large for the flag is not a typo of a number: say which it is. */
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
        return zs_flag_fail(2, "%s: '%s' is out of range [%d, %d]", flag, text, INT_MIN, INT_MAX);
    *out = (int)v;
    return 0;
}

int zs_arg_float(const char *flag, const char *text, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || (errno && errno != ERANGE) || isnan(v))
        return zs_flag_fail(2, "%s: '%s' is not a number", flag, text);
    if (errno == ERANGE || !isfinite(v) || fabs(v) > FLT_MAX)
        return zs_flag_fail(2, "%s: '%s' is out of range", flag, text);
    *out = (float)v;
    return 0;
}

int zs_arg_u64(const char *flag, const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (text[0] == '-') return zs_flag_fail(2, "%s: '%s' must not be negative", flag, text);
    unsigned long long v = strtoull(text, &end, 0);
    if (end == text || *end)
        return zs_flag_fail(2, "%s: '%s' is not a non-negative integer", flag, text);
    if (errno == ERANGE) return zs_flag_fail(2, "%s: '%s' is out of range (64 bits)", flag, text);
    *out = (uint64_t)v;
    return 0;
}

int zs_arg_int_range(const char *flag, const char *text, int lo, int hi, int *out) {
    int v = 0, rc = zs_arg_int(flag, text, &v);
    if (rc) return rc;
    if (v < lo || v > hi)
        return zs_flag_fail(2, "%s: %d is out of range [%d, %d]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int zs_arg_tie(const char *flag, const char *text, int *out) {
    if (!strcmp(text, "on"))
        *out = ZS_TIE_ON;
    else if (!strcmp(text, "off"))
        *out = ZS_TIE_OFF;
    else
        return zs_flag_fail(2, "%s: '%s' is not one of on, off", flag, text);
    return 0;
}

int zs_arg_stage(const char *flag, const char *text, zs_stage *out) {
    static const char *names[] = {"ddp", "1", "2", "3"};
    for (int s = 0; s < 4; s++)
        if (!strcmp(text, names[s])) {
            *out = (zs_stage)s;
            return 0;
        }
    return zs_flag_fail(2, "%s: '%s' is not one of ddp, 1, 2, 3", flag, text);
}

int zs_arg_recompute(const char *flag, const char *text, zs_recompute *out) {
    if (!strcmp(text, "none"))
        *out = ZS_RECOMPUTE_NONE;
    else if (!strcmp(text, "block"))
        *out = ZS_RECOMPUTE_BLOCK;
    else
        return zs_flag_fail(2, "%s: '%s' is not one of none, block", flag, text);
    return 0;
}

int zs_arg_offload(const char *flag, const char *text, zs_offload *out) {
    if (!strcmp(text, "none"))
        *out = ZS_OFFLOAD_NONE;
    else if (!strcmp(text, "optimizer"))
        *out = ZS_OFFLOAD_OPTIMIZER;
    else if (!strcmp(text, "params"))
        *out = ZS_OFFLOAD_PARAMS;
    else
        return zs_flag_fail(2, "%s: '%s' is not one of none, optimizer, params", flag, text);
    return 0;
}

int zs_arg_attention(const char *flag, const char *text, zs_attention *out) {
    if (!strcmp(text, "flash"))
        *out = ZS_ATTENTION_FLASH;
    else if (!strcmp(text, "naive"))
        *out = ZS_ATTENTION_NAIVE;
    else
        return zs_flag_fail(2, "%s: '%s' is not one of flash, naive", flag, text);
    return 0;
}

int zs_arg_device(const char *flag, const char *text, const char **out) {
    if (strcmp(text, "cpu") && strcmp(text, "cuda") && strcmp(text, "auto"))
        return zs_flag_fail(2, "%s: '%s' is not one of cpu, cuda, auto", flag, text);
    *out = text;
    return 0;
}

int zs_arg_is_help(const char *a) {
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

const char *zs_arg_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        zs_flag_fail(2, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int zs_arg_dtype(const char *flag, const char *text, int allow_f16, zs_dtype *out) {
    if (!strcmp(text, "fp32") || !strcmp(text, "f32") || !strcmp(text, "float32"))
        *out = ZS_DTYPE_F32;
    else if (!strcmp(text, "bf16") || !strcmp(text, "bfloat16"))
        *out = ZS_DTYPE_BF16;
    else if (allow_f16 &&
             (!strcmp(text, "fp16") || !strcmp(text, "f16") || !strcmp(text, "float16")))
        *out = ZS_DTYPE_F16;
    else
        return zs_flag_fail(2, "%s: '%s' is not one of fp32 (f32), bf16%s", flag, text,
                            allow_f16 ? ", fp16 (f16)" : "");
    return 0;
}

int zs_arg_bool_word(const char *t) {
    static const char *w[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    for (size_t i = 0; t && i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(t, w[i])) return 1;
    return 0;
}

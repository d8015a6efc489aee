/* Strict parsing of flag values: the whole string must be a number in range or one of the
 * choices, else a message naming the flag. */
#ifndef ZS_CLI_ARGS_H
#define ZS_CLI_ARGS_H

#include "zshard.h"

#include <stdint.h>

/* Each returns 0 on success, or prints "zshard: FLAG: ..." and returns 2. */
int zs_arg_int(const char *flag, const char *text, int *out);
int zs_arg_float(const char *flag, const char *text, float *out);
/* zs_arg_int, then "FLAG: V is out of range [lo, hi]" outside [lo, hi]. */
int zs_arg_int_range(const char *flag, const char *text, int lo, int hi, int *out);
/* --tie-embeddings: "on" -> ZS_TIE_ON, "off" -> ZS_TIE_OFF (zs_tie values). */
int zs_arg_tie(const char *flag, const char *text, int *out);
/* Choice flags shared by train, mem, eval, generate and the benchmarks: 0, or the usage
 * error printed and its exit status (2). --device only checks the name (zs_device_choose
 * decides later). */
int zs_arg_stage(const char *flag, const char *text, zs_stage *out);
int zs_arg_recompute(const char *flag, const char *text, zs_recompute *out);
int zs_arg_offload(const char *flag, const char *text, zs_offload *out);
int zs_arg_attention(const char *flag, const char *text, zs_attention *out);
int zs_arg_device(const char *flag, const char *text, const char **out);
/* A dtype, spelled either way on every command: fp32/f32, bf16, fp16/f16 (only where
 * allow_f16). */
int zs_arg_dtype(const char *flag, const char *text, int allow_f16, zs_dtype *out);
/* 1 for "--help" and "-h". */
int zs_arg_is_help(const char *a);
int zs_arg_u64(const char *flag, const char *text, uint64_t *out);
/* Value of the flag at argv[*i]: advances *i; NULL (with a message) if it is missing. */
const char *zs_arg_value(int argc, char **argv, int *i);

/* Whether t is a value a switch takes (--quiet=false): true false yes no on off 1 0. */
int zs_arg_bool_word(const char *t);

#endif

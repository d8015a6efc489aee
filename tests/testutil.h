/* Minimal test harness: failed checks print file:line and make the test exit 1 (ctest sees
 * it); a skip exits 77. Random inputs come from a per-process seed that is printed, so a
 * failure can be reproduced with ZS_TEST_SEED. */
#ifndef ZS_TESTUTIL_H
#define ZS_TESTUTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int zt_failures;
extern int zt_checks;

#define ZT_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        zt_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            zt_failures++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Fatal: stop the test now (e.g. a setup call failed). */
#define ZT_REQUIRE(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FATAL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define ZT_OK(expr)                                                                                \
    do {                                                                                           \
        zs_status zt_s_ = (expr);                                                                  \
        ZT_REQUIRE(zt_s_ == ZS_OK, "%s -> %s: %s", #expr, zs_status_string(zt_s_),                 \
                   zs_last_error());                                                               \
    } while (0)

/* Seed the test RNG (from ZS_TEST_SEED or the clock) and print it. */
void zt_init(const char *name);
/* Print the summary line and return the process exit code (0 pass, 1 fail). */
int zt_finish(void);
/* Skip this whole test (exit 77) with a reason. */
void zt_skip(const char *why);
/* gpu tests: skip (77) saying why unless this program runs on a GPU, real or emulated
 * (ZS_GPU=real|emu from ctest; docs/cuda.md "What runs where"). */
void zt_gpu_require(void);
/* Whether a job of `n` ranks can have one GPU each: always on the emulated GPU (the job's
 * ZS_EMU_DEVICES gives them), on a real machine when n GPUs are visible. When not, prints
 * "not run: <what> needs n GPUs, k visible" so the log says what this machine left out. */
int zt_gpus_for(int n, const char *what);

/* An fp32 input as a GEMM arithmetic sees it (zs_gemm_math: 0 fp32, 1 TF32, 2 bf16), computed
 * independently of the code under test: TF32 keeps 11 significant bits, to nearest with ties
 * away from zero; bf16 8, to nearest even. */
double zt_gemm_round(int math, float x);

/* Whether this is a build with AddressSanitizer (scripts/sanitize.sh, docs/testing.md), whose
 * shadow memory, redzones and quarantine of freed blocks change what a process's memory
 * measures. zt_unsanitized_for: 1 when a check that cannot hold there may run; else prints
 * "not run: <what> under AddressSanitizer: <why>" and returns 0. */
int zt_sanitized(void);
int zt_unsanitized_for(const char *what, const char *why);

/* zt_init with a fixed seed (ZS_TEST_SEED still wins): for the tests whose random inputs
 * must be the same in every run, such as the fuzz replays' mutations. */
void zt_init_fixed(const char *name, uint64_t seed);
/* The names in folder dir but dot files, sorted (malloc'd, each and the array; *count of
 * them): an order that does not depend on the file system. */
char **zt_dir_names(const char *dir, int *count);
/* Uniform in [lo, hi) and standard normal, from the test RNG. */
double zt_uniform(double lo, double hi);
double zt_normal(void);
void zt_fill_uniform(float *x, size_t n, float lo, float hi);
void zt_fill_normal(float *x, size_t n, float std);
/* Poison with NaN so any element an op fails to write is caught. */
void zt_poison(float *x, size_t n);
/* Largest |a-b| / max(1, |b|) over n (mixed absolute/relative error), NaN-aware (NaN -> inf). */
double zt_max_err(const float *a, const double *b, size_t n);
double zt_max_err_ff(const float *a, const float *b, size_t n);
/* A check that got's nbytes are want's, bit for bit: "ok what" when they are, else a failure
 * naming the first byte that differs. */
void zt_expect_bits(const char *what, const void *got, const void *want, size_t nbytes);
/* malloc that exits on failure. */
void *zt_malloc(size_t nbytes);
/* The buffers of one check, host and device, all freed by zt_release() at its end:
 * zt_hbuf: host memory (zt_malloc) with 16 bytes of slack past nbytes, for shifted views;
 * zt_dbuf: device memory (zs_cuda_alloc), 256-byte aligned as cudaMalloc's is;
 * zt_dup: a device copy of nbytes of host h; zt_hcopy: a host copy of device d (the caller has
 * synchronised the stream that wrote it). Each exits the test when the pool or memory runs out. */
void *zt_hbuf(size_t nbytes);
void *zt_dbuf(size_t nbytes);
void *zt_dup(const void *h, size_t nbytes);
void *zt_hcopy(const void *d, size_t nbytes);
void zt_release(void);
/* Path of the zshard executable: ZS_ZSHARD (the gpu suite's: zshard-emu on the emulated GPU),
 * else the build tree's (from ZS_BUILD_DIR). */
const char *zt_zshard_exe(void);
/* Run a shell command, capture stdout+stderr into buf, return its exit status (or 128+sig). */
int zt_run(const char *cmd, char *buf, size_t cap);
/* zt_run of a command formatted like printf. */
int zt_runf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The param_hash `zshard ckpt inspect CKPT` prints (16 hex digits into out[17]); a failed
 * check (and "" in out) if inspect fails. */
void zt_ckpt_hash(const char *ckpt, char out[17]);

#endif

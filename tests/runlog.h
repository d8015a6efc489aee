/* The end-to-end fixture of the multi-rank tests: a scratch directory holding a small corpus,
 * `zshard train` jobs run through the real CLI with a JSONL log each, and what those logs say
 * (per-step losses as printed, the final param_hash, per-rank and estimated memory), so that
 * runs can be compared bit for bit. */
#ifndef ZS_RUNLOG_H
#define ZS_RUNLOG_H

#include "shard/layout.h"
#include "testutil.h"
#include "zshard.h"

#define RL_MAX_STEPS 64
#define RL_MAX_RANKS 8

/* What one job's log says; fields a log lacks stay zero. */
typedef struct rl_run {
    int rc;      /* the command's exit status (124: it ran past its timeout) */
    int ok;      /* the final record was read */
    int n_steps; /* step records read, in order */
    int world;   /* ranks in peak_bytes_per_rank */
    int step[RL_MAX_STEPS];
    /* Losses as the log prints them (%.9g, which round-trips a float): equal strings are
     * equal bits, which is what the parity checks compare. */
    char loss[RL_MAX_STEPS][32];
    double lossv[RL_MAX_STEPS];
    char hash[17];                                /* param_hash, 16 hex digits */
    uint64_t peak[RL_MAX_RANKS][ZS_MEM_NCAT + 1]; /* bytes per category; [ZS_MEM_NCAT]: total */
    uint64_t est[ZS_MEM_NCAT + 1];                /* the estimator's, same indices */
    /* --offload: pinned host bytes of the offloaded state per rank and the estimator's (the
     * offloaded categories; [ZS_MEM_NCAT]: their total); hworld ranks read. */
    uint64_t hpeak[RL_MAX_RANKS][ZS_MEM_NCAT + 1];
    uint64_t hest[ZS_MEM_NCAT + 1];
    int hworld;
} rl_run;

/* Output (stdout and stderr) of the last rl_train, for failure messages; tests may also pass
 * it to their own zt_run calls. */
#define RL_OUT_CAP (1 << 16)
extern char rl_out[RL_OUT_CAP];

/* Create /tmp/zshard-test-<name>-XXXXXX holding corpus.txt, a text with real structure
 * (repeated English-like phrases) so that losses move. Exits the test on failure. */
void rl_setup(const char *name);
/* The directory rl_setup made. */
const char *rl_dir(void);
/* Remove that directory; returns 0 on success. */
int rl_cleanup(void);

/* Run `<prefix> zshard train --data <dir>/corpus.txt <args> --log <dir>/runN.jsonl`, args
 * formatted like printf, and read the log (whatever it holds, also when the job failed). The
 * prefix holds what goes before the executable: `timeout`, environment, a launcher. */
rl_run rl_train(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The multi-rank tests' common job: gpt2-tiny, batch 12 x seq 32, lr 3e-3, warmup 2, no
 * validation or sample, --comm-timeout 30, for `steps` steps on nproc ranks at stage, under
 * `timeout timeout_s`; env (variables) goes before the command, extra after its flags. Its exit
 * is not checked. */
rl_run rl_train_tiny(const char *env, int timeout_s, int steps, int nproc, const char *stage,
                     const char *extra);
/* The JSONL log of the last rl_train (for records rl_run does not keep). */
const char *rl_last_log(void);
/* A failed check, with the command and its output, unless r exited 0; returns r->rc == 0. */
int rl_check_exit(const rl_run *r);

/* Bitwise the same run: as many steps, the same losses at each, the same final param_hash. */
int rl_same(const rl_run *a, const rl_run *b);
/* A failed check naming `what` unless rl_same(a, b). */
void rl_check_same(const rl_run *a, const rl_run *b, const char *what);

/* The fp32 parameters a run wrote with --dump-params (malloc'd; *count elements). */
float *rl_read_params(const char *path, size_t *count);
/* Largest |a[i] - b[i]| over count elements; infinity if any is NaN. */
double rl_max_abs_diff(const float *a, const float *b, size_t count);

/* What a run's memory record should say, from the layout it trained. The fp32 column of
 * docs/architecture.md "Memory accounting" with Ψ = the padded layout: bytes per rank of each
 * model-state category (params, shards, grads, optimizer state) at world size `world` and stage 0
 * (ddp) to 3; other categories 0. */
void rl_fp32_model_states(const zs_layout *l, int world, int stage, uint64_t want[ZS_MEM_NCAT]);
/* fp32 bytes of the three largest units, largest first (0 where there are fewer): the
 * gathered pool holds whole units, so its bound is a sum of these. */
void rl_largest_units(const zs_layout *l, uint64_t out[3]);

#endif

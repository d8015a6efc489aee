/* Operations glue of `zshard train` (train_ops.c): per-rank JSONL logs, startup checks of the
 * outputs, --resume auto and restarts, graceful stop on SIGINT/SIGTERM. */
#ifndef ZS_CLI_TRAIN_OPS_H
#define ZS_CLI_TRAIN_OPS_H

#include "zshard.h"

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* This process's rank from the launcher's variables (0 without any); on a bad environment
 * prints the error and returns 1. */
int zs_train_env_rank(int *rank);
/* TORCHELASTIC_RESTART_COUNT (set by zshard run --max-restarts and by torchrun); 0 if unset. */
int zs_train_restart_count(void);
/* The log file of a rank: rank 0 writes path itself, rank r > 0 path with ".rankR" before
 * the extension (run.jsonl -> run.rank1.jsonl). */
void zs_train_log_path(const char *path, int rank, char *out, size_t cap);
/* Rank 0: open its log now, for appending (a resumed or restarted run), else a fresh one: an
 * existing log holding records is first moved aside to the first free run.N.jsonl, with a
 * message, never overwritten. Other ranks: check that their log could be created, open
 * nothing (*out = NULL). Returns 0, or prints the error and returns 1. */
int zs_train_log_open(const char *path, int rank, int append, FILE **out);
/* Append the error record {"error", "status", "rank", "step"} to log, or, when log is NULL
 * and path is set, to this rank's own log file. */
void zs_train_log_error(FILE *log, const char *path, int rank, int step, zs_status st);
/* --save-dir: create it, check it is writable, and refuse a directory already holding
 * checkpoints unless resume is set. Returns 0 or prints the error and returns 1 or 2. */
int zs_train_check_save_dir(const char *save_dir, const char *resume);
/* The checkpoint to resume from: resume itself, or for "auto" (and for a restarted job
 * without --resume) save_dir when it holds a checkpoint, else NULL (from scratch). */
const char *zs_train_resolve_resume(const char *resume, const char *save_dir, int restart);
/* Fault injection for tests, from the environment, in the first attempt of a job only (so
 * that a restarted job gets past the step): at the start of step S rank R
 *   ZS_FAULT_KILL=R:S  kills itself (SIGKILL), as a crashed or OOM-killed process dies;
 *   ZS_FAULT_STOP=R:S  stops itself (SIGSTOP), as a hung process hangs;
 *   ZS_FAULT_TERM=R:S  sends SIGTERM to its launcher (ZS_LAUNCHER_PID, set by zshard run),
 *                      else to itself, and waits until the signal has reached it: a stop
 *                      request arriving while step S runs, however fast the steps are. */
typedef struct zs_train_faults {
    int kill_rank, kill_step, stop_rank, stop_step, term_rank, term_step;
    pid_t term_pid;
} zs_train_faults;
void zs_train_faults_read(zs_train_faults *f, int restart);
/* Fire whichever fault is due for this rank at the start of this step. */
void zs_train_faults_at(const zs_train_faults *f, int rank, int step);
/* SIGINT/SIGTERM: the first sets a flag (zs_train_stop_signal), the second kills at once. */
void zs_train_signals_install(void);
int zs_train_stop_signal(void);

/* The model of a weights source (zs_model_config_from). model_flag (a --model preset or
 * config file, NULL if not given) supplies what a bare safetensors file lacks, and must agree
 * with the source in every field: a disagreement is an error naming the field. Returns 0, or
 * prints the error (prefixed by who) and returns 1 or 2. */
int zs_cli_model_from(const char *who, const char *src, const char *model_flag,
                      zs_model_config *out);
/* As zs_cli_model_from, with a --tie-embeddings flag (ZS_TIE_ON/OFF, 0 if not given) that
 * must agree with the source's head too. */
int zs_cli_model_from_tie(const char *who, const char *src, const char *model_flag, int tie,
                          zs_model_config *out);
/* Re-execute as `zshard run -n nproc [--max-restarts R] -- zshard <sub> ARGS` (R only when
 * max_restarts > 0) with ZS_RELAUNCHED=1 in the ranks' environment; returns only on failure,
 * with the exit status. Refused inside a launched job (zs_cli_launched_job), where every rank
 * would start a job of its own. */
#define ZS_RELAUNCHED_ENV "ZS_RELAUNCHED"
int zs_cli_relaunch(const char *sub, int argc, char **argv, int nproc, int max_restarts);
/* 1 in a rank that zs_cli_relaunch started: its --nproc/--max-restarts (from the command line
 * or a --config file) describe the job it is part of, not one to start. */
int zs_cli_relaunched(void);

#endif

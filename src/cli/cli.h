/* Subcommands of the zshard executable. Each returns the process exit status; they print
 * their own errors (one line on stderr) and never call exit() deep inside. */
#ifndef ZS_CLI_H
#define ZS_CLI_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

int zs_cli_train(int argc, char **argv);
int zs_cli_run(int argc, char **argv);
int zs_cli_bench(int argc, char **argv);
int zs_cli_mem(int argc, char **argv);
int zs_cli_ckpt(int argc, char **argv);
int zs_cli_eval(int argc, char **argv);
int zs_cli_generate(int argc, char **argv);
int zs_cli_tokenize(int argc, char **argv);

/* Text tokenized for a command that reads tokens (text_data.c): input (text, folder, JSONL)
 * through tokenizer into shards in a temporary folder, by `zshard tokenize`'s rules; pattern
 * names them, vocab is the tokenizer's. Returns 0, or prints the error and returns 1. */
typedef struct zs_cli_temp_shards {
    char dir[4096], pattern[4200];
    int vocab;
    int64_t documents, tokens, skipped;
} zs_cli_temp_shards;
int zs_cli_text_to_shards(const char *cmd, const char *input, const char *tokenizer,
                          const char *doc_sep, const char *field, zs_cli_temp_shards *out);
void zs_cli_temp_shards_remove(zs_cli_temp_shards *t);

/* Print "zshard: <msg>" to stderr (the argument library's zs_flag_fail); returns 1 or 2 for
 * the caller to exit with. */
int zs_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Threads (threads.c). Cores this process may use: its affinity mask, capped by the cgroup
 * CPU quota. */
int zs_cli_cores(void);
/* max(1, cores / local_ranks): the OpenMP threads of one of local_ranks ranks. */
int zs_cli_thread_share(int local_ranks);
/* A warning on stderr when threads x local_ranks exceeds the cores; var names the setting. */
void zs_cli_warn_oversubscribed(const char *var, int threads, int local_ranks);
/* main's argv, for zs_cli_threads_setup's re-exec. */
void zs_cli_set_argv(char **argv);
/* Set OMP_NUM_THREADS, OPENBLAS_NUM_THREADS (the rank's share) and OMP_WAIT_POLICY=passive
 * where the user left them unset, and re-exec so that the OpenMP runtime reads them; warns
 * when the user's OMP_NUM_THREADS oversubscribes the cores. Returns only when nothing changed
 * (or the exec failed). */
int zs_cli_threads_setup(void);

/* 1 when this process is one rank of a job of several that a launcher started (torchrun or
 * zshard run, srun, mpirun: the variables of comm/env.h), with what says which, e.g.
 * "mpirun (OMPI_COMM_WORLD_SIZE=2)"; else 0. */
int zs_cli_launched_job(char *what, size_t cap);

#endif

/* The launcher's state shared by run.c (processes, restarts) and run_report.c (what the
 * ranks said and the closing summary). */
#ifndef ZS_CLI_RUN_H
#define ZS_CLI_RUN_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define ZS_RUN_MAX_LOCAL 256
#define ZS_RUN_LINE 4096
#define ZS_RUN_HELD 8192

typedef struct zs_rank_proc {
    pid_t pid;
    int rank; /* global rank */
    int out_fd, err_fd;
    char out_buf[ZS_RUN_LINE], err_buf[ZS_RUN_LINE];
    size_t out_len, err_len;
    int running;
    int status;     /* from waitpid */
    int on_its_own; /* ended before the launcher signalled it */
    /* The rank's first error line: its CLI's "zshard: ..." verdict if it printed one, else the
     * first "zshard error: ..." line of the library, without prefixes. */
    char first_err[512];
    int first_err_final; /* first_err is a "zshard: " verdict */
    /* "zshard: ..." lines, held back until the job ends so that identical ones are shown once
     * ("all 4 ranks: ..."); a rank saying more than fits is passed through live. */
    char held[ZS_RUN_HELD];
    size_t held_len;
} zs_rank_proc;

/* The job's prefix setting: 0 none, 1 "[rank] " on stdout and stderr, this: on stderr only. */
#define ZS_RUN_PREFIX_STDERR 2

typedef struct zs_run_job {
    zs_rank_proc *rp;
    int nproc, world, prefix;
    int failed;      /* local index of the first rank to end non-zero on its own, or -1 */
    int fail_status; /* its wait status */
    int interrupted; /* the signal that stopped the launcher, or 0 */
} zs_run_job;

/* Pass one complete line (without its newline) of rank rp to the user: stdout lines and most
 * stderr lines at once (with the "[rank] " prefix), error lines recorded, "zshard: " lines
 * held. */
void zs_run_line(zs_rank_proc *rp, int prefix, int is_err, const char *line, size_t len);
/* Print the held lines (identical ones once) and the one-line summary naming the rank that
 * failed first, or the one the others waited for, with its message. Returns the exit status
 * for the launcher and writes the summary (without "zshard run: ") to last. */
int zs_run_report(const zs_run_job *j, char *last, size_t cap);
/* "exited with status 3", "was killed by signal 9 (Killed)". */
void zs_run_describe(int status, char *buf, size_t cap);

#endif

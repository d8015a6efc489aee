/* What the launcher tells the user about a failed job: every rank's own first error line is
 * kept, identical final messages are shown once, and the summary names the rank at the root
 * of the failure: the one that failed first, or, when the first to give up was waiting for a
 * peer ("... waiting for peer rank 1 ..."), that peer, stuck or dead (or the peer that one
 * was waiting for, and so on). */
#include "cli/run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void out_line(FILE *f, int rank, int prefix, const char *line, size_t len) {
    if (prefix) fprintf(f, "[%d] ", rank);
    fwrite(line, 1, len, f);
    fputc('\n', f);
    fflush(f);
}

static void set_first(zs_rank_proc *rp, const char *msg, size_t len, int final) {
    /* A verdict replaces a library log line only if the log line came first and said less:
     * the CLI's verdict repeats it with the step, so prefer the verdict. */
    if (rp->first_err[0] && (rp->first_err_final || !final)) return;
    if (len >= sizeof rp->first_err) len = sizeof rp->first_err - 1;
    memcpy(rp->first_err, msg, len);
    rp->first_err[len] = '\0';
    rp->first_err_final = final;
}

void zs_run_line(zs_rank_proc *rp, int prefix, int is_err, const char *line, size_t len) {
    if (!is_err) {
        out_line(stdout, rp->rank, prefix == 1, line, len);
        return;
    }
    static const char verdict[] = "zshard: ", logged[] = "zshard error: ";
    if (len >= sizeof verdict - 1 && !memcmp(line, verdict, sizeof verdict - 1)) {
        set_first(rp, line + sizeof verdict - 1, len - (sizeof verdict - 1), 1);
        if (rp->held_len + len + 1 <= sizeof rp->held) {
            memcpy(rp->held + rp->held_len, line, len);
            rp->held_len += len;
            rp->held[rp->held_len++] = '\n';
            return;
        }
    } else {
        char tmp[ZS_RUN_LINE + 1];
        size_t n = len < ZS_RUN_LINE ? len : ZS_RUN_LINE;
        memcpy(tmp, line, n);
        tmp[n] = '\0';
        const char *e = strstr(tmp, logged);
        if (e) set_first(rp, e + sizeof logged - 1, n - (size_t)(e + sizeof logged - 1 - tmp), 0);
    }
    out_line(stderr, rp->rank, prefix, line, len);
}

void zs_run_describe(int status, char *buf, size_t cap) {
    if (WIFEXITED(status))
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "ended with wait status %d", status);
}

/* The job rank of the peer a message says this rank was waiting for or lost ("peer rank 3
 * died", "waiting for peer rank 3"), or -1. In a group's collective (hybrid sharding's shard
 * and replica groups) that number is the peer's group rank, and the message names the group
 * before it: "... of group 1 (its ranks 0, 1 are job ranks 2, 3): peer rank 1 died" is job
 * rank 3 (comm_split.c; -1 where the list was cut short before it). */
static int peer_named(const char *msg) {
    static const char peer[] = "peer rank ", job[] = " are job ranks ";
    const char *p = strstr(msg, peer);
    if (!p) return -1;
    char *end = NULL;
    long r = strtol(p + sizeof peer - 1, &end, 10);
    if (end == p + sizeof peer - 1 || r < 0 || r >= (1 << 24)) return -1;
    const char *g = NULL;
    for (const char *q = msg; (q = strstr(q, job)) && q < p; q += sizeof job - 1)
        g = q + sizeof job - 1; /* the last group named before the peer */
    for (long i = 0; g; i++) {  /* its r-th job rank */
        long j = strtol(g, &end, 10);
        if (end == g || j < 0 || j >= (1 << 24)) return -1;
        if (i == r) return (int)j;
        if (strncmp(end, ", ", 2)) return -1;
        g = end + 2;
    }
    return (int)r;
}

static void print_held(const zs_run_job *j) {
    int n = j->nproc, same = n > 1;
    for (int i = 0; i < n && same; i++)
        same = j->rp[i].held_len > 0 && j->rp[i].held_len == j->rp[0].held_len &&
               !memcmp(j->rp[i].held, j->rp[0].held, j->rp[0].held_len);
    for (int i = 0; i < (same ? 1 : n); i++) {
        const zs_rank_proc *r = &j->rp[i];
        size_t start = 0;
        for (size_t k = 0; k < r->held_len; k++) {
            if (r->held[k] != '\n') continue;
            if (same)
                fprintf(stderr, "zshard: all %d ranks: %.*s\n", n, (int)(k - start - 8),
                        r->held + start + 8);
            else
                out_line(stderr, r->rank, j->prefix, r->held + start, k - start);
            start = k + 1;
        }
    }
}

static int find_local(const zs_run_job *j, int rank) {
    for (int i = 0; i < j->nproc; i++)
        if (j->rp[i].rank == rank) return i;
    return -1;
}

int zs_run_report(const zs_run_job *j, char *last, size_t cap) {
    const zs_rank_proc *rp = j->rp;
    print_held(j);
    last[0] = '\0';
    if (j->interrupted) {
        snprintf(last, cap, "interrupted by signal %d (%s); stopped all %d ranks", j->interrupted,
                 strsignal(j->interrupted), j->nproc);
        fprintf(stderr, "zshard run: %s\n", last);
        return 128 + j->interrupted;
    }
    if (j->failed < 0) return 0;
    const zs_rank_proc *f = &rp[j->failed];
    char how[128];
    zs_run_describe(j->fail_status, how, sizeof how);
    int others = 0, same_status = 0, same_msg = 1;
    for (int i = 0; i < j->nproc; i++) {
        if (i != j->failed && !(WIFEXITED(rp[i].status) && WEXITSTATUS(rp[i].status) == 0))
            others++;
        same_status += rp[i].on_its_own && rp[i].status == j->fail_status;
        same_msg = same_msg && !strcmp(rp[i].first_err, f->first_err);
    }
    int code =
        WIFEXITED(j->fail_status) ? WEXITSTATUS(j->fail_status) : 128 + WTERMSIG(j->fail_status);
    if (code == 0) code = 1;
    /* The first rank to give up may only have been waiting for another, and that one for a
     * third (hybrid sharding: a rank that lost a group's peer which had lost its other group's
     * peer): blame the end of that chain. */
    int culprit = -1;
    for (int at = j->failed, hops = 0; hops < j->nproc; hops++) {
        int peer = peer_named(rp[at].first_err), next = peer >= 0 ? find_local(j, peer) : -1;
        if (next < 0 || next == j->failed || next == culprit) break;
        culprit = at = next;
    }
    if (same_status == j->nproc && j->nproc > 1 && same_msg) {
        /* Every rank stopped by itself the same way (the same bad flag or file, seen by
         * each): say so, so that the first one to go is not taken for the only culprit. */
        if (f->first_err[0])
            snprintf(last, cap,
                     "all %d local ranks %s on their own, each with the error above "
                     "(world of %d)",
                     j->nproc, how, j->world);
        else
            snprintf(last, cap,
                     "rank %d (pid %d) %s first; all %d local ranks ended that way on their own, "
                     "so it is likely the same failure everywhere (world of %d)",
                     f->rank, (int)f->pid, how, j->nproc, j->world);
    } else if (culprit >= 0 && culprit != j->failed) {
        const zs_rank_proc *c = &rp[culprit];
        others = 0;
        for (int i = 0; i < j->nproc; i++)
            others += i != culprit && !(WIFEXITED(rp[i].status) && WEXITSTATUS(rp[i].status) == 0);
        char chow[128];
        zs_run_describe(c->status, chow, sizeof chow);
        snprintf(last, cap,
                 "rank %d (pid %d) is the rank the others waited for: rank %d reported \"%s\"; "
                 "rank %d %s%s%s%s; %d other rank%s failed or %s stopped (world of %d)",
                 c->rank, (int)c->pid, f->rank, f->first_err, c->rank,
                 c->on_its_own ? "" : "was stopped by the launcher and ", chow,
                 c->first_err[0] ? ": " : "", c->first_err, others, others == 1 ? "" : "s",
                 others == 1 ? "was" : "were", j->world);
    } else {
        snprintf(last, cap,
                 "rank %d (pid %d) %s first%s%s; %d other rank%s failed or %s stopped "
                 "(world of %d)",
                 f->rank, (int)f->pid, how, f->first_err[0] ? ": " : "", f->first_err, others,
                 others == 1 ? "" : "s", others == 1 ? "was" : "were", j->world);
    }
    fprintf(stderr, "zshard run: %s\n", last);
    return code;
}

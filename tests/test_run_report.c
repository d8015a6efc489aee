/* What a user is told when a multi-rank job fails: a startup
 * error on rank 1 is printed and named in the launcher's summary, a rank with a bad
 * environment says so, per-rank JSONL logs (rank 0's file, run.rank1.jsonl on error), a
 * configuration error every rank sees is shown once, and a stopped (hung) rank is the one
 * the summary blames, not the first rank that timed out waiting for it, also where the rank
 * that gave up first names it by its number in a group (zs_run_report called directly). */
#include "cli/run.h"
#include "runlog.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static char g_out[1 << 17];

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The launcher's summary line ("zshard run: ..."), or "" */
static const char *summary(void) {
    static char line[4096];
    const char *s = strstr(g_out, "zshard run: ");
    line[0] = '\0';
    if (s) snprintf(line, sizeof line, "%.*s", (int)strcspn(s, "\n"), s);
    return line;
}

static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    printf("%s -> %d\n", cmd, rc);
    return rc;
}

/* Finding 1: rank 1 cannot open its data; only rank 0's "peer rank 1 left" was shown. */
static void test_rank1_startup_error(void) {
    char cmd[4096], log[600];
    snprintf(log, sizeof log, "%s/bad.jsonl", rl_dir());
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s run -n 2 -- sh -c 'f=%s/corpus.txt; [ $RANK = 1 ] && "
             "f=/nonexistent/data.txt; exec %s train --data $f --steps 2 --log %s'",
             zt_zshard_exe(), rl_dir(), zt_zshard_exe(), log);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 1, "exit %d:\n%s", rc, g_out);
    ZT_CHECK(strstr(g_out, "[1] zshard: data file /nonexistent/data.txt"),
             "rank 1's own error is printed:\n%s", g_out);
    ZT_CHECK(strstr(summary(), "rank 1 (pid ") && strstr(summary(), "/nonexistent/data.txt"),
             "the summary names rank 1 and its message: '%s'", summary());
    ZT_CHECK(!strstr(g_out, "likely the same failure everywhere"), "not a shared failure:\n%s",
             g_out);
    /* Per-rank logs: rank 0 its own file, rank 1 run.rank1.jsonl with its error. */
    char p1[700], buf[4096];
    snprintf(p1, sizeof p1, "cat %s/bad.rank1.jsonl", rl_dir());
    zt_run(p1, buf, sizeof buf);
    ZT_CHECK(strstr(buf, "\"error\":\"data file /nonexistent/data.txt") &&
                 strstr(buf, "\"rank\":1"),
             "rank 1's log holds its error: %s", buf);
    snprintf(p1, sizeof p1, "cat %s", log);
    zt_run(p1, buf, sizeof buf);
    ZT_CHECK(strstr(buf, "\"error\":") && strstr(buf, "peer rank 1") && strstr(buf, "\"rank\":0"),
             "rank 0's log holds its own error: %s", buf);
}

static void test_bad_env(void) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "RANK=5 WORLD_SIZE=2 %s train --data %s/corpus.txt --steps 2",
             zt_zshard_exe(), rl_dir());
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 1 && strstr(g_out, "zshard: rank 5 is not below world size 2"),
             "RANK=5 WORLD_SIZE=2: exit %d, '%s'", rc, g_out);
}

static void test_logs_and_once(void) {
    /* A good 2-rank run: only rank 0's log, complete. */
    rl_run r = rl_train("timeout 120", "--nproc 2 --steps 3 --batch 4 --seq 32 --sample-len 0 "
                                       "--val-every 0");
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.n_steps == 3, "rank 0's log is complete: %d steps", r.n_steps);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^run.*rank1' || true", rl_dir());
    zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(atoi(g_out) == 0, "no rank-1 log without an error: %s", g_out);

    /* The same configuration error on every rank: shown once. */
    int rc = sh("timeout 60 %s train --data %s/corpus.txt --nproc 2 --batch 7", zt_zshard_exe(),
                rl_dir());
    ZT_CHECK(rc == 1, "exit %d", rc);
    ZT_CHECK(count(g_out, "must divide evenly") == 1 &&
                 strstr(g_out, "zshard: all 2 ranks: --batch 7 must divide evenly"),
             "one line for both ranks:\n%s", g_out);
}

/* Finding 2: rank 1 hangs (SIGSTOP) mid-run; ranks 0 and 2 time out waiting for it. */
static void test_stuck_rank(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "ZS_FAULT_STOP=1:3 timeout 120 %s run -n 3 --drain 0.5 --kill-grace 1 -- %s train "
             "--data %s/corpus.txt --stage 3 --batch 6 --seq 32 --steps 10 --comm-timeout 2 "
             "--sample-len 0 --quiet",
             zt_zshard_exe(), zt_zshard_exe(), rl_dir());
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && rc != 124, "exit %d:\n%s", rc, g_out);
    ZT_CHECK(count(g_out, "waiting for peer rank 1") >= 2, "both others waited for rank 1:\n%s",
             g_out);
    ZT_CHECK(strstr(summary(), "zshard run: rank 1 (pid ") &&
                 strstr(summary(), "the rank the others waited for"),
             "the summary blames rank 1: '%s'", summary());
}

static zs_rank_proc g_rp[4];

/* A job of 4 ranks in two groups (hybrid sharding): the launcher reaped rank 2 first, which
 * lost its group's rank 1, and rank 3 (that rank) was killed. The summary must blame rank 3,
 * the peer's job rank, not rank 1 (the hsdp test's kill, whose ranks the launcher can reap in
 * either order under load). */
static void test_group_peer(void) {
    static const char *err[4] = {
        "all_reduce #9 (tag 'ln_f', 64 x f32) on rank 0 of group 0 (its ranks 0, 1 are job "
        "ranks 0, 2): peer rank 1 left the communicator (destroyed it or exited) before taking "
        "part",
        "all_reduce #9 (tag 'ln_f', 64 x f32) on rank 0 of group 1 (its ranks 0, 1 are job "
        "ranks 1, 3): peer rank 1 died (pid 1003 is gone: killed, crashed or exited early)",
        "step 3: all_gather #34 (tag 'embed', 16384 x f32) on rank 0 of group 1 (its ranks 0, 1 "
        "are job ranks 2, 3): peer rank 1 died (pid 1003 is gone: killed, crashed or exited "
        "early)",
        ""};
    zs_run_job j = {g_rp, 4, 4, 1, 2, 1 << 8, 0};
    char last[1024];
    for (int i = 0; i < 4; i++) {
        memset(&g_rp[i], 0, sizeof g_rp[i]);
        g_rp[i].pid = 1000 + i, g_rp[i].rank = i, g_rp[i].on_its_own = 1;
        g_rp[i].status = i == 3 ? SIGKILL : 1 << 8; /* wait statuses: killed by 9, exit 1 */
        snprintf(g_rp[i].first_err, sizeof g_rp[i].first_err, "%s", err[i]);
    }
    ZT_CHECK(zs_run_report(&j, last, sizeof last) == 1, "the job's exit status");
    ZT_CHECK(strstr(last, "rank 3 (pid 1003) is the rank the others waited for: rank 2 reported") &&
                 strstr(last, "rank 3 was killed by signal 9"),
             "the summary blames job rank 3 (group 1's rank 1): '%s'", last);
    /* Reaped first, rank 0 lost its group's rank 1 (job rank 2), which had lost rank 3: the
     * chain ends at rank 3. */
    j.failed = 0;
    ZT_CHECK(zs_run_report(&j, last, sizeof last) == 1, "the job's exit status (rank 0 first)");
    ZT_CHECK(strstr(last, "rank 3 (pid 1003) is the rank the others waited for: rank 0 reported"),
             "the summary follows rank 0's peer (rank 2) to rank 3: '%s'", last);
    j.failed = 2;
    /* A group list cut short before the peer's entry: no guess, the first failure is named. */
    snprintf(g_rp[2].first_err, sizeof g_rp[2].first_err, "%s",
             "all_gather #34 on rank 0 of group 1 (its ranks 0, 1 ... are job ranks 2, 3 ...): "
             "peer rank 7 died (pid 1009 is gone)");
    zs_run_report(&j, last, sizeof last);
    ZT_CHECK(strstr(last, "rank 2 (pid 1002) exited with status 1 first"),
             "a peer past the group's list is not guessed: '%s'", last);
    /* No group: the peer's number is its job rank. */
    snprintf(g_rp[2].first_err, sizeof g_rp[2].first_err, "%s",
             "timed out after 30.0 s waiting for peer rank 3 (pid 1003, alive but silent)");
    zs_run_report(&j, last, sizeof last);
    ZT_CHECK(strstr(last, "rank 3 (pid 1003) is the rank the others waited for"),
             "a world peer is its job rank: '%s'", last);
}

int main(void) {
    zt_init("run_report");
    rl_setup("run-report");
    test_group_peer();
    test_rank1_startup_error();
    test_bad_env();
    test_logs_and_once();
    test_stuck_rank();
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

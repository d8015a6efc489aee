/* Elastic restart and graceful stop. A 2-rank ZeRO-3 job whose rank 1 is killed
 * mid-run (ZS_FAULT_KILL) is restarted by the launcher, resumes from its latest checkpoint
 * and ends with the param_hash of a run never interrupted; a job whose rank fails at every
 * start gives up after --max-restarts with that rank's message. SIGTERM during a step (to
 * the launcher, or to a single process) finishes the step, saves a checkpoint, writes an
 * end record and exits 143, and resuming from that checkpoint is bitwise the uninterrupted
 * run. */
#include "runlog.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COMMON                                                                                     \
    "--stage 3 --steps 12 --batch 8 --seq 32 --sample-len 0 --val-every 0 --print-every 1"

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void test_restart(const rl_run *ref) {
    rl_run r =
        rl_train("ZS_FAULT_KILL=1:8 timeout 120",
                 "--nproc 2 " COMMON " --save-dir %s/el --save-every 3 --max-restarts 2", rl_dir());
    rl_check_exit(&r);
    ZT_CHECK(strstr(rl_out, "zshard run: rank 1 (pid ") && strstr(rl_out, "killed by signal 9"),
             "the failure is reported: %s", rl_out);
    ZT_CHECK(strstr(rl_out, "zshard run: restart 1/2 in "), "a line per restart: %s", rl_out);
    ZT_CHECK(strstr(rl_out, "resumed from ") && strstr(rl_out, " at step 6"),
             "resumed from step 6: %s", rl_out);
    ZT_CHECK(strstr(rl_out, "zshard run: the job succeeded after 1 restart"), "final line: %s",
             rl_out);
    ZT_CHECK(r.ok && !strcmp(r.hash, ref->hash), "param_hash %s after the restart, %s without",
             r.hash, ref->hash);
}

static void test_give_up(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s run -n 2 --max-restarts 2 --restart-backoff 0.1 -- sh -c "
             "'f=%s/corpus.txt; [ $RANK = 1 ] && f=/nonexistent/data.txt; exec %s train "
             "--data $f --steps 2 --quiet'",
             zt_zshard_exe(), rl_dir(), zt_zshard_exe());
    int rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 1, "exit %d: %s", rc, rl_out);
    ZT_CHECK(count(rl_out, "zshard run: restart ") == 2, "two restarts: %s", rl_out);
    ZT_CHECK(count(rl_out, "[1] zshard: data file /nonexistent/data.txt") == 3,
             "three attempts, each with rank 1's error: %s", rl_out);
    const char *g = strstr(rl_out, "zshard run: giving up after 2 restarts; the last failure: "
                                   "rank 1 (pid ");
    ZT_CHECK(g && strstr(g, "/nonexistent/data.txt"), "gives up naming rank 1's message: %s",
             rl_out);
}

/* SIGTERM reaches the job while step 5 runs (ZS_FAULT_TERM: rank 0 signals the launcher,
 * or a single process itself, as `kill` from a shell would). */
static void test_sigterm(const rl_run *ref, int nproc) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/term%d", rl_dir(), nproc);
    rl_run t = rl_train("ZS_FAULT_TERM=0:5 timeout 120", "--nproc %d " COMMON " --save-dir %s",
                        nproc, dir);
    ZT_CHECK(t.rc == 143, "nproc %d: SIGTERM: exit %d (want 128+15): %s", nproc, t.rc, rl_out);
    ZT_CHECK(!t.ok, "nproc %d: a stopped run has no final record", nproc);
    ZT_CHECK(strstr(rl_out, "zshard: stopped by SIGTERM after step ") &&
                 strstr(rl_out, "checkpoint saved in "),
             "nproc %d: says where it saved: %s", nproc, rl_out);
    int stopped_at = t.n_steps ? t.step[t.n_steps - 1] : 0;
    ZT_CHECK(stopped_at >= 5 && stopped_at < 12, "nproc %d: stopped after step %d", nproc,
             stopped_at);
    char cmd[800], buf[4096];
    snprintf(cmd, sizeof cmd, "grep '\"stopped\":true' %s/run*.jsonl | tail -1", rl_dir());
    zt_run(cmd, buf, sizeof buf);
    char want[128];
    snprintf(want, sizeof want, "\"signal\":\"SIGTERM\",\"step\":%d,\"checkpoint\":\"", stopped_at);
    ZT_CHECK(strstr(buf, want), "nproc %d: the log's end record: %s", nproc, buf);
    /* The checkpoint continues bitwise: resume to step 12 and compare. */
    rl_run r =
        rl_train("timeout 120", "--nproc %d " COMMON " --save-dir %s --resume latest", nproc, dir);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && !strcmp(r.hash, ref->hash),
             "nproc %d: resumed from step %d: param_hash %s, uninterrupted %s", nproc, stopped_at,
             r.hash, ref->hash);
}

/* A single process, signalled from outside as a user's `kill` does (
 * it used to die at once, silently, with no record and nothing saved). */
static void test_sigterm_external(void) {
    char cmd[4096], log[600], dir[600];
    snprintf(log, sizeof log, "%s/ext.jsonl", rl_dir());
    snprintf(dir, sizeof dir, "%s/ext", rl_dir());
    snprintf(cmd, sizeof cmd,
             "exec %s train --data %s/corpus.txt --steps 1000000 --batch 8 --seq 32 "
             "--sample-len 0 --val-every 0 --save-dir %s --log %s > %s/ext.out 2>&1",
             zt_zshard_exe(), rl_dir(), dir, log, rl_dir());
    pid_t pid = fork();
    ZT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    char grep[1024], buf[4096];
    snprintf(grep, sizeof grep, "grep -c '\"step\":3,' %s 2>/dev/null || true", log);
    for (int i = 0; i < 1200; i++) {
        zt_run(grep, buf, sizeof buf);
        if (atoi(buf) > 0) break;
        usleep(50000);
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    ZT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 143,
             "exits 143 by itself after SIGTERM (wait status %d)", status);
    snprintf(cmd, sizeof cmd, "tail -1 %s; cat %s/ext.out; ls %s", log, rl_dir(), dir);
    zt_run(cmd, buf, sizeof buf);
    ZT_CHECK(strstr(buf, "{\"stopped\":true,\"signal\":\"SIGTERM\"") &&
                 strstr(buf, "zshard: stopped by SIGTERM after step") && strstr(buf, "latest"),
             "end record, message and checkpoint: %s", buf);
}

int main(void) {
    zt_init("elastic");
    rl_setup("elastic");
    rl_run ref2 = rl_train("timeout 120", "--nproc 2 " COMMON);
    rl_check_exit(&ref2);
    rl_run ref1 = rl_train("timeout 120", COMMON);
    rl_check_exit(&ref1);
    ZT_REQUIRE(ref2.ok && ref1.ok, "reference runs");
    test_restart(&ref2);
    test_give_up();
    test_sigterm(&ref2, 2);
    test_sigterm(&ref1, 1);
    test_sigterm_external();
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

/* Failure injection on a real training job: a rank killed mid-step (SIGKILL, as the OOM
 * killer would) ends the whole job quickly, with a non-zero exit, the launcher's one-line
 * summary naming the rank, and the survivors' communication error naming the dead peer and
 * the collective. No shared-memory segment is left behind. Never a hang. */
#include "core/timer.h"
#include "testutil.h"

#include <string.h>

static char g_out[1 << 17];

/* Shared-memory objects of one job: their names carry the launcher's pid as the job key
 * ("zshard-job<pid>-..."), so other jobs running on the machine do not count. */
static int count_segments(long launcher_pid) {
    char buf[4096], cmd[256];
    snprintf(cmd, sizeof cmd, "ls /dev/shm 2>/dev/null | grep -c '^zshard-job%ld-' || true",
             launcher_pid);
    zt_run(cmd, buf, sizeof buf);
    return atoi(buf);
}

static void kill_case(const char *corpus, int nproc, const char *stage, int victim, int step) {
    char cmd[2048];
    /* `exec` keeps the shell's pid, and --nproc re-executes in place as the launcher, so
     * the printed pid is the launcher's: the job key of every segment this job creates. */
    snprintf(cmd, sizeof cmd,
             "ZS_FAULT_KILL=%d:%d timeout 120 sh -c 'echo launcher=$$; exec %s train --data %s "
             "--model gpt2-tiny --nproc %d --stage %s --batch 12 --seq 32 --steps 20 "
             "--comm-timeout 30 --sample-len 0 --val-every 0'",
             victim, step, zt_zshard_exe(), corpus, nproc, stage);
    double t0 = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    double dt = zs_now_s() - t0;
    ZT_CHECK(rc != 0 && rc != 124, "N=%d stage %s: exit %d (want failure, not timeout)", nproc,
             stage, rc);
    /* Dead peers are detected by liveness checks, not by waiting out the 30 s timeout. */
    ZT_CHECK(dt < 25.0, "N=%d stage %s: took %.1f s to fail", nproc, stage, dt);
    char want[128];
    snprintf(want, sizeof want, "zshard run: rank %d (pid", victim);
    ZT_CHECK(strstr(g_out, want) && strstr(g_out, "killed by signal 9"),
             "launcher summary names rank %d: %s", victim, g_out);
    snprintf(want, sizeof want, "peer rank %d died", victim);
    ZT_CHECK(strstr(g_out, want) != NULL, "survivor names the dead peer: %s", g_out);
    ZT_CHECK(strstr(g_out, "tag '") != NULL, "error names the collective's tag (unit)");
    ZT_CHECK(strstr(g_out, "summary:") == NULL, "no run summary is printed for a failed job");
    /* One error line and one verdict per survivor, not their 64-entry collective rings
     * (about 200 lines at 4 ranks before the ring went to a file). */
    int lines = 0;
    for (const char *c = g_out; *c; c++)
        lines += *c == '\n';
    ZT_CHECK(lines <= 12 + 2 * nproc, "N=%d: %d lines of output:\n%s", nproc, lines, g_out);
    ZT_CHECK(strstr(g_out, "collectives of rank ") && strstr(g_out, " written to "),
             "the ring's file is named: %s", g_out);
    const char *lp = strstr(g_out, "launcher=");
    long pid = lp ? atol(lp + 9) : 0;
    ZT_CHECK(pid > 0, "launcher pid printed");
    ZT_CHECK(count_segments(pid) == 0, "shared-memory objects of job %ld left behind: %d", pid,
             count_segments(pid));
}

int main(void) {
    zt_init("fault");
    char dir[] = "/tmp/zshard-test-fault-XXXXXX", corpus[256];
    ZT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(corpus, sizeof corpus, "%s/c.txt", dir);
    FILE *f = fopen(corpus, "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 4000; i++)
        fprintf(f, "line %d of a plain text. ", i);
    fclose(f);
    kill_case(corpus, 3, "ddp", 1, 3);
    kill_case(corpus, 4, "3", 2, 2);
    kill_case(corpus, 2, "2", 0, 4);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

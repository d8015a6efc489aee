/* Failure handling, as a user sees it through `zshard run`: a killed rank (in a collective on
 * plain or registered buffers, or in a registration), a stuck rank and a mismatched
 * collective (check mode) each end the job quickly with messages naming the peer rank, the
 * collective, its sequence number and the tag; the launcher's summary names the rank that
 * failed; nothing is left in /dev/shm. */
#include "commtest.h"
#include "core/timer.h"

static char g_out[1 << 20];

static int run(const char *env, int n, const char *mode, double *secs) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s run -n %d --drain 10 -- %s %s --victim 2", env,
             zt_zshard_exe(), n, ct_worker(), mode);
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    *secs = zs_now_s() - t;
    printf("%s -> %d in %.2f s\n", cmd, rc, *secs);
    return rc;
}

/* mode: the worker's mode and flags; what: the collective the survivors must name. */
static void test_killed_rank(const char *mode, const char *what) {
    double s;
    /* A long timeout: the dead peer must be noticed by liveness checks, not the timeout. */
    int rc = run("ZS_COMM_TIMEOUT=60", 4, mode, &s);
    ZT_CHECK(rc != 0, "job with a killed rank exited 0:\n%s", g_out);
    ZT_CHECK(s < 8.0, "took %.1f s to notice a dead rank (timeout was 60 s)", s);
    ZT_CHECK(strstr(g_out, "zshard run: rank 2 (pid ") && strstr(g_out, "killed by signal 9"),
             "launcher summary does not name rank 2 and SIGKILL:\n%s", g_out);
    ZT_CHECK(ct_count(g_out, "FAILED ZS_ERR_COMM") == 3, "every survivor must fail:\n%s", g_out);
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        char want[96];
        snprintf(want, sizeof want, "%s on rank %d", what, r);
        ZT_CHECK(strstr(g_out, want), "rank %d: no message with '%s':\n%s", r, want, g_out);
    }
    ZT_CHECK(ct_count(g_out, "peer rank 2") >= 3, "messages must name peer rank 2:\n%s", g_out);
    /* The ring goes to a file per rank, named in the error line, not onto the terminal. */
    ZT_CHECK(strstr(g_out, "collectives of rank 0 written to "), "no ring file named:\n%s", g_out);
    ZT_CHECK(ct_count(g_out, "\n") < 40, "the ring is dumped on the terminal:\n%s", g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm");
}

static void test_stuck_rank(void) {
    double s;
    int rc = run("ZS_COMM_TIMEOUT=2", 3, "stuck", &s);
    ZT_CHECK(rc != 0, "job with a stuck rank exited 0:\n%s", g_out);
    ZT_CHECK(s < 20.0, "took %.1f s with a 2 s timeout", s);
    ZT_CHECK(strstr(g_out, "ZS_ERR_TIMEOUT") && strstr(g_out, "waiting for peer rank 2"),
             "timeout must name rank 2:\n%s", g_out);
    ZT_CHECK(ct_count(g_out, "FAILED ZS_ERR_") == 2, "both other ranks must fail:\n%s", g_out);
    /* The ranks that timed out exit first; the summary must still blame the stuck one. */
    ZT_CHECK(strstr(g_out, "zshard run: rank 2 (pid ") &&
                 strstr(g_out, "is the rank the others waited for"),
             "the summary must name stuck rank 2:\n%s", g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm");
}

static void test_mismatch(void) {
    double s;
    int rc = run("ZS_COMM_TIMEOUT=60 ZS_COMM_CHECK=1", 3, "mismatch", &s);
    ZT_CHECK(rc != 0, "mismatched job exited 0:\n%s", g_out);
    ZT_CHECK(s < 8.0, "mismatch took %.1f s to report", s);
    ZT_CHECK(ct_count(g_out, "collective mismatch (ZS_COMM_CHECK): rank 0 called all_reduce("
                             "count 256") >= 6,
             "each rank must report the mismatch (message and log):\n%s", g_out);
    ZT_CHECK(strstr(g_out, "rank 1 called all_gather(count 1"), "mismatch must name rank 1");
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm");
}

int main(void) {
    zt_init("comm_fail");
    ct_job_scope();
    /* The rings of the failed ranks land here; the test reads one and removes them. */
    static char ring_dir[] = "/tmp/zshard-test-ring-XXXXXX";
    ZT_REQUIRE(mkdtemp(ring_dir), "mkdtemp");
    setenv("ZS_COMM_RING_DIR", ring_dir, 1);
    test_killed_rank("die", "all_reduce #21 (tag 'unit.8', 256 x f32)");
    char cmd[600], buf[4096];
    snprintf(cmd, sizeof cmd, "cat %s/zshard-ring-*-rank0.txt", ring_dir);
    zt_run(cmd, buf, sizeof buf);
    ZT_CHECK(strstr(buf, "collectives of rank 0") && strstr(buf, "all_reduce") &&
                 strstr(buf, "tag 'unit.8'"),
             "rank 0's ring file:\n%s", buf);
    /* on registered buffers (the direct path), and inside zs_comm_mem_alloc, whose shm
     * objects the survivors must unlink */
    test_killed_rank("die --registered", "all_reduce #22 (tag 'unit.8', 256 x f32)");
    test_killed_rank("die-alloc", "mem_alloc #21 (tag 'unit.8', 1024 bytes)");
    test_stuck_rank();
    test_mismatch();
    snprintf(cmd, sizeof cmd, "rm -rf %s", ring_dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

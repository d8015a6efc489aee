/* `zshard run`: torchrun's variables and the thread share reach every rank, output lines
 * carry the rank prefix, a failing rank (exit status or signal) stops the others and yields
 * a non-zero exit with a one-line summary naming it, SIGINT stops every rank, the rendezvous
 * port stays the launch's while it runs, and bad arguments are rejected with exit 2. */
#include "commtest.h"
#include "core/timer.h"

#include <signal.h>
#include <sys/wait.h>

static char g_out[1 << 16];

static int run(const char *args, double *secs) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run %s", zt_zshard_exe(), args);
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    if (secs) *secs = zs_now_s() - t;
    printf("%s -> %d\n", cmd, rc);
    return rc;
}

static void test_env(void) {
    int rc = run("-n 3 --threads 2 -- sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK "
                 "$LOCAL_WORLD_SIZE $MASTER_ADDR $OMP_NUM_THREADS $OPENBLAS_NUM_THREADS; "
                 "test \"$MASTER_PORT\" -gt 0'",
                 NULL);
    ZT_CHECK(rc == 0, "exit %d:\n%s", rc, g_out);
    for (int r = 0; r < 3; r++) {
        char want[128];
        snprintf(want, sizeof want, "[%d] env %d 3 %d 3 127.0.0.1 2 2\n", r, r, r);
        ZT_CHECK(strstr(g_out, want), "missing '%s' in:\n%s", want, g_out);
    }
    rc = run("-n 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 29999 "
             "--no-prefix -- sh -c 'echo r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK'",
             NULL);
    ZT_CHECK(rc == 0 && strstr(g_out, "r=2 w=4 l=0\n") && strstr(g_out, "r=3 w=4 l=1\n") &&
                 !strstr(g_out, "[2]"),
             "node rank 1 of 2 must hold ranks 2 and 3 (no prefix):\n%s", g_out);
}

static void test_failures(void) {
    double s;
    int rc = run("-n 3 --drain 0.5 --kill-grace 2 -- sh -c 'if [ $RANK = 1 ]; then exit 7; fi; "
                 "exec sleep 60'",
                 &s);
    ZT_CHECK(rc == 7, "exit status of the failed rank expected (7), got %d:\n%s", rc, g_out);
    ZT_CHECK(strstr(g_out, "zshard run: rank 1 (pid ") && strstr(g_out, "exited with status 7"),
             "summary must name rank 1 and its status:\n%s", g_out);
    ZT_CHECK(s < 10, "the other ranks were not stopped promptly (%.1f s)", s);

    rc =
        run("-n 4 --drain 0.5 -- sh -c 'if [ $RANK = 2 ]; then kill -9 $$; fi; exec sleep 60'", &s);
    ZT_CHECK(rc == 128 + 9, "exit 137 expected for a SIGKILLed rank, got %d:\n%s", rc, g_out);
    ZT_CHECK(strstr(g_out, "zshard run: rank 2 (pid ") && strstr(g_out, "killed by signal 9"),
             "summary must name rank 2 and SIGKILL:\n%s", g_out);
    ZT_CHECK(s < 10, "took %.1f s", s);

    /* a rank ignoring SIGTERM is SIGKILLed after the grace period */
    rc = run("-n 2 --drain 0.2 --kill-grace 1 -- sh -c 'trap \"\" TERM; if [ $RANK = 0 ]; then "
             "exit 3; fi; while :; do sleep 0.1; done'",
             &s);
    ZT_CHECK(rc == 3 && s < 8, "stubborn rank: exit %d after %.1f s:\n%s", rc, s, g_out);

    /* every rank failing the same way by itself (a bad flag each sees): no single culprit */
    rc = run("-n 3 -- sh -c 'exit 5'", &s);
    ZT_CHECK(rc == 5 && strstr(g_out, "exited with status 5 first; all 3 local ranks ended that "
                                      "way on their own"),
             "same failure on every rank: exit %d:\n%s", rc, g_out);

    rc = run("-n 2 -- /nonexistent/program", NULL);
    ZT_CHECK(rc == 127 && strstr(g_out, "cannot execute"), "exec failure: %d:\n%s", rc, g_out);
}

static void test_sigint(void) {
    /* The launcher installs its handlers before it starts a rank, so once all three ranks
     * have written their file it is ready for Ctrl-C (a fixed sleep is not enough on a loaded
     * machine: an early SIGINT meets the default action). */
    char dir[] = "/tmp/zshard-test-sigint-XXXXXX", cmd[256];
    ZT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(cmd, sizeof cmd, "touch %s/ready.$RANK; exec sleep 60", dir);
    pid_t pid = fork();
    ZT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        execl(zt_zshard_exe(), "zshard", "run", "-n", "3", "--", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int waited = 0, ready = 0; ready < 3; waited++) {
        ZT_REQUIRE(waited < 6000, "the 3 ranks did not start within 60 s");
        usleep(10000);
        ready = 0;
        for (int r = 0; r < 3; r++) {
            char p[300];
            snprintf(p, sizeof p, "%s/ready.%d", dir, r);
            ready += access(p, F_OK) == 0;
        }
    }
    kill(pid, SIGINT); /* what Ctrl-C delivers to the launcher */
    double t = zs_now_s();
    int status = 0;
    waitpid(pid, &status, 0);
    ZT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130,
             "Ctrl-C: launcher exit status %d expected 130", status);
    ZT_CHECK(zs_now_s() - t < 5, "Ctrl-C took %.1f s", zs_now_s() - t);
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    ZT_CHECK(system(rm) == 0, "%s", rm);
}

/* The rendezvous port is the launch's for its whole life (docs/comm.md, "The rendezvous
 * store"): while the job runs no other program can bind it, not even between rank 0's store
 * servers when nothing listens there, and a restarted job gets the same port. */
static void test_port(void) {
    int rc = run("-n 2 -- python3 -c 'import errno, os, socket\n"
                 "p = int(os.environ[\"MASTER_PORT\"])\n"
                 "for fam, host in ((socket.AF_INET, \"127.0.0.1\"), (socket.AF_INET6, \"::\")):\n"
                 "    try:\n"
                 "        s = socket.socket(fam)\n"
                 "    except OSError:\n"
                 "        print(\"held\", host, \"(no such family)\"); continue\n"
                 "    try:\n"
                 "        s.bind((host, p)); print(\"free\", host)\n"
                 "    except OSError as e:\n"
                 "        print(\"held\" if e.errno == errno.EADDRINUSE else e, host)\n'",
                 NULL);
    ZT_CHECK(rc == 0, "exit %d:\n%s", rc, g_out);
    for (int r = 0; r < 2; r++) {
        char v4[64], v6[64];
        snprintf(v4, sizeof v4, "[%d] held 127.0.0.1\n", r);
        snprintf(v6, sizeof v6, "[%d] held ::", r);
        ZT_CHECK(strstr(g_out, v4) && strstr(g_out, v6),
                 "rank %d could bind the job's MASTER_PORT while the job ran:\n%s", r, g_out);
    }
    rc = run("-n 1 --max-restarts 1 --restart-backoff 0 --no-prefix -- sh -c 'echo "
             "port=$MASTER_PORT; test $TORCHELASTIC_RESTART_COUNT = 1'",
             NULL);
    const char *a = strstr(g_out, "port="), *b = a ? strstr(a + 5, "port=") : NULL;
    ZT_CHECK(rc == 0 && a && b && atoi(a + 5) > 0 && atoi(a + 5) == atoi(b + 5),
             "the restart must get the first attempt's port: exit %d:\n%s", rc, g_out);
}

static void test_bad_args(void) {
    ZT_CHECK(run("-- true", NULL) == 2 && strstr(g_out, "-n N is required"), "%s", g_out);
    ZT_CHECK(run("-n 2", NULL) == 2 && strstr(g_out, "no command"), "%s", g_out);
    ZT_CHECK(run("-n 0 -- true", NULL) == 2, "%s", g_out);
    ZT_CHECK(run("-n 2 --nnodes 2 -- true", NULL) == 2, "%s", g_out);
    ZT_CHECK(run("-n 2 --bogus 1 -- true", NULL) == 2, "%s", g_out);
    ZT_CHECK(run("-n 2 -- true", NULL) == 0, "%s", g_out);
}

int main(void) {
    zt_init("launcher");
    test_env();
    test_failures();
    test_sigint();
    test_port();
    test_bad_args();
    return zt_finish();
}

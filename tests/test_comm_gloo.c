/* The gloo backend on one host (loopback): the same exact collectives as shm for 1..4 ranks
 * (async, on zs_comm_mem_alloc buffers, and in windows of 8 KiB), a killed and a stuck rank
 * named by every survivor, and one clear message for each way of failing to meet: no
 * MASTER_PORT, mismatched WORLD_SIZEs, a rank started twice, a closed port, a master address
 * that does not resolve. Skips (77) when this build has no gloo. Across hosts: multihost. */
#include "commtest.h"
#include "core/timer.h"
#include "zshard.h"

static char g_out[1 << 20];

static void collectives(int n, const char *env, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s ZS_COMM_TIMEOUT=60 %s run -n %d -- %s collectives --comm gloo %s",
             env, zt_zshard_exe(), n, ct_worker(), args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "%s -> exit %d:\n%s", cmd, rc, g_out);
    ZT_CHECK(ct_count(g_out, " 0 failed") == n, "expected %d passing ranks:\n%s", n, g_out);
}

static int failure(const char *timeout, int n, const char *mode, double *secs) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "ZS_COMM_TIMEOUT=%s %s run -n %d --drain 10 -- %s %s --comm gloo "
             "--victim 2",
             timeout, zt_zshard_exe(), n, ct_worker(), mode);
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    *secs = zs_now_s() - t;
    printf("%s -> %d in %.2f s\n", cmd, rc, *secs);
    return rc;
}

static void killed_rank(void) {
    double s;
    /* A long timeout: the dead peer must be noticed through its closed connections. */
    int rc = failure("60", 4, "die", &s);
    ZT_CHECK(rc != 0, "job with a killed rank exited 0:\n%s", g_out);
    ZT_CHECK(s < 30.0, "took %.1f s to notice a dead rank (timeout was 60 s)", s);
    ZT_CHECK(ct_count(g_out, "FAILED ZS_ERR_COMM") == 3, "every survivor must fail:\n%s", g_out);
    /* Rank 2 among the lost peers each survivor names: a slower survivor (under a sanitizer)
     * may also see rank 0 leave first ("lost peer rank 0 (IP), 2 (IP): ..."). */
    for (int r = 0; r < 4; r++) {
        char want[96];
        snprintf(want, sizeof want, "on rank %d: gloo: lost peer rank ", r);
        const char *at = strstr(g_out, want), *named = NULL;
        if (at) {
            at += strlen(want);
            const char *end = strstr(at, ": ");
            const char *two = strstr(at, "2 (");
            named = two && end && two < end && (two == at || two[-1] == ' ') ? two : NULL;
        }
        ZT_CHECK(r == 2 || named, "rank %d does not name peer rank 2:\n%s", r, g_out);
    }
    ZT_CHECK(strstr(g_out, "zshard run: rank 2 (pid ") && strstr(g_out, "killed by signal 9"),
             "launcher summary does not name rank 2 and SIGKILL:\n%s", g_out);
}

static void stuck_rank(void) {
    double s;
    int rc = failure("2", 3, "stuck", &s);
    ZT_CHECK(rc != 0, "job with a stuck rank exited 0:\n%s", g_out);
    ZT_CHECK(s < 30.0, "took %.1f s with a 2 s timeout", s);
    ZT_CHECK(ct_count(g_out, "FAILED ZS_ERR_TIMEOUT") == 2 &&
                 ct_count(g_out, "still waiting for peer rank 2 (127.0.0.1) (") >= 2,
             "both other ranks must time out naming peer rank 2 alone:\n%s", g_out);
    ZT_CHECK(strstr(g_out, "zshard run: rank 2 (pid ") &&
                 strstr(g_out, "is the rank the others waited for"),
             "the summary must name stuck rank 2:\n%s", g_out);
}

/* A free TCP port on the loopback now (the kernel's choice). */
static int free_port(void) {
    char buf[64];
    int rc = zt_run("python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                    "print(s.getsockname()[1])'",
                    buf, sizeof buf);
    int port = atoi(buf);
    ZT_REQUIRE(rc == 0 && port > 0, "no free port: %s", buf);
    return port;
}

/* Ranks started by hand, one per entry of env (variables for `env`): all but the last in the
 * background. rc[k] is each one's exit status; g_out holds every output, in order. */
static void by_hand(int n, const char *const *env, const char *mode, int *rc) {
    char cmd[8192], logs[8][64];
    size_t at = 0;
    ZT_REQUIRE(n <= 8, "too many ranks");
    at += (size_t)snprintf(cmd + at, sizeof cmd - at, "{ ");
    for (int k = 0; k < n; k++) {
        snprintf(logs[k], sizeof logs[k], "/tmp/zshard-test-gloo-%d-%d.log", (int)getpid(), k);
        at += (size_t)snprintf(cmd + at, sizeof cmd - at,
                               "( env %s %s %s --comm gloo > %s 2>&1; echo \"exit $?\" "
                               ">> %s ) %s ",
                               env[k], ct_worker(), mode, logs[k], logs[k], k + 1 < n ? "&" : ";");
    }
    snprintf(cmd + at, sizeof cmd - at, "wait; }");
    zt_run(cmd, g_out, sizeof g_out);
    at = 0;
    for (int k = 0; k < n; k++) {
        FILE *f = fopen(logs[k], "r");
        size_t len = f ? fread(g_out + at, 1, sizeof g_out - at - 1, f) : 0;
        if (f) fclose(f);
        g_out[at + len] = '\0';
        const char *e = strstr(g_out + at, "exit ");
        rc[k] = e ? atoi(e + 5) : -1;
        printf("rank process %d (%s): exit %d\n", k, env[k], rc[k]);
        at += len;
        unlink(logs[k]);
    }
}

static void meeting_errors(void) {
    char e0[512], e1[512];
    int rc;
    double t = zs_now_s();
    /* Hand-started ranks with no meeting point: said at once, not after the timeout. */
    snprintf(e0, sizeof e0,
             "ZS_COMM_TIMEOUT=60 env -u ZS_JOB_ID RANK=1 WORLD_SIZE=2 %s collectives", ct_worker());
    rc = zt_run(e0, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && strstr(g_out, "has no MASTER_PORT") && strstr(g_out, "ZS_JOB_ID"),
             "no MASTER_PORT: exit %d:\n%s", rc, g_out);
    ZT_CHECK(zs_now_s() - t < 20, "no MASTER_PORT took %.1f s to say so", zs_now_s() - t);

    /* Mismatched world sizes: both ranks say so. */
    int port = free_port(), rcs[3];
    snprintf(e0, sizeof e0, "ZS_COMM_TIMEOUT=20 RANK=0 WORLD_SIZE=2 MASTER_PORT=%d", port);
    snprintf(e1, sizeof e1, "ZS_COMM_TIMEOUT=20 RANK=1 WORLD_SIZE=3 MASTER_PORT=%d", port);
    const char *two[2] = {e0, e1};
    by_hand(2, two, "collectives", rcs);
    ZT_CHECK(rcs[0] != 0 && rcs[1] != 0 && ct_count(g_out, "mismatched world sizes: rank") == 2,
             "mismatched WORLD_SIZE: exits %d/%d:\n%s", rcs[0], rcs[1], g_out);

    /* The same rank twice: the second to join says so at once; the others then wait for the
     * missing rank 2 until the timeout. */
    port = free_port();
    snprintf(e0, sizeof e0,
             "ZS_COMM_TIMEOUT=5 RANK=0 WORLD_SIZE=3 LOCAL_WORLD_SIZE=1 "
             "LOCAL_RANK=0 MASTER_PORT=%d",
             port);
    snprintf(e1, sizeof e1,
             "ZS_COMM_TIMEOUT=5 RANK=1 WORLD_SIZE=3 LOCAL_WORLD_SIZE=1 "
             "LOCAL_RANK=0 MASTER_PORT=%d",
             port);
    const char *three[3] = {e0, e1, e1};
    by_hand(3, three, "collectives", rcs);
    ZT_CHECK(rcs[0] != 0 && rcs[1] != 0 && rcs[2] != 0 &&
                 ct_count(g_out, "rank 1 joined the job at the master twice") == 1,
             "rank started twice: exits %d/%d/%d:\n%s", rcs[0], rcs[1], rcs[2], g_out);

    /* Ranks started by hand, with no launcher ignoring SIGPIPE for them: the survivor of a killed
     * peer reports it (libgloo writes without MSG_NOSIGNAL; the backend ignores SIGPIPE). */
    port = free_port();
    snprintf(e0, sizeof e0, "ZS_COMM_TIMEOUT=60 RANK=0 WORLD_SIZE=2 MASTER_PORT=%d", port);
    snprintf(e1, sizeof e1, "ZS_COMM_TIMEOUT=60 RANK=1 WORLD_SIZE=2 MASTER_PORT=%d", port);
    by_hand(2, two, "die --victim 1", rcs);
    ZT_CHECK(rcs[0] == 3 && rcs[1] == 137 && strstr(g_out, "rank 0: FAILED ZS_ERR_COMM") &&
                 strstr(g_out, "gloo: lost peer rank 1 "),
             "by hand, rank 1 killed: exits %d/%d (want 3 and 137):\n%s", rcs[0], rcs[1], g_out);

    /* Nothing listens on the port: one line naming the address, after the (short) timeout. */
    port = free_port();
    snprintf(e0, sizeof e0,
             "ZS_COMM_TIMEOUT=2 RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 "
             "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s collectives --comm gloo",
             port, ct_worker());
    rc = zt_run(e0, g_out, sizeof g_out);
    snprintf(e1, sizeof e1, "cannot reach the rendezvous master at 127.0.0.1:%d", port);
    ZT_CHECK(rc != 0 && strstr(g_out, e1) && strstr(g_out, "refused"), "closed port: %d:\n%s", rc,
             g_out);

    /* A master address that does not resolve: at once, naming it. */
    t = zs_now_s();
    snprintf(e0, sizeof e0,
             "ZS_COMM_TIMEOUT=60 RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 "
             "MASTER_ADDR=no-such-host.invalid MASTER_PORT=%d %s collectives --comm gloo",
             port, ct_worker());
    rc = zt_run(e0, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && strstr(g_out, "'no-such-host.invalid' does not resolve"),
             "unresolvable MASTER_ADDR: %d:\n%s", rc, g_out);
    ZT_CHECK(zs_now_s() - t < 20, "unresolvable MASTER_ADDR took %.1f s", zs_now_s() - t);
}

/* Groups (zs_comm_split) on gloo: an HSDP mesh's groups forced onto gloo (auto would take shm
 * on one host), each group's sums in its rank order bit for bit, and a killed rank named. */
static void split_groups(void) {
    char cmd[8192];
    const char *shapes[] = {"-n 4 -- %s split --group 2", "-n 6 -- %s split --group 3"};
    for (int i = 0; i < 2; i++) {
        char shape[4096];
        snprintf(shape, sizeof shape, shapes[i], ct_worker());
        snprintf(cmd, sizeof cmd, "ZS_COMM_TIMEOUT=60 %s run %s --comm gloo --split-comm gloo",
                 zt_zshard_exe(), shape);
        int rc = zt_run(cmd, g_out, sizeof g_out);
        int n = i ? 6 : 4;
        ZT_CHECK(rc == 0 && ct_count(g_out, " 0 failed") == n, "%s -> %d:\n%s", cmd, rc, g_out);
        ZT_CHECK(ct_count(g_out, "shard group gloo (--comm gloo), replica group gloo") == n,
                 "the groups did not run on gloo:\n%s", g_out);
    }
    snprintf(cmd, sizeof cmd,
             "ZS_COMM_TIMEOUT=60 %s run -n 4 --drain 10 -- %s split-die --group 2 --victim 2 "
             "--comm gloo --split-comm gloo",
             zt_zshard_exe(), ct_worker());
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && zs_now_s() - t < 30.0, "%s -> %d in %.1f s:\n%s", cmd, rc, zs_now_s() - t,
             g_out);
    ct_split_die_check(g_out);
}

int main(void) {
    zt_init("comm_gloo");
    ct_job_scope();
    if (!zs_comm_backend_available(ZS_COMM_GLOO)) zt_skip("built without gloo (libgloo-dev)");
    static char ring_dir[] = "/tmp/zshard-test-ring-XXXXXX";
    ZT_REQUIRE(mkdtemp(ring_dir), "mkdtemp");
    setenv("ZS_COMM_RING_DIR", ring_dir, 1);
    for (int n = 1; n <= 4; n++)
        collectives(n, "", "");
    collectives(3, "", "--async");
    collectives(3, "", "--registered");
    collectives(3, "ZS_SHM_CHUNK=8K", "");
    collectives(2, "ZS_SOCKET_IFNAME=lo", "");
    split_groups();
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "ZS_SOCKET_IFNAME=nosuch0 ZS_COMM_TIMEOUT=20 %s run -n 2 -- %s collectives --comm gloo",
        zt_zshard_exe(), ct_worker());
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && strstr(g_out, "ZS_SOCKET_IFNAME=nosuch0: no interface of that name"),
             "unknown ZS_SOCKET_IFNAME: exit %d:\n%s", rc, g_out);
    killed_rank();
    stuck_rank();
    meeting_errors();
    snprintf(cmd, sizeof cmd, "rm -rf %s", ring_dir);
    zt_run(cmd, g_out, sizeof g_out);
    return zt_finish();
}

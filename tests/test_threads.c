/* Threads per rank: without the user's settings, a rank started by
 * hand, by zshard run or by another launcher gets OMP_NUM_THREADS = its share of the cores
 * it may use and OMP_WAIT_POLICY=passive; the user's settings win, with a warning when they
 * oversubscribe the cores. (The timing under a competing CPU hog is bench/busy_cores.sh:
 * timings stay out of tests.) */
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static char g_out[1 << 16];
static char g_dir[] = "/tmp/zshard-test-threads-XXXXXX";

static int sh(const char *env, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OMP_WAIT_POLICY %s %s %s", env,
             zt_zshard_exe(), args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    printf("%s -> %d\n", cmd, rc);
    return rc;
}

int main(void) {
    zt_init("threads");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    char corpus[600], train[1200];
    snprintf(corpus, sizeof corpus, "%s/c.txt", g_dir);
    FILE *f = fopen(corpus, "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 2000; i++)
        fprintf(f, "line %d of a plain text. ", i);
    fclose(f);
    snprintf(train, sizeof train,
             "train --data %s --steps 1 --batch 4 --seq 32 --sample-len 0 --val-every 0", corpus);

    /* A single process pinned to one core: one thread, passive. */
    char args[1400];
    snprintf(args, sizeof args, "%s", train);
    int rc = sh("taskset -c 0", args);
    ZT_CHECK(rc == 0 && strstr(g_out, "threads per rank: 1 (OMP_WAIT_POLICY=passive; 1 core "),
             "pinned to one core: %s", g_out);

    /* The launcher's ranks: a share each, passive, and the thread variables in each rank. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    rc = sh("taskset -c 0", "run -n 2 -- sh -c 'echo t=$OMP_NUM_THREADS b=$OPENBLAS_NUM_THREADS "
                            "w=$OMP_WAIT_POLICY'");
    ZT_CHECK(rc == 0 && strstr(g_out, "[0] t=1 b=1 w=passive") &&
                 strstr(g_out, "[1] t=1 b=1 w=passive"),
             "launcher on one core: %s", g_out);

    /* The user's choices win; more threads than cores is warned about. */
    char env[128];
    snprintf(env, sizeof env, "OMP_NUM_THREADS=%ld OMP_WAIT_POLICY=active", 4 * cores);
    rc = sh(env, args);
    ZT_CHECK(rc == 0 && strstr(g_out, "zshard warning: OMP_NUM_THREADS=") &&
                 strstr(g_out, "OMP_WAIT_POLICY=active"),
             "user settings kept and warned about: %s", g_out);
    rc = sh(env, "run -n 2 -- sh -c 'echo t=$OMP_NUM_THREADS w=$OMP_WAIT_POLICY'");
    char want[64];
    snprintf(want, sizeof want, "[1] t=%ld w=active", 4 * cores);
    ZT_CHECK(rc == 0 && strstr(g_out, want) && strstr(g_out, "zshard warning: OMP_NUM_THREADS="),
             "launcher keeps the user's settings and warns: %s", g_out);
    rc = sh("OMP_NUM_THREADS=1", args);
    ZT_CHECK(rc == 0 && !strstr(g_out, "warning"), "no warning when it fits: %s", g_out);

    snprintf(args, sizeof args, "rm -rf %s", g_dir);
    ZT_CHECK(system(args) == 0, "cleanup");
    return zt_finish();
}

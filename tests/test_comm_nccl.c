/* Collectives on GPU memory (ctest label gpu), on the gpu suite's GPU (emulated in CI): the rank
 * program (comm_worker, built on that GPU) copies its inputs to device buffers, runs every
 * collective on device pointers and checks the results bit for bit, through `zshard run`:
 *  - nccl, one GPU per rank (ZS_EMU_DEVICES), on 1, 2 and 3 ranks, blocking and asynchronous:
 *    the collective runs on the communicator's stream, ordered by events;
 *  - shm through pinned host staging, the path of ranks that share one GPU, on 1 to 3 ranks,
 *    with an injected delay before every collective;
 *  - groups (zs_comm_split) of 2 among 4 ranks, on nccl and on staged shm;
 *  - a rank killed inside an nccl all_reduce: every survivor fails within the timeout naming the
 *    collective, and the launcher names the dead rank. */
#include "commtest.h"
#include "backend/cuda_device.h"
#include "core/timer.h"

static char g_out[1 << 20];

static int run(const char *env, int n, const char *args, double *secs) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s ZS_COMM_TIMEOUT=60 %s run -n %d --drain 10 -- %s %s", env,
             zt_zshard_exe(), n, ct_worker(), args);
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    if (secs) *secs = zs_now_s() - t;
    printf("%s -> %d\n", cmd, rc);
    return rc;
}

static void run_world(int n, const char *env, const char *args) {
    int rc = run(env, n, args, NULL);
    ZT_CHECK(rc == 0, "%d ranks, %s -> exit %d:\n%s", n, args, rc, g_out);
    ZT_CHECK(ct_count(g_out, " 0 failed") == n, "expected %d passing ranks:\n%s", n, g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "shared-memory segment left in /dev/shm (%s)", args);
}

static void killed_rank(void) {
    double s;
    if (!zt_gpus_for(3, "a rank killed among 3 nccl ranks")) return;
    int rc = run("ZS_EMU_DEVICES=3", 3, "die --victim 1 --comm nccl --device cuda", &s);
    ZT_CHECK(rc != 0, "nccl job with a killed rank exited 0:\n%s", g_out);
    ZT_CHECK(s < 30.0, "took %.1f s to end after a rank died (timeout 60 s)", s);
    ZT_CHECK(strstr(g_out, "zshard run: rank 1 (pid ") && strstr(g_out, "killed by signal 9"),
             "the launcher must name rank 1 and SIGKILL:\n%s", g_out);
    /* Survivors: NCCL reports the dead peer as a remote error, named with the collective. */
    for (int r = 0; r < 3; r += 2) {
        char want[64];
        snprintf(want, sizeof want, "rank %d: FAILED ZS_ERR_COMM", r);
        ZT_CHECK(strstr(g_out, want) || strstr(g_out, "rank 1 (pid"),
                 "rank %d did not fail with the communication error:\n%s", r, g_out);
    }
    ZT_CHECK(strstr(g_out, "all_reduce #") && strstr(g_out, "tag 'unit."),
             "no message names the collective and its tag:\n%s", g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm");
}

int main(void) {
    zt_init("comm_nccl");
    zt_gpu_require();
    ct_job_scope();
    const char *q = getenv("ZS_TEST_QUICK");
    if (q && !strcmp(q, "staged")) { /* the broken builds' check: shm staging, slow streams */
        run_world(2, "ZS_EMU_DEVICES=1 ZS_SHM_CHUNK=8K ZS_EMU_DELAY_US=300",
                  "collectives --comm shm --device cuda");
        return zt_finish();
    }
    if (q && *q) { /* the broken builds' check (and gpu-check --quick): 2 ranks over nccl, or
                    * 1 on a real machine of one GPU (NCCL refuses two ranks on one GPU) */
        int n = zt_gpus_for(2, "2 nccl ranks") ? 2 : 1;
        run_world(n, n == 2 ? "ZS_EMU_DEVICES=2" : "ZS_EMU_DEVICES=1",
                  "collectives --comm nccl --device cuda");
        return zt_finish();
    }
    /* A real machine runs as many NCCL ranks as it has GPUs (NCCL refuses two on one GPU). */
    for (int n = 1; n <= 3 && zt_gpus_for(n, "nccl collectives"); n++) {
        char env[64];
        snprintf(env, sizeof env, "ZS_EMU_DEVICES=%d", n);
        run_world(n, env, "collectives --comm nccl --device cuda");
        run_world(n, env, "collectives --comm nccl --device cuda --async");
    }
    for (int n = 1; n <= 3; n++)
        run_world(n, "ZS_EMU_DEVICES=1 ZS_SHM_CHUNK=8K", "collectives --comm shm --device cuda");
    run_world(3, "ZS_EMU_DEVICES=1 ZS_COMM_DELAY_MS=1",
              "collectives --comm shm --device cuda --async");
    /* groups (zs_comm_split): an HSDP mesh of 2 x 2 on nccl (each group's unique id through
     * the split's store), and on shm through staging where ranks share a GPU */
    if (zt_gpus_for(4, "nccl groups of 2 among 4 ranks")) {
        run_world(4, "ZS_EMU_DEVICES=4", "split --group 2 --comm nccl --device cuda");
        ZT_CHECK(ct_count(g_out, "shard group nccl (a group of an nccl communicator), replica "
                                 "group nccl") == 4,
                 "the groups did not run on nccl:\n%s", g_out);
    }
    run_world(4, "ZS_EMU_DEVICES=1 ZS_SHM_CHUNK=8K", "split --group 2 --comm shm --device cuda");
    killed_rank();
    return zt_finish();
}

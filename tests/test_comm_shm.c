/* shm collectives across 1..4 ranks started by `zshard run`: every collective, both dtypes,
 * even/uneven/tiny/zero counts, in place and out of place, sync and async, exact results;
 * all_reduce == reduce_scatter + all_gather bit for bit; small pipeline chunks so large
 * messages take many windows; an injected delay before each collective to flush out
 * missing waits. The same on registered buffers (direct path, bitwise equal to the staged
 * one) and on buffers registered by some ranks only; and through host staging in small
 * pieces (comm/staged.h, the path of ranks sharing a GPU). Groups (zs_comm_split): an HSDP
 * mesh's shard and replica groups at 4 and 6 ranks, each group's sums in its own rank order
 * bit for bit, on host and staged buffers, and a killed rank named through its groups. No
 * segment may be left in /dev/shm. */
#include "core/timer.h"

#include "commtest.h"

static char g_out[1 << 20];

static void run_world(int n, const char *env, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s ZS_COMM_TIMEOUT=60 %s run -n %d -- %s %s%s", env, zt_zshard_exe(),
             n, ct_worker(), strncmp(args, "split", 5) ? "collectives " : "", args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "%s -> exit %d:\n%s", cmd, rc, g_out);
    ZT_CHECK(ct_count(g_out, " 0 failed") == n, "expected %d passing ranks:\n%s", n, g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "shared-memory segment left in /dev/shm after %s", cmd);
}

int main(void) {
    zt_init("comm_shm");
    ct_job_scope();
    for (int n = 1; n <= 4; n++)
        run_world(n, "ZS_SHM_CHUNK=8K", "");
    /* default chunking, a different world shape */
    run_world(3, "", "");
    /* async only, with a 1 ms sleep before every collective on the comm thread */
    run_world(4, "ZS_SHM_CHUNK=16K ZS_COMM_DELAY_MS=1", "--async");
    /* check mode on correct programs must stay silent */
    run_world(2, "ZS_COMM_CHECK=1", "");
    /* registered buffers (zs_comm_mem_alloc): the direct path, bitwise equal to the staged
     * one; then registered on even ranks only, which must take the staged path everywhere */
    for (int n = 1; n <= 4; n++)
        run_world(n, "ZS_SHM_CHUNK=8K", "--registered");
    run_world(4, "ZS_SHM_CHUNK=16K ZS_COMM_DELAY_MS=1", "--registered --async");
    run_world(3, "ZS_SHM_CHUNK=8K", "--mixed");
    run_world(2, "ZS_COMM_CHECK=1", "--registered");
    /* device buffers through host staging (comm/staged.h) in 1000-byte pieces, on the CPU's
     * device table: every collective, exact, as the direct calls (the GPU's: comm_nccl) */
    for (int n = 1; n <= 3; n++)
        run_world(n, "ZS_SHM_CHUNK=8K", "--device cpu --staged");
    run_world(3, "ZS_SHM_CHUNK=8K ZS_COMM_DELAY_MS=1", "--device cpu --staged --async");
    /* groups: 2 x 2, 2 x 3 and 3 x 2 meshes, a world of one, staged device buffers */
    run_world(4, "ZS_SHM_CHUNK=8K", "split --group 2");
    run_world(6, "", "split --group 3");
    run_world(6, "ZS_COMM_DELAY_MS=1", "split --group 2");
    run_world(1, "", "split --group 1");
    run_world(4, "ZS_SHM_CHUNK=8K", "split --group 2 --device cpu --staged");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "ZS_COMM_TIMEOUT=60 %s run -n 4 --drain 10 -- %s split-die --group 2 --victim 2",
             zt_zshard_exe(), ct_worker());
    double t = zs_now_s();
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0, "a job whose rank 2 was killed exited 0:\n%s", g_out);
    ZT_CHECK(zs_now_s() - t < 30.0, "%.1f s to notice a dead rank (timeout 60 s)", zs_now_s() - t);
    ct_split_die_check(g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "shared-memory segment left in /dev/shm after %s", cmd);
    return zt_finish();
}

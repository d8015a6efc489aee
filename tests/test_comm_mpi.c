/* The mpi backend (when built) against the same exact expectations as shm, for 1..4 ranks
 * started by mpirun, also on zs_comm_mem_alloc buffers (plain memory under mpi); and shm
 * under mpirun. Skips (77) when this build has no MPI or mpirun is missing. */
#include "commtest.h"

static char g_out[1 << 20];

#ifdef ZS_HAVE_MPI
static void run_mpi(int n, const char *args) {
    char cmd[8192];
    /* root in containers; more ranks than cores on CI */
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZS_COMM_TIMEOUT=60 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 mpirun --oversubscribe -np %d %s "
             "collectives %s",
             n, ct_worker(), args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "%s -> exit %d:\n%s", cmd, rc, g_out);
    ZT_CHECK(ct_count(g_out, " 0 failed") == n, "expected %d passing ranks:\n%s", n, g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm after %s", cmd);
}
#endif

int main(void) {
    zt_init("comm_mpi");
    ct_job_scope();
#ifndef ZS_HAVE_MPI
    zt_skip("built without MPI");
#else
    if (zt_run("command -v mpirun", g_out, sizeof g_out) != 0) zt_skip("mpirun not found");
    for (int n = 1; n <= 4; n++)
        run_mpi(n, "--comm mpi");
    run_mpi(3, "--comm mpi --registered");
    /* shm under mpirun: ranks meet through the job key, with no variable set by hand; also
     * with registered buffers, whose objects are named after that segment */
    run_mpi(3, "--comm shm");
    run_mpi(3, "--comm shm --registered");
#endif
    return zt_finish();
}

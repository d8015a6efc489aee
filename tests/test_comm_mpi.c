/* The mpi backend (when built) against the same exact expectations as shm, for 1..4 ranks
 * started by mpirun, also on zs_comm_mem_alloc buffers (plain memory under mpi); and shm
 * under mpirun. Skips (77) when this build has no MPI or mpirun is missing. */
#include "commtest.h"

static char g_out[1 << 20];

#ifdef ZS_HAVE_MPI
static void run_mpi_mode(int n, const char *mode, const char *args, const char *expect) {
    char cmd[8192];
    /* root in containers; more ranks than cores on CI */
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZS_COMM_TIMEOUT=60 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 mpirun --oversubscribe -np %d %s %s %s",
             n, ct_worker(), mode, args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "%s -> exit %d:\n%s", cmd, rc, g_out);
    ZT_CHECK(ct_count(g_out, " 0 failed") == n, "expected %d passing ranks:\n%s", n, g_out);
    ZT_CHECK(!expect || ct_count(g_out, expect) == n, "expected '%s' from %d ranks:\n%s", expect, n,
             g_out);
    ZT_CHECK(ct_shm_leftovers() == 0, "segment left in /dev/shm after %s", cmd);
}

static void run_mpi(int n, const char *args) {
    run_mpi_mode(n, "collectives", args, NULL);
}

/* `zshard mem --comm mpi` predicted no comm memory, while the backend
 * stages each in-place reduce-scatter in two fp32 buffers of the unit (1.5 MiB for
 * gpt2-mini). The measured peak of the comm category must equal the estimate. */
static void mem_estimate(const char *stage, const char *dtype) {
    char dir[] = "/tmp/zshard-test-mpi-mem-XXXXXX", cmd[8192];
    ZT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(cmd, sizeof cmd,
             "for i in $(seq 1 2000); do printf 'the king of %%d. ' $i; done > %s/c.txt && "
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZS_COMM_TIMEOUT=60 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun --oversubscribe -np 2 "
             "%s/zshard train --data %s/c.txt --model gpt2-mini --comm mpi --stage %s --dtype %s "
             "--steps 2 --batch 2 --seq 32 --sample-len 0 --val-every 0 --quiet --mem-report; "
             "rm -rf %s",
             dir, getenv("ZS_BUILD_DIR"), dir, stage, dtype, dir);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    double r0 = -1, r1 = -1, est = -1;
    const char *row = strstr(g_out, "| comm | ");
    if (row) sscanf(row, "| comm | %lf | %lf | %lf |", &r0, &r1, &est);
    ZT_CHECK(rc == 0 && row && est > 0 && r0 == est && r1 == est,
             "stage %s %s: comm measured %.2f, %.2f MiB vs estimate %.2f MiB (exit %d):\n%s", stage,
             dtype, r0, r1, est, rc, g_out);
}
/* `mpirun -np 4 zshard bench comm --json`, the documented way to compare shm
 * with MPI, measures shm and mpi, names gloo as skipped with its reason (no MASTER_ADDR under
 * mpirun), and prints one valid JSON object with each key once. */
static void bench_comm_under_mpirun(void) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZS_COMM_TIMEOUT=60 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun --oversubscribe -np 4 "
             "env -u MASTER_ADDR -u MASTER_PORT -u WORLD_SIZE %s/zshard bench comm --json "
             "--max-size 16K --iters 3 > /tmp/zs-bench-comm-$$.json && python3 -c '"
             "import json, sys\n"
             "def once(pairs):\n"
             "    keys = [k for k, _ in pairs]\n"
             "    assert len(keys) == len(set(keys)), \"duplicate key in %%s\" %% keys\n"
             "    return dict(pairs)\n"
             "d = json.load(open(sys.argv[1]), object_pairs_hook=once)\n"
             "print(\"backends\", sorted({r[\"backend\"] for r in d[\"results\"]}))\n"
             "print(\"skipped\", [(s[\"backend\"], s[\"reason\"]) for s in d[\"skipped\"]])\n"
             "' /tmp/zs-bench-comm-$$.json; rc=$?; cat /tmp/zs-bench-comm-$$.json; "
             "rm -f /tmp/zs-bench-comm-$$.json; exit $rc",
             getenv("ZS_BUILD_DIR"));
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "backends ['mpi', 'shm'") &&
                 strstr(g_out, "('gloo', '4 ranks need MASTER_ADDR and MASTER_PORT"),
             "mpirun -np 4 zshard bench comm --json (exit %d): want shm and mpi rows, gloo "
             "skipped with its reason, valid JSON with each key once:\n%s",
             rc, g_out);
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
    /* groups (zs_comm_split): on mpi through MPI_Comm_split, and auto's shm groups of an mpi
     * communicator; each group's sums in its own rank order, bit for bit */
    run_mpi_mode(4, "split", "--group 2 --comm mpi --split-comm mpi",
                 "shard group mpi (--comm mpi), replica group mpi");
    run_mpi_mode(4, "split", "--group 2 --comm mpi", "shard group shm (all 2 ranks");
    run_mpi_mode(6, "split", "--group 3 --comm mpi --split-comm mpi",
                 "shard group mpi (--comm mpi), replica group mpi");
    bench_comm_under_mpirun();
    mem_estimate("3", "fp32");
    mem_estimate("1", "fp32");
    mem_estimate("ddp", "bf16");
#endif
    return zt_finish();
}

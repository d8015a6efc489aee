/* Comm layer in one process: a world of one needs no environment and its collectives are
 * exact copies; argument validation (NCCL's in-place rules, dtypes, roots, NULLs); async
 * handles; rendezvous parsing of torchrun/srun/mpirun variables; the TCP store (set, get,
 * add, barrier between threads, unreachable master). */
#include "comm/env.h"
#include "comm/store.h"
#include "core/timer.h"
#include "testutil.h"
#include "zshard.h"

#include <pthread.h>
#include <string.h>

static const char *g_vars[] = {"RANK",
                               "WORLD_SIZE",
                               "LOCAL_RANK",
                               "LOCAL_WORLD_SIZE",
                               "MASTER_ADDR",
                               "MASTER_PORT",
                               "SLURM_PROCID",
                               "SLURM_NTASKS",
                               "SLURM_LOCALID",
                               "SLURM_NNODES",
                               "SLURM_TASKS_PER_NODE",
                               "SLURM_STEP_TASKS_PER_NODE",
                               "SLURM_STEP_NUM_NODES",
                               "SLURM_NODEID",
                               "SLURM_NTASKS_PER_NODE",
                               "SLURM_JOB_NODELIST",
                               "SLURM_STEP_NODELIST",
                               "SLURM_JOB_ID",
                               "OMPI_COMM_WORLD_RANK",
                               "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK",
                               "OMPI_COMM_WORLD_LOCAL_SIZE",
                               "PMI_RANK",
                               "PMI_SIZE",
                               "ZS_COMM"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof g_vars / sizeof g_vars[0]; i++)
        unsetenv(g_vars[i]);
}

static void test_world_of_one(void) {
    zs_comm_t *c = NULL;
    ZT_OK(zs_comm_create(NULL, &c));
    ZT_CHECK(zs_comm_rank(c) == 0 && zs_comm_world_size(c) == 1, "world of one");
    ZT_CHECK(zs_comm_get_backend(c) == ZS_COMM_SHM, "auto picks shm");
    float a[8], b[16];
    for (int i = 0; i < 8; i++)
        a[i] = (float)i - 3.5f;
    zt_poison(b, 16);
    ZT_OK(zs_comm_all_reduce(c, a, b, 8, ZS_DTYPE_F32, ZS_REDUCE_AVG, NULL, "t"));
    ZT_CHECK(!memcmp(a, b, sizeof a), "all_reduce of one rank is a copy");
    zt_poison(b, 16);
    ZT_OK(zs_comm_all_gather(c, a, b, 8, ZS_DTYPE_F32, NULL, NULL));
    ZT_CHECK(!memcmp(a, b, sizeof a) && isnan(b[8]), "all_gather writes exactly count*N");
    ZT_OK(zs_comm_reduce_scatter(c, a, a, 8, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "inplace"));
    ZT_OK(zs_comm_broadcast(c, a, b, 4, ZS_DTYPE_BF16, 0, NULL, "bc"));
    ZT_OK(zs_comm_barrier(c, NULL, NULL));
    zs_comm_work_t *w = NULL;
    int done = 0;
    zt_poison(b, 16);
    ZT_OK(zs_comm_all_reduce_async(c, a, b, 8, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "async", &w));
    ZT_OK(zs_comm_work_test(w, &done));
    ZT_OK(zs_comm_work_wait(w));
    ZT_CHECK(!memcmp(a, b, sizeof a), "async all_reduce result");
    ZT_OK(zs_comm_all_reduce(c, a, b, 0, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "zero"));

    /* invalid arguments: rejected, and the communicator stays usable */
    ZT_CHECK(zs_comm_all_reduce(c, a, b, 8, ZS_DTYPE_I32, ZS_REDUCE_SUM, NULL, "x") ==
                 ZS_ERR_INVALID,
             "i32 is not a collective dtype");
    ZT_CHECK(zs_comm_all_reduce(c, a, a + 1, 4, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "x") ==
                     ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "overlap"),
             "partial overlap rejected: %s", zs_last_error());
    ZT_CHECK(zs_comm_all_gather(c, b + 1, b, 4, ZS_DTYPE_F32, NULL, "x") == ZS_ERR_INVALID,
             "all_gather in place must be send == recv + rank*count");
    ZT_CHECK(zs_comm_all_reduce(c, NULL, b, 4, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "x") ==
                 ZS_ERR_INVALID,
             "NULL send");
    ZT_CHECK(zs_comm_broadcast(c, a, b, 4, ZS_DTYPE_F32, 1, NULL, "x") == ZS_ERR_INVALID,
             "root outside the world");
    ZT_CHECK(zs_comm_all_reduce_async(c, a, b, 4, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "x", NULL) ==
                 ZS_ERR_INVALID,
             "async without a work pointer");
    ZT_OK(zs_comm_all_reduce(c, a, b, 8, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "still fine"));
    zs_comm_destroy(c);
    zs_comm_destroy(NULL);
}

static void test_config(void) {
    zs_comm_backend b;
    ZT_OK(zs_comm_backend_parse("mpi", &b));
    ZT_CHECK(b == ZS_COMM_MPI && !strcmp(zs_comm_backend_name(b), "mpi"), "parse mpi");
    ZT_CHECK(zs_comm_backend_parse("tcp", &b) == ZS_ERR_INVALID, "unknown backend");
    zs_comm_config cfg = zs_comm_config_default();
    ZT_CHECK(cfg.timeout_s == 300.0 && cfg.backend == ZS_COMM_AUTO, "defaults");
    setenv("ZS_COMM", "bogus", 1);
    zs_comm_t *c = NULL;
    ZT_CHECK(zs_comm_create(NULL, &c) == ZS_ERR_INVALID && !c, "bad ZS_COMM is an error");
    unsetenv("ZS_COMM");
    if (!zs_comm_backend_available(ZS_COMM_NCCL)) {
        cfg.backend = ZS_COMM_NCCL;
        ZT_CHECK(zs_comm_create(&cfg, &c) != ZS_OK && !c, "nccl without GPU must fail");
    }
}

static void test_env(void) {
    zs_comm_env e;
    clear_env();
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.rank == 0 && e.world_size == 1 && !strcmp(e.source, "none"), "no variables");

    setenv("RANK", "5", 1), setenv("WORLD_SIZE", "8", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1), setenv("MASTER_ADDR", "node0", 1);
    setenv("MASTER_PORT", "29500", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.rank == 5 && e.world_size == 8 && e.local_rank == 1 && e.local_world_size == 4 &&
                 !strcmp(e.master_addr, "node0") && e.master_port == 29500 &&
                 !strcmp(e.source, "torchrun"),
             "torchrun variables");
    setenv("RANK", "8", 1);
    ZT_CHECK(zs_comm_env_read(NULL, &e) == ZS_ERR_INVALID, "rank >= world rejected");
    setenv("RANK", "x1", 1);
    ZT_CHECK(zs_comm_env_read(NULL, &e) == ZS_ERR_INVALID && strstr(zs_last_error(), "RANK='x1'"),
             "garbage rank rejected: %s", zs_last_error());
    clear_env();

    setenv("SLURM_PROCID", "3", 1), setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "3", 1), setenv("SLURM_NNODES", "1", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.rank == 3 && e.world_size == 4 && e.local_world_size == 4 &&
                 !strcmp(e.source, "srun"),
             "srun variables");
    clear_env();

    /* srun over nodes: this node's count from the compressed list, the meeting point from
     * the node list and the job id (uneven: 3 tasks on node 0, 1 on node 1) */
    int n = 0;
    ZT_OK(zs_slurm_tasks_on_node("2(x3),1", 2, &n));
    ZT_CHECK(n == 2, "2(x3),1 node 2: %d", n);
    ZT_OK(zs_slurm_tasks_on_node("2(x3),1", 3, &n));
    ZT_CHECK(n == 1, "2(x3),1 node 3: %d", n);
    ZT_CHECK(zs_slurm_tasks_on_node("2(x3),1", 4, &n) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "SLURM_TASKS_PER_NODE='2(x3),1'"),
             "node past the list: %s", zs_last_error());
    ZT_CHECK(zs_slurm_tasks_on_node("2(x", 0, &n) == ZS_ERR_INVALID, "malformed list");
    char host[16];
    ZT_CHECK(!zs_slurm_first_host("gpu-a[007-010,012],gpu-b3", host, sizeof host) &&
                 !strcmp(host, "gpu-a007"),
             "first host of a range: %s", host);
    ZT_CHECK(!zs_slurm_first_host("rack[2-3]-n[4-5]", host, sizeof host) &&
                 !strcmp(host, "rack2-n4"),
             "two ranges: %s", host);
    ZT_CHECK(!zs_slurm_first_host("solo", host, sizeof host) && !strcmp(host, "solo"), "one");
    ZT_CHECK(zs_slurm_first_host("n[", host, sizeof host) == -1 &&
                 zs_slurm_first_host("averyveryverylongname", host, sizeof host) == -1,
             "malformed or too long");
    setenv("SLURM_PROCID", "3", 1), setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "0", 1), setenv("SLURM_NNODES", "2", 1);
    setenv("SLURM_NODEID", "1", 1), setenv("SLURM_TASKS_PER_NODE", "3,1", 1);
    setenv("SLURM_JOB_NODELIST", "n[0-1]", 1), setenv("SLURM_JOB_ID", "123456", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.local_world_size == 1 && !strcmp(e.master_addr, "n0") &&
                 e.master_port == 10000 + 123456 % 20000,
             "srun over two nodes: local %d, master %s:%d", e.local_world_size, e.master_addr,
             e.master_port);
    setenv("MASTER_ADDR", "head", 1), setenv("MASTER_PORT", "29500", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(!strcmp(e.master_addr, "head") && e.master_port == 29500, "the user's master wins");
    setenv("SLURM_NODEID", "1", 1), setenv("SLURM_NTASKS_PER_NODE", "2", 1);
    ZT_CHECK(zs_comm_env_read(NULL, &e) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "3 tasks on node 0 of the step") &&
                 strstr(zs_last_error(), "--ntasks-per-node=2"),
             "more tasks than --ntasks-per-node: %s", zs_last_error());
    clear_env();

    setenv("OMPI_COMM_WORLD_RANK", "2", 1), setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1), setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.rank == 2 && e.world_size == 6 && e.local_rank == 0 && e.local_world_size == 2 &&
                 !strcmp(e.source, "mpirun") && e.job_key[0],
             "mpirun variables");
    clear_env();

    setenv("PMI_RANK", "1", 1), setenv("PMI_SIZE", "2", 1);
    ZT_OK(zs_comm_env_read(NULL, &e));
    ZT_CHECK(e.rank == 1 && e.world_size == 2 && !strcmp(e.source, "mpirun"), "PMI variables");
    clear_env();
}

/* ---- store ---- */

typedef struct store_arg {
    int rank, port, ok;
} store_arg;

static void *store_rank(void *p) {
    store_arg *a = p;
    zs_store *s = NULL;
    char buf[64];
    size_t len = 0;
    int64_t v = 0;
    a->ok = 0;
    zs_store_id id = {"test-job", 1, a->rank, 3, NULL, 0};
    if (zs_store_create("127.0.0.1", a->port, a->rank == 0, &id, 10.0, &s) != ZS_OK) return NULL;
    if (a->rank == 0 && zs_store_set(s, "greeting", "hello", 6) != ZS_OK) goto out;
    if (zs_store_get(s, "greeting", buf, sizeof buf, &len) != ZS_OK || len != 6 ||
        strcmp(buf, "hello"))
        goto out;
    if (zs_store_add(s, "counter", 10, &v) != ZS_OK) goto out;
    if (zs_store_barrier(s, "b1", 3) != ZS_OK) goto out;
    if (zs_store_add(s, "counter", 0, &v) != ZS_OK || v != 30) goto out;
    if (zs_store_barrier(s, "b2", 3) != ZS_OK) goto out;
    a->ok = 1;
out:
    zs_store_destroy(s);
    return NULL;
}

static void test_store(void) {
    /* a port that nobody listens on: the connection attempt must give up in time */
    int port = 20000 + (int)(zs_now_ns() % 20000);
    zs_store *s = NULL;
    double t = zs_now_s();
    zs_store_id id = {"test-job", 1, 1, 2, NULL, 0};
    zs_status st = zs_store_create("127.0.0.1", port, 0, &id, 0.5, &s);
    ZT_CHECK(st == ZS_ERR_TIMEOUT && strstr(zs_last_error(), "cannot reach the rendezvous master"),
             "unreachable master: %s: %s", zs_status_string(st), zs_last_error());
    ZT_CHECK(zs_now_s() - t < 5, "gave up after %.1f s", zs_now_s() - t);

    pthread_t th[3];
    store_arg args[3];
    for (int r = 0; r < 3; r++) {
        args[r] = (store_arg){r, port, 0};
        pthread_create(&th[r], NULL, store_rank, &args[r]);
    }
    for (int r = 0; r < 3; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++)
        ZT_CHECK(args[r].ok, "store client %d failed", r);
}

int main(void) {
    zt_init("comm_local");
    clear_env();
    test_world_of_one();
    test_config();
    test_env();
    test_store();
    return zt_finish();
}

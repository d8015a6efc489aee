/* Threads per rank: each rank's OpenMP (and so OpenBLAS) threads are sized to its share of
 * the cores it may use (affinity mask, cgroup CPU quota, LOCAL_WORLD_SIZE) and wait passively,
 * unless the user set those variables. A rank that spins on every core while another process
 * holds them runs many times slower (docs/architecture.md "The CPU path"). */
#include "cli/cli.h"
#include "comm/env.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The argv of main, for the re-exec below (set once by main). */
static char **g_argv;

void zs_cli_set_argv(char **argv) {
    g_argv = argv;
}

/* cpu.max of one cgroup v2 directory ("max 100000" or "200000 100000"): the quota in cores,
 * or 0 when unlimited or unreadable. */
static double cgroup_quota(const char *dir) {
    char path[4200], buf[128];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double q = 0;
    if (fgets(buf, sizeof buf, f)) {
        char quota[64] = "";
        double period = 0;
        if (sscanf(buf, "%63s %lf", quota, &period) == 2 && strcmp(quota, "max") && period > 0)
            q = atof(quota) / period;
    }
    fclose(f);
    return q;
}

/* The smallest CPU quota on the path from this process's cgroup up to the root: a container
 * limited to 2 CPUs on a 64-core host sees all 64 in its affinity mask. */
static double cpu_quota(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096], dir[4096] = "";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            snprintf(dir, sizeof dir, "%s", line + 3);
            dir[strcspn(dir, "\n")] = '\0';
        }
    fclose(f);
    double best = 0;
    for (;;) {
        double q = cgroup_quota(!strcmp(dir, "/") ? "" : dir);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
    }
    double q = cgroup_quota("");
    if (q > 0 && (best == 0 || q < best)) best = q;
    return best;
}

int zs_cli_cores(void) {
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    double q = cpu_quota();
    /* A quota of 1.5 CPUs still lets two threads make progress; round up. */
    if (q > 0 && (int)ceil(q) < n) n = (int)ceil(q);
    return n;
}

int zs_cli_thread_share(int local_ranks) {
    int share = zs_cli_cores() / (local_ranks > 0 ? local_ranks : 1);
    return share < 1 ? 1 : share;
}

void zs_cli_warn_oversubscribed(const char *var, int threads, int local_ranks) {
    int cores = zs_cli_cores();
    /* One thread per rank is the least there is: more ranks than cores is the user's choice
     * of -n, not a thread setting to correct. */
    if ((long)threads * local_ranks <= cores || threads <= zs_cli_thread_share(local_ranks)) return;
    fprintf(stderr,
            "zshard warning: %s=%d with %d local rank%s asks for %d threads on %d core%s "
            "(affinity mask and cgroup quota): they will fight over the cores; unset %s to let "
            "zshard give each rank %d\n",
            var, threads, local_ranks, local_ranks == 1 ? "" : "s", threads * local_ranks, cores,
            cores == 1 ? "" : "s", var, zs_cli_thread_share(local_ranks));
}

/* libgomp reads OMP_NUM_THREADS and OMP_WAIT_POLICY once, when it is loaded, so setting them
 * from main is too late for this process: set what the user left unset and exec ourselves
 * again (same pid, same arguments). The second time everything is set and nothing happens. */
int zs_cli_threads_setup(void) {
    zs_comm_env env;
    int local = 1, local_rank = 0;
    if (zs_comm_env_read(NULL, &env) == ZS_OK) {
        local = env.local_world_size;
        local_rank = env.local_rank;
    }
    char share[16];
    snprintf(share, sizeof share, "%d", zs_cli_thread_share(local));
    int changed = 0;
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || !*omp) {
        setenv("OMP_NUM_THREADS", share, 1);
        changed = 1;
    } else if (local_rank == 0 && atoi(omp) > 0) {
        zs_cli_warn_oversubscribed("OMP_NUM_THREADS", atoi(omp), local);
    }
    const char *ob = getenv("OPENBLAS_NUM_THREADS");
    if (!ob || !*ob) {
        setenv("OPENBLAS_NUM_THREADS", getenv("OMP_NUM_THREADS"), 1);
        changed = 1;
    }
    const char *wp = getenv("OMP_WAIT_POLICY");
    if (!wp || !*wp) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        changed = 1;
    }
    if (!changed || !g_argv) return 0;
    fflush(NULL);
    execv("/proc/self/exe", g_argv);
    /* Not fatal: the run works, only with the runtime's default threads. */
    fprintf(stderr, "zshard warning: cannot re-execute to apply thread settings: %s\n",
            strerror(errno));
    return 0;
}

/* srun's variables, read beyond rank and world: this node's task count from the step's
 * compressed per-node list, and, for jobs that span nodes without MASTER_ADDR/MASTER_PORT, a
 * meeting point derived from the node list and the job id (docs/comm.md "Slurm"). */
#include "comm/env.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A getenv that treats empty as unset. */
static const char *env_or(const char *a, const char *b) {
    const char *v = getenv(a);
    if (v && *v) return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : NULL;
}

zs_status zs_slurm_tasks_on_node(const char *list, int node, int *out) {
    const char *p = list;
    int first = 0;
    *out = -1;
    while (p && *p) {
        char *end = NULL;
        long count = strtol(p, &end, 10), times = 1;
        if (end == p || count < 1 || count > 1 << 24) break;
        p = end;
        if (p[0] == '(' && p[1] == 'x') {
            times = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || times < 1 || times > 1 << 24) break;
            p = end + 1;
        }
        if (node < first + times) {
            *out = (int)count;
            return ZS_OK;
        }
        first += (int)times;
        if (*p == ',')
            p++;
        else if (*p)
            break;
    }
    return zs_error(ZS_ERR_INVALID,
                    "srun: SLURM_TASKS_PER_NODE='%s' does not give a task count for node %d "
                    "(SLURM_NODEID): expected a list like 2(x3),1",
                    list ? list : "", node);
}

int zs_slurm_first_host(const char *list, char *out, size_t cap) {
    size_t n = 0;
    const char *p = list;
    if (!p || !*p || !cap) return -1;
    while (*p && *p != ',') {
        if (*p == '[') {
            /* a range list: the first number of it, zero padding kept ("node[007-010]") */
            p++;
            if (*p < '0' || *p > '9') return -1;
            while (*p >= '0' && *p <= '9') {
                if (n + 1 >= cap) return -1;
                out[n++] = *p++;
            }
            while (*p && *p != ']')
                p++;
            if (*p != ']') return -1;
            p++;
            continue;
        }
        if (n + 1 >= cap) return -1;
        out[n++] = *p++;
    }
    out[n] = '\0';
    return n ? 0 : -1;
}

zs_status zs_slurm_env(zs_comm_env *e) {
    zs_status st = ZS_OK;
    const char *tpn = env_or("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE");
    const char *nn = env_or("SLURM_STEP_NUM_NODES", "SLURM_NNODES");
    const char *id = getenv("SLURM_NODEID");
    const char *per = getenv("SLURM_NTASKS_PER_NODE");
    int nnodes = nn ? atoi(nn) : 1, node = id ? atoi(id) : 0, here = e->world_size;
    if (nnodes > 1) {
        ZS_REQUIRE(tpn, ZS_ERR_INVALID,
                   "srun: the job spans %d nodes but SLURM_TASKS_PER_NODE is not set, so the "
                   "tasks on this node are unknown",
                   nnodes);
        ZS_CHECK(zs_slurm_tasks_on_node(tpn, node, &here));
    }
    /* Slurm itself only warns when srun asks for more tasks than --ntasks-per-node (it then
     * ignores it). Refused here, with the same words on every task. */
    for (int k = 0; per && *per && tpn && k < nnodes; k++) {
        int n = 0;
        ZS_CHECK(zs_slurm_tasks_on_node(tpn, k, &n));
        ZS_REQUIRE(n <= atoi(per), ZS_ERR_INVALID,
                   "srun: %d tasks on node %d of the step (SLURM_TASKS_PER_NODE=%s), more than "
                   "--ntasks-per-node=%s allows: give srun at most %s tasks per node",
                   n, k, tpn, per, per);
    }
    e->local_world_size = here;
    if (nnodes > 1 && e->world_size > 1 && !env_or("MASTER_ADDR", NULL)) {
        const char *list = env_or("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST");
        ZS_REQUIRE(list && !zs_slurm_first_host(list, e->master_addr, sizeof e->master_addr),
                   ZS_ERR_INVALID,
                   "srun: no MASTER_ADDR, and the node list SLURM_STEP_NODELIST='%s' names no "
                   "first node to meet at: set MASTER_ADDR",
                   list ? list : "");
    }
    if (nnodes > 1 && e->world_size > 1 && !env_or("MASTER_PORT", NULL)) {
        /* the same on every task of the job, different for jobs whose ids are close, and
         * below Linux's ephemeral ports (32768 and up) */
        const char *job = getenv("SLURM_JOB_ID");
        e->master_port = 10000 + (int)((job ? strtoul(job, NULL, 10) : 0) % 20000);
    }
fail:
    return st;
}

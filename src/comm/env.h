/* Rendezvous from the environment: who am I (rank, world, local rank), where is the master,
 * and a job key that names this job's shared state, read from the conventions of torchrun,
 * srun and mpirun (docs/architecture.md "Communication and rendezvous"). A process with none of
 * them is a world of one. */
#ifndef ZS_COMM_ENV_H
#define ZS_COMM_ENV_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zs_comm_env {
    int rank;
    int world_size;
    int local_rank;
    int local_world_size;
    int local_known;       /* 0: ranks started by hand with RANK/WORLD_SIZE and no
                              LOCAL_WORLD_SIZE, so which ranks share a host is not yet known */
    char master_addr[256]; /* "" when no master is known */
    int master_port;       /* 0 when none */
    char job_key[128];     /* unique per job on a host: names the shm segment without a store */
    const char *source;    /* "torchrun", "mpirun", "srun", "config" or "none" */
    char job_id[200];      /* the job's identity, presented to the rendezvous store */
    int job_named;         /* 1: job_id is a name (ZS_JOB_ID, srun's, torchrun's), 0: the address */
    uint8_t secret[256];   /* ZS_JOB_SECRET or ZS_JOB_SECRET_FILE's content; none: length 0 */
    size_t secret_len;
} zs_comm_env;

/* Fill *env from the environment, then apply the config's overrides. Validates ranges. */
zs_status zs_comm_env_read(const zs_comm_config *cfg, zs_comm_env *env);

/* srun (env_slurm.c), after rank and world are read: this node's task count from
 * SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID (refused above SLURM_NTASKS_PER_NODE) and, for a
 * job over several nodes without MASTER_ADDR/MASTER_PORT, the first node of the step's node
 * list and 10000 + SLURM_JOB_ID mod 20000. */
zs_status zs_slurm_env(zs_comm_env *env);
/* The task count of node NODE in a list like "2(x3),1"; ZS_ERR_INVALID naming it otherwise. */
zs_status zs_slurm_tasks_on_node(const char *list, int node, int *out);
/* The first host of a Slurm host list ("n[0-3],m1" -> "n0"); 0, or -1 when malformed. */
int zs_slurm_first_host(const char *list, char *out, size_t cap);

#endif

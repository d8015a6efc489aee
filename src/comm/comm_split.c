/* Splitting a communicator into groups (zs_comm_split, docs/comm.md "Groups"): every rank of
 * the parent states its color, key and host; the ranks of one color become a communicator of
 * their own, ranked by key then parent rank, on shm when the group shares one host and on the
 * parent's backend otherwise. The statements travel through a rendezvous store of the split's
 * own (rank 0 of the parent serves it on MASTER_PORT, each group's backend keys put under
 * "c<color>/"), or, in a job without a master port, through an all-gather on the parent. */
#include "comm/comm_internal.h"
#include "comm/store.h"
#include "core/log.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Colors and keys travel as exact floats in the all-gather form. */
#define SPLIT_MAX (1 << 24)

typedef struct split_member {
    int color, key, rank;
    uint64_t host;
} split_member;

static uint64_t host_hash(void) {
    char id[300];
    zs_comm_host_identity(id, sizeof id);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = id; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

/* Every rank's statement through the split's store: "split/<rank>" = color key host. */
static zs_status exchange_store(zs_store *s, const split_member *me, split_member *all, int n) {
    zs_status st = ZS_OK;
    char key[32], val[96];
    snprintf(key, sizeof key, "split/%d", me->rank);
    snprintf(val, sizeof val, "%d %d %llu", me->color, me->key, (unsigned long long)me->host);
    ZS_CHECK(zs_store_set(s, key, val, strlen(val) + 1));
    for (int r = 0; r < n; r++) {
        size_t len = 0;
        unsigned long long h = 0;
        snprintf(key, sizeof key, "split/%d", r);
        ZS_CHECK(zs_store_get(s, key, val, sizeof val - 1, &len));
        val[len < sizeof val ? len : sizeof val - 1] = '\0';
        all[r].rank = r;
        ZS_REQUIRE(sscanf(val, "%d %d %llu", &all[r].color, &all[r].key, &h) == 3, ZS_ERR_COMM,
                   "split: rank %d's statement '%.40s' is garbled", r, val);
        all[r].host = h;
    }
fail:
    return st;
}

/* The same through the parent: six exact floats a rank (the host in 16-bit pieces). */
static zs_status exchange_gather(zs_comm_t *c, const split_member *me, split_member *all, int n) {
    zs_status st = ZS_OK;
    float mine[6], *got = malloc(sizeof(float) * 6 * (size_t)n);
    ZS_REQUIRE(got, ZS_ERR_OOM, "split: out of memory");
    ZS_REQUIRE(!c->dev || c->dev->host_memory, ZS_ERR_UNSUPPORTED,
               "zs_comm_split on a communicator of device buffers needs a rendezvous store: "
               "start the job with MASTER_ADDR/MASTER_PORT (zshard run and torchrun set them)");
    mine[0] = (float)me->color;
    mine[1] = (float)me->key;
    for (int i = 0; i < 4; i++)
        mine[2 + i] = (float)((me->host >> (16 * i)) & 0xffff);
    ZS_CHECK(zs_comm_all_gather(c, mine, got, 6, ZS_DTYPE_F32, NULL, "split"));
    for (int r = 0; r < n; r++) {
        const float *g = got + 6 * r;
        all[r] = (split_member){(int)g[0], (int)g[1], r, 0};
        for (int i = 0; i < 4; i++)
            all[r].host |= (uint64_t)g[2 + i] << (16 * i);
    }
fail:
    free(got);
    return st;
}

static int by_key(const void *a, const void *b) {
    const split_member *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* The child's place: rank and world among its color, local rank and world among those of its
 * color on its host. */
static zs_status place(zs_comm_t *child, const split_member *all, int n, const split_member *me) {
    split_member *mine = malloc(sizeof *mine * (size_t)n);
    int m = 0;
    if (!mine) return zs_error(ZS_ERR_OOM, "zs_comm_split: out of memory");
    for (int r = 0; r < n; r++)
        if (all[r].color == me->color) mine[m++] = all[r];
    qsort(mine, (size_t)m, sizeof *mine, by_key);
    child->env.world_size = m;
    child->env.local_world_size = 0;
    child->env.local_rank = 0;
    for (int i = 0; i < m; i++) {
        if (mine[i].rank == me->rank) child->env.rank = i;
        if (mine[i].host != me->host) continue;
        if (mine[i].rank == me->rank) child->env.local_rank = child->env.local_world_size;
        child->env.local_world_size++;
    }
    child->env.local_known = 1;
    /* " of group C (its ranks 0, 1 are job ranks 4, 5)": a peer's number in a backend's
     * report is its group rank */
    char its[96] = "", job[96] = "";
    size_t ai = 0, aj = 0;
    for (int i = 0; i < m && ai < sizeof its - 16 && aj < sizeof job - 16; i++) {
        ai += (size_t)snprintf(its + ai, sizeof its - ai, "%s%d", i ? ", " : "", i);
        aj += (size_t)snprintf(job + aj, sizeof job - aj, "%s%d", i ? ", " : "", mine[i].rank);
    }
    snprintf(child->group, sizeof child->group, " of group %d (its ranks %s%s are job ranks %s%s)",
             me->color, its, ai < sizeof its - 16 ? "" : " ...", job,
             aj < sizeof job - 16 ? "" : " ...");
    free(mine);
    return ZS_OK;
}

/* AUTO's choice for a group: nccl stays nccl (GPU buffers), a group on one host takes shm,
 * any other keeps the parent's backend. */
static zs_comm_backend choose(const zs_comm_t *parent, const zs_comm_t *child, char *why,
                              size_t cap) {
    if (parent->backend == ZS_COMM_NCCL) {
        snprintf(why, cap, "a group of an nccl communicator");
        return ZS_COMM_NCCL;
    }
    if (child->env.local_world_size == child->env.world_size) {
        snprintf(why, cap, "all %d ranks of the group on this host", child->env.world_size);
        return ZS_COMM_SHM;
    }
    snprintf(why, cap, "a group across hosts, on the parent's backend");
    return parent->backend;
}

zs_status zs_comm_split(zs_comm_t *c, int color, int key, const zs_comm_config *cfg_in,
                        zs_comm_t **out) {
    zs_status st = ZS_OK;
    zs_comm_t *child = NULL;
    split_member me, *all = NULL;
    zs_store *store = NULL;
    void *handle = NULL;
    char why[200], prefix[32];
    ZS_REQUIRE(c && out, ZS_ERR_INVALID, "zs_comm_split: NULL communicator or out");
    *out = NULL;
    ZS_REQUIRE(color >= 0 && color < SPLIT_MAX && key >= 0 && key < SPLIT_MAX, ZS_ERR_INVALID,
               "zs_comm_split: color %d and key %d must lie in [0, %d)", color, key, SPLIT_MAX);
    ZS_CHECK(zs_comm_check_failed(c));
    zs_comm_config cfg = cfg_in ? *cfg_in : zs_comm_config_default();
    if (!cfg_in) {
        cfg.timeout_s = c->timeout_s;
        cfg.check = c->check;
        cfg.debug_delay_s = c->delay_s;
        cfg.chunk_bytes = c->chunk_bytes;
    }
    cfg.device = c->device; /* the process keeps its GPU */
    ZS_REQUIRE(cfg.timeout_s > 0, ZS_ERR_INVALID, "comm timeout %.3g s: must be positive",
               cfg.timeout_s);
    int n = c->env.world_size, nth = ++c->splits;
    me = (split_member){color, key, c->env.rank, host_hash()};
    all = calloc((size_t)n, sizeof *all);
    child = calloc(1, sizeof *child);
    ZS_REQUIRE(all && child, ZS_ERR_OOM, "zs_comm_split: out of memory");
    pthread_mutex_init(&child->err_lock, NULL);
    pthread_mutex_init(&child->ring_lock, NULL);
    child->env = c->env;
    if (n > 1 && c->env.master_port > 0) {
        /* The parent's identity: a rank that reaches the parent's or an earlier split's store
         * after its own goodbye is told to come back, until this split's server is up. */
        zs_store_id id = {c->env.job_id, c->env.job_named, c->env.rank, n,
                          c->env.secret, c->env.secret_len};
        ZS_CHECK(zs_store_create(c->env.master_addr, c->env.master_port, c->env.rank == 0, &id,
                                 cfg.timeout_s, &store));
        ZS_CHECK(exchange_store(store, &me, all, n));
    } else if (n > 1) {
        ZS_CHECK(exchange_gather(c, &me, all, n));
    } else {
        all[0] = me;
    }
    ZS_CHECK(place(child, all, n, &me));
    /* Names of the group's own: the shm segment without a store, the failure reports. */
    snprintf(child->env.job_key, sizeof child->env.job_key, "%.100ss%dc%d", c->env.job_key, nth,
             color);
    if (c->ops->split) ZS_CHECK(c->ops->split(c, color, key, &handle));
    if (cfg.backend == ZS_COMM_AUTO) {
        cfg.backend = choose(c, child, why, sizeof why);
        cfg.backend_why = why;
    }
    ZS_REQUIRE(cfg.backend != ZS_COMM_MPI || c->backend == ZS_COMM_MPI, ZS_ERR_INVALID,
               "zs_comm_split: a group on mpi is split from an mpi communicator, and this one "
               "runs on %s: create the job's communicator with --comm mpi, or let the group "
               "choose (auto)",
               zs_comm_backend_name(c->backend));
    ZS_REQUIRE((cfg.backend == ZS_COMM_NCCL) == (c->backend == ZS_COMM_NCCL), ZS_ERR_INVALID,
               "zs_comm_split: the groups of an nccl communicator run on nccl, and only theirs "
               "do (asked for %s in a communicator on %s)",
               zs_comm_backend_name(cfg.backend), zs_comm_backend_name(c->backend));
    cfg.gpu_buffers = c->backend == ZS_COMM_NCCL;
    if (cfg.backend == ZS_COMM_MPI) {
        child->split_handle = handle;
        handle = NULL;
    }
    if (store) {
        snprintf(prefix, sizeof prefix, "c%d/", color);
        ZS_CHECK(zs_store_set_prefix(store, prefix));
        child->store = store;
        child->store_shared = 1;
    }
    st = zs_comm_start(child, &cfg);
    if (store) {
        /* Every group must be up before rank 0's server goes: meet, then say goodbye. */
        if (st == ZS_OK) st = zs_store_set_prefix(store, "");
        if (st == ZS_OK) st = zs_store_barrier(store, "split/done", n);
        child->store = NULL;
        if (!child->store_pinned) zs_store_destroy(store);
        store = NULL;
    }
    ZS_CHECK(st);
    ZS_LOG_D("comm: split %d: color %d, rank %d of %d (parent rank %d), backend %s", nth, color,
             child->env.rank, child->env.world_size, c->env.rank, child->ops->name);
    *out = child;
    child = NULL;
fail:
    if (handle) c->ops->split_free(handle);
    if (child) {
        if (child->split_handle) c->ops->split_free(child->split_handle);
        zs_comm_abandon(child);
    }
    zs_store_destroy(store);
    free(all);
    return st;
}

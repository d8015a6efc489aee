/* The communicator: creation from the rendezvous (the backend chosen by comm_select.c),
 * destruction, the single execution path every collective takes (comm_coll.c submits them),
 * and sticky failure. */
#include "comm/comm_internal.h"
#include "comm/device.h"
#include "comm/staged.h"
#include "comm/store.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Ranks started by hand with torchrun's RANK/WORLD_SIZE meet through MASTER_ADDR/MASTER_PORT
 * (as torch's env:// does) or, on one host, through a shared ZS_JOB_ID. With neither, each
 * would wait out the timeout for peers it cannot find: say what is missing at once. */
static zs_status check_meeting_point(const zs_comm_env *env) {
    const char *job = getenv("ZS_JOB_ID");
    if (env->world_size <= 1 || env->master_port > 0 || (job && *job) ||
        strcmp(env->source, "torchrun"))
        return ZS_OK;
    return zs_error(ZS_ERR_INVALID,
                    "rank %d of %d (RANK/WORLD_SIZE from the environment) has no MASTER_PORT: "
                    "set MASTER_ADDR (rank 0's host, default 127.0.0.1) and MASTER_PORT (a free "
                    "port, the same on every rank), or on one host ZS_JOB_ID (any string shared "
                    "by the ranks of this job); `zshard run` sets them for you",
                    env->rank, env->world_size);
}

static zs_store_id store_id(const zs_comm_env *env) {
    return (zs_store_id){env->job_id, env->job_named, env->rank, env->world_size, env->secret,
                         env->secret_len};
}

zs_status zs_comm_store_open(zs_comm_t *c, zs_store **out, int *owned) {
    *owned = c->store == NULL;
    if (c->store) {
        *out = c->store;
        return ZS_OK;
    }
    zs_store_id id = store_id(&c->env);
    return zs_store_create(c->env.master_addr, c->env.master_port, c->env.rank == 0, &id,
                           c->timeout_s, out);
}

void zs_comm_store_close(zs_store *s, int owned) {
    if (owned) zs_store_destroy(s);
}

/* What makes two processes one host for the shm backend: the same kernel (boot id) and the same
 * mount and network namespaces (one /dev/shm; containers and network namespaces count as hosts
 * of their own). */
void zs_comm_host_identity(char *out, size_t cap) {
    char boot[64] = "", mnt[64] = "", net[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    ssize_t n = readlink("/proc/self/ns/mnt", mnt, sizeof mnt - 1);
    mnt[n > 0 ? n : 0] = '\0';
    n = readlink("/proc/self/ns/net", net, sizeof net - 1);
    net[n > 0 ? n : 0] = '\0';
    snprintf(out, cap, "%s %s %s", boot, mnt, net);
}

/* Ranks started by hand (RANK, WORLD_SIZE, MASTER_ADDR/PORT and no LOCAL_WORLD_SIZE, as the
 * one-rank-per-host launch of docs/comm.md "Across hosts" does): who shares this host is asked of
 * the store, so that auto picks shm only where it can work. The store stays open for the
 * backend's init. */
static zs_status discover_locality(zs_comm_t *c) {
    zs_status st = ZS_OK;
    char me[300], other[300], key[64];
    int local = 0, before = 0, theirs = 0, n = 0;
    snprintf(me, sizeof me, "%d ", c->env.world_size);
    zs_comm_host_identity(me + strlen(me), sizeof me - strlen(me));
    zs_store_id id = store_id(&c->env);
    ZS_CHECK(zs_store_create(c->env.master_addr, c->env.master_port, c->env.rank == 0, &id,
                             c->timeout_s, &c->store));
    snprintf(key, sizeof key, "local/%d", c->env.rank);
    ZS_CHECK(zs_store_set(c->store, key, me, strlen(me) + 1));
    for (int p = 0; p < c->env.world_size; p++) {
        size_t len = 0;
        snprintf(key, sizeof key, "local/%d", p);
        ZS_CHECK(zs_store_get(c->store, key, other, sizeof other - 1, &len));
        other[len < sizeof other ? len : sizeof other - 1] = '\0';
        ZS_REQUIRE(sscanf(other, "%d %n", &theirs, &n) == 1 && theirs == c->env.world_size,
                   ZS_ERR_INVALID,
                   "mismatched world sizes: rank %d has WORLD_SIZE=%d but rank %d has %d; start "
                   "every rank with the same WORLD_SIZE",
                   p, theirs, c->env.rank, c->env.world_size);
        if (strcmp(other, me)) continue;
        local++;
        if (p < c->env.rank) before++;
    }
    c->env.local_world_size = local;
    c->env.local_rank = before;
    c->env.local_known = 1;
fail:
    return st;
}

zs_status zs_comm_start(zs_comm_t *c, const zs_comm_config *cfg) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_comm_resolve_backend(cfg->backend, cfg->backend_why, cfg->gpu_buffers, &c->env,
                                     &c->backend, c->why, sizeof c->why));
    c->ops = c->backend == ZS_COMM_SHM    ? &zs_comm_shm_ops
             : c->backend == ZS_COMM_MPI  ? zs_comm_mpi_ops()
             : c->backend == ZS_COMM_GLOO ? zs_comm_gloo_ops()
                                          : zs_comm_nccl_ops();
    c->timeout_s = cfg->timeout_s;
    c->check = cfg->check;
    c->delay_s = cfg->debug_delay_s;
    c->chunk_bytes = cfg->chunk_bytes;
    c->device = cfg->device >= 0 ? cfg->device : c->env.local_rank;
    c->t0 = zs_now_s();
    ZS_CHECK(c->ops->init(c));
    if (!c->store_shared) {
        zs_store_destroy(c->store);
        c->store = NULL;
    }
    ZS_CHECK(zs_queue_create(c, &c->queue));
    ZS_LOG_D("comm: rank %d of %d (local %d of %d, from %s), backend %s", c->env.rank,
             c->env.world_size, c->env.local_rank, c->env.local_world_size, c->env.source,
             c->ops->name);
fail:
    return st;
}

void zs_comm_abandon(zs_comm_t *c) {
    if (!c) return;
    if (c->impl && c->ops) c->ops->fini(c);
    if (!c->store_pinned && !c->store_shared) zs_store_destroy(c->store);
    zs_queue_destroy(c->queue);
    pthread_mutex_destroy(&c->err_lock);
    pthread_mutex_destroy(&c->ring_lock);
    free(c);
}

zs_status zs_comm_create(const zs_comm_config *cfg_in, zs_comm_t **out) {
    zs_status st = ZS_OK;
    zs_comm_config cfg = cfg_in ? *cfg_in : zs_comm_config_default();
    zs_comm_t *c = NULL;
    ZS_REQUIRE(out, ZS_ERR_INVALID, "zs_comm_create: out is NULL");
    *out = NULL;
    ZS_REQUIRE(cfg.timeout_s > 0, ZS_ERR_INVALID, "comm timeout %.3g s: must be positive",
               cfg.timeout_s);
    c = calloc(1, sizeof *c);
    ZS_REQUIRE(c, ZS_ERR_OOM, "zs_comm_create: out of memory");
    pthread_mutex_init(&c->err_lock, NULL);
    pthread_mutex_init(&c->ring_lock, NULL);
    ZS_CHECK(zs_comm_env_read(&cfg, &c->env));
    if (c->env.world_size > 1) zs_log_set_rank(c->env.rank);
    ZS_CHECK(check_meeting_point(&c->env));
    if (c->env.world_size > 1 && !c->env.local_known && c->env.master_port > 0) {
        c->timeout_s = cfg.timeout_s;
        ZS_CHECK(discover_locality(c));
    }
    ZS_CHECK(zs_comm_start(c, &cfg));
    *out = c;
    return ZS_OK;
fail:
    zs_comm_abandon(c);
    return st;
}

void zs_comm_destroy(zs_comm_t *c) {
    if (!c) return;
    zs_queue_destroy(c->queue);  /* drains outstanding work first */
    if (c->ops) c->ops->fini(c); /* nccl: destroy (waits for work), ncclCommAbort if failed */
    if (c->cstream) c->dev->stream_sync(c->cstream);
    if (c->staging) {
        zs_comm_staging_free(c->staging);
        free(c->staging);
    }
    if (c->cstream) c->dev->stream_destroy(c->cstream);
    pthread_mutex_destroy(&c->err_lock);
    pthread_mutex_destroy(&c->ring_lock);
    free(c);
}

zs_status zs_comm_set_device(zs_comm_t *c, const zs_device *dev, int stage, size_t chunk_bytes) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(c && dev, ZS_ERR_INVALID, "zs_comm_set_device: NULL communicator or device");
    ZS_REQUIRE(!c->dev && c->next_seq == 0, ZS_ERR_INVALID,
               "zs_comm_set_device: the communicator already has a device or ran collectives");
    ZS_REQUIRE(c->backend != ZS_COMM_NCCL || !dev->host_memory, ZS_ERR_INVALID,
               "comm backend nccl moves GPU memory: it needs --device cuda, not %s", dev->name);
    ZS_CHECK(dev->stream_create(&c->cstream));
    c->dev = dev;
    if (stage && c->backend != ZS_COMM_NCCL) {
        c->staging = calloc(1, sizeof *c->staging);
        ZS_REQUIRE(c->staging, ZS_ERR_OOM, "comm staging: out of memory");
        ZS_CHECK(zs_comm_staging_init(c->staging, c, dev, c->cstream, chunk_bytes));
    }
    return ZS_OK;
fail:
    if (c && c->staging) {
        zs_comm_staging_free(c->staging);
        free(c->staging);
        c->staging = NULL;
    }
    if (c && c->cstream) dev->stream_destroy(c->cstream);
    if (c) {
        c->cstream = NULL;
        c->dev = NULL;
    }
    return st;
}

zs_status zs_comm_event_wait(zs_comm_t *c, zs_event_t *e) {
    zs_status st = ZS_OK;
    int done = 0;
    double deadline = zs_now_s() + c->timeout_s;
    for (unsigned i = 0;; i++) {
        ZS_CHECK(c->dev->event_query(e, &done));
        if (done) break;
        ZS_CHECK(zs_comm_check_failed(c));
        if (c->ops->health) ZS_CHECK(c->ops->health(c));
        if (zs_now_s() > deadline) {
            st = zs_error(ZS_ERR_TIMEOUT,
                          "rank %d: device work did not finish within %.1f s (waiting for a "
                          "collective of a dead or stuck peer?)",
                          c->env.rank, c->timeout_s);
            zs_comm_fail(c, st, zs_last_error());
            goto fail;
        }
        struct timespec ts = {0, i < 100 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
fail:
    return st;
}

const zs_device *zs_comm_device(const zs_comm_t *c) {
    return c ? c->dev : NULL;
}

int zs_comm_rank(const zs_comm_t *c) {
    return c ? c->env.rank : 0;
}
int zs_comm_world_size(const zs_comm_t *c) {
    return c ? c->env.world_size : 1;
}
int zs_comm_local_rank(const zs_comm_t *c) {
    return c ? c->env.local_rank : 0;
}
int zs_comm_local_world_size(const zs_comm_t *c) {
    return c ? c->env.local_world_size : 1;
}
zs_comm_backend zs_comm_get_backend(const zs_comm_t *c) {
    return c ? c->backend : ZS_COMM_AUTO;
}
const char *zs_comm_backend_reason(const zs_comm_t *c) {
    return c ? c->why : "";
}

/* ---- failure ---------------------------------------------------------------------------- */

void zs_comm_fail(zs_comm_t *c, zs_status st, const char *msg) {
    int first = 0;
    pthread_mutex_lock(&c->err_lock);
    if (c->failed == ZS_OK) {
        c->failed = st;
        snprintf(c->failed_msg, sizeof c->failed_msg, "%s", msg);
        first = 1;
    }
    pthread_mutex_unlock(&c->err_lock);
    if (!first) return;
    char where[700];
    if (zs_log_get_level() >= ZS_LOG_DEBUG) ZS_LOG_E("%s", msg); /* the ring follows it */
    zs_ring_dump(c, where, sizeof where);
    if (zs_log_get_level() < ZS_LOG_DEBUG) ZS_LOG_E("%s%s", msg, where);
    if (c->ops && c->ops->mark_failed) c->ops->mark_failed(c, msg);
}

zs_status zs_comm_check_failed(zs_comm_t *c) {
    zs_status st;
    pthread_mutex_lock(&c->err_lock);
    st = c->failed;
    if (st != ZS_OK) zs_error(st, "communicator failed earlier: %s", c->failed_msg);
    pthread_mutex_unlock(&c->err_lock);
    return st;
}

/* ---- execution -------------------------------------------------------------------------- */

zs_status zs_comm_execute(zs_comm_t *c, const zs_coll *op, char *msg, size_t msg_cap) {
    zs_status st = zs_comm_check_failed(c);
    if (st == ZS_OK) {
        if (c->delay_s > 0) {
            struct timespec ts = {(time_t)c->delay_s,
                                  (long)((c->delay_s - (double)(time_t)c->delay_s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        zs_ring_begin(c, op);
        if (c->check && c->env.world_size > 1) st = zs_comm_check_op(c, op);
        /* A staged collective copies from device buffers: first the caller's stream must have
         * produced them. */
        if (st == ZS_OK && op->ready) st = c->dev->event_sync(op->ready);
        if (st == ZS_OK)
            st = c->staging ? zs_comm_staged_run(c, c->staging, op) : c->ops->run(c, op);
        zs_ring_end(c, op, st);
        if (st != ZS_OK) {
            char full[1024];
            snprintf(full, sizeof full, "%s #%llu (tag '%s', %zu %s%s) on rank %d%s: %s",
                     zs_coll_name(op->kind), (unsigned long long)op->seq, op->tag, op->count,
                     op->kind == ZS_COLL_MEM_ALLOC ? "" : "x ",
                     op->kind == ZS_COLL_MEM_ALLOC ? "bytes" : zs_dtype_name(op->dt), c->env.rank,
                     c->group, zs_last_error());
            zs_comm_fail(c, st, full);
            zs_error(st, "%s", full);
        }
    }
    if (msg && msg_cap) snprintf(msg, msg_cap, "%s", st == ZS_OK ? "" : zs_last_error());
    return st;
}

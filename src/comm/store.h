/* A small TCP key-value store for rendezvous: rank 0 serves it on MASTER_ADDR:MASTER_PORT,
 * every rank (rank 0 included) is a client. Backends exchange what they need through it
 * (NCCL's unique id, the shm segment name). Every call is bounded by the store's timeout.
 * A connection is one of the job's ranks only after its hello names the job, its rank and,
 * with a secret, proves it knows the secret (store_wire.h; docs/comm.md). */
#ifndef ZS_COMM_STORE_H
#define ZS_COMM_STORE_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zs_store zs_store;

/* Who a rank says it is. job is the job's identity (env.c: ZS_JOB_ID, the launcher's id, or
 * MASTER_ADDR:PORT), job_named 1 when it is a name (not the address); the world size is part
 * of the identity. secret_len 0 means no shared secret. */
typedef struct zs_store_id {
    const char *job;
    int job_named;
    int rank, world;
    const uint8_t *secret;
    size_t secret_len;
} zs_store_id;

/* Rank 0 (is_server) listens on port and serves until every rank has said goodbye;
 * everyone then connects to addr:port and greets it, retrying until timeout_s. */
zs_status zs_store_create(const char *addr, int port, int is_server, const zs_store_id *id,
                          double timeout_s, zs_store **out);
/* Says goodbye; the server side then waits (5 s at most) for the other ranks' goodbyes. */
void zs_store_destroy(zs_store *s);

zs_status zs_store_set(zs_store *s, const char *key, const void *val, size_t len);
/* Blocks until key exists; copies at most cap bytes, sets *len to the value's length. */
zs_status zs_store_get(zs_store *s, const char *key, void *val, size_t cap, size_t *len);
/* Adds delta to an integer key (created as 0), returns the new value. */
zs_status zs_store_add(zs_store *s, const char *key, int64_t delta, int64_t *result);
/* Put prefix before every later key of this client (a split's group: "c3/"), so that the
 * groups of one store keep apart the keys their backends share ("shm/name", "nccl/id"). */
zs_status zs_store_set_prefix(zs_store *s, const char *prefix);
/* All `world` ranks meet; name must be fresh for each barrier. */
zs_status zs_store_barrier(zs_store *s, const char *name, int world);

/* ---- the server (store_server.c), started by zs_store_create on rank 0 ---------------- */
typedef struct zs_store_server zs_store_server;
zs_status zs_store_server_start(int port, const zs_store_id *id, double timeout_s,
                                zs_store_server **out);
/* Lets the ranks finish (5 s at most after the call), then stops and frees the server. */
void zs_store_server_stop(zs_store_server *srv);

#endif

/* A small TCP key-value store for rendezvous: rank 0 serves it on MASTER_ADDR:MASTER_PORT,
 * every rank (rank 0 included) is a client. Backends exchange what they need through it
 * (NCCL's unique id, the shm segment name). Every call is bounded by the store's timeout. */
#ifndef ZS_COMM_STORE_H
#define ZS_COMM_STORE_H

#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zs_store zs_store;

/* Rank 0 (is_server) listens on port and serves until all world-1 other clients have come
 * and gone; everyone then connects to addr:port, retrying until timeout_s. */
zs_status zs_store_create(const char *addr, int port, int is_server, int world, double timeout_s,
                          zs_store **out);
/* Server side waits (bounded by the timeout) for the other clients to disconnect. */
void zs_store_destroy(zs_store *s);

zs_status zs_store_set(zs_store *s, const char *key, const void *val, size_t len);
/* Blocks until key exists; copies at most cap bytes, sets *len to the value's length. */
zs_status zs_store_get(zs_store *s, const char *key, void *val, size_t cap, size_t *len);
/* Adds delta to an integer key (created as 0), returns the new value. */
zs_status zs_store_add(zs_store *s, const char *key, int64_t delta, int64_t *result);
/* All `world` ranks meet; name must be fresh for each barrier. */
zs_status zs_store_barrier(zs_store *s, const char *name, int world);

#endif

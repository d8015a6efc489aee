/* The shm backend's shared segment and its waiting primitives (shm.c), used by the
 * collective engine (shm_coll.c). One segment per job: a header, one control block per
 * rank, then two staging slots per rank (double buffering lets window k+1 fill while peers
 * still read window k). */
#ifndef ZS_COMM_SHM_H
#define ZS_COMM_SHM_H

#include "comm/comm_internal.h"

#include <stdatomic.h>
#include <stdint.h>

enum { SHM_STATE_EMPTY = 0, SHM_STATE_ATTACHED = 1, SHM_STATE_LEFT = 2, SHM_STATE_FAILED = 3 };

/* One per rank, on its own cache lines so a rank's progress writes do not slow the others. */
typedef struct shm_rank {
    _Alignas(64) _Atomic uint32_t progress; /* futex word: phases this rank completed (wraps) */
    _Atomic uint32_t waiters; /* peers sleeping on progress; the writer wakes them if > 0 */
    char pad0[56];
    _Atomic int32_t pid;
    _Atomic uint32_t state;
    char pad1[56];
} shm_rank;

typedef struct shm_header {
    uint32_t magic;
    _Atomic uint32_t ready; /* set by the creator once the header is valid */
    uint32_t world;
    uint32_t pad;
    uint64_t slot_bytes;
    uint64_t data_offset;
    uint64_t total_bytes;
    _Atomic int32_t creator_pid;
    _Atomic uint32_t attached;
    _Atomic uint32_t abort_flag; /* first failing rank sets it; every waiter checks it */
    _Atomic int32_t abort_rank;
    _Atomic int32_t abort_culprit;
    char abort_msg[460];
    shm_rank ranks[]; /* world entries */
} shm_header;

typedef struct shm_ctx {
    int rank, world;
    shm_header *hdr; /* NULL for a world of one */
    size_t map_bytes;
    char name[160];
    int unlinked;
    uint32_t progress; /* my own count, mirrors hdr->ranks[rank].progress */
    size_t slot_bytes;
    double timeout_s;
    int spin;    /* busy-poll iterations before sleeping */
    int culprit; /* peer named by the last failed wait, for abort() */
} shm_ctx;

/* Slot of rank p, parity b. */
static inline char *shm_slot(shm_ctx *s, int p, int b) {
    return (char *)s->hdr + s->hdr->data_offset + ((size_t)p * 2 + (size_t)b) * s->slot_bytes;
}

/* Publish one more completed phase of this rank and wake sleepers. */
void shm_signal(shm_ctx *s);
/* Wait until peer p's progress reaches target (wrap-aware), bounded by the timeout; on
 * failure records a message naming p (and sets s->culprit). */
zs_status shm_wait_peer(shm_ctx *s, int p, uint32_t target);
/* Wait for every peer except me. */
zs_status shm_wait_all(shm_ctx *s, uint32_t target);

/* shm_coll.c */
zs_status shm_run(zs_comm_t *c, const zs_coll *op);

#endif

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
    /* Registered buffers (shm_reg.c, shm_direct.c). Plain fields: written before a signal,
     * read by peers after waiting for it. mem_alloc phase 1 (reg_*) and phase 2 (map_*) use
     * separate fields, and a collective's buffer descriptor alternates between two entries,
     * so a rank that has moved on never overwrites what a slower peer has yet to read. */
    uint64_t reg_bytes; /* mem_alloc: size of this rank's new region (0: none) */
    int32_t reg_status; /* mem_alloc phase 1: ZS_OK or why this rank could not allocate */
    int32_t map_status; /* mem_alloc phase 2: ZS_OK or why it could not map a peer's */
    char reg_msg[240];  /* phase 1 failure's message */
    char map_msg[240];  /* phase 2 failure's message */
    struct shm_desc {
        uint32_t send_id, recv_id; /* allocation number of the region (0: not registered) */
        uint64_t send_off, recv_off;
    } desc[2];
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

/* One registered allocation (zs_comm_mem_alloc) as this process sees it: every rank's
 * region of the same allocation number, mapped here. */
typedef struct shm_region {
    uint32_t id;   /* allocation number, the same on every rank */
    size_t nbytes; /* this rank's accounted bytes */
    zs_mem_category cat;
    char **view;        /* [world] each rank's region mapped here (NULL when it is empty) */
    size_t *view_bytes; /* [world] mapped sizes */
} shm_region;

typedef struct shm_ctx {
    int rank, world;
    shm_header *hdr; /* NULL for a world of one */
    size_t map_bytes;
    char name[160];
    int unlinked;
    uint32_t progress; /* my own count, mirrors hdr->ranks[rank].progress */
    size_t slot_bytes;
    int staging_accounted; /* 2 * slot_bytes counted in ZS_MEM_COMM */
    double timeout_s;
    int spin;    /* busy-poll iterations before sleeping */
    int culprit; /* peer named by the last failed wait, for mark_failed */
    /* registered buffers: collectives publish their buffers once an allocation was made */
    shm_region *regs;
    int nregs, cap_regs;
    uint32_t reg_seq; /* allocations made on this communicator (the same on every rank) */
    uint32_t pub_n;   /* buffer descriptors published (selects desc[pub_n & 1]) */
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

/* shm_reg.c: registered buffers. */
/* The collective half of zs_comm_mem_alloc (op->ext is a zs_mem_request). A failure every
 * rank agrees on (cap, /dev/shm space) is returned in the request and leaves the
 * communicator usable; a dead or stuck peer is the returned status. */
zs_status shm_reg_alloc(shm_ctx *s, const zs_coll *op);
/* Unmap the allocation whose region here starts at ptr. 0 if ptr is not one of them. */
int shm_reg_free(shm_ctx *s, void *ptr);
void shm_reg_free_all(shm_ctx *s);
/* The allocation (or NULL) holding [p, p + nbytes) of this rank; *off its offset. */
const shm_region *shm_reg_find(const shm_ctx *s, const void *p, size_t nbytes, size_t *off);
const shm_region *shm_reg_by_id(const shm_ctx *s, uint32_t id);
/* "/zshard-...-r<rank>-m<id>": the name of rank's region of allocation id. */
void shm_reg_name(const shm_ctx *s, int rank, uint32_t id, char *buf, size_t cap);

/* shm_direct.c: collectives reading peers' registered buffers in place. Publishes this
 * rank's buffers and, when every rank's needed buffers are registered, runs the collective
 * directly (*done = 1); otherwise *done = 0 and the caller runs the staged path. Every rank
 * reaches the same decision. */
zs_status shm_direct(shm_ctx *s, const zs_coll *op, int *done);
/* Copy with streaming (non-temporal) stores where the CPU has them: the output of a large
 * collective goes to memory without first being read into the cache (half the traffic of a
 * plain memcpy) and without evicting what peers are about to read. For results of messages
 * of at least SHM_STREAM_MIN bytes, which the caller does not read back at once. */
#define SHM_STREAM_MIN (256u << 10)
void shm_copy_stream(void *dst, const void *src, size_t nbytes);

#endif

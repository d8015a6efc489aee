/* Internals shared by the comm layer: the communicator, the collective descriptor that
 * flows from the public API through the async queue to a backend, the backend vtable, and
 * the diagnostics ring. Nothing here leaks into include/zshard.h. */
#ifndef ZS_COMM_INTERNAL_H
#define ZS_COMM_INTERNAL_H

#include "backend/device.h"
#include "comm/env.h"
#include "zshard.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef enum zs_coll_kind {
    ZS_COLL_ALL_GATHER = 0,
    ZS_COLL_REDUCE_SCATTER,
    ZS_COLL_ALL_REDUCE,
    ZS_COLL_BROADCAST,
    ZS_COLL_BARRIER,
    ZS_COLL_CHECK,     /* internal: exchange of descriptors in check mode */
    ZS_COLL_MEM_ALLOC, /* internal: zs_comm_mem_alloc's collective half (ext: zs_mem_request) */
} zs_coll_kind;

#define ZS_COMM_TAG_LEN 48
#define ZS_COMM_RING 64

/* One collective as issued by the caller. */
typedef struct zs_coll {
    zs_coll_kind kind;
    const void *send;
    void *recv;
    size_t count; /* elements, per the API's definition for the kind */
    zs_dtype dt;
    zs_reduce_op op;
    int root;
    zs_stream_t *stream;
    uint64_t seq; /* 1-based sequence number on this communicator */
    char tag[ZS_COMM_TAG_LEN];
    void *ext;         /* internal kinds' arguments */
    zs_event_t *ready; /* staged device collectives: the caller's stream reached the op */
} zs_coll;

/* zs_comm_mem_alloc's request. A failure every rank agrees on (over the memory cap, no room
 * in /dev/shm) comes back in st/msg with the communicator still usable. */
typedef struct zs_mem_request {
    zs_mem_category cat;
    size_t nbytes;
    void *ptr; /* out */
    zs_status st;
    char msg[512];
} zs_mem_request;

/* A backend runs one collective to completion on the calling thread (CPU backends) or
 * enqueues it on the stream (nccl). Errors are recorded with zs_error and returned. */
typedef struct zs_comm_backend_ops {
    const char *name;
    zs_status (*init)(zs_comm_t *c);
    void (*fini)(zs_comm_t *c);
    zs_status (*run)(zs_comm_t *c, const zs_coll *op);
    /* Optional: after a failure, make peers notice quickly (mark the shared segment). */
    void (*mark_failed)(zs_comm_t *c, const char *why);
    /* Optional: wait until a collective enqueued on a stream has finished (nccl), and the
     * non-blocking question "has it?". */
    zs_status (*sync)(zs_comm_t *c, const zs_coll *op);
    zs_status (*query)(zs_comm_t *c, const zs_coll *op, int *done);
    /* Optional, registered buffers: the backend runs ZS_COLL_MEM_ALLOC, and mem_free
     * releases one of its allocations (1) or says ptr is not one (0). Without it
     * zs_comm_mem_alloc is zs_alloc. */
    int (*mem_free)(zs_comm_t *c, void *ptr);
    /* Optional: ZS_OK, or the failure the backend has seen (nccl: a peer lost), recorded. */
    zs_status (*health)(zs_comm_t *c);
    int needs_thread; /* CPU backends: async work runs on the comm thread */
    /* Optional: a split's backend-side half, run by every rank of the parent (mpi:
     * MPI_Comm_split), its result handed to the child's init as c->split_handle. */
    zs_status (*split)(zs_comm_t *parent, int color, int key, void **handle);
    void (*split_free)(void *handle); /* a handle no child took */
} zs_comm_backend_ops;

typedef struct zs_ring_entry {
    uint64_t seq;
    zs_coll_kind kind;
    size_t count;
    zs_dtype dt;
    char tag[ZS_COMM_TAG_LEN];
    double t_start, t_end; /* seconds since comm creation; t_end < 0 while running */
    zs_status st;
} zs_ring_entry;

typedef struct zs_comm_queue zs_comm_queue; /* queue.c */
struct zs_comm_staging;                     /* staged.h */

struct zs_comm {
    zs_comm_env env;
    zs_comm_backend backend;
    char why[256]; /* why this backend: the banner's reason (zs_comm_backend_reason) */
    const zs_comm_backend_ops *ops;
    void *impl; /* backend state */
    double timeout_s;
    int check;
    double delay_s;
    size_t chunk_bytes;
    int device;
    double t0;

    uint64_t next_seq; /* guarded by the queue lock once the queue exists */

    /* sticky failure: set once, read by every later call */
    pthread_mutex_t err_lock;
    zs_status failed;
    char failed_msg[1024];

    /* diagnostics ring, written by whichever thread runs the collective */
    pthread_mutex_t ring_lock;
    zs_ring_entry ring[ZS_COMM_RING];
    uint64_t ring_n;
    int ring_printed;

    zs_comm_queue *queue;

    /* The rendezvous store while the communicator is created, when comm.c opened it (the
     * locality check); backends take it through zs_comm_store_open. */
    struct zs_store *store;
    int store_pinned; /* a backend's abandoned thread still uses the store: never free it */
    int store_shared; /* a split's store, shared by the parent's ranks: the split frees it */

    /* Splits (comm_split.c): how many this communicator has made, and, in a child, the
     * backend's half of the split (mpi: the MPI_Comm). */
    int splits;
    void *split_handle;
    char group[240]; /* a child's " of group C (its ranks ... are job ranks ...)", put after
                        its rank in failure reports */

    /* Device buffers (comm/device.h): the device, its stream for this communicator's work, and
     * the host staging that host backends run through (NULL: buffers are host-readable). */
    const zs_device *dev;
    zs_stream_t *cstream;
    struct zs_comm_staging *staging;
};

/* Backends that exist in this build (NULL when not compiled in). */
extern const zs_comm_backend_ops zs_comm_shm_ops;
const zs_comm_backend_ops *zs_comm_mpi_ops(void);
const zs_comm_backend_ops *zs_comm_nccl_ops(void);
/* gloo.cc: NULL when this build has no libgloo. */
const zs_comm_backend_ops *zs_comm_gloo_ops(void);
int zs_comm_nccl_device_count(void);
/* MPI_Bcast of raw bytes over MPI_COMM_WORLD (initializing MPI if needed); bootstraps nccl
 * under mpirun. ZS_ERR_UNSUPPORTED without MPI. */
zs_status zs_comm_mpi_bcast_bytes(void *buf, size_t nbytes, int root);

const char *zs_coll_name(zs_coll_kind k);

/* The rendezvous store on MASTER_ADDR:MASTER_PORT for a backend's init: the communicator's
 * own when it has one open (*owned = 0), else a new one (*owned = 1). zs_comm_store_close
 * destroys it only when owned. */
zs_status zs_comm_store_open(zs_comm_t *c, struct zs_store **out, int *owned);
void zs_comm_store_close(struct zs_store *s, int owned);

/* The backend for want (AUTO: the one policy of comm_select.c, gpu when the buffers are GPU
 * memory) on this job's environment; why receives the banner's reason (want_why, when the
 * caller chose want itself). An unbuildable or impossible choice is an error naming it. */
zs_status zs_comm_resolve_backend(zs_comm_backend want, const char *want_why, int gpu,
                                  const zs_comm_env *env, zs_comm_backend *out, char *why,
                                  size_t cap);

/* The rest of creation once c->env is known (comm.c): the backend, its init, the queue. A
 * failed creation is undone by zs_comm_abandon (c freed). */
zs_status zs_comm_start(zs_comm_t *c, const zs_comm_config *cfg);
void zs_comm_abandon(zs_comm_t *c);
/* What makes two processes one host for shm: boot id, mount and network namespaces. */
void zs_comm_host_identity(char *out, size_t cap);

/* Run one collective now on this thread: delay, check mode, ring, backend, sticky error.
 * The single path used by the inline (sync) case and by the comm thread. */
zs_status zs_comm_execute(zs_comm_t *c, const zs_coll *op, char *msg, size_t msg_cap);
/* Record a failure (first one wins), log it with the ring dumped once, and have the backend mark
 * the job failed so that peers notice at once. */
void zs_comm_fail(zs_comm_t *c, zs_status st, const char *msg);
/* Returns the sticky failure (with its message re-recorded on this thread) or ZS_OK. */
zs_status zs_comm_check_failed(zs_comm_t *c);

/* diag.c */
void zs_ring_begin(zs_comm_t *c, const zs_coll *op);
void zs_ring_end(zs_comm_t *c, const zs_coll *op, zs_status st);
/* Once per communicator: write the ring to $ZS_COMM_RING_DIR (else $TMPDIR, else /tmp)
 * /zshard-ring-<job>-rank<R>.txt and put "; last N collectives of rank R written to PATH"
 * in where, or, with debug logging or when the file cannot be written, log it (where = ""). */
void zs_ring_dump(zs_comm_t *c, char *where, size_t cap);
/* Check mode: all-gather the descriptor of op through the backend and compare. */
zs_status zs_comm_check_op(zs_comm_t *c, const zs_coll *op);

/* queue.c: the per-rank async queue and its comm thread. */
zs_status zs_queue_create(zs_comm_t *c, zs_comm_queue **out);
void zs_queue_destroy(zs_comm_queue *q);
/* Enqueue a copy of *op (seq assigned here). If work is NULL, waits for it (sync form);
 * runs it inline when nothing is queued. */
zs_status zs_queue_submit(zs_comm_t *c, zs_coll *op, zs_comm_work_t **work);
/* Wait until every submitted work has run (the comm thread is then idle until the caller
 * submits again). */
void zs_queue_drain(zs_comm_queue *q);

/* reduction helpers shared by backends (reduce.c) */
/* Deterministic rank-order reduction of n inputs, the same result written to each of the nout
 * outputs (an output may alias an input; outputs must not overlap each other). stream:
 * non-temporal stores where the CPU has them, for large results not read back at once. */
void zs_reduce_f32(float *const *out, int nout, const float *const *in, int n, size_t count,
                   int avg, int world, int stream);
void zs_reduce_bf16(uint16_t *const *out, int nout, const uint16_t *const *in, int n, size_t count,
                    int avg, int world, int stream);

#endif

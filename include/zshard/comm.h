/* zshard public communication API: a communicator joins the ranks of one job (torchrun, srun,
 * mpirun or zshard run) over shm, gloo, MPI or NCCL, and runs NCCL's collectives on device or
 * host memory, blocking or asynchronous. Included by zshard.h; pure C11. */
#ifndef ZSHARD_COMM_H
#define ZSHARD_COMM_H

#ifndef ZSHARD_H
#error "include <zshard.h>, not <zshard/comm.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- communication (src/comm, docs/architecture.md "Communication and rendezvous") --------
 * A communicator joins the ranks of one job. Collectives follow NCCL's semantics exactly:
 * counts are ELEMENTS, not bytes; N is the world size;
 *   all_gather     send[count]   -> recv[count*N]   rank r's block lands at recv + r*count
 *   reduce_scatter send[count*N] -> recv[count]     recv = reduce over ranks of send block r
 *   all_reduce     send[count]   -> recv[count]
 *   broadcast      send[count] on root -> recv[count] on every rank (send ignored elsewhere)
 * In-place (as NCCL states it): all_reduce and broadcast with send == recv;
 * all_gather with send == recv + rank*count; reduce_scatter with recv == send + rank*count.
 * Any other overlap of send and recv is rejected with ZS_ERR_INVALID.
 * Dtypes: ZS_DTYPE_F32 and ZS_DTYPE_BF16 (bf16 sums accumulate in fp32 and round once).
 * ZS_REDUCE_AVG is the fp32 sum divided by N (then rounded to the dtype).
 * With the shm backend every element is reduced in rank order ((x0 + x1) + x2) + ..., so
 * results are deterministic and all_reduce == reduce_scatter + all_gather bit for bit.
 *
 * Streams: on CPU backends (shm, mpi) pass NULL; on nccl pass the CUDA stream the buffers
 * are ordered on (a cudaStream_t behind the opaque handle; NULL = the comm's own stream).
 * Tags: a short caller string (e.g. the unit name, may be NULL) shown in diagnostics.
 * Every wait carries the comm's timeout. A failure (dead or stuck peer, mismatched
 * collective) is sticky: the failing call and every later call on that communicator return
 * ZS_ERR_COMM or ZS_ERR_TIMEOUT, and zs_last_error() names the peer rank, the collective,
 * its sequence number and its tag. The ring of the last 64 collectives is logged once. */

typedef struct zs_comm zs_comm_t;
typedef struct zs_comm_work zs_comm_work_t;
typedef struct zs_stream zs_stream_t; /* opaque; NULL on CPU (also declared by backend) */

typedef enum zs_comm_backend {
    ZS_COMM_AUTO = 0, /* ZS_COMM env, else shm when all ranks share a host, else mpi under
                         mpirun/srun, else gloo (docs/comm.md) */
    ZS_COMM_SHM,      /* CPU ranks on one host, POSIX shared memory */
    ZS_COMM_MPI,      /* CPU ranks across hosts under mpirun/srun, when built with MPI */
    ZS_COMM_NCCL,     /* CUDA ranks, one GPU each, when built with NCCL */
    ZS_COMM_GLOO,     /* CPU ranks across hosts met through MASTER_ADDR/MASTER_PORT, over
                         libgloo's TCP transport, sums in rank order (bits equal to shm's) */
} zs_comm_backend;

typedef enum zs_reduce_op {
    ZS_REDUCE_SUM = 0,
    ZS_REDUCE_AVG,
} zs_reduce_op;

typedef struct zs_comm_config {
    zs_comm_backend backend; /* AUTO by default */
    double timeout_s;        /* deadline of every wait; default 300, env ZS_COMM_TIMEOUT */
    int check;               /* compare op/count/dtype across ranks first; env ZS_COMM_CHECK */
    double debug_delay_s;    /* sleep before each collective (debug); env ZS_COMM_DELAY_MS */
    size_t chunk_bytes;      /* shm pipeline chunk per rank; 0 = default (env ZS_SHM_CHUNK) */
    int device;              /* nccl: CUDA device; -1 = LOCAL_RANK */
    /* Rendezvous overrides; -1 / NULL / 0 = from the environment (torchrun, srun, mpirun). */
    int rank;
    int world_size;
    int local_rank;
    int local_world_size;
    const char *master_addr;
    int master_port;
    /* Why the caller set `backend` itself, for the banner ("auto: ..."); NULL: the user asked
     * for it ("--comm NAME"). */
    const char *backend_why;
    /* 1 when the buffers will be GPU memory (--device cuda): "auto" then picks nccl where
     * every local rank has a GPU of its own, else shm through pinned staging. */
    int gpu_buffers;
} zs_comm_config;

zs_comm_config zs_comm_config_default(void);
/* "auto", "shm", "mpi", "nccl", "gloo" <-> enum. */
zs_status zs_comm_backend_parse(const char *name, zs_comm_backend *out);
const char *zs_comm_backend_name(zs_comm_backend b);
/* 1 if this build (and, for nccl, this machine) can create backend b. */
int zs_comm_backend_available(zs_comm_backend b);

/* Join the job: read the rendezvous, meet the other ranks (TCP store on the master address
 * or the launcher's job key), set up the backend. Collective over all ranks; bounded by the
 * timeout. A world of one needs no environment at all. Sets the log rank. */
zs_status zs_comm_create(const zs_comm_config *cfg, zs_comm_t **out);
/* Waits for outstanding work, leaves the job and frees everything. NULL accepted. Not
 * collective, but peers that still wait on this rank then fail with "rank R exited". */
void zs_comm_destroy(zs_comm_t *c);

/* Split c into groups, as MPI_Comm_split and ncclCommSplit do: the ranks that pass the same
 * color form one communicator, ranked by key, then by their rank in c (colors and keys in
 * [0, 2^24)). HSDP's mesh is two splits (docs/comm.md "Groups"). cfg (NULL: c's settings)
 * chooses the group's backend, timeout and checks; its rendezvous fields are not read. Its
 * backend AUTO: nccl in an nccl communicator, shm when the whole group shares this host, else
 * c's own backend. A group's failure reports name its ranks and the job's ranks behind them.
 * Collective over c: every rank calls it, in the same order relative to c's collectives. The
 * group is an independent communicator (zs_comm_destroy, before or after c). */
zs_status zs_comm_split(zs_comm_t *c, int color, int key, const zs_comm_config *cfg,
                        zs_comm_t **out);

int zs_comm_rank(const zs_comm_t *c);
int zs_comm_world_size(const zs_comm_t *c);
int zs_comm_local_rank(const zs_comm_t *c);
int zs_comm_local_world_size(const zs_comm_t *c);
zs_comm_backend zs_comm_get_backend(const zs_comm_t *c);
/* Why this backend was chosen, for banners: "all 2 ranks on this host", "--comm gloo",
 * "4 ranks on several hosts (2 here), met at 10.0.0.1:29500". Owned by c; "" for NULL. */
const char *zs_comm_backend_reason(const zs_comm_t *c);

/* Blocking collectives: return when recv holds the result (CPU) or, for nccl, when the
 * collective is enqueued on the stream. Issue order is kept with earlier async work. */
zs_status zs_comm_all_gather(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                             zs_stream_t *stream, const char *tag);
zs_status zs_comm_reduce_scatter(zs_comm_t *c, const void *send, void *recv, size_t count,
                                 zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                 const char *tag);
zs_status zs_comm_all_reduce(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                             zs_reduce_op op, zs_stream_t *stream, const char *tag);
zs_status zs_comm_broadcast(zs_comm_t *c, const void *send, void *recv, size_t count, zs_dtype dt,
                            int root, zs_stream_t *stream, const char *tag);
zs_status zs_comm_barrier(zs_comm_t *c, zs_stream_t *stream, const char *tag);

/* Asynchronous forms: enqueue and return at once with *work set. On CPU the rank's comm
 * thread runs the queue in issue order; buffers must stay untouched until the work is
 * waited. Works complete in issue order. The tag string is copied. */
zs_status zs_comm_all_gather_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                   zs_dtype dt, zs_stream_t *stream, const char *tag,
                                   zs_comm_work_t **work);
zs_status zs_comm_reduce_scatter_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                       zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                       const char *tag, zs_comm_work_t **work);
zs_status zs_comm_all_reduce_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                   zs_dtype dt, zs_reduce_op op, zs_stream_t *stream,
                                   const char *tag, zs_comm_work_t **work);
zs_status zs_comm_broadcast_async(zs_comm_t *c, const void *send, void *recv, size_t count,
                                  zs_dtype dt, int root, zs_stream_t *stream, const char *tag,
                                  zs_comm_work_t **work);

/* Registered buffers (like NCCL's ncclMemAlloc + buffer registration). With the shm backend,
 * a collective whose buffers all come from zs_comm_mem_alloc on every rank reads the peers'
 * buffers in place instead of staging them through the shared segment: reduce_scatter,
 * all_gather and broadcast need every rank's send buffer registered (the root's for
 * broadcast), all_reduce every rank's send and recv. Otherwise (any rank's buffer is plain
 * memory) the collective takes the staged path; every rank takes the same path, and both give
 * the same bits. A pointer anywhere inside an allocation counts, if the whole buffer is in it.
 *
 * zs_comm_mem_alloc is COLLECTIVE: every rank calls it, in the same order relative to its
 * collectives (it is queued behind this rank's outstanding async work). Sizes may differ per
 * rank; 0 gives *ptr = NULL. The memory is zero-filled, page-aligned, resident (/dev/shm must
 * have room) and accounted in category cat under `what` exactly like zs_alloc, so the
 * --device-mem cap applies. If any rank cannot allocate (cap, /dev/shm full), every rank
 * returns that error (ZS_ERR_OOM, naming the rank) and the communicator stays usable; a dead
 * or stuck peer fails it like any collective. Nothing is left in /dev/shm: the objects are
 * unlinked as soon as every rank has mapped them. With mpi, nccl or a world of one this is
 * zs_alloc (no collective).
 *
 * zs_comm_mem_free waits for this rank's outstanding work, then unmaps; it does not wait for
 * peers. Every rank frees its buffer of an allocation at the same point of its sequence of
 * collectives (a rank that frees early makes a later collective on the peers' buffers of that
 * allocation fail with ZS_ERR_INVALID). NULL is accepted, and so is a zs_alloc pointer. Free
 * registered buffers before zs_comm_destroy, which unmaps any that are left. */
zs_status zs_comm_mem_alloc(zs_comm_t *c, zs_mem_category cat, size_t nbytes, const char *what,
                            void **ptr);
void zs_comm_mem_free(zs_comm_t *c, void *ptr);

/* Bytes per rank of the shm backend's staging area (its two pipeline slots in the shared
 * segment, sized by ZS_SHM_CHUNK, default 2 MiB each) for world_size ranks; 0 for a world of
 * one. The shm backend accounts exactly this in ZS_MEM_COMM while it is up, and the memory
 * estimator predicts it. MPI's and NCCL's internal buffers are theirs and not counted. */
size_t zs_comm_shm_staging_bytes(int world_size);
/* Bytes of receive windows the gloo backend allocates per rank (comm category) for world_size
 * ranks at its default chunk; 0 when this build has no gloo. */
size_t zs_comm_gloo_staging_bytes(int world_size);

/* Block until the work is done (bounded by the comm timeout), then release the handle.
 * Returns the collective's status. */
zs_status zs_comm_work_wait(zs_comm_work_t *work);
/* Non-blocking: *done = 1 when finished (then wait returns at once). Returns the failure
 * status if the work failed; the handle stays owned by the caller. */
zs_status zs_comm_work_test(zs_comm_work_t *work, int *done);

#ifdef __cplusplus
}
#endif

#endif /* ZSHARD_COMM_H */

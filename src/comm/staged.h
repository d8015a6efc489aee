/* Collectives on device buffers through host staging (DESIGN.md §7b): for ranks whose
 * buffers live on a device that the host backend (shm, mpi) cannot read, e.g. several ranks
 * sharing one GPU, where NCCL refuses to run. Each collective is cut into pieces of at most
 * chunk_bytes per rank; a piece goes device -> host staging on the caller's stream, the host
 * collective runs on it, and the result goes back host -> device. The reductions are
 * elementwise in rank order, so any piece size gives the bits of the unstaged collective.
 *
 * The staging buffers (two of world_size x chunk_bytes, pinned on CUDA) come from the device
 * table's host_alloc and count in ZS_MEM_COMM. Calls are blocking (the host waits for each
 * piece's copies); results are complete on the stream when they return. Not thread-safe: one
 * staging per communicator and thread. */
#ifndef ZS_COMM_STAGED_H
#define ZS_COMM_STAGED_H

#include "backend/device.h"
#include "zshard.h"

typedef struct zs_comm_staging {
    zs_comm_t *comm;
    const zs_device *dev;
    zs_stream_t *stream; /* the device stream the buffers are ordered on */
    size_t chunk_bytes;  /* per rank and piece */
    void *in, *out;      /* host staging, world_size x chunk_bytes each */
} zs_comm_staging;

/* Set up staging for comm on dev's stream; chunk_bytes 0 = 4 MiB. */
zs_status zs_comm_staging_init(zs_comm_staging *s, zs_comm_t *comm, const zs_device *dev,
                               zs_stream_t *stream, size_t chunk_bytes);
/* Release the staging buffers; a zeroed or failed-init staging is accepted. */
void zs_comm_staging_free(zs_comm_staging *s);
/* Bytes the staging buffers take (and account) for world_size ranks. */
uint64_t zs_comm_staging_bytes(int world_size, size_t chunk_bytes);

/* The collectives of include/zshard.h with the same contracts (counts, in-place rules, tags),
 * on device buffers. */
zs_status zs_comm_staged_all_reduce(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                    zs_dtype dt, zs_reduce_op op, const char *tag);
zs_status zs_comm_staged_reduce_scatter(zs_comm_staging *s, const void *send, void *recv,
                                        size_t count, zs_dtype dt, zs_reduce_op op,
                                        const char *tag);
zs_status zs_comm_staged_all_gather(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                    zs_dtype dt, const char *tag);
zs_status zs_comm_staged_broadcast(zs_comm_staging *s, const void *send, void *recv, size_t count,
                                   zs_dtype dt, int root, const char *tag);

#endif

/* Collectives on device buffers through host staging (docs/architecture.md "Devices"): how a host
 * backend (shm, mpi) serves ranks whose buffers live on a device it cannot read, e.g. ranks that
 * share one GPU, where NCCL refuses to run. A communicator given a device with staging
 * (zs_comm_set_device, comm/device.h) runs every collective this way, on its comm thread.
 *
 * Each collective is cut into pieces of at most chunk_bytes per rank; a piece goes device ->
 * pinned host staging on the communicator's device stream, the backend runs on it, and the
 * result goes back host -> device. The reductions are elementwise in rank order, so any piece
 * size gives the bits of the unstaged collective. The two staging buffers (world_size x
 * chunk_bytes each) come from the device table's host_alloc, in ZS_MEM_COMM of the host ledger.
 * A staged collective blocks its thread until its results are in device memory. */
#ifndef ZS_COMM_STAGED_H
#define ZS_COMM_STAGED_H

#include "backend/device.h"
#include "comm/comm_internal.h"

typedef struct zs_comm_staging {
    const zs_device *dev;
    zs_stream_t *stream; /* the device stream the copies are ordered on */
    size_t chunk_bytes;  /* per rank and piece */
    void *in, *out;      /* host staging, world_size x chunk_bytes each */
} zs_comm_staging;

/* Set up staging for c on dev's stream; chunk_bytes 0 = 4 MiB. */
zs_status zs_comm_staging_init(zs_comm_staging *s, zs_comm_t *c, const zs_device *dev,
                               zs_stream_t *stream, size_t chunk_bytes);
/* Release the staging buffers; a zeroed or failed-init staging is accepted. */
void zs_comm_staging_free(zs_comm_staging *s);
/* Bytes the staging buffers take (and account) for world_size ranks. */
uint64_t zs_comm_staging_bytes(int world_size, size_t chunk_bytes);

/* Run op, whose buffers are device memory, through the staging: the backend's run on each
 * piece's host copy. Called on the thread that executes c's collectives. */
zs_status zs_comm_staged_run(zs_comm_t *c, zs_comm_staging *s, const zs_coll *op);

#endif

/* Communicators whose buffers are device memory (docs/architecture.md "Devices"): after
 * zs_comm_set_device, every collective of the communicator takes buffers of that device and streams
 * of its table, and is ordered after the work queued so far on the caller's stream.
 *  - nccl: the collective runs on the communicator's own device stream, which first waits for
 *    the caller's stream through an event; its completion is another event, so compute and
 *    communication overlap and the host never waits unless it asks to.
 *  - shm, mpi (host backends): with staging, each collective runs on the comm thread through
 *    pinned host staging (comm/staged.h); without it (the CPU, whose device memory is host
 *    memory), exactly as on host buffers.
 * zs_comm_mem_alloc then returns device memory (registration is for host memory only). */
#ifndef ZS_COMM_DEVICE_H
#define ZS_COMM_DEVICE_H

#include "backend/device.h"
#include "zshard.h"

/* Attach dev to c, before any collective or zs_comm_mem_alloc. stage: run host backends
 * through staging (what a device whose memory is not host memory needs; the tests also force it
 * on the CPU), in pieces of chunk_bytes per rank (0 = 4 MiB). nccl needs a device that is not
 * host memory. */
zs_status zs_comm_set_device(zs_comm_t *c, const zs_device *dev, int stage, size_t chunk_bytes);

/* The device c's buffers live on (NULL: none attached, host buffers). */
const zs_device *zs_comm_device(const zs_comm_t *c);

/* Order stream s after work (and release work, as zs_comm_work_wait does): a device-side wait
 * for nccl (the host does not block), a host wait otherwise. Its failures surface at the next
 * host wait on the communicator (zs_comm_work_wait, a blocking collective). */
zs_status zs_comm_work_wait_stream(zs_comm_work_t *work, zs_stream_t *s);

/* Wait on the host for event e of c's device, bounded by c's timeout: fails at once when c
 * has failed or its backend reports a lost peer (nccl's async error), since work behind e may
 * be waiting for a collective that will never finish. */
zs_status zs_comm_event_wait(zs_comm_t *c, zs_event_t *e);

#endif

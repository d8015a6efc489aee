/* The device table (docs/architecture.md "Devices"): memory, copies, streams and events of the
 * device a rank computes on, beside the ops table (ops.h). The CPU implements it trivially (host
 * memory, synchronous copies, the NULL stream, no-op events), so code written against both tables
 * runs unchanged on either device and never asks which one it has.
 *
 * Conventions: "device memory" is what alloc returns; on the CPU it is host memory. Copies
 * and memset are ordered on their stream and may return before completion (stream_sync or an
 * event says when they are done); a host buffer taking part in an asynchronous copy must stay
 * valid and unchanged until then, and should come from host_alloc (pinned on CUDA, so the
 * copy is truly asynchronous). Every allocation is accounted in its category exactly as
 * zs_alloc accounts host memory, so --device-mem and the estimator hold on every device. */
#ifndef ZS_BACKEND_DEVICE_H
#define ZS_BACKEND_DEVICE_H

#include "backend/ops.h"
#include "zshard.h"

#include <stddef.h>

typedef struct zs_event zs_event_t; /* opaque; the CPU's events are NULL (always complete) */

typedef struct zs_device {
    const char *name; /* "cpu", "cuda" */
    /* 1 when device memory is host memory that host code and host collectives may touch (the
     * CPU); 0 for a GPU, whose buffers the comm layer stages (comm/staged.h) and whose bytes
     * count in the device ledger (core/alloc.h). A capability, not an identity: code branches
     * on what it may do with the memory, never on which device it has. */
    int host_memory;

    /* nbytes of device memory, zero-filled and ready on every stream, accounted in cat.
     * nbytes 0: *out = NULL, ZS_OK. On failure *out is NULL and the message names what. */
    zs_status (*alloc)(zs_mem_category cat, size_t nbytes, const char *what, void **out);
    /* Release an alloc buffer and its accounting; NULL is accepted. Waits for the device. */
    void (*free)(void *ptr);
    /* Host memory for staging (pinned on CUDA), zero-filled, accounted in cat. */
    zs_status (*host_alloc)(zs_mem_category cat, size_t nbytes, const char *what, void **out);
    void (*host_free)(void *ptr);

    /* nbytes from host to device, device to host, device to device; ordered on s. */
    zs_status (*copy_h2d)(zs_stream_t *s, void *dst, const void *src, size_t nbytes);
    zs_status (*copy_d2h)(zs_stream_t *s, void *dst, const void *src, size_t nbytes);
    zs_status (*copy_d2d)(zs_stream_t *s, void *dst, const void *src, size_t nbytes);
    /* nbytes of device memory set to 0, ordered on s. */
    zs_status (*memset0)(zs_stream_t *s, void *dst, size_t nbytes);

    /* A stream of its own (the CPU's is NULL), destroyed after its queued work. */
    zs_status (*stream_create)(zs_stream_t **out);
    void (*stream_destroy)(zs_stream_t *s);
    /* The host waits until everything queued on s has finished. */
    zs_status (*stream_sync)(zs_stream_t *s);

    /* Events order streams without a device-wide synchronisation: record marks the point s
     * has reached; stream_wait makes s wait for it (the host does not block); event_sync makes
     * the host wait for it. */
    zs_status (*event_create)(zs_event_t **out);
    void (*event_destroy)(zs_event_t *e);
    zs_status (*event_record)(zs_event_t *e, zs_stream_t *s);
    zs_status (*stream_wait)(zs_stream_t *s, zs_event_t *e);
    zs_status (*event_sync)(zs_event_t *e);
    /* *done = whether the work before the event's record has finished; never blocks. */
    zs_status (*event_query)(zs_event_t *e, int *done);
    /* Another thread of the rank about to use this table makes the rank's device its own (a
     * GPU is current per thread); NULL where there is nothing to do (the CPU). */
    zs_status (*bind_thread)(void);
    /* Host work a device profiler should see beside the device's (the offloaded optimizer
     * step): push before it and pop after, on the same thread. NVTX ranges on a GPU (Nsight
     * Systems shows them); the emulated GPU puts them on its timeline (docs/cuda.md, "The
     * timeline"). NULL where no profiler listens (the CPU). */
    void (*range_push)(const char *name);
    void (*range_pop)(void);
    /* A hand-off between host threads, for the same profiler: the thread that finished some
     * host work marks key, and a thread that waited for that work by its own means (a
     * condition variable) says so after the wait, so the profiler orders the two. NULL where
     * no profiler listens; no-ops on a real GPU. */
    void (*host_mark)(const void *key);
    void (*host_after)(const void *key);
} zs_device;

/* The CPU's table. Always available. */
const zs_device *zs_device_cpu(void);
/* The CUDA table (cuda/device_table.cu), for the calling thread's current GPU; NULL when the
 * build has no CUDA backend. */
const zs_device *zs_device_cuda(void);

/* The ops and device tables of a device by name ("cpu" or NULL, "cuda"), and the memory ledger
 * its allocations count in becomes the compute ledger (what --device-mem caps and reports show).
 * ZS_ERR_UNSUPPORTED when the build lacks it. The one place a device name becomes tables. */
zs_status zs_backend_select(const char *device, const zs_ops **ops, const zs_device **dev);

#endif

/* Memory, copies and memset of the emulated GPU's CUDA runtime: device and pinned allocations
 * (memory.cc), cudaMemcpy/cudaMemset and their asynchronous forms, queued on a stream
 * (runtime_streams.cc). Asynchronous copies involving pageable host memory behave as CUDA
 * documents (host-to-device returns once the source is staged, device-to-host returns once the
 * copy is done); copies with pinned memory are truly asynchronous. The emulator is stricter than
 * CUDA in one respect: a copy whose kind contradicts where its pointers live is refused. */
#include "emu_internal.h"
#include "h100.h"
#include "runtime_internal.h"

#include <string.h>
#include <unistd.h>

#include <memory>
#include <vector>

using namespace zs_emu;

/* ---- memory ------------------------------------------------------------------------------------
 */

extern "C" cudaError_t cudaMalloc(void **p, size_t n) {
    *p = nullptr;
    STICKY_CHECK();
    *p = dev_alloc(n);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

extern "C" cudaError_t cudaFree(void *p) {
    STICKY_CHECK();
    if (!p) return cudaSuccess;
    device_wait_host(); /* cudaFree synchronises the device */
    return dev_free(p) ? cudaSuccess : ret(cudaErrorInvalidValue);
}

extern "C" cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    *p = nullptr;
    STICKY_CHECK();
    if (!valid_stream(s)) return ret(cudaErrorInvalidResourceHandle);
    *p = dev_alloc(n);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

extern "C" cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    STICKY_CHECK();
    if (!valid_stream(s)) return ret(cudaErrorInvalidResourceHandle);
    if (!p) return cudaSuccess;
    if (classify(p) != MEM_DEVICE) return ret(cudaErrorInvalidValue);
    enqueue(stream_of(s), "cudaFreeAsync", [p] { dev_free(p); });
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = nullptr;
    STICKY_CHECK();
    *p = pinned_alloc(n);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

extern "C" cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    return cudaMallocHost(p, n);
}

extern "C" cudaError_t cudaFreeHost(void *p) {
    STICKY_CHECK();
    if (!p) return cudaSuccess;
    device_wait_host();
    return pinned_free(p) ? cudaSuccess : ret(cudaErrorInvalidValue);
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    size_t used;
    mem_info(&used, total);
    *free_b = *total - used;
    return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    MemKind k = classify(p);
    a->type = k == MEM_DEVICE   ? cudaMemoryTypeDevice
              : k == MEM_PINNED ? cudaMemoryTypeHost
                                : cudaMemoryTypeUnregistered;
    a->device = t_device;
    a->devicePointer = k != MEM_NONE ? (void *)p : nullptr;
    a->hostPointer = k == MEM_PINNED ? (void *)p : nullptr;
    return cudaSuccess;
}

static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                              "Default"};
/* Task names, for the stream checker's reports. */
static const char *copy_names[] = {"cudaMemcpyAsync (HostToHost)", "cudaMemcpyAsync (HostToDevice)",
                                   "cudaMemcpyAsync (DeviceToHost)",
                                   "cudaMemcpyAsync (DeviceToDevice)", "cudaMemcpyAsync"};

/* Where the copy's pointers live must agree with its kind (stricter than CUDA, which lets UVA
 * infer it), and a device range must lie inside one allocation (as CUDA checks). */
static cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind *kind) {
    MemKind kd = classify(dst), ks = classify(src);
    /* a device address outside every live allocation still counts as device memory */
    bool dd = kd == MEM_DEVICE || (kd == MEM_NONE && view(dst) != dst),
         sd = ks == MEM_DEVICE || (ks == MEM_NONE && view(src) != src);
    if (*kind == cudaMemcpyDefault)
        *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                   : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dd = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    bool want_sd = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    if (dd != want_dd || sd != want_sd) {
        report("cudaMemcpy%s: destination %p is %s memory and source %p is %s memory", names[*kind],
               dst, dd ? "device" : "host", src, sd ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    char why[200];
    if (!range_ok(dst, n, why, sizeof why) || !range_ok(src, n, why, sizeof why)) {
        report("cudaMemcpy%s of %zu bytes: %s", names[*kind], n, why);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                cudaStream_t s, bool sync) {
    STICKY_CHECK();
    if (!valid_stream(s)) return ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, &kind);
    if (e != cudaSuccess) return ret(e);
    Stream *st = stream_of(s);
    void *vd = view(dst);
    const void *vs = view(src);
    bool pageable_src = kind == cudaMemcpyHostToDevice && classify(src) != MEM_PINNED;
    bool pageable_dst = kind == cudaMemcpyDeviceToHost && classify(dst) != MEM_PINNED;
    if (kind == cudaMemcpyDeviceToDevice && (profiling() || predicting())) {
        zs_emu_record r;
        h100_memory_op(&r, "cudaMemcpyAsync device to device", 2.0 * (double)n);
        /* cost only: nothing is copied (the bytes are not needed, and would take memory) */
        bool run = !predicting();
        const char *what = copy_names[kind];
        enqueue(st, what, [vd, vs, n, r, run, what] {
            sc_access(vs, n, false, what);
            sc_access(vd, n, true, what);
            if (run) memmove(vd, vs, n);
            profile_record(r);
        });
    } else if (pageable_src) {
        /* Staged at the call, as CUDA does for pageable sources: the caller may reuse it. */
        std::shared_ptr<std::vector<char>> copy(
            new std::vector<char>((const char *)src, (const char *)src + n));
        const char *what = copy_names[kind];
        zs_emu_record r;
        h100_host_copy(&r, what, (double)n);
        enqueue(st, what, [vd, copy, what, r] {
            sc_access(vd, copy->size(), true, what);
            memcpy(vd, copy->data(), copy->size());
            profile_record(r);
        });
    } else {
        int wait_us = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost
                          ? settings().copy_delay_us
                          : 0;
        const char *what = copy_names[kind];
        /* priced over PCIe on the timeline (a host-to-host copy is the host's, not priced) */
        bool link = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost;
        zs_emu_record r;
        h100_host_copy(&r, what, (double)n);
        uint64_t seq = enqueue(st, what, [vd, vs, n, wait_us, what, r, link] {
            if (wait_us > 0) usleep((useconds_t)wait_us);
            sc_access(vs, n, false, what);
            sc_access(vd, n, true, what);
            memmove(vd, vs, n);
            if (link) profile_record(r);
        });
        /* the host's side of a copy with pinned memory, guarded until it synchronises */
        if (settings().check && kind == cudaMemcpyDeviceToHost && classify(dst) == MEM_PINNED)
            guard_host(st, seq, dst, n, true, what);
        if (settings().check && kind == cudaMemcpyHostToDevice && classify(src) == MEM_PINNED)
            guard_host(st, seq, src, n, false, what);
    }
    if (sync || pageable_dst || kind == cudaMemcpyHostToHost) stream_wait_host(st);
    STICKY_CHECK();
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                       cudaStream_t s) {
    return memcpy_async(dst, src, n, kind, s, false);
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return memcpy_async(dst, src, n, kind, nullptr, true);
}

static cudaError_t memset_async(void *p, int v, size_t n, cudaStream_t s, bool sync) {
    STICKY_CHECK();
    if (!valid_stream(s)) return ret(cudaErrorInvalidResourceHandle);
    if (n == 0) return cudaSuccess;
    char why[200];
    if (classify(p) != MEM_DEVICE || !range_ok(p, n, why, sizeof why)) {
        report("cudaMemset of %zu bytes at %p: not inside one device allocation", n, p);
        return ret(cudaErrorInvalidValue);
    }
    void *vp = view(p);
    Stream *st = stream_of(s);
    if (profiling() || predicting()) {
        zs_emu_record r;
        h100_memory_op(&r, "cudaMemsetAsync", (double)n);
        bool run = !predicting();
        enqueue(st, "cudaMemsetAsync", [vp, v, n, r, run] {
            sc_access(vp, n, true, "cudaMemsetAsync");
            if (run) memset(vp, v, n);
            profile_record(r);
        });
    } else {
        enqueue(st, "cudaMemsetAsync", [vp, v, n] {
            sc_access(vp, n, true, "cudaMemsetAsync");
            memset(vp, v, n);
        });
    }
    if (sync) stream_wait_host(st);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    return memset_async(p, v, n, s, false);
}

extern "C" cudaError_t cudaMemset(void *p, int v, size_t n) {
    /* Asynchronous with respect to the host for device memory, like CUDA's. */
    return memset_async(p, v, n, nullptr, false);
}

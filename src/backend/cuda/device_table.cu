/* The CUDA device table (backend/device.h): accounted device memory (device.cu), pinned host
 * staging buffers, asynchronous copies and memset on a stream, streams, and events created
 * without timing (cheaper to record and wait on). */
#include "backend/cuda/cuda_internal.h"

#ifdef ZS_CUDA_EMU
#include "emu_profile.h"
#else
#include <nvtx3/nvToolsExt.h>
#endif

extern "C" {
#include "backend/device.h"
}

/* The opaque event of device.h. */
struct zs_event {
    cudaEvent_t ev;
};

/* Pinned host buffers carry their size and category in a header one alignment unit long, so
 * host_free can release the accounting without a lookup table. */
#define PIN_HDR 64

typedef struct pin_hdr {
    size_t nbytes;
    zs_mem_category cat;
} pin_hdr;

static zs_status cu_host_alloc(zs_mem_category cat, size_t nbytes, const char *what, void **out) {
    zs_status st = ZS_OK;
    void *p = NULL;
    int accounted = 0;
    cudaError_t rc;
    *out = NULL;
    if (nbytes == 0) return ZS_OK;
    ZS_CHECK(zs_mem_account(cat, (int64_t)nbytes, what));
    accounted = 1;
    rc = cudaMallocHost(&p, nbytes + PIN_HDR);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        st = zs_error(ZS_ERR_OOM, "cudaMallocHost of %zu bytes for %s failed: %s", nbytes, what,
                      cudaGetErrorString(rc));
        goto fail;
    }
    memset(p, 0, nbytes + PIN_HDR);
    ((pin_hdr *)p)->nbytes = nbytes;
    ((pin_hdr *)p)->cat = cat;
    *out = (char *)p + PIN_HDR;
    return ZS_OK;
fail:
    if (accounted) zs_mem_account(cat, -(int64_t)nbytes, what);
    return st;
}

static void cu_host_free(void *ptr) {
    if (!ptr) return;
    pin_hdr *h = (pin_hdr *)((char *)ptr - PIN_HDR);
    zs_mem_account(h->cat, -(int64_t)h->nbytes, "pinned host buffer");
    cudaFreeHost(h);
}

static zs_status cu_copy(zs_stream_t *s, void *dst, const void *src, size_t nbytes,
                         cudaMemcpyKind kind) {
    zs_status st = ZS_OK;
    if (nbytes == 0) return ZS_OK;
    ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, zs_cu_stream(s)));
fail:
    return st;
}

static zs_status cu_h2d(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    return cu_copy(s, dst, src, nbytes, cudaMemcpyHostToDevice);
}

static zs_status cu_d2h(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    return cu_copy(s, dst, src, nbytes, cudaMemcpyDeviceToHost);
}

static zs_status cu_d2d(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    return cu_copy(s, dst, src, nbytes, cudaMemcpyDeviceToDevice);
}

static zs_status cu_memset0(zs_stream_t *s, void *dst, size_t nbytes) {
    zs_status st = ZS_OK;
    if (nbytes == 0) return ZS_OK;
    ZS_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, zs_cu_stream(s)));
fail:
    return st;
}

static zs_status cu_stream_sync(zs_stream_t *s) {
    zs_status st = ZS_OK;
    ZS_CUDA_CHECK(cudaStreamSynchronize(zs_cu_stream(s)));
fail:
    return st;
}

static zs_status cu_event_create(zs_event_t **out) {
    zs_status st = ZS_OK;
    zs_event_t *e = (zs_event_t *)calloc(1, sizeof *e);
    *out = NULL;
    ZS_REQUIRE(e, ZS_ERR_OOM, "cuda: out of host memory creating an event");
    ZS_CUDA_CHECK(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
    *out = e;
    return ZS_OK;
fail:
    free(e);
    return st;
}

static void cu_event_destroy(zs_event_t *e) {
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

static zs_status cu_event_record(zs_event_t *e, zs_stream_t *s) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(e, ZS_ERR_INVALID, "cuda: event_record on a NULL event");
    ZS_CUDA_CHECK(cudaEventRecord(e->ev, zs_cu_stream(s)));
fail:
    return st;
}

static zs_status cu_stream_wait(zs_stream_t *s, zs_event_t *e) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(e, ZS_ERR_INVALID, "cuda: stream_wait on a NULL event");
    ZS_CUDA_CHECK(cudaStreamWaitEvent(zs_cu_stream(s), e->ev, 0));
fail:
    return st;
}

static zs_status cu_event_sync(zs_event_t *e) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(e, ZS_ERR_INVALID, "cuda: event_sync on a NULL event");
    ZS_CUDA_CHECK(cudaEventSynchronize(e->ev));
fail:
    return st;
}

static zs_status cu_event_query(zs_event_t *e, int *done) {
    zs_status st = ZS_OK;
    cudaError_t rc;
    ZS_REQUIRE(e, ZS_ERR_INVALID, "cuda: event_query on a NULL event");
    rc = cudaEventQuery(e->ev);
    *done = rc == cudaSuccess;
    if (rc == cudaErrorNotReady) (void)cudaGetLastError();
    ZS_REQUIRE(rc == cudaSuccess || rc == cudaErrorNotReady, ZS_ERR_CUDA,
               "cudaEventQuery failed: %s", cudaGetErrorString(rc));
fail:
    return st;
}

/* NVTX ranges (header-only nvtx3: nothing to link, a no-op unless a tool is attached); the
 * emulated GPU's timeline takes them instead. */
static void cu_range_push(const char *name) {
#ifdef ZS_CUDA_EMU
    zs_emu_host_range_push(name);
#else
    nvtxRangePushA(name);
#endif
}

static void cu_range_pop(void) {
#ifdef ZS_CUDA_EMU
    zs_emu_host_range_pop();
#else
    nvtxRangePop();
#endif
}

static void cu_host_mark(const void *key) {
#ifdef ZS_CUDA_EMU
    zs_emu_host_mark(key);
#else
    (void)key; /* Nsight Systems sees the threads' waits itself */
#endif
}

static void cu_host_after(const void *key) {
#ifdef ZS_CUDA_EMU
    zs_emu_host_after(key);
#else
    (void)key;
#endif
}

static const zs_device g_cuda = {
    .name = "cuda",
    .host_memory = 0,
    .alloc = zs_cuda_alloc,
    .free = zs_cuda_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_h2d = cu_h2d,
    .copy_d2h = cu_d2h,
    .copy_d2d = cu_d2d,
    .memset0 = cu_memset0,
    .stream_create = zs_cuda_stream_create,
    .stream_destroy = zs_cuda_stream_destroy,
    .stream_sync = cu_stream_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait = cu_stream_wait,
    .event_sync = cu_event_sync,
    .event_query = cu_event_query,
    .bind_thread = zs_cuda_bind_thread,
    .range_push = cu_range_push,
    .range_pop = cu_range_pop,
    .host_mark = cu_host_mark,
    .host_after = cu_host_after,
};

extern "C" const zs_device *zs_device_cuda(void) {
    return &g_cuda;
}

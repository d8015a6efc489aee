/* The device table (backend/device.h), the same checks on every device: zero-filled,
 * accounted allocations (device and pinned host) that the --device-mem cap refuses past it;
 * a round trip host -> device -> device -> host across two streams ordered only by events,
 * bit for bit; memset; zero-byte requests.
 *
 * `test_device` checks the CPU's table (ctest `device`, label unit). `test_device cuda` checks
 * the CUDA table (ctest `device_cuda`, label gpu): it skips (77) without the CUDA backend or
 * a visible GPU, and ZS_TEST_CUDA_FAKE=1 runs it on the CPU's table as a harness check. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "core/alloc.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const zs_device *dev;

/* Bytes of category c in the compute ledger (the device's memory) and in the host ledger (pinned
 * staging); on the CPU the two are one. */
static uint64_t current(zs_mem_category c) {
    zs_mem_stats s;
    zs_mem_get_stats(&s);
    return s.current[c];
}

static uint64_t hcurrent(zs_mem_category c) {
    zs_mem_stats s;
    zs_mem_get_ledger_stats(ZS_LEDGER_HOST, &s);
    return s.current[c];
}

static void check_alloc(void) {
    size_t n = 3 << 20;
    uint64_t a0 = current(ZS_MEM_ACTIVATION), c0 = hcurrent(ZS_MEM_COMM);
    void *d = NULL, *h = NULL;
    ZT_OK(dev->alloc(ZS_MEM_ACTIVATION, n, "test device buffer", &d));
    ZT_OK(dev->host_alloc(ZS_MEM_COMM, n, "test staging buffer", &h));
    ZT_CHECK(d && h, "%s: buffers returned", dev->name);
    ZT_CHECK(current(ZS_MEM_ACTIVATION) == a0 + n && hcurrent(ZS_MEM_COMM) == c0 + n,
             "%s: allocations accounted (activation +%llu, comm +%llu, want %zu each)", dev->name,
             (unsigned long long)(current(ZS_MEM_ACTIVATION) - a0),
             (unsigned long long)(hcurrent(ZS_MEM_COMM) - c0), n);
    /* Zero-filled: read the device buffer back over a poisoned host buffer. */
    memset(h, 0xa5, n);
    ZT_OK(dev->copy_d2h(NULL, h, d, n));
    ZT_OK(dev->stream_sync(NULL));
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += ((unsigned char *)h)[i] != 0;
    ZT_CHECK(nz == 0, "%s: %zu non-zero bytes in a new device buffer", dev->name, nz);
    dev->free(d);
    dev->host_free(h);
    ZT_CHECK(current(ZS_MEM_ACTIVATION) == a0 && hcurrent(ZS_MEM_COMM) == c0,
             "%s: free releases the accounting", dev->name);
    void *z = (void *)1;
    ZT_OK(dev->alloc(ZS_MEM_WORKSPACE, 0, "empty", &z));
    ZT_CHECK(z == NULL, "%s: a zero-byte allocation is NULL", dev->name);
    dev->free(NULL);
    dev->host_free(NULL);
}

static void check_cap(void) {
    void *d = (void *)1;
    zs_mem_set_cap(current(ZS_MEM_ACTIVATION) + (1 << 20));
    zs_status st = dev->alloc(ZS_MEM_ACTIVATION, 8 << 20, "the too-big buffer", &d);
    ZT_CHECK(st == ZS_ERR_OOM && d == NULL && strstr(zs_last_error(), "the too-big buffer"),
             "%s: over the cap: %s, %s", dev->name, zs_status_string(st), zs_last_error());
    /* The cap is the device's: host staging is held to it only where it is the device's memory. */
    st = dev->host_alloc(ZS_MEM_COMM, 8 << 20, "the too-big staging", &d);
    if (dev->host_memory)
        ZT_CHECK(st == ZS_ERR_OOM && d == NULL, "%s: pinned over the cap: %s", dev->name,
                 zs_status_string(st));
    else
        ZT_CHECK(st == ZS_OK && d, "%s: host staging is not device memory: %s", dev->name,
                 zs_status_string(st));
    dev->host_free(d);
    zs_mem_set_cap(0);
}

/* h2d on stream a, then d2d on stream b after an event of a, then d2h on the default stream
 * after an event of b: only the events order them. */
static void check_streams(void) {
    size_t n = (1 << 20) + 13;
    zs_stream_t *a = NULL, *b = NULL;
    zs_event_t *ea = NULL, *eb = NULL;
    unsigned char *src = NULL, *dst = NULL, *d1 = NULL, *d2 = NULL;
    ZT_OK(dev->host_alloc(ZS_MEM_COMM, n, "src", (void **)&src));
    ZT_OK(dev->host_alloc(ZS_MEM_COMM, n, "dst", (void **)&dst));
    ZT_OK(dev->alloc(ZS_MEM_WORKSPACE, n, "d1", (void **)&d1));
    ZT_OK(dev->alloc(ZS_MEM_WORKSPACE, n, "d2", (void **)&d2));
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(zt_uniform(0, 256));
    memset(dst, 0x5a, n);
    ZT_OK(dev->stream_create(&a));
    ZT_OK(dev->stream_create(&b));
    ZT_OK(dev->event_create(&ea));
    ZT_OK(dev->event_create(&eb));
    ZT_OK(dev->copy_h2d(a, d1, src, n));
    ZT_OK(dev->event_record(ea, a));
    ZT_OK(dev->stream_wait(b, ea));
    ZT_OK(dev->copy_d2d(b, d2, d1, n));
    ZT_OK(dev->memset0(b, d1, n));
    ZT_OK(dev->event_record(eb, b));
    ZT_OK(dev->stream_wait(NULL, eb));
    ZT_OK(dev->copy_d2h(NULL, dst, d2, n));
    ZT_OK(dev->stream_sync(NULL));
    ZT_CHECK(memcmp(src, dst, n) == 0, "%s: round trip through two streams differs", dev->name);
    ZT_OK(dev->event_sync(eb));
    ZT_OK(dev->copy_d2h(a, dst, d1, n));
    ZT_OK(dev->stream_sync(a));
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += dst[i] != 0;
    ZT_CHECK(nz == 0, "%s: memset0 left %zu non-zero bytes", dev->name, nz);
    dev->event_destroy(ea);
    dev->event_destroy(eb);
    dev->stream_destroy(a);
    dev->stream_destroy(b);
    dev->free(d1);
    dev->free(d2);
    dev->host_free(src);
    dev->host_free(dst);
}

int main(int argc, char **argv) {
    int cuda = argc > 1 && !strcmp(argv[1], "cuda");
    zt_init(cuda ? "device_cuda" : "device");
    const char *f = getenv("ZS_TEST_CUDA_FAKE");
    if (!cuda || (f && *f && strcmp(f, "0"))) {
        dev = zs_device_cpu();
    } else {
        const zs_ops *ops = NULL;
        zt_gpu_require();
        ZT_OK(zs_backend_select("cuda", &ops, &dev));
        ZT_OK(zs_cuda_set_device(0));
    }
    check_alloc();
    check_cap();
    check_streams();
    return zt_finish();
}

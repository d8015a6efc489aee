/* The CPU's device table (device.h): host memory through the accounted allocator, copies as
 * memcpy (complete on return, so the NULL stream and NULL events need no bookkeeping). */
#include "backend/device.h"
#include "core/alloc.h"
#include "core/status.h"

#include <string.h>

static zs_status cpu_copy(zs_stream_t *s, void *dst, const void *src, size_t nbytes) {
    (void)s;
    if (nbytes) memmove(dst, src, nbytes);
    return ZS_OK;
}

static zs_status cpu_memset0(zs_stream_t *s, void *dst, size_t nbytes) {
    (void)s;
    if (nbytes) memset(dst, 0, nbytes);
    return ZS_OK;
}

static zs_status cpu_stream_create(zs_stream_t **out) {
    *out = NULL;
    return ZS_OK;
}

static void cpu_stream_destroy(zs_stream_t *s) {
    (void)s;
}

static zs_status cpu_stream_sync(zs_stream_t *s) {
    (void)s;
    return ZS_OK;
}

static zs_status cpu_event_create(zs_event_t **out) {
    *out = NULL;
    return ZS_OK;
}

static void cpu_event_destroy(zs_event_t *e) {
    (void)e;
}

static zs_status cpu_event_record(zs_event_t *e, zs_stream_t *s) {
    (void)e;
    (void)s;
    return ZS_OK;
}

static zs_status cpu_stream_wait(zs_stream_t *s, zs_event_t *e) {
    (void)s;
    (void)e;
    return ZS_OK;
}

static zs_status cpu_event_sync(zs_event_t *e) {
    (void)e;
    return ZS_OK;
}

static zs_status cpu_event_query(zs_event_t *e, int *done) {
    (void)e;
    *done = 1;
    return ZS_OK;
}

static const zs_device g_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = zs_alloc,
    .free = zs_free,
    .host_alloc = zs_alloc,
    .host_free = zs_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .memset0 = cpu_memset0,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
};

const zs_device *zs_device_cpu(void) {
    return &g_cpu;
}

/* Choosing a device's tables (zs_backend_select), and the entry points of the CUDA backend when
 * this build leaves it out (ZS_CUDA=OFF, or AUTO without a CUDA toolkit), so callers ask "is it
 * there?" (zs_ops_cuda() == NULL, zs_cuda_device_count() == 0) instead of sprinkling #ifdefs. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/alloc.h"
#include "core/status.h"

#include <stdio.h>
#include <string.h>

zs_status zs_backend_select(const char *device, const zs_ops **ops, const zs_device **dev) {
    *ops = NULL;
    *dev = NULL;
    if (!device || !strcmp(device, "cpu")) {
        *ops = zs_ops_cpu();
        *dev = zs_device_cpu();
    } else if (!strcmp(device, "cuda")) {
        *ops = zs_ops_cuda();
        *dev = zs_device_cuda();
        if (!*ops || !*dev)
            return zs_error(ZS_ERR_UNSUPPORTED,
                            "device cuda: this build has no CUDA backend (configure with "
                            "-DZS_CUDA=ON and a CUDA toolkit)");
    } else {
        return zs_error(ZS_ERR_INVALID, "device '%s' is not one of cpu, cuda", device);
    }
    zs_mem_set_compute_ledger((*dev)->host_memory ? ZS_LEDGER_HOST : ZS_LEDGER_DEVICE);
    return ZS_OK;
}

#ifndef ZS_HAVE_CUDA
static zs_status not_built(const char *what) {
    return zs_error(ZS_ERR_UNSUPPORTED,
                    "%s: this build has no CUDA backend (configure with "
                    "-DZS_CUDA=ON and a CUDA toolkit)",
                    what);
}

const zs_ops *zs_ops_cuda(void) {
    return NULL;
}
int zs_cuda_built(void) {
    return 0;
}
int zs_cuda_device_count(void) {
    return 0;
}
double zs_cuda_peak_flops(zs_gemm_math math, char *basis, size_t cap) {
    (void)math;
    if (cap) snprintf(basis, cap, "no CUDA backend in this build");
    return 0;
}
int zs_cuda_emulated(void) {
    return 0;
}
zs_status zs_cuda_predict_enable(void) {
    return not_built("zs_cuda_predict_enable");
}
zs_status zs_cuda_profile_start(void) {
    return not_built("zs_cuda_profile_start");
}
zs_status zs_cuda_profile_stop(double *seconds, char **table) {
    if (seconds) *seconds = 0;
    if (table) *table = NULL;
    return not_built("zs_cuda_profile_stop");
}
zs_status zs_cuda_profile_timeline(double *seconds) {
    *seconds = 0;
    return not_built("zs_cuda_profile_timeline");
}
char *zs_cuda_model_notes(void) {
    return NULL;
}
double zs_cuda_model_peak_flops(zs_gemm_math math, char *basis, size_t cap) {
    (void)math;
    if (cap) snprintf(basis, cap, "no CUDA backend in this build");
    return 0;
}
zs_status zs_cuda_set_device(int device) {
    (void)device;
    return not_built("zs_cuda_set_device");
}
zs_status zs_cuda_alloc(zs_mem_category cat, size_t nbytes, const char *what, void **out) {
    (void)cat;
    (void)nbytes;
    *out = NULL;
    return not_built(what ? what : "zs_cuda_alloc");
}
void zs_cuda_free(void *ptr) {
    (void)ptr;
}
zs_status zs_cuda_stream_create(zs_stream_t **out) {
    *out = NULL;
    return not_built("zs_cuda_stream_create");
}
void zs_cuda_stream_destroy(zs_stream_t *s) {
    (void)s;
}
void *zs_cuda_stream_handle(zs_stream_t *s) {
    (void)s;
    return NULL;
}
zs_status zs_cuda_memcpy_h2d(void *dst_dev, const void *src_host, size_t nbytes) {
    (void)dst_dev;
    (void)src_host;
    (void)nbytes;
    return not_built("zs_cuda_memcpy_h2d");
}
zs_status zs_cuda_memcpy_d2h(void *dst_host, const void *src_dev, size_t nbytes) {
    (void)dst_host;
    (void)src_dev;
    (void)nbytes;
    return not_built("zs_cuda_memcpy_d2h");
}
const zs_device *zs_device_cuda(void) {
    return NULL;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int zs_backend_backends_unused;
#endif

/* The CUDA runtime calls zshard makes, on the emulated GPU: the settings (environment) and
 * reports, errors (per-thread last error, sticky device errors) and devices. Memory, copies and
 * memset are in runtime_memory.cc; streams and events in runtime_streams.cc; kernel launches in
 * runtime_launch.cc. */
#include "emu_internal.h"
#include "runtime_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace zs_emu {

/* ---- settings, reports ------------------------------------------------------------------ */

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = nullptr;
    unsigned long long v = strtoull(e, &end, 0);
    if (end && (*end == 'G' || *end == 'g')) v <<= 30;
    if (end && (*end == 'M' || *end == 'm')) v <<= 20;
    return v;
}

const Settings &settings() {
    static Settings s;
    static std::once_flag once;
    std::call_once(once, [] {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s.seed = env_u64("ZS_EMU_SEED",
                         ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ (uint64_t)ts.tv_sec);
        s.strict = (int)env_u64("ZS_EMU_STRICT", 1);
        s.devices = (int)env_u64("ZS_EMU_DEVICES", 1);
        s.device_mem = env_u64("ZS_EMU_DEVICE_MEM", 16ull << 30);
        s.delay_us = (int)env_u64("ZS_EMU_DELAY_US", 0);
        s.copy_delay_us = (int)env_u64("ZS_EMU_COPY_DELAY_US", 0);
        const char *c = getenv("ZS_EMU_COVERAGE_DIR");
        s.coverage = c ? c : "";
        s.check = (int)env_u64("ZS_EMU_CHECK", 0);
        const char *o = getenv("ZS_EMU_SCHED");
        static const char *names[] = {"fifo", "warp", "interleave", "lockstep", "mix"};
        s.sched = SCHED_MIX;
        for (int i = 0; o && i < 5; i++)
            if (!strcmp(o, names[i])) s.sched = i;
        if (o && *o && s.sched == SCHED_MIX && strcmp(o, "mix") != 0) {
            fprintf(stderr,
                    "cuda-emu: ZS_EMU_SCHED=%s: expected fifo, warp, interleave, "
                    "lockstep or mix\n",
                    o);
            abort();
        }
    });
    return s;
}

static std::atomic<uint64_t> g_device_mem{0};

uint64_t device_mem() {
    uint64_t m = g_device_mem.load();
    return m ? m : settings().device_mem;
}

void set_device_mem(uint64_t bytes) {
    g_device_mem = bytes;
}

void report(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-emu: %s [ZS_EMU_SEED=%llu reproduces this run's thread orders]\n", msg,
            (unsigned long long)settings().seed);
    fflush(stderr);
}

/* ---- errors ------------------------------------------------------------------------------- */

static std::mutex g_err_lock;
static cudaError_t g_sticky = cudaSuccess;
static thread_local cudaError_t t_last = cudaSuccess;

void set_sticky(cudaError_t e, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Reported before it is published: a host thread that sees the error may exit at once
     * (a test's fatal check), and the message must already be out when it does. */
    std::lock_guard<std::mutex> lk(g_err_lock);
    if (g_sticky != cudaSuccess) return;
    report("%s (%s; every later CUDA call fails with it)", msg, cudaGetErrorName(e));
    g_sticky = e;
}

cudaError_t sticky() {
    std::lock_guard<std::mutex> lk(g_err_lock);
    return g_sticky;
}

void set_last(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
}

} // namespace zs_emu

using namespace zs_emu;

/* ---- errors and devices ---------------------------------------------------------------------- */

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t s = sticky();
    if (s != cudaSuccess) return s;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) {
    cudaError_t s = sticky();
    return s != cudaSuccess ? s : t_last;
}

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x)                                                                                       \
    case x:                                                                                        \
        return #x;
        N(cudaSuccess)
        N(cudaErrorInvalidValue)
        N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError)
        N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidDevice)
        N(cudaErrorNoDevice)
        N(cudaErrorInvalidResourceHandle)
        N(cudaErrorNotReady)
        N(cudaErrorIllegalAddress)
        N(cudaErrorLaunchFailure)
        N(cudaErrorLaunchOutOfResources)
        N(cudaErrorAssert)
        N(cudaErrorInvalidDevicePointer)
        N(cudaErrorUnknown)
#undef N
    default:
        return "cudaErrorUnknown";
    }
}

extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorLaunchOutOfResources:
        return "too many resources requested for launch";
    case cudaErrorAssert:
        return "device-side assert triggered";
    default:
        return "unknown error";
    }
}

thread_local constinit int zs_emu::t_device = 0;

extern "C" cudaError_t cudaGetDeviceCount(int *count) {
    *count = settings().devices;
    if (*count <= 0) return ret(cudaErrorNoDevice);
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= settings().devices) return ret(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device) {
    *device = t_device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= settings().devices) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "zshard emulated GPU (CPU fibers)");
    prop->totalGlobalMem = device_mem();
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = STATIC_SMEM_MAX;
    prop->sharedMemPerBlockOptin = SMEM_OPTIN_MAX;
    return cudaSuccess;
}

/* The attributes zshard asks for; the emulator has no clock (0: "peak unknown"). */
extern "C" cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= settings().devices) return ret(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrClockRate:
        *value = 0;
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *value = 1;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = (int)SMEM_OPTIN_MAX;
        return cudaSuccess;
    default:
        return ret(cudaErrorInvalidValue);
    }
}

extern "C" cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

extern "C" cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) {
    STICKY_CHECK();
    device_wait_host();
    STICKY_CHECK();
    return cudaSuccess;
}

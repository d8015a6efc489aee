/* The CUDA runtime calls zshard makes, on the emulated GPU: errors (per-thread last error,
 * sticky device errors), devices, memory, copies and memset, streams, events, and kernel
 * launches. Each stream is an in-order queue drained by a worker thread of its own, so work
 * runs asynchronously to the host (with an optional random delay before each task,
 * ZS_EMU_DELAY_US): a missing stream synchronisation or event wait shows as a wrong result.
 *
 * Ordering follows CUDA's rules: the legacy default stream (handle 0) waits for earlier work on
 * every blocking stream and blocking streams wait for earlier work on it; non-blocking streams
 * order only through events. Asynchronous copies involving pageable host memory behave as CUDA
 * documents (host-to-device returns once the source is staged, device-to-host returns once the
 * copy is done); copies with pinned memory are truly asynchronous. The emulator is stricter than
 * CUDA in one respect: a copy whose kind contradicts where its pointers live is refused. */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "h100.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

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
    {
        std::lock_guard<std::mutex> lk(g_err_lock);
        if (g_sticky != cudaSuccess) return;
        g_sticky = e;
    }
    report("%s (%s; every later CUDA call fails with it)", msg, cudaGetErrorName(e));
}

cudaError_t sticky() {
    std::lock_guard<std::mutex> lk(g_err_lock);
    return g_sticky;
}

void set_last(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
}

/* Return e from an API call, remembering it for cudaGetLastError. */
static cudaError_t ret(cudaError_t e) {
    set_last(e);
    return e;
}

#define STICKY_CHECK()                                                                             \
    do {                                                                                           \
        cudaError_t zs_st_ = sticky();                                                             \
        if (zs_st_ != cudaSuccess) return ret(zs_st_);                                             \
    } while (0)

/* ---- streams ------------------------------------------------------------------------------ */

struct Task {
    std::function<void()> fn;
    const char *what;
    std::vector<std::pair<Stream *, uint64_t>> deps;
};

struct Stream {
    int id;
    bool blocking, legacy;
    std::deque<Task> q;
    uint64_t submitted = 0, completed = 0;
    std::thread th;
    bool stop = false;
};

/* Never destroyed: stream workers may still wait on them while the process exits. */
static std::mutex &g_mu = *new std::mutex; /* guards every stream's queue and counters */
static std::condition_variable &g_cv = *new std::condition_variable;
static std::vector<Stream *> &g_streams = *new std::vector<Stream *>; /* live streams */
static Stream *g_legacy;
static std::atomic<uint64_t> g_launches{0};

uint64_t next_launch_id() {
    return g_launches.fetch_add(1);
}

static void worker(Stream *s) {
    /* An alternate signal stack, so a fiber's stack overflow still reaches the fault report. */
    static thread_local std::vector<char> alt(1 << 16);
    stack_t ss;
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    uint64_t rng = settings().seed ^ ((uint64_t)s->id << 40) ^ 0x5bd1e995u;
    std::unique_lock<std::mutex> lk(g_mu);
    for (;;) {
        g_cv.wait(lk, [s] { return s->stop || !s->q.empty(); });
        if (s->q.empty()) break;
        Task t = std::move(s->q.front());
        s->q.pop_front();
        g_cv.wait(lk, [&t] {
            for (auto &d : t.deps)
                if (d.first->completed < d.second) return false;
            return true;
        });
        lk.unlock();
        if (settings().delay_us > 0) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            usleep((useconds_t)((rng >> 33) % (uint64_t)settings().delay_us));
        }
        if (sticky() == cudaSuccess) t.fn();
        lk.lock();
        s->completed++;
        g_cv.notify_all();
    }
}

static Stream *new_stream(bool blocking, bool legacy) {
    Stream *s = new Stream;
    static int next_id = 0;
    s->blocking = blocking;
    s->legacy = legacy;
    std::lock_guard<std::mutex> lk(g_mu);
    s->id = next_id++;
    g_streams.push_back(s);
    s->th = std::thread(worker, s);
    return s;
}

Stream *stream_of(cudaStream_t h) {
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        static std::once_flag once;
        std::call_once(once, [] { g_legacy = new_stream(true, true); });
        return g_legacy;
    }
    return (Stream *)h;
}

static uint64_t enqueue_deps(Stream *s, const char *what, std::function<void()> fn,
                             std::vector<std::pair<Stream *, uint64_t>> extra) {
    std::lock_guard<std::mutex> lk(g_mu);
    Task t;
    t.fn = std::move(fn);
    t.what = what;
    t.deps = std::move(extra);
    if (s->legacy) {
        for (Stream *b : g_streams)
            if (b != s && b->blocking && b->submitted > b->completed)
                t.deps.emplace_back(b, b->submitted);
    } else if (s->blocking && g_legacy && g_legacy->submitted > g_legacy->completed) {
        t.deps.emplace_back(g_legacy, g_legacy->submitted);
    }
    s->q.push_back(std::move(t));
    s->submitted++;
    g_cv.notify_all();
    return s->submitted;
}

uint64_t enqueue(Stream *s, const char *what, std::function<void()> fn) {
    return enqueue_deps(s, what, std::move(fn), {});
}

void wait_task(Stream *s, uint64_t seq) {
    std::unique_lock<std::mutex> lk(g_mu);
    g_cv.wait(lk, [s, seq] { return s->completed >= seq; });
}

void stream_wait_host(Stream *s) {
    std::unique_lock<std::mutex> lk(g_mu);
    uint64_t target = s->submitted;
    g_cv.wait(lk, [s, target] { return s->completed >= target; });
}

static void device_wait_host() {
    std::unique_lock<std::mutex> lk(g_mu);
    std::vector<std::pair<Stream *, uint64_t>> all;
    for (Stream *s : g_streams)
        all.emplace_back(s, s->submitted);
    g_cv.wait(lk, [&all] {
        for (auto &d : all)
            if (d.first->completed < d.second) return false;
        return true;
    });
}

static bool valid_stream(cudaStream_t h) {
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> lk(g_mu);
    for (Stream *s : g_streams)
        if (s == (Stream *)h) return true;
    return false;
}

/* ---- coverage: the kernels this process launched ------------------------------------------ */

static void note_kernel(const char *name) {
    static std::mutex mu;
    static std::set<std::string> seen;
    const std::string &dir = settings().coverage;
    if (dir.empty()) return;
    std::lock_guard<std::mutex> lk(mu);
    if (!seen.insert(name).second) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels-%d.txt", dir.c_str(), (int)getpid());
    mkdir(dir.c_str(), 0777);
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

} // namespace zs_emu

using namespace zs_emu;

/* ---- launches ------------------------------------------------------------------------------- */

static thread_local std::vector<const void *> t_launch_ptrs;
static thread_local Cost t_cost;

/* ZS_COST (cuda_internal.h): the cost of the launch this host thread queues next. */
extern "C" void zs_emu_declare_cost(double flops, double mma_flops, double bytes) {
    t_cost = Cost{flops, mma_flops, bytes, true};
}

namespace zs_emu {
Cost take_declared_cost() {
    Cost c = t_cost;
    t_cost = Cost{0, 0, 0, false};
    return c;
}
} // namespace zs_emu

extern "C" void *zs_emu_kernel_ptr(const void *p) {
    t_launch_ptrs.push_back(p);
    return view(p);
}

/* A kernel's name as its source defines it: ZS_LAUNCH passes the expression it was given, so
 * a template's arguments ("fa_tc_fwd_kernel<HS>") are dropped. Interned: the pointer lasts. */
static const char *kernel_name(const char *expr) {
    static std::mutex mu;
    static std::set<std::string> names;
    std::string n(expr);
    size_t lt = n.find('<');
    if (lt != std::string::npos) n.resize(lt);
    std::lock_guard<std::mutex> lk(mu);
    return names.insert(n).first->c_str();
}

void zs_emu_launch_raw(const char *expr, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                       std::function<void()> body) {
    const char *name = kernel_name(expr);
    std::vector<const void *> ptrs;
    ptrs.swap(t_launch_ptrs);
    if (sticky() != cudaSuccess) {
        set_last(sticky());
        return;
    }
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 ||
        block.z > 64 || threads > 1024 || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        set_last(cudaErrorInvalidConfiguration);
        return;
    }
    if (shmem > (48u << 10)) {
        set_last(cudaErrorInvalidValue);
        return;
    }
    if (!valid_stream(stream)) {
        set_last(cudaErrorInvalidResourceHandle);
        return;
    }
    note_kernel(name);
    uint64_t seed = settings().seed * 0x9e3779b97f4a7c15ull + next_launch_id();
    Cost cost = take_declared_cost();
    enqueue(stream_of(stream), name, [name, grid, block, shmem, body, ptrs, seed, cost]() {
        for (size_t i = 0; i < ptrs.size(); i++)
            if (ptrs[i] && classify(ptrs[i]) == MEM_NONE && view(ptrs[i]) == ptrs[i]) {
                set_sticky(cudaErrorIllegalAddress,
                           "kernel %s: pointer argument %zu (%p) is host memory a GPU cannot read "
                           "(not from cudaMalloc or cudaMallocHost)",
                           name, i, ptrs[i]);
                return;
            }
        if (!run_grid(name, grid, block, shmem, body, seed, cost)) return;
        for (const void *p : ptrs)
            check_redzone(p);
    });
}

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

static thread_local int t_device = 0;

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
    prop->sharedMemPerBlock = 48 << 10;
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

/* Where the copy's pointers live must agree with its kind (stricter than CUDA, which lets UVA
 * infer it), and a device range must lie inside one allocation (as CUDA checks). */
static cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind *kind) {
    MemKind kd = classify(dst), ks = classify(src);
    bool dd = kd == MEM_DEVICE || view(dst) != dst, sd = ks == MEM_DEVICE || view(src) != src;
    if (*kind == cudaMemcpyDefault)
        *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                   : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dd = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    bool want_sd = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                  "Default"};
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
        enqueue(st, "memcpy", [vd, vs, n, r, run] {
            if (run) memmove(vd, vs, n);
            profile_record(r);
        });
    } else if (pageable_src) {
        /* Staged at the call, as CUDA does for pageable sources: the caller may reuse it. */
        std::shared_ptr<std::vector<char>> copy(
            new std::vector<char>((const char *)src, (const char *)src + n));
        enqueue(st, "memcpy", [vd, copy] { memcpy(vd, copy->data(), copy->size()); });
    } else {
        enqueue(st, "memcpy", [vd, vs, n] { memmove(vd, vs, n); });
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
        enqueue(st, "memset", [vp, v, n, r, run] {
            if (run) memset(vp, v, n);
            profile_record(r);
        });
    } else {
        enqueue(st, "memset", [vp, v, n] { memset(vp, v, n); });
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

/* ---- streams and events --------------------------------------------------------------------- */

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    STICKY_CHECK();
    *s = (cudaStream_t)new_stream(!(flags & cudaStreamNonBlocking), false);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) {
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t h) {
    if (!h || !valid_stream(h)) return ret(cudaErrorInvalidResourceHandle);
    Stream *s = (Stream *)h;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        for (size_t i = 0; i < g_streams.size(); i++)
            if (g_streams[i] == s) g_streams.erase(g_streams.begin() + (long)i);
        s->stop = true; /* the worker drains what is queued, then exits */
        g_cv.notify_all();
    }
    s->th.detach();
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    STICKY_CHECK();
    if (!valid_stream(h)) return ret(cudaErrorInvalidResourceHandle);
    Stream *s = stream_of(h);
    if (s->legacy) enqueue(s, "sync", [] {}); /* picks up the blocking streams' earlier work */
    stream_wait_host(s);
    STICKY_CHECK();
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t h) {
    STICKY_CHECK();
    if (!valid_stream(h)) return ret(cudaErrorInvalidResourceHandle);
    Stream *s = stream_of(h);
    std::lock_guard<std::mutex> lk(g_mu);
    return s->completed >= s->submitted ? cudaSuccess : cudaErrorNotReady;
}

struct EmuEvent {
    Stream *s = nullptr;
    uint64_t seq = 0;
};

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    STICKY_CHECK();
    *e = (cudaEvent_t) new EmuEvent;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) {
    return cudaEventCreateWithFlags(e, 0);
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    /* Waits already queued copied (stream, position): the event itself can go. */
    delete (EmuEvent *)e;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
    STICKY_CHECK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (!valid_stream(h)) return ret(cudaErrorInvalidResourceHandle);
    Stream *s = stream_of(h);
    enqueue(s, "event", [] {});
    std::lock_guard<std::mutex> lk(g_mu);
    ((EmuEvent *)e)->s = s;
    ((EmuEvent *)e)->seq = s->submitted;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags) {
    (void)flags;
    STICKY_CHECK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (!valid_stream(h)) return ret(cudaErrorInvalidResourceHandle);
    EmuEvent *ev = (EmuEvent *)e;
    Stream *src;
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        src = ev->s;
        seq = ev->seq;
    }
    if (!src) return cudaSuccess; /* never recorded: nothing to wait for, as in CUDA */
    enqueue_deps(stream_of(h), "wait event", [] {}, {{src, seq}});
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    STICKY_CHECK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    EmuEvent *ev = (EmuEvent *)e;
    std::unique_lock<std::mutex> lk(g_mu);
    Stream *s = ev->s;
    uint64_t seq = ev->seq;
    if (s) g_cv.wait(lk, [s, seq] { return s->completed >= seq; });
    lk.unlock();
    STICKY_CHECK();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    STICKY_CHECK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    EmuEvent *ev = (EmuEvent *)e;
    std::lock_guard<std::mutex> lk(g_mu);
    return !ev->s || ev->s->completed >= ev->seq ? cudaSuccess : cudaErrorNotReady;
}

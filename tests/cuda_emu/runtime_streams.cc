/* Streams, events and kernel launches of the emulated GPU's CUDA runtime. Each stream is an
 * in-order queue drained by a worker thread of its own, so work runs asynchronously to the host
 * (with an optional random delay before each task, ZS_EMU_DELAY_US): a missing stream
 * synchronisation or event wait shows as a wrong result.
 *
 * Ordering follows CUDA's rules: the legacy default stream (handle 0) waits for earlier work on
 * every blocking stream and blocking streams wait for earlier work on it; non-blocking streams
 * order only through events. A launch is queued on its stream and runs its grid (fiber.cc) when
 * the stream's worker reaches it; the kernels launched are recorded (ZS_EMU_COVERAGE_DIR). */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "runtime_internal.h"

#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace zs_emu {

/* ---- streams ------------------------------------------------------------------------------ */

struct Task {
    std::function<void()> fn;
    const char *what;
    std::vector<std::pair<Stream *, uint64_t>> deps;
    std::shared_ptr<Clock> vc; /* the stream checker's (ZS_EMU_CHECK), else null */
};

struct Stream {
    int id;
    bool blocking, legacy;
    std::deque<Task> q;
    uint64_t submitted = 0, completed = 0;
    std::thread th;
    bool stop = false;
    Clock last; /* the clock of the last task queued (ZS_EMU_CHECK) */
};

/* Never destroyed: stream workers may still wait on them while the process exits. */
static std::mutex &g_mu = *new std::mutex; /* guards every stream's queue and counters */
static std::condition_variable &g_cv = *new std::condition_variable;
static std::vector<Stream *> &g_streams = *new std::vector<Stream *>; /* live streams */
static Stream *g_legacy;
/* What the host has synchronised with (ZS_EMU_CHECK). One clock for all host threads: their
 * hand-offs (mutexes, condition variables) are not seen, so a synchronisation by one counts
 * for all (a race may be missed, none is invented). */
static Clock &g_host = *new Clock;
static Clock &g_retired = *new Clock; /* the last clocks of destroyed streams */
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
        sc_task_begin(s->id, s->completed + 1, t.vc.get(), t.what);
        if (sticky() == cudaSuccess) t.fn();
        sc_task_end();
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

/* The host has synchronised with everything c orders (g_mu held). */
static void host_saw(const Clock &c) {
    if (!settings().check) return;
    sc_join(g_host, c);
    sc_host_synced(g_host);
}

void guard_host(Stream *s, uint64_t seq, const void *host, size_t n, bool dev_writes,
                const char *what) {
    std::lock_guard<std::mutex> lk(g_mu);
    if ((size_t)s->id < g_host.size() && g_host[(size_t)s->id] >= seq) return; /* synced */
    sc_guard(host, n, dev_writes, s->id, seq, what);
}

/* Queue fn on s after extra, and after the clock `after` (an event's) for the checker. */
static uint64_t enqueue_deps(Stream *s, const char *what, std::function<void()> fn,
                             std::vector<std::pair<Stream *, uint64_t>> extra,
                             const Clock *after = nullptr) {
    std::lock_guard<std::mutex> lk(g_mu);
    Task t;
    t.fn = std::move(fn);
    t.what = what;
    t.deps = std::move(extra);
    bool check = settings().check != 0;
    Clock vc;
    if (check) {
        vc = s->last;
        sc_join(vc, g_host);
        if (after) sc_join(vc, *after);
    }
    /* CUDA orders the legacy stream after all earlier work of the blocking streams, and them
     * after its earlier work: semantically, whether or not that work has run yet. */
    if (s->legacy) {
        for (Stream *b : g_streams) {
            if (b == s || !b->blocking) continue;
            if (b->submitted > b->completed) t.deps.emplace_back(b, b->submitted);
            if (check) sc_join(vc, b->last);
        }
    } else if (s->blocking && g_legacy) {
        if (g_legacy->submitted > g_legacy->completed)
            t.deps.emplace_back(g_legacy, g_legacy->submitted);
        if (check) sc_join(vc, g_legacy->last);
    }
    if (check) {
        if (vc.size() <= (size_t)s->id) vc.resize((size_t)s->id + 1, 0);
        vc[(size_t)s->id] = s->submitted + 1;
        s->last = vc;
        t.vc = std::make_shared<Clock>(std::move(vc));
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
    Clock seen = s->last;
    g_cv.wait(lk, [s, target] { return s->completed >= target; });
    host_saw(seen);
}

void device_wait_host() {
    std::unique_lock<std::mutex> lk(g_mu);
    std::vector<std::pair<Stream *, uint64_t>> all;
    Clock seen = g_retired;
    for (Stream *s : g_streams) {
        all.emplace_back(s, s->submitted);
        if (settings().check) sc_join(seen, s->last);
    }
    g_cv.wait(lk, [&all] {
        for (auto &d : all)
            if (d.first->completed < d.second) return false;
        return true;
    });
    host_saw(seen);
}

bool valid_stream(cudaStream_t h) {
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

/* cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (cudaFuncSetAttribute). */
static std::mutex g_attr_mu;
static std::map<const void *, int> g_dyn_max;

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                            int value) {
    if (!func) return cudaErrorInvalidDeviceFunction;
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) /* a hint: nothing to do */
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (unsigned)value > SMEM_OPTIN_MAX)
        return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(g_attr_mu);
    g_dyn_max[func] = value;
    return cudaSuccess;
}

/* The dynamic bytes func may be launched with, 48 KiB unless it opted in to more. */
static size_t dyn_smem_max(const void *func) {
    std::lock_guard<std::mutex> lk(g_attr_mu);
    auto it = g_dyn_max.find(func);
    return it != g_dyn_max.end() && (unsigned)it->second > STATIC_SMEM_MAX ? (size_t)it->second
                                                                           : STATIC_SMEM_MAX;
}

void zs_emu_launch_raw(const char *expr, const void *func, dim3 grid, dim3 block, size_t shmem,
                       cudaStream_t stream, std::function<void()> body) {
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
    size_t dyn_max = dyn_smem_max(func);
    if (shmem > dyn_max) {
        set_last(cudaErrorInvalidValue);
        return;
    }
    size_t smem_cap = dyn_max > STATIC_SMEM_MAX ? SMEM_OPTIN_MAX : STATIC_SMEM_MAX;
    if (!valid_stream(stream)) {
        set_last(cudaErrorInvalidResourceHandle);
        return;
    }
    note_kernel(name);
    uint64_t seed = settings().seed * 0x9e3779b97f4a7c15ull + next_launch_id();
    Cost cost = take_declared_cost();
    enqueue(stream_of(stream), name,
            [name, grid, block, shmem, smem_cap, body, ptrs, seed, cost]() {
                for (size_t i = 0; i < ptrs.size(); i++)
                    if (ptrs[i] && classify(ptrs[i]) == MEM_NONE && view(ptrs[i]) == ptrs[i]) {
                        set_sticky(
                            cudaErrorIllegalAddress,
                            "kernel %s: pointer argument %zu (%p) is host memory a GPU cannot read "
                            "(not from cudaMalloc or cudaMallocHost)",
                            name, i, ptrs[i]);
                        return;
                    }
                if (!run_grid(name, grid, block, shmem, smem_cap, body, seed, cost)) return;
                for (const void *p : ptrs)
                    check_redzone(p);
            });
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
        if (settings().check) sc_join(g_retired, s->last);
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
    if (s->completed < s->submitted) return cudaErrorNotReady;
    host_saw(s->last);
    return cudaSuccess;
}

struct EmuEvent {
    Stream *s = nullptr;
    uint64_t seq = 0;
    Clock vc; /* the clock at the record (ZS_EMU_CHECK) */
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
    ((EmuEvent *)e)->vc = s->last;
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
    Clock vc;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        src = ev->s;
        seq = ev->seq;
        vc = ev->vc;
    }
    if (!src) return cudaSuccess; /* never recorded: nothing to wait for, as in CUDA */
    enqueue_deps(
        stream_of(h), "wait event", [] {}, {{src, seq}}, &vc);
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
    host_saw(ev->vc);
    lk.unlock();
    STICKY_CHECK();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    STICKY_CHECK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    EmuEvent *ev = (EmuEvent *)e;
    std::lock_guard<std::mutex> lk(g_mu);
    if (ev->s && ev->s->completed < ev->seq) return cudaErrorNotReady;
    host_saw(ev->vc);
    return cudaSuccess;
}

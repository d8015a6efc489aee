/* Streams and events of the emulated GPU's CUDA runtime, and the profiler's timeline. Each
 * stream is an in-order queue drained by a worker thread of its own, so work runs
 * asynchronously to the host (with an optional random delay before each task,
 * ZS_EMU_DELAY_US): a missing stream synchronisation or event wait shows as a wrong result.
 *
 * Ordering follows CUDA's rules: the legacy default stream (handle 0) waits for earlier work on
 * every blocking stream and blocking streams wait for earlier work on it; non-blocking streams
 * order only through events. Launches (runtime_launch.cc) queue their grids here. While the
 * profiler records, every task is also placed on a timeline of predicted time, with the host
 * threads' clocks and host ranges beside the streams (docs/cuda.md, "The timeline"). */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "runtime_internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zs_emu {

/* ---- streams ------------------------------------------------------------------------------ */

struct Task {
    std::function<void()> fn;
    const char *what;
    std::vector<std::pair<Stream *, uint64_t>> deps;
    std::shared_ptr<Clock> vc; /* the stream checker's (ZS_EMU_CHECK), else null */
    double t_ready = 0;        /* the timeline: the queuing host thread's clock */
};

struct Stream {
    int id;
    bool blocking, legacy;
    std::deque<Task> q;
    uint64_t submitted = 0, completed = 0;
    std::thread th;
    bool stop = false;
    Clock last; /* the clock of the last task queued (ZS_EMU_CHECK) */
    /* the timeline, while recording: when its last task ended, and when each task since the
     * recording began (t_base tasks before it) ended, in predicted seconds */
    double t_free = 0;
    uint64_t t_base = 0;
    std::vector<double> t_done;
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

static double wall_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the timeline (docs/cuda.md, "The profiler"): each stream a clock of predicted time ----
 * While the profiler records, a task starts when its stream's previous task, the tasks it
 * waits for (events, the legacy stream's order) and the host's queuing of it allow, and lasts
 * what its records were priced. Each host thread has a clock too: queuing costs it nothing,
 * a synchronisation moves it to the end of what it waited for, and a host range (host work,
 * zs_emu_host_range_push) adds the wall time the range took here. All under g_mu. */
struct HostClock {
    uint64_t epoch = 0;
    double t = 0;    /* predicted seconds since the recording began */
    int depth = 0;   /* host ranges open */
    double mark = 0; /* wall time the open range's work was last counted to */
    double work = 0; /* the outermost open range's work so far */
    const char *name = "";
};
static uint64_t g_epoch = 1;
static double g_host_end = 0; /* the latest clock of any host thread this recording */
static std::map<const void *, double> &g_marks = *new std::map<const void *, double>;
static thread_local HostClock t_hc;

static HostClock &host_clock() {
    if (t_hc.epoch != g_epoch) {
        int depth = t_hc.depth;
        t_hc = HostClock{};
        t_hc.epoch = g_epoch;
        t_hc.depth = depth;
        t_hc.mark = depth ? wall_seconds() : 0;
    }
    return t_hc;
}

/* When task seq of s ended (0: before the recording). */
static double done_at(const Stream *s, uint64_t seq) {
    if (seq <= s->t_base) return 0;
    size_t i = (size_t)(seq - s->t_base - 1);
    return i < s->t_done.size() ? s->t_done[i] : s->t_free;
}

/* An open range's work so far counts (before the host blocks or queues work). */
static void host_tick() {
    HostClock &c = host_clock();
    if (!c.depth) return;
    double now = wall_seconds(), w = now - c.mark;
    c.t += w;
    c.work += w;
    c.mark = now;
}

/* The host thread waited for work that ends at t. */
static void host_block_end(double t) {
    HostClock &c = host_clock();
    if (t > c.t) c.t = t;
    if (c.depth) c.mark = wall_seconds();
    if (c.t > g_host_end) g_host_end = c.t;
}

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
        bool timed = profiling();
        double start = 0;
        if (timed) {
            start = std::max(s->t_free, t.t_ready);
            for (auto &d : t.deps)
                start = std::max(start, done_at(d.first, d.second));
        }
        lk.unlock();
        profile_task_take(); /* nothing made before this task counts in it */
        if (settings().delay_us > 0) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            usleep((useconds_t)((rng >> 33) % (uint64_t)settings().delay_us));
        }
        sc_task_begin(s->id, s->completed + 1, t.vc.get(), t.what);
        if (sticky() == cudaSuccess) t.fn();
        sc_task_end();
        double cost = profile_task_take();
        lk.lock();
        if (timed && s->completed - s->t_base == s->t_done.size()) {
            s->t_free = start + cost;
            s->t_done.push_back(s->t_free);
        }
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
    host_tick();
    t.t_ready = host_clock().t;
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
    host_tick();
    g_cv.wait(lk, [s, target] { return s->completed >= target; });
    host_block_end(done_at(s, target));
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
    host_tick();
    g_cv.wait(lk, [&all] {
        for (auto &d : all)
            if (d.first->completed < d.second) return false;
        return true;
    });
    double end = 0;
    for (auto &d : all)
        end = std::max(end, done_at(d.first, d.second));
    host_block_end(end);
    host_saw(seen);
}

void timeline_reset() {
    std::lock_guard<std::mutex> lk(g_mu);
    g_epoch++;
    g_host_end = 0;
    g_marks.clear();
    for (Stream *s : g_streams) {
        s->t_free = 0;
        s->t_base = s->completed;
        s->t_done.clear();
    }
}

double timeline_end() {
    std::lock_guard<std::mutex> lk(g_mu);
    double end = std::max(g_host_end, host_clock().t);
    for (Stream *s : g_streams)
        end = std::max(end, s->t_free);
    return end;
}

bool valid_stream(cudaStream_t h) {
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> lk(g_mu);
    for (Stream *s : g_streams)
        if (s == (Stream *)h) return true;
    return false;
}

} // namespace zs_emu

using namespace zs_emu;

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
    host_block_end(done_at(s, s->submitted));
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
    host_tick();
    if (s) g_cv.wait(lk, [s, seq] { return s->completed >= seq; });
    host_block_end(s ? done_at(s, seq) : 0);
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
    host_block_end(ev->s ? done_at(ev->s, ev->seq) : 0);
    host_saw(ev->vc);
    return cudaSuccess;
}

/* ---- host ranges: host work on the timeline ------------------------------------------------ */

extern "C" void zs_emu_host_range_push(const char *name) {
    std::lock_guard<std::mutex> lk(g_mu);
    HostClock &c = host_clock();
    if (c.depth++) return; /* nested: the outermost range counts */
    c.mark = wall_seconds();
    c.work = 0;
    c.name = name ? name : "host";
}

extern "C" void zs_emu_host_range_pop(void) {
    zs_emu_record r;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        HostClock &c = host_clock();
        if (!c.depth || --c.depth) return;
        double w = wall_seconds() - c.mark;
        c.t += w;
        c.work += w;
        if (c.t > g_host_end) g_host_end = c.t;
        memset(&r, 0, sizeof r);
        snprintf(r.name, sizeof r.name, "host: %s (measured here)", c.name);
        r.blocks = 0;
        r.predicted = c.work;
        r.bound = "host";
    }
    profile_host_record(r);
}

extern "C" void zs_emu_host_mark(const void *key) {
    std::lock_guard<std::mutex> lk(g_mu);
    host_tick();
    double t = host_clock().t;
    double &m = g_marks[key];
    if (t > m) m = t;
}

extern "C" void zs_emu_host_after(const void *key) {
    std::lock_guard<std::mutex> lk(g_mu);
    host_tick();
    auto it = g_marks.find(key);
    host_block_end(it != g_marks.end() ? it->second : 0);
}

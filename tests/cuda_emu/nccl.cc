/* The NCCL entry points zshard uses, on the emulated GPU, across separate processes: unique id,
 * init (blocking until every rank joins), destroy, abort, async errors, group calls, and
 * all-reduce, reduce-scatter, all-gather and broadcast with NCCL's contracts (counts in
 * elements: all-gather's sendcount and reduce-scatter's recvcount per rank; in place when
 * send == recv + rank*count / recv == send + rank*count).
 *
 * Ranks meet in a POSIX shared-memory segment named by the unique id (unlinked as soon as every
 * rank has joined, so nothing is left behind). A collective is a task on the caller's stream, as
 * NCCL's kernel is: when the stream reaches it, the ranks move the data through one staging slot
 * each, piece by piece, with two barriers per piece. Sums follow a ring's order: the block of the
 * output that rank r owns (reduce-scatter's output, all-reduce's r-th nth) adds the ranks r+1,
 * r+2, ..., r in turn, and bf16 partial sums are rounded to bf16 at every hop, as NCCL's are. A
 * peer that dies leaves the collective waiting, as on a GPU; ncclCommGetAsyncError then reports
 * ncclRemoteError and ncclCommAbort ends the wait.
 *
 * Stricter than NCCL: buffers must be device (or pinned) memory and lie inside their allocation
 * (else the stream fails with an illegal address, reported with the offending range), and send and
 * receive buffers that overlap other than in NCCL's in-place forms are refused. */
#include "emu_internal.h"

#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>

using namespace zs_emu;

#define MAX_RANKS 64
#define ID_MAGIC 0x31636e756d65737aull /* "zsemunc1" */

namespace {

struct RankState {
    std::atomic<int> pid;
    std::atomic<int> aborted;
    std::atomic<uint64_t> gen; /* barrier generation this rank has reached */
    char pad[64 - 16];
};

struct Seg {
    uint64_t magic;
    std::atomic<int> ready;
    int nranks;
    uint64_t slot_bytes;
    std::atomic<int> joined;
    RankState ranks[MAX_RANKS];
    /* nranks slots of slot_bytes follow, 64-byte aligned */
};

size_t seg_bytes(int nranks, uint64_t slot) {
    return (sizeof(Seg) + 63) / 64 * 64 + (size_t)nranks * slot;
}

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

thread_local char t_last_error[512];

ncclResult_t err(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t err(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-emu: nccl: %s\n", t_last_error);
    return r;
}

size_t dt_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

} // namespace

struct ncclComm {
    Seg *seg;
    size_t map_bytes;
    char *slots;
    int rank, nranks, device;
    uint64_t gen;
    std::atomic<int> abort{0}, dead{0}, inflight{0};
    std::atomic<int> async{ncclSuccess};
    Stream *last_stream = nullptr;
    uint64_t last_seq = 0;
    char last_error[512] = "";
};

namespace {

char *slot(ncclComm *c, int r) {
    return c->slots + (size_t)r * c->seg->slot_bytes;
}

/* Wait until every rank has reached generation g. false: aborted (this rank or a peer). A peer
 * that died or aborted sets the async error and the wait goes on, as NCCL's kernels would, until
 * ncclCommAbort; the environment's hard limit (ZS_EMU_NCCL_HANG_S, default 1800 s) only guards
 * CI against a program that never aborts. */
bool wait_gen(ncclComm *c, uint64_t g) {
    double t0 = now_s(), last_check = t0;
    static double hang = getenv("ZS_EMU_NCCL_HANG_S") ? atof(getenv("ZS_EMU_NCCL_HANG_S")) : 1800;
    for (unsigned spin = 0;; spin++) {
        if (c->abort.load()) return false;
        bool all = true;
        for (int r = 0; r < c->nranks && all; r++)
            all = c->seg->ranks[r].gen.load(std::memory_order_acquire) >= g;
        if (all) return true;
        if (spin < 64) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, nullptr);
        double t = now_s();
        if (t - last_check > 0.05) {
            last_check = t;
            for (int r = 0; r < c->nranks; r++) {
                if (r == c->rank) continue;
                int pid = c->seg->ranks[r].pid.load();
                bool gone = pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
                if ((gone || c->seg->ranks[r].aborted.load()) && c->async.load() == ncclSuccess) {
                    c->async.store(ncclRemoteError);
                    snprintf(c->last_error, sizeof c->last_error,
                             "rank %d (pid %d) %s during a collective", r, pid,
                             gone ? "exited" : "aborted its communicator");
                }
            }
            if (t - t0 > hang) {
                report("nccl: rank %d waited %.0f s in a collective and nobody called "
                       "ncclCommAbort; giving up",
                       c->rank, t - t0);
                abort();
            }
        }
    }
}

bool barrier(ncclComm *c) {
    c->gen++;
    c->seg->ranks[c->rank].gen.store(c->gen, std::memory_order_release);
    return wait_gen(c, c->gen);
}

float ld(const char *p, ncclDataType_t t, size_t i) {
    if (t == ncclFloat32) return ((const float *)p)[i];
    uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

float bf16_round(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        b |= 0x00400000u;
    else
        b += 0x7fffu + ((b >> 16) & 1u);
    b &= 0xffff0000u;
    memcpy(&x, &b, 4);
    return x;
}

/* out[i] = sum over ranks (from rank `first` round the ring) of in[r] + off, i in [0, n). */
void reduce(char *out, ncclComm *c, size_t off_bytes, size_t n, ncclDataType_t t, ncclRedOp_t op,
            int first) {
    float pre = op == ncclAvg ? 1.0f / (float)c->nranks : 1.0f;
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int s = 0; s < c->nranks; s++) {
            int r = (first + s) % c->nranks;
            float x = ld(slot(c, r) + off_bytes, t, i);
            if (op == ncclAvg) x = t == ncclBfloat16 ? bf16_round(x * pre) : x * pre;
            acc = s == 0 ? x : acc + x;
            if (t == ncclBfloat16) acc = bf16_round(acc);
        }
        if (t == ncclFloat32)
            ((float *)out)[i] = acc;
        else {
            uint32_t b;
            memcpy(&b, &acc, 4);
            ((uint16_t *)out)[i] = (uint16_t)(b >> 16);
        }
    }
}

enum Kind { AG, RS, AR, BC };

struct Coll {
    Kind kind;
    const char *name;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root;
};

/* Check a buffer range at execution, as a GPU would fault on it. */
bool buffer_ok(const Coll &o, const void *p, size_t nbytes, const char *which) {
    char why[200];
    if (!nbytes) return true;
    if (classify(p) == MEM_NONE && view(p) == p) {
        set_sticky(cudaErrorIllegalAddress, "%s: %s %p is host memory a GPU cannot read", o.name,
                   which, p);
        return false;
    }
    if (!range_ok(p, nbytes, why, sizeof why)) {
        set_sticky(cudaErrorIllegalAddress, "%s: %s: %s", o.name, which, why);
        return false;
    }
    return true;
}

void run(ncclComm *c, const Coll &o) {
    size_t es = dt_size(o.dt), n = (size_t)c->nranks, cnt = o.count;
    int me = c->rank;
    size_t send_b = (o.kind == RS ? cnt * n : cnt) * es,
           recv_b = (o.kind == AG ? cnt * n : cnt) * es;
    bool sends = o.kind != BC || me == o.root;
    if ((sends && !buffer_ok(o, o.send, send_b, "sendbuff")) ||
        !buffer_ok(o, o.recv, recv_b, "recvbuff")) {
        c->abort.store(1); /* this rank stops taking part, as a faulted GPU would */
        c->seg->ranks[c->rank].aborted.store(1);
        return;
    }
    const char *snd = (const char *)view(o.send);
    char *rcv = (char *)view(o.recv);
    size_t slot_b = c->seg->slot_bytes;
    /* Elements per rank and piece: reduce-scatter stages n blocks per slot. */
    size_t per = (o.kind == RS ? slot_b / n : slot_b) / es;
    if (per == 0) per = 1;
    size_t chunk = (cnt + n - 1) / n; /* all-reduce: element i belongs to ring block i / chunk */
    size_t k0 = 0;
    do {
        size_t m = cnt - k0 < per ? cnt - k0 : per;
        char *mine = slot(c, me);
        switch (o.kind) {
        case AG:
        case AR:
            memcpy(mine, snd + k0 * es, m * es);
            break;
        case RS:
            for (size_t j = 0; j < n; j++)
                memcpy(mine + j * m * es, snd + (j * cnt + k0) * es, m * es);
            break;
        case BC:
            if (me == o.root) memcpy(mine, snd + k0 * es, m * es);
            break;
        }
        if (!barrier(c)) return;
        switch (o.kind) {
        case AG:
            for (size_t j = 0; j < n; j++)
                memcpy(rcv + (j * cnt + k0) * es, slot(c, (int)j), m * es);
            break;
        case BC:
            memcpy(rcv + k0 * es, slot(c, o.root), m * es);
            break;
        case RS:
            reduce(rcv + k0 * es, c, (size_t)me * m * es, m, o.dt, o.op, (me + 1) % c->nranks);
            break;
        case AR:
            for (size_t i = 0; i < m;) {
                size_t blk = (k0 + i) / chunk, end = (blk + 1) * chunk - k0;
                size_t len = (end < m ? end : m) - i;
                reduce(rcv + (k0 + i) * es, c, i * es, len, o.dt, o.op, (int)((blk + 1) % n));
                i += len;
            }
            break;
        }
        if (!barrier(c)) return;
    } while ((k0 += per) < cnt);
}

ncclResult_t submit(ncclComm *c, const Coll &o, cudaStream_t s) {
    if (!c) return err(ncclInvalidArgument, "%s: comm is NULL", o.name);
    if (c->dead.load()) return err(ncclInvalidUsage, "%s: comm was destroyed", o.name);
    size_t es = dt_size(o.dt);
    if (!es) return err(ncclInvalidArgument, "%s: invalid datatype %d", o.name, (int)o.dt);
    bool reduces = o.kind == RS || o.kind == AR;
    if (reduces && o.op != ncclSum && o.op != ncclAvg)
        return err(ncclInvalidArgument, "%s: reduction op %d is not emulated (sum, avg)", o.name,
                   (int)o.op);
    if (reduces && o.dt != ncclFloat32 && o.dt != ncclBfloat16)
        return err(ncclInvalidArgument, "%s: reductions are emulated for float32 and bfloat16 only",
                   o.name);
    if (o.kind == BC && (o.root < 0 || o.root >= c->nranks))
        return err(ncclInvalidArgument, "%s: root %d is not a rank of %d", o.name, o.root,
                   c->nranks);
    if (o.count == 0) return ncclSuccess;
    bool sends = o.kind != BC || c->rank == o.root;
    if (!o.recv) return err(ncclInvalidArgument, "%s: recvbuff is NULL", o.name);
    if (sends && !o.send) return err(ncclInvalidArgument, "%s: sendbuff is NULL", o.name);
    size_t n = (size_t)c->nranks, sb = (o.kind == RS ? o.count * n : o.count) * es,
           rb = (o.kind == AG ? o.count * n : o.count) * es;
    uintptr_t s0 = (uintptr_t)o.send, r0 = (uintptr_t)o.recv;
    bool overlap = sends && s0 < r0 + rb && r0 < s0 + sb;
    bool inplace = (o.kind == AG && s0 == r0 + (size_t)c->rank * o.count * es) ||
                   (o.kind == RS && r0 == s0 + (size_t)c->rank * o.count * es) ||
                   ((o.kind == AR || o.kind == BC) && s0 == r0);
    if (overlap && !inplace)
        return err(ncclInvalidArgument,
                   "%s: sendbuff and recvbuff overlap without being NCCL's in-place form", o.name);
    if (sticky() != cudaSuccess)
        return err(ncclUnhandledCudaError, "%s: the device has failed", o.name);
    Stream *st = stream_of(s);
    c->last_stream = st;
    c->last_seq = enqueue(st, o.name, [c, o, sb, rb, sends] {
        if (sends) sc_access(view(o.send), sb, false, o.name);
        sc_access(view(o.recv), rb, true, o.name);
        c->inflight.fetch_add(1);
        if (!c->dead.load() && !c->abort.load()) run(c, o);
        c->inflight.fetch_sub(1);
    });
    return ncclSuccess;
}

} // namespace

extern "C" ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

extern "C" const char *ncclGetLastError(ncclComm_t c) {
    return c && c->last_error[0] ? c->last_error : t_last_error;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    uint64_t magic = ID_MAGIC, rnd = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &rnd, sizeof rnd) != (ssize_t)sizeof rnd) rnd = (uint64_t)now_s() * 1e9;
    if (fd >= 0) close(fd);
    rnd ^= (uint64_t)getpid() << 32;
    memcpy(id->internal, &magic, 8);
    memcpy(id->internal + 8, &rnd, 8);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    uint64_t magic, rnd;
    memcpy(&magic, id.internal, 8);
    memcpy(&rnd, id.internal + 8, 8);
    *out = nullptr;
    if (magic != ID_MAGIC) return err(ncclInvalidArgument, "ncclCommInitRank: not a unique id");
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return err(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d (at most %d ranks)", rank,
                   nranks, MAX_RANKS);
    char name[64];
    snprintf(name, sizeof name, "/zsemu-nccl-%016llx", (unsigned long long)rnd);
    uint64_t slot_b =
        getenv("ZS_EMU_NCCL_SLOT") ? strtoull(getenv("ZS_EMU_NCCL_SLOT"), nullptr, 0) : (4u << 20);
    slot_b = (slot_b + 63) / 64 * 64;
    if (slot_b < 1024) slot_b = 1024;
    size_t bytes = seg_bytes(nranks, slot_b);
    double deadline =
        now_s() + (getenv("ZS_EMU_NCCL_INIT_S") ? atof(getenv("ZS_EMU_NCCL_INIT_S")) : 120);
    Seg *seg = nullptr;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)bytes) != 0) {
            close(fd);
            shm_unlink(name);
            return err(ncclSystemError, "ncclCommInitRank: cannot size %s", name);
        }
        seg = (Seg *)mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (seg == MAP_FAILED) return err(ncclSystemError, "ncclCommInitRank: cannot map %s", name);
        seg->magic = ID_MAGIC;
        seg->nranks = nranks;
        seg->slot_bytes = slot_b;
        seg->ready.store(1, std::memory_order_release);
    } else {
        for (;;) {
            fd = shm_open(name, O_RDWR, 0600);
            struct stat stt;
            if (fd >= 0 && fstat(fd, &stt) == 0 && (size_t)stt.st_size >= sizeof(Seg)) {
                void *p =
                    mmap(nullptr, (size_t)stt.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (p == MAP_FAILED) return err(ncclSystemError, "ncclCommInitRank: cannot map");
                seg = (Seg *)p;
                while (!seg->ready.load(std::memory_order_acquire) && now_s() < deadline)
                    usleep(1000);
                if (seg->nranks != nranks ||
                    (size_t)stt.st_size != seg_bytes(nranks, seg->slot_bytes)) {
                    int theirs = seg->nranks;
                    munmap(p, (size_t)stt.st_size);
                    return err(ncclInvalidUsage,
                               "ncclCommInitRank: rank %d says %d ranks, the communicator has %d",
                               rank, nranks, theirs);
                }
                bytes = (size_t)stt.st_size;
                break;
            }
            if (fd >= 0) close(fd);
            if (now_s() > deadline)
                return err(ncclSystemError, "ncclCommInitRank: rank %d: no peer created %s", rank,
                           name);
            usleep(2000);
        }
    }
    int expected = 0;
    if (!seg->ranks[rank].pid.compare_exchange_strong(expected, (int)getpid())) {
        munmap(seg, bytes);
        return err(ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
    }
    seg->joined.fetch_add(1);
    while (seg->joined.load() < nranks) {
        if (now_s() > deadline) {
            int j = seg->joined.load();
            munmap(seg, bytes);
            shm_unlink(name);
            return err(ncclSystemError, "ncclCommInitRank: only %d of %d ranks joined", j, nranks);
        }
        usleep(1000);
    }
    shm_unlink(name); /* everyone has it mapped: nothing stays in /dev/shm */
    ncclComm *c = new ncclComm;
    c->seg = seg;
    c->map_bytes = bytes;
    c->slots = (char *)seg + (sizeof(Seg) + 63) / 64 * 64;
    c->rank = rank;
    c->nranks = nranks;
    c->gen = 0;
    cudaGetDevice(&c->device);
    *out = c;
    return ncclSuccess;
}

static void release(ncclComm *c) {
    c->dead.store(1);
    while (c->inflight.load() > 0)
        usleep(100);
    munmap(c->seg, c->map_bytes);
    /* The struct stays allocated: tasks still queued behind others see dead and skip. */
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return err(ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
    if (c->last_stream) wait_task(c->last_stream, c->last_seq); /* its work completes first */
    release(c);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    c->abort.store(1);
    c->seg->ranks[c->rank].aborted.store(1);
    release(c);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    if (!c) return err(ncclInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
    *e = (ncclResult_t)c->async.load();
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
    *count = c->nranks;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
    *rank = c->rank;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
    *device = c->device;
    return ncclSuccess;
}

static int g_group_depth;

extern "C" ncclResult_t ncclGroupStart(void) {
    g_group_depth++;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth <= 0) return err(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    g_group_depth--;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount,
                                      ncclDataType_t dt, ncclComm_t c, cudaStream_t s) {
    return submit(c, Coll{AG, "ncclAllGather", send, recv, sendcount, dt, ncclSum, 0}, s);
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount,
                                          ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                                          cudaStream_t s) {
    return submit(c, Coll{RS, "ncclReduceScatter", send, recv, recvcount, dt, op, 0}, s);
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                                      ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    return submit(c, Coll{AR, "ncclAllReduce", send, recv, count, dt, op, 0}, s);
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt,
                                      int root, ncclComm_t c, cudaStream_t s) {
    return submit(c, Coll{BC, "ncclBroadcast", send, recv, count, dt, ncclSum, root}, s);
}

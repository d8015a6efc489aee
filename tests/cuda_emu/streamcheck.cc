/* The emulated GPU's stream checker (ZS_EMU_CHECK=1; docs/cuda.md, "The checker"): races
 * between streams, as the block checker (check.cc) finds them between the threads of a launch.
 *
 * Every stream task carries a vector clock: per stream, the last of its tasks this one is
 * ordered after, through CUDA's rules (stream order, the legacy default stream's implicit waits,
 * cudaStreamWaitEvent) and through the host (a task queued after the host synchronised with
 * another, by cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize or a successful
 * query, is ordered after it). runtime_streams.cc keeps the clocks; this file keeps, per 2 bytes
 * of device and pinned memory, the last task that wrote it and up to two that read it since.
 *
 * What a task touches is recorded when it runs: a copy its source and destination, a memset its
 * range, an NCCL collective its send and receive buffers, a cuBLAS GEMM its operands column by
 * column, a kernel every granule the block checker saw it touch. Two tasks of different streams
 * touching one granule, one writing, with neither ordered before the other, are a hazard whatever
 * order they happened to run in; the first fails the device (sticky) with both tasks named.
 *
 * Host code is not instrumented; its side is guarded with page protection instead. While a copy
 * between the device and pinned memory is queued and the host has not synchronised with it, the
 * pages of its pinned range are unreadable (the copy writes them) or read-only (the copy reads
 * them) through the host's mapping; copies and kernels use a second mapping (memory.cc). Host
 * code touching the copy's bytes faults with a report naming the copy; touching other bytes of
 * those pages is let through one instruction at a time (the page opened, the trap flag set, the
 * page closed again at the trap). Test infrastructure only. */
#include "emu_internal.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace zs_emu {

namespace {

#define SC_PAGE 4096u
#define SC_GRANULE 2u
#define SC_PAGES_MAX 16384u /* 64 MiB of memory tracked at once (a note says when past it) */

/* An epoch: one task, (stream id + 1) << 48 | its position on the stream; bit 47 marks an
 * atomic access. 0: none. */
typedef uint64_t Epoch;
#define EP_ATOMIC (1ull << 47)
#define EP_SEQ_MASK (EP_ATOMIC - 1)

inline int ep_stream(Epoch e) {
    return (int)(e >> 48) - 1;
}
inline uint64_t ep_seq(Epoch e) {
    return e & EP_SEQ_MASK;
}

struct Cell {
    Epoch w, r0, r1;
};
#define SC_CELLS (SC_PAGE / SC_GRANULE)
/* A page's cells. Tensors are mostly touched whole, page after page, by one task: such a page
 * keeps one cell for all its granules (u) until an access covers part of it. */
struct Page {
    Cell u;
    Cell *c = nullptr; /* SC_CELLS cells, once the granules differ */
    ~Page() {
        delete[] c;
    }
};

struct Current {
    int stream = -1;
    uint64_t seq = 0;
    const Clock *vc = nullptr;
};
thread_local Current t_cur;

std::mutex g_mu; /* guards everything below */
std::unordered_map<uint64_t, Page *> g_pages;
std::unordered_map<int, std::vector<const char *>> g_names; /* per stream: its tasks' names */
bool g_full, g_noted, g_failed;

/* Whether epoch e's task is ordered before the task whose clock is vc. */
inline bool before(Epoch e, const Clock &vc) {
    size_t s = (size_t)ep_stream(e);
    return s < vc.size() && vc[s] >= ep_seq(e);
}

const char *task_name(Epoch e) {
    auto it = g_names.find(ep_stream(e));
    uint64_t i = ep_seq(e);
    if (it == g_names.end() || i == 0 || i > it->second.size()) return "an earlier task";
    return it->second[i - 1];
}

struct Hazard {
    bool found = false;
    const char *kind;
    uintptr_t addr;
    Epoch other;
    bool other_write;
    const char *other_name;
};

Page *g_last_page; /* the page of the last lookup, and its number */
uint64_t g_last_pg = ~0ull;

Page *page(uint64_t pg) {
    if (pg == g_last_pg) return g_last_page;
    auto it = g_pages.find(pg);
    if (it == g_pages.end()) {
        if (g_pages.size() >= SC_PAGES_MAX) {
            if (!g_noted)
                fprintf(stderr,
                        "cuda-emu: check: stream race tracking covers %u MiB of memory at once; "
                        "the rest is not tracked\n",
                        SC_PAGES_MAX * SC_PAGE >> 20);
            g_full = g_noted = true;
            return nullptr;
        }
        it = g_pages.emplace(pg, new Page{}).first;
    }
    g_last_pg = pg;
    g_last_page = it->second;
    return it->second;
}

/* The cells of page p, one per granule (a uniform page is spread out first). */
Cell *cells(Page *p) {
    if (!p->c) {
        p->c = new Cell[SC_CELLS];
        for (unsigned i = 0; i < SC_CELLS; i++)
            p->c[i] = p->u;
    }
    return p->c;
}

/* The current task's access to cell c (for the granule at a); a hazard, if any, goes to h
 * (the first only). */
void touch_cell(Cell *c, uintptr_t a, bool write, bool atomic, Hazard *h) {
    const Current &t = t_cur;
    Epoch me = ((uint64_t)(t.stream + 1) << 48) | t.seq | (atomic ? EP_ATOMIC : 0);
    auto races = [&](Epoch e, bool both_atomic_ok) {
        return e && ep_stream(e) != t.stream && !before(e, *t.vc) &&
               !(both_atomic_ok && atomic && (e & EP_ATOMIC));
    };
    auto note = [&](const char *kind, Epoch e, bool other_write) {
        if (h->found) return;
        *h = Hazard{true, kind, a, e, other_write, task_name(e)};
    };
    if (races(c->w, true)) note(write ? "write after write" : "read after write", c->w, true);
    if (write) {
        if (races(c->r0, true)) note("write after read", c->r0, false);
        if (races(c->r1, true)) note("write after read", c->r1, false);
        c->w = me;
        c->r0 = c->r1 = 0;
        return;
    }
    /* Keep the reads a later write must be ordered after: a read ordered before this one is
     * covered by it (whatever is ordered after this read is after that one too). */
    if (c->r0 && ep_stream(c->r0) == t.stream)
        c->r0 = me;
    else if (c->r1 && ep_stream(c->r1) == t.stream)
        c->r1 = me;
    else if (!c->r0 || before(c->r0, *t.vc))
        c->r0 = me;
    else
        c->r1 = me; /* a third unordered reader: the oldest second one is forgotten */
}

void touch(uintptr_t a, bool write, bool atomic, Hazard *h) {
    Page *p = page(a / SC_PAGE);
    if (p) touch_cell(&cells(p)[(a % SC_PAGE) / SC_GRANULE], a, write, atomic, h);
}

/* The same access to every granule of the page at a. */
void touch_page(uintptr_t a, bool write, bool atomic, Hazard *h) {
    Page *p = page(a / SC_PAGE);
    if (!p) return;
    if (!p->c) {
        touch_cell(&p->u, a, write, atomic, h);
        return;
    }
    for (unsigned i = 0; i < SC_CELLS; i++)
        touch_cell(&p->c[i], a + i * SC_GRANULE, write, atomic, h);
    if (write) { /* every cell is this write now: one again */
        p->u = p->c[0];
        delete[] p->c;
        p->c = nullptr;
    }
}

void describe(uintptr_t a, char *buf, size_t cap) {
    if (in_kernel_view(a))
        describe_view(a, buf, cap);
    else if (!describe_pinned(a, buf, cap))
        snprintf(buf, cap, "host address %p", (void *)a);
}

/* Called without g_mu: describing the address takes the allocator's lock. */
void report_hazard(const Hazard &h, const char *what, bool write) {
    char where[300];
    describe(h.addr, where, sizeof where);
    set_sticky(cudaErrorLaunchFailure,
               "stream race (%s) on %s: %s on stream %d %s it, %s on stream %d (its task %llu) "
               "%s it, and no stream order, event wait or host synchronisation orders the two",
               h.kind, where, what, t_cur.stream, write ? "writes" : "reads", h.other_name,
               ep_stream(h.other), (unsigned long long)ep_seq(h.other),
               h.other_write ? "wrote" : "read");
}

} // namespace

void sc_join(Clock &into, const Clock &from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++)
        if (from[i] > into[i]) into[i] = from[i];
}

void sc_task_begin(int stream, uint64_t seq, const Clock *vc, const char *what) {
    t_cur = Current{stream, seq, vc};
    if (!vc) return;
    std::lock_guard<std::mutex> lk(g_mu);
    std::vector<const char *> &names = g_names[stream];
    if (names.size() < seq) names.resize(seq, "an earlier task");
    names[seq - 1] = what;
}

void sc_task_end() {
    t_cur = Current{};
}

void sc_access(const void *p, size_t n, bool write, const char *what) {
    if (!t_cur.vc || n == 0) return;
    Hazard h;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_failed) return;
        uintptr_t a = (uintptr_t)p / SC_GRANULE * SC_GRANULE, end = (uintptr_t)p + n;
        while (a < end && !h.found) {
            if (a % SC_PAGE == 0 && end - a >= SC_PAGE) {
                touch_page(a, write, false, &h);
                a += SC_PAGE;
            } else {
                touch(a, write, false, &h);
                a += SC_GRANULE;
            }
        }
        g_failed = h.found;
    }
    if (h.found) report_hazard(h, what, write);
}

void sc_kernel_page(uintptr_t addr, const uint8_t *granules, const char *kernel) {
    if (!t_cur.vc) return;
    Hazard h;
    bool write = false;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_failed) return;
        bool same = granules[0] != 0;
        for (unsigned i = 1; i < SC_CELLS && same; i++)
            same = granules[i] == granules[0];
        if (same) { /* the whole page alike (a tensor's middle) */
            write = (granules[0] & SC_WRITE) != 0;
            touch_page(addr, write, (granules[0] & SC_ATOMIC) != 0, &h);
        }
        for (unsigned i = 0; i < SC_CELLS && !same && !h.found; i++) {
            if (!granules[i]) continue;
            write = (granules[i] & SC_WRITE) != 0;
            touch(addr + i * SC_GRANULE, write, (granules[i] & SC_ATOMIC) != 0, &h);
        }
        g_failed = h.found;
    }
    if (h.found) {
        char what[200];
        snprintf(what, sizeof what, "kernel %s", kernel);
        report_hazard(h, what, write);
    }
}

void sc_forget(const void *p, size_t n) {
    std::lock_guard<std::mutex> lk(g_mu);
    uintptr_t a = (uintptr_t)p, end = a + n;
    while (a < end) {
        uint64_t pg = a / SC_PAGE;
        uintptr_t pend = (pg + 1) * SC_PAGE < end ? (pg + 1) * SC_PAGE : end;
        auto it = g_pages.find(pg);
        if (it != g_pages.end()) {
            if (a % SC_PAGE == 0 && pend - a == SC_PAGE) {
                if (pg == g_last_pg) g_last_pg = ~0ull;
                delete it->second;
                g_pages.erase(it);
            } else {
                memset(&cells(it->second)[(a % SC_PAGE) / SC_GRANULE], 0,
                       (pend - a + SC_GRANULE - 1) / SC_GRANULE * sizeof(Cell));
            }
        }
        a = pend;
    }
    if (g_pages.size() < SC_PAGES_MAX) g_full = false;
}

/* ---- host guards ------------------------------------------------------------------------- */
namespace {

struct Guard {
    uintptr_t lo, hi;           /* the whole pages protected */
    uintptr_t copy_lo, copy_hi; /* the copy's host range */
    bool dev_writes;            /* device to host: the host may neither read nor write */
    int stream;
    uint64_t seq;
    const char *what;
};
std::mutex g_gmu; /* guards the two below */
std::vector<Guard> g_guards;
std::unordered_map<uint64_t, std::pair<int, int>> g_prot; /* page: guards writing, reading */
thread_local uintptr_t t_step_page; /* opened for this thread's next instruction */

void guard_pages(const Guard &g, int delta) {
    for (uintptr_t a = g.lo; a < g.hi; a += SC_PAGE) {
        std::pair<int, int> &c = g_prot[a / SC_PAGE];
        (g.dev_writes ? c.first : c.second) += delta;
        int prot = c.first ? PROT_NONE : c.second ? PROT_READ : PROT_READ | PROT_WRITE;
        mprotect((void *)a, SC_PAGE, prot);
        if (!c.first && !c.second) g_prot.erase(a / SC_PAGE);
    }
}

} // namespace

void sc_guard(const void *host, size_t n, bool dev_writes, int stream, uint64_t seq,
              const char *what) {
    uintptr_t p = (uintptr_t)host;
    uintptr_t lo = p / SC_PAGE * SC_PAGE, hi = (p + n + SC_PAGE - 1) / SC_PAGE * SC_PAGE;
    Guard g{lo, hi, p, p + n, dev_writes, stream, seq, what};
    std::lock_guard<std::mutex> lk(g_gmu);
    g_guards.push_back(g);
    guard_pages(g, 1);
}

void sc_host_synced(const Clock &host) {
    std::lock_guard<std::mutex> lk(g_gmu);
    for (size_t i = 0; i < g_guards.size();) {
        const Guard &g = g_guards[i];
        if ((size_t)g.stream < host.size() && host[(size_t)g.stream] >= g.seq) {
            guard_pages(g, -1);
            g_guards[i] = g_guards.back();
            g_guards.pop_back();
        } else {
            i++;
        }
    }
}

/* In a signal handler: the faulting thread runs host code, which never holds g_gmu, so waiting
 * for another thread to release it is safe. */
static void lock_in_handler() {
    while (!g_gmu.try_lock())
        sched_yield();
}

int sc_guard_fault(uintptr_t a, bool write, char *msg, size_t cap) {
    lock_in_handler();
    int found = GF_NONE;
    for (const Guard &g : g_guards) {
        if (a < g.lo || a >= g.hi) continue;
        found = GF_STEP;
        if (a < g.copy_lo || a >= g.copy_hi || (!g.dev_writes && !write)) continue;
        snprintf(msg, cap,
                 "host code %s pinned memory at %#lx, byte %zu of the %zu bytes that %s on stream "
                 "%d (its task %llu) %s, before the host synchronised with that copy "
                 "(cudaEventSynchronize on an event recorded after it, cudaStreamSynchronize, "
                 "or a successful query)",
                 write ? "writes" : "reads", (unsigned long)a, (size_t)(a - g.copy_lo),
                 (size_t)(g.copy_hi - g.copy_lo), g.what, g.stream, (unsigned long long)g.seq,
                 g.dev_writes ? "writes" : "reads");
        found = GF_HAZARD;
        break;
    }
    if (found == GF_STEP) { /* another byte of a guarded page: one instruction, then closed */
        t_step_page = a / SC_PAGE * SC_PAGE;
        mprotect((void *)t_step_page, SC_PAGE, PROT_READ | PROT_WRITE);
    }
    g_gmu.unlock();
    return found;
}

bool sc_guard_restep() {
    if (!t_step_page) return false;
    lock_in_handler();
    auto it = g_prot.find(t_step_page / SC_PAGE);
    int prot = it == g_prot.end()  ? PROT_READ | PROT_WRITE
               : it->second.first  ? PROT_NONE
               : it->second.second ? PROT_READ
                                   : PROT_READ | PROT_WRITE;
    mprotect((void *)t_step_page, SC_PAGE, prot);
    t_step_page = 0;
    g_gmu.unlock();
    return true;
}

} // namespace zs_emu

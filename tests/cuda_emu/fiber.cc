/* Kernel execution on the emulated GPU: a grid runs block by block on its stream's worker
 * thread, and each thread of a block is a fiber with a stack of its own, so __syncthreads and
 * warp operations suspend a thread until its block (or warp) catches up, as on a GPU.
 *
 * Fibers start lazily and a finished fiber's stack serves the next one, so a kernel without
 * barriers needs one stack. Which ready thread runs next follows one of the orders of
 * emu_internal.h (Sched), drawn per block from the launch's seed: threads shuffled at every
 * barrier, one warp running ahead to the next barrier, or threads switching at memory accesses
 * (the access hooks of check.cc call kernel_yield). Misuse that a GPU punishes with a hang or
 * undefined results is a fault here, reported with the kernel, block, thread and seed: a barrier
 * some threads never reach (or reach at a different __syncthreads), warp operations whose lanes
 * disagree on site or mask, a mask naming a lane that has exited, too much shared memory.
 *
 * Shared memory: each __shared__ array (static, or the launch's dynamic part) gets its own
 * place in the block's pool, poisoned, with a red zone after it, so the access hooks can hold
 * every access to the array's own bounds (and a write into a red zone is also caught when the
 * block ends). */
#include "cuda_emu.h"
#include "emu_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <deque>
#include <stdexcept>
#include <vector>

/* ---- context switch (x86-64 System V) -------------------------------------------------------- */

extern "C" void zs_emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" void zs_emu_ctx_start(void);

/* Saves the callee-saved registers and the SSE/x87 control words on the current stack, stores
 * the stack pointer in *save_sp, and resumes the context whose stack pointer is to_sp. A new
 * context starts in zs_emu_ctx_start, which calls r13(r12) and never returns. */
asm(R"(
    .text
    .globl zs_emu_ctx_switch
    .hidden zs_emu_ctx_switch
    .type zs_emu_ctx_switch,@function
zs_emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size zs_emu_ctx_switch,.-zs_emu_ctx_switch
    .globl zs_emu_ctx_start
    .hidden zs_emu_ctx_start
    .type zs_emu_ctx_start,@function
zs_emu_ctx_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size zs_emu_ctx_start,.-zs_emu_ctx_start
)");

namespace zs_emu {
namespace {

#define STACK_BYTES (256u << 10)
#define GUARD_BYTES 4096u
#define STATIC_SMEM_MAX (48u << 10)
#define SMEM_POISON 0xff
#define SMEM_REDZONE 0xa5
#define SMEM_RZ 64u     /* red zone bytes before and after every shared array */
#define SMEM_ARRAYS 64u /* most __shared__ arrays one block may declare */

struct Stack {
    char *lo; /* usable [lo, lo + STACK_BYTES), a guard page below */
};

/* Stacks are per worker thread and reused across launches. */
thread_local std::vector<Stack> t_free_stacks;

Stack stack_get() {
    if (!t_free_stacks.empty()) {
        Stack s = t_free_stacks.back();
        t_free_stacks.pop_back();
        return s;
    }
    void *p = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "cuda-emu: cannot map a fiber stack\n");
        abort();
    }
    mprotect(p, GUARD_BYTES, PROT_NONE); /* a runaway kernel stack faults, not corrupts */
    return Stack{(char *)p + GUARD_BYTES};
}

struct Fault : std::runtime_error {
    cudaError_t code;
    Fault(cudaError_t c, const std::string &m) : std::runtime_error(m), code(c) {}
};

enum FiberState { F_NEW, F_READY, F_BLOCKED, F_DONE };

struct Fiber {
    void *sp;
    Stack stack;
    zs_emu_thread_view view;
    int linear, warp, lane;
    FiberState state;
    const char *site; /* where it waits */
    uint64_t result;  /* a completed warp operation's value for this lane */
};

struct WarpOp {
    const char *site;
    unsigned mask, arrived;
    int kind, width;
    uint64_t val[32];
    int arg[32];
};

struct Rng {
    uint64_t s;
    uint64_t next() { /* splitmix64 */
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    template <typename T> void shuffle(std::vector<T> &v) {
        for (size_t i = v.size(); i > 1; i--)
            std::swap(v[i - 1], v[next() % i]);
    }
};

struct Block {
    const char *kernel;
    const std::function<void()> *body;
    dim3 grid, bdim;
    uint3 bid;
    uint64_t linear;
    int n; /* threads */
    int nwarps;
    std::vector<Fiber> fibers;
    std::vector<int> order; /* the order in which fibers start */
    std::deque<int> runq;   /* ready fibers (every order but LOCKSTEP) */
    std::vector<int> waiters;
    std::vector<uint32_t> ready_mask, new_mask; /* per warp (LOCKSTEP) */
    int cur_warp, last_lane, leader;
    int started, done, started_scan;
    const char *bar_site;
    int bar_count;
    std::vector<WarpOp> warps;
    std::vector<uint32_t> warp_syncs;
    /* shared memory: the pool, each byte's array, the arrays and their declaration sites */
    std::vector<unsigned char> pool;
    std::vector<uint16_t> owner;
    std::vector<SmemArray> arrays;
    std::vector<const void *> sites;
    size_t pool_used, budget_used, dyn;
    Sched sched;
    KernelCtx ctx;
    uint32_t interval;
    void *sched_sp;
    Rng rng;
    bool failed;
    cudaError_t fault_code;
    std::string fault;
};

thread_local Block *t_block;
thread_local Fiber *t_fiber;

[[noreturn]] void vfail(cudaError_t code, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    throw Fault(code, msg);
}

[[noreturn]] void fail(cudaError_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fail(cudaError_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
}

void fiber_entry(void *arg) {
    Fiber *f = (Fiber *)arg;
    Block *b = t_block;
    try {
        (*b->body)();
        check_thread_exit();
    } catch (const Fault &e) {
        if (!b->failed) {
            b->failed = true;
            b->fault_code = e.code;
            char where[160];
            snprintf(where, sizeof where, "thread (%u,%u,%u)", f->view.tid.x, f->view.tid.y,
                     f->view.tid.z);
            b->fault = std::string(e.what()) + " [" + where + "]";
        }
    }
    f->state = F_DONE;
    zs_emu_ctx_switch(&f->sp, b->sched_sp);
    __builtin_unreachable();
}

void start_fiber(Block *b, Fiber *f) {
    f->stack = stack_get();
    uint64_t *top = (uint64_t *)(f->stack.lo + STACK_BYTES - 16);
    top[-1] = (uint64_t)(uintptr_t)&zs_emu_ctx_start;
    top[-2] = 0;                                 /* rbp */
    top[-3] = 0;                                 /* rbx */
    top[-4] = (uint64_t)(uintptr_t)f;            /* r12: the argument */
    top[-5] = (uint64_t)(uintptr_t)&fiber_entry; /* r13: the function */
    top[-6] = 0;
    top[-7] = 0;
    uint32_t csr[2];
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    uint16_t fcw;
    asm volatile("fnstcw %0" : "=m"(fcw));
    csr[1] = fcw;
    memcpy(&top[-8], csr, 8);
    f->sp = &top[-8];
    f->state = F_READY;
    b->new_mask[(size_t)f->warp] &= ~(1u << f->lane);
    b->started++;
}

void yield_to_scheduler() {
    Fiber *f = t_fiber;
    zs_emu_ctx_switch(&f->sp, t_block->sched_sp);
}

void push_ready(Block *b, int id) {
    Fiber &f = b->fibers[(size_t)id];
    f.state = F_READY;
    if (b->sched == SCHED_LOCKSTEP)
        b->ready_mask[(size_t)f.warp] |= 1u << f.lane;
    else
        b->runq.push_back(id);
}

/* Make the given waiting fibers runnable, in a shuffled order. */
void release(Block *b, std::vector<int> &ids) {
    b->rng.shuffle(ids);
    for (int id : ids)
        push_ready(b, id);
}

/* LOCKSTEP: the lane after last_lane (cyclically) among the current warp's ready or unstarted
 * lanes; when it has none, the next warp that has. -1 when nothing can run. */
int pick_lockstep(Block *b) {
    for (int k = 0; k < b->nwarps; k++) {
        int w = (b->cur_warp + k) % b->nwarps;
        uint32_t m = b->ready_mask[(size_t)w] | b->new_mask[(size_t)w];
        if (!m) continue;
        int from = w == b->cur_warp ? b->last_lane + 1 : 0;
        uint32_t after = from >= 32 ? 0u : m & ~((1u << from) - 1u);
        int lane = __builtin_ctz(after ? after : m);
        b->cur_warp = w;
        b->last_lane = lane;
        b->ready_mask[(size_t)w] &= ~(1u << lane);
        return w * 32 + lane;
    }
    return -1;
}

/* The next fiber to run, by the block's order; starts it if it is new. nullptr: none. */
Fiber *pick(Block *b) {
    int id = -1;
    if (b->sched == SCHED_LOCKSTEP) {
        id = pick_lockstep(b);
    } else {
        if (b->sched == SCHED_WARP && b->leader >= 0) {
            /* the leading warp runs on while any of its threads can */
            for (auto it = b->runq.begin(); it != b->runq.end(); ++it)
                if (b->fibers[(size_t)*it].warp == b->leader) {
                    id = *it;
                    b->runq.erase(it);
                    break;
                }
            if (id < 0 && b->new_mask[(size_t)b->leader])
                id = b->leader * 32 + __builtin_ctz(b->new_mask[(size_t)b->leader]);
        }
        if (id < 0 && !b->runq.empty()) {
            id = b->runq.front();
            b->runq.pop_front();
        }
        while (id < 0 && b->started < b->n) {
            int c = b->order[(size_t)b->started_scan++];
            if (b->fibers[(size_t)c].state == F_NEW) id = c;
        }
        if (id >= 0) b->leader = b->fibers[(size_t)id].warp;
    }
    if (id < 0) return nullptr;
    Fiber *f = &b->fibers[(size_t)id];
    if (f->state == F_NEW) start_fiber(b, f);
    return f;
}

void describe_stuck(Block *b, char *buf, size_t cap) {
    int at_bar = 0, at_warp = 0;
    const char *wsite = nullptr;
    for (auto &f : b->fibers)
        if (f.state == F_BLOCKED) {
            if (b->bar_site && f.site == b->bar_site)
                at_bar++;
            else {
                at_warp++;
                wsite = f.site;
            }
        }
    if (at_bar)
        snprintf(buf, cap,
                 "%d of %d threads wait at __syncthreads (%s) that %d exited thread(s) never "
                 "reach%s",
                 at_bar, b->n, b->bar_site, b->done, at_warp ? " (others wait at a warp op)" : "");
    else
        snprintf(buf, cap,
                 "%d thread(s) wait at a warp operation (%s) whose other lanes exited or never "
                 "arrive",
                 at_warp, wsite ? wsite : "?");
}

/* A red zone of the pool that is no longer intact: the array before it, else nullptr. */
const SmemArray *smem_overrun(Block *b, size_t *at) {
    for (size_t i = 0; i < b->pool_used; i++)
        if (b->owner[i] == 0 && b->pool[i] != SMEM_REDZONE) {
            *at = i;
            const SmemArray *before = nullptr;
            for (auto &a : b->arrays)
                if (a.off + a.nbytes <= i) before = &a;
            return before ? before : &b->arrays[0];
        }
    return nullptr;
}

void pool_reset(Block *b) {
    b->arrays.clear();
    b->sites.clear();
    b->budget_used = b->dyn;
    memset(b->pool.data(), SMEM_REDZONE, b->pool.size());
    memset(b->owner.data(), 0, b->owner.size() * sizeof(uint16_t));
    b->pool_used = SMEM_RZ;
    if (b->dyn) {
        /* the launch's dynamic shared memory is the first array */
        b->arrays.push_back(SmemArray{"dynamic shared memory", b->pool_used, b->dyn});
        b->sites.push_back(nullptr);
        memset(b->pool.data() + b->pool_used, SMEM_POISON, b->dyn);
        for (size_t i = 0; i < b->dyn; i++)
            b->owner[b->pool_used + i] = 1;
        b->pool_used += b->dyn + SMEM_RZ;
    }
}

bool run_block(Block *b) {
    b->runq.clear();
    b->started = b->done = 0;
    b->started_scan = 0;
    b->bar_site = nullptr;
    b->bar_count = 0;
    b->cur_warp = 0;
    b->last_lane = -1;
    b->leader = -1;
    pool_reset(b);
    for (auto &w : b->warps)
        w.arrived = 0;
    for (auto &c : b->warp_syncs)
        c = 0;
    for (int w = 0; w < b->nwarps; w++) {
        int lanes = b->n - w * 32 < 32 ? b->n - w * 32 : 32;
        b->new_mask[(size_t)w] = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
        b->ready_mask[(size_t)w] = 0;
    }
    for (int i = 0; i < b->n; i++) {
        Fiber &f = b->fibers[(size_t)i];
        f.state = F_NEW;
        f.site = nullptr;
        f.view.bid = b->bid;
    }
    Sched sched = (Sched)settings().sched;
    if (sched == SCHED_MIX) sched = (Sched)(b->rng.next() % 3); /* FIFO, WARP, INTERLEAVE */
    if (counting()) sched = SCHED_LOCKSTEP; /* the profiler groups a warp's accesses */
    b->sched = sched;
    if (sched == SCHED_FIFO || sched == SCHED_INTERLEAVE) {
        b->rng.shuffle(b->order);
    } else { /* warps in a shuffled order, the lanes of each in order */
        std::vector<int> ws((size_t)b->nwarps);
        for (int w = 0; w < b->nwarps; w++)
            ws[(size_t)w] = w;
        b->rng.shuffle(ws);
        size_t k = 0;
        for (int w : ws)
            for (int l = 0; l < 32 && w * 32 + l < b->n; l++)
                b->order[k++] = w * 32 + l;
        b->cur_warp = ws[0];
    }
    b->interval++;
    KernelCtx &c = b->ctx;
    c.bid = b->bid;
    c.block = b->linear;
    c.pool = b->pool.data();
    c.pool_bytes = b->pool.size();
    c.owner = b->owner.data();
    c.arrays = b->arrays.data();
    c.narrays = b->arrays.size();
    c.warp_syncs = b->warp_syncs.data();
    c.interval = b->interval;
    c.sched = sched;
    c.rng = b->rng.next();
    c.check = settings().check != 0;
    c.count = counting();
    kernel_view_range(&c.view_lo, &c.view_hi);
    check_block_begin();
    for (;;) {
        Fiber *f = pick(b);
        if (!f) break;
        t_fiber = f;
        c.tid = f->linear;
        c.warp = f->warp;
        c.lane = f->lane;
        c.arrays = b->arrays.data();
        c.narrays = b->arrays.size();
        t_kctx = &c;
        zs_emu_ctx_switch(&b->sched_sp, f->sp);
        t_kctx = nullptr;
        t_fiber = nullptr;
        if (f->state == F_DONE) {
            t_free_stacks.push_back(f->stack);
            b->done++;
        }
        if (b->failed) break;
    }
    /* Fibers left suspended (after a fault) are abandoned; their stacks go back to the pool. */
    for (auto &f : b->fibers)
        if (f.state == F_BLOCKED || f.state == F_READY) {
            t_free_stacks.push_back(f.stack);
            f.state = F_DONE;
        }
    if (!b->failed && b->done != b->n) {
        char why[300];
        describe_stuck(b, why, sizeof why);
        b->failed = true;
        b->fault_code = cudaErrorLaunchFailure;
        b->fault = std::string("deadlock: ") + why;
    }
    size_t at = 0;
    const SmemArray *over = b->failed ? nullptr : smem_overrun(b, &at);
    if (over) {
        b->failed = true;
        b->fault_code = cudaErrorIllegalAddress;
        char msg[300];
        snprintf(msg, sizeof msg,
                 "shared memory written out of bounds: the red zone after __shared__ array '%s' "
                 "(%zu bytes) was overwritten at byte %zd relative to its start",
                 over->name, over->nbytes, (ssize_t)at - (ssize_t)over->off);
        b->fault = msg;
    }
    check_block_end();
    return !b->failed;
}

} // namespace

bool run_grid(const char *name, dim3 grid, dim3 block, size_t shmem,
              const std::function<void()> &body, uint64_t rng_seed, const Cost &cost) {
    Block b;
    b.kernel = name;
    b.body = &body;
    b.grid = grid;
    b.bdim = block;
    b.n = (int)(block.x * block.y * block.z);
    b.nwarps = (b.n + 31) / 32;
    b.fibers.resize((size_t)b.n);
    b.order.resize((size_t)b.n);
    b.warps.resize((size_t)b.nwarps);
    b.warp_syncs.resize((size_t)b.nwarps);
    b.ready_mask.resize((size_t)b.nwarps);
    b.new_mask.resize((size_t)b.nwarps);
    b.dyn = shmem;
    b.pool.resize(SMEM_RZ + shmem + SMEM_RZ + STATIC_SMEM_MAX + SMEM_ARRAYS * (SMEM_RZ + 16));
    b.owner.resize(b.pool.size());
    b.rng.s = rng_seed;
    b.failed = false;
    b.interval = 0;
    b.ctx.kernel = name;
    b.ctx.grid = grid;
    b.ctx.bdim = block;
    b.ctx.nthreads = b.n;
    for (int i = 0; i < b.n; i++) {
        Fiber &f = b.fibers[(size_t)i];
        f.linear = i;
        f.warp = i / 32;
        f.lane = i % 32;
        f.sp = nullptr;
        f.view.tid = uint3{(unsigned)i % block.x, (unsigned)(i / block.x) % block.y,
                           (unsigned)(i / (block.x * block.y))};
        f.view.bdim = block;
        f.view.gdim = grid;
        b.order[(size_t)i] = i;
    }
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    LaunchInfo li{name, grid, block, shmem, rng_seed, cost};
    std::vector<uint64_t> blocks;
    bool sampled = profile_sampling(li, nblocks, &blocks);
    bool shuffled = !sampled && nblocks <= (1u << 22);
    if (shuffled) {
        blocks.resize(nblocks);
        for (uint64_t i = 0; i < nblocks; i++)
            blocks[i] = i;
        b.rng.shuffle(blocks);
    }
    uint64_t count = sampled ? blocks.size() : nblocks;
    check_launch_begin(li);
    Block *saved = t_block;
    t_block = &b;
    bool ok = true;
    for (uint64_t k = 0; k < count && ok; k++) {
        if (sampled && !profile_block_budget(k)) break;
        uint64_t id = sampled || shuffled ? blocks[k] : k;
        b.linear = id;
        b.bid = uint3{(unsigned)(id % grid.x), (unsigned)(id / grid.x % grid.y),
                      (unsigned)(id / ((uint64_t)grid.x * grid.y))};
        ok = run_block(&b);
        if (ok) profile_block_done();
    }
    t_block = saved;
    check_launch_end(ok);
    if (!ok) {
        set_sticky(b.fault_code, "kernel %s, block (%u,%u,%u): %s", name, b.bid.x, b.bid.y, b.bid.z,
                   b.fault.c_str());
    }
    return ok;
}

void kernel_fault(cudaError_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
}

void kernel_yield() {
    Block *b = t_block;
    Fiber *f = t_fiber;
    if (!b || !f) return;
    if (b->sched == SCHED_INTERLEAVE) {
        /* back into the ready queue at a random place */
        f->state = F_READY;
        size_t at = b->runq.empty() ? 0 : (size_t)(b->rng.next() % (b->runq.size() + 1));
        b->runq.insert(b->runq.begin() + (ptrdiff_t)at, f->linear);
    } else {
        push_ready(b, f->linear);
    }
    zs_emu_ctx_switch(&f->sp, b->sched_sp);
}

thread_local KernelCtx *t_kctx;

const char *running_kernel(char *where, size_t cap) {
    if (!t_block) return nullptr;
    if (t_fiber)
        snprintf(where, cap, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", t_block->kernel,
                 t_block->bid.x, t_block->bid.y, t_block->bid.z, t_fiber->view.tid.x,
                 t_fiber->view.tid.y, t_fiber->view.tid.z);
    else
        snprintf(where, cap, "kernel %s", t_block->kernel);
    return where;
}

} // namespace zs_emu

using namespace zs_emu;

/* Outside a kernel (host code) there is no current thread: a kernel-only builtin used there is
 * a bug, reported the way a GPU cannot. */
static Block *need_block(const char *what) {
    if (!t_block || !t_fiber) {
        fprintf(stderr, "cuda-emu: %s used outside a kernel\n", what);
        abort();
    }
    return t_block;
}

extern "C" const zs_emu_thread_view *zs_emu_current(void) {
    need_block("threadIdx/blockIdx/blockDim/gridDim");
    return &t_fiber->view;
}

extern "C" void zs_emu_syncthreads(const char *site) {
    Block *b = need_block("__syncthreads");
    Fiber *f = t_fiber;
    if (b->bar_site && strcmp(b->bar_site, site) != 0)
        fail(cudaErrorLaunchFailure,
             "threads wait at two different __syncthreads (%s and %s): undefined on a GPU",
             b->bar_site, site);
    b->bar_site = site;
    f->state = F_BLOCKED;
    f->site = site;
    if (++b->bar_count == b->n) {
        check_barrier();
        b->ctx.interval = ++b->interval;
        b->waiters.clear();
        for (auto &g : b->fibers)
            if (g.state == F_BLOCKED && g.site == site) b->waiters.push_back(g.linear);
        b->bar_count = 0;
        b->bar_site = nullptr;
        release(b, b->waiters);
    }
    yield_to_scheduler();
}

namespace {
struct MmaLane {
    float *d;
    const uint32_t *a, *b;
    const float *c;
};

float bf16_lo(uint32_t r) {
    uint32_t b = r << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
float bf16_hi(uint32_t r) {
    uint32_t b = r & 0xffff0000u;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* D = A B + C of one m16n8k16 over the 32 lanes' fragments (the PTX ISA's layouts: groupID g =
 * lane / 4, t = lane % 4; A: registers 0..3 hold (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
 * (g+8, 2t+8..); B: registers 0, 1 hold (k = 2t..2t+1, n = g), (k = 2t+8.., n = g); C, D: (g, 2t),
 * (g, 2t+1), (g+8, 2t), (g+8, 2t+1)). */
void mma_16816(const MmaLane *l) {
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        const uint32_t *a = l[lane].a, *b = l[lane].b;
        const float *c = l[lane].c;
        for (int r = 0; r < 4; r++) {
            int row = g + (r & 1) * 8, col = 2 * t + (r >> 1) * 8;
            A[row][col] = bf16_lo(a[r]);
            A[row][col + 1] = bf16_hi(a[r]);
        }
        for (int r = 0; r < 2; r++) {
            B[2 * t + r * 8][g] = bf16_lo(b[r]);
            B[2 * t + r * 8 + 1][g] = bf16_hi(b[r]);
        }
        C[g][2 * t] = c[0];
        C[g][2 * t + 1] = c[1];
        C[g + 8][2 * t] = c[2];
        C[g + 8][2 * t + 1] = c[3];
    }
    float D[16][8];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float acc = C[i][j];
            for (int k = 0; k < 16; k++)
                acc += A[i][k] * B[k][j]; /* the product is exact in fp32 */
            D[i][j] = acc;
        }
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        float *d = l[lane].d;
        d[0] = D[g][2 * t];
        d[1] = D[g][2 * t + 1];
        d[2] = D[g + 8][2 * t];
        d[3] = D[g + 8][2 * t + 1];
    }
}
} // namespace

static uint64_t lane_result(const WarpOp &w, int lane) {
    int width = w.width, seg = lane / width * width, idx = lane % width, src = lane;
    switch (w.kind) {
    case ZS_EMU_SHFL_IDX:
        src = seg + ((w.arg[lane] % width + width) % width);
        break;
    case ZS_EMU_SHFL_XOR:
        src = lane ^ w.arg[lane];
        if (src / width != lane / width || src >= 32) src = lane;
        break;
    case ZS_EMU_SHFL_DOWN:
        src = idx + w.arg[lane] < width ? lane + w.arg[lane] : lane;
        break;
    case ZS_EMU_SHFL_UP:
        src = idx - w.arg[lane] >= 0 ? lane - w.arg[lane] : lane;
        break;
    case ZS_EMU_BALLOT: {
        unsigned bits = 0;
        for (int l = 0; l < 32; l++)
            if ((w.mask >> l & 1u) && w.val[l]) bits |= 1u << l;
        return bits;
    }
    default:
        return 0;
    }
    /* A source lane outside the mask did not take part: its value is undefined on a GPU. */
    if (!(w.mask >> src & 1u)) return 0xffffffffffffffffull;
    return w.val[src];
}

extern "C" uint64_t zs_emu_warp_op(const char *site, unsigned mask, int kind, uint64_t value,
                                   int arg, int width) {
    Block *b = need_block("a warp operation");
    Fiber *f = t_fiber;
    int base = f->warp * 32, lanes = b->n - base < 32 ? b->n - base : 32;
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(cudaErrorLaunchFailure, "warp operation at %s: width %d is not a power of two <= 32",
             site, width);
    if (!(mask >> f->lane & 1u))
        fail(cudaErrorLaunchFailure, "warp operation at %s: lane %d is not in its mask 0x%08x",
             site, f->lane, mask);
    if (lanes < 32 && (mask >> lanes))
        fail(cudaErrorLaunchFailure,
             "warp operation at %s: mask 0x%08x names lanes past the block's last thread", site,
             mask);
    WarpOp &w = b->warps[(size_t)f->warp];
    if (w.arrived == 0) {
        w.site = site;
        w.mask = mask;
        w.kind = kind;
        w.width = width;
    } else if (w.site != site && strcmp(w.site, site) != 0) {
        fail(cudaErrorLaunchFailure, "warp %d: lanes at different warp operations (%s and %s)",
             f->warp, w.site, site);
    } else if (w.mask != mask || w.kind != kind) {
        fail(cudaErrorLaunchFailure,
             "warp %d at %s: lanes disagree on the mask (0x%08x and 0x%08x) or the operation",
             f->warp, site, w.mask, mask);
    }
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1u) && b->fibers[(size_t)(base + l)].state == F_DONE)
            fail(cudaErrorLaunchFailure,
                 "warp operation at %s: lane %d of mask 0x%08x has already exited", site, l, mask);
    w.val[f->lane] = value;
    w.arg[f->lane] = arg;
    w.arrived |= 1u << f->lane;
    f->state = F_BLOCKED;
    f->site = site;
    if (w.arrived == mask) {
        check_warp_sync(f->warp);
        b->warp_syncs[(size_t)f->warp]++;
        if (kind == ZS_EMU_MMA) {
            if (mask != 0xffffffffu)
                fail(cudaErrorLaunchFailure,
                     "mma.sync at %s: not every lane of the warp takes part", site);
            MmaLane lanes[32];
            for (int l = 0; l < 32; l++)
                lanes[l] = *(const MmaLane *)(uintptr_t)w.val[l];
            mma_16816(lanes);
            profile_mma(4096.0);
        }
        b->waiters.clear();
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1u) {
                b->fibers[(size_t)(base + l)].result = lane_result(w, l);
                b->waiters.push_back(base + l);
            }
        w.arrived = 0;
        release(b, b->waiters);
    }
    yield_to_scheduler();
    return f->result;
}

extern "C" void zs_emu_mma_bf16_16816(const char *site, float d[4], const uint32_t a[4],
                                      const uint32_t b[2], const float c[4]) {
    Block *blk = need_block("mma.sync");
    Fiber *f = t_fiber;
    if (blk->n - f->warp * 32 < 32)
        fail(cudaErrorLaunchFailure, "mma.sync at %s: warp %d is not a full warp of 32 threads",
             site, f->warp);
    /* Each lane's fragments stay on its own stack while it waits: the last lane to arrive
     * computes for all of them. */
    MmaLane mine{d, a, b, c};
    float out[4];
    mine.d = out;
    (void)zs_emu_warp_op(site, 0xffffffffu, ZS_EMU_MMA, (uint64_t)(uintptr_t)&mine, 0, 32);
    memcpy(d, out, sizeof out);
}

extern "C" unsigned zs_emu_activemask(void) {
    Block *b = need_block("__activemask");
    int base = t_fiber->warp * 32;
    unsigned m = 0;
    for (int l = 0; l < 32 && base + l < b->n; l++)
        if (b->fibers[(size_t)(base + l)].state != F_DONE) m |= 1u << l;
    return m;
}

extern "C" void *zs_emu_shared(const void *site, size_t nbytes, size_t align, const char *name) {
    Block *b = need_block("shared memory");
    for (size_t i = 0; i < b->sites.size(); i++)
        if (b->sites[i] == site) return b->pool.data() + b->arrays[i].off;
    /* The budget counts the arrays as a GPU packs them; the pool spaces them by red zones. */
    size_t budget = (b->budget_used + align - 1) / align * align + nbytes;
    if (budget > STATIC_SMEM_MAX)
        fail(cudaErrorLaunchOutOfResources,
             "shared memory: %zu static bytes plus %zu dynamic exceed the %u bytes a block may "
             "use without opting in",
             budget - b->dyn, b->dyn, STATIC_SMEM_MAX);
    if (b->arrays.size() >= SMEM_ARRAYS)
        fail(cudaErrorLaunchOutOfResources, "more than %u __shared__ arrays in one block",
             SMEM_ARRAYS);
    /* Each array at exactly the alignment its type declares, never more (an odd multiple of
     * it), so that a wider access the declaration does not allow (a uint2 store into a
     * uint16_t array) is a misaligned address here as it may be on a GPU (check.cc). */
    size_t off = (b->pool_used + align - 1) / align * align;
    if (align < 16 && off % (2 * align) == 0) off += align;
    b->budget_used = budget;
    b->arrays.push_back(SmemArray{name, off, nbytes});
    b->sites.push_back(site);
    b->ctx.arrays = b->arrays.data();
    b->ctx.narrays = b->arrays.size();
    memset(b->pool.data() + off, SMEM_POISON, nbytes);
    for (size_t i = 0; i < nbytes; i++)
        b->owner[off + i] = (uint16_t)b->arrays.size();
    b->pool_used = off + nbytes + SMEM_RZ;
    return b->pool.data() + off;
}

extern "C" void *zs_emu_dyn_shared(void) {
    Block *b = need_block("dynamic shared memory");
    return b->dyn ? b->pool.data() + b->arrays[0].off : nullptr;
}

extern "C" void zs_emu_trap(const char *what) {
    need_block("__trap");
    fail(cudaErrorAssert, "device-side trap at %s", what);
}

/* Kernel execution on the emulated GPU: a grid runs block by block on its stream's worker
 * thread, and each thread of a block is a fiber with a stack of its own, so __syncthreads and
 * warp operations (warp.cc) suspend a thread until its block (or warp) catches up, as on a GPU.
 *
 * Fibers start lazily and a finished fiber's stack serves the next one, so a kernel without
 * barriers needs one stack. Which ready thread runs next follows one of the orders of
 * emu_internal.h (Sched), drawn per block from the launch's seed: threads shuffled at every
 * barrier, one warp running ahead to the next barrier, or threads switching at memory accesses
 * (the access hooks of check.cc call kernel_yield). Misuse that a GPU punishes with a hang or
 * undefined results is a fault here, reported with the kernel, block, thread and seed: a barrier
 * some threads never reach (or reach at a different __syncthreads), warp operations whose lanes
 * disagree on site or mask, a mask naming a lane that has exited, too much shared memory. A block
 * whose threads all wait is a deadlock; a red zone of its shared memory (smem.cc) that was
 * written fails it when it ends. */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "fiber_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <stdexcept>
#include <vector>

/* ---- context switch (x86-64 System V) -------------------------------------------------------- */

extern "C" void zs_emu_ctx_start(void);

/* zs_emu_ctx_switch (fiber_internal.h) saves the callee-saved registers and the SSE/x87 control
 * words on the current stack, stores the stack pointer in *save_sp, and resumes the context whose
 * stack pointer is to_sp. A new context starts in zs_emu_ctx_start, which calls r13(r12) and never
 * returns. */
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

} // namespace

thread_local constinit Block *t_block;
thread_local constinit Fiber *t_fiber;

namespace {

[[noreturn]] void vfail(cudaError_t code, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    throw Fault(code, msg);
}

} // namespace

void fail(cudaError_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
}

namespace {

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

bool run_grid(const char *name, dim3 grid, dim3 block, size_t shmem, size_t smem_cap,
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
    b.smem_cap = smem_cap;
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

/* Internals of kernel execution shared by its files: the block being run, its threads (fibers)
 * and warps, and its shared-memory pool. fiber.cc runs grids (fibers, the thread orders),
 * warp.cc has the barriers and warp operations kernel code calls, smem.cc the shared memory.
 * Test infrastructure only. */
#ifndef ZS_CUDA_EMU_FIBER_INTERNAL_H
#define ZS_CUDA_EMU_FIBER_INTERNAL_H

#include "cuda_emu.h"
#include "emu_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

/* Suspend the running context (its stack pointer stored in *save_sp) and resume the one whose
 * stack pointer is to_sp (fiber.cc). */
extern "C" void zs_emu_ctx_switch(void **save_sp, void *to_sp);

namespace zs_emu {

#define SMEM_POISON 0xff
#define SMEM_REDZONE 0xa5
#define SMEM_RZ 64u     /* red zone bytes before and after every shared array */
#define SMEM_ARRAYS 64u /* most __shared__ arrays one block may declare */

struct Stack {
    char *lo; /* usable [lo, lo + STACK_BYTES), a guard page below */
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
    size_t smem_cap; /* static plus dynamic bytes allowed: SMEM_OPTIN_MAX where opted in */
    Sched sched;
    KernelCtx ctx;
    uint32_t interval;
    void *sched_sp;
    Rng rng;
    bool failed;
    cudaError_t fault_code;
    std::string fault;
};

/* The block and thread running on this host thread (fiber.cc); null outside a kernel. */
extern thread_local constinit Block *t_block;
extern thread_local constinit Fiber *t_fiber;

/* A fault in kernel code: unwinds the running thread, which fails its block (fiber.cc). */
[[noreturn]] void fail(cudaError_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Make fiber id runnable (its warp's ready mask in LOCKSTEP, else the back of the queue). */
inline void push_ready(Block *b, int id) {
    Fiber &f = b->fibers[(size_t)id];
    f.state = F_READY;
    if (b->sched == SCHED_LOCKSTEP)
        b->ready_mask[(size_t)f.warp] |= 1u << f.lane;
    else
        b->runq.push_back(id);
}

/* Outside a kernel (host code) there is no current thread: a kernel-only builtin used there is
 * a bug, reported the way a GPU cannot. */
inline Block *need_block(const char *what) {
    if (!t_block || !t_fiber) {
        fprintf(stderr, "cuda-emu: %s used outside a kernel\n", what);
        abort();
    }
    return t_block;
}

/* ---- shared memory (smem.cc) ----------------------------------------------------------------- */
/* A red zone of the pool that is no longer intact: the array before it, else nullptr. */
const SmemArray *smem_overrun(Block *b, size_t *at);
/* Lay out the pool for a new block: red zones, and the launch's dynamic part as the first array. */
void pool_reset(Block *b);

} // namespace zs_emu

#endif

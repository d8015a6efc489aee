/* The emulated GPU as a sanitizer (docs/cuda.md, "The checker"): every load and store of the
 * emulated kernels reaches the hooks below, because the .cu files are compiled with GCC's
 * thread-sanitizer instrumentation (-fsanitize=thread) and this file is the runtime those
 * calls land in (not libtsan: the calls are ours to interpret). Kernel sources stay as they are.
 *
 * For every access by a kernel thread (t_kctx set) to the block's shared memory or to device
 * memory:
 *  - bounds: a shared access must lie inside one __shared__ array (each has its own bounds and
 *    red zones, smem.cc); anything else is a fault naming the array and the offset;
 *  - races (ZS_EMU_CHECK=1, like compute-sanitizer's racecheck): two threads of a block that
 *    touch the same byte within one barrier interval, at least one writing, are a hazard unless
 *    both accesses are atomics, or the threads share a warp and a warp operation (shuffle, vote,
 *    __syncwarp) of that warp lies between them. Two blocks of one launch that touch the same
 *    device byte, one writing without an atomic, are a hazard whatever the barriers. A hazard
 *    fails the launch with a report naming the kernel, block, both threads, the array or
 *    allocation with its offset, and the source line (addr2line);
 *  - the profiler (profile.cc) when it records;
 *  - the INTERLEAVE order switches threads here, at random, so a race within one barrier
 *    interval also gives wrong numbers with the checker off.
 * Test infrastructure only. */
#include "emu_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace zs_emu {

void profile_access(const KernelCtx &c, uintptr_t addr, unsigned size, bool write, bool atomic,
                    bool shared, const void *pc);

namespace {

#define NONE 0xffffffffu
#define PAGE_BYTES 4096u
#define GRANULE 2u /* device memory is tracked per 2 bytes: bf16 elements of different threads */
#define GLOBAL_PAGES_MAX 8192u /* 32 MiB of device memory tracked per launch */

/* The source line of a code address, "file:line", or "?" (addr2line on the object holding it). */
std::string source_line(const void *pc) {
    Dl_info di;
    if (!pc || !dladdr(pc, &di) || !di.dli_fname) return "?";
    uintptr_t off = (uintptr_t)pc - 1;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)di.dli_fbase;
    if (eh && eh->e_type == ET_DYN) off -= (uintptr_t)di.dli_fbase;
    const char *file = di.dli_fname;
    char self[4096];
    if (!file[0] || strchr(file, '/') == nullptr) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = 0;
            file = self;
        }
    }
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "addr2line -i -e '%s' 0x%lx 2>/dev/null", file, (unsigned long)off);
    FILE *p = popen(cmd, "r");
    if (!p) return "?";
    char line[1024] = "";
    std::string out;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '?') continue;
        const char *base = strstr(line, "src/");
        if (!base) base = strstr(line, "tests/");
        if (!out.empty()) out += " <- ";
        out += base ? base : line;
        if (out.size() > 300) break;
    }
    pclose(p);
    return out.empty() ? "?" : out;
}

/* ---- shared memory: one cell per byte of the block's pool --------------------------------- */
struct SCell {
    uint32_t w_int, r_int;   /* barrier interval of the last write / reads */
    uint32_t w_sync, r_sync; /* the warp's synchronisations at that write / the latest read */
    uint16_t w_tid, r_tid;   /* the writer; the first reader of the interval */
    uint8_t w_atomic, r_flags;
    const void *w_pc, *r_pc;
};
enum { R_ATOMIC = 1, R_MANY = 2, R_MULTIWARP = 4 };

/* ---- device memory: one cell per 2-byte granule a launch touches --------------------------- */
struct GCell {
    uint32_t w_blk, r_blk; /* linear block of the writer / first reader (NONE: none) */
    uint32_t w_int, r_int;
    uint16_t w_tid, r_tid;
    uint8_t w_atomic, r_flags; /* R_ATOMIC, R_MANY (threads), R_MULTIWARP (blocks, here) */
    const void *w_pc, *r_pc;
};
struct GPage {
    GCell c[PAGE_BYTES / GRANULE];
};

struct Shadow {
    std::vector<SCell> smem;
    std::unordered_map<uint64_t, GPage *> pages;
    bool global_full; /* past GLOBAL_PAGES_MAX this launch */
    const char *kernel;
};
thread_local Shadow t_sh;

void clear_pages() {
    for (auto &kv : t_sh.pages)
        delete kv.second;
    t_sh.pages.clear();
    t_sh.global_full = false;
}

GCell *gcell(uintptr_t a) {
    uint64_t page = a / PAGE_BYTES;
    auto it = t_sh.pages.find(page);
    if (it == t_sh.pages.end()) {
        if (t_sh.pages.size() >= GLOBAL_PAGES_MAX) {
            if (!t_sh.global_full) {
                static std::once_flag once;
                std::call_once(once, [] {
                    fprintf(stderr,
                            "cuda-emu: check: device-memory race tracking covers the first %u "
                            "MiB each launch touches\n",
                            GLOBAL_PAGES_MAX * PAGE_BYTES >> 20);
                });
            }
            t_sh.global_full = true;
            return nullptr;
        }
        GPage *p = new GPage;
        for (auto &c : p->c) {
            memset(&c, 0, sizeof c);
            c.w_blk = c.r_blk = NONE;
        }
        it = t_sh.pages.emplace(page, p).first;
    }
    return &it->second->c[(a % PAGE_BYTES) / GRANULE];
}

/* What a byte is, for reports: "__shared__ array 'red' (32 bytes), byte 4" or the allocation. */
std::string describe(const KernelCtx &c, uintptr_t a, bool shared) {
    char buf[300];
    if (shared) {
        size_t off = a - (uintptr_t)c.pool;
        uint16_t o = c.owner[off];
        if (o) {
            const SmemArray &s = c.arrays[o - 1];
            snprintf(buf, sizeof buf, "__shared__ array '%s' (%zu bytes), byte %zu", s.name,
                     s.nbytes, off - s.off);
        } else {
            snprintf(buf, sizeof buf, "shared memory outside every array (pool byte %zu)", off);
        }
        return buf;
    }
    describe_view(a, buf, sizeof buf);
    return buf;
}

[[noreturn]] void hazard(const KernelCtx &c, const char *kind, uintptr_t a, bool shared,
                         int this_tid, uint32_t this_blk, bool this_write, const void *this_pc,
                         int other_tid, uint32_t other_blk, bool other_write,
                         const void *other_pc) {
    std::string what = describe(c, a, shared);
    std::string here = source_line(this_pc), there = source_line(other_pc);
    char other[96];
    if (other_blk != NONE && other_blk != this_blk)
        snprintf(other, sizeof other, "block %u thread %d", other_blk, other_tid);
    else
        snprintf(other, sizeof other, "thread %d (warp %d)", other_tid, other_tid / 32);
    kernel_fault(cudaErrorLaunchFailure,
                 "race (%s) on %s: thread %d (warp %d) %s it at %s, %s %s it at %s%s", kind,
                 what.c_str(), this_tid, this_tid / 32, this_write ? "writes" : "reads",
                 here.c_str(), other, other_write ? "wrote" : "read", there.c_str(),
                 other_blk != NONE && other_blk != this_blk
                     ? " (blocks of one launch are not ordered)"
                     : " within one barrier interval");
}

/* Whether thread t's access is ordered after one by thread u of the same warp made when the
 * warp had completed `sync` warp operations. */
bool warp_ordered(const KernelCtx &c, int t, int u, uint32_t sync) {
    return t / 32 == u / 32 && c.warp_syncs[t / 32] > sync;
}

void check_shared(const KernelCtx &c, uintptr_t a, unsigned size, bool write, bool atomic,
                  const void *pc) {
    size_t off = a - (uintptr_t)c.pool;
    if (t_sh.smem.size() < c.pool_bytes) {
        t_sh.smem.resize(c.pool_bytes);
        memset(t_sh.smem.data(), 0, t_sh.smem.size() * sizeof(SCell));
    }
    int t = c.tid;
    uint32_t sync = c.warp_syncs[c.warp];
    for (unsigned i = 0; i < size; i++) {
        SCell &s = t_sh.smem[off + i];
        if (s.w_int == c.interval && s.w_tid != t && !(atomic && s.w_atomic) &&
            !warp_ordered(c, t, s.w_tid, s.w_sync))
            hazard(c, write ? "write after write" : "read after write", a + i, true, t, NONE, write,
                   pc, s.w_tid, NONE, true, s.w_pc);
        if (write && s.r_int == c.interval && (s.r_tid != t || (s.r_flags & R_MANY)) &&
            !(atomic && (s.r_flags & R_ATOMIC))) {
            bool ordered = !(s.r_flags & R_MULTIWARP) && warp_ordered(c, t, s.r_tid, s.r_sync);
            if (!ordered)
                hazard(c, "write after read", a + i, true, t, NONE, true, pc, s.r_tid, NONE, false,
                       s.r_pc);
        }
        if (write) {
            s.w_int = c.interval;
            s.w_tid = (uint16_t)t;
            s.w_sync = sync;
            s.w_atomic = atomic;
            s.w_pc = pc;
        } else if (s.r_int != c.interval) {
            s.r_int = c.interval;
            s.r_tid = (uint16_t)t;
            s.r_sync = sync;
            s.r_flags = atomic ? R_ATOMIC : 0;
            s.r_pc = pc;
        } else if (s.r_tid != t) {
            s.r_flags |= R_MANY;
            if (s.r_tid / 32 != t / 32) s.r_flags |= R_MULTIWARP;
            if (!atomic) s.r_flags &= (uint8_t)~R_ATOMIC;
            if (sync > s.r_sync) s.r_sync = sync;
        }
    }
}

void check_global(const KernelCtx &c, uintptr_t a, unsigned size, bool write, bool atomic,
                  const void *pc) {
    if (t_sh.global_full) return;
    int t = c.tid;
    uint32_t blk = (uint32_t)c.block;
    uintptr_t end = a + size;
    for (uintptr_t g = a / GRANULE * GRANULE; g < end; g += GRANULE) {
        GCell *s = gcell(g);
        if (!s) return;
        bool w_any = s->w_blk != NONE;
        if (w_any && !(atomic && s->w_atomic)) {
            if (s->w_blk != blk)
                hazard(c, write ? "write after write" : "read after write", g, false, t, blk, write,
                       pc, s->w_tid, s->w_blk, true, s->w_pc);
            if (s->w_int == c.interval && s->w_tid != t)
                hazard(c, write ? "write after write" : "read after write", g, false, t, blk, write,
                       pc, s->w_tid, NONE, true, s->w_pc);
        }
        if (write && s->r_blk != NONE && !(atomic && (s->r_flags & R_ATOMIC))) {
            if (s->r_blk != blk || (s->r_flags & R_MULTIWARP))
                hazard(c, "write after read", g, false, t, blk, true, pc, s->r_tid, s->r_blk, false,
                       s->r_pc);
            if (s->r_int == c.interval && (s->r_tid != t || (s->r_flags & R_MANY)))
                hazard(c, "write after read", g, false, t, blk, true, pc, s->r_tid, NONE, false,
                       s->r_pc);
        }
        if (write) {
            s->w_blk = blk;
            s->w_int = c.interval;
            s->w_tid = (uint16_t)t;
            s->w_atomic = atomic;
            s->w_pc = pc;
        } else if (s->r_blk == NONE) {
            s->r_blk = blk;
            s->r_int = c.interval;
            s->r_tid = (uint16_t)t;
            s->r_flags = atomic ? R_ATOMIC : 0;
            s->r_pc = pc;
        } else {
            if (s->r_blk != blk) s->r_flags |= R_MULTIWARP; /* readers in several blocks */
            if (s->r_int != c.interval) {
                s->r_int = c.interval;
                s->r_tid = (uint16_t)t;
                s->r_flags &= (uint8_t)~R_MANY;
            } else if (s->r_tid != t) {
                s->r_flags |= R_MANY;
            }
            if (!atomic) s->r_flags &= (uint8_t)~R_ATOMIC;
        }
    }
}

/* One access by the running kernel thread. */
inline void access(uintptr_t a, unsigned size, bool write, bool atomic, const void *pc) {
    KernelCtx *c = t_kctx;
    if (!c) return;
    bool shared = a - (uintptr_t)c->pool < c->pool_bytes;
    if (shared) {
        size_t off = a - (uintptr_t)c->pool;
        uint16_t o = c->owner[off];
        if (!o || off + size > c->pool_bytes || c->owner[off + size - 1] != o) {
            std::string line = source_line(pc);
            if (o) {
                const SmemArray &s = c->arrays[o - 1];
                kernel_fault(cudaErrorIllegalAddress,
                             "out-of-bounds shared memory %s of %u bytes at byte %zu of "
                             "__shared__ array '%s' (%zu bytes), at %s",
                             write ? "write" : "read", size, off - s.off, s.name, s.nbytes,
                             line.c_str());
            }
            const SmemArray *before = nullptr;
            for (size_t i = 0; i < c->narrays; i++)
                if (c->arrays[i].off < off) before = &c->arrays[i];
            if (before)
                kernel_fault(cudaErrorIllegalAddress,
                             "out-of-bounds shared memory %s of %u bytes at byte %zd of "
                             "__shared__ array '%s' (%zu bytes), at %s",
                             write ? "write" : "read", size, (ssize_t)(off - before->off),
                             before->name, before->nbytes, line.c_str());
            kernel_fault(cudaErrorIllegalAddress,
                         "shared memory %s of %u bytes outside every "
                         "__shared__ array, at %s",
                         write ? "write" : "read", size, line.c_str());
        }
    } else if (a < c->view_lo || a >= c->view_hi) {
        return; /* the thread's own stack (registers and local memory on a GPU), host memory */
    }
    /* a GPU's loads and stores of 2, 4, 8 and 16 bytes need addresses aligned to their size
     * (CUDA's "misaligned address"); a host CPU would take them unaligned without a word */
    if ((size & (size - 1)) == 0 && (a & (size - 1)) != 0) {
        std::string line = source_line(pc);
        kernel_fault(cudaErrorMisalignedAddress, "misaligned %u-byte %s of %s memory at %s", size,
                     write ? "write" : "read", shared ? "shared" : "device", line.c_str());
    }
    if (c->check) {
        if (shared)
            check_shared(*c, a, size, write, atomic, pc);
        else
            check_global(*c, a, size, write, atomic, pc);
    }
    if (c->count) profile_access(*c, a, size, write, atomic, shared, pc);
    if (c->sched == SCHED_INTERLEAVE) {
        /* switch often at shared accesses, now and then at device ones */
        c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((c->rng >> 59) < (shared ? 16u : 1u)) kernel_yield();
    }
}

} // namespace

void check_launch_begin(const LaunchInfo &l) {
    t_sh.kernel = l.name;
    if (!t_sh.smem.empty()) memset(t_sh.smem.data(), 0, t_sh.smem.size() * sizeof(SCell));
    clear_pages();
}
void check_block_begin() {}
void check_barrier() {
    profile_sync(-1);
}
void check_warp_sync(int warp) {
    profile_sync(warp);
}
void check_thread_exit() {}
void check_block_end() {
    profile_sync(-1);
}
void check_launch_end(bool ok) {
    if (ok && settings().check) { /* what the launch touched, for the stream checker */
        uint8_t g[PAGE_BYTES / GRANULE];
        for (auto &kv : t_sh.pages) {
            for (unsigned i = 0; i < PAGE_BYTES / GRANULE; i++) {
                const GCell &c = kv.second->c[i];
                bool w = c.w_blk != NONE, r = c.r_blk != NONE;
                bool atomic = w ? c.w_atomic != 0 : (c.r_flags & R_ATOMIC) != 0;
                int f = w ? SC_WRITE : r ? SC_READ : 0;
                g[i] = (uint8_t)(f && atomic ? f | SC_ATOMIC : f);
            }
            sc_kernel_page(kv.first * PAGE_BYTES, g, t_sh.kernel);
        }
    }
    clear_pages();
    profile_launch_end(ok);
}

} // namespace zs_emu

using namespace zs_emu;

/* ---- the instrumentation's entry points (GCC -fsanitize=thread) ----------------------------- */
#define RA __builtin_return_address(0)
extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
#define ZS_TSAN_RW(n)                                                                              \
    void __tsan_read##n(void *a) {                                                                 \
        access((uintptr_t)a, n, false, false, RA);                                                 \
    }                                                                                              \
    void __tsan_write##n(void *a) {                                                                \
        access((uintptr_t)a, n, true, false, RA);                                                  \
    }                                                                                              \
    void __tsan_unaligned_read##n(void *a) {                                                       \
        access((uintptr_t)a, n, false, false, RA);                                                 \
    }                                                                                              \
    void __tsan_unaligned_write##n(void *a) {                                                      \
        access((uintptr_t)a, n, true, false, RA);                                                  \
    }                                                                                              \
    void __tsan_volatile_read##n(void *a) {                                                        \
        access((uintptr_t)a, n, false, false, RA);                                                 \
    }                                                                                              \
    void __tsan_volatile_write##n(void *a) {                                                       \
        access((uintptr_t)a, n, true, false, RA);                                                  \
    }
ZS_TSAN_RW(1)
ZS_TSAN_RW(2)
ZS_TSAN_RW(4)
ZS_TSAN_RW(8)
ZS_TSAN_RW(16)
void __tsan_read_range(void *a, unsigned long n) {
    if (n) access((uintptr_t)a, (unsigned)n, false, false, RA);
}
void __tsan_write_range(void *a, unsigned long n) {
    if (n) access((uintptr_t)a, (unsigned)n, true, false, RA);
}

/* Atomics: done for real (blocks of different streams run on different host threads), and
 * recorded as atomic accesses. The memory order is always the strongest. */
#define ZS_TSAN_ATOMIC(n, T)                                                                       \
    T __tsan_atomic##n##_load(const volatile T *a, int) {                                          \
        access((uintptr_t)a, n / 8, false, true, RA);                                              \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                               \
    }                                                                                              \
    void __tsan_atomic##n##_store(volatile T *a, T v, int) {                                       \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                  \
    }                                                                                              \
    T __tsan_atomic##n##_exchange(volatile T *a, T v, int) {                                       \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) {                                      \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) {                                      \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) {                                      \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) {                                       \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                              \
    T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) {                                      \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {           \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
    }                                                                                              \
    int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {             \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
    }                                                                                              \
    T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                 \
        access((uintptr_t)a, n / 8, true, true, RA);                                               \
        __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
        return c;                                                                                  \
    }
ZS_TSAN_ATOMIC(8, uint8_t)
ZS_TSAN_ATOMIC(16, uint16_t)
ZS_TSAN_ATOMIC(32, uint32_t)
ZS_TSAN_ATOMIC(64, uint64_t)
void __tsan_atomic_thread_fence(int) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) {}
}

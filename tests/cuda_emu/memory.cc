/* Device memory of the emulated GPU. Every allocation is backed by its own memory file mapped
 * twice: at the address the host holds (the "device pointer") and, at a fixed distance, in the
 * kernel view that kernels, copies and library calls use. In strict mode the host's mapping is
 * inaccessible, so host code that dereferences a device pointer faults as it would on a GPU.
 *
 * Allocations are 256-byte aligned and placed with their end against an unmapped guard page,
 * so a kernel running past the end faults at once; the bytes between the requested size and
 * the 256-byte boundary are a red zone checked after each launch and at free. Fresh memory is
 * filled with 0xff (NaN as float and bfloat16, -1 as integers). Address ranges are not reused
 * until the reservation wraps, so a use after free faults too. */
#include "emu_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <mutex>

namespace zs_emu {
namespace {

#define RESERVE (256ull << 30) /* address space only: an H100's 80 GiB fits (predictions) */
#define PAGE 4096ull
#define POISON 0xff
#define REDZONE 0xa5

struct Rec {
    size_t nbytes;     /* requested */
    uintptr_t span_lo; /* first mapped page */
    size_t span_len;   /* mapped bytes (the guard page after them is not mapped) */
    bool light;        /* made while predicting: neither poisoned nor red-zoned */
};

std::mutex g_lock;
std::map<uintptr_t, Rec> g_dev; /* device pointer -> record */
/* A pinned buffer: its bytes, and (with ZS_EMU_CHECK) a second mapping of the same pages that
 * copies and kernels use, so that the host's own mapping can be protected while a copy is in
 * flight (the stream checker's host guards, streamcheck.cc). */
struct Pin {
    size_t nbytes, len;
    uintptr_t alias; /* 0: none */
};
std::map<uintptr_t, Pin> g_pinned; /* pinned host buffer -> record */
uintptr_t g_base, g_view, g_next;
size_t g_used;
std::once_flag g_once;

void reserve() {
    void *a = mmap(nullptr, RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *b = mmap(nullptr, RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) {
        fprintf(stderr, "cuda-emu: cannot reserve %llu GiB of address space for device memory\n",
                RESERVE >> 30);
        abort();
    }
    g_base = (uintptr_t)a;
    g_view = (uintptr_t)b;
    g_next = g_base;
    install_fault_handler();
}

bool in_dev(uintptr_t p) {
    return p >= g_base && p < g_base + RESERVE;
}
bool in_view(uintptr_t p) {
    return p >= g_view && p < g_view + RESERVE;
}

/* The live allocation whose span holds device address p (g_lock held), or end(). */
std::map<uintptr_t, Rec>::iterator find_span(uintptr_t p) {
    auto it = g_dev.upper_bound(p);
    if (it == g_dev.begin()) return g_dev.end();
    --it;
    if (p >= it->second.span_lo && p < it->second.span_lo + it->second.span_len + PAGE) return it;
    return g_dev.end();
}

void unmap_span(uintptr_t lo, size_t len) {
    /* Back to an inaccessible reservation in both views. */
    mmap((void *)lo, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
         0);
    mmap((void *)(lo - g_base + g_view), len, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

bool redzone_intact(uintptr_t p, const Rec &r, size_t *bad) {
    if (r.light) return true;
    const unsigned char *v = (const unsigned char *)(p - g_base + g_view);
    size_t n256 = (r.nbytes + 255) / 256 * 256;
    for (size_t i = r.nbytes; i < n256; i++)
        if (v[i] != REDZONE) {
            *bad = i;
            return false;
        }
    const unsigned char *lo = (const unsigned char *)(r.span_lo - g_base + g_view);
    for (const unsigned char *q = lo; q < v; q++)
        if (*q != REDZONE) {
            *bad = (size_t)(q - v); /* negative: before the start */
            return false;
        }
    return true;
}

} // namespace

void *dev_alloc(size_t nbytes) {
    std::call_once(g_once, reserve);
    size_t n256 = ((nbytes ? nbytes : 1) + 255) / 256 * 256;
    size_t len = (n256 + PAGE - 1) / PAGE * PAGE;
    std::lock_guard<std::mutex> lk(g_lock);
    if (g_used + nbytes > device_mem()) return nullptr;
    if (g_next + len + PAGE > g_base + RESERVE) {
        /* Wrapped: start over below the live allocations' spans is not tracked, so look for a
         * gap between live spans from the bottom. */
        uintptr_t at = g_base;
        for (auto &kv : g_dev) {
            if (kv.second.span_lo >= at + len + PAGE) break;
            at = kv.second.span_lo + kv.second.span_len + PAGE;
        }
        if (at + len + PAGE > g_base + RESERVE) return nullptr;
        g_next = at;
    }
    uintptr_t lo = g_next;
    g_next += len + PAGE; /* the guard page stays unmapped */
    int fd = memfd_create("zs-emu-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0) close(fd);
        return nullptr;
    }
    int host_prot = settings().strict ? PROT_NONE : PROT_READ | PROT_WRITE;
    void *a = mmap((void *)lo, len, host_prot, MAP_SHARED | MAP_FIXED, fd, 0);
    void *b = mmap((void *)(lo - g_base + g_view), len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, fd, 0);
    close(fd);
    if (a == MAP_FAILED || b == MAP_FAILED) {
        unmap_span(lo, len);
        return nullptr;
    }
    uintptr_t p = lo + len - n256;
    unsigned char *v = (unsigned char *)b;
    /* Cost-only predictions touch nothing they need not: pages stay unmapped until a sampled
     * block writes them. */
    if (!predicting()) {
        memset(v, REDZONE, len);
        memset(v + (p - lo), POISON, nbytes);
    }
    g_dev[p] = Rec{nbytes, lo, len, predicting()};
    g_used += nbytes;
    return (void *)p;
}

static bool dev_free_locked(void *ptr, uintptr_t *span_view, size_t *span_len) {
    std::lock_guard<std::mutex> lk(g_lock);
    auto it = g_dev.find((uintptr_t)ptr);
    if (it == g_dev.end()) return false;
    *span_view = it->second.span_lo - g_base + g_view;
    *span_len = it->second.span_len;
    size_t bad = 0;
    if (!redzone_intact(it->first, it->second, &bad))
        report("cudaFree(%p): the red zone of this %zu-byte allocation was overwritten (byte %zd "
               "relative to its start): something wrote out of bounds",
               ptr, it->second.nbytes, (ssize_t)bad);
    unmap_span(it->second.span_lo, it->second.span_len);
    g_used -= it->second.nbytes;
    g_dev.erase(it);
    return true;
}

bool dev_free(void *ptr) {
    uintptr_t span_view = 0;
    size_t span_len = 0;
    if (!dev_free_locked(ptr, &span_view, &span_len)) return false;
    sc_forget((const void *)span_view, span_len); /* the stream checker's record of it */
    return true;
}

void *pinned_alloc(size_t nbytes) {
    std::call_once(g_once, reserve);
    size_t len = ((nbytes ? nbytes : 1) + PAGE - 1) / PAGE * PAGE;
    void *p = MAP_FAILED, *alias = nullptr;
    if (settings().check) {
        int fd = memfd_create("zs-emu-pinned", MFD_CLOEXEC);
        if (fd < 0) return nullptr;
        if (ftruncate(fd, (off_t)len) == 0) {
            p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            alias = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        close(fd);
        if (p == MAP_FAILED || alias == MAP_FAILED) {
            if (p != MAP_FAILED) munmap(p, len);
            if (alias && alias != MAP_FAILED) munmap(alias, len);
            return nullptr;
        }
    } else {
        p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
    }
    memset(p, POISON, nbytes);
    std::lock_guard<std::mutex> lk(g_lock);
    g_pinned[(uintptr_t)p] = Pin{nbytes, len, (uintptr_t)alias};
    return p;
}

bool pinned_free(void *p) {
    Pin pin;
    {
        std::lock_guard<std::mutex> lk(g_lock);
        auto it = g_pinned.find((uintptr_t)p);
        if (it == g_pinned.end()) return false;
        pin = it->second;
        g_pinned.erase(it);
    }
    munmap(p, pin.len);
    if (pin.alias) {
        munmap((void *)pin.alias, pin.len);
        sc_forget((const void *)pin.alias, pin.len);
    }
    return true;
}

bool in_kernel_view(uintptr_t a) {
    return g_view && in_view(a);
}

void kernel_view_range(uintptr_t *lo, uintptr_t *hi) {
    std::call_once(g_once, reserve);
    *lo = g_view;
    *hi = g_view + RESERVE;
}

void describe_view(uintptr_t a, char *buf, size_t cap) {
    uintptr_t d = a - g_view + g_base;
    std::lock_guard<std::mutex> lk(g_lock);
    auto it = g_dev.upper_bound(d);
    if (it != g_dev.begin()) {
        --it;
        if (d >= it->first && d < it->first + it->second.nbytes) {
            snprintf(buf, cap, "a %zu-byte device allocation (device pointer %p), byte %zu",
                     it->second.nbytes, (void *)it->first, (size_t)(d - it->first));
            return;
        }
    }
    snprintf(buf, cap, "device address %p (in no live allocation)", (void *)d);
}

MemKind classify(const void *ptr, uintptr_t *base, size_t *nbytes) {
    uintptr_t p = (uintptr_t)ptr;
    std::call_once(g_once, reserve);
    std::lock_guard<std::mutex> lk(g_lock);
    if (in_dev(p)) {
        auto it = g_dev.upper_bound(p);
        if (it != g_dev.begin()) {
            --it;
            if (p >= it->first && p < it->first + (it->second.nbytes ? it->second.nbytes : 1)) {
                if (base) *base = it->first;
                if (nbytes) *nbytes = it->second.nbytes;
                return MEM_DEVICE;
            }
        }
        return MEM_NONE;
    }
    auto it = g_pinned.upper_bound(p);
    if (it != g_pinned.begin()) {
        --it;
        if (p >= it->first && p < it->first + it->second.nbytes) {
            if (base) *base = it->first;
            if (nbytes) *nbytes = it->second.nbytes;
            return MEM_PINNED;
        }
    }
    return MEM_NONE;
}

void *view(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    if (g_base && in_dev(p)) return (void *)(p - g_base + g_view);
    if (!settings().check) return (void *)ptr;
    std::lock_guard<std::mutex> lk(g_lock);
    auto it = g_pinned.upper_bound(p);
    if (it != g_pinned.begin()) {
        --it;
        if (it->second.alias && p >= it->first && p < it->first + it->second.len)
            return (void *)(it->second.alias + (p - it->first));
    }
    return (void *)ptr;
}

bool describe_pinned(uintptr_t a, char *buf, size_t cap) {
    std::lock_guard<std::mutex> lk(g_lock);
    for (auto &kv : g_pinned) {
        uintptr_t al = kv.second.alias, n = kv.second.nbytes;
        uintptr_t lo = al && a >= al && a < al + n ? al : kv.first;
        if (a >= lo && a < lo + n) {
            snprintf(buf, cap, "a %zu-byte pinned host allocation (%p), byte %zu", kv.second.nbytes,
                     (void *)kv.first, (size_t)(a - lo));
            return true;
        }
    }
    return false;
}

bool range_ok(const void *ptr, size_t n, char *why, size_t cap) {
    uintptr_t p = (uintptr_t)ptr;
    if (!g_base || !in_dev(p)) return true;
    uintptr_t base = 0;
    size_t nb = 0;
    if (classify(ptr, &base, &nb) != MEM_DEVICE) {
        snprintf(why, cap, "%p is not inside a live device allocation", ptr);
        return false;
    }
    if (p + n > base + nb) {
        snprintf(why, cap, "%zu bytes at %p run %zu bytes past the end of a %zu-byte allocation", n,
                 ptr, (size_t)(p + n - base - nb), nb);
        return false;
    }
    return true;
}

void mem_info(size_t *used, size_t *total) {
    std::lock_guard<std::mutex> lk(g_lock);
    *used = g_used;
    *total = device_mem();
}

void check_redzone(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    if (!g_base || !in_dev(p)) return;
    std::lock_guard<std::mutex> lk(g_lock);
    auto it = g_dev.upper_bound(p);
    if (it == g_dev.begin()) return;
    --it;
    if (p < it->first || p > it->first + it->second.nbytes) return;
    size_t bad = 0;
    if (!redzone_intact(it->first, it->second, &bad)) {
        /* Repair it so the next check reports the next overrun, not this one again. */
        unsigned char *v = (unsigned char *)view((void *)it->first);
        size_t n256 = (it->second.nbytes + 255) / 256 * 256;
        memset(v + it->second.nbytes, REDZONE, n256 - it->second.nbytes);
        set_sticky(cudaErrorIllegalAddress,
                   "a write %zd bytes from the start of a %zu-byte device allocation (%p) landed "
                   "in its red zone: out of bounds",
                   (ssize_t)bad, it->second.nbytes, (void *)it->first);
    }
}

/* ---- faults -------------------------------------------------------------------------------- */

static struct sigaction g_old_segv, g_old_bus;

static void on_fault(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    char msg[700], where[200], alloc[300] = "";
    const char *k = running_kernel(where, sizeof where);
    bool dev = in_dev(a), vw = in_view(a);
    if (dev || vw) {
        uintptr_t d = vw ? a - g_view + g_base : a;
        if (g_lock.try_lock()) {
            auto it = find_span(d);
            if (it != g_dev.end()) {
                long off = (long)(d - it->first);
                if (off >= 0 && (size_t)off < it->second.nbytes)
                    snprintf(alloc, sizeof alloc, " (byte %ld of a %zu-byte allocation at %#lx)",
                             off, it->second.nbytes, (unsigned long)it->first);
                else if (off >= 0)
                    snprintf(alloc, sizeof alloc,
                             " (%ld bytes past the end of a %zu-byte allocation at %#lx)",
                             off - (long)it->second.nbytes, it->second.nbytes,
                             (unsigned long)it->first);
                else
                    snprintf(alloc, sizeof alloc,
                             " (%ld bytes before the start of a %zu-byte allocation at %#lx)", -off,
                             it->second.nbytes, (unsigned long)it->first);
            } else {
                snprintf(alloc, sizeof alloc,
                         " (no live allocation there: freed or never allocated)");
            }
            g_lock.unlock();
        }
        if (dev && !k)
            snprintf(msg, sizeof msg,
                     "host code dereferenced device pointer %#lx%s: on a GPU this address is not "
                     "host memory (copy it with cudaMemcpy)",
                     (unsigned long)d, alloc);
        else
            snprintf(msg, sizeof msg, "%s: illegal access to device address %#lx%s",
                     k ? k : "a stream task (copy, memset, cuBLAS or NCCL)", (unsigned long)d,
                     alloc);
        report("%s", msg);
    } else if (k) {
        report("%s: illegal access at %#lx (a stack overflow, or host memory a GPU cannot read)", k,
               (unsigned long)a);
    } else {
        /* x86-64, as the fibers are: the page fault's error code says whether it wrote */
        bool write = (((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        int g = sc_guard_fault(a, write, msg, sizeof msg);
        if (g == GF_STEP) {
            ((ucontext_t *)uc)->uc_mcontext.gregs[REG_EFL] |= 0x100; /* trap after it */
            return;
        }
        if (g == GF_HAZARD) report("%s", msg);
    }
    /* Let the default action kill the process at the same instruction. */
    sigaction(sig, sig == SIGSEGV ? &g_old_segv : &g_old_bus, nullptr);
}

static struct sigaction g_old_trap;

/* The instruction a host guard let through has run: close its page again. */
static void on_trap(int sig, siginfo_t *si, void *uc) {
    (void)si;
    if (sc_guard_restep()) {
        ((ucontext_t *)uc)->uc_mcontext.gregs[REG_EFL] &= ~0x100;
        return;
    }
    sigaction(sig, &g_old_trap, nullptr);
    raise(sig);
}

void install_fault_handler() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    sigaction(SIGBUS, &sa, &g_old_bus);
    sa.sa_sigaction = on_trap;
    sigaction(SIGTRAP, &sa, &g_old_trap);
}

} // namespace zs_emu

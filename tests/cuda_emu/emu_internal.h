/* Internals of the emulated GPU shared by its files: device memory (memory.cc), streams and the
 * runtime API (runtime.cc), kernel execution on fibers (fiber.cc), cuBLAS (cublas.cc), NCCL
 * (nccl.cc). Test infrastructure only. */
#ifndef ZS_CUDA_EMU_INTERNAL_H
#define ZS_CUDA_EMU_INTERNAL_H

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <string>

namespace zs_emu {

/* ---- settings (environment, read once) ------------------------------------------------------ */
struct Settings {
    uint64_t seed;        /* ZS_EMU_SEED, else drawn at start */
    int strict;           /* ZS_EMU_STRICT: host code cannot read device memory (default 1) */
    int devices;          /* ZS_EMU_DEVICES: visible devices (default 1) */
    uint64_t device_mem;  /* ZS_EMU_DEVICE_MEM bytes per device (default 16 GiB) */
    int delay_us;         /* ZS_EMU_DELAY_US: random delay up to this before each stream task */
    std::string coverage; /* ZS_EMU_COVERAGE_DIR: kernel names launched, one file per process */
};
const Settings &settings();

/* Print "cuda-emu: <msg> (ZS_EMU_SEED=<seed> ...)" to stderr. */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- device memory (memory.cc) ----------------------------------------------------------------
 */
enum MemKind { MEM_NONE = 0, MEM_DEVICE, MEM_PINNED };

/* A fresh poisoned device allocation of nbytes (256-byte aligned, its end against a guard page).
 * nullptr when the device is full. */
void *dev_alloc(size_t nbytes);
/* Release; false if p is not the start of a live device allocation. */
bool dev_free(void *p);
void *pinned_alloc(size_t nbytes);
bool pinned_free(void *p);
/* What p points into, and the allocation's start and size (kind MEM_NONE: not ours). */
MemKind classify(const void *p, uintptr_t *base = nullptr, size_t *nbytes = nullptr);
/* The address kernels and stream tasks use for p: device memory's worker view, else p. */
void *view(const void *p);
/* Whether [p, p + n) lies inside one device allocation (or is host memory). */
bool range_ok(const void *p, size_t n, char *why, size_t cap);
/* Bytes of device memory in use, and the capacity. */
void mem_info(size_t *used, size_t *total);
/* Install the fault handler that names kernel and allocation for a bad access. */
void install_fault_handler();
/* The red zones after live allocations a launch touched: report writes past their end. */
void check_redzone(const void *p);

/* ---- streams (runtime.cc) -------------------------------------------------------------------- */
struct Stream;
Stream *stream_of(cudaStream_t s); /* nullptr handle -> the legacy default stream */
/* Queue fn on s (after the implicit dependencies of legacy/blocking streams); returns the task's
 * position on s, for wait_task. */
uint64_t enqueue(Stream *s, const char *what, std::function<void()> fn);
void wait_task(Stream *s, uint64_t seq);
/* Wait until everything queued on s so far has run. */
void stream_wait_host(Stream *s);
/* Set the sticky device error (first one wins); later API calls return it. */
void set_sticky(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t sticky();
/* Per host thread: the error cudaGetLastError returns (non-sticky ones). */
void set_last(cudaError_t e);
uint64_t next_launch_id();

/* ---- kernels (fiber.cc) ---------------------------------------------------------------------- */
/* Run a whole grid on the calling (worker) thread; false after a fault (reported and sticky). */
bool run_grid(const char *name, dim3 grid, dim3 block, size_t shmem,
              const std::function<void()> &body, uint64_t rng_seed);
/* Name of the kernel running on this host thread (fault messages), or nullptr. */
const char *running_kernel(char *where, size_t cap);

} // namespace zs_emu

#endif

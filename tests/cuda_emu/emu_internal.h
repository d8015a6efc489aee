/* Internals of the emulated GPU shared by its files: device memory (memory.cc), streams and the
 * runtime API (runtime.cc, runtime_streams.cc, runtime_launch.cc, runtime_memory.cc), kernel
 * execution on fibers
 * (fiber.cc, warp.cc, smem.cc), cuBLAS (cublas.cc, cublaslt.cc), NCCL (nccl.cc). Test
 * infrastructure only. */
#ifndef ZS_CUDA_EMU_INTERNAL_H
#define ZS_CUDA_EMU_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "emu_profile.h"

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <string>
#include <vector>

namespace zs_emu {

/* Shared memory a block may use: without the opt-in (and its static arrays, always), and with
 * cudaFuncAttributeMaxDynamicSharedMemorySize (an H100's sharedMemPerBlockOptin). */
#define STATIC_SMEM_MAX (48u << 10)
#define SMEM_OPTIN_MAX (227u << 10)

/* ---- settings (environment, read once) ------------------------------------------------------ */
struct Settings {
    uint64_t seed;        /* ZS_EMU_SEED, else drawn at start */
    int strict;           /* ZS_EMU_STRICT: host code cannot read device memory (default 1) */
    int devices;          /* ZS_EMU_DEVICES: visible devices (default 1) */
    uint64_t device_mem;  /* ZS_EMU_DEVICE_MEM bytes per device (default 16 GiB) */
    int delay_us;         /* ZS_EMU_DELAY_US: random delay up to this before each stream task */
    int copy_delay_us;    /* ZS_EMU_COPY_DELAY_US: a host<->device copy of pinned memory waits
                             this long on its stream first (a slow bus beside fast kernels) */
    std::string coverage; /* ZS_EMU_COVERAGE_DIR: kernel names launched, one file per process */
    int check;            /* ZS_EMU_CHECK: the race checker (check.cc) on every launch */
    int sched;            /* ZS_EMU_SCHED: thread orders (Sched; default SCHED_MIX) */
};
const Settings &settings();
/* The device memory reported and enforced: ZS_EMU_DEVICE_MEM, or an H100's 80 GiB once
 * predictions are enabled without it. */
uint64_t device_mem();
void set_device_mem(uint64_t bytes);

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
/* Whether a is in the kernel view of device memory (what kernels address), and its bounds. */
bool in_kernel_view(uintptr_t a);
void kernel_view_range(uintptr_t *lo, uintptr_t *hi);
/* "a 4096-byte device allocation (device pointer 0x...), byte 128" for a kernel-view address. */
void describe_view(uintptr_t a, char *buf, size_t cap);
/* "a 4096-byte pinned host allocation (0x...), byte 128" for a pinned address (the host's or
 * the copies' mapping); false if a is in none. */
bool describe_pinned(uintptr_t a, char *buf, size_t cap);
/* Install the fault handler that names kernel and allocation for a bad access. */
void install_fault_handler();
/* The red zones after live allocations a launch touched: report writes past their end. */
void check_redzone(const void *p);

/* ---- streams (runtime_streams.cc), errors (runtime.cc) --------------------------------------- */
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

/* The cost a launcher declared for the launch it is about to queue (ZS_COST): FLOPs on the
 * fp32 pipes, FLOPs on tensor cores, and the ideal bytes (inputs read once, outputs written
 * once). */
struct Cost {
    double flops, mma_flops, bytes;
    bool declared;
};

/* ---- kernels (fiber.cc) ---------------------------------------------------------------------- */
/* The orders in which a block's threads run between synchronisation points:
 *  - FIFO: released threads run in a shuffled order, each until it blocks (barrier, warp op,
 *    exit): no warp overtakes another inside a barrier interval;
 *  - WARP: one warp at a time runs ahead, through its warp operations, to the next barrier,
 *    before the others resume (a missing trailing barrier shows);
 *  - INTERLEAVE: threads also switch at shared- and global-memory accesses, at random (a
 *    read-modify-write race within one barrier interval shows);
 *  - LOCKSTEP: the lanes of a warp take turns, every 32 memory accesses, warp by warp (what the
 *    profiler needs to group the k-th accesses of a warp's lanes into one request);
 *  - MIX: FIFO, WARP or INTERLEAVE, drawn per block from the launch's seed (the default). */
enum Sched { SCHED_FIFO, SCHED_WARP, SCHED_INTERLEAVE, SCHED_LOCKSTEP, SCHED_MIX };

/* Run a whole grid on the calling (worker) thread; false after a fault (reported and sticky). */
bool run_grid(const char *name, dim3 grid, dim3 block, size_t shmem, size_t smem_cap,
              const std::function<void()> &body, uint64_t rng_seed, const Cost &cost);
/* Name of the kernel running on this host thread (fault messages), or nullptr. */
const char *running_kernel(char *where, size_t cap);

/* ---- what the access hooks see of the running thread (fiber.cc -> check.cc) ------------------ */
/* One __shared__ array of the running block: [off, off + nbytes) of its pool. */
struct SmemArray {
    const char *name;
    size_t off, nbytes;
};
struct KernelCtx {
    const char *kernel;
    dim3 grid, bdim;
    uint3 bid;
    uint64_t block; /* linear block index */
    int nthreads;
    int tid, warp, lane; /* the running thread */
    unsigned char *pool; /* the block's shared memory: arrays separated by red zones */
    size_t pool_bytes;
    const uint16_t *owner; /* per pool byte: 1 + index into arrays, 0 for a red zone */
    const SmemArray *arrays;
    size_t narrays;
    const uint32_t *warp_syncs; /* per warp: warp synchronisations completed */
    uint32_t interval;          /* this block's barrier interval, unique per launch */
    Sched sched;
    uint64_t rng;
    bool check, count;          /* the race checker on; the profiler counting */
    uintptr_t view_lo, view_hi; /* the kernel view of device memory */
};
extern thread_local KernelCtx *t_kctx; /* non-null while a kernel thread runs */
/* A fault in kernel code (the launch fails with code, naming kernel, block and thread). */
[[noreturn]] void kernel_fault(cudaError_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Give the other threads of the block a turn (the INTERLEAVE and LOCKSTEP orders). */
void kernel_yield();

/* ---- the checker and the profiler (check.cc, profile.cc) ------------------------------------ */
/* Per launch, on the stream worker that runs it. */
struct LaunchInfo {
    const char *name;
    dim3 grid, block;
    size_t shmem;
    uint64_t serial;
    Cost cost;
};
void check_launch_begin(const LaunchInfo &l);
void check_block_begin();       /* t_kctx describes the new block */
void check_barrier();           /* every thread of the block passed a __syncthreads */
void check_warp_sync(int warp); /* a warp operation of warp completed */
void check_thread_exit();       /* t_kctx's thread returned */
void check_block_end();
void check_launch_end(bool ok);
/* Whether this launch runs only the listed blocks (cost-only prediction: a sample, or none
 * when it is priced as an identical earlier launch). */
bool profile_sampling(const LaunchInfo &l, uint64_t nblocks, std::vector<uint64_t> *blocks);
/* Whether a sampled grid may run another block (false once it has enough accesses). */
bool profile_block_budget(uint64_t blocks_run);
void profile_block_done();
/* The cost declared on this host thread for its next launch (zeros, not declared, if none). */
Cost take_declared_cost();
/* Record a priced library call or copy (while recording), made by the running stream task. */
void profile_record(const struct zs_emu_record &r);
/* The predicted seconds of the records this thread's stream task made since the last call. */
double profile_task_take();
/* Record host work (a host range, not a stream task: it adds to no task's length). */
void profile_host_record(const struct zs_emu_record &r);
/* The timeline (runtime_streams.cc): start it again at 0 (streams drained first), and its end
 * so far: the last task's end on any stream, or the latest host thread's clock. */
void timeline_reset();
double timeline_end();
/* The running block reached a synchronisation point: warp (or every warp, -1) has no access
 * pending any more (the profiler closes its requests). */
void profile_sync(int warp);
/* A warp's tensor-core instruction of flops FLOPs completed (counted, not declared). */
void profile_mma(double flops);
void profile_launch_end(bool ok);
bool profiling();  /* counts are being recorded */
bool predicting(); /* cost only: GEMMs priced not run, grids sampled, no poison */
bool counting();   /* either: kernels' accesses are counted */

/* ---- the stream checker (streamcheck.cc), with ZS_EMU_CHECK ---------------------------------- */
/* A vector clock: per stream id, the position of its last task ordered before (0: none). */
typedef std::vector<uint64_t> Clock;
void sc_join(Clock &into, const Clock &from);
/* The stream worker starts (ends) task seq of stream, whose clock is vc (nullptr: unchecked). */
void sc_task_begin(int stream, uint64_t seq, const Clock *vc, const char *what);
void sc_task_end();
/* The running task reads or writes [p, p + n) (device memory by its view address, or pinned). */
void sc_access(const void *p, size_t n, bool write, const char *what);
/* The running kernel's accesses to one 4096-byte page at addr (check.cc's summary of the
 * launch), per 2-byte granule: 0 untouched, else SC_READ or SC_WRITE, with SC_ATOMIC. */
enum { SC_READ = 1, SC_WRITE = 2, SC_ATOMIC = 4 };
void sc_kernel_page(uintptr_t addr, const uint8_t *granules, const char *kernel);
/* [p, p + n) was freed: what was recorded there is forgotten. */
void sc_forget(const void *p, size_t n);
/* Host guards: the host's pages of [host, host + n) are protected while the copy, task seq of
 * stream, is in flight (no access if the device writes them, no writes if it reads them). */
void sc_guard(const void *host, size_t n, bool dev_writes, int stream, uint64_t seq,
              const char *what);
/* The host has synchronised with everything host orders: the guards it covers are lifted. */
void sc_host_synced(const Clock &host);
/* A host fault at a: GF_NONE (not a guard's), GF_HAZARD (msg says which copy), GF_STEP (another
 * byte of a guarded page: opened for one instruction; set the trap flag, then
 * sc_guard_restep() at the trap closes it; false if this thread opened none). */
enum { GF_NONE, GF_HAZARD, GF_STEP };
int sc_guard_fault(uintptr_t a, bool write, char *msg, size_t cap);
bool sc_guard_restep();
/* Guard the host's side of a copy just queued on s as its task seq (runtime_streams.cc). */
void guard_host(Stream *s, uint64_t seq, const void *host, size_t n, bool dev_writes,
                const char *what);

/* One cuBLAS product's context (cublas.cc blas_gemm): the stream it is queued on, the math
 * mode, the entry point's name for reports, and cublasLtMatmul's bias epilogue (fp32, one per
 * row of D; nullptr: none) with its GELU (aux non-NULL: the biased sum stored there in D's type,
 * ld aux_ld, and D = gelu of it). */
struct BlasCall {
    cudaStream_t stream;
    cublasMath_t math;
    const char *api;
    const float *bias;
    void *aux;
    int aux_ld;
    float *bgrad; /* BGRADB (cublaslt.cc): op(B)'s column sums written here */
    bool dgelu;   /* DGELU_BGRAD: aux (read) is the GELU's input, D = gelu'(aux) times the fp32
                   * result, and bgrad receives D's row sums before its rounding */
    const void *cin; /* cublasLtMatmul's C where it is not D (nullptr: C is D), in D's type and
                      * leading dimension: copied into D before the product adds beta times it */
};

/* cublasGemmEx's and cublasLtMatmul's product, checked as cuBLAS checks it (cublas.cc). */
cublasStatus_t blas_gemm(const BlasCall &call, cublasOperation_t transa, cublasOperation_t transb,
                         int m, int n, int k, const void *alpha, const void *A, cudaDataType at,
                         int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                         long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                         long long sc, int batch, cublasComputeType_t comp);

} // namespace zs_emu

#endif

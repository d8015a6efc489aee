/* The emulated GPU, kernel side (docs/architecture.md "The emulated GPU", docs/cuda.md "The
 * emulated GPU"): included by src/backend/cuda/cuda_internal.h when the project's .cu files are
 * compiled a second time as host C++ (-DZS_CUDA_EMU=1). It gives kernel code what nvcc would:
 * threadIdx and friends, __syncthreads, warp shuffles and votes, shared memory, atomics, and the
 * launch that the sources write as ZS_LAUNCH(kernel, grid, block, shmem, stream, args...).
 *
 * A launch is queued on its stream like a real one; when the stream's worker reaches it, the
 * grid runs block by block (in a shuffled order) and every thread of a block runs as a fiber,
 * so barriers and warp operations block and resume exactly where a GPU's threads would. The
 * order of threads is shuffled at the start of each block and at every barrier, from the seed
 * the emulator prints with any failure (ZS_EMU_SEED reproduces it). Pointer arguments are
 * translated to the device memory's kernel view, so in strict mode (ZS_EMU_STRICT=1, the
 * tests' default) the pointer values the host holds are unreadable to host code.
 *
 * Test infrastructure only: nothing here is part of libzshard. */
#ifndef ZS_CUDA_EMU_H
#define ZS_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda_emu.h is for the .cu sources compiled as C++"
#endif

#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- the per-thread view of the current block and thread ----------------------------------- */

struct zs_emu_thread_view {
    uint3 tid;
    uint3 bid;
    dim3 bdim;
    dim3 gdim;
};

extern "C" const zs_emu_thread_view *zs_emu_current(void);

#define threadIdx (zs_emu_current()->tid)
#define blockIdx (zs_emu_current()->bid)
#define blockDim (zs_emu_current()->bdim)
#define gridDim (zs_emu_current()->gdim)
static constexpr int warpSize = 32;

/* Raw __shared__ declarations would become per-thread locals on the host: kernels declare
 * shared memory through ZS_SHARED / ZS_SHARED_DYN (cuda_internal.h), and this makes any other
 * use a compile error in the emulated build. */
#undef __shared__
#define __shared__ zs_emu_use_ZS_SHARED_not_raw_shared

/* ---- barriers, warp operations (warp.cc), shared memory (smem.cc) ---------------------------- */

extern "C" void zs_emu_syncthreads(const char *site);
/* One warp collective: every lane of mask must reach it (at the same call site). kind is one of
 * ZS_EMU_SHFL_*; value is the lane's 64-bit payload; arg the lane/offset/mask argument. */
enum {
    ZS_EMU_SHFL_IDX,
    ZS_EMU_SHFL_XOR,
    ZS_EMU_SHFL_DOWN,
    ZS_EMU_SHFL_UP,
    ZS_EMU_BALLOT,
    ZS_EMU_SYNCWARP,
    ZS_EMU_MMA
};
extern "C" uint64_t zs_emu_warp_op(const char *site, unsigned mask, int kind, uint64_t value,
                                   int arg, int width);
extern "C" unsigned zs_emu_activemask(void);
/* One warp's tensor-core product, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: every lane
 * of the warp takes part with its fragments in the PTX ISA's layouts (a: 4 registers of two bf16
 * of A[16][16], b: 2 of B[16][8], c and d: 4 floats of C, D[16][8]) and receives its part of
 * D = A B + C. The products are exact in fp32 (bf16 x bf16); each element of D adds its 16
 * products to C in k order in fp32. Counted by the profiler as 4096 tensor FLOPs. */
extern "C" void zs_emu_mma_bf16_16816(const char *site, float d[4], const uint32_t a[4],
                                      const uint32_t b[2], const float c[4]);
/* Shared memory of the running block: a static array identified by its declaration site (the
 * same pointer for every thread of the block), and the launch's dynamic part. Each is filled with
 * a poison pattern when the block starts and has bounds of its own (red zones around it, every
 * access checked against them). */
extern "C" void *zs_emu_shared(const void *site, size_t nbytes, size_t align, const char *name);
extern "C" void *zs_emu_dyn_shared(void);
/* A trap in device code: the launch fails with cudaErrorAssert (sticky, as on a GPU). */
extern "C" void zs_emu_trap(const char *what);

#define ZS_EMU_STR2(x) #x
#define ZS_EMU_STR(x) ZS_EMU_STR2(x)
#define ZS_EMU_SITE __FILE__ ":" ZS_EMU_STR(__LINE__)

#define __syncthreads() zs_emu_syncthreads(ZS_EMU_SITE)
#define __syncwarp(...) zs_emu_syncwarp_(ZS_EMU_SITE __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(mask, v, lane, ...)                                                            \
    zs_emu_shfl_(ZS_EMU_SITE, mask, v, ZS_EMU_SHFL_IDX, lane __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_xor_sync(mask, v, lm, ...)                                                          \
    zs_emu_shfl_(ZS_EMU_SITE, mask, v, ZS_EMU_SHFL_XOR, lm __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_down_sync(mask, v, d, ...)                                                          \
    zs_emu_shfl_(ZS_EMU_SITE, mask, v, ZS_EMU_SHFL_DOWN, d __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_up_sync(mask, v, d, ...)                                                            \
    zs_emu_shfl_(ZS_EMU_SITE, mask, v, ZS_EMU_SHFL_UP, d __VA_OPT__(, ) __VA_ARGS__)
#define __ballot_sync(mask, pred)                                                                  \
    ((unsigned)zs_emu_warp_op(ZS_EMU_SITE, mask, ZS_EMU_BALLOT, (pred) != 0, 0, 32))
#define __any_sync(mask, pred) (__ballot_sync(mask, pred) != 0u)
#define __all_sync(mask, pred) (__ballot_sync(mask, pred) == (unsigned)(mask))
#define __activemask() zs_emu_activemask()
static inline int __popc(unsigned x) { return __builtin_popcount(x); }

static inline void zs_emu_syncwarp_(const char *site, unsigned mask = 0xffffffffu) {
    (void)zs_emu_warp_op(site, mask, ZS_EMU_SYNCWARP, 0, 0, 32);
}

template <typename T>
static inline T zs_emu_shfl_(const char *site, unsigned mask, T v, int kind, int arg,
                             int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move values of at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = zs_emu_warp_op(site, mask, kind, bits, arg, width);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* ---- device intrinsics used by the kernels -----------------------------------------------------
 */

static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline unsigned __float_as_uint(float f) {
    unsigned i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline float __uint_as_float(unsigned i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline void __threadfence(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#define __trap() zs_emu_trap(ZS_EMU_SITE)

/* Atomics: blocks of different streams run on different host threads, so these are real. */
static inline float atomicAdd(float *p, float v) {
    float old, want;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do
        want = old + v;
    while (!__atomic_compare_exchange(p, &old, &want, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}
static inline int atomicAdd(int *p, int v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

/* ---- launches ------------------------------------------------------------------------------- */

/* ZS_COST: the FLOPs (fp32 pipes, tensor cores) and ideal bytes of the launch this host thread
 * queues next, for the profiler (emu_profile.h). */
extern "C" void zs_emu_declare_cost(double flops, double mma_flops, double bytes);

/* The device view of a pointer argument (translated in strict mode; host pointers unchanged). */
extern "C" void *zs_emu_kernel_ptr(const void *p);
/* Queue body on stream as a launch of kernel func (its cudaFuncSetAttribute limits) over grid x
 * block with shmem dynamic bytes; invalid configurations set the error cudaGetLastError
 * returns, as a failed <<<>>> does. */
extern "C++" void zs_emu_launch_raw(const char *name, const void *func, dim3 grid, dim3 block,
                                    size_t shmem, cudaStream_t stream, std::function<void()> body);

template <typename T> static inline T zs_emu_arg(T v) {
    if constexpr (std::is_pointer<T>::value)
        return (T)zs_emu_kernel_ptr((const void *)v);
    else
        return v;
}

/* Arguments convert to the kernel's parameter types first, as in a real launch; pointers then
 * take their device view. */
template <typename... P, typename... A>
static inline void zs_emu_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
                                 size_t shmem, cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    std::tuple<typename std::decay<P>::type...> params(
        zs_emu_arg<typename std::decay<P>::type>(static_cast<P>(args))...);
    zs_emu_launch_raw(name, (const void *)kernel, grid, block, shmem, stream,
                      [kernel, params]() { std::apply(kernel, params); });
}

#endif

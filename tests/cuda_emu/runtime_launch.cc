/* Kernel launches of the emulated GPU's CUDA runtime: a launch's configuration checked as CUDA
 * checks it (grid and block limits, dynamic shared memory against cudaFuncSetAttribute's
 * opt-in), its pointer arguments checked for host memory, and its grid queued on its stream
 * (runtime_streams.cc) to run on fibers (fiber.cc) with the cost its launcher declared
 * (ZS_COST) for the profiler; the kernels launched are recorded (ZS_EMU_COVERAGE_DIR). */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "runtime_internal.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace zs_emu {

/* ---- coverage: the kernels this process launched ------------------------------------------ */

static void note_kernel(const char *name) {
    static std::mutex mu;
    static std::set<std::string> seen;
    const std::string &dir = settings().coverage;
    if (dir.empty()) return;
    std::lock_guard<std::mutex> lk(mu);
    if (!seen.insert(name).second) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels-%d.txt", dir.c_str(), (int)getpid());
    mkdir(dir.c_str(), 0777);
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

} // namespace zs_emu

using namespace zs_emu;

/* ---- launches ------------------------------------------------------------------------------- */

static thread_local std::vector<const void *> t_launch_ptrs;
static thread_local Cost t_cost;

/* ZS_COST (cuda_internal.h): the cost of the launch this host thread queues next. */
extern "C" void zs_emu_declare_cost(double flops, double mma_flops, double bytes) {
    t_cost = Cost{flops, mma_flops, bytes, true};
}

namespace zs_emu {
Cost take_declared_cost() {
    Cost c = t_cost;
    t_cost = Cost{0, 0, 0, false};
    return c;
}
} // namespace zs_emu

extern "C" void *zs_emu_kernel_ptr(const void *p) {
    t_launch_ptrs.push_back(p);
    return view(p);
}

/* A kernel's name as its source defines it: ZS_LAUNCH passes the expression it was given, so
 * a template's arguments ("fa_tc_fwd_kernel<HS>") are dropped, and the parentheses that keep
 * two of them one macro argument ("(bias_bwd_kernel<G, D>)"). Interned: the pointer lasts. */
static const char *kernel_name(const char *expr) {
    static std::mutex mu;
    static std::set<std::string> names;
    std::string n(expr[0] == '(' ? expr + 1 : expr);
    size_t lt = n.find('<');
    if (lt != std::string::npos) n.resize(lt);
    std::lock_guard<std::mutex> lk(mu);
    return names.insert(n).first->c_str();
}

/* cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (cudaFuncSetAttribute). */
static std::mutex g_attr_mu;
static std::map<const void *, int> g_dyn_max;

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                            int value) {
    if (!func) return cudaErrorInvalidDeviceFunction;
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) /* a hint: nothing to do */
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (unsigned)value > SMEM_OPTIN_MAX)
        return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(g_attr_mu);
    g_dyn_max[func] = value;
    return cudaSuccess;
}

/* The dynamic bytes func may be launched with, 48 KiB unless it opted in to more. */
static size_t dyn_smem_max(const void *func) {
    std::lock_guard<std::mutex> lk(g_attr_mu);
    auto it = g_dyn_max.find(func);
    return it != g_dyn_max.end() && (unsigned)it->second > STATIC_SMEM_MAX ? (size_t)it->second
                                                                           : STATIC_SMEM_MAX;
}

void zs_emu_launch_raw(const char *expr, const void *func, dim3 grid, dim3 block, size_t shmem,
                       cudaStream_t stream, std::function<void()> body) {
    const char *name = kernel_name(expr);
    std::vector<const void *> ptrs;
    ptrs.swap(t_launch_ptrs);
    if (sticky() != cudaSuccess) {
        set_last(sticky());
        return;
    }
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 ||
        block.z > 64 || threads > 1024 || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        set_last(cudaErrorInvalidConfiguration);
        return;
    }
    size_t dyn_max = dyn_smem_max(func);
    if (shmem > dyn_max) {
        set_last(cudaErrorInvalidValue);
        return;
    }
    size_t smem_cap = dyn_max > STATIC_SMEM_MAX ? SMEM_OPTIN_MAX : STATIC_SMEM_MAX;
    if (!valid_stream(stream)) {
        set_last(cudaErrorInvalidResourceHandle);
        return;
    }
    note_kernel(name);
    uint64_t seed = settings().seed * 0x9e3779b97f4a7c15ull + next_launch_id();
    Cost cost = take_declared_cost();
    enqueue(stream_of(stream), name,
            [name, grid, block, shmem, smem_cap, body, ptrs, seed, cost]() {
                for (size_t i = 0; i < ptrs.size(); i++)
                    if (ptrs[i] && classify(ptrs[i]) == MEM_NONE && view(ptrs[i]) == ptrs[i]) {
                        set_sticky(
                            cudaErrorIllegalAddress,
                            "kernel %s: pointer argument %zu (%p) is host memory a GPU cannot read "
                            "(not from cudaMalloc or cudaMallocHost)",
                            name, i, ptrs[i]);
                        return;
                    }
                if (!run_grid(name, grid, block, shmem, smem_cap, body, seed, cost)) return;
                for (const void *p : ptrs)
                    check_redzone(p);
            });
}

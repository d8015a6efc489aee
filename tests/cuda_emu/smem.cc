/* Shared memory of the emulated GPU's blocks: each __shared__ array (static, or the launch's
 * dynamic part) gets its own place in the block's pool, poisoned, with a red zone after it, so
 * the access hooks (check.cc) can hold every access to the array's own bounds, and a write into
 * a red zone is also caught when the block ends (fiber.cc). A block may use 48 KiB of static
 * and dynamic shared memory together, as a GPU allows without opting in. */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "fiber_internal.h"

#include <stdint.h>
#include <string.h>

namespace zs_emu {

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

} // namespace zs_emu

using namespace zs_emu;

extern "C" void *zs_emu_shared(const void *site, size_t nbytes, size_t align, const char *name) {
    Block *b = need_block("shared memory");
    for (size_t i = 0; i < b->sites.size(); i++)
        if (b->sites[i] == site) return b->pool.data() + b->arrays[i].off;
    /* The budget counts the arrays as a GPU packs them; the pool spaces them by red zones. */
    size_t budget = (b->budget_used + align - 1) / align * align + nbytes;
    if (budget > b->smem_cap || budget - b->dyn > STATIC_SMEM_MAX)
        fail(cudaErrorLaunchOutOfResources,
             "shared memory: %zu static bytes plus %zu dynamic exceed the %zu bytes this block "
             "may use (%u static at most; %u with cudaFuncAttributeMaxDynamicSharedMemorySize)",
             budget - b->dyn, b->dyn, b->smem_cap, STATIC_SMEM_MAX, SMEM_OPTIN_MAX);
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

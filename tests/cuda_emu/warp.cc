/* The barriers and warp operations kernel code calls on the emulated GPU (cuda_emu.h):
 * threadIdx and friends, __syncthreads, shuffles, votes and __syncwarp, __activemask, mma.sync
 * m16n8k16 as a warp collective, __trap. A thread that reaches a barrier or a warp operation
 * waits (its fiber suspended, fiber.cc) until every thread of its block, or every lane of the
 * operation's mask, has arrived at the same site; the last to arrive releases them all in a
 * shuffled order. Lanes that disagree on the site, the mask or the operation, and a mask that
 * names an exited lane, are faults. */
#include "cuda_emu.h"
#include "emu_internal.h"
#include "fiber_internal.h"

#include <stdint.h>
#include <string.h>

#include <vector>

namespace zs_emu {
namespace {

void yield_to_scheduler() {
    Fiber *f = t_fiber;
    zs_emu_ctx_switch(&f->sp, t_block->sched_sp);
}

/* Make the given waiting fibers runnable, in a shuffled order. */
void release(Block *b, std::vector<int> &ids) {
    b->rng.shuffle(ids);
    for (int id : ids)
        push_ready(b, id);
}

} // namespace
} // namespace zs_emu

using namespace zs_emu;

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

extern "C" void zs_emu_trap(const char *what) {
    need_block("__trap");
    fail(cudaErrorAssert, "device-side trap at %s", what);
}

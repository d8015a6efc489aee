/* The emulated GPU's cost-only mode samples the blocks of a large grid and scales what they did
 * to the whole grid (docs/cuda.md "The profiler", "Cost only"). Causal attention's blocks differ
 * in work along the grid's first dimension (a query block sees the keys before it, a key block
 * the queries after it), so the sample must be spread along that dimension whatever the others:
 * here the tensor-core attention's forward and backward, in cost-only mode, where each
 * kernel's sampled and scaled mma count must match the tensor FLOPs its launcher declares (exact
 * when every block runs, emu_costs_attn) within 5%: at gpt2-124m's heads (grids of 4 x 192 small
 * blocks) and with grouped heads at T = 4096 (16 x 4 large blocks, where the sample stops after
 * two or three: those must be the first and the last key block, not the first and a middle
 * one). Positions spread over the linear block numbering instead fell on a few columns of the
 * first grids: 38% of dk's and dv's products counted, 162% of the forward's and dq's (the
 * sampler before 2026-11-29); a Halton sequence in x counted 146% of a grid's products where
 * the sample stopped at two blocks. ctest label gpu; exits 77 without the emulated GPU. */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "emu_profile.h"
#include "testutil.h"

#include <math.h>

static void *dev(size_t nbytes) {
    void *d = NULL;
    ZT_OK(zs_cuda_alloc(ZS_MEM_WORKSPACE, nbytes, "test buffer", &d));
    return d;
}

/* The forward and backward at B x T, NH query heads over NKV kv heads (separate q, k, v), in
 * cost-only mode: each tensor-core kernel's sampled, scaled mma count against its declaration. */
static void check(const zs_ops *gpu, int B, int T, int NH, int NKV) {
    int hs = 64;
    size_t bt = (size_t)B * T, qd = (size_t)NH * hs, kd = (size_t)NKV * hs, rows = bt * NH;
    float *q = dev(bt * qd * 4), *k = dev(bt * kd * 4), *v = dev(bt * kd * 4);
    float *dq = dev(bt * qd * 4), *dk = dev(bt * kd * 4), *dv = dev(bt * kd * 4);
    float *out = dev(bt * qd * 4), *dout = dev(bt * qd * 4), *lse = dev(rows * 4),
          *delta = dev(rows * 4);
    printf("B=%d T=%d NH=%d NKV=%d hs=%d\n", B, T, NH, NKV, hs);
    zs_emu_profile_start();
    ZT_OK(gpu->flash_attention_fwd(NULL, out, lse, q, k, v, B, T, NH, NKV, hs, (int)qd, (int)kd,
                                   NULL));
    ZT_OK(gpu->flash_attention_bwd(NULL, dq, dk, dv, delta, dout, q, k, v, out, lse, B, T, NH, NKV,
                                   hs, (int)qd, (int)kd, NULL));
    ZT_OK(gpu->sync(NULL));
    zs_emu_profile_stop();
    int tensor = 0;
    for (size_t i = 0; i < zs_emu_profile_count(); i++) {
        zs_emu_record r;
        ZT_CHECK(zs_emu_profile_get(i, &r) == 0, "record %zu missing", i);
        if (r.mma_flops <= 0) continue;
        tensor++;
        double ratio = r.mma_counted / r.mma_flops;
        printf("  %-22s %llu of %llu blocks run: %.4g tensor FLOPs counted and scaled, %.4g "
               "declared (%.3f)\n",
               r.name, (unsigned long long)r.blocks_run, (unsigned long long)r.blocks,
               r.mma_counted, r.mma_flops, ratio);
        ZT_CHECK(r.blocks_run < r.blocks, "%s: all %llu blocks ran, nothing sampled", r.name,
                 (unsigned long long)r.blocks);
        ZT_CHECK(fabs(ratio - 1.0) <= 0.05,
                 "%s: the sampled blocks' mma, scaled to the grid, count %.4g tensor FLOPs where "
                 "the launcher declares %.4g: the sample is not spread along the grid's work",
                 r.name, r.mma_counted, r.mma_flops);
    }
    ZT_CHECK(tensor >= 3,
             "%d launches with tensor-core work recorded, expected the forward, dq and dk/dv",
             tensor);
}

int main(void) {
    zt_init("emu_sampling");
    zt_gpu_require();
    ZT_CHECK(zs_emu_predict_enable() == 0, "cost-only mode could not be turned on");
    const zs_ops *base = NULL;
    const zs_device *device = NULL;
    ZT_OK(zs_backend_select("cuda", &base, &device));
    ZT_OK(zs_cuda_set_device(0));
    const zs_ops *gpu = base->with_math(ZS_MATH_BF16);
    check(gpu, 16, 1024, 12, 12); /* gpt2-124m's heads: grids of 4 x 192, many small blocks */
    check(gpu, 2, 4096, 16, 2);   /* GQA: 16 x 4 large blocks, the sample stopped after a few */
    return zt_finish();
}

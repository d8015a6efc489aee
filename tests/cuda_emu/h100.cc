/* The H100 SXM model (docs/cuda.md, "The profiler"): a launch's predicted time is the largest
 * of its throughput terms plus a launch cost,
 *   max(DRAM bytes / HBM bandwidth, sector bytes / L2 bandwidth, wavefronts / shared-memory rate,
 *       tensor FLOPs / tensor peak, fp32 FLOPs / fp32 peak) + launch,
 * each rate scaled by the share of the 132 SMs the grid can occupy (a grid of 3 blocks runs on 3
 * SMs). What it ignores: caches beyond the unique-sector bound (a re-read that L2 would serve is
 * priced at L2's rate, not free), occupancy within an SM, latency, instruction issue and integer
 * arithmetic; so it is a lower bound for code bound by any of those. cuBLAS GEMMs are priced
 * from their shapes: tensor-core peak times cuBLAS's large-GEMM efficiency, times the waves'
 * utilisation of the SMs by 128 x 256 output tiles (128 x 128 for SIMT sgemm), k split when the
 * tiles alone cannot fill the SMs. Every constant names its source;
 * scripts/gpu-check.sh measures the kernels on a real H100 (ncu) to calibrate them. */
#include "h100.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

namespace zs_emu {

namespace {

/* NVIDIA H100 SXM5 (datasheet "NVIDIA H100 Tensor Core GPU", and the Hopper architecture
 * whitepaper for SMs and clock). Dense rates: the datasheet's "with sparsity" figures halved. */
const double SMS = 132;       /* SMs on the SXM5 board (whitepaper) */
const double CLOCK = 1.98e9;  /* max boost clock, Hz (nvidia-smi clocks.max.sm) */
const double HBM = 3.35e12;   /* HBM3 bytes/s (datasheet) */
const double BF16 = 989.4e12; /* bf16 tensor FLOP/s, dense (datasheet 1,979 sparse) */
const double TF32 = 494.7e12; /* tf32 tensor FLOP/s, dense (datasheet 989 sparse) */
const double FP32 = 66.9e12;  /* fp32 FLOP/s on the CUDA cores (datasheet 67) */
/* Not on the datasheet: public microbenchmarks put H100's L2 bandwidth at 5.5-7 TB/s
 * (chipsandcheese.com, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023, on the PCIe
 * board); the SXM board's higher clock and power limit take the top of that range. */
const double L2 = 7.0e12;
/* Shared memory: 32 banks of 4 bytes, one wavefront per SM per clock (CUDA C++ Programming
 * Guide, "Shared Memory" of compute capability 9.0). */
const double SMEM_WAVES = SMS * CLOCK;
/* Back-to-back kernels on one stream: the GPU-side gap between launches, 2 us as commonly
 * measured without CUDA graphs (an assumption for the GPU check to calibrate). */
const double LAUNCH = 2.0e-6;
/* Host <-> device copies: PCIe 5 x16, 64 GB/s raw a direction, about 55 GB/s of payload after
 * the protocol's overhead (the H100 SXM's link to its host CPU; an assumption the GPU check
 * can calibrate with a large pinned copy). */
const double PCIE = 55e9;
/* cuBLAS on large GEMMs, bf16 operands: 59% of the tensor peak, measured on an H200 (the same
 * GH100 SMs and clocks as the H100 SXM; gpu-check, 2026-11-27): gpt2-124m's step at 16 x 1024
 * spent 24.6 ms in its bf16-operand GEMMs, which 75% (about 740 TFLOP/s, public measurements
 * at 8192^3) priced at 19.3 ms; its shapes (k = 768 for most) are smaller than 8192^3. 85% of
 * the fp32 peak for SIMT sgemm (not measured). */
const double GEMM_EFF_TC = 0.59, GEMM_EFF_SIMT = 0.85;
/* Measured on an H100 SXM (gpu-check, 2026-11-25): cuBLAS runs CUBLAS_COMPUTE_32F_FAST_16BF on
 * fp32 operands as TF32 (its sm90_xmma_gemm_f32f32_tf32f32 kernels), at 243-245 TFLOP/s on
 * gpt2-124m's step shapes at 16 x 1024: about half the TF32 dense peak. */
const double GEMM_EFF_TF32 = 0.50;
const double TILE_M = 128, TILE_N = 256; /* cuBLAS's usual tile for large bf16/tf32 GEMMs */
const double SPLIT_K_MIN = 256;          /* k per split-K part, at least */

} // namespace

void h100_predict(zs_emu_record *r) {
    double frac = r->blocks ? fmin(1.0, (double)r->blocks / SMS) : 1.0;
    bool sampled = r->blocks_run && r->blocks_run < r->blocks;
    double dram = sampled && r->declared ? r->ideal_bytes : r->dram_read + r->dram_write;
    r->t_dram = dram / (HBM * frac);
    r->t_l2 = (r->ld_sectors + r->st_sectors) * 32 / (L2 * frac);
    r->t_smem = r->smem_wavefronts / (SMEM_WAVES * frac);
    r->t_mma = fmax(r->mma_flops, r->mma_counted) / (BF16 * frac);
    r->t_fp32 = r->flops / (FP32 * frac);
    r->t_launch = LAUNCH;
    struct {
        double t;
        const char *name;
    } terms[] = {{r->t_dram, "dram"},
                 {r->t_l2, "l2"},
                 {r->t_smem, "smem"},
                 {r->t_mma, "tensor"},
                 {r->t_fp32, "fp32"}};
    double best = 0;
    r->bound = "launch";
    for (auto &t : terms)
        if (t.t > best) {
            best = t.t;
            r->bound = t.name;
        }
    if (best < LAUNCH) r->bound = "launch";
    r->predicted = best + LAUNCH;
}

void h100_gemm(zs_emu_record *r, int m, int n, int k, int batch, GemmMath math, double bytes,
               bool ta, bool tb) {
    memset(r, 0, sizeof *r);
    static const char *names[] = {"fp32", "tf32", "bf16"};
    snprintf(r->name, sizeof r->name, "cuBLAS gemm %s %c%c %dx%dx%d%s", names[math], ta ? 'T' : 'N',
             tb ? 'T' : 'N', m, n, k, batch > 1 ? " batched" : "");
    double fl = 2.0 * m * n * (double)k * batch;
    double tn = math == GEMM_FP32 ? TILE_N / 2 : TILE_N; /* SIMT sgemm: 128 x 128 tiles */
    double tiles = ceil(m / TILE_M) * ceil(n / tn) * batch;
    /* Too few output tiles to fill the SMs: cuBLAS splits k (split-K) into parts of at least
     * SPLIT_K_MIN, and sums the partial products afterwards (fp32 partials written and read). */
    double splits = 1;
    if (tiles < SMS) splits = fmax(1.0, fmin(floor(SMS / tiles), floor(k / SPLIT_K_MIN)));
    if (splits > 1) bytes += 2.0 * m * (double)n * 4 * splits * batch;
    double units = tiles * splits, waves = ceil(units / SMS);
    double util = units > 0 ? units / (waves * SMS) : 1.0;
    double rate =
        math == GEMM_FP32 ? FP32 * GEMM_EFF_SIMT : math == GEMM_BF16 ? BF16 * GEMM_EFF_TC : TF32 * GEMM_EFF_TF32;
    if (math == GEMM_FP32)
        r->flops = fl;
    else
        r->mma_flops = fl;
    r->ideal_bytes = bytes;
    r->declared = 1;
    r->blocks = (uint64_t)tiles;
    r->blocks_run = (uint64_t)tiles;
    r->t_dram = bytes / HBM;
    double t_math = fl / (rate * util);
    if (math == GEMM_FP32)
        r->t_fp32 = t_math;
    else
        r->t_mma = t_math;
    r->t_launch = LAUNCH;
    r->bound = t_math >= r->t_dram ? (math == GEMM_FP32 ? "fp32" : "tensor") : "dram";
    r->predicted = fmax(t_math, r->t_dram) + LAUNCH;
}

void h100_memory_op(zs_emu_record *r, const char *name, double bytes) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ideal_bytes = bytes;
    r->declared = 1;
    r->t_dram = bytes / HBM;
    r->t_launch = LAUNCH;
    r->bound = r->t_dram > LAUNCH ? "dram" : "launch";
    r->predicted = r->t_dram + LAUNCH;
}

void h100_host_copy(zs_emu_record *r, const char *name, double bytes) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ideal_bytes = bytes;
    r->declared = 1;
    r->t_dram = bytes / PCIE; /* the link, not HBM, is the bound */
    r->t_launch = LAUNCH;
    r->bound = r->t_dram > LAUNCH ? "pcie" : "launch";
    r->predicted = r->t_dram + LAUNCH;
}

} // namespace zs_emu

extern "C" double zs_emu_model_peak(int math) {
    using namespace zs_emu;
    return math == GEMM_BF16 ? BF16 : math == GEMM_TF32 ? TF32 : FP32;
}

extern "C" char *zs_emu_model_notes(void) {
    using namespace zs_emu;
    char buf[2048];
    snprintf(buf, sizeof buf,
             "- SMs: %.0f; clock %.2f GHz (H100 SXM5 whitepaper; max boost)\n"
             "- HBM3: %.2f TB/s (datasheet)\n"
             "- L2: %.1f TB/s (public microbenchmarks: 5.5-7 TB/s; not on the datasheet)\n"
             "- shared memory: one wavefront per SM per clock, %.1f G wavefronts/s\n"
             "- tensor cores: %.1f TFLOP/s bf16, %.1f tf32, dense (datasheet)\n"
             "- fp32: %.1f TFLOP/s (datasheet)\n"
             "- launch: %.1f us per kernel (assumed)\n"
             "- host <-> device copies: %.0f GB/s (PCIe 5 x16's 64 GB/s raw, less protocol; "
             "assumed)\n"
             "- cuBLAS: %.0f%% of the tensor peak (%.0f%% of fp32 for SIMT), %gx%g tiles in "
             "waves over the SMs\n",
             SMS, CLOCK / 1e9, HBM / 1e12, L2 / 1e12, SMEM_WAVES / 1e9, BF16 / 1e12, TF32 / 1e12,
             FP32 / 1e12, LAUNCH * 1e6, PCIE / 1e9, GEMM_EFF_TC * 100, GEMM_EFF_SIMT * 100, TILE_M,
             TILE_N);
    return strdup(buf);
}

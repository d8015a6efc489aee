/* The emulated GPU's profiler and its H100 model, as zshard's CUDA backend (device.cu, under
 * ZS_CUDA_EMU) and the tests call them (docs/cuda.md, "The profiler"). Plain C.
 *
 * While recording, every launch leaves one record: from the accesses its threads really made,
 * the 32-byte sectors each warp-level request touched, the unique sectors (a DRAM lower bound),
 * shared-memory wavefronts (bank conflicts), and the FLOPs its launcher declared (ZS_COST);
 * the H100 model turns them into a predicted time. In the cost-only mode (predict) GEMMs are
 * priced from their shapes instead of run, large grids run a sample of their blocks, launches
 * identical to one already priced take its price, and device memory is neither poisoned nor
 * filled. Test infrastructure only. */
#ifndef ZS_EMU_PROFILE_H
#define ZS_EMU_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_emu_record {
    char name[96];       /* the kernel, or the library call with its shape */
    uint64_t blocks;     /* the grid's blocks */
    uint64_t blocks_run; /* blocks that ran (fewer when sampled) */
    int reused;          /* priced as an identical earlier launch (cost-only mode) */
    int threads;         /* per block */
    /* from the accesses (extrapolated to the whole grid when sampled) */
    double ld_requests, st_requests; /* warp-level global loads and stores */
    double ld_sectors, st_sectors;   /* 32-byte sectors those requests touched */
    double ld_bytes, st_bytes;       /* bytes the threads asked for */
    double distinct_bytes;           /* of those, distinct within each request (no broadcasts) */
    double dram_read, dram_write;    /* unique sectors read / written, in bytes */
    double smem_requests, smem_wavefronts, smem_ideal; /* ideal: bytes / 128 per request */
    double atomics;
    double mma_counted; /* tensor FLOPs of the mma instructions the warps executed */
    /* declared by the launcher (ZS_COST), or priced by the library model */
    double flops, mma_flops, ideal_bytes;
    int declared;
    /* the H100 model */
    double t_dram, t_l2, t_smem, t_mma, t_fp32, t_launch, predicted; /* seconds */
    const char *bound; /* "dram", "l2", "smem", "tensor", "fp32" or "launch" */
} zs_emu_record;

/* Cost-only mode for the rest of the process; call before any device allocation. 0, or -1 when
 * device memory was already allocated. */
int zs_emu_predict_enable(void);
int zs_emu_predicting(void);
/* Start (clearing what was recorded) and stop recording. Streams are drained first. */
void zs_emu_profile_start(void);
void zs_emu_profile_stop(void);
size_t zs_emu_profile_count(void);
/* Record i (0 = first launch recorded); 0, or -1 past the end. */
int zs_emu_profile_get(size_t i, zs_emu_record *out);
/* Sum of the predicted times of every record. */
double zs_emu_profile_total(void);
/* The last recording's length on the timeline, from start to stop: the streams' tasks placed
 * by their order, their event waits and the host's synchronisations, each as long as it was
 * priced, with the host ranges' work on the host threads' clocks (docs/cuda.md, "The
 * timeline"). At most the sum; less where streams, or streams and the host, overlapped. */
double zs_emu_profile_timeline(void);
/* Host work on the calling thread's timeline clock: the wall time between push and pop, less
 * the time blocked inside it in synchronisations, is priced as measured on this machine and
 * recorded as "host: NAME (measured here)". Nested pairs count as the outermost. */
void zs_emu_host_range_push(const char *name);
void zs_emu_host_range_pop(void);
/* A hand-off between host threads the emulator cannot see (a condition variable): mark
 * records the calling thread's clock under key; after moves the calling thread's clock to at
 * least the last mark of key (this recording's; none: nothing). */
void zs_emu_host_mark(const void *key);
void zs_emu_host_after(const void *key);
/* A markdown table of the records by kernel (or GEMM shape), by predicted time; malloc'd. */
char *zs_emu_profile_table(void);
/* The model's dense peak FLOP/s in GEMM arithmetic math (0 fp32, 1 tf32, 2 bf16). */
double zs_emu_model_peak(int math);
/* The model's constants, one "- name: value (source)" line each; malloc'd. */
char *zs_emu_model_notes(void);

#ifdef __cplusplus
}
#endif

#endif

/* CUDA device memory, streams and host<->device copies, in plain C (no CUDA header), for the
 * code that drives the CUDA backend's ops table (zs_ops_cuda() in ops.h): trainer, tests,
 * benchmarks. Implemented in src/backend/cuda/device.cu; when the build has no CUDA backend
 * (ZS_CUDA=OFF, or AUTO without a toolkit) src/backend/backends.c supplies these entry points,
 * which report 0 devices and fail with ZS_ERR_UNSUPPORTED, so callers link either way.
 *
 * One process drives one GPU (the current device of the calling thread, docs/architecture.md
 * "Devices": one rank per GPU). All functions are thread-safe. */
#ifndef ZS_BACKEND_CUDA_DEVICE_H
#define ZS_BACKEND_CUDA_DEVICE_H

#include "backend/ops.h"
#include "zshard.h"

#include <stddef.h>

/* 1 when this library was built with the CUDA backend, else 0. */
int zs_cuda_built(void);
/* Number of visible CUDA devices; 0 when none, when the driver cannot be loaded or when the
 * build has no CUDA backend. Never fails. */
int zs_cuda_device_count(void);
/* Dense peak FLOP/s of the current device in GEMM arithmetic `math` (tensor cores for TF32 and
 * bf16): SMs x peak clock x the architecture's FLOP per clock per SM, known for sm_80 and sm_90
 * (A100; H100 and H200). Writes the device's name and the product it computed (or why there is
 * none) to `basis`. 0 when unknown: another architecture, no clock reported (the emulated GPU),
 * no device or no CUDA backend. */
double zs_cuda_peak_flops(zs_gemm_math math, char *basis, size_t cap);
/* Make `device` (0 <= device < zs_cuda_device_count()) current for the calling thread. */
zs_status zs_cuda_set_device(int device);
/* The calling thread takes the GPU zs_cuda_set_device chose (0 if none was). */
zs_status zs_cuda_bind_thread(void);

/* nbytes of device memory, zero-filled (the flat buffers rely on zero padding), accounted in
 * category cat exactly as zs_alloc accounts host memory (so the --device-mem cap and the
 * breakdown in errors cover it). nbytes 0 yields *out = NULL and ZS_OK. On failure *out is
 * NULL and the message names `what`. Synchronous: the memory is ready on every stream. */
zs_status zs_cuda_alloc(zs_mem_category cat, size_t nbytes, const char *what, void **out);
/* Release a buffer from zs_cuda_alloc and its accounting. NULL is accepted. Synchronous
 * (cudaFree waits for the device), so keep it out of the step's hot path. */
void zs_cuda_free(void *ptr);

/* A new CUDA stream behind the opaque zs_stream_t (the ops' stream argument); NULL, the other
 * valid stream argument, is CUDA's default stream. Created streams are blocking with respect
 * to the default stream (cudaStreamDefault), so work on NULL orders against them. */
zs_status zs_cuda_stream_create(zs_stream_t **out);
/* Destroy a stream from zs_cuda_stream_create after its queued work completes. NULL is
 * accepted. */
void zs_cuda_stream_destroy(zs_stream_t *s);

/* The cudaStream_t behind s (NULL for the default stream), for code that hands streams to
 * another CUDA library (NCCL). NULL without the CUDA backend. */
void *zs_cuda_stream_handle(zs_stream_t *s);

/* Synchronous copies of nbytes between pageable host memory and device memory (they wait
 * for the device to finish earlier work on the default stream). */
zs_status zs_cuda_memcpy_h2d(void *dst_dev, const void *src_host, size_t nbytes);
zs_status zs_cuda_memcpy_d2h(void *dst_host, const void *src_dev, size_t nbytes);

/* ---- the emulated GPU's profiler (docs/cuda.md, "The profiler") ----------------------------
 * On the emulated GPU of the tests (zshard-emu) the CUDA backend can record every launch's
 * memory traffic and declared FLOPs and price them on an H100 SXM model. On a real GPU, or
 * without the CUDA backend, zs_cuda_emulated() is 0 and the others fail with
 * ZS_ERR_UNSUPPORTED (measure a real GPU with Nsight Compute: scripts/gpu-check.sh). */

/* 1 on the emulated GPU, else 0. */
int zs_cuda_emulated(void);
/* Cost-only mode for the rest of the process (GEMMs priced, not run; large grids sampled;
 * device memory neither poisoned nor filled; an 80 GiB device): call before the first device
 * allocation. */
zs_status zs_cuda_predict_enable(void);
/* Start recording (the device drained first; earlier records dropped). */
zs_status zs_cuda_profile_start(void);
/* Stop recording: the predicted seconds of what was recorded and, when table is not NULL, a
 * markdown table of it by kernel (malloc'd, the caller frees it). */
zs_status zs_cuda_profile_stop(double *seconds, char **table);
/* The last recording's length on the timeline (docs/cuda.md, "The timeline"): its streams and
 * host work overlapped as their order and waits allow, each task at its predicted price and
 * host work (device.h's ranges) as measured here. At most the sum profile_stop gives. */
zs_status zs_cuda_profile_timeline(double *seconds);
/* The H100 model's dense peak in GEMM arithmetic math (basis: what it is), 0 when there is no
 * model (not the emulated GPU). */
double zs_cuda_model_peak_flops(zs_gemm_math math, char *basis, size_t cap);
/* The H100 model's constants with their sources, one line each (malloc'd), or NULL. */
char *zs_cuda_model_notes(void);

#endif

/* The emulated GPU's profiler and checker on hand-made kernels whose counts are known by hand
 * (docs/cuda.md, "The profiler", "The checker"). Built like zshard's .cu files (the emulator's
 * kernel side, the same instrumentation), so what it measures here is what it measures there.
 *
 * Counts (n = 32768 floats, blocks of 256 threads: 1024 warps):
 *  - coalesced copy out[i] = in[i]: per warp one load and one store of 32 x 4 contiguous bytes,
 *    4 sectors each: 1024 requests, 4096 sectors, 128 KiB each way, all of it unique;
 *  - strided copy out[i] = in[32 i]: each lane's load in its own 128-byte line, so 32 sectors
 *    per load request (32768 in all, 1 MiB unique, 12.5% of it used); stores as above;
 *  - 64 x 64 transpose through a 32 x 32 shared tile, blocks of 32 x 32 threads (4 blocks, 128
 *    warps): a warp writes a tile row (32 banks, 1 wavefront) and reads a tile column, all 32
 *    words in one bank: 32 wavefronts; padded to 33 columns the column spreads over the 32
 *    banks: 1 wavefront. 256 shared requests of 128 bytes each, ideal 256 wavefronts;
 *    conflicted 128 + 128 x 32 = 4224.
 *  - ldmatrix.x4 (mma_cuda.h), one warp, from a 16 x 72 bf16 tile (rows padded by 8, as the
 *    attention's): 18 stores of 128 bytes fill it, then one x4 reads four 8 x 8 matrices of 8
 *    rows of 16 bytes, each matrix one wavefront, transposed or not (the transposition is in how
 *    the words reach the lanes, not in what is read): 22 requests, 22 wavefronts either way.
 * Checker: a second block writing what the first wrote, a warp exchanging values through shared
 * memory without __syncwarp, and a missing barrier are hazards, each reported in a child
 * process (a hazard fails the launch, and device errors are sticky); the same exchange with
 * __syncwarp, and atomics from every thread, are not. Across streams: a kernel, copy or memset
 * touching what another stream's task touched, one writing, with nothing ordering the two, is a
 * hazard; an event wait, a host synchronisation or the legacy stream's implicit order between
 * them is not. On the host's side: host code reading pinned memory that a queued copy writes, or
 * writing what one reads, before a synchronisation with it, faults with a report. */
#include "backend/cuda/mma_cuda.h"
#include "cuda_emu.h"
#include "emu_check.h"
#include "emu_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHARED(type, name, count)                                                                  \
    static const char zs_site_##name = 0;                                                          \
    type *name =                                                                                   \
        (type *)zs_emu_shared(&zs_site_##name, sizeof(type) * (count), alignof(type), #name)

static void copy_coalesced(float *out, const float *in, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = in[i];
}

static void copy_strided(float *out, const float *in, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = in[(size_t)i * 32];
}

static void transpose(float *out, const float *in, int W, int pad) {
    SHARED(float, tile, 32 * 33);
    int stride = 32 + pad, tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    int bx = (int)blockIdx.x * 32, by = (int)blockIdx.y * 32;
    tile[ty * stride + tx] = in[(size_t)(by + ty) * W + bx + tx];
    __syncthreads();
    out[(size_t)(bx + ty) * W + by + tx] = tile[tx * stride + ty];
}

enum { LDM_W = 72 }; /* a 16 x 64 tile's row and its pad of 8 */

/* One warp: tile[r][c] = r * LDM_W + c, then out[4 lane + j] = r[j] of an ldmatrix.x4 whose
 * lane l points at row 8 ((l / 8) % 2) + l % 8, column 8 (l / 16), as the attention's P V. */
template <bool trans> static void ldmatrix_tile(uint32_t *out) {
    SHARED(uint32_t, tile, 16 * LDM_W / 2);
    int l = (int)threadIdx.x;
    for (int i = l; i < 16 * LDM_W / 2; i += 32)
        tile[i] = (uint32_t)(2 * i) | (uint32_t)(2 * i + 1) << 16;
    __syncwarp();
    uint32_t r[4];
    const uint16_t *t = (const uint16_t *)tile;
    zs_ldmatrix_x4<trans>(r, t + ((l / 8) % 2 * 8 + l % 8) * LDM_W + l / 16 * 8);
    for (int j = 0; j < 4; j++)
        out[4 * l + j] = r[j];
}

/* racy kernels for the checker */
/* Fills n floats of dynamic shared memory (thread t every blockDim-th), then after a barrier
 * thread 0 adds them all, each written by another thread than the one that reads it. */
static void dyn_fill_sum(float *out, int n) {
    float *d = (float *)zs_emu_dyn_shared();
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        d[i] = (float)(i % 7);
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < n; i++)
            s += d[i];
        out[0] = s;
    }
}

/* A static array beside the dynamic bytes: with 227 KiB of them, past what a block may use. */
static void dyn_and_static(float *out) {
    SHARED(float, extra, 16);
    extra[threadIdx.x % 16] = 1.0f;
    out[0] = extra[0];
}

static void two_blocks_write(float *x) {
    if (threadIdx.x == 0) x[0] = (float)blockIdx.x;
}
static void warp_exchange(float *out, int sync) {
    SHARED(float, buf, 32);
    int l = (int)threadIdx.x;
    buf[l] = (float)l;
    if (sync) __syncwarp();
    out[l] = buf[(l + 1) % 32];
}
static void missing_barrier(float *out) {
    SHARED(float, buf, 64);
    int t = (int)threadIdx.x;
    buf[t] = (float)t;
    out[t] = buf[63 - t]; /* another warp's value, no __syncthreads between */
}
static void atomics(float *x) {
    atomicAdd(x, 1.0f);
}

static float *dev(size_t n) {
    void *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) {
        printf("FAIL cudaMalloc\n");
        exit(1);
    }
    cudaMemset(p, 0, n * sizeof(float));
    return (float *)p;
}

static zs_emu_record last(void) {
    zs_emu_record r;
    memset(&r, 0, sizeof r);
    size_t n = zs_emu_profile_count();
    if (!n || zs_emu_profile_get(n - 1, &r) != 0) printf("FAIL: no record\n");
    return r;
}

static zs_emu_record profile_one(const char *what, void (*launch)(void)) {
    zs_emu_profile_start();
    launch();
    zs_emu_profile_stop();
    zs_emu_record r = last();
    printf("%-22s ld %6.0f req %6.0f sect %7.0f B | st %6.0f req %6.0f sect | dram %7.0f+%7.0f B | "
           "smem %4.0f req %5.0f waves (ideal %4.0f)\n",
           what, r.ld_requests, r.ld_sectors, r.ld_bytes, r.st_requests, r.st_sectors, r.dram_read,
           r.dram_write, r.smem_requests, r.smem_wavefronts, r.smem_ideal);
    return r;
}

enum { N = 32768 };
static float *g_in, *g_out;
static int g_pad;

static void run_coalesced(void) {
    zs_emu_launch("copy_coalesced", copy_coalesced, dim3(N / 256), dim3(256), 0, nullptr, g_out,
                  g_in, N);
}
static void run_strided(void) {
    zs_emu_launch("copy_strided", copy_strided, dim3(N / 256), dim3(256), 0, nullptr, g_out, g_in,
                  N);
}
static void run_transpose(void) {
    zs_emu_launch("transpose", transpose, dim3(2, 2), dim3(32, 32), 0, nullptr, g_out, g_in, 64,
                  g_pad);
}

static uint32_t *g_ldm;
static void run_ldmatrix(void) {
    zs_emu_launch("ldmatrix", ldmatrix_tile<false>, dim3(1), dim3(32), 0, nullptr, g_ldm);
}
static void run_ldmatrix_trans(void) {
    zs_emu_launch("ldmatrix_trans", ldmatrix_tile<true>, dim3(1), dim3(32), 0, nullptr, g_ldm);
}

/* Each lane's four words against the PTX ISA's fragment layout: matrix j (rows 8 (j % 2).., columns
 * 8 (j / 2)..) gives lane l row l / 4's columns 2 (l % 4), +1, or with trans column l / 4's rows
 * 2 (l % 4), +1, the first in the lower half. */
static int ldmatrix_wrong(int trans) {
    uint32_t h[128];
    cudaMemcpy(h, g_ldm, sizeof h, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++) {
            int r0 = j % 2 * 8, c0 = j / 2 * 8, a = l / 4, b = 2 * (l % 4);
            uint32_t lo = trans ? (uint32_t)((r0 + b) * LDM_W + c0 + a)
                                : (uint32_t)((r0 + a) * LDM_W + c0 + b);
            uint32_t hi = trans ? lo + LDM_W : lo + 1;
            bad += h[4 * l + j] != (lo | hi << 16);
        }
    return bad;
}

static void ldmatrix_costs(void) {
    g_ldm = (uint32_t *)dev(128); /* 4-byte words either way */
    for (int trans = 0; trans < 2; trans++) {
        zs_emu_record r = profile_one(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4",
                                      trans ? run_ldmatrix_trans : run_ldmatrix);
        CHECK(r.smem_requests == 22 && r.smem_wavefronts == 22,
              "ldmatrix trans %d: %g shared requests, %g wavefronts, want 22 and 22 (18 stores, "
              "4 matrices)",
              trans, r.smem_requests, r.smem_wavefronts);
        int bad = ldmatrix_wrong(trans);
        CHECK(bad == 0, "ldmatrix trans %d: %d of 128 words not the PTX ISA's layout", trans, bad);
    }
    cudaFree(g_ldm);
}

static void profiler(void) {
    g_in = dev((size_t)N * 32);
    g_out = dev(N);
    zs_emu_record r = profile_one("coalesced copy", run_coalesced);
    CHECK(r.ld_requests == 1024 && r.ld_sectors == 4096 && r.ld_bytes == 131072,
          "coalesced loads: %g requests, %g sectors, %g bytes (want 1024, 4096, 131072)",
          r.ld_requests, r.ld_sectors, r.ld_bytes);
    CHECK(r.st_requests == 1024 && r.st_sectors == 4096 && r.st_bytes == 131072,
          "coalesced stores: %g requests, %g sectors, %g bytes", r.st_requests, r.st_sectors,
          r.st_bytes);
    CHECK(r.dram_read == 131072 && r.dram_write == 131072, "coalesced unique: %g read, %g written",
          r.dram_read, r.dram_write);
    CHECK(r.smem_requests == 0 && r.atomics == 0, "coalesced: no shared memory, no atomics");
    CHECK(r.blocks == N / 256 && r.blocks_run == N / 256 && r.threads == 256,
          "coalesced: %llu blocks (%llu run) of %d threads", (unsigned long long)r.blocks,
          (unsigned long long)r.blocks_run, r.threads);
    CHECK(r.predicted > 0 && r.bound && !strcmp(r.bound, "launch"),
          "coalesced: 256 KiB is launch-bound on an H100 (bound %s, %g s)", r.bound, r.predicted);

    r = profile_one("strided copy", run_strided);
    CHECK(r.ld_requests == 1024 && r.ld_sectors == 32768 && r.ld_bytes == 131072,
          "strided loads: %g requests, %g sectors, %g bytes (want 1024, 32768, 131072)",
          r.ld_requests, r.ld_sectors, r.ld_bytes);
    CHECK(r.st_sectors == 4096 && r.dram_read == 1048576 && r.dram_write == 131072,
          "strided: %g store sectors, %g bytes read, %g written (want 4096, 1 MiB, 128 KiB)",
          r.st_sectors, r.dram_read, r.dram_write);

    for (g_pad = 0; g_pad < 2; g_pad++) {
        r = profile_one(g_pad ? "transpose, padded" : "transpose, conflicted", run_transpose);
        double want = g_pad ? 256 : 4224;
        CHECK(r.smem_requests == 256 && r.smem_ideal == 256 && r.smem_wavefronts == want,
              "transpose pad %d: %g shared requests, %g wavefronts (ideal %g), want 256, %g, 256",
              g_pad, r.smem_requests, r.smem_wavefronts, r.smem_ideal, want);
        CHECK(r.ld_requests == 128 && r.ld_sectors == 512 && r.st_requests == 128 &&
                  r.st_sectors == 512,
              "transpose pad %d: global %g/%g load requests/sectors, %g/%g store (want 128/512)",
              g_pad, r.ld_requests, r.ld_sectors, r.st_requests, r.st_sectors);
    }
    /* the transpose is right, whatever the counts */
    float *h = (float *)malloc(64 * 64 * sizeof(float)), *t = (float *)malloc(64 * 64 * 4);
    for (int i = 0; i < 64 * 64; i++)
        h[i] = (float)i;
    cudaMemcpy(g_in, h, 64 * 64 * 4, cudaMemcpyHostToDevice);
    g_pad = 1;
    run_transpose();
    cudaMemcpy(t, g_out, 64 * 64 * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++)
            bad += t[i * 64 + j] != h[j * 64 + i];
    CHECK(bad == 0 && cudaGetLastError() == cudaSuccess, "transpose: %d elements wrong", bad);
    free(h);
    free(t);
}

/* A checker case in a child process: its exit status and output. */
static int child(const char *what, void (*body)(float *), char *out, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        setenv("ZS_EMU_CHECK", "1", 1);
        float *x = dev(64);
        body(x);
        cudaError_t e = cudaDeviceSynchronize();
        printf("%s: %s\n", what, cudaGetErrorName(e));
        fflush(stdout);
        _exit(e == cudaSuccess ? 0 : 3);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fd[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void c_two_blocks(float *x) {
    zs_emu_launch("two_blocks_write", two_blocks_write, dim3(2), dim3(32), 0, nullptr, x);
}
static void c_exchange(float *x) {
    zs_emu_launch("warp_exchange", warp_exchange, dim3(1), dim3(32), 0, nullptr, x, 0);
}
static void c_exchange_synced(float *x) {
    zs_emu_launch("warp_exchange", warp_exchange, dim3(1), dim3(32), 0, nullptr, x, 1);
}
static void c_missing_barrier(float *x) {
    zs_emu_launch("missing_barrier", missing_barrier, dim3(1), dim3(64), 0, nullptr, x);
}
static void c_atomics(float *x) {
    zs_emu_launch("atomics", atomics, dim3(4), dim3(64), 0, nullptr, x);
}

/* Stream cases: x written on one stream and touched on another, with or without an order. */
struct Two {
    cudaStream_t a, b;
    float *y, *z; /* a kernel's input (y) and output (z) besides x */
};
static Two two_streams(unsigned flags) {
    Two t;
    cudaStreamCreateWithFlags(&t.a, flags);
    cudaStreamCreateWithFlags(&t.b, flags);
    t.y = dev(64);
    t.z = dev(64);
    cudaDeviceSynchronize(); /* dev()'s memsets on the legacy stream come first */
    return t;
}
static void write_on(float *x, const float *y, cudaStream_t s) {
    zs_emu_launch("copy_coalesced", copy_coalesced, dim3(1), dim3(64), 0, s, x, y, 64);
}
static void c_stream_unordered(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    write_on(x, t.y, t.a);
    write_on(t.z, x, t.b); /* reads x */
}
static void c_stream_event(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    cudaEvent_t e;
    cudaEventCreate(&e);
    write_on(x, t.y, t.a);
    cudaEventRecord(e, t.a);
    cudaStreamWaitEvent(t.b, e, 0);
    write_on(t.z, x, t.b);
}
static void c_stream_host_sync(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    write_on(x, t.y, t.a);
    cudaStreamSynchronize(t.a);
    write_on(t.z, x, t.b);
}
static void c_stream_d2h_unordered(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    void *h = nullptr;
    cudaMallocHost(&h, 256);
    write_on(x, t.y, t.a);
    cudaMemcpyAsync(h, x, 256, cudaMemcpyDeviceToHost, t.b);
}
static void c_stream_h2d_event(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    void *h = nullptr;
    cudaMallocHost(&h, 256);
    memset(h, 0, 256);
    cudaEvent_t e;
    cudaEventCreate(&e);
    cudaMemcpyAsync(x, h, 256, cudaMemcpyHostToDevice, t.b);
    cudaEventRecord(e, t.b);
    cudaStreamWaitEvent(t.a, e, 0);
    write_on(t.z, x, t.a);
}
static void c_stream_memset_after_read(float *x) {
    Two t = two_streams(cudaStreamNonBlocking);
    write_on(t.z, x, t.a); /* reads x */
    cudaMemsetAsync(x, 0, 256, t.b);
}
static void c_stream_legacy(float *x) {
    Two t = two_streams(cudaStreamDefault); /* blocking: ordered with the legacy stream */
    write_on(x, t.y, t.a);
    write_on(t.z, x, nullptr);
    write_on(x, t.y, t.b);
}

/* Host guards: the host touching pinned pages a queued copy writes (or reads, for a write). */
static char *copy_pinned(cudaMemcpyKind kind, cudaStream_t *s) {
    void *h = nullptr, *d = nullptr;
    cudaMallocHost(&h, 16384);
    cudaMalloc(&d, 16384);
    cudaMemset(d, 0, 16384);
    cudaDeviceSynchronize();
    cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
    if (kind == cudaMemcpyDeviceToHost)
        cudaMemcpyAsync(h, d, 16384, kind, *s);
    else
        cudaMemcpyAsync(d, h, 16384, kind, *s);
    return (char *)h;
}
static void c_host_reads_early(float *) {
    cudaStream_t s;
    volatile char *h = copy_pinned(cudaMemcpyDeviceToHost, &s);
    printf("read %d\n", h[8192]);
}
static void c_host_reads_after_sync(float *) {
    cudaStream_t s;
    volatile char *h = copy_pinned(cudaMemcpyDeviceToHost, &s);
    cudaStreamSynchronize(s);
    printf("read %d\n", h[8192]);
}
static void c_host_writes_upload_source(float *) {
    cudaStream_t s;
    volatile char *h = copy_pinned(cudaMemcpyHostToDevice, &s);
    printf("read %d\n", h[8192]); /* reading the source of an upload is allowed */
    h[8192] = 1;
}

/* A 256-byte download into the middle of a page: the page's other bytes stay usable. */
static void c_host_small_copy(float *) {
    void *h = nullptr, *d = nullptr;
    cudaMallocHost(&h, 4096);
    cudaMalloc(&d, 256);
    cudaMemset(d, 7, 256);
    cudaDeviceSynchronize();
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    volatile char *c = (volatile char *)h;
    cudaMemcpyAsync(h, d, 256, cudaMemcpyDeviceToHost, s);
    for (int i = 256; i < 4096; i++) /* beside the copy: let through */
        c[i] = (char)(c[i] + 1);
    cudaStreamSynchronize(s);
    if (c[0] != 7 || c[300] != 0) { /* the copy landed; 0xff + 1 beside it */
        printf("wrong bytes after the copy: %d %d\n", c[0], c[300]);
        fflush(stdout);
        _exit(5);
    }
    cudaMemcpyAsync(h, d, 256, cudaMemcpyDeviceToHost, s);
    printf("read %d\n", c[255]); /* inside it: reported */
}

static void c_smem_past_optin(float *x) {
    cudaFuncSetAttribute((const void *)dyn_and_static, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         227 << 10);
    zs_emu_launch("dyn_and_static", dyn_and_static, dim3(1), dim3(32), 227 << 10, nullptr, x);
}

/* Dynamic shared memory past 48 KiB only after cudaFuncSetAttribute opts the kernel in, up to
 * the H100's 227 KiB, as on a GPU (docs/cuda.md "The emulated GPU"). */
static void dyn_smem(void) {
    float *out = dev(1), got = 0.0f;
    int optin = 0, n = (200 << 10) / 4;
    cudaGetLastError();
    zs_emu_launch("dyn_fill_sum", dyn_fill_sum, dim3(1), dim3(256), 64 << 10, nullptr, out, 16);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB dynamic without the opt-in");
    CHECK(cudaFuncSetAttribute((const void *)dyn_fill_sum,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (227 << 10) + 1) == cudaErrorInvalidValue,
          "an opt-in past 227 KiB");
    CHECK(cudaFuncSetAttribute((const void *)dyn_fill_sum,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10) == 0,
          "an opt-in to 200 KiB");
    zs_emu_launch("dyn_fill_sum", dyn_fill_sum, dim3(1), dim3(256), 200 << 10, nullptr, out, n);
    CHECK(cudaGetLastError() == cudaSuccess, "200 KiB dynamic after the opt-in");
    zs_emu_launch("dyn_fill_sum", dyn_fill_sum, dim3(1), dim3(256), (200 << 10) + 4, nullptr, out,
                  16);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "past the 200 KiB opted in to");
    cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost);
    double want = 0;
    for (int i = 0; i < n; i++)
        want += i % 7;
    CHECK(got == (float)want, "200 KiB of dynamic shared memory summed to %g, want %g", got, want);
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == 0 &&
              optin == 227 << 10,
          "sharedMemPerBlockOptin %d", optin);
    cudaFree(out);
}

static void checker(void) {
    static char out[8192];
    struct {
        const char *what;
        void (*body)(float *);
        const char *want; /* in the report, or NULL: must pass */
    } cases[] = {
        {"two blocks write one address", c_two_blocks,
         "race (write after write) on a 256-byte device allocation"},
        {"warp exchange without __syncwarp", c_exchange, "on __shared__ array 'buf'"},
        {"warp exchange with __syncwarp", c_exchange_synced, nullptr},
        {"missing __syncthreads", c_missing_barrier, "within one barrier interval"},
        {"atomicAdd from every thread", c_atomics, nullptr},
        {"kernels on two streams, no order", c_stream_unordered,
         "copy_coalesced on stream 1"}, /* the writer or the reader: whichever ran second */
        {"kernels on two streams, an event between", c_stream_event, nullptr},
        {"kernels on two streams, a host synchronisation between", c_stream_host_sync, nullptr},
        {"a kernel's output copied down on another stream, no order", c_stream_d2h_unordered,
         "cudaMemcpyAsync (DeviceToHost) on stream"},
        {"an upload read on another stream after its event", c_stream_h2d_event, nullptr},
        {"a memset on another stream after a kernel's read", c_stream_memset_after_read,
         "cudaMemsetAsync on stream"}, /* named as write after read, or read after write */
        {"blocking streams and the legacy stream", c_stream_legacy, nullptr},
        {"the host reads a copy's destination before it synchronises", c_host_reads_early,
         "host code reads pinned memory at"},
        {"the host reads a copy's destination after cudaStreamSynchronize", c_host_reads_after_sync,
         nullptr},
        {"the host writes an upload's source before it synchronises", c_host_writes_upload_source,
         "host code writes pinned memory at"},
        {"the host beside and then inside a small download", c_host_small_copy,
         "byte 255 of the 256 bytes that cudaMemcpyAsync (DeviceToHost)"},
        {"a static array beside 227 KiB of dynamic shared memory", c_smem_past_optin,
         "static bytes plus 232448 dynamic exceed the 232448 bytes"},
    };
    for (auto &c : cases) {
        int rc = child(c.what, c.body, out, sizeof out);
        if (c.want)
            CHECK(rc != 0 && strstr(out, c.want), "%s: exit %d, want a report with '%s':\n%s",
                  c.what, rc, c.want, out);
        else
            CHECK(rc == 0, "%s: exit %d, want no hazard:\n%s", c.what, rc, out);
        printf("checker: %s: %s\n", c.what, rc == 0 ? "clean" : "reported");
    }
}

int main(void) {
    checker(); /* first: the children must not inherit a running emulator */
    profiler();
    ldmatrix_costs();
    dyn_smem();
    printf("emu_profile: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}

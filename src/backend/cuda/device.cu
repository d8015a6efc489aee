/* CUDA device bookkeeping: accounted device allocations (a host-side table maps each pointer
 * to its category and size, since cudaFree does not tell), streams, synchronous copies, and
 * the process's cuBLAS handle. The C API is backend/cuda_device.h. */
#include "backend/cuda/cuda_internal.h"

#include <pthread.h>

/* ---- allocation table: pointer -> (category, nbytes), chained hash ------------------- */

#define ALLOC_BUCKETS 1024

typedef struct alloc_rec {
    void *ptr;
    size_t nbytes;
    zs_mem_category cat;
    struct alloc_rec *next;
} alloc_rec;

static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc_rec *g_alloc_tab[ALLOC_BUCKETS];

static size_t bucket_of(const void *p) {
    /* cudaMalloc returns 256-byte aligned pointers: drop the always-zero bits. */
    return ((uintptr_t)p >> 8) % ALLOC_BUCKETS;
}

extern "C" int zs_cuda_built(void) {
    return 1;
}

extern "C" int zs_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error for later calls */
        return 0;
    }
    return n;
}

/* Dense FLOP per clock per SM (an FMA counts 2): CUDA cores for fp32, tensor cores for TF32 and
 * bf16. sm_80: 64 fp32 lanes, 512 TF32 and 1024 bf16 FMA a clock; sm_90 twice each. */
static const struct {
    int major, minor;
    double per_sm[3]; /* ZS_MATH_FP32, TF32, BF16 */
} k_rates[] = {{8, 0, {128, 1024, 2048}}, {9, 0, {256, 2048, 4096}}};

extern "C" double zs_cuda_peak_flops(zs_gemm_math math, char *basis, size_t cap) {
    int dev = 0, khz = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        if (cap) snprintf(basis, cap, "no CUDA device");
        return 0;
    }
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        khz = 0;
    }
    for (size_t i = 0; i < sizeof k_rates / sizeof k_rates[0]; i++) {
        if (k_rates[i].major != prop.major || k_rates[i].minor != prop.minor) continue;
        double rate = k_rates[i].per_sm[math];
        if (khz <= 0) break;
        if (cap)
            snprintf(basis, cap, "%s: %d SMs x %d MHz x %.0f FLOP/clock", prop.name,
                     prop.multiProcessorCount, khz / 1000, rate);
        return prop.multiProcessorCount * (khz * 1e3) * rate;
    }
    if (cap)
        snprintf(basis, cap, "%s (sm_%d%d%s): peak unknown", prop.name, prop.major, prop.minor,
                 khz <= 0 ? ", no clock reported" : "");
    return 0;
}

/* ---- the emulated GPU's profiler ---------------------------------------------------------------
 */
#ifdef ZS_CUDA_EMU
#include "emu_profile.h"
#endif

static zs_status no_profiler(const char *what) {
    return zs_error(ZS_ERR_UNSUPPORTED,
                    "%s: predicted timings need the emulated GPU (the tests' zshard-emu); on a "
                    "GPU, Nsight Compute measures them (scripts/gpu-check.sh)",
                    what);
}

extern "C" int zs_cuda_emulated(void) {
#ifdef ZS_CUDA_EMU
    return 1;
#else
    return 0;
#endif
}

extern "C" zs_status zs_cuda_predict_enable(void) {
#ifdef ZS_CUDA_EMU
    if (zs_emu_predict_enable() != 0)
        return zs_error(ZS_ERR_INVALID, "predictions must be enabled before the first device "
                                        "allocation");
    return ZS_OK;
#else
    return no_profiler("zs_cuda_predict_enable");
#endif
}

extern "C" zs_status zs_cuda_profile_start(void) {
#ifdef ZS_CUDA_EMU
    zs_emu_profile_start();
    return ZS_OK;
#else
    return no_profiler("zs_cuda_profile_start");
#endif
}

extern "C" zs_status zs_cuda_profile_stop(double *seconds, char **table) {
#ifdef ZS_CUDA_EMU
    zs_emu_profile_stop();
    if (seconds) *seconds = zs_emu_profile_total();
    if (table) *table = zs_emu_profile_table();
    return ZS_OK;
#else
    if (seconds) *seconds = 0;
    if (table) *table = NULL;
    return no_profiler("zs_cuda_profile_stop");
#endif
}

extern "C" zs_status zs_cuda_profile_timeline(double *seconds) {
#ifdef ZS_CUDA_EMU
    *seconds = zs_emu_profile_timeline();
    return ZS_OK;
#else
    *seconds = 0;
    return no_profiler("zs_cuda_profile_timeline");
#endif
}

extern "C" double zs_cuda_model_peak_flops(zs_gemm_math math, char *basis, size_t cap) {
#ifdef ZS_CUDA_EMU
    static const char *names[] = {"fp32", "tf32 tensor", "bf16 tensor"};
    double p = zs_emu_model_peak((int)math);
    if (cap) snprintf(basis, cap, "H100 SXM model, %s", names[math]);
    return p;
#else
    (void)math;
    if (cap) snprintf(basis, cap, "no model: not the emulated GPU");
    return 0;
#endif
}

extern "C" char *zs_cuda_model_notes(void) {
#ifdef ZS_CUDA_EMU
    return zs_emu_model_notes();
#else
    return NULL;
#endif
}

static int g_rank_device; /* the rank's GPU, for its other threads (zs_cuda_bind_thread) */

extern "C" zs_status zs_cuda_set_device(int device) {
    zs_status st = ZS_OK;
    int n = zs_cuda_device_count();
    ZS_REQUIRE(device >= 0 && device < n, ZS_ERR_INVALID,
               "cuda: device %d does not exist (%d visible)", device, n);
    ZS_CUDA_CHECK(cudaSetDevice(device));
    g_rank_device = device;
fail:
    return st;
}

extern "C" zs_status zs_cuda_bind_thread(void) {
    zs_status st = ZS_OK;
    ZS_CUDA_CHECK(cudaSetDevice(g_rank_device));
fail:
    return st;
}

extern "C" zs_status zs_cuda_alloc(zs_mem_category cat, size_t nbytes, const char *what,
                                   void **out) {
    zs_status st = ZS_OK;
    void *p = NULL;
    alloc_rec *rec = NULL;
    int accounted = 0;
    cudaError_t rc;
    size_t b;
    *out = NULL;
    if (nbytes == 0) return ZS_OK;
    ZS_REQUIRE(nbytes <= (size_t)INT64_MAX, ZS_ERR_OOM, "cannot allocate %s: size %zu overflows",
               what, nbytes);
    /* Reserve under the cap first, so concurrent callers cannot both pass it. */
    ZS_CHECK(zs_mem_account_in(ZS_LEDGER_DEVICE, cat, (int64_t)nbytes, what));
    accounted = 1;
    rec = (alloc_rec *)malloc(sizeof *rec);
    ZS_REQUIRE(rec, ZS_ERR_OOM, "out of host memory recording device buffer %s", what);
    rc = cudaMalloc(&p, nbytes);
    if (rc != cudaSuccess) {
        char need[32];
        (void)cudaGetLastError();
        zs_format_bytes(nbytes, need, sizeof need);
        st = zs_error(rc == cudaErrorMemoryAllocation ? ZS_ERR_OOM : ZS_ERR_CUDA,
                      "cudaMalloc of %s for %s failed: %s", need, what, cudaGetErrorString(rc));
        p = NULL;
        goto fail;
    }
    /* Zero-filled like zs_alloc (padding of flat buffers must read 0). cudaMemset is ordered
     * on the default stream; waiting here makes the buffer ready for every stream. */
    ZS_CUDA_CHECK(cudaMemset(p, 0, nbytes));
    ZS_CUDA_CHECK(cudaStreamSynchronize(0));
    rec->ptr = p;
    rec->nbytes = nbytes;
    rec->cat = cat;
    b = bucket_of(p);
    pthread_mutex_lock(&g_alloc_lock);
    rec->next = g_alloc_tab[b];
    g_alloc_tab[b] = rec;
    pthread_mutex_unlock(&g_alloc_lock);
    *out = p;
    return ZS_OK;
fail:
    if (p) cudaFree(p);
    free(rec);
    if (accounted) zs_mem_account_in(ZS_LEDGER_DEVICE, cat, -(int64_t)nbytes, what);
    return st;
}

extern "C" void zs_cuda_free(void *ptr) {
    if (!ptr) return;
    alloc_rec *rec = NULL;
    size_t b = bucket_of(ptr);
    pthread_mutex_lock(&g_alloc_lock);
    for (alloc_rec **pp = &g_alloc_tab[b]; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == ptr) {
            rec = *pp;
            *pp = rec->next;
            break;
        }
    pthread_mutex_unlock(&g_alloc_lock);
    /* A pointer we never handed out is a caller bug; freeing it unaccounted is the least bad
     * thing a void function can do. */
    cudaFree(ptr);
    if (rec) {
        zs_mem_account_in(ZS_LEDGER_DEVICE, rec->cat, -(int64_t)rec->nbytes, "device buffer");
        free(rec);
    }
}

/* ---- streams and copies ------------------------------------------------------------- */

extern "C" zs_status zs_cuda_stream_create(zs_stream_t **out) {
    zs_status st = ZS_OK;
    zs_stream_t *s = (zs_stream_t *)calloc(1, sizeof *s);
    *out = NULL;
    ZS_REQUIRE(s, ZS_ERR_OOM, "cuda: out of host memory creating a stream");
    ZS_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamDefault));
    *out = s;
    return ZS_OK;
fail:
    free(s);
    return st;
}

/* A stream's scratch buffer: grown to the next power of two >= 64 elements covering n, in
 * stream order (the old one freed after the work queued before), accounted as workspace. */
typedef struct scratch_buf {
    void **p;
    size_t *cap; /* elements */
    size_t es;
    const char *what;
} scratch_buf;

static void scratch_release(zs_stream_t *s, scratch_buf b) {
    if (!*b.p) return;
    cudaFreeAsync(*b.p, s->stream);
    zs_mem_account_in(ZS_LEDGER_DEVICE, ZS_MEM_WORKSPACE, -(int64_t)(*b.cap * b.es), b.what);
    *b.p = NULL;
    *b.cap = 0;
}

static scratch_buf reduction_scratch(zs_stream_t *s) {
    return (scratch_buf){(void **)&s->scratch, &s->scratch_n, sizeof(double), "reduction scratch"};
}

static scratch_buf gemm_scratch(zs_stream_t *s) {
    return (scratch_buf){(void **)&s->gemm16, &s->gemm16_n, sizeof(zs_bf16),
                         "gemm operand scratch (bf16)"};
}

static zs_status scratch_grow(zs_stream_t *s, scratch_buf b, size_t n) {
    zs_status st = ZS_OK;
    size_t want = 64;
    if (*b.cap >= n) return ZS_OK;
    /* Grow to the next power of two, so a run settles after its largest use. */
    while (want < n)
        want *= 2;
    scratch_release(s, b);
    ZS_CHECK(zs_mem_account_in(ZS_LEDGER_DEVICE, ZS_MEM_WORKSPACE, (int64_t)(want * b.es), b.what));
    if (cudaMallocAsync(b.p, want * b.es, s->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        zs_mem_account_in(ZS_LEDGER_DEVICE, ZS_MEM_WORKSPACE, -(int64_t)(want * b.es), b.what);
        *b.p = NULL;
        ZS_REQUIRE(0, ZS_ERR_OOM, "cuda: cannot allocate %zu bytes of %s", want * b.es, b.what);
    }
    *b.cap = want;
fail:
    return st;
}

extern "C" void zs_cuda_stream_destroy(zs_stream_t *s) {
    if (!s) return;
    scratch_release(s, reduction_scratch(s));
    scratch_release(s, gemm_scratch(s));
    cudaStreamSynchronize(s->stream);
    cudaStreamDestroy(s->stream);
    free(s);
}

/* The default stream's scratch buffers. */
static zs_stream_t g_null_stream;

/* s's (or the default stream's) buffer `which`, grown to n elements; its address in *out. */
static zs_status scratch_get(zs_stream_t *s, scratch_buf (*which)(zs_stream_t *), size_t n,
                             void **out) {
    if (!s) s = &g_null_stream;
    scratch_buf b = which(s);
    zs_status st = scratch_grow(s, b, n);
    *out = *b.p;
    return st;
}

zs_status zs_cu_scratch(zs_stream_t *s, size_t n, double **out) {
    return scratch_get(s, reduction_scratch, n, (void **)out);
}

zs_status zs_cu_gemm_scratch(zs_stream_t *s, size_t n, zs_bf16 **out) {
    return scratch_get(s, gemm_scratch, n, (void **)out);
}

void zs_cu_twin16(zs_stream_t *s, const float *f32, const zs_bf16 *b16, size_t n) {
    if (!s) return;
    s->twin_f32 = n ? f32 : NULL;
    s->twin_b16 = n ? b16 : NULL;
    s->twin_n = n;
}

const zs_bf16 *zs_cu_twin_at(zs_stream_t *s, const float *x, size_t n) {
    if (!s || !s->twin_n || !x) return NULL;
    uintptr_t base = (uintptr_t)s->twin_f32, at = (uintptr_t)x;
    if (at < base || (at - base) % sizeof(float)) return NULL;
    size_t off = (at - base) / sizeof(float);
    if (off > s->twin_n || n > s->twin_n - off) return NULL;
    return s->twin_b16 + off;
}

const zs_bf16 *zs_cu_twin_of(zs_stream_t *s, const float *x, size_t n) {
    const zs_bf16 *t = zs_cu_twin_at(s, x, n);
    return (uintptr_t)t % 16 ? NULL : t;
}

extern "C" void *zs_cuda_stream_handle(zs_stream_t *s) {
    return (void *)zs_cu_stream(s);
}

extern "C" zs_status zs_cuda_memcpy_h2d(void *dst_dev, const void *src_host, size_t nbytes) {
    zs_status st = ZS_OK;
    if (nbytes) ZS_CUDA_CHECK(cudaMemcpy(dst_dev, src_host, nbytes, cudaMemcpyHostToDevice));
fail:
    return st;
}

extern "C" zs_status zs_cuda_memcpy_d2h(void *dst_host, const void *src_dev, size_t nbytes) {
    zs_status st = ZS_OK;
    if (nbytes) ZS_CUDA_CHECK(cudaMemcpy(dst_host, src_dev, nbytes, cudaMemcpyDeviceToHost));
fail:
    return st;
}

/* ---- cuBLAS ------------------------------------------------------------------------- */

/* One handle for the process (one GPU per rank). A handle's stream is state, so setting it
 * and enqueuing the gemm happen under one lock; the gemm itself runs asynchronously after the
 * lock is released. */
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;
static cublasHandle_t g_blas;

zs_status zs_cu_blas_lock(cublasHandle_t *out) {
    zs_status st = ZS_OK;
    pthread_mutex_lock(&g_blas_lock);
    if (!g_blas) {
        ZS_CUBLAS_CHECK(cublasCreate(&g_blas));
        /* Plain fp32: no TF32 tensor-core rounding, so gemm agrees with the CPU's sgemm to
         * fp32 accuracy (CUBLAS_COMPUTE_32F in the call says the same). */
        ZS_CUBLAS_CHECK(cublasSetMathMode(g_blas, CUBLAS_DEFAULT_MATH));
    }
    *out = g_blas;
    return ZS_OK;
fail:
    if (g_blas) cublasDestroy(g_blas);
    g_blas = NULL;
    pthread_mutex_unlock(&g_blas_lock);
    return st;
}

void zs_cu_blas_unlock(void) {
    pthread_mutex_unlock(&g_blas_lock);
}

/* cuBLASLt's handle, beside cuBLAS's and under its lock (its calls take their stream as an
 * argument; the lock guards the stream's gemm scratch they read). */
static cublasLtHandle_t g_blaslt;

zs_status zs_cu_blaslt(cublasLtHandle_t *out) {
    zs_status st = ZS_OK;
    if (!g_blaslt) ZS_CUBLAS_CHECK(cublasLtCreate(&g_blaslt));
    *out = g_blaslt;
fail:
    return st;
}

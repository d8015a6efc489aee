/* The CPU's gemm in its three arithmetics (ops.h, zs_gemm_math): fp32 is OpenBLAS's sgemm on
 * the operands as they are; TF32 and bf16 round every input element first, as a GPU's tensor
 * cores do, then multiply the rounded values with sgemm (fp32 accumulation). The rounded modes
 * copy op(A) and op(B) panel by panel, rounded, in the operands' own layout (contiguous
 * vectorised runs; panels of at most 16 MiB), so the scratch stays bounded whatever the
 * shapes. The panels' order is fixed, so the results are deterministic. */
#include "backend/cpu/cpu.h"
#include "core/bf16.h"
#include "core/status.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PANEL_DEFAULT ((size_t)1 << 22) /* floats in a panel, at most (16 MiB) */
#define PK 4096

static _Atomic size_t g_panel = PANEL_DEFAULT;

/* Each calling thread keeps its panels between calls (a fresh 16 MiB malloc per GEMM would
 * be fresh pages, faulted in and zeroed every time); freed when the thread exits. */
typedef struct panels {
    float *p;
    size_t cap; /* floats */
} panels;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void panels_free(void *v) {
    panels *t = v;
    free(t->p);
    free(t);
}

static void key_init(void) {
    (void)pthread_key_create(&g_key, panels_free);
}

/* The calling thread's scratch of at least n floats, or NULL. */
static float *scratch(size_t n) {
    pthread_once(&g_key_once, key_init);
    panels *t = pthread_getspecific(g_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(g_key, t) != 0) {
            free(t);
            return NULL;
        }
    }
    if (t->cap < n) {
        free(t->p);
        t->p = malloc(n * sizeof *t->p);
        t->cap = t->p ? n : 0;
    }
    return t->p;
}

void zs_cpu_gemm_panel(size_t floats) {
    g_panel = floats ? floats : PANEL_DEFAULT;
}

zs_status zs_cpu_gemm_fp32(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc) {
    zs_status st = zs_gemm_check(transa, transb, m, n, k, A, lda, B, ldb, C, ldc);
    (void)s;
    if (st != ZS_OK || m == 0 || n == 0) return st;
    cblas_sgemm(CblasColMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return ZS_OK;
}

/* Rounded copy of n contiguous floats, written so the compiler vectorises it (selects, no
 * branches). TF32: 10 mantissa bits, to nearest with ties away from zero (cvt.rna.tf32);
 * bf16: 7, to nearest even (core/bf16.h). Infinities pass; a NaN stays a quiet NaN. */
static void round_run(zs_gemm_math math, float *restrict dst, const float *restrict src, size_t n) {
    if (math == ZS_MATH_TF32) {
        for (size_t i = 0; i < n; i++) {
            uint32_t b = zs_f32_bits(src[i]);
            uint32_t special = (b & 0x7f800000u) == 0x7f800000u;
            uint32_t r = (b + 0x1000u) & 0xffffe000u;
            uint32_t keep = (b & 0xffffe000u) | ((b & 0x1fffu) ? 0x400000u : 0u);
            dst[i] = zs_bits_f32(special ? keep : r);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t b = zs_f32_bits(src[i]);
            uint32_t nan = (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu);
            uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
            dst[i] = zs_bits_f32(nan ? (b | 0x400000u) & 0xffff0000u : r);
        }
    }
}

/* Widened copy of n contiguous bf16 values: exact, and already rounded in either mode (bf16's
 * 7 mantissa bits fit TF32's 10). */
static void widen_run(float *restrict dst, const zs_bf16 *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = zs_bits_f32((uint32_t)src[i].bits << 16);
}

/* dst (rows x cols, leading dimension rows) = the rounded block of the stored matrix X (fp32,
 * or bf16 where x16) at rows r0.., columns c0..: its own layout, so every column is one
 * contiguous run. */
static void pack(zs_gemm_math math, float *dst, const void *X, int x16, int ld, int r0, int c0,
                 int rows, int cols) {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= 65536)
    for (int c = 0; c < cols; c++) {
        size_t at = (size_t)r0 + (size_t)(c0 + c) * ld;
        if (x16)
            widen_run(dst + (size_t)c * rows, (const zs_bf16 *)X + at, (size_t)rows);
        else
            round_run(math, dst + (size_t)c * rows, (const float *)X + at, (size_t)rows);
    }
}

static zs_status gemm_rounded(zs_gemm_math math, int transa, int transb, int m, int n, int k,
                              float alpha, const void *A, int a16, int lda, const void *B, int b16,
                              int ldb, float beta, float *C, int ldc) {
    zs_status st = zs_gemm_check(transa, transb, m, n, k, A, lda, B, ldb, C, ldc);
    float *ap, *bp;
    if (st != ZS_OK || m == 0 || n == 0) return st;
    if (k == 0) { /* C = beta C, as BLAS does */
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, 0, alpha, C, ldc, C, 1, beta,
                    C, ldc);
        return ZS_OK;
    }
    /* Panels of op(A) (mb x kb) and op(B) (kb x nb), copied in the operands' stored layout and
     * handed to sgemm with the caller's transpose flags. A panel holds up to PANEL floats (or
     * 512 x kb), so a whole operand is copied once when it fits: each element is rounded once
     * per k panel except for op(A)'s, again for each panel of n when m does not fit. */
    size_t panel = g_panel;
    int kb0 = k < PK ? k : PK;
    int mb0 = panel / (size_t)kb0 > 512 ? (int)(panel / (size_t)kb0) : 512, nb0 = mb0;
    if (mb0 > m) mb0 = m;
    if (nb0 > n) nb0 = n;
    ap = scratch((size_t)mb0 * kb0 + (size_t)kb0 * nb0);
    ZS_REQUIRE(ap, ZS_ERR_OOM, "gemm: out of memory for the rounded panels");
    bp = ap + (size_t)mb0 * kb0;
    for (int k0 = 0; k0 < k; k0 += kb0) {
        int kb = k - k0 < kb0 ? k - k0 : kb0;
        for (int n0 = 0; n0 < n; n0 += nb0) {
            int nb = n - n0 < nb0 ? n - n0 : nb0;
            if (transb)
                pack(math, bp, B, b16, ldb, n0, k0, nb, kb);
            else
                pack(math, bp, B, b16, ldb, k0, n0, kb, nb);
            for (int m0 = 0; m0 < m; m0 += mb0) {
                int mb = m - m0 < mb0 ? m - m0 : mb0;
                if (n0 == 0 || mb0 < m) { /* a single m panel stays packed across n */
                    if (transa)
                        pack(math, ap, A, a16, lda, k0, m0, kb, mb);
                    else
                        pack(math, ap, A, a16, lda, m0, k0, mb, kb);
                }
                cblas_sgemm(CblasColMajor, transa ? CblasTrans : CblasNoTrans,
                            transb ? CblasTrans : CblasNoTrans, mb, nb, kb, alpha, ap,
                            transa ? kb : mb, bp, transb ? nb : kb, k0 == 0 ? beta : 1.0f,
                            C + m0 + (size_t)n0 * ldc, ldc);
            }
        }
    }
fail:
    return st;
}

zs_status zs_cpu_gemm_tf32(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc) {
    (void)s;
    return gemm_rounded(ZS_MATH_TF32, transa, transb, m, n, k, alpha, A, 0, lda, B, 0, ldb, beta, C,
                        ldc);
}

zs_status zs_cpu_gemm_bf16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc) {
    (void)s;
    return gemm_rounded(ZS_MATH_BF16, transa, transb, m, n, k, alpha, A, 0, lda, B, 0, ldb, beta, C,
                        ldc);
}

zs_status zs_cpu_gemm16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                        const void *A, int a16, int lda, const void *B, int b16, int ldb,
                        float beta, float *C, int ldc) {
    (void)s;
    return gemm_rounded(ZS_MATH_BF16, transa, transb, m, n, k, alpha, A, a16, lda, B, b16, ldb,
                        beta, C, ldc);
}

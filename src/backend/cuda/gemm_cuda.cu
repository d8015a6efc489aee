/* The CUDA tables' gemm through cuBLAS: plain fp32 (the column-major arguments of ops.h as they
 * are), TF32, and bf16 on operands rounded into the stream's scratch (ops.h zs_gemm_cast_plan),
 * with the bf16 table's linear forward with a bias (cuBLASLt's bias epilogue) and linear
 * backwards (ops.h linear_fwd_bias, gemm_linear_bwd and gemm_linear_bwd16). The
 * casts and the column sums they share a pass with are ops_cuda.cu's kernels; the cuBLASLt
 * descriptors are gemm_lt_cuda.cu's. */
#include "backend/cuda/cuda_internal.h"
#include "core/bf16.h"

#include <string.h>

/* ---- gemm --------------------------------------------------------------------------- */

/* cublasGemmEx with C of type c_t (bf16: each fp32 result rounded once as it is stored). */
static zs_status blas_gemm_c(cublasHandle_t h, cublasComputeType_t compute, int transa, int transb,
                             int m, int n, int k, float alpha, const void *A, int lda,
                             const void *B, int ldb, cudaDataType in_t, float beta, void *C,
                             cudaDataType c_t, int ldc) {
    zs_status st = ZS_OK;
    /* k == 0 is C = beta C, as in BLAS; beta == 0 does not read C. */
    ZS_CUBLAS_CHECK(cublasGemmEx(h, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, in_t, lda,
                                 B, in_t, ldb, &beta, C, c_t, ldc, compute, CUBLAS_GEMM_DEFAULT));
fail:
    return st;
}

static zs_status blas_gemm(cublasHandle_t h, cublasComputeType_t compute, int transa, int transb,
                           int m, int n, int k, float alpha, const void *A, int lda, const void *B,
                           int ldb, cudaDataType in_t, float beta, float *C, int ldc) {
    return blas_gemm_c(h, compute, transa, transb, m, n, k, alpha, A, lda, B, ldb, in_t, beta, C,
                       CUDA_R_32F, ldc);
}

/* Every cuBLAS call's start: the library's lock taken (*h set once it is, so the caller's fail
 * path unlocks where *h is non-NULL), the handle on the op's stream, and, with scratch > 0, the
 * stream's bf16 scratch of that many elements in *w. */
static zs_status blas_begin(zs_stream_t *s, size_t scratch, cublasHandle_t *h, zs_bf16 **w) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_cu_blas_lock(h));
    ZS_CUBLAS_CHECK(cublasSetStream(*h, zs_cu_stream(s)));
    if (scratch) ZS_CHECK(zs_cu_gemm_scratch(s, scratch, w));
fail:
    return st;
}

/* blas_begin's end, on every path. */
static void blas_end(cublasHandle_t h) {
    if (h) zs_cu_blas_unlock();
}

/* x[0, n) in bf16 for a product, in *out: its twin (ops.h twin16) where s has one, else x
 * rounded into w. A twin off 16 bytes is copied into w: x's fp32 values may not be there. */
static zs_status round_in(zs_stream_t *s, zs_bf16 *w, const float *x, size_t n,
                          const zs_bf16 **out) {
    zs_status st = ZS_OK;
    const zs_bf16 *t = zs_cu_twin_of(s, x, n), *u = t ? NULL : zs_cu_twin_at(s, x, n);
    if (u)
        ZS_CUDA_CHECK(
            cudaMemcpyAsync(w, u, n * sizeof *u, cudaMemcpyDeviceToDevice, zs_cu_stream(s)));
    else if (!t)
        ZS_CHECK(zs_cu_f32_to_bf16(zs_cu_stream(s), w, x, n));
    *out = t ? t : w;
fail:
    return st;
}

/* The bf16 gemm on operands rounded into the stream's scratch w, by plan p (ops.h
 * zs_gemm_cast_plan): A whole then B (whole, or in pieces of columns with C's), or both in
 * pieces along k with C accumulating from the first piece's beta. Every cast runs on the
 * stream before the product that reads it and after the one before. */
static zs_status gemm_cast(cublasHandle_t h, zs_stream_t *s, zs_bf16 *w, zs_gemm_cast p, int transa,
                           int transb, int m, int n, int k, float alpha, const float *A, int lda,
                           const float *B, int ldb, float beta, float *C, int ldc) {
    zs_status st = ZS_OK;
    const zs_bf16 *a = NULL, *b = NULL;
    if (p.k_piece < k) { /* !transa && transb: A's columns and B's stored columns along k */
        for (int k0 = 0; k0 < k; k0 += p.k_piece) {
            int kc = k - k0 < p.k_piece ? k - k0 : p.k_piece;
            size_t na = zs_gemm_cast_round((size_t)m * kc);
            ZS_CHECK(round_in(s, w, A + (size_t)k0 * lda, (size_t)m * kc, &a));
            ZS_CHECK(round_in(s, w + na, B + (size_t)k0 * ldb, (size_t)n * kc, &b));
            ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, transa, transb, m, n, kc, alpha, a, lda, b,
                               ldb, CUDA_R_16BF, k0 ? 1.0f : beta, C, ldc));
        }
    } else {
        size_t na = zs_gemm_cast_round((size_t)m * k);
        ZS_CHECK(round_in(s, w, A, (size_t)m * k, &a));
        for (int j0 = 0; j0 < n; j0 += p.n_piece) { /* one piece unless !transb */
            int nc = n - j0 < p.n_piece ? n - j0 : p.n_piece;
            ZS_CHECK(round_in(s, w + na, B + (size_t)j0 * ldb, (size_t)k * nc, &b));
            ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, transa, transb, m, nc, k, alpha, a, lda, b,
                               ldb, CUDA_R_16BF, beta, C + (size_t)j0 * ldc, ldc));
        }
    }
fail:
    return st;
}

/* gemm in the table's arithmetic (ops.h, zs_gemm_math): plain fp32 (CUBLAS_COMPUTE_32F), or the
 * inputs down-converted to TF32 or bf16 on tensor cores with fp32 accumulation
 * (CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF). bf16 rounds the operands into
 * the stream's scratch first where zs_gemm_cast_plan allows (gemm_cast): the values FAST_16BF
 * takes, on the bf16 tensor cores. */
static zs_status cu_gemm_math(cublasComputeType_t compute, zs_stream_t *s, int transa, int transb,
                              int m, int n, int k, float alpha, const float *A, int lda,
                              const float *B, int ldb, float beta, float *C, int ldc) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    zs_bf16 *w = NULL;
    zs_gemm_cast plan = {0, n, k};
    ZS_CHECK(zs_gemm_check(transa, transb, m, n, k, A, lda, B, ldb, C, ldc));
    if (m == 0 || n == 0) return ZS_OK;
#ifdef ZS_MUTANT_SWAP_TRANS /* the tests' deliberately broken build: transposes swapped */
    {
        int t = transa;
        transa = transb;
        transb = t;
    }
#endif
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF)
        plan = zs_gemm_cast_plan(transa, transb, m, n, k, lda, ldb);
    /* the scratch under the cuBLAS lock: one thread at a time uses the default stream's */
    ZS_CHECK(blas_begin(s, plan.elems, &h, &w));
    if (plan.elems)
        ZS_CHECK(
            gemm_cast(h, s, w, plan, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc));
    else
        ZS_CHECK(blas_gemm(h, compute, transa, transb, m, n, k, alpha, A, lda, B, ldb, CUDA_R_32F,
                           beta, C, ldc));
fail:
    blas_end(h);
    return st;
}

zs_status zs_cu_gemm(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc) {
    return cu_gemm_math(CUBLAS_COMPUTE_32F, s, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                        C, ldc);
}

zs_status zs_cu_gemm_tf32(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc) {
    return cu_gemm_math(CUBLAS_COMPUTE_32F_FAST_TF32, s, transa, transb, m, n, k, alpha, A, lda, B,
                        ldb, beta, C, ldc);
}

zs_status zs_cu_gemm_bf16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc) {
#ifndef ZS_MUTANT_GEMM_32F
    return cu_gemm_math(CUBLAS_COMPUTE_32F_FAST_16BF, s, transa, transb, m, n, k, alpha, A, lda, B,
                        ldb, beta, C, ldc);
#else /* broken build: the bf16 arithmetic asked for, fp32 computed */
    return cu_gemm_math(CUBLAS_COMPUTE_32F, s, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                        C, ldc);
#endif
}

/* ops.h gemm16: the bf16 operand as it is, the fp32 one rounded into the stream's scratch by
 * zs_gemm16_plan: whole, or in pieces along m, n or k, each piece of A, B and C an offset into
 * them (a piece of the fp32 operand is a run of its stored columns, rounded just before its
 * product), k's products added in order. */
zs_status zs_cu_gemm16(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                       const void *A, int a16, int lda, const void *B, int b16, int ldb, float beta,
                       float *C, int ldc) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    zs_bf16 *w = NULL;
    const zs_bf16 *xw = NULL; /* the fp32 operand in bf16: w, or its twin */
    if (!a16 && !b16)
        return zs_cu_gemm_bf16(s, transa, transb, m, n, k, alpha, (const float *)A, lda,
                               (const float *)B, ldb, beta, C, ldc);
    ZS_CHECK(zs_gemm_check(transa, transb, m, n, k, (const float *)A, lda, (const float *)B, ldb, C,
                           ldc));
    if (m == 0 || n == 0) return ZS_OK;
    if (k == 0) { /* C = beta C */
        ZS_CHECK(blas_begin(s, 0, &h, NULL));
        ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                           CUDA_R_16BF, beta, C, ldc));
    } else {
        const float *X = (const float *)(a16 ? B : A); /* the fp32 operand, if any */
        int ld = a16 ? ldb : lda;
        zs_gemm16_split p = {0, ZS_SPLIT_NONE, 0, 0, -1}; /* both bf16: nothing rounded */
        if (a16 && b16) { /* the fp32 pair's pieces all the same, so its bits */
            zs_gemm_cast f =
                zs_gemm_cast_plan(transa, transb, m, n, k, transa ? k : m, transb ? n : k);
            if (f.elems && f.k_piece < k)
                p.dim = ZS_SPLIT_K, p.piece = f.k_piece;
            else if (f.elems && f.n_piece < n)
                p.dim = ZS_SPLIT_N, p.piece = f.n_piece;
        } else {
            p = zs_gemm16_plan(transa, transb, m, n, k, a16);
            ZS_REQUIRE(ld == p.rows, ZS_ERR_INVALID,
                       "gemm16: the fp32 operand is not packed (ld %d for %d rows)", ld, p.rows);
            ZS_REQUIRE(p.elems, ZS_ERR_INVALID,
                       "gemm16: a column of %d fp32 rows does not fit the %zu-element scratch",
                       p.rows, (size_t)ZS_GEMM_CAST_MAX);
        }
        int len = p.dim == ZS_SPLIT_M ? m : p.dim == ZS_SPLIT_N ? n : k;
        int piece = p.dim == ZS_SPLIT_NONE ? len : p.piece;
        ZS_CHECK(blas_begin(s, p.elems, &h, &w));
        if (p.elems && p.dim != p.own) /* not split along its columns: rounded once, whole */
            ZS_CHECK(round_in(s, w, X, p.elems, &xw));
        for (int c0 = 0; c0 < len; c0 += piece) {
            int nc = len - c0 < piece ? len - c0 : piece;
            size_t ao = 0, bo = 0, co = 0; /* element offsets of the piece in A, B and C */
            int pm = m, pn = n, pk = k;
            if (p.dim == ZS_SPLIT_M) {
                pm = nc, ao = transa ? (size_t)c0 * lda : (size_t)c0, co = (size_t)c0;
            } else if (p.dim == ZS_SPLIT_N) {
                pn = nc, bo = transb ? (size_t)c0 : (size_t)c0 * ldb, co = (size_t)c0 * ldc;
            } else if (p.dim == ZS_SPLIT_K) {
                pk = nc, ao = transa ? (size_t)c0 : (size_t)c0 * lda;
                bo = transb ? (size_t)c0 * ldb : (size_t)c0;
            }
            if (p.dim == p.own) /* this piece of its columns, rounded just before its product */
                ZS_CHECK(round_in(s, w, X + (size_t)c0 * ld, (size_t)p.rows * nc, &xw));
            const zs_bf16 *a = a16 ? (const zs_bf16 *)A + ao : xw + (p.dim == p.own ? 0 : ao);
            const zs_bf16 *b = b16 ? (const zs_bf16 *)B + bo : xw + (p.dim == p.own ? 0 : bo);
            ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, transa, transb, pm, pn, pk, alpha, a, lda, b,
                               ldb, CUDA_R_16BF, p.dim == ZS_SPLIT_K && c0 ? 1.0f : beta, C + co,
                               ldc));
        }
    }
fail:
    blas_end(h);
    return st;
}

/* linear_fwd_bias's out16 without a bias (a head into bf16 logits): out^T (OC x N, bf16) = W
 * inp^T by cublasGemmEx writing bf16, gemm16's fp32 sums each rounded once as stored, no fp32
 * copy. W (its twin, or rounded into the scratch) and an fp32 inp in the pieces of
 * zs_linear_fwd16_plan, k whole in every product. */
static zs_status linear_fwd16(zs_stream_t *s, zs_bf16 *out, const void *inp, int in16,
                              const float *W, int N, int IC, int OC) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    zs_bf16 *w = NULL;
    const zs_bf16 *a = NULL, *x = NULL;
    int op = 0, np = 0;
    size_t elems = zs_linear_fwd16_plan(N, IC, OC, in16, &op, &np), ic = (size_t)IC, na = 0;
    ZS_CHECK(zs_gemm_check(1, 0, OC, N, IC, W, IC, (const float *)inp, IC, W, OC));
    ZS_REQUIRE(out || (size_t)N * OC == 0, ZS_ERR_INVALID, "linear_fwd: NULL output");
    if (N == 0 || OC == 0) return ZS_OK;
    ZS_REQUIRE(elems, ZS_ERR_INVALID,
               "linear_fwd: rows of %d inputs do not fit the %zu-element gemm scratch", IC,
               (size_t)ZS_GEMM_CAST_MAX);
    na = zs_gemm_cast_round((size_t)op * ic);
    ZS_CHECK(blas_begin(s, elems, &h, &w));
    if (!in16 && np == N) /* the input whole: rounded once for every piece of W */
        ZS_CHECK(round_in(s, w + na, (const float *)inp, (size_t)N * ic, &x));
    for (int o0 = 0; o0 < OC; o0 += op) {
        int om = OC - o0 < op ? OC - o0 : op;
        ZS_CHECK(round_in(s, w, W + (size_t)o0 * ic, (size_t)om * ic, &a));
        for (int j0 = 0; j0 < N; j0 += np) {
            int jn = N - j0 < np ? N - j0 : np;
            if (in16)
                x = (const zs_bf16 *)inp + (size_t)j0 * ic;
            else if (np < N) /* this piece of the input's rows */
                ZS_CHECK(
                    round_in(s, w + na, (const float *)inp + (size_t)j0 * ic, (size_t)jn * ic, &x));
            ZS_CHECK(blas_gemm_c(h, CUBLAS_COMPUTE_32F, 1, 0, om, jn, IC, 1.0f, a, IC, x, IC,
                                 CUDA_R_16BF, 0.0f, out + (size_t)j0 * OC + o0, CUDA_R_16BF, OC));
        }
    }
fail:
    blas_end(h);
    return st;
}

/* ops.h linear_fwd_bias for the bf16 table: out^T (OC x N) = W inp^T + bias, W (and an fp32
 * inp) rounded into the stream's scratch whole, as gemm16 rounds them, the bias added in the
 * GEMM's epilogue; with out16, D is bf16 (each fp32 sum rounded as it is written); with gelu, D
 * is gelu and out the epilogue's aux; with res, C is res and beta 1 (D = out; without a bias,
 * no epilogue). Where the operands are split into pieces, the bias (or res against out) is
 * less aligned, or cuBLASLt has no algorithm for the call, gemm16 then bias_fwd (into tmp, then
 * a cast, for out16), bias_gelu_fwd16 or bias_residual_fwd: the same additions (not the GELU's
 * last bits, nor the residual's order). */
zs_status zs_cu_linear_fwd_bias(zs_stream_t *s, void *out, int out16, float *tmp, const void *inp,
                                int in16, const float *W, const float *bias, int N, int IC, int OC,
                                zs_bf16 *gelu, const float *res) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    zs_bf16 *w = NULL;
    const zs_bf16 *tw = NULL, *a = NULL; /* W's twin (ops.h twin16), W in bf16 */
    zs_lt_call c;
    cudaStream_t cs = zs_cu_stream(s);
    size_t elems = 0, na = zs_gemm_cast_round((size_t)OC * IC);
    float one = 1.0f, zero = 0.0f;
    float *f = out16 || res ? tmp : (float *)out; /* the product where the epilogue is not used */
    memset(&c, 0, sizeof c);
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0, ZS_ERR_INVALID,
               "linear_fwd: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    ZS_REQUIRE(!gelu || (out16 && bias), ZS_ERR_INVALID,
               "linear_fwd: a GELU epilogue takes a bias and a bf16 output");
    ZS_REQUIRE(!res || (!out16 && !gelu && (tmp || (size_t)N * OC == 0)), ZS_ERR_INVALID,
               "linear_fwd: a residual takes an fp32 output and a scratch, no GELU");
    if (out16 && !bias) return linear_fwd16(s, (zs_bf16 *)out, inp, in16, W, N, IC, OC);
    ZS_REQUIRE(!out16 || tmp || (size_t)N * OC == 0, ZS_ERR_INVALID,
               "linear_fwd: a bf16 output without a scratch");
    if (in16) { /* W whole (A, transposed), inp as it is */
        zs_gemm16_split p = zs_gemm16_plan(1, 0, OC, N, IC, 0);
        elems = p.dim == ZS_SPLIT_NONE ? p.elems : 0;
    } else { /* W whole, then inp whole */
        zs_gemm_cast p = zs_gemm_cast_plan(1, 0, OC, N, IC, IC, IC);
        elems = p.n_piece == N && p.k_piece == IC ? p.elems : 0;
    }
    /* (a residual C at least as aligned as D, for which the algorithm is chosen) */
    if (elems && (bias ? (uintptr_t)bias % 16 == 0 : res != NULL) &&
        (!res || zs_cu_lt_align(res) >= zs_cu_lt_align(out))) {
        const zs_bf16 *x = in16 ? (const zs_bf16 *)inp : NULL;
        /* (the shape checks of gemm's, on a stand-in for a bf16 output) */
        ZS_CHECK(zs_gemm_check(1, 0, OC, N, IC, W, IC, (const float *)inp, IC,
                               out16 ? W : (const float *)out, OC));
        ZS_REQUIRE(out || (size_t)N * OC == 0, ZS_ERR_INVALID, "linear_fwd: NULL output");
        ZS_CHECK(blas_begin(s, elems, &h, &w));
        x = x ? x : w + na;
        tw = zs_cu_twin_of(s, W, (size_t)OC * IC);
        a = tw ? tw : w;
        ZS_CHECK(zs_cu_lt_plan(&c,
                               gelu   ? ZS_LT_GELU_AUX_BIAS
                               : bias ? ZS_LT_BIAS
                                      : ZS_LT_DEFAULT,
                               1, 0, OC, N, IC, a, IC, x, IC, gelu ? (void *)gelu : out, out16, OC,
                               bias, gelu ? out : NULL));
        if (c.found) {
            if (!tw) ZS_CHECK(round_in(s, w, W, (size_t)OC * IC, &a));
            if (!in16) ZS_CHECK(zs_cu_f32_to_bf16(cs, w + na, (const float *)inp, (size_t)IC * N));
            void *d = gelu ? (void *)gelu : out;
            const void *cin = res ? (const void *)res : d;
            ZS_CUBLAS_CHECK(cublasLtMatmul(c.lt, c.d, &one, a, c.la, x, c.lb, res ? &one : &zero,
                                           cin, c.lc, d, c.lc, &c.heur.algo, NULL, 0, cs));
        } else { /* no algorithm: the lock released for gemm16's own */
            blas_end(h);
            h = NULL;
        }
    }
    if (!c.found) {
        ZS_CHECK(zs_cu_gemm16(s, 1, 0, OC, N, IC, 1.0f, W, 0, IC, inp, in16, IC, 0.0f, f, OC));
        if (gelu) {
            ZS_CHECK(zs_cu_bias_gelu_fwd16(s, (zs_bf16 *)out, f, gelu, bias, N, OC));
        } else if (res) {
            ZS_CHECK(zs_cu_bias_residual_fwd(s, (float *)out, NULL, res, f, bias, N, OC));
        } else {
            if (bias) ZS_CHECK(zs_cu_bias_fwd(s, f, bias, N, OC));
            if (out16) ZS_CHECK(zs_cu_f32_to_bf16(cs, (zs_bf16 *)out, f, (size_t)N * OC));
        }
    }
fail:
    zs_cu_lt_free(&c);
    blas_end(h);
    return st;
}

/* gemm_linear_bwd without a bias or GELU where W, dout and inp do not fit the scratch together
 * (zs_linear_bwd_rows_plan): W rounded once, then dout's and inp's rows in pieces of `rows`,
 * each piece rounded once for both products (a bf16 one taken as it is): its columns of
 * dinp^T, and its part of dW^T's sum along N (the pieces' products added in order). Where each
 * GEMM planned its own pieces, dout was rounded once for each. */
static zs_status linear_bwd_rows(zs_stream_t *s, float *dinp, float *dW, const void *dout,
                                 int dout16, const void *inp, int inp16, const float *W, int N,
                                 int IC, int OC, float dinp_beta, int rows) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    zs_bf16 *w = NULL;
    cudaStream_t cs = zs_cu_stream(s);
    size_t nw = zs_gemm_cast_round((size_t)IC * OC), nd = dout16 ? 0 : (size_t)OC * rows;
    const zs_bf16 *wb = NULL; /* W in bf16: its twin, or rounded into w */
    ZS_CHECK(zs_gemm_check(0, 0, IC, N, OC, W, IC, (const float *)dout, OC, dinp, IC));
    ZS_CHECK(
        zs_gemm_check(0, 1, IC, OC, N, (const float *)inp, IC, (const float *)dout, OC, dW, IC));
    ZS_CHECK(blas_begin(s, nw + nd + (inp16 ? 0 : (size_t)IC * rows), &h, &w));
    ZS_CHECK(round_in(s, w, W, (size_t)IC * OC, &wb));
    for (int j0 = 0; j0 < N; j0 += rows) {
        int nc = N - j0 < rows ? N - j0 : rows;
        const zs_bf16 *x = inp16 ? (const zs_bf16 *)inp + (size_t)j0 * IC : w + nw + nd;
        const zs_bf16 *g = dout16 ? (const zs_bf16 *)dout + (size_t)j0 * OC : w + nw;
        if (!dout16)
            ZS_CHECK(zs_cu_f32_to_bf16(cs, w + nw, (const float *)dout + (size_t)j0 * OC,
                                       (size_t)OC * nc));
        if (!inp16)
            ZS_CHECK(zs_cu_f32_to_bf16(cs, w + nw + nd, (const float *)inp + (size_t)j0 * IC,
                                       (size_t)IC * nc));
        ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, 0, 0, IC, nc, OC, 1.0f, wb, IC, g, OC,
                           CUDA_R_16BF, dinp_beta, dinp + (size_t)j0 * IC, IC));
        ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, 0, 1, IC, OC, nc, 1.0f, x, IC, g, OC, CUDA_R_16BF,
                           1.0f, dW, IC));
    }
fail:
    blas_end(h);
    return st;
}

/* ops.h gemm_linear_bwd for the bf16 table: W, dout and inp rounded into the stream's scratch
 * once (dout serves both products; a bf16 dout or inp taken as it is), then linear.c's two
 * gemms on them; where the three do not fit (zs_linear_bwd_cast_elems 0), the two gemms each
 * casting their own. With dbias or gelu_inp, dout's rounding is bias_bwd's pass over it (one
 * read of dout where a GELU's backward, a cast and a sum took three passes). A bf16 dout is G
 * as it is where no GELU comes between (its bias gradient from dW's product, cuBLASLt's BGRADB
 * epilogue, in cuBLASLt's order; where cuBLASLt has no algorithm the bias pass sums it), and with a
 * GELU is read there as it is, the G it writes taking an fp32 dout's room. dinp16: the dinp GEMM
 * writes bf16. */
static zs_status linear_bwd_bf16(zs_stream_t *s, void *dinp, int dinp16, float *dW, float *dbias,
                                 const void *dout, int dout16, const void *gelu_inp, int gelu16,
                                 float *dtmp, const void *inp, int inp16, const float *W, int N,
                                 int IC, int OC, float dinp_beta, const zs_bf16 *dgelu,
                                 float *dgelu_dbias) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    int g16 = dout16 && !gelu_inp; /* G is dout as it is */
    size_t cast = zs_linear_bwd_cast_elems(N, IC, OC, inp16, g16);
    size_t nw = zs_gemm_cast_round((size_t)IC * OC);
    size_t nd = g16 ? 0 : zs_gemm_cast_round((size_t)OC * N);
    zs_bf16 *w = NULL;
    const zs_bf16 *wb = NULL; /* W in bf16: its twin, or rounded into w */
    cudaStream_t cs = zs_cu_stream(s);
#ifdef ZS_MUTANT_GEMM_32F
    cast = 0; /* the broken build's fp32 arithmetic: through cu_gemm_bf16 below */
#endif
    ZS_REQUIRE(!gelu_inp || dtmp, ZS_ERR_INVALID, "linear_bwd: GELU input without a scratch");
    ZS_REQUIRE(g16 || !dout16 || cast, ZS_ERR_INVALID,
               "linear_bwd: a bf16 output gradient with a GELU at N=%d IC=%d OC=%d: its "
               "operands do not fit the gemm scratch together",
               N, IC, OC);
    ZS_REQUIRE(!dinp16 || (cast && dinp_beta == 0.0f), ZS_ERR_INVALID,
               "linear_bwd: a bf16 input gradient at N=%d IC=%d OC=%d needs dinp_beta 0 and "
               "operands that fit the gemm scratch together",
               N, IC, OC);
#ifndef ZS_MUTANT_GEMM_32F
    { /* too large to round at once, without a bias or GELU: in pieces of rows */
        int rows = 0;
        if (!cast && !dbias && !gelu_inp &&
            zs_linear_bwd_rows_plan(N, IC, OC, inp16, dout16, &rows))
            return linear_bwd_rows(s, (float *)dinp, dW, dout, dout16, inp, inp16, W, N, IC, OC,
                                   dinp_beta, rows);
    }
#endif
    if (!cast) {
        if (gelu_inp && gelu16)
            ZS_CHECK(zs_cu_gelu_bwd16(s, dtmp, (const zs_bf16 *)gelu_inp, (const float *)dout,
                                      (size_t)N * OC));
        else if (gelu_inp)
            ZS_CHECK(zs_cu_gelu_bwd(s, dtmp, (const float *)gelu_inp, (const float *)dout,
                                    (size_t)N * OC));
        if (gelu_inp) dout = dtmp;
        ZS_CHECK(zs_cu_gemm16(s, 0, 0, IC, N, OC, 1.0f, W, 0, IC, dout, dout16, OC, dinp_beta,
                              (float *)dinp, IC));
        ZS_CHECK(
            zs_cu_gemm16(s, 0, 1, IC, OC, N, 1.0f, inp, inp16, IC, dout, dout16, OC, 1.0f, dW, IC));
        return dbias ? zs_cu_bias_bwd_cast(s, dbias, dout, dout16, N, OC, NULL, NULL, 0) : ZS_OK;
    }
    ZS_CHECK(
        zs_gemm_check(0, 0, IC, N, OC, W, IC, (const float *)dout, OC, (const float *)dinp, IC));
    ZS_CHECK(
        zs_gemm_check(0, 1, IC, OC, N, (const float *)inp, IC, (const float *)dout, OC, dW, IC));
    ZS_CHECK(blas_begin(s, cast, &h, &w));
    ZS_CHECK(round_in(s, w, W, (size_t)IC * OC, &wb));
    if (gelu_inp || (dbias && !g16))
        ZS_CHECK(zs_cu_bias_bwd_cast(s, dbias, dout, dout16, N, OC, w + nw, gelu_inp, gelu16));
    else if (!dout16)
        ZS_CHECK(zs_cu_f32_to_bf16(cs, w + nw, (const float *)dout, (size_t)OC * N));
    if (!inp16) ZS_CHECK(zs_cu_f32_to_bf16(cs, w + nw + nd, (const float *)inp, (size_t)IC * N));
    {
        const zs_bf16 *g = g16 ? (const zs_bf16 *)dout : w + nw;
        int done = 0; /* dinp through the GELU with its bias gradient (DGELU_BGRAD), or dW's
                       * product with G's bias gradient (BGRADB), where cuBLASLt can */
        if (dgelu)
            ZS_CHECK(zs_cu_lt_dinp_dgelu(s, (zs_bf16 *)dinp, dgelu_dbias, dgelu, wb, g, N, IC, OC,
                                         &done));
        if (!done)
            ZS_CHECK(blas_gemm_c(h, CUBLAS_COMPUTE_32F, 0, 0, IC, N, OC, 1.0f, wb, IC, g, OC,
                                 CUDA_R_16BF, dinp_beta, dinp, dinp16 ? CUDA_R_16BF : CUDA_R_32F,
                                 IC));
        if (dgelu && !done) /* the GELU's backward and its bias gradient in place, as
                             * gelu_bwd_set16 would: the two-step path's bits */
            ZS_CHECK(
                zs_cu_bias_bwd_cast(s, dgelu_dbias, dinp, 1, N, IC, (zs_bf16 *)dinp, dgelu, 1));
        const zs_bf16 *x = inp16 ? (const zs_bf16 *)inp : w + nw + nd;
        done = 0;
        if (g16 && dbias) ZS_CHECK(zs_cu_lt_dw_bgrad(s, dW, dbias, x, g, N, IC, OC, &done));
        if (!done)
            ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, 0, 1, IC, OC, N, 1.0f, x, IC, g, OC,
                               CUDA_R_16BF, 1.0f, dW, IC));
        if (g16 && dbias && !done)
            ZS_CHECK(zs_cu_bias_bwd_cast(s, dbias, g, 1, N, OC, NULL, NULL, 0));
    }
fail:
    blas_end(h);
    return st;
}

zs_status zs_cu_gemm_linear_bwd_bf16(zs_stream_t *s, void *dinp, int dinp16, float *dW,
                                     float *dbias, const void *dout, int dout16,
                                     const void *gelu_inp, int gelu16, float *dtmp, const void *inp,
                                     int inp16, const float *W, int N, int IC, int OC,
                                     float dinp_beta) {
    return linear_bwd_bf16(s, dinp, dinp16, dW, dbias, dout, dout16, gelu_inp, gelu16, dtmp, inp,
                           inp16, W, N, IC, OC, dinp_beta, NULL, NULL);
}

/* ops.h gemm_linear_bwd_dgelu: linear_bwd_bf16 with dinp16, set, and dinp through the GELU of
 * gelu_pre (zs_cu_lt_dinp_dgelu; where cuBLASLt has no algorithm, dinp rounded, then bias_bwd's
 * GELU pass over it in place: gelu_bwd16's bits, as the fc layer's backward would). */
zs_status zs_cu_gemm_linear_bwd_dgelu(zs_stream_t *s, zs_bf16 *dinp, float *dinp_dbias,
                                      const zs_bf16 *gelu_pre, float *dW, float *dbias,
                                      const void *dout, int dout16, const void *inp, int inp16,
                                      const float *W, int N, int IC, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(dinp && dinp_dbias && gelu_pre, ZS_ERR_INVALID,
               "linear_bwd_dgelu: NULL input gradient, its bias gradient or the GELU's input");
    return linear_bwd_bf16(s, dinp, 1, dW, dbias, dout, dout16, NULL, 0, NULL, inp, inp16, W, N, IC,
                           OC, 0.0f, gelu_pre, dinp_dbias);
fail:
    return st;
}

/* ops.h gemm_linear_bwd16: G is bf16 already (softmax_xent16's dlogits), so only W and inp are
 * rounded, each into the whole scratch in turn, in zs_linear_bwd16_pieces' pieces: W's rows
 * (contiguous) with G^T's matching rows for dinp, then inp's rows with G^T's matching columns
 * for dW. A piece's product adds to the last one's in order. */
zs_status zs_cu_gemm_linear_bwd16(zs_stream_t *s, float *dinp, float *dW, const zs_bf16 *dout,
                                  int ldd, const float *inp, const float *W, int N, int IC, int OC,
                                  float dinp_beta) {
    zs_status st = ZS_OK;
    cublasHandle_t h = NULL;
    int op = 0, np = 0;
    zs_bf16 *w = NULL;
    const zs_bf16 *wb = NULL; /* a piece of W in bf16: its twin, or rounded into w */
    cudaStream_t cs = zs_cu_stream(s);
    size_t elems = zs_linear_bwd16_pieces(N, IC, OC, &op, &np);
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0 && ldd >= (OC > 1 ? OC : 1), ZS_ERR_INVALID,
               "linear_bwd16: bad shape N=%d IC=%d OC=%d ldd=%d", N, IC, OC, ldd);
    if (N == 0 || IC == 0 || (OC == 0 && !dinp)) return ZS_OK;
    if (OC == 0)
        return zs_cu_gemm_bf16(s, 0, 0, IC, N, 0, 1.0f, W, IC, NULL, 1, dinp_beta, dinp, IC);
    ZS_REQUIRE(op > 0 && np > 0, ZS_ERR_INVALID,
               "linear_bwd16: rows of %d inputs do not fit the %zu-element gemm scratch", IC,
               (size_t)ZS_GEMM_CAST_MAX);
    ZS_REQUIRE(dout && inp && W, ZS_ERR_INVALID, "linear_bwd16: NULL operand");
    ZS_CHECK(blas_begin(s, elems, &h, &w));
    for (int o0 = 0; dinp && o0 < OC; o0 += op) { /* dinp^T (IC x N) = W^T G^T, along OC */
        int oc = OC - o0 < op ? OC - o0 : op;
        ZS_CHECK(round_in(s, w, W + (size_t)o0 * IC, (size_t)oc * IC, &wb));
        ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, 0, 0, IC, N, oc, 1.0f, wb, IC, dout + o0, ldd,
                           CUDA_R_16BF, o0 ? 1.0f : dinp_beta, dinp, IC));
    }
    for (int n0 = 0; dW && n0 < N; n0 += np) { /* dW^T (IC x OC) += inp^T G, along N */
        int nc = N - n0 < np ? N - n0 : np;
        ZS_CHECK(zs_cu_f32_to_bf16(cs, w, inp + (size_t)n0 * IC, (size_t)nc * IC));
        ZS_CHECK(blas_gemm(h, CUBLAS_COMPUTE_32F, 0, 1, IC, OC, nc, 1.0f, w, IC,
                           dout + (size_t)n0 * ldd, ldd, CUDA_R_16BF, 1.0f, dW, IC));
    }
fail:
    blas_end(h);
    return st;
}

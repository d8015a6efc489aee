/* The emulated GPU's cuBLASLt (tests/cuda_emu/cublaslt.cc, docs/cuda.md "The emulated GPU"):
 * the calls zshard makes, with the checks cuBLASLt documents, and the product they run.
 *  - A bias epilogue on bf16 operands with an fp32 output, both transposes as the linear layers
 *    use them, and the default epilogue on fp32 operands with beta 1 (D = A B + D), and a
 *    residual's C apart from D (bias, beta 1; D poisoned first, C kept; beta 0 too): results
 *    against the host's exact sums (small integers and halves, exact in bf16 and in fp32 sums
 *    in any order), so the test does not depend on the emulator's own arithmetic. The bias
 *    epilogue writing a bf16 D beside an fp32 bias (linear_fwd_bias's out16): each exact sum
 *    rounded to the nearest bf16, some of them inexact. The GELU epilogue (GELU_AUX_BIAS, D and
 *    aux bf16, zs_cu_linear_fwd_bias's gelu): aux each exact sum rounded, D within half a bf16
 *    ulp (and 2^-12 of the sum: the fp32 GELU's own error) of the tanh GELU of the exact sum in
 *    double. BGRADB on the weight gradient's product (zs_cu_lt_dw_bgrad): D the product, the
 *    bias pointer op(B)'s column sums along k, written over NaN, both against exact sums.
 *    DGELU_BGRAD on the input gradient's product (zs_cu_lt_dinp_dgelu): D the GELU's gradient
 *    of aux times each exact sum, the bias pointer D's row sums, aux untouched (product_dgelu).
 *  - Refused, each with the status cuBLASLt gives: no handle (NOT_INITIALIZED); a layout that
 *    does not match the product, a leading dimension under its rows, a bias epilogue without a
 *    bias (a BGRADB epilogue too), a GELU epilogue without an aux pointer or with an aux leading
 * dimension not a multiple of 8, an attribute of the wrong size, a heuristic asked for no
 * algorithm, an algorithm not from the heuristic, an operand less aligned than the preference said
 * when the algorithm was chosen (INVALID_VALUE; accepted once the preference says so); a bias type
 * other than fp32 (BGRADB's sums too), an aux type other than D's, an epilogue or attribute the
 * emulated library does not implement (NOT_SUPPORTED); C overlapping D without being it
 * (INVALID_VALUE). */
#include "emu_check.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

static uint16_t bf16(float x) { /* exact for the values used here */
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16);
}

/* x rounded to the nearest bf16, ties to even (finite x), and a bf16 widened. */
static uint16_t bf16_rne(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
static float widen16(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static void *dev(const void *h, size_t bytes) {
    void *d = nullptr;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return nullptr;
    if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* One product's descriptors, set as gemm_cuda.cu's lt_gemm_bias sets them. */
struct Call {
    cublasLtMatmulDesc_t d = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    Call(cudaDataType in, int ta, int tb, int m, int n, int k, uint32_t epi, const void *bias,
         cudaDataType out = CUDA_R_32F) {
        int32_t a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        uint64_t ws = 0;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &a, sizeof a);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &b, sizeof b);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        cublasLtMatrixLayoutCreate(&la, in, ta ? k : m, ta ? m : k, ta ? k : m);
        cublasLtMatrixLayoutCreate(&lb, in, tb ? n : k, tb ? k : n, tb ? n : k);
        cublasLtMatrixLayoutCreate(&lc, out, m, n, m);
        if (out != CUDA_R_32F) { /* an fp32 bias beside a bf16 D, as linear_fwd_bias's out16 */
            int32_t bt = CUDA_R_32F;
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
    }
    ~Call() {
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(d);
    }
    cublasStatus_t algo(cublasLtHandle_t h, cublasLtMatmulHeuristicResult_t *r) {
        int got = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 1, r, &got);
        return st == CUBLAS_STATUS_SUCCESS && got != 1 ? CUBLAS_STATUS_EXECUTION_FAILED : st;
    }
    cublasStatus_t run(cublasLtHandle_t h, const void *A, const void *B, float beta, void *C,
                       void *D, const cublasLtMatmulAlgo_t *al) {
        float one = 1.0f;
        return cublasLtMatmul(h, d, &one, A, la, B, lb, &beta, C, lc, D, lc, al, nullptr, 0,
                              nullptr);
    }
};

/* D (m x n) = op(A) op(B) + beta C (+ bias), against the host's exact sums; C is D, or with
 * apart a buffer of its own (a residual's: D is poisoned first, and C must be kept). */
static void product(cublasLtHandle_t h, bool b16, int ta, int tb, bool with_bias, float beta,
                    bool apart = false) {
    const int m = 5, n = 7, k = 9;
    std::vector<float> A((size_t)m * k), B((size_t)k * n), bias(m), D0((size_t)m * n);
    for (size_t i = 0; i < A.size(); i++)
        A[i] = (float)((int)(i * 7 % 11) - 5) * 0.5f;
    for (size_t i = 0; i < B.size(); i++)
        B[i] = (float)((int)(i * 5 % 13) - 6);
    for (int i = 0; i < m; i++)
        bias[i] = 0.25f * (float)(i + 1);
    for (size_t i = 0; i < D0.size(); i++)
        D0[i] = (float)(i % 3);
    std::vector<uint16_t> A16(A.size()), B16(B.size());
    for (size_t i = 0; i < A.size(); i++)
        A16[i] = bf16(A[i]);
    for (size_t i = 0; i < B.size(); i++)
        B16[i] = bf16(B[i]);
    size_t es = b16 ? 2 : 4;
    void *dA = dev(b16 ? (const void *)A16.data() : A.data(), A.size() * es);
    void *dB = dev(b16 ? (const void *)B16.data() : B.data(), B.size() * es);
    float *dbias = (float *)dev(bias.data(), bias.size() * 4);
    float *dD = (float *)dev(D0.data(), D0.size() * 4), *dC = dD;
    if (apart) {
        std::vector<float> nan(D0.size(), NAN);
        dD = (float *)dev(nan.data(), nan.size() * 4);
    }
    Call c(b16 ? CUDA_R_16BF : CUDA_R_32F, ta, tb, m, n, k,
           with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, dbias);
    cublasLtMatmulHeuristicResult_t r;
    CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS && r.workspaceSize == 0, "heuristic");
    cublasStatus_t st = c.run(h, dA, dB, beta, dC, dD, &r.algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul: %d", (int)st);
    std::vector<float> got(D0.size());
    cudaMemcpy(got.data(), dD, got.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) /* A stored k x m when transposed, B n x k */
                s += (double)A[ta ? (size_t)i * k + p : (size_t)p * m + i] *
                     B[tb ? (size_t)p * n + j : (size_t)j * k + p];
            s += beta * D0[(size_t)j * m + i] + (with_bias ? bias[i] : 0.0f);
            bad += got[(size_t)j * m + i] != (float)s;
        }
    CHECK(!bad, "%s %c%c%s beta %g%s: %d of %d results wrong", b16 ? "bf16" : "fp32",
          ta ? 'T' : 'N', tb ? 'T' : 'N', with_bias ? " bias" : "", beta, apart ? ", C apart" : "",
          bad, m * n);
    if (apart) {
        cudaMemcpy(got.data(), dC, got.size() * 4, cudaMemcpyDeviceToHost);
        CHECK(!memcmp(got.data(), D0.data(), got.size() * 4), "C apart from D changed");
        cudaFree(dC);
    }
    cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dD);
}

/* Short bf16 operands and a bias, exact in any order of their fp32 sums at these sizes: A's and
 * B's small integers times sa and sb, bias[i] = sbias (i + b0). */
static void operands(std::vector<uint16_t> &A16, std::vector<uint16_t> &B16,
                     std::vector<float> &bias, float sa, float sb, float sbias, int b0) {
    for (size_t i = 0; i < A16.size(); i++)
        A16[i] = bf16((float)((int)(i * 7 % 11) - 5) * sa);
    for (size_t i = 0; i < B16.size(); i++)
        B16[i] = bf16((float)((int)(i * 5 % 13) - 6) * sb);
    for (size_t i = 0; i < bias.size(); i++)
        bias[i] = sbias * (float)((int)i + b0);
}

/* D[i, j]'s sum for A stored k x m (transposed) and B k x n, with bias[i]: exact, the few
 * short products of operands() added in any order. */
static float exact_sum(const std::vector<uint16_t> &A16, const std::vector<uint16_t> &B16,
                       const std::vector<float> &bias, int i, int j, int k) {
    float s = 0.0f;
    for (int p = 0; p < k; p++)
        s += widen16(A16[(size_t)i * k + p]) * widen16(B16[(size_t)j * k + p]);
    return s + bias[i];
}

/* The bias epilogue writing a bf16 D: each exact fp32 sum (product and bias) rounded once. */
static void product_d16(cublasLtHandle_t h) {
    const int m = 6, n = 5, k = 7;
    std::vector<uint16_t> A16((size_t)k * m), B16((size_t)k * n), D16((size_t)m * n, 0xffff);
    std::vector<float> bias(m);
    operands(A16, B16, bias, 0.375f, 1.125f, 0.0625f, 3);
    void *dA = dev(A16.data(), A16.size() * 2), *dB = dev(B16.data(), B16.size() * 2);
    void *dD = dev(D16.data(), D16.size() * 2);
    float *dbias = (float *)dev(bias.data(), bias.size() * 4);
    Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_BIAS, dbias, CUDA_R_16BF);
    cublasLtMatmulHeuristicResult_t r;
    CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "heuristic (bf16 D)");
    cublasStatus_t st = c.run(h, dA, dB, 0.0f, dD, dD, &r.algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul (bf16 D): %d", (int)st);
    std::vector<uint16_t> got(D16.size());
    cudaMemcpy(got.data(), dD, got.size() * 2, cudaMemcpyDeviceToHost);
    int bad = 0, rounded = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = exact_sum(A16, B16, bias, i, j, k);
            bad += got[(size_t)j * m + i] != bf16_rne(s);
            rounded += widen16(bf16_rne(s)) != s;
        }
    CHECK(!bad, "bf16 D with an fp32 bias: %d of %d results wrong", bad, m * n);
    CHECK(rounded > 0, "bf16 D: no sum needed rounding, so the check proves nothing");
    cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dD);
}

/* A GELU epilogue's aux attributes (GELU_AUX_BIAS unless epi says), as gemm_lt_cuda.cu's
 * zs_cu_lt_plan sets them. */
static void set_aux(Call &c, void *aux, int64_t ld, int32_t type,
                    uint32_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                   sizeof aux);
    cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type,
                                   sizeof type);
}

/* The GELU epilogue with a bf16 D and aux: aux the exact sums (product and bias) rounded, D the
 * GELU of the unrounded sums rounded: within half a bf16 ulp of the double-precision tanh GELU,
 * plus 2^-12 |x| for the fp32 GELU's own error (0.5 x (1 + tanh u) cancels where x < 0, and a
 * GPU's hardware tanh is good to 2^-11 relative: 0.5 |x| 2^-11 absolute). */
static void product_gelu(cublasLtHandle_t h) {
    const int m = 8, n = 6, k = 5;
    std::vector<uint16_t> A16((size_t)k * m), B16((size_t)k * n), D16((size_t)m * n, 0xffff);
    std::vector<uint16_t> X16(D16);
    std::vector<float> bias(m);
    operands(A16, B16, bias, 0.1875f, 0.5625f, 0.03125f, -3);
    void *dA = dev(A16.data(), A16.size() * 2), *dB = dev(B16.data(), B16.size() * 2);
    void *dD = dev(D16.data(), D16.size() * 2), *dX = dev(X16.data(), X16.size() * 2);
    float *dbias = (float *)dev(bias.data(), bias.size() * 4);
    Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_BIAS, dbias, CUDA_R_16BF);
    set_aux(c, dX, m, CUDA_R_16BF);
    cublasLtMatmulHeuristicResult_t r;
    CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "heuristic (GELU epilogue)");
    cublasStatus_t st = c.run(h, dA, dB, 0.0f, dD, dD, &r.algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul (GELU epilogue): %d", (int)st);
    std::vector<uint16_t> got(D16.size()), aux(X16.size());
    cudaMemcpy(got.data(), dD, got.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(aux.data(), dX, aux.size() * 2, cudaMemcpyDeviceToHost);
    int bad_aux = 0, bad = 0, rounded = 0, negative = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = exact_sum(A16, B16, bias, i, j, k);
            double g = 0.5 * s * (1.0 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
            float d = widen16(got[(size_t)j * m + i]);
            int e;
            frexp(g, &e);
            bad_aux += aux[(size_t)j * m + i] != bf16_rne(s);
            bad += !(fabs(d - g) <= ldexp(1.0, e - 9) + ldexp(fabs(s), -12));
            rounded += widen16(bf16_rne(s)) != s;
            negative += s < 0.0f;
        }
    CHECK(!bad_aux, "GELU epilogue: %d of %d kept inputs wrong", bad_aux, m * n);
    CHECK(!bad, "GELU epilogue: %d of %d outputs off the GELU of their sums", bad, m * n);
    CHECK(rounded > 0 && negative > 0, "GELU epilogue: the sums test no rounding or no negatives");
    cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dD), cudaFree(dX);
}

/* BGRADB on the weight gradient's product as zs_cu_lt_dw_bgrad makes it (A N, B transposed, D
 * fp32 with beta 1): D is the product added to D, as without the epilogue, and the bias pointer
 * receives op(B)'s column sums along k, written over what was there (NaN here): exact, B's
 * short values summing exactly in any order, some sums needing the fp32 sign of a cancellation
 * (negative and positive columns both). */
static void product_bgradb(cublasLtHandle_t h) {
    const int m = 6, n = 5, k = 9;
    std::vector<uint16_t> A16((size_t)m * k), B16((size_t)n * k);
    std::vector<float> unused(1), D0((size_t)m * n), sums(n, NAN);
    operands(A16, B16, unused, 0.25f, 0.75f, 0.0f, 0);
    for (size_t i = 0; i < D0.size(); i++)
        D0[i] = 0.5f * (float)(i % 5);
    void *dA = dev(A16.data(), A16.size() * 2), *dB = dev(B16.data(), B16.size() * 2);
    float *dD = (float *)dev(D0.data(), D0.size() * 4), *dS = (float *)dev(sums.data(), n * 4);
    Call c(CUDA_R_16BF, 0, 1, m, n, k, CUBLASLT_EPILOGUE_BGRADB, dS);
    cublasLtMatmulHeuristicResult_t r;
    CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "heuristic (BGRADB)");
    cublasStatus_t st = c.run(h, dA, dB, 1.0f, dD, dD, &r.algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul (BGRADB): %d", (int)st);
    std::vector<float> got(D0.size()), gs(n);
    cudaMemcpy(got.data(), dD, got.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(gs.data(), dS, gs.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0, bad_sum = 0, neg = 0, pos = 0;
    for (int j = 0; j < n; j++) {
        double want = 0.0;
        for (int p = 0; p < k; p++) /* B stored n x k: op(B)[p, j] = B[p n + j] */
            want += widen16(B16[(size_t)p * n + j]);
        bad_sum += gs[j] != (float)want;
        neg += want<0.0, pos += want> 0.0;
        for (int i = 0; i < m; i++) {
            double s = D0[(size_t)j * m + i];
            for (int p = 0; p < k; p++) /* A stored m x k */
                s += (double)widen16(A16[(size_t)p * m + i]) * widen16(B16[(size_t)p * n + j]);
            bad += got[(size_t)j * m + i] != (float)s;
        }
    }
    CHECK(!bad, "BGRADB: %d of %d products wrong", bad, m * n);
    CHECK(!bad_sum, "BGRADB: %d of %d column sums of op(B) wrong", bad_sum, n);
    CHECK(neg > 0 && pos > 0, "BGRADB: the sums test only one sign");
    cudaFree(dA), cudaFree(dB), cudaFree(dD), cudaFree(dS);
}

/* DGELU_BGRAD on the input gradient's product as zs_cu_lt_dinp_dgelu makes it (A and B not
 * transposed, D and aux bf16, beta 0): D the GELU's gradient of aux times each exact sum,
 * within half a bf16 ulp plus 2^-14 of the sum (the fp32 derivative's own error), aux
 * untouched, and the bias pointer D's row sums of those products, written over NaN, within
 * the fp32 sum's bound (n + 1) 2^-24 of the sum of magnitudes plus each term's error. A
 * GELU in place of its gradient, or a sum along the wrong axis, is off by far more. */
static void product_dgelu(cublasLtHandle_t h) {
    const int m = 8, n = 6, k = 5;
    std::vector<uint16_t> A16((size_t)m * k), B16((size_t)k * n), D16((size_t)m * n, 0xffff);
    std::vector<uint16_t> X16((size_t)m * n);
    std::vector<float> unused(1), sums(m, NAN);
    operands(A16, B16, unused, 0.1875f, 0.5625f, 0.0f, 0);
    for (size_t i = 0; i < X16.size(); i++) /* the GELU's inputs, -3 to 3 */
        X16[i] = bf16((float)((int)(i * 11 % 25) - 12) * 0.25f);
    void *dA = dev(A16.data(), A16.size() * 2), *dB = dev(B16.data(), B16.size() * 2);
    void *dD = dev(D16.data(), D16.size() * 2), *dX = dev(X16.data(), X16.size() * 2);
    float *dS = (float *)dev(sums.data(), m * 4);
    Call c(CUDA_R_16BF, 0, 0, m, n, k, CUBLASLT_EPILOGUE_BIAS, dS, CUDA_R_16BF);
    set_aux(c, dX, m, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU_BGRAD);
    cublasLtMatmulHeuristicResult_t r;
    CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "heuristic (DGELU_BGRAD)");
    cublasStatus_t st = c.run(h, dA, dB, 0.0f, dD, dD, &r.algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul (DGELU_BGRAD): %d", (int)st);
    std::vector<uint16_t> got(D16.size()), aux(X16.size());
    std::vector<float> gs(m);
    cudaMemcpy(got.data(), dD, got.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(aux.data(), dX, aux.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(gs.data(), dS, gs.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0, bad_sum = 0, negative = 0;
    for (int i = 0; i < m; i++) {
        double want = 0.0, mag = 0.0, err = 0.0;
        for (int j = 0; j < n; j++) {
            double s = 0.0; /* A stored m x k, B k x n: exact */
            for (int p = 0; p < k; p++)
                s += (double)widen16(A16[(size_t)p * m + i]) * widen16(B16[(size_t)j * k + p]);
            double x = widen16(X16[(size_t)j * m + i]),
                   u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            double t = tanh(u), dg = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) *
                                                           0.7978845608028654 *
                                                           (1.0 + 3.0 * 0.044715 * x * x);
            double g = dg * s;
            int e;
            frexp(g, &e);
            bad += !(fabs(widen16(got[(size_t)j * m + i]) - g) <=
                     ldexp(1.0, e - 9) + ldexp(fabs(s), -14));
            want += g, mag += fabs(g), err += ldexp(fabs(s), -14);
            negative += g < 0.0;
        }
        bad_sum += !(fabs(gs[i] - want) <= (n + 1) * ldexp(mag, -24) + err);
    }
    CHECK(!bad, "DGELU_BGRAD: %d of %d outputs off the GELU's gradient times their sums", bad,
          m * n);
    CHECK(!bad_sum, "DGELU_BGRAD: %d of %d row sums of D wrong", bad_sum, m);
    CHECK(aux == X16, "DGELU_BGRAD: the GELU's input (aux) changed");
    CHECK(negative > 0, "DGELU_BGRAD: no negative gradient, so the signs are not tested");
    cudaFree(dA), cudaFree(dB), cudaFree(dD), cudaFree(dX), cudaFree(dS);
}

static void refusals(cublasLtHandle_t h) {
    const int m = 4, n = 3, k = 8;
    void *A = dev(nullptr, (size_t)m * k * 2), *B = dev(nullptr, (size_t)k * n * 2 + 16);
    float *D = (float *)dev(nullptr, (size_t)m * n * 4), *D2 = (float *)dev(nullptr, m * n * 4);
    float *bias = (float *)dev(nullptr, m * 4);
    cublasLtMatmulHeuristicResult_t r;
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_BIAS, bias);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "the well-formed call's heuristic");
        CHECK(c.run(nullptr, A, B, 0, D, D, &r.algo) == CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
        CHECK(c.run(h, A, B, 1, (float *)D2 + 4, D2, &r.algo) == CUBLAS_STATUS_INVALID_VALUE,
              "C overlapping D without being it");
        cublasLtMatmulAlgo_t foreign;
        memset(&foreign, 0, sizeof foreign);
        CHECK(c.run(h, A, B, 0, D, D, &foreign) == CUBLAS_STATUS_INVALID_VALUE,
              "an algorithm not from the heuristic");
        int got = 0;
        CHECK(cublasLtMatmulAlgoGetHeuristic(h, c.d, c.la, c.lb, c.lc, c.lc, c.pref, 0, &r, &got) ==
                  CUBLAS_STATUS_INVALID_VALUE,
              "a heuristic asked for no algorithm");
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        CHECK(cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 2) ==
                  CUBLAS_STATUS_INVALID_VALUE,
              "an attribute of the wrong size");
        int32_t mode = 0;
        CHECK(cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode,
                                             sizeof mode) == CUBLAS_STATUS_NOT_SUPPORTED,
              "an attribute the emulated library does not implement");
        /* B 16 bytes past its allocation's start: cuBLASLt assumes 256 unless told */
        void *B16 = (char *)B + 16;
        CHECK(c.run(h, A, B16, 0, D, D, &r.algo) == CUBLAS_STATUS_INVALID_VALUE,
              "B less aligned than the algorithm was chosen for");
        uint32_t a16 = 16;
        cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &a16, sizeof a16);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS &&
                  c.run(h, A, B16, 0, D, D, &r.algo) == CUBLAS_STATUS_SUCCESS,
              "B at 16 bytes, the preference saying so");
        int32_t bt = CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        CHECK(c.run(h, A, B, 0, D, D, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED,
              "a bf16 bias beside an fp32 D");
    }
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_BIAS, nullptr);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "a bias epilogue without a bias");
    }
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, CUDA_R_16BF);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "a GELU epilogue without an aux");
        set_aux(c, D2, 4, CUDA_R_16BF);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "an aux leading dimension of 4");
        set_aux(c, D2, 8, CUDA_R_32F);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_NOT_SUPPORTED, "an fp32 aux beside a bf16 D");
        set_aux(c, D2, 8, CUDA_R_16BF);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "the GELU epilogue's aux as documented");
    }
    {
        Call c(CUDA_R_16BF, 0, 1, m, n, k, CUBLASLT_EPILOGUE_BGRADB, nullptr);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "BGRADB without a bias pointer");
        int32_t bt = CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_NOT_SUPPORTED, "BGRADB into bf16 sums");
    }
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_DRELU_BGRAD, bias);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_NOT_SUPPORTED, "an epilogue not implemented");
    }
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_DGELU_BGRAD, bias, CUDA_R_16BF);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "a DGELU epilogue without an aux");
        set_aux(c, D2, 8, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU_BGRAD);
        void *none = nullptr;
        cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &none, sizeof none);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "DGELU_BGRAD without a bias pointer");
        cublasLtMatmulDescSetAttribute(c.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        set_aux(c, D2, 8, CUDA_R_32F, CUBLASLT_EPILOGUE_DGELU_BGRAD);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_NOT_SUPPORTED, "an fp32 aux beside a bf16 D (DGELU)");
        set_aux(c, D2, 8, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU_BGRAD);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_SUCCESS, "DGELU_BGRAD's aux as documented");
    }
    {
        Call c(CUDA_R_16BF, 1, 0, m, n, k, CUBLASLT_EPILOGUE_DEFAULT, nullptr);
        cublasLtMatrixLayoutDestroy(c.la);
        cublasLtMatrixLayoutCreate(&c.la, CUDA_R_16BF, k + 1, m, k + 1); /* op(A) 4 x 9 */
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "A's layout against D's and B's");
        cublasLtMatrixLayoutDestroy(c.la);
        cublasLtMatrixLayoutCreate(&c.la, CUDA_R_16BF, k, m, k - 1);
        CHECK(c.algo(h, &r) == CUBLAS_STATUS_INVALID_VALUE, "a leading dimension under rows");
    }
    cudaFree(A), cudaFree(B), cudaFree(D), cudaFree(D2), cudaFree(bias);
}

int main(void) {
    cublasLtHandle_t h = nullptr;
    CHECK(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate");
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            product(h, true, ta, tb, true, 0.0f);
            product(h, false, ta, tb, false, 1.0f);
        }
    product(h, false, 1, 0, true, 1.0f); /* fp32 operands, bias and beta together */
    product(h, true, 1, 0, true, 1.0f, true);  /* a residual's: C apart from D, beta 1, a bias */
    product(h, true, 0, 0, false, 0.0f, true); /* beta 0: D written whole, C left */
    product_d16(h);
    product_gelu(h);
    product_bgradb(h);
    product_dgelu(h);
    refusals(h);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "no device error left behind");
    cublasLtDestroy(h);
    printf("emu_cublaslt: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}

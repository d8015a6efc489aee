/* The cuBLAS entry points zshard uses, on the emulated GPU: handles, streams, math mode, and
 * cublasGemmEx / cublasGemmStridedBatchedEx with cuBLAS's column-major semantics. Arguments are
 * checked as cuBLAS documents them (CUBLAS_STATUS_INVALID_VALUE for negative sizes, bad
 * transposes and leading dimensions too small for their operand, NOT_SUPPORTED for a type
 * combination cuBLAS does not offer) before anything is queued; the product itself runs on the
 * handle's stream, on the operands' kernel view, through OpenBLAS's sgemm:
 *  - bf16 (and fp16) inputs are widened exactly, products accumulate in fp32;
 *  - TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, or CUBLAS_TF32_TENSOR_OP_MATH with CUBLAS_COMPUTE_32F)
 *    rounds each fp32 input to 10 mantissa bits first, to nearest with ties away from zero;
 *    CUBLAS_COMPUTE_32F_FAST_16BF rounds each fp32 input to bf16, to nearest even;
 *  - a bf16 output is rounded to nearest even from the fp32 result;
 *  - beta == 0 does not read C.
 * The summation order is OpenBLAS's, not a tensor core's: results agree with a GPU's within the
 * usual dot-product bound, not bit for bit (docs/cuda.md). cublaslt.cc's cublasLtMatmul runs
 * the same product (blas_gemm below), with its bias epilogue added to each fp32 result (and the
 * GELU epilogue's tanh GELU taken of that sum, gelu() below), BGRADB's column sums of op(B)
 * (bgrad_sums below), and DGELU_BGRAD's GELU gradient (gelu_grad below) with D's row sums. */
#include "emu_internal.h"
#include "h100.h"

#include <cublas_v2.h>
#include <cblas.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <string>
#include <vector>

using namespace zs_emu;

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    default:
        return "unknown error";
    }
}

namespace {

float widen(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16BF) {
        uint32_t b = (uint32_t)h << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    /* CUDA_R_16F */
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, b;
    if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
        return sign ? -f : f;
    }
    if (e == 31)
        b = sign | 0x7f800000u | (m << 13);
    else
        b = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

float tf32(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7f800000u) != 0x7f800000u) { /* finite: round to 10 mantissa bits, ties away */
        b += 0x1000u;
        b &= 0xffffe000u;
    }
    memcpy(&x, &b, 4);
    return x;
}

uint16_t to_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40); /* quiet NaN */
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

/* FAST_16BF's down-conversion of an fp32 input: to nearest even bf16, widened back. */
float bf16r(float x) {
    uint32_t b = (uint32_t)to_bf16(x) << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

size_t type_size(cudaDataType t) {
    return t == CUDA_R_32F ? 4 : 2;
}

/* The combinations cuBLAS offers for these compute types (cublasGemmEx's table), limited to the
 * real types zshard could use. */
bool supported(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t ct) {
    if (a != b) return false;
    switch (ct) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return (a == CUDA_R_32F && c == CUDA_R_32F) ||
               ((a == CUDA_R_16BF || a == CUDA_R_16F) && (c == a || c == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        return a == CUDA_R_32F && c == CUDA_R_32F;
    default:
        return false;
    }
}

void store(void *p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = to_bf16(v);
}

/* The GELU of cuBLASLt's GELU epilogues: the tanh approximation, in fp32 through the C library's
 * tanhf. cuBLASLt documents only "GELU"; its own kernels' last bits may differ from these, and
 * from zshard's zs_gelu (kernels/gelu.h), by an fp32 rounding or two. */
float gelu(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* The DGELU epilogue's gradient of that GELU, d gelu / dx, differentiated here (not zshard's
 * zs_gelu_grad): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 0.044715 x^2), t = tanh(k (x + 0.044715
 * x^3)), in fp32. */
float gelu_grad(float x) {
    const float k = 0.7978845608028654f;
    float t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 0.134145f * x * x);
}

/* One product, column-major: C = alpha op(A) op(B) + beta C, on kernel-view pointers; with bias,
 * bias[i] added to row i's fp32 sums, and with aux, those stored in aux and C their GELU. With
 * dsums (DGELU_BGRAD, aux read, not written): C = gelu_grad(aux) times the fp32 result, and
 * dsums[i] = row i's sum of those fp32 values over the columns in index order. */
void gemm_one(bool ta, bool tb, int m, int n, int k, float alpha, const void *A, cudaDataType at,
              int lda, const void *B, cudaDataType bt, int ldb, float beta, void *C,
              cudaDataType ct, int ldc, bool round_tf32, bool round_bf16, const float *bias,
              void *aux, int aux_ld, float *dsums) {
    int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
    std::vector<float> a((size_t)arows * acols), b((size_t)brows * bcols), c((size_t)m * n);
    for (int j = 0; j < acols; j++)
        for (int i = 0; i < arows; i++) {
            float v = widen(A, at, (size_t)j * lda + i);
            a[(size_t)j * arows + i] = round_tf32 ? tf32(v) : round_bf16 ? bf16r(v) : v;
        }
    for (int j = 0; j < bcols; j++)
        for (int i = 0; i < brows; i++) {
            float v = widen(B, bt, (size_t)j * ldb + i);
            b[(size_t)j * brows + i] = round_tf32 ? tf32(v) : round_bf16 ? bf16r(v) : v;
        }
    if (beta != 0.0f)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++)
                c[(size_t)j * m + i] = widen(C, ct, (size_t)j * ldc + i);
    if (k > 0)
        cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, alpha, a.data(), arows > 1 ? arows : 1, b.data(),
                    brows > 1 ? brows : 1, beta, c.data(), m > 1 ? m : 1);
    else
        for (float &x : c)
            x *= beta;
    for (int i = 0; dsums && i < m; i++)
        dsums[i] = 0.0f;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = c[(size_t)j * m + i];
            if (bias) v += bias[i];
            if (dsums) { /* DGELU_BGRAD: the GELU's gradient of its kept input */
                v = gelu_grad(widen(aux, ct, (size_t)j * aux_ld + i)) * v;
                dsums[i] += v;
            } else if (aux) { /* GELU_AUX_BIAS: the GELU's input kept, its output in D */
                store(aux, ct, (size_t)j * aux_ld + i, v);
                v = gelu(v);
            }
            store(C, ct, (size_t)j * ldc + i, v);
        }
}

/* BGRADB: out[j] = the sum over p of op(B)[p, j] (B stored k x n, or n x k where tb), B's
 * stored values widened (zshard's B is bf16: exact), each an fp32 sum in index order. */
void bgrad_sums(bool tb, int n, int k, const void *B, cudaDataType bt, int ldb, float *out) {
    for (int j = 0; j < n; j++) {
        float s = 0.0f;
        for (int p = 0; p < k; p++)
            s += widen(B, bt, tb ? (size_t)p * ldb + j : (size_t)j * ldb + p);
        out[j] = s;
    }
}

} // namespace

namespace zs_emu {

cublasStatus_t blas_gemm(const BlasCall &call, cublasOperation_t transa, cublasOperation_t transb,
                         int m, int n, int k, const void *alpha, const void *A, cudaDataType at,
                         int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                         long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                         long long sc, int batch, cublasComputeType_t comp) {
    const char *api = call.api;
    const float *bias = call.bias;
    void *haux = call.aux; /* GELU_AUX_BIAS (cublaslt.cc), with bias */
    int aux_ld = call.aux_ld;
    float *hbg = call.bgrad; /* BGRADB, or with call.dgelu DGELU_BGRAD (cublaslt.cc) */
    bool dgelu = call.dgelu;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) ||
        (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T) || m < 0 || n < 0 || k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    int arows = ta ? k : m, brows = tb ? n : k;
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!supported(at, bt, ct, comp) || ct == CUDA_R_16F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    if (sticky() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    /* Host pointer mode (the default): the scalars are read now. */
    float al = *(const float *)alpha, be = *(const float *)beta;
    bool round = comp == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                 (comp == CUBLAS_COMPUTE_32F && (call.math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH &&
                  at == CUDA_R_32F);
    bool round16 = comp == CUBLAS_COMPUTE_32F_FAST_16BF;
    const void *va = view(A), *vb = view(B);
    void *vc = view(C);
    const void *ha = A, *hb = B;
    const void *hc = C;
    const float *vbias = bias ? (const float *)view(bias) : nullptr;
    void *vaux = haux ? view(haux) : nullptr;
    float *vbg = hbg ? (float *)view(hbg) : nullptr;
    const void *hcin = be != 0.0f ? call.cin : nullptr; /* C apart from D (cublasLtMatmul) */
    const void *vcin = hcin ? view(hcin) : nullptr;
    size_t aes = type_size(at), bes = type_size(bt), ces = type_size(ct);
    /* The H100 model's price (emu_profile.h): from the shape, in the arithmetic asked for. */
    zs_emu_record price;
    bool price_it = profiling() || predicting();
    if (price_it) {
        /* Priced as the H100 runs it: FAST_16BF on fp32 operands as TF32 (measured, h100.cc);
         * computed here in bf16, the least precision cuBLAS may use. */
        GemmMath gm = at == CUDA_R_16BF || at == CUDA_R_16F ? GEMM_BF16
                      : round || round16                    ? GEMM_TF32
                                                            : GEMM_FP32;
        double bytes = ((double)m * k * aes + (double)k * n * bes +
                        (double)m * n * ces * (be != 0.0f ? 2 : 1) + (bias ? 4.0 * m : 0.0) +
                        (haux ? (double)m * n * ces : 0.0) + (hbg ? 4.0 * (dgelu ? m : n) : 0.0)) *
                       batch;
        h100_gemm(&price, m, n, k, batch, gm, bytes, ta, tb);
        if (bias || hbg || hcin) { /* its own row: "cuBLASLt gemm+bias(+gelu) bf16 TN ..." */
            std::string nm = std::string(dgelu  ? "cuBLASLt gemm+dgelu+bgrad"
                                         : hbg  ? "cuBLASLt gemm+bgradb"
                                         : haux ? "cuBLASLt gemm+bias+gelu"
                                         : bias ? "cuBLASLt gemm+bias"
                                                : "cuBLASLt gemm") +
                             (hcin ? "+C" : "") + (price.name + strlen("cuBLAS gemm"));
            snprintf(price.name, sizeof price.name, "%s", nm.c_str());
        }
    }
    if (predicting()) { /* cost only: priced in stream order, not run */
        enqueue(stream_of(call.stream), api, [price] { profile_record(price); });
        return CUBLAS_STATUS_SUCCESS;
    }
    enqueue(stream_of(call.stream), api, [=] {
        const void *ptrs[7] = {ha, hb, hc, bias, haux, hbg, hcin};
        for (int i = 0; i < 7; i++)
            if ((i < 2 ? k > 0 : i == 2 || ptrs[i]) && classify(ptrs[i]) == MEM_NONE &&
                view(ptrs[i]) == ptrs[i]) {
                set_sticky(cudaErrorIllegalAddress,
                           "%s: operand %s (%p) is host memory a GPU cannot read", api,
                           i == 6   ? "C (apart from D)"
                           : i == 5 ? "bias (the bias gradient's output)"
                           : i == 4 ? "aux"
                           : i == 3 ? "bias"
                           : i == 0 ? "A"
                           : i == 1 ? "B"
                           : hcin   ? "D"
                                    : "C",
                           ptrs[i]);
                return;
            }
        if (settings().check) /* what it reads and writes, column by column (the stream checker) */
            for (int bi = 0; bi < batch; bi++) {
                for (int j = 0; j < (ta ? m : k); j++)
                    sc_access((const char *)va + ((size_t)(bi * sa) + (size_t)j * lda) * aes,
                              (size_t)arows * aes, false, api);
                for (int j = 0; j < (tb ? k : n); j++)
                    sc_access((const char *)vb + ((size_t)(bi * sb) + (size_t)j * ldb) * bes,
                              (size_t)brows * bes, false, api);
                for (int j = 0; j < n; j++)
                    sc_access((char *)vc + ((size_t)(bi * sc) + (size_t)j * ldc) * ces,
                              (size_t)m * ces, true, api);
                if (vbias) sc_access(vbias, (size_t)m * 4, false, api);
                for (int j = 0; vaux && j < n; j++)
                    sc_access((char *)vaux + (size_t)j * aux_ld * ces, (size_t)m * ces, !dgelu,
                              api);
                if (vbg) sc_access(vbg, (size_t)(dgelu ? m : n) * 4, true, api);
                for (int j = 0; vcin && j < n; j++)
                    sc_access((const char *)vcin + ((size_t)(bi * sc) + (size_t)j * ldc) * ces,
                              (size_t)m * ces, false, api);
            }
        for (int bi = 0; vcin && bi < batch; bi++) /* C into D, then D = alpha AB + beta D */
            for (int j = 0; j < n; j++) {
                size_t at_j = ((size_t)(bi * sc) + (size_t)j * ldc) * ces;
                memcpy((char *)vc + at_j, (const char *)vcin + at_j, (size_t)m * ces);
            }
        bool plain = at == CUDA_R_32F && ct == CUDA_R_32F && !round && !round16 && !vaux;
        for (int bi = 0; bi < batch && plain; bi++) { /* fp32 as it is: OpenBLAS in place */
            float *cb = (float *)vc + (size_t)(bi * sc);
            if (be == 0.0f) /* beta 0 must not read C (NaN there stays out of the result) */
                for (int j = 0; j < n; j++)
                    memset(cb + (size_t)j * ldc, 0, (size_t)m * 4);
            if (k > 0)
                cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, m, n, k, al,
                            (const float *)va + (size_t)(bi * sa), lda,
                            (const float *)vb + (size_t)(bi * sb), ldb, be, cb, ldc);
            else
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++)
                        cb[(size_t)j * ldc + i] *= be;
            if (vbias) /* the epilogue's bias, on each fp32 result once */
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++)
                        cb[(size_t)j * ldc + i] += vbias[i];
        }
        for (int bi = 0; bi < batch && !plain; bi++)
            gemm_one(ta, tb, m, n, k, al, (const char *)va + (size_t)(bi * sa) * aes, at, lda,
                     (const char *)vb + (size_t)(bi * sb) * bes, bt, ldb, be,
                     (char *)vc + (size_t)(bi * sc) * ces, ct, ldc, round, round16, vbias, vaux,
                     aux_ld, dgelu ? vbg : nullptr);
        for (int bi = 0; vbg && !dgelu && bi < batch; bi++) /* (zshard's calls: batch 1) */
            bgrad_sums(tb, n, k, (const char *)vb + (size_t)(bi * sb) * bes, bt, ldb, vbg);
        check_redzone(hc);
        if (hcin) check_redzone(hcin);
        if (haux) check_redzone(haux);
        if (hbg) check_redzone(hbg);
        if (price_it) profile_record(price);
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace zs_emu

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb,
                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    return blas_gemm(
        {h->stream, h->math, "cublasGemmEx", nullptr, nullptr, 0, nullptr, false, nullptr}, transa,
        transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1,
        computeType);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA, const void *B,
    cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long strideC, int batch, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    return blas_gemm({h->stream, h->math, "cublasGemmStridedBatchedEx", nullptr, nullptr, 0,
                      nullptr, false, nullptr},
                     transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
                     beta, C, Ctype, ldc, strideC, batch, computeType);
}

/* The cuBLASLt entry points zshard uses, on the emulated GPU: a handle, matmul descriptors with
 * the attributes zshard sets (TRANSA, TRANSB, EPILOGUE, BIAS_POINTER, BIAS_DATA_TYPE,
 * EPILOGUE_AUX_POINTER, _AUX_LD, _AUX_DATA_TYPE), matrix layouts, a preference with its
 * workspace limit and the operands' least alignments, the heuristic query, and cublasLtMatmul
 * with the default epilogue, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
 * CUBLASLT_EPILOGUE_BGRADB or CUBLASLT_EPILOGUE_DGELU_BGRAD. An
 * attribute or epilogue zshard does not use gives CUBLAS_STATUS_NOT_SUPPORTED and names itself, so
 * a new use is implemented before it is trusted. Arguments are checked before anything is queued,
 * as cuBLASLt documents them:
 *  - a NULL handle: NOT_INITIALIZED; NULL descriptors, layouts that do not match the product's
 *    shape, a leading dimension under its rows, a bias, BGRADB or DGELU_BGRAD epilogue without a
 * bias pointer, a bias pointer not aligned to its element, a GELU or DGELU epilogue without an aux
 * pointer or with an aux
 *    leading dimension under D's rows or not a multiple of 8, a heuristic asked for no algorithm,
 * an algorithm that is not the heuristic's, or an operand less aligned than the preference promised
 * when the algorithm was chosen (cuBLASLt assumes 256 bytes unless told; its kernels for aligned
 *    operands fault on others): INVALID_VALUE, naming the operand;
 *  - types cuBLAS does not offer (cublas.cc's table), a scale type other than fp32, a bias type
 *    other than fp32 or a bias on a D neither fp32 nor bf16, an aux type other than D's, C in
 *    a type or leading dimension other than D's: NOT_SUPPORTED;
 *  - C apart from D but overlapping it: INVALID_VALUE (C apart from D is read, beta times it
 *    added to the product before the epilogue's bias, as where C is D; D is then only written).
 * The product is cublas.cc's (blas_gemm): the same rounding of the inputs and fp32 sums, then
 * the bias added to each fp32 result once (and a bf16 D rounded from that sum), so a bias
 * epilogue is, bit for bit, the product followed by a separate fp32 add of the bias (and a
 * cast). GELU_AUX_BIAS stores that biased sum in aux (rounded to D's type) and writes D from its
 * GELU, taken of the fp32 sum (cublas.cc's gelu, the tanh form). Its price is cublasGemmEx's for
 * the shape plus the bias read and the aux written, in a row of its own ("cuBLASLt gemm+bias",
 * "cuBLASLt gemm+bias+gelu"). BGRADB writes (not adds) into the bias pointer op(B)'s column
 * sums along k, of B's stored values widened, each an fp32 sum in index order: a
 * GPU's order is its own (cublasLt.h documents the reduction, not its order), so zshard's tests
 * hold it to a bound. D is the product, untouched by it. Its price is cublasGemmEx's plus the
 * sums written ("cuBLASLt gemm+bgradb"). DGELU_BGRAD reads aux (the GELU's input, D's type) and
 * writes D = gelu_grad(aux) times each fp32 result (cublas.cc's derivative of its tanh GELU),
 * rounded to D's type, and writes (not adds) into the bias pointer D's row sums, each of the
 * unrounded fp32 values in column order (again a bound, not bits, for a GPU's). Its price is
 * cublasGemmEx's plus aux read and the sums written ("cuBLASLt gemm+dgelu+bgrad"). The
 * algorithm needs no workspace. */
#include "emu_internal.h"

#include <cublasLt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>

using namespace zs_emu;

struct cublasLtContext {
    int alive;
};

namespace {

struct Desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; /* -1: D's */
    void *aux;         /* GELU_AUX_BIAS: where the GELU's input goes */
    int64_t aux_ld;
    int32_t aux_type; /* -1: D's */
};

struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

struct Pref {
    uint64_t max_workspace;
    uint32_t align[4]; /* the least alignment of A, B, C, D the caller promises (256 unless told) */
};

static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "descriptor storage");
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout storage");
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference storage");

const uint64_t ALGO_TAG = 0x7a732d656d75ull; /* the heuristic's one algorithm */

Desc *desc_of(cublasLtMatmulDesc_t d) {
    return reinterpret_cast<Desc *>(d->data);
}
Layout *layout_of(cublasLtMatrixLayout_t l) {
    return reinterpret_cast<Layout *>(l->data);
}
Pref *pref_of(cublasLtMatmulPreference_t p) {
    return reinterpret_cast<Pref *>(p->data);
}

cublasStatus_t unsupported(const char *what, int value) {
    fprintf(stderr, "zshard emulated GPU: cuBLASLt %s %d is not implemented here\n", what, value);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

template <typename T> cublasStatus_t put(T *field, const void *buf, size_t size) {
    if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

bool valid_op(int32_t t) {
    return t == CUBLAS_OP_N || t == CUBLAS_OP_T;
}

/* The product's shape from the layouts (D is m x n, op(A) m x k, op(B) k x n), and whether the
 * descriptor and layouts describe a product this library runs. */
cublasStatus_t check(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                     cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                     cublasLtMatrixLayout_t ld, int *m, int *n, int *k) {
    if (!desc || !la || !lb || !lc || !ld) return CUBLAS_STATUS_INVALID_VALUE;
    const Desc *d = desc_of(desc);
    const Layout *a = layout_of(la), *b = layout_of(lb), *c = layout_of(lc), *o = layout_of(ld);
    if (!valid_op(d->transa) || !valid_op(d->transb)) return CUBLAS_STATUS_INVALID_VALUE;
    bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
    uint64_t mm = o->rows, nn = o->cols, kk = ta ? a->rows : a->cols;
    if ((ta ? a->cols : a->rows) != mm || (tb ? b->cols : b->rows) != kk ||
        (tb ? b->rows : b->cols) != nn || c->rows != mm || c->cols != nn)
        return CUBLAS_STATUS_INVALID_VALUE;
    const Layout *all[4] = {a, b, c, o};
    for (const Layout *l : all)
        if (l->ld < (int64_t)(l->rows > 1 ? l->rows : 1) || l->rows > INT32_MAX ||
            l->cols > INT32_MAX || l->ld > INT32_MAX)
            return CUBLAS_STATUS_INVALID_VALUE;
    if (d->scale != CUDA_R_32F || c->type != o->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool dgelu = d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
        d->epilogue == CUBLASLT_EPILOGUE_BGRADB || dgelu) {
        /* an fp32 bias on an fp32 or bf16 D (added to the fp32 result before D's rounding),
         * BGRADB's fp32 sums of op(B)'s columns, one per column of D, or DGELU_BGRAD's fp32
         * sums of D's rows, one per row */
        int32_t bt = d->bias_type == -1 ? (int32_t)o->type : d->bias_type;
        if (bt != CUDA_R_32F || (o->type != CUDA_R_32F && o->type != CUDA_R_16BF))
            return CUBLAS_STATUS_NOT_SUPPORTED;
        if (!d->bias || (uintptr_t)d->bias % sizeof(float)) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || dgelu) {
        /* the GELU's input in D's type (the one aux type implemented here), its leading
         * dimension a multiple of 8 and no less than D's rows, as cublasLt.h documents (written
         * by GELU_AUX_BIAS, read by DGELU_BGRAD) */
        int32_t at = d->aux_type == -1 ? (int32_t)o->type : d->aux_type;
        if (at != (int32_t)o->type) return unsupported("aux data type", at);
        if (!d->aux || d->aux_ld % 8 || d->aux_ld < (int64_t)o->rows ||
            (uintptr_t)d->aux % (o->type == CUDA_R_32F ? 4 : 2))
            return CUBLAS_STATUS_INVALID_VALUE;
    } else if (d->epilogue != CUBLASLT_EPILOGUE_BIAS && d->epilogue != CUBLASLT_EPILOGUE_BGRADB &&
               d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        return unsupported("epilogue", (int)d->epilogue);
    }
    *m = (int)mm, *n = (int)nn, *k = (int)kk;
    return CUBLAS_STATUS_SUCCESS;
}

/* ZS_EMU_LT_REFUSE=<epilogue number>: the heuristic offers no algorithm for that epilogue, as a
 * real cuBLASLt may for a combination of types it has no kernel for, so that a caller's fallback
 * runs under test (said once on stderr). */
bool refused(uint32_t epilogue) {
    static const char *e = getenv("ZS_EMU_LT_REFUSE");
    static bool said = false;
    if (!e || *e == '\0' || strtoul(e, nullptr, 0) != epilogue) return false;
    if (!said)
        fprintf(stderr,
                "zshard emulated GPU: cuBLASLt offers no algorithm for epilogue %u "
                "(ZS_EMU_LT_REFUSE)\n",
                (unsigned)epilogue);
    said = true;
    return true;
}

} // namespace

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                                   cublasComputeType_t compute,
                                                   cudaDataType_t scale) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cublasLtMatmulDescOpaque_t();
    new ((*desc)->data)
        Desc{compute, scale,         CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
             nullptr, -1 /* bias */, nullptr,     0,           -1 /* aux */};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                         cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t size) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    Desc *d = desc_of(desc);
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        return put(&d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
        return put(&d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        return put(&d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return put(&d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return put(&d->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return put(&d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        return put(&d->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return put(&d->aux_type, buf, size);
    default:
        return unsupported("matmul descriptor attribute", (int)attr);
    }
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                                     cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque_t();
    new ((*layout)->data) Layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceOpaque_t();
    new ((*pref)->data) Pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                     size_t size) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    Pref *p = pref_of(pref);
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return put(&p->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return put(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
    default:
        return unsupported("preference attribute", (int)attr);
    }
}

extern "C" cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                               cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                               cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                               cublasLtMatmulPreference_t pref, int requested,
                               cublasLtMatmulHeuristicResult_t results[], int *returned) {
    int m, n, k;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !results || !returned || !pref) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check(desc, la, lb, lc, ld, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (refused(desc_of(desc)->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_TAG;
    for (int i = 0; i < 4; i++) /* the algorithm relies on the alignments promised */
        results[0].algo.data[1 + i] = pref_of(pref)->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t
cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
               cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb,
               const void *beta, const void *C, cublasLtMatrixLayout_t lc, void *D,
               cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *workspace,
               size_t workspace_bytes, cudaStream_t stream) {
    int m, n, k;
    (void)workspace;
    (void)workspace_bytes; /* the one algorithm needs none */
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = check(desc, la, lb, lc, ld, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (algo && algo->data[0] != ALGO_TAG) return CUBLAS_STATUS_INVALID_VALUE;
    const Layout *o = layout_of(ld);
    if (layout_of(lc)->ld != o->ld || layout_of(lc)->type != o->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    size_t span = ((size_t)(n > 0 ? n - 1 : 0) * (size_t)o->ld + (size_t)m) *
                  (o->type == CUDA_R_32F ? 4u : 2u);
    if (C && C != D && m > 0 && n > 0 && (const char *)C < (const char *)D + span &&
        (const char *)D < (const char *)C + span) {
        fprintf(stderr,
                "zshard emulated GPU: cublasLtMatmul: C (%p) overlaps D (%p) without being it: "
                "the product would read what it has written\n",
                C, D);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; algo && i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[1 + i]) {
            fprintf(stderr,
                    "zshard emulated GPU: cublasLtMatmul: %c (%p) is not aligned to the %llu "
                    "bytes its algorithm was chosen for (the preference's "
                    "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES, 256 unless set)\n",
                    "ABCD"[i], ptrs[i], (unsigned long long)algo -> data[1 + i], "ABCD"[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    const Desc *d = desc_of(desc);
    const Layout *a = layout_of(la), *b = layout_of(lb);
    if (a->type != b->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    bool gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const float *bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || gelu
                            ? static_cast<const float *>(d->bias)
                            : nullptr;
    bool dgelu = d->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    float *bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADB || dgelu
                       ? static_cast<float *>(const_cast<void *>(d->bias))
                       : nullptr; /* cuBLASLt writes its sums there */
    return blas_gemm(
        {stream, CUBLAS_DEFAULT_MATH, "cublasLtMatmul", bias, gelu || dgelu ? d->aux : nullptr,
         (int)d->aux_ld, bgrad, dgelu, C != D ? C : nullptr},
        (cublasOperation_t)d->transa, (cublasOperation_t)d->transb, m, n, k, alpha, A, a->type,
        (int)a->ld, 0, B, b->type, (int)b->ld, 0, beta, D, o->type, (int)o->ld, 0, 1, d->compute);
}

/* The harness of the CUDA ops tests (test_cuda_ops.c, test_cuda_ops_attn.c,
 * test_cuda_ops_state.c; ctest label gpu): the CUDA backend against its oracle, the CPU backend,
 * on fresh random inputs, outputs poisoned (NaN) before the call so an unwritten element fails,
 * accumulating outputs started from the same random values on both sides.
 *
 * Comparisons are bitwise wherever both backends run the same shared backend/kernels math in
 * the same order (elementwise ops, norms, attention, the column-owned weight and bias
 * gradients, AdamW, casts, sumsq): the CUDA build uses --fmad=false and IEEE division and
 * square root, so the arithmetic is the same operations with the same roundings. Tolerances,
 * with their reasons, remain where a library function differs between the host libm and
 * CUDA's (logf in the loss, cosf/sinf/powf in RoPE, logf/cosf in Philox init) and for gemm
 * (cuBLAS and OpenBLAS sum in different orders: the standard dot-product error bound).
 *
 * Each test exits 77 (skipped) without a visible CUDA device. ZS_TEST_CUDA_FAKE=1 runs the same
 * harness with the CPU table on host memory in the CUDA backend's place: it exercises the tests'
 * indexing and bookkeeping on machines without a GPU and says nothing about the CUDA kernels. */
#ifndef ZS_CUDA_OPS_UTIL_H
#define ZS_CUDA_OPS_UTIL_H

#include "backend/ops.h"
#include "testutil.h"

#include <stddef.h>
#include <stdint.h>

/* fp32 unit roundoff. */
#define CO_U32 (1.0 / 16777216.0)

/* The oracle (the CPU table), the table under test (the CUDA one, or the CPU's again under
 * ZS_TEST_CUDA_FAKE) and whether it is that fake: set by co_init. */
extern const zs_ops *co_cpu, *co_gpu;
extern int co_fake;

/* zt_init(name), then the tables: under ZS_TEST_CUDA_FAKE (set, not "0") the CPU's for both,
 * saying so; else skips (77) unless this program runs on a GPU (zt_gpu_require), selects the
 * CUDA backend (whose device ledger the checks read and cap) and device 0. */
void co_init(const char *name);

/* ---- buffers: every allocation of a check is released by co_release() at its end ---- */

/* Host memory of nbytes, or of n floats. */
void *co_hbuf(size_t nbytes);
float *co_hf(size_t n);
/* Device memory of nbytes (host memory under the fake). */
void *co_dbuf(size_t nbytes);
/* Copies between host and device, synchronous. */
void co_h2d(void *d, const void *h, size_t nbytes);
void co_d2h(void *h, const void *d, size_t nbytes);
/* Frees every buffer of the pool. */
void co_release(void);
/* Device copy of n host floats (or int32s). */
float *co_up(const float *h, size_t n);
int32_t *co_upi(const int32_t *h, size_t n);
/* Host copy of n device floats, after the default stream's work is done. */
float *co_down(const float *d, size_t n);
/* n host floats: normal of std; NaN (zt_poison); a copy of x. */
float *co_randn(size_t n, float std);
float *co_poisoned(size_t n);
float *co_clone(const float *x, size_t n);

/* ---- comparisons: each one check, of device result d against the CPU's want --------- */

/* d must equal want bit for bit. */
void co_expect_bits(const char *what, const float *d, const float *want, size_t n);
/* d (bf16) must be want rounded to bf16 (zs_f32_to_bf16), bit for bit. */
void co_expect_rounded(const char *what, const zs_bf16 *d, const float *want, size_t n);
/* Mixed error |got - want| / max(1, |want|) at most tol (NaN fails). */
void co_expect_close(const char *what, const float *d, const float *want, size_t n, double tol);
/* |got[i] - want[i]| <= bound[i] for every i (NaN fails); a bound of 0 asks for the same
 * bits (elements that must be left untouched, possibly NaN poison). */
void co_expect_bounded(const char *what, const float *d, const float *want, const double *bound,
                       size_t n);

#endif

/* The linear layers of the models over an ops table (linear.c): the one place a row-major
 * layer is mapped onto the column-major gemm, and the fused backward paths a table may offer
 * (docs/architecture.md "The ops table"). Included by backend/ops.h, after zs_ops. */
#ifndef ZS_BACKEND_LINEAR_H
#define ZS_BACKEND_LINEAR_H

#include "backend/ops.h"

/* Row-major linear layer through the column-major gemm (docs/architecture.md "The ops
 * table"): a row-major X[r,c] is the column-major X^T with ld c, so out = inp W^T becomes
 * out^T = W inp^T, i.e. gemm(T, N, m=OC, n=N, k=IC, W, IC, inp, IC, out, OC). This is the one
 * place that mapping is written. A layer's input inp is fp32, or bf16 where in16 (a producer's
 * rounded output, --dtype bf16: through the table's gemm16, which a table without it refuses).
 *   out[N,OC] = inp[N,IC] @ W[OC,IC]^T (+ bias[OC] if non-NULL)          (overwrites out) */
zs_status zs_linear_fwd(const zs_ops *ops, zs_stream_t *s, float *out, const void *inp, int in16,
                        const float *W, const float *bias, int N, int IC, int OC);
/* zs_linear_fwd into bf16, each sum with its bias rounded once (epilogue, or tmp[N,OC] + cast). */
zs_status zs_linear_fwd16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *out, float *tmp,
                          const void *inp, int in16, const float *W, const float *bias, int N,
                          int IC, int OC);
/* zs_linear_fwd into tmp[N,OC] with the residual add after it: out[N,OC] = x + (inp W^T + bias),
 * the bias and the add in one pass (ops->bias_residual_fwd), rounded to bf16 into keep as well
 * where keep is non-NULL. out may alias x. Without keep, where the table has linear_fwd_bias,
 * one GEMM: x its C, a bias in its epilogue, (inp W^T + x) + bias. */
zs_status zs_linear_residual_fwd(const zs_ops *ops, zs_stream_t *s, float *out, zs_bf16 *keep,
                                 const float *x, float *tmp, const void *inp, int in16,
                                 const float *W, const float *bias, int N, int IC, int OC);
/* zs_linear_fwd into pre[N,OC] with a GELU after it: out = gelu(pre), the bias and the GELU in
 * one pass (ops->bias_gelu_fwd). With act16, inp, pre and out are bf16 (bias_gelu_fwd16): the
 * GEMM's sum with its bias rounded once into pre and its GELU into out, in the epilogue where the
 * table has one (else through tmp[N,OC], fp32 scratch); out is the next layer's input. */
zs_status zs_linear_gelu_fwd(const zs_ops *ops, zs_stream_t *s, void *pre, void *out, float *tmp,
                             const void *inp, int act16, const float *W, const float *bias, int N,
                             int IC, int OC);
/* Backward of zs_linear_fwd, all accumulating: dinp[N,IC] += dout @ W; dW[OC,IC] +=
 * dout^T @ inp; dbias[OC] += colsum(dout). dinp, dW or dbias may be NULL to skip. */
zs_status zs_linear_bwd(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW, float *dbias,
                        const float *dout, const void *inp, int in16, const float *W, int N, int IC,
                        int OC);
/* zs_linear_bwd with dinp overwritten, dinp = dout @ W, for its first contribution: nothing
 * has to zero dinp before, and the GEMM does not read it (dW and dbias still accumulate). */
zs_status zs_linear_bwd_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW, float *dbias,
                            const float *dout, const void *inp, int in16, const float *W, int N,
                            int IC, int OC);
/* zs_linear_bwd_set of a layer whose output gelu_inp[N, OC] (bf16 where in16, as
 * zs_linear_gelu_fwd keeps it) went through a GELU (GPT-2's fc layer): dout is the gradient of
 * gelu(gelu_inp), and the layer's own output gradient is gelu_bwd's (gelu_bwd16's; into
 * dtmp[N * OC]: the bits of that op then zs_linear_bwd_set), which a table with
 * gemm_linear_bwd may fuse into its pass over the gradient and never store: dtmp's contents
 * afterwards are unspecified. */
zs_status zs_linear_gelu_bwd_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW,
                                 float *dbias, const float *dout, const void *gelu_inp, float *dtmp,
                                 const void *inp, int in16, const float *W, int N, int IC, int OC);
/* GPT-2's MLP backward in bf16 (--dtype bf16), as autocast stores it: the gradient of the
 * GELU's output is rounded to bf16 once. zs_linear_bwd16_ok says whether the table can take
 * both layers' operands in its fused path: then zs_linear_bwd_set16 (zs_linear_bwd_set with
 * dinp written bf16, ops.h gemm_linear_bwd's dinp16) and zs_linear_gelu_bwd_set16
 * (zs_linear_gelu_bwd_set reading that bf16 gradient; its own dinp bf16 too where dinp16) do
 * it without an fp32 copy. Elsewhere (the CPU) the fp32 dinp is rounded in place by round16
 * and read as fp32: the same values. zs_linear_dinp16_ok: whether the table's gemm_linear_bwd
 * can write a bf16 dinp (dinp16, set) for the layer N x IC -> OC with inp bf16 where in16 and
 * the gradient G bf16 as it is where g16 (a bf16 dout, no GELU). */
int zs_linear_bwd16_ok(const zs_ops *ops, int N, int IC, int OC, int in16);
int zs_linear_dinp16_ok(const zs_ops *ops, int N, int IC, int OC, int in16, int g16);
zs_status zs_linear_bwd_set16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *dinp, float *dW,
                              float *dbias, const float *dout, const void *inp, int in16,
                              const float *W, int N, int IC, int OC);
zs_status zs_linear_gelu_bwd_set16(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16,
                                   float *dW, float *dbias, const zs_bf16 *dout,
                                   const void *gelu_inp, float *dtmp, const void *inp, int in16,
                                   const float *W, int N, int IC, int OC);
/* GPT-2's c_proj backward with fc's GELU backward and bias gradient in its input gradient's
 * product, where the table has gemm_linear_bwd_dgelu and the operands fit
 * (zs_linear_dgelu_ok): zs_linear_bwd_set16 whose bf16 dinp is already the GELU layer's output
 * gradient G (dinp_dbias += its column sums), so that layer's backward is zs_linear_bwd_g16
 * without a bias (ops.h gemm_linear_bwd_dgelu: within a bound of, not the bits of,
 * zs_linear_bwd_set16 then zs_linear_gelu_bwd_set16). dout is bf16 where dout16 (G as it is,
 * ops.h). ZS_ERR_INVALID, naming the table, where it cannot. */
int zs_linear_dgelu_ok(const zs_ops *ops, int N, int IC, int OC, int in16);
zs_status zs_linear_bwd_dgelu16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *dinp, float *dinp_dbias,
                                const zs_bf16 *gelu_pre, float *dW, float *dbias, const void *dout,
                                int dout16, const void *inp, int in16, const float *W, int N,
                                int IC, int OC);

/* zs_linear_bwd (set 0) or zs_linear_bwd_set (set 1) with dout[N,OC] bf16 as its producer
 * stored it (swiglu_bwd16, rope_bwd16, flash_attention_bwd16g): the same bits as the fp32 dout
 * it rounds, in the same pieces (the plans are decided on fp32 sizes), without the rounding
 * pass. The table must have gemm16, and for a bias (dbias non-NULL) gemm_linear_bwd. dinp16
 * (set 1, zs_linear_dinp16_ok with g16): dinp is bf16, the fp32 one rounded once (GPT-2's
 * c_attn, whose input gradient only the layer norm's backward reads). */
zs_status zs_linear_bwd_g16(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16, float *dW,
                            float *dbias, const zs_bf16 *dout, const void *inp, int in16,
                            const float *W, int N, int IC, int OC, int set);

/* zs_linear_bwd_set with dout bf16, the column-major dout^T (OC x N, ld ldd), through the
 * table's gemm_linear_bwd16 (ZS_ERR_INVALID on a table without it), no bias: what a language
 * model's head does with softmax_xent16's dlogits. */
zs_status zs_linear_bwd16_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW,
                              const zs_bf16 *dout, int ldd, const float *inp, const float *W, int N,
                              int IC, int OC);

#endif

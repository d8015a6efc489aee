/* The device ops table (docs/architecture.md "The ops table"). Models reach compute only
 * through a zs_ops table, so the same model code runs on the CPU backend (OpenBLAS + OpenMP,
 * also the test oracle) and on the CUDA backend. Every op takes a stream: NULL on CPU, a
 * cudaStream_t behind the opaque handle on CUDA; ops are ordered on their stream and may
 * return before completion (call sync before reading results on the host).
 *
 * Conventions, for every op:
 *  - counts are elements; tensors are row-major unless the op says otherwise;
 *  - "accumulates" means the op adds into its output (+=), as backward passes need when a
 *    tensor feeds several consumers; other outputs are overwritten;
 *  - outputs must not alias inputs unless the op says so.
 *
 * Documents (docs/data.md): the attention ops, RoPE and the position embedding take seg, device
 * memory [B*T] or NULL. seg[b*T+t] is the position in row b where the document holding token t
 * starts: 0 <= seg[b*T+t] <= t, and each row is cut into consecutive segments (seg[b*T+t] is t,
 * or seg[b*T+t-1]). Token t then attends to keys seg..t only (a block-diagonal causal mask) and
 * its position is t - seg (RoPE, learned positions). NULL means one document per row: keys
 * 0..t and position t, the very same arithmetic as before masks existed. The data layer builds
 * seg (data/docs.c); the ops trust it. */
#ifndef ZS_BACKEND_OPS_H
#define ZS_BACKEND_OPS_H

#include "core/bf16.h"
#include "zshard.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zs_stream zs_stream_t; /* opaque; NULL is the CPU's (synchronous) stream */

/* The tensors of one fused AdamW launch (adamw_segs): elements [lo[i], hi[i]) of the op's
 * buffers, disjoint and in increasing order, are updated, with weight decay where decay[i];
 * elements between them (alignment padding) are left untouched. */
#define ZS_ADAMW_SEGS 32
typedef struct zs_adamw_segs {
    int n;
    int64_t lo[ZS_ADAMW_SEGS], hi[ZS_ADAMW_SEGS];
    unsigned char decay[ZS_ADAMW_SEGS];
} zs_adamw_segs;

/* Ranges a widen_ranges launch takes (a GPT-2 block widens 5, a LLaMA block 2). */
#define ZS_WIDEN_RANGES 16

/* The arithmetic of a table's gemm: plain fp32; fp32 whose inputs are first rounded to TF32
 * (10 mantissa bits, to nearest with ties away from zero: opt-in, --tf32); or inputs rounded to
 * bf16 (to nearest even), as --dtype bf16 computes. Products accumulate in fp32 in every mode; a
 * GPU runs the rounded modes on tensor cores. */
typedef enum zs_gemm_math { ZS_MATH_FP32 = 0, ZS_MATH_TF32, ZS_MATH_BF16 } zs_gemm_math;

typedef struct zs_ops {
    const char *name;
    zs_gemm_math gemm_math; /* this table's gemm */
    /* The same backend's table whose gemm computes in `math` (every other op is the same). */
    const struct zs_ops *(*with_math)(zs_gemm_math math);

    /* C[m,n] = alpha * op(A) * op(B) + beta * C, COLUMN-major, exactly the arguments of
     * cblas_sgemm(CblasColMajor, ...) and cublasGemmEx. trans* are 0 (N) or 1 (T). */
    zs_status (*gemm)(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);

    /* Optional, in the bf16 tables (NULL elsewhere): gemm with A stored as bf16 where a16, B where
     * b16 (the other fp32; lda, ldb in elements). A bf16 operand is exact in fp32 and already
     * what this table rounds an fp32 operand to, so the product is gemm's, bit for bit, on any
     * fp32 operand that rounds to it, where the plans split the sum alike (always, when the
     * operands fit the scratch whole): a producer may store a GEMM's input in bf16 (half the
     * bytes, and no pass to round it) without changing a result (docs/cuda.md "GEMM operands").
     * An fp32 operand beside a bf16 one is packed (ld = its stored rows): a CUDA table rounds it
     * into its scratch by zs_gemm16_plan. */
    zs_status (*gemm16)(zs_stream_t *s, int transa, int transb, int m, int n, int k, float alpha,
                        const void *A, int a16, int lda, const void *B, int b16, int ldb,
                        float beta, float *C, int ldc);

    /* Optional, in the CUDA bf16 table (NULL: linear.c calls gemm16 or gemm, then bias_fwd): a
     * linear layer's forward with its bias, out[N,OC] = inp W^T + bias, with linear.c's gemm
     * arguments and inp bf16 where in16. The bias is added to each fp32 result once, in the
     * GEMM's epilogue (cuBLASLt's), where bias_fwd read and wrote the output again: the same
     * additions. On the emulated GPU the same bits as gemm16 then bias_fwd (its product is
     * cublasGemmEx's); on a GPU cuBLASLt may choose another algorithm for the product, within
     * gemm's bound, and deterministically for a shape. With out16, out is bf16: each fp32
     * sum rounded once as the epilogue writes it (D in bf16: half the bytes written, and none
     * read by a cast); where the epilogue cannot take the call, the product and the bias go
     * through tmp[N * OC] (fp32 scratch, unused otherwise) and a cast, the same bits. With
     * out16 and bias NULL (a language model's head into bf16 logits) the GEMM itself writes
     * bf16 and tmp may be NULL: gemm16's sums rounded once, without an fp32 copy. With gelu
     * (out16 and a bias), bias_gelu_fwd16's outputs: out its pre16, gelu its out, in the GELU
     * epilogue (else through tmp and bias_gelu_fwd16; cuBLASLt's GELU may differ by an ulp).
     * With res (fp32 out, no gelu; tmp[N * OC] given), a residual layer's sum out = res +
     * (inp W^T + bias), out apart from res or res itself: res is the GEMM's C with beta 1
     * (bias NULL: no epilogue, res + product, residual_fwd's sum in an order of the GEMM's), so
     * the sum is (product + res) + bias, in the epilogue's order, where bias_residual_fwd
     * adds res + (product + bias): the same three terms, two roundings either way (docs/cuda.md
     * "GEMM operands"); where the epilogue cannot take it, the product into tmp and then
     * bias_residual_fwd. */
    zs_status (*linear_fwd_bias)(zs_stream_t *s, void *out, int out16, float *tmp, const void *inp,
                                 int in16, const float *W, const float *bias, int N, int IC, int OC,
                                 zs_bf16 *gelu, const float *res);

    /* Optional (NULL: linear.c calls gemm twice, then bias_bwd): a linear layer's backward,
     * whose products share the output gradient G, with linear.c's gemm arguments: dinp^T =
     * W^T G^T + dinp_beta dinp^T, then dW^T += inp^T G, and with dbias non-NULL bias_bwd's
     * dbias += G's column sums (its bits; a bf16 G's on CUDA in cuBLASLt's BGRADB order). G is
     * dout, or with gelu_inp non-NULL (the layer's output, through a GELU; bf16 where gelu16)
     * gelu_bwd's (gelu_bwd16's) gradient of gelu_inp from dout, bit for bit, which the table
     * may write to dtmp[N * OC] or never store. inp is bf16 where inp16,
     * and dout where dout16, as gemm16's operands: a producer's rounded values, the same bits as
     * the fp32 values they round (with dbias or gelu_inp only where the operands fit the
     * scratch together, zs_linear_bwd_cast_elems of an fp32 dout). A CUDA bf16 table rounds an
     * fp32 G to bf16 once for both products (zs_linear_bwd_cast_elems), in the pass that sums
     * its columns. With dinp16 (dinp_beta 0, and those operands fitting the scratch together)
     * dinp is bf16: the GEMM's fp32 sums rounded once as they are stored (zs_f32_to_bf16 of
     * dinp16 0's dinp, bit for bit), for a consumer that reads bf16 (GPT-2's GELU). */
    zs_status (*gemm_linear_bwd)(zs_stream_t *s, void *dinp, int dinp16, float *dW, float *dbias,
                                 const void *dout, int dout16, const void *gelu_inp, int gelu16,
                                 float *dtmp, const void *inp, int inp16, const float *W, int N,
                                 int IC, int OC, float dinp_beta);
    /* Optional, with gemm_linear_bwd (NULL: none): gemm_linear_bwd with dinp16 and dinp_beta 0,
     * an fp32 dout and no GELU of its own, for a layer whose input came through a GELU
     * (GPT-2's c_proj after fc): dinp (bf16) = gelu'(gelu_pre) (dout @ W), gelu_pre[N, IC] the
     * GELU's input (bf16, as linear_fwd_bias's gelu keeps it), and dinp_dbias[IC] += dinp's
     * column sums: the GELU layer's bias gradient, so its backward is a plain bf16-dout one
     * (zs_linear_bwd_g16 without a bias). The GELU's gradient is taken of the fp32 sums before
     * their one rounding (cuBLASLt's DGELU_BGRAD epilogue: its GELU derivative and its sum
     * order, so within a bound of, not the bits of, the two steps the CPU takes: dout @ W
     * rounded to bf16 as autocast stores it, then gelu_bwd16 and its bias gradient). Where
     * cuBLASLt has no algorithm for it, those two steps' bits. dW and dbias as gemm_linear_bwd's.
     * A bf16 dout (dout16: GPT-2's residual gradient as layernorm_bwd16's dinp16 keeps it) is
     * G as it is: the products' bits on the rounded fp32 dout, and dbias summed from G
     * (gemm_linear_bwd's bf16 dout: cuBLASLt's BGRADB order). Requires zs_linear_dinp16_ok(N,
     * IC, OC, inp16, 0). */
    zs_status (*gemm_linear_bwd_dgelu)(zs_stream_t *s, zs_bf16 *dinp, float *dinp_dbias,
                                       const zs_bf16 *gelu_pre, float *dW, float *dbias,
                                       const void *dout, int dout16, const void *inp, int inp16,
                                       const float *W, int N, int IC, int OC);

    /* Optional, set together with softmax_xent16 (NULL: the loss writes fp32 dlogits and a
     * language model's head takes them through linear.c): gemm_linear_bwd's two products, no bias
     * and no GELU, with the output gradient G already bf16, stored as the column-major G^T
     * (OC x N, ld ldd >= OC). W and inp are rounded into the stream's scratch in the pieces of
     * zs_linear_bwd16_pieces: dinp^T = W^T G^T + dinp_beta dinp^T over W's rows in pieces of
     * OC, then dW^T += inp^T G over inp's rows in pieces of N, each piece's product added to
     * the last in order (one product each when they fit: gemm_linear_bwd's bits on G). */
    zs_status (*gemm_linear_bwd16)(zs_stream_t *s, float *dinp, float *dW, const zs_bf16 *dout,
                                   int ldd, const float *inp, const float *W, int N, int IC, int OC,
                                   float dinp_beta);

    /* Optional (NULL: the table rounds every fp32 GEMM operand itself): f32[0, n) holds exactly
     * b16[0, n) widened, and neither changes until the next twin16 on s (n 0: no twin). A GEMM
     * operand of this table's on s that lies inside f32 (a bf16 compute copy's widened unit:
     * the weights) is then read from b16 at the same offset where the table would have
     * rounded it into its scratch: the same bits, without that pass (docs/cuda.md "GEMM
     * operands"). The caller drops the twin before either buffer is written or reused. */
    void (*twin16)(zs_stream_t *s, const float *f32, const zs_bf16 *b16, size_t n);

    /* out[N,OC] += bias[OC] broadcast over rows. */
    zs_status (*bias_fwd)(zs_stream_t *s, float *out, const float *bias, int N, int OC);
    /* dbias[OC] += sum over rows of dout[N,OC] (accumulates). */
    zs_status (*bias_bwd)(zs_stream_t *s, float *dbias, const float *dout, int N, int OC);
    /* A linear layer's bias and the residual add after it in one pass: out[N,OC] = a + (b + bias)
     * with bias[OC] broadcast over rows, the bits of bias_fwd on b then residual_fwd (bias NULL:
     * residual_fwd's a + b). out may alias a or b. With keep non-NULL the sum is also rounded
     * to bf16: keep[N,OC] holds it and out its values widened, the bits of a cast to bf16 and
     * back after the add (the kept residual stream, models/stack.c zs_resid_rec). */
    zs_status (*bias_residual_fwd)(zs_stream_t *s, float *out, zs_bf16 *keep, const float *a,
                                   const float *b, const float *bias, int N, int OC);
    /* A linear layer's bias and the GELU after it in one pass: pre[N,OC] += bias (NULL: none),
     * then out = gelu(pre), the bits of bias_fwd then gelu_fwd; pre keeps the sum (the GELU's
     * backward reads it). */
    zs_status (*bias_gelu_fwd)(zs_stream_t *s, float *pre, float *out, const float *bias, int N,
                               int OC);
    /* bias_gelu_fwd with the GELU's input and output kept in bf16 (--dtype bf16): from x =
     * pre + bias in fp32 (pre [N,OC] read only; bias NULL: none), pre16 = bf16(x), the GELU's
     * backward's input (gelu_bwd16), and out = bf16(gelu(x)), the next layer's gemm16 input. */
    zs_status (*bias_gelu_fwd16)(zs_stream_t *s, zs_bf16 *pre16, const float *pre, zs_bf16 *out,
                                 const float *bias, int N, int OC);

    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[pos(b,t),:]; tokens in [0, V) are the caller's
     * responsibility (validated by the data layer). wpe may be NULL (no position table,
     * e.g. LLaMA): out[b,t,:] = wte[tokens[b,t],:]. pos is the position in the document (see
     * "Documents" below; t when seg is NULL). */
    zs_status (*embedding_fwd)(zs_stream_t *s, float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int B, int T, int C, const int32_t *seg);
    /* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[pos(b,t),:] += dout[b,t,:] (accumulates), the
     * rows b*T+t added in increasing order. Either gradient pointer may be NULL to skip it. */
    zs_status (*embedding_bwd)(zs_stream_t *s, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int B, int T, int C, const int32_t *seg);

    /* Layer norm over the last dim C of N rows, eps 1e-5: out = (x-mean)*rstd*w + b. Saves
     * mean[N] and rstd[N] for backward. */
    zs_status (*layernorm_fwd)(zs_stream_t *s, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C);
    /* layernorm_fwd with out stored in bf16 (zs_f32_to_bf16 of layernorm_fwd's values). */
    zs_status (*layernorm_fwd16)(zs_stream_t *s, zs_bf16 *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int N, int C);
    /* Accumulates dinp[N,C], dw[C], db[C]. */
    zs_status (*layernorm_bwd)(zs_stream_t *s, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    /* Optional, in the CUDA tables (NULL: the model widens a bf16 input first): layernorm_bwd
     * with dout bf16 where dout16 and inp bf16 where inp16, each widened as it is read, so the
     * bits of layernorm_bwd on their widened values. The bf16 stack's backward reads a block's
     * kept input through it as it is stored (models/stack.h). With dinp16 non-NULL each
     * element of dinp, once accumulated, is also stored rounded to bf16 at the same index of
     * dinp16[N * C] (GPT-2's residual gradient, which projections' backward read as G). */
    zs_status (*layernorm_bwd16)(zs_stream_t *s, float *dinp, zs_bf16 *dinp16, float *dw, float *db,
                                 const void *dout, int dout16, const void *inp, int inp16,
                                 const float *w, const float *mean, const float *rstd, int N,
                                 int C);

    /* GPT-2's tanh GELU, elementwise over n. out may alias inp. */
    zs_status (*gelu_fwd)(zs_stream_t *s, float *out, const float *inp, size_t n);
    /* dinp = 0 + gelu'(inp) * dout: overwrites dinp (a fill and a read of dinp saved), with
     * the bits of accumulating into zeros, which it replaced (0 + makes -0 into +0). */
    zs_status (*gelu_bwd)(zs_stream_t *s, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* gelu_bwd of a bf16 input (bias_gelu_fwd16's pre16), widened: the same bits as gelu_bwd
     * on the widened values. */
    zs_status (*gelu_bwd16)(zs_stream_t *s, float *dinp, const zs_bf16 *inp, const float *dout,
                            size_t n);

    /* Causal multi-head self-attention. qkv[B,T,3C] holds q | k | v, each [NH heads x hs]
     * with hs = C/NH; out[B,T,C]; att[B,NH,T,T] receives the softmax probabilities (0 outside
     * each row's keys seg..t) for backward. Scale 1/sqrt(hs). */
    zs_status (*attention_fwd)(zs_stream_t *s, float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH, const int32_t *seg);
    /* Accumulates dqkv[B,T,3C]. datt[B,NH,T,T] is scratch owned by the caller. */
    zs_status (*attention_bwd)(zs_stream_t *s, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               const int32_t *seg);

    /* out = a + b elementwise (out may alias a or b). */
    zs_status (*residual_fwd)(zs_stream_t *s, float *out, const float *a, const float *b, size_t n);
    /* y += alpha * x. Serves residual backward (alpha 1) and gradient accumulation. */
    zs_status (*axpy)(zs_stream_t *s, float *y, float alpha, const float *x, size_t n);

    /* Fused softmax + cross-entropy over rows of logits[N,Vp] whose first V columns are
     * real (padded columns are ignored). losses[N] = -log softmax(logits)[target]. If dlogits
     * is non-NULL it receives dloss * (softmax - onehot(target)) for the real columns and 0
     * for padded ones; dlogits MAY alias logits (in place, saving a [N,Vp] buffer). A target
     * of -1 masks the row (loss 0, gradient 0). */
    zs_status (*softmax_xent)(zs_stream_t *s, float *losses, float *dlogits, const float *logits,
                              const int32_t *targets, int N, int V, int Vp, float dloss);

    /* Optional, with gemm_linear_bwd16: softmax_xent on bf16 logits [N,Vp] (a head whose GEMM
     * wrote them rounded, linear_fwd_bias's out16), the losses those of softmax_xent on their
     * values widened, bit for bit; with grad, its dlogits rounded to bf16 (zs_f32_to_bf16 of
     * softmax_xent's values) in place of the logits: the column-major Vp x N bf16 matrix that
     * gemm_linear_bwd16 takes (ld Vp). Half the bytes of fp32 logits written by the GEMM and
     * read by the loss, and none by a pass to round the gradient. */
    zs_status (*softmax_xent16)(zs_stream_t *s, float *losses, zs_bf16 *logits,
                                const int32_t *targets, int N, int V, int Vp, float dloss,
                                int grad);

    /* One AdamW update (decoupled weight decay, bias-corrected, step t >= 1) of n elements:
     * g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param). */
    zs_status (*adamw)(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps, float wd,
                       float grad_scale, int t);

    /* AdamW as above over the segments of segs (a unit's tensors in one launch): weight decay wd
     * where a segment's decay flag is set, none elsewhere. The same bits as one adamw call per
     * segment. */
    zs_status (*adamw_segs)(zs_stream_t *s, float *param, const float *grad, float *m, float *v,
                            const zs_adamw_segs *segs, float lr, float beta1, float beta2,
                            float eps, float wd, float grad_scale, int t);
    /* adamw_segs with bf16 gradients, widened as they are read: the same bits as casting them
     * to fp32 and calling adamw_segs (bf16 to fp32 is exact). When round is not NULL each
     * updated parameter is also rounded into it (the bits of cast after the step: the bf16
     * compute copy without a pass of its own); round may be grad itself (in place: each element
     * is read before it is written), or a buffer overlapping no other. */
    zs_status (*adamw_segs16)(zs_stream_t *s, float *param, const zs_bf16 *grad, float *m, float *v,
                              zs_bf16 *round, const zs_adamw_segs *segs, float lr, float beta1,
                              float beta2, float eps, float wd, float grad_scale, int t);

    /* Convert n elements between f32 and bf16 (round to nearest even); same dtype copies. */
    zs_status (*cast)(zs_stream_t *s, void *out, zs_dtype out_dt, const void *in, zs_dtype in_dt,
                      size_t n);
    /* Optional (NULL: a cast a range): out[o, o + n) = in[o, o + n) widened (cast's bits) for
     * each of the nr disjoint ranges (o, n) = (ranges[2 i], ranges[2 i + 1]), host memory, in
     * one launch for up to ZS_WIDEN_RANGES of them; elements outside them are not touched. A bf16
     * compute copy widens a unit's tensors but the twin-read ones so (shard/engine_bf16.c). */
    zs_status (*widen_ranges)(zs_stream_t *s, float *out, const zs_bf16 *in, const int64_t *ranges,
                              int nr);
    /* x[i] = x[i] rounded to bf16 (zs_f32_to_bf16) and widened, in place: the values a bf16
     * copy holds, kept in fp32 (a table without softmax_xent16 rounds its logits so). */
    zs_status (*round16)(zs_stream_t *s, float *x, size_t n);
    /* x *= a. */
    zs_status (*scale)(zs_stream_t *s, float *x, float a, size_t n);
    /* *out = sum of x[i]^2, accumulated in double in a fixed order (deterministic: chunks of
     * ZS_SUMSQ_CHUNK, each in 8 double lanes, then the chunks in index order). out is device
     * memory, written in stream order like any other output. */
    zs_status (*sumsq)(zs_stream_t *s, double *out, const float *x, size_t n);
    /* *out = sum of x[i] in double, the same order as sumsq (device memory, stream order). */
    zs_status (*sum)(zs_stream_t *s, double *out, const float *x, size_t n);
    /* Squared sums of bf16 values by groups (the norm of bf16 gradients): out[k] is sumsq's
     * result on the widened elements [k group, min(n, (k+1) group)), for each of the
     * ceil(n / group) groups (one, 0, when n is 0); group is a positive multiple of
     * ZS_SUMSQ_CHUNK. One pass, the same bits as widening each group and calling sumsq. */
    zs_status (*sumsq16)(zs_stream_t *s, double *out, const zs_bf16 *x, size_t n, size_t group);
    /* x[i] = value. */
    zs_status (*fill)(zs_stream_t *s, float *x, float value, size_t n);
    /* memcpy of nbytes within device memory. */
    zs_status (*copy)(zs_stream_t *s, void *dst, const void *src, size_t nbytes);
    /* x[i] = std * N(0,1) drawn by Philox for (seed, stream_id, index0 + i): element i of a
     * tensor is the same whichever rank or shard initialises it. */
    zs_status (*init_normal)(zs_stream_t *s, float *x, size_t n, uint64_t seed, uint64_t stream_id,
                             uint64_t index0, float std);
    /* Wait until all work queued on s has finished. */
    zs_status (*sync)(zs_stream_t *s);

    /* ---- LLaMA-family ops (docs/models.md) ---- */

    /* RMSNorm over the last dim C of N rows: out = x * rstd * w with rstd = 1 / sqrt(mean(x^2)
     * + eps), Hugging Face's order. Saves rstd[N] for backward. */
    zs_status (*rmsnorm_fwd)(zs_stream_t *s, float *out, float *rstd, const float *inp,
                             const float *w, int N, int C, float eps);
    /* rmsnorm_fwd with out stored in bf16 (zs_f32_to_bf16 of rmsnorm_fwd's values). */
    zs_status (*rmsnorm_fwd16)(zs_stream_t *s, zs_bf16 *out, float *rstd, const float *inp,
                               const float *w, int N, int C, float eps);
    /* Accumulates dinp[N,C] and dw[C]. */
    zs_status (*rmsnorm_bwd)(zs_stream_t *s, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int N, int C);
    /* Optional, in the CUDA tables (NULL: the model widens a bf16 input first): rmsnorm_bwd with
     * dout and inp bf16 where flagged, as layernorm_bwd16. */
    zs_status (*rmsnorm_bwd16)(zs_stream_t *s, float *dinp, float *dw, const void *dout, int dout16,
                               const void *inp, int inp16, const float *w, const float *rstd, int N,
                               int C);

    /* Rotary position embedding of x[B,T,NH,hs] (hs even, at most 1024), Hugging Face's
     * rotate_half layout: in each head, elements i and i + hs/2 are rotated by the angle
     * pos * theta^(-2i/hs), pos the row's position in its document (t - seg[b*T+t]; t, i.e.
     * 0..T-1, when seg is NULL). Overwrites out; out MAY alias inp. */
    zs_status (*rope_fwd)(zs_stream_t *s, float *out, const float *inp, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg);
    /* Backward of rope_fwd: dinp = R^T dout, the rotation by the negative angle. Overwrites
     * dinp (it does NOT accumulate); dinp MAY alias dout. */
    zs_status (*rope_bwd)(zs_stream_t *s, float *dinp, const float *dout, int B, int T, int NH,
                          int hs, float theta, const int32_t *seg);
    /* rope_bwd with dinp stored in bf16 (zs_f32_to_bf16 of rope_bwd's values; dinp must not
     * overlap dout): LLaMA's q and k gradients, which only GEMMs read (zs_linear_bwd_g16). */
    zs_status (*rope_bwd16)(zs_stream_t *s, zs_bf16 *dinp, const float *dout, int B, int T, int NH,
                            int hs, float theta, const int32_t *seg);

    /* SwiGLU gate, elementwise over n: out = silu(gate) * up, silu(x) = x sigmoid(x). out may
     * alias gate or up. */
    zs_status (*swiglu_fwd)(zs_stream_t *s, float *out, const float *gate, const float *up,
                            size_t n);
    /* swiglu_fwd with out stored in bf16 (zs_f32_to_bf16 of swiglu_fwd's values). */
    zs_status (*swiglu_fwd16)(zs_stream_t *s, zs_bf16 *out, const float *gate, const float *up,
                              size_t n);
    /* dgate = 0 + dout * up * silu'(gate) and dup = 0 + dout * silu(gate): overwrites both (two
     * fills and two reads saved), with the bits of accumulating into zeros, as gelu_bwd. */
    zs_status (*swiglu_bwd)(zs_stream_t *s, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, size_t n);
    /* swiglu_bwd with dgate and dup stored in bf16 (zs_f32_to_bf16 of swiglu_bwd's values):
     * gradients only GEMMs read (zs_linear_bwd_g16). */
    zs_status (*swiglu_bwd16)(zs_stream_t *s, zs_bf16 *dgate, zs_bf16 *dup, const float *dout,
                              const float *gate, const float *up, size_t n);

    /* Causal self-attention with grouped-query heads: q[B,T,NH*hs], k and v [B,T,NKV*hs]
     * (separate buffers, head-major within a row), NKV divides NH, query head h attends with
     * key/value head h / (NH/NKV) (Hugging Face's repeat_kv). out[B,T,NH*hs]; att[B,NH,T,T]
     * receives the softmax probabilities (0 above the diagonal) for backward. Scale
     * 1/sqrt(hs). With NKV == NH it computes what attention_fwd does on q | k | v. Document
     * masks as attention_fwd (seg). */
    zs_status (*attention_gqa_fwd)(zs_stream_t *s, float *out, float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg);
    /* Accumulates dq, dk, dv (shapes of q, k, v). datt[B,NH,T,T] is scratch owned by the
     * caller. */
    zs_status (*attention_gqa_bwd)(zs_stream_t *s, float *dq, float *dk, float *dv, float *datt,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *att, int B, int T, int NH, int NKV,
                                   int hs, const int32_t *seg);
    /* ---- memory-efficient causal attention (backend/kernels/flash.h, docs/models.md) ---- */

    /* Causal self-attention over strided row views, O(T) memory: q[B,T] rows of stride ldq
     * hold NH heads of hs, k and v rows of stride ldkv hold NKV heads (NKV divides NH; query
     * head h reads kv head h / (NH/NKV)); GPT-2's packed qkv[B,T,3C] is q = qkv, k = qkv + C,
     * v = qkv + 2C with ldq = ldkv = 3C. out[B,T,NH*hs] (overwritten); lse[B,NH,T] receives
     * each row's log-sum-exp of its scaled scores, the only thing backward needs besides out.
     * Scale 1/sqrt(hs). Keys are processed in blocks of ZS_FA_BK with an online softmax; the
     * results are the same bits on every backend and thread count. Row t reads keys
     * seg[b*T+t]..t ("Documents" above). */
    zs_status (*flash_attention_fwd)(zs_stream_t *s, float *out, float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int NH, int NKV,
                                     int hs, int ldq, int ldkv, const int32_t *seg);
    /* Overwrites dq (stride ldq), dk and dv (stride ldkv), which may be views into one packed
     * buffer as q, k, v are (the other columns of their rows are not touched), with the bits of
     * accumulating into zeros (0 + makes -0 into +0), so no fill has to come first.
     * delta[B,NH,T] is scratch owned by the caller (dO.O per row). */
    zs_status (*flash_attention_bwd)(zs_stream_t *s, float *dq, float *dk, float *dv, float *delta,
                                     const float *dout, const float *q, const float *k,
                                     const float *v, const float *out, const float *lse, int B,
                                     int T, int NH, int NKV, int hs, int ldq, int ldkv,
                                     const int32_t *seg);
    /* The two above with out in bf16 (--dtype bf16: out is only the projection's GEMM input
     * and the backward's delta, as under autocast; docs/models.md "Activations"), for hs up
     * to ZS_FA_OUT16_MAX_HS. fwd16 writes each element of flash_attention_fwd's fp32 out
     * rounded once (zs_f32_to_bf16), its lse unchanged; bwd16 gives flash_attention_bwd's bits
     * for out widened (exactly) to fp32. On tensor cores (the CUDA bf16 table, head sizes 16,
     * 32 and 64) both forwards need out 8-byte aligned, as a model's carve always is. */
    zs_status (*flash_attention_fwd16)(zs_stream_t *s, zs_bf16 *out, float *lse, const float *q,
                                       const float *k, const float *v, int B, int T, int NH,
                                       int NKV, int hs, int ldq, int ldkv, const int32_t *seg);
    zs_status (*flash_attention_bwd16)(zs_stream_t *s, float *dq, float *dk, float *dv,
                                       float *delta, const float *dout, const float *q,
                                       const float *k, const float *v, const zs_bf16 *out,
                                       const float *lse, int B, int T, int NH, int NKV, int hs,
                                       int ldq, int ldkv, const int32_t *seg);
    /* Optional, set together with gemm_linear_bwd (NULL: none; the model rounds bwd16's fp32
     * gradients by round16): flash_attention_bwd16 with dq, dk and dv written in bf16, each
     * element bwd16's value rounded once (zs_f32_to_bf16), as autocast stores attention's input
     * gradients; the projection's backward then reads them as they are (zs_linear_bwd_g16).
     * Two bytes an element written and read where four were, and no rounding pass. */
    zs_status (*flash_attention_bwd16g)(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv,
                                        float *delta, const float *dout, const float *q,
                                        const float *k, const float *v, const zs_bf16 *out,
                                        const float *lse, int B, int T, int NH, int NKV, int hs,
                                        int ldq, int ldkv, const int32_t *seg);
    /* Optional, set together in the CUDA bf16 table (NULL: the model widens bf16 q, k, v into
     * fp32 scratch): fwd16 and bwd16g with bf16 q, k, v for the head sizes flash_qkv16_hs accepts
     * (1; else ZS_ERR_INVALID), the bits of fwd16 and bwd16g on the values widened, whose kernels
     * round q, k, v to bf16 anyway (GPT-2's kept qkv, docs/models.md "Activations"). bwd16q's
     * dO is bf16 too, as autocast's projection backward stores it (the kernels' MMA operand
     * anyway; delta = dO.O reads it widened). */
    int (*flash_qkv16_hs)(int hs);
    zs_status (*flash_attention_fwd16q)(zs_stream_t *s, zs_bf16 *out, float *lse, const zs_bf16 *q,
                                        const zs_bf16 *k, const zs_bf16 *v, int B, int T, int NH,
                                        int NKV, int hs, int ldq, int ldkv, const int32_t *seg);
    zs_status (*flash_attention_bwd16q)(zs_stream_t *s, zs_bf16 *dq, zs_bf16 *dk, zs_bf16 *dv,
                                        float *delta, const zs_bf16 *dout, const zs_bf16 *q,
                                        const zs_bf16 *k, const zs_bf16 *v, const zs_bf16 *out,
                                        const float *lse, int B, int T, int NH, int NKV, int hs,
                                        int ldq, int ldkv, const int32_t *seg);

    /* ---- decoding with a KV cache (models/decode.c) ---- */

    /* One new position `pos` of causal attention over a cache: q[NH*hs] and k, v [NKV*hs] are
     * the position's projections. With theta > 0, q and k are first rotated by RoPE at pos (in
     * place). k and v are then stored as row pos of kc and vc ([cap, NKV*hs] each), and
     * out[NH*hs] = softmax(q K^T / sqrt(hs)) V over rows 0..pos, head h reading kv head
     * h / (NH/NKV). scores[NH * (pos + 1)] is scratch. Overwrites out. */
    zs_status (*decode_attention)(zs_stream_t *s, float *out, float *q, float *k, const float *v,
                                  float *kc, float *vc, float *scores, int NH, int NKV, int hs,
                                  int pos, float theta);
    /* The token after a row of logits[V] (device memory): temperature <= 0 takes the first
     * maximum; otherwise a draw from softmax(logits / temperature) at cuRAND's Philox4_32_10
     * uniform u for (seed, subsequence index) (kernels/sample.h): the first token whose running
     * sum of weights reaches u times their total. *token is device memory. */
    zs_status (*sample)(zs_stream_t *s, int32_t *token, const float *logits, int V,
                        float temperature, uint64_t seed, uint64_t index);
} zs_ops;

/* The CPU backend: OpenBLAS sgemm + OpenMP loops. Always available. */
const zs_ops *zs_ops_cpu(void);
/* The CUDA backend: cuBLAS gemm + kernels over the same backend/kernels math (docs/cuda.md).
 * NULL when the build has no CUDA backend; with one, the table is returned whether or not a
 * GPU is visible (check zs_cuda_device_count(), backend/cuda_device.h, which also has the
 * device memory and stream helpers). Pointers passed to its ops are device pointers, except
 * sumsq's result, which is host memory. */
const zs_ops *zs_ops_cuda(void);

/* The shape and stride checks of flash_attention_fwd/bwd, shared by every backend: ZS_OK, or
 * ZS_ERR_INVALID with zs_last_error() naming op and the bad sizes. attention_check.c. */
zs_status zs_flash_attention_check(const char *op, int B, int T, int NH, int NKV, int hs, int ldq,
                                   int ldkv);
/* The head sizes flash_attention_fwd16/bwd16 take (a row's fp32 accumulator is a thread's own
 * array where the kernel has no other room for it), and their checks: the ones above and
 * hs <= ZS_FA_OUT16_MAX_HS. */
#define ZS_FA_OUT16_MAX_HS 256
zs_status zs_flash_attention_check16(const char *op, int B, int T, int NH, int NKV, int hs, int ldq,
                                     int ldkv);

/* adamw_segs' argument checks (segments in order, disjoint, at most ZS_ADAMW_SEGS; t >= 1),
 * shared by every backend (backend/linear.c). */
zs_status zs_adamw_segs_check(const zs_adamw_segs *segs, int t);

/* decode_attention's shape checks, shared by every backend (cpu/decode_cpu.c). */
zs_status zs_kv_attention_check(int NH, int NKV, int hs, int pos, float theta);

/* bf16 operands for a CUDA table's bf16 gemm (ZS_MATH_BF16, docs/cuda.md "GEMM operands"):
 * it rounds packed (ld = rows) fp32 A and B to bf16 (to nearest even, as
 * CUBLAS_COMPUTE_32F_FAST_16BF does) into a scratch of its stream, at most ZS_GEMM_CAST_MAX
 * elements, and multiplies those on bf16 tensor cores. zs_gemm_cast_plan says how:
 *  - whole, when both operands fit (n_piece = n, k_piece = k);
 *  - else, for B untransposed, A whole and B and C in pieces of n_piece columns;
 *  - else, for A untransposed and B transposed, A and B in pieces of k_piece along k, the
 *    pieces' products added into C in order (a language model's output head backward);
 *  - else not at all (elems 0): cuBLAS's FAST_16BF on the fp32 operands, which an H100 runs
 *    as TF32 at half the bf16 speed.
 * Pieces are multiples of ZS_GEMM_PIECE; the plan depends on the shape only, so a run's
 * products are the same every time. The scratch grows to a power of two >= 64 elements
 * covering the largest plan: zs_linear_cast_elems is the most a linear layer's three gemms
 * ask (the memory estimator's rule). */
#define ZS_GEMM_CAST_MAX ((size_t)1 << 26)
#define ZS_GEMM_PIECE 256
/* Elements of one operand in the scratch rounded up to 8, so the next one starts 16-byte
 * aligned (what cuBLAS's tensor-core kernels want); the plan and the CUDA table both use it. */
static inline size_t zs_gemm_cast_round(size_t elems) {
    return (elems + 7) / 8 * 8;
}
typedef struct zs_gemm_cast {
    size_t elems; /* scratch elements, 0: no cast */
    int n_piece, k_piece;
} zs_gemm_cast;
zs_gemm_cast zs_gemm_cast_plan(int transa, int transb, int m, int n, int k, int lda, int ldb);
/* gemm16's plan for its fp32 operand (B where a16, else A), packed. Where zs_gemm_cast_plan
 * would split the fp32 pair (along k, or n), gemm16 splits the same way: cuBLAS may choose its
 * kernel by shape, so only the same pieces are sure to give the same bits. Else the operand is
 * rounded whole when it fits, or in pieces of its stored columns (m's, n's or k's). The fp32
 * operand is rounded piece by piece where the split runs along its stored columns, else once,
 * whole. elems: the scratch it asks (0: no plan fits). */
enum { ZS_SPLIT_NONE, ZS_SPLIT_M, ZS_SPLIT_N, ZS_SPLIT_K };
typedef struct zs_gemm16_split {
    size_t elems;
    int dim;   /* ZS_SPLIT_*: C's rows (m), C's columns (n), or the sum (k, added in order) */
    int piece; /* along dim, a multiple of ZS_GEMM_PIECE (0 where not split) */
    int rows;  /* the fp32 operand's stored rows (its leading dimension, packed) */
    int own;   /* the ZS_SPLIT_* its stored columns run along: pieces there are rounded apart */
} zs_gemm16_split;
zs_gemm16_split zs_gemm16_plan(int transa, int transb, int m, int n, int k, int a16);
/* What gemm_linear_bwd casts at once, W, dout (unless g16, a bf16 dout) and inp (unless in16,
 * a bf16 input) (0: too many as fp32, each gemm casts its own). */
size_t zs_linear_bwd_cast_elems(int N, int IC, int OC, int in16, int g16);
/* Where those do not fit and there is no bias or GELU: W whole and dout's (unless g16) and
 * inp's (unless in16) rows in pieces of *rows (a multiple of ZS_GEMM_PIECE below N, sized for
 * fp32 ones either way), both products taking each piece; the scratch it asks, or 0 when even one
 * piece does not fit with W (each gemm casts its own). */
size_t zs_linear_bwd_rows_plan(int N, int IC, int OC, int in16, int g16, int *rows);
/* gemm_linear_bwd16's pieces: W's rows oc_piece at a time, inp's n_piece (multiples of
 * ZS_GEMM_PIECE unless all of them), so neither asks more than ZS_GEMM_CAST_MAX of the scratch;
 * 0 when IC is too wide for a piece. The scratch it asks is returned. */
size_t zs_linear_bwd16_pieces(int N, int IC, int OC, int *oc_piece, int *n_piece);
/* linear_fwd_bias's pieces with a bf16 output and no bias (a head into bf16 logits): W's rows
 * whole, or oc_piece at a time in half the scratch where W and an fp32 input do not fit it
 * together, and an fp32 input's rows n_piece at a time in the rest (multiples of
 * ZS_GEMM_PIECE unless all of them); the scratch it asks (its W part whether or not W has a
 * twin, ops.h twin16, so the ask is the shape's), or 0 when IC is too wide. */
size_t zs_linear_fwd16_plan(int N, int IC, int OC, int in16, int *oc_piece, int *n_piece);
size_t zs_linear_cast_elems(int N, int IC, int OC, int in16, int dout16, int g16);

/* Every backend's gemm's checks, made first (linear.c): trans flags 0 or 1, sizes >= 0, lds at
 * least their operand's rows (and 1), no NULL operand for work; else ZS_ERR_INVALID naming it. */
zs_status zs_gemm_check(int transa, int transb, int m, int n, int k, const float *A, int lda,
                        const float *B, int ldb, const float *C, int ldc);

/* The linear layers over a table (linear.c): backend/linear.h. */
#include "backend/linear.h"

#endif

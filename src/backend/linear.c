/* Row-major linear layers on the column-major gemm (docs/architecture.md "The ops table"). A
 * row-major X[r,c] is, byte for byte, the column-major matrix X^T (c x r, ld c), so every row-major
 * product Y = A B is computed as Y^T = B^T A^T with the operands swapped. This is the one place
 * that mapping is written; models call these and never gemm with row-major reasoning. */
#include "backend/ops.h"
#include "core/status.h"

zs_gemm_cast zs_gemm_cast_plan(int transa, int transb, int m, int n, int k, int lda, int ldb) {
    zs_gemm_cast none = {0, n, k};
    size_t arows = (size_t)(transa ? k : m), brows = (size_t)(transb ? n : k);
    if (m <= 0 || n <= 0 || k <= 0 || (size_t)lda != arows || (size_t)ldb != brows) return none;
    size_t a = zs_gemm_cast_round((size_t)m * k), all = a + (size_t)k * n;
    if (all <= ZS_GEMM_CAST_MAX) return (zs_gemm_cast){all, n, k};
    if (!transb && a < ZS_GEMM_CAST_MAX) { /* A whole, B's columns k apart */
        size_t pn = (ZS_GEMM_CAST_MAX - a) / (size_t)k / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
        if (pn >= ZS_GEMM_PIECE) return (zs_gemm_cast){a + (size_t)k * pn, (int)pn, k};
    }
    if (!transa && transb) { /* A's columns and B's stored columns along k */
        size_t pk = ZS_GEMM_CAST_MAX / ((size_t)m + n) / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
        if (pk >= ZS_GEMM_PIECE && pk < (size_t)k)
            return (zs_gemm_cast){zs_gemm_cast_round((size_t)m * pk) + (size_t)n * pk, n, (int)pk};
    }
    return none;
}

zs_gemm16_split zs_gemm16_plan(int transa, int transb, int m, int n, int k, int a16) {
    /* the fp32 operand: B (stored n x k or k x n) where A is bf16, else A; its stored columns
     * are m's (A transposed), n's (B not transposed) or k's */
    size_t rows = (size_t)(a16 ? (transb ? n : k) : (transa ? k : m));
    size_t cols = (size_t)(a16 ? (transb ? k : n) : (transa ? m : k));
    int own = a16 ? (transb ? ZS_SPLIT_K : ZS_SPLIT_N) : (transa ? ZS_SPLIT_M : ZS_SPLIT_K);
    zs_gemm16_split none = {0, ZS_SPLIT_NONE, 0, (int)rows, own};
    zs_gemm16_split p = {rows * cols, ZS_SPLIT_NONE, 0, (int)rows, own};
    if (m <= 0 || n <= 0 || k <= 0) return none;
    zs_gemm_cast f = zs_gemm_cast_plan(transa, transb, m, n, k, transa ? k : m, transb ? n : k);
    if (f.elems && f.k_piece < k) { /* the fp32 pair's pieces, so the same sums: the same bits */
        p.dim = ZS_SPLIT_K, p.piece = f.k_piece;
    } else if (f.elems && f.n_piece < n) {
        p.dim = ZS_SPLIT_N, p.piece = f.n_piece;
    } else if (!f.elems && rows * cols > ZS_GEMM_CAST_MAX) { /* its own columns in pieces */
        size_t pc = ZS_GEMM_CAST_MAX / rows / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
        if (pc < ZS_GEMM_PIECE) return none;
        p.dim = own, p.piece = (int)pc;
    }
    if (p.dim == own) p.elems = rows * (size_t)p.piece; /* a piece at a time */
    return p.elems <= ZS_GEMM_CAST_MAX ? p : none;
}

/* The plans below are decided on the fp32 operands' sizes whatever in16 says, so that a bf16
 * input takes the very products, in the very pieces, that its fp32 twin takes: only its
 * rounding pass and its room in the scratch are saved. */
static size_t bwd_cast_fp32(int N, int IC, int OC) {
    size_t e =
        zs_gemm_cast_round((size_t)IC * OC) + zs_gemm_cast_round((size_t)OC * N) + (size_t)IC * N;
    return N > 0 && IC > 0 && OC > 0 && e <= ZS_GEMM_CAST_MAX ? e : 0;
}

size_t zs_linear_bwd_cast_elems(int N, int IC, int OC, int in16, int g16) {
    size_t e = bwd_cast_fp32(N, IC, OC);
    if (!e) return 0;
    return e - (in16 ? (size_t)IC * N : 0) - (g16 ? zs_gemm_cast_round((size_t)OC * N) : 0);
}

size_t zs_linear_bwd_rows_plan(int N, int IC, int OC, int in16, int g16, int *rows) {
    *rows = 0;
    if (N <= 0 || IC <= 0 || OC <= 0 || bwd_cast_fp32(N, IC, OC)) return 0;
    size_t nw = zs_gemm_cast_round((size_t)IC * OC);
    if (nw >= ZS_GEMM_CAST_MAX) return 0;
    size_t r = (ZS_GEMM_CAST_MAX - nw) / ((size_t)IC + OC) / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
    if (r < ZS_GEMM_PIECE || r >= (size_t)N) return 0;
    *rows = (int)r;
    return nw + ((in16 ? 0 : (size_t)IC) + (g16 ? 0 : (size_t)OC)) * r;
}

/* cols whole when IC of each fit the scratch, else in multiples of ZS_GEMM_PIECE (0: none fit). */
static int bwd16_piece(int cols, int IC) {
    size_t p = ZS_GEMM_CAST_MAX / (size_t)IC / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
    return (size_t)IC * cols <= ZS_GEMM_CAST_MAX ? cols : p < (size_t)cols ? (int)p : cols;
}

size_t zs_linear_bwd16_pieces(int N, int IC, int OC, int *oc_piece, int *n_piece) {
    *oc_piece = *n_piece = 0;
    if (N <= 0 || IC <= 0 || OC <= 0) return 0;
    *oc_piece = bwd16_piece(OC, IC);
    *n_piece = bwd16_piece(N, IC);
    size_t w = (size_t)IC * *oc_piece, x = (size_t)IC * *n_piece;
    return w > x ? w : x;
}

size_t zs_linear_fwd16_plan(int N, int IC, int OC, int in16, int *oc_piece, int *n_piece) {
    const size_t max = ZS_GEMM_CAST_MAX;
    size_t w, oc = (size_t)OC, nc = (size_t)N;
    *oc_piece = *n_piece = 0;
    if (N <= 0 || IC <= 0 || OC <= 0) return 0;
    if (oc * IC + (in16 ? 0 : nc * IC) > max && oc * IC > max / 2) /* W's rows: half of it */
        oc = max / 2 / IC / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
    w = zs_gemm_cast_round(oc * IC);
    if (!in16 && nc * IC > max - w) /* the input's rows in what is left */
        nc = (max - w) / IC / ZS_GEMM_PIECE * ZS_GEMM_PIECE;
    if (oc == 0 || nc == 0) return 0;
    *oc_piece = (int)oc;
    *n_piece = (int)nc;
    return w + (in16 ? 0 : nc * IC);
}

/* The three gemms below, with their arguments, the backward's two as one where they fit; with
 * in16 the input is bf16 and only W (forward) and dout (the weight gradient) are rounded, by
 * gemm16's plan; with dout16 the forward writes bf16 (zs_linear_fwd16_plan) and the backward
 * is gemm_linear_bwd16's pieces where they fit (what a model's head does: model.c head_bf16); with
 * g16 the output gradient is bf16 as its producer stored it (zs_linear_bwd_g16), so only W and an
 * fp32 input are rounded. */
size_t zs_linear_cast_elems(int N, int IC, int OC, int in16, int dout16, int g16) {
    int op, np, rows;
    size_t f = dout16 ? zs_linear_fwd16_plan(N, IC, OC, in16, &op, &np) /* bf16 logits */
               : in16 ? zs_gemm16_plan(1, 0, OC, N, IC, 0).elems
                      : zs_gemm_cast_plan(1, 0, OC, N, IC, IC, IC).elems;
    size_t b = dout16 ? zs_linear_bwd16_pieces(N, IC, OC, &op, &np) : 0;
    if (!b) {
        b = zs_linear_bwd_cast_elems(N, IC, OC, in16, g16);
        if (!b) { /* each gemm its own: dinp^T = W^T G^T, dW^T = inp^T G */
            size_t d = g16 ? zs_gemm16_plan(0, 0, IC, N, OC, 0).elems
                           : zs_gemm_cast_plan(0, 0, IC, N, OC, IC, OC).elems;
            size_t w = in16 && g16 ? 0
                       : in16      ? zs_gemm16_plan(0, 1, IC, OC, N, 1).elems
                       : g16       ? zs_gemm16_plan(0, 1, IC, OC, N, 0).elems
                                   : zs_gemm_cast_plan(0, 1, IC, OC, N, IC, OC).elems;
            b = d > w ? d : w;
        }
        size_t r = zs_linear_bwd_rows_plan(N, IC, OC, in16, g16, &rows);
        b = b > r ? b : r;
    }
    return f > b ? f : b;
}

/* gemm, or gemm16 with A bf16 where a16 and B where b16 (the table must have it). */
static zs_status gemm_in(const zs_ops *ops, zs_stream_t *s, int transa, int transb, int m, int n,
                         int k, const void *A, int a16, int lda, const void *B, int b16, int ldb,
                         float beta, float *C, int ldc) {
    if (!a16 && !b16)
        return ops->gemm(s, transa, transb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (!ops->gemm16)
        return zs_error(ZS_ERR_INVALID, "linear: the %s table's gemm takes no bf16 input",
                        ops->name);
    return ops->gemm16(s, transa, transb, m, n, k, 1.0f, A, a16, lda, B, b16, ldb, beta, C, ldc);
}

zs_status zs_linear_fwd(const zs_ops *ops, zs_stream_t *s, float *out, const void *inp, int in16,
                        const float *W, const float *bias, int N, int IC, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0, ZS_ERR_INVALID,
               "linear_fwd: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    if (bias && ops->linear_fwd_bias) /* the bias in the GEMM's epilogue */
        return ops->linear_fwd_bias(s, out, 0, NULL, inp, in16, W, bias, N, IC, OC, NULL, NULL);
    /* out[N,OC] = inp W^T  <=>  out^T (OC x N) = W (OC x IC) inp^T (IC x N). The stored W is,
     * read column-major, W^T (IC x OC, ld IC), hence transa = T; the stored inp is inp^T
     * (IC x N, ld IC) and out is out^T (OC x N, ld OC), used as they are. */
    ZS_CHECK(gemm_in(ops, s, 1, 0, OC, N, IC, W, 0, IC, inp, in16, IC, 0.0f, out, OC));
    if (bias) ZS_CHECK(ops->bias_fwd(s, out, bias, N, OC));
fail:
    return st;
}

zs_status zs_linear_fwd16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *out, float *tmp,
                          const void *inp, int in16, const float *W, const float *bias, int N,
                          int IC, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0, ZS_ERR_INVALID,
               "linear_fwd: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    if (bias && ops->linear_fwd_bias)
        return ops->linear_fwd_bias(s, out, 1, tmp, inp, in16, W, bias, N, IC, OC, NULL, NULL);
    ZS_REQUIRE(tmp, ZS_ERR_INVALID, "linear_fwd16: a bf16 output without a scratch");
    ZS_CHECK(zs_linear_fwd(ops, s, tmp, inp, in16, W, bias, N, IC, OC));
    ZS_CHECK(ops->cast(s, out, ZS_DTYPE_BF16, tmp, ZS_DTYPE_F32, (size_t)N * OC));
fail:
    return st;
}

zs_status zs_linear_residual_fwd(const zs_ops *ops, zs_stream_t *s, float *out, zs_bf16 *keep,
                                 const float *x, float *tmp, const void *inp, int in16,
                                 const float *W, const float *bias, int N, int IC, int OC) {
    zs_status st = ZS_OK;
    if (!keep && ops->linear_fwd_bias) /* x as the GEMM's C, a bias in its epilogue */
        return ops->linear_fwd_bias(s, out, 0, tmp, inp, in16, W, bias, N, IC, OC, NULL, x);
    ZS_CHECK(zs_linear_fwd(ops, s, tmp, inp, in16, W, NULL, N, IC, OC));
    ZS_CHECK(ops->bias_residual_fwd(s, out, keep, x, tmp, bias, N, OC));
fail:
    return st;
}

zs_status zs_linear_gelu_fwd(const zs_ops *ops, zs_stream_t *s, void *pre, void *out, float *tmp,
                             const void *inp, int act16, const float *W, const float *bias, int N,
                             int IC, int OC) {
    zs_status st = ZS_OK;
    /* The bias goes into the GEMM's epilogue where the table has one (in bf16 the GELU too),
     * else into the GELU's pass. */
    const float *gemm_bias = ops->linear_fwd_bias ? bias : NULL;
    const float *gelu_bias = ops->linear_fwd_bias ? NULL : bias;
    if (!act16) {
        ZS_CHECK(zs_linear_fwd(ops, s, pre, inp, 0, W, gemm_bias, N, IC, OC));
        return ops->bias_gelu_fwd(s, pre, out, gelu_bias, N, OC);
    }
    ZS_REQUIRE(tmp, ZS_ERR_INVALID, "linear_gelu_fwd: bf16 activations without a scratch");
    if (gemm_bias) /* the sum rounded into pre and its GELU into out as the GEMM writes them */
        return ops->linear_fwd_bias(s, pre, 1, tmp, inp, 1, W, gemm_bias, N, IC, OC, out, NULL);
    ZS_CHECK(zs_linear_fwd(ops, s, tmp, inp, 1, W, NULL, N, IC, OC));
    ZS_CHECK(ops->bias_gelu_fwd16(s, pre, tmp, out, gelu_bias, N, OC));
fail:
    return st;
}

/* dinp_beta: 1 adds to dinp, 0 overwrites it (and does not read it). gelu_inp: the layer's
 * output went through a GELU, dout is the gradient of gelu(gelu_inp), and gelu_bwd's of
 * gelu_inp (into dtmp unless the table fuses it) is the layer's output gradient. dinp16: dinp
 * is bf16, written by the table's gemm_linear_bwd (zs_linear_dinp16_ok). */
static zs_status linear_bwd(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16, float *dW,
                            float *dbias, const void *dout, int dout16, const void *gelu_inp,
                            int gelu16, float *dtmp, const void *inp, int in16, const float *W,
                            int N, int IC, int OC, float dinp_beta) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0, ZS_ERR_INVALID,
               "linear_bwd: negative shape N=%d IC=%d OC=%d", N, IC, OC);
    ZS_REQUIRE(!dinp16 || (dinp && dW && ops->gemm_linear_bwd), ZS_ERR_INVALID,
               "linear_bwd: the %s table writes no bf16 input gradient", ops->name);
    ZS_REQUIRE(!dout16 || (!dbias && !gelu_inp) || (dinp && dW && ops->gemm_linear_bwd),
               ZS_ERR_INVALID,
               "linear_bwd: a bf16 output gradient takes a bias or GELU only through the %s "
               "table's gemm_linear_bwd",
               ops->name);
    /* dinp[N,IC] += dout[N,OC] W[OC,IC]  <=>  dinp^T (IC x N) += W^T (IC x OC) dout^T (OC x N);
     * both column-major views are the stored arrays as they are: no transposes. */
    /* dW[OC,IC] += dout^T inp  <=>  dW^T (IC x OC) += inp^T (IC x N) dout (N x OC); the stored
     * dout is dout^T (OC x N) column-major, hence transb = T. */
    if (dinp && dW && ops->gemm_linear_bwd)
        return ops->gemm_linear_bwd(s, dinp, dinp16, dW, dbias, dout, dout16, gelu_inp, gelu16,
                                    dtmp, inp, in16, W, N, IC, OC, dinp_beta);
    if (gelu_inp) {
        if (gelu16)
            ZS_CHECK(ops->gelu_bwd16(s, dtmp, gelu_inp, dout, (size_t)N * OC));
        else
            ZS_CHECK(ops->gelu_bwd(s, dtmp, gelu_inp, dout, (size_t)N * OC));
        dout = dtmp;
    }
    if (dinp)
        ZS_CHECK(gemm_in(ops, s, 0, 0, IC, N, OC, W, 0, IC, dout, dout16, OC, dinp_beta,
                         (float *)dinp, IC));
    if (dW)
        ZS_CHECK(gemm_in(ops, s, 0, 1, IC, OC, N, inp, in16, IC, dout, dout16, OC, 1.0f, dW, IC));
    if (dbias) ZS_CHECK(ops->bias_bwd(s, dbias, dout, N, OC));
fail:
    return st;
}

zs_status zs_linear_bwd(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW, float *dbias,
                        const float *dout, const void *inp, int in16, const float *W, int N, int IC,
                        int OC) {
    return linear_bwd(ops, s, dinp, 0, dW, dbias, dout, 0, NULL, 0, NULL, inp, in16, W, N, IC, OC,
                      1.0f);
}

zs_status zs_linear_bwd_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW, float *dbias,
                            const float *dout, const void *inp, int in16, const float *W, int N,
                            int IC, int OC) {
    return linear_bwd(ops, s, dinp, 0, dW, dbias, dout, 0, NULL, 0, NULL, inp, in16, W, N, IC, OC,
                      0.0f);
}

/* zs_linear_gelu_bwd_set and its bf16-dout form. */
static zs_status gelu_bwd_set(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16, float *dW,
                              float *dbias, const void *dout, int dout16, const void *gelu_inp,
                              float *dtmp, const void *inp, int in16, const float *W, int N, int IC,
                              int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(gelu_inp && dtmp, ZS_ERR_INVALID, "linear_gelu_bwd: NULL GELU input or scratch");
    return linear_bwd(ops, s, dinp, dinp16, dW, dbias, dout, dout16, gelu_inp, in16, dtmp, inp,
                      in16, W, N, IC, OC, 0.0f);
fail:
    return st;
}

zs_status zs_linear_gelu_bwd_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW,
                                 float *dbias, const float *dout, const void *gelu_inp, float *dtmp,
                                 const void *inp, int in16, const float *W, int N, int IC, int OC) {
    return gelu_bwd_set(ops, s, dinp, 0, dW, dbias, dout, 0, gelu_inp, dtmp, inp, in16, W, N, IC,
                        OC);
}

int zs_linear_dinp16_ok(const zs_ops *ops, int N, int IC, int OC, int in16, int g16) {
    /* gemm_linear_bwd's fused path: its operands fit the scratch together */
    return ops->gemm_linear_bwd && zs_linear_bwd_cast_elems(N, IC, OC, in16, g16);
}

int zs_linear_bwd16_ok(const zs_ops *ops, int N, int IC, int OC, int in16) {
    /* the c_proj's backward (IC -> OC) and the fc's (OC -> IC), each with an fp32-sized
     * gradient in the scratch (its dout, or the GELU's gradient) */
    return zs_linear_dinp16_ok(ops, N, IC, OC, in16, 0) &&
           zs_linear_dinp16_ok(ops, N, OC, IC, in16, 0);
}

zs_status zs_linear_bwd_set16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *dinp, float *dW,
                              float *dbias, const float *dout, const void *inp, int in16,
                              const float *W, int N, int IC, int OC) {
    return linear_bwd(ops, s, dinp, 1, dW, dbias, dout, 0, NULL, 0, NULL, inp, in16, W, N, IC, OC,
                      0.0f);
}

zs_status zs_linear_gelu_bwd_set16(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16,
                                   float *dW, float *dbias, const zs_bf16 *dout,
                                   const void *gelu_inp, float *dtmp, const void *inp, int in16,
                                   const float *W, int N, int IC, int OC) {
    return gelu_bwd_set(ops, s, dinp, dinp16, dW, dbias, dout, 1, gelu_inp, dtmp, inp, in16, W, N,
                        IC, OC);
}

int zs_linear_dgelu_ok(const zs_ops *ops, int N, int IC, int OC, int in16) {
    return ops->gemm_linear_bwd_dgelu && zs_linear_dinp16_ok(ops, N, IC, OC, in16, 0);
}

zs_status zs_linear_bwd_dgelu16(const zs_ops *ops, zs_stream_t *s, zs_bf16 *dinp, float *dinp_dbias,
                                const zs_bf16 *gelu_pre, float *dW, float *dbias, const void *dout,
                                int dout16, const void *inp, int in16, const float *W, int N,
                                int IC, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(zs_linear_dgelu_ok(ops, N, IC, OC, in16), ZS_ERR_INVALID,
               "linear_bwd_dgelu16: the %s table takes no GELU's gradient in a GEMM at N=%d "
               "IC=%d OC=%d",
               ops->name, N, IC, OC);
    ZS_REQUIRE(dinp && dinp_dbias && gelu_pre && dW && dout && inp && W, ZS_ERR_INVALID,
               "linear_bwd_dgelu16: NULL buffer");
    return ops->gemm_linear_bwd_dgelu(s, dinp, dinp_dbias, gelu_pre, dW, dbias, dout, dout16, inp,
                                      in16, W, N, IC, OC);
fail:
    return st;
}

zs_status zs_linear_bwd_g16(const zs_ops *ops, zs_stream_t *s, void *dinp, int dinp16, float *dW,
                            float *dbias, const zs_bf16 *dout, const void *inp, int in16,
                            const float *W, int N, int IC, int OC, int set) {
    return linear_bwd(ops, s, dinp, dinp16, dW, dbias, dout, 1, NULL, 0, NULL, inp, in16, W, N, IC,
                      OC, set ? 0.0f : 1.0f);
}

zs_status zs_linear_bwd16_set(const zs_ops *ops, zs_stream_t *s, float *dinp, float *dW,
                              const zs_bf16 *dout, int ldd, const float *inp, const float *W, int N,
                              int IC, int OC) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(ops->gemm_linear_bwd16, ZS_ERR_INVALID,
               "linear_bwd16: the %s table takes no bf16 output gradient", ops->name);
    ZS_REQUIRE(N >= 0 && IC >= 0 && OC >= 0 && ldd >= (OC > 1 ? OC : 1), ZS_ERR_INVALID,
               "linear_bwd16: bad shape N=%d IC=%d OC=%d ldd=%d", N, IC, OC, ldd);
    return ops->gemm_linear_bwd16(s, dinp, dW, dout, ldd, inp, W, N, IC, OC, 0.0f);
fail:
    return st;
}

zs_status zs_adamw_segs_check(const zs_adamw_segs *segs, int t) {
    if (t < 1) return zs_error(ZS_ERR_INVALID, "adamw: step t must be >= 1 (got %d)", t);
    if (!segs || segs->n < 0 || segs->n > ZS_ADAMW_SEGS)
        return zs_error(ZS_ERR_INVALID, "adamw_segs: %d segments (at most %d)", segs ? segs->n : -1,
                        ZS_ADAMW_SEGS);
    for (int k = 0; k < segs->n; k++)
        if (segs->lo[k] < (k ? segs->hi[k - 1] : 0) || segs->hi[k] < segs->lo[k])
            return zs_error(ZS_ERR_INVALID,
                            "adamw_segs: segment %d [%lld, %lld) is out of order or overlaps", k,
                            (long long)segs->lo[k], (long long)segs->hi[k]);
    return ZS_OK;
}

zs_status zs_gemm_check(int transa, int transb, int m, int n, int k, const float *A, int lda,
                        const float *B, int ldb, const float *C, int ldc) {
    zs_status st = ZS_OK;
    ZS_REQUIRE((transa == 0 || transa == 1) && (transb == 0 || transb == 1), ZS_ERR_INVALID,
               "gemm: trans flags must be 0 or 1 (got %d, %d)", transa, transb);
    ZS_REQUIRE(m >= 0 && n >= 0 && k >= 0, ZS_ERR_INVALID, "gemm: negative size m=%d n=%d k=%d", m,
               n, k);
    /* Column-major: op(A) is m x k, so A itself has (transa ? k : m) rows; same for B. */
    int arows = transa ? k : m, brows = transb ? n : k;
    ZS_REQUIRE(lda >= (arows > 1 ? arows : 1) && ldb >= (brows > 1 ? brows : 1) &&
                   ldc >= (m > 1 ? m : 1),
               ZS_ERR_INVALID,
               "gemm: leading dimension too small (lda=%d ldb=%d ldc=%d for "
               "m=%d n=%d k=%d transa=%d transb=%d)",
               lda, ldb, ldc, m, n, k, transa, transb);
    ZS_REQUIRE(m == 0 || n == 0 || (C && ((A && B) || k == 0)), ZS_ERR_INVALID,
               "gemm: NULL operand");
fail:
    return st;
}

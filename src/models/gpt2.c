/* GPT-2: parameter layout as units (embeddings, one unit per block, final norm; the output
 * head is tied to the token embedding, or with tie_embeddings off its own lm_head.weight in
 * the final unit) and forward/backward over the zs_ops table. Each unit
 * is acquired through the shard engine right before it is used, so the same code serves
 * every stage. */
#include "models/arch.h"
#include "models/carve.h"

#include "core/alloc.h"
#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor order inside a block unit; the layout declares them in exactly this order. */
enum {
    B_LN1W,
    B_LN1B,
    B_QKVW,
    B_QKVB,
    B_PROJW,
    B_PROJB,
    B_LN2W,
    B_LN2B,
    B_FCW,
    B_FCB,
    B_FCPW,
    B_FCPB,
    B_NT
};

/* Activations saved for backward inside a block, per layer, for one micro-batch. The block's
 * input and output (res3) are the residual stream, kept by stack.c; block_forward recomputes
 * everything here from the input. With --recompute block every layer's record points at one
 * shared set of these buffers. */
typedef struct layer_acts {
    void *ln1;                        /* [BT,C], bf16 where act16 (carve.h zs_carve_in) */
    float *ln1_mean, *ln1_rstd;       /* [BT], [BT] */
    void *qkv;                        /* [BT,3C], bf16 where atty is (qkv_fwd16) */
    void *atty;                       /* [BT,C], bf16 where zs_attn_out16 (carve.h) */
    float *att;                       /* naive attention: [B,NH,T,T] probabilities */
    float *lse;                       /* flash attention: [B,NH,T] row log-sum-exps */
    float *res2;                      /* [BT,C] residual after attention */
    void *ln2;                        /* as ln1 */
    float *ln2_mean, *ln2_rstd;
    void *fch;      /* [BT,4C], the GELU's input, as ln1 */
    void *fch_gelu; /* [BT,4C], as ln1 */
} layer_acts;

/* GPT-2's own state after the shared one (arch.h). */
typedef struct zs_gpt2 {
    zs_model_base b;
    float *lnf_mean, *lnf_rstd;       /* [BT] final layer norm statistics */
    float *dtmp4, *dtmp4b, *dqkv;     /* [BT,4C], [BT,4C], [BT,3C] activation gradients */
} zs_gpt2_t;

_Static_assert(B_NT <= ZS_MAX_BLOCK_TENSORS, "GPT-2 block tensors");

static zs_status gpt2_layout(const zs_model_config *c, int world_size, zs_layout *out) {
    zs_status st = ZS_OK;
    char name[ZS_MAX_NAME];
    int64_t C = c->n_embd, L = c->n_layer;
    float std = 0.02f;
    /* GPT-2 scales the init of projections that write into the residual stream by
     * 1/sqrt(2 L), so the residual's variance does not grow with depth. */
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    zs_layout_init(out);
    ZS_CHECK(zs_model_config_validate(c));

    /* Tied, the token embedding is used twice per pass: input embedding and output head. */
    const int tied = zs_model_tied(c);
    ZS_CHECK(zs_layout_add_unit(out, "embed", tied ? 2 : 1));
    ZS_CHECK(zs_layout_add_tensor(out, "wte.weight", 2, (int64_t[]){c->padded_vocab, C}, 1,
                                  ZS_INIT_NORMAL, std));
    /* Padded vocabulary rows never receive gradient; start them at zero so they stay zero. */
    out->tensors[out->n_tensors - 1].zero_from = (int64_t)c->vocab * C;
    out->tensors[out->n_tensors - 1].twin_read = 1;
    ZS_CHECK(zs_layout_add_tensor(out, "wpe.weight", 2, (int64_t[]){c->max_seq, C}, 1,
                                  ZS_INIT_NORMAL, std));
    out->tensors[out->n_tensors - 1].twin_read = 1;
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "h.%d", l);
        ZS_CHECK(zs_layout_add_unit(out, name, 1));
#define T1(suffix, n0, decay, init, sd)                                                            \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                             \
    ZS_CHECK(zs_layout_add_tensor(out, name, 1, (int64_t[]){n0}, decay, init, sd))
#define T2(suffix, n0, n1, decay, init, sd)                                                        \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                             \
    ZS_CHECK(zs_layout_add_tensor(out, name, 2, (int64_t[]){n0, n1}, decay, init, sd));            \
    out->tensors[out->n_tensors - 1].twin_read = 1
        T1("ln_1.weight", C, 0, ZS_INIT_ONES, 0);
        T1("ln_1.bias", C, 0, ZS_INIT_ZEROS, 0);
        T2("attn.c_attn.weight", 3 * C, C, 1, ZS_INIT_NORMAL, std);
        T1("attn.c_attn.bias", 3 * C, 0, ZS_INIT_ZEROS, 0);
        T2("attn.c_proj.weight", C, C, 1, ZS_INIT_NORMAL, proj_std);
        T1("attn.c_proj.bias", C, 0, ZS_INIT_ZEROS, 0);
        T1("ln_2.weight", C, 0, ZS_INIT_ONES, 0);
        T1("ln_2.bias", C, 0, ZS_INIT_ZEROS, 0);
        T2("mlp.c_fc.weight", 4 * C, C, 1, ZS_INIT_NORMAL, std);
        T1("mlp.c_fc.bias", 4 * C, 0, ZS_INIT_ZEROS, 0);
        T2("mlp.c_proj.weight", C, 4 * C, 1, ZS_INIT_NORMAL, proj_std);
        T1("mlp.c_proj.bias", C, 0, ZS_INIT_ZEROS, 0);
#undef T1
#undef T2
    }
    ZS_CHECK(zs_layout_add_unit(out, "ln_f", 1));
    ZS_CHECK(zs_layout_add_tensor(out, "ln_f.weight", 1, (int64_t[]){C}, 0, ZS_INIT_ONES, 0));
    ZS_CHECK(zs_layout_add_tensor(out, "ln_f.bias", 1, (int64_t[]){C}, 0, ZS_INIT_ZEROS, 0));
    if (!tied) {
        /* Untied, the head rides with the final norm (one gather), under Hugging Face's name. */
        ZS_CHECK(zs_layout_add_tensor(out, "lm_head.weight", 2, (int64_t[]){c->padded_vocab, C}, 1,
                                      ZS_INIT_NORMAL, std));
        out->tensors[out->n_tensors - 1].zero_from = (int64_t)c->vocab * C;
        out->tensors[out->n_tensors - 1].twin_read = 1;
    }
    ZS_CHECK(zs_layout_finalize(out, world_size));
    return ZS_OK;
fail:
    zs_layout_free(out);
    return st;
}

/* One block's activations (not its input or output, the kept stream), carved at *n. Attention
 * keeps [B,NH,T,T] probabilities (naive) or one log-sum-exp per row (flash). */
static void carve_block(const zs_model_config *c, int B, int T, int naive, int act16, float *base,
                        uint64_t *total, void *acts) {
    layer_acts *a = acts;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd;
    uint64_t att = (uint64_t)B * c->n_head * T * (naive ? (uint64_t)T : 1);
    uint64_t n = *total;
    const int o16 = zs_attn_out16(act16, naive, c->n_embd / c->n_head);
    a->ln1 = zs_carve_in(base, &n, BT * C, act16);
    a->ln1_mean = zs_carve(base, &n, BT);
    a->ln1_rstd = zs_carve(base, &n, BT);
    a->qkv = zs_carve_in(base, &n, BT * 3 * C, o16);
    a->atty = zs_carve_in(base, &n, BT * C, o16);
    a->att = naive ? zs_carve(base, &n, att) : NULL;
    a->lse = naive ? NULL : zs_carve(base, &n, att);
    a->res2 = zs_carve(base, &n, BT * C);
    a->ln2 = zs_carve_in(base, &n, BT * C, act16);
    a->ln2_mean = zs_carve(base, &n, BT);
    a->ln2_rstd = zs_carve(base, &n, BT);
    a->fch = zs_carve_in(base, &n, BT * 4 * C, act16);
    a->fch_gelu = zs_carve_in(base, &n, BT * 4 * C, act16);
    *total = n;
}

/* The final norm's statistics after the shared activations. */
static void carve_final(zs_model_base *b, int B, int T, float *base, uint64_t *n) {
    zs_gpt2_t *m = (zs_gpt2_t *)b;
    m->lnf_mean = zs_carve(base, n, (uint64_t)B * T);
    m->lnf_rstd = zs_carve(base, n, (uint64_t)B * T);
}

/* The MLP's and attention input's gradients after the shared workspace. */
static void carve_scratch(zs_model_base *b, int B, int T, float *base, uint64_t *n) {
    zs_gpt2_t *m = (zs_gpt2_t *)b;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)b->cfg.n_embd;
    m->dtmp4 = zs_carve(base, n, BT * 4 * C);
    m->dtmp4b = zs_carve(base, n, BT * 4 * C);
    m->dqkv = zs_carve(base, n, BT * 3 * C);
}

/* A block's layer norm of x into out, fp32 or (act16) bf16: the input of the next linear. */
static zs_status layernorm(const zs_model_base *b, void *out, float *mean, float *rstd,
                           const float *x, const float *w, const float *bias, int BT) {
    if (b->act16)
        return b->ops->layernorm_fwd16(b->s, out, mean, rstd, x, w, bias, BT, b->cfg.n_embd);
    return b->ops->layernorm_fwd(b->s, out, mean, rstd, x, w, bias, BT, b->cfg.n_embd);
}

/* Whether the table's attention reads GPT-2's bf16 q | k | v as they are (ops.h
 * flash_attention_fwd16q), rather than widened into fp32 scratch. */
static int qkv16_reads(const zs_ops *o, int hs) {
    return o->flash_qkv16_hs && o->flash_qkv16_hs(hs) && o->flash_attention_bwd16g;
}

/* c_attn and the attention with a bf16 attention output (zs_attn_out16): q | k | v are kept in
 * bf16 too, as autocast's bf16 linear returns them, each fp32 sum with its bias rounded once
 * (zs_linear_fwd16, dqkv its fp32 scratch: a backward buffer, free in a forward). The attention
 * reads them as they are where the table can (qkv16_reads), else widened into dqkv: the same
 * values either way. */
static zs_status qkv_fwd16(zs_model_base *b, layer_acts *a, const float *p, int B, int T) {
    zs_status st = ZS_OK;
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    float *wide = ((zs_gpt2_t *)b)->dqkv;
    const int C = b->cfg.n_embd, NH = b->cfg.n_head, BT = B * T;
    zs_bf16 *q16 = a->qkv;
    ZS_CHECK(zs_linear_fwd16(o, s, q16, wide, a->ln1, b->act16, p + b->toff[B_QKVW],
                             p + b->toff[B_QKVB], BT, C, 3 * C));
    if (qkv16_reads(o, C / NH))
        return o->flash_attention_fwd16q(s, a->atty, a->lse, q16, q16 + C, q16 + 2 * C, B, T, NH,
                                         NH, C / NH, 3 * C, 3 * C, b->seg);
    ZS_CHECK(o->cast(s, wide, ZS_DTYPE_F32, q16, ZS_DTYPE_BF16, (size_t)BT * 3 * C));
    return o->flash_attention_fwd16(s, a->atty, a->lse, wide, wide + C, wide + 2 * C, B, T, NH, NH,
                                    C / NH, 3 * C, 3 * C, b->seg);
fail:
    return st;
}

/* One block's forward from its input x and full parameters p, writing every activation its
 * backward reads into layer l's record and its output (res3) into out. It reads nothing that
 * backward changes (b->dC is only a temporary), so backward re-runs it to recompute a block. */
static zs_status block_forward(void *model, const float *p, const float *x, int l, float *out,
                               int B, int T) {
    zs_status st = ZS_OK;
    zs_model_base *b = model;
    layer_acts *a = zs_model_layer(b, sizeof *a, l);
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const int C = b->cfg.n_embd, NH = b->cfg.n_head, BT = B * T;
    const int64_t *t = b->toff;
    const int h = b->act16; /* GEMM-only inputs in bf16 */
    const int o16 = zs_attn_out16(h, b->naive, C / NH);
    ZS_CHECK(layernorm(b, a->ln1, a->ln1_mean, a->ln1_rstd, x, p + t[B_LN1W], p + t[B_LN1B], BT));
    if (o16) {
        ZS_CHECK(qkv_fwd16(b, a, p, B, T));
    } else {
        float *qkv = a->qkv; /* fp32 where the attention's output is */
        ZS_CHECK(zs_linear_fwd(o, s, qkv, a->ln1, h, p + t[B_QKVW], p + t[B_QKVB], BT, C, 3 * C));
        if (b->naive)
            ZS_CHECK(o->attention_fwd(s, a->atty, a->att, qkv, B, T, C, NH, b->seg));
        else /* q | k | v packed in each row of qkv: strided views, kv heads = heads */
            ZS_CHECK(o->flash_attention_fwd(s, a->atty, a->lse, qkv, qkv + C, qkv + 2 * C, B, T, NH,
                                            NH, C / NH, 3 * C, 3 * C, b->seg));
    }
    ZS_CHECK(zs_linear_residual_fwd(o, s, a->res2, NULL, x, b->dC, a->atty, o16, p + t[B_PROJW],
                                    p + t[B_PROJB], BT, C, C));
    ZS_CHECK(
        layernorm(b, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p + t[B_LN2W], p + t[B_LN2B], BT));
    /* (dtmp4 is the backward's scratch, free while a block runs forward) */
    ZS_CHECK(zs_linear_gelu_fwd(o, s, a->fch, a->fch_gelu, ((zs_gpt2_t *)model)->dtmp4, a->ln2, h,
                                p + t[B_FCW], p + t[B_FCB], BT, C, 4 * C));
    ZS_CHECK(zs_linear_residual_fwd(o, s, out, zs_resid_rec(&b->resid, l + 1), a->res2, b->dC,
                                    a->fch_gelu, h, p + t[B_FCPW], p + t[B_FCPB], BT, 4 * C, C));
fail:
    return st;
}

/* A layer norm's backward from dout (bf16 where dout16) into b->dres, its input x, or the
 * kept bf16 record x16 where that is non-NULL: layernorm_bwd16 where either is bf16 or dres16
 * (dres's bf16 copy, res16) is non-NULL (a table that has it), else layernorm_bwd. */
static zs_status ln_bwd(zs_model_base *b, zs_bf16 *dres16, float *dw, float *db, const void *dout,
                        int dout16, const float *x, const zs_bf16 *x16, const float *w,
                        const float *mean, const float *rstd, int BT) {
    const int C = b->cfg.n_embd;
    if (dout16 || x16 || dres16)
        return b->ops->layernorm_bwd16(b->s, b->dres, dres16, dw, db, dout, dout16,
                                       x16 ? (const void *)x16 : x, x16 != NULL, w, mean, rstd, BT,
                                       C);
    return b->ops->layernorm_bwd(b->s, b->dres, dw, db, dout, x, w, mean, rstd, BT, C);
}

/* The residual gradient's bf16 copy, or NULL: with bf16 activations, where the table can take
 * both projections that read dres as their output gradient with a bf16 G as it is (c_proj
 * through the DGELU GEMM, the attention's projection writing a bf16 dO), the norms' backward
 * that write dres (ln1's of the next block, ln_f's, ln2's) also store it rounded
 * (layernorm_bwd16's dinp16), into dtmp4b, which that path leaves free. The projections' G was
 * dres rounded by their bias pass, which summed the bias gradients from the fp32 dres; from
 * the copy the GEMMs read the same bits and the bias gradients are G's sums (cuBLASLt's BGRADB),
 * as autocast's bf16 projections sum theirs (docs/models.md "Activations"). */
static zs_bf16 *res16(const zs_model_base *b, int BT) {
    const zs_ops *o = b->ops;
    const int C = b->cfg.n_embd, NH = b->cfg.n_head, h = b->act16;
    const int o16 = zs_attn_out16(h, b->naive, C / NH);
    if (!h || !o->layernorm_bwd16 || !o16 || !qkv16_reads(o, C / NH) ||
        !zs_linear_bwd16_ok(o, BT, 4 * C, C, h) || !zs_linear_dgelu_ok(o, BT, 4 * C, C, h) ||
        !zs_linear_dinp16_ok(o, BT, C, C, o16, 1))
        return NULL;
    return (zs_bf16 *)((const zs_gpt2_t *)b)->dtmp4b;
}

/* One block's backward: b->dres holds d loss / d res3 on entry and d loss / d x on exit;
 * parameter gradients accumulate into g. With bf16 activations the gradient each layer norm
 * receives (c_attn's and fc's input gradient, b->dC) is rounded to bf16 once, as autocast's
 * bf16 linear returns it: written bf16 by the GEMM and read as it is where the table can
 * (zs_linear_dinp16_ok, layernorm_bwd16), else rounded in place by round16. */
static zs_status block_backward(void *model, const float *p, float *g, const float *x,
                                const zs_bf16 *x16, int l, int B, int T) {
    zs_status st = ZS_OK;
    zs_model_base *b = model;
    zs_gpt2_t *m = model;
    const layer_acts *a = zs_model_layer(b, sizeof *a, l);
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const int C = b->cfg.n_embd, NH = b->cfg.n_head, BT = B * T;
    const size_t nC = (size_t)BT * C;
    const int64_t *t = b->toff;
    const int h = b->act16; /* GEMM-only inputs in bf16 */
    const int o16 = zs_attn_out16(h, b->naive, C / NH);
    const int ln16 = h && o->layernorm_bwd16; /* the norms read a bf16 dC where it is written */
    zs_bf16 *r16 = res16(b, BT);              /* dres's bf16 copy, or NULL */
    const void *dres = r16 ? (const void *)r16 : b->dres;
    int dc16 = 0; /* b->dC holds bf16 */
    /* res3 = res2 + fc_proj(gelu(fch)): dres flows unchanged into res2 and into the MLP; then
     * fch_gelu = gelu(fch), fch = fc(ln2): GELU's backward in the fc layer's (fused on a GPU).
     * With bf16 activations the gradient between them is rounded to bf16 once, as autocast
     * stores it: the GEMM writes it so where the table can (ops.h zs_linear_bwd16_ok). */
    if (h && zs_linear_bwd16_ok(o, BT, 4 * C, C, h) && zs_linear_dgelu_ok(o, BT, 4 * C, C, h)) {
        /* the GELU's backward and fc's bias gradient in c_proj's input-gradient GEMM (ops.h
         * gemm_linear_bwd_dgelu): d16 is fc's output gradient, read as it is */
        zs_bf16 *d16 = (zs_bf16 *)m->dtmp4;
        ZS_CHECK(zs_linear_bwd_dgelu16(o, s, d16, g + t[B_FCB], a->fch, g + t[B_FCPW],
                                       g + t[B_FCPB], dres, r16 != NULL, a->fch_gelu, h,
                                       p + t[B_FCPW], BT, 4 * C, C));
        dc16 = ln16 && zs_linear_dinp16_ok(o, BT, C, 4 * C, h, 1);
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, dc16, g + t[B_FCW], NULL, d16, a->ln2, h,
                                   p + t[B_FCW], BT, C, 4 * C, 1));
    } else if (h && zs_linear_bwd16_ok(o, BT, 4 * C, C, h)) {
        zs_bf16 *d16 = (zs_bf16 *)m->dtmp4;
        ZS_CHECK(zs_linear_bwd_set16(o, s, d16, g + t[B_FCPW], g + t[B_FCPB], b->dres, a->fch_gelu,
                                     h, p + t[B_FCPW], BT, 4 * C, C));
        dc16 = ln16;
        ZS_CHECK(zs_linear_gelu_bwd_set16(o, s, b->dC, dc16, g + t[B_FCW], g + t[B_FCB], d16,
                                          a->fch, m->dtmp4b, a->ln2, h, p + t[B_FCW], BT, C,
                                          4 * C));
    } else {
        ZS_CHECK(zs_linear_bwd_set(o, s, m->dtmp4, g + t[B_FCPW], g + t[B_FCPB], b->dres,
                                   a->fch_gelu, h, p + t[B_FCPW], BT, 4 * C, C));
        if (h) ZS_CHECK(o->round16(s, m->dtmp4, 4 * nC));
        ZS_CHECK(zs_linear_gelu_bwd_set(o, s, b->dC, g + t[B_FCW], g + t[B_FCB], m->dtmp4, a->fch,
                                        m->dtmp4b, a->ln2, h, p + t[B_FCW], BT, C, 4 * C));
    }
    if (h && !dc16) ZS_CHECK(o->round16(s, b->dC, nC));
    ZS_CHECK(ln_bwd(b, r16, g + t[B_LN2W], g + t[B_LN2B], b->dC, dc16, a->res2, NULL, p + t[B_LN2W],
                    a->ln2_mean, a->ln2_rstd, BT));
    /* With a bf16 out (bf16 activations) q | k | v are bf16 (qkv_fwd16), read as they are
     * where the table can, else widened into dtmp4 (free once the MLP's backward is done);
     * attention's input gradient dqkv is rounded to bf16 once, as autocast stores it: written
     * so where the table can (ops.h flash_attention_bwd16g) and read as it is by c_attn's
     * backward, else rounded in place. Where it reads bf16 q, k, v its output gradient dO is
     * bf16 too, as autocast's projection backward returns it: c_proj's GEMM rounds its sums
     * once into dC (flash_attention_bwd16q reads it so), where the table can write it so. */
    const float *qkv = a->qkv; /* fp32: o16 0, or widened */
    const int reads16 =
        o16 && qkv16_reads(o, C / NH) && (r16 || zs_linear_dinp16_ok(o, BT, C, C, o16, 0));
    /* res2 = x + attn_proj(atty). */
    if (r16)
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, 1, g + t[B_PROJW], g + t[B_PROJB], r16, a->atty,
                                   o16, p + t[B_PROJW], BT, C, C, 1));
    else if (reads16)
        ZS_CHECK(zs_linear_bwd_set16(o, s, (zs_bf16 *)b->dC, g + t[B_PROJW], g + t[B_PROJB],
                                     b->dres, a->atty, o16, p + t[B_PROJW], BT, C, C));
    else
        ZS_CHECK(zs_linear_bwd_set(o, s, b->dC, g + t[B_PROJW], g + t[B_PROJB], b->dres, a->atty,
                                   o16, p + t[B_PROJW], BT, C, C));
    if (o16 && !reads16) {
        ZS_CHECK(o->cast(s, m->dtmp4, ZS_DTYPE_F32, a->qkv, ZS_DTYPE_BF16, 3 * nC));
        qkv = m->dtmp4;
    }
    if (o16 && o->flash_attention_bwd16g) {
        zs_bf16 *d16 = (zs_bf16 *)m->dqkv;
        const zs_bf16 *q16 = a->qkv;
        if (reads16)
            ZS_CHECK(o->flash_attention_bwd16q(
                s, d16, d16 + C, d16 + 2 * C, b->datt, (const zs_bf16 *)b->dC, q16, q16 + C,
                q16 + 2 * C, a->atty, a->lse, B, T, NH, NH, C / NH, 3 * C, 3 * C, b->seg));
        else
            ZS_CHECK(o->flash_attention_bwd16g(s, d16, d16 + C, d16 + 2 * C, b->datt, b->dC, qkv,
                                               qkv + C, qkv + 2 * C, a->atty, a->lse, B, T, NH, NH,
                                               C / NH, 3 * C, 3 * C, b->seg));
        dc16 = ln16 && zs_linear_dinp16_ok(o, BT, C, 3 * C, h, 1);
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, dc16, g + t[B_QKVW], g + t[B_QKVB], d16, a->ln1, h,
                                   p + t[B_QKVW], BT, C, 3 * C, 1));
    } else {
        dc16 = 0;
        if (b->naive) { /* it accumulates; the flash backward overwrites */
            ZS_CHECK(o->fill(s, m->dqkv, 0.0f, 3 * nC));
            ZS_CHECK(
                o->attention_bwd(s, m->dqkv, b->datt, b->dC, qkv, a->att, B, T, C, NH, b->seg));
        } else if (o16) {
            ZS_CHECK(o->flash_attention_bwd16(s, m->dqkv, m->dqkv + C, m->dqkv + 2 * C, b->datt,
                                              b->dC, qkv, qkv + C, qkv + 2 * C, a->atty, a->lse, B,
                                              T, NH, NH, C / NH, 3 * C, 3 * C, b->seg));
            ZS_CHECK(o->round16(s, m->dqkv, 3 * nC));
        } else {
            ZS_CHECK(o->flash_attention_bwd(s, m->dqkv, m->dqkv + C, m->dqkv + 2 * C, b->datt,
                                            b->dC, qkv, qkv + C, qkv + 2 * C, a->atty, a->lse, B, T,
                                            NH, NH, C / NH, 3 * C, 3 * C, b->seg));
        }
        ZS_CHECK(zs_linear_bwd_set(o, s, b->dC, g + t[B_QKVW], g + t[B_QKVB], m->dqkv, a->ln1, h,
                                   p + t[B_QKVW], BT, C, 3 * C));
    }
    if (h && !dc16) ZS_CHECK(o->round16(s, b->dC, nC));
    /* x16: the kept input as it is stored (stack.h zs_resid_load_for) */
    ZS_CHECK(ln_bwd(b, l > 0 ? r16 : NULL, g + t[B_LN1W], g + t[B_LN1B], b->dC, dc16, x, x16,
                    p + t[B_LN1W], a->ln1_mean, a->ln1_rstd, BT));
fail:
    return st;
}

/* The final layer norm into b->lnf, and its backward from b->dC into b->dres (and its bf16
 * copy: res16). */
static zs_status norm_fwd(zs_model_base *b, const float *p, const float *x, int BT) {
    zs_gpt2_t *m = (zs_gpt2_t *)b;
    const int64_t w = b->off_norm[0], bias = b->off_norm[1];
    return b->ops->layernorm_fwd(b->s, b->lnf, m->lnf_mean, m->lnf_rstd, x, p + w, p + bias, BT,
                                 b->cfg.n_embd);
}

static zs_status norm_bwd(zs_model_base *b, const float *p, float *g, const float *x,
                          const zs_bf16 *x16, int BT) {
    zs_gpt2_t *m = (zs_gpt2_t *)b;
    const int64_t w = b->off_norm[0], bias = b->off_norm[1];
    return ln_bwd(b, res16(b, BT), g + w, g + bias, b->dC, 0, x, x16, p + w, m->lnf_mean,
                  m->lnf_rstd, BT);
}

/* The layer norms' backward reads a bf16 kept input where the table can (ops.h
 * layernorm_bwd16). */
static int reads16(const zs_ops *o) {
    return o->layernorm_bwd16 != NULL;
}

/* block_forward's and block_backward's linears: qkv (its gradient bf16 where the attention's
 * output is: flash_attention_bwd16g), the attention projection, fc (its gradient bf16 from
 * c_proj's DGELU GEMM where both layers' operands fit), fc_proj. */
static int gpt2_linears(const zs_model_config *c, int naive, zs_linear_dims *out) {
    const int C = c->n_embd;
    out[0] = (zs_linear_dims){C, 3 * C, 1, 1, 0, zs_attn_out16(1, naive, C / c->n_head)};
    out[1] = (zs_linear_dims){C, C, 1, 0, 0, 0}; /* attention's output: fp32 */
    out[2] = (zs_linear_dims){C, 4 * C, 1, 1, 0, ZS_LINEAR_G16_FIT};
    out[3] = (zs_linear_dims){4 * C, C, 1, 1, 0, 0};
    return 4;
}

const zs_arch_impl zs_gpt2_arch = {
    .arch = ZS_ARCH_GPT2,
    .model_size = sizeof(zs_gpt2_t),
    .layer_size = sizeof(layer_acts),
    .block_tensors = B_NT,
    .norm_tensors = 2,
    .learned_pos = 1,
    .layout = gpt2_layout,
    .block_linears = gpt2_linears,
    .carve_block = carve_block,
    .carve_final = carve_final,
    .carve_scratch = carve_scratch,
    .block_fwd = block_forward,
    .block_bwd = block_backward,
    .norm_fwd = norm_fwd,
    .norm_bwd = norm_bwd,
    .bwd_reads16 = reads16,
};

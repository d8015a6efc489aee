/* LLaMA: parameter layout as units (token embedding; one unit per block; final RMSNorm and
 * output head together, or with tie_embeddings on the head is the embedding itself) and
 * forward/backward over the zs_ops table: RMSNorm, rotary position embedding, grouped-query
 * attention, SwiGLU MLP, no biases. Tensor names and [out, in] shapes are Hugging Face's, so
 * safetensors import/export is a renaming-free copy (docs/models.md). Each unit is acquired through
 * the shard engine right before use. */
#include "models/arch.h"
#include "models/carve.h"

#include "core/alloc.h"
#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor order inside a block unit; the layout declares them in exactly this order. */
enum { L_NORM1, L_Q, L_K, L_V, L_O, L_NORM2, L_GATE, L_UP, L_DOWN, L_NT };

/* Activations saved for backward inside a block, per layer, for one micro-batch. The block's
 * input and output (res3) are the residual stream, kept by stack.c; block_forward recomputes
 * everything here from the input. With --recompute block every layer's record points at one
 * shared set of these buffers. */
typedef struct layer_acts {
    void *ln1;             /* [BT,C], bf16 where act16 (carve.h zs_carve_in) */
    float *ln1_rstd;       /* [BT] */
    float *q, *k, *v;      /* [BT,QD], [BT,KD], [BT,KD]; q and k after RoPE */
    float *att;            /* naive attention: [B,NH,T,T] probabilities */
    float *lse;            /* flash attention: [B,NH,T] row log-sum-exps */
    void *atty;            /* [BT,QD], bf16 where zs_attn_out16 (carve.h) */
    float *res2;           /* [BT,C] residual after attention */
    void *ln2;             /* as ln1 */
    float *ln2_rstd;
    float *gate, *up; /* [BT,F]: pre-activation gate and up */
    void *h;          /* [BT,F] silu(gate) * up, as ln1 */
} layer_acts;

/* LLaMA's own state after the shared one (arch.h). */
typedef struct zs_llama {
    zs_model_base b;
    float *lnf_rstd;                /* [BT] final RMSNorm statistics */
    float *dq, *dk, *dv;            /* [BT,QD], [BT,KD], [BT,KD] */
    float *dh;                      /* [BT,F] */
    void *dgate, *dup;              /* [BT,F], bf16 with act16: read by GEMMs only */
    /* With act16 dgate and dup, free once the gate and up backward is done, then take the
     * rotated q and k gradients in bf16 (rope_bwd16): [BT,QD] and [BT,KD] (carved to fit). */
} zs_llama_t;

_Static_assert(L_NT <= ZS_MAX_BLOCK_TENSORS, "LLaMA block tensors");

int64_t zs_llama_num_params(const zs_model_config *c) {
    int64_t C = c->n_embd, hs = C / c->n_head, QD = hs * c->n_head, KD = hs * c->n_kv_head;
    int64_t F = c->ffn_hidden;
    int64_t block = 2 * C + 2 * QD * C + 2 * KD * C + 3 * F * C;
    int64_t heads = zs_model_tied(c) ? 1 : 2;
    return heads * c->padded_vocab * C + (int64_t)c->n_layer * block + C;
}

static zs_status llama_layout(const zs_model_config *c, int world_size, zs_layout *out) {
    zs_status st = ZS_OK;
    char name[ZS_MAX_NAME];
    int64_t C = c->n_embd, L = c->n_layer, F = c->ffn_hidden, Vp = c->padded_vocab;
    int64_t QD = C, KD = C / c->n_head * c->n_kv_head;
    float std = 0.02f;
    /* As GPT-2: projections that write into the residual stream (o_proj, down_proj) start at
     * 0.02/sqrt(2L), so the residual's variance does not grow with depth. */
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    zs_layout_init(out);
    ZS_CHECK(zs_model_config_validate(c));

    /* Untied, the input embedding is used once per pass (the head is its own tensor); tied,
     * twice (input embedding and output head), as GPT-2's. */
    const int tied = zs_model_tied(c);
    ZS_CHECK(zs_layout_add_unit(out, "embed", tied ? 2 : 1));
    ZS_CHECK(zs_layout_add_tensor(out, "model.embed_tokens.weight", 2, (int64_t[]){Vp, C}, 1,
                                  ZS_INIT_NORMAL, std));
    /* Padded vocabulary rows never receive gradient; start them at zero so they stay zero. */
    out->tensors[out->n_tensors - 1].zero_from = (int64_t)c->vocab * C;
    out->tensors[out->n_tensors - 1].twin_read = 1; /* an embedding table and the tied head */
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d", l);
        ZS_CHECK(zs_layout_add_unit(out, name, 1));
#define T1(suffix)                                                                                 \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                  \
    ZS_CHECK(zs_layout_add_tensor(out, name, 1, (int64_t[]){C}, 0, ZS_INIT_ONES, 0))
#define T2(suffix, n0, n1, sd)                                                                     \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                  \
    ZS_CHECK(zs_layout_add_tensor(out, name, 2, (int64_t[]){n0, n1}, 1, ZS_INIT_NORMAL, sd));      \
    out->tensors[out->n_tensors - 1].twin_read = 1 /* GEMM weights */
        T1("input_layernorm.weight");
        T2("self_attn.q_proj.weight", QD, C, std);
        T2("self_attn.k_proj.weight", KD, C, std);
        T2("self_attn.v_proj.weight", KD, C, std);
        T2("self_attn.o_proj.weight", C, QD, proj_std);
        T1("post_attention_layernorm.weight");
        T2("mlp.gate_proj.weight", F, C, std);
        T2("mlp.up_proj.weight", F, C, std);
        T2("mlp.down_proj.weight", C, F, proj_std);
#undef T1
#undef T2
    }
    /* The final norm rides with the head: it is C floats, and one unit means one gather. */
    ZS_CHECK(zs_layout_add_unit(out, tied ? "norm" : "lm_head", 1));
    ZS_CHECK(zs_layout_add_tensor(out, "model.norm.weight", 1, (int64_t[]){C}, 0, ZS_INIT_ONES, 0));
    if (!tied) {
        ZS_CHECK(zs_layout_add_tensor(out, "lm_head.weight", 2, (int64_t[]){Vp, C}, 1,
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

/* One block's activations (not its input or output, the kept stream), carved at *total.
 * Attention keeps [B,NH,T,T] probabilities (naive) or one log-sum-exp per row (flash). */
static void carve_block(const zs_model_config *c, int B, int T, int naive, int act16, float *base,
                        uint64_t *total, void *acts) {
    layer_acts *a = acts;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, F = (uint64_t)c->ffn_hidden;
    uint64_t KD = C / (uint64_t)c->n_head * (uint64_t)c->n_kv_head;
    uint64_t att = (uint64_t)B * c->n_head * T * (naive ? (uint64_t)T : 1), n = *total;
    a->ln1 = zs_carve_in(base, &n, BT * C, act16);
    a->ln1_rstd = zs_carve(base, &n, BT);
    a->q = zs_carve(base, &n, BT * C);
    a->k = zs_carve(base, &n, BT * KD);
    a->v = zs_carve(base, &n, BT * KD);
    a->att = naive ? zs_carve(base, &n, att) : NULL;
    a->lse = naive ? NULL : zs_carve(base, &n, att);
    a->atty = zs_carve_in(base, &n, BT * C, zs_attn_out16(act16, naive, c->n_embd / c->n_head));
    a->res2 = zs_carve(base, &n, BT * C);
    a->ln2 = zs_carve_in(base, &n, BT * C, act16);
    a->ln2_rstd = zs_carve(base, &n, BT);
    a->gate = zs_carve(base, &n, BT * F);
    a->up = zs_carve(base, &n, BT * F);
    a->h = zs_carve_in(base, &n, BT * F, act16);
    *total = n;
}

/* The final norm's statistics after the shared activations. */
static void carve_final(zs_model_base *b, int B, int T, float *base, uint64_t *n) {
    ((zs_llama_t *)b)->lnf_rstd = zs_carve(base, n, (uint64_t)B * T);
}

/* The projections' and the MLP's gradients after the shared workspace. */
static void carve_scratch(zs_model_base *b, int B, int T, float *base, uint64_t *n) {
    zs_llama_t *m = (zs_llama_t *)b;
    const zs_model_config *c = &b->cfg;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, F = (uint64_t)c->ffn_hidden;
    uint64_t KD = C / (uint64_t)c->n_head * (uint64_t)c->n_kv_head;
    m->dq = zs_carve(base, n, BT * C);
    m->dk = zs_carve(base, n, BT * KD);
    m->dv = zs_carve(base, n, BT * KD);
    m->dh = zs_carve(base, n, BT * F);
    uint64_t gate = b->act16 && C > F ? C : F, up = b->act16 && KD > F ? KD : F;
    m->dgate = zs_carve_in(base, n, BT * gate, b->act16);
    m->dup = zs_carve_in(base, n, BT * up, b->act16);
}

/* A block's RMSNorm of x into out, fp32 or (act16) bf16: the input of the next linears. */
static zs_status rmsnorm(const zs_model_base *b, void *out, float *rstd, const float *x,
                         const float *w, int BT) {
    const zs_model_config *c = &b->cfg;
    if (b->act16) return b->ops->rmsnorm_fwd16(b->s, out, rstd, x, w, BT, c->n_embd, c->norm_eps);
    return b->ops->rmsnorm_fwd(b->s, out, rstd, x, w, BT, c->n_embd, c->norm_eps);
}

/* One block's forward from its input x and full parameters p, writing every activation its
 * backward reads into a. It reads nothing else that backward changes (b->dC is only a
 * temporary here), so backward may re-run it to recompute a block's activations. */
static zs_status block_forward(void *model, const float *p, const float *x, int l, float *out,
                               int B, int T) {
    zs_status st = ZS_OK;
    zs_model_base *b = model;
    layer_acts *a = zs_model_layer(b, sizeof *a, l);
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const zs_model_config *c = &b->cfg;
    const int C = c->n_embd, F = c->ffn_hidden, BT = B * T, hs = C / c->n_head;
    const int QD = hs * c->n_head, KD = hs * c->n_kv_head;
    const int64_t *t = b->toff;
    const int h = b->act16; /* GEMM-only inputs in bf16 */
    const int o16 = zs_attn_out16(h, b->naive, hs);
    ZS_CHECK(rmsnorm(b, a->ln1, a->ln1_rstd, x, p + t[L_NORM1], BT));
    ZS_CHECK(zs_linear_fwd(o, s, a->q, a->ln1, h, p + t[L_Q], NULL, BT, C, QD));
    ZS_CHECK(zs_linear_fwd(o, s, a->k, a->ln1, h, p + t[L_K], NULL, BT, C, KD));
    ZS_CHECK(zs_linear_fwd(o, s, a->v, a->ln1, h, p + t[L_V], NULL, BT, C, KD));
    ZS_CHECK(o->rope_fwd(s, a->q, a->q, B, T, c->n_head, hs, c->rope_theta, b->seg));
    ZS_CHECK(o->rope_fwd(s, a->k, a->k, B, T, c->n_kv_head, hs, c->rope_theta, b->seg));
    if (b->naive)
        ZS_CHECK(o->attention_gqa_fwd(s, a->atty, a->att, a->q, a->k, a->v, B, T, c->n_head,
                                      c->n_kv_head, hs, b->seg));
    else if (o16)
        ZS_CHECK(o->flash_attention_fwd16(s, a->atty, a->lse, a->q, a->k, a->v, B, T, c->n_head,
                                          c->n_kv_head, hs, QD, KD, b->seg));
    else
        ZS_CHECK(o->flash_attention_fwd(s, a->atty, a->lse, a->q, a->k, a->v, B, T, c->n_head,
                                        c->n_kv_head, hs, QD, KD, b->seg));
    ZS_CHECK(zs_linear_residual_fwd(o, s, a->res2, NULL, x, b->dC, a->atty, o16, p + t[L_O], NULL,
                                    BT, QD, C));
    ZS_CHECK(rmsnorm(b, a->ln2, a->ln2_rstd, a->res2, p + t[L_NORM2], BT));
    ZS_CHECK(zs_linear_fwd(o, s, a->gate, a->ln2, h, p + t[L_GATE], NULL, BT, C, F));
    ZS_CHECK(zs_linear_fwd(o, s, a->up, a->ln2, h, p + t[L_UP], NULL, BT, C, F));
    if (h)
        ZS_CHECK(o->swiglu_fwd16(s, a->h, a->gate, a->up, (size_t)BT * F));
    else
        ZS_CHECK(o->swiglu_fwd(s, a->h, a->gate, a->up, (size_t)BT * F));
    ZS_CHECK(zs_linear_residual_fwd(o, s, out, zs_resid_rec(&b->resid, l + 1), a->res2, b->dC, a->h,
                                    h, p + t[L_DOWN], NULL, BT, F, C));
fail:
    return st;
}

/* One block's backward: b->dres holds d loss / d res3 on entry and d loss / d x on exit;
 * parameter gradients accumulate into g. */
static zs_status block_backward(void *model, const float *p, float *g, const float *x,
                                const zs_bf16 *x16, int l, int B, int T) {
    zs_status st = ZS_OK;
    zs_model_base *b = model;
    zs_llama_t *m = model;
    const layer_acts *a = zs_model_layer(b, sizeof *a, l);
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const zs_model_config *c = &b->cfg;
    const int C = c->n_embd, F = c->ffn_hidden, BT = B * T, hs = C / c->n_head;
    const int QD = hs * c->n_head, KD = hs * c->n_kv_head;
    const size_t nF = (size_t)BT * F;
    const int64_t *t = b->toff;
    const int h = b->act16; /* GEMM-only inputs in bf16 */
    const int o16 = zs_attn_out16(h, b->naive, hs);
    /* res3 = res2 + down(silu(gate) * up): dres flows unchanged into res2 and into the MLP. */
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dh, g + t[L_DOWN], NULL, b->dres, a->h, h, p + t[L_DOWN],
                               BT, F, C));
    if (h) { /* the gradients rounded where they are made: the bits the GEMMs would round to */
        ZS_CHECK(o->swiglu_bwd16(s, m->dgate, m->dup, m->dh, a->gate, a->up, nF));
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, 0, g + t[L_GATE], NULL, m->dgate, a->ln2, h,
                                   p + t[L_GATE], BT, C, F, 1));
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, 0, g + t[L_UP], NULL, m->dup, a->ln2, h,
                                   p + t[L_UP], BT, C, F, 0));
    } else {
        ZS_CHECK(o->swiglu_bwd(s, m->dgate, m->dup, m->dh, a->gate, a->up, nF)); /* overwrites */
        ZS_CHECK(zs_linear_bwd_set(o, s, b->dC, g + t[L_GATE], NULL, m->dgate, a->ln2, h,
                                   p + t[L_GATE], BT, C, F));
        ZS_CHECK(zs_linear_bwd(o, s, b->dC, g + t[L_UP], NULL, m->dup, a->ln2, h, p + t[L_UP], BT,
                               C, F));
    }
    ZS_CHECK(o->rmsnorm_bwd(s, b->dres, g + t[L_NORM2], b->dC, a->res2, p + t[L_NORM2], a->ln2_rstd,
                            BT, C));
    /* res2 = x + o_proj(atty). */
    ZS_CHECK(zs_linear_bwd_set(o, s, b->dC, g + t[L_O], NULL, b->dres, a->atty, o16, p + t[L_O], BT,
                               QD, C));
    if (b->naive) { /* it accumulates; the flash backward overwrites */
        ZS_CHECK(o->fill(s, m->dq, 0.0f, (size_t)BT * QD));
        ZS_CHECK(o->fill(s, m->dk, 0.0f, (size_t)BT * KD));
        ZS_CHECK(o->fill(s, m->dv, 0.0f, (size_t)BT * KD));
        ZS_CHECK(o->attention_gqa_bwd(s, m->dq, m->dk, m->dv, b->datt, b->dC, a->q, a->k, a->v,
                                      a->att, B, T, c->n_head, c->n_kv_head, hs, b->seg));
    } else if (o16) {
        ZS_CHECK(o->flash_attention_bwd16(s, m->dq, m->dk, m->dv, b->datt, b->dC, a->q, a->k, a->v,
                                          a->atty, a->lse, B, T, c->n_head, c->n_kv_head, hs, QD,
                                          KD, b->seg));
    } else {
        ZS_CHECK(o->flash_attention_bwd(s, m->dq, m->dk, m->dv, b->datt, b->dC, a->q, a->k, a->v,
                                        a->atty, a->lse, B, T, c->n_head, c->n_kv_head, hs, QD,
                                        KD, b->seg));
    }
    /* The saved q and k are post-RoPE; their gradients go back through the inverse rotation
     * to the projections' outputs (with act16 rounded there, into dgate's and dup's room). */
    if (h) {
        zs_bf16 *dq16 = m->dgate, *dk16 = m->dup;
        ZS_CHECK(o->rope_bwd16(s, dq16, m->dq, B, T, c->n_head, hs, c->rope_theta, b->seg));
        ZS_CHECK(o->rope_bwd16(s, dk16, m->dk, B, T, c->n_kv_head, hs, c->rope_theta, b->seg));
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, 0, g + t[L_Q], NULL, dq16, a->ln1, h, p + t[L_Q],
                                   BT, C, QD, 1));
        ZS_CHECK(zs_linear_bwd_g16(o, s, b->dC, 0, g + t[L_K], NULL, dk16, a->ln1, h, p + t[L_K],
                                   BT, C, KD, 0));
    } else {
        ZS_CHECK(o->rope_bwd(s, m->dq, m->dq, B, T, c->n_head, hs, c->rope_theta, b->seg));
        ZS_CHECK(o->rope_bwd(s, m->dk, m->dk, B, T, c->n_kv_head, hs, c->rope_theta, b->seg));
        ZS_CHECK(zs_linear_bwd_set(o, s, b->dC, g + t[L_Q], NULL, m->dq, a->ln1, h, p + t[L_Q], BT,
                                   C, QD));
        ZS_CHECK(
            zs_linear_bwd(o, s, b->dC, g + t[L_K], NULL, m->dk, a->ln1, h, p + t[L_K], BT, C, KD));
    }
    ZS_CHECK(zs_linear_bwd(o, s, b->dC, g + t[L_V], NULL, m->dv, a->ln1, h, p + t[L_V], BT, C, KD));
    if (x16) /* the kept input as it is stored (stack.h zs_resid_load_for) */
        ZS_CHECK(o->rmsnorm_bwd16(s, b->dres, g + t[L_NORM1], b->dC, 0, x16, 1, p + t[L_NORM1],
                                  a->ln1_rstd, BT, C));
    else
        ZS_CHECK(o->rmsnorm_bwd(s, b->dres, g + t[L_NORM1], b->dC, x, p + t[L_NORM1], a->ln1_rstd,
                                BT, C));
fail:
    return st;
}

/* The final RMSNorm into b->lnf, and its backward from b->dC into b->dres. */
static zs_status norm_fwd(zs_model_base *b, const float *p, const float *x, int BT) {
    return b->ops->rmsnorm_fwd(b->s, b->lnf, ((zs_llama_t *)b)->lnf_rstd, x, p + b->off_norm[0], BT,
                               b->cfg.n_embd, b->cfg.norm_eps);
}

static zs_status norm_bwd(zs_model_base *b, const float *p, float *g, const float *x,
                          const zs_bf16 *x16, int BT) {
    if (x16)
        return b->ops->rmsnorm_bwd16(b->s, b->dres, g + b->off_norm[0], b->dC, 0, x16, 1,
                                     p + b->off_norm[0], ((zs_llama_t *)b)->lnf_rstd, BT,
                                     b->cfg.n_embd);
    return b->ops->rmsnorm_bwd(b->s, b->dres, g + b->off_norm[0], b->dC, x, p + b->off_norm[0],
                               ((zs_llama_t *)b)->lnf_rstd, BT, b->cfg.n_embd);
}

/* block_forward's and block_backward's linears: q, k, v, o; gate, up, down. */
static int llama_linears(const zs_model_config *c, int naive, zs_linear_dims *out) {
    (void)naive; /* v's gradient is the attention's fp32 dv either way */
    const int C = c->n_embd, F = c->ffn_hidden, hs = C / c->n_head;
    const int QD = hs * c->n_head, KD = hs * c->n_kv_head;
    out[0] = (zs_linear_dims){C, QD, 1, 1, 0, 1}; /* q and k: rope_bwd16's gradients */
    out[1] = (zs_linear_dims){C, KD, 1, 1, 0, 1};
    out[2] = (zs_linear_dims){C, KD, 1, 1, 0, 0}; /* v: the attention's fp32 dv */
    out[3] = (zs_linear_dims){QD, C, 1, 0, 0, 0}; /* attention's output: fp32 */
    out[4] = (zs_linear_dims){C, F, 2, 1, 0, 1};  /* gate and up: swiglu_bwd16's gradients */
    out[5] = (zs_linear_dims){F, C, 1, 1, 0, 0};
    return 6;
}

/* The RMSNorms' backward reads a bf16 kept input where the table can (ops.h rmsnorm_bwd16). */
static int reads16(const zs_ops *o) {
    return o->rmsnorm_bwd16 != NULL;
}

const zs_arch_impl zs_llama_arch = {
    .arch = ZS_ARCH_LLAMA,
    .model_size = sizeof(zs_llama_t),
    .layer_size = sizeof(layer_acts),
    .block_tensors = L_NT,
    .norm_tensors = 1,
    .learned_pos = 0,
    .layout = llama_layout,
    .block_linears = llama_linears,
    .carve_block = carve_block,
    .carve_final = carve_final,
    .carve_scratch = carve_scratch,
    .block_fwd = block_forward,
    .block_bwd = block_backward,
    .norm_fwd = norm_fwd,
    .norm_bwd = norm_bwd,
    .bwd_reads16 = reads16,
};

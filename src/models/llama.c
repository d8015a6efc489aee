/* LLaMA: parameter layout as units (token embedding; one unit per block; final RMSNorm and
 * output head together, or with tie_embeddings on the head is the embedding itself) and
 * forward/backward over the zs_ops table: RMSNorm, rotary position embedding, grouped-query
 * attention, SwiGLU MLP, no biases. Tensor names and [out, in] shapes are Hugging Face's, so
 * safetensors import/export is a renaming-free copy (docs/models.md). Each unit is acquired through
 * the shard engine right before use. */
#include "models/llama.h"
#include "models/carve.h"
#include "models/stack.h"

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
    float *ln1, *ln1_rstd; /* [BT,C], [BT] */
    float *q, *k, *v;      /* [BT,QD], [BT,KD], [BT,KD]; q and k after RoPE */
    float *att;            /* naive attention: [B,NH,T,T] probabilities */
    float *lse;            /* flash attention: [B,NH,T] row log-sum-exps */
    float *atty;           /* [BT,QD] */
    float *res2;           /* [BT,C] residual after attention */
    float *ln2, *ln2_rstd;
    float *gate, *up, *h; /* [BT,F]: pre-activation gate and up, h = silu(gate) * up */
} layer_acts;

struct zs_llama {
    zs_model_config cfg;
    const zs_ops *ops;
    zs_stream_t *s;
    zs_module_t *engine;
    int recompute;      /* ZS_RECOMPUTE_BLOCK: recompute each block inside its backward */
    int naive;          /* ZS_ATTENTION_NAIVE: keep T x T probabilities (else flash) */
    int hs, QD, KD;     /* head size, query width NH*hs, key/value width NKV*hs */
    int64_t toff[L_NT]; /* element offsets of block tensors within a block unit */
    int tied;           /* head = embed_tokens (embed unit, acquired twice), else lm_head.weight */
    int64_t off_embed, off_norm, off_head;
    float *arena;   /* one activation allocation, carved into the fields below */
    zs_resid resid; /* the kept block inputs: embedding output, then each block's output */
    layer_acts *layers;
    float *lnf, *lnf_rstd;
    float *losses;  /* [BT] */
    float *scratch; /* workspace: logits and activation gradients, reused per layer */
    float *logits;  /* [BT,Vp]; backward overwrites it with dlogits in place */
    float *dres, *dC, *dq, *dk, *dv, *dh, *dgate, *dup;
    float *datt;        /* naive: [B,NH,T,T] probability gradients; flash: [B,NH,T] delta rows */
    const int32_t *seg; /* this pass's document starts (device memory), or NULL */
};

static int unit_block(int l) {
    return 1 + l;
}

static int unit_head(const zs_model_config *c) {
    return c->n_layer + 1;
}

int64_t zs_llama_num_params(const zs_model_config *c) {
    int64_t C = c->n_embd, hs = C / c->n_head, QD = hs * c->n_head, KD = hs * c->n_kv_head;
    int64_t F = c->ffn_hidden;
    int64_t block = 2 * C + 2 * QD * C + 2 * KD * C + 3 * F * C;
    int64_t heads = zs_model_tied(c) ? 1 : 2;
    return heads * c->padded_vocab * C + (int64_t)c->n_layer * block + C;
}

zs_status zs_llama_layout(const zs_model_config *c, int world_size, zs_layout *out) {
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
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d", l);
        ZS_CHECK(zs_layout_add_unit(out, name, 1));
#define T1(suffix)                                                                                 \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                  \
    ZS_CHECK(zs_layout_add_tensor(out, name, 1, (int64_t[]){C}, 0, ZS_INIT_ONES, 0))
#define T2(suffix, n0, n1, sd)                                                                     \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                  \
    ZS_CHECK(zs_layout_add_tensor(out, name, 2, (int64_t[]){n0, n1}, 1, ZS_INIT_NORMAL, sd))
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
    }
    ZS_CHECK(zs_layout_finalize(out, world_size));
    return ZS_OK;
fail:
    zs_layout_free(out);
    return st;
}

/* One block's activations (not its input or output, the kept stream), carved at *total.
 * Attention keeps [B,NH,T,T] probabilities (naive) or one log-sum-exp per row (flash). */
static void carve_block(const zs_model_config *c, int B, int T, int naive, float *base,
                        uint64_t *total, layer_acts *a) {
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, F = (uint64_t)c->ffn_hidden;
    uint64_t KD = C / (uint64_t)c->n_head * (uint64_t)c->n_kv_head;
    uint64_t att = (uint64_t)B * c->n_head * T * (naive ? (uint64_t)T : 1), n = *total;
    a->ln1 = zs_carve(base, &n, BT * C);
    a->ln1_rstd = zs_carve(base, &n, BT);
    a->q = zs_carve(base, &n, BT * C);
    a->k = zs_carve(base, &n, BT * KD);
    a->v = zs_carve(base, &n, BT * KD);
    a->att = naive ? zs_carve(base, &n, att) : NULL;
    a->lse = naive ? NULL : zs_carve(base, &n, att);
    a->atty = zs_carve(base, &n, BT * C);
    a->res2 = zs_carve(base, &n, BT * C);
    a->ln2 = zs_carve(base, &n, BT * C);
    a->ln2_rstd = zs_carve(base, &n, BT);
    a->gate = zs_carve(base, &n, BT * F);
    a->up = zs_carve(base, &n, BT * F);
    a->h = zs_carve(base, &n, BT * F);
    *total = n;
}

/* Activation buffers, in the order the arena is carved. With m->arena NULL this only counts
 * (the memory estimator uses that); layers may then point at a single reused record. Without
 * recompute each layer gets its own set; with it, one shared set serves every layer and only
 * the block outputs (the next blocks' inputs) are kept per layer. */
static uint64_t carve_arena(const zs_model_config *c, int B, int T, int recompute, zs_llama_t *m) {
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, n = 0;
    float *base = m->arena;
    layer_acts shared;
    zs_resid_carve(&m->resid, 0, base, &n, BT * C);
    if (recompute) carve_block(c, B, T, m->naive, base, &n, &shared);
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts *a = base ? &m->layers[l] : &m->layers[0];
        if (recompute)
            *a = shared;
        else
            carve_block(c, B, T, m->naive, base, &n, a);
        zs_resid_carve(&m->resid, l + 1, base, &n, BT * C);
    }
    m->lnf = zs_carve(base, &n, BT * C);
    m->lnf_rstd = zs_carve(base, &n, BT);
    m->losses = zs_carve(base, &n, BT);
    return n;
}

/* Workspace: logits plus the per-layer activation gradients reused across layers. */
static uint64_t carve_scratch(const zs_model_config *c, int B, int T, zs_llama_t *m) {
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, F = (uint64_t)c->ffn_hidden;
    uint64_t KD = C / (uint64_t)c->n_head * (uint64_t)c->n_kv_head;
    uint64_t att = (uint64_t)B * c->n_head * T * (m->naive ? (uint64_t)T : 1), n = 0;
    float *base = m->scratch;
    m->logits = zs_carve(base, &n, BT * (uint64_t)c->padded_vocab);
    m->dres = zs_carve(base, &n, BT * C);
    m->dC = zs_carve(base, &n, BT * C);
    m->dq = zs_carve(base, &n, BT * C);
    m->dk = zs_carve(base, &n, BT * KD);
    m->dv = zs_carve(base, &n, BT * KD);
    m->datt = zs_carve(base, &n, att);
    m->dh = zs_carve(base, &n, BT * F);
    m->dgate = zs_carve(base, &n, BT * F);
    m->dup = zs_carve(base, &n, BT * F);
    return n;
}

uint64_t zs_llama_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T) {
    zs_llama_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.naive = opts->attention == ZS_ATTENTION_NAIVE;
    return carve_scratch(cfg, B, T, &tmp) * sizeof(float);
}

uint64_t zs_llama_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T) {
    zs_llama_t tmp;
    layer_acts one;
    memset(&tmp, 0, sizeof tmp);
    tmp.layers = &one;
    tmp.resid.bf16 = opts->act_dtype == ZS_DTYPE_BF16; /* no pointer arrays: count only */
    tmp.naive = opts->attention == ZS_ATTENTION_NAIVE;
    return carve_arena(cfg, B, T, opts->recompute == ZS_RECOMPUTE_BLOCK, &tmp) * sizeof(float);
}

zs_status zs_llama_create(const zs_model_config *cfg, const zs_model_options *opts,
                          const zs_ops *ops, zs_stream_t *s, zs_module_t *engine, int max_batch,
                          int max_seq, zs_llama_t **out) {
    zs_status st = ZS_OK;
    zs_llama_t *m = NULL;
    *out = NULL;
    m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "model: out of memory");
    m->cfg = *cfg;
    m->ops = ops;
    m->s = s;
    m->engine = engine;
    m->recompute = opts->recompute == ZS_RECOMPUTE_BLOCK;
    m->naive = opts->attention == ZS_ATTENTION_NAIVE;
    m->hs = cfg->n_embd / cfg->n_head;
    m->QD = m->hs * cfg->n_head;
    m->KD = m->hs * cfg->n_kv_head;
    const zs_layout *l = zs_module_layout(engine);
    m->tied = zs_model_tied(cfg);
    ZS_REQUIRE(l->n_units == cfg->n_layer + 2 &&
                   l->n_tensors == L_NT * cfg->n_layer + (m->tied ? 2 : 3),
               ZS_ERR_INTERNAL, "model: layout has %d units, %d tensors", l->n_units, l->n_tensors);
    m->off_embed = l->tensors[0].offset;
    for (int i = 0; i < L_NT; i++)
        m->toff[i] = l->tensors[l->units[unit_block(0)].first_tensor + i].offset;
    const zs_unit_desc *hu = &l->units[unit_head(cfg)];
    m->off_norm = l->tensors[hu->first_tensor].offset;
    m->off_head = m->tied ? m->off_embed : l->tensors[hu->first_tensor + 1].offset;

    m->layers = calloc((size_t)cfg->n_layer, sizeof *m->layers);
    ZS_REQUIRE(m->layers, ZS_ERR_OOM, "model: out of memory");
    ZS_CHECK(zs_resid_init(&m->resid, cfg->n_layer, opts->act_dtype == ZS_DTYPE_BF16));
    ZS_CHECK(zs_model_alloc_buffers(
        zs_module_dev(engine), zs_llama_activation_bytes(cfg, opts, max_batch, max_seq),
        zs_llama_workspace_bytes(cfg, opts, max_batch, max_seq), &m->arena, &m->scratch));
    carve_arena(cfg, max_batch, max_seq, m->recompute, m);
    carve_scratch(cfg, max_batch, max_seq, m);
    *out = m;
    return ZS_OK;
fail:
    zs_llama_destroy(m);
    return st;
}

void zs_llama_destroy(zs_llama_t *m) {
    if (!m) return;
    if (m->engine) {
        zs_module_dev(m->engine)->free(m->arena);
        zs_module_dev(m->engine)->free(m->scratch);
    }
    free(m->layers);
    zs_resid_free(&m->resid);
    free(m);
}

/* One block's forward from its input x and full parameters p, writing every activation its
 * backward reads into a. It reads nothing else that backward changes (m->dC is only a
 * temporary here), so backward may re-run it to recompute a block's activations. */
static zs_status block_forward(void *model, const float *p, const float *x, int l, float *out,
                               int B, int T) {
    zs_status st = ZS_OK;
    zs_llama_t *m = model;
    layer_acts *a = &m->layers[l];
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const zs_model_config *c = &m->cfg;
    const int C = c->n_embd, F = c->ffn_hidden, BT = B * T, QD = m->QD, KD = m->KD;
    const int64_t *t = m->toff;
    ZS_CHECK(o->rmsnorm_fwd(s, a->ln1, a->ln1_rstd, x, p + t[L_NORM1], BT, C, c->norm_eps));
    ZS_CHECK(zs_linear_fwd(o, s, a->q, a->ln1, p + t[L_Q], NULL, BT, C, QD));
    ZS_CHECK(zs_linear_fwd(o, s, a->k, a->ln1, p + t[L_K], NULL, BT, C, KD));
    ZS_CHECK(zs_linear_fwd(o, s, a->v, a->ln1, p + t[L_V], NULL, BT, C, KD));
    ZS_CHECK(o->rope_fwd(s, a->q, a->q, B, T, c->n_head, m->hs, c->rope_theta, m->seg));
    ZS_CHECK(o->rope_fwd(s, a->k, a->k, B, T, c->n_kv_head, m->hs, c->rope_theta, m->seg));
    if (m->naive)
        ZS_CHECK(o->attention_gqa_fwd(s, a->atty, a->att, a->q, a->k, a->v, B, T, c->n_head,
                                      c->n_kv_head, m->hs, m->seg));
    else
        ZS_CHECK(o->flash_attention_fwd(s, a->atty, a->lse, a->q, a->k, a->v, B, T, c->n_head,
                                        c->n_kv_head, m->hs, QD, KD, m->seg));
    ZS_CHECK(zs_linear_fwd(o, s, m->dC, a->atty, p + t[L_O], NULL, BT, QD, C));
    ZS_CHECK(o->residual_fwd(s, a->res2, x, m->dC, (size_t)BT * C));
    ZS_CHECK(o->rmsnorm_fwd(s, a->ln2, a->ln2_rstd, a->res2, p + t[L_NORM2], BT, C, c->norm_eps));
    ZS_CHECK(zs_linear_fwd(o, s, a->gate, a->ln2, p + t[L_GATE], NULL, BT, C, F));
    ZS_CHECK(zs_linear_fwd(o, s, a->up, a->ln2, p + t[L_UP], NULL, BT, C, F));
    ZS_CHECK(o->swiglu_fwd(s, a->h, a->gate, a->up, (size_t)BT * F));
    ZS_CHECK(zs_linear_fwd(o, s, m->dC, a->h, p + t[L_DOWN], NULL, BT, F, C));
    ZS_CHECK(o->residual_fwd(s, out, a->res2, m->dC, (size_t)BT * C));
fail:
    return st;
}

/* One block's backward: m->dres holds d loss / d res3 on entry and d loss / d x on exit;
 * parameter gradients accumulate into g. */
static zs_status block_backward(void *model, const float *p, float *g, const float *x, int l, int B,
                                int T) {
    zs_status st = ZS_OK;
    zs_llama_t *m = model;
    const layer_acts *a = &m->layers[l];
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const zs_model_config *c = &m->cfg;
    const int C = c->n_embd, F = c->ffn_hidden, BT = B * T, QD = m->QD, KD = m->KD;
    const size_t nF = (size_t)BT * F;
    const int64_t *t = m->toff;
    /* res3 = res2 + down(silu(gate) * up): dres flows unchanged into res2 and into the MLP. */
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dh, g + t[L_DOWN], NULL, m->dres, a->h, p + t[L_DOWN], BT,
                               F, C));
    ZS_CHECK(o->fill(s, m->dgate, 0.0f, nF));
    ZS_CHECK(o->fill(s, m->dup, 0.0f, nF));
    ZS_CHECK(o->swiglu_bwd(s, m->dgate, m->dup, m->dh, a->gate, a->up, nF));
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + t[L_GATE], NULL, m->dgate, a->ln2, p + t[L_GATE],
                               BT, C, F));
    ZS_CHECK(zs_linear_bwd(o, s, m->dC, g + t[L_UP], NULL, m->dup, a->ln2, p + t[L_UP], BT, C, F));
    ZS_CHECK(o->rmsnorm_bwd(s, m->dres, g + t[L_NORM2], m->dC, a->res2, p + t[L_NORM2], a->ln2_rstd,
                            BT, C));
    /* res2 = x + o_proj(atty). */
    ZS_CHECK(
        zs_linear_bwd_set(o, s, m->dC, g + t[L_O], NULL, m->dres, a->atty, p + t[L_O], BT, QD, C));
    ZS_CHECK(o->fill(s, m->dq, 0.0f, (size_t)BT * QD));
    ZS_CHECK(o->fill(s, m->dk, 0.0f, (size_t)BT * KD));
    ZS_CHECK(o->fill(s, m->dv, 0.0f, (size_t)BT * KD));
    if (m->naive)
        ZS_CHECK(o->attention_gqa_bwd(s, m->dq, m->dk, m->dv, m->datt, m->dC, a->q, a->k, a->v,
                                      a->att, B, T, c->n_head, c->n_kv_head, m->hs, m->seg));
    else
        ZS_CHECK(o->flash_attention_bwd(s, m->dq, m->dk, m->dv, m->datt, m->dC, a->q, a->k, a->v,
                                        a->atty, a->lse, B, T, c->n_head, c->n_kv_head, m->hs, QD,
                                        KD, m->seg));
    /* The saved q and k are post-RoPE; their gradients go back through the inverse rotation
     * to the projections' outputs. */
    ZS_CHECK(o->rope_bwd(s, m->dq, m->dq, B, T, c->n_head, m->hs, c->rope_theta, m->seg));
    ZS_CHECK(o->rope_bwd(s, m->dk, m->dk, B, T, c->n_kv_head, m->hs, c->rope_theta, m->seg));
    ZS_CHECK(
        zs_linear_bwd_set(o, s, m->dC, g + t[L_Q], NULL, m->dq, a->ln1, p + t[L_Q], BT, C, QD));
    ZS_CHECK(zs_linear_bwd(o, s, m->dC, g + t[L_K], NULL, m->dk, a->ln1, p + t[L_K], BT, C, KD));
    ZS_CHECK(zs_linear_bwd(o, s, m->dC, g + t[L_V], NULL, m->dv, a->ln1, p + t[L_V], BT, C, KD));
    ZS_CHECK(
        o->rmsnorm_bwd(s, m->dres, g + t[L_NORM1], m->dC, x, p + t[L_NORM1], a->ln1_rstd, BT, C));
fail:
    return st;
}

/* The block stack of this micro-batch's pass (stack.h). */
static zs_stack stack_of(zs_llama_t *m) {
    zs_stack k = {.resid = &m->resid,
                  .engine = m->engine,
                  .ops = m->ops,
                  .s = m->s,
                  .n_layer = m->cfg.n_layer,
                  .first_unit = unit_block(0),
                  .recompute = m->recompute,
                  .fwd = block_forward,
                  .bwd = block_backward,
                  .model = m};
    return k;
}

/* Forward through embedding, blocks, final norm and head into m->logits. */
zs_status zs_llama_forward(zs_llama_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    zs_status st = ZS_OK;
    m->seg = seg; /* the blocks read it (block_forward, block_backward) */
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, BT = B * T, Vp = m->cfg.padded_vocab;
    const int uh = unit_head(&m->cfg);
    float *p = NULL;

    ZS_CHECK(zs_module_forward_begin(m->engine, 0, &p));
    ZS_CHECK(
        o->embedding_fwd(s, zs_resid_out(&m->resid, 0), in, p + m->off_embed, NULL, B, T, C, NULL));
    ZS_CHECK(zs_module_forward_end(m->engine, 0));

    const float *x = NULL;
    zs_stack k = stack_of(m);
    ZS_CHECK(zs_stack_forward(&k, B, T, (size_t)BT * C, &x));

    ZS_CHECK(zs_module_forward_begin(m->engine, uh, &p));
    ZS_CHECK(o->rmsnorm_fwd(s, m->lnf, m->lnf_rstd, x, p + m->off_norm, BT, C, m->cfg.norm_eps));
    if (!m->tied)
        ZS_CHECK(zs_linear_fwd(o, s, m->logits, m->lnf, p + m->off_head, NULL, BT, C, Vp));
    ZS_CHECK(zs_module_forward_end(m->engine, uh));
    if (m->tied) {
        /* Tied head: the embed unit's second use in this pass (its n_uses is 2). */
        ZS_CHECK(zs_module_forward_begin(m->engine, 0, &p));
        ZS_CHECK(zs_linear_fwd(o, s, m->logits, m->lnf, p + m->off_embed, NULL, BT, C, Vp));
        ZS_CHECK(zs_module_forward_end(m->engine, 0));
    }
fail:
    return st;
}

zs_status zs_llama_backward(zs_llama_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    zs_status st = ZS_OK;
    m->seg = seg; /* the blocks read it (block_forward, block_backward) */
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, BT = B * T, Vp = m->cfg.padded_vocab;
    const int uh = unit_head(&m->cfg);
    const size_t nC = (size_t)BT * C;
    float *p = NULL, *g = NULL;

    /* Head and final norm: m->logits already holds dlogits (softmax_xent wrote in place). */
    const float *xlast = NULL;
    ZS_CHECK(zs_resid_load(&m->resid, o, s, m->cfg.n_layer, nC, &xlast));
    ZS_CHECK(o->fill(s, m->dres, 0.0f, nC));
    if (m->tied) { /* dC: the head's input gradient, from the tied or the separate head */
        ZS_CHECK(zs_module_backward_begin(m->engine, 0, &p, &g));
        ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + m->off_embed, NULL, m->logits, m->lnf,
                                   p + m->off_embed, BT, C, Vp));
        ZS_CHECK(zs_module_backward_end(m->engine, 0));
    }
    ZS_CHECK(zs_module_backward_begin(m->engine, uh, &p, &g));
    if (!m->tied)
        ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + m->off_head, NULL, m->logits, m->lnf,
                                   p + m->off_head, BT, C, Vp));
    ZS_CHECK(o->rmsnorm_bwd(s, m->dres, g + m->off_norm, m->dC, xlast, p + m->off_norm, m->lnf_rstd,
                            BT, C));
    ZS_CHECK(zs_module_backward_end(m->engine, uh));

    zs_stack k = stack_of(m);
    ZS_CHECK(zs_stack_backward(&k, B, T, nC));

    ZS_CHECK(zs_module_backward_begin(m->engine, 0, &p, &g));
    ZS_CHECK(o->embedding_bwd(s, g + m->off_embed, NULL, m->dres, in, B, T, C, NULL));
    ZS_CHECK(zs_module_backward_end(m->engine, 0));
fail:
    return st;
}

void zs_llama_outputs(zs_llama_t *m, float **logits, float **losses) {
    *logits = m->logits;
    *losses = m->losses;
}

/* GPT-2: parameter layout as units (embeddings, one unit per block, final norm; the output
 * head is tied to the token embedding, or with tie_embeddings off its own lm_head.weight in
 * the final unit) and forward/backward over the zs_ops table. Each unit
 * is acquired through the shard engine right before it is used, so the same code serves
 * every stage. */
#include "models/gpt2.h"
#include "models/carve.h"
#include "models/stack.h"

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
    float *ln1, *ln1_mean, *ln1_rstd; /* [BT,C], [BT], [BT] */
    float *qkv;                       /* [BT,3C] */
    float *atty;                      /* [BT,C] */
    float *att;                       /* naive attention: [B,NH,T,T] probabilities */
    float *lse;                       /* flash attention: [B,NH,T] row log-sum-exps */
    float *res2;                      /* [BT,C] residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu; /* [BT,4C] */
} layer_acts;

struct zs_gpt2 {
    zs_model_config cfg;
    const zs_ops *ops;
    zs_stream_t *s;
    zs_module_t *engine;
    const zs_layout *layout;
    int recompute;      /* ZS_RECOMPUTE_BLOCK: recompute each block inside its backward */
    int naive;          /* ZS_ATTENTION_NAIVE: keep T x T probabilities (else flash) */
    int64_t toff[B_NT]; /* element offsets of block tensors within a block unit */
    int tied;           /* head = wte (embed unit, acquired twice), else off_head in ln_f */
    int64_t off_wte, off_wpe, off_lnfw, off_lnfb, off_head;
    float *arena;   /* one activation allocation, carved into the fields below */
    zs_resid resid; /* the kept block inputs: embedding output, then each block's output */
    layer_acts *layers;
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;  /* [BT,Vp]; backward overwrites it with dlogits in place */
    float *losses;  /* [BT] */
    float *scratch; /* workspace: gradients of activations, reused per layer */
    float *dres, *dtmp4, *dtmp4b, *dqkv, *dC;
    float *datt;        /* naive: [B,NH,T,T] probability gradients; flash: [B,NH,T] delta rows */
    const int32_t *seg; /* this pass's document starts (device memory), or NULL */
};

static int unit_block(int l) {
    return 1 + l;
}

static int unit_final(const zs_model_config *c) {
    return c->n_layer + 1;
}

zs_status zs_gpt2_layout(const zs_model_config *c, int world_size, zs_layout *out) {
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
    ZS_CHECK(zs_layout_add_tensor(out, "wpe.weight", 2, (int64_t[]){c->max_seq, C}, 1,
                                  ZS_INIT_NORMAL, std));
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "h.%d", l);
        ZS_CHECK(zs_layout_add_unit(out, name, 1));
#define T1(suffix, n0, decay, init, sd)                                                            \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                             \
    ZS_CHECK(zs_layout_add_tensor(out, name, 1, (int64_t[]){n0}, decay, init, sd))
#define T2(suffix, n0, n1, decay, init, sd)                                                        \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                             \
    ZS_CHECK(zs_layout_add_tensor(out, name, 2, (int64_t[]){n0, n1}, decay, init, sd))
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
    }
    ZS_CHECK(zs_layout_finalize(out, world_size));
    return ZS_OK;
fail:
    zs_layout_free(out);
    return st;
}

/* One block's activations (not its input or output, the kept stream), carved at *n. Attention
 * keeps [B,NH,T,T] probabilities (naive) or one log-sum-exp per row (flash). */
static void carve_block(const zs_model_config *c, int B, int T, int naive, float *base,
                        uint64_t *total, layer_acts *a) {
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd;
    uint64_t att = (uint64_t)B * c->n_head * T * (naive ? (uint64_t)T : 1);
    uint64_t n = *total;
    a->ln1 = zs_carve(base, &n, BT * C);
    a->ln1_mean = zs_carve(base, &n, BT);
    a->ln1_rstd = zs_carve(base, &n, BT);
    a->qkv = zs_carve(base, &n, BT * 3 * C);
    a->atty = zs_carve(base, &n, BT * C);
    a->att = naive ? zs_carve(base, &n, att) : NULL;
    a->lse = naive ? NULL : zs_carve(base, &n, att);
    a->res2 = zs_carve(base, &n, BT * C);
    a->ln2 = zs_carve(base, &n, BT * C);
    a->ln2_mean = zs_carve(base, &n, BT);
    a->ln2_rstd = zs_carve(base, &n, BT);
    a->fch = zs_carve(base, &n, BT * 4 * C);
    a->fch_gelu = zs_carve(base, &n, BT * 4 * C);
    *total = n;
}

/* Activation buffers, in the order the arena is carved. With m->arena NULL this only counts
 * (the memory estimator uses that); layers may then point at a single reused record. Without
 * recompute each layer gets its own set; with it, one shared set serves every layer and only
 * the block outputs (the next blocks' inputs) are kept per layer. */
static uint64_t carve_arena(const zs_model_config *c, int B, int T, int recompute, zs_gpt2_t *m) {
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
    m->lnf_mean = zs_carve(base, &n, BT);
    m->lnf_rstd = zs_carve(base, &n, BT);
    m->losses = zs_carve(base, &n, BT);
    return n;
}

/* Workspace: logits plus the per-layer activation gradients reused across layers. */
static uint64_t carve_scratch(const zs_model_config *c, int B, int T, zs_gpt2_t *m) {
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd;
    uint64_t att = (uint64_t)B * c->n_head * T * (m->naive ? (uint64_t)T : 1), n = 0;
    float *base = m->scratch;
    m->logits = zs_carve(base, &n, BT * (uint64_t)c->padded_vocab);
    m->dres = zs_carve(base, &n, BT * C);
    m->dC = zs_carve(base, &n, BT * C);
    m->dtmp4 = zs_carve(base, &n, BT * 4 * C);
    m->dtmp4b = zs_carve(base, &n, BT * 4 * C);
    m->dqkv = zs_carve(base, &n, BT * 3 * C);
    m->datt = zs_carve(base, &n, att);
    return n;
}

uint64_t zs_gpt2_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                 int T) {
    zs_gpt2_t tmp;
    layer_acts one;
    memset(&tmp, 0, sizeof tmp);
    tmp.layers = &one;
    tmp.naive = opts->attention == ZS_ATTENTION_NAIVE;
    return carve_scratch(cfg, B, T, &tmp) * sizeof(float);
}

uint64_t zs_gpt2_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T) {
    zs_gpt2_t tmp;
    layer_acts one;
    memset(&tmp, 0, sizeof tmp);
    tmp.layers = &one;
    tmp.resid.bf16 = opts->act_dtype == ZS_DTYPE_BF16; /* no pointer arrays: count only */
    tmp.naive = opts->attention == ZS_ATTENTION_NAIVE;
    return carve_arena(cfg, B, T, opts->recompute == ZS_RECOMPUTE_BLOCK, &tmp) * sizeof(float);
}

zs_status zs_gpt2_create(const zs_model_config *cfg, const zs_model_options *opts,
                         const zs_ops *ops, zs_stream_t *s, zs_module_t *engine, int max_batch,
                         int max_seq, zs_gpt2_t **out) {
    zs_status st = ZS_OK;
    zs_gpt2_t *m = NULL;
    *out = NULL;
    m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "model: out of memory");
    m->cfg = *cfg;
    m->ops = ops;
    m->s = s;
    m->engine = engine;
    m->layout = zs_module_layout(engine);
    m->recompute = opts->recompute == ZS_RECOMPUTE_BLOCK;
    m->naive = opts->attention == ZS_ATTENTION_NAIVE;
    const zs_layout *l = m->layout;
    ZS_REQUIRE(l->n_units == cfg->n_layer + 2, ZS_ERR_INTERNAL, "model: layout has %d units",
               l->n_units);
    m->off_wte = l->tensors[0].offset;
    m->off_wpe = l->tensors[1].offset;
    for (int i = 0; i < B_NT; i++)
        m->toff[i] = l->tensors[l->units[unit_block(0)].first_tensor + i].offset;
    const zs_unit_desc *fu = &l->units[unit_final(cfg)];
    m->off_lnfw = l->tensors[fu->first_tensor].offset;
    m->off_lnfb = l->tensors[fu->first_tensor + 1].offset;
    m->tied = zs_model_tied(cfg);
    ZS_REQUIRE(fu->n_tensors == (m->tied ? 2 : 3), ZS_ERR_INTERNAL,
               "model: final unit has %d tensors", fu->n_tensors);
    m->off_head = m->tied ? m->off_wte : l->tensors[fu->first_tensor + 2].offset;

    m->layers = calloc((size_t)cfg->n_layer, sizeof *m->layers);
    ZS_REQUIRE(m->layers, ZS_ERR_OOM, "model: out of memory");
    ZS_CHECK(zs_resid_init(&m->resid, cfg->n_layer, opts->act_dtype == ZS_DTYPE_BF16));
    ZS_CHECK(zs_model_alloc_buffers(
        zs_module_dev(engine), zs_gpt2_activation_bytes(cfg, opts, max_batch, max_seq),
        zs_gpt2_workspace_bytes(cfg, opts, max_batch, max_seq), &m->arena, &m->scratch));
    carve_arena(cfg, max_batch, max_seq, m->recompute, m);
    carve_scratch(cfg, max_batch, max_seq, m);
    *out = m;
    return ZS_OK;
fail:
    zs_gpt2_destroy(m);
    return st;
}

void zs_gpt2_destroy(zs_gpt2_t *m) {
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
 * backward reads into layer l's record and its output (res3) into out. It reads nothing that
 * backward changes (m->dC is only a temporary), so backward re-runs it to recompute a block. */
static zs_status block_forward(void *model, const float *p, const float *x, int l, float *out,
                               int B, int T) {
    zs_status st = ZS_OK;
    zs_gpt2_t *m = model;
    layer_acts *a = &m->layers[l];
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
    const int64_t *t = m->toff;
    ZS_CHECK(o->layernorm_fwd(s, a->ln1, a->ln1_mean, a->ln1_rstd, x, p + t[B_LN1W], p + t[B_LN1B],
                              BT, C));
    ZS_CHECK(zs_linear_fwd(o, s, a->qkv, a->ln1, p + t[B_QKVW], p + t[B_QKVB], BT, C, 3 * C));
    if (m->naive)
        ZS_CHECK(o->attention_fwd(s, a->atty, a->att, a->qkv, B, T, C, NH, m->seg));
    else /* q | k | v packed in each row of qkv: strided views, kv heads = heads */
        ZS_CHECK(o->flash_attention_fwd(s, a->atty, a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C, B,
                                        T, NH, NH, C / NH, 3 * C, 3 * C, m->seg));
    ZS_CHECK(zs_linear_fwd(o, s, m->dC, a->atty, p + t[B_PROJW], p + t[B_PROJB], BT, C, C));
    ZS_CHECK(o->residual_fwd(s, a->res2, x, m->dC, (size_t)BT * C));
    ZS_CHECK(o->layernorm_fwd(s, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p + t[B_LN2W],
                              p + t[B_LN2B], BT, C));
    ZS_CHECK(zs_linear_fwd(o, s, a->fch, a->ln2, p + t[B_FCW], p + t[B_FCB], BT, C, 4 * C));
    ZS_CHECK(o->gelu_fwd(s, a->fch_gelu, a->fch, (size_t)BT * 4 * C));
    ZS_CHECK(zs_linear_fwd(o, s, m->dC, a->fch_gelu, p + t[B_FCPW], p + t[B_FCPB], BT, 4 * C, C));
    ZS_CHECK(o->residual_fwd(s, out, a->res2, m->dC, (size_t)BT * C));
fail:
    return st;
}

/* One block's backward: m->dres holds d loss / d res3 on entry and d loss / d x on exit;
 * parameter gradients accumulate into g. */
static zs_status block_backward(void *model, const float *p, float *g, const float *x, int l, int B,
                                int T) {
    zs_status st = ZS_OK;
    zs_gpt2_t *m = model;
    const layer_acts *a = &m->layers[l];
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
    const size_t nC = (size_t)BT * C;
    const int64_t *t = m->toff;
    /* res3 = res2 + fc_proj(gelu(fch)): dres flows unchanged into res2 and into the MLP. */
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dtmp4, g + t[B_FCPW], g + t[B_FCPB], m->dres, a->fch_gelu,
                               p + t[B_FCPW], BT, 4 * C, C));
    ZS_CHECK(o->fill(s, m->dtmp4b, 0.0f, 4 * nC));
    ZS_CHECK(o->gelu_bwd(s, m->dtmp4b, a->fch, m->dtmp4, 4 * nC));
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + t[B_FCW], g + t[B_FCB], m->dtmp4b, a->ln2,
                               p + t[B_FCW], BT, C, 4 * C));
    ZS_CHECK(o->layernorm_bwd(s, m->dres, g + t[B_LN2W], g + t[B_LN2B], m->dC, a->res2,
                              p + t[B_LN2W], a->ln2_mean, a->ln2_rstd, BT, C));
    /* res2 = x + attn_proj(atty). */
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + t[B_PROJW], g + t[B_PROJB], m->dres, a->atty,
                               p + t[B_PROJW], BT, C, C));
    ZS_CHECK(o->fill(s, m->dqkv, 0.0f, 3 * nC));
    if (m->naive)
        ZS_CHECK(o->attention_bwd(s, m->dqkv, m->datt, m->dC, a->qkv, a->att, B, T, C, NH, m->seg));
    else
        ZS_CHECK(o->flash_attention_bwd(s, m->dqkv, m->dqkv + C, m->dqkv + 2 * C, m->datt, m->dC,
                                        a->qkv, a->qkv + C, a->qkv + 2 * C, a->atty, a->lse, B, T,
                                        NH, NH, C / NH, 3 * C, 3 * C, m->seg));
    ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + t[B_QKVW], g + t[B_QKVB], m->dqkv, a->ln1,
                               p + t[B_QKVW], BT, C, 3 * C));
    ZS_CHECK(o->layernorm_bwd(s, m->dres, g + t[B_LN1W], g + t[B_LN1B], m->dC, x, p + t[B_LN1W],
                              a->ln1_mean, a->ln1_rstd, BT, C));
fail:
    return st;
}

/* The block stack of this micro-batch's pass (stack.h). */
static zs_stack stack_of(zs_gpt2_t *m) {
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

/* Forward through embeddings, blocks and final norm into m->logits. */
zs_status zs_gpt2_forward(zs_gpt2_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    zs_status st = ZS_OK;
    m->seg = seg; /* the blocks read it (block_forward, block_backward) */
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, BT = B * T, Vp = m->cfg.padded_vocab;
    float *p = NULL;

    ZS_CHECK(zs_module_forward_begin(m->engine, 0, &p));
    ZS_CHECK(o->embedding_fwd(s, zs_resid_out(&m->resid, 0), in, p + m->off_wte, p + m->off_wpe, B,
                              T, C, m->seg));
    ZS_CHECK(zs_module_forward_end(m->engine, 0));

    const float *x = NULL;
    zs_stack k = stack_of(m);
    ZS_CHECK(zs_stack_forward(&k, B, T, (size_t)BT * C, &x));

    ZS_CHECK(zs_module_forward_begin(m->engine, unit_final(&m->cfg), &p));
    ZS_CHECK(o->layernorm_fwd(s, m->lnf, m->lnf_mean, m->lnf_rstd, x, p + m->off_lnfw,
                              p + m->off_lnfb, BT, C));
    if (!m->tied)
        ZS_CHECK(zs_linear_fwd(o, s, m->logits, m->lnf, p + m->off_head, NULL, BT, C, Vp));
    ZS_CHECK(zs_module_forward_end(m->engine, unit_final(&m->cfg)));

    if (m->tied) {
        /* Tied output head: logits = lnf @ wte^T over the padded vocabulary. */
        ZS_CHECK(zs_module_forward_begin(m->engine, 0, &p));
        ZS_CHECK(zs_linear_fwd(o, s, m->logits, m->lnf, p + m->off_wte, NULL, BT, C, Vp));
        ZS_CHECK(zs_module_forward_end(m->engine, 0));
    }
fail:
    return st;
}

zs_status zs_gpt2_backward(zs_gpt2_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    zs_status st = ZS_OK;
    m->seg = seg; /* the blocks read it (block_forward, block_backward) */
    const zs_ops *o = m->ops;
    zs_stream_t *s = m->s;
    const int C = m->cfg.n_embd, BT = B * T, Vp = m->cfg.padded_vocab;
    const size_t nC = (size_t)BT * C;
    float *p = NULL, *g = NULL;

    /* Head: m->logits already holds dlogits (written in place by softmax_xent); dC is the
     * head's input gradient, from the tied embedding's weights or the separate head's. */
    if (m->tied) {
        ZS_CHECK(zs_module_backward_begin(m->engine, 0, &p, &g));
        ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + m->off_wte, NULL, m->logits, m->lnf,
                                   p + m->off_wte, BT, C, Vp));
        ZS_CHECK(zs_module_backward_end(m->engine, 0));
    }

    const float *xlast = NULL;
    ZS_CHECK(zs_resid_load(&m->resid, o, s, m->cfg.n_layer, nC, &xlast));
    ZS_CHECK(o->fill(s, m->dres, 0.0f, nC));
    ZS_CHECK(zs_module_backward_begin(m->engine, unit_final(&m->cfg), &p, &g));
    if (!m->tied)
        ZS_CHECK(zs_linear_bwd_set(o, s, m->dC, g + m->off_head, NULL, m->logits, m->lnf,
                                   p + m->off_head, BT, C, Vp));
    ZS_CHECK(o->layernorm_bwd(s, m->dres, g + m->off_lnfw, g + m->off_lnfb, m->dC, xlast,
                              p + m->off_lnfw, m->lnf_mean, m->lnf_rstd, BT, C));
    ZS_CHECK(zs_module_backward_end(m->engine, unit_final(&m->cfg)));

    zs_stack k = stack_of(m);
    ZS_CHECK(zs_stack_backward(&k, B, T, nC));

    ZS_CHECK(zs_module_backward_begin(m->engine, 0, &p, &g));
    ZS_CHECK(o->embedding_bwd(s, g + m->off_wte, g + m->off_wpe, m->dres, in, B, T, C, m->seg));
    ZS_CHECK(zs_module_backward_end(m->engine, 0));
fail:
    return st;
}

void zs_gpt2_outputs(zs_gpt2_t *m, float **logits, float **losses) {
    *logits = m->logits;
    *losses = m->losses;
}

/* The generic model: one table per architecture (arch.h) and everything the architectures
 * share, written once: building the model and carving its buffers, and the pass (embedding,
 * the block stack, final norm and output head, the loss). Nothing outside src/models knows
 * which architecture runs. */
#include "models/model.h"

#include "backend/kernels/layernorm.h"
#include "core/status.h"
#include "models/arch.h"
#include "models/carve.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The largest architecture struct and layer record, for counting bytes without a model. */
#define MODEL_MAX_SIZE 2048
#define LAYER_MAX_SIZE 512

struct zs_model {
    const zs_arch_impl *A;
    zs_model_base *b; /* the architecture's struct, zs_model_base first */
    int max_B, max_T;
};

static const zs_arch_impl *const ARCHS[] = {&zs_gpt2_arch, &zs_llama_arch};

static const zs_arch_impl *arch_of(zs_arch arch) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (ARCHS[i]->arch == arch) return ARCHS[i];
    return NULL;
}

static zs_status not_built_in(const zs_model_config *cfg) {
    return zs_error(ZS_ERR_UNSUPPORTED, "model %s: architecture %d is not built in", cfg->name,
                    (int)cfg->arch);
}

zs_status zs_model_layout(const zs_model_config *cfg, int world_size, zs_layout *out) {
    const zs_arch_impl *A = arch_of(cfg->arch);
    if (A) return A->layout(cfg, world_size, out);
    zs_layout_init(out);
    return not_built_in(cfg);
}

/* Activation buffers, in the order the arena is carved. With b->arena NULL this only counts
 * (the memory estimator uses that); b->layers then holds a single record that every layer
 * reuses. Without recompute each layer gets its own record; with it, one shared record serves
 * every layer and only the block outputs (the next blocks' inputs) are kept per layer. */
static uint64_t carve_arena(const zs_arch_impl *A, int B, int T, zs_model_base *b) {
    const zs_model_config *c = &b->cfg;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, n = 0;
    float *base = b->arena;
    _Alignas(max_align_t) char shared[LAYER_MAX_SIZE];
    zs_resid_carve(&b->resid, 0, base, &n, BT * C);
    if (b->recompute) A->carve_block(c, B, T, b->naive, b->act16, base, &n, shared);
    for (int l = 0; l < c->n_layer; l++) {
        void *a = zs_model_layer(b, A->layer_size, base ? l : 0);
        if (b->recompute)
            memcpy(a, shared, A->layer_size);
        else
            A->carve_block(c, B, T, b->naive, b->act16, base, &n, a);
        zs_resid_carve(&b->resid, l + 1, base, &n, BT * C);
    }
    b->lnf = zs_carve(base, &n, BT * C);
    b->losses = zs_carve(base, &n, BT);
    A->carve_final(b, B, T, base, &n);
    return n;
}

/* Workspace: logits plus the activation gradients reused across layers. */
static uint64_t carve_scratch(const zs_arch_impl *A, int B, int T, zs_model_base *b) {
    const zs_model_config *c = &b->cfg;
    uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, n = 0;
    uint64_t att = (uint64_t)B * c->n_head * T * (b->naive ? (uint64_t)T : 1);
    float *base = b->scratch;
    b->logits = zs_carve(base, &n, BT * (uint64_t)c->padded_vocab);
    b->dres = zs_carve(base, &n, BT * C);
    b->dC = zs_carve(base, &n, BT * C);
    b->datt = zs_carve(base, &n, att);
    A->carve_scratch(b, B, T, base, &n);
    return n;
}

/* A counting model of architecture A: no buffers, one layer record. */
typedef struct counter {
    union {
        zs_model_base b;
        _Alignas(max_align_t) char bytes[MODEL_MAX_SIZE];
    } m;
    _Alignas(max_align_t) char layer[LAYER_MAX_SIZE];
} counter;

static const zs_arch_impl *counter_init(counter *k, const zs_model_config *cfg,
                                        const zs_model_options *opts) {
    const zs_arch_impl *A = arch_of(cfg->arch);
    if (!A || A->model_size > MODEL_MAX_SIZE || A->layer_size > LAYER_MAX_SIZE) return NULL;
    memset(k, 0, sizeof *k);
    k->m.b.cfg = *cfg;
    k->m.b.layers = k->layer;
    k->m.b.resid.bf16 = opts->act_dtype == ZS_DTYPE_BF16; /* no pointer arrays: count only */
    k->m.b.act16 = opts->act_dtype == ZS_DTYPE_BF16;
    k->m.b.naive = opts->attention == ZS_ATTENTION_NAIVE;
    k->m.b.recompute = opts->recompute == ZS_RECOMPUTE_BLOCK;
    return A;
}

uint64_t zs_model_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T) {
    zs_model_options defaults = {0};
    counter k;
    const zs_arch_impl *A = counter_init(&k, cfg, opts ? opts : &defaults);
    return A ? carve_arena(A, B, T, &k.m.b) * sizeof(float) : 0;
}

int zs_model_linears(const zs_model_config *cfg, const zs_model_options *opts,
                     zs_linear_dims *out) {
    const zs_arch_impl *A = arch_of(cfg->arch);
    if (!A) return 0;
    int n = A->block_linears(cfg, opts && opts->attention == ZS_ATTENTION_NAIVE, out);
    for (int i = 0; i < n; i++)
        out[i].count *= cfg->n_layer;
    out[n++] = (zs_linear_dims){cfg->n_embd, cfg->padded_vocab, 1, 0, 1, 0}; /* the head */
    return n;
}

uint64_t zs_model_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T) {
    zs_model_options defaults = {0};
    counter k;
    const zs_arch_impl *A = counter_init(&k, cfg, opts ? opts : &defaults);
    return A ? carve_scratch(A, B, T, &k.m.b) * sizeof(float) : 0;
}

uint64_t zs_model_gpu_scratch_doubles(const zs_model_config *cfg, int rows) {
    return cfg->arch == ZS_ARCH_GPT2 ? (uint64_t)zs_layernorm_bwd_scratch(rows, cfg->n_embd) : 0;
}

/* The parameter offsets of the layout the engine holds: the embedding unit, block 0 (every
 * block unit has the same offsets within it) and the final unit (norm, then an untied head). */
static zs_status bind_layout(const zs_arch_impl *A, zs_model_base *b) {
    zs_status st = ZS_OK;
    const zs_layout *l = zs_module_layout(b->engine);
    const int L = b->cfg.n_layer;
    ZS_REQUIRE(A->block_tensors <= ZS_MAX_BLOCK_TENSORS && A->norm_tensors <= 2 && l->n_units == L + 2,
                   ZS_ERR_INTERNAL, "model: layout has %d units", l->n_units);
    const zs_unit_desc *eu = &l->units[0], *fu = &l->units[L + 1];
    ZS_REQUIRE(eu->n_tensors == 1 + A->learned_pos &&
                       (L == 0 || l->units[1].n_tensors == A->block_tensors) &&
                       fu->n_tensors == A->norm_tensors + !b->tied,
                   ZS_ERR_INTERNAL, "model: layout's units have %d, %d and %d tensors",
                   eu->n_tensors, L ? l->units[1].n_tensors : 0, fu->n_tensors);
    b->off_embed = l->tensors[eu->first_tensor].offset;
    b->off_pos = A->learned_pos ? l->tensors[eu->first_tensor + 1].offset : -1;
    for (int i = 0; L > 0 && i < A->block_tensors; i++)
        b->toff[i] = l->tensors[l->units[1].first_tensor + i].offset;
    for (int i = 0; i < A->norm_tensors; i++) b->off_norm[i] = l->tensors[fu->first_tensor + i].offset;
    b->off_head = b->tied ? b->off_embed : l->tensors[fu->first_tensor + A->norm_tensors].offset;
fail:
    return st;
}

static void model_free(zs_model_base *b) {
    if (!b) return;
    if (b->engine) {
        zs_module_dev(b->engine)->free(b->arena);
        zs_module_dev(b->engine)->free(b->scratch);
    }
    free(b->layers);
    zs_resid_free(&b->resid);
    free(b);
}

zs_status zs_model_create(const zs_model_config *cfg, const zs_ops *ops, zs_stream_t *s,
                          zs_module_t *engine, int max_batch, int max_seq, zs_model_t **out) {
    return zs_model_create_opts(cfg, NULL, ops, s, engine, max_batch, max_seq, out);
}

zs_status zs_model_create_opts(const zs_model_config *cfg, const zs_model_options *opts,
                               const zs_ops *ops, zs_stream_t *s, zs_module_t *engine,
                               int max_batch, int max_seq, zs_model_t **out) {
    zs_status st = ZS_OK;
    zs_model_t *m = NULL;
    zs_model_base *b = NULL;
    zs_model_options defaults = {0};
    const zs_arch_impl *A = arch_of(cfg->arch);
    if (!opts) opts = &defaults;
    *out = NULL;
    ZS_CHECK(zs_model_config_validate(cfg));
    ZS_REQUIRE(max_batch > 0 && max_seq > 0, ZS_ERR_INVALID,
               "model: batch and sequence length must be positive");
    ZS_REQUIRE(max_seq <= cfg->max_seq, ZS_ERR_INVALID,
               "sequence length %d exceeds model %s's %d positions", max_seq, cfg->name,
               cfg->max_seq);
    ZS_REQUIRE(opts->recompute == ZS_RECOMPUTE_NONE || opts->recompute == ZS_RECOMPUTE_BLOCK,
               ZS_ERR_INVALID, "model: unknown recompute mode %d", (int)opts->recompute);
    ZS_REQUIRE(opts->act_dtype == ZS_DTYPE_F32 || opts->act_dtype == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "model: activation dtype %s is not fp32 or bf16", zs_dtype_name(opts->act_dtype));
    ZS_REQUIRE(opts->attention == ZS_ATTENTION_FLASH || opts->attention == ZS_ATTENTION_NAIVE,
               ZS_ERR_INVALID, "model: unknown attention kernel %d", (int)opts->attention);
    if (!A) ZS_CHECK(not_built_in(cfg));
    m = calloc(1, sizeof *m);
    b = calloc(1, A->model_size);
    ZS_REQUIRE(m && b, ZS_ERR_OOM, "model: out of memory");
    m->A = A;
    m->max_B = max_batch;
    m->max_T = max_seq;
    b->cfg = *cfg;
    b->ops = ops;
    b->s = s;
    b->engine = engine;
    b->recompute = opts->recompute == ZS_RECOMPUTE_BLOCK;
    b->naive = opts->attention == ZS_ATTENTION_NAIVE;
    b->act16 = opts->act_dtype == ZS_DTYPE_BF16;
    ZS_REQUIRE(!b->act16 || ops->gemm16, ZS_ERR_INVALID,
               "model: bf16 activations need a table whose gemm takes bf16 inputs (the %s table "
               "computes in %s; --dtype bf16 sets both)",
               ops->name, ops->gemm_math == ZS_MATH_TF32 ? "tf32" : "fp32");
    b->tied = zs_model_tied(cfg);
    ZS_CHECK(bind_layout(A, b));
    b->layers = calloc((size_t)cfg->n_layer, A->layer_size);
    ZS_REQUIRE(b->layers, ZS_ERR_OOM, "model: out of memory");
    ZS_CHECK(zs_resid_init(&b->resid, cfg->n_layer, opts->act_dtype == ZS_DTYPE_BF16));
    ZS_CHECK(zs_model_alloc_buffers(zs_module_dev(engine),
                                    zs_model_activation_bytes(cfg, opts, max_batch, max_seq),
                                    zs_model_workspace_bytes(cfg, opts, max_batch, max_seq),
                                    &b->arena, &b->scratch));
    carve_arena(A, max_batch, max_seq, b);
    carve_scratch(A, max_batch, max_seq, b);
    m->b = b;
    *out = m;
    return ZS_OK;
fail:
    model_free(b);
    free(m);
    return st;
}

void zs_model_destroy(zs_model_t *m) {
    if (!m) return;
    model_free(m->b);
    free(m);
}

/* The block stack of this pass (stack.h). */
static zs_stack stack_of(const zs_model_t *m) {
    zs_model_base *b = m->b;
    zs_stack k = {.resid = &b->resid,
                  .engine = b->engine,
                  .ops = b->ops,
                  .s = b->s,
                  .n_layer = b->cfg.n_layer,
                  .first_unit = 1,
                  .recompute = b->recompute,
                  .x16 = b->resid.bf16 && m->A->bwd_reads16 && m->A->bwd_reads16(b->ops),
                  .fwd = m->A->block_fwd,
                  .bwd = m->A->block_bwd,
                  .model = b};
    return k;
}

static int head_bf16(const zs_model_base *b, int BT);

/* The output head into b->logits: for the loss with bf16 activations (loss), the logits bf16
 * values as under autocast, stored bf16 where the table takes the loss in bf16 (head_bf16), else
 * rounded in fp32 (round16); fp32 as they are for zs_model_infer. */
static zs_status head_fwd(zs_model_base *b, const float *W, int BT, int loss) {
    zs_status st = ZS_OK;
    const zs_ops *o = b->ops;
    const int C = b->cfg.n_embd, Vp = b->cfg.padded_vocab;
    if (loss && b->act16 && head_bf16(b, BT))
        return o->linear_fwd_bias(b->s, b->logits, 1, NULL, b->lnf, 0, W, NULL, BT, C, Vp, NULL,
                                  NULL);
    ZS_CHECK(zs_linear_fwd(o, b->s, b->logits, b->lnf, 0, W, NULL, BT, C, Vp));
    if (loss && b->act16) ZS_CHECK(o->round16(b->s, b->logits, (size_t)BT * Vp));
fail:
    return st;
}

/* Forward through embeddings, blocks, final norm and output head into b->logits (head_fwd's
 * for the loss where loss). Unit 0 is the embedding (acquired again for a tied head), 1..L the
 * blocks, L + 1 the final norm with an untied head. */
static zs_status model_forward(zs_model_t *m, const int32_t *in, const int32_t *seg, int B, int T,
                               int loss) {
    zs_status st = ZS_OK;
    zs_model_base *b = m->b;
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const int C = b->cfg.n_embd, BT = B * T, uf = b->cfg.n_layer + 1;
    const int pos = b->off_pos >= 0;
    float *p = NULL;
    ZS_REQUIRE(B >= 1 && T >= 1 && B <= m->max_B && T <= m->max_T, ZS_ERR_INTERNAL,
               "model: batch %dx%d exceeds allocated %dx%d", B, T, m->max_B, m->max_T);
    b->seg = seg; /* the blocks read it */

    ZS_CHECK(zs_module_forward_begin(b->engine, 0, &p));
    ZS_CHECK(o->embedding_fwd(s, zs_resid_out(&b->resid, 0), in, p + b->off_embed,
                              pos ? p + b->off_pos : NULL, B, T, C, pos ? seg : NULL));
    ZS_CHECK(zs_module_forward_end(b->engine, 0));

    const float *x = NULL;
    zs_stack k = stack_of(m);
    ZS_CHECK(zs_stack_forward(&k, B, T, (size_t)BT * C, &x));

    ZS_CHECK(zs_module_forward_begin(b->engine, uf, &p));
    ZS_CHECK(m->A->norm_fwd(b, p, x, BT));
    if (!b->tied) ZS_CHECK(head_fwd(b, p + b->off_head, BT, loss));
    ZS_CHECK(zs_module_forward_end(b->engine, uf));
    if (b->tied) { /* logits = lnf @ wte^T over the padded vocabulary */
        ZS_CHECK(zs_module_forward_begin(b->engine, 0, &p));
        ZS_CHECK(head_fwd(b, p + b->off_embed, BT, loss));
        ZS_CHECK(zs_module_forward_end(b->engine, 0));
    }
fail:
    return st;
}

/* Whether the logits and the loss's gradient are bf16 (ops.h softmax_xent16): with bf16
 * activations, where the table has the loss with gemm_linear_bwd16 and linear_fwd_bias, and the
 * head's pieces fit. The head's two products round the gradient to bf16 either way; this writes
 * half the bytes, in the GEMM and in the loss, and never rounds them again. */
static int head_bf16(const zs_model_base *b, int BT) {
    int op = 0, np = 0;
    if (!b->act16 || !b->ops->softmax_xent16 || !b->ops->gemm_linear_bwd16 ||
        !b->ops->linear_fwd_bias)
        return 0;
    zs_linear_bwd16_pieces(BT, b->cfg.n_embd, b->cfg.padded_vocab, &op, &np);
    return op > 0 && np > 0;
}

/* The head's backward (weights W, their gradient dW) from the loss's gradient in b->logits,
 * into b->dC. */
static zs_status head_bwd(zs_model_base *b, float *dW, const float *W, int BT) {
    const int C = b->cfg.n_embd, Vp = b->cfg.padded_vocab;
    if (head_bf16(b, BT)) /* bf16 rows of Vp, in place of the bf16 logits */
        return zs_linear_bwd16_set(b->ops, b->s, b->dC, dW, (const zs_bf16 *)b->logits, Vp, b->lnf,
                                   W, BT, C, Vp);
    return zs_linear_bwd_set(b->ops, b->s, b->dC, dW, NULL, b->logits, b->lnf, 0, W, BT, C, Vp);
}

/* Backward from the dlogits that the loss left in b->logits, in the reverse unit order. */
static zs_status model_backward(zs_model_t *m, const int32_t *in, const int32_t *seg, int B,
                                int T) {
    zs_status st = ZS_OK;
    zs_model_base *b = m->b;
    const zs_ops *o = b->ops;
    zs_stream_t *s = b->s;
    const int C = b->cfg.n_embd, BT = B * T, uf = b->cfg.n_layer + 1;
    const int pos = b->off_pos >= 0;
    const size_t nC = (size_t)BT * C;
    float *p = NULL, *g = NULL;
    b->seg = seg; /* the blocks read it; it must be the forward's */

    /* dC: the head's input gradient, from the tied embedding's weights or the separate head's. */
    if (b->tied) {
        ZS_CHECK(zs_module_backward_begin(b->engine, 0, &p, &g));
        ZS_CHECK(head_bwd(b, g + b->off_embed, p + b->off_embed, BT));
        ZS_CHECK(zs_module_backward_end(b->engine, 0));
    }
    zs_stack k = stack_of(m);
    const float *xlast = NULL;
    const zs_bf16 *xlast16 = NULL;
    ZS_CHECK(zs_resid_load_for(&b->resid, o, s, b->cfg.n_layer, nC, k.x16, &xlast, &xlast16));
    ZS_CHECK(o->fill(s, b->dres, 0.0f, nC));
    ZS_CHECK(zs_module_backward_begin(b->engine, uf, &p, &g));
    if (!b->tied) ZS_CHECK(head_bwd(b, g + b->off_head, p + b->off_head, BT));
    ZS_CHECK(m->A->norm_bwd(b, p, g, xlast, xlast16, BT));
    ZS_CHECK(zs_module_backward_end(b->engine, uf));

    ZS_CHECK(zs_stack_backward(&k, B, T, nC));

    ZS_CHECK(zs_module_backward_begin(b->engine, 0, &p, &g));
    ZS_CHECK(o->embedding_bwd(s, g + b->off_embed, pos ? g + b->off_pos : NULL, b->dres, in, B, T,
                              C, pos ? seg : NULL));
    ZS_CHECK(zs_module_backward_end(b->engine, 0));
fail:
    return st;
}

/* Forward, the fused softmax-cross-entropy (dlogits written in place over the logits, both bf16
 * where head_bf16), then backward from them: the same sequence for every architecture. */
zs_status zs_model_forward_backward(zs_model_t *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float dloss, int backward, double *loss_sum) {
    return zs_model_forward_backward_docs(m, inputs, targets, NULL, B, T, dloss, backward,
                                          loss_sum);
}

zs_status zs_model_forward_backward_docs(zs_model_t *m, const int32_t *inputs,
                                         const int32_t *targets, const int32_t *seg, int B, int T,
                                         float dloss, int backward, double *loss_sum) {
    zs_status st = ZS_OK;
    zs_model_base *b = m->b;
    const int BT = B * T;
    ZS_CHECK(model_forward(m, inputs, seg, B, T, 1));
    if (head_bf16(b, BT))
        ZS_CHECK(b->ops->softmax_xent16(b->s, b->losses, (zs_bf16 *)b->logits, targets, BT,
                                        b->cfg.vocab, b->cfg.padded_vocab, dloss, backward));
    else
        ZS_CHECK(b->ops->softmax_xent(b->s, b->losses, backward ? b->logits : NULL, b->logits,
                                      targets, BT, b->cfg.vocab, b->cfg.padded_vocab, dloss));
    ZS_CHECK(b->ops->sum(b->s, loss_sum, b->losses, (size_t)BT));
    if (backward) ZS_CHECK(model_backward(m, inputs, seg, B, T));
fail:
    return st;
}

zs_status zs_model_infer(zs_model_t *m, const int32_t *inputs, int B, int T, const float **logits) {
    zs_status st = ZS_OK;
    ZS_CHECK(model_forward(m, inputs, NULL, B, T, 0));
    *logits = m->b->logits;
fail:
    return st;
}

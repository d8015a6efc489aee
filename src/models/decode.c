/* KV-cache decoding for GPT-2 and LLaMA (models/decode.h). The per-position math is the
 * training forward's, row by row, all through the zs_ops table on the module's device: norms,
 * linears and activations, and decode_attention for RoPE at the row's true position, the cache
 * row and the attention of one query row over the cached keys. Only the token goes to the
 * device and the logits row comes back. Tensors are found by their layout names, so the file
 * knows no model internals. */
#include "models/decode.h"
#include "models/carve.h"

#include "backend/kernels/rope.h"
#include "core/alloc.h"
#include "core/status.h"
#include "shard/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Block tensors in the order of the arrays below; LLaMA has no biases (-1). */
enum { N1W, N1B, QW, QB, KW, VW, OW, OB, N2W, N2B, UPW, UPB, GATEW, DOWNW, DOWNB, NT };

static const char *const gpt2_names[NT] = {"ln_1.weight",
                                           "ln_1.bias",
                                           "attn.c_attn.weight",
                                           "attn.c_attn.bias",
                                           NULL,
                                           NULL,
                                           "attn.c_proj.weight",
                                           "attn.c_proj.bias",
                                           "ln_2.weight",
                                           "ln_2.bias",
                                           "mlp.c_fc.weight",
                                           "mlp.c_fc.bias",
                                           NULL,
                                           "mlp.c_proj.weight",
                                           "mlp.c_proj.bias"};
static const char *const llama_names[NT] = {"input_layernorm.weight",
                                            NULL,
                                            "self_attn.q_proj.weight",
                                            NULL,
                                            "self_attn.k_proj.weight",
                                            "self_attn.v_proj.weight",
                                            "self_attn.o_proj.weight",
                                            NULL,
                                            "post_attention_layernorm.weight",
                                            NULL,
                                            "mlp.up_proj.weight",
                                            NULL,
                                            "mlp.gate_proj.weight",
                                            "mlp.down_proj.weight",
                                            NULL};

struct zs_decoder {
    zs_model_config cfg;
    const zs_ops *o;
    const zs_device *dev;
    zs_stream_t *s;
    zs_module_t *engine;
    const zs_layout *lay;
    zs_decode_params mode;
    int llama, cap, pos, calls;
    int C, hs, QD, KD, F, Vp;
    int64_t toff[NT];                   /* offsets inside a block unit, -1 = absent */
    int u_embed, u_final, u_head;       /* units of the embedding, final norm, output head */
    int *u_layer;                       /* each block's unit */
    int64_t off_wte, off_wpe;           /* in u_embed; wpe -1 for LLaMA */
    int64_t off_nfw, off_nfb, off_head; /* final norm (bias -1 for LLaMA), head in u_head */
    float **resident;                   /* ZS_DECODE_RESIDENT: each unit's full parameters */
    float *kv;                          /* [n_layer][2][cap][KD] */
    float *ws;                          /* the carved rows below */
    float *x, *ln, *stat, *q, *k, *v, *atty, *tmp, *h, *h2, *scores, *logits;
    int32_t *tok;   /* device: the token being embedded */
    float *hlogits; /* host copy of the logits row, for the pick */
    int pending;    /* x already holds pending_token embedded at pos (tied head) */
    int pending_token;
};

static void dims(const zs_model_config *c, int *hs, int *QD, int *KD, int *F) {
    *hs = c->n_embd / c->n_head;
    *QD = c->n_embd;
    *KD = c->arch == ZS_ARCH_LLAMA ? *hs * c->n_kv_head : c->n_embd;
    *F = c->arch == ZS_ARCH_LLAMA ? c->ffn_hidden : 4 * c->n_embd;
}

uint64_t zs_decode_cache_bytes(const zs_model_config *c, int cap) {
    int hs, QD, KD, F;
    dims(c, &hs, &QD, &KD, &F);
    return 2ull * (uint64_t)c->n_layer * (uint64_t)cap * (uint64_t)KD * sizeof(float);
}

/* Carves the workspace rows; with d->ws NULL only counts (the prediction is the carving). */
static uint64_t carve_ws(const zs_model_config *c, int cap, zs_decoder_t *d) {
    int hs, QD, KD, F;
    dims(c, &hs, &QD, &KD, &F);
    uint64_t n = 0, C = (uint64_t)c->n_embd;
    float *b = d->ws;
    d->x = zs_carve(b, &n, C);
    d->ln = zs_carve(b, &n, C);
    d->stat = zs_carve(b, &n, 2);
    d->q = zs_carve(b, &n, (uint64_t)QD + 2 * (uint64_t)KD); /* GPT-2: the packed q|k|v row */
    d->k = d->q ? d->q + QD : NULL;
    d->v = d->q ? d->q + QD + KD : NULL;
    d->atty = zs_carve(b, &n, (uint64_t)QD);
    d->tmp = zs_carve(b, &n, C);
    d->h = zs_carve(b, &n, (uint64_t)F);
    d->h2 = zs_carve(b, &n, (uint64_t)F);
    d->scores = zs_carve(b, &n, (uint64_t)c->n_head * (uint64_t)cap);
    d->logits = zs_carve(b, &n, (uint64_t)c->padded_vocab);
    d->tok = (int32_t *)(void *)zs_carve(b, &n, 1);
    return n * sizeof(float);
}

uint64_t zs_decode_workspace_bytes(const zs_model_config *c, int cap) {
    zs_decoder_t tmp;
    memset(&tmp, 0, sizeof tmp);
    return carve_ws(c, cap, &tmp);
}

uint64_t zs_decode_resident_bytes(const zs_module_t *engine) {
    const zs_layout *l = zs_module_layout(engine);
    uint64_t n = 0;
    for (int u = 0; u < l->n_units; u++)
        n += (uint64_t)l->units[u].used * sizeof(float);
    return n;
}

static zs_status find(const zs_layout *l, const char *name, int optional, int *unit, int64_t *off) {
    int i = zs_layout_find(l, name);
    if (i < 0) {
        *off = -1;
        if (optional) return ZS_OK;
        return zs_error(ZS_ERR_INVALID, "decode: the model has no tensor %s", name);
    }
    if (unit) *unit = l->tensors[i].unit;
    *off = l->tensors[i].offset;
    return ZS_OK;
}

/* Resident when every rank has room: under the cap if one is set, else under a quarter of
 * physical memory divided by the ranks (all ranks of a shm world share one host). */
static zs_status want_resident(zs_decoder_t *d, int *yes) {
    zs_status st = ZS_OK;
    zs_mem_stats ms;
    zs_mem_get_stats(&ms);
    uint64_t need = zs_decode_resident_bytes(d->engine), room;
    if (ms.cap)
        room = ms.cap > ms.total_current ? ms.cap - ms.total_current : 0;
    else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        room = pages > 0 && psz > 0
                   ? (uint64_t)pages * (uint64_t)psz / 4 / (uint64_t)zs_module_world_size(d->engine)
                   : 0;
    }
    double agree = need <= room ? 1.0 : 0.0;
    ZS_CHECK(zs_module_allsum(d->engine, agree, &agree));
    *yes = agree == (double)zs_module_world_size(d->engine);
fail:
    return st;
}

static zs_status gather_all(zs_decoder_t *d) {
    zs_status st = ZS_OK;
    float *host = NULL;
    const zs_layout *l = d->lay;
    d->resident = calloc((size_t)l->n_units, sizeof *d->resident);
    ZS_REQUIRE(d->resident, ZS_ERR_OOM, "decode: out of memory");
    int64_t most = 0;
    for (int u = 0; u < l->n_units; u++) {
        ZS_CHECK(d->dev->alloc(ZS_MEM_GATHERED, (size_t)l->units[u].used * sizeof(float),
                               "decode: the gathered model", (void **)&d->resident[u]));
        if (l->units[u].used > most) most = l->units[u].used;
    }
    /* Each unit's full values through the host, unit by unit. */
    host = malloc((size_t)most * sizeof *host + 1);
    ZS_REQUIRE(host, ZS_ERR_OOM, "decode: out of memory");
    for (int i = 0; i < l->n_tensors; i++) {
        const zs_tensor_desc *t = &l->tensors[i];
        ZS_CHECK(zs_module_get_param(d->engine, t->name, host, (size_t)t->count));
        ZS_CHECK(d->dev->copy_h2d(d->s, d->resident[t->unit] + t->offset, host,
                                  (size_t)t->count * sizeof(float)));
        ZS_CHECK(d->dev->stream_sync(d->s));
    }
fail:
    free(host);
    return st;
}

zs_status zs_decoder_create(const zs_model_config *cfg, const zs_ops *ops, zs_stream_t *s,
                            zs_module_t *engine, int cap, int allow_resident, zs_decoder_t **out) {
    zs_status st = ZS_OK;
    zs_decoder_t *d = NULL;
    char name[ZS_MAX_NAME + 32];
    *out = NULL;
    ZS_REQUIRE(cap >= 1 && cap <= cfg->max_seq, ZS_ERR_INVALID,
               "decode: %d positions asked, the model has %d", cap, cfg->max_seq);
    d = calloc(1, sizeof *d);
    ZS_REQUIRE(d, ZS_ERR_OOM, "decode: out of memory");
    d->cfg = *cfg;
    d->o = ops;
    d->dev = zs_module_dev(engine);
    d->s = s;
    d->engine = engine;
    d->lay = zs_module_layout(engine);
    d->llama = cfg->arch == ZS_ARCH_LLAMA;
    d->cap = cap;
    d->C = cfg->n_embd;
    d->Vp = cfg->padded_vocab;
    dims(cfg, &d->hs, &d->QD, &d->KD, &d->F);
    ZS_REQUIRE(cfg->arch == ZS_ARCH_GPT2 || d->llama, ZS_ERR_UNSUPPORTED,
               "decode: architecture %d has no KV-cache path", (int)cfg->arch);
    ZS_REQUIRE(d->hs / 2 <= 512, ZS_ERR_UNSUPPORTED, "decode: head size %d over 1024", d->hs);

    const zs_layout *l = d->lay;
    const char *const *names = d->llama ? llama_names : gpt2_names;
    const char *pre = d->llama ? "model.layers.0." : "h.0.";
    int u0 = -1;
    for (int i = 0; i < NT; i++) {
        d->toff[i] = -1;
        if (!names[i]) continue;
        snprintf(name, sizeof name, "%s%s", pre, names[i]);
        ZS_CHECK(find(l, name, 0, &u0, &d->toff[i]));
    }
    int u_tmp;
    if (d->llama) {
        ZS_CHECK(find(l, "model.embed_tokens.weight", 0, &d->u_embed, &d->off_wte));
        d->off_wpe = -1;
        ZS_CHECK(find(l, "model.norm.weight", 0, &d->u_final, &d->off_nfw));
        d->off_nfb = -1;
    } else {
        ZS_CHECK(find(l, "wte.weight", 0, &d->u_embed, &d->off_wte));
        ZS_CHECK(find(l, "wpe.weight", 0, &u_tmp, &d->off_wpe));
        ZS_CHECK(find(l, "ln_f.weight", 0, &d->u_final, &d->off_nfw));
        ZS_CHECK(find(l, "ln_f.bias", 0, &u_tmp, &d->off_nfb));
    }
    d->u_layer = malloc((size_t)cfg->n_layer * sizeof *d->u_layer);
    ZS_REQUIRE(d->u_layer, ZS_ERR_OOM, "decode: out of memory");
    for (int i = 0; i < cfg->n_layer; i++) {
        int64_t off;
        snprintf(name, sizeof name, "%s%d.%s", d->llama ? "model.layers." : "h.", i, names[N1W]);
        ZS_CHECK(find(l, name, 0, &d->u_layer[i], &off));
        ZS_REQUIRE(off == d->toff[N1W], ZS_ERR_INTERNAL, "decode: block %d differs from 0", i);
    }
    /* An untied head is lm_head.weight; a tied one reads the token embedding. */
    ZS_CHECK(find(l, "lm_head.weight", 1, &d->u_head, &d->off_head));
    if (d->off_head < 0) {
        d->u_head = d->u_embed;
        d->off_head = d->off_wte;
    }

    ZS_CHECK(d->dev->alloc(ZS_MEM_ACTIVATION, zs_decode_cache_bytes(cfg, cap), "decode: KV cache",
                           (void **)&d->kv));
    ZS_CHECK(d->dev->alloc(ZS_MEM_WORKSPACE, zs_decode_workspace_bytes(cfg, cap),
                           "decode: one-position workspace", (void **)&d->ws));
    carve_ws(cfg, cap, d);
    d->hlogits = malloc((size_t)d->Vp * sizeof *d->hlogits);
    ZS_REQUIRE(d->hlogits, ZS_ERR_OOM, "decode: out of memory");
    d->mode = ZS_DECODE_PERSISTENT;
    if (zs_module_stage(engine) == ZS_STAGE_3) {
        int yes = 0;
        if (allow_resident) ZS_CHECK(want_resident(d, &yes));
        d->mode = yes ? ZS_DECODE_RESIDENT : ZS_DECODE_PER_UNIT;
        if (yes) ZS_CHECK(gather_all(d));
    }
    *out = d;
    return ZS_OK;
fail:
    zs_decoder_destroy(d);
    return st;
}

void zs_decoder_destroy(zs_decoder_t *d) {
    if (!d) return;
    if (d->s) d->dev->stream_sync(d->s);
    if (d->resident)
        for (int u = 0; u < d->lay->n_units; u++)
            d->dev->free(d->resident[u]);
    free(d->resident);
    free(d->u_layer);
    if (d->dev) {
        d->dev->free(d->kv);
        d->dev->free(d->ws);
    }
    free(d->hlogits);
    free(d);
}

zs_decode_params zs_decoder_mode(const zs_decoder_t *d) {
    return d->mode;
}
int zs_decoder_pos(const zs_decoder_t *d) {
    return d->pos;
}
void zs_decoder_reset(zs_decoder_t *d) {
    d->pos = 0;
    d->calls = 0;
    d->pending = 0;
}

static zs_status acquire(zs_decoder_t *d, int unit, float **p) {
    if (d->resident) {
        *p = d->resident[unit];
        return ZS_OK;
    }
    return zs_module_forward_begin(d->engine, unit, p);
}

static zs_status release(zs_decoder_t *d, int unit) {
    return d->resident ? ZS_OK : zs_module_forward_end(d->engine, unit);
}

/* x = the embedding of the token in d->tok (device) plus its position's (GPT-2). */
static zs_status embed_dev(zs_decoder_t *d, const float *p, int pos) {
    const float *wpe = d->off_wpe >= 0 ? p + d->off_wpe + (int64_t)pos * d->C : NULL;
    return d->o->embedding_fwd(d->s, d->x, d->tok, p + d->off_wte, wpe, 1, 1, d->C, NULL);
}

/* The same for a token the host holds: it goes to the device first. */
static zs_status embed(zs_decoder_t *d, const float *p, int token, int pos) {
    zs_status st = ZS_OK;
    int32_t tk = token;
    ZS_CHECK(d->dev->copy_h2d(d->s, d->tok, &tk, sizeof tk));
    ZS_CHECK(embed_dev(d, p, pos));
fail:
    return st;
}

static zs_status norm(zs_decoder_t *d, float *out, const float *x, const float *w, const float *b) {
    if (d->llama) return d->o->rmsnorm_fwd(d->s, out, d->stat, x, w, 1, d->C, d->cfg.norm_eps);
    return d->o->layernorm_fwd(d->s, out, d->stat, d->stat + 1, x, w, b, 1, d->C);
}

static zs_status block(zs_decoder_t *d, const float *p, int l) {
    zs_status st = ZS_OK;
    const zs_ops *o = d->o;
    zs_stream_t *s = d->s;
    const int C = d->C, QD = d->QD, KD = d->KD, F = d->F, pos = d->pos;
    const int64_t *t = d->toff;
#define B_(i) (t[i] >= 0 ? p + t[i] : NULL)
    ZS_CHECK(norm(d, d->ln, d->x, p + t[N1W], B_(N1B)));
    if (d->llama) {
        ZS_CHECK(zs_linear_fwd(o, s, d->q, d->ln, 0, p + t[QW], NULL, 1, C, QD));
        ZS_CHECK(zs_linear_fwd(o, s, d->k, d->ln, 0, p + t[KW], NULL, 1, C, KD));
        ZS_CHECK(zs_linear_fwd(o, s, d->v, d->ln, 0, p + t[VW], NULL, 1, C, KD));
    } else { /* q | k | v in one row, as c_attn packs them */
        ZS_CHECK(zs_linear_fwd(o, s, d->q, d->ln, 0, p + t[QW], p + t[QB], 1, C, 3 * C));
    }
    float *kc = d->kv + (size_t)l * 2 * d->cap * KD, *vc = kc + (size_t)d->cap * KD;
    ZS_CHECK(o->decode_attention(s, d->atty, d->q, d->k, d->v, kc, vc, d->scores, d->cfg.n_head,
                                 KD / d->hs, d->hs, pos, d->llama ? d->cfg.rope_theta : 0.0f));
    ZS_CHECK(zs_linear_fwd(o, s, d->tmp, d->atty, 0, p + t[OW], B_(OB), 1, QD, C));
    ZS_CHECK(o->residual_fwd(s, d->x, d->x, d->tmp, (size_t)C));
    ZS_CHECK(norm(d, d->ln, d->x, p + t[N2W], B_(N2B)));
    ZS_CHECK(zs_linear_fwd(o, s, d->h, d->ln, 0, p + t[UPW], B_(UPB), 1, C, F));
    if (d->llama) {
        ZS_CHECK(zs_linear_fwd(o, s, d->h2, d->ln, 0, p + t[GATEW], NULL, 1, C, F));
        ZS_CHECK(o->swiglu_fwd(s, d->h, d->h2, d->h, (size_t)F));
    } else {
        ZS_CHECK(o->gelu_fwd(s, d->h, d->h, (size_t)F));
    }
    ZS_CHECK(zs_linear_fwd(o, s, d->tmp, d->h, 0, p + t[DOWNW], B_(DOWNB), 1, F, C));
    ZS_CHECK(o->residual_fwd(s, d->x, d->x, d->tmp, (size_t)C));
#undef B_
fail:
    return st;
}

/* The next token after the logits row: the host's pick on a copy of it, or (pick NULL) the
 * device's draw (ops->sample into d->tok), of which only the token comes back. */
static zs_status choose(zs_decoder_t *d, zs_decode_pick pick, void *ctx, const zs_decode_draw *dr,
                        int *next) {
    zs_status st = ZS_OK;
    if (pick) {
        ZS_CHECK(d->dev->copy_d2h(d->s, d->hlogits, d->logits, (size_t)d->Vp * sizeof(float)));
        ZS_CHECK(d->dev->stream_sync(d->s));
        *next = pick(ctx, d->hlogits, d->calls++);
        return ZS_OK;
    }
    int32_t tk = 0;
    ZS_CHECK(
        d->o->sample(d->s, d->tok, d->logits, d->cfg.vocab, dr->temperature, dr->seed, dr->index));
    ZS_CHECK(d->dev->copy_d2h(d->s, &tk, d->tok, sizeof tk));
    ZS_CHECK(d->dev->stream_sync(d->s));
    d->calls++;
    *next = tk;
fail:
    return st;
}

static zs_status step(zs_decoder_t *d, int token, zs_decode_pick pick, void *ctx,
                      const zs_decode_draw *dr, int *next) {
    zs_status st = ZS_OK;
    float *p = NULL;
    int held = -1;
    ZS_REQUIRE(d->pos < d->cap, ZS_ERR_INVALID, "decode: the cache's %d positions are full",
               d->cap);
    ZS_REQUIRE(token >= 0 && token < d->cfg.vocab, ZS_ERR_INVALID,
               "decode: token %d is outside the vocabulary of %d", token, d->cfg.vocab);
    if (!d->pending || d->pending_token != token) {
        ZS_CHECK(acquire(d, held = d->u_embed, &p));
        ZS_CHECK(embed(d, p, token, d->pos));
        ZS_CHECK(release(d, held));
        held = -1;
    }
    d->pending = 0;
    for (int l = 0; l < d->cfg.n_layer; l++) {
        ZS_CHECK(acquire(d, held = d->u_layer[l], &p));
        ZS_CHECK(block(d, p, l));
        ZS_CHECK(release(d, held));
        held = -1;
    }
    /* Final norm, head, the pick, and (tied head) the next token's embedding, each unit
     * acquired once. */
    ZS_CHECK(acquire(d, held = d->u_final, &p));
    ZS_CHECK(norm(d, d->ln, d->x, p + d->off_nfw, d->off_nfb >= 0 ? p + d->off_nfb : NULL));
    if (d->u_head != d->u_final) {
        ZS_CHECK(release(d, held));
        ZS_CHECK(acquire(d, held = d->u_head, &p));
    }
    ZS_CHECK(zs_linear_fwd(d->o, d->s, d->logits, d->ln, 0, p + d->off_head, NULL, 1, d->C, d->Vp));
    ZS_CHECK(choose(d, pick, ctx, dr, next));
    d->pos++;
    if (d->u_head == d->u_embed && d->pos < d->cap && *next >= 0 && *next < d->cfg.vocab) {
        /* A drawn token is in d->tok already; a picked one goes there. */
        ZS_CHECK(pick ? embed(d, p, *next, d->pos) : embed_dev(d, p, d->pos));
        d->pending = 1;
        d->pending_token = *next;
    }
    ZS_CHECK(release(d, held));
    held = -1;
fail:
    if (held >= 0) release(d, held);
    return st;
}

zs_status zs_decoder_step(zs_decoder_t *d, int token, zs_decode_pick pick, void *ctx, int *next) {
    if (!pick) return zs_error(ZS_ERR_INVALID, "decode: a step needs a pick");
    return step(d, token, pick, ctx, NULL, next);
}

zs_status zs_decoder_step_draw(zs_decoder_t *d, int token, const zs_decode_draw *draw, int *next) {
    if (!draw) return zs_error(ZS_ERR_INVALID, "decode: a draw needs its settings");
    return step(d, token, NULL, NULL, draw, next);
}

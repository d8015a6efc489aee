/* Generation from the trainer's model: temperature, top-k and top-p (nucleus) sampling over
 * the real vocabulary, a seed that fixes the output, a stop token and a time budget (what
 * keeps `train`'s end-of-run sample to a few percent of the run). Each token is one step of the
 * KV-cache decoder (models/decode.h) on the run's device, or with --no-cache a recomputed
 * window. Plain temperature sampling draws on the device (cuRAND's Philox on a GPU). */
#include "zshard.h"

#include "core/philox.h"
#include "core/status.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "models/decode.h"
#include "shard/engine.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_GENERATE 0x67656e65ull /* "gene" */

zs_gen_config zs_gen_config_default(void) {
    zs_gen_config c = {.max_tokens = 200,
                       .temperature = 0.8f,
                       .top_k = 0,
                       .top_p = 1.0f,
                       .seed = 1337,
                       .eos = -1,
                       .max_seconds = 0.0};
    return c;
}

typedef struct cand {
    float logit;
    int id;
} cand;

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* ties: the lower id first, so the order is total */
}

static int argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* One draw: sort by logit, cut to top-k, softmax at the temperature, cut to top-p, then
 * invert the CDF at a Philox uniform. */
static int draw(const float *logits, int V, const zs_gen_config *g, uint64_t idx, cand *c) {
    if (g->temperature <= 0.0f) return argmax(logits, V);
    for (int i = 0; i < V; i++)
        c[i] = (cand){logits[i], i};
    qsort(c, (size_t)V, sizeof *c, by_logit_desc);
    int n = g->top_k > 0 && g->top_k < V ? g->top_k : V;
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp(((double)c[i].logit - c[0].logit) / g->temperature);
    if (g->top_p > 0.0f && g->top_p < 1.0f) {
        double acc = 0.0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += exp(((double)c[i].logit - c[0].logit) / g->temperature) / sum;
            if (acc >= g->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += exp(((double)c[i].logit - c[0].logit) / g->temperature);
    }
    double u = (double)(zs_philox_u64(g->seed, STREAM_GENERATE, idx) >> 11) * 0x1p-53 * sum;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)c[i].logit - c[0].logit) / g->temperature);
        if (u < acc) return c[i].id;
    }
    return c[n - 1].id;
}

/* Plain temperature sampling (or greedy) draws on the device (ops->sample: cuRAND's Philox on a
 * GPU, the same numbers on the CPU), and only the token comes back; top-k and top-p sort the
 * logits on the host. */
static int on_device(const zs_gen_config *g) {
    return g->top_k <= 0 && !(g->top_p > 0.0f && g->top_p < 1.0f);
}

/* The cached path's token source: prompt tokens while the cache is (re)filled, then draws. */
typedef struct picker {
    const zs_gen_config *g;
    cand *c;
    int V;
    const int32_t *feed; /* tokens being fed, feed[0] already passed to the step */
    int nf, fi;          /* how many, and the index of the one last passed */
    int drawn;           /* 1: the last pick was a draw, not a fed token */
    int index;           /* the draw's index in the output (its Philox counter) */
} picker;

static int pick_next(void *ctx, const float *logits, int call) {
    picker *k = ctx;
    (void)call;
    if (k->fi + 1 < k->nf) {
        k->drawn = 0;
        return k->feed[++k->fi];
    }
    k->drawn = 1;
    return draw(logits, k->V, k->g, (uint64_t)k->index, k->c);
}

static void format_info(zs_trainer_t *t, const zs_decoder_t *d, int cap) {
    char kv[32], ws[32], res[32], how[128];
    zs_format_bytes(zs_decode_cache_bytes(&t->model_cfg, cap), kv, sizeof kv);
    zs_format_bytes(zs_decode_workspace_bytes(&t->model_cfg, cap), ws, sizeof ws);
    zs_format_bytes(zs_decode_resident_bytes(t->engine), res, sizeof res);
    if (zs_decoder_mode(d) == ZS_DECODE_RESIDENT)
        snprintf(how, sizeof how, "ZeRO-3: the whole model gathered once (%s, fits)", res);
    else if (zs_decoder_mode(d) == ZS_DECODE_PER_UNIT)
        snprintf(how, sizeof how,
                 "ZeRO-3: each unit gathered once per token (the model's %s "
                 "does not fit)",
                 res);
    else
        snprintf(how, sizeof how, "parameters resident on every rank");
    snprintf(t->gen_info, sizeof t->gen_info, "KV cache %s for %d positions + %s workspace; %s", kv,
             cap, ws, how);
}

/* Converts the time budget into a token count after the first drawn token: the prefill is
 * paid once, each later token costs about what the first step did. Ranks average their
 * counts so all stop after the same token (every step is collective). */
static zs_status budget(zs_trainer_t *t, const zs_gen_config *g, double t0, double step_s,
                        int *limit) {
    zs_status st = ZS_OK;
    double left = g->max_seconds - (zs_now_s() - t0);
    double allowed = 1.0 + (left > 0 ? left / (step_s + 1e-9) : 0.0);
    if (t->world > 1) ZS_CHECK(zs_module_allsum(t->engine, allowed, &allowed));
    allowed /= t->world;
    *limit = allowed < 1.0 ? 1 : allowed > g->max_tokens ? g->max_tokens : (int)allowed;
fail:
    return st;
}

static zs_status generate_cached(zs_trainer_t *t, const zs_gen_config *g, int32_t *ctx, int n,
                                 cand *c, int32_t *out, int *n_out) {
    zs_status st = ZS_OK;
    const int cap = t->cfg.seq;
    zs_decoder_t *d = NULL;
    ZS_CHECK(zs_decoder_create(&t->model_cfg, t->ops, t->stream, t->engine, cap, 1, &d));
    format_info(t, d, cap);
    picker k = {.g = g, .c = c, .V = t->model_cfg.vocab};
    int limit = g->max_tokens, keep = n < cap ? n : cap, cur;
    k.feed = ctx + n - keep;
    k.nf = keep;
    cur = k.feed[0];
    double t0 = zs_now_s();
    while (*n_out < limit) {
        if (zs_decoder_pos(d) == cap) {
            /* Full: feed the last half again (positions restart at 0) and go on. */
            zs_decoder_reset(d);
            keep = cap / 2 > 0 ? cap / 2 : 1;
            k.feed = ctx + n - keep;
            k.nf = keep;
            k.fi = 0;
            cur = k.feed[0];
        }
        double ts = zs_now_s();
        int next = 0;
        k.index = *n_out;
        if (on_device(g) && k.fi + 1 >= k.nf) { /* a draw, on the device */
            zs_decode_draw dr = {g->temperature, g->seed, (uint64_t)k.index};
            ZS_CHECK(zs_decoder_step_draw(d, cur, &dr, &next));
            k.drawn = 1;
        } else {
            ZS_CHECK(zs_decoder_step(d, cur, pick_next, &k, &next));
        }
        cur = next;
        if (!k.drawn) continue;
        ctx[n++] = next;
        out[(*n_out)++] = next;
        if (next == g->eos) break;
        if (*n_out == 1 && g->max_seconds > 0) ZS_CHECK(budget(t, g, t0, zs_now_s() - ts, &limit));
    }
fail:
    zs_decoder_destroy(d);
    return st;
}

static zs_status generate_window(zs_trainer_t *t, const zs_gen_config *g, int32_t *ctx, int n,
                                 cand *c, int32_t *out, int *n_out) {
    zs_status st = ZS_OK;
    const int T = t->cfg.seq, V = t->model_cfg.vocab, Vp = t->model_cfg.padded_vocab;
    double t0 = zs_now_s();
    int limit = g->max_tokens;
    float *row = malloc((size_t)Vp * sizeof *row);
    ZS_REQUIRE(row, ZS_ERR_OOM, "generate: out of memory");
    for (int i = 0; i < g->max_tokens; i++) {
        int win = n < T ? n : T;
        const float *logits = NULL;
        int32_t *in = NULL, *unused = NULL;
        double ts = zs_now_s();
        ZS_CHECK(zs_trainer_io_next(t, &in, &unused));
        memcpy(in, ctx + n - win, (size_t)win * sizeof *in);
        ZS_CHECK(zs_trainer_io_upload(t, 1, win, 0));
        ZS_CHECK(zs_model_infer(t->model, t->d_in, 1, win, &logits));
        int next = 0;
        if (on_device(g)) { /* the draw on the device, into the targets' buffer */
            int32_t tk = 0;
            ZS_CHECK(t->ops->sample(t->stream, t->d_tg, logits + (size_t)(win - 1) * Vp, V,
                                    g->temperature, g->seed, (uint64_t)i));
            ZS_CHECK(t->dev->copy_d2h(t->stream, &tk, t->d_tg, sizeof tk));
            ZS_CHECK(t->dev->stream_sync(t->stream));
            next = tk;
        } else { /* the last position's logits come back for the draw */
            ZS_CHECK(t->dev->copy_d2h(t->stream, row, logits + (size_t)(win - 1) * Vp,
                                      (size_t)Vp * sizeof *row));
            ZS_CHECK(t->dev->stream_sync(t->stream));
            next = draw(row, V, g, (uint64_t)i, c);
        }
        ctx[n++] = next;
        out[(*n_out)++] = next;
        if (next == g->eos) break;
        if (i == 0 && g->max_seconds > 0) ZS_CHECK(budget(t, g, t0, zs_now_s() - ts, &limit));
        if (*n_out >= limit) break;
    }
fail:
    free(row);
    return st;
}

zs_status zs_trainer_generate(zs_trainer_t *t, const zs_gen_config *g, const int32_t *prompt,
                              int n_prompt, int32_t *out, int cap, int *n_out) {
    zs_status st = ZS_OK;
    const int V = t->model_cfg.vocab;
    int32_t *ctx = NULL;
    cand *c = NULL;
    *n_out = 0;
    ZS_REQUIRE(n_prompt >= 1, ZS_ERR_INVALID, "the prompt is empty: give at least one token");
    ZS_REQUIRE(g->max_tokens >= 0 && cap >= g->max_tokens, ZS_ERR_INVALID,
               "generate: %d tokens asked, room for %d", g->max_tokens, cap);
    ZS_REQUIRE(g->top_k >= 0 && g->top_p > 0.0f && isfinite(g->temperature), ZS_ERR_INVALID,
               "generate: top-k must be >= 0 and top-p > 0");
    for (int i = 0; i < n_prompt; i++)
        ZS_REQUIRE(prompt[i] >= 0 && prompt[i] < V, ZS_ERR_INVALID,
                   "generate: prompt token %d = %d is outside the vocabulary of %d", i, prompt[i],
                   V);
    ctx = malloc((size_t)(n_prompt + g->max_tokens) * sizeof *ctx);
    c = malloc((size_t)V * sizeof *c);
    ZS_REQUIRE(ctx && c, ZS_ERR_OOM, "generate: out of memory");
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    if (g->max_tokens == 0) goto fail;
    if (!g->no_cache) {
        ZS_CHECK(generate_cached(t, g, ctx, n_prompt, c, out, n_out));
    } else {
        snprintf(t->gen_info, sizeof t->gen_info,
                 "no KV cache (asked): the window is recomputed for every token");
        ZS_CHECK(generate_window(t, g, ctx, n_prompt, c, out, n_out));
    }
fail:
    free(ctx);
    free(c);
    return st;
}

const char *zs_trainer_generate_info(const zs_trainer_t *t) {
    return t->gen_info;
}

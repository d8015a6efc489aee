/* Generation from the trainer's model: temperature, top-k and top-p (nucleus) sampling over
 * the real vocabulary, a seed that fixes the output, a stop token and a time budget (what
 * keeps `train`'s end-of-run sample to a few percent of the run). */
#include "zshard.h"

#include "core/philox.h"
#include "core/status.h"
#include "core/timer.h"
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

zs_status zs_trainer_generate(zs_trainer_t *t, const zs_gen_config *g, const int32_t *prompt,
                              int n_prompt, int32_t *out, int cap, int *n_out) {
    zs_status st = ZS_OK;
    const int T = t->cfg.seq, V = t->model_cfg.vocab, Vp = t->model_cfg.padded_vocab;
    int32_t *ctx = NULL;
    cand *c = NULL;
    *n_out = 0;
    ZS_REQUIRE(n_prompt >= 1, ZS_ERR_INVALID, "generate: the prompt is empty");
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
    int n = n_prompt;
    double t0 = zs_now_s();
    int limit = g->max_tokens;
    for (int i = 0; i < g->max_tokens; i++) {
        int win = n < T ? n : T;
        const float *logits = NULL;
        ZS_CHECK(zs_model_infer(t->model, ctx + n - win, 1, win, &logits));
        int next = draw(logits + (size_t)(win - 1) * Vp, V, g, (uint64_t)i, c);
        ctx[n++] = next;
        out[(*n_out)++] = next;
        if (next == g->eos) break;
        /* The time budget becomes a token count measured on the first token; ranks average
         * theirs so that all stop after the same token (the forwards are collective). */
        if (i == 0 && g->max_seconds > 0) {
            double allowed = g->max_seconds / (zs_now_s() - t0 + 1e-9);
            if (t->world > 1) ZS_CHECK(zs_module_allsum(t->engine, allowed, &allowed));
            allowed /= t->world;
            limit = allowed < 1.0 ? 1 : allowed > g->max_tokens ? g->max_tokens : (int)allowed;
        }
        if (*n_out >= limit) break;
    }
fail:
    free(ctx);
    free(c);
    return st;
}

/* The KV-cache decoder (models/decode.h): greedy output with the cache equals the windowed,
 * uncached forward token for token for GPT-2 and LLaMA (grouped-query), at DDP and ZeRO-3
 * (whole model gathered once, and each unit gathered once per token under a memory cap),
 * and on 2 ranks with ZeRO-3 through the CLI; the cache's accounted bytes equal the
 * prediction the banner and estimator use. */
#include "core/status.h"
#include "models/decode.h"
#include "testutil.h"
#include "train/trainer_internal.h"
#include "zshard.h"

#include <stdlib.h>
#include <limits.h>
#include <string.h>

static char g_out[1 << 16];

/* Matrices at std 0.3 instead of the init's 0.02: attention is then far from uniform, so a
 * wrong position or a wrong cached key changes the tokens and the logits (with the init's
 * weights every score is near zero and almost any attention gives the same argmax). */
static zs_status sharpen(zs_trainer_t *t) {
    zs_status st = ZS_OK;
    float *v = NULL;
    for (int i = 0; i < zs_module_num_tensors(t->engine); i++) {
        zs_tensor_info ti;
        ZS_CHECK(zs_module_tensor_at(t->engine, i, &ti));
        if (ti.ndim != 2) continue;
        v = zt_malloc((size_t)ti.count * sizeof *v);
        zt_fill_normal(v, (size_t)ti.count, 0.3f);
        ZS_CHECK(zs_module_set_param(t->engine, ti.name, v, (size_t)ti.count));
        free(v);
        v = NULL;
    }
fail:
    free(v);
    return st;
}

static zs_trainer_t *make(const char *preset, int vocab, zs_stage stage, zs_tie tie) {
    zs_train_config cfg = zs_train_config_default();
    zs_trainer_t *t = NULL;
    if (zs_model_preset(preset, &cfg.model) != ZS_OK) return NULL;
    zs_model_config_set_vocab(&cfg.model, vocab);
    cfg.model.tie_embeddings = tie;
    cfg.module.stage = stage;
    cfg.batch = 1;
    cfg.seq = 64;
    cfg.data_path = NULL;
    cfg.module.seed = 7;
    if (zs_trainer_create(&cfg, &t) != ZS_OK) return NULL;
    if (sharpen(t) != ZS_OK) {
        zs_trainer_destroy(t);
        return NULL;
    }
    return t;
}

/* n greedy tokens after a fixed prompt, cached or not; 0 on success. */
static int greedy(zs_trainer_t *t, int no_cache, int32_t *out, int n) {
    const int32_t prompt[] = {3, 17, 42, 5, 99};
    zs_gen_config g = zs_gen_config_default();
    g.temperature = 0.0f;
    g.max_tokens = n;
    g.no_cache = no_cache;
    int got = 0;
    for (int i = 0; i < n; i++)
        out[i] = -1;
    if (zs_trainer_generate(t, &g, prompt, 5, out, n, &got) != ZS_OK || got != n) return 1;
    return 0;
}

static int mismatch(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* Accounted bytes of the decoder equal zs_decode_cache_bytes / zs_decode_workspace_bytes
 * (and the resident copy zs_decode_resident_bytes), and all are released by destroy. */
static void check_bytes(zs_trainer_t *t, const char *what) {
    zs_mem_stats a, b, c;
    zs_decoder_t *d = NULL;
    zs_mem_get_stats(&a);
    ZT_OK(zs_decoder_create(&t->model_cfg, t->ops, t->stream, t->engine, 48, 1, &d));
    zs_mem_get_stats(&b);
    uint64_t kv = zs_decode_cache_bytes(&t->model_cfg, 48);
    uint64_t ws = zs_decode_workspace_bytes(&t->model_cfg, 48);
    uint64_t res =
        zs_decoder_mode(d) == ZS_DECODE_RESIDENT ? zs_decode_resident_bytes(t->engine) : 0;
    ZT_CHECK(b.current[ZS_MEM_ACTIVATION] - a.current[ZS_MEM_ACTIVATION] == kv,
             "%s: KV cache accounted %llu, predicted %llu", what,
             (unsigned long long)(b.current[ZS_MEM_ACTIVATION] - a.current[ZS_MEM_ACTIVATION]),
             (unsigned long long)kv);
    ZT_CHECK(b.current[ZS_MEM_WORKSPACE] - a.current[ZS_MEM_WORKSPACE] == ws,
             "%s: workspace accounted %llu, predicted %llu", what,
             (unsigned long long)(b.current[ZS_MEM_WORKSPACE] - a.current[ZS_MEM_WORKSPACE]),
             (unsigned long long)ws);
    ZT_CHECK(b.current[ZS_MEM_GATHERED] - a.current[ZS_MEM_GATHERED] == res,
             "%s: resident model accounted %llu, predicted %llu", what,
             (unsigned long long)(b.current[ZS_MEM_GATHERED] - a.current[ZS_MEM_GATHERED]),
             (unsigned long long)res);
    const zs_model_config *m = &t->model_cfg;
    int hs = m->n_embd / m->n_head;
    int kvw = m->arch == ZS_ARCH_LLAMA ? m->n_kv_head * hs : m->n_embd;
    ZT_CHECK(kv == 2ull * m->n_layer * 48 * kvw * sizeof(float), "%s: KV bytes %llu", what,
             (unsigned long long)kv);
    zs_decoder_destroy(d);
    zs_mem_get_stats(&c);
    ZT_CHECK(c.total_current == a.total_current, "%s: destroy left %lld bytes", what,
             (long long)(c.total_current - a.total_current));
}

typedef struct feeder {
    const int32_t *tokens;
    float *logits; /* [n, Vp]: each step's logits */
    int Vp;
} feeder;

static int pick_feed(void *ctx, const float *logits, int index) {
    feeder *f = ctx;
    memcpy(f->logits + (size_t)index * f->Vp, logits, (size_t)f->Vp * sizeof *logits);
    return f->tokens[index + 1];
}

/* Logits of every position, one cached step at a time, against the full forward over the
 * same 40 tokens. Tolerance 1e-4 of max(1, |logit|): the same fp32 math summed in another
 * order (one-row GEMMs and the loop attention vs the flash kernel). */
static void check_logits(zs_trainer_t *t, const char *what) {
    enum { N = 40 };
    const int Vp = t->model_cfg.padded_vocab, V = t->model_cfg.vocab;
    int32_t tok[N + 1];
    for (int i = 0; i <= N; i++)
        tok[i] = (int32_t)zt_uniform(0, V - 1);
    float *mine = zt_malloc((size_t)N * Vp * sizeof *mine);
    zt_poison(mine, (size_t)N * Vp);
    feeder f = {tok, mine, Vp};
    zs_decoder_t *d = NULL;
    ZT_OK(zs_decoder_create(&t->model_cfg, t->ops, t->stream, t->engine, 64, 1, &d));
    for (int i = 0; i < N; i++) {
        int next = -1;
        ZT_OK(zs_decoder_step(d, tok[i], pick_feed, &f, &next));
    }
    zs_decoder_destroy(d);
    const float *ref = NULL;
    ZT_OK(zs_model_infer(t->model, tok, 1, N, &ref));
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double e = zt_max_err_ff(mine + (size_t)i * Vp, ref + (size_t)i * Vp, (size_t)V);
        worst = e > worst ? e : worst;
    }
    ZT_CHECK(worst < 1e-4, "%s: cached logits differ from the full forward by %g", what, worst);
    free(mine);
}

static int pick_argmax(void *ctx, const float *logits, int index) {
    const int V = *(const int *)ctx;
    int best = 0;
    (void)index;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* ZeRO-3 per unit: under a cap that leaves no room for the whole model, each token gathers
 * every unit exactly once (GPT-2's tied embedding included: the head's gather also embeds the
 * next token). */
static void check_per_unit(zs_trainer_t *t, const char *what) {
    zs_mem_stats a;
    zs_decoder_t *d = NULL;
    zs_mem_get_stats(&a);
    uint64_t need = zs_decode_cache_bytes(&t->model_cfg, 32) +
                    zs_decode_workspace_bytes(&t->model_cfg, 32) + (1u << 16);
    zs_mem_set_cap(a.total_current + need);
    zs_status st = zs_decoder_create(&t->model_cfg, t->ops, t->stream, t->engine, 32, 1, &d);
    ZT_REQUIRE(st == ZS_OK, "%s: create under the cap: %s", what, zs_last_error());
    ZT_CHECK(zs_decoder_mode(d) == ZS_DECODE_PER_UNIT, "%s: mode %d, expected per unit", what,
             (int)zs_decoder_mode(d));
    int V = t->model_cfg.vocab, tok = 1, next = 0;
    ZT_OK(zs_decoder_step(d, tok, pick_argmax, &V, &next)); /* first step: + the embedding */
    uint64_t g0 = zs_module_param_gathers(t->engine);
    for (int i = 0; i < 10; i++) {
        tok = next;
        ZT_OK(zs_decoder_step(d, tok, pick_argmax, &V, &next));
    }
    uint64_t per = (zs_module_param_gathers(t->engine) - g0) / 10;
    int units = zs_module_num_units(t->engine);
    ZT_CHECK(per == (uint64_t)units && (zs_module_param_gathers(t->engine) - g0) % 10 == 0,
             "%s: %llu gathers per token, %d units", what,
             (unsigned long long)(zs_module_param_gathers(t->engine) - g0) / 10, units);
    zs_decoder_destroy(d);
    zs_mem_set_cap(0);
}

static void check_model(const char *preset, zs_stage stage, zs_tie tie) {
    char what[64];
    snprintf(what, sizeof what, "%s stage %d tie %d", preset, (int)stage, (int)tie);
    zs_trainer_t *t = make(preset, 256, stage, tie);
    ZT_REQUIRE(t, "%s: trainer: %s", what, zs_last_error());
    enum { N = 50 }; /* 5 + 50 positions: inside the 64-position window */
    int32_t cached[N], plain[N];
    ZT_CHECK(greedy(t, 0, cached, N) == 0, "%s: cached generate: %s", what, zs_last_error());
    ZT_CHECK(strstr(zs_trainer_generate_info(t), "KV cache") != NULL, "%s: info '%s'", what,
             zs_trainer_generate_info(t));
    ZT_CHECK(greedy(t, 1, plain, N) == 0, "%s: uncached generate: %s", what, zs_last_error());
    int at = mismatch(cached, plain, N);
    ZT_CHECK(at < 0, "%s: greedy tokens differ at %d: cached %d, uncached %d", what, at,
             at < 0 ? 0 : cached[at], at < 0 ? 0 : plain[at]);
    check_bytes(t, what);
    check_logits(t, what);
    if (stage == ZS_STAGE_3) {
        check_per_unit(t, what);
        /* And the full generator under that cap: the same tokens. */
        zs_mem_stats a;
        zs_mem_get_stats(&a);
        zs_mem_set_cap(a.total_current + zs_decode_cache_bytes(&t->model_cfg, 64) +
                       zs_decode_workspace_bytes(&t->model_cfg, 64) + (1u << 16));
        ZT_CHECK(greedy(t, 0, cached, N) == 0, "%s: capped: %s", what, zs_last_error());
        zs_mem_set_cap(0);
        ZT_CHECK(strstr(zs_trainer_generate_info(t), "once per token") != NULL,
                 "%s: capped info '%s'", what, zs_trainer_generate_info(t));
        at = mismatch(cached, plain, N);
        ZT_CHECK(at < 0, "%s: per-unit greedy differs at %d", what, at);
    }
    zs_trainer_destroy(t);
}

/* 2 ranks, ZeRO-3, through the CLI: the same greedy text as one rank without the cache (the
 * launcher prefixes rank 0's lines with "[0] "). */
static void check_two_ranks(void) {
    char dir[] = "/tmp/zshard-test-decode-XXXXXX", cmd[16384], exe[PATH_MAX];
    ZT_REQUIRE(mkdtemp(dir), "mkdtemp");
    ZT_REQUIRE(realpath(zt_zshard_exe(), exe), "no zshard executable at %s", zt_zshard_exe());
    snprintf(cmd, sizeof cmd,
             "cd %s && python3 -c \"import random; random.seed(3); w='the cat sat on a mat and "
             "ran'.split(); open('c.txt','w').write(' '.join(random.choice(w) for _ in "
             "range(20000)))\" && %s train --model gpt2-tiny --data c.txt --steps 20 --batch 4 "
             "--seq 64 --quiet --save-dir ck",
             dir, exe);
    ZT_REQUIRE(zt_run(cmd, g_out, sizeof g_out) == 0, "train: %s", g_out);
    static const char *const runs[2] = {"--no-cache", "--nproc 2 --stage 3"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && %s generate ck --prompt 'the cat' --temperature 0 --max-tokens 50 "
                 "--seq 64 %s > out%d.txt",
                 dir, exe, runs[i], i);
        ZT_REQUIRE(zt_run(cmd, g_out, sizeof g_out) == 0, "generate %s: %s", runs[i], g_out);
    }
    /* zt_run sends stderr to stdout too: drop the banner lines, keep them for the check. */
    snprintf(cmd, sizeof cmd,
             "cd %s && grep -v 'zshard generate:' out0.txt > a && sed 's/^\\[0\\] //' "
             "out1.txt | grep -v 'zshard generate:' > b && test -s a && cmp a b && grep "
             "'whole model gathered once' out1.txt",
             dir);
    ZT_CHECK(zt_run(cmd, g_out, sizeof g_out) == 0, "2 ranks ZeRO-3 cached != 1 rank uncached: %s",
             g_out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    zt_run(cmd, g_out, sizeof g_out);
}

int main(void) {
    zt_init("decode");
    check_model("gpt2-tiny", ZS_STAGE_DDP, ZS_TIE_ARCH);
    check_model("llama-tiny", ZS_STAGE_DDP, ZS_TIE_ARCH);
    check_model("gpt2-tiny", ZS_STAGE_3, ZS_TIE_ARCH);
    check_model("llama-tiny", ZS_STAGE_3, ZS_TIE_ARCH);
    /* The other head of each: untied GPT-2 (lm_head in the final unit), tied LLaMA (the head
     * reads the embed unit). */
    check_model("gpt2-tiny", ZS_STAGE_3, ZS_TIE_OFF);
    check_model("llama-tiny", ZS_STAGE_3, ZS_TIE_ON);
    check_two_ranks();
    return zt_finish();
}

/* Model presets and config helpers: the released GPT-2 shapes, LLaMA shapes (TinyLlama,
 * LLaMA-2-7B) and tiny ones for tests; a name ending in .json is a model config file. */
#include "models/model.h"

#include "core/status.h"
#include "models/arch.h"

#include <stdio.h>
#include <string.h>

typedef struct preset {
    const char *name;
    int n_layer, n_head, n_embd, max_seq;
} preset;

static const preset g_presets[] = {
    {"gpt2-tiny", 2, 4, 64, 256},    /* tests: seconds on one core */
    {"gpt2-mini", 4, 4, 128, 256},   /* the README demo */
    {"gpt2-small6", 6, 6, 192, 256}, /* a slightly larger quick model */
    {"gpt2-124m", 12, 12, 768, 1024},  {"gpt2-355m", 24, 16, 1024, 1024},
    {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1558m", 48, 25, 1600, 1024},
};

typedef struct llama_preset {
    const char *name;
    int n_layer, n_head, n_kv_head, n_embd, ffn_hidden, max_seq;
} llama_preset;

/* rope_theta 10000 and norm_eps 1e-5 for all of them. */
static const llama_preset g_llama_presets[] = {
    {"llama-tiny", 2, 4, 2, 64, 176, 256},       /* tests: grouped-query, seconds on one core */
    {"llama-mini", 4, 4, 2, 256, 704, 2048},     /* long sequences on a CPU: 2048 positions */
    {"llama-60m", 8, 8, 8, 512, 1376, 1024},     /* GaLore's LLaMA-60M shape */
    {"llama-1b", 22, 32, 4, 2048, 5632, 2048},   /* TinyLlama-1.1B */
    {"llama-7b", 32, 32, 32, 4096, 11008, 4096}, /* LLaMA-2-7B */
};

const char *zs_model_preset_names(void) {
    return "gpt2-tiny, gpt2-mini, gpt2-small6, gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1558m, "
           "llama-tiny, llama-mini, llama-60m, llama-1b, llama-7b, or a config file NAME.json";
}

void zs_model_config_set_vocab(zs_model_config *cfg, int vocab) {
    cfg->vocab = vocab;
    /* A multiple of 64 keeps the output-head GEMM on BLAS's fast, aligned path. */
    cfg->padded_vocab = (vocab + 63) / 64 * 64;
}

zs_status zs_model_preset(const char *name, zs_model_config *cfg) {
    size_t len = strlen(name);
    if (len > 5 && !strcmp(name + len - 5, ".json")) return zs_model_config_load(name, cfg);
    for (size_t i = 0; i < sizeof g_llama_presets / sizeof *g_llama_presets; i++) {
        const llama_preset *p = &g_llama_presets[i];
        if (strcmp(p->name, name)) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = ZS_ARCH_LLAMA;
        cfg->n_layer = p->n_layer;
        cfg->n_head = p->n_head;
        cfg->n_kv_head = p->n_kv_head;
        cfg->n_embd = p->n_embd;
        cfg->ffn_hidden = p->ffn_hidden;
        cfg->max_seq = p->max_seq;
        cfg->rope_theta = 10000.0f;
        cfg->norm_eps = 1e-5f;
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        zs_model_config_set_vocab(cfg, 256);
        return ZS_OK;
    }
    for (size_t i = 0; i < sizeof g_presets / sizeof *g_presets; i++) {
        const preset *p = &g_presets[i];
        if (strcmp(p->name, name)) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = ZS_ARCH_GPT2;
        cfg->n_layer = p->n_layer;
        cfg->n_head = p->n_head;
        cfg->n_embd = p->n_embd;
        cfg->max_seq = p->max_seq;
        cfg->n_kv_head = p->n_head;
        cfg->ffn_hidden = 4 * p->n_embd;
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        zs_model_config_set_vocab(cfg, 256);
        return ZS_OK;
    }
    return zs_error(ZS_ERR_INVALID, "unknown model '%s' (known: %s)", name,
                    zs_model_preset_names());
}

int zs_model_tied(const zs_model_config *c) {
    if (c->tie_embeddings == ZS_TIE_ON) return 1;
    if (c->tie_embeddings == ZS_TIE_OFF) return 0;
    return c->arch == ZS_ARCH_GPT2; /* GPT-2 as released ties its head; LLaMA does not */
}

zs_status zs_model_config_validate(const zs_model_config *c) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(c->tie_embeddings == ZS_TIE_ARCH || c->tie_embeddings == ZS_TIE_ON ||
                   c->tie_embeddings == ZS_TIE_OFF,
               ZS_ERR_INVALID, "model %s: tie_embeddings %d is not 0 (default), 1 (on) or 2 (off)",
               c->name, (int)c->tie_embeddings);
    ZS_REQUIRE(c->n_layer > 0 && c->n_head > 0 && c->n_embd > 0 && c->max_seq > 0, ZS_ERR_INVALID,
               "model %s: layers, heads, width and positions must be positive", c->name);
    ZS_REQUIRE(c->n_embd % c->n_head == 0, ZS_ERR_INVALID,
               "model %s: %d heads do not divide width %d", c->name, c->n_head, c->n_embd);
    ZS_REQUIRE(c->vocab > 0 && c->padded_vocab >= c->vocab, ZS_ERR_INVALID,
               "model %s: vocabulary size %d is not set", c->name, c->vocab);
    if (c->arch == ZS_ARCH_LLAMA) {
        ZS_REQUIRE(c->n_kv_head > 0 && c->n_head % c->n_kv_head == 0, ZS_ERR_INVALID,
                   "model %s: %d key/value heads do not divide %d heads", c->name, c->n_kv_head,
                   c->n_head);
        ZS_REQUIRE((c->n_embd / c->n_head) % 2 == 0 && c->n_embd / c->n_head <= 1024,
                   ZS_ERR_INVALID,
                   "model %s: head size %d must be even and at most 1024 (rotary pairs)", c->name,
                   c->n_embd / c->n_head);
        ZS_REQUIRE(c->ffn_hidden > 0, ZS_ERR_INVALID, "model %s: ffn_hidden must be positive",
                   c->name);
        ZS_REQUIRE(c->rope_theta > 0.0f && c->norm_eps > 0.0f, ZS_ERR_INVALID,
                   "model %s: rope_theta and norm_eps must be positive", c->name);
    } else {
        ZS_REQUIRE(c->arch == ZS_ARCH_GPT2, ZS_ERR_INVALID, "model %s: unknown architecture %d",
                   c->name, (int)c->arch);
    }
fail:
    return st;
}

int64_t zs_model_num_params(const zs_model_config *c) {
    if (c->arch == ZS_ARCH_LLAMA) return zs_llama_num_params(c);
    int64_t C = c->n_embd, L = c->n_layer;
    int64_t block =
        2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    int64_t heads = zs_model_tied(c) ? 1 : 2;
    return heads * c->padded_vocab * C + (int64_t)c->max_seq * C + L * block + 2 * C;
}

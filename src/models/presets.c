/* Model presets and config helpers: the released GPT-2 shapes plus tiny ones for tests. */
#include "models/model.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

typedef struct preset {
    const char *name;
    int n_layer, n_head, n_embd, max_seq;
} preset;

static const preset g_presets[] = {
    {"gpt2-tiny", 2, 4, 64, 256},     /* tests: seconds on one core */
    {"gpt2-mini", 4, 4, 128, 256},    /* quick demo runs */
    {"gpt2-small6", 6, 6, 192, 256},  /* the README's main job */
    {"gpt2-124m", 12, 12, 768, 1024},
    {"gpt2-355m", 24, 16, 1024, 1024},
    {"gpt2-774m", 36, 20, 1280, 1024},
    {"gpt2-1558m", 48, 25, 1600, 1024},
};

const char *zs_model_preset_names(void) {
    return "gpt2-tiny, gpt2-mini, gpt2-small6, gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1558m";
}

void zs_model_config_set_vocab(zs_model_config *cfg, int vocab) {
    cfg->vocab = vocab;
    /* A multiple of 64 keeps the output-head GEMM on BLAS's fast, aligned path. */
    cfg->padded_vocab = (vocab + 63) / 64 * 64;
}

zs_status zs_model_preset(const char *name, zs_model_config *cfg) {
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

zs_status zs_model_config_validate(const zs_model_config *c) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(c->n_layer > 0 && c->n_head > 0 && c->n_embd > 0 && c->max_seq > 0,
               ZS_ERR_INVALID, "model %s: layers, heads, width and positions must be positive",
               c->name);
    ZS_REQUIRE(c->n_embd % c->n_head == 0, ZS_ERR_INVALID,
               "model %s: %d heads do not divide width %d", c->name, c->n_head, c->n_embd);
    ZS_REQUIRE(c->vocab > 0 && c->padded_vocab >= c->vocab, ZS_ERR_INVALID,
               "model %s: vocabulary size %d is not set", c->name, c->vocab);
fail:
    return st;
}

int64_t zs_model_num_params(const zs_model_config *c) {
    int64_t C = c->n_embd, L = c->n_layer;
    int64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                    4 * C * C + C;
    return (int64_t)c->padded_vocab * C + (int64_t)c->max_seq * C + L * block + 2 * C;
}

/* The generic model interface: dispatch on the architecture. Each model keeps its own
 * state behind an opaque pointer; nothing outside src/models knows which one runs. */
#include "models/model.h"

#include "core/status.h"
#include "models/gpt2.h"
#include "models/llama.h"

#include <stdlib.h>

struct zs_model {
    zs_arch arch;
    void *impl;
};

zs_status zs_model_layout(const zs_model_config *cfg, int world_size, zs_layout *out) {
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_layout(cfg, world_size, out);
    case ZS_ARCH_LLAMA:
        return zs_llama_layout(cfg, world_size, out);
    default:
        break;
    }
    zs_layout_init(out);
    return zs_error(ZS_ERR_UNSUPPORTED, "model %s: architecture %d is not built in", cfg->name,
                    (int)cfg->arch);
}

zs_status zs_model_create(const zs_model_config *cfg, const zs_ops *ops, zs_stream_t *s,
                          zs_engine_t *engine, int max_batch, int max_seq, zs_model_t **out) {
    return zs_model_create_opts(cfg, NULL, ops, s, engine, max_batch, max_seq, out);
}

zs_status zs_model_create_opts(const zs_model_config *cfg, const zs_model_options *opts,
                               const zs_ops *ops, zs_stream_t *s, zs_engine_t *engine,
                               int max_batch, int max_seq, zs_model_t **out) {
    zs_status st = ZS_OK;
    zs_model_t *m = NULL;
    zs_model_options defaults = {0};
    if (!opts) opts = &defaults;
    *out = NULL;
    m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "model: out of memory");
    m->arch = cfg->arch;
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        ZS_CHECK(
            zs_gpt2_create(cfg, opts, ops, s, engine, max_batch, max_seq, (zs_gpt2_t **)&m->impl));
        break;
    case ZS_ARCH_LLAMA:
        ZS_CHECK(zs_llama_create(cfg, opts, ops, s, engine, max_batch, max_seq,
                                 (zs_llama_t **)&m->impl));
        break;
    default:
        ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED, "model %s: architecture %d is not built in", cfg->name,
                   (int)cfg->arch);
    }
    *out = m;
    return ZS_OK;
fail:
    free(m);
    return st;
}

void zs_model_destroy(zs_model_t *m) {
    if (!m) return;
    switch (m->arch) {
    case ZS_ARCH_GPT2:
        zs_gpt2_destroy(m->impl);
        break;
    case ZS_ARCH_LLAMA:
        zs_llama_destroy(m->impl);
        break;
    default:
        break;
    }
    free(m);
}

zs_status zs_model_forward_backward(zs_model_t *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float dloss, int backward, double *loss_sum) {
    switch (m->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_forward_backward(m->impl, inputs, targets, B, T, dloss, backward, loss_sum);
    case ZS_ARCH_LLAMA:
        return zs_llama_forward_backward(m->impl, inputs, targets, B, T, dloss, backward, loss_sum);
    default:
        break;
    }
    return zs_error(ZS_ERR_INTERNAL, "model: unknown architecture");
}

zs_status zs_model_infer(zs_model_t *m, const int32_t *inputs, int B, int T, const float **logits) {
    switch (m->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_infer(m->impl, inputs, B, T, logits);
    case ZS_ARCH_LLAMA:
        return zs_llama_infer(m->impl, inputs, B, T, logits);
    default:
        break;
    }
    return zs_error(ZS_ERR_INTERNAL, "model: unknown architecture");
}

uint64_t zs_model_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T) {
    zs_model_options defaults = {0};
    if (!opts) opts = &defaults;
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_activation_bytes(cfg, opts, B, T);
    case ZS_ARCH_LLAMA:
        return zs_llama_activation_bytes(cfg, opts, B, T);
    default:
        break;
    }
    return 0;
}

uint64_t zs_model_workspace_bytes(const zs_model_config *cfg, int B, int T) {
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_workspace_bytes(cfg, B, T);
    case ZS_ARCH_LLAMA:
        return zs_llama_workspace_bytes(cfg, B, T);
    default:
        break;
    }
    return 0;
}

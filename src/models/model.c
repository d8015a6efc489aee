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
    const zs_ops *ops;
    zs_stream_t *s;
    int vocab, padded_vocab, max_B, max_T;
    float *logits; /* the architecture's [B*T, padded_vocab] buffer */
    float *losses; /* its per-token losses */
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
                          zs_module_t *engine, int max_batch, int max_seq, zs_model_t **out) {
    return zs_model_create_opts(cfg, NULL, ops, s, engine, max_batch, max_seq, out);
}

zs_status zs_model_create_opts(const zs_model_config *cfg, const zs_model_options *opts,
                               const zs_ops *ops, zs_stream_t *s, zs_module_t *engine,
                               int max_batch, int max_seq, zs_model_t **out) {
    zs_status st = ZS_OK;
    zs_model_t *m = NULL;
    zs_model_options defaults = {0};
    if (!opts) opts = &defaults;
    *out = NULL;
    /* Checked once here for every architecture; their create functions trust these. */
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
    m = calloc(1, sizeof *m);
    ZS_REQUIRE(m, ZS_ERR_OOM, "model: out of memory");
    m->arch = cfg->arch;
    m->ops = ops;
    m->s = s;
    m->vocab = cfg->vocab;
    m->padded_vocab = cfg->padded_vocab;
    m->max_B = max_batch;
    m->max_T = max_seq;
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        ZS_CHECK(
            zs_gpt2_create(cfg, opts, ops, s, engine, max_batch, max_seq, (zs_gpt2_t **)&m->impl));
        zs_gpt2_outputs(m->impl, &m->logits, &m->losses);
        break;
    case ZS_ARCH_LLAMA:
        ZS_CHECK(zs_llama_create(cfg, opts, ops, s, engine, max_batch, max_seq,
                                 (zs_llama_t **)&m->impl));
        zs_llama_outputs(m->impl, &m->logits, &m->losses);
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

static zs_status arch_forward(zs_model_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
        return zs_error(ZS_ERR_INTERNAL, "model: batch %dx%d exceeds allocated %dx%d", B, T,
                        m->max_B, m->max_T);
    switch (m->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_forward(m->impl, in, seg, B, T);
    case ZS_ARCH_LLAMA:
        return zs_llama_forward(m->impl, in, seg, B, T);
    default:
        break;
    }
    return zs_error(ZS_ERR_INTERNAL, "model: unknown architecture");
}

static zs_status arch_backward(zs_model_t *m, const int32_t *in, const int32_t *seg, int B, int T) {
    switch (m->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_backward(m->impl, in, seg, B, T);
    case ZS_ARCH_LLAMA:
        return zs_llama_backward(m->impl, in, seg, B, T);
    default:
        break;
    }
    return zs_error(ZS_ERR_INTERNAL, "model: unknown architecture");
}

/* Forward, the fused softmax-cross-entropy (dlogits written in place over the logits), then
 * backward from them: the same sequence for every architecture. */
zs_status zs_model_forward_backward(zs_model_t *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float dloss, int backward, double *loss_sum) {
    return zs_model_forward_backward_docs(m, inputs, targets, NULL, B, T, dloss, backward,
                                          loss_sum);
}

zs_status zs_model_forward_backward_docs(zs_model_t *m, const int32_t *inputs,
                                         const int32_t *targets, const int32_t *seg, int B, int T,
                                         float dloss, int backward, double *loss_sum) {
    zs_status st = ZS_OK;
    const int BT = B * T;
    ZS_CHECK(arch_forward(m, inputs, seg, B, T));
    ZS_CHECK(m->ops->softmax_xent(m->s, m->losses, backward ? m->logits : NULL, m->logits, targets,
                                  BT, m->vocab, m->padded_vocab, dloss));
    ZS_CHECK(m->ops->sum(m->s, loss_sum, m->losses, (size_t)BT));
    if (backward) ZS_CHECK(arch_backward(m, inputs, seg, B, T));
fail:
    return st;
}

zs_status zs_model_infer(zs_model_t *m, const int32_t *inputs, int B, int T, const float **logits) {
    zs_status st = ZS_OK;
    ZS_CHECK(arch_forward(m, inputs, NULL, B, T));
    *logits = m->logits;
fail:
    return st;
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

uint64_t zs_model_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T) {
    zs_model_options defaults = {0};
    if (!opts) opts = &defaults;
    switch (cfg->arch) {
    case ZS_ARCH_GPT2:
        return zs_gpt2_workspace_bytes(cfg, opts, B, T);
    case ZS_ARCH_LLAMA:
        return zs_llama_workspace_bytes(cfg, opts, B, T);
    default:
        break;
    }
    return 0;
}

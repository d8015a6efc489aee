/* LLaMA behind the generic model interface of model.h (which dispatches on cfg->arch). */
#ifndef ZS_MODELS_LLAMA_H
#define ZS_MODELS_LLAMA_H

#include "models/model.h"

typedef struct zs_llama zs_llama_t;

zs_status zs_llama_layout(const zs_model_config *cfg, int world_size, zs_layout *out);
zs_status zs_llama_create(const zs_model_config *cfg, const zs_model_options *opts,
                          const zs_ops *ops, zs_stream_t *s, zs_engine_t *engine, int max_batch,
                          int max_seq, zs_llama_t **out);
void zs_llama_destroy(zs_llama_t *m);
zs_status zs_llama_forward_backward(zs_llama_t *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float dloss, int backward, double *loss_sum);
zs_status zs_llama_infer(zs_llama_t *m, const int32_t *inputs, int B, int T, const float **logits);
uint64_t zs_llama_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T);
uint64_t zs_llama_workspace_bytes(const zs_model_config *cfg, int B, int T);
/* Real (padded-vocabulary) parameter count of the layout, without building it. */
int64_t zs_llama_num_params(const zs_model_config *cfg);

#endif

/* LLaMA behind the generic model interface of model.h (which dispatches on cfg->arch). */
#ifndef ZS_MODELS_LLAMA_H
#define ZS_MODELS_LLAMA_H

#include "models/model.h"

typedef struct zs_llama zs_llama_t;

zs_status zs_llama_layout(const zs_model_config *cfg, int world_size, zs_layout *out);
/* Called through zs_model_create_opts, which validates cfg, sizes and opts. */
zs_status zs_llama_create(const zs_model_config *cfg, const zs_model_options *opts,
                          const zs_ops *ops, zs_stream_t *s, zs_module_t *engine, int max_batch,
                          int max_seq, zs_llama_t **out);
void zs_llama_destroy(zs_llama_t *m);
/* Forward over inputs[B*T] into the logits buffer; backward from the dlogits that
 * zs_model_forward_backward leaves in that same buffer. B, T within the allocated sizes. seg:
 * the document starts of the tokens (backend/ops.h "Documents"), or NULL; backward must get
 * the forward's. */
zs_status zs_llama_forward(zs_llama_t *m, const int32_t *inputs, const int32_t *seg, int B, int T);
zs_status zs_llama_backward(zs_llama_t *m, const int32_t *inputs, const int32_t *seg, int B, int T);
/* The [B*T, padded_vocab] logits buffer (dlogits in place after the loss) and losses[B*T]. */
void zs_llama_outputs(zs_llama_t *m, float **logits, float **losses);
uint64_t zs_llama_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T);
uint64_t zs_llama_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T);
/* Real (padded-vocabulary) parameter count of the layout, without building it. */
int64_t zs_llama_num_params(const zs_model_config *cfg);

#endif

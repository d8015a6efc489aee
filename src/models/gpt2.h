/* GPT-2 behind the generic model interface of model.h (which dispatches on cfg->arch). */
#ifndef ZS_MODELS_GPT2_H
#define ZS_MODELS_GPT2_H

#include "models/model.h"

typedef struct zs_gpt2 zs_gpt2_t;

zs_status zs_gpt2_layout(const zs_model_config *cfg, int world_size, zs_layout *out);
/* Called through zs_model_create_opts, which validates cfg, sizes and opts. */
zs_status zs_gpt2_create(const zs_model_config *cfg, const zs_model_options *opts,
                         const zs_ops *ops, zs_stream_t *s, zs_module_t *engine, int max_batch,
                         int max_seq, zs_gpt2_t **out);
void zs_gpt2_destroy(zs_gpt2_t *m);
/* Forward over inputs[B*T] into the logits buffer; backward from the dlogits that
 * zs_model_forward_backward leaves in that same buffer. B, T within the allocated sizes. seg:
 * the document starts of the tokens (backend/ops.h "Documents"), or NULL; backward must get
 * the forward's. */
zs_status zs_gpt2_forward(zs_gpt2_t *m, const int32_t *inputs, const int32_t *seg, int B, int T);
zs_status zs_gpt2_backward(zs_gpt2_t *m, const int32_t *inputs, const int32_t *seg, int B, int T);
/* The [B*T, padded_vocab] logits buffer (dlogits in place after the loss) and losses[B*T]. */
void zs_gpt2_outputs(zs_gpt2_t *m, float **logits, float **losses);
uint64_t zs_gpt2_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T);
uint64_t zs_gpt2_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                 int T);

#endif

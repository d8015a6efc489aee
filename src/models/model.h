/* Model interface used by the trainer: a model declares its unit layout and runs forward and
 * backward over a zs_ops table, acquiring each unit through the shard engine. It never calls
 * comm and never knows the stage. */
#ifndef ZS_MODELS_MODEL_H
#define ZS_MODELS_MODEL_H

#include "backend/ops.h"
#include "shard/module.h"
#include "shard/layout.h"

typedef struct zs_model zs_model_t;

/* Validate a config (sizes positive, heads divide width, vocab set). */
zs_status zs_model_config_validate(const zs_model_config *cfg);

/* The unit layout of cfg for world_size ranks (zs_layout_finalize already applied). */
zs_status zs_model_layout(const zs_model_config *cfg, int world_size, zs_layout *out);

/* How a model keeps its activations. All-zero = keep everything (no recompute). */
typedef struct zs_model_options {
    zs_recompute recompute; /* BLOCK: keep each block's input, recompute it in backward */
    zs_dtype act_dtype;     /* kept residual stream between blocks: F32 or BF16 (models/stack.h) */
    zs_attention attention; /* FLASH: lse[B,NH,T] per layer; NAIVE: att[B,NH,T,T] */
} zs_model_options;

/* Activation and scratch buffers for micro-batches of up to max_batch x max_seq tokens. */
zs_status zs_model_create(const zs_model_config *cfg, const zs_ops *ops, zs_stream_t *s,
                          zs_module_t *engine, int max_batch, int max_seq, zs_model_t **out);
/* The same with options (NULL = defaults). */
zs_status zs_model_create_opts(const zs_model_config *cfg, const zs_model_options *opts,
                               const zs_ops *ops, zs_stream_t *s, zs_module_t *engine,
                               int max_batch, int max_seq, zs_model_t **out);
void zs_model_destroy(zs_model_t *m);

/* Forward over inputs[B*T] with next-token targets[B*T] (device memory of the module's device);
 * *loss_sum (device memory) receives the sum of the per-token losses in stream order (the `sum`
 * op's fixed order). With backward != 0 it also runs backward, accumulating into the engine's
 * gradients the gradient of dloss * loss_sum (dloss = 1/(tokens in the global batch) makes
 * the summed gradients the global mean). On the CPU, device memory is host memory. */
zs_status zs_model_forward_backward(zs_model_t *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float dloss, int backward, double *loss_sum);
/* The same over documents (docs/data.md): seg[B*T] (device memory) holds each token's document
 * start in its row (backend/ops.h "Documents"): attention stays inside a document and positions
 * restart at each start. Targets of -1 (padding, a target in the next document) add nothing to
 * the loss sum or the gradients. seg NULL is zs_model_forward_backward. */
zs_status zs_model_forward_backward_docs(zs_model_t *m, const int32_t *inputs,
                                         const int32_t *targets, const int32_t *seg, int B, int T,
                                         float dloss, int backward, double *loss_sum);

/* Forward only (inputs in device memory); *logits points at [B*T, padded_vocab] logits in device
 * memory, complete in stream order, valid until the next call. */
zs_status zs_model_infer(zs_model_t *m, const int32_t *inputs, int B, int T, const float **logits);

/* A linear layer of the model, N = B*T rows (backend/ops.h zs_linear_fwd), run `count` times
 * a step (each block's once a layer); in16: its input is one that bf16 activations store in
 * bf16 (a norm's, GELU's or SwiGLU's output, read by GEMMs only); dout16: the output head,
 * whose gradient a table with softmax_xent16 leaves in bf16 (zs_linear_bwd16_set); g16: its
 * output gradient is stored in bf16 by its producer with bf16 activations (LLaMA's gate and
 * up: swiglu_bwd16; q and k: rope_bwd16; GPT-2's c_attn with flash attention's bf16 gradients;
 * zs_linear_bwd_g16), or ZS_LINEAR_G16_FIT: in bf16 where the layer's operands and its
 * mirror's (OC -> IC) fit the GEMM scratch together (zs_linear_bwd16_ok), else fp32: GPT-2's
 * fc, whose gradient c_proj's input-gradient GEMM writes through the GELU (backend/ops.h
 * gemm_linear_bwd_dgelu). What the CUDA bf16 table does; the estimator counts the scratch for
 * it only. */
#define ZS_LINEAR_G16_FIT 2
typedef struct zs_linear_dims {
    int IC, OC, count, in16, dout16, g16;
} zs_linear_dims;
#define ZS_MODEL_MAX_LINEARS 8
/* The shapes of the linear layers one training step runs with opts (NULL = defaults): the
 * blocks', then the output head. Returns how many (at most ZS_MODEL_MAX_LINEARS), 0 for an
 * unknown architecture. */
int zs_model_linears(const zs_model_config *cfg, const zs_model_options *opts, zs_linear_dims *out);

/* Activation bytes the model allocates for (B, T) with opts (NULL = defaults): used by the
 * memory estimator. */
uint64_t zs_model_activation_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                   int T);
/* Workspace bytes (logits, activation gradients) for (B, T) with opts (NULL = defaults). */
uint64_t zs_model_workspace_bytes(const zs_model_config *cfg, const zs_model_options *opts, int B,
                                  int T);
/* Doubles of a GPU stream's reduction scratch the model's ops ask for at `rows` rows (B T):
 * GPT-2's layer norm backward keeps its column partials there (kernels/layernorm.h); 0 where
 * no op of the model uses it. */
uint64_t zs_model_gpu_scratch_doubles(const zs_model_config *cfg, int rows);

#endif

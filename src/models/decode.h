/* Incremental decoding with a KV cache for GPT-2 and LLaMA: each new token is one forward over
 * one position, attending to the keys and values every earlier position left in the cache.
 * Parameters come through the module API only (zs_module_forward_begin/end), so it works at
 * every stage; under ZeRO-3 each unit is gathered once per token, or the whole model once
 * when it fits (see zs_decoder_create). Everything runs on the module's device through its ops
 * table; the token goes there and the logits row comes back each step. */
#ifndef ZS_MODELS_DECODE_H
#define ZS_MODELS_DECODE_H

#include "backend/ops.h"
#include "shard/module.h"

typedef struct zs_decoder zs_decoder_t;

/* Bytes of the K/V cache for `cap` positions (ZS_MEM_ACTIVATION): 2 * n_layer * cap * kv
 * width floats, kv width = n_embd for GPT-2 and n_kv_head * head size for LLaMA. */
uint64_t zs_decode_cache_bytes(const zs_model_config *cfg, int cap);
/* Bytes of the one-position workspace (ZS_MEM_WORKSPACE): the residual row, normed row,
 * projections, MLP row, attention scores over cap positions and the logits row. */
uint64_t zs_decode_workspace_bytes(const zs_model_config *cfg, int cap);
/* Bytes the whole model takes when gathered once (ZS_MEM_GATHERED): every unit's used
 * elements in fp32. */
uint64_t zs_decode_resident_bytes(const zs_module_t *engine);

/* How the decoder gets its parameters each token. */
typedef enum zs_decode_params {
    ZS_DECODE_PERSISTENT = 0, /* DDP, ZeRO-1/2: full parameters live on every rank */
    ZS_DECODE_PER_UNIT,       /* ZeRO-3: each unit gathered once per token */
    ZS_DECODE_RESIDENT,       /* ZeRO-3: the whole model gathered once, at create */
} zs_decode_params;

/* A decoder of at most cap positions (cap <= cfg->max_seq) over engine's parameters, which
 * must have cfg's layout. allow_resident: under ZeRO-3, gather the whole model once when
 * zs_decode_resident_bytes fits under the memory cap (or, without a cap, under a quarter of
 * physical memory per rank); otherwise gather per unit. Collective (the resident gather).
 * ops and s must be the module's (zs_module_ops, zs_module_stream). */
zs_status zs_decoder_create(const zs_model_config *cfg, const zs_ops *ops, zs_stream_t *s,
                            zs_module_t *engine, int cap, int allow_resident, zs_decoder_t **out);
void zs_decoder_destroy(zs_decoder_t *d); /* NULL accepted; not collective */

zs_decode_params zs_decoder_mode(const zs_decoder_t *d);
int zs_decoder_pos(const zs_decoder_t *d); /* positions in the cache */
/* Forget every cached position (the next token goes to position 0). */
void zs_decoder_reset(zs_decoder_t *d);

/* Chooses the token after a position from its logits[padded_vocab]; index counts the calls
 * since the last reset. Must return the same token on every rank. */
typedef int (*zs_decode_pick)(void *ctx, const float *logits, int index);

/* Feed `token` at position zs_decoder_pos (which must be < cap), then call pick on the
 * logits of the next position; *next receives its choice. The pick runs while the head unit
 * is held, so GPT-2's tied embedding embeds the chosen token for the following step in the
 * same gather (the next step's `token` must then be *next). Collective. */
zs_status zs_decoder_step(zs_decoder_t *d, int token, zs_decode_pick pick, void *ctx, int *next);

/* A draw on the device (ops->sample): temperature <= 0 is the argmax, else cuRAND's Philox
 * uniform for (seed, index) picks from the softmax; only the chosen token comes back. */
typedef struct zs_decode_draw {
    float temperature;
    uint64_t seed, index;
} zs_decode_draw;

/* zs_decoder_step with the next token drawn on the device instead of picked on the host. */
zs_status zs_decoder_step_draw(zs_decoder_t *d, int token, const zs_decode_draw *draw, int *next);

#endif

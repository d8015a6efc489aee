/* Whole-model checks shared by test_model.c (GPT-2) and test_llama.c (LLaMA): each builds the
 * model on a world-of-one engine over the CPU ops with random tokens, and both architectures
 * must pass them the same way. */
#ifndef ZS_MODELTEST_H
#define ZS_MODELTEST_H

#include "models/model.h"
#include "testutil.h"

/* Layout invariants of cfg at world size `world` that both architectures share: n_layer + 2
 * units, every parameter counted, units padded to a multiple of world x ZS_LAYOUT_ALIGN and
 * split into equal shards, tensors aligned. */
void mt_check_layout(const zs_model_config *cfg, const zs_layout *l, int world);
/* The mean loss per token of a freshly initialised model (seed) on a random B x T batch. */
double mt_init_loss(zs_model_config cfg, int B, int T, uint64_t seed);
/* Every tensor's gradient (up to 12 sampled elements each) against central finite
 * differences of the mean loss, after enlarging the weights; fails a check per tensor whose
 * relative error is 2% or more. */
void mt_check_gradients(zs_model_config cfg, int B, int T, uint64_t seed);
/* Two models built alike give the same loss, grad norm and param hash bitwise. */
void mt_check_repeatable(zs_model_config cfg, int B, int T, uint64_t seed);

#endif

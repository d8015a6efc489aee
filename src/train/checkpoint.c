/* Trainer <-> checkpoint glue (DESIGN.md §9): the trainer's record (model config, training
 * settings) around the module's collective save and load (src/shard/module_ckpt.c), which
 * write and read every rank's shards at any world size and stage. */
#include "zshard.h"

#include "ckpt/ckpt.h"
#include "core/status.h"
#include "optim/optim.h"
#include "shard/module.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <string.h>

static void fill_info(const zs_trainer_t *t, zs_ckpt_info *in) {
    const zs_train_config *c = &t->cfg;
    memset(in, 0, sizeof *in);
    in->model = t->model_cfg;
    in->world_size = t->world;
    in->stage = c->stage;
    in->step = t->step;
    in->seed = c->seed;
    in->data_position = t->step;
    in->batch = c->batch;
    in->seq = c->seq;
    in->grad_accum = c->grad_accum;
    in->warmup = c->warmup;
    in->total_steps = c->steps;
    in->lr = c->lr;
    in->min_lr_frac = c->min_lr_frac;
    in->next_lr = zs_lr_schedule(t->step + 1, c->steps, c->warmup, c->lr, c->min_lr_frac);
    in->beta1 = c->beta1;
    in->beta2 = c->beta2;
    in->eps = c->eps;
    in->weight_decay = c->weight_decay;
    in->grad_clip = c->grad_clip;
    in->level = ZS_CKPT_LEVEL;
    in->block_elems = ZS_CKPT_BLOCK_ELEMS;
    snprintf(in->source, sizeof in->source, "train");
}

/* The checkpoint must describe this run's model: same config, hence the same layout. */
static zs_status check_model(const zs_manifest *m, const char *dir, void *ctx) {
    zs_status st = ZS_OK;
    const zs_trainer_t *t = ctx;
    const zs_model_config *a = &m->info.model, *b = &t->model_cfg;
    ZS_REQUIRE(a->arch == b->arch && a->n_layer == b->n_layer && a->n_head == b->n_head &&
                   a->n_embd == b->n_embd && a->max_seq == b->max_seq && a->vocab == b->vocab &&
                   a->n_kv_head == b->n_kv_head && a->ffn_hidden == b->ffn_hidden &&
                   a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps,
               ZS_ERR_INVALID,
               "checkpoint %s: %s: its model layout disagrees with the model flags: it holds %s "
               "(%s, %d layers, %d heads, width %d, mlp %d, %d positions, vocab %d), this run is "
               "%s (%s, %d layers, %d heads, width %d, mlp %d, %d positions, vocab %d from the "
               "data)",
               dir, ZS_CKPT_MANIFEST, a->name, zs_ckpt_arch_name(a->arch), a->n_layer, a->n_head,
               a->n_embd, a->ffn_hidden, a->max_seq, a->vocab, b->name, zs_ckpt_arch_name(b->arch),
               b->n_layer, b->n_head, b->n_embd, b->ffn_hidden, b->max_seq, b->vocab);
fail:
    return st;
}

zs_status zs_trainer_save(zs_trainer_t *t, const char *save_dir, int keep) {
    zs_ckpt_info info;
    fill_info(t, &info);
    return zs_module_save_info(t->engine, save_dir, keep, &info);
}

zs_status zs_trainer_resume(zs_trainer_t *t, const char *path) {
    zs_status st = zs_module_load(t->engine, path, check_model, t);
    if (st == ZS_OK) t->step = zs_module_steps_done(t->engine);
    return st;
}

int zs_trainer_steps_done(const zs_trainer_t *t) {
    return t->step;
}

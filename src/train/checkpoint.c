/* Trainer <-> checkpoint glue (docs/architecture.md "Checkpoints"): the trainer's record
 * (model config, training settings) around the module's collective save and load
 * (src/shard/module_ckpt.c), which write and read every rank's shards at any world size and
 * stage. */
#include "zshard.h"

#include "ckpt/ckpt.h"
#include "ckpt/convert.h"
#include "core/status.h"
#include "optim/optim.h"
#include "shard/module.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fill_info(const zs_trainer_t *t, zs_ckpt_info *in) {
    const zs_train_config *c = &t->cfg;
    memset(in, 0, sizeof *in);
    in->model = t->model_cfg;
    in->world_size = t->world;
    in->stage = c->module.stage;
    in->step = t->step;
    in->seed = c->module.seed;
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
    in->run_config = t->run_config;
    zs_trainer_docs_info(t, in);
}

/* The checkpoint must describe this run's model: same config, hence the same layout. */
static zs_status check_model(const zs_manifest *m, const char *dir, void *ctx) {
    zs_status st = ZS_OK;
    const zs_trainer_t *t = ctx;
    const zs_model_config *a = &m->info.model, *b = &t->model_cfg;
    ZS_REQUIRE(a->arch == b->arch && a->n_layer == b->n_layer && a->n_head == b->n_head &&
                   a->n_embd == b->n_embd && a->max_seq == b->max_seq && a->vocab == b->vocab &&
                   a->n_kv_head == b->n_kv_head && a->ffn_hidden == b->ffn_hidden &&
                   a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps &&
                   zs_model_tied(a) == zs_model_tied(b),
               ZS_ERR_INVALID,
               "checkpoint %s: %s: its model layout disagrees with the model flags: it holds %s "
               "(%s, %d layers, %d heads, width %d, mlp %d, %d positions, vocab %d, "
               "tie_embeddings %s), this run is %s (%s, %d layers, %d heads, width %d, mlp %d, %d "
               "positions, vocab %d from the data, tie_embeddings %s)",
               dir, ZS_CKPT_MANIFEST, a->name, zs_ckpt_arch_name(a->arch), a->n_layer, a->n_head,
               a->n_embd, a->ffn_hidden, a->max_seq, a->vocab, zs_model_tied(a) ? "on" : "off",
               b->name, zs_ckpt_arch_name(b->arch), b->n_layer, b->n_head, b->n_embd, b->ffn_hidden,
               b->max_seq, b->vocab, zs_model_tied(b) ? "on" : "off");
fail:
    return st;
}

/* A resumed run continues the stored one: its model, and with documents its epochs, which
 * only the same data and document settings continue. An imported checkpoint (no training
 * record) has no epochs to continue. */
static zs_status check_resume(const zs_manifest *m, const char *dir, void *ctx) {
    zs_status st = ZS_OK;
    ZS_CHECK(check_model(m, dir, ctx));
    if (m->info.batch > 0)
        ZS_CHECK(zs_trainer_docs_check((const zs_trainer_t *)ctx, &m->info, dir));
fail:
    return st;
}

zs_status zs_trainer_save(zs_trainer_t *t, const char *save_dir, int keep) {
    zs_ckpt_info info;
    fill_info(t, &info);
    return zs_module_save_info(t->engine, save_dir, keep, &info);
}

zs_status zs_trainer_set_run_config(zs_trainer_t *t, const char *json) {
    zs_status st = ZS_OK;
    char *copy = NULL;
    ZS_REQUIRE(t, ZS_ERR_INVALID, "zs_trainer_set_run_config: no trainer");
    if (json) {
        size_t n = strlen(json);
        ZS_REQUIRE(n >= 2 && json[0] == '{' && json[n - 1] == '}', ZS_ERR_INVALID,
                   "zs_trainer_set_run_config: not a JSON object");
        copy = strdup(json);
        ZS_REQUIRE(copy, ZS_ERR_OOM, "zs_trainer_set_run_config: out of memory");
    }
    free(t->run_config);
    t->run_config = copy;
fail:
    return st;
}

zs_status zs_trainer_resume(zs_trainer_t *t, const char *path) {
    zs_status st = zs_module_load(t->engine, path, check_resume, t);
    if (st == ZS_OK) t->step = zs_module_steps_done(t->engine);
    return st;
}

int zs_trainer_steps_done(const zs_trainer_t *t) {
    return t->step;
}

/* ---- weights only (--init-from) --------------------------------------------------------- */

zs_status zs_model_config_from(const char *path, const zs_model_config *hint,
                               zs_model_config *cfg) {
    return zs_source_config(path, hint, cfg);
}

/* This rank's range of every unit's fp32 master from a checkpoint of this model; the Adam
 * moments start from zero whatever the source holds (a fresh optimizer). */
static zs_status load_masters(zs_trainer_t *t, const char *path) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = NULL;
    ZS_CHECK(zs_ckpt_reader_open(path, &r));
    ZS_CHECK(check_model(zs_ckpt_reader_manifest(r), zs_ckpt_reader_dir(r), t));
    ZS_CHECK(zs_module_load_kinds(t->engine, r, 1));
fail:
    zs_ckpt_reader_close(r);
    return st;
}

zs_status zs_trainer_init_from(zs_trainer_t *t, const char *path) {
    zs_status st = ZS_OK, local = ZS_OK;
    zs_source_kind kind = ZS_SOURCE_CKPT;
    char what[4200], tmp[512] = "", ck[600] = "", *all = NULL;
    snprintf(what, sizeof what, "--init-from %s", path);
    local = zs_source_kind_of(path, &kind);
    ZS_CHECK(zs_module_agree(t->engine, local, what));
    if (kind == ZS_SOURCE_CKPT) {
        ZS_CHECK(zs_module_agree(t->engine, load_masters(t, path), what));
    } else {
        /* Rank 0 converts; every rank then reads its own range of the result. The name of
         * the temporary directory travels in a fixed-size record. */
        if (t->rank == 0) {
            const char *base = getenv("TMPDIR");
            snprintf(tmp, sizeof tmp, "%s/zshard-init-XXXXXX", base && *base ? base : "/tmp");
            if (!mkdtemp(tmp))
                local =
                    zs_error(ZS_ERR_IO, "%s: cannot create a temporary directory %s", what, tmp);
            snprintf(ck, sizeof ck, "%s/ckpt", tmp);
            if (local == ZS_OK) local = zs_source_import(path, &t->model_cfg, ck);
        }
        all = calloc((size_t)t->world, sizeof ck);
        ZS_REQUIRE(all, ZS_ERR_OOM, "%s: out of memory", what);
        ZS_CHECK(zs_module_all_gather_bytes(t->engine, ck, all, sizeof ck));
        memcpy(ck, all, sizeof ck);
        st = zs_module_agree(t->engine, local, what);
        if (st == ZS_OK) st = zs_module_agree(t->engine, load_masters(t, ck), what);
        if (t->rank == 0 && tmp[0] && strstr(tmp, "zshard-init-")) {
            zs_ckpt_remove_dir(ck);
            rmdir(tmp);
        }
        if (st != ZS_OK) goto fail;
    }
    ZS_CHECK(zs_module_state_changed(t->engine, 0));
    t->step = 0;
fail:
    free(all);
    return st;
}

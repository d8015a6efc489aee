/* Trainer <-> checkpoint glue (DESIGN.md §9): zs_trainer_save writes every rank's canonical
 * shards in parallel and lets rank 0 publish the manifest; zs_trainer_resume loads at any
 * world size and stage. Both are collective, and every rank learns whether any rank failed,
 * so a failure on one rank never leaves the others waiting in a collective. */
#include "zshard.h"

#include "ckpt/ckpt.h"
#include "ckpt/convert.h"
#include "core/status.h"
#include "optim/optim.h"
#include "train/trainer_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every rank contributes its status; a rank that failed keeps its own message, the others
 * get one naming the first failed rank. */
static zs_status agree(zs_trainer_t *t, zs_status local, const char *what) {
    zs_status st = ZS_OK;
    int32_t mine = (int32_t)local, *all = calloc((size_t)t->world, sizeof *all);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zs_last_error());
    ZS_REQUIRE(all, ZS_ERR_OOM, "%s: out of memory", what);
    ZS_CHECK(zs_engine_all_gather_bytes(t->engine, &mine, all, sizeof mine));
    if (local != ZS_OK) {
        st = zs_error(local, "%s", msg);
        goto fail;
    }
    for (int r = 0; r < t->world; r++)
        ZS_REQUIRE(all[r] == ZS_OK, (zs_status)all[r], "%s: rank %d failed (see its message)", what,
                   r);
fail:
    free(all);
    return st;
}

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

/* Test hook ZS_FAULT_KILL_SAVE=WHO:K (WHO = a rank, "all", or "commit"): during this
 * process's K-th save, rank WHO (or every rank) SIGKILLs itself halfway through its rank
 * file; "commit" kills rank 0 after the manifest is written, before the rename. */
static int g_saves;

static int fault_rank_file(const zs_trainer_t *t) {
    const char *f = getenv("ZS_FAULT_KILL_SAVE");
    char who[16];
    int k;
    if (!f || sscanf(f, "%15[^:]:%d", who, &k) != 2 || k != g_saves) return 0;
    return !strcmp(who, "all") || (strcmp(who, "commit") && atoi(who) == t->rank);
}

static int fault_commit(void) {
    const char *f = getenv("ZS_FAULT_KILL_SAVE");
    int k;
    return f && sscanf(f, "commit:%d", &k) == 1 && k == g_saves;
}

static zs_status write_rank_file(zs_trainer_t *t, zs_manifest *m, const char *tmp) {
    zs_status st = ZS_OK;
    zs_ckpt_writer *w = NULL;
    zs_ckpt_file *f = &m->files[t->rank];
    char path[4400];
    ZS_CHECK(zs_path_join(path, sizeof path, tmp, f->name));
    ZS_CHECK(zs_ckpt_writer_open(path, m->info.level, f, &w));
    if (fault_rank_file(t)) zs_ckpt_writer_kill_after(w, f->n_frames / 2 + 1);
    for (int u = 0; u < t->layout.n_units; u++) {
        float *kinds[ZS_CKPT_NKINDS];
        int64_t lo, n, S = t->layout.units[u].shard, base = (int64_t)t->rank * S;
        ZS_CHECK(zs_engine_state(t->engine, u, &kinds[0], &kinds[1], &kinds[2], &lo, &n));
        /* DDP holds the whole unit; every stage writes the same canonical slice. */
        ZS_ASSERT(base >= lo && base + S <= lo + n);
        for (int k = 0; k < ZS_CKPT_NKINDS; k++)
            ZS_CHECK(zs_ckpt_writer_put(w, u, k, kinds[k] + (base - lo), S));
    }
    ZS_CHECK(zs_ckpt_writer_finish(w));
fail:
    zs_ckpt_writer_destroy(w);
    return st;
}

zs_status zs_trainer_save(zs_trainer_t *t, const char *save_dir, int keep) {
    zs_status st = ZS_OK, local = ZS_OK;
    zs_manifest m;
    zs_ckpt_info info;
    char name[64], final[4200], tmp[4300], what[4300];
    uint64_t *mine = NULL, *all = NULL;
    memset(&m, 0, sizeof m);
    g_saves++;
    fill_info(t, &info);
    zs_ckpt_step_name(t->step, name, sizeof name);
    if (zs_path_join(final, sizeof final, save_dir, name) != ZS_OK) return ZS_ERR_INVALID;
    snprintf(what, sizeof what, "checkpoint %.4200s", final);
    snprintf(tmp, sizeof tmp, "%.4200s.tmp", final);
    local = zs_manifest_init(&m, &info);
    /* Rank 0 prepares the staging directory before anyone writes into it. */
    if (local == ZS_OK && t->rank == 0) local = zs_ckpt_stage(final, 1, tmp, sizeof tmp);
    ZS_CHECK(agree(t, local, what));

    /* Each rank writes its own file in parallel; then rank 0 learns every file's frame
     * sizes and checksums. The record has the same length on every rank. */
    int nf = m.files[t->rank].n_frames;
    size_t words = 3 + 2 * (size_t)nf;
    mine = calloc(words, sizeof *mine);
    all = calloc(words * (size_t)t->world, sizeof *all);
    ZS_REQUIRE(mine && all, ZS_ERR_OOM, "%s: out of memory", what);
    local = write_rank_file(t, &m, tmp);
    mine[0] = (uint64_t)local;
    mine[1] = m.files[t->rank].size;
    mine[2] = m.files[t->rank].crc;
    for (int i = 0; i < nf; i++) {
        mine[3 + 2 * i] = m.files[t->rank].frames[i].csize;
        mine[4 + 2 * i] = m.files[t->rank].frames[i].crc;
    }
    ZS_CHECK(zs_engine_all_gather_bytes(t->engine, mine, all, words * sizeof *mine));
    for (int r = 0; r < t->world && local == ZS_OK; r++)
        if (all[(size_t)r * words] != ZS_OK)
            local = zs_error((zs_status)all[(size_t)r * words],
                             "%s: rank %d failed to write "
                             "its file (see its message)",
                             what, r);
    if (local == ZS_OK && t->rank == 0) {
        for (int r = 0; r < t->world; r++) {
            zs_ckpt_file *f = &m.files[r];
            const uint64_t *rec = all + (size_t)r * words;
            f->size = rec[1];
            f->crc = (uint32_t)rec[2];
            uint64_t pos = 0;
            for (int i = 0; i < f->n_frames; i++) {
                f->frames[i].offset = pos;
                f->frames[i].csize = rec[3 + 2 * i];
                f->frames[i].crc = (uint32_t)rec[4 + 2 * i];
                pos += f->frames[i].csize;
            }
        }
        char mpath[4400];
        local = zs_path_join(mpath, sizeof mpath, tmp, ZS_CKPT_MANIFEST);
        if (local == ZS_OK) local = zs_manifest_write(&m, mpath);
        if (local == ZS_OK && fault_commit()) raise(SIGKILL);
        if (local == ZS_OK) local = zs_ckpt_publish(tmp, final, 1);
        if (local == ZS_OK) local = zs_ckpt_set_latest(save_dir, name, keep);
        if (local != ZS_OK) zs_ckpt_remove_dir(tmp);
    }
    ZS_CHECK(agree(t, local, what));
fail:
    free(mine);
    free(all);
    zs_manifest_free(&m);
    return st;
}

/* The checkpoint must describe this run's model: same config, hence the same layout. */
static zs_status check_model(const zs_trainer_t *t, const zs_manifest *m, const char *dir) {
    zs_status st = ZS_OK;
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
    const zs_layout *x = &m->layout, *y = &t->layout;
    ZS_REQUIRE(x->n_units == y->n_units && x->n_tensors == y->n_tensors, ZS_ERR_INVALID,
               "checkpoint %s: unit layout differs from this run's", dir);
    for (int i = 0; i < x->n_tensors; i++) {
        const zs_tensor_desc *p = &x->tensors[i], *q = &y->tensors[i];
        ZS_REQUIRE(!strcmp(p->name, q->name) && p->count == q->count && p->offset == q->offset &&
                       p->unit == q->unit,
                   ZS_ERR_INVALID,
                   "checkpoint %s: tensor %s (offset %lld) differs from this run's %s (offset "
                   "%lld)",
                   dir, p->name, (long long)p->offset, q->name, (long long)q->offset);
    }
fail:
    return st;
}

static zs_status load_local(zs_trainer_t *t, const char *path, int64_t *step) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = NULL;
    ZS_CHECK(zs_ckpt_reader_open(path, &r));
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    ZS_CHECK(check_model(t, m, zs_ckpt_reader_dir(r)));
    for (int u = 0; u < t->layout.n_units; u++) {
        float *kinds[ZS_CKPT_NKINDS];
        int64_t lo, n;
        ZS_CHECK(zs_engine_state(t->engine, u, &kinds[0], &kinds[1], &kinds[2], &lo, &n));
        for (int k = 0; k < ZS_CKPT_NKINDS; k++)
            ZS_CHECK(zs_ckpt_read(r, u, k, lo, n, kinds[k]));
    }
    *step = m->info.step;
fail:
    zs_ckpt_reader_close(r);
    return st;
}

zs_status zs_trainer_resume(zs_trainer_t *t, const char *path) {
    zs_status st = ZS_OK;
    int64_t step = 0;
    char what[4200];
    snprintf(what, sizeof what, "checkpoint %s", path);
    ZS_CHECK(agree(t, load_local(t, path, &step), what));
    ZS_CHECK(zs_engine_state_changed(t->engine));
    t->step = (int)step;
fail:
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

static zs_status load_masters(zs_trainer_t *t, const char *path) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = NULL;
    ZS_CHECK(zs_ckpt_reader_open(path, &r));
    ZS_CHECK(check_model(t, zs_ckpt_reader_manifest(r), zs_ckpt_reader_dir(r)));
    for (int u = 0; u < t->layout.n_units; u++) {
        float *kinds[ZS_CKPT_NKINDS];
        int64_t lo, n;
        ZS_CHECK(zs_engine_state(t->engine, u, &kinds[0], &kinds[1], &kinds[2], &lo, &n));
        ZS_CHECK(zs_ckpt_read(r, u, ZS_CKPT_MASTER, lo, n, kinds[0]));
        /* A fresh optimizer: whatever the source's Adam state, it starts from zero. */
        memset(kinds[1], 0, (size_t)n * sizeof(float));
        memset(kinds[2], 0, (size_t)n * sizeof(float));
    }
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
    ZS_CHECK(agree(t, local, what));
    if (kind == ZS_SOURCE_CKPT) {
        ZS_CHECK(agree(t, load_masters(t, path), what));
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
        ZS_CHECK(zs_engine_all_gather_bytes(t->engine, ck, all, sizeof ck));
        memcpy(ck, all, sizeof ck);
        st = agree(t, local, what);
        if (st == ZS_OK) st = agree(t, load_masters(t, ck), what);
        if (t->rank == 0 && tmp[0] && strstr(tmp, "zshard-init-")) {
            zs_ckpt_remove_dir(ck);
            rmdir(tmp);
        }
        if (st != ZS_OK) goto fail;
    }
    ZS_CHECK(zs_engine_state_changed(t->engine));
    t->step = 0;
fail:
    free(all);
    return st;
}

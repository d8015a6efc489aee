/* Module <-> checkpoint glue (docs/architecture.md "Checkpoints"): save writes every rank's
 * canonical shards in parallel and lets rank 0 publish the manifest; load reads any world size and
 * stage. Both are collective, and every rank learns whether any rank failed, so a failure on one
 * rank never leaves the others waiting in a collective. The trainer's checkpoints go through here
 * too, with its model config and training settings as the record. */
#include "shard/module.h"

#include "core/status.h"
#include "shard/engine.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_module_agree(zs_module_t *m, zs_status local, const char *what) {
    zs_status st = ZS_OK;
    int world = zs_module_world_size(m);
    int32_t mine = (int32_t)local, *all = calloc((size_t)world, sizeof *all);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zs_last_error());
    ZS_REQUIRE(all, ZS_ERR_OOM, "%s: out of memory", what);
    ZS_CHECK(zs_module_all_gather_bytes(m, &mine, all, sizeof mine));
    if (local != ZS_OK) {
        st = zs_error(local, "%s", msg);
        goto fail;
    }
    for (int r = 0; r < world; r++)
        ZS_REQUIRE(all[r] == ZS_OK, (zs_status)all[r], "%s: rank %d failed (see its message)", what,
                   r);
fail:
    free(all);
    return st;
}

/* Test hook ZS_FAULT_KILL_SAVE=WHO:K (WHO = a rank, "all", or "commit"): during this
 * process's K-th save, rank WHO (or every rank) SIGKILLs itself halfway through its rank
 * file; "commit" kills rank 0 after the manifest is written, before the rename. */
static int g_saves;

static int fault_rank_file(int rank) {
    const char *f = getenv("ZS_FAULT_KILL_SAVE");
    char who[16];
    int k;
    if (!f || sscanf(f, "%15[^:]:%d", who, &k) != 2 || k != g_saves) return 0;
    return !strcmp(who, "all") || (strcmp(who, "commit") && atoi(who) == rank);
}

static int fault_commit(void) {
    const char *f = getenv("ZS_FAULT_KILL_SAVE");
    int k;
    return f && sscanf(f, "commit:%d", &k) == 1 && k == g_saves;
}

/* The largest shard of any unit: the host buffer a unit's state passes through. */
static int64_t max_shard(const zs_layout *l) {
    int64_t s = 0;
    for (int u = 0; u < l->n_units; u++)
        if (l->units[u].shard > s) s = l->units[u].shard;
    return s;
}

/* The file of shard rank `rank` (HSDP: written by the first group; its replicas hold the same
 * state). */
static zs_status write_rank_file(zs_module_t *mod, zs_manifest *m, const char *tmp, int rank) {
    zs_status st = ZS_OK;
    zs_ckpt_writer *w = NULL;
    const zs_layout *l = zs_module_layout(mod);
    zs_ckpt_file *f = &m->files[rank];
    char path[4400];
    float *buf = malloc((size_t)max_shard(l) * sizeof *buf + 1);
    ZS_REQUIRE(buf, ZS_ERR_OOM, "checkpoint: out of memory");
    ZS_CHECK(zs_path_join(path, sizeof path, tmp, f->name));
    ZS_CHECK(zs_ckpt_writer_open(path, m->info.level, f, &w));
    if (fault_rank_file(rank)) zs_ckpt_writer_kill_after(w, f->n_frames / 2 + 1);
    for (int u = 0; u < l->n_units; u++) {
        int64_t S = l->units[u].shard, base = (int64_t)rank * S;
        /* DDP holds the whole unit; every stage writes the same canonical slice. */
        for (int k = 0; k < ZS_CKPT_NKINDS; k++) {
            ZS_CHECK(zs_module_state_read(mod, u, k, base, S, buf));
            /* A diverged run's state is not a checkpoint to resume from. */
            for (int64_t i = 0; i < S; i++)
                ZS_REQUIRE(isfinite(buf[i]), ZS_ERR_INVALID,
                           "%s of unit %s holds a non-finite value (element %lld of rank %d's "
                           "shard): the run diverged, so it is not saved",
                           zs_ckpt_kind_name(k), l->units[u].name, (long long)i, rank);
            ZS_CHECK(zs_ckpt_writer_put(w, u, k, buf, S));
        }
    }
    ZS_CHECK(zs_ckpt_writer_finish(w));
fail:
    zs_ckpt_writer_destroy(w);
    free(buf);
    return st;
}

zs_status zs_module_save_info(zs_module_t *mod, const char *save_dir, int keep,
                              const zs_ckpt_info *record) {
    zs_status st = ZS_OK, local = ZS_OK;
    zs_manifest m;
    zs_ckpt_info info = *record;
    char name[64], final[4200], tmp[4300], what[4300];
    uint64_t *mine = NULL, *all = NULL;
    int rank = zs_module_rank(mod), world = zs_module_world_size(mod), srank, files, replica;
    /* One file per shard, written by the first shard group: the checkpoint's world is the
     * group's (HSDP), loadable at any world size, stage and mesh like any other. */
    zs_module_mesh(mod, &srank, &files, &replica);
    memset(&m, 0, sizeof m);
    g_saves++;
    info.world_size = files;
    info.step = zs_module_steps_done(mod);
    if (info.model.arch == ZS_ARCH_CUSTOM) info.layout = zs_module_layout(mod);
    zs_ckpt_step_name(info.step, name, sizeof name);
    if (zs_path_join(final, sizeof final, save_dir, name) != ZS_OK) return ZS_ERR_INVALID;
    snprintf(what, sizeof what, "checkpoint %.4200s", final);
    snprintf(tmp, sizeof tmp, "%.4200s.tmp", final);
    local = zs_manifest_init(&m, &info);
    /* Rank 0 prepares the staging directory before anyone writes into it. */
    if (local == ZS_OK && rank == 0) local = zs_ckpt_stage(final, 1, tmp, sizeof tmp);
    ZS_CHECK(zs_module_agree(mod, local, what));

    /* Each rank writes its own file in parallel; then rank 0 learns every file's frame
     * sizes and checksums. The record has the same length on every rank. */
    int nf = m.files[srank].n_frames;
    size_t words = 3 + 2 * (size_t)nf;
    mine = calloc(words, sizeof *mine);
    all = calloc(words * (size_t)world, sizeof *all);
    ZS_REQUIRE(mine && all, ZS_ERR_OOM, "%s: out of memory", what);
    if (replica == 0) {
        local = write_rank_file(mod, &m, tmp, srank);
        mine[1] = m.files[srank].size;
        mine[2] = m.files[srank].crc;
        for (int i = 0; i < nf; i++) {
            mine[3 + 2 * i] = m.files[srank].frames[i].csize;
            mine[4 + 2 * i] = m.files[srank].frames[i].crc;
        }
    }
    mine[0] = (uint64_t)local;
    ZS_CHECK(zs_module_all_gather_bytes(mod, mine, all, words * sizeof *mine));
    for (int r = 0; r < world && local == ZS_OK; r++)
        if (all[(size_t)r * words] != ZS_OK)
            local = zs_error((zs_status)all[(size_t)r * words],
                             "%s: rank %d failed to write its file (see its message)", what, r);
    /* Nothing of a failed save is left behind: the staging directory goes. */
    if (local != ZS_OK && rank == 0) zs_ckpt_remove_dir(tmp);
    if (local == ZS_OK && rank == 0) {
        for (int r = 0; r < files; r++) { /* world ranks 0 .. files - 1: the first group */
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
    ZS_CHECK(zs_module_agree(mod, local, what));
fail:
    free(mine);
    free(all);
    zs_manifest_free(&m);
    return st;
}

/* Same units, hence the same element positions at any world size. */
static zs_status check_layout(const zs_module_t *mod, const zs_manifest *m, const char *dir) {
    zs_status st = ZS_OK;
    const zs_layout *x = &m->layout, *y = zs_module_layout(mod);
    ZS_REQUIRE(x->n_units == y->n_units && x->n_tensors == y->n_tensors, ZS_ERR_INVALID,
               "checkpoint %s: unit layout differs from this run's (%d units, %d tensors; this "
               "run declares %d units, %d tensors)",
               dir, x->n_units, x->n_tensors, y->n_units, y->n_tensors);
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

zs_status zs_module_load_kinds(zs_module_t *mod, zs_ckpt_reader *r, int nkinds) {
    zs_status st = ZS_OK;
    const zs_layout *l = zs_module_layout(mod);
    int64_t cap = 0, lo, n;
    for (int u = 0; u < l->n_units; u++) {
        zs_module_state_range(mod, u, &lo, &n);
        if (n > cap) cap = n;
    }
    float *buf = malloc((size_t)cap * sizeof *buf + 1);
    ZS_REQUIRE(buf, ZS_ERR_OOM, "checkpoint: out of memory");
    for (int u = 0; u < l->n_units; u++) {
        zs_module_state_range(mod, u, &lo, &n);
        for (int k = 0; k < ZS_CKPT_NKINDS; k++) {
            /* Kinds past nkinds start from zero (a fresh optimizer). */
            if (k < nkinds)
                ZS_CHECK(zs_ckpt_read(r, u, k, lo, n, buf));
            else
                memset(buf, 0, (size_t)n * sizeof *buf);
            ZS_CHECK(zs_module_state_write(mod, u, k, lo, n, buf));
        }
    }
fail:
    free(buf);
    return st;
}

static zs_status load_local(zs_module_t *mod, const char *path, zs_module_ckpt_check check,
                            void *ctx, int64_t *step) {
    zs_status st = ZS_OK;
    zs_ckpt_reader *r = NULL;
    ZS_CHECK(zs_ckpt_reader_open(path, &r));
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    if (check) ZS_CHECK(check(m, zs_ckpt_reader_dir(r), ctx));
    ZS_CHECK(check_layout(mod, m, zs_ckpt_reader_dir(r)));
    ZS_CHECK(zs_module_load_kinds(mod, r, ZS_CKPT_NKINDS));
    *step = m->info.step;
fail:
    zs_ckpt_reader_close(r);
    return st;
}

zs_status zs_module_load(zs_module_t *mod, const char *path, zs_module_ckpt_check check,
                         void *ctx) {
    zs_status st = ZS_OK;
    int64_t step = 0;
    char what[4200];
    snprintf(what, sizeof what, "checkpoint %s", path);
    ZS_CHECK(zs_module_agree(mod, load_local(mod, path, check, ctx, &step), what));
    ZS_CHECK(zs_module_state_changed(mod, (int)step));
fail:
    return st;
}

/* ---- public: a module's own checkpoints ---------------------------------------------------- */

zs_status zs_module_save(zs_module_t *m, const char *save_dir, int keep) {
    zs_ckpt_info info;
    memset(&info, 0, sizeof info);
    info.model.arch = ZS_ARCH_CUSTOM;
    snprintf(info.model.name, sizeof info.model.name, "%s", zs_module_name(m));
    info.stage = zs_module_stage(m);
    info.seed = zs_module_seed(m);
    info.data_position = zs_module_steps_done(m);
    info.level = ZS_CKPT_LEVEL;
    info.block_elems = ZS_CKPT_BLOCK_ELEMS;
    snprintf(info.source, sizeof info.source, "module");
    return zs_module_save_info(m, save_dir, keep, &info);
}

/* Any checkpoint whose units match loads (a trainer's GPT-2 into a module that declares the
 * same tensors, too): the layout comparison is the whole check. */
zs_status zs_module_resume(zs_module_t *m, const char *path) {
    return zs_module_load(m, path, NULL, NULL);
}

/* The public sharding API's internals (include/zshard/module.h): a module is a unit layout, the
 * shard engine that serves it, its step count and its checkpoint glue. The built-in models and
 * the trainer hold a zs_module_t and call only zs_module_*; the accessors below give them the
 * layout (read-only metadata) and the checkpoint hooks the trainer adds its model config to. */
#ifndef ZS_SHARD_MODULE_H
#define ZS_SHARD_MODULE_H

#include "backend/device.h"
#include "ckpt/ckpt.h"
#include "shard/layout.h"
#include "zshard.h"

struct zs_units {
    zs_layout layout; /* unfinalized: the module finalizes it for its world size */
    float **values;   /* values[t]: ZS_INIT_VALUES data of tensor t, else NULL */
    int cap_values;
};

/* Units that declare exactly the tensors of l (a model's layout), no caller values. */
zs_status zs_units_from_layout(const zs_layout *l, zs_units_t **out);

/* The module's layout, finalized for its world size. Valid for the module's life. */
const zs_layout *zs_module_layout(const zs_module_t *m);

/* HSDP's mesh: this rank's place in its shard group, the group's size (the layout's world) and
 * the group's index; flat: the rank, the world and 0. */
void zs_module_mesh(const zs_module_t *m, int *shard_rank, int *shard_world, int *replica);

/* HSDP's groups in words for banners: "shard group shm (why), replica group gloo (why)"; "" when
 * flat. */
void zs_module_mesh_text(const zs_module_t *m, char *out, size_t n);

/* ZeRO-3 unit all-gathers issued so far (tests: recompute adds none). */
uint64_t zs_module_param_gathers(const zs_module_t *m);

const char *zs_module_name(const zs_module_t *m);
zs_stage zs_module_stage(const zs_module_t *m);
uint64_t zs_module_seed(const zs_module_t *m);

/* Gather nbytes (a multiple of 4) from every rank into recv[world * nbytes], rank order. */
zs_status zs_module_all_gather_bytes(zs_module_t *m, const void *send, void *recv, size_t nbytes);

/* This rank's optimizer state of unit u covers its flat elements [*lo, *lo + *n); kinds are the
 * fp32 master, Adam m and v (ZS_STATE_* of shard/engine.h, ZS_CKPT_* of ckpt.h: the same order).
 * read/write copy count elements from flat element `at` to/from host memory, after draining
 * pending work. For checkpoints. */
void zs_module_state_range(const zs_module_t *m, int unit, int64_t *lo, int64_t *n);
zs_status zs_module_state_read(zs_module_t *m, int unit, int kind, int64_t at, int64_t count,
                               float *host);
zs_status zs_module_state_write(zs_module_t *m, int unit, int kind, int64_t at, int64_t count,
                                const float *host);

/* The device the module computes on: its ops, its device table, its compute stream. Models
 * built on the module allocate and run there. */
const zs_ops *zs_module_ops(const zs_module_t *m);
const zs_device *zs_module_dev(const zs_module_t *m);
zs_stream_t *zs_module_stream(const zs_module_t *m);
/* After writing state through zs_module_state_write on every rank: rebuild the stage's full
 * copies and set the step count. Collective. */
zs_status zs_module_state_changed(zs_module_t *m, int steps_done);

/* Every rank contributes its status; a rank that failed keeps its own message, the others get
 * one naming the first failed rank. Collective. */
zs_status zs_module_agree(zs_module_t *m, zs_status local, const char *what);

/* Checkpoint with the caller's record (model config and training settings for the trainer;
 * world size, stage, step and layout are the module's). Collective. */
zs_status zs_module_save_info(zs_module_t *m, const char *save_dir, int keep,
                              const zs_ckpt_info *info);

/* Extra check of a checkpoint's manifest before anything is read (the trainer compares its
 * model config); dir names the checkpoint in messages. */
typedef zs_status (*zs_module_ckpt_check)(const zs_manifest *man, const char *dir, void *ctx);

/* Every unit's state from an open checkpoint into this rank's range: the first nkinds kinds
 * (1: masters only, the Adam moments zeroed; ZS_CKPT_NKINDS: everything). Not collective. */
zs_status zs_module_load_kinds(zs_module_t *m, zs_ckpt_reader *r, int nkinds);

/* Load path into the module (any saved world size and stage) after check (may be NULL) and
 * the layout comparison; sets the step count. Collective. */
zs_status zs_module_load(zs_module_t *m, const char *path, zs_module_ckpt_check check, void *ctx);

#endif

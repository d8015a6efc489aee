/* Sharded checkpoints (docs/architecture.md "Checkpoints", docs/checkpoint.md): a directory holding
 * manifest.json and one zstd file per rank. Rank r's file holds, for every unit in layout order and
 * for each kind (fp32 master, Adam m, Adam v), the canonical shard [r*S, (r+1)*S) of the unit's
 * flat buffer, cut into independent zstd frames of at most block_elems elements. Element indices
 * inside a unit do not depend on the world size (only the tail padding does), so any world size
 * reads any checkpoint by mapping its own range onto the saved frames. */
#ifndef ZS_CKPT_H
#define ZS_CKPT_H

#include "shard/layout.h"
#include "zshard.h"

#include <stdint.h>

#define ZS_CKPT_FORMAT "zshard-checkpoint"
/* Bump on any incompatible change; see docs. 2 added model.tie_embeddings (an untied GPT-2
 * or a tied LLaMA would have been misread by a version-1 reader); version 1 still reads, with
 * each architecture's default head. */
#define ZS_CKPT_VERSION 2
#define ZS_CKPT_VERSION_OLDEST 1
#define ZS_CKPT_MANIFEST "manifest.json"
#define ZS_CKPT_BLOCK_ELEMS (1 << 18) /* 1 MiB of fp32 per frame */
#define ZS_CKPT_MIN_BLOCK 1024
#define ZS_CKPT_MAX_BLOCK (1 << 24)
#define ZS_CKPT_LEVEL 1 /* zstd level: fp32 barely compresses; be fast */

typedef enum zs_ckpt_kind {
    ZS_CKPT_MASTER = 0,
    ZS_CKPT_ADAM_M,
    ZS_CKPT_ADAM_V,
    ZS_CKPT_NKINDS
} zs_ckpt_kind;

/* "master", "adam_m", "adam_v". */
const char *zs_ckpt_kind_name(int kind);
/* "gpt2", "llama", "custom". */
const char *zs_ckpt_arch_name(zs_arch arch);
/* "ddp", "1", "2", "3" and back. */
const char *zs_ckpt_stage_name(int stage);
zs_status zs_ckpt_stage_parse(const char *s, zs_stage *out);

typedef struct zs_ckpt_frame {
    int unit, kind;
    int64_t lo, count;      /* element range inside the unit's flat buffer */
    uint64_t offset, csize; /* compressed bytes inside the rank file */
    uint32_t crc;           /* CRC32C of those compressed bytes */
} zs_ckpt_frame;

typedef struct zs_ckpt_file {
    char name[32]; /* rank_00003.zst */
    int rank;
    uint64_t size; /* bytes */
    uint32_t crc;  /* CRC32C of the whole file */
    int n_frames;
    zs_ckpt_frame *frames;
} zs_ckpt_file;

/* Everything the manifest records besides the layout and the files. */
typedef struct zs_ckpt_info {
    zs_model_config model;
    int world_size;
    zs_stage stage;
    int64_t step;          /* optimizer steps taken; Adam's t and the LR position */
    uint64_t seed;         /* init and data seed */
    int64_t data_position; /* batches consumed: batch s+1 is a pure function of (seed, s+1) */
    /* Training settings at save time: `zshard train --resume` continues from them
     * (src/cli/train_resume.c), `zshard eval` takes batch and seq as its defaults. */
    int batch, seq, grad_accum, warmup, total_steps;
    double lr, min_lr_frac, next_lr, beta1, beta2, eps, weight_decay, grad_clip;
    int level;
    int64_t block_elems;
    char source[32]; /* "train", "import", "reshard", "module" */
    /* The run's configuration as one JSON object (`zshard train --print-config`), written
     * verbatim as the manifest's "run_config"; NULL: none. Not read back: a record for people
     * and tools, never an input to a resume. */
    const char *run_config;
    /* The data record of a run with documents (docs/data.md), written as "data" only when
     * has_docs: the docs mode, the epochs asked for (0: none), the epoch (1-based) and the
     * samples of it taken after `step`, the samples per epoch and steps per epoch, and the
     * fingerprint of the training data and document settings (zs_docs_fingerprint), and those
     * settings, so that a resume can take them. */
    int has_docs;
    char docs[16];
    int64_t epochs, epoch, epoch_position, samples, steps_per_epoch;
    uint64_t fingerprint;
    int64_t eos_id, pad_id; /* the document rules (-1: none) */
    int has_doc_sep;
    char doc_sep[64];
    /* ZS_ARCH_CUSTOM: the declared units (finalized for any world size), which the manifest
     * records instead of a model config; NULL otherwise. zs_manifest_init copies them. */
    const zs_layout *layout;
} zs_ckpt_info;

typedef struct zs_manifest {
    zs_ckpt_info info;
    zs_layout layout; /* zs_model_layout(info.model, info.world_size), or the custom units */
    int n_files;
    zs_ckpt_file *files; /* files[r] is rank r's */
} zs_manifest;

/* ---- manifest (manifest.c, manifest_parse.c) ---------------------------------------- */

/* Layout plus every rank's canonical frame list (offsets, sizes, checksums zero until the
 * writers fill them). */
zs_status zs_manifest_init(zs_manifest *m, const zs_ckpt_info *info);
/* Same, refusing (before allocating) layouts that need more than max_frames frames in all:
 * the parser passes the number the manifest lists, so hostile input cannot make it
 * allocate more than its own size suggests. */
zs_status zs_manifest_init_bounded(zs_manifest *m, const zs_ckpt_info *info, int64_t max_frames);
void zs_manifest_free(zs_manifest *m);
/* Write as JSON to path (ending in a CRC32C of the text before it), fsynced. */
zs_status zs_manifest_write(const zs_manifest *m, const char *path);
/* Parse and fully validate a manifest's text; `what` names it in errors. */
zs_status zs_manifest_parse(const char *text, size_t len, const char *what, zs_manifest *out);
/* Read dir/manifest.json and parse it. */
zs_status zs_manifest_load(const char *dir, zs_manifest *out);

/* ---- writing one rank file (writer.c) ------------------------------------------------- */

typedef struct zs_ckpt_writer zs_ckpt_writer;

/* Create path and fill file (its frames already listed by zs_manifest_init) as data comes. */
zs_status zs_ckpt_writer_open(const char *path, int level, zs_ckpt_file *file,
                              zs_ckpt_writer **out);
/* Append the next count elements of (unit, kind), in the file's frame order; count must end
 * on a frame boundary. data NULL writes zeros. */
zs_status zs_ckpt_writer_put(zs_ckpt_writer *w, int unit, int kind, const float *data,
                             int64_t count);
/* Test hook: SIGKILL the process once this many frames are written (-1: never). */
void zs_ckpt_writer_kill_after(zs_ckpt_writer *w, int frames);
/* Flush, fsync and close; file->size and file->crc are then set. */
zs_status zs_ckpt_writer_finish(zs_ckpt_writer *w);
/* Frees the writer; an unfinished file is closed and removed. NULL accepted. */
void zs_ckpt_writer_destroy(zs_ckpt_writer *w);

/* ---- reading (reader.c) ------------------------------------------------------------- */

typedef struct zs_ckpt_reader zs_ckpt_reader;

/* Resolve path (zs_ckpt_resolve), parse the manifest, check every file exists with the
 * recorded size. */
zs_status zs_ckpt_reader_open(const char *path, zs_ckpt_reader **out);
void zs_ckpt_reader_close(zs_ckpt_reader *r);
const zs_manifest *zs_ckpt_reader_manifest(const zs_ckpt_reader *r);
const char *zs_ckpt_reader_dir(const zs_ckpt_reader *r);
/* Elements [lo, lo+n) of (unit, kind) into dst, at any world size: reads and decompresses
 * only the frames that overlap, checking each frame's checksum; elements past the unit's
 * used length are zero padding. */
zs_status zs_ckpt_read(zs_ckpt_reader *r, int unit, int kind, int64_t lo, int64_t n, float *dst);
/* Read everything: each file's whole-file checksum and every frame (checksum, decompress). */
zs_status zs_ckpt_verify(zs_ckpt_reader *r);
/* FNV-1a 64 over the master parameters in layout order, padding excluded: the same value
 * as the trainer's param_hash for the same parameters. */
zs_status zs_ckpt_param_hash(zs_ckpt_reader *r, uint64_t *hash);

/* ---- directories (commit.c) ------------------------------------------------------------ */

/* Checkpoint directory name of a step inside a save dir: "step_00000100". */
void zs_ckpt_step_name(int64_t step, char *buf, size_t cap);
/* Create an empty staging directory `final`.tmp (removing a stale one) and return its path;
 * `final` itself must not exist unless replace is set. */
zs_status zs_ckpt_stage(const char *final, int replace, char *tmp, size_t cap);
/* fsync the staged directory, rename it to final (atomically replacing an older one of
 * that name when replace is set) and fsync the parent. */
zs_status zs_ckpt_publish(const char *tmp, const char *final, int replace);
/* Point save_dir/latest at name (written to latest.tmp, fsynced, renamed), then keep only
 * the newest `keep` step_* checkpoints (keep <= 0: all) and remove stale staging dirs. */
zs_status zs_ckpt_set_latest(const char *save_dir, const char *name, int keep);
/* Map a user path to a checkpoint directory: a directory with manifest.json, or a save dir
 * whose `latest` names one. */
zs_status zs_ckpt_resolve(const char *path, char *out, size_t cap);
/* Remove a checkpoint-like directory and the plain files in it. */
zs_status zs_ckpt_remove_dir(const char *dir);
/* out = dir + "/" + name; ZS_ERR_INVALID when it does not fit in cap. */
zs_status zs_path_join(char *out, size_t cap, const char *dir, const char *name);
/* fsync a file or directory by path. */
zs_status zs_fsync_path(const char *path);

#endif

/* The checkpoint manifest in memory and on disk: building the canonical frame lists of every
 * rank file from the unit layout, and writing manifest.json (docs/checkpoint.md) with a
 * trailing CRC32C over its own text so a damaged manifest is detected, not misread. */
#include "ckpt/ckpt.h"

#include "ckpt/crc32c.h"
#include "ckpt/json.h"
#include "core/status.h"
#include "models/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *KIND_NAMES[ZS_CKPT_NKINDS] = {"master", "adam_m", "adam_v"};
static const char *STAGE_NAMES[4] = {"ddp", "1", "2", "3"};

const char *zs_ckpt_kind_name(int kind) {
    return kind >= 0 && kind < ZS_CKPT_NKINDS ? KIND_NAMES[kind] : "?";
}

const char *zs_ckpt_arch_name(zs_arch arch) {
    return arch == ZS_ARCH_LLAMA ? "llama" : arch == ZS_ARCH_CUSTOM ? "custom" : "gpt2";
}

const char *zs_ckpt_stage_name(int stage) {
    return stage >= 0 && stage < 4 ? STAGE_NAMES[stage] : "?";
}

zs_status zs_ckpt_stage_parse(const char *s, zs_stage *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, STAGE_NAMES[i])) {
            *out = (zs_stage)i;
            return ZS_OK;
        }
    return zs_error(ZS_ERR_INVALID, "stage '%s' is not one of ddp, 1, 2, 3", s);
}

zs_status zs_manifest_init(zs_manifest *m, const zs_ckpt_info *info) {
    return zs_manifest_init_bounded(m, info, INT64_MAX);
}

zs_status zs_manifest_init_bounded(zs_manifest *m, const zs_ckpt_info *info, int64_t max_frames) {
    zs_status st = ZS_OK;
    memset(m, 0, sizeof *m);
    m->info = *info;
    ZS_REQUIRE(info->world_size >= 1, ZS_ERR_INVALID, "checkpoint: world size %d",
               info->world_size);
    ZS_REQUIRE(info->block_elems >= ZS_CKPT_MIN_BLOCK && info->block_elems <= ZS_CKPT_MAX_BLOCK,
               ZS_ERR_INVALID, "checkpoint: block of %lld elements", (long long)info->block_elems);
    if (info->model.arch == ZS_ARCH_CUSTOM) {
        ZS_REQUIRE(info->layout, ZS_ERR_INVALID, "checkpoint: custom model without its units");
        ZS_CHECK(zs_layout_copy(info->layout, &m->layout));
        ZS_CHECK(zs_layout_finalize(&m->layout, info->world_size));
    } else {
        ZS_CHECK(zs_model_layout(&info->model, info->world_size, &m->layout));
    }
    m->info.layout = NULL; /* the copy in m->layout is the manifest's own */
    const zs_layout *l = &m->layout;
    int64_t B = info->block_elems, per_file = 0;
    for (int u = 0; u < l->n_units; u++)
        per_file += ZS_CKPT_NKINDS * ((l->units[u].shard + B - 1) / B);
    ZS_REQUIRE(per_file < (1 << 30) && per_file * info->world_size <= max_frames, ZS_ERR_INVALID,
               "checkpoint: the layout needs %lld frames per file x %d files%s",
               (long long)per_file, info->world_size,
               max_frames < INT64_MAX ? ", the manifest lists fewer" : "");
    m->files = calloc((size_t)info->world_size, sizeof *m->files);
    ZS_REQUIRE(m->files, ZS_ERR_OOM, "checkpoint: out of memory");
    m->n_files = info->world_size;
    for (int r = 0; r < m->n_files; r++) {
        zs_ckpt_file *f = &m->files[r];
        snprintf(f->name, sizeof f->name, "rank_%05d.zst", r);
        f->rank = r;
        f->frames = calloc((size_t)per_file, sizeof *f->frames);
        ZS_REQUIRE(f->frames, ZS_ERR_OOM, "checkpoint: out of memory");
        /* Canonical order: unit, then kind, then element range; the reader relies on it. */
        for (int u = 0; u < l->n_units; u++)
            for (int k = 0; k < ZS_CKPT_NKINDS; k++) {
                int64_t S = l->units[u].shard, base = (int64_t)r * S;
                for (int64_t lo = 0; lo < S; lo += B) {
                    zs_ckpt_frame *fr = &f->frames[f->n_frames++];
                    fr->unit = u;
                    fr->kind = k;
                    fr->lo = base + lo;
                    fr->count = S - lo < B ? S - lo : B;
                }
            }
    }
    return ZS_OK;
fail:
    zs_manifest_free(m);
    return st;
}

void zs_manifest_free(zs_manifest *m) {
    if (!m) return;
    for (int r = 0; r < m->n_files && m->files; r++)
        free(m->files[r].frames);
    free(m->files);
    zs_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

static void write_info(FILE *f, const zs_manifest *m) {
    const zs_ckpt_info *in = &m->info;
    const zs_model_config *c = &in->model;
    fprintf(f, "{\n\"format\":\"%s\",\n\"format_version\":%d,\n\"zshard_version\":\"%d.%d.%d\",\n",
            ZS_CKPT_FORMAT, ZS_CKPT_VERSION, ZS_VERSION_MAJOR, ZS_VERSION_MINOR, ZS_VERSION_PATCH);
    fprintf(f, "\"source\":");
    zs_json_write_string(f, in->source);
    fprintf(f, ",\n\"step\":%lld,\n\"seed\":\"%llu\",\n\"data_position\":%lld,\n",
            (long long)in->step, (unsigned long long)in->seed, (long long)in->data_position);
    fprintf(f, "\"world_size\":%d,\n\"stage\":\"%s\",\n", in->world_size,
            zs_ckpt_stage_name(in->stage));
    fprintf(f, "\"dtypes\":{\"master\":\"f32\",\"adam_m\":\"f32\",\"adam_v\":\"f32\"},\n");
    if (in->run_config) fprintf(f, "\"run_config\":%s,\n", in->run_config);
    fprintf(f, "\"model\":{\"arch\":\"%s\",\"name\":", zs_ckpt_arch_name(c->arch));
    zs_json_write_string(f, c->name);
    if (c->arch == ZS_ARCH_CUSTOM) /* the layout below is the whole model description */
        fprintf(f, "},\n");
    else
        fprintf(f,
                ",\"n_layer\":%d,\"n_head\":%d,\"n_kv_head\":%d,\"n_embd\":%d,\"ffn_hidden\":%d,"
                "\"max_seq\":%d,\"vocab\":%d,\"padded_vocab\":%d,\"rope_theta\":%.9g,"
                "\"norm_eps\":%.9g,\"tie_embeddings\":%s},\n",
                c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->ffn_hidden, c->max_seq, c->vocab,
                c->padded_vocab, (double)c->rope_theta, (double)c->norm_eps,
                zs_model_tied(c) ? "true" : "false");
    fprintf(f,
            "\"training\":{\"batch\":%d,\"seq\":%d,\"grad_accum\":%d,\"total_steps\":%d,"
            "\"warmup\":%d,\"lr\":%.9g,\"min_lr_frac\":%.9g,\"next_lr\":%.9g,\"beta1\":%.9g,"
            "\"beta2\":%.9g,\"eps\":%.9g,\"weight_decay\":%.9g,\"grad_clip\":%.9g},\n",
            in->batch, in->seq, in->grad_accum, in->total_steps, in->warmup, in->lr,
            in->min_lr_frac, in->next_lr, in->beta1, in->beta2, in->eps, in->weight_decay,
            in->grad_clip);
    if (in->has_docs) {
        fprintf(f, "\"data\":{\"docs\":");
        zs_json_write_string(f, in->docs);
        fprintf(f,
                ",\"epochs\":%lld,\"epoch\":%lld,\"position\":%lld,\"samples\":%lld,"
                "\"steps_per_epoch\":%lld,\"fingerprint\":\"%016llx\",\"eos_id\":%lld,"
                "\"pad_id\":%lld,\"doc_sep\":",
                (long long)in->epochs, (long long)in->epoch, (long long)in->epoch_position,
                (long long)in->samples, (long long)in->steps_per_epoch,
                (unsigned long long)in->fingerprint, (long long)in->eos_id, (long long)in->pad_id);
        if (in->has_doc_sep)
            zs_json_write_string(f, in->doc_sep);
        else
            fprintf(f, "null");
        fprintf(f, "},\n");
    }
    fprintf(f, "\"compression\":{\"codec\":\"zstd\",\"level\":%d,\"block_elems\":%lld},\n",
            in->level, (long long)in->block_elems);
    fprintf(f, "\"checksum\":\"crc32c\",\n");
}

static void write_layout(FILE *f, const zs_layout *l) {
    fprintf(f, "\"layout\":{\"align\":%d,\"units\":[\n", ZS_LAYOUT_ALIGN);
    for (int u = 0; u < l->n_units; u++) {
        const zs_unit_desc *ud = &l->units[u];
        fprintf(f, "{\"name\":");
        zs_json_write_string(f, ud->name);
        fprintf(f, ",\"used\":%lld,\"padded\":%lld,\"shard\":%lld,\"tensors\":[",
                (long long)ud->used, (long long)ud->padded, (long long)ud->shard);
        for (int i = 0; i < ud->n_tensors; i++) {
            const zs_tensor_desc *t = &l->tensors[ud->first_tensor + i];
            fprintf(f, "%s{\"name\":", i ? "," : "");
            zs_json_write_string(f, t->name);
            fprintf(f, ",\"shape\":[");
            for (int d = 0; d < t->ndim; d++)
                fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            fprintf(f, "],\"offset\":%lld}", (long long)t->offset);
        }
        fprintf(f, "]}%s\n", u + 1 < l->n_units ? "," : "");
    }
    fprintf(f, "]},\n");
}

static void write_files(FILE *f, const zs_manifest *m) {
    fprintf(f, "\"files\":[\n");
    for (int r = 0; r < m->n_files; r++) {
        const zs_ckpt_file *fi = &m->files[r];
        fprintf(f, "{\"name\":\"%s\",\"rank\":%d,\"size\":%llu,\"crc32c\":\"%08x\",", fi->name,
                fi->rank, (unsigned long long)fi->size, fi->crc);
        /* Frames as [unit, kind, lo, count, offset, csize, crc32c]: compact, one per line. */
        fprintf(f, "\"frames\":[\n");
        for (int i = 0; i < fi->n_frames; i++) {
            const zs_ckpt_frame *fr = &fi->frames[i];
            fprintf(f, "[%d,%d,%lld,%lld,%llu,%llu,%u]%s\n", fr->unit, fr->kind, (long long)fr->lo,
                    (long long)fr->count, (unsigned long long)fr->offset,
                    (unsigned long long)fr->csize, fr->crc, i + 1 < fi->n_frames ? "," : "");
        }
        fprintf(f, "]}%s\n", r + 1 < m->n_files ? "," : "");
    }
    fprintf(f, "]");
}

zs_status zs_manifest_write(const zs_manifest *m, const char *path) {
    zs_status st = ZS_OK;
    char *text = NULL;
    size_t len = 0;
    int fd = -1;
    FILE *f = open_memstream(&text, &len);
    ZS_REQUIRE(f, ZS_ERR_OOM, "%s: out of memory", path);
    write_info(f, m);
    write_layout(f, &m->layout);
    write_files(f, m);
    int bad = fclose(f);
    f = NULL;
    ZS_REQUIRE(!bad, ZS_ERR_OOM, "%s: out of memory", path);
    /* The last member checksums every byte before its own ",\n\"manifest_crc32c\"": a reader
     * recomputes it over the same prefix. */
    char tail[64];
    int tn = snprintf(tail, sizeof tail, ",\n\"manifest_crc32c\":\"%08x\"\n}\n",
                      zs_crc32c(0, text, len));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZS_REQUIRE(fd >= 0, ZS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    ZS_REQUIRE(write(fd, text, len) == (ssize_t)len && write(fd, tail, (size_t)tn) == tn, ZS_ERR_IO,
               "%s: write failed: %s", path, strerror(errno));
    ZS_REQUIRE(fsync(fd) == 0, ZS_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    ZS_REQUIRE(close(fd) == 0, ZS_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    fd = -1;
fail:
    if (f) fclose(f);
    if (fd >= 0) close(fd);
    free(text);
    return st;
}

zs_status zs_manifest_load(const char *dir, zs_manifest *out) {
    zs_status st = ZS_OK;
    char path[4096];
    char *text = NULL;
    FILE *f = NULL;
    memset(out, 0, sizeof *out);
    snprintf(path, sizeof path, "%s/%s", dir, ZS_CKPT_MANIFEST);
    f = fopen(path, "rb");
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ZS_REQUIRE(fseek(f, 0, SEEK_END) == 0, ZS_ERR_IO, "%s: cannot seek", path);
    long n = ftell(f);
    ZS_REQUIRE(n >= 0 && n < (1L << 30), ZS_ERR_FORMAT, "%s: unreasonable size %ld", path, n);
    rewind(f);
    text = malloc((size_t)n + 1);
    ZS_REQUIRE(text, ZS_ERR_OOM, "%s: out of memory", path);
    ZS_REQUIRE(fread(text, 1, (size_t)n, f) == (size_t)n, ZS_ERR_IO, "%s: read failed", path);
    ZS_CHECK(zs_manifest_parse(text, (size_t)n, path, out));
fail:
    if (f) fclose(f);
    free(text);
    return st;
}

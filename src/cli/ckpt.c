/* `zshard ckpt`: inspect, export, import and reshard checkpoints (docs/checkpoint.md). Every
 * error is one line naming the file and the problem, with exit status 1 (2 for usage); the
 * library writes outputs under a temporary name, so a failure leaves none behind. */
#include "args/args.h"
#include "cli/cli.h"
#include "args/flags.h"
#include "ckpt/convert.h"
#include "core/alloc.h"
#include "zshard.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int inspect(const char *dir) {
    zs_ckpt_reader *r = NULL;
    uint64_t hash = 0, total = 0, raw = 0;
    zs_status st = zs_ckpt_reader_open(dir, &r);
    if (st == ZS_OK) st = zs_ckpt_verify(r);
    if (st == ZS_OK) st = zs_ckpt_param_hash(r, &hash);
    if (st != ZS_OK) {
        zs_ckpt_reader_close(r);
        return zs_cli_fail(1, "ckpt inspect: %s", zs_last_error());
    }
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    const zs_ckpt_info *in = &m->info;
    const zs_model_config *c = &in->model;
    int frames = 0;
    for (int i = 0; i < m->n_files; i++) {
        total += m->files[i].size;
        frames += m->files[i].n_frames;
    }
    raw = (uint64_t)m->layout.total_padded * 4 * ZS_CKPT_NKINDS;
    char tb[32], rb[32];
    zs_format_bytes(total, tb, sizeof tb);
    zs_format_bytes(raw, rb, sizeof rb);
    printf("checkpoint %s\n", zs_ckpt_reader_dir(r));
    printf("  format      %s version %d (%s)\n", ZS_CKPT_FORMAT, ZS_CKPT_VERSION, in->source);
    if (in->has_docs) { /* documents: where the run stands in its epochs, as its manifest says */
        char of[32] = "";
        if (in->epochs) snprintf(of, sizeof of, " of %lld", (long long)in->epochs);
        printf("  step        %lld (--docs %s: epoch %lld%s, sample %lld of %lld, %lld steps per "
               "epoch; seed %llu, next lr %.6g)\n",
               (long long)in->step, in->docs, (long long)in->epoch, of,
               (long long)in->epoch_position, (long long)in->samples,
               (long long)in->steps_per_epoch, (unsigned long long)in->seed, in->next_lr);
    } else
        printf("  step        %lld (data position %lld, seed %llu, next lr %.6g)\n",
               (long long)in->step, (long long)in->data_position, (unsigned long long)in->seed,
               in->next_lr);
    printf("  model       %s: %d layers, %d heads, width %d, %d positions, vocab %d (padded "
           "%d), %lld params\n",
           c->name, c->n_layer, c->n_head, c->n_embd, c->max_seq, c->vocab, c->padded_vocab,
           (long long)m->layout.total_params);
    printf("  saved by    %d rank%s, stage %s; master, adam_m, adam_v in f32\n", in->world_size,
           in->world_size > 1 ? "s" : "", zs_ckpt_stage_name(in->stage));
    printf("  files       %d (%d zstd frames of up to %lld values), %s for %s of state\n",
           m->n_files, frames, (long long)in->block_elems, tb, rb);
    for (int i = 0; i < m->n_files; i++)
        printf("    %s  %12llu bytes  crc32c %08x  ok\n", m->files[i].name,
               (unsigned long long)m->files[i].size, m->files[i].crc);
    printf("  checksums   ok\n  param_hash  %016llx\n", (unsigned long long)hash);
    zs_ckpt_reader_close(r);
    return 0;
}

typedef struct ckpt_args {
    const char *pos[2];
    int npos;
    const char *format, *dtype, *model, *stage, *max_shard;
    int heads, nproc;
    const char *config_path; /* --config */
} ckpt_args;

/* SRC/DIR and DST: at most two words that are no flags. */
static int ckpt_pos(void *opts, const char *s) {
    ckpt_args *a = opts;
    if (a->npos == 2) return zs_cli_fail(2, "ckpt: unexpected argument '%s'", s);
    a->pos[a->npos++] = s;
    return 0;
}

#define CO(field) offsetof(ckpt_args, field)
static const zs_flag CKPT_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(CO(config_path)),
    {.name = "format", .kind = ZS_FLAG_STR, .off = CO(format), .arg = "hf|safetensors|llmc",
     .help = "export and import: the other side's format"},
    {.name = "dtype", .kind = ZS_FLAG_STR, .off = CO(dtype), .arg = "f32|bf16|f16",
     .help = "export: the tensors' dtype (llmc: f32 or bf16) [f32]"},
    {.name = "max-shard-size", .kind = ZS_FLAG_STR, .off = CO(max_shard), .arg = "SIZE",
     .help = "export hf: files of at most this size [5G]"},
    {.name = "model", .kind = ZS_FLAG_STR, .off = CO(model), .arg = "NAME",
     .help = "import: the preset the weights are (heads, architecture)"},
    {.name = "heads", .kind = ZS_FLAG_INT, .off = CO(heads), .lo = 1, .hi = 1 << 16, .arg = "N",
     .help = "import: attention heads of the weights"},
    {.name = "nproc", .kind = ZS_FLAG_INT, .off = CO(nproc), .lo = 1, .hi = 1 << 16, .arg = "M",
     .help = "reshard: ranks of the new checkpoint (required)"},
    {.name = "stage", .kind = ZS_FLAG_STR, .off = CO(stage), .arg = "ddp|1|2|3",
     .help = "reshard: its stage [the source's]"},
};

static const zs_flag_table CKPT_TABLE = {
    .cmd = "ckpt",
    .rows = CKPT_FLAGS,
    .count = sizeof CKPT_FLAGS / sizeof CKPT_FLAGS[0],
    .usage =
        "usage: zshard ckpt <command> ...\n"
        "  inspect DIR                      step, model, world size, stage, sizes; verifies\n"
        "                                   every checksum and prints the param_hash\n"
        "  export DIR --format hf|safetensors|llmc [--dtype f32|bf16|f16] OUT\n"
        "                                   hf: a Hugging Face directory (config.json and\n"
        "                                   model.safetensors, sharded above --max-shard-size\n"
        "                                   [5G]) for from_pretrained; safetensors: one file\n"
        "                                   (GPT-2, LLaMA); llmc: llm.c's model file (GPT-2);\n"
        "                                   streamed tensor by tensor\n"
        "  import SRC --format hf|safetensors|llmc [--model NAME | --heads N] OUT\n"
        "                                   a step-0 checkpoint for `zshard train --resume OUT`\n"
        "                                   (hf: a directory; its config.json must agree with\n"
        "                                   --model / --heads)\n"
        "  reshard DIR --nproc M [--stage ddp|1|2|3] OUT\n"
        "                                   rewrite for M ranks, one shard in memory at a time\n"
        "DIR may be a save dir (its latest checkpoint), SAVE_DIR/latest or a step dir.\n"
        "flags:\n",
    .positional = ckpt_pos,
};

/* The help text (the table's). */
static void usage(FILE *f) {
    zs_flag_help(&CKPT_TABLE, f);
}

/* argv after the command word into *a: 0, -1 after --help, or the error's status. */
static int parse(int argc, char **argv, ckpt_args *a) {
    memset(a, 0, sizeof *a);
    return zs_flag_parse(&CKPT_TABLE, argc, argv, 2, a, NULL);
}

/* *fmt: 0 safetensors, 1 llmc, 2 hf. */
static int format_of(const char *cmd, const char *f, int *fmt) {
    if (!f) return zs_cli_fail(2, "ckpt %s: --format hf|safetensors|llmc is required", cmd);
    if (!strcmp(f, "safetensors"))
        *fmt = 0;
    else if (!strcmp(f, "llmc"))
        *fmt = 1;
    else if (!strcmp(f, "hf"))
        *fmt = 2;
    else
        return zs_cli_fail(2, "ckpt %s: --format '%s' is not hf, safetensors or llmc", cmd, f);
    return 0;
}

/* DST's parent directory must exist: otherwise the error would name a staging path the user
 * never gave. Returns 0, or the printed error's status. */
static int check_dst(const char *cmd, const char *dst) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", dst);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return 0; /* the current directory */
    *(slash == dir ? slash + 1 : slash) = '\0';
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zs_cli_fail(1, "ckpt %s: %s: its directory %s does not exist (create it first)", cmd,
                           dst, dir);
    return 0;
}

int zs_cli_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    ckpt_args a;
    int rc = parse(argc, argv, &a), llmc = 0;
    if (rc) return rc < 0 ? 0 : rc;
    zs_status st = ZS_OK;
    if (!strcmp(cmd, "inspect")) {
        if (a.npos != 1)
            return zs_cli_fail(2, "ckpt inspect: %s (usage: zshard ckpt inspect DIR)",
                               a.npos ? "one checkpoint DIR, not several"
                                      : "a checkpoint DIR is required");
        return inspect(a.pos[0]);
    }
    if (a.npos != 2) {
        int known = !strcmp(cmd, "export") || !strcmp(cmd, "import") || !strcmp(cmd, "reshard");
        if (!known)
            return zs_cli_fail(2, "ckpt: unknown command '%s' (inspect, export, import, reshard)",
                               cmd);
        return zs_cli_fail(2,
                           "ckpt %s: %s (usage: zshard ckpt %s SRC DST [options], see "
                           "zshard ckpt --help)",
                           cmd,
                           a.npos == 0   ? "SRC and DST are required"
                           : a.npos == 1 ? "DST is required"
                                         : "only SRC and DST, not more",
                           cmd);
    }
    if ((rc = check_dst(cmd, a.pos[1]))) return rc;
    if (!strcmp(cmd, "export")) {
        if ((rc = format_of(cmd, a.format, &llmc))) return rc;
        zs_dtype dt = ZS_DTYPE_F32;
        if (a.dtype && zs_arg_dtype("ckpt export: --dtype", a.dtype, llmc != 1, &dt)) return 2;
        uint64_t shard = ZS_HF_SHARD_BYTES;
        if (a.max_shard && (zs_parse_bytes(a.max_shard, &shard) != ZS_OK || shard == 0))
            return zs_cli_fail(2, "ckpt export: --max-shard-size '%s' is not a size", a.max_shard);
        zs_ckpt_reader *r = NULL;
        st = zs_ckpt_reader_open(a.pos[0], &r);
        if (st == ZS_OK)
            st = llmc == 1   ? zs_llmc_export(r, a.pos[1], dt)
                 : llmc == 2 ? zs_hf_export(r, a.pos[1], dt, shard)
                             : zs_st_export(r, a.pos[1], dt);
        zs_ckpt_reader_close(r);
    } else if (!strcmp(cmd, "import")) {
        if ((rc = format_of(cmd, a.format, &llmc))) return rc;
        zs_model_config hint;
        memset(&hint, 0, sizeof hint);
        if (a.model && zs_model_preset(a.model, &hint) != ZS_OK)
            return zs_cli_fail(2, "ckpt import: %s", zs_last_error());
        if (a.heads > 0) hint.n_head = a.heads;
        const zs_model_config *h = a.model || a.heads ? &hint : NULL;
        st = llmc == 1   ? zs_llmc_import(a.pos[0], a.pos[1])
             : llmc == 2 ? zs_hf_import(a.pos[0], a.pos[1], h)
                         : zs_st_import(a.pos[0], a.pos[1], h);
    } else if (!strcmp(cmd, "reshard")) {
        if (a.nproc < 1) return zs_cli_fail(2, "ckpt reshard: --nproc M (>= 1) is required");
        zs_ckpt_reader *r = NULL;
        zs_stage stage = ZS_STAGE_DDP;
        if (a.stage) {
            if (zs_ckpt_stage_parse(a.stage, &stage) != ZS_OK)
                return zs_cli_fail(2, "ckpt reshard: --stage: %s", zs_last_error());
        } else if ((st = zs_ckpt_reader_open(a.pos[0], &r)) == ZS_OK) {
            stage = zs_ckpt_reader_manifest(r)->info.stage;
        }
        zs_ckpt_reader_close(r);
        if (st == ZS_OK) st = zs_ckpt_reshard(a.pos[0], a.pos[1], a.nproc, stage);
    } else {
        return zs_cli_fail(2, "ckpt: unknown command '%s' (inspect, export, import, reshard)", cmd);
    }
    if (st != ZS_OK) return zs_cli_fail(1, "ckpt %s: %s", cmd, zs_last_error());
    return 0;
}

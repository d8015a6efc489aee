/* `zshard mem`: predicted per-rank memory by category for a model, world size and stage,
 * from the same unit layout the engine uses; `--compare` puts ddp/1/2/3 side by side with
 * the model-state formula for each (docs/architecture.md "Memory accounting"). Nothing is
 * allocated. */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "cli/train_flags.h"
#include "data/data.h"
#include "train/docs_setup.h"
#include "core/alloc.h"
#include "zshard.h"

#include <stdio.h>
#include <string.h>

static const char *STAGE_NAME[] = {"ddp", "ZeRO-1", "ZeRO-2", "ZeRO-3"};

const char *zs_cli_formula_text(int stage, const zs_mem_options *mo, char *buf, size_t n) {
    int a, b;
    zs_mem_formula(stage, mo, &a, &b);
    if (a && b)
        snprintf(buf, n, "%dΨ + %dΨ/N", a, b);
    else if (a)
        snprintf(buf, n, "%dΨ", a);
    else
        snprintf(buf, n, "%dΨ/N", b);
    return buf;
}

uint64_t zs_cli_formula_bytes(int stage, const zs_mem_options *mo, uint64_t psi, int world) {
    int a, b;
    zs_mem_formula(stage, mo, &a, &b);
    return (uint64_t)a * psi + (uint64_t)b * psi / (uint64_t)world;
}

static const char *dtype_words(const zs_mem_options *mo) {
    if (mo->dtype == ZS_DTYPE_F32 && mo->reduce_dtype == ZS_DTYPE_F32) return "fp32";
    if (mo->dtype == ZS_DTYPE_BF16 && mo->reduce_dtype == ZS_DTYPE_BF16)
        return "bf16 params and grads, fp32 master + Adam";
    if (mo->dtype == ZS_DTYPE_BF16) return "bf16 params, fp32 grads, fp32 master + Adam";
    return "fp32 params, bf16 grads, fp32 Adam";
}

static int parse_dtype(const char *flag, const char *v, zs_dtype *dt) {
    return zs_arg_dtype(flag, v, 0, dt);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: zshard mem [--model NAME] [--data FILE] [--nproc N] [--stage ddp|1|2|3]\n"
            "                  [--batch B] [--seq T] [--grad-accum K] [--prefetch P] [--vocab V]\n"
            "                  [--recompute none|block] [--attention flash|naive]\n"
            "                  [--dtype fp32|bf16] [--device cpu|cuda|auto]\n"
            "                  [--reduce-dtype fp32|bf16] [--comm auto|shm|gloo|mpi|nccl]\n"
            "                  [--device-mem SIZE] [--tie-embeddings on|off] [--compare]\n"
            "                  [--docs none|pack|concat|pad] [--config FILE] [train's flags]\n"
            "Predicts per-rank peak memory by category before a run. --dtype is the compute\n"
            "  copy of the parameters, --reduce-dtype the gradients' (default: --dtype); the\n"
            "  master weights and Adam moments are fp32 either way. --device-mem (e.g. 80G)\n"
            "  adds a row saying which stages fit on a device of that size, and for those that\n"
            "  do not, what would (recompute, smaller micro-batches, more ranks). comm is the shm\n"
            "  backend's staging (auto = shm, ranks on one host), or mpi's fp32 reduction\n"
            "  staging; memory MPI and NCCL allocate themselves is not counted.\n"
            "  The defaults are train's (--model gpt2-tiny, --batch 8, --seq 64), so the same\n"
            "  flags predict what `train --mem-report` measures. --data FILE gives the\n"
            "  vocabulary as train reads it (256 for text; --vocab for token shards); without\n"
            "  it GPT-2's 50257, or LLaMA's 32000 for LLaMA models. A --batch that the ranks\n"
            "  and micro-batches do not divide is an error, as in train; without --batch,\n"
            "  8 or else one sequence per rank and micro-batch. --docs pack|pad adds each token's\n"
            "  document start to the batch buffers, as train does (docs/data.md).\n"
            "  Every flag of train, and its --config files, are accepted, so that a training\n"
            "  command with `train` replaced by `mem` predicts that run; those that do not\n"
            "  change memory (--lr, --steps, --doc-sep, ...) are named in a note.\n");
}

static double gib(uint64_t b) {
    return (double)b / 1073741824.0;
}

/* What mem reads from the command line (and a --config file). */
typedef struct mem_args {
    const char *model, *data, *val_data, *device;
    int nproc, stage, batch, seq, accum, prefetch, vocab, compare, reduce_set, tie;
    uint64_t device_mem;
    zs_mem_options mo;
    char ignored[512]; /* train's flags that do not change memory, named once each */
} mem_args;

/* Flag `a` (with its "--") set to v: 0 done, 2 a usage error (printed), -1 not one of mem's. */
static int mem_flag(mem_args *m, const char *a, const char *v) {
    int rc = 0;
    if (!strcmp(a, "--model"))
        m->model = v;
    else if (!strcmp(a, "--data"))
        m->data = v;
    else if (!strcmp(a, "--val-data"))
        m->val_data = v;
    else if (!strcmp(a, "--tie-embeddings"))
        rc = zs_arg_tie(a, v, &m->tie);
    else if (!strcmp(a, "--nproc"))
        rc = zs_arg_int(a, v, &m->nproc);
    else if (!strcmp(a, "--batch"))
        rc = zs_arg_int(a, v, &m->batch);
    else if (!strcmp(a, "--seq"))
        rc = zs_arg_int(a, v, &m->seq);
    else if (!strcmp(a, "--grad-accum"))
        rc = zs_arg_int(a, v, &m->accum);
    else if (!strcmp(a, "--prefetch"))
        rc = zs_arg_int(a, v, &m->prefetch);
    else if (!strcmp(a, "--vocab"))
        rc = zs_arg_int(a, v, &m->vocab);
    else if (!strcmp(a, "--dtype"))
        rc = parse_dtype(a, v, &m->mo.dtype);
    else if (!strcmp(a, "--comm"))
        m->mo.comm = v;
    else if (!strcmp(a, "--docs")) {
        if (zs_docs_mode_parse(v, &m->mo.docs) != ZS_OK)
            return zs_cli_fail(2, "mem: %s", zs_last_error());
    } else if (!strcmp(a, "--device-mem")) {
        if (zs_parse_bytes(v, &m->device_mem) != ZS_OK)
            return zs_cli_fail(2, "--device-mem: %s", zs_last_error());
    } else if (!strcmp(a, "--reduce-dtype")) {
        rc = parse_dtype(a, v, &m->mo.reduce_dtype);
        m->reduce_set = 1;
    } else if (!strcmp(a, "--recompute")) {
        rc = zs_arg_recompute(a, v, &m->mo.recompute);
    } else if (!strcmp(a, "--device")) {
        rc = zs_arg_device(a, v, &m->device);
    } else if (!strcmp(a, "--attention")) {
        rc = zs_arg_attention(a, v, &m->mo.attention);
    } else if (!strcmp(a, "--stage")) {
        zs_stage st = ZS_STAGE_DDP;
        rc = zs_arg_stage(a, v, &st);
        m->stage = (int)st;
    } else
        return -1;
    return rc;
}

/* One of train's flags that mem has no use for: named in the note (once). */
static void mem_ignore(mem_args *m, const char *name) {
    char key[80];
    snprintf(key, sizeof key, " --%.60s,", name);
    if (strstr(m->ignored, key)) return;
    size_t L = strlen(m->ignored);
    snprintf(m->ignored + L, sizeof m->ignored - L, "%s", key);
}

/* A --config file, as train reads it: mem's settings taken, train's others noted. */
static zs_config g_mem_config; /* its values are the settings' text: kept for the command */

static int mem_config(mem_args *m, const char *path) {
    zs_config c;
    int rc = zs_config_load(path, &c);
    if (rc) return rc;
    for (int i = 0; i < c.n && !rc; i++) {
        const zs_config_entry *e = &c.e[i];
        char flag[128];
        snprintf(flag, sizeof flag, "--%s", e->key);
        for (char *p = flag; *p; p++)
            if (*p == '_') *p = '-';
        const train_flag *f = zs_train_flag_find(e->key);
        if (!f) {
            rc = zs_cli_fail(2, "%s:%d: unknown key '%s' (the keys are train's long flags)", path,
                             e->line, e->key);
            break;
        }
        if (!e->value) continue; /* null: the default */
        rc = mem_flag(m, flag, e->value);
        if (rc == -1) {
            mem_ignore(m, flag + 2);
            rc = 0;
        }
    }
    zs_config_free(&g_mem_config);
    g_mem_config = c;
    return rc;
}

int zs_cli_mem(int argc, char **argv) {
    mem_args m = {.model = "gpt2-tiny", .device = "auto", .nproc = 1, .seq = 64, .accum = 1,
                  .prefetch = 1, .vocab = -1};
    int rc = 0;
    /* A --config file first, wherever it stands, so that flags override it (as train). */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            const char *v = zs_arg_value(argc, argv, &i);
            if (!v) return 2;
            if ((rc = mem_config(&m, v))) return rc;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--compare")) {
            m.compare = 1;
            continue;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2))
            return zs_cli_fail(2, "mem: unexpected argument '%s' (see zshard mem --help)", a);
        /* train's flags all work here, so that a training command line with `train` replaced
         * by `mem` predicts that run; those that do not change memory are named in a note */
        const train_flag *f = zs_train_flag_find(a + 2);
        if (f && f->kind == TF_SWITCH) { /* --quiet, --quiet true */
            if (i + 1 < argc && zs_arg_bool_word(argv[i + 1])) i++;
            mem_ignore(&m, a + 2);
            continue;
        }
        if (!f && strcmp(a, "--print-config") == 0) {
            mem_ignore(&m, a + 2);
            continue;
        }
        if (!(v = zs_arg_value(argc, argv, &i))) return 2;
        rc = mem_flag(&m, a, v);
        if (rc == -1 && f) {
            mem_ignore(&m, a + 2);
            rc = 0;
        } else if (rc == -1)
            return zs_cli_fail(2, "mem: unknown flag '%s' (see zshard mem --help)", a);
        if (rc) return rc;
    }
    const char *model = m.model, *data = m.data, *val_data = m.val_data, *device = m.device;
    int nproc = m.nproc, stage = m.stage, batch = m.batch, seq = m.seq, accum = m.accum;
    int prefetch = m.prefetch, vocab = m.vocab, compare = m.compare, reduce_set = m.reduce_set;
    int tie = m.tie;
    uint64_t device_mem = m.device_mem;
    zs_mem_options mo = m.mo;
    if (!reduce_set) mo.reduce_dtype = mo.dtype;
    /* A prediction needs no GPU: auto predicts the device a run here would pick. */
    const char *chosen = "cpu";
    char why[160];
    if (!strcmp(device, "cuda"))
        chosen = "cuda";
    else if (!strcmp(device, "auto") && zs_device_choose(device, &chosen, why, sizeof why) != ZS_OK)
        chosen = "cpu";
    mo.device = chosen;
    if (nproc < 1 || seq < 1 || accum < 1 || prefetch < 0 || (vocab < 1 && vocab != -1) ||
        batch < 0)
        return zs_cli_fail(2, "mem: sizes must be positive");
    if (!batch) batch = 8 % (nproc * accum) == 0 ? 8 : nproc * accum; /* train's 8 if it divides */
    if (batch % (nproc * accum))
        return zs_cli_fail(2, "mem: --batch %d does not divide into %d rank%s x %d micro-batch%s",
                           batch, nproc, nproc > 1 ? "s" : "", accum, accum > 1 ? "es" : "");
    zs_model_config cfg;
    if (zs_model_preset(model, &cfg) != ZS_OK) return zs_cli_fail(2, "mem: %s", zs_last_error());
    if (tie && cfg.tie_embeddings && tie != (int)cfg.tie_embeddings)
        return zs_cli_fail(2, "mem: --tie-embeddings %s contradicts %s's tie_embeddings",
                           tie == ZS_TIE_ON ? "on" : "off", model);
    if (tie) cfg.tie_embeddings = (zs_tie)tie;
    if (data) { /* the vocabulary train would read from the data (and its dataset.json) */
        zs_dataset d;
        zs_docs_meta meta;
        if (zs_docs_meta_read(data, &meta) != ZS_OK)
            return zs_cli_fail(1, "mem: --data: %s", zs_last_error());
        if (vocab <= 0 && meta.found) vocab = meta.vocab;
        if (zs_dataset_open_vocab(data, val_data, 0.1, vocab > 0 ? vocab : 0, &d) != ZS_OK)
            return zs_cli_fail(1, "mem: --data: %s", zs_last_error());
        vocab = d.vocab;
        zs_dataset_close(&d);
    }
    if (vocab == -1) vocab = cfg.arch == ZS_ARCH_LLAMA ? 32000 : 50257;
    zs_model_config_set_vocab(&cfg, vocab);

    zs_mem_estimate est[4];
    int first = compare ? 0 : stage, last = compare ? 3 : stage;
    for (int s = first; s <= last; s++)
        if (zs_mem_estimate_compute_opts(&cfg, nproc, s, batch, seq, accum, prefetch, &mo,
                                         &est[s]) != ZS_OK)
            return zs_cli_fail(2, "mem: %s", zs_last_error());
    const zs_mem_estimate *e0 = &est[first];
    printf("zshard mem: %s, %d rank%s, %s, global batch %d x seq %d (%d per rank per "
           "micro-batch), prefetch %d, recompute %s, %s attention%s%s\n",
           model, nproc, nproc > 1 ? "s" : "", dtype_words(&mo), batch, seq,
           batch / (nproc * accum), prefetch, mo.recompute == ZS_RECOMPUTE_BLOCK ? "block" : "none",
           mo.attention == ZS_ATTENTION_NAIVE ? "naive (T x T)" : "flash",
           mo.docs ? ", --docs " : "", mo.docs ? zs_docs_mode_name(mo.docs) : "");
    printf("Ψ = %.1fM parameters (%.1fM with alignment and shard padding), vocab %d padded to "
           "%d\n",
           (double)e0->params / 1e6, (double)e0->padded / 1e6, cfg.vocab, cfg.padded_vocab);
    /* --device cuda predicts the GPU's memory: what the device-resident trainer allocates there
     * (host staging buffers are host memory and not counted). */
    if (m.ignored[0]) { /* " --lr, --steps," -> "--lr, --steps" */
        size_t L = strlen(m.ignored);
        m.ignored[L - 1] = 0;
        printf("note: train's%s %s not change memory: ignored here\n", m.ignored,
               strchr(m.ignored, ',') ? "do" : "does");
    }
    if (!strcmp(mo.device, "cuda"))
        printf("device cuda: GPU memory per rank (pinned host staging not included)\n\n");
    else
        printf("device cpu\n\n");
    printf("| per rank, GiB |");
    for (int s = first; s <= last; s++)
        printf(" %s |", STAGE_NAME[s]);
    printf("\n|---|");
    for (int s = first; s <= last; s++)
        printf("---:|");
    printf("\n");
    for (int c = 0; c < ZS_MEM_NCAT; c++) {
        printf("| %s |", zs_mem_category_name((zs_mem_category)c));
        for (int s = first; s <= last; s++)
            printf(" %.3f |", gib(est[s].bytes[c]));
        printf("\n");
    }
    printf("| **model states** |");
    for (int s = first; s <= last; s++)
        printf(" **%.3f** |", gib(est[s].model_states));
    printf("\n| formula (Ψ padded, N=%d) |", nproc);
    for (int s = first; s <= last; s++) {
        char f[48];
        printf(" %s = %.3f |", zs_cli_formula_text(s, &mo, f, sizeof f),
               gib(zs_cli_formula_bytes(s, &mo, (uint64_t)e0->padded, nproc)));
    }
    printf("\n| **total** |");
    for (int s = first; s <= last; s++)
        printf(" **%.3f** |", gib(est[s].total));
    printf("\n");
    if (device_mem) {
        char cap[32];
        zs_format_bytes(device_mem, cap, sizeof cap);
        printf("| fits in %s |", cap);
        for (int s = first; s <= last; s++)
            printf(" %s |", est[s].total <= device_mem ? "yes" : "**no**");
        printf("\n");
        for (int s = first; s <= last; s++) {
            if (est[s].total <= device_mem) continue;
            char hint[512];
            zs_mem_fit_hint(&cfg, nproc, s, batch, seq, accum, prefetch, &mo, device_mem, hint,
                            sizeof hint);
            printf("%s%s does not fit in %s; would fit: %s\n", s == first ? "\n" : "",
                   STAGE_NAME[s], cap, hint);
        }
    }
    if (compare)
        printf("\nModel states per rank: DDP %.1f GB, ZeRO-3 %.1f GB (10^9 bytes); ZeRO-3's are "
               "%.1f%% of DDP's, total %.1f%%.\n",
               (double)est[0].model_states / 1e9, (double)est[3].model_states / 1e9,
               100.0 * (double)est[3].model_states / (double)est[0].model_states,
               100.0 * (double)est[3].total / (double)est[0].total);
    return 0;
}

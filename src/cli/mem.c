/* `zshard mem`: predicted per-rank memory by category for a model, world size and stage,
 * from the same unit layout the engine uses; `--compare` puts ddp/1/2/3 side by side with
 * the model-state formula for each (docs/architecture.md "Memory accounting"). Nothing is
 * allocated. */
#include "cli/cli.h"
#include "args/flags.h"
#include "cli/train_args.h"
#include "cli/train_flags.h"
#include "data/data.h"
#include "train/docs_setup.h"
#include "train/mem_formula.h"
#include "core/alloc.h"
#include "zshard.h"

#include <stdio.h>
#include <string.h>

static const char *STAGE_NAME[] = {"ddp", "ZeRO-1", "ZeRO-2", "ZeRO-3"};

/* The compute and reduction dtypes in words. */
static const char *dtype_words(const zs_mem_options *mo) {
    if (mo->dtype == ZS_DTYPE_F32 && mo->reduce_dtype == ZS_DTYPE_F32) return "fp32";
    if (mo->dtype == ZS_DTYPE_BF16 && mo->reduce_dtype == ZS_DTYPE_BF16)
        return "bf16 params and grads, fp32 master + Adam";
    if (mo->dtype == ZS_DTYPE_BF16) return "bf16 params, fp32 grads, fp32 master + Adam";
    return "fp32 params, bf16 grads, fp32 Adam";
}

/* GiB of b bytes. */
static double gib(uint64_t b) {
    return (double)b / 1073741824.0;
}

/* What mem reads: train's options (every train flag is one of mem's, so that a training
 * command with `train` replaced by `mem` predicts that run), and --compare. */
typedef struct mem_args {
    train_opts t; /* first: train's rows' offsets are mem's */
    int compare;
    int nnodes;        /* --nnodes: hosts, --nproc ranks each (zshard run's meaning) */
    char ignored[512]; /* train's flags that do not change memory, named once each */
} mem_args;

/* train's flags that change memory; the others are named in a note. */
static const char *const MEM_FLAGS[] = {
    "model", "data", "val-data", "tie-embeddings", "nproc", "batch", "seq", "grad-accum",
    "prefetch", "vocab", "dtype", "comm", "docs", "device-mem", "reduce-dtype", "recompute",
    "device", "attention", "stage", "compare", "config", "offload", "offload-fraction",
    "shard-group", "replicate", "nnodes"};

/* One of train's flags that mem has no use for: named in the note (once). */
static void mem_seen(void *opts, const zs_flag *f) {
    mem_args *m = opts;
    for (size_t i = 0; i < sizeof MEM_FLAGS / sizeof MEM_FLAGS[0]; i++)
        if (!strcmp(f->name, MEM_FLAGS[i])) return;
    char key[80];
    snprintf(key, sizeof key, " --%.60s,", f->name);
    if (strstr(m->ignored, key)) return;
    size_t L = strlen(m->ignored);
    snprintf(m->ignored + L, sizeof m->ignored - L, "%s", key);
}

static const char USAGE[] =
    "usage: zshard mem [--model NAME] [--data FILE] [--nproc N] [--nnodes M]\n"
    "                  [--stage ddp|1|2|3] [--shard-group S|host] [--batch B] [--seq T]\n"
    "                  [--compare] [--config FILE] [train's flags]\n"
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
    "  change memory (--lr, --steps, --doc-sep, ...) are named in a note.\n"
    "  --nnodes M puts --nproc ranks on each of M hosts (as zshard run does): comm is\n"
    "  then gloo's across hosts under auto. With more than one rank a table gives the\n"
    "  bytes each rank sends per step within its shard group, to its replicas, and of\n"
    "  these to other hosts, for ddp, ZeRO-3 and hybrid sharding (--shard-group;\n"
    "  docs/sharding.md \"Bytes across hosts\").\n"
    "\n";

/* The bytes each rank sends per step within its shard group, to its replicas, and of these to
 * other hosts: ddp and ZeRO-3 flat, the stage asked for (flat or at its mesh), and, across
 * hosts, hybrid sharding by host. */
static void print_bytes_sent(const zs_model_config *cfg, const zs_mem_options *mo, int world,
                             int per_host, int stage, int S, int batch, int seq, int accum) {
    struct {
        int stage, S;
    } rows[4];
    int n = 0;
    rows[n].stage = 0, rows[n++].S = world;
    rows[n].stage = 3, rows[n++].S = world;
    if (stage != 0 && (stage != 3 || S < world)) rows[n].stage = stage, rows[n++].S = S;
    if (S == world && per_host < world && stage != 0) rows[n].stage = stage, rows[n++].S = per_host;
    printf("\nBytes a rank sends per step (direct exchange, %s):\n\n| plan | in its shard group, "
           "MB | to its replicas, MB | of these, to other hosts, MB |\n|---|---:|---:|---:|\n",
           "docs/sharding.md \"Bytes across hosts\"");
    for (int i = 0; i < n; i++) {
        zs_mem_options o = *mo;
        zs_mem_estimate e;
        o.shard_group = rows[i].S;
        if (zs_mem_estimate_compute_opts(cfg, world, rows[i].stage, batch, seq, accum, 0, &o, &e) !=
            ZS_OK)
            continue;
        double in, rep, out;
        zs_mem_bytes_sent(rows[i].stage, &o, (uint64_t)e.padded, world, per_host, rows[i].S, accum,
                          &in, &rep, &out);
        char plan[96];
        if (rows[i].S < world)
            snprintf(plan, sizeof plan, "%s, %d replicas x shard groups of %d",
                     STAGE_NAME[rows[i].stage], world / rows[i].S, rows[i].S);
        else
            snprintf(plan, sizeof plan, "%s", STAGE_NAME[rows[i].stage]);
        printf("| %s | %.2f | %.2f | %.2f |\n", plan, in / 1e6, rep / 1e6, out / 1e6);
    }
}

/* mem's table: train's rows, then --compare (built once). */
static const zs_flag_table *mem_table(void) {
    static zs_flag rows[128];
    static zs_flag_table t;
    if (t.rows) return &t;
    const zs_flag_table *tr = zs_train_flags();
    int n = 0;
    for (int i = 0; i < tr->count && n < 124; i++)
        rows[n++] = tr->rows[i];
    rows[n++] = (zs_flag){.name = "mem", .kind = ZS_FLAG_SECTION};
    rows[n++] = (zs_flag){.name = "compare", .kind = ZS_FLAG_SWITCH,
                          .off = offsetof(mem_args, compare),
                          .help = "ddp, 1, 2 and 3 side by side with each one's formula"};
    rows[n++] = (zs_flag){.name = "nnodes", .kind = ZS_FLAG_INT, .lo = 1, .hi = 1 << 16,
                          .off = offsetof(mem_args, nnodes), .arg = "M",
                          .help = "hosts, each running --nproc ranks [1]"};
    t = (zs_flag_table){.cmd = "mem", .rows = rows, .count = n, .usage = USAGE,
                        .footer = "model presets: see zshard train --help\n",
                        .given_off = offsetof(mem_args, t.given), .seen = mem_seen};
    return &t;
}

int zs_cli_mem(int argc, char **argv) {
    mem_args m;
    memset(&m, 0, sizeof m);
    m.t.cfg = zs_train_config_default();
    m.t.model_name = "gpt2-tiny";
    m.t.nproc = 1;
    m.nnodes = 1;
    int rc = zs_flag_parse(mem_table(), argc, argv, 1, &m, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = zs_train_shard_group(&m.t, "mem"))) return rc;
    const zs_train_config *tc = &m.t.cfg;
    const char *model = m.t.model_name, *data = tc->data_path, *val_data = tc->val_path;
    const char *device = tc->module.device ? tc->module.device : "auto";
    int nproc = m.t.nproc * m.nnodes, per_host = m.t.nproc; /* nproc: the world from here on */
    int stage = (int)tc->module.stage, seq = tc->seq, accum = tc->grad_accum;
    int batch = (m.t.given & ZS_GIVEN_BATCH) ? tc->batch : 0; /* 0: train's 8 if it divides */
    int prefetch = tc->module.prefetch, vocab = tc->vocab > 0 ? tc->vocab : -1, compare = m.compare;
    int tie = m.t.tie;
    uint64_t device_mem = tc->device_mem;
    zs_mem_options mo;
    memset(&mo, 0, sizeof mo);
    mo.dtype = tc->module.param_dtype;
    mo.reduce_dtype = m.t.reduce_dtype_set ? tc->module.grad_dtype : tc->module.param_dtype;
    mo.recompute = tc->recompute;
    mo.attention = tc->attention;
    mo.comm = tc->comm;
    mo.docs = tc->docs;
    mo.offload = tc->module.offload;
    mo.offload_fraction = tc->module.offload_fraction;
    mo.nnodes = m.nnodes;
    int S = nproc;
    if (zs_mesh_shard_group(&tc->module, nproc, per_host, &S) != ZS_OK)
        return zs_cli_fail(2, "mem: %s", zs_last_error());
    mo.shard_group = S < nproc ? S : 0; /* 0: flat, also for the hint's larger worlds */
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
    for (int s = first; s <= last; s++) {
        zs_mem_options so = mo; /* ddp has no shard groups: --compare's ddp column is flat */
        if (s == 0 && compare) so.shard_group = 0;
        if (zs_mem_estimate_compute_opts(&cfg, nproc, s, batch, seq, accum, prefetch, &so,
                                         &est[s]) != ZS_OK)
            return zs_cli_fail(2, "mem: %s", zs_last_error());
    }
    const zs_mem_estimate *e0 = &est[first];
    printf("zshard mem: %s, %d rank%s, %s, global batch %d x seq %d (%d per rank per "
           "micro-batch), prefetch %d, recompute %s, %s attention%s%s%s%s\n",
           model, nproc, nproc > 1 ? "s" : "", dtype_words(&mo), batch, seq,
           batch / (nproc * accum), prefetch, mo.recompute == ZS_RECOMPUTE_BLOCK ? "block" : "none",
           mo.attention == ZS_ATTENTION_NAIVE ? "naive (T x T)" : "flash",
           mo.docs ? ", --docs " : "", mo.docs ? zs_docs_mode_name(mo.docs) : "",
           mo.offload ? ", --offload " : "", mo.offload ? zs_offload_name(mo.offload) : "");
    if (m.nnodes > 1) printf("%d hosts x %d ranks\n", m.nnodes, per_host);
    if (S < nproc)
        printf("hybrid sharding: %d replicas x shard groups of %d ranks (the state split %d ways, "
               "N = %d below)\n",
               nproc / S, S, S, S);
    printf("Ψ = %.1fM parameters (%llu with alignment and shard padding), vocab %d padded to "
           "%d\n",
           (double)e0->params / 1e6, (unsigned long long)e0->padded, cfg.vocab, cfg.padded_vocab);
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
    /* A fraction offloads whole units: no formula per parameter describes it. */
    if (!mo.offload || mo.offload_fraction <= 0 || mo.offload_fraction >= 1) {
        printf("\n| formula (Ψ padded, N=%d) |", S);
        for (int s = first; s <= last; s++) {
            char f[48];
            int n = s == 0 && compare ? nproc : S;
            printf(" %s = %.3f |", zs_mem_formula_text(s, &mo, f, sizeof f),
                   gib(zs_mem_formula_bytes(s, &mo, (uint64_t)est[s].padded, n)));
        }
    }
    printf("\n| **total** |");
    for (int s = first; s <= last; s++)
        printf(" **%.3f** |", gib(est[s].total));
    printf("\n| total, bytes |"); /* exact, for scripts: what `train --log` records */
    for (int s = first; s <= last; s++)
        printf(" %llu |", (unsigned long long)est[s].total);
    printf("\n");
    if (mo.offload) { /* the offloaded state, in pinned host memory */
        for (int c = 0; c < ZS_MEM_NCAT; c++) {
            if (!est[first].host_bytes[c]) continue;
            printf("| host (pinned): %s |", zs_mem_category_name((zs_mem_category)c));
            for (int s = first; s <= last; s++)
                printf(" %.3f |", gib(est[s].host_bytes[c]));
            printf("\n");
        }
        printf("| **host (pinned) total** |");
        for (int s = first; s <= last; s++)
            printf(" **%.3f** |", gib(est[s].host_total));
        printf("\n");
    }
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
            zs_mem_options so = mo;
            if (s == 0 && compare) so.shard_group = 0;
            zs_mem_fit_hint(&cfg, nproc, s, batch, seq, accum, prefetch, &so, device_mem, hint,
                            sizeof hint);
            printf("%s%s does not fit in %s; would fit: %s\n", s == first ? "\n" : "",
                   STAGE_NAME[s], cap, hint);
        }
    }
    if (nproc > 1) print_bytes_sent(&cfg, &mo, nproc, per_host, stage, S, batch, seq, accum);
    if (compare)
        printf("\nModel states per rank: DDP %.1f GB, ZeRO-3 %.1f GB (10^9 bytes); ZeRO-3's are "
               "%.1f%% of DDP's, total %.1f%%.\n",
               (double)est[0].model_states / 1e9, (double)est[3].model_states / 1e9,
               100.0 * (double)est[3].model_states / (double)est[0].model_states,
               100.0 * (double)est[3].total / (double)est[0].total);
    return 0;
}

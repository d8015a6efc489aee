/* `zshard bench memory`: train a model for a few steps at every stage and world size in a
 * list, each run a real `zshard train --nproc N`, and tabulate the measured per-rank peak
 * memory (model states and total) and ms/step next to the model-state formula
 * (docs/architecture.md "Memory accounting"). Writes markdown and CSV, and an SVG chart drawn by
 * gnuplot (bars per stage, one group per world size). The formula column is the ceiling each
 * measurement is checked against. */
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "args/args.h"
#include "args/flags.h"
#include "train/mem_formula.h"
#include "data/data.h"
#include "zshard.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *STAGE_FLAG[] = {"ddp", "1", "2", "3"};
static const char *STAGE_NAME[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};

typedef struct cell {
    int ok;
    double ms;        /* median ms/step after the first step */
    uint64_t states;  /* max over ranks of param+param_shard+grad+grad_shard+optim */
    uint64_t total;   /* max over ranks of the total peak */
    uint64_t formula; /* model-state bytes by the formula for the padded layout */
} cell;

static uint64_t field(const char *s, const char *end, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *v = strstr(s, k);
    return v && (!end || v < end) ? strtoull(v + strlen(k), NULL, 10) : 0;
}

static int parse_run(const char *log, cell *c) {
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    static char line[1 << 16];
    double ms[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"final\":true")) {
            const char *pr = strstr(line, "\"peak_bytes_per_rank\":[");
            const char *end = pr ? strchr(pr, ']') : NULL;
            while (pr && (pr = strchr(pr + 1, '{')) && pr < end) {
                const char *close = strchr(pr, '}');
                uint64_t st = field(pr, close, "param") + field(pr, close, "param_shard") +
                              field(pr, close, "grad") + field(pr, close, "grad_shard") +
                              field(pr, close, "optim_state");
                uint64_t tot = field(pr, close, "total");
                if (st > c->states) c->states = st;
                if (tot > c->total) c->total = tot;
            }
            c->ok = 1;
        } else if (strstr(line, "\"step\":") && n < 256) {
            const char *m = strstr(line, "\"ms\":");
            if (m && !strstr(line, "\"step\":1,")) ms[n++] = atof(m + 5);
        }
    }
    fclose(f);
    if (n) {
        c->ms = zs_bench_median(ms, n);
    }
    return c->ok ? 0 : -1;
}

static int parse_list(const char *flag, const char *text, int *out, int max) {
    int n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 64) return -zs_flag_fail(2, "%s: bad list '%s'", flag, text);
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -zs_flag_fail(2, "%s: bad list '%s'", flag, text);
    }
    return n;
}

/* What bench memory reads from the command line. */
typedef struct memb_opts {
    const char *model, *out, *dtype, *rdtype, *recompute, *attention, *device;
    int ws[8], nw, batch, seq, steps;
    const char *config_path; /* --config */
} memb_opts;

/* --nproc-list 1,2,4: world sizes 1..64. */
static int parse_nproc_list(void *opts, const char *text, const char *what) {
    memb_opts *o = opts;
    int n = parse_list(what, text, o->ws, 8);
    if (n <= 0) return 2;
    o->nw = n;
    return 0;
}

#define MO(field) offsetof(memb_opts, field)
static const zs_flag MEMB_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(MO(config_path)),
    {.name = "model", .kind = ZS_FLAG_STR, .off = MO(model), .arg = "NAME",
     .help = "model preset [gpt2-124m]"},
    {.name = "nproc-list", .kind = ZS_FLAG_CUSTOM, .arg = "1,2,4", .parse = parse_nproc_list,
     .help = "world sizes, each 1..64 [1,2,4]"},
    {.name = "batch", .kind = ZS_FLAG_INT, .off = MO(batch), .lo = 1, .hi = INT_MAX, .arg = "B",
     .help = "global batch [4]"},
    {.name = "seq", .kind = ZS_FLAG_INT, .off = MO(seq), .lo = 1, .hi = INT_MAX, .arg = "T",
     .help = "sequence length [64]"},
    {.name = "steps", .kind = ZS_FLAG_INT, .off = MO(steps), .lo = 2, .hi = INT_MAX, .arg = "N",
     .help = "steps per run, at least 2 [3]"},
    {.name = "dtype", .kind = ZS_FLAG_STR, .off = MO(dtype), .arg = "fp32|bf16",
     .help = "compute dtype [fp32]"},
    {.name = "reduce-dtype", .kind = ZS_FLAG_STR, .off = MO(rdtype), .arg = "fp32|bf16",
     .help = "gradient dtype [--dtype]"},
    {.name = "recompute", .kind = ZS_FLAG_STR, .off = MO(recompute), .arg = "none|block",
     .help = "activation recomputation [none]"},
    {.name = "attention", .kind = ZS_FLAG_STR, .off = MO(attention), .arg = "flash|naive",
     .help = "attention kernel [flash]"},
    {.name = "device", .kind = ZS_FLAG_STR, .off = MO(device), .arg = "cpu|cuda|auto",
     .help = "where the runs train [auto]"},
    {.name = "out", .kind = ZS_FLAG_STR, .off = MO(out), .arg = "DIR",
     .help = "output folder [bench-memory]"},
};

static const zs_flag_table MEMB_TABLE = {
    .cmd = "bench memory",
    .rows = MEMB_FLAGS,
    .count = sizeof MEMB_FLAGS / sizeof MEMB_FLAGS[0],
    .usage = "usage: zshard bench memory [options]\n"
             "Runs every stage at every world size (random GPT-2 tokens) and writes DIR/memory.md,\n"
             "DIR/memory.csv and DIR/memory.svg (gnuplot). Exits 1 if a run fails or its model\n"
             "states differ from the formula (Ψ padded) of\n"
             "docs/architecture.md \"Memory accounting\".\n",
};

static void write_chart(const char *dir, const char *model, const char *dtype, const int *ws,
                        int nw, cell (*cells)[4]) {
    char dat[600], cmd[1400];
    snprintf(dat, sizeof dat, "%s/memory.dat", dir);
    FILE *f = fopen(dat, "w");
    if (!f) return;
    fprintf(f, "ranks DDP ZeRO-1 ZeRO-2 ZeRO-3\n");
    for (int i = 0; i < nw; i++) {
        fprintf(f, "%d", ws[i]);
        for (int s = 0; s < 4; s++)
            fprintf(f, " %.4f", (double)cells[i][s].total / 1073741824.0);
        fprintf(f, "\n");
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "gnuplot 2>%s/gnuplot.log", dir);
    FILE *g = popen(cmd, "w");
    if (!g) return;
    fprintf(g,
            "set terminal svg size 800,480 dynamic font 'sans,12'\n"
            "set output '%s/memory.svg'\n"
            "set title 'zshard: measured peak memory per rank, %s (%s)'\n"
            "set style data histogram\nset style histogram clustered gap 1\n"
            "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
            "set ylabel 'GiB per rank'\nset xlabel 'ranks'\nset yrange [0:*]\n"
            "set grid ytics\nset key top right\n"
            "plot '%s' using 2:xtic(1) title columnheader(2) lc rgb '#4c72b0', "
            "'' using 3 title columnheader(3) lc rgb '#55a868', "
            "'' using 4 title columnheader(4) lc rgb '#c44e52', "
            "'' using 5 title columnheader(5) lc rgb '#8172b2'\n",
            dir, model, dtype, dat);
    pclose(g);
}

int zs_bench_memory(int argc, char **argv) {
    memb_opts mb = {.model = "gpt2-124m", .out = "bench-memory", .dtype = "fp32",
                    .recompute = "none", .attention = "flash", .device = "auto",
                    .ws = {1, 2, 4}, .nw = 3, .batch = 4, .seq = 64, .steps = 3};
    int rc = zs_flag_parse(&MEMB_TABLE, argc, argv, 1, &mb, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    const char *model = mb.model, *out = mb.out, *dtype = mb.dtype, *rdtype = mb.rdtype;
    const char *recompute = mb.recompute, *attention = mb.attention, *device = mb.device;
    int *ws = mb.ws, nw = mb.nw, batch = mb.batch, seq = mb.seq, steps = mb.steps;
    if (steps < 2) return zs_flag_fail(2, "bench memory: --steps must be >= 2");
    zs_mem_options mo;
    memset(&mo, 0, sizeof mo);
    mo.dtype = ZS_DTYPE_F32;
    mo.reduce_dtype = ZS_DTYPE_F32;
    if (zs_arg_dtype("--dtype", dtype, 0, &mo.dtype)) return 2;
    if (!rdtype) rdtype = dtype;
    if (zs_arg_dtype("--reduce-dtype", rdtype, 0, &mo.reduce_dtype)) return 2;
    const char *dev_chosen = NULL;
    char dev_why[160];
    if (zs_device_choose(device, &dev_chosen, dev_why, sizeof dev_why) != ZS_OK)
        return zs_flag_fail(2, "bench memory: %s", zs_last_error());
    int rc2 = zs_arg_attention("--attention", attention, &mo.attention);
    if (!rc2) rc2 = zs_arg_recompute("--recompute", recompute, &mo.recompute);
    if (rc2) return rc2;
    zs_model_config cfg;
    if (zs_model_preset(model, &cfg) != ZS_OK)
        return zs_flag_fail(2, "bench memory: %s", zs_last_error());
    for (int i = 0; i < nw; i++)
        if (batch % ws[i])
            return zs_flag_fail(2, "bench memory: --batch %d does not divide by %d ranks", batch,
                               ws[i]);
    if (mkdir(out, 0755) && errno != EEXIST)
        return zs_flag_fail(1, "bench memory: cannot create %s: %s", out, strerror(errno));
    char self[4096], data[600];
    if (zs_bench_self(self, sizeof self)) return zs_flag_fail(1, "bench memory: no executable path");
    snprintf(data, sizeof data, "%s/tokens.bin", out);
    /* Each family's own tokenizer size: GPT-2's 50257, LLaMA-2's 32000. */
    int vocab = cfg.arch == ZS_ARCH_LLAMA ? 32000 : ZS_GPT2_VOCAB;
    if (zs_bench_token_file(data, (int64_t)batch * seq * 64 + 4096, vocab))
        return zs_flag_fail(1, "bench memory: %s", zs_last_error());
    zs_model_config_set_vocab(&cfg, vocab);

    cell cells[8][4];
    memset(cells, 0, sizeof cells);
    int64_t psi = 0, psi_padded = 0; /* of the last world size (padding grows with it) */
    for (int i = 0; i < nw; i++)
        for (int s = 0; s < 4; s++) {
            char log[700], cmd[8192];
            snprintf(log, sizeof log, "%s/run-n%d-%s.jsonl", out, ws[i], STAGE_FLAG[s]);
            snprintf(cmd, sizeof cmd,
                     "'%s' train --model %s --data '%s' --vocab %d --nproc %d --stage %s --batch %d"
                     " --seq %d"
                     " --steps %d --warmup 1 --val-every 0 --val-batches 1 --sample-len 0"
                     " --dtype %s --reduce-dtype %s --recompute %s --attention %s --device %s"
                     " --quiet --log '%s' > '%s.out' 2>&1",
                     self, model, data, vocab, ws[i], STAGE_FLAG[s], batch, seq, steps, dtype,
                     rdtype, recompute, attention, dev_chosen, log, log);
            fprintf(stderr, "bench memory: %d rank%s, %s ...\n", ws[i], ws[i] > 1 ? "s" : "",
                    STAGE_NAME[s]);
            int r = system(cmd);
            zs_mem_estimate est;
            if (zs_mem_estimate_compute_opts(&cfg, ws[i], s, batch, seq, 1, 1, &mo, &est) == ZS_OK)
                cells[i][s].formula = zs_mem_formula_bytes(s, &mo, (uint64_t)est.padded, ws[i]);
            psi = est.params;
            psi_padded = est.padded;
            if (r != 0 || parse_run(log, &cells[i][s]))
                fprintf(stderr, "bench memory: run failed, see %s.out\n", log);
        }
    unlink(data);

    char md[600], csv[600];
    snprintf(md, sizeof md, "%s/memory.md", out);
    snprintf(csv, sizeof csv, "%s/memory.csv", out);
    FILE *fm = fopen(md, "w"), *fc = fopen(csv, "w");
    if (!fm || !fc) {
        if (fm) fclose(fm);
        if (fc) fclose(fc);
        return zs_flag_fail(1, "bench memory: cannot write %s", md);
    }
    fprintf(fc, "model,ranks,stage,model_state_bytes,formula_bytes,peak_bytes,ms_per_step\n");
    FILE *outs[2] = {stdout, fm};
    for (int o = 0; o < 2; o++) {
        fprintf(outs[o],
                "%s (Ψ = %lld, %lld padded at %d ranks), --dtype %s --reduce-dtype %s, "
                "--recompute %s --attention %s, global batch %d x seq %d; per-rank peak memory "
                "(max over ranks) "
                "and median ms/step after the first step. Formula: "
                "docs/architecture.md \"Memory accounting\" with Ψ padded; "
                "measured − formula in bytes.\n\n"
                "| ranks | stage | model states (GiB) | formula | formula (GiB) | measured − "
                "formula | total peak (GiB) | vs DDP | ms/step |\n"
                "|---:|---|---:|---|---:|---:|---:|---:|---:|\n",
                model, (long long)psi, (long long)psi_padded, ws[nw - 1], dtype, rdtype, recompute,
                attention, batch, seq);
        for (int i = 0; i < nw; i++)
            for (int s = 0; s < 4; s++) {
                cell *c = &cells[i][s];
                if (!c->ok) {
                    fprintf(outs[o], "| %d | %s | failed | | | | | | |\n", ws[i], STAGE_NAME[s]);
                    continue;
                }
                double ddp = cells[i][0].ok ? (double)cells[i][0].total : 0;
                char f[48];
                fprintf(outs[o], "| %d | %s | %.3f | %s | %.3f | %lld | %.3f | %.0f%% | %.0f |\n",
                        ws[i], STAGE_NAME[s], (double)c->states / 1073741824.0,
                        zs_mem_formula_text(s, &mo, f, sizeof f), (double)c->formula / 1073741824.0,
                        (long long)c->states - (long long)c->formula,
                        (double)c->total / 1073741824.0,
                        ddp > 0 ? 100.0 * (double)c->total / ddp : 0.0, c->ms);
            }
    }
    for (int i = 0; i < nw; i++)
        for (int s = 0; s < 4; s++)
            if (cells[i][s].ok)
                fprintf(fc, "%s,%d,%s,%llu,%llu,%llu,%.1f\n", model, ws[i], STAGE_FLAG[s],
                        (unsigned long long)cells[i][s].states,
                        (unsigned long long)cells[i][s].formula,
                        (unsigned long long)cells[i][s].total, cells[i][s].ms);
    fclose(fm);
    fclose(fc);
    write_chart(out, model, dtype, ws, nw, cells);
    printf("\nwrote %s, %s and %s/memory.svg\n", md, csv, out);
    int failed = 0;
    for (int i = 0; i < nw; i++)
        for (int s = 0; s < 4; s++)
            failed += !cells[i][s].ok || cells[i][s].states != cells[i][s].formula;
    return failed ? 1 : 0;
}

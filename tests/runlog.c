/* Implementation of the train-run fixture in runlog.h: the scratch directory and corpus,
 * running `zshard train`, and reading its JSONL log (written by src/cli/train.c: one
 * {"step":...} record per step, then one {"final":true,...} record). */
#include "runlog.h"

#include <stdarg.h>
#include <string.h>

char rl_out[RL_OUT_CAP];
static char g_dir[512];
static char g_cmd[8192];
static char g_log[600];

void rl_setup(const char *name) {
    snprintf(g_dir, sizeof g_dir, "/tmp/zshard-test-%s-XXXXXX", name);
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    char path[600];
    snprintf(path, sizeof path, "%s/corpus.txt", g_dir);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 3000; i++)
        fprintf(f, "%s the %s of %d. ", i % 3 ? "and so" : "Then", i % 5 ? "king" : "sea", i % 17);
    fclose(f);
}

const char *rl_dir(void) {
    return g_dir;
}

int rl_cleanup(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd);
}

/* The numbers of the categories (and "total") in one JSON object from `from`, stopping at
 * `end` (NULL: the rest of the line). */
static void read_cats(const char *from, const char *end, uint64_t out[ZS_MEM_NCAT + 1]) {
    for (int c = 0; c <= ZS_MEM_NCAT; c++) {
        char key[64];
        snprintf(key, sizeof key,
                 "\"%s\":", c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total");
        const char *v = strstr(from, key);
        if (v && (!end || v < end)) out[c] = strtoull(v + strlen(key), NULL, 10);
    }
}

/* The per-rank objects of the array named key ("\"peak_bytes_per_rank\":["); returns how
 * many were read. */
static int read_ranks(const char *line, const char *key, uint64_t out[][ZS_MEM_NCAT + 1]) {
    const char *p = strstr(line, key);
    const char *stop = p ? strchr(p, ']') : NULL;
    int n = 0;
    while (p && n < RL_MAX_RANKS) {
        p = strchr(p, '{');
        if (!p || p > stop) break;
        const char *end = strchr(p, '}');
        read_cats(p, end, out[n++]);
        p = end;
    }
    return n;
}

static void parse_final(const char *line, rl_run *r) {
    const char *h = strstr(line, "\"param_hash\":\"");
    if (h) snprintf(r->hash, sizeof r->hash, "%.16s", h + 14);
    r->world = read_ranks(line, "\"peak_bytes_per_rank\":[", r->peak);
    r->hworld = read_ranks(line, "\"host_peak_bytes_per_rank\":[", r->hpeak);
    const char *he = strstr(line, "\"host_estimate_bytes\":{");
    if (he) read_cats(he, strchr(he, '}'), r->hest);
    /* The estimate is the record's last object, so the rest of the line is its. */
    const char *es = strstr(line, "\"estimate_bytes\":{");
    if (es) read_cats(es, NULL, r->est);
    r->ok = 1;
}

static void parse_log(const char *path, rl_run *r) {
    /* A job that failed early may have written no log; the caller's checks say so. */
    FILE *f = fopen(path, "r");
    if (!f) return;
    static char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"final\":true")) {
            parse_final(line, r);
        } else if (!strncmp(line, "{\"step\":", 8) && r->n_steps < RL_MAX_STEPS) {
            const char *l = strstr(line, "\"loss\":");
            if (!l) continue;
            l += 7;
            r->step[r->n_steps] = atoi(line + 8);
            snprintf(r->loss[r->n_steps], sizeof r->loss[0], "%.*s", (int)strcspn(l, ",}"), l);
            r->lossv[r->n_steps] = atof(r->loss[r->n_steps]);
            r->n_steps++;
        }
    }
    fclose(f);
}

rl_run rl_train(const char *prefix, const char *fmt, ...) {
    static int id = 0;
    rl_run r;
    memset(&r, 0, sizeof r);
    char args[4096], log[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/run%d.jsonl", g_dir, id++);
    snprintf(g_cmd, sizeof g_cmd, "%s %s train --data %s/corpus.txt %s --log %s", prefix,
             zt_zshard_exe(), g_dir, args, log);
    r.rc = zt_run(g_cmd, rl_out, sizeof rl_out);
    parse_log(log, &r);
    snprintf(g_log, sizeof g_log, "%s", log);
    return r;
}

rl_run rl_train_tiny(const char *env, int timeout_s, int steps, int nproc, const char *stage,
                     const char *extra) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s timeout %d", env, timeout_s);
    return rl_train(prefix,
                    "--model gpt2-tiny --batch 12 --seq 32 --steps %d --lr 3e-3 --warmup 2 "
                    "--val-every 0 --val-batches 1 --sample-len 0 --nproc %d --stage %s "
                    "--comm-timeout 30 %s",
                    steps, nproc, stage, extra);
}

const char *rl_last_log(void) {
    return g_log;
}

int rl_check_exit(const rl_run *r) {
    ZT_CHECK(r->rc == 0, "exit %d for: %s\n%s", r->rc, g_cmd, rl_out);
    return r->rc == 0;
}

int rl_same(const rl_run *a, const rl_run *b) {
    int eq = a->n_steps == b->n_steps && !strcmp(a->hash, b->hash);
    for (int s = 0; eq && s < a->n_steps; s++)
        eq = !strcmp(a->loss[s], b->loss[s]);
    return eq;
}

void rl_check_same(const rl_run *a, const rl_run *b, const char *what) {
    ZT_CHECK(rl_same(a, b), "%s: not bitwise equal (hash %s vs %s, step-1 loss %s vs %s)", what,
             a->hash, b->hash, a->loss[0], b->loss[0]);
}

float *rl_read_params(const char *path, size_t *count) {
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = zt_malloc((size_t)len);
    ZT_REQUIRE(fread(p, 1, (size_t)len, f) == (size_t)len, "read %s", path);
    fclose(f);
    *count = (size_t)len / sizeof(float);
    return p;
}

double rl_max_abs_diff(const float *a, const float *b, size_t count) {
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > worst) worst = d;
    }
    return worst;
}

void rl_fp32_model_states(const zs_layout *l, int world, int stage, uint64_t want[ZS_MEM_NCAT]) {
    uint64_t P = (uint64_t)l->total_padded * 4, S = P / (uint64_t)world;
    memset(want, 0, ZS_MEM_NCAT * sizeof *want);
    want[ZS_MEM_PARAM] = stage == 3 ? 0 : P;
    want[ZS_MEM_PARAM_SHARD] = stage == 3 ? S : 0;
    want[ZS_MEM_GRAD] = stage <= 1 ? P : 0;
    want[ZS_MEM_GRAD_SHARD] = stage >= 2 ? S : 0;
    want[ZS_MEM_OPTIM_STATE] = stage == 0 ? 2 * P : 2 * S;
}

void rl_largest_units(const zs_layout *l, uint64_t out[3]) {
    out[0] = out[1] = out[2] = 0;
    for (int u = 0; u < l->n_units; u++) {
        uint64_t b = (uint64_t)l->units[u].padded * 4;
        for (int i = 0; i < 3; i++)
            if (b > out[i]) { /* insert here, shifting the smaller ones down */
                uint64_t t = out[i];
                out[i] = b;
                b = t;
            }
    }
}

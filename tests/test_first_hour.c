/* A new user's first hour, through the real CLI on a corpus this test writes:
 *  - launcher_refused: --nproc (and `zshard run`) inside a job that mpirun, srun, torchrun or
 *    zshard run already launched is refused before anything is written, under a real mpirun too;
 *  - diverged: a run whose loss goes non-finite keeps every log line valid JSON (null plus a
 *    "nonfinite" list), exits non-zero and saves no checkpoint; the module API refuses to save
 *    non-finite state; eval --json stays valid JSON on NaN weights and exits non-zero;
 *  - log_kept: a resume appends to its log after a record saying from where, a fresh run moves
 *    an old log aside instead of truncating it;
 *  - resume_continues: a resume takes the model, batch, seq, seed and schedule from the
 *    checkpoint (bitwise the uninterrupted run), refuses a changed batch, seq or seed unless
 *    --override names it, and lists the schedule changes it takes;
 *  - mem_agrees: `zshard mem` with train's flags and --data predicts what train --mem-report
 *    measures, with no other flag (train's defaults, the data's vocabulary);
 *  - flag_equals: --flag=value on every command, up to a `--` that ends zshard's flags;
 *  - small_ones: the smaller defects of the issue, each as the user met it. */
#include "ckpt/json.h"
#include "runlog.h"
#include "zshard.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_out[1 << 17];
static const char *Z;

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

static const char *P(const char *name) {
    static char buf[8][700];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", rl_dir(), name);
    return buf[k];
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Entries of dir whose name starts with prefix. */
static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* Every line of the file parses as JSON; returns the number of lines, -1 on a bad one. */
static int json_lines(const char *path) {
    char *s = slurp(path);
    int n = 0;
    ZT_CHECK(s != NULL, "%s missing", path);
    for (char *line = s; s && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        zs_json *j = NULL;
        if (zs_json_parse(line, len, &j) != ZS_OK) {
            ZT_CHECK(0, "%s line %d is not JSON (%s): %.*s", path, n + 1, zs_last_error(), (int)len,
                     line);
            free(s);
            return -1;
        }
        zs_json_free(j);
        n++;
        line = nl ? nl + 1 : line + len;
    }
    free(s);
    return n;
}

/* ---- 1. duplicate jobs under a launcher ------------------------------------------------- */

static void launcher_refused(void) {
    static const struct {
        const char *env, *who;
    } L[] = {
        {"OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0", "mpirun"},
        {"PMI_RANK=1 PMI_SIZE=2", "mpirun"},
        {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NNODES=1", "srun"},
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2", "torchrun"}};
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        int rc = sh("env %s %s train --data %s --nproc 2 --steps 2 --save-dir %s --log %s",
                    L[i].env, Z, P("corpus.txt"), P("dup-ck"), P("dup.jsonl"));
        ZT_CHECK(rc == 2 && strstr(g_out, L[i].who) && strstr(g_out, "--nproc") &&
                     count_lines(g_out) == 1,
                 "train --nproc under %s: exit %d, want 2 and one line naming the launcher:\n%s",
                 L[i].who, rc, g_out);
        ZT_CHECK(!exists(P("dup-ck")) && !exists(P("dup.jsonl")),
                 "train --nproc under %s wrote a save dir or a log", L[i].who);
        rc = sh("env %s %s train --data %s --max-restarts 2 --steps 2", L[i].env, Z,
                P("corpus.txt"));
        ZT_CHECK(rc == 2 && strstr(g_out, "--max-restarts"),
                 "train --max-restarts under %s: exit %d:\n%s", L[i].who, rc, g_out);
        rc = sh("env %s %s run -n 2 -- true", L[i].env, Z);
        ZT_CHECK(rc == 2 && strstr(g_out, L[i].who), "zshard run under %s: exit %d:\n%s", L[i].who,
                 rc, g_out);
    }
    /* eval and generate relaunch the same way. */
    int rc = sh("env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 %s eval %s --data %s --nproc 2",
                Z, P("base"), P("corpus.txt"));
    ZT_CHECK(rc == 2 && strstr(g_out, "eval: --nproc"), "eval --nproc under mpirun: %d:\n%s", rc,
             g_out);
    rc = sh("env PMI_RANK=0 PMI_SIZE=2 %s generate %s --nproc 2", Z, P("base"));
    ZT_CHECK(rc == 2 && strstr(g_out, "generate: --nproc"), "generate --nproc under PMI: %d:\n%s",
             rc, g_out);
    /* The real thing, where Open MPI is installed: every rank refuses, nothing is written. */
    if (sh("command -v mpirun") != 0) {
        printf("not run: mpirun is not installed (the launcher's variables were checked above)\n");
        return;
    }
    rc = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
            "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun --oversubscribe -np 2 %s "
            "train --data %s --nproc 2 --steps 4 --save-dir %s --save-every 2 --log %s",
            Z, P("corpus.txt"), P("mpi-ck"), P("mpi.jsonl"));
    ZT_CHECK(rc != 0 && rc != 124 && strstr(g_out, "already launched by mpirun") &&
                 !strstr(g_out, "summary:"),
             "mpirun -np 2 zshard train --nproc 2: exit %d, want a refusal and no training:\n%s",
             rc, g_out);
    ZT_CHECK(!exists(P("mpi-ck")) && !exists(P("mpi.jsonl")), "mpirun job wrote its outputs");
}

/* ---- 2. divergence -------------------------------------------------------------------- */

static void module_refuses_nan(void) {
    zs_comm_t *comm = NULL;
    zs_units_t *units = NULL;
    zs_module_t *m = NULL;
    zs_comm_config cc = zs_comm_config_default();
    ZT_OK(zs_comm_create(&cc, &comm));
    ZT_OK(zs_units_create(&units));
    ZT_OK(zs_units_add_unit(units, "lin", 1));
    zs_tensor_spec w = zs_tensor_spec_default();
    w.name = "w", w.shape[0] = 5;
    ZT_OK(zs_units_add_tensor(units, &w));
    zs_module_config mc = zs_module_config_default();
    mc.stage = ZS_STAGE_3;
    ZT_OK(zs_module_create(units, comm, &mc, &m));
    float v[5] = {1, 2, NAN, 4, 5};
    ZT_OK(zs_module_set_param(m, "w", v, 5));
    zs_status st = zs_module_save(m, P("nan-module"), 0);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "non-finite"),
             "saving NaN parameters: %s: %s", zs_status_string(st), zs_last_error());
    ZT_CHECK(count_entries(P("nan-module"), "step_") == 0,
             "a checkpoint (or its staging directory) of NaN state was left in %s",
             P("nan-module"));
    zs_module_destroy(m);
    zs_units_destroy(units);
    zs_comm_destroy(comm);
}

static void diverged(void) {
    int rc = sh("%s train --data %s --lr 1e9 --steps 2 --save-dir %s --log %s --sample-len 0", Z,
                P("corpus.txt"), P("nan-ck"), P("nan.jsonl"));
    ZT_CHECK(rc == 1 && strstr(g_out, "diverged"), "lr 1e9: exit %d, want 1 naming it:\n%s", rc,
             g_out);
    int n = json_lines(P("nan.jsonl"));
    char *log = slurp(P("nan.jsonl"));
    ZT_CHECK(n == 4 && log && strstr(log, "\"val_loss\":null") &&
                 strstr(log, "\"nonfinite\":[\"val_loss\"]") && strstr(log, "{\"error\":"),
             "log of the diverged run (%d lines):\n%s", n, log ? log : "");
    free(log);
    ZT_CHECK(count_entries(P("nan-ck"), "step_") == 0 && count_entries(P("nan-ck"), "latest") == 0,
             "a diverged run saved a checkpoint in %s", P("nan-ck"));
    module_refuses_nan();

    /* eval on weights holding a NaN: valid JSON, a non-zero exit. The NaN goes into a
     * safetensors export's last float, which has no checksum. */
    rc = sh("%s ckpt export %s %s --format safetensors", Z, P("base"), P("nan.safetensors"));
    ZT_REQUIRE(rc == 0, "export: %s", g_out);
    FILE *f = fopen(P("nan.safetensors"), "r+b");
    ZT_REQUIRE(f, "open export");
    static const unsigned char qnan[4] = {0x00, 0x00, 0xc0, 0x7f};
    fseek(f, -4, SEEK_END);
    fwrite(qnan, 1, 4, f);
    fclose(f);
    rc = sh("(%s eval %s --model gpt2-tiny --data %s --json > %s 2>/dev/null)", Z,
            P("nan.safetensors"), P("corpus.txt"), P("eval.json"));
    ZT_CHECK(rc == 1, "eval of NaN weights: exit %d", rc);
    char *j = slurp(P("eval.json"));
    ZT_CHECK(json_lines(P("eval.json")) == 1 && j && strstr(j, "\"loss\":null") &&
                 strstr(j, "\"nonfinite\":[\"loss\""),
             "eval --json on NaN weights: %s", j ? j : "(nothing)");
    free(j);
}

/* ---- 3. the log across resumes ---------------------------------------------------------- */

static void log_kept(void) {
    int rc = sh("%s train --data %s --steps 20 --save-dir %s --save-every 5 --log %s --quiet "
                "--val-every 0",
                Z, P("corpus.txt"), P("log-ck"), P("run.jsonl"));
    ZT_REQUIRE(rc == 0, "first run: %s", g_out);
    char *first = slurp(P("run.jsonl"));
    /* the settings record, 20 steps, the final summary */
    ZT_REQUIRE(first && count_lines(first) == 22 && !strncmp(first, "{\"config\":{", 11),
               "first run's log");
    rc = sh("%s train --data %s --save-dir %s --resume %s/step_00000010 --log %s --quiet "
            "--val-every 0",
            Z, P("corpus.txt"), P("log-ck"), P("log-ck"), P("run.jsonl"));
    ZT_CHECK(rc == 0, "resume: %s", g_out);
    char *both = slurp(P("run.jsonl"));
    char want[800];
    snprintf(want, sizeof want, "{\"resume\":\"%s/step_00000010\",\"step\":10}\n", P("log-ck"));
    const char *rest = both ? both + strlen(first) : "", *nl = strchr(rest, '\n');
    ZT_CHECK(both && !strncmp(both, first, strlen(first)) && !strncmp(rest, "{\"config\":{", 11) &&
                 nl && !strncmp(nl + 1, want, strlen(want)) && count_lines(both) == 35,
             "the resumed log must keep the first run's 22 lines, then its settings, %s and 11 "
             "more:\n%s",
             want, both ? both : "");
    ZT_CHECK(json_lines(P("run.jsonl")) == 35, "resumed log is not JSONL");
    /* A fresh run with the same --log keeps the old one under run.1.jsonl, and says so. */
    rc = sh("%s train --data %s --steps 3 --log %s --quiet --val-every 0", Z, P("corpus.txt"),
            P("run.jsonl"));
    ZT_CHECK(rc == 0 && strstr(g_out, "moved them to") && strstr(g_out, "run.1.jsonl"),
             "fresh run over an old log: exit %d:\n%s", rc, g_out);
    char *kept = slurp(P("run.1.jsonl")), *fresh = slurp(P("run.jsonl"));
    ZT_CHECK(kept && both && !strcmp(kept, both), "run.1.jsonl is not the old log");
    ZT_CHECK(fresh && count_lines(fresh) == 5, "the fresh log: %s", fresh ? fresh : "");
    free(first), free(both), free(kept), free(fresh);
}

/* ---- 4. resume continues the stored run ------------------------------------------------- */

static void final_hash(const char *log, char out[17]) {
    char *s = slurp(log), *h = s ? strstr(s, "\"param_hash\":\"") : NULL;
    snprintf(out, 17, "%s", h ? h + 14 : "");
    free(s);
}

static void resume_continues(void) {
    /* Settings unlike train's defaults (gpt2-tiny, batch 8, seed 1337, lr 1e-3, 100 steps). */
    const char *run = "--model gpt2-mini --batch 16 --seq 32 --seed 7 --lr 2e-3 --warmup 3 "
                      "--steps 12 --val-every 0 --sample-len 0 --quiet";
    int rc = sh("%s train --data %s %s --save-dir %s --save-every 6 --log %s", Z, P("corpus.txt"),
                run, P("rs-ck"), P("rs-full.jsonl"));
    ZT_REQUIRE(rc == 0, "uninterrupted run: %s", g_out);
    char full[17], resumed[17];
    final_hash(P("rs-full.jsonl"), full);
    rc = sh("%s train --data %s --resume %s/step_00000006 --log %s --quiet", Z, P("corpus.txt"),
            P("rs-ck"), P("rs-res.jsonl"));
    final_hash(P("rs-res.jsonl"), resumed);
    ZT_CHECK(rc == 0 && full[0] && !strcmp(full, resumed),
             "a bare --resume must continue the stored run bitwise: exit %d, hash %s vs %s:\n%s",
             rc, resumed, full, g_out);
    static const struct {
        const char *flag, *name;
    } R[] = {{"--seq 64", "seq"}, {"--seed 1", "seed"}, {"--batch 8", "batch"}};
    for (int i = 0; i < 3; i++) {
        rc = sh("%s train --data %s --resume %s/step_00000006 %s --quiet --log %s", Z,
                P("corpus.txt"), P("rs-ck"), R[i].flag, P("rs-bad.jsonl"));
        char want[64];
        snprintf(want, sizeof want, "--override %s", R[i].name);
        ZT_CHECK(rc == 2 && strstr(g_out, want) && count_lines(g_out) == 1,
                 "resume with %s: exit %d, want 2 and one line pointing at %s:\n%s", R[i].flag, rc,
                 want, g_out);
        ZT_CHECK(!exists(P("rs-bad.jsonl")), "a refused resume opened its log");
    }
    rc = sh("%s train --data %s --resume %s/step_00000006 --seq 64 --override seq --steps 8 "
            "--sample-len 0 --val-every 0",
            Z, P("corpus.txt"), P("rs-ck"));
    ZT_CHECK(rc == 0 && strstr(g_out, "batch 16 x seq 64") &&
                 strstr(g_out, "changed from the checkpoint's settings: --seq 32 -> 64, --steps "
                               "12 -> 8"),
             "--override seq: exit %d:\n%s", rc, g_out);
    rc = sh("%s train --data %s --resume %s/step_00000006 --lr 5e-3 --steps 14 --quiet", Z,
            P("corpus.txt"), P("rs-ck"));
    ZT_CHECK(rc == 0 && strstr(g_out, "changed from the checkpoint's settings: --steps 12 -> 14, "
                                      "--lr 0.002 -> 0.005"),
             "schedule changes must be taken and listed: exit %d:\n%s", rc, g_out);
    rc = sh("%s train --data %s --resume %s/step_00000006 --override steps", Z, P("corpus.txt"),
            P("rs-ck"));
    ZT_CHECK(rc == 2 && strstr(g_out, "'steps' is not one of"), "--override steps: %d:\n%s", rc,
             g_out);
    rc = sh("%s train --data %s --resume %s/step_00000006 --model gpt2-tiny", Z, P("corpus.txt"),
            P("rs-ck"));
    ZT_CHECK(rc == 2 && strstr(g_out, "contradicts"), "resume with another --model: %d:\n%s", rc,
             g_out);
}

/* ---- 6. mem agrees with train ----------------------------------------------------------- */

static void mem_agrees(void) {
    int rc = sh("%s train --data %s --model gpt2-mini --steps 2 --mem-report --quiet "
                "--sample-len 0 --log %s",
                Z, P("corpus.txt"), P("mem.jsonl"));
    ZT_REQUIRE(rc == 0, "train --mem-report: %s", g_out);
    char *log = slurp(P("mem.jsonl")), *pk = log ? strstr(log, "\"peak_total_bytes\":") : NULL;
    double measured = pk ? strtod(pk + 19, NULL) / 1073741824.0 : -1;
    free(log);
    rc = sh("%s mem --data %s --model gpt2-mini", Z, P("corpus.txt"));
    const char *t = strstr(g_out, "| **total** | **");
    double predicted = t ? strtod(t + 16, NULL) : -2;
    char a[32], b[32];
    snprintf(a, sizeof a, "%.3f", measured);
    snprintf(b, sizeof b, "%.3f", predicted);
    ZT_CHECK(rc == 0 && strstr(g_out, "vocab 256 padded to 256") && !strcmp(a, b),
             "mem --data: total %s GiB, train measured %s GiB:\n%s", b, a, g_out);
    rc = sh("%s mem", Z); /* train's defaults: no flag needed */
    ZT_CHECK(rc == 0 && strstr(g_out, "zshard mem: gpt2-tiny, 1 rank") &&
                 strstr(g_out, "global batch 8 x seq 64"),
             "mem with no flags: %d:\n%s", rc, g_out);
}

/* ---- 7. --flag=value -------------------------------------------------------------------- */

static void flag_equals(void) {
    int rc = sh("%s train --data=%s --steps=2 --batch=4 --sample-len=0 --val-every=0 --log=%s", Z,
                P("corpus.txt"), P("eq.jsonl"));
    ZT_CHECK(rc == 0 && strstr(g_out, "batch 4 x seq 64") && json_lines(P("eq.jsonl")) == 4,
             "train --flag=value: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --model=gpt2-mini --nproc=2 --stage=3", Z);
    ZT_CHECK(rc == 0 && strstr(g_out, "gpt2-mini, 2 ranks"), "mem --flag=value: %d:\n%s", rc,
             g_out);
    rc = sh("%s eval %s --data=%s --batches=2", Z, P("base"), P("corpus.txt"));
    ZT_CHECK(rc == 0 && strstr(g_out, "2 batches"), "eval --flag=value: %d:\n%s", rc, g_out);
    rc = sh("(%s generate %s --prompt=a=b --max-tokens=3 --seed=3 2>/dev/null)", Z, P("base"));
    ZT_CHECK(rc == 0 && !strncmp(g_out, "a=b", 3), "generate --prompt=a=b: %d:\n%s", rc, g_out);
    /* After `--`, arguments belong to the command zshard runs. */
    rc = sh("%s run --nproc=1 --no-prefix -- echo --x=1", Z);
    ZT_CHECK(rc == 0 && strstr(g_out, "--x=1"), "run -- echo --x=1: %d:\n%s", rc, g_out);
    rc = sh("%s train --data=%s --frobnicate=3", Z, P("corpus.txt"));
    ZT_CHECK(rc == 2 && strstr(g_out, "'--frobnicate'"), "unknown --flag=value: %d:\n%s", rc,
             g_out);
}

/* ---- 8. the smaller ones ---------------------------------------------------------------- */

static void small_ones(void) {
    /* --resume auto on a finished run: nothing to do, not a failure. */
    int rc = sh("%s train --data %s --steps 3 --save-dir %s --resume auto --quiet", Z,
                P("corpus.txt"), P("base"));
    ZT_CHECK(rc == 0 && strstr(g_out, "nothing to train"), "resume auto, finished: %d:\n%s", rc,
             g_out);
    /* dtype spellings, both ways everywhere. */
    rc = sh("%s train --data %s --dtype f32 --steps 1 --quiet --sample-len 0", Z, P("corpus.txt"));
    ZT_CHECK(rc == 0, "train --dtype f32: %d:\n%s", rc, g_out);
    rc = sh("%s ckpt export %s %s --format safetensors --dtype fp32", Z, P("base"),
            P("fp32.safetensors"));
    ZT_CHECK(rc == 0, "ckpt export --dtype fp32: %d:\n%s", rc, g_out);
    rc = sh("%s mem --dtype f16", Z);
    ZT_CHECK(rc == 2 && strstr(g_out, "fp32 (f32), bf16"), "mem --dtype f16: %d:\n%s", rc, g_out);
    /* run's command without `--`. */
    rc = sh("%s run -n 2 echo hi", Z);
    ZT_CHECK(rc == 2 && strstr(g_out, "-- echo"), "run -n 2 echo hi: %d:\n%s", rc, g_out);
    /* help CMD. */
    rc = sh("%s help train", Z);
    ZT_CHECK(rc == 0 && strstr(g_out, "usage: zshard train"), "help train: %d:\n%s", rc, g_out);
    rc = sh("%s help frobnicate", Z);
    ZT_CHECK(rc == 2 && strstr(g_out, "unknown command 'frobnicate'"), "help frobnicate: %s",
             g_out);
    /* eval's defaults reproduce the validation loss train logged at the same checkpoint. */
    rc = sh("%s train --data %s --batch 16 --seq 32 --steps 4 --save-dir %s --log %s --quiet "
            "--sample-len 0",
            Z, P("corpus.txt"), P("ev-ck"), P("ev.jsonl"));
    ZT_REQUIRE(rc == 0, "train for eval: %s", g_out);
    char *log = slurp(P("ev.jsonl")), *v = log ? strstr(log, "\"step\":4,") : NULL;
    v = v ? strstr(v, "\"val_loss\":") : NULL;
    char logged[40] = "";
    if (v) sscanf(v + 11, "%39[^,}]", logged);
    free(log);
    rc = sh("%s eval %s --data %s --json", Z, P("ev-ck"), P("corpus.txt"));
    char want[64];
    snprintf(want, sizeof want, "{\"loss\":%s,", logged);
    ZT_CHECK(rc == 0 && logged[0] && strstr(g_out, want),
             "eval with its defaults must print train's val_loss %s:\n%s", logged, g_out);
    /* generate's edges. */
    rc = sh("%s generate %s --prompt ''", Z, P("base"));
    ZT_CHECK(rc == 2 && !strstr(g_out, "generate: generate:") && strstr(g_out, "--prompt") &&
                 count_lines(g_out) == 1,
             "generate --prompt '': %d:\n%s", rc, g_out);
    rc = sh("%s generate %s --prompt ab --max-tokens 0", Z, P("base"));
    ZT_CHECK(rc == 0 && !strstr(g_out, "; \n") && !strstr(g_out, ");\n"),
             "generate --max-tokens 0: %d:\n%s", rc, g_out);
    rc = sh("(%s generate %s --prompt ab --max-tokens 4 --nproc 2 2>/dev/null)", Z, P("base"));
    ZT_CHECK(rc == 0 && !strncmp(g_out, "ab", 2), "generate --nproc 2 > file must be the text:\n%s",
             g_out);
    rc = sh("(%s eval %s --data %s --json --nproc 2 --batch 8 > %s 2>/dev/null)", Z, P("base"),
            P("corpus.txt"), P("eval2.json"));
    ZT_CHECK(rc == 0 && json_lines(P("eval2.json")) == 1, "eval --json --nproc 2 is not JSON");
    /* ckpt's paths and messages. */
    rc = sh("%s ckpt inspect %s/", Z, P("base"));
    ZT_CHECK(rc == 0 && !strstr(g_out, "//"), "ckpt inspect DIR/: %s", g_out);
    rc = sh("%s ckpt export %s %s/no/such/dir/out --format hf", Z, P("base"), rl_dir());
    ZT_CHECK(rc == 1 && !strstr(g_out, ".tmp") && strstr(g_out, "does not exist"),
             "export into a missing directory: %d:\n%s", rc, g_out);
    rc = sh("%s ckpt export", Z);
    ZT_CHECK(rc == 2 && count_lines(g_out) == 1 && strstr(g_out, "SRC and DST are required"),
             "ckpt export with no arguments: %s", g_out);
    rc = sh("%s ckpt inspect", Z);
    ZT_CHECK(rc == 2 && strstr(g_out, "checkpoint DIR is required"), "ckpt inspect: %s", g_out);
    /* A LLaMA export's config.json holds the eps the model has, as people write it. */
    rc = sh("%s train --data %s --model llama-tiny --steps 1 --save-dir %s --quiet "
            "--sample-len 0 && %s ckpt export %s %s --format hf",
            Z, P("corpus.txt"), P("ll-ck"), Z, P("ll-ck"), P("ll-hf"));
    char *cfg = slurp(P("ll-hf/config.json"));
    ZT_CHECK(rc == 0 && cfg && strstr(cfg, "\"rms_norm_eps\": 1e-05,") &&
                 strstr(cfg, "\"rope_theta\": 10000.0,"),
             "llama config.json: %s", cfg ? cfg : g_out);
    free(cfg);
    /* The terminal's progress line shows the grad norm as the plain one does (script(1)
     * gives the run a terminal). */
    if (sh("command -v script") == 0) {
        rc = sh("script -qec '%s train --data %s --steps 2 --sample-len 0' /dev/null", Z,
                P("corpus.txt"));
        ZT_CHECK(rc == 0 && strstr(g_out, "\rstep ") && strstr(g_out, "| norm "),
                 "terminal progress line without the grad norm:\n%s", g_out);
    } else {
        printf("not run: script(1) is not installed (terminal progress line)\n");
    }
    /* One rank: no communication backend is set up, and --verbose does not claim one. */
    rc = sh("%s train --data %s --steps 1 --sample-len 0 --verbose", Z, P("corpus.txt"));
    ZT_CHECK(rc == 0 && strstr(g_out, "comm local") && !strstr(g_out, "backend shm"),
             "--verbose on one rank: %s", g_out);
}

int main(void) {
    zt_init("first_hour");
    rl_setup("first-hour");
    Z = zt_zshard_exe();
    /* A small finished run the checks evaluate, generate from and export. */
    int rc = sh("%s train --data %s --steps 3 --save-dir %s --quiet --sample-len 0", Z,
                P("corpus.txt"), P("base"));
    ZT_REQUIRE(rc == 0, "base run: %s", g_out);
    launcher_refused();
    diverged();
    log_kept();
    resume_continues();
    mem_agrees();
    flag_equals();
    small_ones();
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

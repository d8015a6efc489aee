/* Run configuration files, through the real CLI: `--print-config` fed back
 * with `--config` gives the same run (param_hash) in YAML and in JSON, at 2 ranks with the
 * rank count in the file; flags override the file; the settings are recorded in the log and in
 * every checkpoint manifest; a bad file is one message naming the file, the line and the key
 * (and the nearest valid key for an unknown one); examples/finetune/finetune.yaml runs as its
 * README says. */
#include "testutil.h"
#include "zshard.h"

#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-config-XXXXXX";
static char g_out[1 << 16];
static char g_exe[4096];

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

/* Write text to g_dir/name. */
static void put(const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    ZT_REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", p);
}

/* The 16 hex digits after "param_hash " in the last output ("" when absent). */
static void hash_of_output(char out[17]) {
    const char *p = strstr(g_out, "param_hash ");
    out[0] = '\0';
    if (p && strlen(p + 11) >= 16) {
        memcpy(out, p + 11, 16);
        out[16] = '\0';
    }
}

/* A run given by flags, printed, fed back (YAML), converted by hand to JSON: one hash. */
static void test_round_trip(void) {
    const char *flags = "--data corpus.txt --model llama-tiny --batch 6 --seq 32 --steps 5 "
                        "--lr 3e-3 --warmup 2 --seed 99 --stage 3 --nproc 2 --grad-accum 3 "
                        "--val-every 0 --sample-len 0 --quiet";
    char want[17], got[17];
    int rc = sh("cd %s && %s train %s", g_dir, g_exe, flags);
    ZT_REQUIRE(rc == 0, "train by flags: %s", g_out);
    hash_of_output(want);
    ZT_REQUIRE(want[0], "no param_hash: %s", g_out);

    rc = sh("cd %s && { %s train %s --print-config > run.yaml; }", g_dir, g_exe, flags);
    ZT_REQUIRE(rc == 0, "--print-config: %s", g_out);
    rc =
        sh("cd %s && grep -c '^batch: 6$\\|^nproc: 2$\\|^stage: 3$\\|^lr: 0.003$' run.yaml", g_dir);
    ZT_CHECK(rc == 0 && atoi(g_out) == 4, "run.yaml lacks the settings given: %s", g_out);

    rc = sh("cd %s && %s train --config run.yaml", g_dir, g_exe);
    ZT_CHECK(rc == 0, "train --config run.yaml: %s", g_out);
    hash_of_output(got);
    ZT_CHECK(!strcmp(got, want), "--config run.yaml gives %s, the flags %s", got, want);

    /* The same settings as JSON, with Python-style keys. */
    put("run.json", "{\"data\": \"corpus.txt\", \"model\": \"llama-tiny\", \"batch\": 6,\n"
                    " \"seq\": 32, \"steps\": 5, \"lr\": 0.003, \"warmup\": 2, \"seed\": 99,\n"
                    " \"stage\": 3, \"nproc\": 2, \"grad_accum\": 3, \"val_every\": 0,\n"
                    " \"sample_len\": 0, \"quiet\": true}\n");
    rc = sh("cd %s && %s train --config run.json", g_dir, g_exe);
    ZT_CHECK(rc == 0, "train --config run.json: %s", g_out);
    hash_of_output(got);
    ZT_CHECK(!strcmp(got, want), "--config run.json gives %s, the flags %s", got, want);

    /* Flags override the file, wherever --config stands among them. */
    rc = sh("cd %s && %s train --steps 3 --config run.yaml --nproc 1 --stage ddp --log o.jsonl",
            g_dir, g_exe);
    ZT_CHECK(rc == 0, "override: %s", g_out);
    ZT_CHECK(strstr(g_out, "summary: 3 steps"), "--steps 3 did not override: %s", g_out);
    rc = sh("cd %s && grep -c '\"nproc\":1,' o.jsonl", g_dir);
    ZT_CHECK(rc == 0 && atoi(g_out) == 1, "log's config record lacks nproc 1: %s", g_out);
}

/* The settings go into the log (every start) and into each manifest. */
static void test_records(void) {
    int rc = sh("cd %s && %s train --data corpus.txt --steps 4 --batch 4 --save-dir ck "
                "--save-every 2 --log rec.jsonl --quiet --sample-len 0",
                g_dir, g_exe);
    ZT_REQUIRE(rc == 0, "train: %s", g_out);
    rc = sh("cd %s && head -n 1 rec.jsonl", g_dir);
    ZT_CHECK(!strncmp(g_out, "{\"config\":{\"model\":\"gpt2-tiny\",", 31) &&
                 strstr(g_out, "\"batch\":4,") && strstr(g_out, "\"save-every\":2,"),
             "first log record is not the config: %s", g_out);
    for (int s = 2; s <= 4; s += 2) {
        rc = sh("cd %s && grep -c '\"run_config\":{.*\"batch\":4,.*\"save-dir\":\"ck\"' "
                "ck/step_0000000%d/manifest.json",
                g_dir, s);
        ZT_CHECK(rc == 0 && atoi(g_out) == 1, "step %d manifest has no run_config: %s", s, g_out);
    }
    /* A resume writes its own config record (the run's settings as resumed) and appends. */
    rc = sh("cd %s && %s train --data corpus.txt --resume ck --steps 6 --log rec.jsonl --quiet "
            "--sample-len 0",
            g_dir, g_exe);
    ZT_CHECK(rc == 0, "resume: %s", g_out);
    rc = sh("cd %s && grep -c '^{\"config\":{.*\"batch\":4,.*\"resume\":\"ck\"' rec.jsonl", g_dir);
    ZT_CHECK(rc == 0 && atoi(g_out) == 1, "resumed run's config record: %s", g_out);
    /* --print-config of a resume shows the checkpoint's settings, as the run takes them. */
    rc = sh("cd %s && %s train --data corpus.txt --resume ck --steps 6 --print-config", g_dir,
            g_exe);
    ZT_CHECK(rc == 0 && strstr(g_out, "\nbatch: 4\n") && !strstr(g_out, "\nmodel:"),
             "--print-config of a resume: %s", g_out);
    /* flags override a --config file wherever they stand: the header says so */
    ZT_CHECK(strstr(g_out, "override it (at any place)") && !strstr(g_out, "given after it"),
             "--print-config header: %s", g_out);
}

/* Every bad file: one line naming file, line and key; exit 2; nothing trained. */
static void test_bad_files(void) {
    struct {
        const char *text, *want;
    } bad[] = {
        {"batch: 4\nbach: 5\n", "c.yaml:2: unknown key 'bach' (did you mean 'batch'?"},
        {"save_evry: 5\n", "c.yaml:1: unknown key 'save_evry' (did you mean 'save-every'?"},
        {"batch: four\n", "c.yaml:1: batch: 'four' is not an integer"},
        {"lr: fast\n", "c.yaml:1: lr: 'fast' is not a number"},
        {"quiet: maybe\n", "c.yaml:1: quiet: 'maybe' is not true or false"},
        {"stage: 4\n", "c.yaml:1: stage: '4' is not one of ddp, 1, 2, 3"},
        {"\nnproc: 0\n", "c.yaml:2: nproc: 0 is out of range [1, 256]"},
        {"batch: 0\n", "c.yaml:1: batch must be positive"},
        {"val-every: -5\n", "c.yaml:1: val-every must be >= 0"},
        {"data: [a, b]\n", "c.yaml:1: data: expected a single value, found a list"},
        {"model: {name: x}\n", "c.yaml:1: model: expected a single value, found a mapping"},
        {"batch: 4\nbatch: 5\n", "c.yaml:2: batch is given twice (first on line 1)"},
        {"batch: 4\n  x: [\n", "c.yaml:2: not valid YAML or JSON"},
        {"- batch\n- 4\n", "c.yaml:1: expected a mapping of flag names to values"},
        {"config: other.yaml\n", "c.yaml:1: config: not a setting"},
        {"batch:\n", "c.yaml:1: batch: has no value"},
        /* ranges checked where the value is read name the file and line; a number
         * in quotes is a string; JSON is held to JSON; an unclosed list is a syntax error */
        {"lr: -1\n", "c.yaml:1: lr: -1 must be positive"},
        {"\nval-frac: 1.5\n", "c.yaml:2: val-frac: 1.5 must be in (0, 1)"},
        {"steps: 99999999999\n", "c.yaml:1: steps: '99999999999' is out of range [1, 2147483647]"},
        {"steps: \"3\"\n", "c.yaml:1: steps: \"3\" is in quotes, so a string"},
        {"{\"steps\": 3,\n \"lr\": 0.001,}\n", "c.yaml:2: not valid JSON"},
        {"data: [corpus.txt\n", "c.yaml:2: not valid YAML or JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put("c.yaml", bad[i].text);
        int rc = sh("cd %s && %s train --data corpus.txt --steps 1 --config c.yaml", g_dir, g_exe);
        ZT_CHECK(rc == 2, "'%s': exit %d, want 2", bad[i].text, rc);
        ZT_CHECK(strstr(g_out, bad[i].want), "'%s': want '%s' in: %s", bad[i].text, bad[i].want,
                 g_out);
        ZT_CHECK(!strstr(g_out, "summary"), "'%s' trained anyway: %s", bad[i].text, g_out);
    }
    int rc = sh("cd %s && %s train --data corpus.txt --config nosuch.yaml", g_dir, g_exe);
    ZT_CHECK(rc == 2 && strstr(g_out, "--config nosuch.yaml: No such file"), "missing: %d %s", rc,
             g_out);
    /* null for a path means its default (no log). */
    put("c.yaml", "log: ~\nsteps: 1\nquiet: true\nsample-len: 0\n");
    rc = sh("cd %s && %s train --data corpus.txt --config c.yaml", g_dir, g_exe);
    ZT_CHECK(rc == 0, "null log: %s", g_out);
}

/* The example config of examples/finetune, from the inputs its README makes: documents
 * tokenized by zshard tokenize, weights exported as a Hugging Face directory. */
static void test_example(const char *src) {
    char doc[600];
    snprintf(doc, sizeof doc, "%s/docs.txt", g_dir);
    FILE *f = fopen(doc, "w");
    ZT_REQUIRE(f, "docs.txt");
    for (int d = 0; d < 120; d++) {
        for (int w = 0; w < 5 + d % 17; w++)
            fputs((const char *[]){"the cat ", "sat on ", "a mat ", "and ran. "}[(d + w * 3) % 4],
                  f);
        fputs("\n%\n", f);
    }
    fclose(f);
    int rc = sh("cd %s && %s tokenize docs.txt --doc-sep %% --tokenizer "
                "%s/examples/tokenizer/fortunes-bpe-4k --out docs-tok",
                g_dir, g_exe, src);
    ZT_REQUIRE(rc == 0, "tokenize: %s", g_out);
    rc = sh("cd %s && %s train --data 'docs-tok/train_*.bin' --steps 3 --save-dir pre --quiet "
            "--sample-len 0 && %s ckpt export pre --format hf pretrained",
            g_dir, g_exe, g_exe);
    ZT_REQUIRE(rc == 0, "pretrain and export: %s", g_out);

    rc = sh("cd %s && %s train --config %s/examples/finetune/finetune.yaml --print-config", g_dir,
            g_exe, src);
    ZT_CHECK(rc == 0 && strstr(g_out, "\nbatch: 4\n") && strstr(g_out, "\nseq: 64\n") &&
                 strstr(g_out, "\nsave-every: 50\n") && strstr(g_out, "\ndocs: pad\n") &&
                 strstr(g_out, "\ninit-from: \"pretrained\"\n"),
             "the example is not the seed-style run: %s", g_out);
    /* As written, but short: 4 steps, a checkpoint every 2. */
    rc = sh("cd %s && %s train --config %s/examples/finetune/finetune.yaml --steps 4 "
            "--save-every 2 --val-every 2 --sample-len 0",
            g_dir, g_exe, src);
    ZT_CHECK(rc == 0 && strstr(g_out, "weights from pretrained") &&
                 strstr(g_out, "summary: 4 steps"),
             "the example config: %s", g_out);
    rc = sh("cd %s && ls finetune-ck && grep -c '\"run_config\":{.*\"init-from\":\"pretrained\"' "
            "finetune-ck/step_00000004/manifest.json",
            g_dir);
    ZT_CHECK(rc == 0 && strstr(g_out, "step_00000002") && strstr(g_out, "\n1\n"), "finetune-ck: %s",
             g_out);
}

int main(int argc, char **argv) {
    zt_init("config");
    ZT_REQUIRE(argc == 2, "usage: test_config SOURCE_DIR");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    snprintf(g_exe, sizeof g_exe, "%s", zt_zshard_exe());
    char p[600];
    snprintf(p, sizeof p, "%s/corpus.txt", g_dir);
    FILE *f = fopen(p, "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 4000; i++)
        fputs((const char *[]){"the cat ", "sat on ", "a mat ", "and ran. "}[(i * 7 + i / 3) % 4],
              f);
    fclose(f);

    test_round_trip();
    test_records();
    test_bad_files();
    test_example(argv[1]);

    if (!zt_failures) sh("rm -rf %s", g_dir);
    return zt_finish();
}

/* One source grammar: every command that reads a checkpoint or weights --
 * eval, generate, train --resume, train --init-from, ckpt inspect/export/reshard -- takes a
 * save dir, one of its step dirs and the save dir's `latest` file alike, and gives the same
 * result for each; a file of no known format is named as such with the accepted forms. */
#include "data/data.h"
#include "testutil.h"
#include "zshard.h"

#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-sources-XXXXXX";
static char g_out[1 << 16];
static char g_exe[4096];

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

/* The three spellings of the newest checkpoint of save dir `ck` (step 4). */
static const char *const FORMS[] = {"ck", "ck/latest", "ck/step_00000004", "ck/step_00000004/"};
enum { NFORMS = 4 };

/* The text after `key` in the last run's output, up to the end of its line, into out. */
static void after(const char *key, char *out, size_t cap) {
    const char *p = strstr(g_out, key);
    out[0] = '\0';
    if (!p) return;
    p += strlen(key);
    size_t n = strcspn(p, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static void test_eval_generate(void) {
    static char first_loss[256], first_text[sizeof g_out];
    for (int i = 0; i < NFORMS; i++) {
        const char *f = FORMS[i];
        int rc = sh("cd %s && %s eval %s --data corpus.txt --batches 2 --json", g_dir, g_exe, f);
        ZT_CHECK(rc == 0, "eval %s: rc %d: %s", f, rc, g_out);
        char loss[256];
        after("\"loss\":", loss, sizeof loss);
        ZT_CHECK(loss[0], "eval %s printed no loss: %s", f, g_out);
        if (i == 0) snprintf(first_loss, sizeof first_loss, "%s", loss);
        ZT_CHECK(!strcmp(loss, first_loss), "eval %s: %s, but %s gives %s", f, loss, FORMS[0],
                 first_loss);

        rc = sh("cd %s && { %s generate %s --prompt 'the ' --max-tokens 12 --seed 5 2>/dev/null; }",
                g_dir, g_exe, f);
        ZT_CHECK(rc == 0, "generate %s: rc %d: %s", f, rc, g_out);
        if (i == 0) snprintf(first_text, sizeof first_text, "%s", g_out);
        ZT_CHECK(!strcmp(g_out, first_text), "generate %s differs from %s: '%s' vs '%s'", f,
                 FORMS[0], g_out, first_text);
    }
}

static void test_train_sources(void) {
    char got[17], ref[17] = "";
    for (int i = 0; i < NFORMS; i++) {
        const char *f = FORMS[i];
        /* --resume continues the stored run: two more steps from step 4. */
        int rc = sh("cd %s && %s train --data corpus.txt --resume %s --steps 6 --quiet "
                    "--save-dir res%d --sample-len 0",
                    g_dir, g_exe, f, i);
        ZT_CHECK(rc == 0, "train --resume %s: rc %d: %s", f, rc, g_out);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/res%d", g_dir, i);
        zt_ckpt_hash(dir, got);
        if (i == 0) snprintf(ref, sizeof ref, "%s", got);
        ZT_CHECK(!strcmp(got, ref), "resume from %s ends at %s, from %s at %s", f, got, FORMS[0],
                 ref);

        rc = sh("cd %s && %s train --data corpus.txt --init-from %s --steps 1 --quiet "
                "--sample-len 0",
                g_dir, g_exe, f);
        ZT_CHECK(rc == 0, "train --init-from %s: rc %d: %s", f, rc, g_out);
    }
}

static void test_ckpt_commands(void) {
    char ref[17] = "";
    for (int i = 0; i < NFORMS; i++) {
        const char *f = FORMS[i];
        int rc = sh("cd %s && %s ckpt inspect %s", g_dir, g_exe, f);
        ZT_CHECK(rc == 0, "ckpt inspect %s: rc %d: %s", f, rc, g_out);
        ZT_CHECK(strstr(g_out, "checkpoint ck/step_00000004"), "inspect %s names: %s", f, g_out);
        ZT_CHECK(!strstr(g_out, "//"), "inspect %s prints a double slash: %s", f, g_out);

        rc = sh("cd %s && %s ckpt export %s --format safetensors out%d.safetensors", g_dir, g_exe,
                f, i);
        ZT_CHECK(rc == 0, "ckpt export %s: rc %d: %s", f, rc, g_out);
        rc = sh("cd %s && cmp out0.safetensors out%d.safetensors", g_dir, i);
        ZT_CHECK(rc == 0, "export of %s differs from export of %s", f, FORMS[0]);

        rc = sh("cd %s && %s ckpt reshard %s --nproc 2 --stage 3 rs%d", g_dir, g_exe, f, i);
        ZT_CHECK(rc == 0, "ckpt reshard %s: rc %d: %s", f, rc, g_out);
        char dir[600], got[17];
        snprintf(dir, sizeof dir, "%s/rs%d", g_dir, i);
        zt_ckpt_hash(dir, got);
        if (i == 0) snprintf(ref, sizeof ref, "%s", got);
        ZT_CHECK(got[0] && !strcmp(got, ref), "reshard of %s: %s vs %s", f, got, ref);
    }
}

/* What is not weights is named, with the forms that are. */
static void test_not_weights(void) {
    static const uint16_t tok[300] = {1, 2, 3};
    char shard[600];
    snprintf(shard, sizeof shard, "%s/tokens.bin", g_dir);
    ZT_OK(zs_llmc_shard_write(shard, tok, 300));
    struct {
        const char *src, *want;
    } bad[] = {
        {"corpus.txt", "not a format zshard reads weights from"},
        {"tokens.bin", "an llm.c token shard (training data"},
        {"empty", "no checkpoint (manifest.json, latest, step_*)"},
        {"nosuch", "No such file"},
    };
    ZT_REQUIRE(sh("mkdir -p %s/empty", g_dir) == 0, "mkdir");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *cmds[] = {"eval %s --data corpus.txt", "generate %s --max-tokens 2",
                              "train --data corpus.txt --steps 1 --init-from %s"};
        for (int c = 0; c < 3; c++) {
            char cmd[512];
            snprintf(cmd, sizeof cmd, cmds[c], bad[i].src);
            int rc = sh("cd %s && %s %s", g_dir, g_exe, cmd);
            ZT_CHECK(rc != 0 && rc < 128, "'%s' should fail cleanly: rc %d", cmd, rc);
            ZT_CHECK(strstr(g_out, bad[i].want), "'%s': want '%s' in: %s", cmd, bad[i].want, g_out);
            if (strcmp(bad[i].src, "nosuch"))
                ZT_CHECK(strstr(g_out, "SAVE_DIR/latest"), "'%s' lists no accepted forms: %s", cmd,
                         g_out);
        }
    }
}

int main(void) {
    zt_init("sources");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    snprintf(g_exe, sizeof g_exe, "%s", zt_zshard_exe());
    FILE *f = fopen(strcat(strcpy(g_out, g_dir), "/corpus.txt"), "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 4000; i++)
        fputs((const char *[]){"the cat ", "sat on ", "a mat ", "and ran. "}[(i * 7 + i / 3) % 4],
              f);
    fclose(f);
    int rc = sh("cd %s && %s train --data corpus.txt --steps 4 --save-dir ck --save-every 2 "
                "--quiet --sample-len 0",
                g_dir, g_exe);
    ZT_REQUIRE(rc == 0, "train: %s", g_out);

    test_eval_generate();
    test_train_sources();
    test_ckpt_commands();
    test_not_weights();

    if (!zt_failures) sh("rm -rf %s", g_dir);
    return zt_finish();
}

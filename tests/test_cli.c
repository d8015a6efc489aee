/* The zshard executable as a user meets it: every kind of bad input ends with one clear line
 * on stderr naming the problem and a non-zero exit (never a crash or a hang), and a short
 * real training run writes a complete JSONL log whose param_hash repeats run to run. */
#include "data/data.h"
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-cli-XXXXXX";
static char g_out[65536];

static const char *path(const char *name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_text(const char *p, size_t n) {
    /* Word salad from a fixed vocabulary: enough structure to learn from, no fixtures. */
    static const char *words[] = {"the", "king", "and",  "queen", "of",   "a",     "castle", "went",
                                  "to",  "sea",  "with", "bread", "wine", "night", "day"};
    FILE *f = fopen(p, "w");
    ZT_REQUIRE(f, "open %s", p);
    size_t len = 0;
    unsigned x = 12345;
    while (len < n) {
        x = x * 1103515245u + 12345u;
        const char *w = words[(x >> 16) % 15];
        len += (size_t)fprintf(f, "%s%s", w, (x >> 8) % 9 == 0 ? ".\n" : " ");
    }
    fclose(f);
}

/* Run `zshard ARGS`, expect failure with status in {1,2}, stderr mentioning needle, and no
 * sign of a crash. */
static void expect_fail(const char *args, const char *needle) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 60 %s %s", zt_zshard_exe(), args);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 1 || rc == 2, "`zshard %s` exit %d (want 1 or 2): %s", args, rc, g_out);
    ZT_CHECK(strstr(g_out, needle) != NULL, "`zshard %s` output lacks '%s': %s", args, needle,
             g_out);
    ZT_CHECK(strstr(g_out, "zshard:") != NULL, "`zshard %s`: message prefix missing: %s", args,
             g_out);
    /* One clear line: the error is a single line on stderr. */
    int lines = 0;
    for (const char *c = g_out; *c; c++)
        lines += *c == '\n';
    ZT_CHECK(lines == 1, "`zshard %s` printed %d lines: %s", args, lines, g_out);
}

static void test_bad_input(void) {
    char a[1024];
    char txt[512];
    snprintf(txt, sizeof txt, "%s", path("ok.txt"));
    write_text(txt, 20000);
    expect_fail("frobnicate", "unknown command");
    snprintf(a, sizeof a, "train --data %s --bogus 1", txt);
    expect_fail(a, "unknown flag '--bogus'");
    snprintf(a, sizeof a, "train --data %s --model gpt9", txt);
    expect_fail(a, "unknown model 'gpt9'");
    expect_fail("train --data /nonexistent/file.txt", "/nonexistent/file.txt");
    expect_fail("train", "--data FILE is required");
    snprintf(a, sizeof a, "train --data %s", path("empty.txt"));
    FILE *f = fopen(path("empty.txt"), "w");
    fclose(f);
    expect_fail(a, "empty");
    snprintf(a, sizeof a, "train --data %s", g_dir);
    expect_fail(a, "not a regular file");

    /* Token shards: wrong magic, wrong version, truncated body. */
    uint16_t tok[4000];
    for (int i = 0; i < 4000; i++)
        tok[i] = (uint16_t)(i % 1000);
    ZT_OK(zs_llmc_shard_write(path("good.bin"), tok, 4000));
    FILE *in = fopen(path("good.bin"), "rb");
    static unsigned char buf[1024 + 8000];
    ZT_REQUIRE(in && fread(buf, 1, sizeof buf, in) == sizeof buf, "read shard");
    fclose(in);
    int32_t bad_magic = 1, bad_version = 9;
    unsigned char b2[sizeof buf];
    memcpy(b2, buf, sizeof buf);
    memcpy(b2, &bad_magic, 4);
    f = fopen(path("magic.bin"), "wb");
    fwrite(b2, 1, sizeof b2, f);
    fclose(f);
    memcpy(b2, buf, sizeof buf);
    memcpy(b2 + 4, &bad_version, 4);
    f = fopen(path("version.bin"), "wb");
    fwrite(b2, 1, sizeof b2, f);
    fclose(f);
    f = fopen(path("trunc.bin"), "wb");
    fwrite(buf, 1, 1024 + 300, f);
    fclose(f);
    snprintf(a, sizeof a, "train --data %s", path("magic.bin"));
    expect_fail(a, "bad magic");
    snprintf(a, sizeof a, "train --data %s", path("version.bin"));
    expect_fail(a, "unsupported version 9");
    snprintf(a, sizeof a, "train --data %s", path("trunc.bin"));
    expect_fail(a, "truncated body");

    /* Sizes and numbers. */
    write_text(path("short.txt"), 50);
    snprintf(a, sizeof a, "train --data %s --seq 64", path("short.txt"));
    expect_fail(a, "shorter than one sequence");
    static const char *bad[][2] = {
        {"--seq 300", "longer than model gpt2-tiny's 256 positions"},
        {"--batch 0", "--batch must be positive"},
        {"--steps -3", "--steps must be positive"},
        {"--lr abc", "--lr: 'abc' is not a number"},
        {"--batch 12x", "--batch: '12x' is not an integer"},
        {"--batch 6 --grad-accum 4", "must divide evenly"},
        {"--seq", "--seq needs a value"},
        {"--stage 5", "--stage: '5'"},
        {"--device-mem 12Q", "bad memory size"},
        {"--batch 99999999999", "--batch: '99999999999' is out of range"},
        {"--nproc 0", "--nproc: 0 is out of range [1, 256]"},
        {"--nproc 300", "--nproc: 300 is out of range [1, 256]"},
        {"--lr 1e99", "--lr: '1e99' is out of range"},
        {"--log /nonexistent/dir/run.jsonl", "--log /nonexistent/dir/run.jsonl"},
        {"--save-dir /proc/zshard-ckpt --steps 3", "--save-dir /proc/zshard-ckpt: cannot create"},
        {"--resume auto", "--resume auto needs --save-dir"},
        {"--attention tiled", "--attention: 'tiled' is not one of flash, naive"},
        {"--device tpu", "--device: 'tpu' is not one of cpu, cuda, auto"},
        /* Whatever this machine lacks (a CUDA build, a GPU, the trainer's device path), asking
         * for the GPU is one line saying which. */
        {"--device cuda", "--device cuda: "},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(a, sizeof a, "train --data %s %s", txt, bad[i][0]);
        expect_fail(a, bad[i][1]);
    }

    /* A cap too small fails at startup with the breakdown and a configuration that fits,
     * and the log is not "final". */
    snprintf(a, sizeof a, "train --data %s --device-mem 8M --log %s", txt, path("cap.jsonl"));
    expect_fail(a, "over --device-mem 8.00 MiB");
    ZT_CHECK(strstr(g_out, "activation") && strstr(g_out, "optim_state"),
             "breakdown names categories: %s", g_out);
    ZT_CHECK(strstr(g_out, "; would fit: ") && strstr(g_out, "--stage 3 --nproc ") &&
                 strstr(g_out, " per rank)"),
             "suggests what fits: %s", g_out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "grep -c '\"final\"' %s", path("cap.jsonl"));
    zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(atoi(g_out) == 0, "failed run's log has no final record");
}

/* Every subcommand answers --help with its usage on stdout and exit 0. */
static void test_help(void) {
    static const char *cmds[] = {"train",       "run",          "mem",          "bench step",
                                 "bench comm",  "bench memory", "ckpt",         "ckpt inspect",
                                 "ckpt export", "ckpt import",  "ckpt reshard", "help"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s %s --help 2>/dev/null", zt_zshard_exe(), cmds[i]);
        int rc = zt_run(cmd, g_out, sizeof g_out);
        ZT_CHECK(rc == 0 && strstr(g_out, "usage"), "`zshard %s --help`: exit %d: %s", cmds[i], rc,
                 g_out);
    }
}

/* A save dir holding another run's checkpoints is refused before training, unless the run
 * says it continues them. */
static void test_save_dir_reuse(void) {
    char a[2048];
    snprintf(a, sizeof a,
             "timeout 120 %s train --data %s --steps 2 --batch 4 --seq 32 --sample-len 0 "
             "--val-every 0 --quiet --save-dir %s",
             zt_zshard_exe(), path("ok.txt"), path("reuse"));
    int rc = zt_run(a, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "first run into the save dir: %d %s", rc, g_out);
    snprintf(a, sizeof a, "train --data %s --model llama-tiny --steps 2 --save-dir %s",
             path("ok.txt"), path("reuse"));
    expect_fail(a, "already holds checkpoints of another run");
    ZT_CHECK(strstr(g_out, "model gpt2-tiny, step 2"), "names what it holds: %s", g_out);
    /* --resume auto continues it */
    snprintf(a, sizeof a,
             "timeout 120 %s train --data %s --steps 4 --batch 4 --seq 32 --sample-len 0 "
             "--val-every 0 --save-dir %s --resume auto",
             zt_zshard_exe(), path("ok.txt"), path("reuse"));
    rc = zt_run(a, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "at step 2"), "--resume auto: exit %d: %s", rc, g_out);
}

static void run_train(const char *log, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s train --data %s --model gpt2-tiny --batch 4 --seq 32 --steps 12 "
             "--val-every 6 --val-batches 2 --sample-len 20 --log %s %s",
             zt_zshard_exe(), path("ok.txt"), log, extra);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "train exit %d: %s", rc, g_out);
    ZT_CHECK(strstr(g_out, "summary:") && strstr(g_out, "sample at step 12"),
             "summary and sample printed: %s", g_out);
}

static void read_hash(const char *log, char *hash, int *n_steps, int *n_final) {
    FILE *f = fopen(log, "r");
    ZT_REQUIRE(f, "open log %s", log);
    char line[4096];
    *n_steps = *n_final = 0;
    hash[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"final\":true")) {
            (*n_final)++;
            char *h = strstr(line, "\"param_hash\":\"");
            if (h) snprintf(hash, 17, "%s", h + 14);
            ZT_CHECK(strstr(line, "\"peak_bytes\":{\"param\":") != NULL, "peak bytes: %s", line);
        } else if (strstr(line, "\"step\":")) {
            (*n_steps)++;
            ZT_CHECK(strstr(line, "\"loss\":") && strstr(line, "\"lr\":") &&
                         strstr(line, "\"grad_norm\":") && strstr(line, "\"ms\":") &&
                         strstr(line, "\"tokens_per_s\":"),
                     "step record fields: %s", line);
        }
    }
    fclose(f);
}

static void test_train_runs(void) {
    char h1[32], h2[32], h3[32];
    int s, fin;
    run_train(path("a.jsonl"), "");
    read_hash(path("a.jsonl"), h1, &s, &fin);
    ZT_CHECK(s == 12 && fin == 1 && strlen(h1) == 16, "12 step records + final: %d %d '%s'", s, fin,
             h1);
    run_train(path("b.jsonl"), "");
    read_hash(path("b.jsonl"), h2, &s, &fin);
    ZT_CHECK(!strcmp(h1, h2), "identical runs give the same param_hash: %s vs %s", h1, h2);
    run_train(path("c.jsonl"), "--seed 99");
    read_hash(path("c.jsonl"), h3, &s, &fin);
    ZT_CHECK(strcmp(h1, h3) != 0, "another seed gives another param_hash");

    /* --quiet: the summary, no progress and no sample */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s train --data %s --batch 4 --seq 32 --steps 3 --sample-len 20 "
             "--sample-every 1 --quiet",
             zt_zshard_exe(), path("ok.txt"));
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "summary:") && !strstr(g_out, "sample") &&
                 !strstr(g_out, "step 1"),
             "--quiet: exit %d: %s", rc, g_out);
}

/* `zshard mem` takes a training command's flags and --config (those that
 * do not change memory named in one note) and predicts what the same run without them
 * predicts; a switch written --quiet=1 is a switch. */
static void test_mem_takes_train_flags(void) {
    char txt[512], cfg[512], cmd[2048], plain[65536];
    snprintf(txt, sizeof txt, "%s", path("mem.txt"));
    write_text(txt, 20000);
    snprintf(cmd, sizeof cmd, "%s mem --data %s --batch 8 --seq 32 --stage 3 --nproc 2", zt_zshard_exe(),
             txt);
    int rc = zt_run(cmd, plain, sizeof plain);
    ZT_CHECK(rc == 0, "mem (exit %d): %s", rc, plain);
    snprintf(cmd, sizeof cmd,
             "%s mem --data %s --batch 8 --seq 32 --stage 3 --nproc 2 --doc-sep %% --epochs 2 "
             "--lr 1e-3 --steps 5 --quiet --save-dir %s --tf32=false",
             zt_zshard_exe(), txt, path("never"));
    rc = zt_run(cmd, g_out, sizeof g_out);
    const char *t1 = strstr(plain, "| **total**"), *t2 = strstr(g_out, "| **total**");
    ZT_CHECK(rc == 0 &&
                 strstr(g_out, "note: train's --doc-sep, --epochs, --lr, --steps, --quiet, "
                               "--save-dir, --tf32 do not change memory: ignored here") &&
                 t1 && t2 && !strncmp(t1, t2, strcspn(t1, "\n")),
             "mem with a training command's flags (exit %d):\n%s\nagainst:\n%s", rc, g_out, plain);
    snprintf(cfg, sizeof cfg, "%s", path("mem.yaml"));
    FILE *f = fopen(cfg, "w");
    ZT_REQUIRE(f, "create %s", cfg);
    fprintf(f, "model: gpt2-mini\nlr: 0.001\nbatch: 16\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s mem --config %s --data %s --seq 32", zt_zshard_exe(), cfg, txt);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "zshard mem: gpt2-mini") &&
                 strstr(g_out, "global batch 16 x seq 32") &&
                 strstr(g_out, "note: train's --lr does not change memory"),
             "mem --config (exit %d):\n%s", rc, g_out);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --steps 1 --batch 2 --seq 16 --sample-len 0 --val-every 0 "
             "--quiet=1",
             zt_zshard_exe(), txt);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && !strstr(g_out, "unexpected argument"), "--quiet=1 (exit %d): %s", rc,
             g_out);
    /* a run that diverges: the step named once, and what to do */
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --steps 5 --lr 1e30 --batch 4 --seq 32 --sample-len 0 "
             "--val-every 0 2>&1",
             zt_zshard_exe(), txt);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && strstr(g_out, ": gradient norm is not finite: the run diverged (lower --lr") &&
                 !strstr(g_out, "not finite at step"),
             "a diverging run (exit %d): %s", rc, g_out);
    /* JSON Lines as --data: trained as bytes, with the hint to tokenize it */
    char jl[512];
    snprintf(jl, sizeof jl, "%s", path("raw.jsonl"));
    f = fopen(jl, "w");
    ZT_REQUIRE(f, "create %s", jl);
    for (int i = 0; i < 200; i++)
        fprintf(f, "{\"text\": \"the king went to sea with bread and wine %d\"}\n", i);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --steps 1 --batch 2 --seq 16 --sample-len 0 --val-every 0 2>&1",
             zt_zshard_exe(), jl);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "is read as raw bytes, its JSON syntax included") &&
                 strstr(g_out, "zshard tokenize"),
             "train --data x.jsonl (exit %d): %s", rc, g_out);
    /* --comm mpi on ranks zshard run started: the message says how they were started and
     * what works, not that torchrun's environment disagrees with MPI */
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --steps 1 --batch 2 --seq 16 --nproc 2 --comm mpi 2>&1",
             zt_zshard_exe(), txt);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && (strstr(g_out, "were started by zshard run (--nproc) or torchrun, not by "
                                       "an MPI launcher") ||
                         strstr(g_out, "this build has no MPI")),
             "--comm mpi under --nproc 2 (exit %d): %s", rc, g_out);
}

/* a resume that --epochs ends says --epochs, not --steps, and what continues it. */
static void test_resume_epochs_limit(void) {
    char docs[512], ck[512], cmd[2048];
    snprintf(docs, sizeof docs, "%s", path("ep.txt"));
    FILE *f = fopen(docs, "w");
    ZT_REQUIRE(f, "create %s", docs);
    for (int d = 0; d < 40; d++)
        fprintf(f, "the king went to sea with bread and wine, night %d and day\n%%\n", d);
    fclose(f);
    snprintf(ck, sizeof ck, "%s", path("ep_ck"));
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --docs pack --doc-sep %% --epochs 1 --batch 4 --seq 16 "
             "--save-dir %s --quiet --sample-len 0 --val-every 0 2>&1",
             zt_zshard_exe(), docs, ck);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0, "--epochs 1 run (exit %d): %s", rc, g_out);
    snprintf(cmd, sizeof cmd, "%s train --data %s --resume %s --steps 100000 --quiet 2>&1",
             zt_zshard_exe(), docs, ck);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc != 0 && strstr(g_out, "the end of --epochs 1 (") &&
                 strstr(g_out, "give --epochs 2 to continue it") &&
                 strstr(g_out, "note: --epochs 1 ends the run at step") &&
                 !strstr(g_out, "past --steps"),
             "resume of a finished --epochs run with a larger --steps (exit %d): %s", rc, g_out);
    /* --override seq on a run over documents: said to be impossible, with what works;
     * ckpt inspect of a run over documents: its epoch and sample, not a bare data position */
    snprintf(cmd, sizeof cmd, "%s ckpt inspect %s 2>&1", zt_zshard_exe(), ck);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 0 && strstr(g_out, "(--docs pack: epoch 1 of 1, sample ") &&
                 !strstr(g_out, "data position"),
             "ckpt inspect of a documents checkpoint (exit %d): %s", rc, g_out);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --resume %s --override seq --seq 32 --epochs 2 --quiet 2>&1",
             zt_zshard_exe(), docs, ck);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 2 && strstr(g_out, "--override seq: ") &&
                 strstr(g_out, "was trained on documents (--docs pack)") &&
                 strstr(g_out, "--init-from"),
             "--override seq on a documents checkpoint (exit %d): %s", rc, g_out);
}

/* eval of a checkpoint on its run's --data evaluates the run's --val-data, as its
 * logged val_loss did, and names the set it evaluated. */
static void test_eval_run_val_data(void) {
    char tr[512], va[512], ck[512], cmd[2048];
    snprintf(tr, sizeof tr, "%s", path("ev_train.txt"));
    snprintf(va, sizeof va, "%s", path("ev_val.txt"));
    snprintf(ck, sizeof ck, "%s", path("ev_ck"));
    write_text(tr, 30000);
    write_text(va, 6000);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --val-data %s --steps 4 --batch 4 --seq 32 --save-dir %s "
             "--sample-len 0 --val-every 0 --quiet 2>&1",
             zt_zshard_exe(), tr, va, ck);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    const char *vl = strstr(g_out, "val loss ");
    char want[64] = "?";
    if (vl) snprintf(want, sizeof want, "loss %.6s", vl + 9);
    ZT_CHECK(rc == 0 && vl, "train with --val-data (exit %d): %s", rc, g_out);
    snprintf(cmd, sizeof cmd, "%s eval %s --data %s 2>&1", zt_zshard_exe(), ck, tr);
    rc = zt_run(cmd, g_out, sizeof g_out);
    char on[600];
    snprintf(on, sizeof on, "on %s (--val-data)", va);
    ZT_CHECK(rc == 0 && strstr(g_out, "validated on --val-data") && strstr(g_out, on) &&
                 strstr(g_out, want),
             "eval on the run's --data: want '%s' and '%s' (the run's val loss):\n%s", on, want,
             g_out);
    /* train's validation on a split smaller than --val-batches: capped, each window once,
     * and said (300 bytes: 9 windows of 32, 3 batches of 4) */
    char tiny[512];
    snprintf(tiny, sizeof tiny, "%s", path("ev_tiny.txt"));
    write_text(tiny, 300);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s --val-data %s --steps 2 --batch 4 --seq 32 --sample-len 0 "
             "--val-every 1 2>&1",
             zt_zshard_exe(), tr, tiny);
    rc = zt_run(cmd, g_out, sizeof g_out);
    const char *note = strstr(g_out, "note: the val split holds ");
    ZT_CHECK(rc == 0 && note && strstr(note, "batches of 4: validation takes those, not "
                                             "--val-batches 8") &&
                 !strstr(note + 1, "note: the val split holds "),
             "train's validation past a small split (exit %d): %s", rc, g_out);
}

/* ZS_ERROR_TRACE=1: the message carries each ZS_CHECK the failure passed, innermost first, with
 * paths from the repository; without it, the message alone. */
static void test_error_trace(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ZS_ERROR_TRACE=1 timeout 60 %s ckpt inspect %s/none 2>&1",
             zt_zshard_exe(), g_dir);
    int rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 1 && strstr(g_out, "no such directory") &&
                 strstr(g_out, " (in zs_ckpt_resolve(") && strstr(g_out, " at src/ckpt/"),
             "ZS_ERROR_TRACE=1: exit %d, no trace: %s", rc, g_out);
    snprintf(cmd, sizeof cmd, "timeout 60 %s ckpt inspect %s/none 2>&1", zt_zshard_exe(), g_dir);
    rc = zt_run(cmd, g_out, sizeof g_out);
    ZT_CHECK(rc == 1 && strstr(g_out, "no such directory") && !strstr(g_out, " (in "),
             "without ZS_ERROR_TRACE: exit %d: %s", rc, g_out);
}

int main(void) {
    zt_init("cli");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    test_bad_input();
    test_help();
    test_save_dir_reuse();
    test_train_runs();
    test_mem_takes_train_flags();
    test_resume_epochs_limit();
    test_eval_run_val_data();
    test_error_trace();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

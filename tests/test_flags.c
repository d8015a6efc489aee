/* One argument library under every command: for train, eval, generate, mem, run,
 * tokenize, ckpt and the four benchmarks, `--flag=value` reaches the flag, `--help` lists the
 * table's flags, an unknown flag is refused with exit 2 and the nearest name ("did you mean"),
 * so is an unknown key of a `--config` file, a value out of range names its flag with exit 2,
 * and a switch takes `=false`. */
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-flags-XXXXXX";
static char g_out[1 << 16];

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

/* One command's cases; "%D" in a command line is the scratch folder. */
typedef struct cmd_case {
    const char *cmd;       /* "bench step" */
    const char *ok;        /* arguments with --flag=value that must succeed (exit 0) */
    const char *ok_needle; /* what its output shows of those values */
    const char *help[4];   /* flags (with their value names) the help must list */
    const char *typo;      /* an unknown flag */
    const char *suggest;   /* the "did you mean" it must get */
    const char *range;     /* a flag with a value out of range */
    const char *range_msg; /* the message, naming the flag */
} cmd_case;

/* The scratch folder's name in place of every "%D" of s. */
static void expand(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s && n + 600 < cap; s++) {
        if (s[0] == '%' && s[1] == 'D') {
            n += (size_t)snprintf(out + n, cap - n, "%s", g_dir);
            s++;
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

static const cmd_case CASES[] = {
    {"train", "--data=%D/t.txt --steps=1 --batch=2 --seq=16 --sample-len=0 --val-every=0 --quiet",
     "summary:", {"--batch N", "--save-dir D", "--quiet", "--config FILE"}, "--bacth", "--batch",
     "--nproc 300", "--nproc: 300 is out of range [1, 256]"},
    {"eval", "%D/ck --data=%D/t.txt --batches=1 --seq=16 --json", "\"batches\":1,",
     {"--batches N|all", "--tokenizer PATH", "--json", "--split val|all"}, "--batchs", "--batch",
     "--batches 0", "--batches: 0 is out of range [1, 1073741824]"},
    {"generate", "%D/ck --prompt=ab --max-tokens=3 --seed=7 --temperature=0",
     "3 tokens in", {"--max-tokens N", "--top-p P", "--no-cache", "--eos ID"}, "--top-kk",
     "--top-k", "--max-tokens -1", "--max-tokens: -1 is out of range [0, 1048576]"},
    {"mem", "--seq=32 --stage=3 --nproc=2 --lr=0.01", "x seq 32",
     {"--compare", "--batch N", "--stage S", "--config FILE"}, "--comapre", "--compare",
     "--nproc 0", "--nproc: 0 is out of range [1, 256]"},
    {"run", "--nproc-per-node=2 --no-prefix=true -- echo flags-ok", "flags-ok",
     {"--nproc-per-node N", "--master-port P", "--no-prefix", "--kill-grace S"}, "--nnode",
     "--nnodes", "--master-port 70000 -- true", "--master-port: 70000 is out of range [1, 65535]"},
    {"tokenize", "%D/t.txt --tokenizer=%D/absent-tok --out=%D/tok --threads=1", NULL,
     {"--tokenizer PATH", "--shard-size N", "--strict", "--exclude GLOB"}, "--outt", "--out",
     "x --threads 0", "--threads: 0 is out of range [1, 1024]"},
    {"ckpt", "reshard %D/ck %D/ck2 --nproc=2 --stage=1", NULL,
     {"--format hf|safetensors|llmc", "--nproc M", "--heads N", "--max-shard-size SIZE"},
     "inspect x --nprc", "--nproc", "reshard a b --nproc 0", "--nproc: 0 is out of range [1, "},
    {"bench step",
     "--model=gpt2-tiny --batch=2 --seq=16 --steps=1 --warmup-steps=0 --vocab=256 --device=cpu "
     "--json",
     "\"steps\":1,", {"--warmup-steps N", "--attention flash|naive", "--tf32", "--json"},
     "--stepz", "--steps", "--steps 0", "--steps must be positive"},
    {"bench comm", "--comm=shm --min-size=4K --max-size=4K --iters=3 --json", "\"bytes\": 4096",
     {"--max-size SIZE", "--ceiling NAME=GBPS", "--no-staged", "--iters N"}, "--iter", "--iters",
     "--iters -1", "--iters: -1 is out of range [0, 1048576]"},
    {"bench memory", NULL, NULL, {"--nproc-list 1,2,4", "--steps N", "--out DIR", "--model NAME"},
     "--stepz", "--steps", "--steps 1", "--steps: 1 is out of range [2, 2147483647]"},
    {"bench attention", "--model=gpt2-tiny --seq-list=16 --reps=1 --batch=1", "| 16 | flash |",
     {"--seq-list T1,T2,...", "--reps N", "--step-reps R", "--model NAME"}, "--rep", "--reps",
     "--reps 65", "--reps: 65 is out of range [1, 64]"},
    {"bench optim", "--sizes=4K,1M --reps=1 --threads=1 --json", "\"elements\":1048576,",
     {"--sizes N1,N2,...", "--threads N", "--grad fp32|bf16", "--reps N"}, "--rep", "--reps",
     "--threads 0", "--threads: 0 is out of range [1, 1024]"},
};

static void test_command(const cmd_case *c) {
    const char *z = zt_zshard_exe();
    char a[4096];
    /* --flag=value reaches its flag */
    if (c->ok) {
        expand(c->ok, a, sizeof a);
        int rc = sh("timeout 120 %s %s %s 2>&1", z, c->cmd, a);
        if (c->ok_needle)
            ZT_CHECK(rc == 0 && strstr(g_out, c->ok_needle),
                     "`zshard %s %s`: exit %d, want 0 and '%s':\n%s", c->cmd, a, rc, c->ok_needle,
                     g_out);
        else /* the values reached the command: its own error about them, not a usage one */
            ZT_CHECK(rc == 0 || (rc == 1 && (strstr(g_out, "absent-tok") || strstr(g_out, "ck2"))),
                     "`zshard %s %s`: exit %d:\n%s", c->cmd, a, rc, g_out);
    }
    /* --help: the table's flags */
    int rc = sh("%s %s --help 2>&1", z, c->cmd);
    ZT_CHECK(rc == 0 && strstr(g_out, "usage"), "`zshard %s --help`: exit %d:\n%s", c->cmd, rc,
             g_out);
    for (int i = 0; i < 4 && c->help[i]; i++)
        ZT_CHECK(strstr(g_out, c->help[i]) != NULL, "`zshard %s --help` lacks '%s':\n%s", c->cmd,
                 c->help[i], g_out);
    ZT_CHECK(strstr(g_out, "--config FILE") != NULL, "`zshard %s --help` lacks --config:\n%s",
             c->cmd, g_out);
    /* an unknown flag: exit 2, one line, the nearest name */
    rc = sh("%s %s %s 1 2>&1", z, c->cmd, c->typo);
    char want[256];
    snprintf(want, sizeof want, "unknown flag '%s' (did you mean %s? see zshard %s --help)",
             strrchr(c->typo, ' ') ? strrchr(c->typo, ' ') + 1 : c->typo, c->suggest, c->cmd);
    ZT_CHECK(rc == 2 && strstr(g_out, want) && strstr(g_out, "zshard: ") &&
                 strchr(g_out, '\n') == g_out + strlen(g_out) - 1,
             "`zshard %s %s`: exit %d, want 2 and '%s':\n%s", c->cmd, c->typo, rc, want, g_out);
    /* --config on every command (the help lists it, above): the table's long flags are its
     * keys, and a key with a typo is named with the nearest one */
    const char *last = strrchr(c->typo, ' ') ? strrchr(c->typo, ' ') + 1 : c->typo;
    rc = sh("printf '%s: 1\\n' > %s/typo.yaml && %s %s %.*s --config %s/typo.yaml 2>&1", last + 2,
            g_dir, z, c->cmd, (int)(last - c->typo), c->typo, g_dir);
    snprintf(want, sizeof want, "typo.yaml:1: unknown key '%s' (did you mean '%s'?", last + 2,
             c->suggest + 2);
    ZT_CHECK(rc == 2 && strstr(g_out, want),
             "`zshard %s --config` with the key '%s': exit %d, "
             "want 2 and '%s':\n%s",
             c->cmd, last + 2, rc, want, g_out);
    /* out of range: exit 2, the flag named */
    rc = sh("%s %s %s 2>&1", z, c->cmd, c->range);
    ZT_CHECK(rc == 2 && strstr(g_out, c->range_msg), "`zshard %s %s`: exit %d, want 2 and '%s':\n%s",
             c->cmd, c->range, rc, c->range_msg, g_out);
}

/* A switch takes =false; eval and generate read --config files as train does. */
static void test_switch_values(void) {
    const char *z = zt_zshard_exe();
    int rc = sh("%s eval %s/ck --data %s/t.txt --batches 1 --seq 16 --json=false 2>&1", z, g_dir,
                g_dir);
    ZT_CHECK(rc == 0 && strstr(g_out, "eval: ") && !strstr(g_out, "{\"loss\""),
             "eval --json=false: exit %d:\n%s", rc, g_out);
    rc = sh("%s eval %s/ck --data %s/t.txt --batches 1 --seq 16 --json=maybe 2>&1", z, g_dir,
            g_dir);
    ZT_CHECK(rc == 2, "eval --json=maybe: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --compare=false --stage=2 2>&1", z);
    ZT_CHECK(rc == 0 && strstr(g_out, "ZeRO-2") && !strstr(g_out, "ZeRO-3"),
             "mem --compare=false: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --compare 2>&1", z);
    ZT_CHECK(rc == 0 && strstr(g_out, "ZeRO-3") && strstr(g_out, "ZeRO-1"),
             "mem --compare: exit %d:\n%s", rc, g_out);
    /* --config on a command other than train: its own long flags as keys, flags override */
    rc = sh("printf 'batches: 1\\nseq: 16\\njson: true\\n' > %s/e.yaml && %s eval %s/ck --data "
            "%s/t.txt --config %s/e.yaml 2>&1",
            g_dir, z, g_dir, g_dir, g_dir);
    ZT_CHECK(rc == 0 && strstr(g_out, "{\"loss\"") && strstr(g_out, "\"batches\":1,"),
             "eval --config: exit %d:\n%s", rc, g_out);
    rc = sh("%s eval %s/ck --data %s/t.txt --config %s/e.yaml --json=false 2>&1", z, g_dir, g_dir,
            g_dir);
    ZT_CHECK(rc == 0 && !strstr(g_out, "{\"loss\""), "eval --config, flag over it: exit %d:\n%s",
             rc, g_out);
    rc = sh("printf 'max-tokns: 3\\n' > %s/g.yaml && %s generate %s/ck --config %s/g.yaml 2>&1",
            g_dir, z, g_dir, g_dir);
    ZT_CHECK(rc == 2 && strstr(g_out, "g.yaml:1: unknown key 'max-tokns' (did you mean "
                                      "'max-tokens'? the keys are generate's long flags"),
             "generate --config with a typo: exit %d:\n%s", rc, g_out);
    rc = sh("%s generate %s/ck --prompt ab --max-tokens 2 --nproc=0 2>&1", z, g_dir);
    ZT_CHECK(rc == 2 && strstr(g_out, "--nproc: 0 is out of range [1, 256]"),
             "generate --nproc=0: exit %d:\n%s", rc, g_out);
}

/* bench optim's list of sizes: a word that is no size, and a size past 4G elements, are named. */
static void test_optim_sizes(void) {
    const char *z = zt_zshard_exe();
    const char *bad[] = {"16X", "0", "5G", "1M,,2M"};
    for (int i = 0; i < 4; i++) {
        int rc = sh("%s bench optim --sizes %s 2>&1", z, bad[i]);
        ZT_CHECK(rc == 2 && strstr(g_out, "--sizes: bad list") && strstr(g_out, bad[i]),
                 "bench optim --sizes %s: exit %d:\n%s", bad[i], rc, g_out);
    }
}

/* --offload: a mode that is not one is named with exit 2, so is a fraction out of (0, 1] or
 * without offload; on CPU ranks (train, mem) the request is refused with the reason, not
 * silently ignored. */
static void test_offload(void) {
    const char *z = zt_zshard_exe();
    int rc = sh("%s train --data %s/t.txt --steps 1 --offload params-and-more 2>&1", z, g_dir);
    ZT_CHECK(rc == 2 &&
                 strstr(g_out, "--offload: 'params-and-more' is not one of none, optimizer, params"),
             "train --offload params-and-more: exit %d:\n%s", rc, g_out);
    rc = sh("%s train --data %s/t.txt --steps 1 --batch 2 --seq 16 --sample-len 0 --device cpu "
            "--offload optimizer 2>&1",
            z, g_dir);
    ZT_CHECK(rc != 0 && strstr(g_out, "on CPU ranks the device is the host") &&
                 !strstr(g_out, "step 1"),
             "train --device cpu --offload optimizer: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --model gpt2-tiny --device cuda --offload-fraction 0.5 2>&1", z);
    ZT_CHECK(rc == 2 && strstr(g_out, "--offload-fraction 0.5: nothing is offloaded without "
                                      "--offload optimizer or params"),
             "mem --offload-fraction without --offload: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --model gpt2-tiny --device cuda --offload optimizer --offload-fraction 1.5 "
            "2>&1",
            z);
    ZT_CHECK(rc == 2 && strstr(g_out, "--offload-fraction 1.5 must be in (0, 1]"),
             "mem --offload-fraction 1.5: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --model gpt2-tiny --device cuda --stage 2 --offload params 2>&1", z);
    ZT_CHECK(rc == 2 && strstr(g_out, "only ZeRO-3 shards the parameters: use --stage 3"),
             "mem --stage 2 --offload params: exit %d:\n%s", rc, g_out);
    rc = sh("%s mem --model gpt2-tiny --device cpu --offload optimizer 2>&1", z);
    ZT_CHECK(rc == 2 && strstr(g_out, "on CPU ranks the device is the host"),
             "mem --device cpu --offload optimizer: exit %d:\n%s", rc, g_out);
}

int main(void) {
    zt_init("flags");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    const char *z = zt_zshard_exe();
    int rc = sh("yes 'the king and the queen of the castle went to sea.' | head -c 20000 > %s/t.txt",
                g_dir);
    ZT_REQUIRE(rc == 0, "write text: %s", g_out);
    rc = sh("%s train --data %s/t.txt --steps 2 --batch 2 --seq 16 --sample-len 0 --val-every 0 "
            "--quiet --save-dir %s/ck 2>&1",
            z, g_dir, g_dir);
    ZT_REQUIRE(rc == 0, "a checkpoint to read: %s", g_out);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        test_command(&CASES[i]);
    test_switch_values();
    test_optim_sizes();
    test_offload();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

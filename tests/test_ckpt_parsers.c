/* The parsers of untrusted checkpoint inputs, in-process and fast: CRC32C known answers, the
 * JSON reader's accept/reject cases, the seed corpus of fuzz/ parsed for real, and then the
 * fuzz target's entry point replayed over the corpus plus a few thousand mutations of it
 * (flips, truncations, insertions), the same in every run (a fixed seed, files in name order),
 * which must never crash (the fuzz build adds AddressSanitizer; here a crash or hang still
 * fails the test). */
#include "ckpt/convert.h"
#include "ckpt/crc32c.h"
#include "ckpt/json.h"
#include "testutil.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void test_crc(void) {
    ZT_CHECK(zs_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value %08x",
             zs_crc32c(0, "123456789", 9));
    ZT_CHECK(zs_crc32c(0, "", 0) == 0, "empty");
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(zt_uniform(0, 256));
    uint32_t whole = zs_crc32c(0, buf, sizeof buf);
    for (int cut = 0; cut <= 1000; cut += 37)
        ZT_CHECK(zs_crc32c(zs_crc32c(0, buf, (size_t)cut), buf + cut, 1000 - (size_t)cut) == whole,
                 "piecewise at %d", cut);
}

static int parses(const char *s) {
    zs_json *v = NULL;
    zs_status st = zs_json_parse(s, strlen(s), &v);
    zs_json_free(v);
    return st == ZS_OK;
}

static void test_json(void) {
    static const char *good[] = {"{}",
                                 "[]",
                                 " 1 ",
                                 "-0.5e-3",
                                 "\"\\u00e9\"",
                                 "[true,false,null]",
                                 "{\"a\":{\"b\":[1,2,{\"c\":\"\\\"\"}]}}",
                                 "\"\\ud83d\\ude00\""};
    static const char *bad[] = {"",      "{",   "[1,]",     "{\"a\":1,}",  "\"\\x\"",
                                "01",    "1.",  "-",        "\"\\ud800\"", "{\"a\" 1}",
                                "[1 2]", "tru", "\"a\nb\"", "{1:2}",       "[] []",
                                "\"abc", "nul", "1e",       "{\"a\":}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ZT_CHECK(parses(good[i]), "should parse: %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ZT_CHECK(!parses(bad[i]), "should be rejected: %s", bad[i]);
    char deep[200];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    deep[128] = 0;
    ZT_CHECK(parses(deep), "64 levels of nesting are fine");
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = 0;
    ZT_CHECK(!parses(deep), "65 levels are refused");
    zs_json *v = NULL;
    ZT_OK(zs_json_parse("{\"n\":9007199254740993,\"s\":\"a\\u0000b\"}", 37, &v));
    const zs_json *n = zs_json_get(v, "n"), *s = zs_json_get(v, "s");
    ZT_CHECK(n && n->is_int && n->ival == 9007199254740993ll, "exact int64");
    ZT_CHECK(s && s->len == 3, "embedded NUL kept in length");
    const char *str;
    ZT_CHECK(zs_json_get_str(v, "s", "t", &str) != ZS_OK,
             "a string with a NUL is refused as a name");
    zs_json_free(v);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = zt_malloc(*n + 1);
    ZT_REQUIRE(fread(b, 1, *n, f) == *n, "read %s", path);
    fclose(f);
    return b;
}

static void test_seeds(void) {
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/manifest_tiny_w2", ZS_FUZZ_CORPUS);
    unsigned char *b = slurp(p, &n);
    zs_manifest m;
    ZT_OK(zs_manifest_parse((const char *)b + 1, n - 1, "seed", &m));
    ZT_CHECK(m.info.world_size == 2 && m.n_files == 2 && m.info.model.n_layer == 2,
             "seed manifest: world %d, %d files", m.info.world_size, m.n_files);
    zs_manifest_free(&m);
    free(b);
    snprintf(p, sizeof p, "%s/st_small", ZS_FUZZ_CORPUS);
    b = slurp(p, &n);
    zs_st_header h;
    ZT_OK(zs_st_parse(b + 1, n - 1, n - 1, "seed", &h));
    ZT_CHECK(h.n == 2 && h.meta_n_head == 1 && !strcmp(h.e[1].dtype, "BF16"), "seed safetensors");
    zs_st_header_free(&h);
    free(b);
    snprintf(p, sizeof p, "%s/llmc_small", ZS_FUZZ_CORPUS);
    b = slurp(p, &n);
    zs_llmc_header lh;
    ZT_OK(zs_llmc_parse(b + 1, n - 1, n - 1, "seed", &lh));
    ZT_CHECK(lh.cfg.n_embd == 16 && lh.cfg.vocab == 64 && lh.version == 3, "seed llm.c header");
    free(b);
}

static void test_replay(void) {
    int files = 0;
    long runs = 0;
    char **names = zt_dir_names(ZS_FUZZ_CORPUS, &files);
    for (int i = 0; i < files; i++) {
        char p[1024];
        size_t n;
        snprintf(p, sizeof p, "%s/%s", ZS_FUZZ_CORPUS, names[i]);
        free(names[i]);
        unsigned char *b = slurp(p, &n), *m = zt_malloc(n + 64);
        LLVMFuzzerTestOneInput(b, n);
        for (int k = 0; k < 2000; k++) {
            size_t len = n;
            memcpy(m, b, n);
            int kind = (int)zt_uniform(0, 3);
            if (kind == 0)
                for (int f = 0; f < 1 + k % 4; f++)
                    m[1 + (size_t)zt_uniform(0, (double)(n - 1))] ^=
                        (unsigned char)(1u << (int)zt_uniform(0, 8));
            else if (kind == 1)
                len = 1 + (size_t)zt_uniform(0, (double)n);
            else {
                static const char ins[] = "{}[],:\"\\0123456789-e.";
                size_t at = 1 + (size_t)zt_uniform(0, (double)(n - 1));
                memmove(m + at + 1, m + at, n - at);
                m[at] = (unsigned char)ins[(int)zt_uniform(0, sizeof ins - 1)];
                len = n + 1;
            }
            LLVMFuzzerTestOneInput(m, len);
            runs++;
        }
        free(m);
        free(b);
    }
    free(names);
    ZT_CHECK(files >= 5, "corpus has %d files", files);
    printf("replayed %d corpus files and %ld mutations\n", files, runs);
}

int main(void) {
    zt_init_fixed("ckpt_parsers", 20261127u); /* the mutations: the same in every run */
    test_crc();
    test_json();
    test_seeds();
    test_replay();
    return zt_finish();
}

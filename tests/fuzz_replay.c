/* The ctest side of a libFuzzer target (fuzz/fuzz_<name>.c, linked in): its entry point run
 * over every file of its seed corpus, and then over random mutations of each (bit flips,
 * truncations, inserted syntax characters, a repeated slice), so that every build exercises
 * the parsers with the corpus, regression inputs of found crashes included. A crash or a hang
 * fails the test (in a sanitizer build, so does a memory error, a leak or undefined behaviour).
 * The mutations are the same in every run: the files are taken in name order and the seed is
 * fixed (ZS_REPLAY_SEED) unless ZS_TEST_SEED names another, so the suite cannot pass on one
 * run and fail on the next; new inputs are scripts/fuzz.sh's work, or a sweep of seeds
 * (docs/testing.md "Fuzzing").
 * Usage: test_fuzz_<name> CORPUS_DIR MUTATIONS_PER_FILE */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ZS_REPLAY_SEED 20261127u

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(f, "open %s", path);
    ZT_REQUIRE(fseek(f, 0, SEEK_END) == 0, "seek %s", path);
    long len = ftell(f);
    ZT_REQUIRE(len >= 0, "size of %s", path);
    rewind(f);
    *n = (size_t)len;
    unsigned char *b = zt_malloc(*n + 1);
    ZT_REQUIRE(fread(b, 1, *n, f) == *n, "read %s", path);
    fclose(f);
    return b;
}

static size_t pick(size_t n) {
    return n ? (size_t)zt_uniform(0, (double)n) % n : 0;
}

/* One mutation of b[0, n) into m (room for 2n + 64 bytes); returns its length. */
static size_t mutate(const unsigned char *b, size_t n, unsigned char *m) {
    static const char syntax[] = "{}[],:\"\\ \n\t-0123456789e.#'&*|>!%@`~\x00\xff";
    memcpy(m, b, n);
    switch ((int)zt_uniform(0, 4)) {
    case 0: /* flips, never in byte 0: it picks the parser, and the other parsers get seeds */
        for (int f = 0, k = 1 + (int)zt_uniform(0, 4); f < k && n > 1; f++)
            m[1 + pick(n - 1)] ^= (unsigned char)(1u << (int)zt_uniform(0, 8));
        return n;
    case 1: /* cut short */
        return n ? 1 + pick(n) : 0;
    case 2: { /* one syntax character inserted */
        size_t at = n > 1 ? 1 + pick(n - 1) : n;
        memmove(m + at + 1, m + at, n - at);
        m[at] = (unsigned char)syntax[pick(sizeof syntax - 1)];
        return n + 1;
    }
    default: { /* a slice repeated in place: deeper nesting, longer runs, duplicate keys */
        size_t at = n > 1 ? 1 + pick(n - 1) : n, len = 1 + pick(n - at < 64 ? n - at : 64);
        if (at + len > n) return n;
        memmove(m + at + len, m + at, n - at);
        return n + len;
    }
    }
}

int main(int argc, char **argv) {
    zt_init_fixed("fuzz replay", ZS_REPLAY_SEED);
    ZT_REQUIRE(argc == 3, "usage: %s CORPUS_DIR MUTATIONS_PER_FILE", argv[0]);
    const char *dir = argv[1];
    long per_file = atol(argv[2]), runs = 0;
    int files = 0;
    char **names = zt_dir_names(dir, &files);
    for (int i = 0; i < files; i++) {
        char p[4096];
        size_t n;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unsigned char *b = slurp(p, &n), *m = zt_malloc(2 * n + 64);
        LLVMFuzzerTestOneInput(b, n);
        for (long k = 0; k < per_file; k++, runs++)
            LLVMFuzzerTestOneInput(m, mutate(b, n, m));
        free(m);
        free(b);
        free(names[i]);
    }
    free(names);
    ZT_CHECK(files >= 3, "corpus %s has %d files", dir, files);
    printf("replayed %d corpus files of %s and %ld mutations\n", files, dir, runs);
    return zt_finish();
}

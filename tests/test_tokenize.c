/* zshard tokenize: each rule for bad input (invalid UTF-8, empty documents, JSONL
 * lines that are invalid, truncated, lack the field or hold a non-string, binary files, too
 * long documents) with its count and --strict; document boundaries (template BOS, EOS after
 * each); the split by document; shard sizes and the 32-bit format; byte-identical output at
 * 1, 2 and 3 threads; memory that does not grow with the corpus (the child's peak RSS from
 * getrusage). The command's side is test_tokenize_cli.c. The tokenizer here maps each byte to
 * the id of its value (a byte-level vocabulary of 256 chars and no merges), so the expected ids
 * are the documents' own bytes; it and the corpora are tokenize_fixture.c's. */
#include "data/corpus.h"
#include "data/data.h"
#include "data/tokenize.h"
#include "testutil.h"
#include "tokenize_fixture.h"
#include "zshard.h"

#include <glob.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct toks {
    uint32_t *v;
    int64_t n;
    int bits;
} toks;

/* All tokens of OUT/split_*.bin in order; *files gets how many. */
static toks read_split(const char *out, const char *split, int *files) {
    char pat[700];
    glob_t g;
    toks t = {0};
    snprintf(pat, sizeof pat, "%s/%s_*.bin", out, split);
    *files = 0;
    if (glob(pat, 0, NULL, &g) != 0) return t;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        zs_tokens s;
        int bits;
        ZT_OK(zs_llmc_shard_read_bits(g.gl_pathv[i], &s, &bits));
        t.v = realloc(t.v, (size_t)(t.n + s.n + 1) * sizeof *t.v);
        memcpy(t.v + t.n, s.tok, (size_t)s.n * sizeof *t.v);
        t.n += s.n;
        t.bits = bits;
        free(s.tok);
    }
    *files = (int)g.gl_pathc;
    globfree(&g);
    return t;
}

static zs_tokenize_config config(const char **inputs, int n, const char *tok, const char *out) {
    zs_tokenize_config c = zs_tokenize_config_default();
    c.corpus.inputs = inputs;
    c.corpus.n_inputs = n;
    c.tokenizer = tok;
    c.out_dir = out;
    c.val_frac = 0;
    c.overwrite = 1;
    return c;
}

/* ids of document text with the identity tokenizer: its bytes, then EOS. */
static int expect_doc(const toks *t, int64_t *at, const char *text, size_t n, int eos, int bos,
                      const char *what) {
    int ok = 1;
    if (bos) ok &= *at < t->n && t->v[(*at)++] == 257;
    for (size_t i = 0; i < n && ok; i++)
        ok &= *at < t->n && t->v[(*at)++] == (unsigned char)text[i];
    ok &= *at < t->n && t->v[(*at)++] == (uint32_t)eos;
    ZT_CHECK(ok, "%s: the document '%.*s' is not its bytes%s then EOS at token %lld", what,
             (int)(n < 40 ? n : 40), text, bos ? " after <s>" : "", (long long)*at);
    return ok;
}

/* ---- rules --------------------------------------------------------------------------------- */

static void test_text_rules(void) {
    tk_write_t1();
    const char *in[] = {tk_path("t1")};
    zs_tokenize_config c = config(in, 1, tk_path("ident"), tk_path("o1"));
    c.corpus.doc_sep = "%";
    c.threads = 2;
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int files;
    toks t = read_split(tk_path("o1"), "train", &files);
    ZT_CHECK(t.bits == 16 && files == 1, "bits %d, %d files", t.bits, files);
    int64_t at = 0;
    expect_doc(&t, &at, "first\nline two", 14, 256, 0, "two lines");
    /* \xff and \xfe are each a maximal invalid subpart: two U+FFFD. */
    expect_doc(&t, &at, "bad \xEF\xBF\xBD\xEF\xBF\xBD end", 14, 256, 0, "invalid bytes");
    /* E4 B8 is a truncated 3-byte sequence: one U+FFFD for both bytes. */
    expect_doc(&t, &at, "cut \xEF\xBF\xBD", 7, 256, 0, "truncated sequence");
    expect_doc(&t, &at, "last without newline", 20, 256, 0, "last document");
    expect_doc(&t, &at, "crlf one\r\nmore", 14, 256, 0, "CRLF");
    expect_doc(&t, &at, "second", 6, 256, 0, "CRLF last line");
    ZT_CHECK(at == t.n, "%lld tokens left after the documents", (long long)(t.n - at));
    ZT_CHECK(s.skipped[ZS_DOC_EMPTY] == 2 && s.skipped[ZS_DOC_BINARY] == 1,
             "skipped: empty %lld (want 2), binary %lld (want 1)",
             (long long)s.skipped[ZS_DOC_EMPTY], (long long)s.skipped[ZS_DOC_BINARY]);
    ZT_CHECK(s.utf8_replaced == 3, "utf8_replaced %lld, want 3", (long long)s.utf8_replaced);
    ZT_CHECK(s.docs[0] == 6 && s.tokens[0] == t.n && s.docs_seen == 9,
             "docs %lld tokens %lld seen %lld", (long long)s.docs[0], (long long)s.tokens[0],
             (long long)s.docs_seen);
    ZT_CHECK(s.n_bad == 3 && strstr(s.bad[0], "a.txt:4: empty"), "first skipped: %s", s.bad[0]);
    free(t.v);

    /* One document per file (no --doc-sep): the bytes as they are, the final newline kept. */
    const char *in2[] = {tk_path("t1/a.txt"), tk_path("t1/b.txt")};
    c = config(in2, 2, tk_path("ident"), tk_path("o2"));
    ZT_OK(zs_tokenize_run(&c, &s));
    t = read_split(tk_path("o2"), "train", &files);
    ZT_CHECK(s.docs[0] == 2 && s.utf8_replaced == 3, "whole files: %lld docs, %lld replaced",
             (long long)s.docs[0], (long long)s.utf8_replaced);
    at = 0;
    while (at < t.n && t.v[at] != 256)
        at++;
    at++;
    expect_doc(&t, &at, "crlf one\r\nmore\r\n%\r\nsecond\r\n", 27, 256, 0, "whole file");
    free(t.v);

    /* Too long: over --max-doc-bytes is skipped and counted; --strict makes it an error that
     * names the file and line, and leaves no shard behind. */
    c = config(in, 1, tk_path("ident"), tk_path("o3"));
    c.corpus.doc_sep = "%";
    c.corpus.max_doc_bytes = 10;
    ZT_OK(zs_tokenize_run(&c, &s));
    /* The limit is on the bytes as read: "first\nline two", "last without newline",
     * "crlf one\r\nmore" (14, 20, 14 bytes) are over 10; "bad \xff\xfe end" (10) is not. */
    ZT_CHECK(s.skipped[ZS_DOC_TOO_LONG] == 3, "too long: %lld, want 3",
             (long long)s.skipped[ZS_DOC_TOO_LONG]);
    c.strict = 1;
    c.out_dir = tk_path("o4");
    zs_status st = zs_tokenize_run(&c, &s);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "a.txt:1: too_long"), "strict: %s: %s",
             zs_status_string(st), zs_last_error());
    t = read_split(tk_path("o4"), "train", &files);
    ZT_CHECK(files == 0 && access(tk_path("o4/dataset.json"), F_OK) != 0,
             "a failed run left %d shards or its dataset.json", files);
    free(t.v);
}

static void test_jsonl_rules(void) {
    tk_write_jsonl();
    const char *in[] = {tk_path("d.jsonl")};
    zs_tokenize_config c = config(in, 1, tk_path("ident"), tk_path("o5"));
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int files;
    toks t = read_split(tk_path("o5"), "train", &files);
    int64_t at = 0;
    expect_doc(&t, &at, "plain", 5, 256, 0, "jsonl");
    const char *esc = "esc \"q\" \n \xC3\xA9 \xF0\x9F\x98\x80 lone \xEF\xBF\xBD x";
    expect_doc(&t, &at, esc, strlen(esc), 256, 0, "jsonl escapes");
    expect_doc(&t, &at, "second wins", 11, 256, 0, "jsonl duplicate key");
    expect_doc(&t, &at, "raw \xEF\xBF\xBD( bytes", 14, 256, 0, "jsonl raw invalid UTF-8");
    ZT_CHECK(at == t.n, "%lld tokens left", (long long)(t.n - at));
    ZT_CHECK(s.skipped[ZS_DOC_NO_FIELD] == 1 && s.skipped[ZS_DOC_NOT_STRING] == 2 &&
                 s.skipped[ZS_DOC_BAD_JSON] == 1 && s.skipped[ZS_DOC_TRUNCATED_JSON] == 1 &&
                 s.skipped[ZS_DOC_EMPTY] == 1,
             "jsonl skips: no field %lld, not string %lld, bad %lld, truncated %lld, empty %lld",
             (long long)s.skipped[ZS_DOC_NO_FIELD], (long long)s.skipped[ZS_DOC_NOT_STRING],
             (long long)s.skipped[ZS_DOC_BAD_JSON], (long long)s.skipped[ZS_DOC_TRUNCATED_JSON],
             (long long)s.skipped[ZS_DOC_EMPTY]);
    int found = 0;
    for (int i = 0; i < s.n_bad; i++)
        found += strstr(s.bad[i], "d.jsonl:5: not_string (field 'text' is a number)") != NULL ||
                 strstr(s.bad[i], "d.jsonl:11: truncated_json") != NULL ||
                 strstr(s.bad[i], "d.jsonl:4: missing_field (no field 'text')") != NULL;
    ZT_CHECK(found == 3, "skipped lines named by file:line (%d of 3): %s | %s", found, s.bad[0],
             s.bad[s.n_bad - 1]);
    free(t.v);
    /* --field picks another key. */
    c = config(in, 1, tk_path("ident"), tk_path("o6"));
    c.corpus.field = "title";
    ZT_OK(zs_tokenize_run(&c, &s));
    ZT_CHECK(s.docs[0] == 1 && s.skipped[ZS_DOC_NO_FIELD] == 7, "--field title: %lld docs",
             (long long)s.docs[0]);
    /* A UTF-8 byte-order mark before the first line (an editor's) is not part of it. */
    tk_write_text(tk_path("bom.jsonl"),
                  "\xEF\xBB\xBF{\"text\": \"first\"}\n{\"text\": \"second\"}\n");
    const char *bin[] = {tk_path("bom.jsonl")};
    c = config(bin, 1, tk_path("ident"), tk_path("o6b"));
    ZT_OK(zs_tokenize_run(&c, &s));
    t = read_split(tk_path("o6b"), "train", &files);
    at = 0;
    expect_doc(&t, &at, "first", 5, 256, 0, "jsonl after a BOM");
    expect_doc(&t, &at, "second", 6, 256, 0, "jsonl second line");
    ZT_CHECK(at == t.n && s.skipped[ZS_DOC_BAD_JSON] == 0,
             "a BOM made line 1 invalid JSON (%lld skipped as invalid)",
             (long long)s.skipped[ZS_DOC_BAD_JSON]);
    free(t.v);
    /* A line is line[0, n), not a C string: the message quotes only its own bytes (fuzz_data
     * found "%.10s" reading past a 1-byte line). */
    char why[200], *out = NULL;
    size_t cap = 0, out_n;
    ZT_CHECK(zs_jsonl_field("xNOT-PART-OF-IT", 1, "text", &out, &cap, &out_n, why, sizeof why) ==
                     ZS_DOC_BAD_JSON &&
                 !strcmp(why, "not a JSON object (starts with 'x')"),
             "a 1-byte line: %s", why);
    free(out);
}

/* ---- boundaries, split, shards, 32 bits ---------------------------------------------------- */

static void test_layout(void) {
    /* 400 documents of different lengths; shards of 100 tokens; 30% to val. */
    FILE *f = fopen(tk_path("many.txt"), "w");
    ZT_REQUIRE(f, "create");
    for (int i = 0; i < 400; i++)
        fprintf(f, "document %d %.*s\n%%\n", i, i % 37, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL");
    fclose(f);
    tk_write_ident(tk_path("ident32"), 70000, 1);
    const char *in[] = {tk_path("many.txt")};
    zs_tokenize_config c = config(in, 1, tk_path("ident32"), tk_path("o7"));
    c.corpus.doc_sep = "%";
    c.shard_size = 100;
    c.val_frac = 0.3;
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int nf[2];
    toks t[2] = {read_split(tk_path("o7"), "train", &nf[0]),
                 read_split(tk_path("o7"), "val", &nf[1])};
    ZT_CHECK(t[0].bits == 32 && t[1].bits == 32, "vocab 70001 needs 32-bit shards: %d %d",
             t[0].bits, t[1].bits);
    for (int k = 0; k < 2; k++)
        ZT_CHECK(nf[k] == (int)((t[k].n + 99) / 100) && s.shards[k] == nf[k],
                 "split %d: %lld tokens in %d shards of 100", k, (long long)t[k].n, nf[k]);
    /* Every shard but the last of a split is full. */
    zs_tokens one;
    ZT_OK(zs_llmc_shard_read(tk_path("o7/train_000000.bin"), &one));
    ZT_CHECK(one.n == 100, "first shard holds %lld tokens", (long long)one.n);
    free(one.tok);
    /* Each document once, in order within its split, <s> first and EOS last. */
    int64_t at[2] = {0, 0}, in_split[2] = {0, 0};
    for (int i = 0; i < 400; i++) {
        char d[80];
        int n = snprintf(d, sizeof d, "document %d %.*s", i, i % 37,
                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL");
        /* Which split holds it: the one whose next document is this text. */
        int k = 0;
        if (at[1] + n + 2 <= t[1].n) {
            int same = t[1].v[at[1]] == 257;
            for (int b = 0; b < n && same; b++)
                same = t[1].v[at[1] + 1 + b] == (unsigned char)d[b];
            k = same;
        }
        in_split[k]++;
        expect_doc(&t[k], &at[k], d, (size_t)n, 70000, 1, k ? "val" : "train");
    }
    ZT_CHECK(at[0] == t[0].n && at[1] == t[1].n, "tokens left: %lld %lld",
             (long long)(t[0].n - at[0]), (long long)(t[1].n - at[1]));
    /* 30% of 400: binomial sd 9.2; 4 sd either way. */
    ZT_CHECK(in_split[1] > 120 - 37 && in_split[1] < 120 + 37 && in_split[1] == s.docs[1],
             "val holds %lld of 400 documents at --val-frac 0.3", (long long)in_split[1]);
    /* The rule is a function of (seed, index): another seed, another split; the same seed,
     * the same one. */
    int differ = 0, same = 1;
    for (int64_t i = 0; i < 400; i++) {
        differ += zs_tokenize_is_val(1, i, 0.3) != zs_tokenize_is_val(2, i, 0.3);
        same &= zs_tokenize_is_val(7, i, 0.3) == zs_tokenize_is_val(7, i, 0.3);
    }
    ZT_CHECK(differ > 40 && same, "seeds 1 and 2 split %d of 400 documents differently", differ);
    /* dataset.json: the contract's keys. */
    FILE *j = fopen(tk_path("o7/dataset.json"), "r");
    static char buf[8192];
    size_t n = j ? fread(buf, 1, sizeof buf - 1, j) : 0;
    if (j) fclose(j);
    buf[n] = 0;
    const char *keys[] = {"\"format\": \"zshard-tokens\"",
                          "\"version\": 1",
                          "\"vocab_size\": 70001",
                          "\"eos_id\": 70000",
                          "\"bos_id\": 257",
                          "\"pad_id\": null",
                          "\"doc_boundary\": \"eos_after\"",
                          "\"bits\": 32",
                          "\"train\": {\"files\": [\"train_000000.bin\"",
                          "\"val\": {\"files\": "};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        ZT_CHECK(strstr(buf, keys[i]), "dataset.json lacks %s:\n%s", keys[i], buf);
    free(t[0].v);
    free(t[1].v);
}

/* ---- threads ------------------------------------------------------------------------------- */

static int same_file(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        int c = fgetc(x), d = fgetc(y);
        same = c == d;
        if (c == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

static void test_threads(void) {
    tk_write_th();
    const char *in[] = {tk_path("th")};
    const char *outs[3] = {tk_path("th1"), tk_path("th2"), tk_path("th3")};
    for (int k = 0; k < 3; k++) {
        zs_tokenize_config c = config(in, 1, tk_path("ident"), outs[k]);
        c.corpus.doc_sep = "%";
        c.shard_size = 300000;
        c.val_frac = 0.2;
        c.threads = k + 1;
        zs_tokenize_stats s;
        ZT_OK(zs_tokenize_run(&c, &s));
        ZT_CHECK(s.shards[0] >= 3, "want several shards, got %lld", (long long)s.shards[0]);
    }
    glob_t g;
    char pat[700];
    snprintf(pat, sizeof pat, "%s/*", outs[0]);
    ZT_REQUIRE(glob(pat, 0, NULL, &g) == 0, "glob");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        for (int k = 1; k < 3; k++) {
            char other[800];
            snprintf(other, sizeof other, "%s/%s", outs[k], base);
            ZT_CHECK(same_file(g.gl_pathv[i], other), "%s differs at %d threads", base, k + 1);
        }
    }
    ZT_CHECK(g.gl_pathc >= 5, "only %zu output files", g.gl_pathc);
    globfree(&g);
}

/* ---- memory -------------------------------------------------------------------------------- */

/* Peak RSS (KiB) of a child that tokenizes `mb` MB of text into shards of 64k tokens. */
static long child_peak_kib(const char *dir, int mb) {
    mkdir(dir, 0700);
    char p[700];
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    FILE *f = fopen(p, "w");
    ZT_REQUIRE(f, "create %s", p);
    static char line[1001];
    for (int i = 0; i < 1000; i++)
        line[i] = "the quick brown fox jumps over a lazy dog\n"[i % 42];
    line[1000] = 0;
    for (int i = 0; i < mb * 1000; i++)
        fprintf(f, "%s\n%%\n", line);
    fclose(f);
    pid_t pid = fork();
    ZT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        const char *in[] = {p};
        char out[700];
        snprintf(out, sizeof out, "%s/out", dir);
        zs_tokenize_config c = config(in, 1, tk_path("ident"), out);
        c.corpus.doc_sep = "%";
        c.shard_size = 65536;
        c.threads = 2;
        zs_tokenize_stats s;
        _exit(zs_tokenize_run(&c, &s) == ZS_OK ? 0 : 1);
    }
    int status;
    struct rusage ru;
    ZT_REQUIRE(wait4(pid, &status, 0, &ru) == pid, "wait4");
    ZT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tokenize of %d MB failed", mb);
    return ru.ru_maxrss;
}

static void test_memory(void) {
    if (!zt_unsanitized_for("the peak RSS check",
                            "its shadow memory and quarantine of freed blocks grow with the work"))
        return;
    long small = child_peak_kib(tk_path("m8"), 8), big = child_peak_kib(tk_path("m32"), 32);
    printf("peak RSS: %ld KiB for 8 MB of text, %ld KiB for 32 MB\n", small, big);
    /* 24 MB more text (24M more tokens, 48 MB of shards) may not cost 8 MB more memory. */
    ZT_CHECK(big - small < 8 * 1024, "peak RSS grew by %ld KiB with 24 MB more text", big - small);
}

int main(void) {
    zt_init("tokenize");
    tk_begin("tokenize");
    test_text_rules();
    test_jsonl_rules();
    test_layout();
    test_threads();
    test_memory();
    return tk_end(zt_finish());
}

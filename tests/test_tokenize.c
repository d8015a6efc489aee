/* zshard tokenize: each rule for bad input (invalid UTF-8, empty documents, JSONL
 * lines that are invalid, truncated, lack the field or hold a non-string, binary files, too
 * long documents) with its count and --strict; document boundaries (template BOS, EOS after
 * each); the split by document; shard sizes and the 32-bit format; byte-identical output at
 * 1, 2 and 3 threads; memory that does not grow with the corpus (the child's peak RSS from
 * getrusage); the CLI's exit codes and summary. The tokenizer here maps each byte to the id of
 * its value (a byte-level vocabulary of 256 chars and no merges), so the expected ids are the
 * documents' own bytes. */
#include "data/corpus.h"
#include "data/data.h"
#include "data/tokenize.h"
#include "testutil.h"
#include "zshard.h"

#include <glob.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zs_test_tokenize_XXXXXX";

/* Every path() made, freed at the end of the run (configs hold these pointers until then). */
static char **g_paths;
static size_t g_n_paths;

/* A path in the test's folder, valid for the whole run. */
static const char *path(const char *name) {
    char *p = zt_malloc(strlen(g_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_dir, name);
    if ((g_n_paths & (g_n_paths - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to twice */
        char **g = realloc(g_paths, (g_n_paths ? 2 * g_n_paths : 1) * sizeof *g);
        ZT_REQUIRE(g, "out of memory");
        g_paths = g;
    }
    g_paths[g_n_paths++] = p;
    return p;
}

static void write_bytes(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    ZT_REQUIRE(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "write %s", p);
}
static void write_text(const char *p, const char *s) {
    write_bytes(p, s, strlen(s));
}

/* GPT-2's byte -> char table as its encoder.py defines it: '!'..'~', '¡'..'¬', '®'..'ÿ' stand
 * for themselves, the other bytes take U+0100, U+0101, ... in order. */
static unsigned byte_cp(unsigned b) {
    unsigned next = 256;
    for (unsigned x = 0; x < 256; x++) {
        int self = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
        unsigned cp = self ? x : next++;
        if (x == b) return cp;
    }
    return 0;
}

/* The identity tokenizer in dir: ids 0..255 are the bytes, EOS <|endoftext|> is eos_id; with
 * bos, <s> (id 257) is put in front of each sequence by the template. */
static void write_ident(const char *dir, int eos_id, int bos) {
    static char j[65536];
    mkdir(dir, 0700);
    int k = sprintf(j,
                    "{\"added_tokens\": [{\"id\": %d, \"content\": \"<|endoftext|>\", "
                    "\"special\": true, \"normalized\": false}%s],\n",
                    eos_id,
                    bos ? ", {\"id\": 257, \"content\": \"<s>\", \"special\": true, "
                          "\"normalized\": false}"
                        : "");
    k += sprintf(j + k, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                        "\"add_prefix_space\": false, \"use_regex\": true},\n");
    if (bos)
        k += sprintf(j + k, "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                            "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, "
                            "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}]},\n");
    k += sprintf(j + k, "\"decoder\": {\"type\": \"ByteLevel\"},\n\"model\": {\"type\": \"BPE\", "
                        "\"merges\": [], \"vocab\": {");
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = byte_cp(b);
        char u[8];
        if (cp == '"' || cp == '\\')
            sprintf(u, "\\%c", cp);
        else if (cp < 0x80)
            sprintf(u, "%c", cp);
        else
            sprintf(u, "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 0x3F));
        k += sprintf(j + k, "%s\"%s\": %u", b ? ", " : "", u, b);
    }
    sprintf(j + k, "}}}\n");
    char p[700];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_text(p, j);
}

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
    mkdir(path("t1"), 0700);
    /* Fortune style: %-lines separate; a CRLF file; invalid UTF-8; empty and blank documents. */
    write_text(path("t1/a.txt"), "first\nline two\n%\n%\n   \n\t\n%\nbad \xff\xfe end\n%\n"
                                 "cut \xe4\xb8\n%\nlast without newline");
    write_text(path("t1/b.txt"), "crlf one\r\nmore\r\n%\r\nsecond\r\n");
    write_bytes(path("t1/c.bin"), "\x01\x00\x02text", 7); /* a NUL: binary */
    write_ident(path("ident"), 256, 0);
    const char *in[] = {path("t1")};
    zs_tokenize_config c = config(in, 1, path("ident"), path("o1"));
    c.corpus.doc_sep = "%";
    c.threads = 2;
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int files;
    toks t = read_split(path("o1"), "train", &files);
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
    const char *in2[] = {path("t1/a.txt"), path("t1/b.txt")};
    c = config(in2, 2, path("ident"), path("o2"));
    ZT_OK(zs_tokenize_run(&c, &s));
    t = read_split(path("o2"), "train", &files);
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
    c = config(in, 1, path("ident"), path("o3"));
    c.corpus.doc_sep = "%";
    c.corpus.max_doc_bytes = 10;
    ZT_OK(zs_tokenize_run(&c, &s));
    /* The limit is on the bytes as read: "first\nline two", "last without newline",
     * "crlf one\r\nmore" (14, 20, 14 bytes) are over 10; "bad \xff\xfe end" (10) is not. */
    ZT_CHECK(s.skipped[ZS_DOC_TOO_LONG] == 3, "too long: %lld, want 3",
             (long long)s.skipped[ZS_DOC_TOO_LONG]);
    c.strict = 1;
    c.out_dir = path("o4");
    zs_status st = zs_tokenize_run(&c, &s);
    ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "a.txt:1: too_long"), "strict: %s: %s",
             zs_status_string(st), zs_last_error());
    t = read_split(path("o4"), "train", &files);
    ZT_CHECK(files == 0 && access(path("o4/dataset.json"), F_OK) != 0,
             "a failed run left %d shards or its dataset.json", files);
    free(t.v);
}

static void test_jsonl_rules(void) {
    write_text(
        path("d.jsonl"),
        "{\"id\": 1, \"text\": \"plain\"}\n"
        "\n"
        "{\"text\": \"esc \\\"q\\\" \\n \\u00e9 \\ud83d\\ude00 lone \\ud800 x\", \"n\": [1, {}]}\n"
        "{\"title\": \"no text field\"}\n"
        "{\"text\": 42}\n"
        "{\"text\": null}\n"
        "not json at all\n"
        "{\"text\": \"dup\", \"text\": \"second wins\"}\n"
        "{\"text\": \"\"}\n"
        "{\"text\": \"raw \xc3\x28 bytes\"}\n"
        "{\"text\": \"cut off in the mid");
    const char *in[] = {path("d.jsonl")};
    zs_tokenize_config c = config(in, 1, path("ident"), path("o5"));
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int files;
    toks t = read_split(path("o5"), "train", &files);
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
    c = config(in, 1, path("ident"), path("o6"));
    c.corpus.field = "title";
    ZT_OK(zs_tokenize_run(&c, &s));
    ZT_CHECK(s.docs[0] == 1 && s.skipped[ZS_DOC_NO_FIELD] == 7, "--field title: %lld docs",
             (long long)s.docs[0]);
    /* A UTF-8 byte-order mark before the first line (an editor's) is not part of it. */
    write_text(path("bom.jsonl"), "\xEF\xBB\xBF{\"text\": \"first\"}\n{\"text\": \"second\"}\n");
    const char *bin[] = {path("bom.jsonl")};
    c = config(bin, 1, path("ident"), path("o6b"));
    ZT_OK(zs_tokenize_run(&c, &s));
    t = read_split(path("o6b"), "train", &files);
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
    FILE *f = fopen(path("many.txt"), "w");
    ZT_REQUIRE(f, "create");
    for (int i = 0; i < 400; i++)
        fprintf(f, "document %d %.*s\n%%\n", i, i % 37, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL");
    fclose(f);
    write_ident(path("ident32"), 70000, 1);
    const char *in[] = {path("many.txt")};
    zs_tokenize_config c = config(in, 1, path("ident32"), path("o7"));
    c.corpus.doc_sep = "%";
    c.shard_size = 100;
    c.val_frac = 0.3;
    zs_tokenize_stats s;
    ZT_OK(zs_tokenize_run(&c, &s));
    int nf[2];
    toks t[2] = {read_split(path("o7"), "train", &nf[0]), read_split(path("o7"), "val", &nf[1])};
    ZT_CHECK(t[0].bits == 32 && t[1].bits == 32, "vocab 70001 needs 32-bit shards: %d %d",
             t[0].bits, t[1].bits);
    for (int k = 0; k < 2; k++)
        ZT_CHECK(nf[k] == (int)((t[k].n + 99) / 100) && s.shards[k] == nf[k],
                 "split %d: %lld tokens in %d shards of 100", k, (long long)t[k].n, nf[k]);
    /* Every shard but the last of a split is full. */
    zs_tokens one;
    ZT_OK(zs_llmc_shard_read(path("o7/train_000000.bin"), &one));
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
    FILE *j = fopen(path("o7/dataset.json"), "r");
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
    /* Enough documents for many batches (a batch is 1 MiB or 4096 documents). */
    mkdir(path("th"), 0700);
    for (int fi = 0; fi < 3; fi++) {
        char name[40];
        snprintf(name, sizeof name, "th/part%d.txt", fi);
        FILE *f = fopen(path(name), "w");
        ZT_REQUIRE(f, "create");
        for (int i = 0; i < 6000; i++) {
            int len = (int)zt_uniform(0, 300);
            fprintf(f, "%d:", i);
            for (int k = 0; k < len; k++)
                fputc("abc def\xc3\xa9\n"[(int)zt_uniform(0, 10)], f);
            fprintf(f, "\n%%\n");
        }
        fclose(f);
    }
    const char *in[] = {path("th")};
    const char *outs[3] = {path("th1"), path("th2"), path("th3")};
    for (int k = 0; k < 3; k++) {
        zs_tokenize_config c = config(in, 1, path("ident"), outs[k]);
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
        zs_tokenize_config c = config(in, 1, path("ident"), out);
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
    long small = child_peak_kib(path("m8"), 8), big = child_peak_kib(path("m32"), 32);
    printf("peak RSS: %ld KiB for 8 MB of text, %ld KiB for 32 MB\n", small, big);
    /* 24 MB more text (24M more tokens, 48 MB of shards) may not cost 8 MB more memory. */
    ZT_CHECK(big - small < 8 * 1024, "peak RSS grew by %ld KiB with 24 MB more text", big - small);
}

/* ---- the CLI ------------------------------------------------------------------------------- */

static void test_cli(void) {
    static char buf[1 << 16];
    const char *z = zt_zshard_exe();
    int rc = zt_runf(buf, sizeof buf,
                     "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                     "--threads 2",
                     z, path("t1"), path("ident"), path("c1"));
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "skipped 3 documents (empty 2, binary_file 1)") &&
                 strstr(buf, "a.txt:5: empty (only white space)") &&
                 strstr(buf, "invalid UTF-8 replaced 3"),
             "summary (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                 "--exclude '*.bin' --quiet",
                 z, path("t1"), path("ident"), path("c0"));
    ZT_CHECK(rc == 0 && strstr(buf, "read 2 files") && strstr(buf, "skipped 2 documents (empty 2)"),
             "--exclude '*.bin' (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --doc-sep %%", z,
                 path("t1"), path("ident"), path("c1"));
    ZT_CHECK(rc == 1 && strstr(buf, "already holds") && strstr(buf, "--overwrite"),
             "a second run into the same folder (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --strict", z,
                 path("d.jsonl"), path("ident"), path("c2"));
    ZT_CHECK(rc == 1 && strstr(buf, "d.jsonl:4: missing_field: no field 'text' (--strict)"),
             "strict jsonl (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s", z,
                 path("nothing/here*.txt"), path("ident"), path("c3"));
    ZT_CHECK(rc == 1 && strstr(buf, "matches no file"), "no match (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s", z, path("t1"),
                 path("absent"), path("c4"));
    ZT_CHECK(rc == 1 && strstr(buf, "absent"), "missing tokenizer (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --val-frac 2", z,
                 path("t1"), path("ident"), path("c5"));
    ZT_CHECK(rc == 2 && strstr(buf, "--val-frac"), "bad flag (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --out %s", z, path("t1"), path("c6"));
    ZT_CHECK(rc == 2 && strstr(buf, "--tokenizer"), "no tokenizer (rc %d): %s", rc, buf);
}

/* tokenize stopped by SIGINT or SIGTERM removes the shards it wrote, writes no
 * dataset.json, says so, and exits 128 + the signal. ZS_FAULT_HOLD_SHARDS=3 holds the job after
 * the batch that begins its third shard (as a stalled input would), so the signal always comes
 * mid-run. */
static void test_interrupt(void) {
    static char buf[1 << 16];
    FILE *f = fopen(path("intr.txt"), "w");
    ZT_REQUIRE(f, "create intr.txt");
    for (int d = 0; d < 400; d++)
        fprintf(f, "document %d of the interrupted run, with a few words\n%%\n", d);
    fclose(f);
    const int sigs[] = {2, 15};
    const char *names[] = {"SIGINT", "SIGTERM"};
    for (int k = 0; k < 2; k++) {
        char out[64], want[64], said[64];
        snprintf(out, sizeof out, "intr_out%d", k);
        int rc = zt_runf(
            buf, sizeof buf,
            "cd %s && rm -rf %s && { ZS_FAULT_HOLD_SHARDS=3 %s tokenize intr.txt "
            "--doc-sep %% --tokenizer %s --out %s --shard-size 50 --threads 1 > intr%d.log 2>&1 "
            "& } ; p=$!; i=0; while [ ! -e %s/train_000001.bin ] && [ $i -lt 3000 ]; do "
            "sleep 0.01; i=$((i+1)); done; ls %s > before%d.txt; kill -%d $p; wait $p; "
            "echo \"rc=$?\"; cat intr%d.log; echo \"shards before: $(wc -l < before%d.txt)\"; "
            "echo \"left: [$(ls -A %s)]\"",
            g_dir, out, zt_zshard_exe(), path("ident"), out, k, out, out, k, sigs[k], k, k, out);
        snprintf(want, sizeof want, "rc=%d", 128 + sigs[k]);
        snprintf(said, sizeof said, "interrupted by %s: removed the ", names[k]);
        ZT_CHECK(rc == 0 && strstr(buf, want) && strstr(buf, said) &&
                     strstr(buf, "wrote no dataset.json") && strstr(buf, "left: []") &&
                     !strstr(buf, "shards before: 0"),
                 "tokenize stopped by %s: want %s, its message, and an empty output folder:\n%s",
                 names[k], want, buf);
    }
}

/* an output folder inside the input folder, and earlier
 * runs' token folders, are left out of the inputs with a note (never tokenized as text);
 * --overwrite never deletes an input; nothing kept is an error; a validation-only set and a
 * bad --eos are said once, without a doubled prefix. */
static void test_output_in_input(void) {
    static char buf[1 << 16];
    char cmd[4096];
    const char *z = zt_zshard_exe(), *tok = path("ident");
    ZT_REQUIRE(system("true") == 0, "sh");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/nest && cd %s/nest && for i in 1 2 3 4 5 6; do "
             "printf 'document %%s of the nest\n%%%%\n' $i; done > a.txt", g_dir, g_dir);
    ZT_REQUIRE(system(cmd) == 0, "%s", cmd);
    int rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                     "--out nest/tok --val-frac 0", g_dir, z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents"), "first run (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                 "--out nest/tok2 --val-frac 0", g_dir, z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "note: left out nest/tok (token shards: it holds a zshard "
                             "dataset.json)"),
             "a second output folder beside the first: the first is not an input (rc %d):\n%s",
             rc, buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                 "--out nest/tok --val-frac 0 --overwrite && test -f nest/tok/dataset.json",
                 g_dir, z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "note: left out nest/tok (the output folder)"),
             "--overwrite of an output folder inside the inputs (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest/tok/dataset.json nest/a.txt "
                 "--doc-sep %% --tokenizer %s --out nest/tok --overwrite 2>&1; echo \"rc=$?\"; "
                 "test -f nest/tok/dataset.json && test -f nest/tok/train_000000.bin && "
                 "echo kept", g_dir, z, tok);
    ZT_CHECK(strstr(buf, "rc=1") &&
                 strstr(buf, "the input nest/tok/dataset.json is an earlier output in --out "
                             "nest/tok, which this run would delete (--overwrite)") &&
                 strstr(buf, "kept") && !strstr(buf, "tokenize: tokenize:"),
             "--overwrite must not delete an input:\n%s", buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest/a.txt --doc-sep %% --tokenizer %s "
                 "--out nest_none --max-doc-bytes 4", g_dir, z, tok);
    ZT_CHECK(rc == 1 && strstr(buf, "none of the 6 documents read was kept (the first: "
                                    "nest/a.txt:1: too_long"),
             "nothing kept (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest/a.txt --doc-sep %% --tokenizer %s "
                 "--out nest_val --val-frac 1", g_dir, z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "note: no document went to train (--val-frac 1)"),
             "validation-only (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "cd %s && %s tokenize nest/a.txt --tokenizer %s --out nest_e "
                 "--eos nope", g_dir, z, tok);
    ZT_CHECK(rc == 1 && strstr(buf, "zshard: tokenize: --eos 'nope' is not a token") &&
                 !strstr(buf, "tokenize: tokenize:"),
             "--eos that is no token: one prefix (rc %d):\n%s", rc, buf);
}

/* eval --data TEXT --tokenizer: the same loss as eval on the shards `zshard tokenize` writes
 * from that text (all documents in one split), at 1 and 2 ranks. */
static void test_eval_text(void) {
    static char buf[1 << 16], a[512];
    const char *z = zt_zshard_exe();
    int rc = zt_runf(buf, sizeof buf,
                     "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                     "--val-frac 0 --quiet",
                     z, path("th"), path("ident"), path("ev"));
    ZT_REQUIRE(rc == 0, "tokenize: %s", buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s train --model gpt2-tiny --data '%s/train_*.bin' --vocab 257 "
                 "--batch 4 --seq 32 --steps 3 --sample-len 0 --quiet "
                 "--save-dir %s",
                 z, path("ev"), path("ev-ck"));
    ZT_REQUIRE(rc == 0, "train: %s", buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s eval %s --data '%s/train_*.bin' --split all --batches 6 "
                 "--json",
                 z, path("ev-ck"), path("ev"));
    snprintf(a, sizeof a, "%.*s", (int)strcspn(buf, ","), buf);
    ZT_CHECK(rc == 0 && strstr(a, "\"loss\":"), "eval on shards: %s", buf);
    const char *tail[] = {"", " --nproc 2 --stage 3"};
    for (int k = 0; k < 2; k++) {
        rc = zt_runf(buf, sizeof buf,
                     "%s eval %s --data %s --tokenizer %s --doc-sep %% "
                     "--split all --batches 6 --json%s 2>/dev/null",
                     z, path("ev-ck"), path("th"), path("ident"), tail[k]);
        const char *j = strstr(buf, "{\"loss\"");
        ZT_CHECK(rc == 0 && j && !strncmp(j, a, strlen(a)),
                 "eval --tokenizer%s: %s, want the loss of %s", tail[k], buf, a);
    }
    /* --field reads JSONL for the tokenizer; without one there is nothing to read it for
     * (--doc-sep alone is byte-level text's document rule, as train's). */
    rc =
        zt_runf(buf, sizeof buf, "%s eval %s --data %s --field text", z, path("ev-ck"), path("th"));
    ZT_CHECK(rc == 2 && strstr(buf, "--field applies with --tokenizer"),
             "--field without --tokenizer: %s", buf);
    /* a tokenizer of another vocabulary than the model's: named, not the temporary shards */
    rc = zt_runf(buf, sizeof buf,
                 "%s train --model gpt2-tiny --data %s --batch 2 --seq 16 --steps 1 "
                 "--sample-len 0 --val-every 0 --quiet --save-dir %s",
                 z, path("intr.txt"), path("ev-bytes"));
    ZT_REQUIRE(rc == 0, "byte-level train: %s", buf);
    rc = zt_runf(buf, sizeof buf, "%s eval %s --data %s --tokenizer %s --doc-sep %% 2>&1", z,
                 path("ev-bytes"), path("intr.txt"), path("ident"));
    ZT_CHECK(rc == 1 && strstr(buf, "has 257 ids and the model of") &&
                 strstr(buf, "not the tokenizer the model was trained with") &&
                 !strstr(buf, "dataset.json"),
             "eval with another tokenizer: %s", buf);
}

int main(void) {
    zt_init("tokenize");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    test_text_rules();
    test_jsonl_rules();
    test_layout();
    test_threads();
    test_memory();
    test_cli();
    test_interrupt();
    test_output_in_input();
    test_eval_text();
    int rc = zt_finish();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (rc == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    for (size_t i = 0; i < g_n_paths; i++)
        free(g_paths[i]);
    free(g_paths);
    return rc;
}

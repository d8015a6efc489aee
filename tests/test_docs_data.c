/* Documents and samples (data/docs.c, docs/data.md), on hand-made token streams whose rows are
 * worked out by hand here:
 *  - documents end with the end-of-document id (inclusive), a trailing run is the last one,
 *    llm.c's GPT-2 shards (<|endoftext|> before each document) give a first document of one;
 *    byte-level text ends documents with a separator line, and only a whole line;
 *  - pack windows: inputs, targets (the one across a boundary left out), document starts;
 *    concat: the same windows unmasked; pad: one document per row, split, padded; empty rows;
 *    the count of real targets without building a row;
 *  - every epoch visits every sample once (a permutation), another epoch or seed another
 *    order, and the last step of an epoch leaves its missing slots empty;
 *  - the held-out tail moves to a document boundary; the fingerprint sees data and rules;
 *  - dataset.json (what `zshard tokenize` writes) is read, and bad ones are refused by name. */
#include "data/docs.h"
#include "train/docs_setup.h"
#include "testutil.h"

#include <string.h>
#include <unistd.h>

static zs_tokens toks(const uint32_t *v, int64_t n) {
    zs_tokens t = {zt_malloc((size_t)n * sizeof(uint32_t)), n};
    memcpy(t.tok, v, (size_t)n * sizeof(uint32_t));
    return t;
}

static zs_tokens text(const char *s) {
    int64_t n = (int64_t)strlen(s);
    zs_tokens t = {zt_malloc((size_t)n * sizeof(uint32_t)), n};
    for (int64_t i = 0; i < n; i++)
        t.tok[i] = (unsigned char)s[i];
    return t;
}

static int same_ints(const int32_t *a, const int32_t *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static void test_boundaries(void) {
    /* GPT-2's llm.c layout: <|endoftext|> (9 here) before each document. */
    uint32_t v[] = {9, 1, 2, 9, 3, 9, 4};
    zs_tokens t = toks(v, 7);
    zs_doc_rules r = {ZS_DOCS_PACK, 2, 9, NULL, 0};
    zs_doc_index ix;
    ZT_OK(zs_docs_index(&t, &r, "stream", &ix));
    int64_t want[] = {0, 1, 4, 6, 7};
    ZT_CHECK(ix.n_docs == 4 && !memcmp(ix.start, want, sizeof want),
             "eos_after: %lld documents, starts %lld %lld %lld %lld", (long long)ix.n_docs,
             (long long)ix.start[1], (long long)ix.start[2], (long long)ix.start[3],
             (long long)ix.start[4]);
    ZT_CHECK(ix.n_samples == 3, "windows of 2 in 7 tokens: %lld", (long long)ix.n_samples);
    zs_docs_index_free(&ix);
    free(t.tok);
    /* Text: a line equal to the separator ends a document, with its newline; "a%" and "%%" do
     * not, and the last document has none. */
    zs_tokens s = text("ab\n%\na%\n%%\n%\nlast");
    zs_doc_rules rs = {ZS_DOCS_PAD, 4, -1, "%", '%'};
    ZT_OK(zs_docs_index(&s, &rs, "text", &ix));
    int64_t ws[] = {0, 5, 13, 17};
    ZT_CHECK(ix.n_docs == 3 && !memcmp(ix.start, ws, sizeof ws),
             "separator lines: %lld documents, starts %lld %lld", (long long)ix.n_docs,
             (long long)ix.start[1], (long long)ix.start[2]);
    zs_docs_index_free(&ix);
    /* An empty separator: blank lines end documents. */
    rs.sep = "";
    zs_tokens b = text("a\n\nbc\n\n\nd");
    ZT_OK(zs_docs_index(&b, &rs, "text", &ix));
    int64_t wb[] = {0, 3, 7, 8, 9};
    ZT_CHECK(ix.n_docs == 4 && !memcmp(ix.start, wb, sizeof wb), "blank lines: %lld documents",
             (long long)ix.n_docs);
    zs_docs_index_free(&ix);
    /* CRLF: a line's trailing CR is not part of it, so the CRLF twin of the text above splits
     * where the LF one does ("%\r" is the separator line, "a%\r" and "%%\r" are not; a
     * blank "\r" line ends a document under an empty separator). */
    rs.sep = "%";
    zs_tokens c = text("ab\r\n%\r\na%\r\n%%\r\n%\r\nlast");
    ZT_OK(zs_docs_index(&c, &rs, "crlf text", &ix));
    int64_t wc[] = {0, 7, 18, 22};
    ZT_CHECK(ix.n_docs == 3 && !memcmp(ix.start, wc, sizeof wc),
             "CRLF separator lines: %lld documents, starts %lld %lld", (long long)ix.n_docs,
             (long long)ix.start[1], (long long)ix.start[2]);
    zs_docs_index_free(&ix);
    rs.sep = "";
    zs_tokens cb = text("a\r\n\r\nbc\r\n\r\n");
    ZT_OK(zs_docs_index(&cb, &rs, "crlf text", &ix));
    int64_t wcb[] = {0, 5, 11};
    ZT_CHECK(ix.n_docs == 2 && !memcmp(ix.start, wcb, sizeof wcb),
             "CRLF blank lines: %lld documents", (long long)ix.n_docs);
    zs_docs_index_free(&ix);
    free(s.tok), free(b.tok), free(c.tok), free(cb.tok);
}

static void test_rows(void) {
    /* Documents [1 2 9] [3 4 5 9] [6 9] [7 8] with eos 9, windows of T = 4. */
    uint32_t v[] = {1, 2, 9, 3, 4, 5, 9, 6, 9, 7, 8};
    zs_tokens t = toks(v, 11);
    zs_doc_rules r = {ZS_DOCS_PACK, 4, 9, NULL, 0};
    zs_doc_index ix;
    int32_t in[4], tg[4], seg[4];
    ZT_OK(zs_docs_index(&t, &r, "stream", &ix));
    ZT_CHECK(ix.n_samples == 2, "pack: %lld windows", (long long)ix.n_samples);
    /* Window 0: inputs 1 2 9 3 -> targets 2 9 (3: across) 4; document starts 0 0 0 3. */
    int n = zs_docs_row(&ix, &r, 0, in, tg, seg);
    ZT_CHECK(n == 3 && same_ints(in, (int32_t[]){1, 2, 9, 3}, 4) &&
                 same_ints(tg, (int32_t[]){2, 9, -1, 4}, 4) &&
                 same_ints(seg, (int32_t[]){0, 0, 0, 3}, 4),
             "pack window 0: %d targets, tg %d %d %d %d seg %d %d %d %d", n, tg[0], tg[1], tg[2],
             tg[3], seg[0], seg[1], seg[2], seg[3]);
    /* Window 1: inputs 4 5 9 6 -> targets 5 9 (6: across) 9; the first token starts the row's
     * first segment even mid-document. */
    n = zs_docs_row(&ix, &r, 1, in, tg, seg);
    ZT_CHECK(n == 3 && same_ints(in, (int32_t[]){4, 5, 9, 6}, 4) &&
                 same_ints(tg, (int32_t[]){5, 9, -1, 9}, 4) &&
                 same_ints(seg, (int32_t[]){0, 0, 0, 3}, 4),
             "pack window 1: %d targets", n);
    ZT_CHECK(zs_docs_row_targets(&ix, &r, 0) == 3 && zs_docs_row_targets(&ix, &r, 1) == 3,
             "pack targets without the row");
    zs_docs_index_free(&ix);
    /* concat: the same windows, every target, running positions. */
    r.mode = ZS_DOCS_CONCAT;
    ZT_OK(zs_docs_index(&t, &r, "stream", &ix));
    n = zs_docs_row(&ix, &r, 0, in, tg, seg);
    ZT_CHECK(n == 4 && same_ints(tg, (int32_t[]){2, 9, 3, 4}, 4) &&
                 same_ints(seg, (int32_t[]){0, 0, 0, 0}, 4),
             "concat window 0");
    zs_docs_index_free(&ix);
    /* pad with T = 2: [1 2 9] -> 1 row; [3 4 5 9] -> 2 rows (3 4 | 5); [6 9] -> 1; [7 8] -> 1. */
    r.mode = ZS_DOCS_PAD;
    r.seq = 2;
    r.pad_id = 0;
    ZT_OK(zs_docs_index(&t, &r, "stream", &ix));
    ZT_CHECK(ix.n_samples == 5, "pad: %lld rows", (long long)ix.n_samples);
    int32_t want_in[5][2] = {{1, 2}, {3, 4}, {5, 0}, {6, 0}, {7, 0}};
    int32_t want_tg[5][2] = {{2, 9}, {4, 5}, {9, -1}, {9, -1}, {8, -1}};
    int32_t want_seg[5][2] = {{0, 0}, {0, 0}, {0, 1}, {0, 1}, {0, 1}};
    for (int s = 0; s < 5; s++) {
        n = zs_docs_row(&ix, &r, s, in, tg, seg);
        ZT_CHECK(n == (want_tg[s][1] < 0 ? 1 : 2) && same_ints(in, want_in[s], 2) &&
                     same_ints(tg, want_tg[s], 2) && same_ints(seg, want_seg[s], 2) &&
                     zs_docs_row_targets(&ix, &r, s) == n,
                 "pad row %d: in %d %d tg %d %d seg %d %d", s, in[0], in[1], tg[0], tg[1], seg[0],
                 seg[1]);
    }
    /* An empty row: padding, no target, documents of one. */
    n = zs_docs_row(&ix, &r, -1, in, tg, seg);
    ZT_CHECK(n == 0 && same_ints(in, (int32_t[]){0, 0}, 2) &&
                 same_ints(tg, (int32_t[]){-1, -1}, 2) && same_ints(seg, (int32_t[]){0, 1}, 2),
             "empty row");
    zs_docs_index_free(&ix);
    free(t.tok);
}

/* The count without building a row equals the built row's, on random data in every mode. */
static void test_counts(void) {
    int64_t n = 3000;
    zs_tokens t = {zt_malloc((size_t)n * sizeof(uint32_t)), n};
    for (int64_t i = 0; i < n; i++)
        t.tok[i] = zt_uniform(0, 1) < 0.05 ? 7 : (uint32_t)zt_uniform(8, 100);
    int32_t in[37], tg[37], seg[37];
    for (int m = ZS_DOCS_PACK; m <= ZS_DOCS_PAD; m++) {
        zs_doc_rules r = {(zs_docs_mode)m, 37, 7, NULL, 1};
        zs_doc_index ix;
        ZT_OK(zs_docs_index(&t, &r, "random", &ix));
        int bad = 0;
        for (int64_t s = 0; s < ix.n_samples; s++) {
            int got = zs_docs_row(&ix, &r, s, in, tg, seg), real = 0;
            for (int j = 0; j < 37; j++) {
                real += tg[j] >= 0;
                /* Segments: 0 at the row start, each t or its predecessor's, never past t. */
                bad += seg[j] < 0 || seg[j] > j || (j > 0 && seg[j] != j && seg[j] != seg[j - 1]);
            }
            bad += got != real || zs_docs_row_targets(&ix, &r, s) != real;
        }
        ZT_CHECK(bad == 0, "%s: %d rows whose counts or segments disagree",
                 zs_docs_mode_name((zs_docs_mode)m), bad);
        zs_docs_index_free(&ix);
    }
    free(t.tok);
}

static void test_epochs(void) {
    const int64_t sizes[] = {1, 2, 3, 17, 1000, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        char *seen = zt_malloc((size_t)n);
        int64_t *first = zt_malloc((size_t)n * sizeof *first);
        int moved = 0;
        for (int e = 0; e < 3; e++) {
            memset(seen, 0, (size_t)n);
            int bad = 0;
            for (int64_t p = 0; p < n; p++) {
                int64_t s = zs_docs_permute(1337, e, n, p);
                bad += s < 0 || s >= n || seen[s]++;
                if (e == 0) first[p] = s;
                moved += e > 0 && s != first[p];
            }
            ZT_CHECK(bad == 0, "n=%lld epoch %d: not a permutation (%d bad)", (long long)n, e, bad);
        }
        ZT_CHECK(n < 17 || moved > n, "n=%lld: later epochs keep the first order (%d moved)",
                 (long long)n, moved);
        int seed_moved = 0;
        for (int64_t p = 0; p < n; p++)
            seed_moved += zs_docs_permute(1338, 0, n, p) != first[p];
        ZT_CHECK(n < 17 || seed_moved > n / 2, "n=%lld: another seed keeps the order",
                 (long long)n);
        free(seen);
        free(first);
    }
    /* Steps of a batch of 8 over 50 samples: 7 per epoch, the 7th with 6 empty slots. */
    int64_t n = 50;
    int B = 8;
    ZT_CHECK(zs_docs_steps_per_epoch(n, B) == 7, "steps per epoch %lld",
             (long long)zs_docs_steps_per_epoch(n, B));
    for (int e = 0; e < 2; e++) {
        int count[50] = {0}, empty = 0;
        for (int64_t s = 1 + 7 * e; s <= 7 + 7 * e; s++)
            for (int i = 0; i < B; i++) {
                int64_t x = zs_docs_step_sample(99, n, B, s, i);
                if (x < 0)
                    empty += s == 7 + 7 * e && i >= 2;
                else
                    count[x]++;
            }
        int once = 1;
        for (int i = 0; i < 50; i++)
            once &= count[i] == 1;
        ZT_CHECK(once && empty == 6, "epoch %d: every sample once (%d) and 6 empty slots (%d)", e,
                 once, empty);
    }
}

static void test_split_and_fingerprint(void) {
    /* The tail is cut after "xy" in the middle of the second document; it moves to its end. */
    zs_tokens all = text("ab\n%\ncd xy z\n%\nef gh\n%\nij");
    zs_dataset d;
    memset(&d, 0, sizeof d);
    int64_t cut = 9;
    d.train.tok = all.tok;
    d.train.n = cut;
    d.val.n = all.n - cut;
    d.val.tok = zt_malloc((size_t)d.val.n * sizeof(uint32_t));
    memcpy(d.val.tok, all.tok + cut, (size_t)d.val.n * sizeof(uint32_t));
    zs_doc_rules r = {ZS_DOCS_PACK, 2, -1, "%", '%'};
    ZT_OK(zs_docs_align_split(&d, &r));
    ZT_CHECK(d.train.n == 15 && d.val.n == all.n - 15 && d.val.tok[0] == 'e',
             "aligned split: train %lld tokens, val %lld starting '%c'", (long long)d.train.n,
             (long long)d.val.n, (char)d.val.tok[0]);
    uint64_t f0 = zs_docs_fingerprint(&d.train, &r);
    d.train.tok[3] = 'Q';
    uint64_t f1 = zs_docs_fingerprint(&d.train, &r);
    r.seq = 3;
    uint64_t f2 = zs_docs_fingerprint(&d.train, &r);
    r.sep = "%%";
    uint64_t f3 = zs_docs_fingerprint(&d.train, &r);
    ZT_CHECK(f0 != f1 && f1 != f2 && f2 != f3, "fingerprints do not see data or rules");
    free(all.tok);
    free(d.val.tok);
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "create %s", path);
    fputs(s, f);
    fclose(f);
}

static void test_meta(void) {
    char dir[] = "/tmp/zshard-test-docsmeta-XXXXXX", p[128], data[128];
    ZT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(p, sizeof p, "%s/dataset.json", dir);
    snprintf(data, sizeof data, "%s/train_*.bin", dir);
    zs_docs_meta m;
    ZT_OK(zs_docs_meta_read(data, &m));
    ZT_CHECK(!m.found, "no dataset.json: nothing found");
    write_file(p, "{\"format\":\"zshard-tokens\",\"version\":1,\"vocab_size\":32000,\"eos_id\":2,"
                  "\"bos_id\":1,\"pad_id\":null,\"doc_boundary\":\"eos_after\",\"bits\":16,"
                  "\"train\":{\"files\":[\"train_000.bin\"],\"documents\":3,\"tokens\":30},"
                  "\"val\":{\"files\":[],\"documents\":0,\"tokens\":0}}");
    ZT_OK(zs_docs_meta_read(data, &m));
    ZT_CHECK(m.found && m.vocab == 32000 && m.eos_id == 2 && m.bos_id == 1 && m.pad_id == -1 &&
                 m.bits == 16,
             "dataset.json read: vocab %d eos %lld pad %lld", m.vocab, (long long)m.eos_id,
             (long long)m.pad_id);
    /* Each a file that is there and wrong: an error naming it and the field. */
    const char *bad[][2] = {
        {"{\"format\":\"other\",\"version\":1}", "format"},
        {"{\"format\":\"zshard-tokens\",\"version\":2}", "version 2"},
        {"{\"format\":\"zshard-tokens\",\"version\":1,\"vocab_size\":100,\"bits\":16,"
         "\"eos_id\":100,\"doc_boundary\":\"eos_after\"}",
         "eos_id"},
        {"{\"format\":\"zshard-tokens\",\"version\":1,\"vocab_size\":100,\"bits\":16,"
         "\"eos_id\":5,\"doc_boundary\":\"bos_before\"}",
         "doc_boundary"},
        {"{\"format\":\"zshard-tokens\",\"version\":1,\"vocab_size\":100000,\"bits\":16}",
         "16-bit"},
        {"{\"format\":", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(p, bad[i][0]);
        zs_status st = zs_docs_meta_read(data, &m);
        ZT_CHECK(st != ZS_OK && strstr(zs_last_error(), "dataset.json") &&
                     strstr(zs_last_error(), bad[i][1]),
                 "bad dataset.json %zu: %s: %s", i, zs_status_string(st), zs_last_error());
    }
    unlink(p);
    rmdir(dir);
}

int main(void) {
    zt_init("docs_data");
    test_boundaries();
    test_rows();
    test_counts();
    test_epochs();
    test_split_and_fingerprint();
    test_meta();
    zs_docs_mode m = ZS_DOCS_NONE;
    ZT_CHECK(zs_docs_mode_parse("pad", &m) == ZS_OK && m == ZS_DOCS_PAD &&
                 !strcmp(zs_docs_mode_name(ZS_DOCS_CONCAT), "concat") &&
                 zs_docs_mode_parse("packed", &m) == ZS_ERR_INVALID,
             "mode names");
    return zt_finish();
}

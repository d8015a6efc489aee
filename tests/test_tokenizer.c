/* Tokenizers (src/data/tokenizer.c) on files this test writes: GPT-2's vocab.json +
 * merges.txt, a tokenizer.json in ByteLevel form and one in SentencePiece form (LLaMA-2's
 * Prepend/Replace normalizer, <0xNN> byte fallback, <s> template), and a Metaspace variant.
 * Expected ids are worked out by hand in the comments; round trips cover ASCII, UTF-8 and
 * emoji; every bad file must fail with one error naming the file and the field. */
#include "core/status.h"
#include "data/tokenizer.h"
#include "data/tokenizer_internal.h"
#include "testutil.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-tok-XXXXXX";

static const char *path(const char *name) {
    static char buf[4][256];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_text(const char *p, const char *s) {
    FILE *f = fopen(p, "wb");
    ZT_REQUIRE(f && fwrite(s, 1, strlen(s), f) == strlen(s) && fclose(f) == 0, "write %s", p);
}

/* GPT-2's bytes_to_unicode as encoder.py states it: '!'..'~', '¡'..'¬', '®'..'ÿ' are
 * themselves, the remaining bytes take U+0100, U+0101, ... in byte order. As a JSON string
 * with \u escapes, so the reader's escape handling is exercised too. */
static void byte_json(unsigned b, char *out) {
    unsigned n = 0, cp = b;
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (!printable) {
        for (unsigned x = 0; x < b; x++)
            n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + n;
    }
    if (cp == '"' || cp == '\\')
        sprintf(out, "\\%c", cp);
    else if (cp >= 33 && cp <= 126)
        sprintf(out, "%c", cp);
    else
        sprintf(out, "\\u%04x", cp);
}

/* Ids 0..255 are the byte chars (id = byte value), then the merged tokens. Merges by rank:
 *   0 "Ġ t"->Ġt 256   1 "h e"->he 257   2 "Ġt he"->Ġthe 258   3 "l l"->ll 259
 *   4 "e ll"->ell 260 5 "h ell"->hell 261  6 "hell o"->hello 262  7 "Ġ w"->Ġw 263
 *   8 "Ġ Ġ"->ĠĠ 265, and <|endoftext|> 264. */
static const char *k_merges[] = {"\\u0120 t", "h e",       "\\u0120t he",    "l l", "e ll", "h ell",
                                 "hell o",    "\\u0120 w", "\\u0120 \\u0120"};
static const char *k_merged[] = {
    "\\u0120t",      "he", "\\u0120the", "ll", "ell", "hell", "hello", "\\u0120w", "<|endoftext|>",
    "\\u0120\\u0120"};

static void vocab_json(char *o) {
    o += sprintf(o, "{");
    for (unsigned b = 0; b < 256; b++) {
        char c[16];
        byte_json(b, c);
        o += sprintf(o, "\"%s\": %u, ", c, b);
    }
    for (int i = 0; i < 10; i++)
        o += sprintf(o, "\"%s\": %d%s", k_merged[i], 256 + i, i < 9 ? ", " : "}");
}

static void write_gpt2_files(void) {
    static char v[16384];
    vocab_json(v);
    write_text(path("vocab.json"), v);
    /* merges.txt holds the chars themselves (UTF-8), not JSON escapes. */
    write_text(path("merges.txt"), "#version: 0.2\nĠ t\nh e\nĠt he\nl l\ne ll\nh ell\nhell o\n"
                                   "Ġ w\nĠ Ġ\n");
}

static void expect_ids(const zs_tokenizer_t *t, const char *text, int add, const int32_t *want,
                       int nwant, const char *what) {
    int32_t *ids;
    int n;
    ZT_OK(zs_tokenizer_encode(t, text, strlen(text), add, &ids, &n));
    int same = n == nwant;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    ZT_CHECK(same, "%s: '%s' encodes to %d ids, first %d, want %d ids, first %d", what, text, n,
             n ? ids[0] : -1, nwant, want[0]);
    if (!same)
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  got[%d] = %d\n", i, ids[i]);
    free(ids);
}

static void expect_round_trip(const zs_tokenizer_t *t, const char *text, const char *what) {
    int32_t *ids;
    int n;
    char *back;
    size_t nb;
    ZT_OK(zs_tokenizer_encode(t, text, strlen(text), 0, &ids, &n));
    ZT_OK(zs_tokenizer_decode(t, ids, n, 0, &back, &nb));
    ZT_CHECK(nb == strlen(text) && !memcmp(back, text, nb), "%s: '%s' comes back as '%s'", what,
             text, back);
    free(ids);
    free(back);
}

/* Shared by the GPT-2 files and the ByteLevel tokenizer.json: the same vocabulary and merges. */
static void check_byte_level(const zs_tokenizer_t *t, const char *what) {
    ZT_CHECK(zs_tokenizer_vocab_size(t) == 266, "%s: vocab size %d", what,
             zs_tokenizer_vocab_size(t));
    ZT_CHECK(zs_tokenizer_eos(t) == 264, "%s: eos %d", what, zs_tokenizer_eos(t));
    ZT_CHECK(zs_tokenizer_id(t, "\xC4\xA0the") == 258, "%s: 'Ġthe' is 258", what);
    /* "hello": h e l l o -> "h e" (rank 1) before "l l" (3) -> he l l o -> he ll o; "he ll"
     * is no merge, so "hell"/"hello" are never reached: [he 257, ll 259, o 111].
     * " the": Ġ t h e -> Ġt (0) -> Ġt he (1) -> Ġthe (2): [258].
     * " world": Ġ w (7) -> [Ġw 263, o 111, r 114, l 108, d 100].
     * <|endoftext|> whole: 264. " yell": Ġ y e l l -> ll (3) -> ell (4): [Ġ 32, y 121, ell 260].
     * "\n\n" at the end is one word of two Ċ with no merge: [10, 10]. */
    static const int32_t w1[] = {257, 259, 111, 258, 263, 111, 114, 108,
                                 100, 264, 32,  121, 260, 10,  10};
    expect_ids(t, "hello the world<|endoftext|> yell\n\n", 0, w1, 15, what);
    /* "x   the" splits as "x", "  ", " the" (the run keeps its last space for the word after):
     * [x 120, ĠĠ 265, Ġthe 258]. Had the three spaces and "the" been one word, Ġt (rank 0)
     * would win before ĠĠ (8) and give [120, 32, 32, 258]... (Ġ Ġ Ġt he -> Ġthe -> ĠĠ). */
    static const int32_t w2[] = {120, 265, 258};
    expect_ids(t, "x   the", 0, w2, 3, what);
    expect_round_trip(t, "hello the world<|endoftext|> yell\n\n", what);
    expect_round_trip(t, "Caf\xC3\xA9 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x91\x8B it's 2024!\t\r\n",
                      what);
    /* Decoding with skip_special drops <|endoftext|>. */
    static const int32_t d[] = {257, 264, 258};
    char *s;
    size_t n;
    ZT_OK(zs_tokenizer_decode(t, d, 3, 1, &s, &n));
    ZT_CHECK(!strcmp(s, "he the"), "%s: skip_special gives '%s'", what, s);
    free(s);
    int32_t bad = 266;
    ZT_CHECK(zs_tokenizer_decode(t, &bad, 1, 0, &s, &n) == ZS_ERR_INVALID,
             "%s: id 266 is out of the vocabulary", what);
}

static void test_gpt2_files(void) {
    write_gpt2_files();
    zs_tokenizer_t *t;
    ZT_OK(zs_tokenizer_load(g_dir, &t));
    check_byte_level(t, "vocab.json+merges.txt");
    zs_tokenizer_destroy(t);
    ZT_OK(zs_tokenizer_load(path("merges.txt"), &t));
    ZT_CHECK(zs_tokenizer_vocab_size(t) == 266, "loading merges.txt reads its vocab.json");
    zs_tokenizer_destroy(t);
}

/* The pre-tokenizers' word boundaries, worked out from the regexes by hand, joined by '|'. */
typedef struct spans {
    const char *text;
    char out[256];
    size_t k;
} spans;

static zs_status collect(void *ctx, size_t start, size_t len) {
    spans *sp = ctx;
    sp->k += (size_t)snprintf(sp->out + sp->k, sizeof sp->out - sp->k, "%s%.*s", sp->k ? "|" : "",
                              (int)len, sp->text + start);
    return ZS_OK;
}

static void expect_split(zs_tok_split split, const char *text, const char *want) {
    spans sp = {.text = text};
    ZT_OK(zs_tok_pretokenize(split, text, strlen(text), collect, &sp, NULL));
    ZT_CHECK(!strcmp(sp.out, want), "split %d of '%s': got '%s', want '%s'", (int)split, text,
             sp.out, want);
}

static void test_pretokenize(void) {
    /* GPT-2: "it" letters; "'s" contraction; of the two spaces before "2024" the first stands
     * alone (\s+(?!\S) backs off one) and the second joins " 2024" ( ?\p{N}+); "!!" is
     * punctuation; "\n" at the end is whitespace to the end. */
    expect_split(ZS_TOK_SPLIT_GPT2, "it's  2024!!\n", "it|'s| | 2024|!!|\n");
    expect_split(ZS_TOK_SPLIT_GPT2, "x   the", "x|  | the");
    /* Case-sensitive contractions in GPT-2: "'S" is punctuation then letters. */
    expect_split(ZS_TOK_SPLIT_GPT2, "IT'S", "IT|'|S");
    /* Emoji are symbols, not letters: "hi" then "👋!" as one punctuation run; "é" (2 bytes) is
     * a letter; U+00A0 is whitespace; "²" is a number. */
    expect_split(ZS_TOK_SPLIT_GPT2, "hi\xF0\x9F\x91\x8B! caf\xC3\xA9\xC2\xA0x \xC2\xB2",
                 "hi|\xF0\x9F\x91\x8B!| caf\xC3\xA9|\xC2\xA0|x| \xC2\xB2");
    /* Llama-3: " WORLD" takes its space through [^\r\n\p{L}\p{N}]?; "'S" is a contraction
     * (case-insensitive); " " before digits stands alone; digits go three at a time; "\n\n"
     * ends at the run's last newline; of "  x" the first space stands alone. */
    expect_split(ZS_TOK_SPLIT_LLAMA3, "Hello WORLD'S 12345\n\n  x",
                 "Hello| WORLD|'S| |123|45|\n\n| | x");
    /* "(hello" is one word in Llama-3 (one non-letter may lead letters), two in GPT-2. */
    expect_split(ZS_TOK_SPLIT_LLAMA3, "(hello", "(hello");
    expect_split(ZS_TOK_SPLIT_GPT2, "(hello", "(|hello");
    expect_split(ZS_TOK_SPLIT_QWEN2, "a 123", "a| |1|2|3");
    /* Metaspace split: each '▁' starts a word. */
    expect_split(ZS_TOK_SPLIT_METASPACE, "\xE2\x96\x81hi\xE2\x96\x81you",
                 "\xE2\x96\x81hi|\xE2\x96\x81you");
}

/* tokenizer.json, ByteLevel form (GPT-2's layout): the same vocabulary, merges half as
 * "a b" strings and half as [a, b] pairs, <|endoftext|> as a special added token. */
static void write_byte_level_json(const char *name, const char *model_type, int with_merges) {
    static char v[16384], j[32768];
    vocab_json(v);
    int k = sprintf(j,
                    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
                    " \"added_tokens\": [{\"id\": 264, \"content\": \"<|endoftext|>\", "
                    "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                    "\"normalized\": true, \"special\": true}],\n"
                    " \"normalizer\": null,\n"
                    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                    "\"trim_offsets\": true, \"use_regex\": true},\n"
                    " \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                    "\"trim_offsets\": false, \"use_regex\": true},\n"
                    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                    "\"trim_offsets\": true, \"use_regex\": true},\n"
                    " \"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": null, "
                    "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", "
                    "\"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": %s",
                    model_type, v);
    if (with_merges) {
        k += sprintf(j + k, ", \"merges\": [");
        for (int i = 0; i < 9; i++) {
            char a[32], b[32];
            sscanf(k_merges[i], "%31s %31s", a, b);
            k += i % 2 ? sprintf(j + k, "[\"%s\", \"%s\"]", a, b)
                       : sprintf(j + k, "\"%s\"", k_merges[i]);
            k += sprintf(j + k, i < 8 ? ", " : "]");
        }
    }
    sprintf(j + k, "}}\n");
    write_text(path(name), j);
}

static void test_byte_level_json(void) {
    write_byte_level_json("bl.json", "BPE", 1);
    zs_tokenizer_t *t;
    ZT_OK(zs_tokenizer_load(path("bl.json"), &t));
    check_byte_level(t, "tokenizer.json ByteLevel");
    zs_tokenizer_destroy(t);
}

/* tokenizer.json in LLaMA-2's SentencePiece form. Ids: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF>
 * 3..258, ▁ 259, h 260, e 261, l 262, o 263, then merges by rank
 *   0 "▁ h"->▁h 264  1 "l l"->ll 265  2 "▁h e"->▁he 266  3 "▁he ll"->▁hell 267
 *   4 "▁hell o"->▁hello 268, and 😀 269 (written as the surrogate pair \ud83d\ude00). */
static void write_sp_json(const char *name, const char *normalizer, const char *pre,
                          const char *decoder) {
    static char j[32768];
    int k = sprintf(j, "{\"added_tokens\": [");
    static const char *sp[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++)
        k += sprintf(j + k,
                     "{\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": "
                     "false, \"rstrip\": false, \"normalized\": false, \"special\": true}%s",
                     i, sp[i], i < 2 ? ", " : "],\n");
    k += sprintf(j + k,
                 " \"normalizer\": %s,\n \"pre_tokenizer\": %s,\n"
                 " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                 "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": "
                 "\"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": "
                 "\"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},\n"
                 " \"decoder\": %s,\n"
                 " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", "
                 "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                 "\"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, "
                 "\"<s>\": 1, \"</s>\": 2",
                 normalizer, pre, decoder);
    for (int b = 0; b < 256; b++)
        k += sprintf(j + k, ", \"<0x%02X>\": %d", b, 3 + b);
    sprintf(j + k, ", \"\\u2581\": 259, \"h\": 260, \"e\": 261, \"l\": 262, \"o\": 263, "
                   "\"\\u2581h\": 264, \"ll\": 265, \"\\u2581he\": 266, \"\\u2581hell\": 267, "
                   "\"\\u2581hello\": 268, \"\\ud83d\\ude00\": 269}, \"merges\": [\"\\u2581 h\", "
                   "\"l l\", \"\\u2581h e\", \"\\u2581he ll\", \"\\u2581hell o\"]}}\n");
    write_text(path(name), j);
}

#define SP_NORM                                                                                    \
    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "             \
    "\"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": "        \
    "\"\\u2581\"}]}"
#define SP_DEC                                                                                     \
    "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "   \
    "\"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, "      \
    "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}"

static void test_sentencepiece_json(void) {
    write_sp_json("sp.json", SP_NORM, "null", SP_DEC);
    zs_tokenizer_t *t;
    ZT_OK(zs_tokenizer_load(path("sp.json"), &t));
    ZT_CHECK(zs_tokenizer_eos(t) == 2 && zs_tokenizer_vocab_size(t) == 270, "eos %d, vocab %d",
             zs_tokenizer_eos(t), zs_tokenizer_vocab_size(t));
    /* "hello hello" -> "▁hello▁hello", one word: ▁h twice (rank 0, leftmost first), ll twice,
     * ▁he, ▁hell, ▁hello: [268, 268]; with the template, <s> 1 in front. */
    static const int32_t w1[] = {1, 268, 268};
    expect_ids(t, "hello hello", 1, w1, 3, "sp");
    expect_ids(t, "hello hello", 0, w1 + 1, 2, "sp");
    /* "hi 👋" -> "▁hi▁👋": ▁h 264; 'i' is no token: <0x69> = 3 + 0x69 = 108; ▁ 259; 👋 is
     * F0 9F 91 8B: 3 + each = 243, 162, 148, 142. */
    static const int32_t w2[] = {264, 108, 259, 243, 162, 148, 142};
    expect_ids(t, "hi \xF0\x9F\x91\x8B", 0, w2, 7, "sp byte fallback");
    /* 😀 is a token (read from a \u surrogate pair): "▁😀" -> [▁ 259, 😀 269]. */
    static const int32_t w3[] = {259, 269};
    expect_ids(t, "\xF0\x9F\x98\x80", 0, w3, 2, "sp surrogate-pair token");
    /* An added token in the text: "</s>hello" -> [</s> 2], then "hello" is its own piece and
     * the normalizer's Prepend gives "▁hello" -> 268. */
    static const int32_t w4[] = {2, 268};
    expect_ids(t, "</s>hello", 0, w4, 2, "sp added token");
    /* Decode: Replace ▁ -> ' ', bytes back, Fuse, Strip one leading space. */
    static const int32_t d[] = {1, 264, 108, 259, 243, 162, 148, 142};
    char *s;
    size_t n;
    ZT_OK(zs_tokenizer_decode(t, d, 8, 1, &s, &n));
    ZT_CHECK(!strcmp(s, "hi \xF0\x9F\x91\x8B"), "sp decode '%s'", s);
    free(s);
    ZT_OK(zs_tokenizer_decode(t, d, 8, 0, &s, &n));
    ZT_CHECK(!strcmp(s, "<s> hi \xF0\x9F\x91\x8B"), "sp decode with <s>: '%s'", s);
    free(s);
    expect_round_trip(t, "hello world, caf\xC3\xA9 \xE4\xB8\x96 \xF0\x9F\x98\x80\xF0\x9F\x91\x8B!",
                      "sp");
    zs_tokenizer_destroy(t);

    /* The newer conversion: Metaspace pre-tokenizer, prepend_scheme "first", no split, and a
     * Metaspace decoder. "</s>hello": the piece after </s> is not at the start of the text, so
     * no '▁': h e l l o -> ll: [2, h 260, e 261, ll 265, o 263]. */
    write_sp_json("meta.json", "null",
                  "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": "
                  "\"first\", \"split\": false}",
                  "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
                  "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": "
                  "\"first\", \"split\": false}]}");
    ZT_OK(zs_tokenizer_load(path("meta.json"), &t));
    static const int32_t w5[] = {2, 260, 261, 265, 263};
    expect_ids(t, "</s>hello", 0, w5, 5, "metaspace first");
    expect_ids(t, "hello hello", 0, w1 + 1, 2, "metaspace");
    expect_round_trip(t, "hello \xF0\x9F\x91\x8B there", "metaspace");
    zs_tokenizer_destroy(t);
}

static void expect_error(const char *p, zs_status want, const char *a, const char *b) {
    zs_tokenizer_t *t = NULL;
    zs_status st = zs_tokenizer_load(p, &t);
    const char *msg = zs_last_error();
    ZT_CHECK(st == want && !t, "%s: got %s, want %s (%s)", p, zs_status_string(st),
             zs_status_string(want), msg);
    ZT_CHECK(strstr(msg, a) && (!b || strstr(msg, b)), "%s: message '%s' names '%s' and '%s'", p,
             msg, a, b ? b : "");
    zs_tokenizer_destroy(t);
}

static void test_bad_files(void) {
    /* Truncated: the first half of a valid file. */
    write_byte_level_json("whole.json", "BPE", 1);
    FILE *f = fopen(path("whole.json"), "rb");
    static char buf[32768];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    buf[n / 2] = 0;
    write_text(path("trunc.json"), buf);
    expect_error(path("trunc.json"), ZS_ERR_FORMAT, "trunc.json", "invalid JSON");
    write_byte_level_json("nomerges.json", "BPE", 0);
    expect_error(path("nomerges.json"), ZS_ERR_FORMAT, "nomerges.json", "model.merges");
    write_byte_level_json("wordpiece.json", "WordPiece", 1);
    expect_error(path("wordpiece.json"), ZS_ERR_UNSUPPORTED, "wordpiece.json",
                 "model.type 'WordPiece'");
    write_sp_json("ws.json", "null", "{\"type\": \"Whitespace\"}", "null");
    expect_error(path("ws.json"), ZS_ERR_UNSUPPORTED, "ws.json", "pre_tokenizer.type 'Whitespace'");
    write_sp_json("nfkc.json", "{\"type\": \"NFKC\"}", "null", "null");
    expect_error(path("nfkc.json"), ZS_ERR_UNSUPPORTED, "nfkc.json", "normalizer.type 'NFKC'");
    expect_error(path("absent.json"), ZS_ERR_IO, "absent.json", NULL);

    /* vocab.json without merges.txt, and a merge naming a token the vocabulary lacks. */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/gpt2bad", g_dir);
    ZT_REQUIRE(mkdir(sub, 0700) == 0, "mkdir %s", sub);
    write_text(path("gpt2bad/vocab.json"), "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    expect_error(sub, ZS_ERR_IO, "merges.txt", "cannot open");
    write_text(path("gpt2bad/merges.txt"), "#version: 0.2\na b\nab c\n");
    expect_error(sub, ZS_ERR_FORMAT, "merges.txt", "'c' is not in the vocabulary");
    write_text(path("gpt2bad/merges.txt"), "#version: 0.2\na b c\n");
    expect_error(sub, ZS_ERR_FORMAT, "merges.txt", "line 2");
    write_text(path("gpt2bad/vocab.json"), "{\"a\": 0, \"b\": -1}");
    expect_error(sub, ZS_ERR_FORMAT, "vocab.json", "'b'");
}

int main(void) {
    zt_init("tokenizer");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    test_pretokenize();
    test_gpt2_files();
    test_byte_level_json();
    test_sentencepiece_json();
    test_bad_files();
    int rc = zt_finish();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return rc;
}

/* The tokenize tests' scratch folder and corpora (tokenize_fixture.h). */
#include "tokenize_fixture.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_dir[256];

/* Every tk_path() made, freed by tk_end (configs hold these pointers until then). */
static char **g_paths;
static size_t g_n_paths;

void tk_begin(const char *name) {
    snprintf(g_dir, sizeof g_dir, "/tmp/zs_test_%s_XXXXXX", name);
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp %s", g_dir);
}

const char *tk_dir(void) {
    return g_dir;
}

int tk_end(int rc) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (rc == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    for (size_t i = 0; i < g_n_paths; i++)
        free(g_paths[i]);
    free(g_paths);
    g_paths = NULL;
    g_n_paths = 0;
    return rc;
}

const char *tk_path(const char *name) {
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

void tk_write_bytes(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    ZT_REQUIRE(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "write %s", p);
}
void tk_write_text(const char *p, const char *s) {
    tk_write_bytes(p, s, strlen(s));
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

void tk_write_ident(const char *dir, int eos_id, int bos) {
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
    tk_write_text(p, j);
}

void tk_write_t1(void) {
    mkdir(tk_path("t1"), 0700);
    /* Fortune style: %-lines separate; a CRLF file; invalid UTF-8; empty and blank documents. */
    tk_write_text(tk_path("t1/a.txt"), "first\nline two\n%\n%\n   \n\t\n%\nbad \xff\xfe end\n%\n"
                                       "cut \xe4\xb8\n%\nlast without newline");
    tk_write_text(tk_path("t1/b.txt"), "crlf one\r\nmore\r\n%\r\nsecond\r\n");
    tk_write_bytes(tk_path("t1/c.bin"), "\x01\x00\x02text", 7); /* a NUL: binary */
    tk_write_ident(tk_path("ident"), 256, 0);
}

void tk_write_jsonl(void) {
    tk_write_text(
        tk_path("d.jsonl"),
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
}

void tk_write_th(void) {
    /* Enough documents for many batches (a batch is 1 MiB or 4096 documents). */
    mkdir(tk_path("th"), 0700);
    for (int fi = 0; fi < 3; fi++) {
        char name[40];
        snprintf(name, sizeof name, "th/part%d.txt", fi);
        FILE *f = fopen(tk_path(name), "w");
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
}

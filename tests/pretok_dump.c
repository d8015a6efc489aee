/* For test_hf_parity.py: the words zshard's pre-tokenizer (pretok.c) cuts each document into,
 * to be compared with Hugging Face's pre_tokenize_str. Reads documents from stdin as
 * <uint32 length><bytes>, writes one line per document: the byte offset where each word ends.
 * usage: pretok_dump gpt2|llama3 */
#include "data/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static zs_status emit(void *ctx, size_t start, size_t len) {
    printf(" %zu", start + len);
    (void)ctx;
    return ZS_OK;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "gpt2") && strcmp(argv[1], "llama3"))) {
        fprintf(stderr, "usage: pretok_dump gpt2|llama3 < documents\n");
        return 2;
    }
    zs_tok_split split = !strcmp(argv[1], "gpt2") ? ZS_TOK_SPLIT_GPT2 : ZS_TOK_SPLIT_LLAMA3;
    zs_tok_cpbuf buf = {0};
    char *doc = NULL;
    uint32_t n;
    while (fread(&n, 4, 1, stdin) == 1) {
        char *g = realloc(doc, (size_t)n + 1);
        if (!g || fread(g, 1, n, stdin) != n) {
            fprintf(stderr, "pretok_dump: short input\n");
            return 1;
        }
        doc = g;
        if (zs_tok_pretokenize(split, doc, n, emit, NULL, &buf) != ZS_OK) {
            fprintf(stderr, "pretok_dump: %s\n", zs_last_error());
            return 1;
        }
        printf("\n");
    }
    free(doc);
    free(buf.cp);
    free(buf.off);
    return 0;
}

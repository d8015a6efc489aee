/* libFuzzer target for the tokenizer files (src/data/tokenizer_load.c) and what they drive:
 * tokenizer.json (with a tokenizer_config.json beside it) or GPT-2's vocab.json + merges.txt,
 * then the text of the input encoded, decoded, and its bytes decoded as ids. The first byte
 * picks the form; the rest is cut at ZF_SEP (fuzz/input.h) into
 *   form 0: tokenizer.json, tokenizer_config.json (absent when empty), text
 *   form 1: vocab.json, merges.txt, text
 * Bit 2 of the first byte asks for the template's special tokens, bit 3 skips special tokens
 * in decoding. The loader reads files only, so the parts are written to a scratch folder.
 * Replayed over fuzz/corpus_tokenizer by the ctest fuzz_tokenizer; scripts/fuzz.sh runs it. */
#include "data/tokenizer.h"
#include "input.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_text(const zs_tokenizer_t *t, const uint8_t *text, size_t n, int add_special,
                     int skip_special) {
    int32_t *ids = NULL;
    int count = 0;
    char *back = NULL;
    size_t nb;
    if (zs_tokenizer_encode(t, (const char *)text, n, add_special, &ids, &count) == ZS_OK) {
        if (zs_tokenizer_decode(t, ids, count, skip_special, &back, &nb) == ZS_OK) free(back);
        free(ids);
    }
    /* The same bytes as ids: mostly out of the vocabulary, which decode must refuse. */
    int nid = (int)(n / 4);
    ids = malloc((size_t)nid * sizeof *ids + 1);
    if (!ids) return;
    if (nid) memcpy(ids, text, (size_t)nid * sizeof *ids);
    for (int i = 0; i < nid; i++) /* half of them folded into it */
        if (i % 2)
            ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)(zs_tokenizer_vocab_size(t) + 1));
    if (zs_tokenizer_decode(t, ids, nid, skip_special, &back, &nb) == ZS_OK) free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int form = data[0] % 2, add_special = (data[0] >> 2) & 1, skip_special = (data[0] >> 3) & 1;
    data++, size--;
    size_t n0, n1, n2;
    const uint8_t *p0 = zf_part(data, size, 0, 0, &n0), *p1 = zf_part(data, size, 1, 0, &n1),
                  *p2 = zf_part(data, size, 2, 1, &n2);
    zf_write("tokenizer.json", form == 0 ? p0 : NULL, n0);
    zf_write("tokenizer_config.json", form == 0 && n1 ? p1 : NULL, n1);
    zf_write("vocab.json", form == 1 ? p0 : NULL, n0);
    zf_write("merges.txt", form == 1 && p1 ? p1 : NULL, n1);
    zs_tokenizer_t *t = NULL;
    if (zs_tokenizer_load(zf_dir(), &t) != ZS_OK) return 0;
    zs_tokenizer_eos(t);
    zs_tokenizer_bos(t);
    zs_tokenizer_pad(t);
    for (int id = -1; id <= zs_tokenizer_vocab_size(t) && id < 512; id++) {
        const char *s = zs_tokenizer_token(t, id);
        if (s) zs_tokenizer_id(t, s);
    }
    if (p2) run_text(t, p2, n2, add_special, skip_special);
    zs_tokenizer_destroy(t);
    return 0;
}

/* libFuzzer target for the parsers of untrusted checkpoint inputs: the manifest (JSON with a
 * self-checksum), safetensors headers and llm.c model headers. The first byte picks the
 * parser. The manifest's checksum is recomputed for the input, so mutations reach the field
 * validation behind it instead of all stopping at "checksum mismatch".
 *
 * scripts/fuzz.sh builds and runs it (docs/testing.md); the same entry point is replayed over
 * fuzz/corpus_ckpt by the ctest `ckpt_parsers`. */
#include "ckpt/convert.h"
#include "ckpt/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fix_manifest_crc(char *t, size_t n) {
    static const char key[] = ",\n\"manifest_crc32c\":\"";
    size_t kl = sizeof key - 1;
    for (size_t i = n >= kl + 8 ? n - kl - 8 + 1 : 0; i-- > 0;)
        if (!memcmp(t + i, key, kl)) {
            char hex[9];
            snprintf(hex, sizeof hex, "%08x", zs_crc32c(0, t, i));
            memcpy(t + i + kl, hex, 8);
            return;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 3;
    data++;
    size--;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    if (which == 0) {
        zs_manifest m;
        fix_manifest_crc((char *)copy, size);
        if (zs_manifest_parse((const char *)copy, size, "fuzz", &m) == ZS_OK) zs_manifest_free(&m);
    } else if (which == 1) {
        zs_st_header h;
        if (zs_st_parse(copy, size, size, "fuzz", &h) == ZS_OK) zs_st_header_free(&h);
    } else {
        zs_llmc_header h;
        zs_llmc_parse(copy, size, size, "fuzz", &h);
    }
    free(copy);
    return 0;
}

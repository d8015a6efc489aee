/* libFuzzer target for model descriptions: a Hugging Face model directory's config.json
 * (src/ckpt/hf.c, every field checked against what zshard implements and against the flags'
 * model, the hint) and zshard's own model config file, `--model NAME.json` (src/models/config.c,
 * a parser of its own). The first byte picks: 0 config.json without a hint, 1 with gpt2-tiny's
 * preset as the hint, 2 with llama-tiny's, 3 a model config file; the rest is the file, written
 * to a scratch folder (both read files only). A config that loads must pass the shape checks
 * every model is built under. Replayed over fuzz/corpus_hf_config by the ctest fuzz_hf_config;
 * scripts/fuzz.sh runs it. */
#include "ckpt/convert.h"
#include "input.h"
#include "models/model.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    zs_model_config cfg, hint;
    zs_status st;
    if (which < 3) {
        zf_write("config.json", data + 1, size - 1);
        if (which > 0 && zs_model_preset(which == 1 ? "gpt2-tiny" : "llama-tiny", &hint) != ZS_OK)
            abort();
        st = zs_hf_config(zf_dir(), which ? &hint : NULL, &cfg);
    } else {
        st = zs_model_config_load(zf_write("model.json", data + 1, size - 1), &cfg);
    }
    if (st == ZS_OK && zs_model_config_validate(&cfg) != ZS_OK) abort();
    return 0;
}

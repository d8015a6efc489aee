/* LLaMA model: the whole model's gradient against central finite differences on a tiny
 * grouped-query config (every tensor sampled), loss at init close to ln(vocab), layout
 * invariants and Hugging Face names/shapes, parameter counts of the released shapes
 * (TinyLlama-1.1B, LLaMA-2-7B), bitwise repeatability, and model config files (valid ones,
 * and each kind of bad one failing with a clear message). */
#include "core/status.h"
#include "models/model.h"
#include "modeltest.h"

#include <string.h>
#include <unistd.h>

static zs_model_config tiny(int vocab) {
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = ZS_ARCH_LLAMA;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2; /* two query heads per key/value head */
    c.n_embd = 16;
    c.ffn_hidden = 24;
    c.max_seq = 8;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    snprintf(c.name, sizeof c.name, "fd-llama");
    zs_model_config_set_vocab(&c, vocab);
    return c;
}

static void test_finite_differences(void) {
    mt_check_gradients(tiny(37), 2, 8, 7);
}

static void test_init_loss(void) {
    zs_model_config c;
    ZT_OK(zs_model_preset("llama-tiny", &c));
    double loss = mt_init_loss(c, 4, 32, 1);
    /* The head sees unit-RMS rows through 0.02-std weights: logits of std 0.02 sqrt(64) =
     * 0.16, so the loss is ln(vocab) + ~0.16^2/2: within 1% of ln(256). */
    ZT_CHECK(fabs(loss - log(256.0)) < 0.01 * log(256.0), "init loss %.5f vs ln(256) %.5f", loss,
             log(256.0));
}

static void test_repeatable(void) {
    mt_check_repeatable(tiny(50), 2, 8, 3);
}

static void expect_tensor(const zs_layout *l, const char *name, int64_t n0, int64_t n1, int decay) {
    int i = zs_layout_find(l, name);
    ZT_CHECK(i >= 0, "tensor %s missing", name);
    if (i < 0) return;
    const zs_tensor_desc *t = &l->tensors[i];
    ZT_CHECK(t->shape[0] == n0 && (n1 ? t->ndim == 2 && t->shape[1] == n1 : t->ndim == 1),
             "%s: shape [%lld, %lld], want [%lld, %lld]", name, (long long)t->shape[0],
             (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)n0, (long long)n1);
    ZT_CHECK(t->decay == decay, "%s: weight decay flag %d", name, t->decay);
}

static void test_layout(void) {
    zs_model_config c = tiny(37);
    for (int world = 1; world <= 5; world++) {
        zs_layout l;
        ZT_OK(zs_model_layout(&c, world, &l));
        mt_check_layout(&c, &l, world);
        for (int u = 0; u < l.n_units; u++)
            ZT_CHECK(l.units[u].n_uses == 1, "unit %s: untied, used once (n_uses %d)",
                     l.units[u].name, l.units[u].n_uses);
        /* Hugging Face names and [out, in] shapes; kv projections are n_kv_head * hs wide. */
        int64_t C = 16, KD = 8, F = 24, Vp = 64;
        expect_tensor(&l, "model.embed_tokens.weight", Vp, C, 1);
        expect_tensor(&l, "model.layers.1.input_layernorm.weight", C, 0, 0);
        expect_tensor(&l, "model.layers.1.self_attn.q_proj.weight", C, C, 1);
        expect_tensor(&l, "model.layers.1.self_attn.k_proj.weight", KD, C, 1);
        expect_tensor(&l, "model.layers.1.self_attn.v_proj.weight", KD, C, 1);
        expect_tensor(&l, "model.layers.1.self_attn.o_proj.weight", C, C, 1);
        expect_tensor(&l, "model.layers.1.post_attention_layernorm.weight", C, 0, 0);
        expect_tensor(&l, "model.layers.1.mlp.gate_proj.weight", F, C, 1);
        expect_tensor(&l, "model.layers.1.mlp.up_proj.weight", F, C, 1);
        expect_tensor(&l, "model.layers.1.mlp.down_proj.weight", C, F, 1);
        expect_tensor(&l, "model.norm.weight", C, 0, 0);
        expect_tensor(&l, "lm_head.weight", Vp, C, 1);
        ZT_CHECK(!strcmp(l.units[0].name, "embed") && !strcmp(l.units[3].name, "lm_head"),
                 "unit names %s, %s", l.units[0].name, l.units[3].name);
        zs_layout_free(&l);
    }
    /* The released shapes, with the 32000-token vocabulary: exactly Hugging Face's counts. */
    const char *names[2] = {"llama-1b", "llama-7b"};
    int64_t want[2] = {1100048384LL, 6738415616LL};
    for (int i = 0; i < 2; i++) {
        ZT_OK(zs_model_preset(names[i], &c));
        zs_model_config_set_vocab(&c, 32000);
        ZT_CHECK(zs_model_num_params(&c) == want[i], "%s: %lld parameters, want %lld", names[i],
                 (long long)zs_model_num_params(&c), (long long)want[i]);
    }
}

/* ---- model config files ---------------------------------------------------------------- */

static char g_dir[] = "/tmp/zshard-test-llama-XXXXXX";

static zs_status load_text(const char *text, zs_model_config *c) {
    char path[128];
    snprintf(path, sizeof path, "%s/model.json", g_dir);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "write %s", path);
    fputs(text, f);
    fclose(f);
    return zs_model_preset(path, c);
}

static void expect_error(const char *text, zs_status want, const char *needle) {
    zs_model_config c;
    zs_status st = load_text(text, &c);
    ZT_CHECK(st == want && strstr(zs_last_error(), needle),
             "config %s: got %s '%s', want %s mentioning '%s'", text, zs_status_string(st),
             zs_last_error(), zs_status_string(want), needle);
}

static void test_config_file(void) {
    zs_model_config c;
    ZT_OK(load_text("{\"arch\": \"llama\", \"n_layer\": 3, \"n_head\": 8, \"n_kv_head\": 2,\n"
                    " \"n_embd\": 128, \"ffn_hidden\": 344, \"max_seq\": 512,\n"
                    " \"rope_theta\": 500000, \"norm_eps\": 1e-6}\n",
                    &c));
    ZT_CHECK(c.arch == ZS_ARCH_LLAMA && c.n_layer == 3 && c.n_head == 8 && c.n_kv_head == 2 &&
                 c.n_embd == 128 && c.ffn_hidden == 344 && c.max_seq == 512 &&
                 c.rope_theta == 500000.0f && c.norm_eps == 1e-6f && !strcmp(c.name, "model"),
             "llama config fields");
    ZT_OK(load_text("{\"arch\":\"gpt2\",\"name\":\"g\",\"n_layer\":2,\"n_head\":2,\"n_embd\":32,"
                    "\"max_seq\":64,\"vocab\":100}",
                    &c));
    ZT_CHECK(c.arch == ZS_ARCH_GPT2 && c.n_kv_head == 2 && c.ffn_hidden == 128 && c.vocab == 100 &&
                 c.padded_vocab == 128 && !strcmp(c.name, "g"),
             "gpt2 config fields");
    /* Defaults: n_kv_head = n_head, theta 10000, eps 1e-5. */
    ZT_OK(load_text("{\"arch\":\"llama\",\"n_layer\":1,\"n_head\":2,\"n_embd\":8,"
                    "\"ffn_hidden\":16,\"max_seq\":4}",
                    &c));
    ZT_CHECK(c.n_kv_head == 2 && c.rope_theta == 10000.0f && c.norm_eps == 1e-5f, "defaults");

    const char *base = "\"arch\":\"llama\",\"n_layer\":1,\"max_seq\":4,\"ffn_hidden\":16";
    char buf[512];
#define BAD(fields, want, needle)                                                                  \
    snprintf(buf, sizeof buf, "{%s,%s}", base, fields);                                            \
    expect_error(buf, want, needle)
    BAD("\"n_head\":3,\"n_embd\":8", ZS_ERR_INVALID, "3 heads do not divide width 8");
    BAD("\"n_head\":4,\"n_kv_head\":3,\"n_embd\":16", ZS_ERR_INVALID,
        "3 key/value heads do not divide 4 heads");
    BAD("\"n_head\":4,\"n_embd\":12", ZS_ERR_INVALID, "head size 3 must be even");
    BAD("\"n_head\":2", ZS_ERR_INVALID, "missing field \"n_embd\"");
    BAD("\"n_head\":2,\"n_embd\":8,\"n_heads\":2", ZS_ERR_INVALID, "unknown field \"n_heads\"");
    BAD("\"n_head\":2,\"n_embd\":8,\"n_head\":2", ZS_ERR_INVALID, "\"n_head\" given twice");
    BAD("\"n_head\":2.5,\"n_embd\":8", ZS_ERR_INVALID, "must be a positive integer");
    BAD("\"n_head\":\"2\",\"n_embd\":8", ZS_ERR_INVALID, "\"n_head\" must be a number");
    BAD("\"n_head\":2,\"n_embd\":8,\"rope_theta\":0", ZS_ERR_INVALID, "rope_theta");
#undef BAD
    expect_error("{\"arch\":\"llama\",\"n_layer\":1,\"n_head\":2,\"n_embd\":8,\"max_seq\":4}",
                 ZS_ERR_INVALID, "missing field \"ffn_hidden\"");
    expect_error("{\"arch\":\"mamba\"}", ZS_ERR_INVALID, "arch \"mamba\"");
    expect_error("{\"n_layer\":1}", ZS_ERR_INVALID, "missing field \"arch\"");
    expect_error("{\"arch\":\"gpt2\",\"n_layer\":1,\"n_head\":2,\"n_embd\":8,\"max_seq\":4,"
                 "\"n_kv_head\":1}",
                 ZS_ERR_INVALID, "gpt2 takes no");
    expect_error("{\"arch\":\"llama\",", ZS_ERR_FORMAT, "model.json");
    expect_error("[1, 2]", ZS_ERR_FORMAT, "not a JSON object");
    expect_error("{\"arch\":\"llama\"} x", ZS_ERR_FORMAT, "trailing text");
    ZT_CHECK(zs_model_preset("/nonexistent/dir/m.json", &c) == ZS_ERR_IO &&
                 strstr(zs_last_error(), "/nonexistent/dir/m.json"),
             "missing file: %s", zs_last_error());
    ZT_CHECK(zs_model_preset("llama-13b", &c) == ZS_ERR_INVALID &&
                 strstr(zs_last_error(), "llama-7b"),
             "unknown preset lists the known ones: %s", zs_last_error());
}

int main(void) {
    zt_init("llama");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    test_layout();
    test_config_file();
    test_init_loss();
    test_repeatable();
    test_finite_differences();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ZT_CHECK(system(cmd) == 0, "cleanup");
    return zt_finish();
}

/* LLaMA model: the whole model's gradient against central finite differences on a tiny
 * grouped-query config (every tensor sampled), loss at init close to ln(vocab), layout
 * invariants and Hugging Face names/shapes, parameter counts of the released shapes
 * (TinyLlama-1.1B, LLaMA-2-7B), bitwise repeatability, and model config files (valid ones,
 * and each kind of bad one failing with a clear message). */
#include "backend/ops.h"
#include "core/status.h"
#include "models/model.h"
#include "shard/engine.h"
#include "testutil.h"

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

typedef struct fixture {
    zs_layout layout;
    zs_engine_t *engine;
    zs_model_t *model;
    int B, T;
    int32_t *in, *tg;
} fixture;

static void setup(fixture *f, zs_model_config cfg, int B, int T, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->B = B;
    f->T = T;
    ZT_OK(zs_model_layout(&cfg, 1, &f->layout));
    zs_engine_config ec = zs_engine_config_default();
    ZT_OK(zs_engine_create(&f->layout, zs_ops_cpu(), NULL, &ec, &f->engine));
    ZT_OK(zs_engine_init_params(f->engine, seed));
    ZT_OK(zs_model_create(&cfg, zs_ops_cpu(), NULL, f->engine, B, T, &f->model));
    f->in = zt_malloc((size_t)B * T * sizeof(int32_t));
    f->tg = zt_malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) {
        f->in[i] = (int32_t)zt_uniform(0, cfg.vocab);
        f->tg[i] = (int32_t)zt_uniform(0, cfg.vocab);
    }
}

static void teardown(fixture *f) {
    zs_model_destroy(f->model);
    zs_engine_destroy(f->engine);
    zs_layout_free(&f->layout);
    free(f->in);
    free(f->tg);
}

static double mean_loss(fixture *f, int backward) {
    double sum = 0;
    float dloss = 1.0f / (float)(f->B * f->T);
    if (backward) ZT_OK(zs_engine_zero_grad(f->engine));
    ZT_OK(zs_model_forward_backward(f->model, f->in, f->tg, f->B, f->T, dloss, backward, &sum));
    return sum / (f->B * f->T);
}

static void test_finite_differences(void) {
    fixture f;
    setup(&f, tiny(37), 2, 8, 7);
    /* Larger weights than the 0.02 init (and norm weights away from 1) make every path carry
     * gradient that clearly exceeds finite-difference noise. */
    for (int u = 0; u < f.layout.n_units; u++) {
        float *p, *g;
        ZT_OK(zs_engine_backward_begin(f.engine, u, &p, &g));
        for (int i = 0; i < f.layout.units[u].n_tensors; i++) {
            const zs_tensor_desc *t = &f.layout.tensors[f.layout.units[u].first_tensor + i];
            for (int64_t j = 0; j < t->zero_from; j++)
                p[t->offset + j] += (float)(0.3 * zt_normal());
        }
    }
    mean_loss(&f, 1);
    for (int ti = 0; ti < f.layout.n_tensors; ti++) {
        const zs_tensor_desc *t = &f.layout.tensors[ti];
        float *p, *g;
        ZT_OK(zs_engine_backward_begin(f.engine, t->unit, &p, &g));
        /* Sample up to 12 elements of every tensor (only real rows of the padded vocab). */
        int n = t->zero_from < 12 ? (int)t->zero_from : 12;
        double num = 0, den = 0;
        for (int k = 0; k < n; k++) {
            int64_t j = (int64_t)zt_uniform(0, (double)t->zero_from);
            float *x = &p[t->offset + j];
            float saved = *x;
            /* Central differences at h and h/2 combined by Richardson extrapolation,
             * (4 D(h/2) - D(h)) / 3, which cancels the O(h^2) truncation term that the
             * curvier paths (softmax, norms, gated MLP, RoPE) leave at h = 1e-2. The loss is
             * summed in double: fp32 forward noise (~1e-7 relative on a loss of ~4) adds
             * < 1e-4 to each estimate. */
            double d[2];
            for (int r = 0; r < 2; r++) {
                const float h = r ? 5e-3f : 1e-2f;
                *x = saved + h;
                double lp = mean_loss(&f, 0);
                *x = saved - h;
                double lm = mean_loss(&f, 0);
                *x = saved;
                d[r] = (lp - lm) / (2.0 * (double)h);
            }
            double fd = (4.0 * d[1] - d[0]) / 3.0;
            double an = g[t->offset + j];
            num += (fd - an) * (fd - an);
            den += an * an + fd * fd;
        }
        /* Relative error over the sampled elements of this tensor: a backward with a missing
         * term, a wrong factor or a wrong head mapping is off by tens of percent; correct ones
         * are within 2% (the O(h^2) truncation of the curvier SwiGLU/RMSNorm paths). */
        double rel = den > 0 ? sqrt(num / (den * 0.5)) : 0;
        ZT_CHECK(rel < 0.02 && den > 1e-14, "tensor %s: FD relative error %.4f (grad norm^2 %g)",
                 t->name, rel, den);
    }
    teardown(&f);
}

static void test_init_loss(void) {
    fixture f;
    zs_model_config c;
    ZT_OK(zs_model_preset("llama-tiny", &c));
    setup(&f, c, 4, 32, 1);
    double loss = mean_loss(&f, 0);
    /* The head sees unit-RMS rows through 0.02-std weights: logits of std 0.02 sqrt(64) =
     * 0.16, so the loss is ln(vocab) + ~0.16^2/2: within 1% of ln(256). */
    ZT_CHECK(fabs(loss - log(256.0)) < 0.01 * log(256.0), "init loss %.5f vs ln(256) %.5f", loss,
             log(256.0));
    teardown(&f);
}

static void test_repeatable(void) {
    fixture a, b;
    setup(&a, tiny(50), 2, 8, 3);
    setup(&b, tiny(50), 2, 8, 3);
    memcpy(b.in, a.in, 16 * sizeof(int32_t));
    memcpy(b.tg, a.tg, 16 * sizeof(int32_t));
    double la = mean_loss(&a, 1), lb = mean_loss(&b, 1);
    ZT_CHECK(la == lb, "same inputs, same loss bitwise: %.17g vs %.17g", la, lb);
    zs_adamw_hparams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    float na, nb;
    ZT_OK(zs_engine_step(a.engine, &h, 1.0f, 1, &na));
    ZT_OK(zs_engine_step(b.engine, &h, 1.0f, 1, &nb));
    ZT_CHECK(na == nb, "same grad norm");
    uint64_t ha = 0, hb = 1;
    ZT_OK(zs_engine_param_hash(a.engine, &ha));
    ZT_OK(zs_engine_param_hash(b.engine, &hb));
    ZT_CHECK(ha == hb, "same param hash after a step");
    teardown(&a);
    teardown(&b);
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
        ZT_CHECK(l.n_units == c.n_layer + 2, "units");
        ZT_CHECK(l.total_params == zs_model_num_params(&c), "param count %lld vs %lld",
                 (long long)l.total_params, (long long)zs_model_num_params(&c));
        for (int u = 0; u < l.n_units; u++) {
            const zs_unit_desc *ud = &l.units[u];
            ZT_CHECK(ud->padded % ((int64_t)world * ZS_LAYOUT_ALIGN) == 0, "padded multiple");
            ZT_CHECK(ud->shard * world == ud->padded, "equal shards");
            ZT_CHECK(ud->n_uses == 1, "unit %s: untied, used once (n_uses %d)", ud->name,
                     ud->n_uses);
        }
        for (int i = 0; i < l.n_tensors; i++)
            ZT_CHECK(l.tensors[i].offset % ZS_LAYOUT_ALIGN == 0, "tensor %s aligned",
                     l.tensors[i].name);
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

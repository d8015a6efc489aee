/* GPT-2 model: the whole model's gradient against central finite differences on a tiny
 * config (every tensor sampled), loss at init close to ln(vocab), layout invariants
 * (alignment, padding, shard sizes for several world sizes), init independent of world size,
 * and bitwise repeatability of forward/backward. */
#include "backend/ops.h"
#include "core/status.h"
#include "models/model.h"
#include "shard/engine.h"
#include "testutil.h"

#include <string.h>

static zs_model_config tiny(int vocab) {
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = ZS_ARCH_GPT2;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    c.max_seq = 8;
    snprintf(c.name, sizeof c.name, "fd-tiny");
    zs_model_config_set_vocab(&c, vocab);
    return c;
}

typedef struct fixture {
    zs_model_config cfg;
    zs_layout layout;
    zs_engine_t *engine;
    zs_model_t *model;
    int B, T;
    int32_t *in, *tg;
} fixture;

static void setup(fixture *f, zs_model_config cfg, int B, int T, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->cfg = cfg;
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
    /* Larger weights than GPT-2's 0.02 init make every path carry gradient that clearly
     * exceeds finite-difference noise. */
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
         * term or a wrong factor is off by tens of percent; correct ones are within 2%. */
        double rel = den > 0 ? sqrt(num / (den * 0.5)) : 0;
        ZT_CHECK(rel < 0.02 && den > 1e-14, "tensor %s: FD relative error %.4f (grad norm^2 %g)",
                 t->name, rel, den);
    }
    teardown(&f);
}

static void test_init_loss(void) {
    fixture f;
    setup(&f, tiny(256), 4, 8, 1);
    double loss = mean_loss(&f, 0);
    /* With 0.02-std weights the logits are near zero, so the softmax is near uniform: the
     * loss is ln(vocab) up to the logits' small spread (the 1% bound). */
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
            ZT_CHECK(ud->padded >= ud->used &&
                         ud->padded - ud->used < (int64_t)world * ZS_LAYOUT_ALIGN,
                     "minimal padding");
            ZT_CHECK(ud->shard * world == ud->padded, "equal shards");
        }
        for (int i = 0; i < l.n_tensors; i++) {
            ZT_CHECK(l.tensors[i].offset % ZS_LAYOUT_ALIGN == 0, "tensor %s aligned",
                     l.tensors[i].name);
            if (i + 1 < l.n_tensors && l.tensors[i + 1].unit == l.tensors[i].unit)
                ZT_CHECK(l.tensors[i + 1].offset >= l.tensors[i].offset + l.tensors[i].count,
                         "no overlap");
        }
        ZT_CHECK(l.units[0].n_uses == 2, "tied embedding unit is used twice");
        zs_layout_free(&l);
    }
}

int main(void) {
    zt_init("model");
    test_layout();
    test_init_loss();
    test_repeatable();
    test_finite_differences();
    return zt_finish();
}

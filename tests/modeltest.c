/* Implementation of the whole-model checks in modeltest.h and the fixture they build. */
#include "modeltest.h"

#include "backend/ops.h"
#include "core/status.h"
#include "shard/module.h"

#include <string.h>

typedef struct mt_fixture {
    zs_layout layout;
    zs_module_t *engine;
    zs_model_t *model;
    int B, T;
    int32_t *in, *tg; /* B x T tokens, uniform over the real vocabulary */
} mt_fixture;

static void mt_setup(mt_fixture *f, zs_model_config cfg, int B, int T, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->B = B;
    f->T = T;
    ZT_OK(zs_model_layout(&cfg, 1, &f->layout));
    zs_units_t *units = NULL;
    zs_module_config mc = zs_module_config_default();
    mc.seed = seed;
    ZT_OK(zs_units_from_layout(&f->layout, &units));
    ZT_OK(zs_module_create(units, NULL, &mc, &f->engine));
    zs_units_destroy(units);
    ZT_OK(zs_model_create(&cfg, zs_ops_cpu(), NULL, f->engine, B, T, &f->model));
    f->in = zt_malloc((size_t)B * T * sizeof(int32_t));
    f->tg = zt_malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) {
        f->in[i] = (int32_t)zt_uniform(0, cfg.vocab);
        f->tg[i] = (int32_t)zt_uniform(0, cfg.vocab);
    }
}

static void mt_teardown(mt_fixture *f) {
    zs_model_destroy(f->model);
    zs_module_destroy(f->engine);
    zs_layout_free(&f->layout);
    free(f->in);
    free(f->tg);
}

/* With backward, gradients are zeroed first and then hold d(mean loss)/d(params). */
static double mt_mean_loss(mt_fixture *f, int backward) {
    double sum = 0;
    float dloss = 1.0f / (float)(f->B * f->T);
    if (backward) ZT_OK(zs_module_zero_grad(f->engine));
    ZT_OK(zs_model_forward_backward(f->model, f->in, f->tg, f->B, f->T, dloss, backward, &sum));
    return sum / (f->B * f->T);
}

void mt_check_layout(const zs_model_config *cfg, const zs_layout *l, int world) {
    ZT_CHECK(l->n_units == cfg->n_layer + 2, "units");
    ZT_CHECK(l->total_params == zs_model_num_params(cfg), "param count %lld vs %lld",
             (long long)l->total_params, (long long)zs_model_num_params(cfg));
    for (int u = 0; u < l->n_units; u++) {
        const zs_unit_desc *ud = &l->units[u];
        ZT_CHECK(ud->padded % ((int64_t)world * ZS_LAYOUT_ALIGN) == 0, "padded multiple");
        ZT_CHECK(ud->shard * world == ud->padded, "equal shards");
    }
    for (int i = 0; i < l->n_tensors; i++)
        ZT_CHECK(l->tensors[i].offset % ZS_LAYOUT_ALIGN == 0, "tensor %s aligned",
                 l->tensors[i].name);
}

double mt_init_loss(zs_model_config cfg, int B, int T, uint64_t seed) {
    mt_fixture f;
    mt_setup(&f, cfg, B, T, seed);
    double loss = mt_mean_loss(&f, 0);
    mt_teardown(&f);
    return loss;
}

void mt_check_gradients(zs_model_config cfg, int B, int T, uint64_t seed) {
    mt_fixture fx, *f = &fx;
    mt_setup(f, cfg, B, T, seed);
    const zs_layout *l = &f->layout;
    /* Larger weights than the 0.02 init (and norm weights away from 1) make every path carry
     * gradient that clearly exceeds finite-difference noise. */
    for (int u = 0; u < l->n_units; u++) {
        float *p, *g;
        ZT_OK(zs_module_backward_begin(f->engine, u, &p, &g));
        for (int i = 0; i < l->units[u].n_tensors; i++) {
            const zs_tensor_desc *t = &l->tensors[l->units[u].first_tensor + i];
            for (int64_t j = 0; j < t->zero_from; j++)
                p[t->offset + j] += (float)(0.3 * zt_normal());
        }
    }
    mt_mean_loss(f, 1);
    for (int ti = 0; ti < l->n_tensors; ti++) {
        const zs_tensor_desc *t = &l->tensors[ti];
        float *p, *g;
        ZT_OK(zs_module_backward_begin(f->engine, t->unit, &p, &g));
        /* Sample up to 12 elements of every tensor (only real rows of the padded vocab): 8 among
         * those with a gradient, 4 anywhere. An embedding's rows of tokens absent from the
         * batch have none, and 12 uniform draws can all land there; the 4 anywhere still catch
         * an element that should have a gradient and has none. */
        int n = t->zero_from < 12 ? (int)t->zero_from : 12;
        int64_t *live = zt_malloc((size_t)t->zero_from * sizeof *live), nlive = 0;
        for (int64_t j = 0; j < t->zero_from; j++)
            if (g[t->offset + j] != 0.0f) live[nlive++] = j;
        double num = 0, den = 0;
        for (int k = 0; k < n; k++) {
            int64_t j = k < 8 && nlive > 0 ? live[(int64_t)zt_uniform(0, (double)nlive) % nlive]
                                           : (int64_t)zt_uniform(0, (double)t->zero_from);
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
                double lp = mt_mean_loss(f, 0);
                *x = saved - h;
                double lm = mt_mean_loss(f, 0);
                *x = saved;
                d[r] = (lp - lm) / (2.0 * (double)h);
            }
            double fd = (4.0 * d[1] - d[0]) / 3.0;
            double an = g[t->offset + j];
            num += (fd - an) * (fd - an);
            den += an * an + fd * fd;
        }
        /* Relative error over the sampled elements of this tensor: a backward with a missing
         * term, a wrong factor or (LLaMA) a wrong head mapping is off by tens of percent;
         * correct ones are within 2% (the O(h^2) truncation of the curvier SwiGLU/RMSNorm
         * paths). */
        free(live);
        double rel = den > 0 ? sqrt(num / (den * 0.5)) : 0;
        ZT_CHECK(rel < 0.02 && den > 1e-14, "tensor %s: FD relative error %.4f (grad norm^2 %g)",
                 t->name, rel, den);
    }
    mt_teardown(f);
}

void mt_check_repeatable(zs_model_config cfg, int B, int T, uint64_t seed) {
    mt_fixture a, b;
    mt_setup(&a, cfg, B, T, seed);
    mt_setup(&b, cfg, B, T, seed);
    memcpy(b.in, a.in, (size_t)B * T * sizeof(int32_t));
    memcpy(b.tg, a.tg, (size_t)B * T * sizeof(int32_t));
    double la = mt_mean_loss(&a, 1), lb = mt_mean_loss(&b, 1);
    ZT_CHECK(la == lb, "same inputs, same loss bitwise: %.17g vs %.17g", la, lb);
    zs_adamw_config h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    float na, nb;
    ZT_OK(zs_module_step(a.engine, &h, &na));
    ZT_OK(zs_module_step(b.engine, &h, &nb));
    ZT_CHECK(na == nb, "same grad norm");
    uint64_t ha = 0, hb = 1;
    ZT_OK(zs_module_param_hash(a.engine, &ha));
    ZT_OK(zs_module_param_hash(b.engine, &hb));
    ZT_CHECK(ha == hb, "same param hash after a step");
    mt_teardown(&a);
    mt_teardown(&b);
}

/* Document masks in whole models (backend/ops.h "Documents"): GPT-2 with flash and naive
 * attention and LLaMA, on the CPU ops, with row 0 cut into three documents and row 1 a document
 * then padding: changing the tokens of every other document (and the padding ids) leaves a
 * document's logits and loss bit for bit, and every parameter gradient of its loss equal (while
 * without the masks the same change reaches the document). The masks op by op:
 * test_docs_ops.c. */
#include "models/model.h"
#include "opstest.h"

#include <string.h>

/* ---- whole models --------------------------------------------------------------------------- */

/* Logits of document D's rows, its loss sum and every parameter gradient of it. */
typedef struct model_out {
    float *logits;
    double loss;
    float *grads;
} model_out;

static model_out model_pass(zs_model_t *m, zs_module_t *e, const zs_layout *l, const int32_t *in,
                            const int32_t *tg, const int32_t *seg, int B, int T, int Vp, int d0,
                            int d1, float dloss) {
    model_out o;
    const float *L = NULL;
    size_t nd = (size_t)(d1 - d0) * Vp, ng = 0;
    ZT_OK(zs_model_infer(m, in, B, T, &L)); /* only to learn where the logits live */
    ZT_OK(zs_model_forward_backward_docs(m, in, tg, seg, B, T, dloss, 0, &o.loss));
    o.logits = fcopy(L + (size_t)d0 * Vp, nd);
    ZT_OK(zs_module_zero_grad(e));
    ZT_OK(zs_model_forward_backward_docs(m, in, tg, seg, B, T, dloss, 1, &o.loss));
    for (int u = 0; u < l->n_units; u++)
        ng += (size_t)l->units[u].padded;
    o.grads = fbuf(ng);
    for (int u = 0, at_ = 0; u < l->n_units; u++) {
        float *p = NULL, *g = NULL;
        ZT_OK(zs_module_backward_begin(e, u, &p, &g));
        memcpy(o.grads + at_, g, (size_t)l->units[u].padded * sizeof(float));
        at_ += (int)l->units[u].padded;
    }
    return o;
}

static void check_model_isolation(const char *preset, zs_attention attention) {
    const int B = 2, T = 100; /* row 0: documents [0, 30) [30, 70) [70, 100); row 1: one of 50,
                                 then padding */
    zs_model_config cfg;
    ZT_OK(zs_model_preset(preset, &cfg));
    zs_model_config_set_vocab(&cfg, 256);
    zs_layout l;
    ZT_OK(zs_model_layout(&cfg, 1, &l));
    zs_units_t *units = NULL;
    zs_module_t *e = NULL;
    zs_model_t *m = NULL;
    zs_module_config mc = zs_module_config_default();
    ZT_OK(zs_units_from_layout(&l, &units));
    ZT_OK(zs_module_create(units, NULL, &mc, &e));
    zs_units_destroy(units);
    zs_model_options mo = {.attention = attention};
    ZT_OK(zs_model_create_opts(&cfg, &mo, zs_ops_cpu(), NULL, e, B, T, &m));
    int32_t in[200], tg[200], seg[200];
    for (int t = 0; t < T; t++) {
        seg[t] = t < 30 ? 0 : t < 70 ? 30 : 70;
        seg[T + t] = t < 50 ? 0 : t;
    }
    for (int i = 0; i < B * T; i++)
        in[i] = (int32_t)zt_uniform(0, 256);
    /* Document D = row 0's [30, 70): its targets within it, every other target -1. */
    for (int i = 0; i < B * T; i++)
        tg[i] = i >= 30 && i < 69 ? in[i + 1] : -1;
    float dloss = 1.0f / 39;
    int32_t in0[200];
    memcpy(in0, in, sizeof in0);
    model_out a = model_pass(m, e, &l, in, tg, seg, B, T, cfg.padded_vocab, 30, 70, dloss);
    for (int i = 0; i < B * T; i++)
        if (i < 30 || i >= 70) in[i] = (int32_t)zt_uniform(0, 256);
    model_out b = model_pass(m, e, &l, in, tg, seg, B, T, cfg.padded_vocab, 30, 70, dloss);
    /* The control: without masks the same change does reach the document. */
    model_out c0 = model_pass(m, e, &l, in0, tg, NULL, B, T, cfg.padded_vocab, 30, 70, dloss);
    model_out c1 = model_pass(m, e, &l, in, tg, NULL, B, T, cfg.padded_vocab, 30, 70, dloss);
    ZT_CHECK(!bits_equal(c0.logits, c1.logits, (size_t)40 * cfg.padded_vocab * 4),
             "%s: without masks the document's logits did not change either", preset);
    free(c0.logits), free(c0.grads), free(c1.logits), free(c1.grads);
    size_t ng = (size_t)l.total_padded, diff = 0, nonzero = 0;
    for (size_t i = 0; i < ng; i++) {
        diff += a.grads[i] != b.grads[i];
        nonzero += a.grads[i] != 0.0f;
    }
    ZT_CHECK(bits_equal(a.logits, b.logits, (size_t)40 * cfg.padded_vocab * 4) &&
                 a.loss == b.loss && diff == 0 && nonzero > ng / 4,
             "%s (%s attention): other documents' tokens changed the document's logits, loss "
             "(%.17g vs %.17g) or %zu of %zu gradients (%zu non-zero)",
             preset, attention == ZS_ATTENTION_NAIVE ? "naive" : "flash", a.loss, b.loss, diff, ng,
             nonzero);
    printf("%-32s a document's logits, loss and %zu gradients unchanged by the others' tokens\n",
           preset, ng);
    free(a.logits), free(a.grads), free(b.logits), free(b.grads);
    zs_model_destroy(m);
    zs_module_destroy(e);
    zs_layout_free(&l);
}

int main(void) {
    zt_init("docs_model");
    check_model_isolation("gpt2-tiny", ZS_ATTENTION_FLASH);
    check_model_isolation("gpt2-tiny", ZS_ATTENTION_NAIVE);
    check_model_isolation("llama-tiny", ZS_ATTENTION_FLASH);
    return zt_finish();
}

/* GPT-2 model: the whole model's gradient against central finite differences on a tiny
 * config (every tensor sampled), loss at init close to ln(vocab), layout invariants
 * (alignment, padding, shard sizes for several world sizes), init independent of world size,
 * and bitwise repeatability of forward/backward. */
#include "core/status.h"
#include "models/model.h"
#include "modeltest.h"

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

static void test_finite_differences(void) {
    mt_check_gradients(tiny(37), 2, 8, 7);
}

static void test_init_loss(void) {
    double loss = mt_init_loss(tiny(256), 4, 8, 1);
    /* With 0.02-std weights the logits are near zero, so the softmax is near uniform: the
     * loss is ln(vocab) up to the logits' small spread (the 1% bound). */
    ZT_CHECK(fabs(loss - log(256.0)) < 0.01 * log(256.0), "init loss %.5f vs ln(256) %.5f", loss,
             log(256.0));
}

static void test_repeatable(void) {
    mt_check_repeatable(tiny(50), 2, 8, 3);
}

static void test_layout(void) {
    zs_model_config c = tiny(37);
    for (int world = 1; world <= 5; world++) {
        zs_layout l;
        ZT_OK(zs_model_layout(&c, world, &l));
        mt_check_layout(&c, &l, world);
        for (int u = 0; u < l.n_units; u++) {
            const zs_unit_desc *ud = &l.units[u];
            ZT_CHECK(ud->padded >= ud->used &&
                         ud->padded - ud->used < (int64_t)world * ZS_LAYOUT_ALIGN,
                     "minimal padding");
        }
        for (int i = 0; i + 1 < l.n_tensors; i++)
            if (l.tensors[i + 1].unit == l.tensors[i].unit)
                ZT_CHECK(l.tensors[i + 1].offset >= l.tensors[i].offset + l.tensors[i].count,
                         "no overlap");
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

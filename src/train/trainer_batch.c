/* The trainer fed from memory (include/zshard.h, "training from memory"): steps and losses on
 * the caller's token batches, logits for evaluation, an LR override and parameters by name,
 * for code that owns its data loop (research code, the Python package). */
#include "zshard.h"

#include "core/status.h"
#include "models/model.h"
#include "shard/module.h"
#include "train/trainer_internal.h"

#include <string.h>

/* This rank's rows of a batch given as its own slice or as the global batch. */
static zs_status rank_rows(const zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                           int rows, const int32_t **tk, const int32_t **tg) {
    zs_status st = ZS_OK;
    const int B = t->cfg.batch, T = t->cfg.seq, per_rank = B / t->world;
    ZS_REQUIRE(tokens && targets, ZS_ERR_INVALID, "trainer: batch without tokens or targets");
    ZS_REQUIRE(rows == per_rank || rows == B, ZS_ERR_INVALID,
               "trainer: %d rows: pass this rank's %d rows (batch %d / %d ranks) or the global "
               "batch of %d",
               rows, per_rank, B, t->world, B);
    size_t off = rows == B ? (size_t)t->rank * per_rank * T : 0;
    *tk = tokens + off;
    *tg = targets + off;
    /* The embedding indexes its table with these: an id out of range is refused here. */
    const int V = t->model_cfg.vocab;
    for (size_t i = 0; i < (size_t)per_rank * T; i++)
        ZS_REQUIRE((*tk)[i] >= 0 && (*tk)[i] < V && (*tg)[i] >= 0 && (*tg)[i] < V, ZS_ERR_INVALID,
                   "trainer: token %d / target %d at row %zu, position %zu is outside the "
                   "vocabulary [0, %d)",
                   (*tk)[i], (*tg)[i], i / T + off / T, i % T, V);
fail:
    return st;
}

/* A bad batch on one rank must not leave the others in a collective: every rank learns. */
static zs_status agree(zs_trainer_t *t, zs_status local) {
    return zs_module_agree(t->engine, local, "trainer batch");
}

zs_status zs_trainer_step_batch(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                                int rows, zs_step_stats *stats) {
    zs_status st = ZS_OK;
    const int32_t *tk = NULL, *tg = NULL;
    ZS_CHECK(agree(t, rank_rows(t, tokens, targets, rows, &tk, &tg)));
    ZS_CHECK(zs_trainer_step_rows(t, tk, tg, stats));
fail:
    return st;
}

zs_status zs_trainer_eval_batch(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                                int rows, float *loss) {
    zs_status st = ZS_OK;
    const zs_train_config *c = &t->cfg;
    const int32_t *tk = NULL, *tg = NULL;
    double sum = 0.0;
    size_t n = (size_t)t->micro * c->seq;
    ZS_CHECK(agree(t, rank_rows(t, tokens, targets, rows, &tk, &tg)));
    for (int k = 0; k < c->grad_accum; k++) {
        int32_t *in = NULL, *tgt = NULL;
        ZS_CHECK(zs_trainer_io_next(t, &in, &tgt));
        memcpy(in, tk + (size_t)k * n, n * sizeof *in);
        memcpy(tgt, tg + (size_t)k * n, n * sizeof *tgt);
        ZS_CHECK(zs_trainer_io_pass(t, t->micro, c->seq, 0.0f, 0, k));
    }
    ZS_CHECK(zs_trainer_io_losses(t, c->grad_accum, &sum));
    ZS_CHECK(zs_module_allsum(t->engine, sum, &sum));
    *loss = (float)(sum / ((double)c->batch * c->seq));
fail:
    return st;
}

zs_status zs_trainer_forward_logits(zs_trainer_t *t, const int32_t *tokens, int rows, int seq,
                                    float *logits) {
    zs_status st = ZS_OK;
    const int V = t->model_cfg.vocab, Vp = t->model_cfg.padded_vocab;
    int bad = !tokens || !logits || rows < 1 || seq < 1 || seq > t->cfg.seq;
    for (size_t i = 0; !bad && i < (size_t)rows * seq; i++)
        bad = tokens[i] < 0 || tokens[i] >= V;
    ZS_CHECK(agree(t, bad ? zs_error(ZS_ERR_INVALID,
                                     "trainer: logits of %d x %d tokens: need rows >= 1, 1 <= seq "
                                     "<= %d and ids in [0, %d)",
                                     rows, seq, t->cfg.seq, V)
                          : ZS_OK));
    /* The model holds activations for t->micro rows: run the rows in chunks of that size. */
    for (int r0 = 0; r0 < rows; r0 += t->micro) {
        int n = rows - r0 < t->micro ? rows - r0 : t->micro;
        const float *out = NULL;
        int32_t *in = NULL, *unused = NULL;
        ZS_CHECK(zs_trainer_io_next(t, &in, &unused));
        memcpy(in, tokens + (size_t)r0 * seq, (size_t)n * seq * sizeof *in);
        ZS_CHECK(zs_trainer_io_upload(t, n, seq, 0));
        ZS_CHECK(zs_model_infer(t->model, t->d_in, n, seq, &out));
        /* Row by row, the real vocabulary of each position (the padded columns stay behind). */
        for (size_t i = 0; i < (size_t)n * seq; i++)
            ZS_CHECK(t->dev->copy_d2h(t->stream, logits + ((size_t)r0 * seq + i) * V, out + i * Vp,
                                      (size_t)V * sizeof(float)));
        ZS_CHECK(t->dev->stream_sync(t->stream));
    }
fail:
    return st;
}

zs_status zs_trainer_set_lr(zs_trainer_t *t, float lr) {
    if (!(lr >= 0.0f) || lr > 1e3f)
        return zs_error(ZS_ERR_INVALID, "trainer: learning rate %g", (double)lr);
    t->lr_override = lr;
    return ZS_OK;
}

zs_status zs_trainer_get_param(zs_trainer_t *t, const char *name, float *out, size_t count) {
    return zs_module_get_param(t->engine, name, out, count);
}

zs_status zs_trainer_set_param(zs_trainer_t *t, const char *name, const float *values,
                               size_t count) {
    return zs_module_set_param(t->engine, name, values, count);
}

struct zs_module *zs_trainer_module(zs_trainer_t *t) {
    return t->engine;
}

/* The trainer's traffic with its device: each micro-batch's tokens go host -> device through one
 * of two pinned staging buffers (the data loader fills the next one while the device still
 * copies from the other; an event says when a buffer may be refilled), and the per-micro-batch
 * loss sums the model leaves in device memory come back in one copy per step. On the CPU the
 * copies are memcpy and the events no-ops: one code path for every device. A run with document
 * masks (--docs pack|pad) also stages each token's document start (seg) the same way. */
#include "comm/device.h"
#include "core/status.h"
#include "models/model.h"
#include "train/trainer_internal.h"

#include <stdlib.h>
#include <string.h>

zs_status zs_trainer_io_create(zs_trainer_t *t) {
    zs_status st = ZS_OK;
    const zs_device *d = t->dev;
    size_t nb = (size_t)t->micro * (size_t)t->cfg.seq * sizeof(int32_t);
    for (int j = 0; j < 2; j++) {
        ZS_CHECK(
            d->host_alloc(ZS_MEM_WORKSPACE, nb, "input tokens (staging)", (void **)&t->h_in[j]));
        ZS_CHECK(
            d->host_alloc(ZS_MEM_WORKSPACE, nb, "target tokens (staging)", (void **)&t->h_tg[j]));
        ZS_CHECK(d->event_create(&t->h_ev[j]));
    }
    ZS_CHECK(d->alloc(ZS_MEM_WORKSPACE, nb, "input tokens", (void **)&t->d_in));
    ZS_CHECK(d->alloc(ZS_MEM_WORKSPACE, nb, "target tokens", (void **)&t->d_tg));
    if (zs_trainer_io_masks(t->cfg.docs)) {
        for (int j = 0; j < 2; j++)
            ZS_CHECK(d->host_alloc(ZS_MEM_WORKSPACE, nb, "document starts (staging)",
                                   (void **)&t->h_seg[j]));
        ZS_CHECK(d->alloc(ZS_MEM_WORKSPACE, nb, "document starts", (void **)&t->d_seg));
    }
    t->n_loss = t->cfg.grad_accum;
    ZS_CHECK(d->alloc(ZS_MEM_WORKSPACE, (size_t)t->n_loss * sizeof(double), "micro-batch losses",
                      (void **)&t->d_loss));
    t->h_loss = calloc((size_t)t->n_loss, sizeof *t->h_loss);
    ZS_REQUIRE(t->h_loss, ZS_ERR_OOM, "trainer: out of memory");
fail:
    return st;
}

void zs_trainer_io_destroy(zs_trainer_t *t) {
    const zs_device *d = t->dev;
    if (!d) return;
    if (t->stream) d->stream_sync(t->stream); /* no copy may still read what is freed */
    for (int j = 0; j < 2; j++) {
        d->host_free(t->h_in[j]);
        d->host_free(t->h_tg[j]);
        d->host_free(t->h_seg[j]);
        d->event_destroy(t->h_ev[j]);
    }
    d->free(t->d_in);
    d->free(t->d_tg);
    d->free(t->d_seg);
    d->free(t->d_loss);
    free(t->h_loss);
}

zs_status zs_trainer_io_next(zs_trainer_t *t, int32_t **in, int32_t **tg) {
    zs_status st = ZS_OK;
    int j = t->turn;
    /* The last upload from this buffer must have been copied before it is refilled. That copy
     * may sit behind work that waits for a collective: with peers, the wait watches them. */
    if (t->comm && zs_comm_device(t->comm))
        ZS_CHECK(zs_comm_event_wait(t->comm, t->h_ev[j]));
    else
        ZS_CHECK(t->dev->event_sync(t->h_ev[j]));
    *in = t->h_in[j];
    *tg = t->h_tg[j];
fail:
    return st;
}

int32_t *zs_trainer_io_seg(zs_trainer_t *t) {
    return t->h_seg[t->turn];
}

zs_status zs_trainer_io_upload(zs_trainer_t *t, int rows, int seq, int targets) {
    zs_status st = ZS_OK;
    int j = t->turn;
    size_t nb = (size_t)rows * (size_t)seq * sizeof(int32_t);
#ifdef ZS_MUTANT_EARLY_EVENT /* broken build: "copied" said before the copies are queued */
    ZS_CHECK(t->dev->event_record(t->h_ev[j], t->stream));
#endif
    ZS_CHECK(t->dev->copy_h2d(t->stream, t->d_in, t->h_in[j], nb));
    if (targets) ZS_CHECK(t->dev->copy_h2d(t->stream, t->d_tg, t->h_tg[j], nb));
    /* Document starts go with a training or validation pass (targets); inference has none. */
    if (targets && t->d_seg) ZS_CHECK(t->dev->copy_h2d(t->stream, t->d_seg, t->h_seg[j], nb));
#ifndef ZS_MUTANT_EARLY_EVENT
    ZS_CHECK(t->dev->event_record(t->h_ev[j], t->stream));
#endif
    t->turn ^= 1;
fail:
    return st;
}

zs_status zs_trainer_io_pass(zs_trainer_t *t, int rows, int seq, float dloss, int backward, int k) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(k >= 0 && k < t->n_loss, ZS_ERR_INTERNAL, "trainer: micro-batch %d of %d", k,
               t->n_loss);
    ZS_CHECK(zs_trainer_io_upload(t, rows, seq, 1));
    ZS_CHECK(zs_model_forward_backward_docs(t->model, t->d_in, t->d_tg, t->d_seg, rows, seq, dloss,
                                            backward, t->d_loss + k));
fail:
    return st;
}

zs_status zs_trainer_io_losses(zs_trainer_t *t, int n, double *sum) {
    zs_status st = ZS_OK;
    ZS_CHECK(t->dev->copy_d2h(t->stream, t->h_loss, t->d_loss, (size_t)n * sizeof(double)));
    ZS_CHECK(t->dev->stream_sync(t->stream));
    double s = 0.0;
    for (int k = 0; k < n; k++) /* micro-batch order, as the step adds them */
        s += t->h_loss[k];
    *sum = s;
fail:
    return st;
}

int zs_trainer_io_masks(zs_docs_mode docs) {
    return docs == ZS_DOCS_PACK || docs == ZS_DOCS_PAD;
}

uint64_t zs_trainer_io_bytes(int micro, int seq, int grad_accum, int host_memory, int seg) {
    uint64_t nb = (uint64_t)micro * (uint64_t)seq * sizeof(int32_t);
    /* Device: both token buffers and the loss sums; the four staging buffers are host memory,
     * which counts here only when the device's memory is host memory (the CPU). Document
     * masks add one more device buffer and two more staging ones. */
    int dev = 2 + (seg ? 1 : 0), staged = 4 + (seg ? 2 : 0);
    return dev * nb + (uint64_t)grad_accum * sizeof(double) + (host_memory ? staged * nb : 0);
}

/* A training run over documents (docs/data.md): the rules and indexes set up with the data,
 * each step's rows and its count of real targets (the loss is their mean over the global
 * batch), validation batches, the position in the epochs, and the data record a checkpoint
 * keeps so that a resume continues the same sequence of samples, or is refused. */
#include "zshard.h"

#include "core/status.h"
#include "data/docs.h"
#include "train/docs_setup.h"
#include "train/trainer_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_trainer_docs_setup(zs_trainer_t *t, const zs_docs_meta *meta) {
    zs_status st = ZS_OK;
    zs_train_config *c = &t->cfg;
    const char *data = c->data_path;
    char what[700];
    if (c->docs == ZS_DOCS_NONE) {
        ZS_REQUIRE(c->epochs == 0, ZS_ERR_INVALID,
                   "--epochs %d needs --docs pack|concat|pad: the default random windows have no "
                   "epochs",
                   c->epochs);
        ZS_REQUIRE(!c->doc_sep && c->eos_id < 0 && c->pad_id < 0, ZS_ERR_INVALID,
                   "--doc-sep, --eos-id and --pad-id cut data into documents: they need --docs "
                   "pack|concat|pad");
        return ZS_OK;
    }
    ZS_REQUIRE(t->has_data, ZS_ERR_INVALID,
               "--docs %s needs a data file (data_path): batches from memory are plain streams",
               zs_docs_mode_name(c->docs));
    ZS_CHECK(zs_docs_resolve(c, meta, t->data.vocab, t->data.is_text, &t->docr));
    /* A held-out tail starts at a document, so that no document is cut in two. */
    if (!c->val_path) ZS_CHECK(zs_docs_align_split(&t->data, &t->docr));
    ZS_CHECK(zs_dataset_check(&t->data, c->seq));
    snprintf(what, sizeof what, "the training split of %s", data);
    ZS_CHECK(zs_docs_index(&t->data.train, &t->docr, what, &t->dtrain));
    snprintf(what, sizeof what, "the validation split of %s", c->val_path ? c->val_path : data);
    ZS_CHECK(zs_docs_index(&t->data.val, &t->docr, what, &t->dval));
    t->steps_per_epoch = zs_docs_steps_per_epoch(t->dtrain.n_samples, c->batch);
    if (c->epochs > 0) {
        /* --steps bounds --epochs (as HF Trainer's max_steps overrides num_train_epochs). */
        int64_t total = (int64_t)c->epochs * t->steps_per_epoch;
        if (c->steps > 0 && c->steps < total) total = c->steps;
        ZS_REQUIRE(total <= INT_MAX, ZS_ERR_INVALID, "--epochs %d: %lld steps are too many",
                   c->epochs, (long long)total);
        c->steps = (int)total;
    }
    t->fingerprint = zs_docs_fingerprint(&t->data.train, &t->docr);
    const char *trace = getenv("ZS_DATA_TRACE");
    if (trace && *trace) {
        char p[4200];
        snprintf(p, sizeof p, "%s.rank%d", trace, t->rank);
        t->trace = fopen(p, "a");
        ZS_REQUIRE(t->trace, ZS_ERR_IO, "ZS_DATA_TRACE: cannot open %s", p);
    }
fail:
    return st;
}

void zs_trainer_docs_free(zs_trainer_t *t) {
    zs_docs_index_free(&t->dtrain);
    zs_docs_index_free(&t->dval);
    if (t->trace) fclose(t->trace);
    t->trace = NULL;
}

zs_status zs_trainer_docs_fill(zs_trainer_t *t, int64_t step, int first, int32_t *in, int32_t *tg,
                               int32_t *seg) {
    const zs_train_config *c = &t->cfg;
    const int T = c->seq;
    if (t->trace) fprintf(t->trace, "%lld %d %d", (long long)step, t->rank, first);
    for (int r = 0; r < t->micro; r++) {
        int64_t s =
            zs_docs_step_sample(c->module.seed, t->dtrain.n_samples, c->batch, step, first + r);
        zs_docs_row(&t->dtrain, &t->docr, s, in + (size_t)r * T, tg + (size_t)r * T,
                    seg ? seg + (size_t)r * T : NULL);
        if (t->trace) fprintf(t->trace, " %lld", (long long)s);
    }
    if (t->trace) {
        fputc('\n', t->trace);
        fflush(t->trace);
    }
    return ZS_OK;
}

int64_t zs_trainer_docs_targets(const zs_trainer_t *t, int64_t step) {
    const zs_train_config *c = &t->cfg;
    int64_t n = 0;
    for (int i = 0; i < c->batch; i++)
        n += zs_docs_row_targets(
            &t->dtrain, &t->docr,
            zs_docs_step_sample(c->module.seed, t->dtrain.n_samples, c->batch, step, i));
    return n;
}

/* Validation sample of slot i of batch k: the split in order, from its start again when the
 * batches asked for outnumber its samples (as the windows of a run without documents). */
/* Sample i of validation batch k; one past the split is an empty row (zs_docs_row), so each
 * sample counts once. */
static int64_t val_sample(const zs_trainer_t *t, int64_t k, int i) {
    return k * t->cfg.batch + i;
}

void zs_trainer_docs_val_fill(zs_trainer_t *t, int64_t k, int first, int32_t *in, int32_t *tg,
                              int32_t *seg) {
    const int T = t->cfg.seq;
    for (int r = 0; r < t->micro; r++)
        zs_docs_row(&t->dval, &t->docr, val_sample(t, k, first + r), in + (size_t)r * T,
                    tg + (size_t)r * T, seg ? seg + (size_t)r * T : NULL);
}

int64_t zs_trainer_docs_val_targets(const zs_trainer_t *t, int64_t k) {
    int64_t n = 0;
    for (int i = 0; i < t->cfg.batch; i++)
        n += zs_docs_row_targets(&t->dval, &t->docr, val_sample(t, k, i));
    return n;
}

zs_status zs_trainer_data_position(const zs_trainer_t *t, int64_t step, zs_data_position *out) {
    memset(out, 0, sizeof *out);
    if (t->cfg.docs == ZS_DOCS_NONE) return ZS_OK;
    if (step < 0) return zs_error(ZS_ERR_INVALID, "data position of step %lld", (long long)step);
    int64_t spe = t->steps_per_epoch, n = t->dtrain.n_samples, b = t->cfg.batch;
    out->samples = n;
    out->steps_per_epoch = spe;
    out->documents = t->dtrain.n_docs;
    out->fingerprint = t->fingerprint;
    out->epoch = step > 0 ? (step - 1) / spe + 1 : 1;
    out->position = step > 0 ? ((step - 1) % spe + 1) * b : 0;
    if (out->position > n) out->position = n;
    return ZS_OK;
}

int zs_trainer_total_steps(const zs_trainer_t *t) {
    return t->cfg.steps;
}

void zs_trainer_docs_info(const zs_trainer_t *t, zs_ckpt_info *in) {
    zs_data_position p;
    if (t->cfg.docs == ZS_DOCS_NONE) return;
    zs_trainer_data_position(t, t->step, &p);
    in->has_docs = 1;
    snprintf(in->docs, sizeof in->docs, "%s", zs_docs_mode_name(t->cfg.docs));
    in->epochs = t->cfg.epochs;
    in->epoch = p.epoch;
    in->epoch_position = p.position;
    in->samples = p.samples;
    in->steps_per_epoch = p.steps_per_epoch;
    in->fingerprint = p.fingerprint;
    in->eos_id = t->docr.eos_id;
    in->pad_id = t->docr.pad_id;
    in->has_doc_sep = t->docr.sep != NULL;
    if (t->docr.sep) snprintf(in->doc_sep, sizeof in->doc_sep, "%s", t->docr.sep);
}

zs_status zs_trainer_docs_check(const zs_trainer_t *t, const zs_ckpt_info *in, const char *dir) {
    zs_status st = ZS_OK;
    const char *mode = zs_docs_mode_name(t->cfg.docs);
    const char *was = in->has_docs ? in->docs : "none";
    ZS_REQUIRE(!strcmp(was, mode), ZS_ERR_INVALID,
               "checkpoint %s was trained with --docs %s, this run has --docs %s: its samples "
               "would not continue the stored run's",
               dir, was, mode);
    if (t->cfg.docs == ZS_DOCS_NONE) return ZS_OK;
    char rules[160];
    if (t->docr.sep)
        snprintf(rules, sizeof rules, "--doc-sep '%s'", t->docr.sep);
    else
        snprintf(rules, sizeof rules, "--eos-id %lld", (long long)t->docr.eos_id);
    ZS_REQUIRE(in->fingerprint == t->fingerprint, ZS_ERR_INVALID,
               "checkpoint %s was trained on other data or other document settings (data "
               "fingerprint %016llx there, %016llx for %s with --seq %d, %s, --pad-id %d): "
               "resuming would not continue its epochs",
               dir, (unsigned long long)in->fingerprint, (unsigned long long)t->fingerprint,
               t->cfg.data_path, t->cfg.seq, rules, t->docr.pad_id);
    ZS_REQUIRE(in->steps_per_epoch == t->steps_per_epoch && in->samples == t->dtrain.n_samples,
               ZS_ERR_INVALID,
               "checkpoint %s: %lld samples in %lld steps per epoch there, %lld in %lld here "
               "(another --batch): the epochs would not continue",
               dir, (long long)in->samples, (long long)in->steps_per_epoch,
               (long long)t->dtrain.n_samples, (long long)t->steps_per_epoch);
fail:
    return st;
}

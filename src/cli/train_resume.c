/* `zshard train --resume`: a resumed run continues the one its checkpoint stores. The model,
 * the batch, the sequence length, the seed, the micro-batching and the schedule come from the
 * checkpoint's manifest unless a flag gives them. A flag that changes what data the run sees
 * or how it is cut (batch, seq, seed) is refused unless --override names it; one that only
 * changes the schedule or the micro-batching (steps, lr, warmup, min-lr-frac, weight decay,
 * grad clip, grad-accum) is taken and listed. A run over documents also takes its --docs mode
 * and document rules (--eos-id, --pad-id, --doc-sep, --epochs) from the checkpoint. */
#include "cli/train_args.h"

#include "ckpt/ckpt.h"
#include "cli/cli.h"
#include "cli/train_ops.h"
#include "core/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *const OVERRIDABLE[] = {"batch", "seq", "seed"};

/* Whether `name` is in the comma-separated list. */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

typedef struct resume_ctx {
    const train_opts *o;
    const char *dir;
    char *changes;
    size_t cap;
} resume_ctx;

static void note(resume_ctx *c, const char *flag, const char *was, const char *now) {
    size_t len = strlen(c->changes);
    snprintf(c->changes + len, c->cap - len, "%s%s %s -> %s", len ? ", " : "", flag, was, now);
}

/* A setting the flags may give: taken from the checkpoint when not given; when given and
 * different, refused (strict, unless --override names it) or noted. Returns 0 or the exit
 * status of the printed error. */
static int setting(resume_ctx *c, unsigned bit, const char *flag, const char *name, int strict,
                   int same, const char *was, const char *now) {
    if (!(c->o->given & bit) || same) return 0;
    if (strict && !listed(c->o->override, name))
        return zs_cli_fail(2,
                           "--resume %s: %s %s differs from the checkpoint's %s, which would "
                           "change the data the run sees: leave %s out to continue the stored "
                           "run, or add --override %s",
                           c->dir, flag, now, was, flag, name);
    note(c, flag, was, now);
    return 0;
}

#define INT_SETTING(bit, flag, name, strict, field, ck)                                            \
    do {                                                                                           \
        char w_[32], n_[32];                                                                       \
        snprintf(w_, sizeof w_, "%d", (int)(ck));                                                  \
        snprintf(n_, sizeof n_, "%d", (int)(field));                                               \
        if ((rc = setting(&c, bit, flag, name, strict, (field) == (ck), w_, n_))) goto done;       \
        if (!(o->given & (bit))) (field) = (ck);                                                   \
    } while (0)

/* Float settings are stored as the float they were (%.9g round-trips it). */
#define FLOAT_SETTING(bit, flag, field, ck)                                                        \
    do {                                                                                           \
        char w_[32], n_[32];                                                                       \
        snprintf(w_, sizeof w_, "%g", (double)(float)(ck));                                        \
        snprintf(n_, sizeof n_, "%g", (double)(field));                                            \
        /* the flag's name without its "--" (&[2]: clang reads "--lr" + 2 as a mistake) */         \
        if ((rc = setting(&c, bit, flag, &(flag)[2], 0, (field) == (float)(ck), w_, n_)))          \
            goto done;                                                                             \
        if (!(o->given & (bit))) (field) = (float)(ck);                                            \
    } while (0)

int zs_train_resume_settings(train_opts *o, char *changes, size_t cap) {
    int rc = 0;
    char dir[4200];
    zs_manifest m;
    memset(&m, 0, sizeof m);
    changes[0] = '\0';
    if (!o->resume) return 0;
    for (const char *p = o->override; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int ok = 0;
        for (size_t i = 0; i < sizeof OVERRIDABLE / sizeof OVERRIDABLE[0]; i++)
            ok |= len == strlen(OVERRIDABLE[i]) && !strncmp(p, OVERRIDABLE[i], len);
        if (!ok)
            return zs_cli_fail(2, "--override: '%.*s' is not one of batch, seq, seed", (int)len, p);
        p = e ? e + 1 : NULL;
    }
    if (zs_ckpt_resolve(o->resume, dir, sizeof dir) != ZS_OK || zs_manifest_load(dir, &m) != ZS_OK)
        return zs_cli_fail(1, "--resume: %s", zs_last_error());
    const zs_ckpt_info *k = &m.info;
    resume_ctx c = {o, dir, changes, cap};
    /* A run over documents continues its epochs only with its own samples: --seq cuts them and
     * --batch counts the epochs' steps, so overriding either cannot continue it. Said here,
     * not as "other data" after the data is read. */
    if (k->has_docs && o->override &&
        (strstr(o->override, "seq") || strstr(o->override, "batch"))) {
        rc = zs_cli_fail(2,
                         "--override %s: %s was trained on documents (--docs %s), whose samples "
                         "--seq cuts and whose epochs --batch counts, so no other seq or batch "
                         "continues it: resume without them, or start a new run from its weights "
                         "with --init-from %s",
                         o->override, dir, k->docs, dir);
        goto done;
    }
    /* The model is the checkpoint's; a --model or --tie-embeddings must agree with it. */
    if (k->model.arch != ZS_ARCH_CUSTOM) {
        if ((rc = zs_cli_model_from_tie("--resume", dir, o->model_set ? o->model_name : NULL,
                                        o->tie, &o->cfg.model)))
            goto done;
        if (!o->cfg.vocab && o->cfg.model.vocab != 256) o->cfg.vocab = o->cfg.model.vocab;
    }
    if (k->batch > 0) { /* the training record (absent from imported checkpoints) */
        INT_SETTING(ZS_GIVEN_BATCH, "--batch", "batch", 1, o->cfg.batch, k->batch);
        INT_SETTING(ZS_GIVEN_SEQ, "--seq", "seq", 1, o->cfg.seq, k->seq);
        char w[32], n[32];
        snprintf(w, sizeof w, "%" PRIu64, k->seed);
        snprintf(n, sizeof n, "%" PRIu64, (uint64_t)o->cfg.module.seed);
        if ((rc = setting(&c, ZS_GIVEN_SEED, "--seed", "seed", 1, o->cfg.module.seed == k->seed, w,
                          n)))
            goto done;
        if (!(o->given & ZS_GIVEN_SEED)) o->cfg.module.seed = k->seed;
        INT_SETTING(ZS_GIVEN_ACCUM, "--grad-accum", "grad-accum", 0, o->cfg.grad_accum,
                    k->grad_accum);
        /* --epochs without --steps: the epochs set the length, not the stored --steps. */
        if (!(o->given & ZS_GIVEN_EPOCHS) || (o->given & ZS_GIVEN_STEPS))
            INT_SETTING(ZS_GIVEN_STEPS, "--steps", "steps", 0, o->cfg.steps, k->total_steps);
        INT_SETTING(ZS_GIVEN_WARMUP, "--warmup", "warmup", 0, o->cfg.warmup, k->warmup);
        FLOAT_SETTING(ZS_GIVEN_LR, "--lr", o->cfg.lr, k->lr);
        FLOAT_SETTING(ZS_GIVEN_MIN_LR, "--min-lr-frac", o->cfg.min_lr_frac, k->min_lr_frac);
        FLOAT_SETTING(ZS_GIVEN_WD, "--weight-decay", o->cfg.weight_decay, k->weight_decay);
        FLOAT_SETTING(ZS_GIVEN_CLIP, "--grad-clip", o->cfg.grad_clip, k->grad_clip);
    }
    /* A run over documents: its mode and document rules, unless the flags give them (the
     * trainer then refuses settings that would not continue its epochs). */
    if (k->has_docs) {
        if (!(o->given & ZS_GIVEN_DOCS) && zs_docs_mode_parse(k->docs, &o->cfg.docs) != ZS_OK) {
            rc = zs_cli_fail(1, "--resume %s: %s", dir, zs_last_error());
            goto done;
        }
        if (!(o->given & ZS_GIVEN_EOS)) o->cfg.eos_id = k->eos_id;
        if (!(o->given & ZS_GIVEN_PAD)) o->cfg.pad_id = k->pad_id;
        if (!(o->given & ZS_GIVEN_EPOCHS)) o->cfg.epochs = (int)k->epochs;
        if (!(o->given & ZS_GIVEN_SEP) && k->has_doc_sep) {
            snprintf(o->doc_sep, sizeof o->doc_sep, "%s", k->doc_sep);
            o->cfg.doc_sep = o->doc_sep;
        }
    }
done:
    zs_manifest_free(&m);
    return rc;
}

/* Documents in a token stream and the samples that document-aware training draws from them
 * (docs/data.md): where each document starts, the samples of a split (pack and concat windows,
 * pad rows), one sample's row of inputs, targets and document starts, and the order of the
 * samples in each epoch. Everything here is a pure function of the data, the rules and
 * (seed, epoch, position): the same on every rank and at every world size. */
#ifndef ZS_DATA_DOCS_H
#define ZS_DATA_DOCS_H

#include "data/data.h"
#include "zshard.h"

#include <stdint.h>

/* How a split is cut into documents and samples. */
typedef struct zs_doc_rules {
    zs_docs_mode mode; /* PACK, CONCAT or PAD */
    int seq;           /* T: inputs per row */
    int64_t eos_id;    /* a document ends with this id (inclusive); -1: none */
    const char *sep;   /* byte-level text: a line equal to this, with its newline, ends a
                          document (inclusive; "" is an empty line); wins over eos_id */
    int32_t pad_id;    /* the input id of padding (pad rows, empty rows) */
} zs_doc_rules;

/* The documents and samples of one split. Document d is tokens [start[d], start[d+1]); a
 * document is a maximal run ending with the end-of-document marker, and a trailing run without
 * one is the last document. */
typedef struct zs_doc_index {
    const zs_tokens *tok; /* the split (not owned) */
    int64_t n_docs;
    int64_t *start;     /* [n_docs + 1] */
    int64_t *row_first; /* PAD: [n_docs + 1], the first row of each document */
    int64_t n_samples;  /* PACK, CONCAT: windows of T+1 tokens, T apart; PAD: rows */
} zs_doc_index;

/* Whether rules find documents at all (an end-of-document id, or a separator for text). */
int zs_docs_have_boundaries(const zs_doc_rules *r);

/* Index split t under r. ZS_ERR_INVALID when it holds no sample (what names the split). */
zs_status zs_docs_index(const zs_tokens *t, const zs_doc_rules *r, const char *what,
                        zs_doc_index *out);
void zs_docs_index_free(zs_doc_index *ix);

/* Row `sample` of the split (sample -1: an empty row, all padding): T inputs, T targets (-1
 * where nothing is to be predicted: padding, and in PACK the target across a document
 * boundary) and, when seg is not NULL, each token's document start in the row (backend/ops.h
 * "Documents"). Returns the number of real targets. */
int zs_docs_row(const zs_doc_index *ix, const zs_doc_rules *r, int64_t sample, int32_t *in,
                int32_t *tg, int32_t *seg);
/* The number of real targets of a row without building it (sample -1: 0). */
int zs_docs_row_targets(const zs_doc_index *ix, const zs_doc_rules *r, int64_t sample);

/* Position `pos` of epoch `epoch` (0-based) in a permutation of [0, n) that is a pure function
 * of (seed, epoch): a Feistel network over Philox on the next power of four, walking cycles
 * back into [0, n). */
int64_t zs_docs_permute(uint64_t seed, int64_t epoch, int64_t n, int64_t pos);

/* The sample in slot i (0 <= i < batch) of the global batch of step `step` (1-based) when
 * every epoch takes ceil(n / batch) steps: -1 for the empty slots of an epoch's last step. */
int64_t zs_docs_step_sample(uint64_t seed, int64_t n, int batch, int64_t step, int i);
/* Steps per epoch: ceil(n / batch). */
int64_t zs_docs_steps_per_epoch(int64_t n, int batch);

/* Move the start of the validation tail forward to the next document start, so that no
 * document is cut between the splits. d->val must be the tail zs_dataset_open split off
 * d->train (d->train.tok still holds it after d->train.n); nothing moves when the tail holds no
 * document end. */
zs_status zs_docs_align_split(zs_dataset *d, const zs_doc_rules *r);

/* An FNV-1a-style 64-bit hash of the rules that cut the training tokens (byte by byte) and of
 * the tokens (one 32-bit id at a time): what a checkpoint records so that a resume on other
 * data, or other document settings, is refused. */
uint64_t zs_docs_fingerprint(const zs_tokens *train, const zs_doc_rules *r);

#endif

/* The trainer's side of documents (docs/data.md): the dataset description `zshard tokenize`
 * writes beside its shards, and the document rules of a run (docs_setup.c); the batches,
 * validation, positions and checkpoint record of a run with documents (trainer_docs.c). */
#ifndef ZS_TRAIN_DOCS_SETUP_H
#define ZS_TRAIN_DOCS_SETUP_H

#include "data/docs.h"
#include "zshard.h"

/* dataset.json: {"format":"zshard-tokens","version":1,"vocab_size":N,"eos_id":E,"bos_id":B|null,
 * "pad_id":P|null,"doc_boundary":"eos_after","bits":16|32,"train":{...},"val":{...}}. */
typedef struct zs_docs_meta {
    int found; /* 0: there is none; the flags and defaults decide */
    char path[4200];
    int vocab, bits;
    int64_t eos_id, bos_id, pad_id; /* -1 when null */
} zs_docs_meta;

/* Read the dataset.json in the directory of data_path (a file or a pattern), if there is one.
 * A file that is there but malformed, of another format or version, or with ids outside its
 * vocabulary is an error naming it and the field. */
zs_status zs_docs_meta_read(const char *data_path, zs_docs_meta *m);

/* The document rules of configuration c over data of this vocabulary: the end-of-document id
 * (--eos-id, else dataset.json's, else GPT-2's 50256 for its vocabulary), the separator of
 * byte-level text (--doc-sep), the padding id (--pad-id, else dataset.json's, else the
 * end-of-document id, or the separator's first byte). PACK and PAD need document boundaries:
 * without them it is an error saying which flag gives them. */
zs_status zs_docs_resolve(const zs_train_config *c, const zs_docs_meta *m, int vocab, int is_text,
                          zs_doc_rules *r);

#endif

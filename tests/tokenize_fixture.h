/* The scratch folder and corpora of the tokenize tests (test_tokenize for the library,
 * test_tokenize_cli for the command): paths that live for the whole run, an identity
 * tokenizer (each byte is the id of its value, so expected ids are a document's own bytes),
 * and the small corpora both tests read. */
#ifndef ZS_TOKENIZE_FIXTURE_H
#define ZS_TOKENIZE_FIXTURE_H

#include <stddef.h>

/* Makes the run's scratch folder /tmp/zs_test_<name>_XXXXXX; call once after zt_init. */
void tk_begin(const char *name);
/* The folder itself, and a path in it valid until tk_end. */
const char *tk_dir(void);
const char *tk_path(const char *name);
/* Removes the folder when rc is 0 (a failed run keeps it to look at), frees the paths and
 * returns rc. */
int tk_end(int rc);

void tk_write_bytes(const char *p, const void *b, size_t n);
void tk_write_text(const char *p, const char *s);
/* The identity tokenizer in dir: ids 0..255 are the bytes, EOS <|endoftext|> is eos_id; with
 * bos, <s> (id 257) is put in front of each sequence by the template. */
void tk_write_ident(const char *dir, int eos_id, int bos);

/* The corpora, each at the same path whichever test writes it:
 * - "t1": Fortune-style %-separated text, a CRLF file, invalid UTF-8, empty and blank
 *   documents, a binary file (6 documents kept, 3 skipped); also writes "ident" (EOS 256);
 * - "d.jsonl": JSONL lines that are plain, escaped, blank, invalid, truncated, lack the field
 *   or hold a non-string;
 * - "th": three files of 6000 random documents each, enough for many batches. */
void tk_write_t1(void);
void tk_write_jsonl(void);
void tk_write_th(void);

#endif

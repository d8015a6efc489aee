/* Text given to a command that wants tokens (`eval --data text --tokenizer DIR`): the text is
 * tokenized into a temporary folder by the rules of `zshard tokenize` (documents, EOS after
 * each, BOS where the template has one), and the command reads those shards. */
#include "cli/cli.h"
#include "core/status.h"
#include "data/tokenize.h"
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int zs_cli_text_to_shards(const char *cmd, const char *input, const char *tokenizer,
                          const char *doc_sep, const char *field, zs_cli_temp_shards *out) {
    memset(out, 0, sizeof *out);
    const char *tmp = getenv("TMPDIR");
    snprintf(out->dir, sizeof out->dir, "%s/zshard_%s_XXXXXX", tmp && *tmp ? tmp : "/tmp", cmd);
    if (!mkdtemp(out->dir)) return zs_cli_fail(1, "%s: cannot create %s", cmd, out->dir);
    zs_tokenize_config c = zs_tokenize_config_default();
    const char *inputs[1] = {input};
    c.corpus.inputs = inputs;
    c.corpus.n_inputs = 1;
    c.corpus.doc_sep = doc_sep;
    if (field) c.corpus.field = field;
    c.tokenizer = tokenizer;
    c.out_dir = out->dir;
    c.val_frac = 0; /* the command splits the stream itself (eval's --split) */
    c.shard_size = 1 << 30;
    c.threads = zs_cli_cores();
    zs_tokenize_stats s;
    if (zs_tokenize_run(&c, &s) != ZS_OK) {
        int rc = zs_cli_fail(1, "%s: tokenizing %s: %s", cmd, input, zs_last_error());
        zs_cli_temp_shards_remove(out);
        return rc;
    }
    if (!s.docs[0]) {
        zs_cli_temp_shards_remove(out);
        return zs_cli_fail(1, "%s: %s holds no document to tokenize", cmd, input);
    }
    snprintf(out->pattern, sizeof out->pattern, "%s/train_*.bin", out->dir);
    zs_tokenizer_t *t = NULL;
    if (zs_tokenizer_load(tokenizer, &t) == ZS_OK) out->vocab = zs_tokenizer_vocab_size(t);
    zs_tokenizer_destroy(t);
    out->documents = s.docs[0];
    out->tokens = s.tokens[0];
    out->skipped = s.docs_seen - s.docs[0];
    return 0;
}

void zs_cli_temp_shards_remove(zs_cli_temp_shards *t) {
    if (!t->dir[0]) return;
    char p[4400];
    for (int i = 0; i < 1000000; i++) {
        snprintf(p, sizeof p, "%s/train_%06d.bin", t->dir, i);
        if (unlink(p) != 0) break;
    }
    snprintf(p, sizeof p, "%s/dataset.json", t->dir);
    unlink(p);
    rmdir(t->dir);
    t->dir[0] = 0;
}

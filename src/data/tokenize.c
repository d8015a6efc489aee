/* The tokenize pipeline: this thread reads documents into batches and writes finished
 * batches in input order; a pool of threads encodes them. A ring of batches bounds what is in
 * flight (read, being encoded, or waiting to be written), so memory does not grow with the
 * corpus, and since each batch is written in its place, the bytes written do not depend on
 * which thread encoded what. */
#include "core/status.h"
#include "data/tokenize_internal.h"
#include "data/tokenizer.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH_BYTES (1 << 20)
#define BATCH_DOCS 4096

typedef struct batch {
    int state; /* 0 free, 1 read (waiting for a thread), 2 encoding, 3 encoded */
    int n_docs;
    zs_doc docs[BATCH_DOCS]; /* text pointers are offsets into text until encoding */
    size_t text_off[BATCH_DOCS];
    char *text;
    size_t text_len, text_cap;
    int32_t *ids;
    size_t n_ids, cap_ids;
    size_t id_off[BATCH_DOCS + 1];
    zs_tok_counts counts;
    zs_status st;
    char err[512];
} batch;

typedef struct job {
    const zs_tokenize_config *cfg;
    const zs_tokenizer_t *tok;
    int eos;
    const int *pre, *post;
    int n_pre, n_post;
    batch *ring;
    int cap;
    int64_t next_read, next_encode, next_write;
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
} job;

zs_tokenize_config zs_tokenize_config_default(void) {
    zs_tokenize_config c = {0};
    c.corpus = zs_corpus_config_default();
    c.shard_size = 100000000; /* llm.c's fineweb shards */
    c.val_frac = 0.1;
    c.seed = 1337;
    c.threads = 1;
    c.progress_s = 0.5;
    return c;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int zs_tokenize_is_val(uint64_t seed, int64_t index, double val_frac) {
    uint64_t h = splitmix64(splitmix64(seed) ^ (uint64_t)index);
    return (double)(h >> 11) * 0x1p-53 < val_frac;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- encoding threads ---------------------------------------------------------------------- */

static int push_ids(batch *b, const int32_t *v, size_t n) {
    if (n == 0) return 1; /* an empty template's ids: v and b->ids may both be NULL */
    if (b->n_ids + n > b->cap_ids) {
        size_t cap = b->cap_ids ? b->cap_ids : 65536;
        while (cap < b->n_ids + n)
            cap *= 2;
        int32_t *g = realloc(b->ids, cap * sizeof *g);
        if (!g) return 0;
        b->ids = g;
        b->cap_ids = cap;
    }
    memcpy(b->ids + b->n_ids, v, n * sizeof *v);
    b->n_ids += n;
    return 1;
}

/* A document's ids: the template's tokens around the text's, then the EOS unless the template
 * already ends with it. */
static zs_status encode_batch(job *j, zs_tok_encoder_t *enc, batch *b) {
    zs_status st = ZS_OK;
    zs_tok_counts before = *zs_tok_encoder_counts(enc);
    b->n_ids = 0;
    for (int i = 0; i < b->n_docs; i++) {
        zs_doc *d = &b->docs[i];
        b->id_off[i] = b->n_ids;
        if (d->skip != ZS_DOC_OK) continue;
        const int32_t *ids;
        size_t n;
        ZS_CHECK(zs_tok_encoder_encode(enc, b->text + b->text_off[i], d->len, 0, &ids, &n));
        for (size_t k = 0; k < n && !d->eos_in_text; k++)
            d->eos_in_text = ids[k] == j->eos;
        int32_t tail[8];
        int nt = 0;
        for (int k = 0; k < j->n_post; k++)
            tail[nt++] = j->post[k];
        if (!nt || tail[nt - 1] != j->eos) tail[nt++] = j->eos;
        int32_t head[8];
        for (int k = 0; k < j->n_pre; k++)
            head[k] = j->pre[k];
        ZS_REQUIRE(push_ids(b, head, (size_t)j->n_pre) && push_ids(b, ids, n) &&
                       push_ids(b, tail, (size_t)nt),
                   ZS_ERR_OOM, "tokenize: out of memory for the ids of a batch");
    }
    b->id_off[b->n_docs] = b->n_ids;
fail:;
    const zs_tok_counts *after = zs_tok_encoder_counts(enc);
    b->counts.unk = after->unk - before.unk;
    b->counts.byte_fallback = after->byte_fallback - before.byte_fallback;
    b->counts.dropped = after->dropped - before.dropped;
    return st;
}

static void *worker(void *arg) {
    job *j = arg;
    zs_tok_encoder_t *enc = NULL;
    zs_status est = zs_tok_encoder_create(j->tok, &enc);
    char emsg[512];
    snprintf(emsg, sizeof emsg, "%s", est != ZS_OK ? zs_last_error() : "");
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stop && j->next_encode == j->next_read)
            pthread_cond_wait(&j->work, &j->mu);
        if (j->stop) break;
        batch *b = &j->ring[j->next_encode % j->cap];
        j->next_encode++;
        b->state = 2;
        pthread_mutex_unlock(&j->mu);
        zs_status st = est != ZS_OK ? est : encode_batch(j, enc, b);
        pthread_mutex_lock(&j->mu);
        b->st = st;
        if (st != ZS_OK)
            snprintf(b->err, sizeof b->err, "%s", est != ZS_OK ? emsg : zs_last_error());
        b->state = 3;
        pthread_cond_broadcast(&j->done);
    }
    pthread_mutex_unlock(&j->mu);
    zs_tok_encoder_destroy(enc);
    return NULL;
}

/* ---- reading ------------------------------------------------------------------------------- */

static int add_doc(batch *b, const zs_doc *d) {
    if (b->text_len + d->len + 1 > b->text_cap) {
        size_t cap = b->text_cap ? b->text_cap : BATCH_BYTES + 4096;
        while (cap < b->text_len + d->len + 1)
            cap *= 2;
        char *g = realloc(b->text, cap);
        if (!g) return 0;
        b->text = g;
        b->text_cap = cap;
    }
    b->docs[b->n_docs] = *d;
    b->docs[b->n_docs].text = NULL;
    b->text_off[b->n_docs] = b->text_len;
    memcpy(b->text + b->text_len, d->text, d->len);
    b->text_len += d->len;
    b->text[b->text_len++] = 0;
    b->n_docs++;
    return 1;
}

/* Fills b with documents until it holds BATCH_BYTES of text (the last document may take it
 * past that) or BATCH_DOCS of them; *eof at the corpus end. */
static zs_status read_batch(zs_corpus_t *c, batch *b, int *eof) {
    b->n_docs = 0;
    b->text_len = 0;
    b->counts = (zs_tok_counts){0};
    b->st = ZS_OK;
    b->err[0] = 0;
    while (b->n_docs < BATCH_DOCS && b->text_len < BATCH_BYTES) {
        int have;
        zs_doc d;
        zs_status st = zs_corpus_next(c, &d, &have);
        if (st != ZS_OK) return st;
        if (!have) {
            *eof = 1;
            return ZS_OK;
        }
        if (!add_doc(b, &d)) return zs_error(ZS_ERR_OOM, "tokenize: out of memory");
    }
    return ZS_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

static void note_bad(zs_tokenize_stats *s, const zs_corpus_t *c, const zs_doc *d) {
    if (s->n_bad == ZS_TOKENIZE_MAX_BAD) return;
    if (d->line)
        snprintf(s->bad[s->n_bad++], sizeof s->bad[0], "%s:%lld: %s (%s)",
                 zs_corpus_file(c, d->file), (long long)d->line, zs_doc_skip_name(d->skip), d->why);
    else
        snprintf(s->bad[s->n_bad++], sizeof s->bad[0], "%s: %s (%s)", zs_corpus_file(c, d->file),
                 zs_doc_skip_name(d->skip), d->why);
}

static zs_status write_batch(const zs_tokenize_config *cfg, const zs_corpus_t *c, batch *b,
                             zs_split_out out[2], zs_tokenize_stats *s) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(b->st == ZS_OK, b->st, "%s", b->err);
    for (int i = 0; i < b->n_docs; i++) {
        const zs_doc *d = &b->docs[i];
        s->docs_seen++;
        s->utf8_replaced += d->replaced;
        if (d->skip != ZS_DOC_OK) {
            s->skipped[d->skip]++;
            note_bad(s, c, d);
            if (d->line)
                ZS_REQUIRE(!cfg->strict, ZS_ERR_INVALID, "%s:%lld: %s: %s (--strict)",
                           zs_corpus_file(c, d->file), (long long)d->line,
                           zs_doc_skip_name(d->skip), d->why);
            else
                ZS_REQUIRE(!cfg->strict, ZS_ERR_INVALID, "%s: %s: %s (--strict)",
                           zs_corpus_file(c, d->file), zs_doc_skip_name(d->skip), d->why);
            continue;
        }
        int k = zs_tokenize_is_val(cfg->seed, d->index, cfg->val_frac);
        size_t n = b->id_off[i + 1] - b->id_off[i];
        ZS_CHECK(zs_split_out_append(&out[k], b->ids + b->id_off[i], n));
        s->docs[k]++;
        s->tokens[k] += (int64_t)n;
        s->text_bytes += (int64_t)d->len;
        s->eos_in_text += d->eos_in_text;
    }
    s->unk += b->counts.unk;
    s->byte_fallback += b->counts.byte_fallback;
    s->dropped += b->counts.dropped;
fail:
    return st;
}

/* ---- the output folder --------------------------------------------------------------------- */

static int ours(const char *name) {
    size_t L = strlen(name);
    return !strcmp(name, "dataset.json") ||
           ((!strncmp(name, "train_", 6) || !strncmp(name, "val_", 4)) && L > 4 &&
            !strcmp(name + L - 4, ".bin"));
}

/* Creates dir (and its parents); refuses one that holds an earlier output unless overwrite,
 * which removes that output first (so no stale shard is left to be globbed with new ones). */
static zs_status prepare_dir(const char *dir, int overwrite) {
    zs_status st = ZS_OK;
    char p[4096];
    DIR *d = NULL;
    ZS_REQUIRE(strlen(dir) > 0 && strlen(dir) < sizeof p - 1, ZS_ERR_INVALID,
               "tokenize: the output folder name '%s' is empty or too long", dir);
    snprintf(p, sizeof p, "%s", dir);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            ZS_REQUIRE(0, ZS_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
        *q = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        ZS_REQUIRE(0, ZS_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    d = opendir(dir);
    ZS_REQUIRE(d, ZS_ERR_IO, "%s: not a folder that can be read: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (!ours(e->d_name)) continue;
        ZS_REQUIRE(overwrite, ZS_ERR_INVALID,
                   "%s already holds %s from an earlier run: --overwrite replaces that output", dir,
                   e->d_name);
        char f[4400];
        snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
        ZS_REQUIRE(unlink(f) == 0, ZS_ERR_IO, "%s: cannot remove: %s", f, strerror(errno));
    }
fail:
    if (d) closedir(d);
    return st;
}

/* An input named outright inside the output folder that the run would replace (a shard or
 * dataset.json of an earlier run) is refused before anything is removed: --overwrite never
 * deletes an input. */
static zs_status refuse_output_inputs(const zs_tokenize_config *cfg, const zs_corpus_t *c) {
    struct stat od, fd;
    if (stat(cfg->out_dir, &od) != 0) return ZS_OK; /* not there yet: holds nothing */
    for (int i = 0; i < zs_corpus_file_count(c); i++) {
        const char *f = zs_corpus_file(c, i), *slash = strrchr(f, '/');
        char dir[4200];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f) : 1, slash ? f : ".");
        if (!ours(slash ? slash + 1 : f) || stat(dir[0] ? dir : "/", &fd) != 0) continue;
        if (fd.st_dev == od.st_dev && fd.st_ino == od.st_ino)
            return zs_error(ZS_ERR_INVALID,
                            "tokenize: the input %s is an earlier output in --out %s, which this "
                            "run would %s: give another --out, or leave it out of the inputs",
                            f, cfg->out_dir, cfg->overwrite ? "delete (--overwrite)" : "replace");
    }
    return ZS_OK;
}

/* ---- the job ------------------------------------------------------------------------------- */

int zs_tokenize_interrupted(const zs_tokenize_config *cfg) {
    return cfg->cancel ? (int)*cfg->cancel : 0;
}

/* The error of a job stopped by a signal; the fail path then removes the shards it counts. */
static zs_status interrupted(const zs_tokenize_config *cfg, const zs_split_out out[2]) {
    int sig = zs_tokenize_interrupted(cfg), n = out[0].n_files + out[1].n_files;
    return zs_error(ZS_ERR_INVALID,
                    "interrupted by %s: removed the %d shard%s it had begun in %s and wrote no "
                    "dataset.json, so nothing there reads as a finished dataset",
                    sig == SIGINT    ? "SIGINT"
                    : sig == SIGTERM ? "SIGTERM"
                    : sig == SIGHUP  ? "SIGHUP"
                                     : "a signal",
                    n, n == 1 ? "" : "s", cfg->out_dir);
}

zs_status zs_tokenize_run(const zs_tokenize_config *cfg, zs_tokenize_stats *s) {
    zs_status st = ZS_OK;
    zs_tokenizer_t *tok = NULL;
    zs_corpus_t *c = NULL;
    job j = {0};
    pthread_t *th = NULL;
    int n_th = 0, eof = 0, mu_ok = 0;
    zs_split_out out[2] = {{0}, {0}};
    double t0 = now(), last = t0;
    memset(s, 0, sizeof *s);
    ZS_REQUIRE(cfg->out_dir && cfg->tokenizer, ZS_ERR_INVALID,
               "tokenize: an output folder and a tokenizer are required");
    ZS_REQUIRE(cfg->shard_size >= 1 && cfg->shard_size <= INT32_MAX, ZS_ERR_INVALID,
               "tokenize: shard size %lld is out of range [1, %d]", (long long)cfg->shard_size,
               INT32_MAX);
    ZS_REQUIRE(cfg->val_frac >= 0 && cfg->val_frac <= 1, ZS_ERR_INVALID,
               "tokenize: val fraction %g is out of range [0, 1]", cfg->val_frac);
    ZS_REQUIRE(cfg->threads >= 1 && cfg->threads <= 1024, ZS_ERR_INVALID,
               "tokenize: %d threads is out of range [1, 1024]", cfg->threads);
    ZS_CHECK(zs_tokenizer_load(cfg->tokenizer, &tok));
    j.eos = cfg->eos ? zs_tokenizer_id(tok, cfg->eos) : zs_tokenizer_eos(tok);
    ZS_REQUIRE(!cfg->eos || j.eos >= 0, ZS_ERR_INVALID, "tokenize: --eos '%s' is not a token of %s",
               cfg->eos, cfg->tokenizer);
    ZS_REQUIRE(j.eos >= 0, ZS_ERR_INVALID,
               "tokenize: %s names no EOS token (tokenizer_config.json eos_token, or a token "
               "<|endoftext|>, </s>, <|end_of_text|>): name one with --eos",
               cfg->tokenizer);
    zs_tokenizer_template(tok, &j.pre, &j.n_pre, &j.post, &j.n_post);
    ZS_REQUIRE(j.n_pre <= 8 && j.n_post <= 7, ZS_ERR_UNSUPPORTED,
               "tokenize: a template of %d + %d tokens", j.n_pre, j.n_post);
    /* The output folder, and earlier runs' token folders, are never inputs (corpus.c). */
    zs_corpus_config cc = cfg->corpus;
    cc.skip_dir = cfg->out_dir;
    ZS_CHECK(zs_corpus_open(&cc, &c));
    s->files = zs_corpus_file_count(c);
    s->total_bytes = zs_corpus_total_bytes(c);
    s->n_left_out = zs_corpus_left_out_count(c);
    for (int i = 0; i < s->n_left_out && i < ZS_CORPUS_MAX_LEFT_OUT; i++)
        snprintf(s->left_out[i], sizeof s->left_out[i], "%s", zs_corpus_left_out(c, i));
    ZS_CHECK(refuse_output_inputs(cfg, c));
    ZS_CHECK(prepare_dir(cfg->out_dir, cfg->overwrite));

    int vocab = zs_tokenizer_vocab_size(tok), bits = vocab <= 65536 ? 16 : 32;
    for (int k = 0; k < 2; k++) {
        out[k].dir = cfg->out_dir;
        out[k].name = k ? "val" : "train";
        out[k].bits = bits;
        out[k].shard_size = cfg->shard_size;
    }
    j.cfg = cfg;
    j.tok = tok;
    j.cap = 2 * cfg->threads + 2;
    j.ring = calloc((size_t)j.cap, sizeof *j.ring);
    th = calloc((size_t)cfg->threads, sizeof *th);
    ZS_REQUIRE(j.ring && th, ZS_ERR_OOM, "tokenize: out of memory");
    ZS_REQUIRE(pthread_mutex_init(&j.mu, NULL) == 0 && pthread_cond_init(&j.work, NULL) == 0 &&
                   pthread_cond_init(&j.done, NULL) == 0,
               ZS_ERR_INVALID, "tokenize: cannot create a lock");
    mu_ok = 1;
    for (; n_th < cfg->threads; n_th++)
        ZS_REQUIRE(pthread_create(&th[n_th], NULL, worker, &j) == 0, ZS_ERR_INVALID,
                   "tokenize: cannot start thread %d: %s", n_th, strerror(errno));

    /* Test hook ZS_FAULT_HOLD_SHARDS=K: once K shards are begun the job waits, as if its input
     * had stalled, until it is cancelled (the tests' way to interrupt it mid-run, no race). */
    const char *hold_env = getenv("ZS_FAULT_HOLD_SHARDS");
    int hold = hold_env && *hold_env ? atoi(hold_env) : 0;
    pthread_mutex_lock(&j.mu);
    for (;;) {
        if (zs_tokenize_interrupted(cfg)) {
            st = interrupted(cfg, out);
            break;
        }
        if (hold > 0 && out[0].n_files + out[1].n_files >= hold) {
            pthread_mutex_unlock(&j.mu);
            usleep(10000);
            pthread_mutex_lock(&j.mu);
            continue;
        }
        if (cfg->progress && now() - last >= cfg->progress_s) {
            last = now();
            s->bytes_read = zs_corpus_bytes_read(c);
            s->seconds = last - t0;
            pthread_mutex_unlock(&j.mu);
            cfg->progress(cfg->progress_ctx, s, 0);
            pthread_mutex_lock(&j.mu);
        }
        batch *w = &j.ring[j.next_write % j.cap];
        if (j.next_write < j.next_read && w->state == 3) {
            pthread_mutex_unlock(&j.mu);
            st = write_batch(cfg, c, w, out, s);
            pthread_mutex_lock(&j.mu);
            if (st != ZS_OK) break;
            w->state = 0;
            j.next_write++;
            continue;
        }
        if (!eof && j.next_read - j.next_write < j.cap) {
            batch *r = &j.ring[j.next_read % j.cap];
            pthread_mutex_unlock(&j.mu);
            st = read_batch(c, r, &eof);
            pthread_mutex_lock(&j.mu);
            if (st != ZS_OK) break;
            if (r->n_docs) {
                r->state = 1;
                j.next_read++;
                pthread_cond_signal(&j.work);
            }
            continue;
        }
        if (eof && j.next_write == j.next_read) break;
        /* Wait for the batch to write; wake up for the progress line now and then. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j.done, &j.mu, &until);
    }
    j.stop = 1;
    pthread_cond_broadcast(&j.work);
    pthread_mutex_unlock(&j.mu);
    /* a read or write cut short by the signal reports the signal, not its EINTR */
    if (st != ZS_OK && zs_tokenize_interrupted(cfg)) st = interrupted(cfg, out);
    ZS_CHECK(st);
    if (zs_tokenize_interrupted(cfg)) { /* arrived after the last batch: still nothing kept */
        st = interrupted(cfg, out);
        goto fail;
    }
    /* Nothing kept is no dataset: said, not written as an empty one. */
    ZS_REQUIRE(s->docs[0] + s->docs[1] > 0, ZS_ERR_INVALID,
               "tokenize: none of the %lld documents read was kept%s%s%s: nothing to write "
               "(tokenize --help: --max-doc-bytes, --field, --format)",
               (long long)s->docs_seen, s->n_bad ? " (the first: " : "", s->n_bad ? s->bad[0] : "",
               s->n_bad ? ")" : "");
    for (int k = 0; k < 2; k++)
        ZS_CHECK(zs_split_out_finish(&out[k]));
    for (int k = 0; k < 2; k++)
        s->shards[k] = out[k].n_files;
    s->bytes_read = zs_corpus_bytes_read(c);
    zs_dataset_info info = {.tokenizer = cfg->tokenizer,
                            .vocab_size = vocab,
                            .eos_id = j.eos,
                            .bos_id = zs_tokenizer_bos(tok),
                            .pad_id = zs_tokenizer_pad(tok),
                            .bits = bits,
                            .pre = j.pre,
                            .post = j.post,
                            .n_pre = j.n_pre,
                            .n_post = j.n_post,
                            .shard_size = cfg->shard_size,
                            .seed = cfg->seed,
                            .val_frac = cfg->val_frac,
                            .inputs = cfg->corpus.inputs,
                            .n_inputs = cfg->corpus.n_inputs,
                            .doc_sep = cfg->corpus.doc_sep,
                            .field = cfg->corpus.field};
    ZS_CHECK(zs_dataset_json_write(cfg->out_dir, &info, s, out));
    s->seconds = now() - t0;
    if (cfg->progress) cfg->progress(cfg->progress_ctx, s, 1);
fail:
    if (mu_ok) {
        pthread_mutex_lock(&j.mu);
        j.stop = 1;
        pthread_cond_broadcast(&j.work);
        pthread_mutex_unlock(&j.mu);
    }
    for (int i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    if (st != ZS_OK) {
        char msg[1024]; /* removing files must not lose the message */
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        for (int k = 0; k < 2; k++)
            zs_split_out_remove(&out[k]);
        zs_error(st, "%s", msg);
    }
    for (int k = 0; k < 2; k++)
        free(out[k].files);
    for (int i = 0; j.ring && i < j.cap; i++) {
        free(j.ring[i].text);
        free(j.ring[i].ids);
    }
    free(j.ring);
    free(th);
    if (mu_ok) {
        pthread_mutex_destroy(&j.mu);
        pthread_cond_destroy(&j.work);
        pthread_cond_destroy(&j.done);
    }
    zs_corpus_close(c);
    zs_tokenizer_destroy(tok);
    return st;
}

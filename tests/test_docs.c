/* Training on documents (docs/data.md) through the real CLI and launcher, on a corpus of short
 * documents separated by '%' lines (written here, so every row can be worked out):
 *  - stage parity: ddp, 1, 2, 3 bitwise with --docs pack and --docs pad on 2 and 3 ranks
 *    (GPT-2's learned positions and LLaMA's RoPE), and with gradient accumulation the pairs;
 *  - the masked loss of a step equals a reference computed here in double, row by row, from
 *    the initial model's logits of each row's real tokens alone, on a batch whose rows hold
 *    different numbers of real targets across ranks and micro-batches; and 2 and 3 ranks
 *    agree with one within the world-size tolerance (a per-rank mean would not);
 *  - epochs: every sample exactly once per epoch across the ranks (their own record of what
 *    they trained, ZS_DATA_TRACE), the last step's missing slots empty, another epoch another
 *    order; the log's epoch and position;
 *  - resume mid-epoch: at another stage (same world size), and at another world size (one rank
 *    with K micro-batches and K ranks with one reduce in the same order, so the bits can be
 *    compared), pack and pad on 2 and 3 ranks: the same per-step losses and param_hash as the
 *    run that never stopped; a resume on other data, or with another --docs, is refused;
 *  - token shards with the dataset.json `zshard tokenize` writes: its end-of-document id and
 *    vocabulary are used, a --vocab that disagrees is refused;
 *  - memory: --mem-report's measured bytes equal the estimate in every category, and the
 *    document starts add exactly their buffers; eval --docs repeats the run's validation loss;
 *  - errors: documents zshard cannot find, --epochs without --docs. */
#include "data/data.h"
#include "runlog.h"
#include "zshard.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NDOCS 60
#define NSMALL 24
static char *g_docs[NDOCS]; /* each document's bytes, its "\n%\n" included */

/* A fixed corpus (its own generator, so every run of the test has the same documents): most
 * documents a few words, every seventh a long one that pad rows split. */
static void make_corpus(void) {
    static const char *words[] = {"the",   "king", "sea",   "of",    "and",  "so",   "then",
                                  "ship",  "sail", "far",   "night", "town", "bell", "ring",
                                  "river", "old",  "green", "stone", "wind", "gold"};
    uint64_t x = 88172645463325252ull;
    char path[600];
    for (int d = 0; d < NDOCS; d++) {
        char buf[2048] = "";
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int n = d % 7 == 3 ? 20 + (int)(x % 20) : 1 + (int)(x % 9);
        for (int w = 0; w < n; w++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            strcat(buf, w ? " " : "");
            strcat(buf, words[x % 20]);
        }
        strcat(buf, ".\n%\n");
        g_docs[d] = strdup(buf);
    }
    const char *names[] = {"docs.txt", "small.txt"};
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/%s", rl_dir(), names[f]);
        FILE *fp = fopen(path, "w");
        ZT_REQUIRE(fp, "create %s", path);
        for (int d = 0; d < (f ? NSMALL : NDOCS); d++)
            fputs(g_docs[d], fp);
        fclose(fp);
    }
}

/* gpt2-tiny (or extra's --model) through --nproc, on docs.txt (extra's --data wins) cut at
 * its '%' lines, or with text 0 on token shards that extra names. */
static rl_run run_data(int text, const char *env, int nproc, const char *stage, const char *extra) {
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s timeout 200", env);
    return rl_train(prefix,
                    "--model gpt2-tiny --data %s/docs.txt %s --seq 16 --lr 3e-3 --warmup 2 "
                    "--val-every 0 --val-batches 2 --sample-len 0 --nproc %d --stage %s "
                    "--comm-timeout 30 %s",
                    rl_dir(), text ? "--doc-sep %" : "", nproc, stage, extra);
}

static rl_run docs_run(const char *env, int nproc, const char *stage, const char *extra) {
    return run_data(1, env, nproc, stage, extra);
}

static rl_run data_ok(int text, const char *env, int nproc, const char *stage, const char *extra) {
    rl_run r = run_data(text, env, nproc, stage, extra);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.n_steps > 0, "N=%d stage %s %s: no complete log", nproc, stage, extra);
    return r;
}

static rl_run docs_ok(const char *env, int nproc, const char *stage, const char *extra) {
    return data_ok(1, env, nproc, stage, extra);
}

/* ---- the log's own records ---------------------------------------------------------------- */

/* The number after "key": in the step record of `step` (or the final record for step 0). */
static double log_value(const char *log, int step, const char *key) {
    FILE *f = fopen(log, "r");
    static char line[1 << 16];
    char want[32], k[64];
    double v = NAN;
    snprintf(want, sizeof want, "{\"step\":%d,", step);
    snprintf(k, sizeof k, "\"%s\":", key);
    while (f && fgets(line, sizeof line, f)) {
        int hit = step ? !strncmp(line, want, strlen(want)) : strstr(line, "\"final\":true") != 0;
        const char *p = hit ? strstr(line, k) : NULL;
        if (p) v = atof(p + strlen(k));
    }
    if (f) fclose(f);
    return v;
}

/* ---- stage parity --------------------------------------------------------------------------- */

static void test_parity(void) {
    static const char *stages[] = {"ddp", "1", "2", "3"};
    const char *modes[] = {"pack", "pad"};
    for (int n = 2; n <= 3; n++)
        for (int m = 0; m < 2; m++) {
            char extra[256], what[96];
            snprintf(extra, sizeof extra, "--docs %s --batch 12 --steps 5", modes[m]);
            rl_run base = docs_ok("", n, "ddp", extra);
            for (int s = 1; s < 4; s++) {
                snprintf(what, sizeof what, "--docs %s N=%d stage %s vs ddp", modes[m], n,
                         stages[s]);
                rl_run r = docs_ok("", n, stages[s], extra);
                rl_check_same(&r, &base, what);
            }
        }
    /* LLaMA: positions through RoPE. */
    rl_run base = docs_ok("", 2, "ddp", "--model llama-tiny --docs pack --batch 8 --steps 4");
    rl_run z3 = docs_ok("", 2, "3", "--model llama-tiny --docs pack --batch 8 --steps 4");
    rl_check_same(&z3, &base, "llama --docs pack N=2 stage 3 vs ddp");
    /* Micro-batches: ddp and 1 reduce once, 2 and 3 per micro-batch: bitwise in pairs. */
    const char *acc = "--docs pad --batch 12 --grad-accum 2 --steps 4";
    rl_run d = docs_ok("", 3, "ddp", acc), one = docs_ok("", 3, "1", acc);
    rl_run two = docs_ok("", 3, "2", acc), three = docs_ok("", 3, "3", acc);
    rl_check_same(&one, &d, "--docs pad grad-accum 2 N=3: stage 1 vs ddp");
    rl_check_same(&three, &two, "--docs pad grad-accum 2 N=3: stage 3 vs stage 2");
    /* Masks change the computation: pack is not concat, and neither is the stream. */
    rl_run pack = docs_ok("", 2, "ddp", "--docs pack --batch 12 --steps 5");
    rl_run concat = docs_ok("", 2, "ddp", "--docs concat --batch 12 --steps 5");
    ZT_CHECK(strcmp(pack.hash, concat.hash) != 0, "pack and concat trained the same weights");
}

/* ---- the masked loss against a reference ----------------------------------------------------- */

/* Pad rows of the documents in order (T = 16): row -> (document, chunk). */
static int pad_row(int T, int64_t row, int *doc, int *chunk) {
    for (int d = 0; d < NDOCS; d++) {
        int L = (int)strlen(g_docs[d]), rows = (L - 1 + T - 1) / T;
        if (row < rows) {
            *doc = d, *chunk = (int)row;
            return 1;
        }
        row -= rows;
    }
    return 0;
}

/* One trace line: "step rank first s0 s1 ..." (the samples of a micro-batch). */
typedef struct trace_line {
    int step, rank, first, n;
    int64_t s[64];
} trace_line;

static int read_trace(const char *prefix, int nranks, trace_line *out, int cap) {
    int n = 0;
    for (int r = 0; r < nranks; r++) {
        char p[700];
        snprintf(p, sizeof p, "%s.rank%d", prefix, r);
        FILE *f = fopen(p, "r");
        ZT_CHECK(f, "no trace %s", p);
        char line[4096];
        while (f && n < cap && fgets(line, sizeof line, f)) {
            trace_line *t = &out[n++];
            char *e = line;
            t->step = (int)strtol(e, &e, 10);
            t->rank = (int)strtol(e, &e, 10);
            t->first = (int)strtol(e, &e, 10);
            for (t->n = 0; t->n < 64; t->n++) {
                char *s = e;
                t->s[t->n] = strtoll(s, &e, 10);
                if (e == s) break;
            }
        }
        if (f) fclose(f);
    }
    return n;
}

static void test_loss_reference(void) {
    const int T = 16, B = 8;
    char env[800], prefix[600], extra[800];
    snprintf(prefix, sizeof prefix, "%s/lossref", rl_dir());
    snprintf(env, sizeof env, "ZS_DATA_TRACE=%s", prefix);
    snprintf(extra, sizeof extra,
             "--docs pad --batch %d --grad-accum 2 --steps 1 --val-data %s/docs.txt --seed 7", B,
             rl_dir());
    rl_run r = docs_ok(env, 2, "3", extra);
    static trace_line tl[16];
    int n = read_trace(prefix, 2, tl, 16);
    ZT_CHECK(n == 4, "trace of 2 ranks x 2 micro-batches: %d lines", n);
    /* The initial model, in this process: each row's real tokens alone (no padding, no other
     * row), logits to a double log-softmax. */
    zs_train_config c = zs_train_config_default();
    char data[600];
    snprintf(data, sizeof data, "%s/docs.txt", rl_dir());
    c.data_path = data;
    c.batch = 1;
    c.seq = T;
    c.module.seed = 7;
    zs_trainer_t *t = NULL;
    ZT_OK(zs_trainer_create(&c, &t));
    double sum = 0;
    int64_t count = 0;
    int per_micro[4], distinct = 0;
    float *logits = zt_malloc((size_t)T * 256 * sizeof(float));
    for (int i = 0; i < n; i++) {
        per_micro[i] = 0;
        for (int j = 0; j < tl[i].n; j++) {
            int d = 0, ch = 0;
            ZT_REQUIRE(tl[i].s[j] >= 0 && pad_row(T, tl[i].s[j], &d, &ch), "sample %lld",
                       (long long)tl[i].s[j]);
            const char *doc = g_docs[d] + ch * T;
            int m = (int)strlen(doc) - 1 < T ? (int)strlen(doc) - 1 : T;
            int32_t tok[16];
            for (int k = 0; k < m; k++)
                tok[k] = (unsigned char)doc[k];
            ZT_OK(zs_trainer_forward_logits(t, tok, 1, m, logits));
            for (int k = 0; k < m; k++) {
                const float *l = logits + (size_t)k * 256;
                double mx = -INFINITY, z = 0;
                for (int v = 0; v < 256; v++)
                    mx = fmax(mx, l[v]);
                for (int v = 0; v < 256; v++)
                    z += exp((double)l[v] - mx);
                sum += mx + log(z) - l[(unsigned char)doc[k + 1]];
            }
            count += m;
            per_micro[i] += m;
        }
        for (int k = 0; k < i; k++)
            distinct |= per_micro[k] != per_micro[i];
    }
    zs_trainer_destroy(t);
    free(logits);
    double want = sum / (double)count, got = r.n_steps ? r.lossv[0] : NAN;
    printf("masked loss: step 1 %.9g, reference %.9g over %lld targets (micro-batches hold %d %d "
           "%d %d)\n",
           got, want, (long long)count, per_micro[0], per_micro[1], per_micro[2], per_micro[3]);
    ZT_CHECK(distinct, "the rows' real targets came out even: the test needs uneven ones");
    /* fp32 logits are the same bits either way (a row's real tokens see only each other); the
     * difference is the fp32 softmax and the loss sums: 1e-6 relative. */
    ZT_CHECK(fabs(got - want) <= 1e-6 * fabs(want), "masked loss %.9g vs reference %.9g", got,
             want);

    /* The mean over the global batch, not per rank: 2 and 3 ranks agree with one. */
    char d1[700], dn[700];
    snprintf(extra, sizeof extra, "--docs pad --batch 12 --steps 6 --dump-params %s/pad1.bin",
             rl_dir());
    rl_run one = docs_ok("", 1, "ddp", extra);
    snprintf(d1, sizeof d1, "%s/pad1.bin", rl_dir());
    size_t n1, nn;
    float *p1 = rl_read_params(d1, &n1);
    for (int w = 2; w <= 3; w++) {
        snprintf(extra, sizeof extra, "--docs pad --batch 12 --steps 6 --dump-params %s/pad%d.bin",
                 rl_dir(), w);
        rl_run rw = docs_ok("", w, "3", extra);
        snprintf(dn, sizeof dn, "%s/pad%d.bin", rl_dir(), w);
        float *pn = rl_read_params(dn, &nn);
        /* tests/test_parity.c's tolerances: 1e-5 relative on losses, 1e-4 on parameters. */
        for (int s = 0; s < one.n_steps && s < rw.n_steps; s++)
            ZT_CHECK(fabs(rw.lossv[s] - one.lossv[s]) <= 1e-5 * fabs(one.lossv[s]),
                     "--docs pad N=%d step %d loss %.9g vs N=1 %.9g", w, s + 1, rw.lossv[s],
                     one.lossv[s]);
        double worst = nn == n1 ? rl_max_abs_diff(pn, p1, n1) : INFINITY;
        ZT_CHECK(worst <= 1e-4, "--docs pad N=%d parameters differ from N=1 by %g", w, worst);
        free(pn);
    }
    free(p1);
}

/* ---- epochs -----------------------------------------------------------------------------------
 */

static void test_epochs(void) {
    const int B = 12, N = 3;
    char env[800], prefix[600], extra[800];
    snprintf(prefix, sizeof prefix, "%s/epochs", rl_dir());
    snprintf(env, sizeof env, "ZS_DATA_TRACE=%s", prefix);
    snprintf(extra, sizeof extra, "--docs pad --data %s/small.txt --batch %d --epochs 2", rl_dir(),
             B);
    rl_run r = docs_ok(env, N, "2", extra);
    const char *log = rl_last_log();
    int samples = (int)log_value(log, 1, "samples"), spe = (samples + B - 1) / B;
    ZT_CHECK(samples > B && r.n_steps == 2 * spe, "%d samples: %d steps for 2 epochs, want %d",
             samples, r.n_steps, 2 * spe);
    static trace_line tl[256];
    int n = read_trace(prefix, N, tl, 256);
    ZT_CHECK(n == N * r.n_steps, "%d trace lines for %d steps of %d ranks", n, r.n_steps, N);
    int *seen = calloc((size_t)samples, sizeof *seen), *order[2];
    order[0] = zt_malloc((size_t)spe * B * sizeof(int));
    order[1] = zt_malloc((size_t)spe * B * sizeof(int));
    for (int e = 0; e < 2; e++) {
        int empty = 0, bad = 0;
        memset(seen, 0, (size_t)samples * sizeof *seen);
        for (int i = 0; i < n; i++) {
            int step = tl[i].step;
            if ((step - 1) / spe != e) continue;
            for (int j = 0; j < tl[i].n; j++) {
                int64_t s = tl[i].s[j];
                int slot = (step - 1 - e * spe) * B + tl[i].first + j;
                order[e][slot] = (int)s;
                if (s < 0)
                    empty += step == (e + 1) * spe;
                else if (s < samples)
                    seen[s]++;
                else
                    bad++;
            }
        }
        for (int s = 0; s < samples; s++)
            bad += seen[s] != 1;
        ZT_CHECK(bad == 0 && empty == spe * B - samples,
                 "epoch %d: %d samples not seen exactly once, %d empty slots (want %d)", e + 1, bad,
                 empty, spe * B - samples);
    }
    ZT_CHECK(memcmp(order[0], order[1], (size_t)spe * B * sizeof(int)) != 0,
             "epoch 2 repeats epoch 1's order");
    /* The log: the last step of epoch 1 took all its samples, the next is in epoch 2. */
    ZT_CHECK(log_value(log, spe, "epoch") == 1 && log_value(log, spe, "position") == samples &&
                 log_value(log, spe + 1, "epoch") == 2 && log_value(log, spe + 1, "position") == B,
             "log: epoch and position around the epoch boundary");
    free(seen), free(order[0]), free(order[1]);
    /* --steps caps --epochs. */
    snprintf(extra, sizeof extra, "--docs pack --data %s/small.txt --batch %d --epochs 5 --steps 3",
             rl_dir(), B);
    rl_run capped = docs_ok("", 1, "ddp", extra);
    ZT_CHECK(capped.n_steps == 3, "--epochs 5 --steps 3 ran %d steps", capped.n_steps);
}

/* ---- resume ---------------------------------------------------------------------------------- */

/* Loss of `step` in r, or NULL. */
static const char *loss_at(const rl_run *r, int step) {
    for (int i = 0; i < r->n_steps; i++)
        if (r->step[i] == step) return r->loss[i];
    return NULL;
}

static void same_tail(const rl_run *full, const rl_run *res, const char *what) {
    int eq = res->n_steps > 0 && !strcmp(full->hash, res->hash);
    for (int i = 0; eq && i < res->n_steps; i++) {
        const char *l = loss_at(full, res->step[i]);
        eq = l && !strcmp(res->loss[i], l);
    }
    ZT_CHECK(eq, "%s: resumed run differs (hash %s vs %s, %d steps from %d)", what, res->hash,
             full->hash, res->n_steps, res->n_steps ? res->step[0] : 0);
}

static void test_resume(void) {
    /* ZeRO-2/3 on one rank add K micro-batches' gradients in the order K ranks reduce them
     * (each micro-batch from zero, then rank order), so with one thread per rank everywhere
     * (OpenBLAS's sums depend on its threads) and clipping off (the gradient norm is summed
     * through each world size's own shards) one rank and K ranks give the same bits. */
    const char *env = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1";
    const char *modes[] = {"pack", "pad"};
    for (int c = 0; c < 4; c++) {
        int m = c % 2, K = 2 + c / 2; /* pack and pad, on 2 and on 3 ranks */
        char base[400], extra[1200], what[160];
        snprintf(base, sizeof base,
                 "--docs %s --data %s/small.txt --seq 32 --batch 12 --epochs 3 --grad-clip 0",
                 modes[m], rl_dir());
        snprintf(extra, sizeof extra, "%s --save-dir %s/full%d --save-every 1", base, rl_dir(), c);
        rl_run full = docs_ok(env, K, "3", extra);
        int spe = (int)log_value(rl_last_log(), 1, "samples");
        spe = (spe + 11) / 12;
        int mid = spe + spe / 2; /* in the middle of epoch 2 */
        ZT_CHECK(full.n_steps == 3 * spe && mid > spe && mid < 2 * spe, "%s: %d steps, %d/epoch",
                 modes[m], full.n_steps, spe);
        /* Same world size, another stage. */
        snprintf(extra, sizeof extra, "%s --resume %s/full%d/step_%08d", base, rl_dir(), c, mid);
        snprintf(what, sizeof what, "--docs %s: N=%d stage 3 -> ddp at step %d", modes[m], K, mid);
        same_tail(&full, (rl_run[]){docs_ok(env, K, "ddp", extra)}, what);
        /* Another world size: one rank with K micro-batches until mid-epoch, then K ranks. */
        snprintf(extra, sizeof extra, "%s --grad-accum %d --save-dir %s/one%d --save-every %d",
                 base, K, rl_dir(), c, mid);
        rl_run one = docs_ok(env, 1, "2", extra);
        ZT_CHECK(!strcmp(one.hash, full.hash),
                 "--docs %s: 1 rank x %d micro-batches (%s) vs %d "
                 "ranks (%s): not the same bits, so the resume below compares nothing",
                 modes[m], K, one.hash, K, full.hash);
        snprintf(extra, sizeof extra, "%s --grad-accum 1 --resume %s/one%d/step_%08d", base,
                 rl_dir(), c, mid);
        snprintf(what, sizeof what, "--docs %s: 1 rank -> %d ranks at step %d (epoch 2)", modes[m],
                 K, mid);
        same_tail(&full, (rl_run[]){docs_ok(env, K, "3", extra)}, what);
        /* And back: K ranks' checkpoint continued by one rank. */
        snprintf(extra, sizeof extra, "%s --grad-accum %d --resume %s/full%d/step_%08d", base, K,
                 rl_dir(), c, mid);
        snprintf(what, sizeof what, "--docs %s: %d ranks -> 1 rank at step %d", modes[m], K, mid);
        same_tail(&full, (rl_run[]){docs_ok(env, 1, "3", extra)}, what);
    }
    /* The checkpoint records where the data stands; other data or settings are refused. */
    char p[700], extra[1200];
    snprintf(p, sizeof p, "%s/full0/step_00000004/manifest.json", rl_dir());
    char text[8192] = "";
    FILE *f = fopen(p, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    ZT_CHECK(strstr(text, "\"data\":{\"docs\":\"pack\",\"epochs\":3,") &&
                 strstr(text, "\"fingerprint\":\""),
             "manifest data record: %s", p);
    snprintf(extra, sizeof extra,
             "--docs pack --data %s/docs.txt --seq 32 --batch 12 --epochs 3 --grad-clip 0 "
             "--resume %s/full0/step_00000004",
             rl_dir(), rl_dir());
    rl_run other = docs_run("", 2, "3", extra);
    ZT_CHECK(other.rc != 0 && strstr(rl_out, "trained on other data"), "other data: %s", rl_out);
    snprintf(extra, sizeof extra,
             "--docs pad --data %s/small.txt --seq 32 --batch 12 --epochs 3 --grad-clip 0 "
             "--resume %s/full0/step_00000004",
             rl_dir(), rl_dir());
    rl_run mode = docs_run("", 2, "3", extra);
    ZT_CHECK(mode.rc != 0 && strstr(rl_out, "trained with --docs pack"), "other mode: %s", rl_out);
}

/* ---- token shards and dataset.json --------------------------------------------------------- */

static void test_shards(void) {
    /* 300 documents of token ids 4..511 ended by id 3, vocabulary 512; dataset.json says so. */
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/tok", rl_dir());
    ZT_REQUIRE(mkdir(dir, 0777) == 0, "mkdir %s", dir);
    uint16_t *tok = zt_malloc(20000 * sizeof *tok);
    int64_t n = 0, end[300];
    uint64_t x = 12345;
    for (int d = 0; d < 300; d++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int len = 2 + (int)(x % 40);
        for (int k = 0; k < len; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tok[n++] = (uint16_t)(4 + x % 508);
        }
        tok[n++] = 3;
        end[d] = n;
    }
    /* The held-out 10% tail starts at the first document end at or after its cut. */
    int64_t cut = n - (int64_t)((double)n * 0.1);
    int train_docs = 0;
    while (end[train_docs] < cut)
        train_docs++;
    train_docs++;
    snprintf(path, sizeof path, "%s/train_000.bin", dir);
    ZT_OK(zs_llmc_shard_write(path, tok, n));
    free(tok);
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "create %s", path);
    fprintf(f,
            "{\"format\":\"zshard-tokens\",\"version\":1,\"vocab_size\":512,\"eos_id\":3,"
            "\"bos_id\":null,\"pad_id\":null,\"doc_boundary\":\"eos_after\",\"bits\":16,"
            "\"train\":{\"files\":[\"train_000.bin\"],\"documents\":300,\"tokens\":%lld},"
            "\"val\":{\"files\":[],\"documents\":0,\"tokens\":0}}\n",
            (long long)n);
    fclose(f);
    char extra[1200];
    snprintf(extra, sizeof extra, "--docs pack --data '%s/train_*.bin' --batch 8 --steps 3", dir);
    rl_run r = data_ok(0, "", 2, "3", extra);
    char docs[64];
    snprintf(docs, sizeof docs, "from %d documents", train_docs);
    ZT_CHECK(r.ok && strstr(rl_out, "vocab 512") && strstr(rl_out, docs),
             "token shards with dataset.json: want '%s': %s", docs, rl_out);
    snprintf(extra, sizeof extra,
             "--docs pad --data '%s/train_*.bin' --vocab 1024 --batch 8 --steps 3", dir);
    rl_run bad = run_data(0, "", 1, "ddp", extra);
    ZT_CHECK(bad.rc != 0 && strstr(rl_out, "dataset.json says vocab_size 512"),
             "--vocab against dataset.json: %s", rl_out);
    /* Without dataset.json the end id must be given. */
    unlink(path);
    snprintf(extra, sizeof extra, "--docs pad --data '%s/train_*.bin' --vocab 512", dir);
    rl_run none = run_data(0, "", 1, "ddp", extra);
    ZT_CHECK(none.rc != 0 && strstr(rl_out, "give --eos-id N"), "no end id: %s", rl_out);
    snprintf(extra, sizeof extra,
             "--docs pad --data '%s/train_*.bin' --vocab 512 --eos-id 3 --batch 8 --steps 2", dir);
    data_ok(0, "", 1, "ddp", extra);
    /* shards without dataset.json are not taken for GPT-2's either (another
     * tokenizer's shards, an interrupted tokenize's, once read as GPT-2's and became one
     * document): --docs needs --eos-id, even at GPT-2's vocabulary. */
    snprintf(extra, sizeof extra, "--docs pack --data '%s/train_*.bin' --batch 8 --steps 2", dir);
    none = run_data(0, "", 1, "ddp", extra);
    ZT_CHECK(none.rc != 0 && strstr(rl_out, "no dataset.json beside them") &&
                 strstr(rl_out, "give --eos-id N (50256"),
             "shards without dataset.json at GPT-2's vocabulary: %s", rl_out);
    /* An end id that never occurs: one document over many windows, and the banner says so. */
    snprintf(extra, sizeof extra,
             "--docs pack --data '%s/train_*.bin' --eos-id 50256 --batch 8 --seq 16 --steps 1",
             dir);
    rl_run one = run_data(0, "", 1, "ddp", extra);
    ZT_CHECK(one.rc == 0 && strstr(rl_out, "from 1 document,") &&
                 strstr(rl_out, "warning: the training split is a single document"),
             "--eos-id that never occurs: %s", rl_out);
}

/* ---- memory, eval, errors ------------------------------------------------------------------ */

static void test_memory_eval_errors(void) {
    char extra[1200];
    snprintf(extra, sizeof extra, "--docs pad --batch 8 --steps 2 --mem-report --save-dir %s/ev",
             rl_dir());
    rl_run r = docs_ok("", 2, "3", extra);
    double val = log_value(rl_last_log(), 2, "val_loss");
    for (int k = 0; k < r.world; k++)
        for (int c = 0; c <= ZS_MEM_NCAT; c++)
            ZT_CHECK(r.peak[k][c] == r.est[c],
                     "--docs pad rank %d %s: measured %llu, estimate %llu", k,
                     c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total",
                     (unsigned long long)r.peak[k][c], (unsigned long long)r.est[c]);
    /* The document starts: one device buffer and two staging ones of 4 rows x 16 int32. */
    rl_run plain = docs_ok("", 2, "3", "--docs concat --batch 8 --steps 2");
    ZT_CHECK(r.est[ZS_MEM_WORKSPACE] - plain.est[ZS_MEM_WORKSPACE] == 3 * 4 * 16 * 4,
             "document starts add %llu workspace bytes, want %d",
             (unsigned long long)(r.est[ZS_MEM_WORKSPACE] - plain.est[ZS_MEM_WORKSPACE]),
             3 * 4 * 16 * 4);
    int rc = zt_runf(rl_out, RL_OUT_CAP,
                     "%s mem --data %s/docs.txt --nproc 2 --stage 3 --batch 8 "
                     "--seq 16 --docs pad",
                     zt_zshard_exe(), rl_dir());
    char total[64];
    snprintf(total, sizeof total, "**%.3f**", (double)r.est[ZS_MEM_NCAT] / 1073741824.0);
    ZT_CHECK(rc == 0 && strstr(rl_out, total), "zshard mem --docs pad: want total %s in %s", total,
             rl_out);
    /* eval takes the checkpoint's documents, batch and sequence: the run's validation loss. */
    rc = zt_runf(rl_out, RL_OUT_CAP, "%s eval %s/ev --data %s/docs.txt --batches 2 --json",
                 zt_zshard_exe(), rl_dir(), rl_dir());
    const char *l = strstr(rl_out, "\"loss\":");
    double got = l ? atof(l + 7) : NAN;
    ZT_CHECK(rc == 0 && strstr(rl_out, "\"docs\":\"pad\"") && fabs(got - val) <= 1e-6 * val,
             "eval --docs pad %.9g vs the run's val loss %.9g: %s", got, val, rl_out);
    /* Past the split: each sample counts once. --batches 100 takes the batches that cover the
     * split (the last partly), says so, and gives --batches all's loss and target count. */
    char all[RL_OUT_CAP];
    rc = zt_runf(all, sizeof all, "%s eval %s/ev --data %s/docs.txt --batches all --json",
                 zt_zshard_exe(), rl_dir(), rl_dir());
    int rc100 = zt_runf(rl_out, RL_OUT_CAP,
                        "%s eval %s/ev --data %s/docs.txt --batches 100 --json", zt_zshard_exe(),
                        rl_dir(), rl_dir());
    const char *la = strstr(all, "\"loss\":"), *l100 = strstr(rl_out, "\"loss\":");
    const char *ba = strstr(all, "\"batches\":"), *b100 = strstr(rl_out, "\"batches\":");
    const char *ta = strstr(all, "\"tokens\":"), *t100 = strstr(rl_out, "\"tokens\":");
    int nb = ba ? atoi(ba + 10) : -1;
    ZT_CHECK(rc == 0 && rc100 == 0 && la && l100 && ba && b100 && ta && t100 &&
                 atof(la + 7) == atof(l100 + 7) && nb == atoi(b100 + 10) && nb >= 1 && nb < 100 &&
                 atof(ta + 9) == atof(t100 + 9) && atof(ta + 9) > 0 &&
                 atof(ta + 9) <= (double)nb * 8 * 16 && strstr(rl_out, "not --batches 100"),
             "eval --batches 100 past the val split:\n%s\nagainst --batches all:\n%s", rl_out,
             all);
    /* Errors, each naming what to do. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s train --data %s/docs.txt --docs pack --steps 1 --nproc 2",
             zt_zshard_exe(), rl_dir());
    rc = zt_run(cmd, rl_out, RL_OUT_CAP);
    ZT_CHECK(rc != 0 && strstr(rl_out, "--doc-sep LINE") && strstr(rl_out, "all 2 ranks"),
             "pack on text without --doc-sep: %s", rl_out);
    snprintf(cmd, sizeof cmd, "%s train --data %s/docs.txt --epochs 2 --steps 1", zt_zshard_exe(),
             rl_dir());
    rc = zt_run(cmd, rl_out, RL_OUT_CAP);
    ZT_CHECK(rc != 0 && strstr(rl_out, "--epochs 2 needs --docs"), "--epochs alone: %s", rl_out);
}

int main(void) {
    zt_init("docs");
    rl_setup("docs");
    make_corpus();
    test_parity();
    test_loss_reference();
    test_epochs();
    test_resume();
    test_shards();
    test_memory_eval_errors();
    if (!zt_failures) ZT_CHECK(rl_cleanup() == 0, "cleanup");
    for (int d = 0; d < NDOCS; d++)
        free(g_docs[d]);
    return zt_finish();
}

/* Checkpoint files against the outside world, through the CLI:
 *  - `ckpt inspect` verifies checksums and reports the trainer's param_hash;
 *  - export -> import round trips (safetensors f32, llm.c f32) keep param_hash identical, and
 *    an imported checkpoint fine-tunes with `train --resume`;
 *  - an independent minimal safetensors reader (below, sharing no code with src/ckpt) checks
 *    the exported header JSON, offsets and shapes, and the values against --dump-params
 *    (Conv1D weights transposed);
 *  - every bad input ends in one clear error naming the file and the problem, a non-zero exit
 *    and no partial output: a missing, truncated or bit-flipped rank file, a damaged or
 *    wrong-version manifest, a layout that disagrees with --model, safetensors with bad JSON,
 *    offsets outside the file, a wrong dtype or shape, llm.c files with a wrong magic or
 *    version or truncated. */
#include "models/model.h"
#include "testutil.h"
#include "zshard.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/zshard-test-ckpt-io-XXXXXX";
static char g_out[1 << 16];
static char g_hash[17];

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

#define sh(...) zt_runf(g_out, sizeof g_out, __VA_ARGS__)

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = zt_malloc(*n + 1);
    ZT_REQUIRE(fread(b, 1, *n, f) == *n, "read %s", path);
    b[*n] = 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f && fwrite(b, 1, n, f) == n, "write %s", path);
    fclose(f);
}

/* ---- an independent minimal safetensors reader ------------------------------------------ */

typedef struct st_tensor {
    char name[128], dtype[8];
    long long shape[2], begin, end;
    int ndim;
} st_tensor;

/* Scan the header for `"NAME":{"dtype":"D","shape":[...],"data_offsets":[b,e]}` entries. */
static int st_read(const unsigned char *b, size_t n, st_tensor *t, int cap, size_t *data_start) {
    unsigned long long hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    ZT_REQUIRE(hlen + 8 <= n, "header length %llu", hlen);
    *data_start = 8 + hlen;
    char *hdr = zt_malloc(hlen + 1);
    memcpy(hdr, b + 8, hlen);
    hdr[hlen] = 0;
    ZT_CHECK(hdr[0] == '{' && (8 + hlen) % 8 == 0, "header starts with '{', data 8-aligned");
    int k = 0;
    for (char *p = strstr(hdr, "\":{\"dtype\":\""); p && k < cap;
         p = strstr(p + 1, "\":{\"dtype\":\"")) {
        char *q = p - 1;
        while (q > hdr && *q != '"')
            q--;
        st_tensor *x = &t[k];
        snprintf(x->name, sizeof x->name, "%.*s", (int)(p - q - 1), q + 1);
        int got = sscanf(
            p, "\":{\"dtype\":\"%7[^\"]\",\"shape\":[%lld,%lld],\"data_offsets\":[%lld,%lld]}",
            x->dtype, &x->shape[0], &x->shape[1], &x->begin, &x->end);
        x->ndim = 2;
        if (got != 5) {
            got = sscanf(p,
                         "\":{\"dtype\":\"%7[^\"]\",\"shape\":[%lld],\"data_offsets\":[%lld,%lld]}",
                         x->dtype, &x->shape[0], &x->begin, &x->end);
            x->ndim = 1;
            x->shape[1] = 1;
            ZT_CHECK(got == 4, "entry %s parses", x->name);
        }
        k++;
    }
    free(hdr);
    return k;
}

static void test_safetensors_reader(const char *st_path, const char *dump_path) {
    size_t n, pn;
    unsigned char *b = slurp(st_path, &n);
    float *params = (float *)slurp(dump_path, &pn);
    st_tensor t[64];
    size_t ds;
    int k = st_read(b, n, t, 64, &ds);
    zs_model_config c;
    ZT_OK(zs_model_preset("gpt2-tiny", &c));
    zs_model_config_set_vocab(&c, 256);
    zs_layout l;
    ZT_OK(zs_model_layout(&c, 1, &l));
    ZT_CHECK(k == l.n_tensors, "%d tensors in the header, layout has %d", k, l.n_tensors);
    /* Offsets tile the data section exactly, in order. */
    long long at = 0;
    for (int i = 0; i < k; i++) {
        ZT_CHECK(t[i].begin == at && t[i].end >= t[i].begin, "%s offsets [%lld,%lld] at %lld",
                 t[i].name, t[i].begin, t[i].end, at);
        ZT_CHECK(!strcmp(t[i].dtype, "F32"), "%s dtype %s", t[i].name, t[i].dtype);
        ZT_CHECK(t[i].end - t[i].begin == 4 * t[i].shape[0] * t[i].shape[1], "%s size", t[i].name);
        at = t[i].end;
    }
    ZT_CHECK((size_t)at + ds == n, "data section %lld bytes + header %zu = file %zu", at, ds, n);
    /* Names, shapes and values against the raw parameter dump (layout order, no padding). */
    long long pos = 0;
    for (int i = 0; i < l.n_tensors && i < k; i++) {
        const zs_tensor_desc *d = &l.tensors[i];
        char want[128];
        snprintf(want, sizeof want, "transformer.%s", d->name);
        int tr =
            d->ndim == 2 && (strstr(d->name, "c_attn.weight") || strstr(d->name, "c_proj.weight") ||
                             strstr(d->name, "c_fc.weight"));
        long long r = d->shape[0], cc = d->ndim == 2 ? d->shape[1] : 1;
        long long s0 = tr ? cc : r, s1 = tr ? r : cc;
        ZT_CHECK(!strcmp(t[i].name, want), "tensor %d is %s, want %s", i, t[i].name, want);
        ZT_CHECK(t[i].shape[0] == s0 && t[i].shape[1] == s1,
                 "%s shape [%lld,%lld] want [%lld,%lld]", want, t[i].shape[0], t[i].shape[1], s0,
                 s1);
        const float *x = (const float *)(b + ds + t[i].begin);
        int bad = 0;
        for (long long a = 0; a < s0 && !bad; a++)
            for (long long e = 0; e < s1 && !bad; e++) {
                float v;
                memcpy(&v, x + a * s1 + e, 4);
                float ref = params[pos + (tr ? e * cc + a : a * s1 + e)];
                bad = memcmp(&v, &ref, 4) != 0;
            }
        ZT_CHECK(!bad, "%s values differ from the trained parameters", want);
        pos += d->count;
    }
    zs_layout_free(&l);
    free(b);
    free(params);
}

/* ---- bad inputs --------------------------------------------------------------------------- */

/* A command must fail (exit != 0, no crash) with a message containing both strings. */
static void fails_with(const char *what, const char *s1, const char *s2) {
    ZT_CHECK(strstr(g_out, s1) && strstr(g_out, s2) && strstr(g_out, "zshard"),
             "%s: message should name '%s' and '%s':\n%s", what, s1, s2, g_out);
}

static void expect_fail(int rc, const char *what, const char *s1, const char *s2) {
    ZT_CHECK(rc != 0 && rc < 128, "%s: exit %d (want a clean failure)", what, rc);
    fails_with(what, s1, s2);
    /* One clear error: at most one line from each rank, no stack of messages. */
    int lines = 0;
    for (char *p = g_out; (p = strstr(p, "zshard:")); p++)
        lines++;
    ZT_CHECK(lines >= 1 && lines <= 4, "%s: %d error lines", what, lines);
}

static void no_output(const char *out, const char *what) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    ZT_CHECK(!exists(out) && !exists(tmp), "%s: partial output %s left behind", what, out);
}

static void copy_ckpt(const char *src, const char *dst) {
    ZT_REQUIRE(sh("rm -rf %s && cp -r %s %s", dst, src, dst) == 0, "copy %s", src);
}

static const char *train_args(void) {
    static char a[2048];
    snprintf(a, sizeof a,
             "--data %s/corpus.txt --model gpt2-tiny --batch 8 --seq 32 --lr 3e-3 --warmup 1 "
             "--val-every 0 --val-batches 1 --sample-len 0 --quiet",
             g_dir);
    return a;
}

static void test_bad_checkpoints(const char *good) {
    char d[1024], f[1200], out[1200];
    int rc;
    snprintf(d, sizeof d, "%s/bad", g_dir);
    snprintf(f, sizeof f, "%s/rank_00000.zst", d);

    copy_ckpt(good, d);
    unlink(f);
    rc = sh("%s train %s --steps 6 --resume %s", zt_zshard_exe(), train_args(), d);
    expect_fail(rc, "missing rank file", "rank_00000.zst", "missing");
    rc = sh("%s ckpt inspect %s", zt_zshard_exe(), d);
    expect_fail(rc, "inspect: missing rank file", "rank_00000.zst", "missing");

    copy_ckpt(good, d);
    ZT_REQUIRE(truncate(f, 1000) == 0, "truncate");
    rc = sh("%s train %s --steps 6 --resume %s", zt_zshard_exe(), train_args(), d);
    expect_fail(rc, "truncated rank file", "rank_00000.zst", "truncated");

    copy_ckpt(good, d);
    size_t n;
    unsigned char *b = slurp(f, &n);
    b[n / 2] ^= 0x10;
    spit(f, b, n);
    free(b);
    rc = sh("%s train %s --steps 6 --resume %s", zt_zshard_exe(), train_args(), d);
    expect_fail(rc, "flipped byte", "rank_00000.zst", "checksum mismatch");
    /* The same on two ranks: both learn of it, neither hangs. */
    rc = sh("timeout 60 %s train %s --steps 6 --nproc 2 --stage 3 --comm-timeout 20 --resume %s",
            zt_zshard_exe(), train_args(), d);
    expect_fail(rc, "flipped byte, 2 ranks", "rank_00000.zst", "checksum mismatch");
    /* Export reads master values only: damage the first frame, unit 0's master values. */
    b = slurp(f, &n);
    b[100] ^= 0x01;
    spit(f, b, n);
    free(b);
    snprintf(out, sizeof out, "%s/from_bad.safetensors", g_dir);
    rc = sh("%s ckpt export %s --format safetensors %s", zt_zshard_exe(), d, out);
    expect_fail(rc, "export of a damaged checkpoint", "rank_00000.zst", "checksum mismatch");
    no_output(out, "export of a damaged checkpoint");

    /* The manifest: a changed value breaks its own checksum; a newer version is named. */
    char m[1200];
    snprintf(m, sizeof m, "%s/manifest.json", d);
    copy_ckpt(good, d);
    b = slurp(m, &n);
    char *p = strstr((char *)b, "\"step\":4");
    ZT_REQUIRE(p, "step in manifest");
    p[7] = '5';
    spit(m, b, n);
    rc = sh("%s ckpt inspect %s", zt_zshard_exe(), d);
    expect_fail(rc, "edited manifest", "manifest.json", "checksum mismatch");
    p[7] = '4';
    p = strstr((char *)b, "\"format_version\":2");
    ZT_REQUIRE(p, "version in manifest");
    p[17] = '3';
    spit(m, b, n);
    free(b);
    rc = sh("%s train %s --steps 6 --resume %s", zt_zshard_exe(), train_args(), d);
    expect_fail(rc, "wrong format version", "manifest.json", "format version 3 is not supported");

    rc = sh("%s train %s --steps 6 --resume %s --model gpt2-mini", zt_zshard_exe(), train_args(),
            good);
    /* The model comes from the checkpoint; a --model must agree with it, field by field. */
    expect_fail(rc, "layout vs --model", "--model gpt2-mini contradicts", "n_layer is");
    rc = sh("%s train %s --steps 6 --resume %s/nonexistent", zt_zshard_exe(), train_args(), g_dir);
    expect_fail(rc, "missing checkpoint dir", "nonexistent", "no such directory");
}

static void write_st(const char *path, const char *hdr, size_t data_bytes) {
    size_t hl = strlen(hdr), n = 8 + hl + data_bytes;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((unsigned long long)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    spit(path, b, n);
    free(b);
}

/* Rewrite an existing safetensors file with one substring of its header replaced. */
static void edit_st(const char *src, const char *dst, const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(src, &n);
    unsigned long long hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | b[i];
    char *hdr = zt_malloc(hl + strlen(to) + 1);
    memcpy(hdr, b + 8, hl);
    hdr[hl] = 0;
    char *p = strstr(hdr, from);
    ZT_REQUIRE(p, "'%s' in header", from);
    char *rest = strdup(p + strlen(from));
    strcpy(p, to);
    strcat(p, rest);
    free(rest);
    size_t nl = strlen(hdr), dn = n - 8 - hl;
    unsigned char *o = zt_malloc(8 + nl + dn);
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)((unsigned long long)nl >> (8 * i));
    memcpy(o + 8, hdr, nl);
    memcpy(o + 8 + nl, b + 8 + hl, dn);
    spit(dst, o, 8 + nl + dn);
    free(o);
    free(hdr);
    free(b);
}

static void bad_import(const char *file, const char *fmt, const char *what, const char *msg) {
    char out[1200];
    snprintf(out, sizeof out, "%s/imported_bad", g_dir);
    int rc = sh("%s ckpt import %s --format %s %s", zt_zshard_exe(), file, fmt, out);
    expect_fail(rc, what, strrchr(file, '/') + 1, msg);
    no_output(out, what);
}

static void test_bad_foreign(const char *st, const char *llmc) {
    char f[1200];
    snprintf(f, sizeof f, "%s/bad.safetensors", g_dir);
    write_st(f, "{\"transformer.wte.weight\": nope}", 16);
    bad_import(f, "safetensors", "safetensors bad JSON", "bad JSON header");
    write_st(f,
             "{\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[32,32],\"data_offsets\":[0,"
             "4096]}}",
             16);
    bad_import(f, "safetensors", "safetensors offsets outside", "outside the file");
    write_st(f, "", 0);
    bad_import(f, "safetensors", "safetensors empty header", "header length");
    edit_st(st, f, "\"dtype\":\"F32\"", "\"dtype\":\"I32\"");
    bad_import(f, "safetensors", "safetensors dtype", "dtype I32");
    edit_st(st, f, "\"shape\":[64,192]", "\"shape\":[192,64]");
    bad_import(f, "safetensors", "safetensors shape", "has shape [192,64], expected [64,192]");
    size_t n;
    unsigned char *b = slurp(st, &n);
    spit(f, b, n - 100);
    bad_import(f, "safetensors", "safetensors truncated", "outside the file");
    free(b);

    snprintf(f, sizeof f, "%s/bad.bin", g_dir);
    b = slurp(llmc, &n);
    int32_t *h = (int32_t *)b;
    h[0] = 20240520; /* a token-shard magic, not a model's */
    spit(f, b, n);
    bad_import(f, "llmc", "llm.c wrong magic", "wrong magic 20240520");
    h[0] = 20240326;
    h[1] = 7;
    spit(f, b, n);
    bad_import(f, "llmc", "llm.c wrong version", "unsupported llm.c model version 7");
    h[1] = 3;
    spit(f, b, n - 4);
    bad_import(f, "llmc", "llm.c truncated", "truncated");
    spit(f, b, 100);
    bad_import(f, "llmc", "llm.c header truncated", "truncated");
    free(b);
    char out[1200];
    snprintf(out, sizeof out, "%s/imp_st", g_dir);
    int rc = sh("%s ckpt import %s --format safetensors %s", zt_zshard_exe(), st, out);
    expect_fail(rc, "import onto an existing checkpoint", "imp_st", "already exists");
}

/* LLaMA: HF names as they are (no transposes), untied head; llm.c has no LLaMA format. */
static void test_llama(void) {
    char h1[17], h2[17], st[1200], out[1200];
    int rc = sh("%s train %s --model llama-tiny --steps 2 --save-dir %s/llama", zt_zshard_exe(),
                train_args(), g_dir);
    ZT_CHECK(rc == 0, "llama training: %s", g_out);
    snprintf(out, sizeof out, "%s/llama", g_dir);
    zt_ckpt_hash(out, h1);
    snprintf(st, sizeof st, "%s/llama.safetensors", g_dir);
    rc = sh("%s ckpt export %s/llama --format safetensors %s", zt_zshard_exe(), g_dir, st);
    ZT_CHECK(rc == 0, "llama export: %s", g_out);
    snprintf(out, sizeof out, "%s/llama_imp", g_dir);
    rc = sh("%s ckpt import %s --format safetensors %s", zt_zshard_exe(), st, out);
    ZT_CHECK(rc == 0, "llama import: %s", g_out);
    zt_ckpt_hash(out, h2);
    ZT_CHECK(h1[0] && !strcmp(h1, h2), "llama round trip: param_hash %s vs %s", h2, h1);
    size_t n;
    unsigned char *b = slurp(st, &n);
    ZT_CHECK(strstr((char *)b + 8, "\"model.layers.1.self_attn.k_proj.weight\":{\"dtype\":\"F32\","
                                   "\"shape\":[32,64]") &&
                 strstr((char *)b + 8, "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[256,64]"),
             "llama safetensors names and shapes");
    free(b);
    snprintf(out, sizeof out, "%s/llama.bin", g_dir);
    rc = sh("%s ckpt export %s/llama --format llmc %s", zt_zshard_exe(), g_dir, out);
    expect_fail(rc, "llama to llm.c", "llama-tiny", "GPT-2 models only");
    no_output(out, "llama to llm.c");
}

int main(void) {
    zt_init("ckpt_io");
    ZT_REQUIRE(mkdtemp(g_dir), "mkdtemp");
    char p[1200], st[1200], llmc[1200], dump[1200], ck[1200], h2[17];
    snprintf(p, sizeof p, "%s/corpus.txt", g_dir);
    FILE *f = fopen(p, "w");
    ZT_REQUIRE(f, "corpus");
    for (int i = 0; i < 2000; i++)
        fprintf(f, "The %s of %d and so on. ", i % 3 ? "sea" : "king", i);
    fclose(f);
    snprintf(dump, sizeof dump, "%s/params.bin", g_dir);
    snprintf(ck, sizeof ck, "%s/save/step_00000004", g_dir);
    int rc = sh("%s train %s --steps 4 --save-dir %s/save --dump-params %s", zt_zshard_exe(),
                train_args(), g_dir, dump);
    char *hp = strstr(g_out, "param_hash ");
    ZT_REQUIRE(rc == 0 && hp, "training: %s", g_out);
    snprintf(g_hash, sizeof g_hash, "%.16s", hp + 11);
    zt_ckpt_hash(ck, h2);
    ZT_CHECK(!strcmp(h2, g_hash), "inspect param_hash %s vs trainer %s", h2, g_hash);

    snprintf(st, sizeof st, "%s/model.safetensors", g_dir);
    snprintf(llmc, sizeof llmc, "%s/model.bin", g_dir);
    rc = sh("%s ckpt export %s/save --format safetensors %s", zt_zshard_exe(), g_dir, st);
    ZT_CHECK(rc == 0, "export safetensors: %s", g_out);
    rc = sh("%s ckpt export %s --format llmc %s", zt_zshard_exe(), ck, llmc);
    ZT_CHECK(rc == 0, "export llmc: %s", g_out);
    rc = sh("%s ckpt export %s --format llmc %s", zt_zshard_exe(), ck, llmc);
    expect_fail(rc, "export onto an existing file", "model.bin", "already exists");
    test_safetensors_reader(st, dump);
    size_t n;
    unsigned char *b = slurp(llmc, &n);
    const int32_t *hd = (const int32_t *)b;
    ZT_CHECK(hd[0] == 20240326 && hd[1] == 3 && hd[2] == 256 && hd[3] == 256 && hd[4] == 2 &&
                 hd[5] == 4 && hd[6] == 64 && hd[7] == 256,
             "llm.c header %d %d %d %d %d %d %d %d", hd[0], hd[1], hd[2], hd[3], hd[4], hd[5],
             hd[6], hd[7]);
    free(b);

    /* Round trips: identical parameters, hence identical param_hash. */
    const char *fmts[2] = {"safetensors", "llmc"}, *files[2] = {st, llmc};
    for (int i = 0; i < 2; i++) {
        char out[1200], h[17];
        snprintf(out, sizeof out, "%s/imp_%s", g_dir, i ? "llmc" : "st");
        rc = sh("%s ckpt import %s --format %s %s", zt_zshard_exe(), files[i], fmts[i], out);
        ZT_CHECK(rc == 0, "import %s: %s", fmts[i], g_out);
        zt_ckpt_hash(out, h);
        ZT_CHECK(!strcmp(h, g_hash), "%s round trip: param_hash %s vs %s", fmts[i], h, g_hash);
    }
    /* An imported checkpoint is step 0 and fine-tunes, here on two ZeRO-1 ranks. */
    rc = sh("timeout 60 %s train %s --steps 2 --nproc 2 --stage 1 --resume %s/imp_st",
            zt_zshard_exe(), train_args(), g_dir);
    ZT_CHECK(rc == 0 && strstr(g_out, "summary: 2 steps"), "fine-tune from import: %s", g_out);

    test_llama();
    test_bad_checkpoints(ck);
    test_bad_foreign(st, llmc);
    snprintf(p, sizeof p, "rm -rf %s", g_dir);
    if (!zt_failures) ZT_CHECK(system(p) == 0, "cleanup");
    return zt_finish();
}

/* Model config files: one flat JSON object of numbers and strings describing a GPT-2 or
 * LLaMA shape (docs/models.md). Strict on purpose: an unknown, duplicated, missing or
 * inconsistent field is an error naming the file and the field, never a silent default. */
#include "models/model.h"

#include "core/status.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_MAX_BYTES (64 * 1024)

enum {
    F_ARCH,
    F_NAME,
    F_LAYER,
    F_HEAD,
    F_KV,
    F_EMBD,
    F_FFN,
    F_SEQ,
    F_THETA,
    F_EPS,
    F_VOCAB,
    F_TIE,
    NF
};

static const char *const FIELD[NF] = {"arch",       "name",     "n_layer",    "n_head",
                                      "n_kv_head",  "n_embd",   "ffn_hidden", "max_seq",
                                      "rope_theta", "norm_eps", "vocab",      "tie_embeddings"};

typedef struct cfg_parse {
    const char *path, *p;
    int seen[NF];
    double num[NF];
    char str[NF][64];
    int tie; /* tie_embeddings: true or false */
} cfg_parse;

static void skip_ws(cfg_parse *c) {
    while (isspace((unsigned char)*c->p))
        c->p++;
}

static zs_status parse_string(cfg_parse *c, char *out, size_t cap) {
    zs_status st = ZS_OK;
    size_t n = 0;
    ZS_REQUIRE(*c->p == '"', ZS_ERR_FORMAT, "%s: expected a string at '%.12s'", c->path, c->p);
    c->p++;
    while (*c->p && *c->p != '"') {
        ZS_REQUIRE(*c->p != '\\' && (unsigned char)*c->p >= 0x20, ZS_ERR_FORMAT,
                   "%s: escapes and control characters are not supported in strings", c->path);
        ZS_REQUIRE(n + 1 < cap, ZS_ERR_FORMAT, "%s: string longer than %zu characters", c->path,
                   cap - 1);
        out[n++] = *c->p++;
    }
    ZS_REQUIRE(*c->p == '"', ZS_ERR_FORMAT, "%s: unterminated string", c->path);
    c->p++;
    out[n] = 0;
fail:
    return st;
}

static zs_status parse_pair(cfg_parse *c) {
    zs_status st = ZS_OK;
    char key[64];
    int f;
    ZS_CHECK(parse_string(c, key, sizeof key));
    for (f = 0; f < NF && strcmp(key, FIELD[f]); f++) {
    }
    ZS_REQUIRE(f < NF, ZS_ERR_INVALID,
               "%s: unknown field \"%s\" (known: arch, name, n_layer, n_head, n_kv_head, "
               "n_embd, ffn_hidden, max_seq, rope_theta, norm_eps, vocab, tie_embeddings)",
               c->path, key);
    ZS_REQUIRE(!c->seen[f], ZS_ERR_INVALID, "%s: field \"%s\" given twice", c->path, key);
    c->seen[f] = 1;
    skip_ws(c);
    ZS_REQUIRE(*c->p == ':', ZS_ERR_FORMAT, "%s: expected ':' after \"%s\"", c->path, key);
    c->p++;
    skip_ws(c);
    if (f == F_TIE) {
        int t = !strncmp(c->p, "true", 4), fl = !strncmp(c->p, "false", 5);
        ZS_REQUIRE(t || fl, ZS_ERR_INVALID, "%s: field \"%s\" must be true or false", c->path, key);
        c->tie = t;
        c->p += t ? 4 : 5;
    } else if (f == F_ARCH || f == F_NAME) {
        ZS_REQUIRE(*c->p == '"', ZS_ERR_INVALID, "%s: field \"%s\" must be a string", c->path, key);
        ZS_CHECK(parse_string(c, c->str[f], sizeof c->str[f]));
    } else {
        char *end = NULL;
        errno = 0;
        c->num[f] = strtod(c->p, &end);
        ZS_REQUIRE(end != c->p && errno == 0 && isfinite(c->num[f]), ZS_ERR_INVALID,
                   "%s: field \"%s\" must be a number", c->path, key);
        c->p = end;
    }
fail:
    return st;
}

/* Integer field f into *out: required fields must be present; all must be whole numbers in
 * [1, 2^30]. */
static zs_status get_int(cfg_parse *c, int f, int required, int *out) {
    zs_status st = ZS_OK;
    if (!c->seen[f]) {
        ZS_REQUIRE(!required, ZS_ERR_INVALID, "%s: missing field \"%s\"", c->path, FIELD[f]);
        return ZS_OK;
    }
    double v = c->num[f];
    ZS_REQUIRE(v == floor(v) && v >= 1 && v <= (double)(1 << 30), ZS_ERR_INVALID,
               "%s: field \"%s\" must be a positive integer (got %g)", c->path, FIELD[f], v);
    *out = (int)v;
fail:
    return st;
}

static zs_status parse_file(cfg_parse *c, zs_model_config *cfg) {
    zs_status st = ZS_OK;
    skip_ws(c);
    ZS_REQUIRE(*c->p == '{', ZS_ERR_FORMAT, "%s: not a JSON object", c->path);
    c->p++;
    skip_ws(c);
    while (*c->p != '}') {
        ZS_CHECK(parse_pair(c));
        skip_ws(c);
        if (*c->p == ',') {
            c->p++;
            skip_ws(c);
            ZS_REQUIRE(*c->p == '"', ZS_ERR_FORMAT, "%s: expected a field name after ','", c->path);
        } else {
            ZS_REQUIRE(*c->p == '}', ZS_ERR_FORMAT, "%s: expected ',' or '}' at '%.12s'", c->path,
                       c->p);
        }
    }
    c->p++;
    skip_ws(c);
    ZS_REQUIRE(*c->p == 0, ZS_ERR_FORMAT, "%s: trailing text after the object", c->path);

    ZS_REQUIRE(c->seen[F_ARCH], ZS_ERR_INVALID,
               "%s: missing field \"arch\" (\"gpt2\" or "
               "\"llama\")",
               c->path);
    if (!strcmp(c->str[F_ARCH], "llama"))
        cfg->arch = ZS_ARCH_LLAMA;
    else if (!strcmp(c->str[F_ARCH], "gpt2"))
        cfg->arch = ZS_ARCH_GPT2;
    else
        ZS_REQUIRE(0, ZS_ERR_INVALID, "%s: arch \"%s\" is not \"gpt2\" or \"llama\"", c->path,
                   c->str[F_ARCH]);
    int llama = cfg->arch == ZS_ARCH_LLAMA;
    ZS_CHECK(get_int(c, F_LAYER, 1, &cfg->n_layer));
    ZS_CHECK(get_int(c, F_HEAD, 1, &cfg->n_head));
    ZS_CHECK(get_int(c, F_EMBD, 1, &cfg->n_embd));
    ZS_CHECK(get_int(c, F_SEQ, 1, &cfg->max_seq));
    cfg->n_kv_head = cfg->n_head;
    cfg->ffn_hidden = 4 * cfg->n_embd;
    ZS_CHECK(get_int(c, F_KV, 0, &cfg->n_kv_head));
    ZS_CHECK(get_int(c, F_FFN, llama, &cfg->ffn_hidden));
    /* Absent: the architecture's own head (GPT-2 tied, LLaMA untied). */
    if (c->seen[F_TIE]) cfg->tie_embeddings = c->tie ? ZS_TIE_ON : ZS_TIE_OFF;
    int vocab = 256;
    ZS_CHECK(get_int(c, F_VOCAB, 0, &vocab));
    zs_model_config_set_vocab(cfg, vocab);
    if (llama) {
        cfg->rope_theta = c->seen[F_THETA] ? (float)c->num[F_THETA] : 10000.0f;
        cfg->norm_eps = c->seen[F_EPS] ? (float)c->num[F_EPS] : 1e-5f;
    } else {
        /* GPT-2 has one fixed shape per width: say so rather than ignore a field. */
        ZS_REQUIRE(cfg->n_kv_head == cfg->n_head && cfg->ffn_hidden == 4 * cfg->n_embd &&
                       !c->seen[F_THETA] && !c->seen[F_EPS],
                   ZS_ERR_INVALID,
                   "%s: gpt2 takes no rope_theta or norm_eps, and n_kv_head = n_head, "
                   "ffn_hidden = 4 n_embd",
                   c->path);
    }
    if (c->seen[F_NAME]) {
        snprintf(cfg->name, sizeof cfg->name, "%.*s", (int)sizeof cfg->name - 1, c->str[F_NAME]);
    } else {
        const char *base = strrchr(c->path, '/');
        base = base ? base + 1 : c->path;
        int n = (int)strlen(base) - 5; /* without ".json" */
        if (n < 1) n = (int)strlen(base);
        if (n > (int)sizeof cfg->name - 1) n = (int)sizeof cfg->name - 1;
        snprintf(cfg->name, sizeof cfg->name, "%.*s", n, base);
    }
fail:
    return st;
}

zs_status zs_model_config_load(const char *path, zs_model_config *cfg) {
    zs_status st = ZS_OK;
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    cfg_parse *c = NULL;
    memset(cfg, 0, sizeof *cfg);
    ZS_REQUIRE(f, ZS_ERR_IO, "model config %s: cannot open: %s", path, strerror(errno));
    text = malloc(CFG_MAX_BYTES + 1);
    c = calloc(1, sizeof *c);
    ZS_REQUIRE(text && c, ZS_ERR_OOM, "model config %s: out of memory", path);
    size_t n = fread(text, 1, CFG_MAX_BYTES + 1, f);
    ZS_REQUIRE(!ferror(f), ZS_ERR_IO, "model config %s: read failed", path);
    ZS_REQUIRE(n <= CFG_MAX_BYTES, ZS_ERR_FORMAT, "model config %s: larger than %d bytes", path,
               CFG_MAX_BYTES);
    ZS_REQUIRE(memchr(text, 0, n) == NULL, ZS_ERR_FORMAT, "model config %s: not text", path);
    text[n] = 0;
    c->path = path;
    c->p = text;
    ZS_CHECK(parse_file(c, cfg));
    /* Shape rules shared with the presets (heads divide width, kv heads divide heads...). */
    if ((st = zs_model_config_validate(cfg)) != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(st, "%s: %s", path, msg);
        goto fail;
    }
    st = ZS_OK;
fail:
    if (f) fclose(f);
    free(text);
    free(c);
    if (st != ZS_OK) memset(cfg, 0, sizeof *cfg);
    return st;
}

/* Hugging Face model directories both ways: config.json (GPT2LMHeadModel, LlamaForCausalLM)
 * read with every field checked against what zshard implements and against the flags the
 * user gave, model.safetensors or its sharded form (model.safetensors.index.json naming the
 * file of every tensor), and the export that from_pretrained loads as it is. */
#include "ckpt/convert.h"

#include "ckpt/json.h"
#include "core/status.h"
#include "models/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_CONFIG_MAX (1 << 20)
#define HF_INDEX_MAX (64 << 20)

static zs_status read_json(const char *path, size_t cap, zs_json **out) {
    zs_status st = ZS_OK;
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    *out = NULL;
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    text = malloc(cap + 1);
    ZS_REQUIRE(text, ZS_ERR_OOM, "%s: out of memory", path);
    size_t n = fread(text, 1, cap + 1, f);
    ZS_REQUIRE(!ferror(f), ZS_ERR_IO, "%s: read failed", path);
    ZS_REQUIRE(n <= cap, ZS_ERR_FORMAT, "%s: larger than %zu bytes", path, cap);
    if ((st = zs_json_parse(text, n, out)) != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(st, "%s: %s", path, msg);
        goto fail;
    }
    ZS_REQUIRE((*out)->type == ZS_JSON_OBJECT, ZS_ERR_FORMAT, "%s: not a JSON object", path);
fail:
    if (f) fclose(f);
    free(text);
    if (st != ZS_OK) {
        zs_json_free(*out);
        *out = NULL;
    }
    return st;
}

/* An integer field, required; `alt` is GPT-2's other name for it (n_ctx/n_positions). */
static zs_status get_int(const zs_json *o, const char *key, const char *path, int *out) {
    int64_t v = 0;
    zs_status st = zs_json_get_int(o, key, 1, 1 << 30, path, &v);
    *out = (int)v;
    return st;
}

static int is_null_or_absent(const zs_json *o, const char *key) {
    const zs_json *v = zs_json_get(o, key);
    return !v || v->type == ZS_JSON_NULL;
}

static int is_true(const zs_json *o, const char *key) {
    const zs_json *v = zs_json_get(o, key);
    return v && v->type == ZS_JSON_BOOL && v->boolean;
}

static const char *str_or(const zs_json *o, const char *key, const char *dflt) {
    const zs_json *v = zs_json_get(o, key);
    return v && v->type == ZS_JSON_STRING ? v->str : dflt;
}

static double num_or(const zs_json *o, const char *key, double dflt) {
    const zs_json *v = zs_json_get(o, key);
    return v && v->type == ZS_JSON_NUMBER ? v->num : dflt;
}

/* Every field the user gave (hint > 0) must be the config's: a wrong --heads or rope theta
 * would otherwise change the model without a word. */
static zs_status check_hint(const zs_model_config *c, const zs_model_config *h, const char *path) {
    zs_status st = ZS_OK;
    if (!h) return ZS_OK;
#define HINT(field, fmt)                                                                           \
    ZS_REQUIRE(!(h->field > 0) || h->field == c->field, ZS_ERR_INVALID,                            \
               "%s: " #field " is " fmt " there but " fmt " in the flags (--model %s)", path,      \
               c->field, h->field, h->name[0] ? h->name : "?")
    HINT(n_layer, "%d");
    HINT(n_head, "%d");
    HINT(n_embd, "%d");
    HINT(max_seq, "%d");
    if (c->arch == ZS_ARCH_LLAMA) {
        HINT(n_kv_head, "%d");
        HINT(ffn_hidden, "%d");
        HINT(rope_theta, "%g");
        HINT(norm_eps, "%g");
    }
#undef HINT
    ZS_REQUIRE(h->tie_embeddings == ZS_TIE_ARCH || zs_model_tied(h) == zs_model_tied(c),
               ZS_ERR_INVALID,
               "%s: tie_embeddings is %s there (tie_word_embeddings %s) but %s in the flags", path,
               zs_model_tied(c) ? "on" : "off", zs_model_tied(c) ? "true" : "false",
               zs_model_tied(h) ? "on" : "off");
    ZS_REQUIRE(!(h->n_layer > 0) || h->arch == c->arch, ZS_ERR_INVALID,
               "%s: arch is %s there but %s in the flags", path, zs_ckpt_arch_name(c->arch),
               zs_ckpt_arch_name(h->arch));
fail:
    return st;
}

zs_status zs_hf_config(const char *dir, const zs_model_config *hint, zs_model_config *cfg) {
    zs_status st = ZS_OK;
    zs_json *o = NULL;
    char path[4200];
    memset(cfg, 0, sizeof *cfg);
    ZS_CHECK(zs_path_join(path, sizeof path, dir, "config.json"));
    ZS_CHECK(read_json(path, HF_CONFIG_MAX, &o));
    const char *type = NULL;
    ZS_CHECK(zs_json_get_str(o, "model_type", path, &type));
    int vocab = 0;
    ZS_CHECK(get_int(o, "vocab_size", path, &vocab));
    if (!strcmp(type, "gpt2")) {
        cfg->arch = ZS_ARCH_GPT2;
        ZS_CHECK(get_int(o, "n_layer", path, &cfg->n_layer));
        ZS_CHECK(get_int(o, "n_head", path, &cfg->n_head));
        ZS_CHECK(get_int(o, "n_embd", path, &cfg->n_embd));
        ZS_CHECK(get_int(o, "n_positions", path, &cfg->max_seq));
        cfg->n_kv_head = cfg->n_head;
        cfg->ffn_hidden = 4 * cfg->n_embd;
        const char *act = str_or(o, "activation_function", "gelu_new");
        ZS_REQUIRE(
            !strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"), ZS_ERR_UNSUPPORTED,
            "%s: activation_function \"%s\": zshard's GPT-2 implements gelu_new (tanh)", path, act);
        const zs_json *inner = zs_json_get(o, "n_inner");
        ZS_REQUIRE(is_null_or_absent(o, "n_inner") ||
                       (inner->type == ZS_JSON_NUMBER && inner->num == 4.0 * cfg->n_embd),
                   ZS_ERR_UNSUPPORTED, "%s: n_inner other than 4 * n_embd is not implemented",
                   path);
        double eps = num_or(o, "layer_norm_epsilon", 1e-5);
        ZS_REQUIRE(fabs(eps - 1e-5) < 1e-12, ZS_ERR_UNSUPPORTED,
                   "%s: layer_norm_epsilon %g: zshard's GPT-2 uses 1e-5", path, eps);
        ZS_REQUIRE(!is_true(o, "scale_attn_by_inverse_layer_idx") &&
                       !is_true(o, "reorder_and_upcast_attn"),
                   ZS_ERR_UNSUPPORTED,
                   "%s: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not "
                   "implemented",
                   path);
        const zs_json *sa = zs_json_get(o, "scale_attn_weights");
        ZS_REQUIRE(!sa || sa->type != ZS_JSON_BOOL || sa->boolean, ZS_ERR_UNSUPPORTED,
                   "%s: scale_attn_weights false is not implemented", path);
    } else if (!strcmp(type, "llama")) {
        cfg->arch = ZS_ARCH_LLAMA;
        ZS_CHECK(get_int(o, "num_hidden_layers", path, &cfg->n_layer));
        ZS_CHECK(get_int(o, "num_attention_heads", path, &cfg->n_head));
        ZS_CHECK(get_int(o, "hidden_size", path, &cfg->n_embd));
        ZS_CHECK(get_int(o, "intermediate_size", path, &cfg->ffn_hidden));
        ZS_CHECK(get_int(o, "max_position_embeddings", path, &cfg->max_seq));
        cfg->n_kv_head = cfg->n_head;
        if (!is_null_or_absent(o, "num_key_value_heads"))
            ZS_CHECK(get_int(o, "num_key_value_heads", path, &cfg->n_kv_head));
        cfg->rope_theta = (float)num_or(o, "rope_theta", 10000.0);
        cfg->norm_eps = (float)num_or(o, "rms_norm_eps", 1e-6);
        const zs_json *rs = zs_json_get(o, "rope_scaling");
        const char *rtype = rs && rs->type == ZS_JSON_OBJECT
                                ? str_or(rs, "rope_type", str_or(rs, "type", "?"))
                                : "?";
        ZS_REQUIRE(is_null_or_absent(o, "rope_scaling") || !strcmp(rtype, "default"),
                   ZS_ERR_UNSUPPORTED,
                   "%s: rope_scaling of type \"%s\" is not implemented (zshard's RoPE is the "
                   "plain one)",
                   path, rtype);
        const char *act = str_or(o, "hidden_act", "silu");
        ZS_REQUIRE(!strcmp(act, "silu"), ZS_ERR_UNSUPPORTED,
                   "%s: hidden_act \"%s\": zshard's LLaMA implements silu", path, act);
        ZS_REQUIRE(!is_true(o, "attention_bias") && !is_true(o, "mlp_bias"), ZS_ERR_UNSUPPORTED,
                   "%s: attention_bias / mlp_bias: zshard's LLaMA has no biases", path);
        const zs_json *hd = zs_json_get(o, "head_dim");
        ZS_REQUIRE(!hd || hd->type != ZS_JSON_NUMBER || hd->num * cfg->n_head == cfg->n_embd,
                   ZS_ERR_UNSUPPORTED, "%s: head_dim other than hidden_size / heads", path);
    } else {
        ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED,
                   "%s: model_type \"%s\": zshard reads \"gpt2\" and \"llama\" models", path, type);
    }
    /* transformers' defaults when absent: GPT2Config ties (PretrainedConfig's True),
     * LlamaConfig does not; zshard's architecture defaults are the same. */
    const zs_json *tie = zs_json_get(o, "tie_word_embeddings");
    ZS_REQUIRE(is_null_or_absent(o, "tie_word_embeddings") || tie->type == ZS_JSON_BOOL,
               ZS_ERR_FORMAT, "%s: tie_word_embeddings must be true or false", path);
    cfg->tie_embeddings = is_null_or_absent(o, "tie_word_embeddings") ? ZS_TIE_ARCH
                          : tie->boolean                              ? ZS_TIE_ON
                                                                      : ZS_TIE_OFF;
    cfg->tie_embeddings = zs_model_tied(cfg) ? ZS_TIE_ON : ZS_TIE_OFF;
    zs_model_config_set_vocab(cfg, vocab);
    zs_model_name_for(cfg);
    if ((st = zs_model_config_validate(cfg)) != ZS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zs_last_error());
        st = zs_error(ZS_ERR_FORMAT, "%s: %s", path, msg);
        goto fail;
    }
    ZS_CHECK(check_hint(cfg, hint, path));
fail:
    zs_json_free(o);
    return st;
}

/* The files of dir's weights: model.safetensors, or the shards its index names (each once,
 * all present). *files[] strings are malloc'd. */
static zs_status weight_files(const char *dir, char ***files, int *n) {
    zs_status st = ZS_OK;
    zs_json *idx = NULL;
    char path[4200];
    struct stat sb;
    *files = NULL;
    *n = 0;
    ZS_CHECK(zs_path_join(path, sizeof path, dir, "model.safetensors"));
    if (stat(path, &sb) == 0) {
        *files = calloc(1, sizeof **files);
        ZS_REQUIRE(*files && ((*files)[0] = strdup(path)), ZS_ERR_OOM, "out of memory");
        *n = 1;
        return ZS_OK;
    }
    ZS_CHECK(zs_path_join(path, sizeof path, dir, "model.safetensors.index.json"));
    ZS_REQUIRE(stat(path, &sb) == 0, ZS_ERR_IO,
               "%s: no model.safetensors and no model.safetensors.index.json", dir);
    ZS_CHECK(read_json(path, HF_INDEX_MAX, &idx));
    const zs_json *wm = zs_json_get(idx, "weight_map");
    ZS_REQUIRE(wm && wm->type == ZS_JSON_OBJECT && wm->n > 0, ZS_ERR_FORMAT,
               "%s: no \"weight_map\" object", path);
    *files = calloc((size_t)wm->n, sizeof **files);
    ZS_REQUIRE(*files, ZS_ERR_OOM, "out of memory");
    for (const zs_json *v = wm->child; v; v = v->next) {
        ZS_REQUIRE(v->type == ZS_JSON_STRING && !strchr(v->str, '/') && v->str[0] != '.',
                   ZS_ERR_FORMAT, "%s: tensor %s: file name must be a plain name in %s", path,
                   v->key, dir);
        int seen = 0;
        char fp[4200];
        ZS_CHECK(zs_path_join(fp, sizeof fp, dir, v->str));
        for (int i = 0; i < *n && !seen; i++)
            seen = !strcmp((*files)[i], fp);
        if (seen) continue;
        ZS_REQUIRE(stat(fp, &sb) == 0, ZS_ERR_IO, "%s: shard %s (of tensor %s) is missing", path,
                   v->str, v->key);
        ZS_REQUIRE(((*files)[*n] = strdup(fp)), ZS_ERR_OOM, "out of memory");
        (*n)++;
    }
fail:
    zs_json_free(idx);
    return st;
}

zs_status zs_hf_import(const char *dir, const char *out, const zs_model_config *hint) {
    zs_status st = ZS_OK;
    char **files = NULL;
    int n = 0;
    zs_model_config c;
    ZS_CHECK(zs_hf_config(dir, hint, &c));
    ZS_CHECK(weight_files(dir, &files, &n));
    ZS_CHECK(zs_st_import_files((const char *const *)files, n, dir, &c, out));
fail:
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    return st;
}

/* The shortest decimal that reads back as the same float: 1e-05, not 9.99999975e-06, in files
 * people read (transformers parses either to the same value). */
static const char *shortest(char buf[32], float v) {
    if (v == (float)(int64_t)v && fabsf(v) < 1e9f) { /* 10000.0, as Hugging Face writes it */
        snprintf(buf, 32, "%.1f", (double)v);
        return buf;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, 32, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

static zs_status write_config(const zs_model_config *c, zs_dtype dt, const char *path) {
    char eps[32], theta[32];
    zs_status st = ZS_OK;
    FILE *f = fopen(path, "w");
    ZS_REQUIRE(f, ZS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    const char *dtn = dt == ZS_DTYPE_BF16 ? "bfloat16" : dt == ZS_DTYPE_F16 ? "float16" : "float32";
    const char *tie = zs_model_tied(c) ? "true" : "false";
    if (c->arch == ZS_ARCH_GPT2)
        fprintf(f,
                "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n"
                "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
                "  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n"
                "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"torch_dtype\": \"%s\"\n}\n",
                c->vocab, c->max_seq, c->max_seq, c->n_embd, c->n_layer, c->n_head, tie,
                c->vocab > 50256 ? 50256 : c->vocab - 1, c->vocab > 50256 ? 50256 : c->vocab - 1,
                dtn);
    else
        fprintf(f,
                "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n"
                "  \"rope_theta\": %s,\n  \"rope_scaling\": null,\n  \"hidden_act\": \"silu\",\n"
                "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n"
                "  \"pretraining_tp\": 1,\n  \"tie_word_embeddings\": %s,\n"
                "  \"use_cache\": true,\n  \"torch_dtype\": \"%s\"\n}\n",
                c->vocab, c->n_embd, c->ffn_hidden, c->n_layer, c->n_head, c->n_kv_head,
                c->n_embd / c->n_head, c->max_seq, shortest(eps, c->norm_eps),
                shortest(theta, c->rope_theta), tie, dtn);
    ZS_REQUIRE(fflush(f) == 0 && fsync(fileno(f)) == 0, ZS_ERR_IO, "%s: write failed", path);
    int bad = fclose(f);
    f = NULL;
    ZS_REQUIRE(!bad, ZS_ERR_IO, "%s: write failed", path);
fail:
    if (f) fclose(f);
    return st;
}

zs_status zs_hf_export(zs_ckpt_reader *r, const char *out, zs_dtype dt, uint64_t shard_bytes) {
    zs_status st = ZS_OK;
    const zs_manifest *m = zs_ckpt_reader_manifest(r);
    const zs_layout *l = &m->layout;
    const zs_model_config *c = &m->info.model;
    zs_ext_tensor *map = NULL;
    int *first = NULL, nshards = 0, staged = 0;
    char tmp[4200], path[4400], name[128];
    FILE *ix = NULL;
    struct stat sb;
    ZS_REQUIRE(dt == ZS_DTYPE_F32 || dt == ZS_DTYPE_BF16 || dt == ZS_DTYPE_F16, ZS_ERR_INVALID,
               "export: dtype must be f32, bf16 or f16");
    ZS_REQUIRE(stat(out, &sb) != 0, ZS_ERR_INVALID,
               "%s: already exists (export writes a new "
               "directory)",
               out);
    ZS_REQUIRE(strlen(out) + 5 < sizeof tmp, ZS_ERR_INVALID, "%s: path too long", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    zs_ckpt_remove_dir(tmp);
    ZS_REQUIRE(mkdir(tmp, 0755) == 0, ZS_ERR_IO, "%s: cannot create it (staged as %s): %s", out,
               tmp, strerror(errno));
    staged = 1;
    map = calloc((size_t)l->n_tensors, sizeof *map);
    first = calloc((size_t)l->n_tensors + 1, sizeof *first);
    ZS_REQUIRE(map && first, ZS_ERR_OOM, "%s: out of memory", out);
    ZS_CHECK(zs_ext_map(l, c, map));
    /* Shards: tensors in layout order, a new file when the next tensor would pass the limit
     * (a tensor larger than the limit gets a file of its own). */
    uint64_t es = dt == ZS_DTYPE_F32 ? 4 : 2, in_shard = 0;
    for (int i = 0; i < l->n_tensors; i++) {
        const zs_ext_tensor *x = &map[i];
        uint64_t nb = (uint64_t)x->hf_shape[0] * (uint64_t)(x->ndim == 2 ? x->hf_shape[1] : 1) * es;
        if (i == 0 || (in_shard > 0 && in_shard + nb > shard_bytes)) {
            first[nshards++] = i;
            in_shard = 0;
        }
        in_shard += nb;
    }
    first[nshards] = l->n_tensors;
    if (nshards > 1) {
        ZS_CHECK(zs_path_join(path, sizeof path, tmp, "model.safetensors.index.json"));
        ix = fopen(path, "w");
        ZS_REQUIRE(ix, ZS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        uint64_t total = 0;
        for (int i = 0; i < l->n_tensors; i++)
            total += (uint64_t)map[i].hf_shape[0] *
                     (uint64_t)(map[i].ndim == 2 ? map[i].hf_shape[1] : 1) * es;
        fprintf(ix, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
                (unsigned long long)total);
    }
    for (int k = 0; k < nshards; k++) {
        if (nshards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, nshards);
        ZS_CHECK(zs_path_join(path, sizeof path, tmp, name));
        ZS_CHECK(zs_st_export_range(r, path, dt, first[k], first[k + 1]));
        for (int i = first[k]; ix && i < first[k + 1]; i++)
            fprintf(ix, "%s\n    \"%s\": \"%s\"", i ? "," : "", map[i].hf_name, name);
    }
    if (ix) {
        fprintf(ix, "\n  }\n}\n");
        int bad = fflush(ix) != 0 || fsync(fileno(ix)) != 0;
        bad |= fclose(ix) != 0;
        ix = NULL;
        ZS_REQUIRE(!bad, ZS_ERR_IO, "%s: write failed", path);
    }
    ZS_CHECK(zs_path_join(path, sizeof path, tmp, "config.json"));
    ZS_CHECK(write_config(c, dt, path));
    ZS_CHECK(zs_fsync_path(tmp));
    ZS_REQUIRE(rename(tmp, out) == 0, ZS_ERR_IO, "%s: rename from %s failed: %s", out, tmp,
               strerror(errno));
    staged = 0;
fail:
    if (ix) fclose(ix);
    if (staged) zs_ckpt_remove_dir(tmp);
    free(map);
    free(first);
    return st;
}

/* Foreign tensor names and layouts, one table per architecture: the Hugging Face name of each
 * layout tensor, whether HF stores it transposed (GPT-2's Conv1D keeps weights as [in, out],
 * zshard as [out, in]), and its slot in llm.c's parameter order. Adding a model family means
 * adding a table here. */
#include "ckpt/convert.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

typedef struct name_rule {
    const char *suffix; /* layout name without "h.<l>." for block tensors */
    int transpose;
    int llmc_slot;
} name_rule;

typedef struct arch_names {
    zs_arch arch;
    const char *prefix;    /* prepended to layout names to form HF names */
    const char *block_fmt; /* layout name of a block tensor: block_fmt, then a block suffix */
    const name_rule *global;
    int n_global;
    const name_rule *block;
    int n_block;
    const char *vocab_rows[2]; /* tensors with padded vocabulary rows (HF keeps the real ones) */
} arch_names;

static const name_rule GPT2_GLOBAL[] = {
    {"wte.weight", 0, 0}, {"wpe.weight", 0, 1},      {"ln_f.weight", 0, 14},
    {"ln_f.bias", 0, 15}, {"lm_head.weight", 0, -1}, /* untied only; llm.c files have no slot for it
                                                      */
};

static const name_rule GPT2_BLOCK[] = {
    {"ln_1.weight", 0, 2},      {"ln_1.bias", 0, 3},          {"attn.c_attn.weight", 1, 4},
    {"attn.c_attn.bias", 0, 5}, {"attn.c_proj.weight", 1, 6}, {"attn.c_proj.bias", 0, 7},
    {"ln_2.weight", 0, 8},      {"ln_2.bias", 0, 9},          {"mlp.c_fc.weight", 1, 10},
    {"mlp.c_fc.bias", 0, 11},   {"mlp.c_proj.weight", 1, 12}, {"mlp.c_proj.bias", 0, 13},
};

/* LLaMA's layout already uses the HF names; nn.Linear keeps [out, in] like zshard, and the
 * rotary layout is HF's rotate_half, so nothing is permuted. No llm.c slots (-1). */
static const name_rule LLAMA_GLOBAL[] = {
    {"model.embed_tokens.weight", 0, -1},
    {"model.norm.weight", 0, -1},
    {"lm_head.weight", 0, -1},
};

static const name_rule LLAMA_BLOCK[] = {
    {"input_layernorm.weight", 0, -1},  {"self_attn.q_proj.weight", 0, -1},
    {"self_attn.k_proj.weight", 0, -1}, {"self_attn.v_proj.weight", 0, -1},
    {"self_attn.o_proj.weight", 0, -1}, {"post_attention_layernorm.weight", 0, -1},
    {"mlp.gate_proj.weight", 0, -1},    {"mlp.up_proj.weight", 0, -1},
    {"mlp.down_proj.weight", 0, -1},
};

static const arch_names ARCHES[] = {
    {ZS_ARCH_GPT2,
     "transformer.",
     "h.%d.%n",
     GPT2_GLOBAL,
     5,
     GPT2_BLOCK,
     12,
     {"wte.weight", "lm_head.weight"}},
    {ZS_ARCH_LLAMA,
     "",
     "model.layers.%d.%n",
     LLAMA_GLOBAL,
     3,
     LLAMA_BLOCK,
     9,
     {"model.embed_tokens.weight", "lm_head.weight"}},
};

static const arch_names *find_arch(zs_arch a) {
    for (size_t i = 0; i < sizeof ARCHES / sizeof *ARCHES; i++)
        if (ARCHES[i].arch == a) return &ARCHES[i];
    return NULL;
}

/* Rule for a layout name, with the layer of block tensors (-1 for global ones). */
static const name_rule *find_rule(const arch_names *an, const char *name, int *layer) {
    for (int i = 0; i < an->n_global; i++)
        if (!strcmp(name, an->global[i].suffix)) {
            *layer = -1;
            return &an->global[i];
        }
    int l, n = 0;
    if (sscanf(name, an->block_fmt, &l, &n) == 1 && n > 0)
        for (int i = 0; i < an->n_block; i++)
            if (!strcmp(name + n, an->block[i].suffix)) {
                *layer = l;
                return &an->block[i];
            }
    return NULL;
}

zs_status zs_ext_map(const zs_layout *l, const zs_model_config *c, zs_ext_tensor *out) {
    const arch_names *an = find_arch(c->arch);
    if (!an) return zs_error(ZS_ERR_UNSUPPORTED, "model %s: no tensor name table", c->name);
    for (int i = 0; i < l->n_tensors; i++) {
        const zs_tensor_desc *t = &l->tensors[i];
        zs_ext_tensor *e = &out[i];
        int layer;
        const name_rule *r = find_rule(an, t->name, &layer);
        if (!r) return zs_error(ZS_ERR_INTERNAL, "no foreign name for tensor %s", t->name);
        memset(e, 0, sizeof *e);
        e->tensor = i;
        /* GPT2LMHeadModel keeps its head beside "transformer.", not in it. */
        snprintf(e->hf_name, sizeof e->hf_name, "%s%s",
                 strcmp(t->name, "lm_head.weight") ? an->prefix : "", t->name);
        e->ndim = t->ndim;
        e->transpose = r->transpose && t->ndim == 2;
        e->rows = t->shape[0];
        /* The padded vocabulary rows exist for the GEMMs only; HF files hold the real ones. */
        for (int k = 0; k < 2; k++)
            if (!strcmp(t->name, an->vocab_rows[k])) e->rows = c->vocab;
        e->hf_shape[0] = e->transpose ? t->shape[1] : e->rows;
        if (t->ndim == 2) e->hf_shape[1] = e->transpose ? t->shape[0] : t->shape[1];
        e->llmc_slot = r->llmc_slot;
        e->layer = layer;
    }
    return ZS_OK;
}

zs_status zs_llmc_order(const zs_layout *l, const zs_model_config *c, int *order) {
    const arch_names *an = find_arch(c->arch);
    if (!an || c->arch != ZS_ARCH_GPT2)
        return zs_error(ZS_ERR_UNSUPPORTED, "model %s: llm.c files hold GPT-2 models only",
                        c->name);
    if (!zs_model_tied(c))
        return zs_error(ZS_ERR_UNSUPPORTED,
                        "model %s: tie_embeddings is off (its own lm_head.weight), and llm.c "
                        "files hold a GPT-2 whose head is tied to wte; export to safetensors or "
                        "--format hf instead",
                        c->name);
    int n = 0;
    /* llm.c stacks each block tensor over layers: slot by slot, then layer by layer. */
    for (int s = 0; s < 16; s++)
        for (int layer = -1; layer < c->n_layer; layer++)
            for (int i = 0; i < l->n_tensors; i++) {
                int tl;
                const name_rule *r = find_rule(an, l->tensors[i].name, &tl);
                if (r && r->llmc_slot == s && tl == layer) order[n++] = i;
            }
    if (n != l->n_tensors)
        return zs_error(ZS_ERR_INTERNAL, "llm.c order covers %d of %d tensors", n, l->n_tensors);
    return ZS_OK;
}

void zs_model_name_for(zs_model_config *c) {
    char names[512], *save = NULL;
    snprintf(names, sizeof names, "%s", zs_model_preset_names());
    for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        zs_model_config p;
        size_t len = strlen(tok);
        if (len > 5 && !strcmp(tok + len - 5, ".json")) continue;
        if (zs_model_preset(tok, &p) != ZS_OK) continue;
        if (p.arch == c->arch && p.n_layer == c->n_layer && p.n_head == c->n_head &&
            p.n_embd == c->n_embd && p.max_seq == c->max_seq && p.n_kv_head == c->n_kv_head &&
            p.ffn_hidden == c->ffn_hidden) {
            snprintf(c->name, sizeof c->name, "%s", tok);
            return;
        }
    }
    snprintf(c->name, sizeof c->name, "custom");
}

int zs_ext_ignored(const char *name) {
    size_t n = strlen(name);
    /* A tied output head is the embedding (an untied one is matched as a tensor first);
     * attention masks and rotary frequencies are buffers, not parameters. */
    return !strcmp(name, "lm_head.weight") || (n > 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias")) ||
           (n > 20 && !strcmp(name + n - 20, ".rotary_emb.inv_freq"));
}

/* Tied and untied output heads as model-config options, for the two combinations the presets
 * do not cover: an untied GPT-2 (its own lm_head.weight in the final unit) and a tied LLaMA
 * (the head reads model.embed_tokens.weight, the embed unit acquired twice per pass):
 *  - layout: Ψ moves by exactly one [padded_vocab, C] head, the presets' layouts do not move;
 *  - whole-model finite differences and repeatability (modeltest.c) for both;
 *  - ddp vs ZeRO-3 on 2 ranks bitwise, model-state bytes equal the formulas of
 *    docs/architecture.md "Memory accounting" with that Ψ;
 *  - the choice is carried: checkpoint manifest, HF export (config.json's tie_word_embeddings,
 *    lm_head.weight present or not) and import back bitwise, --init-from the HF directory;
 *  - a contradicting --tie-embeddings and an llm.c export of an untied head fail clearly. */
#include "core/status.h"
#include "modeltest.h"
#include "models/model.h"
#include "runlog.h"

#include <string.h>

static zs_model_config preset(const char *name, zs_tie tie) {
    zs_model_config c;
    ZT_OK(zs_model_preset(name, &c));
    zs_model_config_set_vocab(&c, 256);
    c.tie_embeddings = tie;
    return c;
}

/* Ψ of each variant against the preset's: one head more or less, nothing else. */
static void test_layouts(void) {
    const char *names[2] = {"gpt2-tiny", "llama-tiny"};
    for (int a = 0; a < 2; a++) {
        zs_model_config def = preset(names[a], ZS_TIE_ARCH);
        zs_model_config on = preset(names[a], ZS_TIE_ON), off = preset(names[a], ZS_TIE_OFF);
        zs_layout ld, lon, loff;
        ZT_OK(zs_model_layout(&def, 2, &ld));
        ZT_OK(zs_model_layout(&on, 2, &lon));
        ZT_OK(zs_model_layout(&off, 2, &loff));
        int64_t head = (int64_t)def.padded_vocab * def.n_embd;
        ZT_CHECK(loff.total_params - lon.total_params == head, "%s: untied - tied = %lld, not %lld",
                 names[a], (long long)(loff.total_params - lon.total_params), (long long)head);
        /* The architecture default is GPT-2 tied, LLaMA untied: the preset layouts. */
        const zs_layout *same = a == 0 ? &lon : &loff;
        ZT_CHECK(ld.total_padded == same->total_padded && ld.n_tensors == same->n_tensors,
                 "%s: default layout moved", names[a]);
        ZT_CHECK(zs_model_tied(&def) == (a == 0), "%s: default tie", names[a]);
        mt_check_layout(&on, &lon, 2);
        mt_check_layout(&off, &loff, 2);
        /* The head: lm_head.weight in the last unit when untied, absent when tied; the embed
         * unit is used twice exactly when tied. */
        int hi = zs_layout_find(&loff, "lm_head.weight");
        ZT_CHECK(hi >= 0 && hi >= loff.units[loff.n_units - 1].first_tensor,
                 "%s untied: lm_head.weight in the final unit", names[a]);
        ZT_CHECK(loff.tensors[hi].zero_from == (int64_t)def.vocab * def.n_embd,
                 "%s: padded head rows start at zero", names[a]);
        ZT_CHECK(zs_layout_find(&lon, "lm_head.weight") < 0, "%s tied: no lm_head", names[a]);
        ZT_CHECK(lon.units[0].n_uses == 2 && loff.units[0].n_uses == 1, "%s: embed uses %d/%d",
                 names[a], lon.units[0].n_uses, loff.units[0].n_uses);
        zs_layout_free(&ld);
        zs_layout_free(&lon);
        zs_layout_free(&loff);
    }
}

/* The finite-difference shapes of test_model.c and test_llama.c (vocab 37, 8 positions),
 * so that the sampled embedding rows are ones the batch uses, with the head flipped. */
static zs_model_config fd_config(zs_arch arch) {
    zs_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = arch;
    c.n_layer = 2;
    c.n_head = arch == ZS_ARCH_LLAMA ? 4 : 2;
    c.n_kv_head = arch == ZS_ARCH_LLAMA ? 2 : 2;
    c.n_embd = 16;
    c.ffn_hidden = arch == ZS_ARCH_LLAMA ? 24 : 64;
    c.max_seq = 8;
    if (arch == ZS_ARCH_LLAMA) {
        c.rope_theta = 10000.0f;
        c.norm_eps = 1e-5f;
    }
    c.tie_embeddings = arch == ZS_ARCH_LLAMA ? ZS_TIE_ON : ZS_TIE_OFF;
    snprintf(c.name, sizeof c.name, "fd-flipped-head");
    zs_model_config_set_vocab(&c, 37);
    return c;
}

/* A config file's tie_embeddings: true/false set it, absent keeps the default, anything else
 * is an error naming the field; --tie-embeddings contradicting the file is an error too. */
static void test_config_file(void) {
    char path[600], cmd[1400];
    const char *body[3] = {"false", "true", "1"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/g%d.json", rl_dir(), k);
        FILE *f = fopen(path, "w");
        ZT_REQUIRE(f, "write %s", path);
        fprintf(f,
                "{\"arch\": \"gpt2\", \"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, "
                "\"max_seq\": 256, \"tie_embeddings\": %s}",
                body[k]);
        fclose(f);
        zs_model_config c;
        zs_status st = zs_model_config_load(path, &c);
        if (k < 2)
            ZT_CHECK(st == ZS_OK && c.tie_embeddings == (k ? ZS_TIE_ON : ZS_TIE_OFF),
                     "config tie_embeddings %s: %s", body[k], zs_last_error());
        else
            ZT_CHECK(st == ZS_ERR_INVALID && strstr(zs_last_error(), "tie_embeddings"),
                     "config tie_embeddings 1: %s", zs_last_error());
    }
    snprintf(cmd, sizeof cmd,
             "%s train --data %s/corpus.txt --model %s/g0.json --tie-embeddings on --steps 1 2>&1",
             zt_zshard_exe(), rl_dir(), rl_dir());
    int rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 2 && strstr(rl_out, "tie_embeddings"), "flag vs file: %d %s", rc, rl_out);
}

static void test_gradients(void) {
    zs_model_config g = fd_config(ZS_ARCH_GPT2), l = fd_config(ZS_ARCH_LLAMA);
    /* A fresh model predicts about uniformly, tied or not. */
    ZT_CHECK(fabs(mt_init_loss(g, 2, 8, 7) - log(37.0)) < 0.1, "untied gpt2 init loss");
    ZT_CHECK(fabs(mt_init_loss(l, 2, 8, 7) - log(37.0)) < 0.1, "tied llama init loss");
    mt_check_gradients(g, 2, 8, 7);
    mt_check_gradients(l, 2, 8, 7);
    mt_check_repeatable(g, 2, 8, 13);
    mt_check_repeatable(l, 2, 8, 14);
}

static rl_run train(const char *model, const char *tie, const char *stage, const char *extra) {
    rl_run r = rl_train("timeout 180",
                        "--model %s --tie-embeddings %s --batch 8 --seq 32 --steps 4 --lr 3e-3 "
                        "--warmup 1 --val-every 0 --val-batches 1 --sample-len 0 --nproc 2 "
                        "--stage %s --comm-timeout 30 %s",
                        model, tie, stage, extra);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.n_steps == 4, "%s tie %s stage %s: %d steps", model, tie, stage, r.n_steps);
    return r;
}

static void check_model_states(const rl_run *r, zs_model_config c, int stage) {
    zs_layout l;
    uint64_t want[ZS_MEM_NCAT];
    ZT_OK(zs_model_layout(&c, 2, &l));
    rl_fp32_model_states(&l, 2, stage, want);
    for (int k = 0; k < r->world; k++)
        for (int cat = ZS_MEM_PARAM; cat <= ZS_MEM_OPTIM_STATE; cat++)
            ZT_CHECK(r->peak[k][cat] == want[cat], "%s stage %d rank %d cat %d: %llu vs %llu",
                     c.name, stage, k, cat, (unsigned long long)r->peak[k][cat],
                     (unsigned long long)want[cat]);
    zs_layout_free(&l);
}

static int sh(const char *cmd) {
    return zt_run(cmd, rl_out, sizeof rl_out);
}

/* The param_hash `ckpt inspect` prints for dir. */
static void hash_of(const char *dir, char out[17]) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s ckpt inspect %s 2>&1", zt_zshard_exe(), dir);
    int rc = sh(cmd);
    const char *h = strstr(rl_out, "param_hash  ");
    ZT_CHECK(rc == 0 && h, "inspect %s: %s", dir, rl_out);
    snprintf(out, 17, "%s", h ? h + 12 : "");
}

static void test_runs(const char *model, const char *tie, zs_tie t, const char *base) {
    char extra[700], cmd[3000], ck[600], a[17], b[17];
    const char *d = rl_dir(), *Z = zt_zshard_exe();
    snprintf(ck, sizeof ck, "%s/ck-%s", d, base);
    snprintf(extra, sizeof extra, "--save-dir %s", ck);
    rl_run r0 = train(model, tie, "ddp", extra);
    rl_run r3 = train(model, tie, "3", "");
    rl_check_same(&r3, &r0, base);
    check_model_states(&r0, preset(model, t), 0);
    check_model_states(&r3, preset(model, t), 3);

    /* The manifest records the choice; HF export writes it and the head (or not). */
    snprintf(cmd, sizeof cmd, "grep -l '\"tie_embeddings\":%s' %s/step_*/manifest.json 2>&1",
             t == ZS_TIE_ON ? "true" : "false", ck);
    ZT_CHECK(sh(cmd) == 0, "%s: manifest tie_embeddings: %s", base, rl_out);
    snprintf(cmd, sizeof cmd,
             "cd %s && %s ckpt export ck-%s --format hf hf-%s 2>&1 && "
             "grep -c '\"tie_word_embeddings\": %s' hf-%s/config.json && "
             "grep -c 'lm_head.weight' hf-%s/model.safetensors",
             d, Z, base, base, t == ZS_TIE_ON ? "true" : "false", base, base);
    int rc = sh(cmd);
    /* grep -c exits 1 on no match: the tied head must be absent, the untied one present. */
    ZT_CHECK(t == ZS_TIE_ON ? rc == 1 && strstr(rl_out, "\n0") : rc == 0, "%s: hf export: %s", base,
             rl_out);
    snprintf(cmd, sizeof cmd, "cd %s && %s ckpt import hf-%s --format hf imp-%s 2>&1", d, Z, base,
             base);
    ZT_CHECK(sh(cmd) == 0, "%s: hf import: %s", base, rl_out);
    hash_of(ck, a);
    snprintf(cmd, sizeof cmd, "%s/imp-%s", d, base);
    hash_of(cmd, b);
    ZT_CHECK(!strcmp(a, b), "%s: hf round trip %s vs %s", base, b, a);

    /* --init-from the HF directory takes the head from config.json: the run starts from the
     * same weights; a flag that says otherwise is an error naming the field. */
    snprintf(extra, sizeof extra, "--init-from %s/hf-%s --lr 1e-30 --weight-decay 0", d, base);
    rl_run ri = rl_train("timeout 180",
                         "--batch 8 --seq 32 --steps 1 --val-every 0 --sample-len 0 --nproc 2 "
                         "--stage 3 %s",
                         extra);
    rl_check_exit(&ri);
    ZT_CHECK(!strcmp(ri.hash, a), "%s: --init-from hf keeps the weights: %s vs %s", base, ri.hash,
             a);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s/corpus.txt --init-from %s/hf-%s --tie-embeddings %s --steps 1 "
             "2>&1",
             Z, d, d, base, t == ZS_TIE_ON ? "off" : "on");
    rc = sh(cmd);
    ZT_CHECK(rc != 0 && strstr(rl_out, "tie_embeddings"), "%s: contradicting flag: %d %s", base, rc,
             rl_out);
}

int main(void) {
    zt_init("tie");
    rl_setup("tie");
    test_layouts();
    test_config_file();
    test_gradients();
    test_runs("gpt2-tiny", "off", ZS_TIE_OFF, "gpt2-untied");
    test_runs("llama-tiny", "on", ZS_TIE_ON, "llama-tied");
    /* llm.c's file has no head of its own: an untied GPT-2 cannot go there. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd %s && %s ckpt export ck-gpt2-untied --format llmc u.bin 2>&1",
             rl_dir(), zt_zshard_exe());
    int rc = sh(cmd);
    ZT_CHECK(rc != 0 && strstr(rl_out, "tie_embeddings is off"), "llmc export: %d %s", rc, rl_out);
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

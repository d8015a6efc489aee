/* Activation checkpointing (--recompute block), end to end through `zshard train --nproc 2`
 * for GPT-2 and LLaMA, every stage, fp32 and bf16:
 *  - losses and param_hash are bitwise equal with and without recompute (the recomputed
 *    forward is the same computation on the same inputs and parameters), also with
 *    --dtype bf16, where the kept residual stream is bf16;
 *  - measured activation bytes equal the estimate (zshard mem --recompute block) exactly,
 *    and that estimate is the input-per-block bound: no recompute minus (L - 1) blocks'
 *    worth of intermediate activations, the sizes written out here from docs/models.md;
 *  - with --dtype bf16 the kept block inputs take half the bytes: activations drop by
 *    (L + 1) kept tensors' fp32 bytes, less their bf16 bytes and two fp32 working buffers;
 *  - ZeRO-3 issues exactly as many unit gathers with recompute as without (the recompute
 *    runs on the parameters backward_begin already gathered);
 *  - with flash attention, activations grow linearly in T, measured at T and 2T;
 *  - a bad --recompute value is a usage error. */
#include "backend/ops.h"
#include "core/status.h"
#include "models/model.h"
#include "runlog.h"
#include "shard/module.h"

#include <string.h>

static const char *STAGES[] = {"ddp", "1", "2", "3"};

static rl_run train(const char *model, const char *stage, const char *recompute,
                    const char *dtype) {
    rl_run r = rl_train("timeout 180",
                        "--model %s --batch 8 --seq 32 --steps 4 --lr 3e-3 --warmup 1 "
                        "--val-every 2 --val-batches 1 --sample-len 0 --nproc 2 --stage %s "
                        "--recompute %s --dtype %s --comm-timeout 30",
                        model, stage, recompute, dtype);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.n_steps == 4 && r.world == 2, "complete log for %s stage %s recompute %s",
             model, stage, recompute);
    return r;
}

static uint64_t r16(uint64_t n) {
    return (n + 15) / 16 * 16;
}

/* Bytes of one block's intermediate activations (everything but its output), as listed in
 * docs/models.md, for a micro-batch of B x T: attention keeps one log-sum-exp per row (flash)
 * or the T x T probabilities (naive). With bf16 activations the inputs only GEMMs read (the
 * norms' outputs, GELU's or SwiGLU's), GPT-2's GELU input and, with flash attention, the
 * attention's output take n / 2 floats' room. */
static uint64_t block_set_bytes(const zs_model_config *c, uint64_t B, uint64_t T, int naive,
                                int bf16) {
    uint64_t BT = B * T, C = (uint64_t)c->n_embd;
    uint64_t att = B * (uint64_t)c->n_head * T * (naive ? T : 1);
    uint64_t h = bf16 ? 2 : 1;           /* elements per float of a GEMM-only input */
    uint64_t o = bf16 && !naive ? 2 : 1; /* of the attention's output (flash writes bf16) */
    if (c->arch == ZS_ARCH_GPT2)         /* ln1 ln2 fch_gelu fch; atty qkv; res2 */
        return 4 * (2 * r16((BT * C + h - 1) / h) + 2 * r16((4 * BT * C + h - 1) / h) +
                    r16((BT * C + o - 1) / o) + r16((3 * BT * C + o - 1) / o) + r16(BT * C) +
                    r16(BT) * 4 + r16(att));
    uint64_t F = (uint64_t)c->ffn_hidden, KD = C / (uint64_t)c->n_head * (uint64_t)c->n_kv_head;
    /* ln1 ln2 h; atty; q res2; rstd x2; k v; gate up */
    return 4 *
           (2 * r16((BT * C + h - 1) / h) + r16((BT * F + h - 1) / h) + r16((BT * C + o - 1) / o) +
            r16(BT * C) * 2 + r16(BT) * 2 + 2 * r16(BT * KD) + r16(att) + 2 * r16(BT * F));
}

static void test_model(const char *name, const char *dtype) {
    zs_model_config c;
    ZT_OK(zs_model_preset(name, &c));
    zs_model_config_set_vocab(&c, 256);
    /* Global batch 8 on 2 ranks: 4 sequences of 32 per rank. */
    zs_dtype dt = strcmp(dtype, "bf16") ? ZS_DTYPE_F32 : ZS_DTYPE_BF16;
    zs_model_options none = {.recompute = ZS_RECOMPUTE_NONE, .act_dtype = dt};
    zs_model_options block = {.recompute = ZS_RECOMPUTE_BLOCK, .act_dtype = dt};
    uint64_t a_none = zs_model_activation_bytes(&c, &none, 4, 32);
    uint64_t a_block = zs_model_activation_bytes(&c, &block, 4, 32);
    for (int naive = 0; naive < 2; naive++) {
        zs_model_options n1 = none, b1 = block;
        n1.attention = b1.attention = naive ? ZS_ATTENTION_NAIVE : ZS_ATTENTION_FLASH;
        uint64_t an = zs_model_activation_bytes(&c, &n1, 4, 32);
        uint64_t ab = zs_model_activation_bytes(&c, &b1, 4, 32);
        uint64_t want =
            an - (uint64_t)(c.n_layer - 1) * block_set_bytes(&c, 4, 32, naive, dt == ZS_DTYPE_BF16);
        ZT_CHECK(ab == want && ab < an,
                 "%s %s %s: recompute activations %llu, want the input-per-block bound %llu "
                 "(none %llu)",
                 name, dtype, naive ? "naive" : "flash", (unsigned long long)ab,
                 (unsigned long long)want, (unsigned long long)an);
    }
    if (dt == ZS_DTYPE_BF16) {
        /* The L + 1 kept block inputs in bf16 plus two fp32 working buffers, and each block's
         * GEMM-only inputs in bf16, against the same tensors in fp32 (docs/models.md). */
        zs_model_options fn = {.recompute = ZS_RECOMPUTE_NONE};
        zs_model_options fb = {.recompute = ZS_RECOMPUTE_BLOCK};
        uint64_t BTC = 4 * 32 * (uint64_t)c.n_embd, K = (uint64_t)c.n_layer + 1;
        /* Signed: with fewer than 4 layers the working buffers outweigh the saving. */
        int64_t saved = (int64_t)(K * 4 * r16(BTC)) - (int64_t)(K * 4 * r16((BTC + 1) / 2)) -
                        (int64_t)(2 * 4 * r16(BTC));
        int64_t per_block =
            (int64_t)block_set_bytes(&c, 4, 32, 0, 0) - (int64_t)block_set_bytes(&c, 4, 32, 0, 1);
        int64_t saved_none = saved + (int64_t)c.n_layer * per_block,
                saved_block = saved + per_block;
        uint64_t f_none = zs_model_activation_bytes(&c, &fn, 4, 32);
        uint64_t f_block = zs_model_activation_bytes(&c, &fb, 4, 32);
        ZT_CHECK((int64_t)a_none == (int64_t)f_none - saved_none &&
                     (int64_t)a_block == (int64_t)f_block - saved_block,
                 "%s bf16 activations %llu / %llu (none / block), want fp32's %llu / %llu less "
                 "%lld / %lld",
                 name, (unsigned long long)a_none, (unsigned long long)a_block,
                 (unsigned long long)f_none, (unsigned long long)f_block, (long long)saved_none,
                 (long long)saved_block);
    }
    for (int s = 0; s < 4; s++) {
        rl_run rn = train(name, STAGES[s], "none", dtype);
        rl_run rb = train(name, STAGES[s], "block", dtype);
        ZT_CHECK(rl_same(&rn, &rb),
                 "%s %s stage %s: recompute not bitwise equal (hash %s vs %s, loss %s vs %s)", name,
                 dtype, STAGES[s], rb.hash, rn.hash, rb.loss[0], rn.loss[0]);
        ZT_CHECK(rn.est[ZS_MEM_ACTIVATION] == a_none && rb.est[ZS_MEM_ACTIVATION] == a_block,
                 "%s stage %s: logged estimates %llu / %llu, model formula %llu / %llu", name,
                 STAGES[s], (unsigned long long)rn.est[ZS_MEM_ACTIVATION],
                 (unsigned long long)rb.est[ZS_MEM_ACTIVATION], (unsigned long long)a_none,
                 (unsigned long long)a_block);
        for (int k = 0; k < 2; k++)
            ZT_CHECK(rn.peak[k][ZS_MEM_ACTIVATION] == a_none &&
                         rb.peak[k][ZS_MEM_ACTIVATION] == a_block,
                     "%s stage %s rank %d: measured activations %llu (none) / %llu (block), "
                     "estimates %llu / %llu",
                     name, STAGES[s], k, (unsigned long long)rn.peak[k][ZS_MEM_ACTIVATION],
                     (unsigned long long)rb.peak[k][ZS_MEM_ACTIVATION], (unsigned long long)a_none,
                     (unsigned long long)a_block);
    }
    printf("%s %s: activations per rank %llu bytes without recompute, %llu with (%.1f%%)\n", name,
           dtype, (unsigned long long)a_none, (unsigned long long)a_block,
           100.0 * (double)a_block / (double)a_none);
}

/* Long sequences with flash attention: every activation, attention's included, is
 * per token, so the estimate at 2T is exactly twice that at T, where the naive kernel's T x T
 * share grows fourfold; measured runs at T and 2T (llama-tiny's full 256 positions, ZeRO-3,
 * 2 ranks) allocate exactly the estimate, with and without recompute, and learn. */
static void test_long_seq(void) {
    zs_model_config c;
    ZT_OK(zs_model_preset("llama-tiny", &c));
    zs_model_config_set_vocab(&c, 256);
    zs_model_options fl = {0}, nv = {.attention = ZS_ATTENTION_NAIVE};
    uint64_t f1 = zs_model_activation_bytes(&c, &fl, 1, 128);
    uint64_t f2 = zs_model_activation_bytes(&c, &fl, 1, 256);
    uint64_t n1 = zs_model_activation_bytes(&c, &nv, 1, 128);
    uint64_t n2 = zs_model_activation_bytes(&c, &nv, 1, 256);
    ZT_CHECK(f2 == 2 * f1, "flash activations at T=256: %llu, want twice T=128's %llu",
             (unsigned long long)f2, (unsigned long long)f1);
    double grow = (double)(n2 - f2) / (double)(n1 - f1);
    ZT_CHECK(grow > 3.9 && grow < 4.1, "naive's extra T x T bytes grew %.3fx from T to 2T", grow);
    const char *rc[] = {"none", "block"};
    for (int k = 0; k < 2; k++) {
        uint64_t meas[2] = {0, 0};
        for (int t = 0; t < 2; t++) {
            int T = 128 << t;
            rl_run r = rl_train("timeout 180",
                                "--model llama-tiny --batch 2 --seq %d --steps 6 --lr 3e-3 "
                                "--warmup 1 --val-every 0 --val-batches 1 --sample-len 0 "
                                "--nproc 2 --stage 3 --recompute %s --comm-timeout 30",
                                T, rc[k]);
            rl_check_exit(&r);
            zs_model_options mo = {.recompute = k ? ZS_RECOMPUTE_BLOCK : ZS_RECOMPUTE_NONE};
            uint64_t want = zs_model_activation_bytes(&c, &mo, 1, T);
            for (int w = 0; w < 2; w++)
                ZT_CHECK(r.peak[w][ZS_MEM_ACTIVATION] == want,
                         "T=%d recompute %s rank %d: measured activations %llu, estimate %llu", T,
                         rc[k], w, (unsigned long long)r.peak[w][ZS_MEM_ACTIVATION],
                         (unsigned long long)want);
            ZT_CHECK(r.n_steps == 6 && r.lossv[5] < r.lossv[0],
                     "T=%d recompute %s: loss %g -> %g over %d steps", T, rc[k], r.lossv[0],
                     r.lossv[r.n_steps > 0 ? r.n_steps - 1 : 0], r.n_steps);
            meas[t] = r.peak[0][ZS_MEM_ACTIVATION];
        }
        printf("llama-tiny recompute %s: activations %llu bytes at T=128, %llu at T=256\n", rc[k],
               (unsigned long long)meas[0], (unsigned long long)meas[1]);
    }
}

/* One ZeRO-3 engine (world of one: gathers are copies, counted the same) runs two training
 * micro-steps per mode; the second step prefetches along the recorded order. */
static uint64_t zero3_gathers(const char *name, zs_recompute rc, char hash[17]) {
    zs_model_config c;
    zs_layout l;
    zs_module_t *e = NULL;
    zs_units_t *units = NULL;
    zs_model_t *m = NULL;
    ZT_OK(zs_model_preset(name, &c));
    zs_model_config_set_vocab(&c, 256);
    ZT_OK(zs_model_layout(&c, 1, &l));
    zs_module_config mc = zs_module_config_default();
    mc.stage = ZS_STAGE_3;
    mc.seed = 5;
    ZT_OK(zs_units_from_layout(&l, &units));
    ZT_OK(zs_module_create(units, NULL, &mc, &e));
    zs_units_destroy(units);
    zs_model_options mo = {.recompute = rc};
    ZT_OK(zs_model_create_opts(&c, &mo, zs_ops_cpu(), NULL, e, 2, 16, &m));
    int32_t in[32], tg[32];
    for (int i = 0; i < 32; i++)
        in[i] = (i * 7) % 256, tg[i] = (i * 11 + 3) % 256;
    zs_adamw_config h = {
        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_clip = 1.0f};
    for (int step = 1; step <= 2; step++) {
        double loss = 0;
        float norm = 0;
        ZT_OK(zs_module_zero_grad(e));
        ZT_OK(zs_model_forward_backward(m, in, tg, 2, 16, 1.0f / 32, 1, &loss));
        ZT_OK(zs_module_step(e, &h, &norm));
    }
    uint64_t n = zs_module_param_gathers(e), hv = 0;
    ZT_OK(zs_module_param_hash(e, &hv));
    snprintf(hash, 17, "%016llx", (unsigned long long)hv);
    zs_model_destroy(m);
    zs_module_destroy(e);
    zs_layout_free(&l);
    return n;
}

static void test_no_extra_gather(void) {
    const char *names[] = {"gpt2-tiny", "llama-tiny"};
    for (int i = 0; i < 2; i++) {
        char hn[17], hb[17];
        uint64_t gn = zero3_gathers(names[i], ZS_RECOMPUTE_NONE, hn);
        uint64_t gb = zero3_gathers(names[i], ZS_RECOMPUTE_BLOCK, hb);
        ZT_CHECK(gn > 0 && gb == gn, "%s ZeRO-3: %llu gathers with recompute, %llu without",
                 names[i], (unsigned long long)gb, (unsigned long long)gn);
        ZT_CHECK(!strcmp(hn, hb), "%s ZeRO-3 world 1: hash %s with recompute, %s without", names[i],
                 hb, hn);
    }
}

static void test_cli(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s train --data %s/corpus.txt --model gpt2-tiny --steps 1 --recompute layer 2>&1",
             zt_zshard_exe(), rl_dir());
    int rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 2 && strstr(rl_out, "--recompute: 'layer' is not one of none, block"),
             "bad --recompute: exit %d: %s", rc, rl_out);
    /* zshard mem predicts the drop before a run. */
    zs_model_config c;
    ZT_OK(zs_model_preset("llama-60m", &c));
    zs_model_config_set_vocab(&c, 32000);
    zs_mem_estimate en, eb;
    zs_mem_options on = {0}, ob = {.recompute = ZS_RECOMPUTE_BLOCK};
    ZT_OK(zs_mem_estimate_compute_opts(&c, 2, 3, 8, 256, 1, 1, &on, &en));
    ZT_OK(zs_mem_estimate_compute_opts(&c, 2, 3, 8, 256, 1, 1, &ob, &eb));
    ZT_CHECK(eb.bytes[ZS_MEM_ACTIVATION] < en.bytes[ZS_MEM_ACTIVATION] &&
                 eb.model_states == en.model_states,
             "llama-60m estimate: activations %llu with recompute, %llu without",
             (unsigned long long)eb.bytes[ZS_MEM_ACTIVATION],
             (unsigned long long)en.bytes[ZS_MEM_ACTIVATION]);
    snprintf(cmd, sizeof cmd,
             "%s mem --model llama-60m --nproc 2 --stage 3 --batch 8 --seq 256 --recompute block",
             zt_zshard_exe());
    rc = zt_run(cmd, rl_out, sizeof rl_out);
    char want[64];
    snprintf(want, sizeof want, "| activation | %.3f |",
             (double)eb.bytes[ZS_MEM_ACTIVATION] / 1073741824.0);
    ZT_CHECK(rc == 0 && strstr(rl_out, "recompute block") && strstr(rl_out, want),
             "zshard mem --recompute block: exit %d, want '%s':\n%s", rc, want, rl_out);
    /* LLaMA-7B at its 4096 positions, ZeRO-3 on 8 ranks of 80 GB: flash attention
     * fits without recompute; the T x T kernel does not, and the message names what would. */
    const char *l7 = "mem --model llama-7b --nproc 8 --stage 3 --dtype bf16 --seq 4096 --batch 8 "
                     "--device-mem 80G";
    snprintf(cmd, sizeof cmd, "%s %s", zt_zshard_exe(), l7);
    rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 0 && strstr(rl_out, "flash attention") &&
                 strstr(rl_out, "| fits in 80.00 GiB | yes |") && !strstr(rl_out, "would fit"),
             "%s: exit %d:\n%s", l7, rc, rl_out);
    snprintf(cmd, sizeof cmd, "%s %s --attention naive", zt_zshard_exe(), l7);
    rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 0 && strstr(rl_out, "| fits in 80.00 GiB | **no** |") &&
                 strstr(rl_out, "ZeRO-3 does not fit in 80.00 GiB; would fit: --recompute block ("),
             "%s --attention naive: exit %d:\n%s", l7, rc, rl_out);
}

int main(void) {
    zt_init("recompute");
    rl_setup("recompute");
    test_cli();
    test_no_extra_gather();
    test_long_seq();
    test_model("gpt2-tiny", "fp32");
    test_model("llama-tiny", "fp32");
    test_model("gpt2-tiny", "bf16");
    test_model("llama-tiny", "bf16");
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

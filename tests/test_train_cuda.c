/* The trainer on a GPU, end to end through the CLI (ctest label gpu; in CI the emulated GPU,
 * zshard-emu, whose .cu files are the library's):
 *  - gpt2-tiny and llama-tiny, fp32 and bf16, ddp/1/2/3 on 1, 2 and 3 ranks, over NCCL (one GPU
 *    per rank) and over shm through pinned staging (ranks sharing one GPU): the stages are
 *    bitwise equal to each other for each world and backend, and the losses follow the CPU's
 *    within the tolerance derived below;
 *  - GPU memory per category, measured by the allocator, equals the estimator's prediction for
 *    --device cuda (the figures `zshard mem --device cuda` prints) exactly, and a --device-mem
 *    cap between ZeRO-3's and DDP's totals refuses DDP at startup and fits ZeRO-3;
 *  - resume from a GPU checkpoint is bitwise; a GPU checkpoint continues on the CPU and a CPU
 *    checkpoint on the GPU;
 *  - --tf32 on the GPU follows --tf32 on the CPU, its stages bitwise equal, and TF32 really is
 *    in use (the CPU's --tf32 losses differ from its fp32 ones);
 *  - eval and generate --device cuda agree with the CPU;
 *  - documents (--docs pad and pack: masks, positions, the loss over real targets): stages
 *    bitwise over NCCL, the CPU's losses within the tolerance, GPU memory as predicted;
 *  - --grad-accum 3, on text and with --docs pack: the token buffers' turns;
 *  - a rank killed on the NCCL path ends the job with the launcher naming it, within the
 *    timeout. */
#include "runlog.h"

#include <math.h>
#include <string.h>

static const char *STAGES[] = {"ddp", "1", "2", "3"};

/* One job: `env` goes before the executable (ZS_EMU_DEVICES, ...). */
static rl_run job(const char *env, const char *model, int nproc, const char *stage,
                  const char *dtype, const char *device, const char *extra) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, "timeout 300 env %s", env);
    rl_run r = rl_train(prefix,
                        "--model %s --batch 12 --seq 32 --steps 4 --lr 3e-3 --warmup 2 "
                        "--val-every 0 --val-batches 1 --sample-len 0 --nproc %d --stage %s "
                        "--dtype %s --device %s --comm-timeout 60 %s",
                        model, nproc, stage, dtype, device, extra);
    rl_check_exit(&r);
    return r;
}

/* Tolerance of a GPU run's losses against the CPU's, both at the start of training (4 steps):
 * the GPU sums in other orders (cuBLAS's GEMM blocking, NCCL's ring, CUDA's expf/logf within 2
 * ulp), each a relative change of k * 2^-24 for a dot product of k <= 4 * 64 terms, about
 * 1.5e-5, which two blocks and Adam's normalised steps carry forward without growth over 4 steps;
 * 1e-4 relative keeps an order of magnitude of room (a wrong slice, scale or missing reduction
 * moves the loss by 1e-2 or more). bf16 rounds parameters and the residual stream to 8 bits: a
 * tiny difference can flip a rounding, moving one value by 2^-8 relative, so 1e-2 relative.
 * TF32 GEMM inputs keep 11 bits, and a GPU's tensor cores may truncate where the CPU rounds
 * (2^-11 relative per input, averaging out over a dot product): 2e-3 relative. */
static double tolerance(const char *dtype) {
    return !strcmp(dtype, "bf16") ? 1e-2 : !strcmp(dtype, "tf32") ? 2e-3 : 1e-4;
}

static void check_follows(const rl_run *gpu, const rl_run *cpu, const char *what, double tol) {
    ZT_CHECK(gpu->n_steps == cpu->n_steps, "%s: %d steps vs the CPU's %d", what, gpu->n_steps,
             cpu->n_steps);
    for (int s = 0; s < gpu->n_steps && s < cpu->n_steps; s++)
        ZT_CHECK(fabs(gpu->lossv[s] - cpu->lossv[s]) <= tol * fabs(cpu->lossv[s]),
                 "%s step %d: loss %.9g, the CPU's %.9g (tolerance %g relative)", what, s + 1,
                 gpu->lossv[s], cpu->lossv[s], tol);
}

static void parity(const char *model, const char *dtype) {
    rl_run cpu = job("", model, 1, "ddp", dtype, "cpu", "");
    for (int n = 1; n <= 3; n++)
        for (int shared = 0; shared < (n > 1 ? 2 : 1); shared++) {
            /* One GPU per rank (nccl), or every rank on one GPU (shm through staging). */
            char env[64], what[160];
            snprintf(env, sizeof env, "ZS_EMU_DEVICES=%d", shared ? 1 : n);
            const char *comm = n == 1 ? "local" : shared ? "shm" : "nccl";
            snprintf(what, sizeof what, "%s %s parity over %s", model, dtype, comm);
            if (!shared && !zt_gpus_for(n, what)) continue;
            rl_run base = job(env, model, n, "ddp", dtype, "cuda", "");
            snprintf(what, sizeof what, "%s %s N=%d %s ddp", model, dtype, n, comm);
            check_follows(&base, &cpu, what, tolerance(dtype));
            /* chosen by the trainer, so said as its choice, not as a --comm never given */
            char said[64];
            snprintf(said, sizeof said, "comm %s (auto: ", comm);
            ZT_CHECK(n == 1 || strstr(rl_out, said), "%s: the banner does not say '%s':\n%s",
                     what, said, rl_out);
            for (int s = 1; s < 4; s++) {
                rl_run r = job(env, model, n, STAGES[s], dtype, "cuda", "");
                snprintf(what, sizeof what, "%s %s N=%d %s stage %s vs ddp", model, dtype, n, comm,
                         STAGES[s]);
                rl_check_same(&r, &base, what);
            }
        }
}

/* --tf32: the GPU's TF32 GEMMs against the CPU's, ZeRO-3 bitwise with DDP over NCCL. */
static void tf32(void) {
    rl_run fp = job("", "gpt2-tiny", 1, "ddp", "fp32", "cpu", "");
    rl_run cpu = job("", "gpt2-tiny", 1, "ddp", "fp32", "cpu", "--tf32");
    int differ = 0;
    for (int s = 0; s < cpu.n_steps && s < fp.n_steps; s++)
        differ |= strcmp(cpu.loss[s], fp.loss[s]) != 0;
    ZT_CHECK(differ, "--tf32 losses on the CPU are bitwise the fp32 ones: TF32 not in use");
    check_follows(&cpu, &fp, "tf32 on the CPU against fp32", tolerance("bf16"));
    rl_run ddp = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "ddp", "fp32", "cuda", "--tf32");
    rl_run z3 = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "3", "fp32", "cuda", "--tf32");
    check_follows(&ddp, &cpu, "tf32 N=2 nccl ddp against the CPU's tf32", tolerance("tf32"));
    rl_check_same(&z3, &ddp, "tf32 N=2 nccl stage 3 vs ddp");
}

static void memory_and_cap(void) {
    uint64_t total[4] = {0};
    for (int s = 0; s < 4; s++) {
        rl_run r = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, STAGES[s], "fp32", "cuda", "");
        ZT_CHECK(r.world == 2, "per-rank records: %d", r.world);
        for (int k = 0; k < r.world; k++)
            for (int c = 0; c <= ZS_MEM_NCAT; c++)
                ZT_CHECK(r.peak[k][c] == r.est[c],
                         "stage %s rank %d %s: GPU measured %llu bytes, predicted %llu", STAGES[s],
                         k, c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total",
                         (unsigned long long)r.peak[k][c], (unsigned long long)r.est[c]);
        total[s] = r.est[ZS_MEM_NCAT];
    }
    /* bf16 (bf16 gradients: the norm's pieces in the stream's scratch, the cast scratch) */
    rl_run b16 = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "2", "bf16", "cuda", "");
    for (int k = 0; k < b16.world; k++)
        for (int c = 0; c <= ZS_MEM_NCAT; c++)
            ZT_CHECK(b16.peak[k][c] == b16.est[c],
                     "bf16 stage 2 rank %d %s: GPU measured %llu bytes, predicted %llu", k,
                     c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total",
                     (unsigned long long)b16.peak[k][c], (unsigned long long)b16.est[c]);
    ZT_REQUIRE(total[3] < total[0], "ZeRO-3 (%llu) is not smaller than DDP (%llu)",
               (unsigned long long)total[3], (unsigned long long)total[0]);
    char cap[64];
    snprintf(cap, sizeof cap, "--device-mem %llu", (unsigned long long)(total[0] + total[3]) / 2);
    char prefix[128], cmd[1024];
    snprintf(prefix, sizeof prefix, "timeout 300 env ZS_EMU_DEVICES=2");
    rl_run ddp = rl_train(prefix,
                          "--model gpt2-tiny --batch 12 --seq 32 --steps 2 --sample-len 0 "
                          "--val-every 0 --nproc 2 --stage ddp --device cuda %s",
                          cap);
    ZT_CHECK(ddp.rc != 0 && strstr(rl_out, "--device-mem") && strstr(rl_out, "--stage 3"),
             "DDP under %s: exit %d, and the message must name the cap and a stage that fits:\n%s",
             cap, ddp.rc, rl_out);
    rl_run z3 = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "3", "fp32", "cuda", cap);
    ZT_CHECK(z3.ok && z3.n_steps == 4, "ZeRO-3 under %s did not train:\n%s", cap, rl_out);
    (void)cmd;
}

/* Hybrid sharding over NCCL: 4 GPUs in shard groups of 2 (NCCL communicators split from the
 * job's), ZeRO-1, 2 and 3 bitwise equal, following the CPU's same mesh within the GPU
 * tolerance, and device memory equal to the estimate on every rank. */
static void hsdp(void) {
    if (!zt_gpus_for(4, "hybrid sharding over 4 nccl ranks")) return;
    rl_run cpu = job("ZS_EMU_DEVICES=1", "gpt2-tiny", 4, "3", "fp32", "cpu", "--shard-group 2");
    rl_run one = job("ZS_EMU_DEVICES=4", "gpt2-tiny", 4, "1", "fp32", "cuda", "--shard-group 2");
    ZT_CHECK(strstr(rl_out, "shard group nccl (a group of an nccl communicator), replica group "
                            "nccl") != NULL,
             "the groups of an nccl job must be nccl:\n%s", rl_out);
    check_follows(&one, &cpu, "N=4 nccl --shard-group 2 against the CPU's", tolerance("fp32"));
    for (int s = 1; s <= 3; s++) {
        rl_run r = s == 1 ? one
                          : job("ZS_EMU_DEVICES=4", "gpt2-tiny", 4, STAGES[s], "fp32", "cuda",
                                "--shard-group 2");
        char what[96];
        snprintf(what, sizeof what, "N=4 nccl --shard-group 2 stage %s vs stage 1", STAGES[s]);
        rl_check_same(&r, &one, what);
        for (int k = 0; k < r.world; k++)
            for (int c = 0; c <= ZS_MEM_NCAT; c++)
                ZT_CHECK(r.peak[k][c] == r.est[c],
                         "N=4 nccl --shard-group 2 stage %s rank %d category %d: measured %llu, "
                         "estimated %llu",
                         STAGES[s], k, c, (unsigned long long)r.peak[k][c],
                         (unsigned long long)r.est[c]);
    }
}

/* Resume on the GPU is bitwise; GPU -> CPU and CPU -> GPU continue within the tolerance. */
static void checkpoints(void) {
    char extra[1024];
    const char *env = "ZS_EMU_DEVICES=2";
    snprintf(extra, sizeof extra, "--steps 6 --save-dir %s/gck --save-every 3", rl_dir());
    rl_run full = job(env, "llama-tiny", 2, "2", "fp32", "cuda", extra);
    snprintf(extra, sizeof extra, "--steps 6 --resume %s/gck/step_00000003", rl_dir());
    rl_run resumed = job(env, "llama-tiny", 2, "3", "fp32", "cuda", extra);
    ZT_CHECK(resumed.ok && !strcmp(resumed.hash, full.hash),
             "GPU resume at stage 3 from a stage-2 checkpoint: param_hash %s, uninterrupted %s",
             resumed.hash, full.hash);
    ZT_CHECK(resumed.n_steps == 3 && !strcmp(resumed.loss[2], full.loss[5]),
             "GPU resume: last loss %s vs %s", resumed.loss[2], full.loss[5]);
    /* To the CPU (shm, one rank) and back. */
    rl_run on_cpu = job("", "llama-tiny", 1, "ddp", "fp32", "cpu", extra);
    ZT_CHECK(on_cpu.ok && on_cpu.n_steps == 3, "the CPU did not continue the GPU checkpoint");
    for (int s = 0; s < 3 && on_cpu.n_steps == 3 && full.n_steps == 6; s++)
        ZT_CHECK(fabs(on_cpu.lossv[s] - full.lossv[s + 3]) <= 1e-4 * fabs(full.lossv[s + 3]),
                 "GPU -> CPU step %d: %.9g vs the GPU's %.9g", s + 4, on_cpu.lossv[s],
                 full.lossv[s + 3]);
    snprintf(extra, sizeof extra, "--steps 6 --save-dir %s/cck --save-every 3", rl_dir());
    rl_run cpu_full = job("", "llama-tiny", 1, "ddp", "fp32", "cpu", extra);
    snprintf(extra, sizeof extra, "--steps 6 --resume %s/cck/step_00000003", rl_dir());
    rl_run back = job("ZS_EMU_DEVICES=1", "llama-tiny", 1, "3", "fp32", "cuda", extra);
    ZT_CHECK(back.ok && back.n_steps == 3, "the GPU did not continue the CPU checkpoint");
    for (int s = 0; s < 3 && back.n_steps == 3 && cpu_full.n_steps == 6; s++)
        ZT_CHECK(fabs(back.lossv[s] - cpu_full.lossv[s + 3]) <= 1e-4 * fabs(cpu_full.lossv[s + 3]),
                 "CPU -> GPU step %d: %.9g vs the CPU's %.9g", s + 4, back.lossv[s],
                 cpu_full.lossv[s + 3]);
}

/* eval and generate on the GPU checkpoint, against the CPU. */
static void eval_generate(void) {
    char out[8192], ck[600];
    snprintf(ck, sizeof ck, "%s/gck", rl_dir());
    double loss[2];
    for (int d = 0; d < 2; d++) {
        int rc = zt_runf(out, sizeof out,
                         "ZS_EMU_DEVICES=2 timeout 300 %s eval %s --data %s/corpus.txt --seq 32 "
                         "--batches 2 --json --device %s --nproc 2 --stage 3",
                         zt_zshard_exe(), ck, rl_dir(), d ? "cpu" : "cuda");
        const char *p = strstr(out, "{\"loss\":");
        ZT_CHECK(rc == 0 && p, "eval --device %s: exit %d:\n%s", d ? "cpu" : "cuda", rc, out);
        loss[d] = p ? atof(p + 8) : -1;
    }
    ZT_CHECK(fabs(loss[0] - loss[1]) <= 1e-4 * fabs(loss[1]), "eval: GPU %.9g vs CPU %.9g", loss[0],
             loss[1]);
    /* Greedy with and without the KV cache on the GPU: the same tokens. */
    char got[2][4096];
    for (int c = 0; c < 2; c++) {
        int rc = zt_runf(got[c], sizeof got[c],
                         "ZS_EMU_DEVICES=1 timeout 300 %s generate %s --device cuda --prompt "
                         "'The ' --max-tokens 12 --temperature 0 --eos -1 %s",
                         zt_zshard_exe(), ck, c ? "--no-cache" : "");
        ZT_CHECK(rc == 0 && strlen(got[c]) > 0, "generate%s --device cuda: exit %d:\n%s",
                 c ? " --no-cache" : "", rc, got[c]);
    }
    /* The text follows the one stderr line that says how it was produced. */
    const char *t0 = strchr(got[0], '\n'), *t1 = strchr(got[1], '\n');
    ZT_CHECK(t0 && t1 && !strcmp(t0, t1),
             "KV-cache greedy on the GPU differs from the uncached:\n%s\n%s", got[0], got[1]);
}

/* SIGKILL of rank 1 at step 3 under NCCL: the job fails (not times out) well inside the 60 s
 * communication timeout, and the launcher names the rank. */
static void killed_rank(int grad_accum) {
    char out[1 << 16];
    if (!zt_gpus_for(2, "a rank killed among 2 nccl ranks")) return;
    int rc = zt_runf(out, sizeof out,
                     "ZS_EMU_DEVICES=2 ZS_FAULT_KILL=1:3 timeout 120 %s train --data %s/corpus.txt "
                     "--model gpt2-tiny --device cuda --nproc 2 --stage 3 --batch 12 --seq 32 "
                     "--steps 20 --comm-timeout 60 --sample-len 0 --val-every 0 --grad-accum %d",
                     zt_zshard_exe(), rl_dir(), grad_accum);
    ZT_CHECK(rc != 0 && rc != 124, "killed rank under nccl: exit %d (a failure, not a hang):\n%s",
             rc, out);
    ZT_CHECK(strstr(out, "zshard run: rank 1 (pid") && strstr(out, "killed by signal 9"),
             "the launcher must name rank 1:\n%s", out);
    /* The survivor's own error: the collective, its sequence number and unit, from NCCL. */
    ZT_CHECK(strstr(out, "[0] zshard: step ") && strstr(out, "nccl: ") && strstr(out, " #") &&
                 strstr(out, "(tag '") && strstr(out, "on rank 0"),
             "rank 0 must report the nccl collective it was in, with its tag:\n%s", out);
}

/* ZS_TEST_QUICK (the broken builds' check, emu_mutant_*): ZeRO-3 against DDP over NCCL on 2
 * ranks, and the CPU, for gpt2-tiny in fp32. */
static void quick(void) {
    rl_run cpu = job("", "gpt2-tiny", 1, "ddp", "fp32", "cpu", "");
    rl_run ddp = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "ddp", "fp32", "cuda", "");
    rl_run z3 = job("ZS_EMU_DEVICES=2", "gpt2-tiny", 2, "3", "fp32", "cuda", "");
    check_follows(&ddp, &cpu, "quick: ddp on the GPU against the CPU's", tolerance("fp32"));
    rl_check_same(&z3, &ddp, "quick: N=2 nccl stage 3 vs ddp");
}

/* ZS_TEST_QUICK=bf16 (the embed_no_twin mutant), and in the full run: gpt2-tiny in bf16 on one
 * GPU, whose compute copy leaves the weights that GEMMs and the embedding read from the bf16 copy
 * unwidened (shard/engine_bf16.c), against the CPU's; and for gpt2-tiny and llama-tiny
 * --recompute block, whose norms' backward reads the kept block inputs widened to fp32 where
 * without it they read the bf16 records as stored (models/stack.h): bitwise the same run. */
static void quick_bf16(void) {
    rl_run cpu = job("", "gpt2-tiny", 1, "ddp", "bf16", "cpu", "");
    rl_run one = job("ZS_EMU_DEVICES=1", "gpt2-tiny", 1, "ddp", "bf16", "cuda", "");
    rl_run rec =
        job("ZS_EMU_DEVICES=1", "gpt2-tiny", 1, "ddp", "bf16", "cuda", "--recompute block");
    check_follows(&one, &cpu, "quick bf16: gpt2-tiny N=1 against the CPU's", tolerance("bf16"));
    rl_check_same(&rec, &one, "bf16 gpt2-tiny N=1 --recompute block vs none");
    rl_run l1 = job("ZS_EMU_DEVICES=1", "llama-tiny", 1, "ddp", "bf16", "cuda", "");
    rl_run lr =
        job("ZS_EMU_DEVICES=1", "llama-tiny", 1, "ddp", "bf16", "cuda", "--recompute block");
    rl_check_same(&lr, &l1, "bf16 llama-tiny N=1 --recompute block vs none");
}

/* --docs pad (GPT-2's learned positions) and pack (LLaMA's RoPE) on a corpus of '%'-separated
 * documents: the document starts go to the GPU with the tokens, and every masked kernel runs. */
static void documents(void) {
    char path[600], extra[800];
    snprintf(path, sizeof path, "%s/docs.txt", rl_dir());
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "create %s", path);
    for (int d = 0; d < 400; d++) {
        for (int w = 0; w <= (d * 7) % 23; w++)
            fprintf(f, "%s%s", w ? " " : "", (d + w) % 3 ? "the sea" : "a king");
        fprintf(f, ".\n%%\n");
    }
    fclose(f);
    const char *modes[][2] = {{"pad", "gpt2-tiny"}, {"pack", "llama-tiny"}};
    for (int m = 0; m < 2; m++) {
        char what[160];
        snprintf(extra, sizeof extra, "--data %s --docs %s --doc-sep %%", path, modes[m][0]);
        rl_run cpu = job("", modes[m][1], 1, "ddp", "fp32", "cpu", extra);
        snprintf(what, sizeof what, "--docs %s %s", modes[m][0], modes[m][1]);
        if (!zt_gpus_for(2, what)) continue;
        rl_run ddp = job("ZS_EMU_DEVICES=2", modes[m][1], 2, "ddp", "fp32", "cuda", extra);
        rl_run z3 = job("ZS_EMU_DEVICES=2", modes[m][1], 2, "3", "fp32", "cuda", extra);
        snprintf(what, sizeof what, "--docs %s %s N=2 nccl ddp", modes[m][0], modes[m][1]);
        check_follows(&ddp, &cpu, what, tolerance("fp32"));
        snprintf(what, sizeof what, "--docs %s %s N=2 nccl stage 3 vs ddp", modes[m][0],
                 modes[m][1]);
        rl_check_same(&z3, &ddp, what);
        for (int k = 0; k < z3.world; k++)
            for (int c = 0; c <= ZS_MEM_NCAT; c++)
                ZT_CHECK(z3.peak[k][c] == z3.est[c],
                         "--docs %s rank %d %s: GPU measured %llu bytes, predicted %llu",
                         modes[m][0], k,
                         c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total",
                         (unsigned long long)z3.peak[k][c], (unsigned long long)z3.est[c]);
    }
}

/* --grad-accum 3: every micro-batch's tokens reach the GPU through the two pinned buffers in
 * turn, each refilled only once its last upload has been copied. gpt2-tiny on text, and
 * llama-tiny with --docs pack (the document starts travel with the tokens): the losses follow
 * the CPU's, and over NCCL ZeRO-1 is bitwise DDP and ZeRO-3 bitwise ZeRO-2 (with K > 1 the two
 * pairs sum in different orders, docs/sharding.md "Gradient accumulation"). quick
 * (ZS_TEST_QUICK=accum, the early_event mutant): gpt2-tiny on one GPU against the CPU. */
static void grad_accum(int quick_only) {
    char path[600], extra[800], what[200];
    snprintf(path, sizeof path, "%s/accum.txt", rl_dir());
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f, "create %s", path);
    for (int d = 0; d < 300; d++)
        fprintf(f, "%s %d.\n%%\n", d % 3 ? "the sea came in" : "a king", d);
    fclose(f);
    for (int m = 0; m < (quick_only ? 1 : 2); m++) {
        const char *model = m ? "llama-tiny" : "gpt2-tiny";
        const char *label = m ? "--grad-accum 3 --docs pack" : "--grad-accum 3";
        if (m)
            snprintf(extra, sizeof extra, "--grad-accum 3 --data %s --docs pack --doc-sep %%",
                     path);
        else
            snprintf(extra, sizeof extra, "--grad-accum 3");
        rl_run cpu = job("", model, 1, "ddp", "fp32", "cpu", extra);
        if (quick_only) {
            rl_run one = job("ZS_EMU_DEVICES=1", model, 1, "ddp", "fp32", "cuda", extra);
            snprintf(what, sizeof what, "%s %s N=1 against the CPU's", model, label);
            check_follows(&one, &cpu, what, tolerance("fp32"));
            continue;
        }
        snprintf(what, sizeof what, "%s %s", model, label);
        if (!zt_gpus_for(2, what)) continue;
        rl_run r[4];
        for (int s = 0; s < 4; s++)
            r[s] = job("ZS_EMU_DEVICES=2", model, 2, STAGES[s], "fp32", "cuda", extra);
        for (int s = 0; s < 4; s += 2) {
            snprintf(what, sizeof what, "%s %s N=2 nccl stage %s against the CPU's", model, label,
                     STAGES[s]);
            check_follows(&r[s], &cpu, what, tolerance("fp32"));
            snprintf(what, sizeof what, "%s %s N=2 nccl stage %s vs %s", model, label,
                     STAGES[s + 1], STAGES[s]);
            rl_check_same(&r[s + 1], &r[s], what);
        }
    }
}

int main(void) {
    zt_init("train_cuda");
    zt_gpu_require();
    rl_setup("train_cuda");
    const char *q = getenv("ZS_TEST_QUICK");
    if (q && *q) {
        if (!strcmp(q, "accum"))
            grad_accum(1);
        else if (!strcmp(q, "hsdp"))
            hsdp();
        else if (!strcmp(q, "bf16"))
            quick_bf16();
        else
            quick();
        ZT_CHECK(rl_cleanup() == 0, "cleanup");
        return zt_finish();
    }
    grad_accum(0);
    quick_bf16();
    memory_and_cap();
    tf32();
    checkpoints();
    eval_generate();
    documents();
    /* With 3 micro-batches a token upload waits behind ZeRO-3's gathers: that wait too must
     * see the dead peer. */
    killed_rank(1);
    killed_rank(3);
    hsdp();
    for (int m = 0; m < 2; m++)
        for (int d = 0; d < 2; d++)
            parity(m ? "llama-tiny" : "gpt2-tiny", d ? "bf16" : "fp32");
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

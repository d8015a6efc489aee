/* --offload optimizer on a GPU, end to end through the CLI (ctest label gpu; in CI the emulated
 * GPU, whose stream workers run copies and kernels asynchronously to the host):
 *  - the final param_hash of an offloaded run equals the run without offload, at ddp/1/2/3 on
 *    1, 2 and 3 ranks (one GPU each, NCCL), fp32 and bf16 (bf16 gradients), and with
 *    --offload params at ZeRO-3;
 *  - GPU bytes per category equal the estimator's (what `zshard mem --offload optimizer`
 *    prints) exactly, and so do the pinned host bytes of the offloaded state, on every rank,
 *    for whole offload and for --offload-fraction 0.5 (whose run is bitwise the same too);
 *  - a --device-mem cap under which ZeRO-3 alone is refused fits ZeRO-3 with offload, and the
 *    refusal suggests it; a lower one fits only --offload params;
 *  - a host without the pinned memory the offloaded state needs refuses the run before step 1;
 *  - resume is bitwise, and checkpoints continue across offload modes and stages;
 *  - with --grad-clip 0 the host steps units during the backward, with the same bits;
 *  - hybrid sharding (--shard-group 2 of 4 GPUs) offloads with the same bits and exact host
 *    bytes;
 *  - ZS_TEST_QUICK=offload (the broken builds' check): one offloaded run against the same run
 *    without, with a delay before every stream task, so a missing wait shows. */
#include "runlog.h"

#include <string.h>

static const char *STAGES[] = {"ddp", "1", "2", "3"};

/* One job (its exit not checked). */
static rl_run run(int nproc, const char *stage, const char *dtype, const char *offload,
                  const char *extra) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "timeout 300 env ZS_EMU_DEVICES=%d", nproc);
    return rl_train(prefix,
                    "--model gpt2-tiny --batch 6 --seq 32 --steps 3 --lr 3e-3 --warmup 2 "
                    "--val-every 0 --val-batches 1 --sample-len 0 --nproc %d --stage %s "
                    "--dtype %s --device cuda --comm-timeout 60 --offload %s %s",
                    nproc, stage, dtype, offload, extra);
}

/* One job that must succeed. */
static rl_run job(int nproc, const char *stage, const char *dtype, const char *offload,
                  const char *extra) {
    rl_run r = run(nproc, stage, dtype, offload, extra);
    rl_check_exit(&r);
    return r;
}

static void parity(void) {
    for (int n = 1; n <= 3; n++) {
        char what[160];
        snprintf(what, sizeof what, "offload parity on %d ranks", n);
        if (!zt_gpus_for(n, what)) continue;
        for (int d = 0; d < 2; d++) {
            const char *dtype = d ? "bf16" : "fp32";
            /* The stages are bitwise equal without offload (train_cuda): one reference. */
            rl_run base = job(n, "3", dtype, "none", "");
            for (int s = 0; s < 4; s++) {
                rl_run r = job(n, STAGES[s], dtype, "optimizer", "");
                snprintf(what, sizeof what, "%s N=%d stage %s offloaded vs not", dtype, n,
                         STAGES[s]);
                rl_check_same(&r, &base, what);
            }
            rl_run p = job(n, "3", dtype, "params", "");
            snprintf(what, sizeof what, "%s N=%d stage 3 --offload params vs not", dtype, n);
            rl_check_same(&p, &base, what);
        }
    }
}

/* Hybrid sharding (4 GPUs in shard groups of 2): offloaded units step after the replicas'
 * all-reduce, so offload keeps the bits at ZeRO-1/2/3 and with --offload params, also with
 * --grad-clip 0 (no unit is stepped during the backward then); pinned host bytes are ZeRO's
 * at N = 2 and equal the estimate. */
static void hsdp(void) {
    if (!zt_gpus_for(4, "offload with hybrid sharding")) return;
    rl_run base = job(4, "3", "bf16", "none", "--shard-group 2 --batch 8");
    for (int s = 1; s <= 3; s++) {
        char what[96];
        rl_run r =
            job(4, STAGES[s], "bf16", "optimizer", "--shard-group 2 --grad-clip 0 --batch 8");
        snprintf(what, sizeof what, "bf16 4 ranks --shard-group 2 stage %s offloaded", STAGES[s]);
        rl_check_same(&r,
                      (rl_run[]){job(4, STAGES[s], "bf16", "none",
                                     "--shard-group 2 --grad-clip 0 --batch 8")},
                      what);
        for (int k = 0; k < r.hworld; k++)
            ZT_CHECK(r.hpeak[k][ZS_MEM_NCAT] == r.hest[ZS_MEM_NCAT] && r.hest[ZS_MEM_NCAT] > 0,
                     "%s rank %d: pinned host %llu, estimated %llu", what, k,
                     (unsigned long long)r.hpeak[k][ZS_MEM_NCAT],
                     (unsigned long long)r.hest[ZS_MEM_NCAT]);
    }
    rl_check_same((rl_run[]){job(4, "3", "bf16", "params", "--shard-group 2 --batch 8")}, &base,
                  "bf16 4 ranks --shard-group 2 stage 3 --offload params vs not");
}

/* --grad-clip 0: the host steps each offloaded unit as its gradients come down (engine_ahead.c),
 * the same bits as the step after the backward. ZeRO-3's pool folds all but the last units'
 * reductions during the backward, so their host steps are queued then (the debug log counts
 * them); DDP/ZeRO-1 across ranks reduce in the drain, so theirs are queued at the step. */
static void ahead(void) {
    if (!zt_gpus_for(2, "offload with the host step during the backward")) return;
    static const char *stages[] = {"1", "3"};
    for (int d = 0; d < 2; d++) {
        const char *dtype = d ? "bf16" : "fp32";
        rl_run base = job(2, "3", dtype, "none", "--grad-clip 0");
        for (int s = 0; s < 2; s++) {
            rl_run r = rl_train("timeout 300 env ZS_EMU_DEVICES=2 ZS_LOG_LEVEL=debug",
                                "--model gpt2-tiny --batch 6 --seq 32 --steps 3 --lr 3e-3 "
                                "--warmup 2 --val-every 0 --val-batches 1 --sample-len 0 --nproc 2 "
                                "--stage %s --dtype %s --device cuda --comm-timeout 60 "
                                "--offload optimizer --grad-clip 0",
                                stages[s], dtype);
            rl_check_exit(&r);
            char what[160];
            snprintf(what, sizeof what, "%s N=2 stage %s offloaded vs not, --grad-clip 0", dtype,
                     stages[s]);
            rl_check_same(&r, &base, what);
            const char *line = strstr(rl_out, "offload: step 3: ");
            int queued = -1, n_off = -1;
            if (line) sscanf(line, "offload: step 3: %d of %d", &queued, &n_off);
            int want_early = !strcmp(stages[s], "3");
            ZT_CHECK(n_off > 0 && (want_early ? queued > 0 && queued < n_off : queued == 0),
                     "%s: %d of %d units' host steps queued during the backward (ZeRO-3: some, "
                     "the last folded in the drain; ZeRO-1: none)",
                     what, queued, n_off);
        }
    }
}

/* full: every unit offloaded (no Adam state left on the GPU); else a fraction (some on each). */
static void check_memory(const rl_run *r, const char *what, int full) {
    ZT_CHECK(r->world >= 1 && r->hworld == r->world, "%s: %d device and %d host records", what,
             r->world, r->hworld);
    for (int k = 0; k < r->world; k++)
        for (int c = 0; c <= ZS_MEM_NCAT; c++) {
            const char *name = c < ZS_MEM_NCAT ? zs_mem_category_name((zs_mem_category)c) : "total";
            ZT_CHECK(r->peak[k][c] == r->est[c], "%s rank %d %s: GPU measured %llu, predicted %llu",
                     what, k, name, (unsigned long long)r->peak[k][c],
                     (unsigned long long)r->est[c]);
            ZT_CHECK(r->hpeak[k][c] == r->hest[c],
                     "%s rank %d %s: pinned host measured %llu, predicted %llu", what, k, name,
                     (unsigned long long)r->hpeak[k][c], (unsigned long long)r->hest[c]);
        }
    ZT_CHECK((full ? r->est[ZS_MEM_OPTIM_STATE] == 0 : r->est[ZS_MEM_OPTIM_STATE] > 0) &&
                 r->hest[ZS_MEM_OPTIM_STATE] > 0,
             "%s: Adam state predicted %llu bytes on the GPU, %llu on the host", what,
             (unsigned long long)r->est[ZS_MEM_OPTIM_STATE],
             (unsigned long long)r->hest[ZS_MEM_OPTIM_STATE]);
}

static void memory_and_cap(void) {
    if (!zt_gpus_for(2, "offload memory")) return;
    rl_run ddp = job(2, "ddp", "fp32", "optimizer", "");
    check_memory(&ddp, "fp32 ddp", 1);
    rl_run b2 = job(2, "2", "bf16", "optimizer", "");
    check_memory(&b2, "bf16 stage 2", 1);
    rl_run z3o = job(2, "3", "fp32", "optimizer", "");
    check_memory(&z3o, "fp32 stage 3", 1);
    /* A fraction: the first units on the host, the others' state on the GPU, the same bits. */
    rl_run fr = job(2, "3", "bf16", "optimizer", "--offload-fraction 0.5");
    check_memory(&fr, "bf16 stage 3 --offload-fraction 0.5", 0);
    rl_run b3 = job(2, "3", "bf16", "none", "");
    rl_check_same(&fr, &b3, "bf16 N=2 stage 3 half offloaded vs not");
    ZT_CHECK(fr.hest[ZS_MEM_NCAT] < b2.hest[ZS_MEM_NCAT] &&
                 fr.est[ZS_MEM_NCAT] < b3.est[ZS_MEM_NCAT],
             "--offload-fraction 0.5: host %llu bytes (all offloaded %llu), GPU %llu (none %llu)",
             (unsigned long long)fr.hest[ZS_MEM_NCAT], (unsigned long long)b2.hest[ZS_MEM_NCAT],
             (unsigned long long)fr.est[ZS_MEM_NCAT], (unsigned long long)b3.est[ZS_MEM_NCAT]);
    rl_run z3 = job(2, "3", "fp32", "none", "");
    uint64_t with = z3o.est[ZS_MEM_NCAT], without = z3.est[ZS_MEM_NCAT];
    ZT_REQUIRE(with < without, "offloaded ZeRO-3 (%llu bytes) is not smaller than ZeRO-3 (%llu)",
               (unsigned long long)with, (unsigned long long)without);
    char cap[64];
    snprintf(cap, sizeof cap, "--device-mem %llu", (unsigned long long)(with + without) / 2);
    rl_run refused = run(2, "3", "fp32", "none", cap);
    ZT_CHECK(refused.rc != 0 && strstr(rl_out, "--device-mem") &&
                 strstr(rl_out, "--offload optimizer"),
             "ZeRO-3 under %s: exit %d; the message must name the cap and suggest offload:\n%s",
             cap, refused.rc, rl_out);
    rl_run fits = job(2, "3", "fp32", "optimizer", cap);
    ZT_CHECK(fits.ok && fits.n_steps == 3 && !strcmp(fits.hash, z3.hash),
             "offloaded ZeRO-3 under %s: %d steps, param_hash %s (without the cap %s):\n%s", cap,
             fits.n_steps, fits.hash, z3.hash, rl_out);
    /* --offload params: the parameter shard leaves the GPU too. Under a cap between its total
     * and the optimizer offload's, only it fits, and the refusal says so. */
    rl_run z3p = job(2, "3", "fp32", "params", "");
    check_memory(&z3p, "fp32 stage 3 --offload params", 1);
    ZT_CHECK(z3p.est[ZS_MEM_PARAM_SHARD] == 0 && z3p.est[ZS_MEM_NCAT] < with,
             "--offload params: %llu parameter-shard bytes left on the GPU, total %llu (optimizer "
             "offload %llu)",
             (unsigned long long)z3p.est[ZS_MEM_PARAM_SHARD],
             (unsigned long long)z3p.est[ZS_MEM_NCAT], (unsigned long long)with);
    snprintf(cap, sizeof cap, "--device-mem %llu",
             (unsigned long long)(z3p.est[ZS_MEM_NCAT] + with) / 2);
    refused = run(2, "3", "fp32", "optimizer", cap);
    ZT_CHECK(refused.rc != 0 && strstr(rl_out, "--device-mem"),
             "optimizer offload under %s: exit %d:\n%s", cap, refused.rc, rl_out);
    refused = run(2, "3", "fp32", "none", cap);
    ZT_CHECK(refused.rc != 0 && strstr(rl_out, "--offload params"),
             "ZeRO-3 under %s: exit %d; the message must suggest --offload params:\n%s", cap,
             refused.rc, rl_out);
    fits = job(2, "3", "fp32", "params", cap);
    ZT_CHECK(fits.ok && fits.n_steps == 3 && !strcmp(fits.hash, z3.hash),
             "--offload params under %s: %d steps, param_hash %s (ZeRO-3 %s):\n%s", cap,
             fits.n_steps, fits.hash, z3.hash, rl_out);
    rl_run b3p = job(2, "3", "bf16", "params", "");
    check_memory(&b3p, "bf16 stage 3 --offload params", 1);
}

static void checkpoints(void) {
    char extra[1024];
    if (!zt_gpus_for(2, "offload checkpoints")) return;
    snprintf(extra, sizeof extra, "--steps 6 --save-dir %s/ock --save-every 3", rl_dir());
    rl_run full = job(2, "2", "bf16", "optimizer", extra);
    snprintf(extra, sizeof extra, "--steps 6 --resume %s/ock/step_00000003", rl_dir());
    struct {
        const char *stage, *offload, *what;
    } cases[] = {{"2", "optimizer", "offloaded, resumed offloaded"},
                 {"3", "none", "offloaded at stage 2, resumed at stage 3 without offload"},
                 {"ddp", "optimizer", "offloaded at stage 2, resumed offloaded at ddp"},
                 {"3", "params", "optimizer offloaded at stage 2, resumed with params at 3"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rl_run r = job(2, cases[i].stage, "bf16", cases[i].offload, extra);
        ZT_CHECK(r.ok && r.n_steps == 3 && !strcmp(r.hash, full.hash),
                 "%s: %d steps, param_hash %s, uninterrupted %s", cases[i].what, r.n_steps, r.hash,
                 full.hash);
    }
    /* A checkpoint saved without offload continues offloaded, on another world size. */
    snprintf(extra, sizeof extra, "--steps 6 --save-dir %s/nck --save-every 3", rl_dir());
    rl_run plain = job(2, "1", "fp32", "none", extra);
    snprintf(extra, sizeof extra, "--steps 6 --resume %s/nck/step_00000003", rl_dir());
    rl_run r = job(2, "3", "fp32", "optimizer", extra);
    ZT_CHECK(r.ok && r.n_steps == 3 && !strcmp(r.hash, plain.hash),
             "saved without offload at stage 1, resumed offloaded at stage 3: param_hash %s, "
             "uninterrupted %s",
             r.hash, plain.hash);
}

/* Pinned host memory the host does not have: refused before step 1 (before any of it is
 * allocated), naming the need and what the host has. */
static void host_shortfall(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    /* llama-7b's master, Adam state and gradients on the host: 16 bytes x 6.5G parameters */
    if (kb == 0 || kb > 90ull * 1024 * 1024) {
        printf("not run: the host shortfall needs a host with less than 90 GiB available "
               "(MemAvailable %llu kB)\n",
               kb);
        return;
    }
    char prefix[64];
    snprintf(prefix, sizeof prefix, "timeout 120 env ZS_EMU_DEVICES=1");
    rl_run r = rl_train(prefix, "--model llama-7b --batch 1 --seq 64 --steps 1 --sample-len 0 "
                                "--val-every 0 --device cuda --offload optimizer");
    ZT_CHECK(r.rc != 0 && r.rc != 124 && r.n_steps == 0 && strstr(rl_out, "pinned host memory") &&
                 strstr(rl_out, "MemAvailable"),
             "llama-7b offloaded on one rank: exit %d after %d steps; the message must name the "
             "pinned host memory it needs and what the host has:\n%s",
             r.rc, r.n_steps, rl_out);
}

/* The broken builds' check: a run whose host step or upload is not waited for differs. */
static void quick(void) {
    if (!zt_gpus_for(2, "offload quick")) return;
    rl_run base = job(2, "2", "bf16", "none", "");
    rl_run r = job(2, "2", "bf16", "optimizer", "");
    rl_check_same(&r, &base, "quick: bf16 N=2 stage 2 offloaded vs not");
    /* without a clip the host steps during the backward, on a thread of its own */
    base = job(2, "2", "bf16", "none", "--grad-clip 0");
    r = job(2, "2", "bf16", "optimizer", "--grad-clip 0");
    rl_check_same(&r, &base, "quick: bf16 N=2 stage 2 offloaded vs not, --grad-clip 0");
}

int main(void) {
    zt_init("offload");
    zt_gpu_require();
    rl_setup("offload");
    const char *q = getenv("ZS_TEST_QUICK");
    if (q && !strcmp(q, "hsdp")) {
        hsdp();
    } else if (q && *q) {
        quick();
    } else {
        memory_and_cap();
        host_shortfall();
        checkpoints();
        ahead();
        hsdp();
        parity();
    }
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

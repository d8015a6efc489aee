/* Hybrid sharding (HSDP, `--shard-group S` / `--replicate R`) on one host, end to end through
 * `zshard train --nproc N` (docs/sharding.md "Hybrid sharding"):
 *  - ZeRO-1, 2 and 3 within the same mesh are bitwise equal (losses and param_hash), fp32 and
 *    bf16, at 2 x 2, 3 x 2 and 2 x 3, ZeRO-2 and 3 with micro-batches too, and --replicate R
 *    names the same mesh as --shard-group N/R;
 *  - R = 1 is bitwise flat ZeRO, and a mesh's losses follow flat ZeRO-3's within the
 *    tolerance derived below;
 *  - measured memory equals the estimator's per rank and category, and the model states the
 *    formula at N = S;
 *  - checkpoints: one file per shard (the first group writes), resumed bitwise at another stage
 *    of the mesh and after an offline reshard, and within the world-size tolerance at other
 *    meshes and world sizes; a writer killed during a save leaves the previous one as latest;
 *  - a killed rank is named and ends the job well before --comm-timeout;
 *  - meshes that cannot be made are refused with one message naming the flag;
 *  - `zshard mem --nnodes --shard-group` prints the bytes a rank sends per step in its group,
 *    to its replicas and across hosts, as docs/sharding.md's formulas say.
 * Across hosts (namespaces) and on the emulated GPU: test_multihost.sh, test_train_cuda.c. */
#include "models/model.h"
#include "runlog.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define STEPS 6

static const char *STAGES[] = {"ddp", "1", "2", "3"};

static rl_run train(const char *env, int nproc, const char *stage, const char *extra) {
    return rl_train_tiny(env, 180, STEPS, nproc, stage, extra);
}

static rl_run train_ok(int nproc, const char *stage, const char *extra) {
    rl_run r = train("", nproc, stage, extra);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.hash[0], "N=%d stage %s %s: no final record\n%s", nproc, stage, extra,
             rl_out);
    return r;
}

/* Tolerance against flat ZeRO at the same world size: a mesh regroups the sum over ranks of
 * each gradient element ((g0 + g1) + (g2 + g3) instead of ((g0 + g1) + g2) + g3), one fp32
 * rounding of up to 2^-24 relative per element and step, which Adam's normalised updates
 * carry forward without growth over 6 steps: ~1e-7 relative on the loss. 1e-5 relative is the
 * world-size tolerance of test_parity.c: two orders of magnitude of room, while a missing
 * replica all-reduce (half the gradient) moves the loss by 1e-3 or more. */
static void check_follows(const rl_run *r, const rl_run *ref, int first, const char *what) {
    ZT_CHECK(r->n_steps == STEPS - first + 1, "%s: %d steps", what, r->n_steps);
    for (int i = 0; i < r->n_steps; i++) {
        int s = r->step[i];
        double a = r->lossv[i], b = s >= 1 && s <= ref->n_steps ? ref->lossv[s - 1] : 0;
        ZT_CHECK(s == first + i && fabs(a - b) <= 1e-5 * fabs(b),
                 "%s: step %d loss %.9g vs %.9g (1e-5 relative)", what, s, a, b);
    }
}

/* The resumed run's steps are the tail of the full run's, bit for bit. */
static void same_tail(const rl_run *full, const rl_run *res, const char *what) {
    int eq = res->n_steps == STEPS - 3 && !strcmp(full->hash, res->hash);
    for (int i = 0; eq && i < res->n_steps; i++)
        eq = res->step[i] == 4 + i && !strcmp(res->loss[i], full->loss[res->step[i] - 1]);
    ZT_CHECK(eq, "%s: resumed run differs (hash %s vs %s, %d steps, first loss %s vs %s)", what,
             res->hash, full->hash, res->n_steps, res->n_steps ? res->loss[0] : "",
             full->n_steps >= 4 ? full->loss[3] : "");
}

static void test_stages(void) {
    for (int b = 0; b < 2; b++) {
        const char *dt = b ? "--dtype bf16 --shard-group 2" : "--shard-group 2";
        rl_run one = train_ok(4, "1", dt);
        ZT_CHECK(one.n_steps == STEPS, "4 ranks %s: %d steps", dt, one.n_steps);
        ZT_CHECK(strstr(rl_out, "hybrid sharding (--shard-group 2): 2 replicas x shard groups of "
                                "2 ranks; shard group shm") != NULL,
                 "the banner does not name the mesh:\n%s", rl_out);
        for (int s = 2; s <= 3; s++) {
            char what[96];
            snprintf(what, sizeof what, "4 ranks %s: stage %s vs stage 1", dt, STAGES[s]);
            rl_check_same((rl_run[]){train_ok(4, STAGES[s], dt)}, &one, what);
        }
    }
    /* 6 ranks: 3 groups of 2, and 2 groups of 3 (uneven shards). */
    const char *meshes[] = {"--shard-group 2", "--shard-group 3"};
    for (int m = 0; m < 2; m++) {
        rl_run one = train_ok(6, "1", meshes[m]);
        char what[96];
        snprintf(what, sizeof what, "6 ranks %s: stage 3 vs stage 1", meshes[m]);
        rl_check_same((rl_run[]){train_ok(6, "3", meshes[m])}, &one, what);
    }
    /* Micro-batches: ZeRO-2 and 3 reduce-scatter each one, in the same order (ZeRO-1 sums them
     * first, as flat ZeRO-1 does: its bits are ddp's order, tested flat in test_parity.c). */
    rl_run k2 = train_ok(4, "2", "--shard-group 2 --grad-accum 3");
    rl_check_same((rl_run[]){train_ok(4, "3", "--shard-group 2 --grad-accum 3")}, &k2,
                  "4 ranks --shard-group 2 --grad-accum 3: stage 3 vs stage 2");
    rl_run s2 = train_ok(4, "2", "--shard-group 2");
    rl_check_same((rl_run[]){train_ok(4, "2", "--replicate 2")}, &s2,
                  "--replicate 2 vs --shard-group 2 on 4 ranks");
}

static void test_flat(void) {
    rl_run flat = train_ok(4, "3", "");
    rl_check_same((rl_run[]){train_ok(4, "3", "--shard-group 4")}, &flat,
                  "--shard-group 4 (R = 1) vs flat ZeRO-3");
    rl_check_same((rl_run[]){train_ok(4, "3", "--replicate 1")}, &flat,
                  "--replicate 1 vs flat ZeRO-3");
    rl_run mesh = train_ok(4, "3", "--shard-group 2");
    check_follows(&mesh, &flat, 1, "2 x 2 mesh vs flat ZeRO-3");
    ZT_CHECK(strcmp(mesh.hash, flat.hash) != 0,
             "the 2 x 2 mesh ended bitwise equal to flat ZeRO-3: its sums were not regrouped");
}

static void test_memory(void) {
    zs_model_config c;
    ZT_OK(zs_model_preset("gpt2-tiny", &c));
    zs_model_config_set_vocab(&c, 256);
    zs_layout l;
    ZT_OK(zs_model_layout(&c, 2, &l));
    for (int b = 0; b < 2; b++)
        for (int s = 1; s <= 3; s++) {
            rl_run r =
                train_ok(4, STAGES[s], b ? "--shard-group 2 --dtype bf16" : "--shard-group 2");
            uint64_t want[ZS_MEM_NCAT];
            rl_fp32_model_states(&l, 2, s, want); /* the formula at N = S */
            ZT_CHECK(r.world == 4, "per-rank records: %d", r.world);
            for (int k = 0; k < r.world; k++) {
                for (int cat = 0; cat <= ZS_MEM_NCAT; cat++)
                    ZT_CHECK(r.peak[k][cat] == r.est[cat],
                             "2 x 2 stage %s %s rank %d category %d: measured %llu, estimated "
                             "%llu",
                             STAGES[s], b ? "bf16" : "fp32", k, cat,
                             (unsigned long long)r.peak[k][cat], (unsigned long long)r.est[cat]);
                for (int cat = ZS_MEM_PARAM; !b && cat <= ZS_MEM_OPTIM_STATE; cat++)
                    ZT_CHECK(r.peak[k][cat] == want[cat],
                             "2 x 2 stage %s rank %d category %d: measured %llu, formula at N = 2 "
                             "%llu",
                             STAGES[s], k, cat, (unsigned long long)r.peak[k][cat],
                             (unsigned long long)want[cat]);
            }
        }
    zs_layout_free(&l);
}

static void test_checkpoints(void) {
    char extra[1024], cmd[2048], p[1024];
    snprintf(extra, sizeof extra, "--shard-group 2 --save-dir %s/h --save-every 3", rl_dir());
    rl_run full = train_ok(4, "3", extra);
    /* One file per shard, written by the first group: a checkpoint of 2 ranks. */
    snprintf(cmd, sizeof cmd, "%s ckpt inspect %s/h/step_00000003", zt_zshard_exe(), rl_dir());
    ZT_CHECK(zt_run(cmd, rl_out, sizeof rl_out) == 0 && strstr(rl_out, "saved by    2 ranks") &&
                 strstr(rl_out, "files       2 "),
             "the 2 x 2 mesh's checkpoint is not 2 shard files:\n%s", rl_out);
    snprintf(p, sizeof p, "%s/h/step_00000003/rank_00002.zst", rl_dir());
    struct stat sb;
    ZT_CHECK(stat(p, &sb) != 0, "a replica wrote %s", p);
    /* At another stage of the same mesh: bitwise. */
    snprintf(extra, sizeof extra, "--shard-group 2 --resume %s/h/step_00000003", rl_dir());
    same_tail(&full, (rl_run[]){train_ok(4, "1", extra)}, "resumed at ZeRO-1 of the mesh");
    /* Through another world size offline (3 ranks, uneven shards) and back: bitwise. */
    snprintf(cmd, sizeof cmd, "%s ckpt reshard %s/h/step_00000003 --nproc 3 %s/h3", zt_zshard_exe(),
             rl_dir(), rl_dir());
    ZT_CHECK(zt_run(cmd, rl_out, sizeof rl_out) == 0, "ckpt reshard: %s", rl_out);
    snprintf(extra, sizeof extra, "--shard-group 2 --resume %s/h3", rl_dir());
    same_tail(&full, (rl_run[]){train_ok(4, "2", extra)}, "resumed after a reshard to 3 ranks");
    /* At other meshes and world sizes the sums regroup: the world-size tolerance. */
    const struct {
        int n;
        const char *stage, *mesh;
    } other[] = {{4, "3", ""}, {2, "2", ""}, {6, "3", "--shard-group 2"}, {1, "ddp", ""}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        char what[96];
        snprintf(extra, sizeof extra, "%s --resume %s/h/step_00000003", other[i].mesh, rl_dir());
        snprintf(what, sizeof what, "resumed on %d ranks at stage %s %s", other[i].n,
                 other[i].stage, other[i].mesh);
        check_follows((rl_run[]){train_ok(other[i].n, other[i].stage, extra)}, &full, 4, what);
    }
    /* A writer (rank 1, the first group's) killed halfway through its file of the second save:
     * the job fails, latest still names the first save, and resuming from it ends bitwise. */
    snprintf(extra, sizeof extra, "--shard-group 2 --save-dir %s/hc --save-every 2", rl_dir());
    rl_run dead = train("ZS_FAULT_KILL_SAVE=1:2", 4, "3", extra);
    ZT_CHECK(dead.rc != 0 && dead.rc != 124 && !dead.hash[0],
             "rank 1 killed during the second save: exit %d, want a failed job", dead.rc);
    snprintf(p, sizeof p, "%s/hc/latest", rl_dir());
    FILE *f = fopen(p, "r");
    char name[64] = "";
    if (f) {
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
    }
    ZT_CHECK(!strcmp(name, "step_00000002\n"), "after the killed save, latest is '%s'", name);
    snprintf(extra, sizeof extra, "--shard-group 2 --save-dir %s/hc --resume latest", rl_dir());
    rl_run again = train_ok(4, "3", extra);
    ZT_CHECK(again.n_steps == STEPS - 2 && !strcmp(again.hash, full.hash),
             "resumed from the save before the crash: %d steps, hash %s vs %s", again.n_steps,
             again.hash, full.hash);
    /* A 6-rank mesh's checkpoint (3 groups of 2) resumed on the 2 x 2 mesh. */
    snprintf(extra, sizeof extra, "--shard-group 2 --save-dir %s/h6 --save-every 3", rl_dir());
    rl_run six = train_ok(6, "2", extra);
    snprintf(extra, sizeof extra, "--shard-group 2 --resume %s/h6/step_00000003", rl_dir());
    check_follows((rl_run[]){train_ok(4, "3", extra)}, &six, 4, "3 x 2 resumed on 2 x 2");
}

static void test_kill(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    rl_run r = train("ZS_FAULT_KILL=3:3", 4, "3", "--shard-group 2");
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    ZT_CHECK(r.rc != 0 && r.rc != 124, "rank 3 killed: exit %d, want a failure", r.rc);
    ZT_CHECK(strstr(rl_out, "rank 3 (pid ") && strstr(rl_out, "killed by signal 9"),
             "the launcher does not name rank 3 and its signal:\n%s", rl_out);
    ZT_CHECK(took < 30 + 5, "the job took %.1f s to end after rank 3 died (--comm-timeout 30)",
             took);
}

static void test_refused(void) {
    const struct {
        int n;
        const char *stage, *flags, *says;
    } bad[] = {
        {4, "3", "--shard-group 3", "--shard-group 3 must divide the world size 4"},
        {4, "3", "--replicate 3", "--replicate 3 must divide the world size 4"},
        {4, "3", "--shard-group 2 --replicate 3",
         "--replicate 3 x --shard-group 2 must be the world size 4"},
        {4, "ddp", "--shard-group 2", "ddp replicates everything already"},
        {2, "3", "--shard-group two", "--shard-group 'two': a number of ranks (>= 1), or host"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl_run r = train("", bad[i].n, bad[i].stage, bad[i].flags);
        ZT_CHECK(r.rc != 0 && r.rc != 124 && strstr(rl_out, bad[i].says),
                 "%s on %d ranks: exit %d, want one message saying '%s':\n%s", bad[i].flags,
                 bad[i].n, r.rc, bad[i].says, rl_out);
    }
}

/* One row of `zshard mem`'s bytes table ("| name | group | replicas | across |"), in MB. */
static int plan_row(const char *out, const char *name, double v[3]) {
    char key[96];
    snprintf(key, sizeof key, "\n| %s | ", name);
    const char *p = strstr(out, key);
    return p && sscanf(p + strlen(key), "%lf | %lf | %lf |", &v[0], &v[1], &v[2]) == 3;
}

/* `zshard mem --nnodes`: the bytes a rank sends per step, against docs/sharding.md's formulas
 * computed here from the Ψ it prints (fp32, P = 4 ranks, L = 2 a host, S = 2, R = 2, K = 1). */
static void test_plan(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s mem --model gpt2-124m --data %s/corpus.txt --nproc 2 --nnodes 2 --stage 3 "
             "--shard-group host",
             zt_zshard_exe(), rl_dir());
    ZT_CHECK(zt_run(cmd, rl_out, sizeof rl_out) == 0, "zshard mem: %s", rl_out);
    const char *pp = strstr(rl_out, " with alignment and shard padding");
    unsigned long long psi = 0;
    while (pp && pp > rl_out && pp[-1] >= '0' && pp[-1] <= '9')
        pp--;
    ZT_CHECK(pp && sscanf(pp, "%llu", &psi) == 1 && psi > 80000000, "no Ψ in:\n%s", rl_out);
    ZT_CHECK(strstr(rl_out, "2 hosts x 2 ranks") &&
                 strstr(rl_out, "hybrid sharding: 2 replicas x shard groups of 2 ranks"),
             "the mesh is not named:\n%s", rl_out);
    double P = (double)psi / 1e6; /* MB of one byte per parameter */
    const struct {
        const char *name;
        double want[3];
    } rows[] = {
        {"ddp", {3 * P / 4 * 8, 0, 2 * P / 4 * 8}},
        {"ZeRO-3", {3 * P / 4 * 12, 0, 2 * P / 4 * 12}},
        {"ZeRO-3, 2 replicas x shard groups of 2", {P / 2 * 12, 2 * P / 4 * 4, 2 * P / 4 * 4}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double v[3];
        ZT_CHECK(plan_row(rl_out, rows[i].name, v), "no row '%s' in:\n%s", rows[i].name, rl_out);
        /* 2 decimals printed; the flat rows' Ψ is padded for 4 ranks, this one for 2: 1e-4. */
        for (int k = 0; k < 3; k++)
            ZT_CHECK(fabs(v[k] - rows[i].want[k]) <= 0.01 + 1e-4 * rows[i].want[k],
                     "%s column %d: %.2f MB, formula %.2f", rows[i].name, k + 1, v[k],
                     rows[i].want[k]);
    }
    snprintf(cmd, sizeof cmd, "%s mem --nproc 4 --stage 3 --shard-group 3 2>&1", zt_zshard_exe());
    ZT_CHECK(zt_run(cmd, rl_out, sizeof rl_out) != 0 &&
                 strstr(rl_out, "--shard-group 3 must divide the world size 4"),
             "zshard mem --shard-group 3 on 4 ranks:\n%s", rl_out);
}

int main(void) {
    zt_init("hsdp");
    rl_setup("hsdp");
    test_stages();
    test_flat();
    test_memory();
    test_checkpoints();
    test_kill();
    test_refused();
    test_plan();
    if (!zt_failures) ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

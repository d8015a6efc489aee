/* Checkpoints through the real CLI and launcher (`zshard train --nproc N`):
 *  - save/resume bitwise parity for ddp, 1, 2, 3 at N = 2: per-step losses and the final
 *    param_hash equal those of the run that never stopped;
 *  - resharding on load 2->4, 4->2, 3->1 and stage 3 -> ddp, with training continuing within
 *    the world-size tolerance of the parity test (bitwise where the world size is unchanged);
 *    offline `zshard ckpt reshard` gives the same bits as resharding on load;
 *  - a rank, or every rank, SIGKILLed in the middle of a save (and rank 0 just before the
 *    rename): the job fails, `latest` still names the previous checkpoint, no incomplete
 *    checkpoint is ever picked up, and resuming from latest finishes with the same bits;
 *  - a LLaMA model resumes bitwise across stages and reshards 2->4;
 *  - bf16 mixed precision (bf16 params and grads, fp32 master and Adam) resumes bitwise too,
 *    across stages, and the run differs from fp32's (the checkpoint carries no bf16 state:
 *    the bf16 copy is rounded again from the restored fp32 master). */
#include "runlog.h"
#include "zshard.h"

#include <string.h>
#include <sys/stat.h>

#define STEPS 6

/* One gpt2-tiny job; env is prefixed to the command (fault injection). */
static rl_run train(const char *env, int nproc, const char *stage, const char *extra) {
    return rl_train_tiny(env, 120, STEPS, nproc, stage, extra);
}

static rl_run train_ok(int nproc, const char *stage, const char *extra) {
    rl_run r = train("", nproc, stage, extra);
    ZT_CHECK(r.rc == 0 && r.hash[0], "N=%d stage %s %s: exit %d\n%s", nproc, stage, extra, r.rc,
             rl_out);
    return r;
}

/* Loss of `step` in run r, or NULL. */
static const char *loss_at(const rl_run *r, int step) {
    for (int i = 0; i < r->n_steps; i++)
        if (r->step[i] == step) return r->loss[i];
    return NULL;
}

/* The resumed run's steps are the tail of the full run's: same bits, same final hash. */
static void same_tail(const rl_run *full, const rl_run *res, const char *what) {
    int eq = res->n_steps > 0 && !strcmp(full->hash, res->hash);
    for (int i = 0; eq && i < res->n_steps; i++) {
        const char *l = loss_at(full, res->step[i]);
        eq = l && !strcmp(res->loss[i], l);
    }
    ZT_CHECK(eq, "%s: resumed run differs (hash %s vs %s, %d steps, first step %d loss %s)", what,
             res->hash, full->hash, res->n_steps, res->n_steps ? res->step[0] : 0,
             res->n_steps ? res->loss[0] : "");
}

/* Losses within the world-size tolerance of tests/test_parity.c (1e-5 relative). */
static void close_tail(const rl_run *full, const rl_run *res, const char *what) {
    ZT_CHECK(res->n_steps == STEPS - 3, "%s: %d steps after resume", what, res->n_steps);
    for (int i = 0; i < res->n_steps; i++) {
        int s = res->step[i];
        double a = res->lossv[i], b = s >= 1 && s <= full->n_steps ? full->lossv[s - 1] : 0;
        ZT_CHECK(s == 4 + i && fabs(a - b) <= 1e-5 * fabs(b), "%s: step %d loss %.9g vs %.9g", what,
                 s, a, b);
    }
}

static void test_parity(void) {
    static const char *stages[] = {"ddp", "1", "2", "3"};
    for (int s = 0; s < 4; s++) {
        char extra[1024], what[64];
        snprintf(what, sizeof what, "N=2 stage %s", stages[s]);
        snprintf(extra, sizeof extra, "--save-dir %s/par%s --save-every 3", rl_dir(), stages[s]);
        /* The run that saves is itself the uninterrupted reference: saving changes nothing. */
        rl_run full = train_ok(2, stages[s], extra);
        ZT_CHECK(full.n_steps == STEPS, "%s: %d steps", what, full.n_steps);
        snprintf(extra, sizeof extra, "--resume %s/par%s/step_00000003", rl_dir(), stages[s]);
        rl_run res = train_ok(2, stages[s], extra);
        ZT_CHECK(res.n_steps == 3 && res.step[0] == 4, "%s: resumed at step %d", what, res.step[0]);
        same_tail(&full, &res, what);
    }
    /* Stage parity makes every stage's reference the same run. */
    rl_run ref = train_ok(2, "ddp", "");
    char extra[1024];
    snprintf(extra, sizeof extra, "--resume %s/par1 --save-dir %s/par1", rl_dir(), rl_dir());
    rl_run latest = train("", 2, "1", extra); /* latest is step 6: nothing left to train */
    ZT_CHECK(latest.rc != 0 && strstr(rl_out, "nothing to train"), "resume at the end: %s", rl_out);
    snprintf(extra, sizeof extra, "--resume %s/par3/step_00000003", rl_dir());
    rl_run r = train_ok(2, "3", extra);
    same_tail(&ref, &r, "stage 3 resume vs uninterrupted ddp");
}

static void test_reshard(void) {
    char extra[1024], cmd[2048];
    /* 2 -> 4: saved by ZeRO-2 on 2 ranks, continued by ZeRO-3 on 4. */
    snprintf(extra, sizeof extra, "--save-dir %s/w2 --save-every 3", rl_dir());
    rl_run full2 = train_ok(2, "2", extra);
    snprintf(extra, sizeof extra, "--resume %s/w2/step_00000003", rl_dir());
    rl_run r24 = train_ok(4, "3", extra);
    close_tail(&full2, &r24, "reshard 2->4");
    /* Offline reshard to 4 ranks, then resume: the same bits as resharding on load. */
    snprintf(cmd, sizeof cmd, "%s ckpt reshard %s/w2/step_00000003 --nproc 4 --stage 3 %s/w2to4",
             zt_zshard_exe(), rl_dir(), rl_dir());
    int rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 0, "ckpt reshard: %s", rl_out);
    snprintf(extra, sizeof extra, "--resume %s/w2to4", rl_dir());
    rl_run off = train_ok(4, "3", extra);
    same_tail(&r24, &off, "offline reshard vs reshard on load");

    /* 4 -> 2: ZeRO-1 on 4 ranks, continued by ZeRO-2 on 2. */
    snprintf(extra, sizeof extra, "--save-dir %s/w4 --save-every 3", rl_dir());
    rl_run full4 = train_ok(4, "1", extra);
    snprintf(extra, sizeof extra, "--resume %s/w4/step_00000003", rl_dir());
    close_tail(&full4, (rl_run[]){train_ok(2, "2", extra)}, "reshard 4->2");

    /* 3 -> 1: uneven shards (3 never divides a unit) onto one DDP rank. */
    snprintf(extra, sizeof extra, "--save-dir %s/w3 --save-every 3", rl_dir());
    rl_run full3 = train_ok(3, "3", extra);
    snprintf(extra, sizeof extra, "--resume %s/w3/step_00000003", rl_dir());
    close_tail(&full3, (rl_run[]){train_ok(1, "ddp", extra)}, "reshard 3->1");

    /* Stage 3 -> ddp at the same world size: bitwise (stages are bitwise equal). */
    snprintf(extra, sizeof extra, "--resume %s/w2/step_00000003", rl_dir());
    rl_run z3 = train_ok(2, "ddp", extra);
    snprintf(extra, sizeof extra, "--save-dir %s/z3 --save-every 3", rl_dir());
    rl_run full_z3 = train_ok(2, "3", extra);
    snprintf(extra, sizeof extra, "--resume %s/z3/step_00000003", rl_dir());
    rl_run z3d = train_ok(2, "ddp", extra);
    same_tail(&full_z3, &z3d, "stage 3 -> ddp");
    same_tail(&full2, &z3, "stage 2 -> ddp");
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void crash_case(const char *who, const char *stage, const rl_run *ref) {
    char env[64], extra[1024], p[1024], what[64];
    snprintf(what, sizeof what, "kill %s during save 2", who);
    snprintf(env, sizeof env, "ZS_FAULT_KILL_SAVE=%s:2", who);
    snprintf(extra, sizeof extra, "--save-dir %s/crash_%s --save-every 2", rl_dir(), who);
    rl_run dead = train(env, 2, stage, extra);
    ZT_CHECK(dead.rc != 0 && dead.rc != 124 && !dead.hash[0], "%s: exit %d, want a failed job",
             what, dead.rc);
    snprintf(p, sizeof p, "%s/crash_%s/latest", rl_dir(), who);
    FILE *f = fopen(p, "r");
    char name[64] = "";
    if (f) {
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
    }
    ZT_CHECK(!strcmp(name, "step_00000002\n"), "%s: latest is '%s'", what, name);
    snprintf(p, sizeof p, "%s/crash_%s/step_00000004", rl_dir(), who);
    ZT_CHECK(!exists(p), "%s: an incomplete step_00000004 was published", what);
    /* `inspect` of the save dir resolves latest and verifies it. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s ckpt inspect %s/crash_%s", zt_zshard_exe(), rl_dir(), who);
    int rc = zt_run(cmd, rl_out, sizeof rl_out);
    ZT_CHECK(rc == 0 && strstr(rl_out, "step        2"), "%s: inspect: %s", what, rl_out);
    snprintf(extra, sizeof extra, "--save-dir %s/crash_%s --resume latest", rl_dir(), who);
    rl_run res = train_ok(2, stage, extra);
    ZT_CHECK(res.n_steps == STEPS - 2 && res.step[0] == 3, "%s: resumed at step %d", what,
             res.n_steps ? res.step[0] : -1);
    same_tail(ref, &res, what);
    /* The resumed run's own saves replaced the staging leftovers. */
    snprintf(p, sizeof p, "%s/crash_%s/step_00000004.tmp", rl_dir(), who);
    ZT_CHECK(!exists(p), "%s: staging directory left behind after the next save", what);
}

static void test_crash(void) {
    rl_run ref = train_ok(2, "ddp", "");
    crash_case("1", "ddp", &ref);
    crash_case("all", "3", &ref);
    crash_case("commit", "2", &ref);
}

/* LLaMA (untied head, grouped-query attention): the same guarantees. */
static void test_llama(void) {
    char extra[1024];
    snprintf(extra, sizeof extra, "--model llama-tiny --save-dir %s/llama --save-every 3",
             rl_dir());
    rl_run full = train_ok(2, "3", extra);
    snprintf(extra, sizeof extra, "--model llama-tiny --resume %s/llama/step_00000003", rl_dir());
    rl_run same = train_ok(2, "1", extra);
    same_tail(&full, &same, "llama: stage 3 -> 1 at N=2");
    close_tail(&full, (rl_run[]){train_ok(4, "2", extra)}, "llama: reshard 2->4");
}

static void test_bf16(void) {
    char extra[1024];
    snprintf(extra, sizeof extra, "--dtype bf16 --save-dir %s/bf16 --save-every 3", rl_dir());
    rl_run full = train_ok(2, "3", extra);
    snprintf(extra, sizeof extra, "--dtype bf16 --resume %s/bf16/step_00000003", rl_dir());
    same_tail(&full, (rl_run[]){train_ok(2, "3", extra)}, "bf16: stage 3 -> 3 at N=2");
    same_tail(&full, (rl_run[]){train_ok(2, "ddp", extra)}, "bf16: stage 3 -> ddp at N=2");
    rl_run f32 = train_ok(2, "3", "");
    ZT_CHECK(strcmp(f32.hash, full.hash) != 0, "bf16 and fp32 runs have the same hash %s",
             full.hash);
}

int main(void) {
    zt_init("ckpt_resume");
    rl_setup("ckpt-resume");
    test_parity();
    test_reshard();
    test_crash();
    test_llama();
    test_bf16();
    /* A failed run's directory is kept for a look at its checkpoints and logs. */
    if (!zt_failures) ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

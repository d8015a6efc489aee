/* Sharding invariants, end to end through `zshard train --nproc N` (the launcher, the shm
 * backend, the engine and the trainer together):
 *  - bitwise parity: ddp, 1, 2, 3 give the same per-step losses and param_hash for N = 2, 3,
 *    4, with and without clipping; with gradient accumulation ddp == 1 and 2 == 3;
 *  - world-size parity: N = 2 and 4 against N = 1 within a stated tolerance, losses and every
 *    parameter;
 *  - memory: measured per-rank model-state bytes equal the formulas of docs/architecture.md "Memory
 *    accounting" for this layout exactly (padding included); gathered bytes within the documented
 *    pool bound;
 *  - uneven sizes: N = 3 never divides the units evenly, and parity still holds. */
#include "core/status.h"
#include "models/model.h"
#include "runlog.h"

#include <string.h>

static const char *STAGES[] = {"ddp", "1", "2", "3"};
static const char *cat_names[ZS_MEM_NCAT];

/* gpt2-tiny for 6 steps; launch, when given, starts the ranks itself (mpirun, zshard run), so
 * the job is told --nproc 1. */
static rl_run train_cmd(const char *launch, int nproc, const char *stage, const char *extra) {
    char prefix[600];
    snprintf(prefix, sizeof prefix, "timeout 180 %s", launch);
    rl_run r = rl_train(prefix,
                        "--model gpt2-tiny --batch 12 --seq 32 --steps 6 --lr 3e-3 --warmup 2 "
                        "--val-every 0 --val-batches 1 --sample-len 0 --nproc %d --stage %s "
                        "--comm-timeout 30 %s",
                        *launch ? 1 : nproc, stage, extra);
    rl_check_exit(&r);
    ZT_CHECK(r.ok && r.n_steps == 6, "complete log for N=%d stage %s (%d steps)", nproc, stage,
             r.n_steps);
    return r;
}

static rl_run train(int nproc, const char *stage, const char *extra) {
    return train_cmd("", nproc, stage, extra);
}

static void test_stage_parity(void) {
    for (int n = 2; n <= 4; n++)
        for (int clip = 0; clip < 2; clip++) {
            /* Clip 0.05 is far below the norms here, so clipping acts on every step. */
            const char *extra = clip ? "--grad-clip 0.05" : "--grad-clip 0";
            rl_run base = train(n, "ddp", extra);
            for (int s = 1; s < 4; s++) {
                rl_run r = train(n, STAGES[s], extra);
                char what[128];
                snprintf(what, sizeof what, "N=%d %s stage %s vs ddp", n,
                         clip ? "clipped" : "unclipped", STAGES[s]);
                rl_check_same(&r, &base, what);
            }
        }
}

static void test_accumulation(void) {
    /* DDP and ZeRO-1 sum micro-batches locally then reduce; ZeRO-2/3 reduce each micro-batch
     * and accumulate shards: each pair shares its reduction order, so each pair is bitwise. */
    rl_run d = train(2, "ddp", "--grad-accum 2"), one = train(2, "1", "--grad-accum 2");
    rl_run two = train(2, "2", "--grad-accum 2"), three = train(2, "3", "--grad-accum 2");
    rl_check_same(&one, &d, "grad-accum 2: stage 1 vs ddp");
    rl_check_same(&three, &two, "grad-accum 2: stage 3 vs stage 2");
    /* Across the pairs only rounding differs. */
    for (int s = 0; s < d.n_steps; s++)
        ZT_CHECK(fabs(d.lossv[s] - two.lossv[s]) <= 1e-5 * fabs(d.lossv[s]),
                 "grad-accum step %d: %g vs %g", s, d.lossv[s], two.lossv[s]);
}

static void test_world_size_parity(void) {
    char extra[600];
    snprintf(extra, sizeof extra, "--dump-params %s/p1.bin", rl_dir());
    rl_run one = train(1, "ddp", extra);
    size_t n1;
    float *p1 = rl_read_params(strstr(extra, "/tmp"), &n1);
    for (int n = 2; n <= 4; n += 2) {
        snprintf(extra, sizeof extra, "--dump-params %s/p%d.bin", rl_dir(), n);
        rl_run r = train(n, "3", extra);
        /* Tolerance: the sum over ranks regroups fp32 additions (N partial sums instead of
         * one), a relative change of ~1e-7 per step that Adam carries forward; 1e-5 relative
         * over 6 steps leaves two orders of magnitude of room and still catches any real
         * difference (a wrong slice or scale changes the loss at the 1e-2 level). */
        for (int s = 0; s < one.n_steps; s++)
            ZT_CHECK(fabs(r.lossv[s] - one.lossv[s]) <= 1e-5 * fabs(one.lossv[s]),
                     "N=%d step %d loss %.9g vs N=1 %.9g", n, s + 1, r.lossv[s], one.lossv[s]);
        size_t nn;
        float *pn = rl_read_params(strstr(extra, "/tmp"), &nn);
        ZT_CHECK(nn == n1, "parameter count %zu vs %zu", nn, n1);
        /* Parameters: Adam normalises the update, so a gradient rounding difference moves a
         * parameter by at most ~lr per step: 6 steps x 3e-3 bounds it well above noise; we
         * require 1e-4 absolute, far tighter than any real bug's effect. */
        double worst = rl_max_abs_diff(pn, p1, nn < n1 ? nn : n1);
        ZT_CHECK(worst <= 1e-4, "N=%d parameters differ from N=1 by up to %g", n, worst);
        free(pn);
    }
    free(p1);
}

static void test_memory(void) {
    zs_model_config c;
    ZT_OK(zs_model_preset("gpt2-tiny", &c));
    zs_model_config_set_vocab(&c, 256);
    for (int n = 2; n <= 4; n += 2)
        for (int s = 0; s < 4; s++) {
            rl_run r = train(n, STAGES[s], "");
            zs_layout l;
            ZT_OK(zs_model_layout(&c, n, &l));
            /* docs/architecture.md "Memory accounting", fp32 column, Ψ = the padded layout. */
            uint64_t want[ZS_MEM_NCAT], sizes[3];
            rl_fp32_model_states(&l, n, s, want);
            /* Pool bound: (prefetch + 1) gathered units for ZeRO-3 params and 2 + tied unit
             * gradients for ZeRO-2/3, sized by the largest units. */
            rl_largest_units(&l, sizes);
            uint64_t bound = 0;
            if (s == 3) bound += sizes[0] + sizes[1];
            if (s >= 2) bound += sizes[0] + sizes[1] + sizes[2];
            ZT_CHECK(r.world == n, "per-rank records: %d", r.world);
            for (int k = 0; k < r.world; k++) {
                for (int cat = ZS_MEM_PARAM; cat <= ZS_MEM_OPTIM_STATE; cat++)
                    ZT_CHECK(r.peak[k][cat] == want[cat],
                             "N=%d stage %s rank %d %s: measured %llu, formula %llu", n, STAGES[s],
                             k, cat_names[cat], (unsigned long long)r.peak[k][cat],
                             (unsigned long long)want[cat]);
                /* The estimator (zshard mem) against what the allocator measured: within 5% per
                 * category and in total (the bound; in practice exact). */
                for (int cat = 0; cat <= ZS_MEM_NCAT; cat++) {
                    double m = (double)r.peak[k][cat], e = (double)r.est[cat];
                    ZT_CHECK(fabs(m - e) <= 0.05 * fmax(e, 1.0),
                             "N=%d stage %s rank %d %s: measured %.0f vs estimate %.0f", n,
                             STAGES[s], k, cat < ZS_MEM_NCAT ? cat_names[cat] : "total", m, e);
                }
                ZT_CHECK(r.peak[k][ZS_MEM_GATHERED] <= bound,
                         "N=%d stage %s rank %d gathered %llu > bound %llu", n, STAGES[s], k,
                         (unsigned long long)r.peak[k][ZS_MEM_GATHERED], (unsigned long long)bound);
            }
            zs_layout_free(&l);
        }
}

/* The same job started by mpirun (ranks from OMPI_COMM_WORLD_*, shm backend found through
 * the job id) and by hand with torchrun's variables gives the same bits as --nproc. */
static void test_launchers(void) {
    rl_run ref = train(2, "3", "");
    char launch[512];
    if (system("command -v mpirun >/dev/null 2>&1") == 0) {
        snprintf(launch, sizeof launch,
                 "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                 "--oversubscribe -np 2");
        rl_run r = train_cmd(launch, 2, "3", "");
        rl_check_same(&r, &ref, "mpirun -np 2 vs --nproc 2");
    } else {
        printf("parity: mpirun not installed, mpirun launch not checked\n");
    }
    /* torchrun's contract: RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/PORT. */
    snprintf(launch, sizeof launch, "%s run -n 2 --no-prefix -- env", zt_zshard_exe());
    rl_run r2 = train_cmd(launch, 2, "3", "");
    rl_check_same(&r2, &ref, "zshard run -n 2 -- (torchrun variables) vs --nproc 2");
}

int main(void) {
    zt_init("parity");
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        cat_names[c] = zs_mem_category_name((zs_mem_category)c);
    rl_setup("parity");
    test_memory();
    test_stage_parity();
    test_accumulation();
    test_world_size_parity();
    test_launchers();
    ZT_CHECK(rl_cleanup() == 0, "cleanup");
    return zt_finish();
}

/* `zshard bench attention`: the memory-efficient attention kernel against the naive one it
 * replaced, on a model's attention shape at long sequence lengths, in one run and interleaved
 * (naive, flash, naive, ...) so that a busy machine slows both alike:
 *  - the kernels alone: forward and backward medians, the bytes each keeps for backward, and
 *    the sgemm rate on the same per-head GEMM shapes measured in this run (the ceiling; the
 *    kernels' GFLOP/s count the causal half of the square, the FLOPs they need);
 *  - with --step-reps R, whole training steps: R alternating pairs of `zshard bench step
 *    --attention naive|flash` subprocesses, medians of their ms/step. */
#include "backend/ops.h"
#include "bench/bench_util.h"
#include "bench/bench.h"
#include "args/flags.h"
#include "core/timer.h"
#include "zshard.h"

#include <cblas.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_T 16
#define MAX_REPS 64

static float *rnd_buf(size_t n, unsigned *state) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((*state >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return x;
}

/* The attention GEMMs of one (batch, head) pair over the full T x T square, as sgemm would
 * run them: forward S = Q K^T and O = P V, backward dP = dO V^T, dV = P^T dO, dQ = dS K and
 * dK = dS^T Q. Returns seconds for all pairs (median of reps); *flops is what it computed,
 * the full square (a causal kernel needs half of it, which the caller counts). */
static double sgemm_ceiling(int pairs, int T, int hs, int reps, double *flops) {
    float *Q = calloc((size_t)T * hs, 4), *P = calloc((size_t)T * T, 4),
          *O = calloc((size_t)T * hs, 4);
    double t[MAX_REPS], med = -1;
    *flops = 12.0 * (double)T * T * hs * pairs;
    if (!Q || !P || !O) goto done;
    for (int r = -1; r < reps; r++) {
        double t0 = zs_now_s();
        for (int p = 0; p < pairs; p++) {
            /* Row-major [T,hs] is column-major [hs,T]. */
            cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, T, T, hs, 1.0f, Q, hs, Q, hs, 0.0f,
                        P, T);
            cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, hs, T, T, 1.0f, Q, hs, P, T,
                        0.0f, O, hs);
            cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, T, T, hs, 1.0f, O, hs, Q, hs, 0.0f,
                        P, T);
            cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, hs, T, T, 1.0f, Q, hs, P, T, 0.0f,
                        O, hs);
            cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, hs, T, T, 1.0f, Q, hs, P, T,
                        1.0f, O, hs);
            cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, hs, T, T, 1.0f, Q, hs, P, T, 1.0f,
                        O, hs);
        }
        if (r >= 0) t[r] = zs_now_s() - t0;
    }
    med = zs_bench_median(t, reps);
done:
    free(Q);
    free(P);
    free(O);
    return med;
}

typedef struct kernel_times {
    double fwd[2], bwd[2]; /* [0] naive, [1] flash: medians in seconds */
    uint64_t kept[2];      /* bytes kept for backward: att or lse */
    uint64_t scratch[2];   /* backward scratch: datt or delta */
} kernel_times;

static int time_kernels(const zs_model_config *c, int B, int T, int reps, kernel_times *kt) {
    const zs_ops *o = zs_ops_cpu();
    int NH = c->n_head, NKV = c->arch == ZS_ARCH_LLAMA ? c->n_kv_head : NH, hs = c->n_embd / NH;
    int packed = c->arch != ZS_ARCH_LLAMA;
    size_t BT = (size_t)B * T, QD = (size_t)NH * hs, KD = (size_t)NKV * hs;
    size_t ldq = packed ? 3 * QD : QD, ldkv = packed ? ldq : KD;
    size_t nq = BT * ldq, nkv = packed ? 0 : BT * KD, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T, no = BT * QD;
    unsigned seed = 12345;
    float *q = rnd_buf(nq, &seed), *k = packed ? NULL : rnd_buf(nkv, &seed),
          *v = packed ? NULL : rnd_buf(nkv, &seed), *dout = rnd_buf(no, &seed);
    float *out = malloc(no * 4), *att = malloc(na * 4), *datt = malloc(na * 4),
          *lse = malloc(nl * 4), *delta = malloc(nl * 4);
    float *dq = calloc(nq, 4), *dk = packed ? NULL : calloc(nkv, 4),
          *dv = packed ? NULL : calloc(nkv, 4);
    double tf[2][MAX_REPS], tb[2][MAX_REPS];
    int ok =
        q && dout && out && att && datt && lse && delta && dq && (packed || (k && v && dk && dv));
    if (packed && ok) {
        k = q + QD, v = q + 2 * QD;
        dk = dq + QD, dv = dq + 2 * QD;
    }
    for (int r = -1; ok && r < reps; r++) {
        for (int kind = 0; kind < 2 && ok; kind++) {
            int which = (r & 1) ? 1 - kind : kind; /* alternate which kernel goes first */
            double t0 = zs_now_s(), t1, t2;
            if (which == 0) {
                ok = packed ? o->attention_fwd(NULL, out, att, q, B, T, (int)QD, NH, NULL) == ZS_OK
                            : o->attention_gqa_fwd(NULL, out, att, q, k, v, B, T, NH, NKV, hs,
                                                   NULL) == ZS_OK;
                t1 = zs_now_s();
                ok = ok && (packed ? o->attention_bwd(NULL, dq, datt, dout, q, att, B, T, (int)QD,
                                                      NH, NULL) == ZS_OK
                                   : o->attention_gqa_bwd(NULL, dq, dk, dv, datt, dout, q, k, v,
                                                          att, B, T, NH, NKV, hs, NULL) == ZS_OK);
            } else {
                ok = o->flash_attention_fwd(NULL, out, lse, q, k, v, B, T, NH, NKV, hs, (int)ldq,
                                            (int)ldkv, NULL) == ZS_OK;
                t1 = zs_now_s();
                ok = ok &&
                     o->flash_attention_bwd(NULL, dq, dk, dv, delta, dout, q, k, v, out, lse, B, T,
                                            NH, NKV, hs, (int)ldq, (int)ldkv, NULL) == ZS_OK;
            }
            t2 = zs_now_s();
            if (r >= 0) tf[which][r] = t1 - t0, tb[which][r] = t2 - t1;
        }
    }
    if (ok)
        for (int w = 0; w < 2; w++) {
            kt->fwd[w] = zs_bench_median(tf[w], reps);
            kt->bwd[w] = zs_bench_median(tb[w], reps);
        }
    kt->kept[0] = kt->scratch[0] = na * 4;
    kt->kept[1] = kt->scratch[1] = nl * 4;
    free(q), free(dout), free(out), free(att), free(datt), free(lse), free(delta), free(dq);
    if (!packed) free(k), free(v), free(dk), free(dv);
    return ok ? 0 : zs_flag_fail(1, "bench attention: %s", zs_last_error());
}

/* ms/step of one `zshard bench step` subprocess, or -1. */
static double step_ms(const char *self, const char *model, int B, int T, int steps,
                      const char *kind) {
    char cmd[2400], line[2048];
    snprintf(cmd, sizeof cmd,
             "'%s' bench step --model %s --batch %d --seq %d --steps %d --warmup-steps 1 "
             "--vocab 256 --attention %s --json",
             self, model, B, T, steps, kind);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    if (!p) return -1;
    while (fgets(line, sizeof line, p)) {
        const char *m = strstr(line, "\"ms_per_step\":");
        if (m) ms = atof(m + 14);
    }
    return pclose(p) == 0 ? ms : -1;
}

/* What bench attention reads from the command line. */
typedef struct attn_opts {
    const char *model, *tlist;
    int B, reps, step_reps, step_steps;
    const char *config_path; /* --config */
} attn_opts;

#define AO(field) offsetof(attn_opts, field)
static const zs_flag ATTN_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(AO(config_path)),
    {.name = "model", .kind = ZS_FLAG_STR, .off = AO(model), .arg = "NAME",
     .help = "model preset [llama-mini]"},
    {.name = "batch", .kind = ZS_FLAG_INT, .off = AO(B), .lo = 1, .hi = INT_MAX, .arg = "B",
     .help = "batch [1]"},
    {.name = "seq-list", .kind = ZS_FLAG_STR, .off = AO(tlist), .arg = "T1,T2,...",
     .help = "sequence lengths [1024,2048]"},
    {.name = "reps", .kind = ZS_FLAG_INT, .off = AO(reps), .lo = 1, .hi = MAX_REPS, .arg = "N",
     .help = "repetitions per kernel [5]"},
    {.name = "step-reps", .kind = ZS_FLAG_INT, .off = AO(step_reps), .lo = 0, .hi = MAX_REPS,
     .arg = "R", .help = "alternating pairs of whole training steps [0]"},
    {.name = "step-steps", .kind = ZS_FLAG_INT, .off = AO(step_steps), .lo = 1, .hi = INT_MAX,
     .arg = "S", .help = "timed steps of each [2]"},
};

static const zs_flag_table ATTN_TABLE = {
    .cmd = "bench attention",
    .rows = ATTN_FLAGS,
    .count = sizeof ATTN_FLAGS / sizeof ATTN_FLAGS[0],
    .usage = "usage: zshard bench attention [options]\n"
             "Times the naive (T x T) and the flash (O(T)) attention kernels on the model's\n"
             "attention shape, interleaved, at each T, next to the sgemm rate of the same\n"
             "per-head GEMMs. --step-reps R adds R alternating pairs of whole training steps\n"
             "(`bench step --attention naive|flash --vocab 256`: byte-sized vocabulary, so the\n"
             "output head does not hide attention).\n",
};

int zs_bench_attention(int argc, char **argv) {
    attn_opts ao = {.model = "llama-mini", .tlist = "1024,2048", .B = 1, .reps = 5,
                    .step_steps = 2};
    int rc = zs_flag_parse(&ATTN_TABLE, argc, argv, 1, &ao, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    const char *model = ao.model, *tlist = ao.tlist;
    int B = ao.B, reps = ao.reps, step_reps = ao.step_reps, step_steps = ao.step_steps;
    zs_model_config c;
    if (zs_model_preset(model, &c) != ZS_OK)
        return zs_flag_fail(2, "bench attention: %s", zs_last_error());
    int Ts[MAX_T], nT = 0;
    for (const char *p = tlist; *p && nT < MAX_T;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > c.max_seq)
            return zs_flag_fail(2, "bench attention: --seq-list '%s': each T in 1..%d (%s)", tlist,
                               c.max_seq, model);
        Ts[nT++] = (int)t;
        p = *end == ',' ? end + 1 : end;
    }
    char self[1024];
    if (step_reps && zs_bench_self(self, sizeof self))
        return zs_flag_fail(1, "bench attention: %s", zs_last_error());
    int NKV = c.arch == ZS_ARCH_LLAMA ? c.n_kv_head : c.n_head, hs = c.n_embd / c.n_head;
    printf("bench attention: %s (%d heads, %d kv heads, head size %d), batch %d, %d reps per "
           "kernel, interleaved\n\n",
           model, c.n_head, NKV, hs, B, reps);
    printf("| T | kernel | fwd ms | bwd ms | fwd+bwd ms | GFLOP/s | of sgemm | kept for bwd | "
           "bwd scratch |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < nT; i++) {
        kernel_times kt;
        if ((rc = time_kernels(&c, B, Ts[i], reps, &kt))) return rc;
        double sq_flops, sg = sgemm_ceiling(B * c.n_head, Ts[i], hs, reps, &sq_flops);
        double sg_rate = sg > 0 ? sq_flops / sg / 1e9 : 0;
        double flops = 0.5 * sq_flops; /* causal: the lower triangle */
        for (int w = 0; w < 2; w++) {
            double tot = kt.fwd[w] + kt.bwd[w], rate = flops / tot / 1e9;
            printf("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.0f%% | %.2f MiB | %.2f MiB |\n",
                   Ts[i], w ? "flash" : "naive", kt.fwd[w] * 1e3, kt.bwd[w] * 1e3, tot * 1e3, rate,
                   sg_rate > 0 ? 100.0 * rate / sg_rate : 0, kt.kept[w] / 1048576.0,
                   kt.scratch[w] / 1048576.0);
        }
        printf("| %d | sgemm, same GEMMs over the full square (ceiling) | | | %.1f | %.2f | 100%% "
               "| | |\n",
               Ts[i], sg * 1e3, sg_rate);
    }
    if (!step_reps) return 0;
    printf("\nWhole training steps (bench step, %d timed steps each, %d alternating pairs):\n\n",
           step_steps, step_reps);
    printf("| T | naive ms/step | flash ms/step | flash / naive |\n|---:|---:|---:|---:|\n");
    for (int i = 0; i < nT; i++) {
        double ms[2][MAX_REPS];
        for (int r = 0; r < step_reps; r++)
            for (int kind = 0; kind < 2; kind++) {
                int w = (r & 1) ? 1 - kind : kind;
                ms[w][r] = step_ms(self, model, B, Ts[i], step_steps, w ? "flash" : "naive");
                if (ms[w][r] < 0)
                    return zs_flag_fail(1, "bench attention: bench step at T=%d (%s) failed", Ts[i],
                                       w ? "flash" : "naive");
            }
        double mn = zs_bench_median(ms[0], step_reps);
        double mf = zs_bench_median(ms[1], step_reps);
        printf("| %d | %.1f | %.1f | %.2f |\n", Ts[i], mn, mf, mf / mn);
    }
    return 0;
}

/* `zshard bench step`: time training steps of a model and compare the achieved model FLOP/s
 * with the GEMM rate of the step's device measured in the same run on the step's own GEMM
 * shapes (OpenBLAS sgemm on the CPU, cuBLAS on a GPU: the ceiling, since a step cannot beat its
 * GEMMs run back to back with nothing else). */
#include "backend/cuda_device.h"
#include "backend/device.h"
#include "bench/bench_util.h"
#include "bench/bench.h"
#include "args/flags.h"
#include "core/alloc.h"
#include "core/bf16.h"
#include "core/timer.h"
#include "data/data.h"
#include "models/model.h"
#include "shard/module.h"
#include "zshard.h"

#include <cblas.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gemm_shape {
    int m, n, k, ta, tb; /* column-major, as passed to cblas_sgemm */
    int count;           /* occurrences per training step */
} gemm_shape;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The GEMMs of one step of zs_linear_fwd/bwd for a linear layer (N rows, IC -> OC): forward
 * out^T = W inp^T, backward dinp^T = W^T dout^T and dW^T = inp^T dout. */
static int add_linear(gemm_shape *g, int n, int N, int IC, int OC, int count) {
    g[n++] = (gemm_shape){OC, N, IC, 1, 0, count};
    g[n++] = (gemm_shape){IC, N, OC, 0, 0, count};
    g[n++] = (gemm_shape){IC, OC, N, 0, 1, count};
    return n;
}

/* Element i of a host operand of es-byte elements (fp32, or bf16 rounded from v). */
static void put_operand(unsigned char *h, size_t es, size_t i, float v) {
    if (es == sizeof(float))
        memcpy(h + i * es, &v, es);
    else
        ((zs_bf16 *)(void *)h)[i] = zs_f32_to_bf16(v);
}

/* Seconds for the step's GEMMs run back to back on the module's device through its ops table
 * (median of reps; each rep ends with a stream sync). A table with gemm16 (bf16) takes both
 * operands stored in bf16, so the ceiling is the products alone, without the rounding passes a
 * step makes for its fp32 operands. Without `fill` the operands keep whatever the device holds
 * (a cost-only prediction reads no values). */
static double time_gemms(zs_module_t *mod, const gemm_shape *g, int ng, int reps, int fill,
                         double *flops) {
    const zs_ops *ops = zs_module_ops(mod);
    const zs_device *dev = zs_module_dev(mod);
    zs_stream_t *s = zs_module_stream(mod);
    size_t maxa = 0, maxb = 0, maxc = 0, es = ops->gemm16 ? sizeof(zs_bf16) : sizeof(float);
    *flops = 0;
    for (int i = 0; i < ng; i++) {
        size_t a = (size_t)g[i].m * g[i].k, b = (size_t)g[i].k * g[i].n;
        size_t c = (size_t)g[i].m * g[i].n;
        if (a > maxa) maxa = a;
        if (b > maxb) maxb = b;
        if (c > maxc) maxc = c;
        *flops += 2.0 * g[i].m * g[i].n * g[i].k * g[i].count;
    }
    unsigned char *hA = fill ? calloc(maxa, es) : NULL, *hB = fill ? calloc(maxb, es) : NULL;
    void *A = NULL, *B = NULL;
    float *C = NULL;
    double *t = calloc((size_t)reps, sizeof *t), med = -1;
    if ((fill && (!hA || !hB)) || !t) goto done;
    if (dev->alloc(ZS_MEM_WORKSPACE, maxa * es, "bench A", &A) != ZS_OK ||
        dev->alloc(ZS_MEM_WORKSPACE, maxb * es, "bench B", &B) != ZS_OK ||
        dev->alloc(ZS_MEM_WORKSPACE, maxc * 4, "bench C", (void **)&C) != ZS_OK)
        goto done;
    for (size_t i = 0; fill && i < maxa; i++)
        put_operand(hA, es, i, (float)(i % 7) * 0.01f);
    for (size_t i = 0; fill && i < maxb; i++)
        put_operand(hB, es, i, (float)(i % 5) * 0.01f);
    if (fill && (dev->copy_h2d(s, A, hA, maxa * es) || dev->copy_h2d(s, B, hB, maxb * es) ||
                 dev->stream_sync(s)))
        goto done;
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        double t0 = zs_now_s();
        for (int i = 0; i < ng; i++) {
            const gemm_shape *sh = &g[i];
            int lda = sh->ta ? sh->k : sh->m, ldb = sh->tb ? sh->n : sh->k;
            for (int c = 0; c < sh->count; c++)
                if ((ops->gemm16 ? ops->gemm16(s, sh->ta, sh->tb, sh->m, sh->n, sh->k, 1.0f, A, 1,
                                               lda, B, 1, ldb, 1.0f, C, sh->m)
                                 : ops->gemm(s, sh->ta, sh->tb, sh->m, sh->n, sh->k, 1.0f, A, lda,
                                             B, ldb, 1.0f, C, sh->m)) != ZS_OK)
                    goto done;
        }
        if (dev->stream_sync(s) != ZS_OK) goto done;
        if (r >= 0) t[r] = zs_now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    med = t[reps / 2];
done:
    dev->free(A);
    dev->free(B);
    dev->free(C);
    free(hA);
    free(hB);
    free(t);
    return med;
}

/* What bench step reads from the command line. */
typedef struct step_opts {
    zs_train_config cfg;
    const char *model, *data;
    int steps, warm, json;
    const char *config_path; /* --config */
} step_opts;

#define SO(field) offsetof(step_opts, field)
static const zs_flag STEP_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(SO(config_path)),
    {.name = "model", .kind = ZS_FLAG_STR, .off = SO(model), .arg = "NAME",
     .help = "model preset [gpt2-124m]"},
    {.name = "batch", .kind = ZS_FLAG_INT, .off = SO(cfg.batch), .lo = 1, .hi = INT_MAX,
     .arg = "N", .help = "sequences per step [4]"},
    {.name = "seq", .kind = ZS_FLAG_INT, .off = SO(cfg.seq), .lo = 1, .hi = INT_MAX, .arg = "T",
     .help = "sequence length [64]"},
    {.name = "steps", .kind = ZS_FLAG_INT, .off = SO(steps), .lo = 1, .hi = INT_MAX, .arg = "N",
     .help = "timed steps [5]"},
    {.name = "warmup-steps", .kind = ZS_FLAG_INT, .off = SO(warm), .lo = 0, .hi = INT_MAX,
     .arg = "N", .help = "untimed steps first [2]"},
    {.name = "data", .kind = ZS_FLAG_STR, .off = SO(data), .arg = "FILE",
     .help = "token or text data [random tokens below --vocab]"},
    {.name = "vocab", .kind = ZS_FLAG_INT, .off = SO(cfg.vocab), .lo = 0, .hi = INT_MAX,
     .arg = "N", .help = "the random tokens' vocabulary [GPT-2's 50257]"},
    {.name = "dtype", .kind = ZS_FLAG_DTYPE, .off = SO(cfg.module.param_dtype), .arg = "fp32|bf16",
     .help = "bf16: bf16 params, grads, kept activations and GEMM inputs [fp32]"},
    {.name = "recompute", .kind = ZS_FLAG_RECOMPUTE, .off = SO(cfg.recompute),
     .arg = "none|block", .help = "activation recomputation [none]"},
    {.name = "attention", .kind = ZS_FLAG_ATTENTION, .off = SO(cfg.attention),
     .arg = "flash|naive", .help = "attention kernel [flash]"},
    {.name = "device", .kind = ZS_FLAG_DEVICE, .off = SO(cfg.module.device), .arg = "cpu|cuda|auto",
     .help = "where the step runs [auto]"},
    {.name = "tf32", .kind = ZS_FLAG_SWITCH, .off = SO(cfg.module.tf32),
     .help = "TF32 GEMM inputs"},
    {.name = "offload", .kind = ZS_FLAG_OFFLOAD, .off = SO(cfg.module.offload),
     .arg = "none|optimizer|params",
     .help = "optimizer state (params: and parameters) in host memory,\nstepped on the host [none]"},
    {.name = "grad-clip", .kind = ZS_FLAG_FLOAT, .off = SO(cfg.grad_clip), .arg = "C",
     .help = "global-norm clip; 0 lets an offloaded host step\nrun during the backward [1.0]"},
    {.name = "json", .kind = ZS_FLAG_SWITCH, .off = SO(json), .help = "one JSON object on stdout"},
};

static const zs_flag_table STEP_TABLE = {
    .cmd = "bench step",
    .rows = STEP_FLAGS,
    .count = sizeof STEP_FLAGS / sizeof STEP_FLAGS[0],
    .usage =
        "usage: zshard bench step [options]\n"
        "Times N training steps after warm-up (default 5 after 2) on random tokens below\n"
        "--vocab (GPT-2's 50257) unless --data is given, and compares model FLOP/s with the GEMM\n"
        "rate of the same shapes in the step's own arithmetic on the step's device, measured in\n"
        "this run (sgemm on the CPU, cuBLAS on a GPU). --dtype bf16: bf16 params, grads, kept\n"
        "activations and GEMM inputs (fp32 accumulation); --tf32: TF32 GEMM inputs.\n",
};

int zs_bench_step(int argc, char **argv) {
    step_opts so = {.cfg = zs_train_config_default(), .model = "gpt2-124m", .steps = 5,
                    .warm = 2};
    so.cfg.batch = 4;
    so.cfg.seq = 64;
    int rc = zs_flag_parse(&STEP_TABLE, argc, argv, 1, &so, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    zs_train_config cfg = so.cfg;
    cfg.module.grad_dtype = cfg.module.param_dtype;
    const char *model = so.model, *data = so.data;
    int steps = so.steps, warm = so.warm, json = so.json;
    if (zs_model_preset(model, &cfg.model) != ZS_OK)
        return zs_flag_fail(2, "bench step: %s", zs_last_error());

    char tmp[] = "/tmp/zshard-bench-XXXXXX";
    if (!data) {
        int fd = mkstemp(tmp);
        if (fd < 0) return zs_flag_fail(1, "bench step: cannot create a temporary file");
        close(fd);
        if (zs_bench_token_file(tmp, (int64_t)cfg.batch * cfg.seq * 64 + 4096,
                                cfg.vocab ? cfg.vocab : ZS_GPT2_VOCAB)) {
            unlink(tmp);
            return zs_flag_fail(1, "bench step: %s", zs_last_error());
        }
        data = tmp;
    }
    cfg.data_path = data;
    /* On the emulated GPU a wall-clock time means nothing: the step is priced on the H100 model
     * instead (docs/cuda.md, "The profiler"), cost only, one step after the warm-up. */
    int predict = (cfg.module.device == NULL || strcmp(cfg.module.device, "cpu") != 0) &&
                  zs_cuda_emulated() && zs_cuda_device_count() > 0;
    if (predict) {
        steps = 1;
        if (warm < 1) warm = 1;
        if (zs_cuda_predict_enable() != ZS_OK) {
            if (data == tmp) unlink(tmp);
            return zs_flag_fail(1, "bench step: %s", zs_last_error());
        }
    }
    cfg.steps = steps + warm;
    cfg.warmup = 1;
    zs_trainer_t *t = NULL;
    zs_status st = zs_trainer_create(&cfg, &t);
    if (data == tmp) unlink(tmp);
    if (st != ZS_OK) return zs_flag_fail(1, "bench step: %s", zs_last_error());

    double *ms = calloc((size_t)steps, sizeof *ms);
    char *table = NULL;
    /* predicted: the step on the timeline (streams, copies and host work overlapped as their
     * order allows), and the sum of its records (as if nothing overlapped) */
    double pred = 0, serial_s = 0;
    for (int s = 0; s < warm + steps && ms; s++) {
        zs_step_stats ss;
        if (predict && s == warm && (st = zs_cuda_profile_start()) != ZS_OK) break;
        if ((st = zs_trainer_step(t, &ss)) != ZS_OK) break;
        if (s >= warm) ms[s - warm] = ss.ms;
        if (predict && s >= warm && (st = zs_cuda_profile_stop(&serial_s, &table)) != ZS_OK) break;
        if (predict && s >= warm && (st = zs_cuda_profile_timeline(&pred)) != ZS_OK) break;
        if (predict && s >= warm) ms[s - warm] = pred * 1e3;
    }
    if (!ms || st != ZS_OK) {
        free(ms);
        free(table);
        zs_trainer_destroy(t);
        return zs_flag_fail(1, "bench step: %s", ms ? zs_last_error() : "out of memory");
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    double med_ms = ms[steps / 2];
    free(ms);

    const zs_model_config *mc = zs_trainer_model(t);
    int N = cfg.batch * cfg.seq, C = mc->n_embd, L = mc->n_layer;
    zs_linear_dims lin[ZS_MODEL_MAX_LINEARS];
    int nl = zs_model_linears(mc, NULL, lin); /* the shapes only */
    gemm_shape g[3 * ZS_MODEL_MAX_LINEARS];
    int ng = 0;
    for (int i = 0; i < nl; i++)
        ng = add_linear(g, ng, N, lin[i].IC, lin[i].OC, lin[i].count);
    /* Memory of the training run itself, before the ceiling's buffers. */
    zs_mem_stats mem;
    zs_mem_get_stats(&mem);
    double gemm_flops = 0, gemm_s;
    if (predict) { /* the model's price of the same GEMMs, once (time_gemms runs them twice) */
        zs_cuda_profile_start();
        time_gemms(zs_trainer_module(t), g, ng, 1, 0, &gemm_flops);
        zs_cuda_profile_stop(&gemm_s, NULL);
        gemm_s /= 2;
    } else {
        gemm_s = time_gemms(zs_trainer_module(t), g, ng, 5, 1, &gemm_flops);
    }
    /* Model FLOPs: the GEMMs above plus causal attention's QK^T and AV (forward 4BT^2C per
     * layer, backward twice that), counted over the full T x T square as is customary. */
    double attn_flops = 12.0 * L * (double)cfg.batch * cfg.seq * cfg.seq * C;
    double model_flops = gemm_flops + attn_flops;
    double model_gflops = model_flops / (med_ms * 1e-3) / 1e9;
    double sgemm_gflops = gemm_s > 0 ? gemm_flops / gemm_s / 1e9 : 0;
    double ratio = sgemm_gflops > 0 ? model_gflops / sgemm_gflops : 0;
    double tps = (double)N / (med_ms * 1e-3);
    uint64_t hash = 0;
    zs_trainer_param_hash(t, &hash);
    /* MFU on a GPU: the model FLOP/s over the device's dense peak in the step's arithmetic. */
    char basis[192] = "";
    int on_gpu = strcmp(zs_trainer_device(t, NULL), "cpu") != 0;
    zs_gemm_math gm = zs_module_ops(zs_trainer_module(t))->gemm_math;
    double peak_flops = predict  ? zs_cuda_model_peak_flops(gm, basis, sizeof basis)
                        : on_gpu ? zs_cuda_peak_flops(gm, basis, sizeof basis)
                                 : 0;
    double mfu = peak_flops > 0 ? model_flops / (med_ms * 1e-3) / peak_flops : 0;
    int threads = openblas_get_num_threads();
    int par = openblas_get_parallel();
    const char *pname = par == 0 ? "sequential" : par == 1 ? "pthreads" : "openmp";

    if (json) {
        char peak_s[32] = "null", mfu_s[32] = "null"; /* null: no peak known for the device */
        if (peak_flops > 0) {
            snprintf(peak_s, sizeof peak_s, "%.1f", peak_flops / 1e9);
            snprintf(mfu_s, sizeof mfu_s, "%.4f", mfu);
        }
        printf("{\"model\":\"%s\",\"dtype\":\"%s\",\"attention\":\"%s\",\"batch\":%d,\"seq\":%d,"
               "\"steps\":%d,"
               "\"ms_per_step\":%.3f,"
               "\"tokens_per_s\":%.1f,\"model_gflops\":%.3f,\"sgemm_gflops\":%.3f,"
               "\"ratio\":%.4f,\"param_hash\":\"%016llx\",\"peak_bytes\":%llu,"
               "\"blas_threads\":%d,\"blas_parallel\":\"%s\",\"device\":\"%s\","
               "\"peak_gflops\":%s,\"mfu\":%s,\"predicted\":%s}\n",
               mc->name, zs_dtype_name(cfg.module.param_dtype),
               cfg.attention == ZS_ATTENTION_NAIVE ? "naive" : "flash", cfg.batch, cfg.seq, steps,
               med_ms, tps, model_gflops, sgemm_gflops, ratio, (unsigned long long)hash,
               (unsigned long long)mem.total_peak, threads, pname, zs_trainer_device(t, NULL),
               peak_s, mfu_s, predict ? "true" : "false");
    } else if (predict) {
        char peak[32];
        zs_format_bytes(mem.total_peak, peak, sizeof peak);
        printf("bench step: %s, %s, %s attention, batch %d x seq %d, vocab %d: PREDICTED for one "
               "H100 SXM by the emulated GPU's profiler from the traffic its kernels made (not "
               "measured; docs/cuda.md, \"The profiler\")\n",
               mc->name, zs_dtype_name(cfg.module.param_dtype),
               cfg.attention == ZS_ATTENTION_NAIVE ? "naive" : "flash", cfg.batch, cfg.seq,
               mc->vocab);
        printf("| metric | predicted |\n|---|---|\n");
        printf("| ms/step (the timeline: streams, copies and host work overlapped) | %.2f |\n",
               med_ms);
        printf("| the step's records summed (nothing overlapped) | %.2f ms |\n", serial_s * 1e3);
        printf("| tokens/s | %.0f |\n", tps);
        printf("| model GFLOP/step | %.2f |\n", model_flops / 1e9);
        printf("| model TFLOP/s | %.2f |\n", model_gflops / 1e3);
        printf("| MFU (of %.1f TFLOP/s dense: %s) | %.2f%% |\n", peak_flops / 1e12, basis,
               100.0 * mfu);
        printf("| cuBLAS, the step's GEMM shapes (ceiling) | %.2f ms, %.1f TFLOP/s |\n",
               gemm_s * 1e3, sgemm_gflops / 1e3);
        printf("| step / ceiling | %.1f%% |\n", 100.0 * ratio);
        printf("| device memory (this emulated run) | %s |\n", peak);
        printf("\nkernels and library calls of one step, by predicted time (\"sampled\": a sample "
               "of the grid's blocks ran and its counts were scaled to the grid; \"priced once\": "
               "launches identical to an earlier one, same kernel, grid and declared cost, took "
               "its price):\n\n%s",
               table ? table : "(no records)\n");
    } else {
        char peak[32];
        zs_format_bytes(mem.total_peak, peak, sizeof peak);
        printf("bench step: %s, %s, %s attention, batch %d x seq %d, vocab %d, %d timed steps "
               "after %d warm-up\n",
               mc->name, zs_dtype_name(cfg.module.param_dtype),
               cfg.attention == ZS_ATTENTION_NAIVE ? "naive" : "flash", cfg.batch, cfg.seq,
               mc->vocab, steps, warm);
        const char *why = NULL, *devname = zs_trainer_device(t, &why);
        printf("  device %s (%s); OpenBLAS: %d threads (%s)\n", devname, why, threads, pname);
        printf("| metric | value |\n|---|---|\n");
        printf("| ms/step (median) | %.1f |\n", med_ms);
        printf("| tokens/s | %.0f |\n", tps);
        printf("| model GFLOP/step | %.2f |\n", model_flops / 1e9);
        printf("| achieved model GFLOP/s | %.2f |\n", model_gflops);
        printf("| %s GFLOP/s, same shapes (ceiling) | %.2f |\n",
               strcmp(devname, "cpu") ? "cuBLAS" : "sgemm", sgemm_gflops);
        printf("| ratio | %.1f%% |\n", 100.0 * ratio);
        if (on_gpu && peak_flops > 0)
            printf("| MFU (of %.1f TFLOP/s dense peak: %s) | %.1f%% |\n", peak_flops / 1e12, basis,
                   100.0 * mfu);
        else if (on_gpu)
            printf("| MFU | n/a (%s) |\n", basis);
        printf("| peak memory | %s |\n", peak);
        printf("| param_hash | %016llx |\n", (unsigned long long)hash);
    }
    free(table);
    zs_trainer_destroy(t);
    return 0;
}

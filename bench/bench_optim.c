/* `zshard bench optim`: the host AdamW step (the CPU backend's adamw_segs, the shared
 * arithmetic of kernels/adamw.h, threaded over the rank's cores) in GB/s of optimizer state
 * touched, against two ceilings measured in the same run on the same threads: memcpy over the
 * same number of bytes, and a stream pass over the step's own buffers that reads and writes
 * what it does with one add an element (p += g, m += g, v += g: the bandwidth of that access
 * pattern, without AdamW's arithmetic). The better of the two is the ceiling. This is the step an
 * optimizer-offloaded rank runs on the host (docs/benchmarks.md "Host AdamW step").
 *
 * Bytes touched per element: the fp32 parameter, both moments and the gradient read (4 + 4 + 4
 * + 4, or 2 for a bf16 gradient) and the parameter and moments written (12): 28 (26). The
 * ceiling copies half that many bytes from one buffer to another, so it too reads and writes 28
 * (26) bytes an element. The three are timed in rotation, rep by rep, so a busy machine slows
 * them alike; the table gives medians.
 *
 * --round (bf16 gradients): the step also rounds the updated parameters to bf16 in place over
 * the gradient, as offload's host step writes the compute copy (28 bytes an element), and a
 * fourth entry of the rotation times what it replaced: the step without rounding, then a cast
 * pass of the parameters into the same buffer (26 + 6 bytes). */
#include "backend/cpu/cpu.h"
#include "backend/ops.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "args/flags.h"
#include "core/bf16.h"
#include "core/timer.h"
#include "zshard.h"

#include <limits.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 8
#define MAX_REPS 64

/* What bench optim reads from the command line. */
typedef struct optim_opts {
    const char *config_path; /* --config */
    int64_t sizes[MAX_SIZES];
    int nsizes, threads, reps, json, round;
    zs_dtype grad;
    const char *isa; /* auto, avx2, avx512 */
} optim_opts;

/* --sizes 1M,16M: element counts, each with an optional K, M or G (powers of 1024). */
static int parse_sizes(void *opts, const char *text, const char *what) {
    optim_opts *o = opts;
    int n = 0;
    for (const char *p = text; *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        long long mul = *end == 'K'   ? 1ll << 10
                        : *end == 'M' ? 1ll << 20
                        : *end == 'G' ? 1ll << 30
                                      : 1;
        if (mul > 1) end++;
        if (end == p || v < 1 || v > (4ll << 30) / mul || n == MAX_SIZES || (*end && *end != ','))
            return zs_flag_fail(2, "%s: bad list '%s' (up to %d sizes, each 1..4G elements)", what,
                                text, MAX_SIZES);
        o->sizes[n++] = v * mul;
        p = *end ? end + 1 : end;
    }
    if (!n) return zs_flag_fail(2, "%s: empty list", what);
    o->nsizes = n;
    return 0;
}

#define OO(field) offsetof(optim_opts, field)
static const zs_flag OPTIM_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(OO(config_path)),
    {.name = "sizes", .kind = ZS_FLAG_CUSTOM, .arg = "N1,N2,...", .parse = parse_sizes,
     .help = "elements per shard, K/M/G suffixes [1M,16M,64M]"},
    {.name = "threads", .kind = ZS_FLAG_INT, .off = OO(threads), .lo = 1, .hi = 1024, .arg = "N",
     .help = "threads for both the step and the ceiling [OpenMP's default]"},
    {.name = "grad", .kind = ZS_FLAG_DTYPE, .off = OO(grad), .arg = "fp32|bf16",
     .help = "the gradient's dtype, as --reduce-dtype [fp32]"},
    {.name = "isa", .kind = ZS_FLAG_STR, .off = OO(isa), .arg = "auto|avx2|avx512",
     .help = "the step's instruction set [auto: avx512 where the CPU has it]"},
    {.name = "reps", .kind = ZS_FLAG_INT, .off = OO(reps), .lo = 1, .hi = MAX_REPS, .arg = "N",
     .help = "timed steps (and copies) per size [9]"},
    {.name = "round", .kind = ZS_FLAG_SWITCH, .off = OO(round),
     .help = "bf16 gradients: the step rounds the parameters into the\ngradient's buffer (offload's "
             "compute copy), timed beside\nthe step followed by a cast pass [off]"},
    {.name = "json", .kind = ZS_FLAG_SWITCH, .off = OO(json),
     .help = "one JSON line per size instead of the table"},
};

static const zs_flag_table OPTIM_TABLE = {
    .cmd = "bench optim",
    .rows = OPTIM_FLAGS,
    .count = sizeof OPTIM_FLAGS / sizeof OPTIM_FLAGS[0],
    .usage = "usage: zshard bench optim [options]\n"
             "Times the host AdamW step over shards of each size against memcpy of the same\n"
             "bytes on the same threads, interleaved, and prints GB/s of optimizer state\n"
             "touched (28 bytes an element, 26 with bf16 gradients, 28 with --round) and the\n"
             "share of the ceiling. bench/torch_adamw.py sets torch.optim.AdamW beside it.\n",
};

/* memcpy of n bytes from src to dst, one contiguous part a thread (as the step splits). */
static void par_copy(char *dst, const char *src, size_t n) {
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(dst + lo, src + lo, hi - lo);
    }
}

/* The stream ceiling: the step's reads and writes, one add each (with round, the parameter
 * written back over the bf16 gradient too). */
static void streams(float *p, void *g, int g16, float *m, float *v, int64_t n, int round) {
    if (g16 && round) {
        zs_bf16 *h = g;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float x = zs_bf16_to_f32(h[i]);
            p[i] += x, m[i] += x, v[i] += x;
            h[i] = zs_f32_to_bf16(p[i]);
        }
    } else if (g16) {
        const zs_bf16 *h = g;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float x = zs_bf16_to_f32(h[i]);
            p[i] += x, m[i] += x, v[i] += x;
        }
    } else {
        const float *h = g;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            p[i] += h[i], m[i] += h[i], v[i] += h[i];
    }
}

typedef struct optim_result {
    double step_s, copy_s, stream_s; /* medians */
    double split_s;                  /* --round: the step, then the cast (median) */
    double bytes;                    /* touched per step (and per copy) */
} optim_result;

/* One size: the state first touched by the threads that update it (the pages land on their
 * memory), then reps alternating step and copy. */
static int bench_size(const zs_ops *ops, int64_t n, zs_dtype gdt, int reps, int round,
                      optim_result *r) {
    size_t gb = gdt == ZS_DTYPE_BF16 ? 2 : 4,
           per = 12 + gb + 12 + (round ? 2 : 0); /* read p, m, v, g; write p, m, v (and g) */
    int kinds = round ? 4 : 3;
    size_t half = (size_t)n * per / 2;
    float *p = malloc((size_t)n * 4), *m = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
    void *g = malloc((size_t)n * gb);
    char *src = malloc(half), *dst = malloc(half);
    int rc = 0;
    if (!p || !m || !v || !g || !src || !dst) {
        rc = zs_flag_fail(1, "bench optim: out of memory for %lld elements", (long long)n);
        goto done;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float x = (float)((i * 2654435761u) >> 8 & 0xffff) / 65536.0f - 0.5f;
        p[i] = x, m[i] = 0.0f, v[i] = 0.0f;
        if (gb == 2)
            ((zs_bf16 *)g)[i] = zs_f32_to_bf16(0.01f * x);
        else
            ((float *)g)[i] = 0.01f * x;
    }
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t lo = half * t / nt, hi = half * (t + 1) / nt;
        memset(src + lo, 1, hi - lo), memset(dst + lo, 0, hi - lo);
    }
    zs_adamw_segs segs = {.n = 1, .lo = {0}, .hi = {n}, .decay = {1}};
    double ts[MAX_REPS + 1], tc[MAX_REPS + 1], tm[MAX_REPS + 1], tx[MAX_REPS + 1];
    zs_bf16 *r16 = round ? g : NULL;
    for (int k = 0; k <= reps; k++) { /* k = 0 warms all up, untimed */
        for (int w = 0; w < kinds; w++) {
            /* 3 step then cast, 2 step, 1 copy, 0 streams: each first in turn */
            int which = (w + k) % kinds;
            double t0 = zs_now_s();
            zs_status st = ZS_OK;
            if (which == 3) {
                st = ops->adamw_segs16(NULL, p, g, m, v, NULL, &segs, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                       0.1f, 1.0f, k + 1);
                if (st == ZS_OK) st = ops->cast(NULL, g, ZS_DTYPE_BF16, p, ZS_DTYPE_F32, (size_t)n);
            } else if (which == 2)
                st = gb == 2 ? ops->adamw_segs16(NULL, p, g, m, v, r16, &segs, 1e-3f, 0.9f, 0.95f,
                                                 1e-8f, 0.1f, 1.0f, k + 1)
                             : ops->adamw_segs(NULL, p, g, m, v, &segs, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                               0.1f, 1.0f, k + 1);
            else if (which == 1)
                par_copy(dst, src, half);
            else
                streams(p, g, gb == 2, m, v, n, round);
            double dt = zs_now_s() - t0;
            if (st != ZS_OK) {
                rc = zs_flag_fail(1, "bench optim: %s", zs_last_error());
                goto done;
            }
            if (k) (which == 3 ? tx : which == 2 ? ts : which == 1 ? tc : tm)[k - 1] = dt;
        }
    }
    r->step_s = zs_bench_median(ts, reps);
    r->copy_s = zs_bench_median(tc, reps);
    r->stream_s = zs_bench_median(tm, reps);
    r->split_s = round ? zs_bench_median(tx, reps) : 0;
    r->bytes = (double)n * (double)per;
done:
    free(p), free(m), free(v), free(g), free(src), free(dst);
    return rc;
}

int zs_bench_optim(int argc, char **argv) {
    optim_opts o = {
        .sizes = {1 << 20, 16 << 20, 64 << 20}, .nsizes = 3, .reps = 9, .grad = ZS_DTYPE_F32};
    int rc = zs_flag_parse(&OPTIM_TABLE, argc, argv, 1, &o, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.isa && strcmp(o.isa, "auto") && strcmp(o.isa, "avx2") && strcmp(o.isa, "avx512"))
        return zs_flag_fail(2, "bench optim: --isa '%s' (expected auto, avx2 or avx512)", o.isa);
    int want = !o.isa || !strcmp(o.isa, "auto") ? -1
               : !strcmp(o.isa, "avx2")             ? ZS_CPU_ISA_AVX2
                                                    : ZS_CPU_ISA_AVX512;
    int isa = want < 0 ? zs_cpu_adamw_isa() : zs_cpu_adamw_set_isa(want);
    if (want == ZS_CPU_ISA_AVX512 && isa != want)
        return zs_flag_fail(2, "bench optim: --isa avx512: this CPU has no AVX-512 (x86-64-v4)");
    if (o.round && o.grad != ZS_DTYPE_BF16)
        return zs_flag_fail(2, "bench optim: --round rounds into a bf16 gradient: add --grad bf16");
    if (o.threads) omp_set_num_threads(o.threads);
    int threads = omp_get_max_threads();
    const zs_ops *ops = zs_ops_cpu();
    const char *gname = o.grad == ZS_DTYPE_BF16 ? "bf16" : "fp32";
    if (!o.json)
        printf("bench optim: host AdamW (kernels/adamw.h, %s), %s gradients, %d threads, median "
               "of %d reps, interleaved with memcpy of the same bytes and a pass over the same "
               "streams\n\n"
               "| elements | state MiB | step ms | step GB/s | memcpy GB/s | streams GB/s | of "
               "ceiling |%s\n|---:|---:|---:|---:|---:|---:|---:|%s\n",
               zs_cpu_isa_name(isa), gname, threads, o.reps,
               o.round ? " step, then cast ms |" : "", o.round ? "---:|" : "");
    for (int i = 0; i < o.nsizes; i++) {
        optim_result r;
        if ((rc = bench_size(ops, o.sizes[i], o.grad, o.reps, o.round, &r))) return rc;
        double sg = r.bytes / r.step_s / 1e9, cg = r.bytes / r.copy_s / 1e9;
        double mg = r.bytes / r.stream_s / 1e9, ceil = cg > mg ? cg : mg;
        if (o.json)
            printf("{\"elements\":%lld,\"grad\":\"%s\",\"isa\":\"%s\",\"threads\":%d,"
                   "\"bytes\":%.0f,"
                   "\"step_ms\":%.4f,\"step_gbps\":%.3f,\"memcpy_gbps\":%.3f,"
                   "\"streams_gbps\":%.3f,\"round\":%s,\"split_ms\":%.4f}\n",
                   (long long)o.sizes[i], gname, zs_cpu_isa_name(isa), threads, r.bytes,
                   r.step_s * 1e3, sg, cg, mg, o.round ? "true" : "false", r.split_s * 1e3);
        else {
            printf("| %lld | %.1f | %.2f | %.2f | %.2f | %.2f | %.0f%% |", (long long)o.sizes[i],
                   (double)o.sizes[i] * (12.0 + (o.grad == ZS_DTYPE_BF16 ? 2 : 4)) / 1048576.0,
                   r.step_s * 1e3, sg, cg, mg, 100.0 * sg / ceil);
            if (o.round) printf(" %.2f |", r.split_s * 1e3);
            printf("\n");
        }
        fflush(stdout);
    }
    return 0;
}

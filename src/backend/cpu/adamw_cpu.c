/* The host AdamW step: kernels/adamw.h's element update (the CUDA kernel's arithmetic) over a
 * range, built twice, for AVX2 (the library's baseline, -march=x86-64-v3) and for AVX-512
 * (x86-64-v4), and chosen when first used from what the CPU reports, so that one binary runs
 * the wider vectors where they exist and nowhere else. ZS_CPU_ISA=avx2 keeps the narrower
 * one (for comparison; avx512 on a CPU without it falls back to avx2).
 *
 * The builds compute the same bits: every element is the same sequence of IEEE single
 * operations (no contraction: -ffp-contract=off; division and square root are correctly
 * rounded at every vector width), so the choice changes only the speed. The step is
 * memory-bound, which is why its threads split the range in contiguous parts (each thread's
 * pages are the ones it first touched in a shard it owns) and why AVX-512 gains little.
 * bench optim measures it (docs/benchmarks.md "Host AdamW step"). */
#include "backend/cpu/cpu.h"
#include "backend/kernels/adamw.h"
#include "core/bf16.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The body both builds share: the loop over [lo, hi) of one gradient dtype, and for bf16
 * gradients the updated parameters rounded into r16 (none, in place over g16, or apart: a loop
 * each, so that the in-place one reads and writes through one pointer and still vectorises). */
#define ADAMW_RANGE_BODY                                                                           \
    if (g32) {                                                                                     \
        for (int64_t i = lo; i < hi; i++)                                                          \
            zs_adamw_elem(&p[i], &m[i], &v[i], g32[i], h->lr, h->beta1, h->beta2, h->eps, h->wd,   \
                          h->grad_scale, h->bc1, h->bc2);                                          \
    } else if (!r16) {                                                                             \
        for (int64_t i = lo; i < hi; i++)                                                          \
            zs_adamw_elem(&p[i], &m[i], &v[i], zs_bf16_to_f32(g16[i]), h->lr, h->beta1, h->beta2,  \
                          h->eps, h->wd, h->grad_scale, h->bc1, h->bc2);                           \
    } else if (r16 == g16) {                                                                       \
        zs_bf16 *io = r16;                                                                         \
        for (int64_t i = lo; i < hi; i++) {                                                        \
            zs_adamw_elem(&p[i], &m[i], &v[i], zs_bf16_to_f32(io[i]), h->lr, h->beta1, h->beta2,   \
                          h->eps, h->wd, h->grad_scale, h->bc1, h->bc2);                           \
            io[i] = zs_f32_to_bf16(p[i]);                                                          \
        }                                                                                          \
    } else {                                                                                       \
        for (int64_t i = lo; i < hi; i++) {                                                        \
            zs_adamw_elem(&p[i], &m[i], &v[i], zs_bf16_to_f32(g16[i]), h->lr, h->beta1, h->beta2,  \
                          h->eps, h->wd, h->grad_scale, h->bc1, h->bc2);                           \
            r16[i] = zs_f32_to_bf16(p[i]);                                                         \
        }                                                                                          \
    }

/* g16 and r16 are not restrict: r16 may be g16 (the in-place loop uses r16 alone then). */
typedef void (*adamw_range_fn)(float *restrict p, const float *restrict g32, const zs_bf16 *g16,
                               float *restrict m, float *restrict v, zs_bf16 *r16, int64_t lo,
                               int64_t hi, const zs_cpu_adamw_hp *h);

static void adamw_range_avx2(float *restrict p, const float *restrict g32, const zs_bf16 *g16,
                             float *restrict m, float *restrict v, zs_bf16 *r16, int64_t lo,
                             int64_t hi, const zs_cpu_adamw_hp *h) {
    ADAMW_RANGE_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ZS_HAVE_AVX512_BUILD 1
__attribute__((target("arch=x86-64-v4"))) static void
adamw_range_avx512(float *restrict p, const float *restrict g32, const zs_bf16 *g16,
                   float *restrict m, float *restrict v, zs_bf16 *r16, int64_t lo, int64_t hi,
                   const zs_cpu_adamw_hp *h) {
    ADAMW_RANGE_BODY
}
#endif

static int g_isa = -1; /* ZS_CPU_ISA_AVX2 or _AVX512 once chosen */

/* x86-64-v4's features, each asked by name (GCC and clang both know these; clang 14 does not
 * know the level's name), the OS's saving of the vector state included. */
int zs_cpu_has_avx512(void) {
#ifdef ZS_HAVE_AVX512_BUILD
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

int zs_cpu_adamw_set_isa(int isa) {
    g_isa = isa == ZS_CPU_ISA_AVX512 && zs_cpu_has_avx512() ? ZS_CPU_ISA_AVX512 : ZS_CPU_ISA_AVX2;
    return g_isa;
}

int zs_cpu_adamw_isa(void) {
    if (g_isa < 0) {
        const char *e = getenv("ZS_CPU_ISA");
        zs_cpu_adamw_set_isa(e && !strcmp(e, "avx2") ? ZS_CPU_ISA_AVX2 : ZS_CPU_ISA_AVX512);
    }
    return g_isa;
}

const char *zs_cpu_isa_name(int isa) {
    return isa == ZS_CPU_ISA_AVX512 ? "avx512" : "avx2";
}

void zs_cpu_adamw_run(float *p, const float *g32, const zs_bf16 *g16, float *m, float *v,
                      zs_bf16 *r16, int64_t lo, int64_t hi, const zs_cpu_adamw_hp *h) {
    adamw_range_fn fn = adamw_range_avx2;
#ifdef ZS_HAVE_AVX512_BUILD
    if (zs_cpu_adamw_isa() == ZS_CPU_ISA_AVX512) fn = adamw_range_avx512;
#endif
    if ((size_t)(hi - lo) < ZS_CPU_PAR_MIN) {
        fn(p, g32, g16, m, v, r16, lo, hi, h);
        return;
    }
#pragma omp parallel
    {
        /* contiguous parts on 16-element (64-byte) boundaries */
        int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), n = hi - lo;
        int64_t a = lo + (n * t / nt & ~(int64_t)15), b = lo + (n * (t + 1) / nt & ~(int64_t)15);
        if (t == nt - 1) b = hi;
        if (a < b) fn(p, g32, g16, m, v, r16, a, b, h);
    }
}

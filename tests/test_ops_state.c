/* CPU ops table, the ops around the model: AdamW (whole buffers and segments, fp32 and bf16
 * gradients, each instruction set's build), the token draw (philox KAT), casts against an independent bf16 rounding, sumsq
 * and its chunked forms, init_normal; each against a naive reference, outputs poisoned first.
 * The model's forward ops: test_ops.c. */
#include "backend/cpu/cpu.h"
#include "backend/kernels/adamw.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "core/philox.h"
#include "opstest.h"

#include <omp.h>
#include <string.h>

static const zs_ops *ops;

/* ---- optimizer, casts, sumsq, init ---------------------------------------------------- */

static void test_adamw(void) {
    size_t n = 40001;
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    double *rp = dbuf(n), *rm = dbuf(n), *rv = dbuf(n);
    zt_fill_normal(p, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i], rm[i] = 0, rv[i] = 0, m[i] = 0, v[i] = 0;
    for (int t = 1; t <= 3; t++) {
        zt_fill_normal(g, n, 1.0f);
        if (t == 2) g[0] = 0.0f, m[0] = 0.0f, v[0] = 0.0f, rm[0] = 0, rv[0] = 0; /* vhat = 0 */
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            double gg = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gg;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gg * gg;
            double mh = rm[i] / bc1, vh = rv[i] / bc2;
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
        ZT_OK(ops->adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, gs, t));
        /* A handful of fp32 roundings per step on O(1) values; the ratio m/sqrt(v) is O(1)
         * and scaled by lr, so the parameter error stays near 2^-24 |p|: 2e-6 mixed. */
        ZT_CHECK(zt_max_err(p, rp, n) <= 2e-6, "adamw t=%d param err %g", t, zt_max_err(p, rp, n));
        ZT_CHECK(zt_max_err(m, rm, n) <= 2e-6, "adamw t=%d m err %g", t, zt_max_err(m, rm, n));
        ZT_CHECK(zt_max_err(v, rv, n) <= 2e-6, "adamw t=%d v err %g", t, zt_max_err(v, rv, n));
    }
    ZT_CHECK(ops->adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, gs, 0) == ZS_ERR_INVALID,
             "t = 0 rejected");
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

/* Round-to-nearest-even to bf16 computed independently: pick the nearer of the two
 * truncation neighbours in double, ties to the even one. */
static uint16_t bf16_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return 0;
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dlo = fabs((double)f - flo);
    /* Above the largest bf16, "hi" is infinity: f rounds there from the midpoint
     * (2 - 2^-8) 2^127 up (the midpoint itself ties to even, which is infinity). */
    double dhi = isinf(fhi)
                     ? (fabs((double)f) >= (2.0 - 1.0 / 256) * ldexp(1.0, 127) ? 0 : INFINITY)
                     : fabs((double)fhi - f);
    if (isinf(flo)) return (uint16_t)(lo >> 16);
    if (dlo < dhi) return (uint16_t)(lo >> 16);
    if (dhi < dlo) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static void test_cast(void) {
    size_t n = 50000;
    float *x = fbuf(n), *back = fbuf(n);
    zs_bf16 *h = zt_malloc(n * sizeof(zs_bf16));
    zt_fill_normal(x, n, 100.0f);
    /* Exact ties (low half 0x8000) with odd and even kept bits, huge values, inf, NaN. */
    uint32_t special[8] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu,
                           0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00001u};
    for (int i = 0; i < 8; i++)
        memcpy(&x[i], &special[i], 4);
    memset(h, 0xa5, n * sizeof(zs_bf16));
    ZT_OK(ops->cast(NULL, h, ZS_DTYPE_BF16, x, ZS_DTYPE_F32, n));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            bad += !isnan(zs_bf16_to_f32(h[i]));
            continue;
        }
        if (h[i].bits != bf16_ref(x[i]) && bad++ < 3)
            fprintf(stderr, "  f32 %08x -> bf16 %04x, want %04x\n", zs_f32_bits(x[i]), h[i].bits,
                    bf16_ref(x[i]));
    }
    ZT_CHECK(bad == 0, "f32 -> bf16: %zu elements not round-to-nearest-even", bad);
    zt_poison(back, n);
    ZT_OK(ops->cast(NULL, back, ZS_DTYPE_F32, h, ZS_DTYPE_BF16, n));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &back[i], 4);
        bad += u != (uint32_t)h[i].bits << 16;
    }
    ZT_CHECK(bad == 0, "bf16 -> f32 not exact: %zu", bad);
    zt_poison(back, n);
    ZT_OK(ops->cast(NULL, back, ZS_DTYPE_F32, x, ZS_DTYPE_F32, n));
    ZT_CHECK(bits_equal(back, x, n * sizeof(float)), "f32 -> f32 copy");
    zs_bf16 *h2 = zt_malloc(n * sizeof(zs_bf16));
    ZT_OK(ops->cast(NULL, h2, ZS_DTYPE_BF16, h, ZS_DTYPE_BF16, n));
    ZT_CHECK(bits_equal(h2, h, n * sizeof(zs_bf16)), "bf16 -> bf16 copy");
    ZT_CHECK(ops->cast(NULL, h2, ZS_DTYPE_BF16, x, ZS_DTYPE_I32, 4) == ZS_ERR_UNSUPPORTED,
             "i32 -> bf16 unsupported");
    free(x), free(back), free(h), free(h2);
}

/* adamw_segs: the same bits as one adamw per segment (decay where flagged), the gaps between
 * segments untouched, bad segment lists refused. */
static void test_adamw_segs(void) {
    size_t n = 9000;
    float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    float *p2 = fbuf(n), *m2 = fbuf(n), *v2 = fbuf(n);
    zt_fill_normal(p, n, 1.0f);
    zt_fill_normal(g, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        m[i] = v[i] = 0.0f;
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
    zs_adamw_segs s = {.n = 3, .lo = {0, 1000, 5000}, .hi = {900, 4096, 9000}, .decay = {1, 0, 1}};
    for (int t = 1; t <= 2; t++) {
        ZT_OK(ops->adamw_segs(NULL, p, g, m, v, &s, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t));
        for (int k = 0; k < s.n; k++) {
            size_t lo = (size_t)s.lo[k], len = (size_t)(s.hi[k] - s.lo[k]);
            ZT_OK(ops->adamw(NULL, p2 + lo, g + lo, m2 + lo, v2 + lo, len, 1e-2f, 0.9f, 0.95f,
                             1e-8f, s.decay[k] ? 0.1f : 0.0f, 0.7f, t));
        }
    }
    ZT_CHECK(!memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4),
             "adamw_segs differs from adamw per segment (gaps included)");
    zs_adamw_segs bad = {.n = 2, .lo = {10, 5}, .hi = {20, 30}, .decay = {0, 0}};
    ZT_CHECK(ops->adamw_segs(NULL, p, g, m, v, &bad, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1) ==
                 ZS_ERR_INVALID,
             "overlapping segments refused");
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

/* Whether /proc/cpuinfo's flags list x86-64-v4's AVX-512 features (F, BW, CD, DQ, VL): the
 * kernel's word, independent of the compiler's CPU builtins that adamw_cpu.c asks. */
static int cpuinfo_has_avx512(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    static char line[1 << 14];
    int have = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            const char *need[] = {" avx512f", " avx512bw", " avx512cd", " avx512dq", " avx512vl"};
            have = 1;
            for (int i = 0; i < 5; i++) {
                const char *p = strstr(line, need[i]);
                size_t k = strlen(need[i]);
                have &= p && (p[k] == ' ' || p[k] == '\n');
            }
            break;
        }
    if (f) fclose(f);
    return have;
}

/* The host AdamW step in each instruction set this CPU has (adamw_cpu.c): fp32 and bf16
 * gradients, segments long enough for the threads' split and ending off a vector's width, all
 * bit for bit kernels/adamw.h's element update run one element at a time. Where the CPU has no
 * AVX-512 the AVX2 build is the only one, and the choice must say so. */
static void test_adamw_isa(void) {
    size_t n = 3 * ZS_CPU_PAR_MIN + 37;
    float *p0 = fbuf(n), *g = fbuf(n), *m0 = fbuf(n), *v0 = fbuf(n);
    float *p = fbuf(n), *m = fbuf(n), *v = fbuf(n), *rp = fbuf(n), *rm = fbuf(n), *rv = fbuf(n);
    zs_bf16 *g16 = malloc(n * sizeof *g16), *gio = malloc(n * sizeof *gio);
    zs_bf16 *r16 = malloc(n * sizeof *r16);
    zt_fill_normal(p0, n, 1.0f);
    zt_fill_normal(g, n, 1.0f);
    zt_fill_normal(m0, n, 0.1f);
    for (size_t i = 0; i < n; i++)
        v0[i] = m0[i] * m0[i], g16[i] = zs_f32_to_bf16(g[i]);
    zs_adamw_segs s = {.n = 2, .lo = {3, 2 * ZS_CPU_PAR_MIN + 1}, .hi = {2 * ZS_CPU_PAR_MIN - 5, n},
                       .decay = {1, 0}};
    int have512 = cpuinfo_has_avx512();
    for (int isa = ZS_CPU_ISA_AVX2; isa <= ZS_CPU_ISA_AVX512; isa++) {
        int got = zs_cpu_adamw_set_isa(isa);
        ZT_CHECK(got == (isa == ZS_CPU_ISA_AVX512 && have512 ? isa : ZS_CPU_ISA_AVX2),
                 "asked for %s, got %s (CPU has x86-64-v4: %d)", zs_cpu_isa_name(isa),
                 zs_cpu_isa_name(got), have512);
        if (got != isa) {
            printf("adamw: this CPU has no AVX-512 (x86-64-v4): its build is not run here\n");
            continue;
        }
        /* half: bf16 gradients; round: the parameters rounded apart (1) or in place (2) */
        for (int mode = 0; mode < 4; mode++) {
            int half = mode > 0, round = mode - 1;
            memcpy(p, p0, n * 4), memcpy(m, m0, n * 4), memcpy(v, v0, n * 4);
            memcpy(rp, p0, n * 4), memcpy(rm, m0, n * 4), memcpy(rv, v0, n * 4);
            for (int t = 1; t <= 2; t++) {
                /* in place: the gradient is rewritten each step, as the engine's download does */
                memcpy(gio, g16, n * sizeof *gio);
                memset(r16, 0xff, n * sizeof *r16);
                zs_bf16 *gin = round == 2 ? gio : g16, *rout = round == 2 ? gio : r16;
                ZT_OK(half ? ops->adamw_segs16(NULL, p, gin, m, v, round > 0 ? rout : NULL, &s,
                                               1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t)
                           : ops->adamw_segs(NULL, p, g, m, v, &s, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                             0.7f, t));
                float bc1 = zs_adamw_bias_correction(0.9f, t);
                float bc2 = zs_adamw_bias_correction(0.95f, t);
                for (int k = 0; k < s.n; k++)
                    for (int64_t i = s.lo[k]; i < s.hi[k]; i++)
                        zs_adamw_elem(&rp[i], &rm[i], &rv[i],
                                      half ? zs_bf16_to_f32(g16[i]) : g[i], 1e-2f, 0.9f, 0.95f,
                                      1e-8f, s.decay[k] ? 0.1f : 0.0f, 0.7f, bc1, bc2);
            }
            ZT_CHECK(bits_equal(p, rp, n * 4) && bits_equal(m, rm, n * 4) &&
                         bits_equal(v, rv, n * 4),
                     "adamw (%s, %s gradients, mode %d) differs from kernels/adamw.h element by "
                     "element",
                     zs_cpu_isa_name(isa), half ? "bf16" : "fp32", mode);
            if (round < 1) continue;
            /* the rounded copy: the step's parameters cast, where a segment covers; elsewhere
             * untouched (the gradient in place, the 0xffff fill apart) */
            const zs_bf16 *rc = round == 2 ? gio : r16;
            size_t bad = 0;
            for (size_t i = 0, k = 0; i < n; i++) {
                while (k < (size_t)s.n && (int64_t)i >= s.hi[k])
                    k++;
                int in = k < (size_t)s.n && (int64_t)i >= s.lo[k];
                uint16_t want = in ? zs_f32_to_bf16(rp[i]).bits : round == 2 ? g16[i].bits : 0xffff;
                bad += rc[i].bits != want;
            }
            ZT_CHECK(bad == 0,
                     "adamw_segs16 (%s) rounding %s: %zu of %zu elements are not the step's "
                     "parameters cast (or, outside the segments, untouched)",
                     zs_cpu_isa_name(isa), round == 2 ? "in place" : "apart", bad, n);
        }
    }
    zs_cpu_adamw_set_isa(ZS_CPU_ISA_AVX512);
    free(p0), free(g), free(m0), free(v0), free(p), free(m), free(v);
    free(rp), free(rm), free(rv), free(g16), free(gio), free(r16);
}

/* The token draw (kernels/sample.h, the CPU twin of the GPU's cuRAND draw): core/philox.h's
 * Philox-4x32-10 reproduces Random123's published known-answer vectors (the generator cuRAND's
 * Philox4_32_10 implements); greedy is the first maximum; and 8000 draws from softmax([0, 1, 2, 3])
 * land in each bucket within 5 standard deviations of its probability (a fixed seed:
 * deterministic). */
static void test_sample(void) {
    static const uint32_t kat[3][2][4] = {
        {{0, 0, 0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}};
    static const uint32_t keys[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    for (int v = 0; v < 3; v++) {
        zs_philox4 c;
        memcpy(c.v, kat[v][0], sizeof c.v);
        c = zs_philox4x32_10(c, keys[v][0], keys[v][1]);
        ZT_CHECK(!memcmp(c.v, kat[v][1], sizeof c.v), "philox4x32-10 KAT %d: %08x %08x %08x %08x",
                 v, c.v[0], c.v[1], c.v[2], c.v[3]);
    }
    float logits[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    int32_t tok = -1, count[4] = {0};
    ZT_OK(ops->sample(NULL, &tok, logits, 4, 0.0f, 1, 0));
    ZT_CHECK(tok == 3, "greedy draw %d, not the maximum 3", tok);
    double z = 1 + exp(1) + exp(2) + exp(3);
    int n = 8000;
    for (int i = 0; i < n; i++) {
        ZT_OK(ops->sample(NULL, &tok, logits, 4, 1.0f, 42, (uint64_t)i));
        ZT_REQUIRE(tok >= 0 && tok < 4, "draw %d out of range", tok);
        count[tok]++;
    }
    for (int k = 0; k < 4; k++) {
        double p = exp(k) / z, sd = sqrt(n * p * (1 - p));
        ZT_CHECK(fabs(count[k] - n * p) <= 5 * sd, "token %d drawn %d times of %d, expected %.0f",
                 k, count[k], n, n * p);
    }
}

static void test_sumsq(void) {
    size_t sizes[4] = {0, 5, 4096, 300007};
    for (int si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *x = fbuf(n);
        zt_fill_normal(x, n, 2.0f);
        long double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += (long double)x[i] * x[i];
        double got = NAN;
        ZT_OK(ops->sumsq(NULL, &got, x, n));
        /* Products are exact in double; n double additions: relative error <= n 2^-53 ~ 3e-11
         * at n = 3e5. */
        ZT_CHECK(fabs(got - (double)ref) <= 1e-10 * fmax(1.0, (double)ref),
                 "sumsq n=%zu: %.17g vs %.17Lg", n, got, ref);
        /* Fixed chunking: the same bits for 1, 2 and 3 threads. */
        double r1, r3;
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        ZT_OK(ops->sumsq(NULL, &r1, x, n));
        omp_set_num_threads(3);
        ZT_OK(ops->sumsq(NULL, &r3, x, n));
        omp_set_num_threads(nt);
        ZT_CHECK(bits_equal(&r1, &got, 8) && bits_equal(&r3, &got, 8),
                 "sumsq n=%zu depends on thread count", n);
        free(x);
    }
}

static void test_init_normal(void) {
    size_t n = 1 << 16;
    float std = 0.02f;
    uint64_t seed = 1234, sid = 7;
    float *x = fbuf(n), *part = fbuf(1000);
    zt_poison(x, n);
    ZT_OK(ops->init_normal(NULL, x, n, seed, sid, 0, std));
    size_t bad = 0;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        float want = std * zs_philox_normal(seed, sid, i);
        bad += !bits_equal(&x[i], &want, 4);
        s += x[i], s2 += (double)x[i] * x[i];
    }
    ZT_CHECK(bad == 0, "init_normal != std * zs_philox_normal: %zu", bad);
    /* Sample moments of 65536 normals: mean within 5 sigma (5 std/256), variance within 3%. */
    double mean = s / n, var = s2 / n - mean * mean;
    ZT_CHECK(fabs(mean) < 5 * std / 256 && fabs(var / (std * std) - 1) < 0.03,
             "init_normal moments mean %g var %g", mean, var);
    /* A shard initialised alone equals the same slice of the whole tensor. */
    zt_poison(part, 1000);
    ZT_OK(ops->init_normal(NULL, part, 1000, seed, sid, 30000, std));
    ZT_CHECK(bits_equal(part, x + 30000, 1000 * sizeof(float)), "init_normal shard != slice");
    free(x), free(part);
}

int main(void) {
    zt_init("ops_state");
    ops = zs_ops_cpu();
    ZT_REQUIRE(ops != NULL && ops->name != NULL, "no CPU ops table");
    test_adamw();
    test_adamw_segs();
    test_adamw_isa();
    test_sample();
    test_cast();
    test_sumsq();
    test_init_normal();
    ZT_OK(ops->sync(NULL));
    return zt_finish();
}

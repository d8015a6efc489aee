/* Core: status strings, error messages, allocator accounting and cap, bf16 rounding, Philox
 * known-answer vectors and shard independence, byte-size parsing. */
#include "core/alloc.h"
#include "core/bf16.h"
#include "core/philox.h"
#include "core/status.h"
#include "testutil.h"

#include <string.h>

static void test_status(void) {
    ZT_CHECK(!strcmp(zs_status_string(ZS_OK), "ZS_OK"), "name of ZS_OK");
    ZT_CHECK(!strcmp(zs_status_string(ZS_ERR_IO), "ZS_ERR_IO"), "name of ZS_ERR_IO");
    zs_status st = zs_error(ZS_ERR_IO, "file %s: %d", "x.bin", 3);
    ZT_CHECK(st == ZS_ERR_IO, "zs_error returns its status");
    ZT_CHECK(!strcmp(zs_last_error(), "file x.bin: 3"), "message was '%s'", zs_last_error());
}

static zs_status helper_fails(int *cleaned) {
    zs_status st = ZS_OK;
    void *p = NULL;
    ZS_CHECK(zs_alloc(ZS_MEM_WORKSPACE, 128, "scratch", &p));
    ZS_REQUIRE(0, ZS_ERR_INVALID, "deliberate failure");
fail:
    zs_free(p);
    *cleaned = 1;
    return st;
}

static void test_alloc(void) {
    zs_mem_stats s0, s1, s2;
    zs_mem_get_stats(&s0);
    float *a = NULL, *b = NULL;
    ZT_OK(zs_alloc(ZS_MEM_PARAM, 1000 * sizeof(float), "a", (void **)&a));
    ZT_OK(zs_alloc(ZS_MEM_OPTIM_STATE, 3000, "b", (void **)&b));
    ZT_CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "64-byte alignment");
    int zero = 1;
    for (int i = 0; i < 1000; i++)
        zero &= a[i] == 0.0f;
    ZT_CHECK(zero, "zs_alloc zero-fills");
    zs_mem_get_stats(&s1);
    ZT_CHECK(s1.current[ZS_MEM_PARAM] - s0.current[ZS_MEM_PARAM] == 4000, "param +4000");
    ZT_CHECK(s1.current[ZS_MEM_OPTIM_STATE] - s0.current[ZS_MEM_OPTIM_STATE] == 3000,
             "optim +3000");
    ZT_CHECK(s1.total_current - s0.total_current == 7000, "total +7000");
    zs_free(a);
    zs_mem_get_stats(&s2);
    ZT_CHECK(s2.current[ZS_MEM_PARAM] == s0.current[ZS_MEM_PARAM], "free returns bytes");
    ZT_CHECK(s2.peak[ZS_MEM_PARAM] >= s0.current[ZS_MEM_PARAM] + 4000, "peak kept");

    /* Cap: a request over it fails with the breakdown and changes nothing. */
    zs_mem_set_cap(s2.total_current + 5000);
    void *c = (void *)1;
    zs_status st = zs_alloc(ZS_MEM_GRAD, 6000, "big gradient", &c);
    ZT_CHECK(st == ZS_ERR_OOM, "over-cap alloc fails with OOM, got %s", zs_status_string(st));
    ZT_CHECK(c == NULL, "out pointer cleared");
    ZT_CHECK(strstr(zs_last_error(), "big gradient") && strstr(zs_last_error(), "optim_state"),
             "message names the buffer and the breakdown: %s", zs_last_error());
    zs_mem_stats s3;
    zs_mem_get_stats(&s3);
    ZT_CHECK(s3.total_current == s2.total_current, "failed alloc leaves no trace");
    ZT_OK(zs_alloc(ZS_MEM_GRAD, 4000, "fits", &c));
    zs_free(c);
    zs_mem_set_cap(0);
    zs_free(b);

    int cleaned = 0;
    zs_mem_stats s4;
    zs_mem_get_stats(&s0);
    ZT_CHECK(helper_fails(&cleaned) == ZS_ERR_INVALID, "REQUIRE status propagates");
    zs_mem_get_stats(&s4);
    ZT_CHECK(cleaned && s4.total_current == s0.total_current, "fail label cleaned up");
}

static void test_bf16(void) {
    /* Exactly representable values round-trip. */
    float exact[] = {0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 65536.0f, -0.15625f};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        ZT_CHECK(zs_bf16_to_f32(zs_f32_to_bf16(exact[i])) == exact[i], "roundtrip %g", exact[i]);
    /* Ties go to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; even mantissa is 1. */
    ZT_CHECK(zs_bf16_to_f32(zs_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f, "tie to even (down)");
    /* 1 + 3*2^-8 lies between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even. */
    ZT_CHECK(zs_bf16_to_f32(zs_f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f,
             "tie to even (up)");
    ZT_CHECK(zs_bf16_to_f32(zs_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f,
             "above half rounds up");
    ZT_CHECK(isnan(zs_bf16_to_f32(zs_f32_to_bf16(NAN))), "NaN stays NaN");
    ZT_CHECK(isinf(zs_bf16_to_f32(zs_f32_to_bf16(INFINITY))), "inf stays inf");
    /* Random values: relative error at most 2^-8 (half an ulp: 7 stored mantissa bits). */
    for (int i = 0; i < 10000; i++) {
        float x = (float)zt_normal() * 100.0f;
        float y = zs_bf16_to_f32(zs_f32_to_bf16(x));
        ZT_CHECK(fabsf(y - x) <= fabsf(x) * 0x1p-8f, "bf16(%g)=%g", x, y);
    }
}

static void test_philox(void) {
    /* Known-answer tests from the Random123 distribution (kat_vectors, philox4x32_10). */
    zs_philox4 c0 = {{0, 0, 0, 0}};
    zs_philox4 r0 = zs_philox4x32_10(c0, 0, 0);
    ZT_CHECK(r0.v[0] == 0x6627e8d5u && r0.v[1] == 0xe169c58du && r0.v[2] == 0xbc57ac4cu &&
                 r0.v[3] == 0x9b00dbd8u,
             "KAT zero: %08x %08x %08x %08x", r0.v[0], r0.v[1], r0.v[2], r0.v[3]);
    zs_philox4 c1 = {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
    zs_philox4 r1 = zs_philox4x32_10(c1, 0xffffffffu, 0xffffffffu);
    ZT_CHECK(r1.v[0] == 0x408f276du && r1.v[1] == 0x41c83b0eu && r1.v[2] == 0xa20bc7c6u &&
                 r1.v[3] == 0x6d5451fdu,
             "KAT ones: %08x %08x %08x %08x", r1.v[0], r1.v[1], r1.v[2], r1.v[3]);
    zs_philox4 c2 = {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    zs_philox4 r2 = zs_philox4x32_10(c2, 0xa4093822u, 0x299f31d0u);
    ZT_CHECK(r2.v[0] == 0xd16cfe09u && r2.v[1] == 0x94fdccebu && r2.v[2] == 0x5001e420u &&
                 r2.v[3] == 0x24126ea1u,
             "KAT pi: %08x %08x %08x %08x", r2.v[0], r2.v[1], r2.v[2], r2.v[3]);
    /* Normal samples: mean ~0, variance ~1 over 200k draws (5 sigma bounds). */
    double sum = 0, sq = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = zs_philox_normal(42, 7, (uint64_t)i);
        sum += x;
        sq += x * x;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    ZT_CHECK(fabs(mean) < 5.0 / sqrt(n), "normal mean %g", mean);
    ZT_CHECK(fabs(var - 1.0) < 5.0 * sqrt(2.0 / n), "normal variance %g", var);
    ZT_CHECK(zs_philox_normal(1, 2, 3) == zs_philox_normal(1, 2, 3), "pure function");
    ZT_CHECK(zs_philox_normal(1, 2, 3) != zs_philox_normal(1, 3, 3), "stream matters");
}

static void test_parse_bytes(void) {
    uint64_t v = 0;
    ZT_OK(zs_parse_bytes("4G", &v));
    ZT_CHECK(v == 4ull << 30, "4G");
    ZT_OK(zs_parse_bytes("512MiB", &v));
    ZT_CHECK(v == 512ull << 20, "512MiB");
    ZT_OK(zs_parse_bytes("1000", &v));
    ZT_CHECK(v == 1000, "1000");
    ZT_CHECK(zs_parse_bytes("abc", &v) == ZS_ERR_INVALID, "abc rejected");
    ZT_CHECK(zs_parse_bytes("-1G", &v) == ZS_ERR_INVALID, "negative rejected");
    ZT_CHECK(zs_parse_bytes("4Q", &v) == ZS_ERR_INVALID, "bad unit rejected");
    ZT_CHECK(zs_parse_bytes("", &v) == ZS_ERR_INVALID, "empty rejected");
}

int main(void) {
    zt_init("core");
    test_status();
    test_alloc();
    test_bf16();
    test_philox();
    test_parse_bytes();
    return zt_finish();
}

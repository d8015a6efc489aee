/* CUDA casts between fp32 and bf16 (ops.h cast, widen_ranges, round16), over zs_f32_to_bf16's
 * rounding (core/bf16.h), so every bit is the CPU's. ZS_COST counts no FLOPs for a cast. */
#include "backend/cuda/cuda_internal.h"
#include "core/bf16.h"

/* Casts move 4 elements a thread (a 16-byte and an 8-byte access, consecutive lanes on
 * consecutive addresses) where both buffers are 16-byte aligned (vec), then the rest one by
 * one; the rounding is zs_f32_to_bf16's either way, NaNs included (the CPU's bits). */
static __global__ void f32_to_bf16_kernel(zs_bf16 *out, const float *in, size_t n, int vec) {
    size_t n4 = vec ? n / 4 : 0;
    ZS_CU_FOR(i, n4) {
        float4 a = ((const float4 *)in)[i];
        uint32_t lo = (uint32_t)zs_f32_to_bf16(a.x).bits | (uint32_t)zs_f32_to_bf16(a.y).bits << 16;
        uint32_t hi = (uint32_t)zs_f32_to_bf16(a.z).bits | (uint32_t)zs_f32_to_bf16(a.w).bits << 16;
        ((uint2 *)out)[i] = make_uint2(lo, hi);
    }
    ZS_CU_FOR(i, n - 4 * n4) {
        out[4 * n4 + i] = zs_f32_to_bf16(in[4 * n4 + i]);
    }
}

/* Up to ZS_WIDEN_RANGES ranges (element offset and count) of one widening: blockIdx.y is the
 * range, whose elements the x blocks stride over (a cast is one range from 0). */
typedef struct widen_list {
    size_t off[ZS_WIDEN_RANGES], n[ZS_WIDEN_RANGES];
} widen_list;

static __global__ void bf16_to_f32_kernel(float *out, const zs_bf16 *in, widen_list r) {
    size_t n = r.n[blockIdx.y];
    out += r.off[blockIdx.y];
    in += r.off[blockIdx.y];
    size_t n4 = (uintptr_t)out % 16 == 0 && (uintptr_t)in % 16 == 0 ? n / 4 : 0;
    ZS_CU_FOR(i, n4) {
        uint2 w = ((const uint2 *)in)[i];
        ((float4 *)out)[i] = make_float4(zs_bits_f32(w.x << 16), zs_bits_f32(w.x & 0xffff0000u),
                                         zs_bits_f32(w.y << 16), zs_bits_f32(w.y & 0xffff0000u));
    }
    ZS_CU_FOR(i, n - 4 * n4) {
        out[4 * n4 + i] = zs_bf16_to_f32(in[4 * n4 + i]);
    }
}

static int cast_vec(const void *out, const void *in) {
    return (uintptr_t)out % 16 == 0 && (uintptr_t)in % 16 == 0;
}

zs_status zs_cu_f32_to_bf16(cudaStream_t cs, zs_bf16 *out, const float *in, size_t n) {
    zs_status st = ZS_OK;
    int vec = cast_vec(out, in);
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(out && in, ZS_ERR_INVALID, "cast: NULL buffer");
    ZS_COST(0, 0, 6.0 * n); /* 4 bytes in, 2 out */
    ZS_LAUNCH(f32_to_bf16_kernel, zs_cu_blocks(vec ? n / 4 + n % 4 : n), ZS_CU_THREADS, 0, cs, out,
              in, n, vec);
    ZS_CUDA_CHECK_LAUNCH(f32_to_bf16_kernel);
fail:
    return st;
}

/* The first k ranges of r in one launch, as many x blocks as the longest needs. */
static zs_status launch_bf16_to_f32(cudaStream_t cs, float *out, const zs_bf16 *in,
                                    const widen_list *r, int k) {
    zs_status st = ZS_OK;
    size_t most = 0, total = 0;
    for (int i = 0; i < k; i++) {
        total += r->n[i];
        most = r->n[i] > most ? r->n[i] : most;
    }
    if (total == 0) return ZS_OK;
    ZS_REQUIRE(out && in, ZS_ERR_INVALID, "cast: NULL buffer");
    ZS_COST(0, 0, 6.0 * total); /* 2 bytes in, 4 out */
    ZS_LAUNCH(bf16_to_f32_kernel, dim3(zs_cu_blocks(most / 4 + most % 4), (unsigned)k),
              ZS_CU_THREADS, 0, cs, out, in, *r);
    ZS_CUDA_CHECK_LAUNCH(bf16_to_f32_kernel);
fail:
    return st;
}

zs_status zs_cu_cast(zs_stream_t *s, void *out, zs_dtype out_dt, const void *in, zs_dtype in_dt,
                     size_t n) {
    zs_status st = ZS_OK;
    size_t es;
    if (out_dt == in_dt) {
        es = zs_dtype_size(in_dt);
        ZS_REQUIRE(es > 0, ZS_ERR_INVALID, "cast: unknown dtype %d", (int)in_dt);
        if (n && out != in)
            ZS_CUDA_CHECK(
                cudaMemcpyAsync(out, in, n * es, cudaMemcpyDeviceToDevice, zs_cu_stream(s)));
    } else if (out_dt == ZS_DTYPE_BF16 && in_dt == ZS_DTYPE_F32) {
        ZS_CHECK(zs_cu_f32_to_bf16(zs_cu_stream(s), (zs_bf16 *)out, (const float *)in, n));
    } else if (out_dt == ZS_DTYPE_F32 && in_dt == ZS_DTYPE_BF16) {
        widen_list r = {{0}, {n}};
        ZS_CHECK(launch_bf16_to_f32(zs_cu_stream(s), (float *)out, (const zs_bf16 *)in, &r, 1));
    } else {
        ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported", zs_dtype_name(in_dt),
                   zs_dtype_name(out_dt));
    }
fail:
    return st;
}

zs_status zs_cu_widen_ranges(zs_stream_t *s, float *out, const zs_bf16 *in, const int64_t *ranges,
                             int nr) {
    zs_status st = ZS_OK;
    widen_list r;
    ZS_REQUIRE(nr >= 0 && (ranges || nr == 0), ZS_ERR_INVALID, "widen_ranges: %d ranges", nr);
    for (int i0 = 0; i0 < nr; i0 += ZS_WIDEN_RANGES) {
        int k = nr - i0 < ZS_WIDEN_RANGES ? nr - i0 : ZS_WIDEN_RANGES;
        for (int i = 0; i < k; i++) {
            const int64_t *g = ranges + 2 * (i0 + i);
            ZS_REQUIRE(g[0] >= 0 && g[1] >= 0, ZS_ERR_INVALID,
                       "widen_ranges: range %d is (%lld, %lld)", i0 + i, (long long)g[0],
                       (long long)g[1]);
            r.off[i] = (size_t)g[0];
            r.n[i] = (size_t)g[1];
        }
        ZS_CHECK(launch_bf16_to_f32(zs_cu_stream(s), out, in, &r, k));
    }
fail:
    return st;
}

/* ops.h round16, an element a thread: only a table without softmax_xent16 rounds its logits. */
static __global__ void round16_kernel(float *x, size_t n) {
    ZS_CU_FOR(i, n) {
        x[i] = zs_bf16_to_f32(zs_f32_to_bf16(x[i]));
    }
}

zs_status zs_cu_round16(zs_stream_t *s, float *x, size_t n) {
    zs_status st = ZS_OK;
    if (n == 0) return ZS_OK;
    ZS_REQUIRE(x, ZS_ERR_INVALID, "round16: NULL buffer");
    ZS_COST(0, 0, 8.0 * n); /* 4 bytes in, 4 out */
    ZS_LAUNCH(round16_kernel, zs_cu_blocks(n), ZS_CU_THREADS, 0, zs_cu_stream(s), x, n);
    ZS_CUDA_CHECK_LAUNCH(round16_kernel);
fail:
    return st;
}

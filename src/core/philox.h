/* Counter-based Philox4x32-10 (Salmon et al., SC'11). A value is a pure function of
 * (key, counter), so element i of tensor t gets the same random number on every rank, world
 * size, stage and device: a rank initialises its own shard without generating the rest. */
#ifndef ZS_CORE_PHILOX_H
#define ZS_CORE_PHILOX_H

#include "hd.h"

#include <math.h>
#include <stdint.h>

typedef struct zs_philox4 {
    uint32_t v[4];
} zs_philox4;

#define ZS_PHILOX_M0 0xD2511F53u
#define ZS_PHILOX_M1 0xCD9E8D57u
#define ZS_PHILOX_W0 0x9E3779B9u
#define ZS_PHILOX_W1 0xBB67AE85u

static ZS_HD void zs_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* Ten rounds of Philox4x32 on counter c with key (k0, k1). */
static ZS_HD zs_philox4 zs_philox4x32_10(zs_philox4 c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        zs_philox_mulhilo(ZS_PHILOX_M0, c.v[0], &hi0, &lo0);
        zs_philox_mulhilo(ZS_PHILOX_M1, c.v[2], &hi1, &lo1);
        zs_philox4 n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
        k0 += ZS_PHILOX_W0;
        k1 += ZS_PHILOX_W1;
    }
    return c;
}

/* Four 32-bit words for (seed, stream, index): stream names the tensor or purpose. */
static ZS_HD zs_philox4 zs_philox_draw(uint64_t seed, uint64_t stream, uint64_t index) {
    zs_philox4 c;
    c.v[0] = (uint32_t)index;
    c.v[1] = (uint32_t)(index >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    return zs_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in (0, 1]: 24 random bits, never 0 so that log() is finite. */
static ZS_HD float zs_philox_u01(uint32_t x) {
    return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

/* Standard normal for element `index` of `stream` (Box-Muller on the first two words). */
static ZS_HD float zs_philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    zs_philox4 r = zs_philox_draw(seed, stream, index);
    float u1 = zs_philox_u01(r.v[0]);
    float u2 = zs_philox_u01(r.v[1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

/* Uniform 64-bit integer for (seed, stream, index). */
static ZS_HD uint64_t zs_philox_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    zs_philox4 r = zs_philox_draw(seed, stream, index);
    return ((uint64_t)r.v[0] << 32) | r.v[1];
}

#endif

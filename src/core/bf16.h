/* bfloat16 storage: the upper 16 bits of an IEEE fp32, converted with round-to-nearest-even.
 * Arithmetic always happens in fp32. */
#ifndef ZS_CORE_BF16_H
#define ZS_CORE_BF16_H

#include "hd.h"

#include <stdint.h>
#include <string.h>

typedef struct zs_bf16 {
    uint16_t bits;
} zs_bf16;

static ZS_HD uint32_t zs_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static ZS_HD float zs_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static ZS_HD zs_bf16 zs_f32_to_bf16(float f) {
    uint32_t u = zs_f32_bits(f);
    zs_bf16 r;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
        /* NaN: keep it a (quiet) NaN; rounding could carry it into infinity. */
        r.bits = (uint16_t)((u >> 16) | 0x0040u);
        return r;
    }
    /* Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. Overflow to
     * infinity is the correct IEEE result for values above the largest bf16. */
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (uint16_t)(u >> 16);
    return r;
}

static ZS_HD float zs_bf16_to_f32(zs_bf16 h) {
    return zs_bits_f32((uint32_t)h.bits << 16);
}

#endif

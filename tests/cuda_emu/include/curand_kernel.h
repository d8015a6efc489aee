/* cuRAND's device API on the emulated GPU: the part zshard's sampling kernel uses, the
 * Philox4_32_10 generator (curand_init, curand, curand_uniform). The real <curand_kernel.h> is
 * device code nvcc alone compiles, so the emulated build finds this file first. It keeps
 * cuRAND's state layout and its documented stream: a 4x32-bit counter and 2x32-bit key, ten
 * rounds of the Philox-4x32 bijection (Salmon et al., SC'11) with key schedule constants
 * 0x9E3779B9 and 0xBB67AE85 and multipliers 0xD2511F53 and 0xCD9E8D57; curand_init(seed,
 * subsequence, offset) puts the seed in the key, the subsequence in the counter's upper half and
 * skips offset outputs; curand_uniform maps x to x * 2^-32 + 2^-33, in (0, 1]. */
#ifndef ZS_EMU_CURAND_KERNEL_H
#define ZS_EMU_CURAND_KERNEL_H

#include <vector_types.h>

struct curandStatePhilox4_32_10 {
    uint4 ctr;
    uint4 output;
    uint2 key;
    unsigned int STATE;
    int boxmuller_flag;
    int boxmuller_flag_double;
    float boxmuller_extra;
    double boxmuller_extra_double;
};
typedef struct curandStatePhilox4_32_10 curandStatePhilox4_32_10_t;

static inline uint4 zs_emu_philox_round(uint4 c, uint2 k) {
    unsigned long long p0 = 0xD2511F53ull * c.x, p1 = 0xCD9E8D57ull * c.z;
    uint4 r;
    r.x = (unsigned)(p1 >> 32) ^ c.y ^ k.x;
    r.y = (unsigned)p1;
    r.z = (unsigned)(p0 >> 32) ^ c.w ^ k.y;
    r.w = (unsigned)p0;
    return r;
}

static inline uint4 zs_emu_philox10(uint4 c, uint2 k) {
    for (int i = 0; i < 9; i++) {
        c = zs_emu_philox_round(c, k);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return zs_emu_philox_round(c, k);
}

/* Add n to the 128-bit counter (n < 2^64), or n << 64 with hi. */
static inline void zs_emu_philox_add(uint4 *c, unsigned long long n, int hi) {
    unsigned long long lo =
        hi ? ((unsigned long long)c->w << 32 | c->z) : ((unsigned long long)c->y << 32 | c->x);
    unsigned long long sum = lo + n;
    int carry = sum < lo;
    if (hi) {
        c->z = (unsigned)sum;
        c->w = (unsigned)(sum >> 32);
        return;
    }
    c->x = (unsigned)sum;
    c->y = (unsigned)(sum >> 32);
    if (carry && ++c->z == 0) ++c->w;
}

static inline void skipahead(unsigned long long n, curandStatePhilox4_32_10_t *s) {
    s->STATE += (unsigned)(n & 3);
    n /= 4;
    if (s->STATE > 3) {
        n += 1;
        s->STATE -= 4;
    }
    zs_emu_philox_add(&s->ctr, n, 0);
    s->output = zs_emu_philox10(s->ctr, s->key);
}

static inline void skipahead_sequence(unsigned long long n, curandStatePhilox4_32_10_t *s) {
    zs_emu_philox_add(&s->ctr, n, 1);
    s->output = zs_emu_philox10(s->ctr, s->key);
}

static inline void curand_init(unsigned long long seed, unsigned long long subsequence,
                               unsigned long long offset, curandStatePhilox4_32_10_t *s) {
    s->ctr.x = s->ctr.y = s->ctr.z = s->ctr.w = 0;
    s->key.x = (unsigned)seed;
    s->key.y = (unsigned)(seed >> 32);
    s->STATE = 0;
    s->boxmuller_flag = s->boxmuller_flag_double = 0;
    s->boxmuller_extra = 0.0f;
    s->boxmuller_extra_double = 0.0;
    skipahead_sequence(subsequence, s);
    skipahead(offset, s);
}

static inline unsigned int curand(curandStatePhilox4_32_10_t *s) {
    unsigned int out[4] = {s->output.x, s->output.y, s->output.z, s->output.w};
    unsigned int r = out[s->STATE & 3];
    if (++s->STATE == 4) {
        zs_emu_philox_add(&s->ctr, 1, 0);
        s->output = zs_emu_philox10(s->ctr, s->key);
        s->STATE = 0;
    }
    return r;
}

static inline float curand_uniform(curandStatePhilox4_32_10_t *s) {
    return (float)curand(s) * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
}

#endif

/* The CPU backends' reduction kernel (src/comm/reduce.c) against a plain scalar oracle, bit
 * for bit: fp32 and bf16, 1..5 inputs, 1..4 outputs, SUM and AVG, streaming stores on and
 * off, counts around the vector group, outputs at equal and at different offsets within 32
 * bytes (the streaming head and its fallback), and an output aliasing an input. Inputs mix
 * random values with bf16 rounding ties, infinities and NaNs. */
#include "comm/comm_internal.h"
#include "core/bf16.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 5, MAXOUT = 4, MAXC = 5000, PAD = 64 };

static float g_x[MAXN][MAXC];

/* A value of input r at element i: mostly random, some exact bf16 rounding ties (the
 * low 16 bits 0x8000), some infinities and NaNs. */
static float pick(void) {
    double u = zt_uniform(0, 1);
    if (u < 0.01) return INFINITY;
    if (u < 0.015) return NAN;
    if (u < 0.1) {
        uint32_t b = zs_f32_bits((float)zt_normal());
        return zs_bits_f32((b & 0xffff0000u) | 0x8000u);
    }
    return (float)zt_normal() * 100.0f;
}

static float oracle(int n, size_t i, int avg, int bf16) {
    float s = 0;
    for (int r = 0; r < n; r++) {
        float x = bf16 ? zs_bf16_to_f32(zs_f32_to_bf16(g_x[r][i])) : g_x[r][i];
        s = r == 0 ? x : s + x;
    }
    return avg ? s / (float)n : s;
}

/* Equal bits, or both NaN (which NaN an operation returns depends on its operand order). */
static int same_f32(float a, float b) {
    return zs_f32_bits(a) == zs_f32_bits(b) || (isnan(a) && isnan(b));
}

static int same_bf16(uint16_t a, uint16_t b) {
    int an = (a & 0x7f80) == 0x7f80 && (a & 0x7f), bn = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    return a == b || (an && bn);
}

/* One call: n inputs, nout outputs at element offsets off[o] into their buffers. */
static void check(int bf16, int n, int nout, size_t count, int avg, int stream, const int *off,
                  int alias) {
    size_t esz = bf16 ? 2 : 4;
    char *inb[MAXN], *outb[MAXOUT], *in[MAXN], *out[MAXOUT];
    for (int r = 0; r < n; r++) {
        inb[r] = zt_malloc((MAXC + PAD) * esz);
        in[r] = inb[r] + (size_t)(r % 3) * esz; /* inputs at assorted alignments too */
        for (size_t i = 0; i < count; i++) {
            if (bf16)
                ((uint16_t *)in[r])[i] = zs_f32_to_bf16(g_x[r][i]).bits;
            else
                ((float *)in[r])[i] = g_x[r][i];
        }
    }
    for (int o = 0; o < nout; o++) {
        outb[o] = zt_malloc((MAXC + PAD) * esz);
        memset(outb[o], 0xa5, (MAXC + PAD) * esz); /* poison */
        /* 64-byte aligned buffer plus off[o] elements: off decides the 32-byte phase */
        out[o] = (char *)(((uintptr_t)outb[o] + 63) & ~(uintptr_t)63) + (size_t)off[o] * esz;
    }
    if (alias) { /* out[0] is input n-1 (in place) */
        memcpy(out[0], in[n - 1], count * esz);
        in[n - 1] = out[0];
    }
    if (bf16)
        zs_reduce_bf16((uint16_t *const *)out, nout, (const uint16_t *const *)in, n, count, avg, n,
                       stream);
    else
        zs_reduce_f32((float *const *)out, nout, (const float *const *)in, n, count, avg, n,
                      stream);
    int bad = 0;
    for (int o = 0; o < nout; o++)
        for (size_t i = 0; i < count && bad < 3; i++) {
            float want = oracle(n, i, avg, bf16);
            int ok = bf16 ? same_bf16(((uint16_t *)out[o])[i], zs_f32_to_bf16(want).bits)
                          : same_f32(((float *)out[o])[i], want);
            if (!ok) bad++;
            ZT_CHECK(ok,
                     "%s n %d nout %d count %zu avg %d stream %d off %d alias %d: output %d "
                     "element %zu wrong",
                     bf16 ? "bf16" : "f32", n, nout, count, avg, stream, off[o], alias, o, i);
        }
    for (int r = 0; r < n; r++)
        free(inb[r]);
    for (int o = 0; o < nout; o++)
        free(outb[o]);
}

int main(void) {
    zt_init("comm_reduce");
    const size_t counts[] = {0, 1, 7, 31, 32, 33, 95, 1000, 4099, MAXC};
    const int same[MAXOUT] = {0, 0, 0, 0}, head[MAXOUT] = {3, 3, 3, 3},
              mixed[MAXOUT] = {0, 1, 8, 5};
    const int *offs[] = {same, head, mixed};
    for (int r = 0; r < MAXN; r++)
        for (size_t i = 0; i < MAXC; i++)
            g_x[r][i] = pick();
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int n = 1; n <= MAXN; n++)
            for (int nout = 1; nout <= MAXOUT; nout += 1 + (nout > 1))
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                    for (int avg = 0; avg < 2; avg++)
                        for (int stream = 0; stream < 2; stream++)
                            for (int k = 0; k < 3; k++)
                                check(bf16, n, nout, counts[c], avg, stream, offs[k],
                                      (int)(c + (size_t)k) % 2);
    return zt_finish();
}

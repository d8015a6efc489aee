/* CRC32C over byte ranges: hardware crc32 instruction when available (x86-64-v2 and later),
 * a slicing-by-8 table otherwise. Both compute the same reflected CRC. */
#include "ckpt/crc32c.h"

#include <string.h>

#if defined(__SSE4_2__)
#include <nmmintrin.h>

uint32_t zs_crc32c(uint32_t crc, const void *data, size_t nbytes) {
    const unsigned char *p = data;
    uint64_t c = ~crc;
    while (nbytes && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        nbytes--;
    }
    for (; nbytes >= 8; nbytes -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    while (nbytes--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

#else

static uint32_t g_table[8][256];
static int g_ready;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        g_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            g_table[s][i] = (g_table[s - 1][i] >> 8) ^ g_table[0][g_table[s - 1][i] & 0xff];
    g_ready = 1;
}

uint32_t zs_crc32c(uint32_t crc, const void *data, size_t nbytes) {
    /* Building the table twice from two threads writes the same values: benign. */
    if (!g_ready) build_table();
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; nbytes >= 8; nbytes -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = g_table[7][lo & 0xff] ^ g_table[6][(lo >> 8) & 0xff] ^ g_table[5][(lo >> 16) & 0xff] ^
            g_table[4][lo >> 24] ^ g_table[3][p[4]] ^ g_table[2][p[5]] ^ g_table[1][p[6]] ^
            g_table[0][p[7]];
    }
    while (nbytes--)
        c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#endif

/* CRC32C (Castagnoli), the checksum of checkpoint files and frames: the iSCSI/ext4 polynomial
 * 0x1EDC6F41 (reflected 0x82F63B78), initial value and final xor 0xFFFFFFFF, so
 * crc32c("123456789") = 0xE3069283. Uses the SSE4.2 instruction when the build targets it and a
 * slicing-by-8 table otherwise; both give the same value. */
#ifndef ZS_CKPT_CRC32C_H
#define ZS_CKPT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: start with crc = 0 and feed the bytes in any number of pieces. */
uint32_t zs_crc32c(uint32_t crc, const void *data, size_t nbytes);

#endif

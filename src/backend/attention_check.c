/* Argument checks of the memory-efficient attention ops, one copy for the CPU and CUDA
 * backends (ops.h). */
#include "backend/ops.h"
#include "core/status.h"

zs_status zs_flash_attention_check(const char *op, int B, int T, int NH, int NKV, int hs, int ldq,
                                   int ldkv) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(B >= 0 && T >= 0 && NH >= 1 && NKV >= 1 && hs >= 1 && NH % NKV == 0, ZS_ERR_INVALID,
               "%s: bad shape B=%d T=%d NH=%d NKV=%d hs=%d (NKV must divide NH)", op, B, T, NH, NKV,
               hs);
    ZS_REQUIRE(ldq >= NH * hs && ldkv >= NKV * hs, ZS_ERR_INVALID,
               "%s: row strides ldq=%d ldkv=%d shorter than the heads (%d, %d)", op, ldq, ldkv,
               NH * hs, NKV * hs);
fail:
    return st;
}

zs_status zs_flash_attention_check16(const char *op, int B, int T, int NH, int NKV, int hs, int ldq,
                                     int ldkv) {
    zs_status st = ZS_OK;
    ZS_CHECK(zs_flash_attention_check(op, B, T, NH, NKV, hs, ldq, ldkv));
    ZS_REQUIRE(hs <= ZS_FA_OUT16_MAX_HS, ZS_ERR_INVALID,
               "%s: head size %d above the %d a bf16 output takes", op, hs, ZS_FA_OUT16_MAX_HS);
fail:
    return st;
}

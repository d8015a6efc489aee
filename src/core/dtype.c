/* Sizes and names of zs_dtype. */
#include "zshard.h"

size_t zs_dtype_size(zs_dtype dt) {
    switch (dt) {
    case ZS_DTYPE_F32:
        return 4;
    case ZS_DTYPE_BF16:
        return 2;
    case ZS_DTYPE_U16:
        return 2;
    case ZS_DTYPE_I32:
        return 4;
    case ZS_DTYPE_F16:
        return 2;
    }
    return 0;
}

const char *zs_dtype_name(zs_dtype dt) {
    switch (dt) {
    case ZS_DTYPE_F32:
        return "f32";
    case ZS_DTYPE_BF16:
        return "bf16";
    case ZS_DTYPE_U16:
        return "u16";
    case ZS_DTYPE_I32:
        return "i32";
    case ZS_DTYPE_F16:
        return "f16";
    }
    return "unknown";
}

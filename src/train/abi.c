/* Sizes of the public structs by name, so that bindings which mirror them (python/zshard)
 * refuse to run against a library whose layout differs instead of corrupting memory. */
#include "zshard.h"

#include <string.h>

#define ZS_SIZE(T)                                                                                 \
    { #T, sizeof(T) }

static const struct {
    const char *name;
    size_t size;
} SIZES[] = {
    ZS_SIZE(zs_mem_stats),   ZS_SIZE(zs_model_config), ZS_SIZE(zs_mem_estimate),
    ZS_SIZE(zs_mem_options), ZS_SIZE(zs_train_config), ZS_SIZE(zs_step_stats),
    ZS_SIZE(zs_comm_config), ZS_SIZE(zs_tensor_spec),  ZS_SIZE(zs_module_config),
    ZS_SIZE(zs_tensor_info), ZS_SIZE(zs_adamw_config), ZS_SIZE(zs_gen_config),
};

size_t zs_struct_size(const char *name) {
    for (size_t i = 0; name && i < sizeof SIZES / sizeof SIZES[0]; i++)
        if (!strcmp(SIZES[i].name, name)) return SIZES[i].size;
    return 0;
}

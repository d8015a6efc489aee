/* Which device a run computes on (zs_device_choose, include/zshard.h): the one place that
 * decides, so `train`, `eval`, `generate`, `bench step`, `bench memory` and `mem` say the same
 * thing. */
#include "zshard.h"

#include "backend/cuda_device.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zs_status zs_device_choose(const char *device, const char **chosen, char *why, size_t n) {
    zs_status st = ZS_OK;
    int built = zs_cuda_built(), count = built ? zs_cuda_device_count() : 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    *chosen = "cpu";
    if (n) why[0] = 0;
    if (!device || !strcmp(device, "auto")) {
        if (count > 0) {
            *chosen = "cuda";
            snprintf(why, n, "auto: %d CUDA device%s visible", count, count == 1 ? " is" : "s are");
        } else {
            snprintf(why, n, "auto: %s",
                     !built ? "this build has no CUDA backend" : "no CUDA device is visible");
        }
        return ZS_OK;
    }
    if (!strcmp(device, "cpu")) {
        snprintf(why, n, "--device cpu");
        return ZS_OK;
    }
    ZS_REQUIRE(!strcmp(device, "cuda"), ZS_ERR_INVALID,
               "--device: '%s' is not one of cpu, cuda, auto", device);
    ZS_REQUIRE(built, ZS_ERR_UNSUPPORTED,
               "--device cuda: this build has no CUDA backend (configure with -DZS_CUDA=ON on a "
               "machine with the CUDA toolkit)");
    ZS_REQUIRE(count > 0, ZS_ERR_UNSUPPORTED,
               "--device cuda: no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s); use --device "
               "cpu or auto",
               vis ? vis : "unset");
    *chosen = "cuda";
    snprintf(why, n, "--device cuda (%d device%s visible)", count, count == 1 ? "" : "s");
fail:
    return st;
}

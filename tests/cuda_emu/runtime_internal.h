/* Internals of the emulated GPU's CUDA runtime API shared by its files: runtime.cc (settings,
 * errors, devices), runtime_streams.cc (streams, events, the timeline), runtime_launch.cc
 * (kernel launches), runtime_memory.cc (memory,
 * copies, memset). Test infrastructure only. */
#ifndef ZS_CUDA_EMU_RUNTIME_INTERNAL_H
#define ZS_CUDA_EMU_RUNTIME_INTERNAL_H

#include <cuda_runtime.h>

#include "emu_internal.h"

namespace zs_emu {

/* Return e from an API call, remembering it for cudaGetLastError. */
inline cudaError_t ret(cudaError_t e) {
    set_last(e);
    return e;
}

#define STICKY_CHECK()                                                                             \
    do {                                                                                           \
        cudaError_t zs_st_ = sticky();                                                             \
        if (zs_st_ != cudaSuccess) return ret(zs_st_);                                             \
    } while (0)

/* Whether h is the default stream or a live stream (runtime_streams.cc). */
bool valid_stream(cudaStream_t h);
/* Wait until everything queued so far on every stream has run (runtime_streams.cc). */
void device_wait_host();

/* Per host thread: the device cudaSetDevice chose (runtime.cc). */
extern thread_local constinit int t_device;

} // namespace zs_emu

#endif

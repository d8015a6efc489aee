/* Entry points of the optional backends when this build leaves them out, so the rest of the
 * comm layer asks "is it there?" instead of sprinkling #ifdefs. */
#include "comm/comm_internal.h"
#include "core/status.h"

#ifndef ZS_HAVE_MPI
const zs_comm_backend_ops *zs_comm_mpi_ops(void) {
    return NULL;
}
zs_status zs_comm_mpi_bcast_bytes(void *buf, size_t nbytes, int root) {
    (void)buf;
    (void)nbytes;
    (void)root;
    return zs_error(ZS_ERR_UNSUPPORTED, "no MASTER_ADDR/MASTER_PORT to meet by, and this build "
                                        "has no MPI to bootstrap through");
}
#endif

#ifndef ZS_HAVE_NCCL
const zs_comm_backend_ops *zs_comm_nccl_ops(void) {
    return NULL;
}
int zs_comm_nccl_device_count(void) {
    return 0;
}
#endif

#ifndef ZS_HAVE_GLOO
const zs_comm_backend_ops *zs_comm_gloo_ops(void) {
    return NULL;
}
size_t zs_comm_gloo_staging_bytes(int world_size) {
    (void)world_size;
    return 0;
}
#endif

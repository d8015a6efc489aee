/* Backend selection: the communicator's defaults from the environment, backend names, what
 * this build and machine can run, and the one "auto" policy (docs/comm.md). */
#include "comm/comm_internal.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zs_comm_config zs_comm_config_default(void) {
    zs_comm_config c;
    memset(&c, 0, sizeof c);
    c.backend = ZS_COMM_AUTO;
    c.timeout_s = 300.0;
    c.device = -1;
    c.rank = c.world_size = c.local_rank = c.local_world_size = -1;
    const char *e;
    if ((e = getenv("ZS_COMM_TIMEOUT")) && atof(e) > 0) c.timeout_s = atof(e);
    if ((e = getenv("ZS_COMM_CHECK"))) c.check = atoi(e) != 0;
    if ((e = getenv("ZS_COMM_DELAY_MS"))) c.debug_delay_s = atof(e) * 1e-3;
    if ((e = getenv("ZS_SHM_CHUNK"))) {
        uint64_t v = 0;
        if (zs_parse_bytes(e, &v) == ZS_OK) c.chunk_bytes = (size_t)v;
    }
    return c;
}

zs_status zs_comm_backend_parse(const char *name, zs_comm_backend *out) {
    static const char *names[] = {"auto", "shm", "mpi", "nccl", "gloo"};
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, names[i])) {
            *out = (zs_comm_backend)i;
            return ZS_OK;
        }
    return zs_error(ZS_ERR_INVALID,
                    "unknown comm backend '%s' (expected auto, shm, mpi, nccl or gloo)",
                    name ? name : "(null)");
}

const char *zs_comm_backend_name(zs_comm_backend b) {
    switch (b) {
    case ZS_COMM_AUTO:
        return "auto";
    case ZS_COMM_SHM:
        return "shm";
    case ZS_COMM_MPI:
        return "mpi";
    case ZS_COMM_NCCL:
        return "nccl";
    case ZS_COMM_GLOO:
        return "gloo";
    }
    return "unknown";
}

int zs_comm_backend_available(zs_comm_backend b) {
    switch (b) {
    case ZS_COMM_AUTO:
    case ZS_COMM_SHM:
        return 1;
    case ZS_COMM_MPI:
        return zs_comm_mpi_ops() != NULL;
    case ZS_COMM_NCCL:
        return zs_comm_nccl_ops() != NULL && zs_comm_nccl_device_count() > 0;
    case ZS_COMM_GLOO:
        return zs_comm_gloo_ops() != NULL;
    }
    return 0;
}

/* The one "auto" policy. GPU buffers: nccl when every rank of this host has a GPU of its own
 * and NCCL is built, else (one host) shm through pinned staging. Ranks on one host: shm.
 * Ranks that span hosts: mpi when mpirun started them (it knows the job), else gloo through the
 * rendezvous address (under srun, derived from the node list when unset), else mpi as the last
 * resort. Fills why for the banner. */
zs_status zs_comm_resolve_backend(zs_comm_backend want, const char *want_why, int gpu,
                                  const zs_comm_env *env, zs_comm_backend *out, char *why,
                                  size_t cap) {
    zs_status st = ZS_OK;
    const char *e = getenv("ZS_COMM");
    int by_mpi = !strcmp(env->source, "mpirun");
    if (want != ZS_COMM_AUTO && want_why)
        snprintf(why, cap, "%s", want_why); /* the caller's own choice, e.g. the trainer's */
    else if (want != ZS_COMM_AUTO)
        snprintf(why, cap, "--comm %s", zs_comm_backend_name(want));
    if (want == ZS_COMM_AUTO && e && *e) {
        ZS_CHECK(zs_comm_backend_parse(e, &want));
        snprintf(why, cap, "ZS_COMM=%.32s", e);
    }
    if (want == ZS_COMM_AUTO && gpu) {
        int ndev = zs_comm_nccl_ops() ? zs_comm_nccl_device_count() : 0;
        if (ndev > 0 && env->local_world_size <= ndev) {
            want = ZS_COMM_NCCL;
            snprintf(why, cap, "auto: each of %d local rank%s has its own GPU",
                     env->local_world_size, env->local_world_size == 1 ? "" : "s");
        } else if (env->local_world_size == env->world_size) {
            want = ZS_COMM_SHM;
            snprintf(why, cap, "auto: %d ranks share %s GPU%s, through pinned host staging%s",
                     env->local_world_size, ndev > 0 ? "the" : "this host's",
                     ndev == 1 ? "" : "s", zs_comm_nccl_ops() ? "" : " (this build has no NCCL)");
        }
    }
    if (want == ZS_COMM_AUTO) {
        if (env->local_world_size == env->world_size) {
            want = ZS_COMM_SHM;
            snprintf(why, cap, "auto: all %d ranks on this host", env->world_size);
        } else if (by_mpi && zs_comm_mpi_ops()) {
            want = ZS_COMM_MPI;
            snprintf(why, cap, "auto: %d ranks on several hosts (%d here), started by %s",
                     env->world_size, env->local_world_size, env->source);
        } else if (zs_comm_gloo_ops() && env->master_port > 0) {
            want = ZS_COMM_GLOO;
            snprintf(why, cap, "auto: %d ranks on several hosts (%d here), met at %.64s:%d",
                     env->world_size, env->local_world_size, env->master_addr, env->master_port);
        } else if (zs_comm_mpi_ops()) {
            want = ZS_COMM_MPI;
            snprintf(why, cap, "auto: %d ranks on several hosts (%d here), no MASTER_PORT%s",
                     env->world_size, env->local_world_size,
                     zs_comm_gloo_ops() ? "" : " and no gloo in this build");
        } else {
            ZS_REQUIRE(0, ZS_ERR_UNSUPPORTED,
                       "the %d ranks span several hosts (%d local): that needs the gloo backend "
                       "(configure with -DZS_GLOO=ON, libgloo-dev) or the mpi backend, and this "
                       "build has neither",
                       env->world_size, env->local_world_size);
        }
    }
    ZS_REQUIRE(want != ZS_COMM_MPI || zs_comm_mpi_ops(), ZS_ERR_UNSUPPORTED,
               "comm backend mpi: this build has no MPI (configure with -DZS_MPI=ON)");
    ZS_REQUIRE(want != ZS_COMM_NCCL || zs_comm_nccl_ops(), ZS_ERR_UNSUPPORTED,
               "comm backend nccl: this build has no NCCL (configure with -DZS_NCCL=ON)");
    ZS_REQUIRE(want != ZS_COMM_GLOO || zs_comm_gloo_ops(), ZS_ERR_UNSUPPORTED,
               "comm backend gloo: this build has no libgloo (install libgloo-dev and configure "
               "with -DZS_GLOO=ON)");
    ZS_REQUIRE(want != ZS_COMM_SHM || env->local_world_size == env->world_size, ZS_ERR_UNSUPPORTED,
               "comm backend shm needs all ranks on one host, but only %d of %d are local",
               env->local_world_size, env->world_size);
    *out = want;
fail:
    return st;
}

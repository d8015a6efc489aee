/* Registered communication buffers (zs_comm_mem_alloc): memory that every rank of the job
 * can read in place, so shm collectives on it skip the staging copy (shm_reg.c,
 * shm_direct.c). Backends without registration (mpi, nccl) and a world of one get plain
 * zs_alloc memory, and a communicator on a device (comm/device.h) that device's memory, so
 * callers allocate the same way whatever the backend. */
#include "comm/comm_internal.h"
#include "core/alloc.h"
#include "core/status.h"

#include <string.h>

static int registers(const zs_comm_t *c) {
    return c->ops->mem_free && c->env.world_size > 1 && !c->staging &&
           (!c->dev || c->dev->host_memory);
}

zs_status zs_comm_mem_alloc(zs_comm_t *c, zs_mem_category cat, size_t nbytes, const char *what,
                            void **ptr) {
    zs_status st = ZS_OK;
    zs_mem_request req;
    zs_coll co;
    ZS_REQUIRE(ptr, ZS_ERR_INVALID, "zs_comm_mem_alloc: ptr is NULL");
    *ptr = NULL;
    ZS_REQUIRE(c, ZS_ERR_INVALID, "zs_comm_mem_alloc: communicator is NULL");
    ZS_REQUIRE((unsigned)cat < ZS_MEM_NCAT, ZS_ERR_INVALID,
               "zs_comm_mem_alloc: bad memory category %d", (int)cat);
    if (!what) what = "comm buffer";
    if (c->dev && !registers(c)) return c->dev->alloc(cat, nbytes, what, ptr);
    if (!registers(c)) return zs_alloc(cat, nbytes, what, ptr);
    ZS_REQUIRE(nbytes <= SIZE_MAX / 2, ZS_ERR_OOM, "zs_comm_mem_alloc '%s': %zu bytes is too large",
               what, nbytes);
    ZS_CHECK(zs_comm_check_failed(c));
    memset(&req, 0, sizeof req);
    req.cat = cat;
    req.nbytes = nbytes;
    memset(&co, 0, sizeof co);
    co.kind = ZS_COLL_MEM_ALLOC;
    co.count = nbytes;
    co.ext = &req;
    snprintf(co.tag, sizeof co.tag, "%s", what);
    /* In issue order with the collectives: their buffers' registration is then the same on
     * every rank whichever thread runs them. */
    ZS_CHECK(zs_queue_submit(c, &co, NULL));
    ZS_REQUIRE(req.st == ZS_OK, req.st, "%s", req.msg);
    *ptr = req.ptr;
fail:
    return st;
}

void zs_comm_mem_free(zs_comm_t *c, void *ptr) {
    if (!ptr) return;
    if (c && c->dev && !registers(c)) {
        zs_queue_drain(c->queue);
        c->dev->free(ptr); /* waits for the device, hence for work on the comm stream */
        return;
    }
    if (c && registers(c)) {
        /* Work issued earlier may still read through this rank's mappings of the peers'
         * buffers of this allocation. */
        zs_queue_drain(c->queue);
        if (c->ops->mem_free(c, ptr)) return;
    }
    zs_free(ptr);
}

/* comm_worker's split modes (comm_worker_split.c): zs_comm_split's two groups of an HSDP mesh,
 * checked in comm_worker's rank program. */
#ifndef ZS_COMM_WORKER_SPLIT_H
#define ZS_COMM_WORKER_SPLIT_H

#include "backend/device.h"
#include "zshard.h"

/* mode "split" or "split-die"; S ranks a shard group; b the groups' backend (AUTO: the
 * split's own choice); dev (NULL: host buffers) the device whose buffers the groups take.
 * Returns 0 when every check passed. */
int cw_run_split(zs_comm_t *c, const char *mode, int S, int victim, zs_comm_backend b,
                 const zs_device *dev);

#endif

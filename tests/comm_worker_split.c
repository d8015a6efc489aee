/* comm_worker's split modes (zs_comm_split), the two splits of an HSDP mesh over a job of n
 * ranks in groups of S:
 *   comm_worker split --group S [--split-comm B]   the shard group (color rank / S, key rank)
 *                                                  and the replica group (color rank % S, key
 *                                                  n - 1 - rank: reversed), checked against
 *                                                  sums computed here in each group's rank
 *                                                  order, bit for bit on inexact floats
 *   comm_worker split-die --group S --victim V     V dies while the groups alternate
 *                                                  all_reduces; every survivor must fail
 * B forces the groups' backend (default: auto). With --device, the groups take that device's
 * buffers (nccl, or shm through host staging): each collective copies in, runs, copies out. */
#include "comm_worker_split.h"
#include "comm/device.h"
#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum { LEN = 1020 }; /* divisible by 1 to 6 */

static const zs_device *g_sdev; /* --device: collectives on device copies */

typedef enum { C_AR, C_AG, C_RS } ckind;

/* One collective of kind k on host arrays (through device copies under --device), waited. */
static void coll(zs_comm_t *g, ckind k, const float *send, size_t scount, float *recv,
                 size_t rcount, const char *tag) {
    const void *s = send;
    void *r = recv, *ds = NULL, *dr = NULL;
    zs_comm_work_t *w = NULL;
    if (g_sdev) {
        ZT_OK(g_sdev->alloc(ZS_MEM_COMM, scount * 4, "split.send", &ds));
        ZT_OK(g_sdev->alloc(ZS_MEM_COMM, rcount * 4, "split.recv", &dr));
        ZT_OK(g_sdev->copy_h2d(NULL, ds, send, scount * 4));
        ZT_OK(g_sdev->stream_sync(NULL));
        s = ds;
        r = dr;
    }
    if (k == C_AR)
        ZT_OK(
            zs_comm_all_reduce_async(g, s, r, rcount, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, tag, &w));
    else if (k == C_AG)
        ZT_OK(zs_comm_all_gather_async(g, s, r, scount, ZS_DTYPE_F32, NULL, tag, &w));
    else
        ZT_OK(zs_comm_reduce_scatter_async(g, s, r, rcount, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, tag,
                                           &w));
    ZT_OK(zs_comm_work_wait(w));
    if (g_sdev) {
        ZT_OK(g_sdev->copy_d2h(NULL, recv, dr, rcount * 4));
        ZT_OK(g_sdev->stream_sync(NULL));
        g_sdev->free(ds);
        g_sdev->free(dr);
    }
}

/* Inexact values: a sum's bits depend on its order; under nccl (whose ring order is its own
 * on a real GPU) small integers, exact in any order. */
static int g_exact;
static float sval(int rank, int i) {
    if (g_exact) return (float)((rank * 7 + i) % 13 - 6);
    return (float)(rank + 1) * 0.1f + (float)i * 1e-3f + 1.0f / (float)(3 + rank * 7 + i % 13);
}

/* The sum over the members (parent ranks, in the group's rank order) of values v[member]. */
static float ordered(const int *members, int m, int i) {
    float s = sval(members[0], i);
    for (int k = 1; k < m; k++)
        s += sval(members[k], i);
    return s;
}

static int same(float a, float b) {
    return memcmp(&a, &b, 4) == 0;
}

static int split_pair(zs_comm_t *c, int S, zs_comm_backend b, zs_comm_t **shard, zs_comm_t **repl) {
    int n = zs_comm_world_size(c), r = zs_comm_rank(c);
    zs_comm_config cfg = zs_comm_config_default();
    cfg.backend = b;
    ZT_REQUIRE(S > 0 && n % S == 0, "--group %d does not divide the world of %d", S, n);
    ZT_OK(zs_comm_split(c, r / S, r, b == ZS_COMM_AUTO ? NULL : &cfg, shard));
    ZT_OK(zs_comm_split(c, r % S, n - 1 - r, b == ZS_COMM_AUTO ? NULL : &cfg, repl));
    g_exact = zs_comm_get_backend(*shard) == ZS_COMM_NCCL;
    if (g_sdev) {
        ZT_OK(zs_comm_set_device(*shard, g_sdev, !g_sdev->host_memory, 1000));
        ZT_OK(zs_comm_set_device(*repl, g_sdev, !g_sdev->host_memory, 1000));
    }
    printf("rank %d: shard group %s (%s), replica group %s (%s)\n", r,
           zs_comm_backend_name(zs_comm_get_backend(*shard)), zs_comm_backend_reason(*shard),
           zs_comm_backend_name(zs_comm_get_backend(*repl)), zs_comm_backend_reason(*repl));
    return 0;
}

static int check_groups(zs_comm_t *c, int S, zs_comm_t *shard, zs_comm_t *repl) {
    int n = zs_comm_world_size(c), r = zs_comm_rank(c), R = n / S;
    int sm[64], rm[64]; /* members in group rank order */
    ZT_REQUIRE(n <= 64, "at most 64 ranks");
    for (int k = 0; k < S; k++)
        sm[k] = (r / S) * S + k;
    for (int k = 0; k < R; k++)
        rm[k] = (R - 1 - k) * S + r % S; /* reversed keys */
    ZT_CHECK(zs_comm_world_size(shard) == S && zs_comm_rank(shard) == r % S,
             "shard group: rank %d of %d, want %d of %d", zs_comm_rank(shard),
             zs_comm_world_size(shard), r % S, S);
    ZT_CHECK(zs_comm_world_size(repl) == R && zs_comm_rank(repl) == R - 1 - r / S,
             "replica group: rank %d of %d, want %d of %d", zs_comm_rank(repl),
             zs_comm_world_size(repl), R - 1 - r / S, R);
    /* y holds R gathered blocks, or a shard and its all_reduce beside it */
    float *x = malloc(sizeof(float) * LEN), *y = malloc(sizeof(float) * LEN * (size_t)(R + 1));
    ZT_REQUIRE(x && y, "out of memory");
    int bad = 0;

    /* all_reduce in each group: the members' values summed in the group's rank order */
    for (int i = 0; i < LEN; i++)
        x[i] = sval(r, i);
    coll(shard, C_AR, x, LEN, y, LEN, "shard.ar");
    for (int i = 0; i < LEN; i++)
        bad += !same(y[i], ordered(sm, S, i));
    coll(repl, C_AR, x, LEN, y, LEN, "repl.ar");
    for (int i = 0; i < LEN; i++)
        bad += !same(y[i], ordered(rm, R, i));
    ZT_CHECK(bad == 0, "%d group all_reduce elements differ from the group-ordered sums", bad);

    /* all_gather across the replicas: block k is the value of the group's rank k */
    coll(repl, C_AG, x, LEN, y, LEN * (size_t)R, "repl.ag");
    bad = 0;
    for (int k = 0; k < R; k++)
        for (int i = 0; i < LEN; i++)
            bad += !same(y[(size_t)k * LEN + i], sval(rm[k], i));
    ZT_CHECK(bad == 0, "%d replica all_gather elements out of place", bad);

    /* HSDP's gradient: reduce_scatter within the shard group, then all_reduce of the shard
     * across the replicas. Element i of shard s sums, in the replica group's order, each
     * replica's in-group sum (in the shard group's order). */
    ZT_REQUIRE(LEN % S == 0, "LEN %d not divisible by %d", LEN, S);
    size_t per = LEN / (size_t)S;
    for (int i = 0; i < LEN; i++)
        x[i] = sval(r, i);
    coll(shard, C_RS, x, LEN, y, per, "grad.rs");
    coll(repl, C_AR, y, per, y + per, per, "grad.ar");
    bad = 0;
    for (size_t j = 0; j < per; j++) {
        int i = (int)((size_t)(r % S) * per + j);
        float want = 0;
        for (int k = 0; k < R; k++) {
            int members[64];
            for (int q = 0; q < S; q++)
                members[q] = (rm[k] / S) * S + q;
            float part = ordered(members, S, i);
            want = k ? want + part : part;
        }
        bad += !same(y[per + j], want);
    }
    ZT_CHECK(bad == 0, "%d HSDP gradient elements differ from the mesh's summation order", bad);
    /* the parent still works beside its groups */
    coll(c, C_AR, x, LEN, y, LEN, "parent");
    free(x);
    free(y);
    return 0;
}

static int die_loop(zs_comm_t *shard, zs_comm_t *repl, int rank, int victim) {
    float x[256];
    for (int it = 0; it < 100000; it++) {
        for (int i = 0; i < 256; i++)
            x[i] = (float)rank;
        if (rank == victim && it == 20) raise(SIGKILL);
        zs_comm_t *g = it % 2 ? repl : shard;
        zs_status st = zs_comm_all_reduce(g, x, x, 256, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL,
                                          it % 2 ? "repl" : "shard");
        if (st != ZS_OK) {
            printf("rank %d: FAILED %s: %s\n", rank, zs_status_string(st), zs_last_error());
            fflush(stdout);
            return 3;
        }
    }
    return 0;
}

int cw_run_split(zs_comm_t *c, const char *mode, int S, int victim, zs_comm_backend b,
                 const zs_device *dev) {
    zs_comm_t *shard = NULL, *repl = NULL;
    g_sdev = dev;
    int rc = split_pair(c, S, b, &shard, &repl);
    if (!rc && !strcmp(mode, "split")) rc = check_groups(c, S, shard, repl);
    if (!rc && !strcmp(mode, "split-die")) rc = die_loop(shard, repl, zs_comm_rank(c), victim);
    zs_comm_destroy(shard);
    zs_comm_destroy(repl);
    return rc;
}

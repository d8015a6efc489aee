/* `zshard bench comm`: time per op and bus bandwidth of all_reduce, reduce_scatter and
 * all_gather for every comm backend this job can use, message sizes 4 KiB .. 256 MiB, next
 * to the memcpy bandwidth measured in the same run (the ceiling for shm). Sizes and bus
 * bandwidth follow nccl-tests: size is the larger buffer (count*N for reduce_scatter's send
 * and all_gather's recv), algbw = size / time, busbw = algbw * 2(n-1)/n for all_reduce and
 * algbw * (n-1)/n for reduce_scatter and all_gather. Buffers come from zs_comm_mem_alloc
 * (registered: shm reads peers' buffers in place); "shm-staged" rows repeat shm on plain
 * buffers (the staged path). Run it under `zshard run -n N` or `mpirun -np N`; rank 0 prints.
 * gloo rows need MASTER_ADDR/PORT (zshard run, torchrun); across hosts, --ceiling link=GBPS
 * sets the column's reference to a link rate measured beside it (bench/multihost.sh). */
#include "bench/bench.h"
#include "args/flags.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "zshard.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_opts {
    uint64_t min_bytes, max_bytes;
    int json;
    int no_staged;    /* leave out the shm-staged rows */
    int iters;        /* 0 = by size */
    const char *comm; /* comma list or NULL = every available */
    double timeout_s;
    char ceil_name[32]; /* the last column's reference: memcpy, or --ceiling NAME=GBPS */
    double ceil_gbps;   /* < 0: the memcpy rate measured here */
    const char *config_path; /* --config */
} bench_opts;

enum { OP_AR = 0, OP_RS, OP_AG, NOPS };
static const char *g_op_names[NOPS] = {"all_reduce", "reduce_scatter", "all_gather"};

/* --ceiling NAME=GBPS: the last column's reference. */
static int parse_ceiling(void *opts, const char *v, const char *what) {
    bench_opts *o = opts;
    const char *eq = strchr(v, '=');
    char *end = NULL;
    double g = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || eq == v || eq - v >= (long)sizeof o->ceil_name || !end || *end || g <= 0)
        return zs_flag_fail(2, "bench comm: %s wants NAME=GBPS (e.g. link=1.17), not '%s'", what,
                            v);
    snprintf(o->ceil_name, sizeof o->ceil_name, "%.*s", (int)(eq - v), v);
    o->ceil_gbps = g;
    return 0;
}

#define BO(field) offsetof(bench_opts, field)
static const zs_flag COMM_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(BO(config_path)),
    {.name = "max-size", .kind = ZS_FLAG_BYTES, .off = BO(max_bytes), .arg = "SIZE",
     .help = "largest message [256M]"},
    {.name = "min-size", .kind = ZS_FLAG_BYTES, .off = BO(min_bytes), .arg = "SIZE",
     .help = "smallest message, then x4 up to --max-size [4K]"},
    {.name = "iters", .kind = ZS_FLAG_INT, .off = BO(iters), .lo = 0, .hi = 1 << 20, .arg = "N",
     .help = "iterations per size, 0 = by size (3..50) [0]"},
    {.name = "comm", .kind = ZS_FLAG_STR, .off = BO(comm), .arg = "LIST",
     .help = "backends, e.g. shm,gloo,mpi [every usable one]"},
    {.name = "comm-timeout", .kind = ZS_FLAG_DOUBLE, .off = BO(timeout_s), .lo = 1, .hi = 0,
     .arg = "S", .help = "seconds before a stuck collective fails [300]"},
    {.name = "json", .kind = ZS_FLAG_SWITCH, .off = BO(json), .help = "JSON instead of a table"},
    {.name = "no-staged", .kind = ZS_FLAG_SWITCH, .off = BO(no_staged),
     .help = "leave out the shm-staged rows"},
    {.name = "ceiling", .kind = ZS_FLAG_CUSTOM, .arg = "NAME=GBPS", .parse = parse_ceiling,
     .help = "the last column's reference, e.g. link=1.17 [memcpy]"},
};

static const zs_flag_table COMM_TABLE = {
    .cmd = "bench comm",
    .rows = COMM_FLAGS,
    .count = sizeof COMM_FLAGS / sizeof COMM_FLAGS[0],
    .usage = "usage: zshard bench comm [options]\n"
             "Run under `zshard run -n N --` or `mpirun -np N`; rank 0 prints the table.\n"
             "shm rows use registered buffers (zs_comm_mem_alloc); shm-staged rows plain\n"
             "ones (the staged path), unless --no-staged. The last column is busbw as a\n"
             "share of the memcpy rate measured first, or of --ceiling's rate.\n",
};

/* Defaults, then the command line. Returns 0, 1 after --help, or the error's status. */
static int parse(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->min_bytes = 4096;
    o->max_bytes = 256ull << 20;
    o->timeout_s = 300;
    snprintf(o->ceil_name, sizeof o->ceil_name, "memcpy");
    o->ceil_gbps = -1;
    int rc = zs_flag_parse(&COMM_TABLE, argc, argv, 1, o, NULL);
    if (rc) return rc < 0 ? 1 : rc;
    if (o->min_bytes == 0) return zs_flag_fail(2, "bench comm: --min-size must be positive");
    return 0;
}

/* Single-thread memcpy rate of nbytes, best of several, in GB/s (bytes copied per second). */
static double memcpy_gbps(size_t nbytes) {
    char *a = NULL, *b = NULL;
    double best = 0;
    if (zs_alloc(ZS_MEM_WORKSPACE, nbytes, "bench memcpy", (void **)&a) != ZS_OK ||
        zs_alloc(ZS_MEM_WORKSPACE, nbytes, "bench memcpy", (void **)&b) != ZS_OK)
        goto done;
    memset(a, 1, nbytes);
    for (int i = 0; i < 5; i++) {
        double t = zs_now_s();
        memcpy(b, a, nbytes);
        t = zs_now_s() - t;
        if (t > 0 && nbytes / t / 1e9 > best) best = (double)nbytes / t / 1e9;
        a[i] = b[nbytes - 1 - (size_t)i]; /* keep the copy observable */
    }
done:
    zs_free(a);
    zs_free(b);
    return best;
}

static zs_status run_op(zs_comm_t *c, int op, void *send, void *recv, size_t bytes) {
    size_t n = (size_t)zs_comm_world_size(c), count = bytes / sizeof(float);
    switch (op) {
    case OP_AR:
        return zs_comm_all_reduce(c, send, recv, count, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL, "bench");
    case OP_RS:
        return zs_comm_reduce_scatter(c, send, recv, count / n, ZS_DTYPE_F32, ZS_REDUCE_SUM, NULL,
                                      "bench");
    default:
        return zs_comm_all_gather(c, send, recv, count / n, ZS_DTYPE_F32, NULL, "bench");
    }
}

static int wanted(const bench_opts *o, const char *name) {
    if (!o->comm) return 1;
    const char *p = strstr(o->comm, name);
    size_t l = strlen(name);
    return p && (p == o->comm || p[-1] == ',') && (p[l] == '\0' || p[l] == ',');
}

/* The job's world size as its launcher gave it: zshard run, torchrun and srun (WORLD_SIZE),
 * Open MPI (OMPI_COMM_WORLD_SIZE) or MPICH/Hydra (PMI_SIZE); 1 without a launcher. */
static int env_world(void) {
    const char *names[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

/* Whether this job can start backend b; if not, why (the same on every rank: from the build
 * and the environment only). mpi only when MPI launched it (or a world of one), gloo only with
 * a rendezvous address (or a world of one). */
static int usable(zs_comm_backend b, char *why, size_t cap) {
    int world = env_world();
    if (!zs_comm_backend_available(b)) {
        snprintf(why, cap, "not in this build");
        return 0;
    }
    if (b == ZS_COMM_GLOO) {
        const char *mp = getenv("MASTER_PORT"), *ma = getenv("MASTER_ADDR");
        if (world <= 1 || (mp && atoi(mp) > 0 && ma && *ma)) return 1;
        snprintf(why, cap,
                 "%d ranks need MASTER_ADDR and MASTER_PORT to meet (zshard run, torchrun and "
                 "srun set them)",
                 world);
        return 0;
    }
    if (b == ZS_COMM_MPI) {
        if (world <= 1 || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) return 1;
        snprintf(why, cap, "this job was not started by mpirun");
        return 0;
    }
    if (b == ZS_COMM_NCCL) {
        snprintf(why, cap, "needs device buffers: bench it with nccl-tests");
        return 0;
    }
    return 1;
}

/* Buffers for one pass: registered (zs_comm_mem_alloc; plain memory on mpi) or plain
 * (zs_alloc, so shm takes its staged path). Filled and first-touched here. */
static zs_status bench_buffers(zs_comm_t *c, int registered, size_t nbytes, char **send,
                               char **recv) {
    zs_status st = ZS_OK;
    *send = *recv = NULL;
    if (registered) {
        st = zs_comm_mem_alloc(c, ZS_MEM_COMM, nbytes, "bench send", (void **)send);
        if (st == ZS_OK)
            st = zs_comm_mem_alloc(c, ZS_MEM_COMM, nbytes, "bench recv", (void **)recv);
    } else {
        st = zs_alloc(ZS_MEM_COMM, nbytes, "bench send", (void **)send);
        if (st == ZS_OK) st = zs_alloc(ZS_MEM_COMM, nbytes, "bench recv", (void **)recv);
    }
    if (st == ZS_OK)
        for (size_t i = 0; i < nbytes / sizeof(float); i++)
            ((float *)*send)[i] = (float)(i & 7);
    return st;
}

static void free_buffers(zs_comm_t *c, int registered, char *send, char *recv) {
    if (registered) {
        zs_comm_mem_free(c, send);
        zs_comm_mem_free(c, recv);
    } else {
        zs_free(send);
        zs_free(recv);
    }
}

/* Time every op and size on buffers send/recv; rank 0 prints rows labelled `label`. */
static int bench_pass(zs_comm_t *c, const bench_opts *o, const char *label, char *send, char *recv,
                      double mc, int *first_row) {
    int rank = zs_comm_rank(c), n = zs_comm_world_size(c);
    for (int op = 0; op < NOPS; op++) {
        for (uint64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 4) {
            size_t per = (size_t)n * sizeof(float);
            size_t sz = (size_t)bytes / per * per; /* divisible by the world, as nccl-tests */
            if (sz == 0) continue;
            int iters = o->iters > 0 ? o->iters : (int)((64u << 20) / sz);
            iters = iters < 3 ? 3 : iters > 50 ? 50 : iters;
            zs_status st = run_op(c, op, send, recv, sz); /* warm-up */
            if (st == ZS_OK) st = zs_comm_barrier(c, NULL, "bench");
            double t0 = zs_now_s();
            for (int it = 0; it < iters && st == ZS_OK; it++)
                st = run_op(c, op, send, recv, sz);
            if (st == ZS_OK) st = zs_comm_barrier(c, NULL, "bench");
            double ms = (zs_now_s() - t0) * 1e3 / iters;
            if (st != ZS_OK) return zs_flag_fail(1, "bench comm: %s", zs_last_error());
            double alg = (double)sz / (ms * 1e-3) / 1e9;
            double factor = op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
            double bus = n > 1 ? alg * factor : alg;
            if (rank != 0) continue;
            if (o->json)
                printf("%s\n  {\"backend\": \"%s\", \"op\": \"%s\", \"bytes\": %zu, \"ranks\": "
                       "%d, \"ms\": %.4f, \"busbw_gbps\": %.3f}",
                       *first_row ? "" : ",", label, g_op_names[op], sz, n, ms, bus);
            else
                printf("%-10s %-15s %12zu %10.4f %10.3f %10.3f %8.1f%%\n", label, g_op_names[op],
                       sz, ms, alg, bus, mc > 0 ? 100.0 * bus / mc : 0.0);
            *first_row = 0;
            fflush(stdout);
        }
    }
    return 0;
}

int zs_bench_comm(int argc, char **argv) {
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    zs_comm_backend list[] = {ZS_COMM_SHM, ZS_COMM_GLOO, ZS_COMM_MPI, ZS_COMM_NCCL};
    enum { NB = 4 };
    int code = 0, first_row = 1, is_rank0 = 0, ran = 0, nskip = 0;
    char skipped[NB][200];
    const char *skipped_name[NB];
    size_t maxb = (size_t)o.max_bytes;
    double mc = -1;
    for (int bi = 0; bi < NB && code == 0; bi++) {
        zs_comm_backend b = list[bi];
        if (!wanted(&o, zs_comm_backend_name(b))) continue;
        if (!usable(b, skipped[nskip], sizeof skipped[nskip])) {
            skipped_name[nskip++] = zs_comm_backend_name(b);
            continue;
        }
        zs_comm_config cfg = zs_comm_config_default();
        cfg.backend = b;
        cfg.timeout_s = o.timeout_s;
        zs_comm_t *c = NULL;
        if (zs_comm_create(&cfg, &c) != ZS_OK) {
            /* the error names the backend already */
            code = zs_flag_fail(1, "bench comm: %s", zs_last_error());
            break;
        }
        int rank = zs_comm_rank(c), n = zs_comm_world_size(c);
        is_rank0 = rank == 0;
        if (!ran) { /* every rank: the barrier below is collective */
            /* Measured alone: the other ranks wait in the barrier, off the cores. */
            if (rank == 0) mc = memcpy_gbps(64u << 20); /* DRAM, not cache */
            zs_comm_barrier(c, NULL, "memcpy");
            char col[40];
            snprintf(col, sizeof col, "%%%s", o.ceil_name);
            if (rank == 0 && o.json) {
                printf("{\"memcpy_gbps\": %.3f, ", mc);
                if (o.ceil_gbps > 0) /* --ceiling NAME=GBPS: the column's reference */
                    printf("\"ceiling\": {\"name\": \"%s\", \"gbps\": %.3f}, ", o.ceil_name,
                           o.ceil_gbps);
                printf("\"ranks\": %d, \"results\": [", n);
            }
            else if (rank == 0) {
                printf("memcpy (1 thread): %.2f GB/s   ", mc);
                if (o.ceil_gbps > 0)
                    printf("%s (--ceiling): %.3f GB/s   ", o.ceil_name, o.ceil_gbps);
                printf("ranks: %d\n\n%-10s %-15s %12s %10s %10s %10s %9s\n", n, "comm", "op",
                       "bytes", "ms", "algbw", "busbw", col);
            }
            if (o.ceil_gbps > 0) mc = o.ceil_gbps;
            ran = 1;
        }
        /* shm: registered buffers (the direct path), then plain ones (the staged path) as
         * "shm-staged"; mpi has no registration, one pass. */
        int passes = b == ZS_COMM_SHM && n > 1 && !o.no_staged ? 2 : 1;
        for (int pass = 0; pass < passes && code == 0; pass++) {
            char *send = NULL, *recv = NULL, label[32];
            snprintf(label, sizeof label, "%s%s", zs_comm_backend_name(b), pass ? "-staged" : "");
            if (bench_buffers(c, pass == 0, maxb, &send, &recv) != ZS_OK)
                code = zs_flag_fail(1, "bench comm: %s", zs_last_error());
            else
                code = bench_pass(c, &o, label, send, recv, mc, &first_row);
            free_buffers(c, pass == 0, send, recv);
        }
        zs_comm_destroy(c);
    }
    if (!ran && code == 0) {
        char all[NB * 220] = "";
        for (int k = 0; k < nskip; k++)
            snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s (%s)", k ? "; " : "",
                     skipped_name[k], skipped[k]);
        code = zs_flag_fail(1, "bench comm: no usable comm backend%s%s", nskip ? ": " : "", all);
    }
    if (ran && is_rank0 && code == 0) { /* what was left out, and why */
        if (o.json) {
            printf("\n], \"skipped\": [");
            for (int k = 0; k < nskip; k++)
                printf("%s{\"backend\": \"%s\", \"reason\": \"%s\"}", k ? ", " : "",
                       skipped_name[k], skipped[k]);
            printf("]}\n");
        } else
            for (int k = 0; k < nskip; k++)
                printf("%s%s: skipped, %s\n", k ? "" : "\n", skipped_name[k], skipped[k]);
    }
    return code;
}

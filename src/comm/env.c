/* Reads rank, world size, local rank and master address from torchrun's, srun's or
 * mpirun's variables (first match wins, in that order), so zshard programs start under
 * any of them without extra flags. */
#include "comm/env.h"
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* -1 when unset; ZS_ERR_INVALID (recorded) when set but not a non-negative integer. */
static zs_status env_int(const char *name, int *out) {
    const char *v = getenv(name);
    *out = -1;
    if (!v || !*v) return ZS_OK;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > 1 << 24)
        return zs_error(ZS_ERR_INVALID, "environment variable %s='%s' is not a valid count", name,
                        v);
    *out = (int)x;
    return ZS_OK;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

/* Job key for a job without a master address: something every local rank of this job sees
 * identically and no other job does. */
static void job_key_from_env(zs_comm_env *e) {
    const char *ns = getenv("PMIX_NAMESPACE");
    const char *ompi = getenv("OMPI_MCA_ess_base_jobid");
    const char *slurm = getenv("SLURM_JOB_ID");
    const char *zs = getenv("ZS_JOB_ID");
    char raw[128];
    if (zs && *zs)
        snprintf(raw, sizeof raw, "job%s", zs);
    else if (ns && *ns)
        snprintf(raw, sizeof raw, "pmix%s", ns);
    else if (ompi && *ompi)
        snprintf(raw, sizeof raw, "ompi%s", ompi);
    else if (slurm && *slurm) {
        const char *step = getenv("SLURM_STEP_ID");
        snprintf(raw, sizeof raw, "slurm%s.%s", slurm, step ? step : "0");
    } else {
        /* Local ranks of mpiexec/hydra are children of one process. */
        snprintf(raw, sizeof raw, "ppid%ld", (long)getppid());
    }
    /* Keep only characters that are safe in a shm name. */
    size_t j = 0;
    for (size_t i = 0; raw[i] && j + 1 < sizeof e->job_key; i++) {
        char ch = raw[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        e->job_key[j++] = ok ? ch : '_';
    }
    e->job_key[j] = '\0';
}

/* The identity every rank presents to the rendezvous store, so that a rank of another job
 * on the same port is refused: ZS_JOB_ID, else the launcher's job (srun's job and step,
 * torchrun's run id), else the master's address and port; the world size goes with it. The
 * ranks of one job compute the same string; its source is part of it, for the messages. */
static void job_id_from_env(zs_comm_env *e) {
    const char *zs = getenv("ZS_JOB_ID"), *slurm = getenv("SLURM_JOB_ID");
    const char *te = getenv("TORCHELASTIC_RUN_ID");
    if (zs && *zs)
        snprintf(e->job_id, sizeof e->job_id, "ZS_JOB_ID=%.180s", zs);
    else if (slurm && *slurm)
        snprintf(e->job_id, sizeof e->job_id, "SLURM_JOB_ID=%.80s.%.80s", slurm,
                 getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "0");
    else if (te && *te && strcmp(te, "none")) /* torchrun's default run id is "none" */
        snprintf(e->job_id, sizeof e->job_id, "TORCHELASTIC_RUN_ID=%.160s", te);
    else
        snprintf(e->job_id, sizeof e->job_id, "MASTER_ADDR:PORT=%.150s:%d", e->master_addr,
                 e->master_port);
    e->job_named = (zs && *zs) || (slurm && *slurm) || (te && *te && strcmp(te, "none"));
    for (char *p = e->job_id; *p; p++) /* the wire takes text */
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

/* The job's shared secret: ZS_JOB_SECRET, or the first line of the file ZS_JOB_SECRET_FILE
 * names, which only its owner may read or write. */
static zs_status secret_from_env(zs_comm_env *e) {
    const char *v = getenv("ZS_JOB_SECRET"), *path = getenv("ZS_JOB_SECRET_FILE");
    char buf[sizeof e->secret + 2];
    size_t n = 0;
    if (v && *v && path && *path)
        return zs_error(ZS_ERR_INVALID, "both ZS_JOB_SECRET and ZS_JOB_SECRET_FILE are set: "
                                        "give the job's secret one way");
    if (v && *v) {
        n = strlen(v);
        if (n > sizeof e->secret)
            return zs_error(ZS_ERR_INVALID, "ZS_JOB_SECRET is %zu bytes; at most %zu", n,
                            sizeof e->secret);
        memcpy(e->secret, v, n);
    } else if (path && *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            zs_status st = zs_error(ZS_ERR_IO, "ZS_JOB_SECRET_FILE '%s': %s", path,
                                    strerror(errno));
            if (fd >= 0) close(fd);
            return st;
        }
        if (!S_ISREG(sb.st_mode) || (sb.st_mode & 077) || sb.st_uid != geteuid()) {
            close(fd);
            return zs_error(ZS_ERR_INVALID,
                            "ZS_JOB_SECRET_FILE '%s' must be a file of yours that only you can "
                            "read (chmod 600 '%s')",
                            path, path);
        }
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got < 0) return zs_error(ZS_ERR_IO, "ZS_JOB_SECRET_FILE '%s': %s", path, strerror(errno));
        buf[got] = '\0';
        n = strcspn(buf, "\r\n");
        if (n == 0 || n > sizeof e->secret)
            return zs_error(ZS_ERR_INVALID,
                            "ZS_JOB_SECRET_FILE '%s': its first line must hold the secret (1 to "
                            "%zu bytes)",
                            path, sizeof e->secret);
        memcpy(e->secret, buf, n);
    }
    e->secret_len = n;
    return ZS_OK;
}

zs_status zs_comm_env_read(const zs_comm_config *cfg, zs_comm_env *e) {
    zs_status st = ZS_OK;
    int rank, world, lrank, lworld, port;
    memset(e, 0, sizeof *e);
    e->source = "none";
    e->rank = 0;
    e->world_size = 1;
    e->local_rank = 0;
    e->local_world_size = 1;
    e->local_known = 1;

    ZS_CHECK(env_int("RANK", &rank));
    ZS_CHECK(env_int("WORLD_SIZE", &world));
    if (rank >= 0 && world >= 0) {
        e->source = "torchrun";
        ZS_CHECK(env_int("LOCAL_RANK", &lrank));
        ZS_CHECK(env_int("LOCAL_WORLD_SIZE", &lworld));
        e->rank = rank;
        e->world_size = world;
        e->local_rank = lrank >= 0 ? lrank : rank;
        e->local_world_size = lworld >= 0 ? lworld : world;
        e->local_known = lworld >= 0;
    } else {
        ZS_CHECK(env_int("SLURM_PROCID", &rank));
        ZS_CHECK(env_int("SLURM_NTASKS", &world));
        if (rank >= 0 && world >= 0) {
            e->source = "srun";
            ZS_CHECK(env_int("SLURM_LOCALID", &lrank));
            e->rank = rank;
            e->world_size = world;
            e->local_rank = lrank >= 0 ? lrank : rank;
        } else {
            ZS_CHECK(env_int("OMPI_COMM_WORLD_RANK", &rank));
            ZS_CHECK(env_int("OMPI_COMM_WORLD_SIZE", &world));
            if (rank >= 0 && world >= 0) {
                ZS_CHECK(env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lrank));
                ZS_CHECK(env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &lworld));
            } else {
                ZS_CHECK(env_int("PMI_RANK", &rank));
                ZS_CHECK(env_int("PMI_SIZE", &world));
                ZS_CHECK(env_int("MPI_LOCALRANKID", &lrank));
                ZS_CHECK(env_int("MPI_LOCALNRANKS", &lworld));
            }
            if (rank >= 0 && world >= 0) {
                e->source = "mpirun";
                e->rank = rank;
                e->world_size = world;
                e->local_rank = lrank >= 0 ? lrank : rank;
                e->local_world_size = lworld >= 0 ? lworld : world;
            }
        }
    }

    copy_str(e->master_addr, sizeof e->master_addr, getenv("MASTER_ADDR"));
    ZS_CHECK(env_int("MASTER_PORT", &port));
    e->master_port = port > 0 ? port : 0;
    if (!strcmp(e->source, "srun")) ZS_CHECK(zs_slurm_env(e));
    job_key_from_env(e);

    if (cfg) {
        if (cfg->rank >= 0) e->rank = cfg->rank, e->source = "config";
        if (cfg->world_size >= 0) e->world_size = cfg->world_size;
        if (cfg->local_rank >= 0) e->local_rank = cfg->local_rank;
        if (cfg->local_world_size >= 0)
            e->local_world_size = cfg->local_world_size, e->local_known = 1;
        if (cfg->master_addr) copy_str(e->master_addr, sizeof e->master_addr, cfg->master_addr);
        if (cfg->master_port > 0) e->master_port = cfg->master_port;
    }
    if (e->world_size > 1 && e->master_port > 0 && !e->master_addr[0])
        copy_str(e->master_addr, sizeof e->master_addr, "127.0.0.1");

    ZS_REQUIRE(e->world_size >= 1, ZS_ERR_INVALID, "world size %d: must be at least 1 (%s)",
               e->world_size, e->source);
    ZS_REQUIRE(e->rank < e->world_size, ZS_ERR_INVALID, "rank %d is not below world size %d (%s)",
               e->rank, e->world_size, e->source);
    ZS_REQUIRE(e->local_world_size >= 1 && e->local_world_size <= e->world_size, ZS_ERR_INVALID,
               "local world size %d: must be in [1, world size %d] (%s)", e->local_world_size,
               e->world_size, e->source);
    ZS_REQUIRE(e->local_rank < e->local_world_size, ZS_ERR_INVALID,
               "local rank %d is not below local world size %d (%s)", e->local_rank,
               e->local_world_size, e->source);
    ZS_REQUIRE(e->master_port < 65536, ZS_ERR_INVALID, "MASTER_PORT %d out of range",
               e->master_port);
    job_id_from_env(e);
    ZS_CHECK(secret_from_env(e));
fail:
    return st;
}

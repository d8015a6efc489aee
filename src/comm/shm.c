/* shm backend: CPU ranks on one host through one POSIX shared-memory segment. This file
 * owns the segment's life (create, meet, unlink as soon as everyone has mapped it, so no
 * /dev/shm entry outlives setup) and the waits: spin briefly, then sleep on a futex on the
 * peer's progress word, and every 100 ms check the deadline, the peer's liveness and the
 * job-wide abort flag. The collective algorithms are in shm_coll.c. */
#include "comm/shm.h"
#include "comm/store.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x5a53484du /* "ZSHM" */
#define DEFAULT_SLOT (2u << 20)

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    /* Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes. */
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static int reached(uint32_t v, uint32_t target) {
    return (int32_t)(v - target) >= 0;
}

void shm_signal(shm_ctx *s) {
    shm_rank *me = &s->hdr->ranks[s->rank];
    s->progress++;
    atomic_store(&me->progress, s->progress);
    if (atomic_load(&me->waiters) > 0) futex(&me->progress, FUTEX_WAKE, INT_MAX, NULL);
}

/* Is the process alive and not a zombie? (A zombie still answers kill(pid, 0).) */
static int pid_alive(int pid) {
    if (pid <= 0) return 1; /* not attached yet: judged by the deadline */
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* Why peer p will never progress, or NULL if it still might. */
static zs_status peer_problem(shm_ctx *s, int p) {
    shm_header *h = s->hdr;
    if (atomic_load(&h->abort_flag) == 2) {
        int culprit = atomic_load(&h->abort_culprit);
        s->culprit = culprit;
        if (culprit >= 0)
            return zs_error(ZS_ERR_COMM, "peer rank %d failed (reported by rank %d: %s)", culprit,
                            atomic_load(&h->abort_rank), h->abort_msg);
        return zs_error(ZS_ERR_COMM, "rank %d aborted the job: %s", atomic_load(&h->abort_rank),
                        h->abort_msg);
    }
    uint32_t state = atomic_load(&h->ranks[p].state);
    int pid = atomic_load(&h->ranks[p].pid);
    s->culprit = p;
    if (state == SHM_STATE_LEFT)
        return zs_error(ZS_ERR_COMM,
                        "peer rank %d left the communicator (destroyed it or exited) before "
                        "taking part",
                        p);
    if (!pid_alive(pid))
        return zs_error(ZS_ERR_COMM,
                        "peer rank %d died (pid %d is gone: killed, crashed or "
                        "exited early)",
                        p, pid);
    s->culprit = -1;
    return ZS_OK;
}

zs_status shm_wait_peer(shm_ctx *s, int p, uint32_t target) {
    shm_rank *pr = &s->hdr->ranks[p];
    uint32_t v = atomic_load_explicit(&pr->progress, memory_order_acquire);
    if (reached(v, target)) return ZS_OK;
    for (int i = 0; i < s->spin; i++) {
        __builtin_ia32_pause();
        v = atomic_load_explicit(&pr->progress, memory_order_acquire);
        if (reached(v, target)) return ZS_OK;
    }
    double start = zs_now_s(), next_check = start + 0.1, deadline = start + s->timeout_s;
    for (;;) {
        atomic_fetch_add(&pr->waiters, 1);
        v = atomic_load(&pr->progress);
        if (!reached(v, target)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            futex(&pr->progress, FUTEX_WAIT, v, &ts);
        }
        atomic_fetch_sub(&pr->waiters, 1);
        v = atomic_load_explicit(&pr->progress, memory_order_acquire);
        if (reached(v, target)) return ZS_OK;
        double now = zs_now_s();
        if (now >= next_check) {
            zs_status st = peer_problem(s, p);
            if (st != ZS_OK) return st;
            next_check = now + 0.1;
        }
        if (now >= deadline) {
            s->culprit = p;
            return zs_error(ZS_ERR_TIMEOUT,
                            "timed out after %.1f s waiting for peer rank %d (pid %d, alive but "
                            "not progressing: stuck, or not calling this collective)",
                            s->timeout_s, p, atomic_load(&pr->pid));
        }
    }
}

zs_status shm_wait_all(shm_ctx *s, uint32_t target) {
    for (int i = 1; i < s->world; i++) {
        /* Start with the next rank: in a ring-like order the first peer is usually ready. */
        int p = (s->rank + i) % s->world;
        zs_status st = shm_wait_peer(s, p, target);
        if (st != ZS_OK) return st;
    }
    return ZS_OK;
}

/* ---- setup and teardown -------------------------------------------------------------- */

static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* One pipeline slot: the chunk size (ZS_SHM_CHUNK, default 2 MiB), at least one 32-element
 * slice per rank (reduce_scatter splits the slot), whole pages. */
static size_t slot_bytes(size_t chunk, int world) {
    size_t slot = chunk ? chunk : DEFAULT_SLOT;
    size_t min_slot = (size_t)world * 32 * 4;
    return round_up(slot < min_slot ? min_slot : slot, 4096);
}

size_t zs_comm_shm_staging_bytes(int world_size) {
    if (world_size <= 1) return 0;
    return 2 * slot_bytes(zs_comm_config_default().chunk_bytes, world_size);
}

/* Open (rank 0: create) the segment and map it. Non-zero ranks retry until the creator
 * has published a valid header, or the deadline. */
static zs_status open_segment(shm_ctx *s, size_t total, double deadline) {
    zs_status st = ZS_OK;
    int fd = -1;
    if (s->rank == 0) {
        fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && errno == EEXIST) {
            /* A crashed earlier job with the same key: its segment is garbage. */
            shm_unlink(s->name);
            fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        }
        ZS_REQUIRE(fd >= 0, ZS_ERR_COMM, "shm: cannot create %s: %s", s->name, strerror(errno));
        ZS_REQUIRE(ftruncate(fd, (off_t)total) == 0, ZS_ERR_COMM,
                   "shm: cannot size %s to %zu bytes: %s", s->name, total, strerror(errno));
        s->hdr = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ZS_REQUIRE(s->hdr != MAP_FAILED, ZS_ERR_COMM, "shm: mmap of %zu bytes failed: %s", total,
                   strerror(errno));
        s->map_bytes = total;
        shm_header *h = s->hdr;
        h->magic = SHM_MAGIC;
        h->world = (uint32_t)s->world;
        h->slot_bytes = s->slot_bytes;
        h->data_offset = round_up(sizeof(shm_header) + (size_t)s->world * sizeof(shm_rank), 4096);
        h->total_bytes = total;
        atomic_store(&h->creator_pid, (int32_t)getpid());
        atomic_store(&h->ready, 1);
    } else {
        for (;;) {
            ZS_REQUIRE(zs_now_s() < deadline, ZS_ERR_TIMEOUT,
                       "shm: segment %s from rank 0 did not appear within %.0f s (did rank 0 "
                       "start?)",
                       s->name, s->timeout_s);
            if (fd < 0) fd = shm_open(s->name, O_RDWR, 0600);
            struct stat sb;
            if (fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size == total) {
                shm_header *h = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                ZS_REQUIRE(h != MAP_FAILED, ZS_ERR_COMM, "shm: mmap failed: %s", strerror(errno));
                int ready = (int)atomic_load(&h->ready);
                if (ready && h->magic == SHM_MAGIC && h->world == (uint32_t)s->world &&
                    pid_alive(atomic_load(&h->creator_pid))) {
                    s->hdr = h;
                    s->map_bytes = total;
                    break;
                }
                munmap(h, total);
                if (!ready) {
                    usleep(2000);
                    continue; /* creator still initializing: keep the fd */
                }
            }
            if (fd >= 0) close(fd); /* missing, half-sized or stale: look again */
            fd = -1;
            usleep(10000);
        }
    }
fail:
    if (fd >= 0) close(fd);
    return st;
}

static void shm_fini(zs_comm_t *c);

static zs_status shm_init(zs_comm_t *c) {
    zs_status st = ZS_OK;
    zs_store *store = NULL;
    int store_owned = 0;
    shm_ctx *s = calloc(1, sizeof *s);
    ZS_REQUIRE(s, ZS_ERR_OOM, "shm: out of memory");
    c->impl = s;
    s->rank = c->env.rank;
    s->world = c->env.world_size;
    s->timeout_s = c->timeout_s;
    s->culprit = -1;
    if (s->world == 1) return ZS_OK;

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* More ranks than cores: a spinning waiter steals the core its peer needs. */
    s->spin = ncpu > s->world ? 2000 : 50;
    s->slot_bytes = slot_bytes(c->chunk_bytes, s->world);
    size_t data_off = round_up(sizeof(shm_header) + (size_t)s->world * sizeof(shm_rank), 4096);
    size_t total = data_off + (size_t)s->world * 2 * s->slot_bytes;
    double deadline = zs_now_s() + c->timeout_s;

    if (c->env.master_port > 0) {
        /* The store names a fresh segment; the job key keeps it findable by the launcher. */
        ZS_CHECK(zs_comm_store_open(c, &store, &store_owned));
        if (s->rank == 0) {
            unsigned rnd = (unsigned)(zs_now_ns() ^ ((uint64_t)getpid() << 16));
            snprintf(s->name, sizeof s->name, "/zshard-%s-%d-%08x", c->env.job_key, getpid(), rnd);
            ZS_CHECK(zs_store_set(store, "shm/name", s->name, strlen(s->name) + 1));
        } else {
            size_t len = 0;
            ZS_CHECK(zs_store_get(store, "shm/name", s->name, sizeof s->name - 1, &len));
            s->name[sizeof s->name - 1] = '\0';
        }
    } else {
        ZS_REQUIRE(c->env.job_key[0], ZS_ERR_COMM,
                   "shm: %d ranks but no MASTER_ADDR/MASTER_PORT and no job id to meet by",
                   s->world);
        snprintf(s->name, sizeof s->name, "/zshard-%s-w%d", c->env.job_key, s->world);
    }
    ZS_CHECK(open_segment(s, total, deadline));

    shm_header *h = s->hdr;
    atomic_store(&h->ranks[s->rank].pid, (int32_t)getpid());
    s->progress = atomic_load(&h->ranks[s->rank].progress);
    atomic_store(&h->ranks[s->rank].state, SHM_STATE_ATTACHED);
    atomic_fetch_add(&h->attached, 1);
    /* Everyone mapped it: the name can go, so nothing is left in /dev/shm even if a rank is
     * killed later. */
    while (atomic_load(&h->attached) < (uint32_t)s->world) {
        ZS_REQUIRE(zs_now_s() < deadline, ZS_ERR_TIMEOUT,
                   "shm: only %u of %d ranks attached to %s within %.0f s",
                   atomic_load(&h->attached), s->world, s->name, c->timeout_s);
        for (int p = 0; p < s->world; p++) {
            int pid = atomic_load(&h->ranks[p].pid);
            ZS_REQUIRE(pid_alive(pid), ZS_ERR_COMM, "shm: peer rank %d (pid %d) died during setup",
                       p, pid);
        }
        usleep(1000);
    }
    if (s->rank == 0) {
        shm_unlink(s->name);
        s->unlinked = 1;
    }
    if (store) ZS_CHECK(zs_store_barrier(store, "shm/attached", s->world));
    zs_comm_store_close(store, store_owned);
    /* This rank's share of the segment: its two slots (the header is a few KiB). */
    ZS_CHECK(zs_mem_account(ZS_MEM_COMM, (int64_t)(2 * s->slot_bytes), "shm staging"));
    s->staging_accounted = 1;
    return ZS_OK;
fail:
    zs_comm_store_close(store, store_owned);
    return st;
}

static void shm_fini(zs_comm_t *c) {
    shm_ctx *s = c->impl;
    if (!s) return;
    if (s->staging_accounted)
        zs_mem_account(ZS_MEM_COMM, -(int64_t)(2 * s->slot_bytes), "shm staging");
    shm_reg_free_all(s); /* buffers the caller did not free: their pointers die here */
    if (s->hdr) {
        shm_rank *me = &s->hdr->ranks[s->rank];
        atomic_store(&me->state, SHM_STATE_LEFT);
        futex(&me->progress, FUTEX_WAKE, INT_MAX, NULL);
        if (s->rank == 0 && !s->unlinked) shm_unlink(s->name);
        munmap(s->hdr, s->map_bytes);
    } else if (s->rank == 0 && s->name[0] && !s->unlinked) {
        shm_unlink(s->name);
    }
    free(s);
    c->impl = NULL;
}

static void shm_mark_failed(zs_comm_t *c, const char *why) {
    shm_ctx *s = c->impl;
    if (!s || !s->hdr) return;
    shm_header *h = s->hdr;
    uint32_t expected = 0;
    /* 0 -> 1 claims the slot, 2 publishes it once the message is written. */
    if (atomic_compare_exchange_strong(&h->abort_flag, &expected, 1)) {
        snprintf(h->abort_msg, sizeof h->abort_msg, "%s", why);
        atomic_store(&h->abort_rank, s->rank);
        atomic_store(&h->abort_culprit, s->culprit);
        atomic_store(&h->abort_flag, 2);
    }
    atomic_store(&h->ranks[s->rank].state, SHM_STATE_FAILED);
    for (int p = 0; p < s->world; p++)
        futex(&h->ranks[p].progress, FUTEX_WAKE, INT_MAX, NULL);
}

static int shm_mem_free(zs_comm_t *c, void *ptr) {
    shm_ctx *s = c->impl;
    return s && s->hdr ? shm_reg_free(s, ptr) : 0;
}

const zs_comm_backend_ops zs_comm_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .run = shm_run,
    .mark_failed = shm_mark_failed,
    .sync = NULL,
    .mem_free = shm_mem_free,
    .needs_thread = 1,
};

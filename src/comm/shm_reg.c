/* Registered buffers for the shm backend (zs_comm_mem_alloc): each rank's part of an
 * allocation is a POSIX shared-memory object of its own that every peer maps, so collectives
 * on such buffers read peers' data in place instead of staging it (shm_direct.c). A name
 * lives only while the ranks map it: every rank unlinks every name of the allocation once
 * all have mapped, so nothing stays in /dev/shm even if a rank is killed later. A rank killed
 * during the allocation leaves a name that the survivors remove (and `zshard run` removes
 * any of its job's, since the names start with the segment's). */
#include "comm/shm.h"
#include "core/alloc.h"
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t page_round(size_t n) {
    return (n + 4095) / 4096 * 4096;
}

void shm_reg_name(const shm_ctx *s, int rank, uint32_t id, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-r%d-m%u", s->name, rank, id);
}

/* Create, reserve and map this rank's object of allocation id. */
static zs_status create_mine(shm_ctx *s, uint32_t id, size_t nbytes, char **out) {
    zs_status st = ZS_OK;
    char name[224];
    size_t len = page_round(nbytes);
    int fd = -1, e;
    *out = NULL;
    shm_reg_name(s, s->rank, id, name, sizeof name);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* A crashed earlier job with the same key: its object is garbage. */
        shm_unlink(name);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    ZS_REQUIRE(fd >= 0, ZS_ERR_COMM, "shm: cannot create %s: %s", name, strerror(errno));
    /* posix_fallocate rather than ftruncate: a full /dev/shm is an error now, not a SIGBUS
     * at some later first touch. The pages come zero-filled and resident, as zs_alloc's. */
    e = posix_fallocate(fd, 0, (off_t)len);
    ZS_REQUIRE(e == 0, ZS_ERR_OOM, "shm: cannot reserve %zu bytes in /dev/shm for %s: %s", len,
               name, strerror(e));
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ZS_REQUIRE(p != MAP_FAILED, ZS_ERR_OOM, "shm: cannot map %zu bytes of %s: %s", len, name,
               strerror(errno));
    *out = p;
fail:
    if (fd >= 0) close(fd);
    if (st != ZS_OK && fd >= 0) shm_unlink(name);
    return st;
}

/* Map peer p's object of allocation id (nbytes as p published it). */
static zs_status map_peer(shm_ctx *s, int p, uint32_t id, size_t nbytes, char **out) {
    zs_status st = ZS_OK;
    char name[224];
    size_t len = page_round(nbytes);
    struct stat sb;
    *out = NULL;
    shm_reg_name(s, p, id, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0600);
    ZS_REQUIRE(fd >= 0, ZS_ERR_COMM, "shm: cannot open rank %d's buffer %s: %s", p, name,
               strerror(errno));
    ZS_REQUIRE(fstat(fd, &sb) == 0 && (size_t)sb.st_size == len, ZS_ERR_COMM,
               "shm: rank %d's buffer %s has the wrong size", p, name);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ZS_REQUIRE(m != MAP_FAILED, ZS_ERR_OOM, "shm: cannot map rank %d's buffer (%zu bytes): %s", p,
               len, strerror(errno));
    *out = m;
fail:
    if (fd >= 0) close(fd);
    return st;
}

static void unmap_views(shm_ctx *s, shm_region *g) {
    for (int p = 0; p < s->world && g->view; p++)
        if (g->view[p]) munmap(g->view[p], page_round(g->view_bytes[p]));
    free(g->view);
    free(g->view_bytes);
    g->view = NULL;
    g->view_bytes = NULL;
}

static void unlink_all(shm_ctx *s, uint32_t id) {
    char name[224];
    for (int p = 0; p < s->world; p++) {
        shm_reg_name(s, p, id, name, sizeof name);
        shm_unlink(name); /* ENOENT for those already gone or never created */
    }
}

/* First rank whose status field (phase 1 or 2) is not ZS_OK, or -1. */
static int first_failed(shm_ctx *s, int phase2) {
    for (int p = 0; p < s->world; p++) {
        const shm_rank *pr = &s->hdr->ranks[p];
        if ((phase2 ? pr->map_status : pr->reg_status) != ZS_OK) return p;
    }
    return -1;
}

/* Two phases, each ended by a barrier: (1) every rank accounts, creates and maps its own
 * object and publishes its size or its failure; (2) unless some rank failed, every rank maps
 * every peer's and publishes the outcome. Then all names go. Both barriers always happen, so
 * every rank has read what it needs of a phase before any rank writes the next one. */
zs_status shm_reg_alloc(shm_ctx *s, const zs_coll *op) {
    zs_status st = ZS_OK, lst = ZS_OK;
    zs_mem_request *req = op->ext;
    shm_rank *me = &s->hdr->ranks[s->rank];
    const uint32_t id = ++s->reg_seq, base = s->progress;
    const int n = s->world;
    shm_region g = {.id = id, .nbytes = req->nbytes, .cat = req->cat};
    int accounted = 0, bad;
    char msg[sizeof me->reg_msg] = "";

    g.view = calloc((size_t)n, sizeof *g.view);
    g.view_bytes = calloc((size_t)n, sizeof *g.view_bytes);
    if (!g.view || !g.view_bytes)
        lst = zs_error(ZS_ERR_OOM, "shm: out of memory for the views of '%s'", op->tag);
    if (lst == ZS_OK && s->nregs == s->cap_regs) {
        int cap = s->cap_regs ? 2 * s->cap_regs : 16;
        shm_region *r = realloc(s->regs, (size_t)cap * sizeof *r);
        if (r) {
            s->regs = r;
            s->cap_regs = cap;
        } else {
            lst = zs_error(ZS_ERR_OOM, "shm: out of memory registering '%s'", op->tag);
        }
    }
    if (lst == ZS_OK) lst = zs_mem_account(req->cat, (int64_t)req->nbytes, op->tag);
    accounted = lst == ZS_OK;
    if (lst == ZS_OK && req->nbytes) lst = create_mine(s, id, req->nbytes, &g.view[s->rank]);
    if (lst != ZS_OK) snprintf(msg, sizeof msg, "%s", zs_last_error());
    g.view_bytes[s->rank] = lst == ZS_OK ? req->nbytes : 0;
    me->reg_bytes = g.view_bytes[s->rank];
    me->reg_status = lst;
    memcpy(me->reg_msg, msg, sizeof msg);
    shm_signal(s);
    ZS_CHECK(shm_wait_all(s, base + 1));

    bad = first_failed(s, 0);
    if (bad >= 0) {
        lst = s->hdr->ranks[bad].reg_status;
        snprintf(msg, sizeof msg, "%s", s->hdr->ranks[bad].reg_msg);
    } else {
        for (int p = 0; p < n && lst == ZS_OK; p++) {
            g.view_bytes[p] = s->hdr->ranks[p].reg_bytes;
            if (p != s->rank && g.view_bytes[p])
                lst = map_peer(s, p, id, g.view_bytes[p], &g.view[p]);
        }
        if (lst != ZS_OK) snprintf(msg, sizeof msg, "%s", zs_last_error());
        memcpy(me->map_msg, msg, sizeof msg);
        me->map_status = lst;
    }
    shm_signal(s);
    ZS_CHECK(shm_wait_all(s, base + 2));
    unlink_all(s, id); /* every rank has mapped (or given up on) every object */
    if (bad < 0 && (bad = first_failed(s, 1)) >= 0) {
        lst = s->hdr->ranks[bad].map_status;
        snprintf(msg, sizeof msg, "%s", s->hdr->ranks[bad].map_msg);
    }
    if (bad >= 0) {
        /* Every rank saw the same failure: all give the allocation up, the comm stays usable. */
        req->st = lst;
        snprintf(req->msg, sizeof req->msg, "zs_comm_mem_alloc '%s' (%zu bytes here): rank %d: %s",
                 op->tag, req->nbytes, bad, msg);
        goto release;
    }
    req->ptr = g.view[s->rank];
    req->st = ZS_OK;
    s->regs[s->nregs++] = g;
    return ZS_OK;
fail:
    unlink_all(s, id); /* a peer killed mid-allocation leaves its name behind */
release:
    unmap_views(s, &g);
    if (accounted) zs_mem_account(req->cat, -(int64_t)req->nbytes, op->tag);
    return st;
}

int shm_reg_free(shm_ctx *s, void *ptr) {
    for (int i = 0; ptr && i < s->nregs; i++) {
        shm_region *g = &s->regs[i];
        if (g->view[s->rank] != ptr) continue;
        unmap_views(s, g);
        zs_mem_account(g->cat, -(int64_t)g->nbytes, "registered comm buffer");
        s->regs[i] = s->regs[--s->nregs];
        return 1;
    }
    return 0;
}

void shm_reg_free_all(shm_ctx *s) {
    for (int i = 0; i < s->nregs; i++) {
        unmap_views(s, &s->regs[i]);
        zs_mem_account(s->regs[i].cat, -(int64_t)s->regs[i].nbytes, "registered comm buffer");
    }
    free(s->regs);
    s->regs = NULL;
    s->nregs = s->cap_regs = 0;
}

const shm_region *shm_reg_find(const shm_ctx *s, const void *p, size_t nbytes, size_t *off) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; p && i < s->nregs; i++) {
        const shm_region *g = &s->regs[i];
        uintptr_t b = (uintptr_t)g->view[s->rank];
        if (b && a >= b && a - b <= g->nbytes && nbytes <= g->nbytes - (a - b)) {
            *off = a - b;
            return g;
        }
    }
    return NULL;
}

const shm_region *shm_reg_by_id(const shm_ctx *s, uint32_t id) {
    for (int i = 0; i < s->nregs; i++)
        if (s->regs[i].id == id) return &s->regs[i];
    return NULL;
}

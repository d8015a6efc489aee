/* Accounted, aligned allocation with per-category current/peak bytes and an optional cap. */
#include "alloc.h"
#include "status.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The header sits in the 64 bytes before the user pointer, keeping the user pointer aligned. */
typedef struct alloc_header {
    uint64_t nbytes;
    uint32_t cat;
    uint32_t magic;
} alloc_header;

#define HDR_MAGIC 0x5a534d45u /* "ZSME" */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* One ledger per kind of memory: host (zs_alloc, pinned staging) and a GPU's device memory. The
 * compute ledger is the one zs_mem_get_stats reports and the cap limits: the host's unless a
 * run computes on a GPU (zs_mem_set_compute_ledger), so on the CPU nothing changes. */
static zs_mem_stats g_ledgers[2];
static int g_compute;
#define g_stats g_ledgers[ZS_LEDGER_HOST]

static const char *g_cat_names[ZS_MEM_NCAT] = {
    "param",    "param_shard", "grad",      "grad_shard", "optim_state",
    "gathered", "activation",  "workspace", "comm",
};

const char *zs_mem_category_name(zs_mem_category cat) {
    return (unsigned)cat < ZS_MEM_NCAT ? g_cat_names[cat] : "unknown";
}

void zs_format_bytes(uint64_t n, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.2f %s", v, u[i]);
}

void zs_mem_format_breakdown(const zs_mem_stats *s, int use_peak, char *buf, size_t cap) {
    int order[ZS_MEM_NCAT];
    const uint64_t *v = use_peak ? s->peak : s->current;
    for (int i = 0; i < ZS_MEM_NCAT; i++)
        order[i] = i;
    for (int i = 0; i < ZS_MEM_NCAT; i++)
        for (int j = i + 1; j < ZS_MEM_NCAT; j++)
            if (v[order[j]] > v[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < ZS_MEM_NCAT && len + 1 < cap; i++) {
        if (!v[order[i]]) continue;
        char b[32];
        zs_format_bytes(v[order[i]], b, sizeof b);
        len += (size_t)snprintf(buf + len, cap - len, "%s%s %s", len ? ", " : "",
                                g_cat_names[order[i]], b);
    }
    if (!len) snprintf(buf, cap, "nothing allocated");
}

/* Count nbytes against category cat of ledger l, failing (and changing nothing) over its cap. */
static zs_status reserve_in(zs_ledger l, zs_mem_category cat, size_t nbytes, const char *what) {
    pthread_mutex_lock(&g_lock);
    zs_mem_stats *st = &g_ledgers[l];
    if (st->cap && st->total_current + nbytes > st->cap) {
        zs_mem_stats snap = *st;
        pthread_mutex_unlock(&g_lock);
        char need[32], capb[32], used[32], brk[512];
        zs_format_bytes(nbytes, need, sizeof need);
        zs_format_bytes(snap.cap, capb, sizeof capb);
        zs_format_bytes(snap.total_current, used, sizeof used);
        zs_mem_format_breakdown(&snap, 0, brk, sizeof brk);
        return zs_error(ZS_ERR_OOM,
                        "device memory cap %s exceeded: allocating %s for %s (%s) on top of %s"
                        " in use (%s)",
                        capb, need, what, g_cat_names[cat], used, brk);
    }
    /* Reserve before allocating so concurrent callers cannot both pass the cap check. */
    st->current[cat] += nbytes;
    st->total_current += nbytes;
    if (st->current[cat] > st->peak[cat]) st->peak[cat] = st->current[cat];
    if (st->total_current > st->total_peak) st->total_peak = st->total_current;
    pthread_mutex_unlock(&g_lock);
    return ZS_OK;
}

static zs_status reserve(zs_mem_category cat, size_t nbytes, const char *what) {
    return reserve_in(ZS_LEDGER_HOST, cat, nbytes, what);
}

zs_status zs_alloc(zs_mem_category cat, size_t nbytes, const char *what, void **out) {
    *out = NULL;
    if ((unsigned)cat >= ZS_MEM_NCAT)
        return zs_error(ZS_ERR_INTERNAL, "zs_alloc: bad category %d for %s", (int)cat, what);
    if (nbytes == 0) return ZS_OK;
    size_t padded = (nbytes + ZS_ALIGN - 1) / ZS_ALIGN * ZS_ALIGN;
    if (padded < nbytes || padded > SIZE_MAX - ZS_ALIGN)
        return zs_error(ZS_ERR_OOM, "cannot allocate %s: size %zu overflows", what, nbytes);

    zs_status st = reserve(cat, nbytes, what);
    if (st != ZS_OK) return st;

    char *base = aligned_alloc(ZS_ALIGN, padded + ZS_ALIGN);
    if (!base) {
        pthread_mutex_lock(&g_lock);
        g_stats.current[cat] -= nbytes;
        g_stats.total_current -= nbytes;
        pthread_mutex_unlock(&g_lock);
        char need[32];
        zs_format_bytes(nbytes, need, sizeof need);
        return zs_error(ZS_ERR_OOM, "out of host memory allocating %s for %s", need, what);
    }
    /* Zero-fill first-touches the pages now, so measured resident memory matches accounting
     * and later steps do not pay page faults. */
    memset(base + ZS_ALIGN, 0, padded);
    alloc_header *h = (alloc_header *)base;
    h->nbytes = nbytes;
    h->cat = (uint32_t)cat;
    h->magic = HDR_MAGIC;
    *out = base + ZS_ALIGN;
    return ZS_OK;
}

static alloc_header *header_of(const void *ptr) {
    return (alloc_header *)((char *)ptr - ZS_ALIGN);
}

void zs_free(void *ptr) {
    if (!ptr) return;
    alloc_header *h = header_of(ptr);
    if (h->magic != HDR_MAGIC) {
        fprintf(stderr, "zshard: zs_free of a pointer zs_alloc did not return\n");
        return;
    }
    pthread_mutex_lock(&g_lock);
    g_stats.current[h->cat] -= h->nbytes;
    g_stats.total_current -= h->nbytes;
    pthread_mutex_unlock(&g_lock);
    h->magic = 0;
    free(h);
}

void zs_mem_get_stats(zs_mem_stats *out) {
    pthread_mutex_lock(&g_lock);
    *out = g_ledgers[g_compute];
    pthread_mutex_unlock(&g_lock);
}

void zs_mem_get_ledger_stats(zs_ledger l, zs_mem_stats *out) {
    pthread_mutex_lock(&g_lock);
    *out = g_ledgers[l];
    pthread_mutex_unlock(&g_lock);
}

void zs_mem_set_compute_ledger(zs_ledger l) {
    pthread_mutex_lock(&g_lock);
    if (l != (zs_ledger)g_compute) { /* the cap follows the ledger it limits */
        g_ledgers[l].cap = g_ledgers[g_compute].cap;
        g_ledgers[g_compute].cap = 0;
        g_compute = (int)l;
    }
    pthread_mutex_unlock(&g_lock);
}

void zs_mem_set_cap(uint64_t nbytes) {
    pthread_mutex_lock(&g_lock);
    g_ledgers[g_compute].cap = nbytes;
    pthread_mutex_unlock(&g_lock);
}

void zs_mem_reset_peaks(void) {
    pthread_mutex_lock(&g_lock);
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < ZS_MEM_NCAT; i++)
            g_ledgers[l].peak[i] = g_ledgers[l].current[i];
        g_ledgers[l].total_peak = g_ledgers[l].total_current;
    }
    pthread_mutex_unlock(&g_lock);
}

zs_status zs_mem_account_in(zs_ledger l, zs_mem_category cat, int64_t nbytes, const char *what) {
    if ((unsigned)cat >= ZS_MEM_NCAT || (unsigned)l > ZS_LEDGER_DEVICE)
        return zs_error(ZS_ERR_INTERNAL, "zs_mem_account: bad category %d for %s", (int)cat, what);
    if (nbytes >= 0) return reserve_in(l, cat, (size_t)nbytes, what);
    pthread_mutex_lock(&g_lock);
    g_ledgers[l].current[cat] -= (uint64_t)(-nbytes);
    g_ledgers[l].total_current -= (uint64_t)(-nbytes);
    pthread_mutex_unlock(&g_lock);
    return ZS_OK;
}

zs_status zs_mem_account(zs_mem_category cat, int64_t nbytes, const char *what) {
    return zs_mem_account_in(ZS_LEDGER_HOST, cat, nbytes, what);
}

zs_status zs_parse_bytes(const char *text, uint64_t *out) {
    if (!text || !*text) return zs_error(ZS_ERR_INVALID, "empty memory size");
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v) || v <= 0)
        return zs_error(ZS_ERR_INVALID, "bad memory size '%s' (expected e.g. 4G, 512M)", text);
    double mul = 1;
    char u = (char)toupper((unsigned char)*end);
    if (u == 'K')
        mul = 1024.0;
    else if (u == 'M')
        mul = 1048576.0;
    else if (u == 'G')
        mul = 1073741824.0;
    else if (u == 'T')
        mul = 1099511627776.0;
    else if (u == 'B')
        mul = 1;
    else if (u != '\0')
        return zs_error(ZS_ERR_INVALID, "bad memory size '%s' (expected e.g. 4G, 512M)", text);
    if (u != '\0') {
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end)
            return zs_error(ZS_ERR_INVALID, "bad memory size '%s' (expected e.g. 4G, 512M)", text);
    }
    double b = v * mul;
    if (b > 1.8e19) return zs_error(ZS_ERR_INVALID, "memory size '%s' is too large", text);
    *out = (uint64_t)b;
    return ZS_OK;
}

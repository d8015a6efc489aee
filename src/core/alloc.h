/* Accounted allocator: every buffer names a zs_mem_category; current and peak bytes are kept
 * per category, and an optional cap (--device-mem) makes an over-cap request fail with the
 * breakdown in the error message instead of swapping or dying. */
#ifndef ZS_CORE_ALLOC_H
#define ZS_CORE_ALLOC_H

#include "zshard.h"

#include <stddef.h>

#define ZS_ALIGN 64

/* 64-byte aligned, zero-filled (first-touched) buffer of nbytes in category cat. nbytes 0
 * yields *out = NULL and ZS_OK. On failure *out is NULL and the message names `what`. */
zs_status zs_alloc(zs_mem_category cat, size_t nbytes, const char *what, void **out);
/* Release a buffer from zs_alloc. NULL is accepted. */
void zs_free(void *ptr);
/* Account memory obtained elsewhere (e.g. shared-memory buffers the comm layer maps):
 * nbytes > 0 reserves under the cap exactly as zs_alloc does (failing with the breakdown),
 * nbytes < 0 releases. `what` names the buffer in errors. */
zs_status zs_mem_account(zs_mem_category cat, int64_t nbytes, const char *what);
/* Ledgers: host memory (zs_alloc, zs_mem_account, pinned staging buffers) and a GPU's device
 * memory (the CUDA device table). The compute ledger, the memory of the device a run computes on,
 * is what zs_mem_get_stats reports, the --device-mem cap limits and the estimator predicts: the
 * host's by default; a run on a GPU selects the device's. */
typedef enum zs_ledger { ZS_LEDGER_HOST = 0, ZS_LEDGER_DEVICE = 1 } zs_ledger;
zs_status zs_mem_account_in(zs_ledger l, zs_mem_category cat, int64_t nbytes, const char *what);
void zs_mem_set_compute_ledger(zs_ledger l); /* the cap moves with it */
void zs_mem_get_ledger_stats(zs_ledger l, zs_mem_stats *out);
/* Write "param 1.2 GiB, optim_state 2.4 GiB, ..." (non-zero categories, largest first). */
void zs_mem_format_breakdown(const zs_mem_stats *s, int use_peak, char *buf, size_t cap);
/* "1.50 GiB" style. */
void zs_format_bytes(uint64_t nbytes, char *buf, size_t cap);

#endif

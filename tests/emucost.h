/* What test_emu_costs.c, _attn.c and _mem.c share (emulated GPU only): the CUDA ops
 * table, random device buffers and document starts, the profiler's unit (unique 32-byte
 * sectors), the __global__ kernels of src/backend/cuda, profiling one op and checking each of
 * its launches (check_rec: declared, bytes; check_scaling: FLOPs linear in a size).
 * The kernels are split between the three tests by source file (EC_ATTENTION: attention_cuda.cu,
 * flash_cuda.cu, flash_tc_cuda.cu, flash_tc_bwd_cuda.cu and decode_cuda.cu; EC_MEMORY:
 * cast_cuda.cu and embedding_cuda.cu; EC_OPS: every other .cu file), and each test must check
 * every kernel of its files (ec_finish). */
#ifndef ZS_EMUCOST_H
#define ZS_EMUCOST_H

#include "backend/ops.h"
#include "emu_profile.h"
#include "testutil.h"

#include <stddef.h>
#include <stdint.h>

/* The CUDA ops table (set by ec_start). */
extern const zs_ops *gpu;

/* The three tests, each answering for the kernels of its source files (above). */
typedef enum ec_part { EC_OPS, EC_ATTENTION, EC_MEMORY } ec_part;

/* zt_init(name), then exits 77 without a GPU; selects the CUDA ops table on device 0 and reads
 * the kernels of src/backend/cuda, this test's (part's) files marked. */
void ec_start(const char *name, ec_part part);
/* Every launch of the last profiled op checked, then every kernel of this part's files
 * checked at least once (a table of them printed); zt_finish's exit code. */
int ec_finish(void);

/* ---- buffers: testutil's pool, every allocation of a check freed by zt_release(); device
 * buffers are 256-byte aligned (zt_dbuf checks), which the sector counts below rely on ---- */

/* A device buffer of n random floats. */
float *drand(size_t n);

/* Document starts (backend/ops.h "Documents"), as test_cuda_ops_attn.c draws them: a new document
 * at t > 0 with probability 1/8, row 1 padded (m real tokens, then documents of one). NULL (and *h
 * NULL) without documents. */
const int32_t *docs_seg(int docs, int B, int T, const int32_t **h);
int seg_lo(const int32_t *seg, size_t bt);

/* ---- the profiler's unit: unique 32-byte sectors of one buffer ---------------------------- */

typedef struct sectors {
    unsigned char *hit;
    size_t n;
} sectors;

/* An empty record of a buffer of nbytes. */
sectors sec_new(size_t nbytes);
/* Bytes [lo, hi) of the buffer touched. */
void sec_add(sectors *s, size_t lo, size_t hi);
double sec_bytes(const sectors *s);

/* ---- the records of one profiled op ------------------------------------------------------ */

#define MAX_RECS 16
extern zs_emu_record g_rec[MAX_RECS];
extern int g_used[MAX_RECS]; /* which of g_rec a check has taken */
extern size_t g_nrec;

/* Profile what runs between the two (the last op's launches all checked first). */
void prof_start(void);
void prof_stop(void);
/* The one launch of kernel `name` in the last profiled op. */
const zs_emu_record *rec(const char *name);

/* Checks 1 and 2 (test_emu_costs.c's list) on one launch. The profiler measures unique 32-byte
 * sectors (read and written counted apart), the declaration counts elements. k is the number of
 * distinct buffers the kernel touches (one touched in separate ranges, as adamw_segs' segments,
 * counts once per range): each buffer's first and last sector may be partial, so the measured
 * bytes may differ from the ideal by up to 32 bytes a buffer (here buffers start 256-byte aligned,
 * so only the last one is partial, and the measured bytes are never below the ideal), and 2% more
 * above it. Required: declared <= measured + 32 k and measured <= declared + 32 k + 2%.
 *
 * `extra` is what the kernel touches beyond (or, when negative, short of) its declaration by
 * design, enumerated on the host sector by sector with its reason in `why`: scratch the kernel
 * writes and reads back (attention scores, an accumulator in its output), partial sectors of
 * row ranges (logits rows of which V of Vp are read, the causal triangle of att), and what data
 * in device memory spares it that the launcher cannot see (masked rows, document masks, whose
 * declaration is the upper bound without them). The tolerance applies around declared + extra;
 * extra is 0 for every kernel that touches exactly its ideal. */
void check_rec(const zs_emu_record *r, int k, double extra, const char *why);
/* Check 3 (test_emu_costs.c's list) for a kernel whose FLOPs are linear in a size s:
 * f1 / s1 == f2 / s2 exactly (both are integers in doubles, well under 2^53). */
void check_scaling(const char *name, double f1, double s1, double f2, double s2);

#endif

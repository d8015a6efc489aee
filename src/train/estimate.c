/* Memory estimator: per-rank bytes by category predicted from the unit layout (model states
 * and the engine's pools, exact) and the model's activation/workspace formulas, without
 * allocating anything. The trainer checks --device-mem against it before training, and
 * `zshard mem` prints it. */
#include "zshard.h"

#include "core/alloc.h"
#include "core/status.h"
#include "models/model.h"
#include "shard/engine.h"
#include "shard/layout.h"
#include "train/trainer_internal.h"
#include "backend/kernels/sumsq.h"

#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

void zs_mem_formula(int stage, const zs_mem_options *opts, int *a, int *b) {
    int p = opts && opts->dtype == ZS_DTYPE_BF16 ? 2 : 4;        /* compute params */
    int g = opts && opts->reduce_dtype == ZS_DTYPE_BF16 ? 2 : 4; /* gradients */
    int master = p == 4 ? 0 : 4; /* fp32 params are their own master */
    int adam = 8;                /* m and v, fp32 */
    /* --offload optimizer of every unit: the master and Adam state are on the host (a fraction
     * splits whole units, which no per-parameter formula describes) */
    int whole = opts && (opts->offload_fraction <= 0 || opts->offload_fraction >= 1);
    if (whole && opts->offload != ZS_OFFLOAD_NONE) master = adam = 0;
    if (whole && opts->offload == ZS_OFFLOAD_PARAMS && stage == 3) p = 0; /* the shard too */
    switch (stage) {
    case 0: /* everything full on every rank */
        *a = p + g + master + adam, *b = 0;
        break;
    case 1: /* optimizer states sharded */
        *a = p + g, *b = master + adam;
        break;
    case 2: /* + gradients */
        *a = p, *b = g + master + adam;
        break;
    default: /* + parameters */
        *a = 0, *b = p + g + master + adam;
        break;
    }
}

zs_status zs_mem_estimate_compute(const zs_model_config *cfg, int world, int stage, int batch,
                                  int seq, int grad_accum, int prefetch, zs_mem_estimate *out) {
    return zs_mem_estimate_compute_opts(cfg, world, stage, batch, seq, grad_accum, prefetch, NULL,
                                        out);
}

/* ZS_MEM_COMM of one communicator of n ranks on backend be: shm's staging slots and gloo's
 * receive windows, allocated with the communicator; mpi's two fp32 buffers of its largest
 * staged message (src/comm/mpi.c: MPI forbids in-place reduce-scatter, and bf16 is widened),
 * mpi_elems. MPI's and NCCL's own buffers are not allocated through zshard, not counted. */
static uint64_t staging(const char *be, int n, uint64_t mpi_elems) {
    if (n <= 1) return 0;
    if (!strcmp(be, "shm")) return zs_comm_shm_staging_bytes(n);
    if (!strcmp(be, "gloo")) return zs_comm_gloo_staging_bytes(n);
    if (!strcmp(be, "mpi")) return 2 * mpi_elems * sizeof(float);
    return 0;
}

/* The staging of every communicator a run holds. "auto" is shm on one host and gloo across
 * several (opts->nnodes), as zs_comm_create chooses. Flat, the world's communicator does it all:
 * at mpi its staged messages are the in-place reduce-scatters of a unit's gradients (ZeRO-1/2/3)
 * and bf16 all-reduces (DDP), the largest unit the largest. HSDP (G < world) adds its two
 * groups (zs_comm_split's choice: shm for a group on one host, else the world's backend): the
 * shard group reduce-scatters whole units; the replica group all-reduces shards in place,
 * staged at mpi only in bf16; the world carries host values only, which mpi does not stage. */
static uint64_t comm_staging(const zs_mem_options *opts, int world, int G, int stage, int g16,
                             const int64_t *sizes, const zs_layout *l) {
    const char *be = opts->comm && strcmp(opts->comm, "auto") ? opts->comm : getenv("ZS_COMM");
    int hosts = opts->nnodes > 1 ? opts->nnodes : 1;
    if (!be || !*be || !strcmp(be, "auto")) be = hosts > 1 ? "gloo" : "shm";
    uint64_t unit = (uint64_t)sizes[0];
    if (G == world) return staging(be, world, stage >= 1 || g16 ? unit : 0);
    int64_t shard = 0;
    for (int u = 0; u < l->n_units; u++)
        if (l->units[u].shard > shard) shard = l->units[u].shard;
    int nccl = !strcmp(be, "nccl");
    const char *in_group = nccl ? be : G <= world / hosts ? "shm" : be;
    const char *across = nccl ? be : hosts > 1 ? be : "shm";
    return staging(be, world, 0) + staging(in_group, G, unit) +
           staging(across, world / G, g16 ? (uint64_t)shard : 0);
}

zs_status zs_mem_estimate_compute_opts(const zs_model_config *cfg, int world, int stage, int batch,
                                       int seq, int grad_accum, int prefetch,
                                       const zs_mem_options *opts, zs_mem_estimate *out) {
    zs_status st = ZS_OK;
    zs_mem_options defaults = {0};
    if (!opts) opts = &defaults;
    zs_layout l;
    int64_t *sizes = NULL;
    zs_layout_init(&l);
    memset(out, 0, sizeof *out);
    ZS_REQUIRE(world >= 1 && stage >= 0 && stage <= 3 && batch > 0 && seq > 0 && grad_accum > 0 &&
                   prefetch >= 0,
               ZS_ERR_INVALID, "memory estimate: sizes must be positive");
    ZS_REQUIRE(batch % (world * grad_accum) == 0, ZS_ERR_INVALID,
               "--batch %d must divide evenly into %d rank(s) x %d micro-batch(es)", batch, world,
               grad_accum);
    ZS_REQUIRE(seq <= cfg->max_seq, ZS_ERR_INVALID,
               "--seq %d is longer than model %s's %d positions", seq, cfg->name, cfg->max_seq);
    /* HSDP: the state is split over the shard group's G ranks (the world when flat). */
    int G = opts->shard_group > 0 ? opts->shard_group : world;
    ZS_REQUIRE(G <= world && world % G == 0, ZS_ERR_INVALID,
               "--shard-group %d must divide the world size %d", G, world);
    ZS_REQUIRE(G == world || stage >= 1, ZS_ERR_INVALID,
               "--shard-group: ddp replicates everything already; shard within groups with "
               "--stage 1, 2 or 3");
    ZS_CHECK(zs_model_layout(cfg, G, &l));
    ZS_REQUIRE(opts->dtype == ZS_DTYPE_F32 || opts->dtype == ZS_DTYPE_BF16, ZS_ERR_INVALID,
               "memory estimate: compute dtype %s is not fp32 or bf16", zs_dtype_name(opts->dtype));
    ZS_REQUIRE(opts->reduce_dtype == ZS_DTYPE_F32 || opts->reduce_dtype == ZS_DTYPE_BF16,
               ZS_ERR_INVALID, "memory estimate: gradient dtype %s is not fp32 or bf16",
               zs_dtype_name(opts->reduce_dtype));
    int bf16 = opts->dtype == ZS_DTYPE_BF16, g16 = opts->reduce_dtype == ZS_DTYPE_BF16;
    uint64_t P = (uint64_t)l.total_padded * 4, S = P / (uint64_t)G;
    uint64_t *b = out->bytes;
    /* Model states, docs/architecture.md "Memory accounting": exactly what the engine allocates.
     * fp32: one fp32 copy of the parameters serves as master. bf16 compute copy: bf16 params (full,
     * or ZeRO-3's gathered shard) plus an fp32 master of their own (full for DDP, the shard
     * otherwise). Gradients (full or shard) are stored in the reduce dtype. */
    int offload = opts->offload != ZS_OFFLOAD_NONE, hparams = opts->offload == ZS_OFFLOAD_PARAMS;
    ZS_CHECK(zs_offload_check(opts->offload, opts->offload_fraction, stage,
                              !opts->device || strcmp(opts->device, "cuda")));
    /* R: the optimizer range's fp32 bytes; H: those of the offloaded units (whole units,
     * zs_offload_choose's, so the same split as the engine's). */
    uint64_t R = stage == 0 ? P : S, H = 0;
    if (offload) {
        unsigned char *off = malloc((size_t)l.n_units);
        ZS_REQUIRE(off, ZS_ERR_OOM, "memory estimate: out of memory");
        zs_offload_choose(&l, opts->offload_fraction, off);
        for (int u = 0; u < l.n_units; u++)
            if (off[u]) H += (uint64_t)(stage == 0 ? l.units[u].padded : l.units[u].shard) * 4;
        free(off);
    }
    b[ZS_MEM_PARAM] = stage == 3 ? 0 : bf16 ? P / 2 : P;
    /* --offload params (ZeRO-3): the offloaded units' shards that the GPU would gather from
     * stay on the host (fp32: the master itself; bf16: a rounded copy beside it). */
    uint64_t HP = hparams ? H : 0;
    if (bf16)
        b[ZS_MEM_PARAM_SHARD] = (R - H) + (stage == 3 ? (S - HP) / 2 : 0);
    else
        b[ZS_MEM_PARAM_SHARD] = stage == 3 ? S - HP : 0;
    b[ZS_MEM_GRAD] = stage <= 1 ? (g16 ? P / 2 : P) : 0;
    b[ZS_MEM_GRAD_SHARD] = stage >= 2 ? (g16 ? S / 2 : S) : 0;
    b[ZS_MEM_OPTIM_STATE] = 2 * (R - H);
    /* Offload (src/shard/engine_offload.c): the master, m and v of the offloaded units' range in
     * pinned host memory, and their gradients beside them in the reduce dtype. */
    out->host_bytes[ZS_MEM_PARAM_SHARD] = H + (bf16 ? HP / 2 : 0);
    out->host_bytes[ZS_MEM_OPTIM_STATE] = 2 * H;
    out->host_bytes[ZS_MEM_GRAD_SHARD] = g16 ? H / 2 : H;
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        out->host_total += out->host_bytes[c];
    /* Pools: ZeRO-3 gathers (prefetch + 1) units; ZeRO-2/3 hold 2 fp32 unit gradients plus
     * one per tied unit. With bf16 gradients every stage holds 1 fp32 unit gradient plus one
     * per tied unit, and ZeRO-2/3 2 bf16 copies being reduced. Slots are sized by the largest
     * units in decreasing order. */
    sizes = malloc((size_t)l.n_units * sizeof *sizes);
    ZS_REQUIRE(sizes, ZS_ERR_OOM, "memory estimate: out of memory");
    int tied = 0;
    for (int u = 0; u < l.n_units; u++) {
        sizes[u] = l.units[u].padded;
        tied += l.units[u].n_uses > 1;
    }
    qsort(sizes, (size_t)l.n_units, sizeof *sizes, cmp_desc);
    if (stage == 3) /* ZeRO-3 gathers compute-dtype elements */
        for (int i = 0; i <= prefetch; i++)
            b[ZS_MEM_GATHERED] +=
                (uint64_t)sizes[i < l.n_units ? i : l.n_units - 1] * (bf16 ? 2 : 4);
    if (bf16) b[ZS_MEM_GATHERED] += (uint64_t)sizes[0] * 4; /* the unit widened to fp32 */
    int gslots = g16 ? 1 + tied : stage >= 2 ? 2 + tied : 0;
    int rslots = g16 && stage >= 2 ? 2 : 0;
    for (int i = 0; i < gslots; i++)
        b[ZS_MEM_GATHERED] += (uint64_t)sizes[i < l.n_units ? i : l.n_units - 1] * 4;
    for (int i = 0; i < rslots; i++)
        b[ZS_MEM_GATHERED] += (uint64_t)sizes[i < l.n_units ? i : l.n_units - 1] * 2;
    int micro = batch / (world * grad_accum);
    int host = !opts->device || strcmp(opts->device, "cuda"); /* device memory is host memory */
    zs_model_options mo = {
        .recompute = opts->recompute, .act_dtype = opts->dtype, .attention = opts->attention};
    b[ZS_MEM_ACTIVATION] = zs_model_activation_bytes(cfg, &mo, micro, seq);
    /* Logits and activation gradients, and the batch's tokens (with their host staging where
     * that is the device's memory) and loss sums. */
    b[ZS_MEM_WORKSPACE] =
        zs_model_workspace_bytes(cfg, &mo, micro, seq) +
        zs_trainer_io_bytes(micro, seq, grad_accum, host, zs_trainer_io_masks(opts->docs));
    if (g16) b[ZS_MEM_WORKSPACE] += 2 * ZS_ENGINE_CAST_CHUNK * sizeof(float);
    if (!host) {
        /* A GPU's reductions (gradient norm, loss) keep their chunk sums in a scratch of the
         * compute stream that grows to a power of two (>= 64 doubles) covering the largest
         * one: a gradient shard (fp32, or bf16 by cast chunks of whole pieces), a
         * micro-batch's losses, or a layer norm backward's column partials. */
        uint64_t most = (uint64_t)micro * seq, need = 64;
        for (int u = 0; u < l.n_units; u++) {
            uint64_t n = (uint64_t)l.units[u].shard;
            if (g16)
                n = (n + ZS_ENGINE_CAST_CHUNK - 1) / ZS_ENGINE_CAST_CHUNK * ZS_ENGINE_CAST_CHUNK;
            if (n > most) most = n;
        }
        uint64_t chunks = (most + ZS_SUMSQ_CHUNK - 1) / ZS_SUMSQ_CHUNK,
                 norms = zs_model_gpu_scratch_doubles(cfg, micro * seq);
        if (norms > chunks) chunks = norms; /* layer norm's backward: its column partials */
        while (need < chunks)
            need *= 2;
        b[ZS_MEM_WORKSPACE] += need * sizeof(double);
        /* A bf16 run's GEMMs round their operands to bf16 in a scratch of the compute stream
         * that grows to a power of two (>= 64 elements) covering the largest cast (backend/
         * ops.h ZS_GEMM_CAST_MAX): the most any linear layer of a step asks. */
        zs_linear_dims lin[ZS_MODEL_MAX_LINEARS];
        int nl = bf16 ? zs_model_linears(cfg, &mo, lin) : 0;
        uint64_t cast = 0;
        for (int i = 0; i < nl; i++) {
            const zs_linear_dims *d = &lin[i];
            int N = micro * seq, gb = d->g16; /* the layer's output gradient in bf16 */
            if (gb == ZS_LINEAR_G16_FIT)      /* as zs_linear_bwd16_ok decides */
                gb = zs_linear_bwd_cast_elems(N, d->IC, d->OC, d->in16, 0) &&
                     zs_linear_bwd_cast_elems(N, d->OC, d->IC, d->in16, 0);
            uint64_t e = zs_linear_cast_elems(N, d->IC, d->OC, d->in16, d->dout16, gb);
            if (e > cast) cast = e;
        }
        if (cast) {
            uint64_t want = 64;
            while (want < cast)
                want *= 2;
            b[ZS_MEM_WORKSPACE] += want * sizeof(uint16_t);
        }
    }
    /* The communicators' staging (comm_staging); on a GPU it is host memory. */
    if (host) b[ZS_MEM_COMM] = comm_staging(opts, world, G, stage, g16, sizes, &l);
    /* The engine's own scratch: host values through collectives, gradient-norm partial sums. */
    uint64_t xc = 0, xw = 0;
    zs_engine_scratch_bytes(&l, world, opts->reduce_dtype, &xc, &xw);
    b[ZS_MEM_COMM] += xc;
    b[ZS_MEM_WORKSPACE] += xw;
    for (int c = ZS_MEM_PARAM; c <= ZS_MEM_OPTIM_STATE; c++)
        out->model_states += b[c];
    for (int c = 0; c < ZS_MEM_NCAT; c++)
        out->total += b[c];
    out->params = l.total_params;
    out->padded = l.total_padded;
fail:
    free(sizes);
    zs_layout_free(&l);
    return st;
}

/* Total per rank for one variant, or UINT64_MAX when it is not a valid configuration. */
static uint64_t variant_total(const zs_model_config *cfg, int world, int stage, int batch, int seq,
                              int accum, int prefetch, const zs_mem_options *opts) {
    zs_mem_estimate e;
    if (batch % (world * accum)) return UINT64_MAX;
    if (zs_mem_estimate_compute_opts(cfg, world, stage, batch, seq, accum, prefetch, opts, &e) !=
        ZS_OK)
        return UINT64_MAX;
    return e.total;
}

/* Append "; <flags> (<total> per rank)" (no leading "; " for the first). */
static void add_hint(char *out, size_t n, const char *flags, uint64_t total) {
    char b[32];
    size_t len = strlen(out);
    zs_format_bytes(total, b, sizeof b);
    snprintf(out + len, n > len ? n - len : 0, "%s%s (%s per rank)", len ? "; " : "", flags, b);
}

void zs_mem_fit_hint(const zs_model_config *cfg, int world, int stage, int batch, int seq,
                     int accum, int prefetch, const zs_mem_options *opts, uint64_t cap, char *out,
                     size_t n) {
    zs_mem_options o = opts ? *opts : (zs_mem_options){0};
    char flags[160];
    uint64_t t;
    if (!n) return;
    out[0] = 0;
    if (variant_total(cfg, world, stage, batch, seq, accum, prefetch, &o) <= cap) return;
    if (o.recompute == ZS_RECOMPUTE_NONE) {
        zs_mem_options r = o;
        r.recompute = ZS_RECOMPUTE_BLOCK;
        if ((t = variant_total(cfg, world, stage, batch, seq, accum, prefetch, &r)) <= cap)
            add_hint(out, n, "--recompute block", t);
    }
    /* Smaller micro-batches: the same global batch in more, smaller steps; with recompute too
     * when neither fits alone. */
    for (int both = 0; both < 2; both++) {
        zs_mem_options r = o;
        if (both) {
            if (out[0] || o.recompute == ZS_RECOMPUTE_BLOCK) break;
            r.recompute = ZS_RECOMPUTE_BLOCK;
        }
        for (int k = accum * 2; world * k <= batch; k *= 2) {
            if ((t = variant_total(cfg, world, stage, batch, seq, k, prefetch, &r)) <= cap) {
                snprintf(flags, sizeof flags, "%s--grad-accum %d (micro-batch %d)",
                         both ? "--recompute block " : "", k, batch / (world * k));
                add_hint(out, n, flags, t);
                break;
            }
        }
    }
    for (int s = stage + 1; s <= 3; s++) {
        if ((t = variant_total(cfg, world, s, batch, seq, accum, prefetch, &o)) <= cap) {
            snprintf(flags, sizeof flags, "--stage %s",
                     s == 0   ? "ddp"
                     : s == 1 ? "1"
                     : s == 2 ? "2"
                              : "3");
            add_hint(out, n, flags, t);
            break;
        }
    }
    /* A GPU's optimizer state on the host (docs/sharding.md "Offload"). */
    if (o.offload == ZS_OFFLOAD_NONE && o.device && !strcmp(o.device, "cuda")) {
        zs_mem_options r = o;
        r.offload = ZS_OFFLOAD_OPTIMIZER;
        /* the smallest share, in twentieths, that fits: what stays on the GPU runs its step
         * there */
        int fit = 0;
        for (int k = 1; k <= 20 && !fit; k++) {
            r.offload_fraction = k / 20.0;
            if ((t = variant_total(cfg, world, stage, batch, seq, accum, prefetch, &r)) > cap)
                continue;
            fit = 1;
            if (k == 20)
                add_hint(out, n, "--offload optimizer", t);
            else {
                snprintf(flags, sizeof flags, "--offload optimizer --offload-fraction %.2f",
                         k / 20.0);
                add_hint(out, n, flags, t);
            }
        }
        r.offload = ZS_OFFLOAD_PARAMS; /* ZeRO-3's parameter shard too */
        r.offload_fraction = 0;
        if (!fit && stage == 3 &&
            (t = variant_total(cfg, world, stage, batch, seq, accum, prefetch, &r)) <= cap)
            add_hint(out, n, "--offload params", t);
    }
    /* More ranks at ZeRO-3 (the global batch rounded up to divide, as the user would). */
    for (int w = world * 2; w <= 4096; w *= 2) {
        int b = batch % (w * accum) ? w * accum : batch;
        if ((t = variant_total(cfg, w, 3, b, seq, accum, prefetch, &o)) <= cap) {
            snprintf(flags, sizeof flags, "--stage 3 --nproc %d%s", w,
                     b != batch ? " (with --batch a multiple of the ranks)" : "");
            add_hint(out, n, flags, t);
            break;
        }
    }
    if (out[0]) return;
    zs_mem_options r = o;
    r.recompute = ZS_RECOMPUTE_BLOCK;
    for (int w = world; w <= 4096; w *= 2) {
        int b = (batch + w - 1) / w * w; /* one sequence per rank per micro-batch */
        if ((t = variant_total(cfg, w, 3, b, seq, b / w, prefetch, &r)) <= cap) {
            snprintf(flags, sizeof flags,
                     "--stage 3 --recompute block --nproc %d --grad-accum %d (micro-batch 1%s)", w,
                     b / w, b != batch ? ", --batch rounded up" : "");
            add_hint(out, n, flags, t);
            return;
        }
    }
    snprintf(out, n, "nothing (not even ZeRO-3 with --recompute block on 4096 ranks)");
}

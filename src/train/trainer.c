/* The training loop's engine room behind the public zs_trainer API: data -> model
 * forward/backward over micro-batches -> shard engine step -> metrics. Progress display and
 * logging live in the CLI. */
#include "zshard.h"

#include "backend/cuda_device.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "comm/env.h"
#include "core/alloc.h"
#include "core/philox.h"
#include "core/status.h"
#include "core/timer.h"
#include "data/data.h"
#include "models/model.h"
#include "optim/optim.h"
#include "shard/module.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_SAMPLE 0x73616d70ull /* "samp" */

zs_train_config zs_train_config_default(void) {
    zs_train_config c;
    memset(&c, 0, sizeof c);
    zs_model_preset("gpt2-tiny", &c.model);
    c.val_fraction = 0.1;
    c.batch = 8;
    c.seq = 64;
    c.steps = 100;
    c.grad_accum = 1;
    c.lr = 1e-3f;
    c.min_lr_frac = 0.1f;
    c.warmup = 10;
    c.weight_decay = 0.1f;
    c.beta1 = 0.9f;
    c.beta2 = 0.95f;
    c.eps = 1e-8f;
    c.grad_clip = 1.0f;
    c.module = zs_module_config_default(); /* ddp, prefetch 1, fp32, seed 1337 */
    c.eos_id = -1;
    c.pad_id = -1;
    return c;
}

static zs_status validate(const zs_train_config *c, int world) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(c->batch > 0, ZS_ERR_INVALID, "--batch must be positive (got %d)", c->batch);
    ZS_REQUIRE(c->seq > 0, ZS_ERR_INVALID, "--seq must be positive (got %d)", c->seq);
    ZS_REQUIRE(c->steps > 0 || (c->steps == 0 && c->epochs > 0), ZS_ERR_INVALID,
               "--steps must be positive (got %d)", c->steps);
    ZS_REQUIRE(c->epochs >= 0, ZS_ERR_INVALID, "--epochs must be >= 0 (got %d)", c->epochs);
    ZS_REQUIRE(c->docs >= ZS_DOCS_NONE && c->docs <= ZS_DOCS_PAD, ZS_ERR_INVALID,
               "docs mode %d is not none, pack, concat or pad", (int)c->docs);
    ZS_REQUIRE(c->grad_accum > 0, ZS_ERR_INVALID, "--grad-accum must be positive (got %d)",
               c->grad_accum);
    ZS_REQUIRE(c->lr > 0 && isfinite(c->lr), ZS_ERR_INVALID, "--lr must be positive");
    ZS_REQUIRE(c->warmup >= 0, ZS_ERR_INVALID, "--warmup must be >= 0 (got %d)", c->warmup);
    ZS_REQUIRE(c->batch % (world * c->grad_accum) == 0, ZS_ERR_INVALID,
               "--batch %d must divide evenly into %d rank(s) x %d micro-batch(es)", c->batch,
               world, c->grad_accum);
    ZS_REQUIRE(c->module.param_dtype == ZS_DTYPE_F32 || c->module.param_dtype == ZS_DTYPE_BF16,
               ZS_ERR_INVALID, "--dtype %s: only fp32 and bf16 are compute dtypes",
               zs_dtype_name(c->module.param_dtype));
    ZS_REQUIRE(c->module.grad_dtype == ZS_DTYPE_F32 || c->module.grad_dtype == ZS_DTYPE_BF16,
               ZS_ERR_INVALID, "--reduce-dtype %s: only fp32 and bf16 are gradient dtypes",
               zs_dtype_name(c->module.grad_dtype));
    ZS_REQUIRE(c->recompute == ZS_RECOMPUTE_NONE || c->recompute == ZS_RECOMPUTE_BLOCK,
               ZS_ERR_INVALID, "recompute mode %d is not none or block", (int)c->recompute);
    ZS_REQUIRE(c->attention == ZS_ATTENTION_FLASH || c->attention == ZS_ATTENTION_NAIVE,
               ZS_ERR_INVALID, "attention kernel %d is not flash or naive", (int)c->attention);
    ZS_REQUIRE(c->seq <= c->model.max_seq, ZS_ERR_INVALID,
               "--seq %d is longer than model %s's %d positions", c->seq, c->model.name,
               c->model.max_seq);
fail:
    return st;
}

static const char *stage_flag(int s) {
    static const char *names[] = {"ddp", "1", "2", "3"};
    return names[s];
}

/* Refuse a configuration that cannot fit under --device-mem before allocating anything, and
 * say which categories dominate and which stage or world size would fit. */
static zs_status check_fit(const zs_trainer_t *t, const zs_train_config *c) {
    zs_mem_estimate est;
    zs_mem_options mo = {.recompute = c->recompute,
                         .attention = c->attention,
                         .dtype = c->module.param_dtype,
                         .reduce_dtype = c->module.grad_dtype,
                         .comm = c->comm,
                         .device = t->device,
                         .docs = c->docs,
                         .offload = c->module.offload,
                         .offload_fraction = c->module.offload_fraction,
                         .shard_group = t->shard < t->world ? t->shard : 0, /* 0: flat */
                         .nnodes = t->nnodes};
    zs_status st =
        zs_mem_estimate_compute_opts(&t->model_cfg, t->world, c->module.stage, c->batch, c->seq,
                                     c->grad_accum, c->module.prefetch, &mo, &est);
    if (st != ZS_OK || est.total <= c->device_mem) return st;
    zs_mem_stats fake;
    memset(&fake, 0, sizeof fake);
    memcpy(fake.current, est.bytes, sizeof est.bytes);
    char need[32], cap[32], brk[400], hint[512] = "";
    zs_format_bytes(est.total, need, sizeof need);
    zs_format_bytes(c->device_mem, cap, sizeof cap);
    zs_mem_format_breakdown(&fake, 0, brk, sizeof brk);
    zs_mem_fit_hint(&t->model_cfg, t->world, c->module.stage, c->batch, c->seq, c->grad_accum,
                    c->module.prefetch, &mo, c->device_mem, hint, sizeof hint);
    return zs_error(ZS_ERR_OOM,
                    "%s at stage %s on %d rank%s needs about %s per rank (%s), over --device-mem "
                    "%s; would fit: %s",
                    t->model_cfg.name, stage_flag(c->module.stage), t->world,
                    t->world > 1 ? "s" : "", need, brk, cap, hint);
}

/* Bytes of memory the host can still give (MemAvailable), or 0 when unknown. */
static uint64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* --offload: the pinned host memory every rank on this host will hold must be there, or the run
 * stops before allocating any of it, naming the shortfall. */
static zs_status check_host_fit(const zs_trainer_t *t, const zs_train_config *c) {
    zs_status st = ZS_OK;
    zs_mem_estimate est;
    zs_mem_options mo = {.dtype = c->module.param_dtype,
                         .reduce_dtype = c->module.grad_dtype,
                         .device = t->device,
                         .offload = c->module.offload,
                         .offload_fraction = c->module.offload_fraction,
                         .shard_group = t->shard < t->world ? t->shard : 0, /* 0: flat */
                         .nnodes = t->nnodes};
    ZS_CHECK(zs_mem_estimate_compute_opts(&t->model_cfg, t->world, c->module.stage, c->batch,
                                          c->seq, c->grad_accum, c->module.prefetch, &mo, &est));
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    int local = lw && atoi(lw) > 0 ? atoi(lw) : 1;
    uint64_t need = est.host_total * (uint64_t)local, have = host_available();
    char a[32], b[32], h[32];
    zs_format_bytes(est.host_total, a, sizeof a);
    zs_format_bytes(need, b, sizeof b);
    zs_format_bytes(have, h, sizeof h);
    ZS_REQUIRE(
        !have || need <= have, ZS_ERR_OOM,
        "--offload %s: %s at stage %s on %d rank%s needs %s of pinned host memory "
        "per rank, %s for the %d rank%s on this host, and it has %s available "
        "(MemAvailable): shard the state over more ranks (--stage 1, 2 or 3 divide it by the world "
        "size) on more hosts, or offload on fewer ranks per host",
        zs_offload_name(c->module.offload), t->model_cfg.name,
        stage_flag(c->module.stage), t->world, t->world > 1 ? "s" : "", a, b, local,
        local > 1 ? "s" : "", h);
fail:
    return st;
}

zs_status zs_trainer_create(const zs_train_config *cfg, zs_trainer_t **out) {
    zs_status st = ZS_OK;
    zs_trainer_t *t = NULL;
    zs_units_t *units = NULL;
    const zs_ops *ops = NULL;
    *out = NULL;
    t = calloc(1, sizeof *t);
    ZS_REQUIRE(t, ZS_ERR_OOM, "trainer: out of memory");
    t->cfg = *cfg;

    /* The device before anything else: asking for one that cannot be had is one clear error.
     * Its tables decide the memory ledger the cap and the reports use. */
    ZS_CHECK(zs_device_choose(cfg->module.device, &t->device, t->device_why, sizeof t->device_why));
    ZS_CHECK(zs_backend_select(t->device, &ops, &t->dev));
    /* Join the job first: a world of one needs no environment and no communicator. */
    zs_comm_config cc = zs_comm_config_default();
    if (cfg->comm) ZS_CHECK(zs_comm_backend_parse(cfg->comm, &cc.backend));
    if (cfg->comm_timeout_s > 0) cc.timeout_s = cfg->comm_timeout_s;
    cc.gpu_buffers = !t->dev->host_memory; /* "auto" then prefers nccl (comm.c) */
    zs_comm_env env;
    ZS_CHECK(zs_comm_env_read(&cc, &env));
    t->rank = 0;
    t->world = 1;
    if (env.world_size > 1) { /* else "comm local", and no backend is set up to say otherwise */
        ZS_CHECK(zs_comm_create(&cc, &t->comm));
        t->rank = zs_comm_rank(t->comm);
        t->world = zs_comm_world_size(t->comm);
    }
    ZS_CHECK(validate(cfg, t->world));
    {
        int local = t->comm ? zs_comm_local_world_size(t->comm) : 1;
        ZS_CHECK(zs_mesh_shard_group(&cfg->module, t->world, local, &t->shard));
        t->nnodes = t->world % local ? 1 : t->world / local;
    }
    t->micro = cfg->batch / (t->world * cfg->grad_accum);
    if (cfg->device_mem) {
        zs_mem_stats ms;
        zs_mem_get_stats(&ms);
        t->cap_before = ms.cap;
        t->cap_set = 1;
        zs_mem_set_cap(cfg->device_mem);
    }

    zs_docs_meta meta;
    ZS_CHECK(zs_docs_meta_read(cfg->data_path, &meta));
    if (cfg->data_path) {
        /* A tokenizer's dataset.json says the vocabulary; --vocab (or the model of
         * --init-from) must then agree with it. */
        int vocab = cfg->vocab ? cfg->vocab : meta.vocab;
        ZS_REQUIRE(!meta.found || vocab == meta.vocab, ZS_ERR_INVALID,
                   "--data %s: %s says vocab_size %d, but this run has vocabulary %d (--vocab, or "
                   "the model it starts from): the ids would mean other tokens",
                   cfg->data_path, meta.path, meta.vocab, vocab);
        ZS_CHECK(zs_dataset_open_vocab(cfg->data_path, cfg->val_path, cfg->val_fraction, vocab,
                                       &t->data));
        t->has_data = 1;
        ZS_CHECK(zs_trainer_docs_setup(t, &meta));
        ZS_CHECK(zs_dataset_check(&t->data, cfg->seq));
    } else {
        /* No data file: batches come from memory (zs_trainer_step_batch), or there are none
         * (generation). The vocabulary is cfg->vocab, else the model's; 256 means bytes. */
        int v = cfg->vocab > 0 ? cfg->vocab : cfg->model.vocab > 0 ? cfg->model.vocab : 50257;
        ZS_REQUIRE(v > 0 && v < (1 << 24), ZS_ERR_INVALID, "trainer: vocab %d", v);
        t->data.vocab = v;
        t->data.is_text = v == 256;
        ZS_CHECK(zs_trainer_docs_setup(t, &meta));
    }
    t->model_cfg = cfg->model;
    zs_model_config_set_vocab(&t->model_cfg, t->data.vocab);
    ZS_CHECK(zs_model_layout(&t->model_cfg, t->shard, &t->layout));
    if (cfg->device_mem) ZS_CHECK(check_fit(t, cfg));
    if (cfg->module.offload && t->device && !strcmp(t->device, "cuda"))
        ZS_CHECK(check_host_fit(t, cfg));

    /* The model's units go through the public sharding API like anyone's. */
    /* The module reads its part of the settings as given; only the device ("auto" chosen) and
     * the name (the model's) are the trainer's to fill in. */
    zs_module_config mc = cfg->module;
    mc.name = t->model_cfg.name;
    mc.device = t->device;
    mc.shard_group = t->shard; /* resolved: "host" and --replicate say it once */
    mc.replicate = 0;
    ZS_CHECK(zs_units_from_layout(&t->layout, &units));
    ZS_CHECK(zs_module_create(units, t->comm, &mc, &t->engine));
    if (t->shard < t->world) {
        char groups[560];
        zs_module_mesh_text(t->engine, groups, sizeof groups);
        snprintf(t->mesh, sizeof t->mesh, "%d replicas x shard groups of %d ranks; %s",
                 t->world / t->shard, t->shard, groups);
    }
    /* The model computes where the module keeps its parameters, on its stream. */
    t->ops = zs_module_ops(t->engine);
    t->stream = zs_module_stream(t->engine);
    zs_model_options mo = {.recompute = cfg->recompute,
                           .act_dtype = cfg->module.param_dtype,
                           .attention = cfg->attention};
    ZS_CHECK(zs_model_create_opts(&t->model_cfg, &mo, t->ops, t->stream, t->engine, t->micro,
                                  cfg->seq, &t->model));
    ZS_CHECK(zs_trainer_io_create(t));
    zs_units_destroy(units);
    *out = t;
    return ZS_OK;
fail:
    zs_units_destroy(units);
    zs_trainer_destroy(t);
    return st;
}

void zs_trainer_destroy(zs_trainer_t *t) {
    if (!t) return;
    zs_trainer_io_destroy(t);
    zs_trainer_docs_free(t);
    zs_model_destroy(t->model);
    zs_module_destroy(t->engine);
    zs_layout_free(&t->layout);
    zs_dataset_close(&t->data);
    zs_comm_destroy(t->comm);
    if (t->cap_set) zs_mem_set_cap(t->cap_before);
    free(t->run_config);
    free(t);
}

zs_status zs_trainer_step(zs_trainer_t *t, zs_step_stats *stats) {
    if (!t->has_data)
        return zs_error(ZS_ERR_INVALID, "trainer: no data_path was given: feed batches with "
                                        "zs_trainer_step_batch");
    return zs_trainer_step_rows(t, NULL, NULL, stats);
}

zs_status zs_trainer_step_rows(zs_trainer_t *t, const int32_t *tokens, const int32_t *targets,
                               zs_step_stats *stats) {
    zs_status st = ZS_OK;
    const zs_train_config *c = &t->cfg;
    double t0 = zs_now_s();
    int step = t->step + 1;
    /* Every token of the global batch carries weight 1/(B*T): summed over micro-batches (and
     * later over ranks) the gradients are exactly the global mean. With documents the weight
     * is 1 / (the real targets of the global batch), which every rank counts alike from the
     * step's samples: padding and left-out targets weigh nothing, and ranks holding fewer
     * real targets still give the global mean. */
    double count = (double)c->batch * c->seq;
    float dloss = 1.0f / ((float)c->batch * (float)c->seq);
    if (c->docs != ZS_DOCS_NONE && !tokens) {
        count = (double)zs_trainer_docs_targets(t, step);
        dloss = count > 0 ? 1.0f / (float)count : 0.0f;
    }
    double loss_sum = 0.0;
    size_t n = (size_t)t->micro * c->seq;
    zs_adamw_config h = {
        .lr = t->lr_override > 0 ? t->lr_override
                                 : zs_lr_schedule(step, c->steps, c->warmup, c->lr, c->min_lr_frac),
        .beta1 = c->beta1,
        .beta2 = c->beta2,
        .eps = c->eps,
        .weight_decay = c->weight_decay,
        .grad_clip = c->grad_clip,
    };
    ZS_CHECK(zs_module_zero_grad(t->engine));
    /* Offloaded without a clip: the host steps each unit as its gradients come down. */
    ZS_CHECK(zs_module_step_ahead(t->engine, &h));
    int per_rank = c->batch / t->world;
    for (int k = 0; k < c->grad_accum; k++) {
        int first = t->rank * per_rank + k * t->micro;
        int32_t *in = NULL, *tg = NULL;
        ZS_CHECK(zs_module_micro_begin(t->engine, k, c->grad_accum));
        ZS_CHECK(zs_trainer_io_next(t, &in, &tg));
        if (tokens) { /* the caller's rows of this rank, micro-batch k */
            memcpy(in, tokens + (size_t)k * n, n * sizeof *in);
            memcpy(tg, targets + (size_t)k * n, n * sizeof *tg);
        } else if (c->docs != ZS_DOCS_NONE) {
            ZS_CHECK(zs_trainer_docs_fill(t, step, first, in, tg, zs_trainer_io_seg(t)));
        } else {
            zs_batch_train(&t->data, c->module.seed, step, c->batch, c->seq, first, t->micro, in,
                           tg);
        }
        ZS_CHECK(zs_trainer_io_pass(t, t->micro, c->seq, dloss, 1, k));
    }
    float norm = 0.0f;
    ZS_CHECK(zs_module_step(t->engine, &h, &norm));
    ZS_CHECK(zs_trainer_io_losses(t, c->grad_accum, &loss_sum));
    ZS_CHECK(zs_module_allsum(t->engine, loss_sum, &loss_sum));
    t->step = step;
    double ms = (zs_now_s() - t0) * 1e3;
    if (stats) {
        stats->step = step;
        stats->loss = count > 0 ? (float)(loss_sum / count) : 0.0f;
        stats->lr = h.lr;
        stats->grad_norm = norm;
        stats->ms = ms;
        stats->tokens_per_s = (double)c->batch * c->seq / (ms * 1e-3);
        stats->targets = (int64_t)count;
    }
fail:
    return st;
}

zs_status zs_trainer_eval(zs_trainer_t *t, int n_batches, float *loss) {
    zs_status st = ZS_OK;
    ZS_REQUIRE(t->has_data, ZS_ERR_INVALID,
               "trainer: no data_path was given: evaluate with zs_trainer_eval_batch");
    const zs_train_config *c = &t->cfg;
    double sum = 0.0, part = 0.0, count = 0.0;
    int per_rank = c->batch / t->world;
    int64_t windows = zs_trainer_val_windows(t);
    /* The split once at most: later batches would only hold empty rows. */
    if (n_batches > zs_trainer_val_batches(t)) n_batches = zs_trainer_val_batches(t);
    for (int k = 0; k < n_batches; k++) {
        for (int j = 0; j < c->grad_accum; j++) {
            int first = t->rank * per_rank + j * t->micro;
            int32_t *in = NULL, *tg = NULL;
            ZS_CHECK(zs_trainer_io_next(t, &in, &tg));
            if (c->docs != ZS_DOCS_NONE)
                zs_trainer_docs_val_fill(t, k, first, in, tg, zs_trainer_io_seg(t));
            else
                zs_batch_val(&t->data, k, c->batch, c->seq, first, t->micro, in, tg);
            ZS_CHECK(zs_trainer_io_pass(t, t->micro, c->seq, 0.0f, 0, j));
        }
        /* One running sum over every micro-batch in order: the same bits on every device. */
        ZS_CHECK(zs_trainer_io_losses(t, c->grad_accum, &part));
        for (int j = 0; j < c->grad_accum; j++)
            sum += t->h_loss[j];
        int64_t rows = windows - (int64_t)k * c->batch; /* real rows of this batch */
        count += c->docs != ZS_DOCS_NONE ? (double)zs_trainer_docs_val_targets(t, k)
                                         : (double)(rows < c->batch ? rows : c->batch) * c->seq;
    }
    ZS_CHECK(zs_module_allsum(t->engine, sum, &sum));
    /* The mean over the real targets of every batch (all of them without documents). */
    *loss = count > 0 ? (float)(sum / count) : 0.0f;
    t->eval_batches = n_batches;
    t->eval_targets = (int64_t)count;
fail:
    return st;
}

static int sample_row(const float *logits, int V, float temperature, uint64_t seed, uint64_t idx) {
    if (temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    double mx = logits[0], sum = 0.0;
    for (int i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int i = 0; i < V; i++)
        sum += exp((logits[i] - mx) / temperature);
    double u = (double)(zs_philox_u64(seed, STREAM_SAMPLE, idx) >> 11) * 0x1p-53 * sum;
    double acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += exp((logits[i] - mx) / temperature);
        if (u < acc) return i;
    }
    return V - 1;
}

zs_status zs_trainer_sample(zs_trainer_t *t, const char *prompt, int n_tokens, float temperature,
                            uint64_t seed, char *out, size_t cap) {
    zs_status st = ZS_OK;
    const int T = t->cfg.seq, V = t->model_cfg.vocab, Vp = t->model_cfg.padded_vocab;
    int32_t *ctx = NULL;
    float *row = NULL;
    size_t len = 0;
    ZS_REQUIRE(cap > 0, ZS_ERR_INVALID, "sample: output buffer is empty");
    out[0] = '\0';
    int n_prompt = prompt ? (int)strlen(prompt) : 0;
    int total = (n_prompt ? n_prompt : 1) + n_tokens;
    ctx = malloc((size_t)total * sizeof *ctx);
    ZS_REQUIRE(ctx, ZS_ERR_OOM, "sample: out of memory");
    int n = 0;
    if (t->data.is_text && n_prompt)
        for (; n < n_prompt; n++)
            ctx[n] = (unsigned char)prompt[n];
    else
        ctx[n++] = t->data.is_text ? '\n' : 50256; /* GPT-2's <|endoftext|> */
    row = malloc((size_t)Vp * sizeof *row);
    ZS_REQUIRE(row, ZS_ERR_OOM, "sample: out of memory");
    for (int i = 0; i < n_tokens; i++) {
        int win = n < T ? n : T;
        const float *logits = NULL;
        int32_t *in = NULL, *unused = NULL;
        ZS_CHECK(zs_trainer_io_next(t, &in, &unused));
        memcpy(in, ctx + n - win, (size_t)win * sizeof *in);
        ZS_CHECK(zs_trainer_io_upload(t, 1, win, 0));
        ZS_CHECK(zs_model_infer(t->model, t->d_in, 1, win, &logits));
        /* Only the last position's logits come back. */
        ZS_CHECK(t->dev->copy_d2h(t->stream, row, logits + (size_t)(win - 1) * Vp,
                                  (size_t)Vp * sizeof *row));
        ZS_CHECK(t->dev->stream_sync(t->stream));
        int next = sample_row(row, V, temperature, seed, (uint64_t)i);
        ctx[n++] = next;
        if (t->data.is_text) {
            if (len + 1 < cap) out[len++] = (char)next;
        } else {
            int w = snprintf(out + len, cap - len, "%s%d", i ? " " : "", next);
            if (w > 0) len = len + (size_t)w < cap ? len + (size_t)w : cap - 1;
        }
        out[len] = '\0';
    }
fail:
    free(ctx);
    free(row);
    return st;
}

zs_status zs_trainer_param_hash(zs_trainer_t *t, uint64_t *hash) {
    return zs_module_param_hash(t->engine, hash);
}

zs_status zs_trainer_dump_params(zs_trainer_t *t, const char *path) {
    zs_status st = ZS_OK;
    FILE *f = NULL;
    float *buf = NULL;
    if (t->rank == 0) {
        f = fopen(path, "wb");
        ZS_REQUIRE(f, ZS_ERR_IO, "parameter dump %s: cannot open for writing", path);
    }
    for (int i = 0; i < t->layout.n_tensors; i++) {
        const zs_tensor_desc *td = &t->layout.tensors[i];
        float *nb = realloc(buf, (size_t)td->count * sizeof *nb);
        ZS_REQUIRE(nb, ZS_ERR_OOM, "parameter dump: out of memory");
        buf = nb;
        ZS_CHECK(zs_module_get_param(t->engine, td->name, buf, (size_t)td->count));
        ZS_REQUIRE(!f || fwrite(buf, 4, (size_t)td->count, f) == (size_t)td->count, ZS_ERR_IO,
                   "parameter dump: write failed at tensor %s", td->name);
    }
    if (f) {
        int bad = fclose(f);
        f = NULL;
        ZS_REQUIRE(!bad, ZS_ERR_IO, "parameter dump %s: write failed", path);
    }
fail:
    if (f) fclose(f);
    free(buf);
    return st;
}

zs_status zs_trainer_any(zs_trainer_t *t, int flag, int *any) {
    double sum = flag ? 1.0 : 0.0;
    zs_status st = t->world > 1 ? zs_module_allsum(t->engine, sum, &sum) : ZS_OK;
    *any = st == ZS_OK && sum > 0.0;
    return st;
}

int zs_trainer_rank(const zs_trainer_t *t) {
    return t->rank;
}

int zs_trainer_world_size(const zs_trainer_t *t) {
    return t->world;
}

int zs_trainer_shard_group(const zs_trainer_t *t) {
    return t->shard;
}

int zs_trainer_nnodes(const zs_trainer_t *t) {
    return t->nnodes;
}

const char *zs_trainer_mesh(const zs_trainer_t *t) {
    return t->mesh;
}

const char *zs_trainer_comm_name(const zs_trainer_t *t) {
    return t->comm ? zs_comm_backend_name(zs_comm_get_backend(t->comm)) : "local";
}

const char *zs_trainer_comm_reason(const zs_trainer_t *t) {
    return t->comm ? zs_comm_backend_reason(t->comm) : "";
}

const char *zs_trainer_device(const zs_trainer_t *t, const char **why) {
    if (why) *why = t->device_why;
    return t->device;
}

zs_status zs_trainer_gather_mem(zs_trainer_t *t, zs_mem_stats *all) {
    return zs_module_gather_mem(t->engine, all);
}

zs_status zs_trainer_gather_host_mem(zs_trainer_t *t, zs_mem_stats *all) {
    return zs_module_gather_host_mem(t->engine, all);
}

const zs_model_config *zs_trainer_model(const zs_trainer_t *t) {
    return &t->model_cfg;
}

int zs_trainer_vocab(const zs_trainer_t *t) {
    return t->data.vocab;
}

int64_t zs_trainer_val_windows(const zs_trainer_t *t) {
    if (t->cfg.docs != ZS_DOCS_NONE) return t->dval.n_samples;
    return (t->data.val.n - 1) / t->cfg.seq;
}

int zs_trainer_val_batches(const zs_trainer_t *t) {
    int64_t w = zs_trainer_val_windows(t), b = t->cfg.batch;
    int64_t n = (w + b - 1) / b;
    return n < 1 ? 1 : n > (1 << 30) ? (1 << 30) : (int)n;
}

void zs_trainer_last_eval(const zs_trainer_t *t, int *batches, int64_t *targets) {
    if (batches) *batches = t->eval_batches;
    if (targets) *targets = t->eval_targets;
}

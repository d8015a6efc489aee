/* `zshard train`: flags -> zs_train_config, then the loop with a live progress line (or
 * plain lines when stderr is not a terminal), periodic validation and samples, and the JSONL
 * log: one record per step and a final record carrying param_hash and peak memory. */
#include "backend/cuda_device.h"
#include "args/args.h"
#include "cli/cli.h"
#include "cli/train_args.h"
#include "cli/train_flags.h"
#include "cli/train_mem.h"
#include "cli/train_ops.h"
#include "ckpt/ckpt.h"
#include "ckpt/json.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"
#include "zshard.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A sample through the KV-cache generator, bounded to o->sample_budget of the training time
 * so far (the end-of-run sample of a large model once took longer than the run). Every rank
 * generates (each step is collective); rank 0 prints. */
static void print_sample(const train_opts *o, zs_trainer_t *t, int step, double train_s) {
    const zs_model_config *mc = zs_trainer_model(t);
    zs_gen_config g = zs_gen_config_default();
    int text = mc->vocab == 256, np = 0, nout = 0;
    const char *prompt = o->prompt && text ? o->prompt : NULL;
    g.max_tokens = o->sample_len < 4000 ? o->sample_len : 4000;
    g.temperature = o->temperature;
    g.seed = o->cfg.module.seed + (uint64_t)step;
    g.max_seconds = o->sample_budget > 0 ? o->sample_budget * train_s + 1e-3 : 0.0;
    int32_t *p = malloc((size_t)(prompt ? strlen(prompt) + 1 : 1) * sizeof *p);
    int32_t *out = malloc((size_t)(g.max_tokens + 1) * sizeof *out);
    if (p && prompt)
        for (; prompt[np]; np++)
            p[np] = (unsigned char)prompt[np];
    else if (p)
        p[np++] = text ? '\n' : mc->vocab == 50257 ? 50256 : 0; /* GPT-2's <|endoftext|> */
    double t0 = zs_now_s();
    zs_status st = p && out ? zs_trainer_generate(t, &g, p, np, out, g.max_tokens, &nout)
                            : zs_error(ZS_ERR_OOM, "out of memory");
    if (st != ZS_OK) {
        fprintf(stderr, "zshard: sample failed: %s\n", zs_last_error());
    } else if (zs_trainer_rank(t) == 0) {
        printf("---- sample at step %d ----\n%s", step, prompt ? prompt : "");
        for (int i = 0; i < nout; i++)
            if (text)
                putchar(out[i]);
            else
                printf("%s%d", i ? " " : "", out[i]);
        printf("\n---- %d tokens in %.2f s (budget %.2f s); %s ----\n", nout, zs_now_s() - t0,
               g.max_seconds, zs_trainer_generate_info(t));
        fflush(stdout);
    }
    free(p);
    free(out);
}

/* With documents: " | epoch E P/N" (the epoch of the step and the samples of it taken). */
static void epoch_text(const zs_data_position *dp, char *buf, size_t n) {
    buf[0] = '\0';
    if (dp->samples)
        snprintf(buf, n, " | epoch %lld %lld/%lld", (long long)dp->epoch, (long long)dp->position,
                 (long long)dp->samples);
}

static void progress(const train_opts *o, const zs_step_stats *s, const zs_data_position *dp,
                     int tty, double elapsed) {
    if (o->quiet) return;
    zs_mem_stats ms;
    zs_mem_get_stats(&ms);
    char mem[32], ep[64];
    zs_format_bytes(ms.total_peak, mem, sizeof mem);
    epoch_text(dp, ep, sizeof ep);
    double eta = elapsed / s->step * (o->cfg.steps - s->step);
    if (tty) {
        fprintf(stderr,
                "\rstep %5d/%d%s | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms/step | "
                "ETA %4.0fs | peak %s   ",
                s->step, o->cfg.steps, ep, s->loss, s->lr, s->grad_norm, s->tokens_per_s, s->ms,
                eta, mem);
        if (s->step == o->cfg.steps) fputc('\n', stderr);
    } else if (o->print_every &&
               (s->step % o->print_every == 0 || s->step == 1 || s->step == o->cfg.steps)) {
        printf("step %5d/%d%s | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.1f ms/step | "
               "ETA %.0fs | peak %s\n",
               s->step, o->cfg.steps, ep, s->loss, s->lr, s->grad_norm, s->tokens_per_s, s->ms, eta,
               mem);
        fflush(stdout);
    }
}

/* After a SIGINT/SIGTERM: save unless the step just finished was saved, write the end record
 * and exit 128 + signal, as a process killed by it would report. */
static int stop_early(const train_opts *o, zs_trainer_t *t, FILE *log, int step, int saved,
                      int tty) {
    int sig = zs_train_stop_signal() ? zs_train_stop_signal() : SIGTERM;
    int rank = zs_trainer_rank(t);
    zs_status st = ZS_OK;
    char where[4200] = "";
    if (tty && !o->quiet) fputc('\n', stderr);
    if (o->save_dir && saved != step && (st = zs_trainer_save(t, o->save_dir, o->keep)) != ZS_OK)
        fprintf(stderr, "zshard: save after %s at step %d: %s\n", sigabbrev_np(sig), step,
                zs_last_error());
    if (o->save_dir && st == ZS_OK) {
        char name[64];
        zs_ckpt_step_name(step, name, sizeof name);
        snprintf(where, sizeof where, "%s/%s", o->save_dir, name);
    }
    if (rank == 0)
        fprintf(stderr, "zshard: stopped by SIG%s after step %d of %d; %s%s%s\n", sigabbrev_np(sig),
                step, o->cfg.steps,
                where[0] ? "checkpoint saved in " : "no checkpoint (no --save-dir)", where,
                where[0] ? " (continue with --resume latest)" : "");
    if (log) {
        fprintf(log, "{\"stopped\":true,\"signal\":\"SIG%s\",\"step\":%d,\"checkpoint\":",
                sigabbrev_np(sig), step);
        zs_json_write_string(log, where);
        fprintf(log, "}\n");
        fclose(log);
    }
    zs_trainer_destroy(t);
    return st == ZS_OK ? 128 + sig : 1;
}

/* The estimator's figures for this run (what `zshard mem` prints for its flags). */
static void run_estimate(const train_opts *o, zs_trainer_t *t, int world, zs_mem_estimate *est) {
    zs_mem_options mo = {.recompute = o->cfg.recompute,
                         .attention = o->cfg.attention,
                         .dtype = o->cfg.module.param_dtype,
                         .reduce_dtype = o->cfg.module.grad_dtype,
                         .comm = world > 1 ? zs_trainer_comm_name(t) : o->cfg.comm,
                         .device = zs_trainer_device(t, NULL),
                         .docs = o->cfg.docs,
                         .offload = o->cfg.module.offload,
                         .offload_fraction = o->cfg.module.offload_fraction,
                         .shard_group = zs_trainer_shard_group(t) < world ? zs_trainer_shard_group(t) : 0,
                         .nnodes = zs_trainer_nnodes(t)};
    memset(est, 0, sizeof *est);
    zs_mem_estimate_compute_opts(zs_trainer_model(t), world, (int)o->cfg.module.stage, o->cfg.batch,
                                 o->cfg.seq, o->cfg.grad_accum, o->cfg.module.prefetch, &mo, est);
}

/* One step's JSONL record. Values that are not finite are written as null and named in a
 * "nonfinite" array, so every line stays valid JSON. */
static void write_step(FILE *log, const zs_step_stats *s, const zs_data_position *dp, int do_val,
                       float vl) {
    char b[6][ZS_JSON_NUM_CAP];
    const char *names[] = {"loss", "lr", "grad_norm", "ms", "tokens_per_s", "val_loss"};
    double v[] = {s->loss, s->lr, s->grad_norm, s->ms, s->tokens_per_s, vl};
    const char *fmt[] = {"%.9g", "%.9g", "%.9g", "%.3f", "%.1f", "%.9g"};
    int n = do_val ? 6 : 5, bad = 0;
    fprintf(log, "{\"step\":%d", s->step);
    if (dp->samples)
        fprintf(log, ",\"epoch\":%lld,\"position\":%lld,\"samples\":%lld,\"targets\":%lld",
                (long long)dp->epoch, (long long)dp->position, (long long)dp->samples,
                (long long)s->targets);
    for (int i = 0; i < n; i++)
        fprintf(log, ",\"%s\":%s", names[i], zs_json_num(b[i], fmt[i], v[i]));
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i])) fprintf(log, "%s\"%s\"", bad++ ? "," : ",\"nonfinite\":[", names[i]);
    fprintf(log, "%s}\n", bad ? "]" : "");
    fflush(log);
}

/* --print-config: the settings this command line (and --config) would run, a resume's taken
 * from its checkpoint as the run itself would take them. */
static int print_config(train_opts *o) {
    int rc = 0;
    if (o->resume && strcmp(o->resume, "auto")) {
        char changes[1024];
        o->resume = zs_train_resolve_resume(o->resume, o->save_dir, 0);
        if ((rc = zs_train_resume_settings(o, changes, sizeof changes))) return rc;
    }
    zs_train_config_write_yaml(o, stdout);
    return fflush(stdout) ? zs_cli_fail(1, "--print-config: write failed") : 0;
}

int zs_cli_train(int argc, char **argv) {
    train_opts o;
    int rc = zs_train_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.print_config) return print_config(&o);
    if ((o.nproc > 1 || o.max_restarts > 0) && !zs_cli_relaunched())
        return zs_cli_relaunch("train", argc, argv, o.nproc, o.max_restarts);
    zs_cli_threads_setup(); /* may exec this command again, with the thread variables set */

    FILE *log = NULL;
    zs_trainer_t *t = NULL;
    int tty = isatty(STDERR_FILENO), rank = 0, step = 0;
    zs_status st = ZS_OK;
    /* Every check that needs no other rank happens before any rank joins the job, so a bad
     * output path fails in a second instead of after the first hour. Each rank prints its
     * own errors; the launcher shows identical ones once. */
    if ((rc = zs_train_env_rank(&rank))) return rc;
    int restart = zs_train_restart_count();
    int resume_auto = (o.resume && !strcmp(o.resume, "auto")) || (!o.resume && restart > 0);
    o.resume = zs_train_resolve_resume(o.resume, o.save_dir, restart);
    if ((rc = zs_train_check_save_dir(o.save_dir, o.resume))) return rc;
    char changes[1024];
    if ((rc = zs_train_resume_settings(&o, changes, sizeof changes))) return rc;
    /* A resumed or restarted run appends to its log, so the log tells the whole story. */
    if ((rc = zs_train_log_open(o.log_path, rank, restart > 0 || o.resume, &log))) return rc;
    /* Every start of the run (fresh, resumed, restarted) records the settings it runs with. */
    char *config_json = zs_train_config_json(&o);
    if (!config_json) return zs_cli_fail(1, "out of memory");
    if (log) {
        fprintf(log, "{\"config\":%s}\n", config_json);
        fflush(log);
    }
    free(config_json);
    if (log && restart > 0) {
        fprintf(log, "{\"restart\":%d,\"resume\":", restart);
        zs_json_write_string(log, o.resume ? o.resume : "");
        fprintf(log, "}\n");
        fflush(log);
    }
    zs_train_signals_install();
    /* A restarted job (or --resume auto with a checkpoint) continues its own run instead. */
    if (o.init_from && o.resume) o.init_from = NULL;
    if (o.init_from) {
        if ((rc = zs_cli_model_from_tie("--init-from", o.init_from,
                                        o.model_set ? o.model_name : NULL, o.tie, &o.cfg.model)))
            return rc;
        /* Token shards take the source's vocabulary unless --vocab says otherwise. */
        if (!o.cfg.vocab && o.cfg.model.vocab != 256) o.cfg.vocab = o.cfg.model.vocab;
    }

    st = zs_trainer_create(&o.cfg, &t);
    if (st != ZS_OK) {
        fprintf(stderr, "zshard: %s\n", zs_last_error());
        goto fail;
    }
    /* ... and every checkpoint it saves keeps them in its manifest. */
    config_json = zs_train_config_json(&o);
    st = config_json ? zs_trainer_set_run_config(t, config_json)
                     : zs_error(ZS_ERR_OOM, "out of memory");
    free(config_json);
    if (st != ZS_OK) {
        fprintf(stderr, "zshard: %s\n", zs_last_error());
        goto fail;
    }
    const zs_model_config *mc = zs_trainer_model(t);
    int world = zs_trainer_world_size(t);
    int steps_asked = o.cfg.steps; /* --steps as given (or the checkpoint's), before --epochs */
    o.cfg.steps = zs_trainer_total_steps(t); /* --epochs: the steps of that many epochs */
    zs_data_position dp0;
    zs_trainer_data_position(t, 0, &dp0);
    /* Which limit ends the run: --epochs when its steps come before --steps. */
    int epochs_end = o.cfg.epochs > 0 && steps_asked > o.cfg.steps;
    char limit[160];
    if (epochs_end)
        snprintf(limit, sizeof limit, "--epochs %d (%lld steps of %lld)", o.cfg.epochs,
                 (long long)o.cfg.steps, (long long)dp0.steps_per_epoch);
    else
        snprintf(limit, sizeof limit, "--steps %d", o.cfg.steps);
    if (epochs_end && rank == 0 && (o.given & ZS_GIVEN_STEPS))
        printf("note: --epochs %d ends the run at step %d, before --steps %d (a larger --epochs "
               "goes on)\n",
               o.cfg.epochs, o.cfg.steps, steps_asked);
    if (rank != 0) o.quiet = 1; /* rank 0 reports and logs; the others print only errors */
    if (!o.quiet) {
        printf("zshard train: model %s (%d layers, %d heads, width %d, vocab %d padded to %d, "
               "%.2fM params) on %s\n",
               mc->name, mc->n_layer, mc->n_head, mc->n_embd, mc->vocab, mc->padded_vocab,
               (double)zs_model_num_params(mc) / 1e6, o.cfg.data_path);
        static const char *stages[] = {"ddp", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
        printf("  %d rank%s, %s, batch %d x seq %d (%d micro-batch%s), %d steps, lr %g, warmup "
               "%d, seed %llu\n",
               world, world > 1 ? "s" : "", stages[o.cfg.module.stage], o.cfg.batch, o.cfg.seq,
               o.cfg.grad_accum, o.cfg.grad_accum > 1 ? "es" : "", o.cfg.steps, (double)o.cfg.lr,
               o.cfg.warmup, (unsigned long long)o.cfg.module.seed);
        if (o.cfg.module.offload) {
            zs_mem_estimate est;
            char hb[32], db[32];
            run_estimate(&o, t, world, &est);
            zs_format_bytes(est.host_total, hb, sizeof hb);
            zs_format_bytes(est.total, db, sizeof db);
            int params = o.cfg.module.offload == ZS_OFFLOAD_PARAMS;
            printf("  --offload %s: fp32 master and Adam state%s stepped on the host, %s of "
                   "pinned host memory per rank; %s on the GPU (docs/sharding.md \"Offload\")\n",
                   zs_offload_name(o.cfg.module.offload),
                   params ? " (and the parameter shard)" : "", hb, db);
        }
        if (dp0.samples)
            printf("  documents: --docs %s, %lld %s from %lld document%s, %lld steps per "
                   "epoch%s\n",
                   zs_docs_mode_name(o.cfg.docs), (long long)dp0.samples,
                   o.cfg.docs == ZS_DOCS_PAD ? "rows" : "windows", (long long)dp0.documents,
                   dp0.documents == 1 ? "" : "s", (long long)dp0.steps_per_epoch,
                   o.cfg.epochs ? "" : " (no --epochs: --steps sets the length)");
        /* JSON Lines given as --data: read as bytes, braces and quotes included */
        size_t dl = strlen(o.cfg.data_path);
        if (mc->vocab == 256 && ((dl > 6 && !strcmp(o.cfg.data_path + dl - 6, ".jsonl")) ||
                                 (dl > 5 && !strcmp(o.cfg.data_path + dl - 5, ".json"))))
            printf("  warning: %s is read as raw bytes, its JSON syntax included: to train on "
                   "its text, tokenize it first (zshard tokenize %s --tokenizer DIR --out TOK, "
                   "then --data 'TOK/train_*.bin')\n",
                   o.cfg.data_path, o.cfg.data_path);
        /* One document over many windows: the end-of-document marker is likely not the data's
         * (another tokenizer's shards, a --doc-sep that matches no line). */
        if (dp0.samples && dp0.documents == 1 && dp0.samples > 64)
            printf("  warning: the training split is a single document of %lld %s: its "
                   "end-of-document marker (%s) likely never occurs in %s; check --eos-id, "
                   "--doc-sep or the dataset.json beside the shards\n",
                   (long long)dp0.samples, o.cfg.docs == ZS_DOCS_PAD ? "rows" : "windows",
                   o.cfg.doc_sep ? "--doc-sep" : "the end-of-document id", o.cfg.data_path);
        const char *why = NULL, *dev = zs_trainer_device(t, &why);
        const char *cwhy = zs_trainer_comm_reason(t);
        printf("  device %s (%s), comm %s%s%s%s\n", dev, why, zs_trainer_comm_name(t),
               *cwhy ? " (" : "", cwhy, *cwhy ? ")" : "");
        if (*zs_trainer_mesh(t)) {
            char flag[64];
            if (o.cfg.module.shard_group == ZS_SHARD_GROUP_HOST)
                snprintf(flag, sizeof flag, "--shard-group host: a group per host");
            else if (o.cfg.module.shard_group > 0)
                snprintf(flag, sizeof flag, "--shard-group %d", o.cfg.module.shard_group);
            else
                snprintf(flag, sizeof flag, "--replicate %d", o.cfg.module.replicate);
            printf("  hybrid sharding (%s): %s\n", flag, zs_trainer_mesh(t));
        } else if (zs_trainer_nnodes(t) > 1 && zs_trainer_nnodes(t) < world &&
                   o.cfg.module.stage != ZS_STAGE_DDP)
            printf("  note: %d hosts: --shard-group host would keep the gathers and "
                   "reduce-scatters within each host, and send only each shard's all-reduce "
                   "across them (HSDP, docs/sharding.md)\n",
                   zs_trainer_nnodes(t));
        const char *omp = getenv("OMP_NUM_THREADS"), *wp = getenv("OMP_WAIT_POLICY");
        printf("  threads per rank: %s (OMP_WAIT_POLICY=%s; %d core%s usable)\n",
               omp ? omp : "runtime default", wp ? wp : "unset", zs_cli_cores(),
               zs_cli_cores() == 1 ? "" : "s");
        fflush(stdout);
    }

    zs_train_faults faults;
    zs_train_faults_read(&faults, restart);

    int first = 1;
    if (o.resume) {
        if ((st = zs_trainer_resume(t, o.resume)) != ZS_OK) {
            fprintf(stderr, "zshard: --resume: %s\n", zs_last_error());
            goto fail;
        }
        first = zs_trainer_steps_done(t) + 1;
        if (first > o.cfg.steps && resume_auto) {
            /* The run is complete: nothing to do is not a failure. */
            if (rank == 0)
                printf("zshard train: %s is at step %d of %s: nothing to train\n", o.resume,
                       first - 1, limit);
            if (log) fclose(log);
            zs_trainer_destroy(t);
            return 0;
        }
        if (first > o.cfg.steps) {
            if (epochs_end)
                st = zs_error(ZS_ERR_INVALID,
                              "--resume: the checkpoint is at step %d, the end of %s: nothing "
                              "to train (give --epochs %d to continue it)",
                              first - 1, limit, o.cfg.epochs + 1);
            else
                st = zs_error(ZS_ERR_INVALID,
                              "--resume: the checkpoint is at step %d, past --steps %d: nothing "
                              "to train (give a larger --steps to continue it)",
                              first - 1, o.cfg.steps);
            fprintf(stderr, "zshard: %s\n", zs_last_error());
            goto fail;
        }
        if (log && restart == 0) { /* a restart wrote its record when it opened the log */
            fprintf(log, "{\"resume\":");
            zs_json_write_string(log, o.resume);
            fprintf(log, ",\"step\":%d}\n", first - 1);
            fflush(log);
        }
        if (!o.quiet) printf("  resumed from %s at step %d\n", o.resume, first - 1);
        if (rank == 0 && changes[0])
            printf("  changed from the checkpoint's settings: %s\n", changes);
    }
    if (o.init_from) {
        if ((st = zs_trainer_init_from(t, o.init_from)) != ZS_OK) {
            fprintf(stderr, "zshard: %s\n", zs_last_error());
            goto fail;
        }
        if (!o.quiet) printf("  weights from %s (fresh optimizer, step 0)\n", o.init_from);
    }
    int saved = first - 1, stop = 0;

    if (o.profile_step && (strcmp(zs_trainer_device(t, NULL), "cuda") || !zs_cuda_emulated())) {
        st = zs_error(ZS_ERR_INVALID,
                      "--profile-step: predicted kernel times come from the emulated GPU (the "
                      "tests' zshard-emu with --device cuda); on a GPU, Nsight Compute measures "
                      "them (scripts/gpu-check.sh)");
        fprintf(stderr, "zshard: %s\n", zs_last_error());
        goto fail;
    }
    double t_start = zs_now_s(), train_s = 0.0, last_val = -1.0, last_loss = 0.0;
    for (step = first; step <= o.cfg.steps; step++) {
        zs_step_stats s;
        zs_train_faults_at(&faults, rank, step);
        if (step == o.profile_step && (st = zs_cuda_profile_start()) != ZS_OK) goto fail;
        if ((st = zs_trainer_step(t, &s)) != ZS_OK) {
            if (tty && !o.quiet) fputc('\n', stderr);
            fprintf(stderr, "zshard: step %d: %s\n", step, zs_last_error());
            goto fail;
        }
        if (step == o.profile_step) {
            double pred = 0, line = 0;
            char *table = NULL;
            if ((st = zs_cuda_profile_stop(&pred, &table)) != ZS_OK) goto fail;
            if ((st = zs_cuda_profile_timeline(&line)) != ZS_OK) goto fail;
            printf("\n[rank %d] step %d PREDICTED for one H100 SXM from the traffic of its kernels "
                   "on the emulated GPU (not measured): %.3f ms on the timeline (streams, copies "
                   "and host work overlapped), %.3f ms its records summed\n\n%s\n",
                   rank, step, line * 1e3, pred * 1e3, table ? table : "");
            fflush(stdout);
            free(table);
        }
        train_s += s.ms * 1e-3;
        last_loss = s.loss;
        zs_data_position dp;
        zs_trainer_data_position(t, step, &dp);
        progress(&o, &s, &dp, tty, train_s);
        int do_val = (o.val_every && step % o.val_every == 0) || step == o.cfg.steps;
        static int val_capped_said;
        float vl = 0.0f;
        if (do_val) {
            if ((st = zs_trainer_eval(t, o.val_batches, &vl)) != ZS_OK) {
                fprintf(stderr, "zshard: validation at step %d: %s\n", step, zs_last_error());
                goto fail;
            }
            last_val = vl;
            if (!o.quiet) {
                if (tty) fputc('\n', stderr);
                if (!val_capped_said && o.val_batches > zs_trainer_val_batches(t)) {
                    /* said once: each window counts once, so fewer batches than asked */
                    printf("note: the val split holds %lld %s, %d batch%s of %d: validation "
                           "takes those, not --val-batches %d\n",
                           (long long)zs_trainer_val_windows(t),
                           o.cfg.docs != ZS_DOCS_NONE ? "samples" : "windows",
                           zs_trainer_val_batches(t), zs_trainer_val_batches(t) == 1 ? "" : "es",
                           o.cfg.batch, o.val_batches);
                    val_capped_said = 1;
                }
                printf("step %d: val loss %.4f\n", step, (double)vl);
                fflush(stdout);
            }
        }
        if (log) write_step(log, &s, &dp, do_val, vl);
        /* A diverged run stops here, before anything could save its state as a checkpoint
         * (the grad-norm check in the step catches it one step later, and a last step's
         * validation not at all). */
        if (!isfinite(s.loss) || (do_val && !isfinite(vl))) {
            st = zs_error(ZS_ERR_INVALID,
                          "%s is %s: the run diverged (lower --lr, or --grad-clip); no "
                          "checkpoint is saved from it",
                          !isfinite(s.loss) ? "the training loss" : "the validation loss",
                          isnan(!isfinite(s.loss) ? s.loss : vl) ? "NaN" : "infinite");
            if (tty && !o.quiet) fputc('\n', stderr);
            fprintf(stderr, "zshard: step %d: %s\n", step, zs_last_error());
            goto fail;
        }
        if (o.sample_every && !o.no_sample && step % o.sample_every == 0 && step != o.cfg.steps)
            print_sample(&o, t, step, train_s);
        if (o.save_dir && ((o.save_every && step % o.save_every == 0) || step == o.cfg.steps)) {
            if ((st = zs_trainer_save(t, o.save_dir, o.keep)) != ZS_OK) {
                fprintf(stderr, "zshard: save at step %d: %s\n", step, zs_last_error());
                goto fail;
            }
            saved = step;
            if (!o.quiet) printf("step %d: saved checkpoint in %s\n", step, o.save_dir);
        }
        /* A signal reaches the ranks at different instants: they agree after each step, so
         * that all of them stop after the same one (the save below is collective). */
        if ((st = zs_trainer_any(t, zs_train_stop_signal(), &stop)) != ZS_OK) {
            fprintf(stderr, "zshard: step %d: %s\n", step, zs_last_error());
            goto fail;
        }
        if (stop && step < o.cfg.steps) return stop_early(&o, t, log, step, saved, tty);
    }
    step = o.cfg.steps;
    if (o.sample_len > 0 && !o.no_sample &&
        (o.sample_len_set || zs_model_num_params(zs_trainer_model(t)) <= 1000000000))
        print_sample(&o, t, o.cfg.steps, train_s);

    uint64_t hash = 0;
    int offload = o.cfg.module.offload != ZS_OFFLOAD_NONE;
    zs_mem_stats *all = calloc((size_t)world * 2, sizeof *all), *host = all + world;
    if (!all) {
        st = zs_error(ZS_ERR_OOM, "out of memory");
        goto fail;
    }
    if ((st = zs_trainer_param_hash(t, &hash)) != ZS_OK ||
        (o.dump_path && (st = zs_trainer_dump_params(t, o.dump_path)) != ZS_OK) ||
        (st = zs_trainer_gather_mem(t, all)) != ZS_OK ||
        (offload && (st = zs_trainer_gather_host_mem(t, host)) != ZS_OK)) {
        free(all);
        fprintf(stderr, "zshard: %s\n", zs_last_error());
        goto fail;
    }
    zs_mem_estimate est;
    run_estimate(&o, t, world, &est);
    if (o.mem_report && rank == 0) zs_train_mem_report(world, all, &est, offload ? host : NULL);
    zs_mem_stats ms;
    zs_mem_get_stats(&ms);
    char peak[32], brk[512];
    zs_format_bytes(ms.total_peak, peak, sizeof peak);
    zs_mem_format_breakdown(&ms, 1, brk, sizeof brk);
    if (rank == 0)
        printf("summary: %d steps in %.1f s (%.0f tokens/s) | final train loss %.4f | val loss "
               "%.4f | param_hash %016llx\n",
               o.cfg.steps - first + 1, train_s,
               (double)(o.cfg.steps - first + 1) * o.cfg.batch * o.cfg.seq / train_s, last_loss,
               last_val, (unsigned long long)hash);
    if (rank == 0) printf("memory: peak %s (%s)\n", peak, brk);
    if (log) {
        fprintf(log,
                "{\"final\":true,\"steps\":%d,\"train_loss\":%.6f,\"val_loss\":%.6f,"
                "\"param_hash\":\"%016llx\",\"seconds\":%.3f,\"wall_seconds\":%.3f,",
                o.cfg.steps, last_loss, last_val, (unsigned long long)hash, train_s,
                zs_now_s() - t_start);
        fprintf(log, "\"model\":");
        zs_json_write_string(log, mc->name);
        fprintf(log, ",\"stage\":\"%s\",\"world_size\":%d,",
                o.cfg.module.stage == ZS_STAGE_DDP
                    ? "ddp"
                    : (const char *[]){"", "1", "2", "3"}[o.cfg.module.stage],
                world);
        zs_train_json_mem(log);
        fprintf(log, ",\"peak_bytes_per_rank\":[");
        for (int r = 0; r < world; r++) {
            fprintf(log, "%s{", r ? "," : "");
            for (int c = 0; c < ZS_MEM_NCAT; c++)
                fprintf(log, "%s\"%s\":%llu", c ? "," : "",
                        zs_mem_category_name((zs_mem_category)c),
                        (unsigned long long)all[r].peak[c]);
            fprintf(log, ",\"total\":%llu}", (unsigned long long)all[r].total_peak);
        }
        fprintf(log, "]");
        if (offload) zs_train_json_host_mem(log, world, host, &est);
        fprintf(log, ",\"estimate_bytes\":{");
        for (int c = 0; c < ZS_MEM_NCAT; c++)
            fprintf(log, "%s\"%s\":%llu", c ? "," : "", zs_mem_category_name((zs_mem_category)c),
                    (unsigned long long)est.bytes[c]);
        fprintf(log, ",\"total\":%llu}}\n", (unsigned long long)est.total);
        if (fclose(log) != 0) {
            log = NULL;
            fprintf(stderr, "zshard: --log %s: write failed\n", o.log_path);
            free(all);
            zs_trainer_destroy(t);
            return 1;
        }
        log = NULL;
    }
    free(all);
    zs_trainer_destroy(t);
    return 0;

fail:
    /* The log gets an explicit error record and no "final" record, so a failed run is never
     * mistaken for a complete one; a rank other than 0 writes its own file only now. */
    zs_train_log_error(log, o.log_path, rank, step, st);
    if (log) fclose(log);
    zs_trainer_destroy(t);
    return 1;
}

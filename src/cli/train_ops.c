/* The operational side of `zshard train`: which rank writes which JSONL log, outputs checked
 * before any work is done (a run must not train for an hour and then fail to save), --resume
 * auto and restarts, and SIGINT/SIGTERM turned into "finish this step, save, stop". */
#include "cli/train_ops.h"
#include "ckpt/ckpt.h"
#include "ckpt/json.h"
#include "cli/cli.h"
#include "comm/env.h"
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int zs_train_env_rank(int *rank) {
    zs_comm_env env;
    if (zs_comm_env_read(NULL, &env) != ZS_OK) return zs_cli_fail(1, "%s", zs_last_error());
    *rank = env.rank;
    return 0;
}

int zs_train_restart_count(void) {
    const char *r = getenv("TORCHELASTIC_RESTART_COUNT");
    return r ? atoi(r) : 0;
}

void zs_train_log_path(const char *path, int rank, char *out, size_t cap) {
    if (rank == 0) {
        snprintf(out, cap, "%s", path);
        return;
    }
    /* run.jsonl -> run.rank1.jsonl: the extension stays last, so tools still see JSONL. */
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (dot && (!slash || dot > slash) && dot != path && (!slash || dot > slash + 1))
        snprintf(out, cap, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
    else
        snprintf(out, cap, "%s.rank%d", path, rank);
}

/* Can this process create files in dir? Tried by creating one, as access(2) ignores
 * read-only mounts and ACLs only some of the time. */
static int probe_dir(const char *dir, char *why, size_t cap) {
    char p[4300];
    snprintf(p, sizeof p, "%.4200s/.zshard-probe-%d", dir, (int)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    close(fd);
    unlink(p);
    return 0;
}

/* p with ".N" before its extension (run.jsonl -> run.1.jsonl), as the rank files are named. */
static void numbered(const char *p, int n, char *out, size_t cap) {
    const char *slash = strrchr(p, '/'), *dot = strrchr(p, '.');
    if (dot && (!slash || dot > slash + 1) && dot != p)
        snprintf(out, cap, "%.*s.%d%s", (int)(dot - p), p, n, dot);
    else
        snprintf(out, cap, "%s.%d", p, n);
}

/* A log that holds records is never overwritten: it moves to the first free run.N.jsonl, and
 * the move is reported. Returns 0, or prints the error and returns 1. */
static int keep_old_log(const char *p) {
    struct stat sb;
    if (stat(p, &sb) != 0 || sb.st_size == 0) return 0;
    char to[4300];
    for (int n = 1; n < 100000; n++) {
        numbered(p, n, to, sizeof to);
        if (access(to, F_OK) == 0) continue;
        if (rename(p, to) != 0)
            return zs_cli_fail(1,
                               "--log %s holds an earlier run's records and cannot be moved "
                               "aside to %s: %s",
                               p, to, strerror(errno));
        fprintf(stderr, "zshard: --log %s held an earlier run's records: moved them to %s\n", p,
                to);
        return 0;
    }
    return zs_cli_fail(1, "--log %s: no free name to keep its earlier records under", p);
}

int zs_train_log_open(const char *path, int rank, int append, FILE **out) {
    char p[4200];
    *out = NULL;
    if (!path) return 0;
    zs_train_log_path(path, rank, p, sizeof p);
    if (rank == 0) {
        if (!append && keep_old_log(p)) return 1;
        if (!(*out = fopen(p, append ? "a" : "w")))
            return zs_cli_fail(1, "--log %s: %s", p, strerror(errno));
        return 0;
    }
    /* Other ranks write only when they fail; make sure they could. */
    char dir[4200], why[256];
    snprintf(dir, sizeof dir, "%s", p);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (probe_dir(dir, why, sizeof why))
        return zs_cli_fail(1, "--log %s: cannot write in %s: %s", p, dir, why);
    return 0;
}

void zs_train_log_error(FILE *log, const char *path, int rank, int step, zs_status st) {
    char p[4200];
    FILE *f = log;
    if (!f && path) {
        zs_train_log_path(path, rank, p, sizeof p);
        if (keep_old_log(p)) return;
        f = fopen(p, "w");
    }
    if (!f) return;
    fprintf(f, "{\"error\":");
    zs_json_write_string(f, zs_last_error());
    fprintf(f, ",\"status\":\"%s\",\"rank\":%d,\"step\":%d}\n", zs_status_string(st), rank, step);
    if (f != log) fclose(f);
}

static int mkdirs(const char *path) {
    char p[4200];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0777) && errno != EEXIST ? -1 : 0;
}

int zs_train_check_save_dir(const char *save_dir, const char *resume) {
    char why[256], ck[4200];
    if (!save_dir) return 0;
    if (mkdirs(save_dir))
        return zs_cli_fail(1, "--save-dir %s: cannot create it: %s", save_dir, strerror(errno));
    if (probe_dir(save_dir, why, sizeof why))
        return zs_cli_fail(1, "--save-dir %s: cannot write in it: %s", save_dir, why);
    if (resume || zs_ckpt_resolve(save_dir, ck, sizeof ck) != ZS_OK) return 0;
    /* Saving a new run beside another run's checkpoints would mix the two under one
     * `latest` and let --keep delete the other's: refuse unless told to continue it. */
    zs_manifest m;
    memset(&m, 0, sizeof m);
    if (zs_manifest_load(ck, &m) == ZS_OK) {
        zs_cli_fail(2,
                    "--save-dir %s already holds checkpoints of another run (latest: %s, model "
                    "%s, step %lld); continue it with --resume latest (or --resume auto), or "
                    "choose an empty directory",
                    save_dir, ck, m.info.model.name, (long long)m.info.step);
        zs_manifest_free(&m);
        return 2;
    }
    return zs_cli_fail(2,
                       "--save-dir %s already holds checkpoints (%s); continue with --resume "
                       "latest, or choose an empty directory",
                       save_dir, ck);
}

const char *zs_train_resolve_resume(const char *resume, const char *save_dir, int restart) {
    char ck[4200];
    int auto_ = resume && !strcmp(resume, "auto");
    /* A restarted job (zshard run --max-restarts, torchrun) continues where it stopped. */
    if (!resume && restart && save_dir) auto_ = 1;
    if (!auto_) return resume;
    return save_dir && zs_ckpt_resolve(save_dir, ck, sizeof ck) == ZS_OK ? save_dir : NULL;
}

/* ---- launching ---------------------------------------------------------------------------- */

/* `--nproc N [--max-restarts R]` is shorthand for `zshard run -n N [--max-restarts R] --
 * zshard train ...` without those two flags. */
int zs_cli_model_from(const char *who, const char *src, const char *model_flag,
                      zs_model_config *out) {
    return zs_cli_model_from_tie(who, src, model_flag, ZS_TIE_ARCH, out);
}

int zs_cli_model_from_tie(const char *who, const char *src, const char *model_flag, int tie,
                          zs_model_config *out) {
    zs_model_config flag;
    memset(&flag, 0, sizeof flag);
    if (model_flag && zs_model_preset(model_flag, &flag) != ZS_OK)
        return zs_cli_fail(2, "%s: %s", who, zs_last_error());
    if (tie) flag.tie_embeddings = (zs_tie)tie;
    if (zs_model_config_from(src, model_flag || tie ? &flag : NULL, out) != ZS_OK)
        return zs_cli_fail(1, "%s: %s", who, zs_last_error());
    /* A source's head is what its weights are: tied or not is never a default to override. */
    if (flag.tie_embeddings && zs_model_tied(&flag) != zs_model_tied(out))
        return zs_cli_fail(2,
                           "%s: %s%s contradicts %s: tie_embeddings is %s there, %s in the flags",
                           who, tie ? "--tie-embeddings" : "--model ", tie ? "" : model_flag, src,
                           zs_model_tied(out) ? "on" : "off", zs_model_tied(&flag) ? "on" : "off");
    if (!model_flag) return 0;
    const zs_model_config *a = out, *b = &flag;
#define SAME(field, fmt)                                                                           \
    if (a->field != b->field)                                                                      \
        return zs_cli_fail(2,                                                                      \
                           "%s: --model %s contradicts %s: " #field " is " fmt " there, " fmt      \
                           " in --model (leave --model out to take the source's model)",           \
                           who, model_flag, src, a->field, b->field);
    if (a->arch != b->arch)
        return zs_cli_fail(2, "%s: --model %s contradicts %s: arch is %s there, %s in --model", who,
                           model_flag, src, a->arch == ZS_ARCH_GPT2 ? "gpt2" : "llama",
                           b->arch == ZS_ARCH_GPT2 ? "gpt2" : "llama");
    SAME(n_layer, "%d")
    SAME(n_head, "%d")
    SAME(n_kv_head, "%d")
    SAME(n_embd, "%d")
    SAME(ffn_hidden, "%d")
    SAME(max_seq, "%d")
    SAME(rope_theta, "%g")
    SAME(norm_eps, "%g")
#undef SAME
    return 0;
}

int zs_cli_launched_job(char *what, size_t cap) {
    zs_comm_env env;
    if (zs_comm_env_read(NULL, &env) != ZS_OK || env.world_size <= 1) return 0;
    const char *var = !strcmp(env.source, "torchrun")  ? "WORLD_SIZE"
                      : !strcmp(env.source, "srun")    ? "SLURM_NTASKS"
                      : getenv("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE"
                                                       : "PMI_SIZE";
    const char *who = !strcmp(env.source, "torchrun") ? "torchrun or zshard run" : env.source;
    snprintf(what, cap, "%s (%s=%d)", who, var, env.world_size);
    return 1;
}

int zs_cli_relaunched(void) {
    const char *v = getenv(ZS_RELAUNCHED_ENV);
    return v && !strcmp(v, "1");
}

int zs_cli_relaunch(const char *sub, int argc, char **argv, int nproc, int max_restarts) {
    char self[4096], n[16], mr[16], job[128];
    /* Under a launcher every process would start a job of its own: as many jobs as ranks,
     * writing the same save dir and log. */
    if (zs_cli_launched_job(job, sizeof job)) {
        const char *flags = nproc > 1 && max_restarts > 0 ? "--nproc and --max-restarts"
                            : nproc > 1                   ? "--nproc"
                                                          : "--max-restarts";
        return zs_cli_fail(2,
                           "%s: %s inside a job already launched by %s, where every rank would "
                           "start a job of its own: leave %s out and give the launcher the "
                           "rank count",
                           sub, flags, job, flags);
    }
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return zs_cli_fail(1, "%s: cannot find the zshard executable to relaunch", sub);
    self[len] = '\0';
    snprintf(n, sizeof n, "%d", nproc);
    snprintf(mr, sizeof mr, "%d", max_restarts);
    char **args = calloc((size_t)argc + 10, sizeof *args);
    if (!args) return zs_cli_fail(1, "%s: out of memory", sub);
    int k = 0;
    args[k++] = self;
    args[k++] = "run";
    args[k++] = "-n";
    args[k++] = n;
    if (max_restarts > 0) {
        args[k++] = "--max-restarts";
        args[k++] = mr;
    }
    /* eval and generate: rank 0 alone writes results (text, JSON) on stdout, unprefixed. */
    if (strcmp(sub, "train")) args[k++] = "--no-stdout-prefix";
    args[k++] = "--";
    args[k++] = self;
    args[k++] = (char *)sub;
    /* The ranks get the command as given (a --config file may hold --nproc too, and the log
     * records the settings as the user gave them); the variable tells them not to relaunch. */
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    setenv(ZS_RELAUNCHED_ENV, "1", 1);
    fflush(NULL);
    execv(self, args);
    free(args);
    return zs_cli_fail(1, "%s: relaunch through %s failed: %s", sub, self, strerror(errno));
}

/* ---- fault injection (tests) --------------------------------------------------------------- */

static void fault_read(const char *name, int restart, int *rank, int *step) {
    const char *v = getenv(name);
    if (!v || restart > 0 || sscanf(v, "%d:%d", rank, step) != 2) *rank = *step = -1;
}

void zs_train_faults_read(zs_train_faults *f, int restart) {
    fault_read("ZS_FAULT_KILL", restart, &f->kill_rank, &f->kill_step);
    fault_read("ZS_FAULT_STOP", restart, &f->stop_rank, &f->stop_step);
    fault_read("ZS_FAULT_TERM", restart, &f->term_rank, &f->term_step);
    const char *l = getenv("ZS_LAUNCHER_PID");
    f->term_pid = l && atoi(l) > 0 ? (pid_t)atoi(l) : getpid();
}

static volatile sig_atomic_t g_stop_sig = 0;

void zs_train_faults_at(const zs_train_faults *f, int rank, int step) {
    if (rank == f->kill_rank && step == f->kill_step) raise(SIGKILL);
    if (rank == f->stop_rank && step == f->stop_step) raise(SIGSTOP);
    if (rank == f->term_rank && step == f->term_step) {
        kill(f->term_pid, SIGTERM);
        /* The request must arrive while step S runs: wait (30 s at most) until it has reached
         * this process, directly or through the launcher, so that a fast job cannot finish
         * its last step before the launcher has passed the signal on. */
        struct timespec ms = {0, 1000000};
        for (int i = 0; i < 30000 && !g_stop_sig; i++)
            nanosleep(&ms, NULL);
    }
}

/* ---- signals ------------------------------------------------------------------------------ */

static void on_stop(int sig) {
    if (g_stop_sig) {
        /* The second signal: stop now, as if no handler were installed. */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_sig = sig;
}

void zs_train_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    /* SA_RESTART: a signal must not turn a checkpoint write or a wait into an EINTR error. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int zs_train_stop_signal(void) {
    return (int)g_stop_sig;
}

/* `zshard run`: the launcher (a torchrun equivalent). Starts the local ranks of a command
 * with torchrun's variables, a share of the cores each, and rank-prefixed output; when one
 * rank fails it gives the others a moment to report, then stops them (SIGTERM, then
 * SIGKILL) and exits non-zero with one line naming the rank and how it failed. */
#include "cli/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOCAL 256

typedef struct rank_proc {
    pid_t pid;
    int out_fd, err_fd;
    char out_buf[4096], err_buf[4096];
    size_t out_len, err_len;
    int running;
    int status;     /* from waitpid */
    int on_its_own; /* ended before the launcher signalled it */
} rank_proc;

typedef struct run_opts {
    int nproc, nnodes, node_rank, port, threads, prefix;
    const char *addr;
    double drain_s, kill_grace_s;
    char **cmd;
} run_opts;

static volatile sig_atomic_t g_signal = 0;

static void on_signal(int sig) {
    g_signal = sig;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: zshard run -n N [options] -- COMMAND [ARGS...]\n"
            "\n"
            "Starts N local ranks of COMMAND with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
            "MASTER_ADDR, MASTER_PORT set (torchrun's variables) and OMP_NUM_THREADS =\n"
            "OPENBLAS_NUM_THREADS = max(1, cores / N). When a rank fails the others are stopped\n"
            "and the exit status is non-zero.\n"
            "\n"
            "options:\n"
            "  -n, --nproc-per-node N  local ranks (required)\n"
            "  --nnodes M              hosts in the job (default 1)\n"
            "  --node-rank K           this host's index (default 0)\n"
            "  --master-addr A         rank 0's host (default 127.0.0.1)\n"
            "  --master-port P         rendezvous port (default: a free port; required if M > 1)\n"
            "  --threads T             threads per rank instead of cores / N\n"
            "  --drain S               seconds failed-job ranks get to exit by themselves\n"
            "                          before SIGTERM (default 3)\n"
            "  --kill-grace S          seconds between SIGTERM and SIGKILL (default 5)\n"
            "  --no-prefix             pass output through without the \"[rank] \" prefix\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, run_opts *o) {
    o->nproc = 0;
    o->nnodes = 1;
    o->node_rank = 0;
    o->port = 0;
    o->threads = 0;
    o->prefix = 1;
    o->addr = NULL;
    o->drain_s = 3.0;
    o->kill_grace_s = 5.0;
    o->cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--")) {
            o->cmd = argv + i + 1;
            break;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--no-prefix")) {
            o->prefix = 0;
            continue;
        }
        if (!v) return zs_cli_fail(2, "run: %s needs a value (see zshard run --help)", a);
        if (!strcmp(a, "-n") || !strcmp(a, "--nproc") || !strcmp(a, "--nproc-per-node"))
            bad = parse_int(v, 1, MAX_LOCAL, &o->nproc);
        else if (!strcmp(a, "--nnodes"))
            bad = parse_int(v, 1, 1 << 16, &o->nnodes);
        else if (!strcmp(a, "--node-rank"))
            bad = parse_int(v, 0, 1 << 16, &o->node_rank);
        else if (!strcmp(a, "--master-port"))
            bad = parse_int(v, 1, 65535, &o->port);
        else if (!strcmp(a, "--threads"))
            bad = parse_int(v, 1, 4096, &o->threads);
        else if (!strcmp(a, "--master-addr"))
            o->addr = v;
        else if (!strcmp(a, "--drain"))
            bad = (o->drain_s = atof(v)) < 0;
        else if (!strcmp(a, "--kill-grace"))
            bad = (o->kill_grace_s = atof(v)) < 0;
        else
            return zs_cli_fail(2, "run: unknown option '%s' (see zshard run --help)", a);
        if (bad) return zs_cli_fail(2, "run: bad value '%s' for %s", v, a);
        i++;
    }
    if (!o->cmd || !o->cmd[0])
        return zs_cli_fail(2, "run: no command given (zshard run -n N -- COMMAND ...)");
    if (o->nproc < 1) return zs_cli_fail(2, "run: -n N is required");
    if (o->node_rank >= o->nnodes)
        return zs_cli_fail(2, "run: --node-rank %d must be below --nnodes %d", o->node_rank,
                           o->nnodes);
    if (o->nnodes > 1 && (!o->port || !o->addr))
        return zs_cli_fail(2, "run: --nnodes > 1 needs --master-addr and --master-port");
    return 0;
}

/* A port the kernel says is free now (bind to 0). Another process could take it before rank
 * 0 listens; the window is short and the failure loud. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int num_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void set_env_int(const char *name, int v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

/* The job id every rank of this launch gets (ZS_JOB_ID; it names the job's shared-memory
 * segments): this launcher's pid, appended to an inherited ZS_JOB_ID so that whoever set that
 * (a test, an outer tool) still recognises the job's segments by prefix. Set once by
 * set_job_id() before any rank is forked, so children see the launcher's value. */
static char g_job_id[96];

static void set_job_id(void) {
    const char *outer = getenv("ZS_JOB_ID");
    if (outer && *outer)
        snprintf(g_job_id, sizeof g_job_id, "%.60sx%d", outer, (int)getpid());
    else
        snprintf(g_job_id, sizeof g_job_id, "%d", (int)getpid());
}

static pid_t spawn(const run_opts *o, int local, int port, int threads, rank_proc *rp) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0); /* its own group: stopping a rank stops its children too */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        dup2(out[1], 1);
        dup2(err[1], 2);
        set_env_int("RANK", o->node_rank * o->nproc + local);
        set_env_int("WORLD_SIZE", o->nnodes * o->nproc);
        set_env_int("LOCAL_RANK", local);
        set_env_int("LOCAL_WORLD_SIZE", o->nproc);
        set_env_int("GROUP_RANK", o->node_rank);
        set_env_int("NODE_RANK", o->node_rank);
        setenv("MASTER_ADDR", o->addr ? o->addr : "127.0.0.1", 1);
        set_env_int("MASTER_PORT", port);
        set_env_int("OMP_NUM_THREADS", threads);
        set_env_int("OPENBLAS_NUM_THREADS", threads);
        setenv("ZS_JOB_ID", g_job_id, 1);
        execvp(o->cmd[0], o->cmd);
        fprintf(stderr, "zshard run: cannot execute '%s': %s\n", o->cmd[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also from the parent: no race with the first kill */
    close(out[1]);
    close(err[1]);
    rp->pid = pid;
    rp->out_fd = out[0];
    rp->err_fd = err[0];
    rp->running = 1;
    return pid;
}

/* Forward complete lines with the rank prefix; at EOF (final) flush the partial line. */
static void emit(FILE *f, int rank, int prefix, char *buf, size_t *len, int final) {
    size_t start = 0;
    for (size_t i = 0; i < *len; i++) {
        if (buf[i] != '\n') continue;
        if (prefix) fprintf(f, "[%d] ", rank);
        fwrite(buf + start, 1, i + 1 - start, f);
        start = i + 1;
    }
    if ((final || start == 0) && start < *len && (final || *len == 4096)) {
        if (prefix) fprintf(f, "[%d] ", rank);
        fwrite(buf + start, 1, *len - start, f);
        fputc('\n', f);
        start = *len;
    }
    memmove(buf, buf + start, *len - start);
    *len -= start;
    fflush(f);
}

static void pump(rank_proc *rp, int rank, int prefix, int which, int final) {
    int *fd = which ? &rp->err_fd : &rp->out_fd;
    char *buf = which ? rp->err_buf : rp->out_buf;
    size_t *len = which ? &rp->err_len : &rp->out_len;
    FILE *f = which ? stderr : stdout;
    if (*fd >= 0 && !final) {
        ssize_t n = read(*fd, buf + *len, 4096 - *len);
        if (n > 0) *len += (size_t)n;
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            close(*fd);
            *fd = -1;
            final = 1;
        }
    }
    emit(f, rank, prefix, buf, len, final);
}

static void describe(int status, char *buf, size_t cap) {
    if (WIFEXITED(status))
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "ended with wait status %d", status);
}

/* Remove any /dev/shm segment of this job that a rank killed mid-setup left behind. */
static void clean_shm(void) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "zshard-job%s-", g_job_id);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char path[512];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        unlink(path);
    }
    closedir(d);
}

static void signal_all(rank_proc *rp, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (rp[i].running) kill(-rp[i].pid, sig);
}

int zs_cli_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    int port = o.port ? o.port : free_port();
    if (port <= 0) return zs_cli_fail(1, "run: cannot find a free port for the rendezvous");
    int threads = o.threads ? o.threads : num_cores() / o.nproc;
    if (threads < 1) threads = 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank_proc *rp = calloc((size_t)o.nproc, sizeof *rp);
    if (!rp) return zs_cli_fail(1, "run: out of memory");
    int nrun = 0;
    set_job_id();
    for (int i = 0; i < o.nproc; i++) {
        if (spawn(&o, i, port, threads, &rp[i]) < 0) {
            signal_all(rp, i, SIGKILL);
            return zs_cli_fail(1, "run: cannot start rank %d: %s", i, strerror(errno));
        }
        nrun++;
    }

    int failed = -1, fail_status = 0, interrupted = 0, termed = 0;
    double fail_t = 0, term_t = 0;
    struct pollfd pfd[2 * MAX_LOCAL];
    int open_fds = 2 * o.nproc;
    double all_exited_t = 0;
    while (nrun > 0 || open_fds > 0) {
        /* A rank's own children may hold its pipes open after it exits: do not wait long. */
        if (nrun == 0 && all_exited_t == 0) all_exited_t = now_s();
        if (nrun == 0 && now_s() - all_exited_t > 2.0) break;
        int np = 0, owner[2 * MAX_LOCAL], which[2 * MAX_LOCAL];
        for (int i = 0; i < o.nproc; i++) {
            if (rp[i].out_fd >= 0) {
                pfd[np] = (struct pollfd){rp[i].out_fd, POLLIN, 0};
                owner[np] = i, which[np++] = 0;
            }
            if (rp[i].err_fd >= 0) {
                pfd[np] = (struct pollfd){rp[i].err_fd, POLLIN, 0};
                owner[np] = i, which[np++] = 1;
            }
        }
        open_fds = np;
        int pr = poll(pfd, (nfds_t)np, 50);
        for (int k = 0; pr > 0 && k < np; k++)
            if (pfd[k].revents)
                pump(&rp[owner[k]], o.node_rank * o.nproc + owner[k], o.prefix, which[k], 0);

        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < o.nproc; i++) {
                if (rp[i].pid != pid || !rp[i].running) continue;
                rp[i].running = 0;
                rp[i].status = status;
                rp[i].on_its_own = !termed;
                nrun--;
                int bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                if (bad && failed < 0 && !interrupted) {
                    failed = i;
                    fail_status = status;
                    fail_t = now_s();
                }
            }
        }
        double t = now_s();
        if (g_signal && !interrupted) {
            interrupted = 1;
            signal_all(rp, o.nproc, SIGTERM);
            termed = 1;
            term_t = t;
        }
        if (failed >= 0 && !termed && nrun > 0 && t - fail_t >= o.drain_s) {
            signal_all(rp, o.nproc, SIGTERM);
            termed = 1;
            term_t = t;
        }
        if (termed && nrun > 0 && t - term_t >= o.kill_grace_s) {
            signal_all(rp, o.nproc, SIGKILL);
            term_t = t + 1e9; /* once */
        }
    }
    for (int i = 0; i < o.nproc; i++) {
        pump(&rp[i], o.node_rank * o.nproc + i, o.prefix, 0, 1);
        pump(&rp[i], o.node_rank * o.nproc + i, o.prefix, 1, 1);
    }
    clean_shm();

    int code = 0;
    if (interrupted) {
        fprintf(stderr, "zshard run: interrupted by signal %d (%s); stopped all %d ranks\n",
                (int)g_signal, strsignal((int)g_signal), o.nproc);
        code = 128 + (int)g_signal;
    } else if (failed >= 0) {
        char how[128];
        describe(fail_status, how, sizeof how);
        int others = 0, same = 0;
        for (int i = 0; i < o.nproc; i++) {
            if (i != failed && !(WIFEXITED(rp[i].status) && WEXITSTATUS(rp[i].status) == 0))
                others++;
            same += rp[i].on_its_own && rp[i].status == fail_status;
        }
        /* Every rank stopped by itself the same way (e.g. the same bad flag or file, seen by
         * each): say so, so that the first one to go is not taken for the only culprit. */
        if (same == o.nproc && o.nproc > 1)
            fprintf(stderr,
                    "zshard run: rank %d (pid %d) %s first; all %d local ranks ended that way on "
                    "their own, so it is likely the same failure everywhere (see the messages "
                    "above; world of %d)\n",
                    o.node_rank * o.nproc + failed, (int)rp[failed].pid, how, o.nproc,
                    o.nnodes * o.nproc);
        else
            fprintf(stderr,
                    "zshard run: rank %d (pid %d) %s; %d other rank%s failed or %s stopped "
                    "(world of %d)\n",
                    o.node_rank * o.nproc + failed, (int)rp[failed].pid, how, others,
                    others == 1 ? "" : "s", others == 1 ? "was" : "were", o.nnodes * o.nproc);
        code = WIFEXITED(fail_status) ? WEXITSTATUS(fail_status) : 128 + WTERMSIG(fail_status);
        if (code == 0) code = 1;
    }
    free(rp);
    return code;
}

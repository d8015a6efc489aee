/* `zshard run`: the launcher (a torchrun equivalent). Starts the local ranks of a command
 * with torchrun's variables, a share of the cores each, and rank-prefixed output; when one
 * rank fails it gives the others a moment to report, then stops them (SIGTERM, then
 * SIGKILL) and exits non-zero with one line naming the rank and how it failed. */
#include "cli/cli.h"
#include "args/flags.h"
#include "cli/run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOCAL ZS_RUN_MAX_LOCAL

typedef zs_rank_proc rank_proc;

typedef struct run_opts {
    int nproc, nnodes, node_rank, port, threads, prefix, max_restarts, no_prefix, no_stdout_prefix;
    const char *addr;
    double drain_s, kill_grace_s, backoff_s;
    char **cmd;
    const char *config_path; /* --config */
} run_opts;

static volatile sig_atomic_t g_signal = 0, g_nsignals = 0;

static void on_signal(int sig) {
    if (!g_signal) g_signal = sig;
    g_nsignals++;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A word before "--" that is no option: the command belongs after "--". */
static int run_positional(void *opts, const char *a) {
    return zs_cli_fail(2,
                       "run: '%s' is not an option of zshard run: put the command after --, as in "
                       "`zshard run -n N -- %s ...`",
                       a, a);
}

#define RO(field) offsetof(run_opts, field)
static const zs_flag RUN_FLAGS[] = {
    ZS_FLAG_CONFIG_ROW(RO(config_path)),
    {.name = "nproc-per-node", .kind = ZS_FLAG_INT, .off = RO(nproc), .lo = 1, .hi = MAX_LOCAL,
     .arg = "N", .help = "local ranks (required); also -n N, --nproc N"},
    {.name = "n", .kind = ZS_FLAG_INT, .off = RO(nproc), .lo = 1, .hi = MAX_LOCAL,
     .opt = ZS_FLAG_HIDDEN},
    {.name = "nproc", .kind = ZS_FLAG_INT, .off = RO(nproc), .lo = 1, .hi = MAX_LOCAL,
     .opt = ZS_FLAG_HIDDEN},
    {.name = "nnodes", .kind = ZS_FLAG_INT, .off = RO(nnodes), .lo = 1, .hi = 1 << 16, .arg = "M",
     .help = "hosts in the job [1]"},
    {.name = "node-rank", .kind = ZS_FLAG_INT, .off = RO(node_rank), .lo = 0, .hi = 1 << 16,
     .arg = "K", .help = "this host's index [0]"},
    {.name = "master-addr", .kind = ZS_FLAG_STR, .off = RO(addr), .arg = "A",
     .help = "rank 0's host [127.0.0.1]"},
    {.name = "master-port", .kind = ZS_FLAG_INT, .off = RO(port), .lo = 1, .hi = 65535,
     .arg = "P", .help = "rendezvous port [a free port; required if M > 1]"},
    {.name = "threads", .kind = ZS_FLAG_INT, .off = RO(threads), .lo = 1, .hi = 4096, .arg = "T",
     .help = "threads per rank instead of cores / N (or\n"
             "$OMP_NUM_THREADS when set)"},
    {.name = "max-restarts", .kind = ZS_FLAG_INT, .off = RO(max_restarts), .lo = 0, .hi = 1000,
     .arg = "R",
     .help = "restart the whole job up to R times after a rank fails\n"
             "(TORCHELASTIC_RESTART_COUNT tells the ranks) [0]"},
    {.name = "restart-backoff", .kind = ZS_FLAG_DOUBLE, .off = RO(backoff_s), .lo = 0, .hi = -1,
     .arg = "S",
     .help = "seconds before the first restart, doubling (at most\n"
             "60) for each next one [1]"},
    {.name = "drain", .kind = ZS_FLAG_DOUBLE, .off = RO(drain_s), .lo = 0, .hi = -1, .arg = "S",
     .help = "seconds failed-job ranks get to exit by themselves\n"
             "before SIGTERM [3]"},
    {.name = "kill-grace", .kind = ZS_FLAG_DOUBLE, .off = RO(kill_grace_s), .lo = 0, .hi = -1,
     .arg = "S", .help = "seconds between SIGTERM and SIGKILL [5]"},
    {.name = "no-prefix", .kind = ZS_FLAG_SWITCH, .off = RO(no_prefix),
     .help = "pass output through without the \"[rank] \" prefix"},
    {.name = "no-stdout-prefix", .kind = ZS_FLAG_SWITCH, .off = RO(no_stdout_prefix),
     .help = "stdout without the prefix, stderr with it (a command\n"
             "whose rank 0 alone writes results, e.g. JSON)"},
};

static const zs_flag_table RUN_TABLE = {
    .cmd = "run",
    .rows = RUN_FLAGS,
    .count = sizeof RUN_FLAGS / sizeof RUN_FLAGS[0],
    .usage =
        "usage: zshard run -n N [options] -- COMMAND [ARGS...]\n"
        "\n"
        "Starts N local ranks of COMMAND with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
        "MASTER_ADDR, MASTER_PORT set (torchrun's variables) and, unless already set,\n"
        "OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = max(1, cores / N) and\n"
        "OMP_WAIT_POLICY=passive. When a rank fails the others are stopped, the summary\n"
        "names the rank at fault with its message, and the exit status is non-zero.\n"
        "SIGINT/SIGTERM are passed to every rank (zshard train saves and stops after its\n"
        "current step); a second one kills them at once.\n"
        "\n"
        "options:\n",
    .positional = run_positional,
    .stop_at_dashes = 1,
};

/* Defaults, then argv: 0, 1 after --help, or the printed error's status. */
static int parse_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->nnodes = 1;
    o->drain_s = 3.0;
    o->kill_grace_s = 5.0;
    o->backoff_s = 1.0;
    int rest = argc;
    int rc = zs_flag_parse(&RUN_TABLE, argc, argv, 1, o, &rest);
    if (rc) return rc < 0 ? 1 : rc;
    o->prefix = o->no_prefix ? 0 : o->no_stdout_prefix ? ZS_RUN_PREFIX_STDERR : 1;
    o->cmd = rest < argc ? argv + rest : NULL;
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

/* The rendezvous port of a launch on one host, reserved for the launch's whole life: a socket
 * bound to a port the kernel picks, on every address (dual stack, as rank 0's store binds),
 * with SO_REUSEADDR and never listening. Rank 0's store servers (one per rendezvous: the
 * job's, then one per communicator split) bind the same port beside it and listen in turn,
 * and a restarted job gets the same port again. Between two servers, and after them, the
 * port stays taken: no other program's bind() can get it (port 0 never picks it, and a plain
 * bind fails), so nothing else can be listening there when a rank connects (docs/comm.md,
 * "The rendezvous store"). Returns the socket, the port in *port, or -1. */
static int reserve_port(int *port) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;
    struct sockaddr_storage a;
    memset(&a, 0, sizeof a);
    socklen_t len;
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&a;
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_any;
        len = sizeof *a6;
    } else {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* no IPv6: as the store does */
        if (fd < 0) return -1;
        struct sockaddr_in *a4 = (struct sockaddr_in *)&a;
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        len = sizeof *a4;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, len) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                          : ((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

static void set_env_int(const char *name, int v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

/* The job id every rank of this launch gets (ZS_JOB_ID; it names the job's shared-memory
 * segments and is the identity its ranks present to the rendezvous store): this launcher's
 * pid, appended to an inherited ZS_JOB_ID so that whoever set that (a test, an outer tool)
 * still recognises the job's segments by prefix. Across hosts every launcher must give the
 * same id, so there the master's port stands in for the pid (docs/comm.md). Set once by
 * set_job_id() before any rank is forked, so children see the launcher's value. */
static char g_job_id[96];

static void set_job_id(const run_opts *o) {
    const char *outer = getenv("ZS_JOB_ID");
    char mine[24];
    if (o->nnodes > 1)
        snprintf(mine, sizeof mine, "p%d", o->port);
    else
        snprintf(mine, sizeof mine, "%d", (int)getpid());
    if (outer && *outer)
        snprintf(g_job_id, sizeof g_job_id, "%.60sx%s", outer, mine);
    else
        snprintf(g_job_id, sizeof g_job_id, "%s", mine);
}

static pid_t spawn(const run_opts *o, int local, int port, const char *threads, int attempt,
                   rank_proc *rp) {
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
        /* The user's own thread settings win (--threads, then the environment). */
        if (threads) setenv("OMP_NUM_THREADS", threads, 1);
        if (threads || !getenv("OPENBLAS_NUM_THREADS"))
            setenv("OPENBLAS_NUM_THREADS", getenv("OMP_NUM_THREADS"), 1);
        setenv("OMP_WAIT_POLICY", "passive", 0);
        set_env_int("TORCHELASTIC_RESTART_COUNT", attempt);
        set_env_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
        setenv("ZS_JOB_ID", g_job_id, 1);
        set_env_int("ZS_LAUNCHER_PID", (int)getppid());
        execvp(o->cmd[0], o->cmd);
        fprintf(stderr, "zshard run: cannot execute '%s': %s\n", o->cmd[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also from the parent: no race with the first kill */
    close(out[1]);
    close(err[1]);
    rp->pid = pid;
    rp->rank = o->node_rank * o->nproc + local;
    rp->out_fd = out[0];
    rp->err_fd = err[0];
    rp->running = 1;
    return pid;
}

/* Pass complete lines on; at EOF (final) also the partial last line, and a line longer than
 * the buffer in pieces. */
static void emit(rank_proc *rp, int prefix, int is_err, char *buf, size_t *len, int final) {
    size_t start = 0;
    for (size_t i = 0; i < *len; i++) {
        if (buf[i] != '\n') continue;
        zs_run_line(rp, prefix, is_err, buf + start, i - start);
        start = i + 1;
    }
    if ((final || start == 0) && start < *len && (final || *len == ZS_RUN_LINE)) {
        zs_run_line(rp, prefix, is_err, buf + start, *len - start);
        start = *len;
    }
    memmove(buf, buf + start, *len - start);
    *len -= start;
}

static void pump(rank_proc *rp, int prefix, int which, int final) {
    int *fd = which ? &rp->err_fd : &rp->out_fd;
    char *buf = which ? rp->err_buf : rp->out_buf;
    size_t *len = which ? &rp->err_len : &rp->out_len;
    if (*fd >= 0 && !final) {
        ssize_t n = read(*fd, buf + *len, ZS_RUN_LINE - *len);
        if (n > 0) *len += (size_t)n;
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            close(*fd);
            *fd = -1;
            final = 1;
        }
    }
    emit(rp, prefix, which, buf, len, final);
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

/* One attempt of the job: start every local rank, pass their output on, and when one fails
 * give the others --drain seconds, then SIGTERM, then SIGKILL. On SIGINT/SIGTERM to the
 * launcher the ranks get SIGTERM and all the time they need to stop cleanly (zshard train
 * finishes its step and saves); a second signal kills them. */
static int run_attempt(const run_opts *o, int port, const char *threads, int attempt,
                       zs_run_job *j) {
    rank_proc *rp = j->rp;
    memset(rp, 0, (size_t)o->nproc * sizeof *rp);
    j->failed = -1;
    j->fail_status = 0;
    j->interrupted = 0;
    int nrun = 0;
    for (int i = 0; i < o->nproc; i++) {
        if (spawn(o, i, port, threads, attempt, &rp[i]) < 0) {
            signal_all(rp, i, SIGKILL);
            return zs_cli_fail(1, "run: cannot start rank %d: %s", i, strerror(errno));
        }
        nrun++;
    }

    int termed = 0, killed = 0;
    double fail_t = 0, term_t = 0;
    struct pollfd pfd[2 * MAX_LOCAL];
    int open_fds = 2 * o->nproc;
    double all_exited_t = 0;
    while (nrun > 0 || open_fds > 0) {
        /* A rank's own children may hold its pipes open after it exits: do not wait long. */
        if (nrun == 0 && all_exited_t == 0) all_exited_t = now_s();
        if (nrun == 0 && now_s() - all_exited_t > 2.0) break;
        int np = 0, owner[2 * MAX_LOCAL], which[2 * MAX_LOCAL];
        for (int i = 0; i < o->nproc; i++) {
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
            if (pfd[k].revents) pump(&rp[owner[k]], o->prefix, which[k], 0);

        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < o->nproc; i++) {
                if (rp[i].pid != pid || !rp[i].running) continue;
                rp[i].running = 0;
                rp[i].status = status;
                rp[i].on_its_own = !termed;
                nrun--;
                int bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                if (bad && j->failed < 0 && !j->interrupted) {
                    j->failed = i;
                    j->fail_status = status;
                    fail_t = now_s();
                }
            }
        }
        double t = now_s();
        if (g_signal && !j->interrupted) {
            j->interrupted = (int)g_signal;
            signal_all(rp, o->nproc, SIGTERM);
            termed = 1;
        }
        if (j->interrupted && g_nsignals > 1 && !killed) {
            signal_all(rp, o->nproc, SIGKILL);
            killed = 1;
        }
        if (j->failed >= 0 && !termed && nrun > 0 && t - fail_t >= o->drain_s) {
            signal_all(rp, o->nproc, SIGTERM);
            termed = 1;
            term_t = t;
        }
        if (termed && !j->interrupted && !killed && nrun > 0 && t - term_t >= o->kill_grace_s) {
            signal_all(rp, o->nproc, SIGKILL);
            killed = 1;
        }
    }
    for (int i = 0; i < o->nproc; i++) {
        pump(&rp[i], o->prefix, 0, 1);
        pump(&rp[i], o->prefix, 1, 1);
    }
    clean_shm();
    return 0;
}

/* Sleep s seconds unless a signal arrives; returns non-zero when one did. */
static int backoff(double s) {
    double end = now_s() + s;
    while (!g_signal && now_s() < end)
        poll(NULL, 0, 20);
    return g_signal != 0;
}

int zs_cli_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    char job[128];
    if (zs_cli_launched_job(job, sizeof job))
        return zs_cli_fail(2,
                           "run: inside a job already launched by %s, every rank would start %d "
                           "ranks of its own: start the command under one launcher",
                           job, o.nproc);
    /* Threads per rank: --threads, else the user's OMP_NUM_THREADS, else a share of the cores
     * this launcher may use (affinity mask, cgroup quota). */
    char threads[16] = "";
    const char *user = getenv("OMP_NUM_THREADS");
    if (o.threads) {
        snprintf(threads, sizeof threads, "%d", o.threads);
        zs_cli_warn_oversubscribed("--threads", o.threads, o.nproc);
    } else if (user && atoi(user) > 0) {
        zs_cli_warn_oversubscribed("OMP_NUM_THREADS", atoi(user), o.nproc);
    } else {
        snprintf(threads, sizeof threads, "%d", zs_cli_thread_share(o.nproc));
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    zs_run_job j;
    memset(&j, 0, sizeof j);
    j.rp = calloc((size_t)o.nproc, sizeof *j.rp);
    if (!j.rp) return zs_cli_fail(1, "run: out of memory");
    j.nproc = o.nproc;
    j.world = o.nnodes * o.nproc;
    j.prefix = o.prefix;
    set_job_id(&o);
    int port = o.port, held = -1;
    if (!port && (held = reserve_port(&port)) < 0) {
        free(j.rp);
        return zs_cli_fail(1, "run: cannot reserve a free port for the rendezvous: %s",
                           strerror(errno));
    }
    int code = 0, restarts = 0;
    char last[1400];
    for (int attempt = 0;; attempt++) {
        if ((rc = run_attempt(&o, port, threads[0] ? threads : NULL, attempt, &j))) {
            code = rc;
            break;
        }
        code = zs_run_report(&j, last, sizeof last);
        /* A job stopped by a signal (given to the launcher or to the ranks: 128+SIGINT or
         * SIGTERM) was asked to stop; it did not fail, so it is not restarted. */
        int asked = j.interrupted || code == 128 + SIGINT || code == 128 + SIGTERM;
        if (code == 0 || asked || o.max_restarts == 0) break;
        if (attempt >= o.max_restarts) {
            fprintf(stderr, "zshard run: giving up after %d restart%s; the last failure: %s\n",
                    attempt, attempt == 1 ? "" : "s", last);
            break;
        }
        double wait = o.backoff_s;
        for (int k = 0; k < attempt && wait < 60; k++)
            wait *= 2;
        if (wait > 60) wait = 60;
        fprintf(stderr, "zshard run: restart %d/%d in %.1f s (all %d ranks)\n", attempt + 1,
                o.max_restarts, wait, o.nproc);
        if (backoff(wait)) {
            code = 128 + (int)g_signal;
            fprintf(stderr, "zshard run: interrupted by signal %d (%s) before restart %d\n",
                    (int)g_signal, strsignal((int)g_signal), attempt + 1);
            break;
        }
        restarts = attempt + 1;
    }
    if (code == 0 && restarts > 0)
        fprintf(stderr, "zshard run: the job succeeded after %d restart%s\n", restarts,
                restarts == 1 ? "" : "s");
    if (held >= 0) close(held);
    free(j.rp);
    return code;
}

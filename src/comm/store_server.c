/* The rendezvous store's server: one thread on rank 0 multiplexes every connection with
 * poll() (docs/comm.md, "The rendezvous store"). A connection is a stranger until its hello
 * names this job, a free rank and, with a secret, proves it knows it; strangers get a few
 * seconds and a few hundred bytes, and the oldest are dropped first when they crowd the
 * table. The server ends when every rank has said goodbye, never because connections
 * closed. A GET for a missing key is parked until a SET provides it. */
#include "comm/store.h"
#include "comm/store_wire.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_KEYS 4096    /* a few keys per rank: shm, gloo and the locality check */
#define MAX_STRANGERS 64 /* connections not yet greeted, held at once */
#define STRANGER_S 3.0   /* a stranger's time to greet */
#define YOUNG_S 1.0      /* a stranger younger than this is not dropped for a newcomer */
#define ACCEPT_BATCH 16  /* accepts per round, so greetings in flight are read in between */
#define GRACE_S 5.0      /* after rank 0 leaves: the others' time to say goodbye */
#define REQ_MAX (ZS_WIRE_REQ_HDR + ZS_WIRE_KEY_MAX + ZS_WIRE_VALUE_MAX)

typedef struct kv {
    char *key;
    uint8_t *val;
    uint32_t len;
} kv;

typedef struct conn {
    int fd;
    int rank;     /* -1: a stranger (no hello yet) */
    double since; /* accepted at */
    uint8_t nonce[ZS_WIRE_NONCE];
    uint8_t *buf;
    size_t len, bufcap;
    char *pending_get; /* the key this rank waits for, or NULL */
    char peer[64];
} conn;

/* Connections refused or dropped, by reason (reported at debug level). */
enum { R_CLOSED, R_JUNK, R_IDLE, R_CROWD, R_FULL, R_FOREIGN, R_SECRET, R_TWICE, R_LATE, R_N };
static const char *const REASON[R_N] = {
    "closed before a hello", "junk or a wrong magic/length", "idle past the greeting time",
    "dropped for newer ones",  "refused (table full)",       "another job",
    "wrong secret",            "a second claim of a rank",   "after the round ended"};

struct zs_store_server {
    int listen_fd, port, world, job_named;
    char job[ZS_WIRE_JOB_MAX + 1];
    char failure[512]; /* set when the job cannot meet: every request is answered with it */
    uint8_t secret[256];
    size_t secret_len;
    double deadline;
    pthread_t thread;
    _Atomic int stop;
    conn *c;
    int n, cap;
    uint8_t *said_bye;
    int byes;
    kv keys[MAX_KEYS];
    int nkeys;
    long refused[R_N];
};

/* ---- keys ---------------------------------------------------------------------------- */

static kv *find_key(zs_store_server *s, const char *key) {
    for (int i = 0; i < s->nkeys; i++)
        if (!strcmp(s->keys[i].key, key)) return &s->keys[i];
    return NULL;
}

static int set_key(zs_store_server *s, const char *key, const uint8_t *val, uint32_t len) {
    kv *e = find_key(s, key);
    if (!e) {
        if (s->nkeys == MAX_KEYS) return -1;
        char *k = strdup(key);
        if (!k) return -1;
        e = &s->keys[s->nkeys++];
        *e = (kv){k, NULL, 0};
    }
    uint8_t *v = malloc(len ? len : 1);
    if (!v) return -1;
    if (len) memcpy(v, val, len);
    free(e->val);
    e->val = v;
    e->len = len;
    return 0;
}

/* ---- connections --------------------------------------------------------------------- */

/* Replies are small and their rank is waiting for them: a blocking send, bounded by the
 * socket's send timeout (a rank that stops reading is dropped, not waited for). */
static int send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t got = send(fd, b, n, MSG_NOSIGNAL);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        b += got;
        n -= (size_t)got;
    }
    return 0;
}

static int reply(int fd, uint8_t status, const void *val, uint32_t len) {
    uint8_t h[ZS_WIRE_REQ_HDR];
    zs_wire_put_req_hdr(h, status, 0, len);
    if (send_all(fd, h, sizeof h)) return -1;
    return len ? send_all(fd, val, len) : 0;
}

/* reason: one of R_*, or -1 for a rank's connection (logged when it had not said goodbye),
 * or -2 at shutdown (silent). */
static void drop(zs_store_server *s, conn *c, int reason) {
    if (c->fd < 0) return;
    if (reason >= 0) {
        s->refused[reason]++;
        ZS_LOG_D("rendezvous store :%d: connection from %s %s", s->port, c->peer, REASON[reason]);
    } else if (reason == -1 && c->rank >= 0 && !s->said_bye[c->rank]) {
        ZS_LOG_D("rendezvous store :%d: rank %d's connection closed before its goodbye", s->port,
                 c->rank);
    }
    close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->bufcap = 0;
    free(c->pending_get);
    c->pending_get = NULL;
}

static void accept_one(zs_store_server *s, double now) {
    struct sockaddr_storage a;
    socklen_t alen = sizeof a;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&a, &alen, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        /* Out of descriptors: make room by dropping the oldest stranger. */
        for (int i = 0; i < s->n; i++)
            if (s->c[i].fd >= 0 && s->c[i].rank < 0) {
                drop(s, &s->c[i], R_CROWD);
                break;
            }
        return;
    }
    if (fd < 0) return;
    int strangers = 0, oldest = -1;
    for (int i = 0; i < s->n; i++)
        if (s->c[i].fd >= 0 && s->c[i].rank < 0) {
            strangers++;
            if (oldest < 0) oldest = i; /* the table keeps accept order */
        }
    if (strangers >= MAX_STRANGERS || s->n == s->cap) {
        if (oldest < 0 || now - s->c[oldest].since < YOUNG_S || s->n == s->cap) {
            s->refused[R_FULL]++;
            close(fd);
            return;
        }
        drop(s, &s->c[oldest], R_CROWD);
    }
    conn *c = &s->c[s->n];
    *c = (conn){.fd = fd, .rank = -1, .since = now};
    char host[INET6_ADDRSTRLEN] = "?";
    if (a.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host);
    else if (a.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host);
    snprintf(c->peer, sizeof c->peer, "%s", host);
    int one = 1;
    struct timeval tv = {5, 0};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint8_t hello[ZS_WIRE_SERVER_HELLO];
    zs_wire_random(c->nonce, sizeof c->nonce);
    zs_wire_put_server_hello(hello, s->secret_len ? ZS_WIRE_FLAG_SECRET : 0, c->nonce);
    s->n++;
    if (send(fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof hello)
        drop(s, c, R_CLOSED);
}

static void answer(zs_store_server *s, conn *c, const zs_wire_hello *h, uint8_t status,
                   const char *msg) {
    uint8_t mac[ZS_WIRE_MAC], out[ZS_WIRE_ANSWER_FIXED + 512];
    zs_wire_welcome_mac(s->secret, s->secret_len, c->nonce, h->nonce, status, s->job, mac);
    size_t n = zs_wire_put_answer(out, status, mac, msg);
    if (send(c->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) drop(s, c, R_CLOSED);
}

/* The job cannot meet (a rank of it was started wrong): the ranks waiting for keys, and every
 * later request, get the reason instead of waiting for the timeout. */
static void fail_job(zs_store_server *s, const char *why) {
    snprintf(s->failure, sizeof s->failure, "%s", why);
    for (int i = 0; i < s->n; i++)
        if (s->c[i].fd >= 0 && s->c[i].pending_get) {
            free(s->c[i].pending_get);
            s->c[i].pending_get = NULL;
            if (reply(s->c[i].fd, ZS_WIRE_JOB_FAILED, s->failure, (uint32_t)strlen(s->failure)))
                drop(s, &s->c[i], -1);
        }
}

/* A stranger's hello: welcome it as its rank, or refuse it with a message for its user. */
static void greet(zs_store_server *s, conn *c, const zs_wire_hello *h) {
    char msg[512];
    uint8_t want[ZS_WIRE_MAC];
    if (s->secret_len) {
        if (zs_wire_hello_mac(s->secret, s->secret_len, c->nonce, h, want) ||
            !zs_wire_mac_equal(want, h->mac)) {
            ZS_LOG_W("rendezvous store :%d: refused %s (claiming rank %u): it does not know this "
                     "job's secret",
                     s->port, c->peer, h->rank);
            answer(s, c, h, ZS_WIRE_REFUSED,
                   "its secret does not match the job's: ZS_JOB_SECRET (or the file "
                   "ZS_JOB_SECRET_FILE names) must be the same on every rank");
            drop(s, c, R_SECRET);
            return;
        }
    }
    if (!strcmp(h->job, s->job) && (int)h->world != s->world && s->job_named) {
        /* The job's own name with another world size: a rank of this job started wrong.
         * Both sides fail, each naming the two sizes. */
        snprintf(msg, sizeof msg,
                 "mismatched world sizes: rank %u has WORLD_SIZE=%u but rank 0 has %d; start "
                 "every rank with the same WORLD_SIZE",
                 h->rank, h->world, s->world);
        answer(s, c, h, ZS_WIRE_REFUSED, msg);
        drop(s, c, R_FOREIGN);
        fail_job(s, msg);
        return;
    }
    if (strcmp(h->job, s->job) || (int)h->world != s->world) {
        ZS_LOG_W("rendezvous store :%d: refused rank %u of job '%s' (world %u) from %s: this "
                 "store serves job '%s' (world %d); another job uses MASTER_PORT %d",
                 s->port, h->rank, h->job, h->world, c->peer, s->job, s->world, s->port);
        snprintf(msg, sizeof msg,
                 "it serves job '%.150s' (world %d), not this rank's job '%.150s' (world %u): "
                 "two jobs use MASTER_PORT %d; give each job its own port (or its own ZS_JOB_ID)",
                 s->job, s->world, h->job, h->world, s->port);
        answer(s, c, h, ZS_WIRE_REFUSED, msg);
        drop(s, c, R_FOREIGN);
        return;
    }
    if (s->said_bye[h->rank] || s->stop) {
        answer(s, c, h, ZS_WIRE_RETRY, "this rendezvous round has ended");
        drop(s, c, R_LATE);
        return;
    }
    for (int i = 0; i < s->n; i++)
        if (s->c[i].fd >= 0 && s->c[i].rank == (int)h->rank) {
            snprintf(msg, sizeof msg,
                     "rank %u joined the job at the master twice (the first from %s): two "
                     "processes claim rank %u; check RANK on each",
                     h->rank, s->c[i].peer, h->rank);
            answer(s, c, h, ZS_WIRE_REFUSED, msg);
            drop(s, c, R_TWICE);
            return;
        }
    answer(s, c, h, ZS_WIRE_WELCOME, "");
    if (c->fd >= 0) c->rank = (int)h->rank;
}

/* One request of a rank. Returns -1 when the connection must close. */
static int serve(zs_store_server *s, conn *c, const zs_wire_req *r) {
    char key[ZS_WIRE_KEY_MAX + 1];
    memcpy(key, r->key, r->klen);
    key[r->klen] = '\0';
    if (r->cmd == ZS_WIRE_BYE) {
        if (!s->said_bye[c->rank]) s->byes++;
        s->said_bye[c->rank] = 1;
        return -1;
    }
    if (s->failure[0])
        return reply(c->fd, ZS_WIRE_JOB_FAILED, s->failure, (uint32_t)strlen(s->failure));
    if (r->cmd == ZS_WIRE_SET) {
        if (set_key(s, key, r->val, r->vlen)) return reply(c->fd, 1, NULL, 0);
        if (reply(c->fd, 0, NULL, 0)) return -1;
        for (int i = 0; i < s->n; i++)
            if (s->c[i].fd >= 0 && s->c[i].pending_get && !strcmp(s->c[i].pending_get, key)) {
                free(s->c[i].pending_get);
                s->c[i].pending_get = NULL;
                if (reply(s->c[i].fd, 0, r->val, r->vlen)) drop(s, &s->c[i], -1);
            }
        return 0;
    }
    if (r->cmd == ZS_WIRE_GET) {
        kv *e = find_key(s, key);
        if (e) return reply(c->fd, 0, e->val, e->len);
        free(c->pending_get);
        c->pending_get = strdup(key);
        return c->pending_get ? 0 : -1;
    }
    int64_t d, v = 0; /* ZS_WIRE_ADD; the parser holds its value to 8 bytes */
    memcpy(&d, r->val, 8);
    kv *e = find_key(s, key);
    if (e && e->len == 8) memcpy(&v, e->val, 8);
    v += d;
    return set_key(s, key, (uint8_t *)&v, 8) ? reply(c->fd, 1, NULL, 0) : reply(c->fd, 0, &v, 8);
}

/* Read what c sent and act on every whole message in it. */
static void on_readable(zs_store_server *s, conn *c) {
    size_t cap = c->rank < 0 ? ZS_WIRE_HELLO_FIXED + ZS_WIRE_JOB_MAX : REQ_MAX;
    if (c->bufcap < cap) { /* a stranger gets a hello's room; a rank a request's */
        uint8_t *b = realloc(c->buf, cap);
        if (!b) return drop(s, c, R_CLOSED);
        c->buf = b;
        c->bufcap = cap;
    }
    ssize_t got = recv(c->fd, c->buf + c->len, cap - c->len, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) return drop(s, c, c->rank < 0 ? R_CLOSED : -1);
    c->len += (size_t)got;
    while (c->fd >= 0 && c->len > 0) {
        const char *why = "";
        size_t used = 0;
        int rc;
        if (c->rank < 0) {
            zs_wire_hello h;
            rc = zs_wire_parse_hello(c->buf, c->len, &h, &used, &why);
            if (rc == ZS_WIRE_OK) greet(s, c, &h);
        } else {
            zs_wire_req r;
            rc = zs_wire_parse_req(c->buf, c->len, &r, &why);
            used = r.size;
            if (rc == ZS_WIRE_OK && serve(s, c, &r)) drop(s, c, -1);
        }
        if (rc == ZS_WIRE_NEED) return;
        if (rc == ZS_WIRE_BAD) {
            if (c->rank >= 0)
                ZS_LOG_D("rendezvous store :%d: rank %d sent a bad request (%s)", s->port,
                         c->rank, why);
            return drop(s, c, c->rank < 0 ? R_JUNK : -1);
        }
        if (c->fd < 0) return;
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
    }
}

static void *server_main(void *arg) {
    zs_store_server *s = arg;
    struct pollfd *pfd = calloc((size_t)s->cap + 1, sizeof *pfd);
    double grace = 0;
    while (pfd && s->byes < s->world) {
        double now = zs_now_s();
        if (now > s->deadline) break;
        if (s->stop && grace == 0) grace = now + GRACE_S;
        if (grace > 0 && now > grace) break;
        pfd[0] = (struct pollfd){s->listen_fd, POLLIN, 0};
        for (int i = 0; i < s->n; i++)
            pfd[i + 1] = (struct pollfd){s->c[i].fd, POLLIN, 0};
        int nconn = s->n;
        if (poll(pfd, (nfds_t)nconn + 1, 100) < 0 && errno != EINTR) break;
        now = zs_now_s();
        for (int i = 0; i < nconn; i++)
            if (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(s, &s->c[i]);
        for (int i = 0; i < s->n; i++)
            if (s->c[i].fd >= 0 && s->c[i].rank < 0 && now - s->c[i].since > STRANGER_S)
                drop(s, &s->c[i], R_IDLE);
        int j = 0; /* compact, keeping accept order */
        for (int i = 0; i < s->n; i++)
            if (s->c[i].fd >= 0) s->c[j++] = s->c[i];
        s->n = j;
        for (int k = 0; k < ACCEPT_BATCH && (pfd[0].revents & POLLIN); k++) {
            struct pollfd l = {s->listen_fd, POLLIN, 0};
            if (k > 0 && poll(&l, 1, 0) <= 0) break;
            accept_one(s, now);
        }
    }
    /* Stop listening now, not when rank 0 gets round to zs_store_server_stop: a socket that
     * listens while nothing accepts would take a late rank's connection and leave it without
     * a greeting, which the rank must read as "not a zshard store". Closed, the port refuses,
     * and the rank connects again until its own timeout. */
    close(s->listen_fd);
    s->listen_fd = -1;
    for (int i = 0; i < s->n; i++)
        drop(s, &s->c[i], -2);
    long total = 0;
    for (int r = 0; r < R_N; r++)
        total += s->refused[r];
    if (total) {
        char line[512];
        size_t at = 0;
        for (int r = 0; r < R_N && at < sizeof line; r++)
            if (s->refused[r])
                at += (size_t)snprintf(line + at, sizeof line - at, "%s%ld %s", at ? ", " : "",
                                       s->refused[r], REASON[r]);
        ZS_LOG_D("rendezvous store :%d: turned away %ld connections (%s)", s->port, total, line);
    }
    free(pfd);
    return NULL;
}

static zs_status server_listen(zs_store_server *s, int port) {
    s->listen_fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int v6 = s->listen_fd >= 0;
    if (!v6) s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0)
        return zs_error(ZS_ERR_COMM, "rendezvous store: socket: %s", strerror(errno));
    int one = 1, zero = 0;
    setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) {
        /* dual stack: serves IPv4 clients too */
        setsockopt(s->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {0};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        rc = bind(s->listen_fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        rc = bind(s->listen_fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc != 0 || listen(s->listen_fd, 1024) != 0)
        return zs_error(ZS_ERR_COMM,
                        "rendezvous store: cannot listen on MASTER_PORT %d: %s%s", port,
                        strerror(errno),
                        errno == EADDRINUSE ? " (another job, or an earlier one still ending, "
                                              "holds it: give this job its own MASTER_PORT)"
                                            : "");
    return ZS_OK;
}

zs_status zs_store_server_start(int port, const zs_store_id *id, double timeout_s,
                                zs_store_server **out) {
    zs_status st = ZS_OK;
    zs_store_server *s = calloc(1, sizeof *s);
    *out = NULL;
    ZS_REQUIRE(s, ZS_ERR_OOM, "rendezvous store: out of memory");
    s->listen_fd = -1;
    s->port = port;
    s->world = id->world;
    s->job_named = id->job_named;
    snprintf(s->job, sizeof s->job, "%s", id->job);
    ZS_REQUIRE(id->secret_len <= sizeof s->secret, ZS_ERR_INVALID,
               "rendezvous store: the job's secret is longer than %zu bytes", sizeof s->secret);
    if (id->secret_len) memcpy(s->secret, id->secret, id->secret_len);
    s->secret_len = id->secret_len;
    s->deadline = zs_now_s() + timeout_s;
    s->cap = id->world + MAX_STRANGERS + 1;
    s->c = calloc((size_t)s->cap, sizeof *s->c);
    s->said_bye = calloc((size_t)id->world, 1);
    ZS_REQUIRE(s->c && s->said_bye, ZS_ERR_OOM, "rendezvous store: out of memory");
    ZS_CHECK(server_listen(s, port));
    ZS_REQUIRE(pthread_create(&s->thread, NULL, server_main, s) == 0, ZS_ERR_COMM,
               "rendezvous store: cannot start the server thread");
    *out = s;
    return ZS_OK;
fail:
    if (s && s->listen_fd >= 0) close(s->listen_fd);
    if (s) free(s->c), free(s->said_bye);
    free(s);
    return st;
}

void zs_store_server_stop(zs_store_server *s) {
    if (!s) return;
    s->stop = 1;
    pthread_join(s->thread, NULL);
    if (s->listen_fd >= 0) close(s->listen_fd); /* the thread closes it when it ends */
    for (int i = 0; i < s->nkeys; i++) {
        free(s->keys[i].key);
        free(s->keys[i].val);
    }
    free(s->c);
    free(s->said_bye);
    free(s);
}

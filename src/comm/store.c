/* TCP key-value store: one server thread on rank 0 multiplexes all clients with poll();
 * a GET for a missing key is parked until a SET provides it. Wire format, both ways:
 * a 9-byte header (u8 cmd or status, u32 key length, u32 value length) then the bytes. */
#include "comm/store.h"
#include "core/status.h"
#include "core/timer.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { CMD_SET = 1, CMD_GET = 2, CMD_ADD = 3 };
#define MAX_KEYS 4096 /* a few keys per rank: shm, gloo and the locality check */
#define MAX_CLIENTS 1024
#define MAX_LEN 65536

typedef struct kv {
    char *key;
    uint8_t *val;
    uint32_t len;
} kv;

typedef struct client {
    int fd;
    char *pending_get; /* key this client waits for, or NULL */
} client;

struct zs_store {
    int fd; /* client connection */
    double timeout_s;
    char where[300];
    /* server */
    int is_server, world, listen_fd;
    pthread_t thread;
    int thread_started;
    _Atomic int stop; /* destroy: serve the stragglers for a short grace period only */
    kv keys[MAX_KEYS];
    int nkeys;
};

/* ---- blocking I/O with a deadline ---------------------------------------------------- */

static zs_status io_all(int fd, void *buf, size_t n, int writing, double deadline,
                        const char *where) {
    uint8_t *p = buf;
    while (n > 0) {
        double left = deadline - zs_now_s();
        if (left <= 0)
            return zs_error(ZS_ERR_TIMEOUT, "rendezvous store %s: no answer before the timeout",
                            where);
        struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t got = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0)
            return zs_error(ZS_ERR_COMM, "rendezvous store %s: connection lost (%s)", where,
                            got == 0 ? "closed by peer" : strerror(errno));
        p += got;
        n -= (size_t)got;
    }
    return ZS_OK;
}

static void put_hdr(uint8_t *h, uint8_t cmd, uint32_t a, uint32_t b) {
    h[0] = cmd;
    memcpy(h + 1, &a, 4);
    memcpy(h + 5, &b, 4);
}

/* ---- server -------------------------------------------------------------------------- */

static kv *find_key(zs_store *s, const char *key) {
    for (int i = 0; i < s->nkeys; i++)
        if (!strcmp(s->keys[i].key, key)) return &s->keys[i];
    return NULL;
}

/* Server replies are small and the client is waiting for them: a plain blocking send. */
static int reply(int fd, uint8_t status, const void *val, uint32_t len) {
    uint8_t h[9];
    put_hdr(h, status, 0, len);
    if (send(fd, h, 9, MSG_NOSIGNAL) != 9) return -1;
    if (len && send(fd, val, len, MSG_NOSIGNAL) != (ssize_t)len) return -1;
    return 0;
}

static int set_key(zs_store *s, const char *key, const uint8_t *val, uint32_t len) {
    kv *e = find_key(s, key);
    if (!e) {
        if (s->nkeys == MAX_KEYS) return -1;
        e = &s->keys[s->nkeys++];
        e->key = strdup(key);
        e->val = NULL;
    }
    free(e->val);
    e->val = malloc(len ? len : 1);
    if (!e->key || !e->val) return -1;
    memcpy(e->val, val, len);
    e->len = len;
    return 0;
}

/* Handle one request from c; returns -1 when the client is gone. */
static int serve_one(zs_store *s, client *c, client *all, int nall) {
    uint8_t h[9];
    uint32_t klen, vlen;
    if (recv(c->fd, h, 9, MSG_WAITALL) != 9) return -1;
    memcpy(&klen, h + 1, 4);
    memcpy(&vlen, h + 5, 4);
    if (klen == 0 || klen > 1024 || vlen > MAX_LEN) return -1;
    char key[1025];
    uint8_t *val = malloc(vlen ? vlen : 1);
    if (!val) return -1;
    int rc = 0;
    if (recv(c->fd, key, klen, MSG_WAITALL) != (ssize_t)klen ||
        (vlen && recv(c->fd, val, vlen, MSG_WAITALL) != (ssize_t)vlen)) {
        free(val);
        return -1;
    }
    key[klen] = '\0';
    if (h[0] == CMD_SET) {
        rc = set_key(s, key, val, vlen) ? reply(c->fd, 1, NULL, 0) : reply(c->fd, 0, NULL, 0);
        for (int i = 0; i < nall && rc == 0; i++)
            if (all[i].pending_get && !strcmp(all[i].pending_get, key)) {
                reply(all[i].fd, 0, val, vlen);
                free(all[i].pending_get);
                all[i].pending_get = NULL;
            }
    } else if (h[0] == CMD_GET) {
        kv *e = find_key(s, key);
        if (e)
            rc = reply(c->fd, 0, e->val, e->len);
        else
            c->pending_get = strdup(key);
    } else if (h[0] == CMD_ADD && vlen == 8) {
        int64_t d, v = 0;
        memcpy(&d, val, 8);
        kv *e = find_key(s, key);
        if (e && e->len == 8) memcpy(&v, e->val, 8);
        v += d;
        rc = set_key(s, key, (uint8_t *)&v, 8) ? reply(c->fd, 1, NULL, 0) : reply(c->fd, 0, &v, 8);
    } else {
        rc = -1;
    }
    free(val);
    return rc;
}

static void *server_main(void *arg) {
    zs_store *s = arg;
    client *cl = calloc(MAX_CLIENTS, sizeof *cl);
    struct pollfd *pfd = calloc(MAX_CLIENTS + 1, sizeof *pfd);
    int n = 0, gone = 0;
    /* Every client (rank 0's own too) leaves once, after the final barrier of create. */
    double deadline = zs_now_s() + s->timeout_s, grace = 0;
    while (cl && pfd && gone < s->world && zs_now_s() < deadline) {
        if (s->stop && grace == 0) grace = zs_now_s() + 5.0;
        if (grace > 0 && zs_now_s() > grace) break;
        pfd[0] = (struct pollfd){s->listen_fd, POLLIN, 0};
        for (int i = 0; i < n; i++)
            pfd[i + 1] = (struct pollfd){cl[i].fd, POLLIN, 0};
        if (poll(pfd, (nfds_t)n + 1, 100) <= 0) continue;
        if ((pfd[0].revents & POLLIN) && n < MAX_CLIENTS) {
            int fd = accept(s->listen_fd, NULL, NULL);
            if (fd >= 0) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                cl[n++] = (client){fd, NULL};
            }
        }
        for (int i = 0; i < n; i++) {
            if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (serve_one(s, &cl[i], cl, n) < 0) {
                close(cl[i].fd);
                free(cl[i].pending_get);
                cl[i].fd = -1;
                gone++;
            }
        }
        /* compact (pfd indices are rebuilt each round) */
        int j = 0;
        for (int i = 0; i < n; i++)
            if (cl[i].fd >= 0) cl[j++] = cl[i];
        n = j;
    }
    for (int i = 0; cl && i < n; i++) {
        close(cl[i].fd);
        free(cl[i].pending_get);
    }
    free(cl);
    free(pfd);
    return NULL;
}

static zs_status server_listen(zs_store *s, int port) {
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
        return zs_error(ZS_ERR_COMM, "rendezvous store: cannot listen on port %d: %s", port,
                        strerror(errno));
    return ZS_OK;
}

/* ---- client -------------------------------------------------------------------------- */

static zs_status client_connect(zs_store *s, const char *addr, int port) {
    double deadline = zs_now_s() + s->timeout_s;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    const char *why = "no attempt";
    while (zs_now_s() < deadline) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int gr = getaddrinfo(addr, portstr, &hints, &res);
        if (gr == EAI_NONAME)
            return zs_error(ZS_ERR_INVALID,
                            "rendezvous master address '%s' does not resolve (%s): check "
                            "MASTER_ADDR / --master-addr",
                            addr, gai_strerror(gr));
        if (gr != 0) {
            why = gai_strerror(gr);
        } else {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
                if (fd < 0) continue;
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    s->fd = fd;
                    freeaddrinfo(res);
                    return ZS_OK;
                }
                why = strerror(errno);
                close(fd);
            }
            freeaddrinfo(res);
        }
        usleep(50 * 1000);
    }
    return zs_error(ZS_ERR_TIMEOUT,
                    "cannot reach the rendezvous master at %s:%d within %.0f s (%s); is rank 0 "
                    "running and are MASTER_ADDR/MASTER_PORT the same on every rank?",
                    addr, port, s->timeout_s, why);
}

static zs_status request(zs_store *s, uint8_t cmd, const char *key, const void *val, uint32_t vlen,
                         void *out, size_t cap, size_t *outlen) {
    zs_status st = ZS_OK;
    double deadline = zs_now_s() + s->timeout_s;
    uint8_t h[9];
    uint32_t klen = (uint32_t)strlen(key), rlen;
    put_hdr(h, cmd, klen, vlen);
    ZS_CHECK(io_all(s->fd, h, 9, 1, deadline, s->where));
    ZS_CHECK(io_all(s->fd, (void *)key, klen, 1, deadline, s->where));
    if (vlen) ZS_CHECK(io_all(s->fd, (void *)val, vlen, 1, deadline, s->where));
    ZS_CHECK(io_all(s->fd, h, 9, 0, deadline, s->where));
    memcpy(&rlen, h + 5, 4);
    ZS_REQUIRE(h[0] == 0 && rlen <= MAX_LEN, ZS_ERR_COMM,
               "rendezvous store %s: request for key '%s' failed", s->where, key);
    uint8_t tmp[MAX_LEN];
    ZS_CHECK(io_all(s->fd, tmp, rlen, 0, deadline, s->where));
    if (out) memcpy(out, tmp, rlen < cap ? rlen : cap);
    if (outlen) *outlen = rlen;
fail:
    return st;
}

zs_status zs_store_set(zs_store *s, const char *key, const void *val, size_t len) {
    if (len > MAX_LEN) return zs_error(ZS_ERR_INVALID, "store value too large");
    return request(s, CMD_SET, key, val, (uint32_t)len, NULL, 0, NULL);
}

zs_status zs_store_get(zs_store *s, const char *key, void *val, size_t cap, size_t *len) {
    zs_status st = request(s, CMD_GET, key, NULL, 0, val, cap, len);
    if (st == ZS_ERR_TIMEOUT)
        st = zs_error(st,
                      "rendezvous store %s: key '%s' did not appear within %.0f s (did every "
                      "rank start?)",
                      s->where, key, s->timeout_s);
    return st;
}

zs_status zs_store_add(zs_store *s, const char *key, int64_t delta, int64_t *result) {
    int64_t v = 0;
    zs_status st = request(s, CMD_ADD, key, &delta, 8, &v, 8, NULL);
    if (result) *result = v;
    return st;
}

zs_status zs_store_barrier(zs_store *s, const char *name, int world) {
    zs_status st = ZS_OK;
    char key[256], done[272];
    int64_t v = 0;
    snprintf(key, sizeof key, "%s/count", name);
    snprintf(done, sizeof done, "%s/done", name);
    ZS_CHECK(zs_store_add(s, key, 1, &v));
    if (v == world) ZS_CHECK(zs_store_set(s, done, "1", 1));
    ZS_CHECK(zs_store_get(s, done, NULL, 0, NULL));
fail:
    return st;
}

zs_status zs_store_create(const char *addr, int port, int is_server, int world, double timeout_s,
                          zs_store **out) {
    zs_status st = ZS_OK;
    zs_store *s = calloc(1, sizeof *s);
    *out = NULL;
    ZS_REQUIRE(s, ZS_ERR_OOM, "rendezvous store: out of memory");
    s->fd = -1;
    s->listen_fd = -1;
    s->timeout_s = timeout_s;
    s->is_server = is_server;
    s->world = world;
    snprintf(s->where, sizeof s->where, "%s:%d", addr, port);
    if (is_server) {
        ZS_CHECK(server_listen(s, port));
        ZS_REQUIRE(pthread_create(&s->thread, NULL, server_main, s) == 0, ZS_ERR_COMM,
                   "rendezvous store: cannot start the server thread");
        s->thread_started = 1;
    }
    ZS_CHECK(client_connect(s, is_server ? "127.0.0.1" : addr, port));
    *out = s;
    return ZS_OK;
fail:
    zs_store_destroy(s);
    return st;
}

void zs_store_destroy(zs_store *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    s->stop = 1;
    if (s->thread_started) pthread_join(s->thread, NULL);
    if (s->listen_fd >= 0) close(s->listen_fd);
    for (int i = 0; i < s->nkeys; i++) {
        free(s->keys[i].key);
        free(s->keys[i].val);
    }
    free(s);
}

/* The rendezvous store's client: connect to MASTER_ADDR:MASTER_PORT, greet the server as
 * this job's rank (store_wire.h), then SET/GET/ADD keys, every call bounded by the store's
 * timeout. Rank 0 also starts the server (store_server.c). docs/comm.md has the protocol,
 * and what it does and does not protect. */
#include "comm/store.h"
#include "comm/store_wire.h"
#include "core/status.h"
#include "core/timer.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HANDSHAKE_S 10.0 /* a connection not greeted by then is given up */
#define SILENT_MAX 2     /* connections no one greeted before the listener is called a stranger */

struct zs_store {
    int fd; /* client connection */
    double timeout_s;
    char where[300];
    zs_store_server *server; /* rank 0 only */
    zs_status failed;        /* why the greeting failed, as recorded */
    char prefix[64];         /* put before every key (zs_store_set_prefix) */
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

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- client -------------------------------------------------------------------------- */

/* Outcome of one greeting: ZS_OK, RETRY (dropped or told to come back: connect again),
 * SILENT (connected, but no greeting within HANDSHAKE_S), or a recorded error that retrying
 * cannot mend. */
enum { GREET_OK = 0, GREET_RETRY = 1, GREET_FAIL = 2, GREET_SILENT = 3 };

/* Read one message that parse() accepts; a connection that closes first asks for a retry. */
static int read_msg(int fd, uint8_t *buf, size_t cap, double deadline, size_t *n,
                    int (*parse)(const uint8_t *, size_t, void *, size_t *, const char **),
                    void *out, const char **why) {
    *n = 0;
    for (;;) {
        size_t used = 0;
        int rc = *n ? parse(buf, *n, out, &used, why) : ZS_WIRE_NEED;
        if (rc == ZS_WIRE_OK) return GREET_OK;
        if (rc == ZS_WIRE_BAD) return GREET_FAIL;
        double left = deadline - zs_now_s();
        struct pollfd pfd = {fd, POLLIN, 0};
        if (left <= 0) return *why = "it did not greet in time", GREET_SILENT;
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r <= 0) continue;
        ssize_t got = recv(fd, buf + *n, cap - *n, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return *why = "closed during the greeting", GREET_RETRY;
        *n += (size_t)got;
    }
}

static int parse_server_hello(const uint8_t *b, size_t n, void *out, size_t *used,
                              const char **why) {
    *used = ZS_WIRE_SERVER_HELLO;
    return zs_wire_parse_server_hello(b, n, out, why);
}
static int parse_answer(const uint8_t *b, size_t n, void *out, size_t *used, const char **why) {
    return zs_wire_parse_answer(b, n, out, used, why);
}

/* Greet the server on a fresh connection as rank id->rank of job id->job. */
static int greet(zs_store *s, const zs_store_id *id, double deadline, const char **why) {
    uint8_t buf[ZS_WIRE_ANSWER_FIXED + 512];
    size_t n;
    zs_wire_server_hello sh;
    double hs = zs_now_s() + HANDSHAKE_S;
    if (hs > deadline) hs = deadline;
    int rc = read_msg(s->fd, buf, ZS_WIRE_SERVER_HELLO, hs, &n, parse_server_hello, &sh, why);
    if (rc == GREET_SILENT && zs_now_s() >= deadline) return GREET_RETRY; /* the timeout's */
    if (rc == GREET_FAIL) {
        s->failed = zs_error(ZS_ERR_COMM,
                 "rendezvous store %s: the process listening there is not a zshard rendezvous "
                 "store (%s); check MASTER_ADDR/MASTER_PORT",
                 s->where, *why);
        return rc;
    }
    if (rc) return rc;
    if (sh.version != ZS_WIRE_VERSION) {
        s->failed = zs_error(ZS_ERR_COMM,
                 "rendezvous store %s speaks protocol version %u and this rank %d: every rank "
                 "must run the same zshard",
                 s->where, sh.version, ZS_WIRE_VERSION);
        return GREET_FAIL;
    }
    int wants = (sh.flags & ZS_WIRE_FLAG_SECRET) != 0;
    if (wants != (id->secret_len > 0)) {
        s->failed = zs_error(ZS_ERR_INVALID,
                 wants ? "rendezvous store %s requires the job's secret and rank %d has none: "
                         "set ZS_JOB_SECRET (or ZS_JOB_SECRET_FILE) on every rank"
                       : "rendezvous store %s has no secret but rank %d was given one: set "
                         "ZS_JOB_SECRET (or ZS_JOB_SECRET_FILE) on every rank, rank 0 included",
                 s->where, id->rank);
        return GREET_FAIL;
    }
    zs_wire_hello h = {.version = ZS_WIRE_VERSION,
                       .rank = (uint32_t)id->rank,
                       .world = (uint32_t)id->world};
    snprintf(h.job, sizeof h.job, "%s", id->job);
    if (zs_wire_random(h.nonce, sizeof h.nonce) ||
        zs_wire_hello_mac(id->secret, id->secret_len, sh.nonce, &h, h.mac)) {
        s->failed = zs_error(ZS_ERR_COMM, "rendezvous store %s: cannot draw a nonce or compute the HMAC",
                 s->where);
        return GREET_FAIL;
    }
    uint8_t out[ZS_WIRE_HELLO_FIXED + ZS_WIRE_JOB_MAX];
    size_t len = zs_wire_put_hello(out, &h);
    if (send(s->fd, out, len, MSG_NOSIGNAL) != (ssize_t)len)
        return *why = "closed during the greeting", GREET_RETRY;
    zs_wire_answer a;
    rc = read_msg(s->fd, buf, sizeof buf, hs, &n, parse_answer, &a, why);
    if (rc == GREET_SILENT) return *why = "no answer to the greeting", GREET_RETRY;
    if (rc == GREET_FAIL) {
        s->failed = zs_error(ZS_ERR_COMM, "rendezvous store %s: a garbled answer to the greeting (%s)",
                 s->where, *why);
        return rc;
    }
    if (rc) return rc;
    uint8_t want[ZS_WIRE_MAC];
    zs_wire_welcome_mac(id->secret, id->secret_len, sh.nonce, h.nonce, a.status, id->job, want);
    if (id->secret_len && a.status == ZS_WIRE_WELCOME && !zs_wire_mac_equal(want, a.mac)) {
        s->failed = zs_error(ZS_ERR_COMM,
                 "rendezvous store %s welcomed rank %d without proving that it knows the job's "
                 "secret: it is not this job's rank 0",
                 s->where, id->rank);
        return GREET_FAIL;
    }
    if (a.status == ZS_WIRE_RETRY) return *why = "that round had ended", GREET_RETRY;
    if (a.status == ZS_WIRE_REFUSED) {
        s->failed = zs_error(ZS_ERR_INVALID, "rendezvous store %s refused rank %d of job '%s': %s",
                             s->where, id->rank, id->job, a.msg);
        return GREET_FAIL;
    }
    return GREET_OK;
}

/* 1 when a connection met itself: a rank that knocks on its own host's MASTER_PORT before
 * rank 0 listens can be given that very port as its ephemeral one (when the port lies in the
 * kernel's ephemeral range), and TCP's simultaneous open then connects the socket to itself.
 * Kept, it would hold the port that rank 0 is about to bind. */
static int self_connected(int fd) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0 || la != lb || a.ss_family != b.ss_family)
        return 0;
    if (a.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a, *y = (const void *)&b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a, *y = (const void *)&b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
    }
    return 0;
}

static zs_status client_connect(zs_store *s, const char *addr, int port, const zs_store_id *id) {
    double deadline = zs_now_s() + s->timeout_s;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    const char *why = "no attempt";
    int silent = 0;
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
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                    why = strerror(errno);
                    close(fd);
                    continue;
                }
                if (self_connected(fd)) {
                    /* Give the port back at once: an abortive close (RST), since an orderly
                     * one would leave the port in TIME_WAIT, where it still bars rank 0's
                     * bind for a minute. Then knock again. */
                    struct linger hard = {1, 0};
                    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
                    why = "no listener yet (the connection met itself)";
                    close(fd);
                    continue;
                }
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                s->fd = fd;
                int rc = greet(s, id, deadline, &why);
                if (rc == GREET_OK) {
                    freeaddrinfo(res);
                    return ZS_OK;
                }
                close(fd);
                s->fd = -1;
                /* One silence is not yet proof of a stranger: a store that was ending, or a
                 * process that held the port for a moment, may have taken the connection. */
                if (rc == GREET_SILENT && ++silent >= SILENT_MAX)
                    s->failed = zs_error(ZS_ERR_COMM,
                                         "rendezvous store %s: the process listening there is "
                                         "not a zshard rendezvous store (it accepted %d "
                                         "connections and greeted none within %.0f s); check "
                                         "MASTER_ADDR/MASTER_PORT",
                                         s->where, silent, HANDSHAKE_S);
                if (rc == GREET_FAIL || (rc == GREET_SILENT && silent >= SILENT_MAX)) {
                    freeaddrinfo(res);
                    return s->failed;
                }
                break; /* dropped or told to come back: wait a little, then connect again */
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
    uint8_t h[ZS_WIRE_REQ_HDR];
    char full[ZS_WIRE_KEY_MAX + 2];
    int kn = snprintf(full, sizeof full, "%s%s", s->prefix, key);
    ZS_REQUIRE(key[0] && kn > 0 && kn <= ZS_WIRE_KEY_MAX, ZS_ERR_INVALID,
               "rendezvous store: key '%.40s' is empty or longer than %d bytes", key,
               ZS_WIRE_KEY_MAX);
    uint32_t klen = (uint32_t)kn, rlen;
    key = full;
    zs_wire_put_req_hdr(h, cmd, klen, vlen);
    ZS_CHECK(io_all(s->fd, h, sizeof h, 1, deadline, s->where));
    ZS_CHECK(io_all(s->fd, (void *)key, klen, 1, deadline, s->where));
    if (vlen) ZS_CHECK(io_all(s->fd, (void *)val, vlen, 1, deadline, s->where));
    ZS_CHECK(io_all(s->fd, h, sizeof h, 0, deadline, s->where));
    rlen = rd32(h + 5);
    ZS_REQUIRE(h[0] <= ZS_WIRE_JOB_FAILED && rlen <= ZS_WIRE_VALUE_MAX, ZS_ERR_COMM,
               "rendezvous store %s: a garbled reply to key '%s'", s->where, key);
    uint8_t tmp[ZS_WIRE_VALUE_MAX + 1];
    ZS_CHECK(io_all(s->fd, tmp, rlen, 0, deadline, s->where));
    tmp[rlen] = '\0';
    ZS_REQUIRE(h[0] != ZS_WIRE_JOB_FAILED, ZS_ERR_INVALID, "%s", (char *)tmp);
    ZS_REQUIRE(h[0] == ZS_WIRE_DONE, ZS_ERR_COMM,
               "rendezvous store %s: request for key '%s' failed (the store is full)", s->where,
               key);
    if (out && rlen) memcpy(out, tmp, rlen < cap ? rlen : cap);
    if (outlen) *outlen = rlen;
fail:
    return st;
}

zs_status zs_store_set(zs_store *s, const char *key, const void *val, size_t len) {
    if (len > ZS_WIRE_VALUE_MAX) return zs_error(ZS_ERR_INVALID, "store value too large");
    return request(s, ZS_WIRE_SET, key, val, (uint32_t)len, NULL, 0, NULL);
}

zs_status zs_store_get(zs_store *s, const char *key, void *val, size_t cap, size_t *len) {
    zs_status st = request(s, ZS_WIRE_GET, key, NULL, 0, val, cap, len);
    if (st == ZS_ERR_TIMEOUT)
        st = zs_error(st,
                      "rendezvous store %s: key '%s' did not appear within %.0f s (did every "
                      "rank start?)",
                      s->where, key, s->timeout_s);
    return st;
}

zs_status zs_store_add(zs_store *s, const char *key, int64_t delta, int64_t *result) {
    int64_t v = 0;
    zs_status st = request(s, ZS_WIRE_ADD, key, &delta, 8, &v, 8, NULL);
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

zs_status zs_store_create(const char *addr, int port, int is_server, const zs_store_id *id,
                          double timeout_s, zs_store **out) {
    zs_status st = ZS_OK;
    zs_store *s = calloc(1, sizeof *s);
    *out = NULL;
    ZS_REQUIRE(s, ZS_ERR_OOM, "rendezvous store: out of memory");
    s->fd = -1;
    s->timeout_s = timeout_s;
    snprintf(s->where, sizeof s->where, "%s:%d", addr, port);
    ZS_REQUIRE(id && id->job && id->job[0] && strlen(id->job) <= ZS_WIRE_JOB_MAX &&
                   id->world >= 1 && id->rank >= 0 && id->rank < id->world,
               ZS_ERR_INVALID, "rendezvous store: a job identity of 1 to %d bytes and a rank "
               "below the world size are required", ZS_WIRE_JOB_MAX);
    if (is_server) ZS_CHECK(zs_store_server_start(port, id, timeout_s, &s->server));
    ZS_CHECK(client_connect(s, is_server ? "127.0.0.1" : addr, port, id));
    *out = s;
    return ZS_OK;
fail:
    zs_store_destroy(s);
    return st;
}

zs_status zs_store_set_prefix(zs_store *s, const char *prefix) {
    if (strlen(prefix) >= sizeof s->prefix)
        return zs_error(ZS_ERR_INVALID, "rendezvous store: key prefix '%.40s' is too long", prefix);
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    return ZS_OK;
}

void zs_store_destroy(zs_store *s) {
    if (!s) return;
    if (s->fd >= 0) {
        /* Goodbye: the server ends once every rank has said it. No answer is awaited. */
        uint8_t bye[ZS_WIRE_REQ_HDR + 3];
        zs_wire_put_req_hdr(bye, ZS_WIRE_BYE, 3, 0);
        memcpy(bye + ZS_WIRE_REQ_HDR, "bye", 3);
        /* A raw send: destroy runs on error paths too, and must not replace their message. */
        (void)!send(s->fd, bye, sizeof bye, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(s->fd);
    }
    zs_store_server_stop(s->server);
    free(s);
}

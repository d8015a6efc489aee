/* The rendezvous store's port between and after rounds (docs/comm.md, "The rendezvous
 * store"): nothing on MASTER_PORT may take a rank's connection and leave it ungreeted.
 *  - A store whose round has ended (here: its timeout) stops listening at once, so a late
 *    rank's connection is refused (and retried), not parked unanswered in the backlog.
 *  - A connection that a silent listener takes is given up after 10 s and made again: a store
 *    that starts on the port meanwhile welcomes the rank.
 *  - A listener that greets no connection at all is named a stranger after the second
 *    silent connection, in one message that says so.
 * The launcher's reservation of the port is in test_launcher.c. */
#include "comm/store.h"
#include "core/timer.h"
#include "testutil.h"
#include "zshard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Ports below the kernel's ephemeral range (32768 up), a different one per call. */
static int next_port(void) {
    static int base = 0;
    if (!base) base = 20000 + (int)(zs_now_ns() % 10000);
    return base++;
}

static int listener(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    ZT_REQUIRE(fd >= 0, "socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ZT_REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0,
               "listen on %d: %s", port, strerror(errno));
    return fd;
}

/* 0 when a TCP connection to 127.0.0.1:port is made, else its errno. */
static int try_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

static void test_ended_round(void) {
    int port = next_port();
    zs_store_id id = {"test-job", 1, 0, 2, NULL, 0};
    zs_store_server *srv = NULL;
    ZT_OK(zs_store_server_start(port, &id, 0.3, &srv));
    ZT_CHECK(try_connect(port) == 0, "the store does not listen while its round runs");
    usleep(800 * 1000); /* past its timeout: the server's thread has ended its round */
    int rc = try_connect(port);
    ZT_CHECK(rc == ECONNREFUSED,
             "a store whose round ended still takes connections (%s): a late rank would wait "
             "for a greeting that never comes",
             rc ? strerror(rc) : "connected");
    zs_store_server_stop(srv);
}

/* A process that holds the port silently: it accepts up to `take` connections and answers
 * none; with `then_store`, it then lets a real store have the port. */
typedef struct silent_arg {
    int port, take, then_store;
    _Atomic int accepted, ready, done;
    zs_store_server *srv;
} silent_arg;

static void *silent_main(void *p) {
    silent_arg *a = p;
    int fd = listener(a->port), held[4];
    a->ready = 1;
    for (int k = 0; k < a->take; k++) {
        held[k] = accept(fd, NULL, NULL);
        a->accepted++;
    }
    close(fd);
    if (a->then_store) {
        zs_store_id id = {"test-job", 1, 0, 1, NULL, 0};
        if (zs_store_server_start(a->port, &id, 60.0, &a->srv) != ZS_OK) a->srv = NULL;
    }
    while (!a->done) /* hold the accepted connections silent until the client is through */
        usleep(10 * 1000);
    for (int k = 0; k < a->take; k++)
        if (held[k] >= 0) close(held[k]);
    return NULL;
}

typedef struct client_arg {
    int port;
    zs_status st;
    char err[512];
    double secs;
} client_arg;

static void *client_main(void *p) {
    client_arg *c = p;
    zs_store_id id = {"test-job", 1, 0, 1, NULL, 0};
    zs_store *s = NULL;
    double t = zs_now_s();
    c->st = zs_store_create("127.0.0.1", c->port, 0, &id, 60.0, &s);
    c->secs = zs_now_s() - t;
    snprintf(c->err, sizeof c->err, "%s", c->st ? zs_last_error() : "");
    if (c->st == ZS_OK) c->st = zs_store_set(s, "k", "v", 1);
    zs_store_destroy(s);
    return NULL;
}

static void wait_ready(silent_arg *a) {
    while (!a->ready)
        usleep(1000);
}

static void test_silent_listeners(void) {
    /* Both cases at once: each waits out one or two 10-s greetings. */
    silent_arg brief = {.port = next_port(), .take = 1, .then_store = 1};
    silent_arg mute = {.port = next_port(), .take = 2, .then_store = 0};
    client_arg cb = {.port = brief.port}, cm = {.port = mute.port};
    pthread_t tb, tm, ub, um;
    pthread_create(&tb, NULL, silent_main, &brief);
    pthread_create(&tm, NULL, silent_main, &mute);
    wait_ready(&brief);
    wait_ready(&mute);
    pthread_create(&ub, NULL, client_main, &cb);
    pthread_create(&um, NULL, client_main, &cm);
    pthread_join(ub, NULL);
    pthread_join(um, NULL);
    brief.done = mute.done = 1;

    ZT_CHECK(brief.accepted == 1 && cb.st == ZS_OK,
             "a silent listener took the first connection (%d accepted), then a store started "
             "on the port: the rank must reach it on its next connection (%s: %s)",
             (int)brief.accepted, zs_status_string(cb.st), cb.err);
    ZT_CHECK(cb.secs >= 9.5 && cb.secs < 30,
             "the rank gave the silent connection %.1f s, "
             "not the 10 s of a greeting",
             cb.secs);

    ZT_CHECK(mute.accepted == 2 && cm.st == ZS_ERR_COMM &&
                 strstr(cm.err, "is not a zshard rendezvous store (it accepted 2 connections "
                                "and greeted none within 10 s)"),
             "a listener that greets no connection: %d accepted, %s: %s", (int)mute.accepted,
             zs_status_string(cm.st), cm.err);
    ZT_CHECK(cm.secs >= 19 && cm.secs < 40, "the stranger was named after %.1f s", cm.secs);
    pthread_join(tb, NULL);
    pthread_join(tm, NULL);
    zs_store_server_stop(brief.srv);
}

int main(void) {
    zt_init("store_port");
    test_ended_round();
    test_silent_listeners();
    return zt_finish();
}

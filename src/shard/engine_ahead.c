/* Offload's host step during the backward (docs/sharding.md "Offload"). Without gradient
 * clipping (--grad-clip 0) a unit's update needs only its own gradients and the step's
 * settings, so once the settings are known (zs_engine_step_ahead, before the backward) a worker
 * thread steps each offloaded unit on the host as soon as its download ends, while the backward
 * goes on with the next units. The arithmetic and its inputs are those of the step after the
 * backward, so are the bits. The step itself then only waits for each unit's host step and
 * queues its upload: the uploads and ZeRO-1/2's gathers stay on the caller's thread, in unit
 * order, so every rank issues its collectives in the same order.
 *
 * With a clip the global norm needs every unit's gradients first: nothing is stepped ahead. */
#include "shard/engine_internal.h"

#include "core/status.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AHEAD_IDLE = 0, AHEAD_QUEUED, AHEAD_DONE };

struct zs_ahead {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a unit was queued, or stop */
    pthread_cond_t cv_done; /* a unit was stepped */
    int *queue;             /* units in download order; each at most once per step */
    int head, tail;
    unsigned char *state; /* per unit: AHEAD_* */
    int stop, threads;    /* threads: the caller's OpenMP team size, for the worker's */
    zs_adamw_hparams h;
    int t;
    zs_status st; /* the first failure, and its message (the worker's own thread's) */
    char msg[512];
};

static void *worker(void *arg) {
    zs_engine_t *e = arg;
    zs_ahead *a = e->ahead;
    /* the rank's GPU is current on this thread too (not device 0's context) */
    zs_status bound = e->dev->bind_thread ? e->dev->bind_thread() : ZS_OK;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && a->head == a->tail)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->head == a->tail) break; /* stopped with nothing queued */
        int u = a->queue[a->head++], t = a->t, threads = a->threads;
        zs_adamw_hparams h = a->h;
        pthread_mutex_unlock(&a->mu);
        omp_set_num_threads(threads); /* OpenMP's team size is per thread */
        zs_status st = bound != ZS_OK ? bound : zs_engine_host_step(e, u, &h, 1.0f, t);
        zs_engine_host_mark(e, &a->state[u]); /* the profiler: the step takes it after this */
        pthread_mutex_lock(&a->mu);
        if (st != ZS_OK && a->st == ZS_OK) {
            a->st = st;
            snprintf(a->msg, sizeof a->msg, "%s", zs_last_error());
        }
        a->state[u] = AHEAD_DONE;
        pthread_cond_broadcast(&a->cv_done);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void ahead_free(zs_ahead *a) {
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    pthread_cond_destroy(&a->cv_done);
    free(a->queue);
    free(a->state);
    free(a);
}

static zs_status ahead_create(zs_engine_t *e) {
    zs_status st = ZS_OK;
    int n = e->layout->n_units;
    zs_ahead *a = calloc(1, sizeof *a);
    ZS_REQUIRE(a, ZS_ERR_OOM, "engine: out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    pthread_cond_init(&a->cv_done, NULL);
    a->queue = calloc((size_t)n, sizeof *a->queue);
    a->state = calloc((size_t)n, 1);
    if (!a->queue || !a->state) {
        ahead_free(a);
        ZS_REQUIRE(0, ZS_ERR_OOM, "engine: out of memory");
    }
    e->ahead = a;
    if (pthread_create(&a->thread, NULL, worker, e) != 0) {
        e->ahead = NULL;
        ahead_free(a);
        ZS_REQUIRE(0, ZS_ERR_IO, "engine: cannot start the offload's host step thread");
    }
fail:
    return st;
}

zs_status zs_engine_step_ahead(zs_engine_t *e, const zs_adamw_hparams *h, float clip, int t) {
    zs_status st = ZS_OK;
    /* The clip needs every gradient's norm first; replicas (HSDP) all-reduce the gradients
     * after the backward. */
    if (!e->offload || clip > 0 || e->xcomm) return ZS_OK;
    if (!e->ahead) ZS_CHECK(ahead_create(e));
    ZS_CHECK(zs_engine_ahead_finish(e)); /* a step announced twice: the last one counts */
    zs_ahead *a = e->ahead;
    pthread_mutex_lock(&a->mu);
    a->h = *h;
    a->t = t;
    a->threads = omp_get_max_threads();
    a->head = a->tail = 0;
    memset(a->state, AHEAD_IDLE, (size_t)e->layout->n_units);
    pthread_mutex_unlock(&a->mu);
    e->ahead_armed = 1;
fail:
    return st;
}

zs_status zs_engine_ahead_push(zs_engine_t *e, int u) {
    zs_ahead *a = e->ahead;
    if (!e->ahead_armed) return ZS_OK;
    pthread_mutex_lock(&a->mu);
    int again = a->state[u] != AHEAD_IDLE;
    if (!again) {
        a->state[u] = AHEAD_QUEUED;
        a->queue[a->tail++] = u;
        pthread_cond_signal(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    if (again)
        return zs_error(ZS_ERR_INVALID,
                        "engine: unit %s's gradients were reduced again after its host step "
                        "began (a second backward between zs_module_step_ahead and the step)",
                        e->layout->units[u].name);
    return ZS_OK;
}

int zs_engine_ahead_queued(zs_engine_t *e) {
    zs_ahead *a = e->ahead;
    if (!a || !e->ahead_armed) return 0;
    pthread_mutex_lock(&a->mu);
    int n = a->tail;
    pthread_mutex_unlock(&a->mu);
    return n;
}

zs_status zs_engine_ahead_take(zs_engine_t *e, int u, const zs_adamw_hparams *h, int t,
                               int *taken) {
    zs_ahead *a = e->ahead;
    *taken = 0;
    if (!e->ahead_armed) return ZS_OK;
    pthread_mutex_lock(&a->mu);
    int same = a->t == t && a->h.lr == h->lr && a->h.beta1 == h->beta1 && a->h.beta2 == h->beta2 &&
               a->h.eps == h->eps && a->h.weight_decay == h->weight_decay;
    while (same && a->state[u] == AHEAD_QUEUED)
        pthread_cond_wait(&a->cv_done, &a->mu);
    *taken = same && a->state[u] == AHEAD_DONE;
    zs_status st = a->st;
    pthread_mutex_unlock(&a->mu);
    if (*taken) zs_engine_host_after(e, &a->state[u]);
    if (!same)
        return zs_error(ZS_ERR_INVALID,
                        "engine: the step's optimizer settings (lr %g, step %d) differ from those "
                        "given to zs_module_step_ahead (lr %g, step %d)",
                        (double)h->lr, t, (double)a->h.lr, a->t);
    if (st != ZS_OK) return zs_error(st, "%s", a->msg);
    return ZS_OK;
}

zs_status zs_engine_ahead_finish(zs_engine_t *e) {
    zs_ahead *a = e->ahead;
    if (!a || !e->ahead_armed) return ZS_OK;
    pthread_mutex_lock(&a->mu);
    while (a->head != a->tail || (a->tail > 0 && a->state[a->queue[a->tail - 1]] != AHEAD_DONE))
        pthread_cond_wait(&a->cv_done, &a->mu);
    zs_status st = a->st;
    a->st = ZS_OK;
    pthread_mutex_unlock(&a->mu);
    e->ahead_armed = 0;
    return st != ZS_OK ? zs_error(st, "%s", a->msg) : ZS_OK;
}

void zs_engine_ahead_destroy(zs_engine_t *e) {
    zs_ahead *a = e->ahead;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL); /* the units queued are stepped first: their copies end */
    ahead_free(a);
    e->ahead = NULL;
    e->ahead_armed = 0;
}

/* The per-rank async queue: collectives run strictly in issue order, either on the rank's
 * comm thread (async forms, or a sync call behind queued work) or inline on the caller when
 * nothing is queued, which saves a thread hand-off for small blocking calls. At most one
 * collective runs at a time, which also serializes every backend call. */
#include "comm/comm_internal.h"
#include "comm/device.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

struct zs_comm_work {
    zs_comm_t *c;
    zs_coll op;
    zs_status st;
    int done;
    int stream_sync;     /* nccl: the collective was enqueued; wait syncs the stream */
    zs_event_t *done_ev; /* nccl on a device: recorded on the comm stream after the op */
    char msg[1024];
    struct zs_comm_work *next;     /* run queue */
    struct zs_comm_work *all_prev; /* list of live handles, freed at destroy if never waited */
    struct zs_comm_work *all_next;
};

struct zs_comm_queue {
    zs_comm_t *c;
    pthread_mutex_t lock;
    pthread_cond_t cv_work; /* comm thread: new work, or the inline runner finished */
    pthread_cond_t cv_done; /* waiters: some work finished */
    zs_comm_work_t *head, *tail;
    zs_comm_work_t *live;
    int busy;
    int stop;
    pthread_t thread;
    int started;
};

static void *comm_thread(void *arg) {
    zs_comm_queue *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->stop && (!q->head || q->busy))
            pthread_cond_wait(&q->cv_work, &q->lock);
        if (!q->head) break; /* stop requested and drained */
        if (q->busy) continue;
        zs_comm_work_t *w = q->head;
        q->head = w->next;
        if (!q->head) q->tail = NULL;
        q->busy = 1;
        pthread_mutex_unlock(&q->lock);
        zs_status st = zs_comm_execute(q->c, &w->op, w->msg, sizeof w->msg);
        pthread_mutex_lock(&q->lock);
        w->st = st;
        w->done = 1;
        q->busy = 0;
        pthread_cond_broadcast(&q->cv_done);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

zs_status zs_queue_create(zs_comm_t *c, zs_comm_queue **out) {
    zs_status st = ZS_OK;
    zs_comm_queue *q = calloc(1, sizeof *q);
    *out = NULL;
    ZS_REQUIRE(q, ZS_ERR_OOM, "comm queue: out of memory");
    q->c = c;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cv_work, NULL);
    pthread_cond_init(&q->cv_done, NULL);
    if (c->ops->needs_thread) {
        ZS_REQUIRE(pthread_create(&q->thread, NULL, comm_thread, q) == 0, ZS_ERR_INTERNAL,
                   "comm queue: cannot start the comm thread");
        q->started = 1;
    }
    *out = q;
    return ZS_OK;
fail:
    zs_queue_destroy(q);
    return st;
}

static void unlink_live(zs_comm_queue *q, zs_comm_work_t *w) {
    if (w->all_prev)
        w->all_prev->all_next = w->all_next;
    else
        q->live = w->all_next;
    if (w->all_next) w->all_next->all_prev = w->all_prev;
}

void zs_queue_destroy(zs_comm_queue *q) {
    if (!q) return;
    pthread_mutex_lock(&q->lock);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv_work);
    pthread_mutex_unlock(&q->lock);
    if (q->started) pthread_join(q->thread, NULL);
    while (q->live) {
        zs_comm_work_t *w = q->live;
        unlink_live(q, w);
        if (w->done_ev) q->c->dev->event_destroy(w->done_ev);
        if (w->op.ready) q->c->dev->event_destroy(w->op.ready);
        free(w);
    }
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cv_work);
    pthread_cond_destroy(&q->cv_done);
    free(q);
}

/* nccl and other stream backends: enqueue now, completion is the stream's business. On a device
 * the op goes on the communicator's own stream, after an event of the caller's stream, and its
 * completion is an event of the comm stream that the caller's stream can wait for. */
static zs_status submit_stream(zs_comm_t *c, zs_comm_queue *q, zs_coll *op, zs_comm_work_t **work) {
    zs_status st = ZS_OK;
    zs_event_t *ready = NULL, *done = NULL;
    zs_comm_work_t *w = NULL;
    pthread_mutex_lock(&q->lock);
    op->seq = ++c->next_seq;
    pthread_mutex_unlock(&q->lock);
    if (c->dev) {
        ZS_CHECK(c->dev->event_create(&ready));
        ZS_CHECK(c->dev->event_record(ready, op->stream));
        ZS_CHECK(c->dev->stream_wait(c->cstream, ready));
        op->stream = c->cstream;
    }
    ZS_CHECK(zs_comm_execute(c, op, NULL, 0));
    if (!work) goto fail; /* the blocking form: the caller syncs (zs_queue_submit) */
    if (c->dev) {
        ZS_CHECK(c->dev->event_create(&done));
        ZS_CHECK(c->dev->event_record(done, c->cstream));
    }
    w = calloc(1, sizeof *w);
    ZS_REQUIRE(w, ZS_ERR_OOM, "comm work: out of memory");
    w->c = c;
    w->op = *op;
    w->done = 1;
    w->stream_sync = 1;
    w->done_ev = done;
    done = NULL;
    pthread_mutex_lock(&q->lock);
    w->all_next = q->live;
    if (q->live) q->live->all_prev = w;
    q->live = w;
    pthread_mutex_unlock(&q->lock);
    *work = w;
fail:
    if (ready) c->dev->event_destroy(ready);
    if (done) c->dev->event_destroy(done);
    return st;
}

zs_status zs_queue_submit(zs_comm_t *c, zs_coll *op, zs_comm_work_t **work) {
    zs_status st = ZS_OK;
    zs_comm_queue *q = c->queue;
    if (!q->started) {
        st = submit_stream(c, q, op, work);
        /* The blocking form returns with the results in place, as on the host. */
        if (st == ZS_OK && !work && c->ops->sync) st = c->ops->sync(c, op);
        return st;
    }
    if (c->staging && op->kind != ZS_COLL_MEM_ALLOC && op->kind != ZS_COLL_BARRIER) {
        /* The comm thread copies op's device buffers once the caller's stream has made them. */
        ZS_CHECK(c->dev->event_create(&op->ready));
        ZS_CHECK(c->dev->event_record(op->ready, op->stream));
    }
    pthread_mutex_lock(&q->lock);
    op->seq = ++c->next_seq;
    if (!work && !q->head && !q->busy) {
        /* Nothing ahead of us: run here, holding the busy flag so the thread waits. */
        q->busy = 1;
        pthread_mutex_unlock(&q->lock);
        st = zs_comm_execute(c, op, NULL, 0);
        pthread_mutex_lock(&q->lock);
        q->busy = 0;
        pthread_cond_broadcast(&q->cv_work);
        pthread_cond_broadcast(&q->cv_done); /* zs_queue_drain */
        pthread_mutex_unlock(&q->lock);
        if (op->ready) c->dev->event_destroy(op->ready);
        return st;
    }
    zs_comm_work_t *w = calloc(1, sizeof *w);
    if (!w) {
        pthread_mutex_unlock(&q->lock);
        return zs_error(ZS_ERR_OOM, "comm work: out of memory");
    }
    w->c = c;
    w->op = *op;
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    w->all_next = q->live;
    if (q->live) q->live->all_prev = w;
    q->live = w;
    pthread_cond_broadcast(&q->cv_work);
    pthread_mutex_unlock(&q->lock);
    if (work) {
        *work = w;
        return ZS_OK;
    }
    return zs_comm_work_wait(w);
fail:
    if (op->ready) c->dev->event_destroy(op->ready);
    op->ready = NULL;
    return st;
}

void zs_queue_drain(zs_comm_queue *q) {
    pthread_mutex_lock(&q->lock);
    /* Each collective is bounded by its deadline (failed ones return at once), so this ends. */
    while (q->head || q->busy)
        pthread_cond_wait(&q->cv_done, &q->lock);
    pthread_mutex_unlock(&q->lock);
}

zs_status zs_comm_work_wait(zs_comm_work_t *w) {
    if (!w) return zs_error(ZS_ERR_INVALID, "zs_comm_work_wait: work is NULL");
    zs_comm_queue *q = w->c->queue;
    zs_status st;
    pthread_mutex_lock(&q->lock);
    /* Every collective carries its own deadline inside the backend, so this wait ends. */
    while (!w->done)
        pthread_cond_wait(&q->cv_done, &q->lock);
    st = w->st;
    unlink_live(q, w);
    pthread_mutex_unlock(&q->lock);
    if (st == ZS_OK && w->stream_sync && w->c->ops->sync)
        st = w->c->ops->sync(w->c, &w->op);
    else if (st != ZS_OK)
        zs_error(st, "%s", w->msg);
    if (w->done_ev) w->c->dev->event_destroy(w->done_ev);
    if (w->op.ready) w->c->dev->event_destroy(w->op.ready);
    free(w);
    return st;
}

zs_status zs_comm_work_wait_stream(zs_comm_work_t *w, zs_stream_t *s) {
    if (!w) return zs_error(ZS_ERR_INVALID, "zs_comm_work_wait_stream: work is NULL");
    if (!w->done_ev) return zs_comm_work_wait(w);
    zs_comm_t *c = w->c;
    zs_status st = ZS_OK;
#ifndef ZS_MUTANT_NO_STREAM_WAIT /* the tests' deliberately broken build: no wait */
    st = c->dev->stream_wait(s, w->done_ev);
#else
    (void)s;
#endif
    pthread_mutex_lock(&c->queue->lock);
    unlink_live(c->queue, w);
    pthread_mutex_unlock(&c->queue->lock);
    c->dev->event_destroy(w->done_ev);
    free(w);
    return st;
}

zs_status zs_comm_work_test(zs_comm_work_t *w, int *done) {
    if (!w || !done) return zs_error(ZS_ERR_INVALID, "zs_comm_work_test: NULL argument");
    zs_comm_queue *q = w->c->queue;
    pthread_mutex_lock(&q->lock);
    *done = w->done;
    zs_status st = w->done ? w->st : ZS_OK;
    pthread_mutex_unlock(&q->lock);
    if (st != ZS_OK) zs_error(st, "%s", w->msg);
    /* Stream backends: done only once the stream has passed the collective. */
    if (st == ZS_OK && *done && w->stream_sync)
        st = w->c->ops->query ? w->c->ops->query(w->c, &w->op, done) : ZS_OK;
    return st;
}

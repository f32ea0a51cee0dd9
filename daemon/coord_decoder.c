/* The intake's decoder threads: one queue, a few threads taking from it; what an item is and
 * what is done with it are the intake's (coord_intake.c). */
#include "daemon/coord_decoder.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Threads at most (the intake asks for a few). */
#define S_THREADS_MAX 8

typedef struct s_item {
    struct s_item *next;
    void *tag;
} s_item_t;

struct pl_coord_decoder {
    pl_coord_decode_fn fn;
    void *arg;
    pthread_t threads[S_THREADS_MAX];
    int n_threads;
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t cond;
    bool stop;
    s_item_t *head, *tail;
};

static void *s_main(void *arg)
{
    pl_coord_decoder_t *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->head && !d->stop)
            pthread_cond_wait(&d->cond, &d->lock);
        if (d->stop)
            break; /* what waits is the stopper's to let go */
        s_item_t *it = d->head;
        if (!(d->head = it->next))
            d->tail = NULL;
        pthread_mutex_unlock(&d->lock);
        d->fn(d->arg, it->tag, false);
        free(it);
        pthread_mutex_lock(&d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

pl_status_t pl_coord_decoder_start(int threads, pl_coord_decode_fn fn, void *arg,
                                   pl_coord_decoder_t **d_p)
{
    if (threads < 1 || threads > S_THREADS_MAX)
        return pl_error(PL_ERR_INVALID, "decoders: %d threads (1 to %d)", threads, S_THREADS_MAX);
    pl_coord_decoder_t *d = calloc(1, sizeof(*d));
    if (!d)
        return pl_error(PL_ERR_NOMEM, "decoders: out of memory");
    d->fn = fn;
    d->arg = arg;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    sigset_t all, old; /* signals go to the loop's thread */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    while (d->n_threads < threads &&
           !(rc = pthread_create(&d->threads[d->n_threads], NULL, s_main, d)))
        d->n_threads++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pl_coord_decoder_stop(&d);
        return pl_error(PL_ERR_IO, "decoders: cannot start a thread: %s", strerror(rc));
    }
    *d_p = d;
    return PL_OK;
}

pl_status_t pl_coord_decoder_put(pl_coord_decoder_t *d, void *tag)
{
    s_item_t *it = calloc(1, sizeof(*it));
    if (!it)
        return pl_error(PL_ERR_NOMEM, "decoders: out of memory");
    it->tag = tag;
    pthread_mutex_lock(&d->lock);
    if (d->tail)
        d->tail->next = it;
    else
        d->head = it;
    d->tail = it;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
    return PL_OK;
}

void pl_coord_decoder_stop(pl_coord_decoder_t **d_p)
{
    pl_coord_decoder_t *d = d_p ? *d_p : NULL;
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    for (int k = 0; k < d->n_threads; k++)
        pthread_join(d->threads[k], NULL);
    for (s_item_t *it = d->head, *next; it; it = next) {
        next = it->next;
        d->fn(d->arg, it->tag, true);
        free(it);
    }
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->lock);
    free(d);
    *d_p = NULL;
}

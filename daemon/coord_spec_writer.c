/* The spec writer thread: it takes every item waiting as one batch, commits the batch's specs
 * and drops in one transaction (while it does, the next batch gathers: a slow disk groups more),
 * then hands the items on in order. A batch that fails is written again one item a transaction,
 * so that only the item that cannot be stored fails. */
#include "daemon/coord_spec_writer.h"

#include "common/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_item {
    struct s_item *next;
    int64_t id;
    const char *spec; /* NULL: a place in the order, or (drop) a delete */
    bool drop;
    size_t bytes;
    void *tag;
    char *why; /* its failure's message */
} s_item_t;

struct pl_coord_spec_writer {
    pl_coord_specs_t *sp; /* this thread's while it runs */
    int max_specs;
    size_t max_bytes;
    pl_coord_spec_done_fn done;
    void *arg;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t cond;
    bool stop;
    s_item_t *head, *tail;
    int n_items, n_specs; /* put and not handed on: waiting and being written */
    size_t bytes;
};

/* An item's failure, kept with it until it is handed on (pl_error_msg() is per thread and the
 * next item's error would overwrite it). */
static pl_status_t s_fail(s_item_t *it, pl_status_t st)
{
    free(it->why);
    it->why = strdup(pl_error_msg());
    return st;
}

/* The batch's changes in one transaction; when that fails, each alone, so that only what cannot
 * be stored fails. st[i]: item i's outcome. */
static void s_commit(pl_coord_spec_writer_t *w, s_item_t *batch, int n, bool write_specs,
                     pl_status_t *st)
{
    pl_coord_spec_op_t *ops = calloc((size_t)n, sizeof(*ops));
    int n_ops = 0, k = 0;
    for (s_item_t *it = batch; it; it = it->next, k++) {
        st[k] = PL_OK;
        if (it->spec && !write_specs)
            st[k] = s_fail(it, pl_error(PL_ERR_IO,
                                        "the coordinator stopped before job %lld's "
                                        "spec was stored",
                                        (long long)it->id));
        else if ((it->spec || it->drop) && ops)
            ops[n_ops++] = (pl_coord_spec_op_t){.id = it->id, .spec = it->spec};
    }
    bool alone = !ops || (n_ops > 1 && pl_coord_specs_write(w->sp, ops, n_ops));
    pl_status_t one = ops && n_ops == 1 ? pl_coord_specs_write(w->sp, ops, 1) : PL_OK;
    k = 0;
    for (s_item_t *it = batch; it; it = it->next, k++) {
        if (st[k] || !(it->spec || it->drop))
            continue;
        if (alone)
            one = pl_coord_specs_write(w->sp, &(pl_coord_spec_op_t){.id = it->id, .spec = it->spec},
                                       1);
        if (one && (alone || n_ops == 1))
            st[k] = s_fail(it, one);
        if (st[k] && it->drop)
            pl_log_warn("job %lld: its spec stays in the specs file until the next start: %s",
                        (long long)it->id, it->why);
    }
    free(ops);
}

/* Hand the batch on in order, then forget it (the counts fall after: the intake's bounds see
 * an item either here or where it went). */
static void s_hand_on(pl_coord_spec_writer_t *w, s_item_t *batch, const pl_status_t *st)
{
    int items = 0, specs = 0, k = 0;
    size_t bytes = 0;
    for (s_item_t *it = batch; it; it = it->next, k++) {
        if (it->drop)
            continue;
        if (st[k])
            pl_error(st[k], "%s", it->why ? it->why : "spec writer: out of memory");
        w->done(w->arg, it->tag, st[k]);
        items++;
        specs += it->spec != NULL;
        bytes += it->bytes;
    }
    pthread_mutex_lock(&w->lock);
    w->n_items -= items;
    w->n_specs -= specs;
    w->bytes -= bytes;
    pthread_mutex_unlock(&w->lock);
    while (batch) {
        s_item_t *next = batch->next;
        free(batch->why);
        free(batch);
        batch = next;
    }
}

static void *s_main(void *arg)
{
    pl_coord_spec_writer_t *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cond, &w->lock);
        s_item_t *batch = w->head;
        bool stop = w->stop;
        w->head = w->tail = NULL;
        pthread_mutex_unlock(&w->lock);
        if (!batch)
            break; /* stopping, and nothing waits */
        int n = 0;
        for (s_item_t *it = batch; it; it = it->next)
            n++;
        pl_status_t *st = calloc((size_t)n, sizeof(*st));
        if (!st) { /* nothing stored: every item is handed on, a spec as failed, one at a time */
            pl_log_error("specs file: out of memory: %d waiting writes not done (a spec's client "
                         "is told; a dropped spec is removed at the next start)",
                         n);
            for (s_item_t *it = batch, *next; it; it = next) {
                next = it->next;
                it->next = NULL;
                pl_status_t one = it->spec ? PL_ERR_NOMEM : PL_OK; /* why: NULL, said so */
                s_hand_on(w, it, &one);
            }
            continue;
        }
        s_commit(w, batch, n, !stop, st);
        s_hand_on(w, batch, st);
        free(st);
    }
    return NULL;
}

pl_status_t pl_coord_spec_writer_start(pl_coord_specs_t *sp, int max_specs, size_t max_bytes,
                                       pl_coord_spec_done_fn done, void *arg,
                                       pl_coord_spec_writer_t **w_p)
{
    pl_coord_spec_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pl_error(PL_ERR_NOMEM, "spec writer: out of memory");
    *w = (pl_coord_spec_writer_t){
        .sp = sp, .max_specs = max_specs, .max_bytes = max_bytes, .done = done, .arg = arg};
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    sigset_t all, old; /* signals go to the loop's thread */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, s_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pl_coord_spec_writer_stop(&w);
        return pl_error(PL_ERR_IO, "spec writer: cannot start its thread: %s", strerror(rc));
    }
    w->started = true;
    *w_p = w;
    return PL_OK;
}

void pl_coord_spec_writer_stop(pl_coord_spec_writer_t **w_p)
{
    pl_coord_spec_writer_t *w = w_p ? *w_p : NULL;
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
    *w_p = NULL;
}

static pl_status_t s_put(pl_coord_spec_writer_t *w, int64_t id, const char *spec, bool drop,
                         void *tag)
{
    size_t bytes = spec ? strlen(spec) : 0;
    s_item_t *it = calloc(1, sizeof(*it));
    if (!it)
        return pl_error(PL_ERR_NOMEM, "spec writer: out of memory");
    *it = (s_item_t){.id = id, .spec = spec, .drop = drop, .bytes = bytes, .tag = tag};
    pthread_mutex_lock(&w->lock);
    if (spec && w->n_specs && (w->n_specs >= w->max_specs || w->bytes + bytes > w->max_bytes)) {
        int n = w->n_specs;
        double mib = (double)w->bytes / (1 << 20);
        pthread_mutex_unlock(&w->lock);
        free(it);
        return pl_error(PL_ERR_BUSY,
                        "the coordinator is busy: %d job specs (%.1f MiB) wait to be written to "
                        "disk; try again",
                        n, mib);
    }
    if (w->tail)
        w->tail->next = it;
    else
        w->head = it;
    w->tail = it;
    w->n_items += !drop;
    w->n_specs += spec != NULL;
    w->bytes += bytes;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return PL_OK;
}

pl_status_t pl_coord_spec_writer_put(pl_coord_spec_writer_t *w, int64_t id, const char *spec,
                                     void *tag)
{
    return s_put(w, id, spec, false, tag);
}

pl_status_t pl_coord_spec_writer_drop(pl_coord_spec_writer_t *w, int64_t id)
{
    return s_put(w, id, NULL, true, NULL);
}

void pl_coord_spec_writer_waiting(pl_coord_spec_writer_t *w, int *items, int *specs)
{
    pthread_mutex_lock(&w->lock);
    *items = w->n_items;
    *specs = w->n_specs;
    pthread_mutex_unlock(&w->lock);
}

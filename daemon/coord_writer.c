/* The state db's writer thread: the loop's writes, queued in order, committed in batches (one
 * transaction, one fsync, for every write waiting); a batch that fails is rolled back and its
 * writes done again one transaction each, so that one bad write takes no other with it. */
#include "daemon/coord_writer.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A commit that took this long says so (rate-limited): the disk is slow; the loop did not wait. */
#define S_SLOW_MS 100.0

typedef struct s_op {
    struct s_op *next;
    uint64_t seq;
    pl_coord_wkind_t kind;
    pl_coord_row_t row; /* PUT, ADD: its strings owned */
    uint32_t next_job, next_epoch;
    int64_t job;
    pl_coord_chunk_t *chunks; /* PROGRESS: tokens owned, one allocation with the array */
    int n_chunks;
    char node[128]; /* DRAIN */
    bool drained;
    size_t bytes;
    bool failed;
    pl_status_t code;
    char *why; /* failed: the message (NULL: out of memory) */
} s_op_t;

struct pl_coord_writer {
    pl_coord_store_t *store; /* the thread's */
    pthread_t thread;
    bool started;
    int done_fd;          /* eventfd: a batch is done (the loop polls it) */
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t wake;  /* the thread: writes wait, or stop */
    pthread_cond_t room;  /* the loop: room in the queue */
    s_op_t *head, *tail;  /* queued */
    int n_ops;
    size_t bytes;
    bool stop;
    uint64_t queued;              /* the loop's: last seq handed out */
    uint64_t done;                /* every write up to it is committed or failed */
    s_op_t *failed, *failed_tail; /* for the loop to collect */
    long waits;
};

static void s_fd_signal(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

static void s_op_free(s_op_t *o)
{
    free((char *)o->row.state);
    free((char *)o->row.spec);
    free((char *)o->row.plan);
    free((char *)o->row.results);
    free((char *)o->row.error);
    free((char *)o->row.events);
    free((char *)o->row.train);
    free(o->chunks);
    free(o->why);
    free(o);
}

static pl_status_t s_apply(pl_coord_store_t *s, const s_op_t *o)
{
    switch (o->kind) {
    case PL_COORD_W_PUT:
        return pl_coord_store_put(s, &o->row, o->next_job, o->next_epoch);
    case PL_COORD_W_ADD:
        return pl_coord_store_add(s, &o->row, o->next_job, o->next_epoch);
    case PL_COORD_W_DELETE:
        return pl_coord_store_delete(s, o->job);
    case PL_COORD_W_PROGRESS:
        return pl_coord_store_progress_put(s, o->chunks, o->n_chunks);
    case PL_COORD_W_PROGRESS_DELETE:
        return pl_coord_store_progress_delete(s, o->job);
    case PL_COORD_W_DRAIN:
        return pl_coord_store_drain(s, o->node, o->drained);
    }
    return PL_ERR_INVALID;
}

/* One batch: all in one transaction; when any of it fails, rolled back and each done alone. A
 * put of a row that is missing (PL_ERR_NOT_FOUND) fails the batch too: its caller's answer is
 * to write the row whole, which the loop does when it hears of it. */
static void s_commit_batch(pl_coord_writer_t *w, s_op_t *batch)
{
    pl_status_t st = pl_coord_store_begin(w->store);
    double t0 = pl_now();
    int n = 0;
    for (s_op_t *o = batch; !st && o; o = o->next, n++)
        st = s_apply(w->store, o);
    if (!st)
        st = pl_coord_store_commit(w->store);
    else
        pl_coord_store_rollback(w->store);
    if (st) /* alone, each its own transaction, to find the ones that fail */
        for (s_op_t *o = batch; o; o = o->next) {
            if ((o->failed = (o->code = s_apply(w->store, o)) != PL_OK))
                o->why = strdup(pl_error_msg());
        }
    double ms = (pl_now() - t0) * 1e3;
    if (ms >= S_SLOW_MS)
        pl_log_warn_limited("state db %s: committing %d write(s) took %.0f ms (the loop went on)",
                            pl_coord_store_path(w->store), n, ms);
}

static void *s_main(void *arg)
{
    pl_coord_writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->wake, &w->lock);
        if (!w->head)
            break; /* stopped, and nothing waits */
        s_op_t *batch = w->head, *last = batch;
        size_t bytes = last->bytes;
        for (int k = 1; k < PL_COORD_WRITER_BATCH && last->next; k++) {
            last = last->next;
            bytes += last->bytes;
        }
        int n = 1;
        for (s_op_t *o = batch; o != last; o = o->next)
            n++;
        w->head = last->next;
        if (!w->head)
            w->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&w->lock);
        s_commit_batch(w, batch);
        pthread_mutex_lock(&w->lock);
        w->n_ops -= n;
        w->bytes -= bytes;
        w->done = last->seq;
        for (s_op_t *o = batch, *next; o; o = next) {
            next = o->next;
            o->next = NULL;
            if (!o->failed) {
                s_op_free(o);
                continue;
            }
            if (w->failed_tail)
                w->failed_tail->next = o;
            else
                w->failed = o;
            w->failed_tail = o;
        }
        pthread_cond_broadcast(&w->room);
        s_fd_signal(w->done_fd);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

pl_status_t pl_coord_writer_start(pl_coord_store_t *store, pl_coord_writer_t **w_p)
{
    pl_coord_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pl_error(PL_ERR_NOMEM, "state db writer: out of memory");
    w->store = store;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->room, NULL);
    if ((w->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        pl_status_t st = pl_error(PL_ERR_IO, "state db writer: eventfd: %s", strerror(errno));
        free(w);
        return st;
    }
    /* signals go to the loop's thread, which watches the stop flag */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, s_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        close(w->done_fd);
        free(w);
        return pl_error(PL_ERR_IO, "state db writer: cannot start its thread: %s", strerror(rc));
    }
    w->started = true;
    *w_p = w;
    return PL_OK;
}

static void s_log_failures(void *user, const pl_coord_wfail_t *f)
{
    char what[160];
    (void)user;
    pl_coord_writer_what(f, what, sizeof(what));
    pl_log_error("state db: %s not saved: %s", what, f->why);
}

void pl_coord_writer_stop(pl_coord_writer_t **w_p)
{
    pl_coord_writer_t *w = *w_p;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL); /* it leaves once the queue is empty: everything committed */
    pl_coord_writer_collect(w, s_log_failures, NULL);
    close(w->done_fd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->room);
    free(w);
    *w_p = NULL;
}

int pl_coord_writer_fd(const pl_coord_writer_t *w)
{
    return w->done_fd;
}

uint64_t pl_coord_writer_queued(const pl_coord_writer_t *w)
{
    return w->queued; /* the loop's own */
}

void pl_coord_writer_wait(pl_coord_writer_t *w)
{
    pthread_mutex_lock(&w->lock);
    while (w->done < w->queued)
        pthread_cond_wait(&w->room, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

long pl_coord_writer_waits(const pl_coord_writer_t *w)
{
    return w->waits; /* the loop's own */
}

/* Queued in order; the loop waits while the queue is full (counted, warned). */
static uint64_t s_push(pl_coord_writer_t *w, s_op_t *o)
{
    pthread_mutex_lock(&w->lock);
    if (w->n_ops >= PL_COORD_WRITER_MAX ||
        (w->n_ops && w->bytes + o->bytes > PL_COORD_WRITER_MAX_BYTES)) {
        double t0 = pl_now();
        w->waits++;
        while (w->n_ops >= PL_COORD_WRITER_MAX ||
               (w->n_ops && w->bytes + o->bytes > PL_COORD_WRITER_MAX_BYTES))
            pthread_cond_wait(&w->room, &w->lock);
        pl_log_warn_limited("state db %s: the write queue was full (%d writes, %d MiB at most): "
                            "the loop waited %.0f ms for the disk (%ld time(s) so far)",
                            pl_coord_store_path(w->store), PL_COORD_WRITER_MAX,
                            (int)(PL_COORD_WRITER_MAX_BYTES >> 20), (pl_now() - t0) * 1e3,
                            w->waits);
    }
    uint64_t seq = o->seq = ++w->queued; /* o is the thread's once the lock is released */
    if (w->tail)
        w->tail->next = o;
    else
        w->head = o;
    w->tail = o;
    w->n_ops++;
    w->bytes += o->bytes;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return seq;
}

static char *s_dup(const char *v, size_t *bytes, bool *bad)
{
    if (!v)
        return NULL;
    size_t n = strlen(v) + 1;
    char *d = malloc(n);
    if (!d)
        *bad = true;
    else
        memcpy(d, v, n);
    *bytes += n;
    return d;
}

static uint64_t s_nomem(s_op_t *o, const char *what)
{
    pl_log_error("state db: %s not saved: out of memory", what);
    if (o)
        s_op_free(o);
    return 0;
}

uint64_t pl_coord_writer_row(pl_coord_writer_t *w, pl_coord_wkind_t kind, const pl_coord_row_t *r,
                             uint32_t next_job, uint32_t next_epoch)
{
    s_op_t *o = calloc(1, sizeof(*o));
    bool bad = false;
    if (!o)
        return s_nomem(o, "a job row");
    o->kind = kind;
    o->job = r->id;
    o->row = *r;
    o->row.state = s_dup(r->state, &o->bytes, &bad);
    o->row.spec = s_dup(r->spec, &o->bytes, &bad);
    o->row.plan = s_dup(r->plan, &o->bytes, &bad);
    o->row.results = s_dup(r->results, &o->bytes, &bad);
    o->row.error = s_dup(r->error, &o->bytes, &bad);
    o->row.events = s_dup(r->events, &o->bytes, &bad);
    o->row.train = s_dup(r->train, &o->bytes, &bad);
    o->next_job = next_job;
    o->next_epoch = next_epoch;
    if (bad)
        return s_nomem(o, "a job row");
    return s_push(w, o);
}

uint64_t pl_coord_writer_delete(pl_coord_writer_t *w, pl_coord_wkind_t kind, int64_t job)
{
    s_op_t *o = calloc(1, sizeof(*o));
    if (!o)
        return s_nomem(o, "a deletion");
    o->kind = kind;
    o->job = job;
    return s_push(w, o);
}

uint64_t pl_coord_writer_progress(pl_coord_writer_t *w, const pl_coord_chunk_t *c, int n)
{
    size_t toks = 0;
    for (int i = 0; i < n; i++)
        toks += (size_t)c[i].n;
    s_op_t *o = calloc(1, sizeof(*o));
    pl_coord_chunk_t *ch = o ? malloc((size_t)n * sizeof(*ch) + toks * sizeof(int32_t) + 1) : NULL;
    if (!ch)
        return s_nomem(o, "progress");
    int32_t *t = (int32_t *)(ch + n);
    for (int i = 0; i < n; i++) {
        ch[i] = c[i];
        memcpy(t, c[i].tokens, (size_t)c[i].n * sizeof(*t));
        ch[i].tokens = t;
        t += c[i].n;
    }
    o->kind = PL_COORD_W_PROGRESS;
    o->job = n ? c[0].job : 0;
    o->chunks = ch;
    o->n_chunks = n;
    o->bytes = (size_t)n * sizeof(*ch) + toks * sizeof(int32_t);
    return s_push(w, o);
}

uint64_t pl_coord_writer_drain(pl_coord_writer_t *w, const char *node, bool drained)
{
    s_op_t *o = calloc(1, sizeof(*o));
    if (!o)
        return s_nomem(o, "a drained node");
    o->kind = PL_COORD_W_DRAIN;
    snprintf(o->node, sizeof(o->node), "%s", node);
    o->drained = drained;
    return s_push(w, o);
}

uint64_t pl_coord_writer_collect(pl_coord_writer_t *w,
                                 void (*fn)(void *user, const pl_coord_wfail_t *f), void *user)
{
    uint64_t n;
    while (read(w->done_fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&w->lock);
    s_op_t *failed = w->failed;
    w->failed = w->failed_tail = NULL;
    uint64_t done = w->done;
    pthread_mutex_unlock(&w->lock);
    for (s_op_t *o = failed, *next; o; o = next) {
        next = o->next;
        pl_coord_wfail_t f = {.seq = o->seq,
                              .kind = o->kind,
                              .job = o->job,
                              .node = o->node,
                              .drained = o->drained,
                              .code = o->code,
                              .why = o->why ? o->why : "out of memory"};
        fn(user, &f);
        s_op_free(o);
    }
    return done;
}

void pl_coord_writer_what(const pl_coord_wfail_t *f, char *buf, size_t len)
{
    switch (f->kind) {
    case PL_COORD_W_PUT:
    case PL_COORD_W_ADD:
        snprintf(buf, len, "job %lld's row", (long long)f->job);
        return;
    case PL_COORD_W_DELETE:
        snprintf(buf, len, "job %lld's deletion", (long long)f->job);
        return;
    case PL_COORD_W_PROGRESS:
        snprintf(buf, len, "job %lld's progress", (long long)f->job);
        return;
    case PL_COORD_W_PROGRESS_DELETE:
        snprintf(buf, len, "job %lld's progress deletion", (long long)f->job);
        return;
    case PL_COORD_W_DRAIN:
        if (f->drained)
            snprintf(buf, len, "node %s's drained mark", f->node);
        else
            snprintf(buf, len, "the removal of node %s's drained mark", f->node);
        return;
    }
    snprintf(buf, len, "write %llu", (unsigned long long)f->seq);
}

/* The coordinator's client intake thread: it owns the client socket, so that a large message's
 * receive, decoding, checks and encoding never hold the loop that answers nodes; a SUBMIT's spec
 * is stored behind it by the spec writer (coord_spec_writer.c), so that no client waits for
 * another's write either. */
#include "daemon/coord_intake.h"

#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_spec_writer.h"
#include "daemon/coord_specs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Client messages taken per turn before the answers and handshakes are seen to again. */
#define S_TAKE_MAX 64
#define S_POLL_MS 100
/* Clients with requests at the loop, tracked for their answers' order; one more is "busy". */
#define S_CLIENTS (2 * PL_COORD_INTAKE_MAX)
/* Answers of this thread's held for one client behind its requests at the loop, at most: past
 * that they are dropped, as a client pipe at its high-water mark drops them. */
#define S_HELD_MAX 1024

/* What the loop hands this thread, in its order: an answer (encoded by the loop) or the end of
 * one request (every answer to it given). What the spec writer hands it: a request that left
 * the writer for the loop, or one whose spec could not be stored (why: its answer, and its end).
 * Also an answer of this thread's own, held behind a client's requests at the loop. */
typedef enum { S_OUT_ANSWER, S_OUT_END, S_OUT_LEFT, S_OUT_FAILED } s_out_kind_t;

typedef struct s_out {
    struct s_out *next;
    s_out_kind_t kind;
    pl_tx_peer_t to;
    pl_msg_type_t type;
    json_t *body;
    pl_status_t code; /* S_OUT_FAILED: why, and its words */
    char *why;
    long after; /* held: sent once this many of its client's requests have ended */
} s_out_t;

/* A request at the spec writer: where it goes once written, and the note that says so. */
typedef struct {
    pl_coord_req_t *req;
    s_out_t *note;
} s_staged_t;

/* A client with requests at the loop. An answer this thread gives it itself (a refusal, "busy")
 * waits until the loop is done with every request it sent before, so that a pipelining client
 * hears its answers in the order it asked. */
typedef struct {
    char id[PL_CTL_MAX_IDENTITY + 1];
    size_t len;
    long pushed, ended; /* its requests handed on (loop or writer), and those done with */
    int staged;         /* of them at the spec writer: its later requests follow them there */
    s_out_t *held, *held_tail; /* in the order of `after` */
    int n_held;
} s_client_t;

static _Thread_local bool s_on_intake; /* this thread is an intake's */

static void s_out_push(pl_coord_intake_t *in, s_out_t *o);

struct pl_coord_intake {
    pl_coord_t *c; /* read: what is fixed once it listens; written: the refusal atomics */
    pl_tx_sock_t *router;
    pl_coord_specs_t *specs; /* the specs file, the writer's while it runs; NULL: no state db */
    pl_coord_spec_writer_t *writer; /* with the specs file */
    uint32_t next_job;       /* this thread's: the ids of new jobs */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_int unfinished; /* the loop's, published every turn */
    int req_fd;            /* eventfd: requests wait (the loop polls it) */
    int wake_fd;           /* eventfd: answers wait, or stop (this thread polls it) */
    s_client_t clients[S_CLIENTS]; /* this thread's */
    int n_clients;
    pthread_mutex_t lock;  /* guards what follows */
    pl_coord_req_t *reqs[PL_COORD_INTAKE_MAX]; /* a ring, oldest at req_head */
    int req_head, n_reqs, n_submits;
    s_out_t *out_head, *out_tail;
};

static void s_fd_signal(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

static void s_fd_drain(int fd)
{
    uint64_t n;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
}

void pl_coord_req_clear(pl_coord_req_t *req)
{
    pl_msg_clear(&req->msg);
    pl_coord_job_free(req->job);
    req->job = NULL;
}

/* A client's identity for the log (binary bytes escaped); shown holds 4 * 64 + 1. */
static const char *s_shown(const pl_tx_peer_t *from, char *shown)
{
    pl_ctl_escape(from->id, PL_MIN(from->len, (size_t)64), shown, 4 * 64 + 1);
    return shown;
}

static int s_client_find(const pl_coord_intake_t *in, const pl_tx_peer_t *p)
{
    for (int k = 0; k < in->n_clients; k++)
        if (in->clients[k].len == p->len && memcmp(in->clients[k].id, p->id, p->len) == 0)
            return k;
    return -1;
}

/* A client with nothing at the loop or the spec writer and nothing held leaves the table (one at
 * the writer stays until its note came back, even when the loop was quicker to end it). */
static void s_client_gc(pl_coord_intake_t *in, int k)
{
    s_client_t *cl = &in->clients[k];
    if (cl->pushed == cl->ended && !cl->held && !cl->staged)
        in->clients[k] = in->clients[--in->n_clients];
}

static void s_send(pl_coord_intake_t *in, const pl_tx_peer_t *to, pl_msg_type_t type,
                   json_t *body)
{
    char shown[4 * 64 + 1];
    if (pl_tx_send_body(in->router, to, type, body))
        pl_log_warn_limited("reply to '%s': %s", s_shown(to, shown), pl_error_msg());
}

/* An answer of this thread's own (body taken): sent now, or held behind the client's requests
 * at the loop. */
static void s_own_answer(pl_coord_intake_t *in, const pl_tx_peer_t *to, pl_msg_type_t type,
                         json_t *body)
{
    int k = s_client_find(in, to);
    s_client_t *cl = k < 0 ? NULL : &in->clients[k];
    s_out_t *o = NULL;
    if (!cl || cl->pushed == cl->ended) { /* nothing of its before it: the common case */
        s_send(in, to, type, body);
        json_decref(body);
        return;
    }
    if (cl->n_held >= S_HELD_MAX || !(o = calloc(1, sizeof(*o)))) {
        char shown[4 * 64 + 1];
        pl_log_warn_limited("reply to '%s': dropped: %d answers wait behind its requests",
                            s_shown(to, shown), cl->n_held);
        json_decref(body);
        return;
    }
    *o = (s_out_t){.kind = S_OUT_ANSWER, .to = *to, .type = type, .body = body,
                   .after = cl->pushed};
    if (cl->held_tail)
        cl->held_tail->next = o;
    else
        cl->held = o;
    cl->held_tail = o;
    cl->n_held++;
}

/* What this thread held for client k behind requests now done goes; a held end (a request
 * whose spec could not be stored) counts as one more request done. */
static void s_client_release(pl_coord_intake_t *in, int k)
{
    s_client_t *cl = &in->clients[k];
    while (cl->held && cl->held->after <= cl->ended) {
        s_out_t *o = cl->held;
        if (!(cl->held = o->next))
            cl->held_tail = NULL;
        cl->n_held--;
        if (o->body)
            s_send(in, &o->to, o->type, o->body);
        cl->ended += o->kind == S_OUT_END;
        json_decref(o->body);
        free(o);
    }
    s_client_gc(in, k);
}

/* The loop is done with one of this client's requests: what this thread held behind it goes. */
static void s_client_end(pl_coord_intake_t *in, const pl_tx_peer_t *to)
{
    int k = s_client_find(in, to);
    if (k < 0)
        return;
    in->clients[k].ended++;
    s_client_release(in, k);
}

/* A request of the client's left the spec writer: for the loop, or (failed: its spec not stored)
 * answered here, once its client's requests before it are done, and then done itself. o taken. */
static void s_client_unstage(pl_coord_intake_t *in, s_out_t *o)
{
    int k = s_client_find(in, &o->to);
    s_client_t *cl = k < 0 ? NULL : &in->clients[k];
    if (cl)
        cl->staged--;
    if (o->kind == S_OUT_LEFT || !cl) {
        free(o->why);
        free(o);
        if (cl)
            s_client_gc(in, k);
        return;
    }
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_ERROR);
    m.error.code = o->code < 0 && o->code >= PL_MSG_MIN_CODE ? o->code : PL_ERR_IO;
    snprintf(m.error.message, sizeof(m.error.message), "job rejected: %s",
             o->why ? o->why : "its spec could not be stored");
    free(o->why);
    o->why = NULL;
    if (pl_msg_encode(&m, &o->body))
        o->body = NULL; /* its end still goes in its place */
    o->kind = S_OUT_END;
    o->type = PL_MSG_ERROR;
    o->next = NULL;
    /* in its place among what is held: after what came before it (after <= its own) */
    s_out_t **at = &cl->held;
    while (*at && (*at)->after <= o->after)
        at = &(*at)->next;
    o->next = *at;
    *at = o;
    if (!o->next)
        cl->held_tail = o;
    cl->n_held++;
    s_client_release(in, k);
}

/* Answer a client from this thread: pl_coord_reply_error answers every peer but a node through
 * pl_coord_intake_reply, which keeps the client's order (s_own_answer). */
#define s_refuse(c, from, code, ...) pl_coord_reply_error((c), (from), (code), __VA_ARGS__)

/* Whether a request could be queued: room among the loop's requests (and for its client in the
 * table of clients with requests there), and for a SUBMIT in the job queue. */
static bool s_room(pl_coord_intake_t *in, const pl_tx_peer_t *from, bool submit)
{
    int n = 0, queued = 0;
    /* the writer's first, then the loop's: an item leaves the writer for the loop's ring before
     * the writer's count falls, so one moving in between is counted twice, never missed (read
     * the other way round, a full ring could take one more) */
    if (in->writer) {
        int items, specs;
        pl_coord_spec_writer_waiting(in->writer, &items, &specs);
        n += items;
        queued += specs;
    }
    pthread_mutex_lock(&in->lock);
    n += in->n_reqs;
    queued += atomic_load(&in->unfinished) + in->n_submits;
    pthread_mutex_unlock(&in->lock);
    if (n < PL_COORD_INTAKE_MAX && in->n_clients == S_CLIENTS && s_client_find(in, from) < 0)
        n = PL_COORD_INTAKE_MAX; /* as many clients wait on the loop as it has requests, twice */
    if (n >= PL_COORD_INTAKE_MAX) {
        char shown[4 * 64 + 1];
        pl_log_info_limited("client '%s' (key %s): the coordinator is busy (%d requests wait)",
                            s_shown(from, shown), from->user, n);
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "the coordinator is busy: %d requests wait for it; try again", n);
        return false;
    }
    if (submit && queued >= in->c->cfg->max_queued_jobs) {
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "job rejected: the queue is full: %d unfinished jobs "
                 "(coordinator.max_queued_jobs)",
                 queued);
        return false;
    }
    return true;
}

/* A SUBMIT made ready for the loop: validated, encoded once, given the next id (taken once it
 * is handed on: an id whose spec may be stored is never given again, even when refused). */
static pl_status_t s_prepare(pl_coord_intake_t *in, pl_msg_t *m, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = NULL;
    pl_status_t st = pl_coord_submit_prepare(in->c->cfg, &m->submit, &j);
    if (st)
        return st;
    j->id = in->next_job;
    *job_p = j;
    return PL_OK;
}

static bool s_is_submit(const pl_coord_req_t *r)
{
    return r->job && r->msg.type == PL_MSG_SUBMIT;
}

/* One more request of this client's handed on (room was seen to: s_room). */
static s_client_t *s_client_push(pl_coord_intake_t *in, const pl_tx_peer_t *from)
{
    int k = s_client_find(in, from);
    if (k < 0) {
        k = in->n_clients++;
        in->clients[k] = (s_client_t){.len = from->len};
        memcpy(in->clients[k].id, from->id, from->len);
    }
    in->clients[k].pushed++;
    return &in->clients[k];
}

/* r to the loop (this thread or the spec writer's). */
static void s_ring_push(pl_coord_intake_t *in, pl_coord_req_t *r)
{
    pthread_mutex_lock(&in->lock);
    in->reqs[(in->req_head + in->n_reqs++) % PL_COORD_INTAKE_MAX] = r;
    in->n_submits += s_is_submit(r);
    pthread_mutex_unlock(&in->lock);
    s_fd_signal(in->req_fd);
}

/* The spec writer is done with a request (its thread): a SUBMIT whose spec is durable, and any
 * request behind one of its client's, go to the loop; a SUBMIT whose spec could not be stored
 * goes back to this thread to be answered in its client's order. */
static void s_written(void *arg, void *tag, pl_status_t st)
{
    pl_coord_intake_t *in = arg;
    s_staged_t *sg = tag;
    pl_coord_req_t *r = sg->req;
    s_out_t *note = sg->note;
    free(sg);
    if (st) {
        note->kind = S_OUT_FAILED;
        note->code = st;
        note->why = strdup(pl_error_msg());
        pl_log_error("job %u: spec not saved: %s", r->job ? r->job->id : 0,
                     note->why ? note->why : "out of memory");
        pl_coord_req_clear(r); /* no job: nothing of it was stored */
        free(r);
        s_out_push(in, note);
        return;
    }
    if (s_is_submit(r)) {
        r->job->spec_saved = true;
        free(r->job->spec_json); /* stored: the loop's first save adds the job row only */
        r->job->spec_json = NULL;
    }
    s_ring_push(in, r);
    note->kind = S_OUT_LEFT; /* after: until it is seen, the client's next request follows here */
    s_out_push(in, note);
}

/* Hand r on: a SUBMIT's spec to the spec writer, and behind it there every later request of
 * the same client until those before it are at the loop, so that the client hears its answers in
 * the order it asked; the rest straight to the loop. Without a state db, all to the loop. */
static void s_hand_on(pl_coord_intake_t *in, pl_coord_req_t *r)
{
    bool submit = s_is_submit(r);
    int k = s_client_find(in, &r->from);
    if (!in->writer || (!submit && (k < 0 || in->clients[k].staged == 0))) {
        in->next_job += submit;
        s_client_push(in, &r->from);
        s_ring_push(in, r);
        return;
    }
    pl_tx_peer_t from = r->from; /* r is the writer's once put */
    s_staged_t *sg = calloc(1, sizeof(*sg));
    s_out_t *note = calloc(1, sizeof(*note));
    pl_status_t st = sg && note ? PL_OK : pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    if (!st) {
        *sg = (s_staged_t){.req = r, .note = note};
        note->to = from;
        note->after = k < 0 ? 0 : in->clients[k].pushed; /* answered after those before it */
        st = pl_coord_spec_writer_put(in->writer, submit ? r->job->id : 0,
                                      submit ? r->job->spec_json : NULL, sg);
    }
    if (st) {
        s_refuse(in->c, &from, st, "%s%s", submit && st != PL_ERR_BUSY ? "job rejected: " : "",
                 pl_error_msg());
        free(sg);
        free(note);
        pl_coord_req_clear(r);
        free(r);
        return;
    }
    in->next_job += submit;
    s_client_push(in, &from)->staged++;
}

/* One client message: decoded (transport's codecs), authorised, a SUBMIT or PLAN's model path
 * checked, a SUBMIT prepared, a PLAN's job validated; then queued for the loop. False when none
 * was waiting. */
static bool s_take(pl_coord_intake_t *in)
{
    pl_coord_t *c = in->c;
    pl_coord_req_t *r = NULL;
    pl_msg_t m;
    pl_tx_peer_t from = {0};
    pl_status_t st = pl_tx_recv(in->router, 0, &from, NULL, &m);
    if (st == PL_ERR_BUSY)
        return false;
    if (st) {
        pl_log_warn_limited("dropped a message: %s", pl_error_msg());
        if (from.len)
            s_refuse(c, &from, st, "%s", pl_error_msg());
        return true;
    }
    if (!pl_coord_auth_check(c, &from, m.type)) /* refused, counted and answered */
        goto out;
    if ((m.type == PL_MSG_SUBMIT || m.type == PL_MSG_PLAN) && pl_coord_auth_job(c, &m.submit)) {
        pl_log_info_limited("job from '%s' refused: %s", from.user, pl_error_msg());
        s_refuse(c, &from, PL_ERR_PERMISSION, "%s", pl_error_msg());
        goto out;
    }
    if (!s_room(in, &from, m.type == PL_MSG_SUBMIT))
        goto out;
    if (!(r = calloc(1, sizeof(*r)))) {
        s_refuse(c, &from, PL_ERR_NOMEM, "coordinator out of memory");
        goto out;
    }
    if (m.type == PL_MSG_SUBMIT && (st = s_prepare(in, &m, &r->job))) {
        char shown[4 * 64 + 1];
        pl_log_info_limited("submission from '%s' rejected: %s", s_shown(&from, shown),
                            pl_error_msg());
        s_refuse(c, &from, st, "job rejected: %s", pl_error_msg());
        free(r);
        goto out;
    }
    if (m.type == PL_MSG_PLAN && (st = pl_coord_job_new(&m.submit, &r->job))) {
        s_refuse(c, &from, st, "cannot plan: %s", pl_error_msg());
        free(r);
        goto out;
    }
    r->from = from;
    r->from.sock = NULL; /* answered through pl_coord_intake_reply */
    r->msg = m;          /* taken */
    pl_msg_init(&m, PL_MSG_NODES);
    s_hand_on(in, r);
out:
    pl_msg_clear(&m);
    return true;
}

/* Send the loop's answers, release what was held behind the requests it is done with, in the
 * order it gave them, and see to the requests that left the spec writer. */
static void s_send_out(pl_coord_intake_t *in)
{
    pthread_mutex_lock(&in->lock);
    s_out_t *o = in->out_head;
    in->out_head = in->out_tail = NULL;
    pthread_mutex_unlock(&in->lock);
    while (o) {
        s_out_t *next = o->next;
        if (o->kind == S_OUT_LEFT || o->kind == S_OUT_FAILED) {
            s_client_unstage(in, o); /* taken */
            o = next;
            continue;
        }
        if (o->kind == S_OUT_ANSWER)
            s_send(in, &o->to, o->type, o->body);
        else
            s_client_end(in, &o->to);
        json_decref(o->body);
        free(o);
        o = next;
    }
}

static void *s_main(void *arg)
{
    pl_coord_intake_t *in = arg;
    s_on_intake = true;
    while (!atomic_load(&in->stop)) {
        bool ready = false, woke = false;
        if (pl_tx_poll_fd(&in->router, 1, in->wake_fd, S_POLL_MS, &ready, &woke)) {
            pl_log_error("client intake: %s", pl_error_msg());
            usleep(10 * 1000);
        }
        if (woke)
            s_fd_drain(in->wake_fd);
        s_send_out(in);
        for (int k = 0; ready && k < S_TAKE_MAX && !atomic_load(&in->stop) && s_take(in); k++)
            s_send_out(in); /* answers the loop gave meanwhile leave between messages */
        pl_coord_check_handshakes(in->c, in->router);
    }
    s_send_out(in); /* the last answers (SHUTDOWN's) */
    return NULL;
}

pl_status_t pl_coord_intake_start(pl_coord_t *c, const char *state_db, pl_tx_sock_t **router_p,
                                  pl_coord_intake_t **in_p)
{
    pl_coord_intake_t *in = calloc(1, sizeof(*in));
    pl_status_t st;
    if (!in)
        return pl_error(PL_ERR_NOMEM, "client intake: out of memory");
    in->c = c;
    in->next_job = c->next_job;
    in->req_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    in->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&in->lock, NULL);
    if (in->req_fd < 0 || in->wake_fd < 0) {
        st = pl_error(PL_ERR_IO, "client intake: eventfd: %s", strerror(errno));
        goto err;
    }
    char specs[4096];
    if (state_db && ((st = pl_coord_specs_path(state_db, specs, sizeof(specs))) ||
                     (st = pl_coord_specs_open(specs, &in->specs)) ||
                     (st = pl_coord_spec_writer_start(in->specs, PL_COORD_INTAKE_SPECS_MAX,
                                                      PL_COORD_INTAKE_SPECS_BYTES, s_written, in,
                                                      &in->writer))))
        goto err;
    in->router = *router_p; /* the thread's from here on (pthread_create is the barrier) */
    c->intake = in;         /* its refusals go through pl_coord_reply_msg to it */
    /* signals go to the loop's thread, which watches the stop flag */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&in->thread, NULL, s_main, in);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        in->router = NULL;
        c->intake = NULL;
        st = pl_error(PL_ERR_IO, "client intake: cannot start its thread: %s", strerror(rc));
        goto err;
    }
    in->started = true;
    *router_p = NULL;
    *in_p = in;
    return PL_OK;
err:
    pl_coord_intake_stop(&in);
    return st;
}

void pl_coord_intake_stop(pl_coord_intake_t **in_p)
{
    pl_coord_intake_t *in = *in_p;
    if (!in)
        return;
    if (in->started) {
        atomic_store(&in->stop, true);
        s_fd_signal(in->wake_fd);
        pthread_join(in->thread, NULL);
    }
    pl_coord_spec_writer_stop(&in->writer); /* its last batch handed on: specs not begun fail */
    s_send_out(in); /* what came after its last turn: answers sent or freed */
    for (int k = 0; k < in->n_clients; k++) /* answers held behind requests never done */
        for (s_out_t *o = in->clients[k].held, *next; o; o = next) { /* body NULL: an end */
            next = o->next;
            json_decref(o->body);
            free(o);
        }
    for (int k = 0; k < in->n_reqs; k++) {
        pl_coord_req_t *r = in->reqs[(in->req_head + k) % PL_COORD_INTAKE_MAX];
        if (r->job && r->job->spec_saved && in->specs)
            pl_coord_specs_drop(in->specs, r->job->id);
        pl_coord_req_clear(r);
        free(r);
    }
    pl_tx_sock_destroy(&in->router);
    pl_coord_specs_close(&in->specs);
    if (in->req_fd >= 0)
        close(in->req_fd);
    if (in->wake_fd >= 0)
        close(in->wake_fd);
    pthread_mutex_destroy(&in->lock);
    free(in);
    *in_p = NULL;
}

int pl_coord_intake_fd(const pl_coord_intake_t *in)
{
    return in->req_fd;
}

static pl_coord_req_t *s_pop(pl_coord_intake_t *in)
{
    pl_coord_req_t *r = NULL;
    pthread_mutex_lock(&in->lock);
    if (in->n_reqs) {
        r = in->reqs[in->req_head];
        in->req_head = (in->req_head + 1) % PL_COORD_INTAKE_MAX;
        in->n_reqs--;
        in->n_submits -= s_is_submit(r);
    }
    pthread_mutex_unlock(&in->lock);
    return r;
}

bool pl_coord_intake_take(pl_coord_intake_t *in, pl_coord_req_t *req)
{
    pl_coord_req_t *r = s_pop(in);
    if (!r) { /* reset the doorbell, then look again: a push in between rings it anew */
        s_fd_drain(in->req_fd);
        if (!(r = s_pop(in)))
            return false;
    }
    *req = *r;
    free(r);
    return true;
}

static void s_out_push(pl_coord_intake_t *in, s_out_t *o)
{
    pthread_mutex_lock(&in->lock);
    if (in->out_tail)
        in->out_tail->next = o;
    else
        in->out_head = o;
    in->out_tail = o;
    pthread_mutex_unlock(&in->lock);
    s_fd_signal(in->wake_fd);
}

void pl_coord_intake_reply(pl_coord_intake_t *in, const pl_tx_peer_t *to, const pl_msg_t *m)
{
    json_t *enc = NULL, *body = NULL;
    if (s_on_intake) { /* a refusal of its own: no other thread shares the encoding */
        if (pl_msg_encode(m, &enc)) {
            char shown[4 * 64 + 1];
            pl_log_warn_limited("reply to '%s': %s", s_shown(to, shown), pl_error_msg());
            return;
        }
        s_own_answer(in, to, m->type, enc);
        return;
    }
    /* a tree of the intake's own: an encoding may share the loop's values (a REPLY's body, a
     * job's plan inside it), whose counts and frees must stay on one thread */
    if (pl_msg_encode(m, &enc) || !(body = json_deep_copy(enc))) {
        char shown[4 * 64 + 1];
        pl_log_warn_limited("reply to '%s': %s", s_shown(to, shown),
                            enc ? "out of memory" : pl_error_msg());
        json_decref(enc);
        return;
    }
    json_decref(enc);
    pl_coord_intake_reply_body(in, to, m->type, body);
}

void pl_coord_intake_reply_body(pl_coord_intake_t *in, const pl_tx_peer_t *to,
                                pl_msg_type_t type, json_t *body)
{
    s_out_t *o = calloc(1, sizeof(*o));
    if (!o) {
        char shown[4 * 64 + 1];
        pl_log_warn_limited("reply to '%s': out of memory", s_shown(to, shown));
        json_decref(body);
        return;
    }
    o->kind = S_OUT_ANSWER;
    o->to = *to;
    o->type = type;
    o->body = body;
    s_out_push(in, o);
}

void pl_coord_intake_end(pl_coord_intake_t *in, const pl_tx_peer_t *to)
{
    s_out_t *o = calloc(1, sizeof(*o));
    if (o) {
        o->kind = S_OUT_END;
        o->to = *to;
        s_out_push(in, o);
    } else { /* what the intake holds for its client then waits until the stop */
        pl_log_warn_limited("client intake: out of memory: a client's answers held");
    }
}

void pl_coord_intake_done(pl_coord_intake_t *in, pl_coord_req_t *req)
{
    pl_coord_intake_end(in, &req->from);
    pl_coord_req_clear(req);
}

void pl_coord_intake_drop_spec(pl_coord_intake_t *in, uint32_t id)
{
    if (in->writer && pl_coord_spec_writer_drop(in->writer, id))
        pl_log_warn("job %u: its spec stays in the specs file until the next start: %s", id,
                    pl_error_msg());
}

void pl_coord_intake_publish(pl_coord_intake_t *in, int unfinished)
{
    atomic_store(&in->unfinished, unfinished);
}

/* The coordinator's client intake thread: it owns the client socket, so that a large message's
 * receive, decoding, checks and encoding never hold the loop that answers nodes; a large
 * request's decoding and checks run on the decoders behind it (coord_decoder.c) and a SUBMIT's
 * spec is stored behind them by the spec writer (coord_spec_writer.c), so that no client waits
 * for another's large request or write either. */
#include "daemon/coord_intake.h"

#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_decoder.h"
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
/* Clients with requests not yet ended, tracked for their answers' order, at most; one more is
 * "busy". A client stays until its last request's end, which the loop holds until the writes it
 * made are committed (coord_hold.c): so beside those with requests here (PL_COORD_INTAKE_MAX at
 * most), the clients whose requests only wait for commits, at most PL_COORD_HELD_MAX (the loop
 * waits for the disk past it), and their ends on the way here. About 330 bytes a client, taken
 * as needed: 2.8 MiB at most. */
#define S_CLIENTS_MAX (PL_COORD_INTAKE_MAX + PL_COORD_HELD_MAX + 64)
/* Answers of this thread's held for one client behind its requests at the loop, at most, and
 * for all clients together: past that they are dropped, as a client pipe at its high-water mark
 * drops them. */
#define S_HELD_MAX 1024
#define S_HELD_ALL 8192
/* Bodies larger than this are decoded on the decoders, as every SUBMIT and PLAN is (its model is
 * read); smaller ones here. */
#define S_INLINE_BYTES ((size_t)64 << 10)

/* What the loop hands this thread, in its order: an answer (encoded by the loop) or the end of
 * one request (every answer to it given). What the spec writer hands it: a request that left
 * the writer for the loop, or one whose spec could not be stored (why: its answer, and its end).
 * What a decoder hands it: a request it checked. Also an answer of this thread's own, held
 * behind a client's requests taken in before it. */
typedef enum { S_OUT_ANSWER, S_OUT_END, S_OUT_LEFT, S_OUT_FAILED, S_OUT_DECODED } s_out_kind_t;

typedef struct s_out {
    struct s_out *next;
    s_out_kind_t kind;
    pl_tx_peer_t to;
    pl_msg_type_t type;
    json_t *body;
    pl_status_t code; /* S_OUT_FAILED: why, and its words */
    char *why;
    long after;          /* held: sent once this many of its client's requests have ended */
    struct s_wait *wait; /* S_OUT_DECODED: the request a decoder is done with */
} s_out_t;

/* A request received and not yet handed on: decoded and checked (here, or on a decoder), then
 * handed on or refused in its client's order, behind those the client sent before it. */
typedef struct s_wait {
    struct s_wait *next; /* its client's next */
    pl_tx_peer_t from;   /* as received with its frames: its decoding sets only the protocol */
    pl_msg_type_t type;
    pl_ctl_raw_t *raw; /* until decoded */
    size_t bytes;      /* its body's, on a decoder (the bound's) */
    long after;        /* its place: its client's requests before it */
    bool done;         /* checked: req to hand on, or (req NULL) answer its refusal */
    pl_coord_req_t *req;
    pl_msg_type_t answer_type;
    json_t *answer;
    s_out_t note; /* S_OUT_DECODED, from a decoder */
} s_wait_t;

/* A request at the spec writer: where it goes once written, and the note that says so. */
typedef struct {
    pl_coord_req_t *req;
    s_out_t *note;
} s_staged_t;

/* A client with requests not yet ended. An answer this thread gives it itself (a refusal,
 * "busy") waits until the loop is done with every request it sent before, so that a pipelining
 * client hears its answers in the order it asked. */
typedef struct {
    char id[PL_CTL_MAX_IDENTITY + 1];
    size_t len;
    long pushed, ended; /* its requests taken in, and those done with */
    int staged;         /* of them at the spec writer: its later requests follow them there */
    s_out_t *held, *held_tail; /* in the order of `after` */
    int n_held;
    s_wait_t *wait, *wait_tail; /* not handed on yet, oldest first */
} s_client_t;

static _Thread_local bool s_on_intake;     /* this thread is an intake's */
static _Thread_local s_wait_t *s_checking; /* the request this thread checks: its refusal */

static void s_out_push(pl_coord_intake_t *in, s_out_t *o);

struct pl_coord_intake {
    pl_coord_t *c; /* read: what is fixed once it listens; written: the refusal atomics */
    pl_tx_sock_t *router;
    pl_coord_specs_t *specs; /* the specs file, the writer's while it runs; NULL: no state db */
    pl_coord_spec_writer_t *writer; /* with the specs file */
    pl_coord_decoder_t *decoder;
    uint32_t next_job; /* this thread's: the ids of new jobs */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_int unfinished; /* the loop's, published every turn */
    int req_fd;            /* eventfd: requests wait (the loop polls it) */
    int wake_fd;           /* eventfd: answers wait, or stop (this thread polls it) */
    s_client_t *clients;   /* this thread's, from here to the lock */
    int n_clients, cap_clients;
    int n_wait, n_wait_submits;                /* requests not handed on yet, and of them SUBMITs */
    size_t wait_bytes;                         /* their bodies on the decoders */
    int n_held_all;                            /* answers held behind requests, all clients' */
    bool stopping;                             /* decoded requests are not handed on any more */
    pthread_mutex_t lock;                      /* guards what follows */
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

/* Client p's place in the table, a new one if need be; -1 when out of memory (s_room saw to
 * the bound). */
static int s_client_add(pl_coord_intake_t *in, const pl_tx_peer_t *p)
{
    int k = s_client_find(in, p);
    if (k >= 0)
        return k;
    if (in->n_clients == in->cap_clients) {
        int cap = in->cap_clients ? 2 * in->cap_clients : 64;
        cap = PL_MIN(cap, S_CLIENTS_MAX);
        s_client_t *grown = realloc(in->clients, (size_t)cap * sizeof(*grown));
        if (!grown || cap == in->cap_clients) {
            if (grown)
                in->clients = grown;
            return -1;
        }
        in->clients = grown;
        in->cap_clients = cap;
    }
    k = in->n_clients++;
    in->clients[k] = (s_client_t){.len = p->len};
    memcpy(in->clients[k].id, p->id, p->len);
    return k;
}

/* A client with nothing waiting, at the loop or at the spec writer, and nothing held leaves the
 * table (one at the writer stays until its note came back, even when the loop was quicker to
 * end it). */
static void s_client_gc(pl_coord_intake_t *in, int k)
{
    s_client_t *cl = &in->clients[k];
    if (cl->pushed == cl->ended && !cl->held && !cl->staged && !cl->wait)
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
 * taken in before it. */
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
    if (cl->n_held >= S_HELD_MAX || in->n_held_all >= S_HELD_ALL || !(o = calloc(1, sizeof(*o)))) {
        char shown[4 * 64 + 1];
        pl_log_warn_limited("reply to '%s': dropped: %d answers wait behind its requests (%d "
                            "behind all clients')",
                            s_shown(to, shown), cl->n_held, in->n_held_all);
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
    in->n_held_all++;
}

/* What this thread held for client k behind requests now done goes; a held end (a request
 * refused after it was taken in) counts as one more request done. */
static void s_client_release(pl_coord_intake_t *in, int k)
{
    s_client_t *cl = &in->clients[k];
    while (cl->held && cl->held->after <= cl->ended) {
        s_out_t *o = cl->held;
        if (!(cl->held = o->next))
            cl->held_tail = NULL;
        cl->n_held--;
        in->n_held_all--;
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

/* A request of client k's refused after it was taken in (o taken: to, after; body, its
 * answer, may be NULL): answered once its requests before it are done, and then done itself.
 * Client k may leave the table. */
static void s_client_refused(pl_coord_intake_t *in, int k, s_out_t *o)
{
    s_client_t *cl = &in->clients[k];
    o->kind = S_OUT_END;
    o->next = NULL;
    /* in its place among what is held: after what came before it (after <= its own); at the
     * tail in one step where it belongs there, as it does when refused in arrival order */
    s_out_t **at = &cl->held;
    if (cl->held_tail && cl->held_tail->after <= o->after)
        at = &cl->held_tail->next;
    while (*at && (*at)->after <= o->after)
        at = &(*at)->next;
    o->next = *at;
    *at = o;
    if (!o->next)
        cl->held_tail = o;
    cl->n_held++;
    in->n_held_all++;
    s_client_release(in, k);
}

/* A request of the client's left the spec writer: for the loop, or (failed: its spec not stored)
 * answered here in its place. o taken. */
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
    o->type = PL_MSG_ERROR;
    s_client_refused(in, k, o);
}

/* Answer a client from this thread: pl_coord_reply_error answers every peer but a node through
 * pl_coord_intake_reply, which keeps the client's order (s_own_answer), or, for the request
 * being checked, keeps the answer with it (s_checking). */
#define s_refuse(c, from, code, ...) pl_coord_reply_error((c), (from), (code), __VA_ARGS__)

/* Whether a request could be taken in: room among the requests here (waiting, at the spec writer
 * or for the loop), for its client in the table, for a SUBMIT in the job queue, and for a body
 * of `bytes` (0: decoded here) on the decoders. */
static bool s_room(pl_coord_intake_t *in, const pl_tx_peer_t *from, bool submit, size_t bytes)
{
    int n = in->n_wait, queued = in->n_wait_submits;
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
    char shown[4 * 64 + 1];
    if (n >= PL_COORD_INTAKE_MAX) {
        pl_log_info_limited("client '%s' (key %s): the coordinator is busy (%d requests wait)",
                            s_shown(from, shown), from->user, n);
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "the coordinator is busy: %d requests wait for it; try again", n);
        return false;
    }
    if (in->n_clients >= S_CLIENTS_MAX && s_client_find(in, from) < 0) {
        pl_log_info_limited("client '%s' (key %s): the coordinator is busy (%d clients wait)",
                            s_shown(from, shown), from->user, in->n_clients);
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "the coordinator is busy: %d clients wait for answers; try again", in->n_clients);
        return false;
    }
    /* a client with requests unfinished whose answers already fill what may wait behind them:
     * a request taken in now would hold one more (its refusal or end), unbounded */
    int k = s_client_find(in, from);
    const s_client_t *cl = k < 0 ? NULL : &in->clients[k];
    if (cl && cl->pushed > cl->ended &&
        (cl->n_held >= S_HELD_MAX || in->n_held_all >= S_HELD_ALL)) {
        pl_log_info_limited("client '%s' (key %s): the coordinator is busy (%d answers wait "
                            "behind its requests, %d behind all clients')",
                            s_shown(from, shown), from->user, cl->n_held, in->n_held_all);
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "the coordinator is busy: %d answers wait behind your requests; try again",
                 cl->n_held);
        return false;
    }
    if (bytes && in->wait_bytes && in->wait_bytes + bytes > PL_COORD_INTAKE_DECODE_BYTES) {
        s_refuse(in->c, from, PL_ERR_BUSY,
                 "the coordinator is busy: %.1f MiB of requests wait to be decoded; try again",
                 (double)in->wait_bytes / (1 << 20));
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

static bool s_is_submit(const pl_coord_req_t *r)
{
    return r->job && r->msg.type == PL_MSG_SUBMIT;
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

/* Hand client k's checked request w on: a SUBMIT, given the next job id, to the spec writer,
 * and behind it there every later request of the same client until those before it are at the
 * loop, so that the client hears its answers in the order it asked; the rest straight to the
 * loop. Without a state db, all to the loop. False when it is refused (its answer in w). */
static bool s_hand_on(pl_coord_intake_t *in, int k, s_wait_t *w)
{
    pl_coord_req_t *r = w->req;
    bool submit = s_is_submit(r);
    if (submit) /* ids in the order the clients' SUBMITs are handed on */
        r->job->id = in->next_job;
    if (!in->writer || (!submit && in->clients[k].staged == 0)) {
        in->next_job += submit;
        s_ring_push(in, r);
        return true;
    }
    s_staged_t *sg = calloc(1, sizeof(*sg));
    s_out_t *note = calloc(1, sizeof(*note));
    pl_status_t st = sg && note ? PL_OK : pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    if (!st) {
        *sg = (s_staged_t){.req = r, .note = note};
        note->to = r->from;
        note->after = w->after; /* answered after those before it */
        st = pl_coord_spec_writer_put(in->writer, submit ? r->job->id : 0,
                                      submit ? r->job->spec_json : NULL, sg);
    }
    if (st) {
        s_checking = w;
        s_refuse(in->c, &w->from, st, "%s%s", submit && st != PL_ERR_BUSY ? "job rejected: " : "",
                 pl_error_msg());
        s_checking = NULL;
        free(sg);
        free(note);
        pl_coord_req_clear(r);
        free(r);
        w->req = NULL;
        return false;
    }
    in->next_job += submit;
    in->clients[k].staged++;
    return true;
}

/* One request decoded (pl_tx_raw_decode), authorised, a SUBMIT or PLAN's model path checked, a
 * SUBMIT's job validated and its spec encoded, a PLAN's job validated: w->req, else its refusal
 * in w->answer. Here or on a decoder: reads only what the intake thread does, with w's sender,
 * which came with its frames. */
static void s_check(pl_coord_intake_t *in, s_wait_t *w)
{
    pl_coord_t *c = in->c;
    pl_coord_req_t *r = NULL;
    pl_msg_t m;
    pl_status_t st;
    s_checking = w; /* its refusal is kept with it */
    if ((st = pl_tx_raw_decode(&w->raw, &w->from, &m))) {
        pl_log_warn_limited("dropped a message: %s", pl_error_msg());
        s_refuse(c, &w->from, st, "%s", pl_error_msg());
        s_checking = NULL;
        return;
    }
    if (!pl_coord_auth_check(c, &w->from, m.type)) /* refused, counted and answered */
        goto out;
    if ((m.type == PL_MSG_SUBMIT || m.type == PL_MSG_PLAN) && pl_coord_auth_job(c, &m.submit)) {
        pl_log_info_limited("job from '%s' refused: %s", w->from.user, pl_error_msg());
        s_refuse(c, &w->from, PL_ERR_PERMISSION, "%s", pl_error_msg());
        goto out;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        s_refuse(c, &w->from, PL_ERR_NOMEM, "coordinator out of memory");
        goto out;
    }
    if (m.type == PL_MSG_SUBMIT && (st = pl_coord_submit_prepare(c->cfg, &m.submit, &r->job))) {
        char shown[4 * 64 + 1];
        pl_log_info_limited("submission from '%s' rejected: %s", s_shown(&w->from, shown),
                            pl_error_msg());
        s_refuse(c, &w->from, st, "job rejected: %s", pl_error_msg());
        free(r);
        goto out;
    }
    if (m.type == PL_MSG_PLAN && (st = pl_coord_job_new(&m.submit, &r->job))) {
        s_refuse(c, &w->from, st, "cannot plan: %s", pl_error_msg());
        free(r);
        goto out;
    }
    r->from = w->from;
    r->from.sock = NULL; /* answered through pl_coord_intake_reply */
    r->msg = m;          /* taken */
    pl_msg_init(&m, PL_MSG_NODES);
    w->req = r;
out:
    pl_msg_clear(&m);
    s_checking = NULL;
}

static void s_wait_free(s_wait_t *w)
{
    pl_ctl_raw_free(&w->raw);
    if (w->req) {
        pl_coord_req_clear(w->req);
        free(w->req);
    }
    json_decref(w->answer);
    free(w);
}

/* Client k's requests checked at the head of its list go on, in its order: handed on, or
 * refused in their place. Client k may leave the table. */
static void s_client_drain(pl_coord_intake_t *in, int k)
{
    s_wait_t *w;
    while ((w = in->clients[k].wait) && w->done) {
        s_client_t *cl = &in->clients[k];
        bool last = !(cl->wait = w->next);
        if (last)
            cl->wait_tail = NULL;
        in->n_wait--;
        in->n_wait_submits -= w->type == PL_MSG_SUBMIT;
        in->wait_bytes -= w->bytes;
        if (!w->req || !s_hand_on(in, k, w)) {
            s_out_t *o = calloc(1, sizeof(*o));
            if (!o) { /* its place is kept all the same: the client's count stays right */
                pl_log_warn_limited("client intake: out of memory: an answer dropped");
                in->clients[k].ended++;
                s_client_release(in, k);
            } else {
                *o = (s_out_t){
                    .to = w->from, .type = w->answer_type, .body = w->answer, .after = w->after};
                w->answer = NULL;
                s_client_refused(in, k, o);
            }
        }
        w->req = NULL; /* handed on */
        s_wait_free(w);
        if (last)
            break; /* the client may have left the table */
    }
}

/* A decoder's work (its thread): w checked, then back to the intake thread. Not begun at the
 * stop: left where it is, which the stop frees. */
static void s_decode(void *arg, void *tag, bool stopping)
{
    pl_coord_intake_t *in = arg;
    s_wait_t *w = tag;
    if (stopping)
        return;
    s_check(in, w);
    s_out_push(in, &w->note);
}

/* A decoder is done with w: its client's requests go on from it, in order. */
static void s_decoded(pl_coord_intake_t *in, s_wait_t *w)
{
    w->done = true;
    int k = in->stopping ? -1 : s_client_find(in, &w->from);
    if (k >= 0)
        s_client_drain(in, k);
}

/* One client message: received, its room seen to, given its place in its client's order; then
 * checked here (s_check) or, for a SUBMIT, a PLAN or a large body, on a decoder, so that a large
 * request never holds the other clients' small ones. False when none was waiting. */
static bool s_take(pl_coord_intake_t *in)
{
    pl_coord_t *c = in->c;
    pl_ctl_raw_t *raw = NULL;
    pl_msg_type_t type;
    pl_tx_peer_t from = {0};
    pl_status_t st = pl_tx_recv_raw(in->router, &from, &type, &raw);
    if (st == PL_ERR_BUSY)
        return false;
    if (st) {
        pl_log_warn_limited("dropped a message: %s", pl_error_msg());
        if (from.len)
            s_refuse(c, &from, st, "%s", pl_error_msg());
        return true;
    }
    size_t bytes = pl_ctl_raw_size(raw);
    bool off = type == PL_MSG_SUBMIT || type == PL_MSG_PLAN || bytes > S_INLINE_BYTES;
    s_wait_t *w = NULL;
    int k = -1;
    if (!s_room(in, &from, type == PL_MSG_SUBMIT, off ? bytes : 0)) {
        pl_ctl_raw_free(&raw);
        return true;
    }
    if (!(w = calloc(1, sizeof(*w))) || (k = s_client_add(in, &from)) < 0) {
        s_refuse(c, &from, PL_ERR_NOMEM, "coordinator out of memory");
        free(w);
        pl_ctl_raw_free(&raw);
        return true;
    }
    s_client_t *cl = &in->clients[k];
    *w = (s_wait_t){
        .from = from, .type = type, .raw = raw, .bytes = off ? bytes : 0, .after = cl->pushed++};
    w->note = (s_out_t){.kind = S_OUT_DECODED, .wait = w};
    if (cl->wait_tail)
        cl->wait_tail->next = w;
    else
        cl->wait = w;
    cl->wait_tail = w;
    in->n_wait++;
    in->n_wait_submits += type == PL_MSG_SUBMIT;
    in->wait_bytes += w->bytes;
    if (off && in->decoder && !pl_coord_decoder_put(in->decoder, w))
        return true;
    s_check(in, w); /* small, or no decoder to take it */
    w->done = true;
    s_client_drain(in, k);
    return true;
}

/* Send the loop's answers, release what was held behind the requests it is done with, in the
 * order it gave them, and see to the requests that left the spec writer or a decoder. */
static void s_send_out(pl_coord_intake_t *in)
{
    pthread_mutex_lock(&in->lock);
    s_out_t *o = in->out_head;
    in->out_head = in->out_tail = NULL;
    pthread_mutex_unlock(&in->lock);
    while (o) {
        s_out_t *next = o->next;
        if (o->kind == S_OUT_DECODED) {
            o->next = NULL;
            s_decoded(in, o->wait); /* o is part of it */
            o = next;
            continue;
        }
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
    if ((st = pl_coord_decoder_start(PL_COORD_INTAKE_DECODERS, s_decode, in, &in->decoder)))
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
    in->stopping = true;
    pl_coord_decoder_stop(&in->decoder);    /* requests begun finished, the rest left waiting */
    pl_coord_spec_writer_stop(&in->writer); /* its last batch handed on: specs not begun fail */
    s_send_out(in); /* what came after its last turn: answers sent or freed */
    for (int k = 0; k < in->n_clients; k++) { /* answers held behind requests never done */
        for (s_out_t *o = in->clients[k].held, *next; o; o = next) { /* body NULL: an end */
            next = o->next;
            json_decref(o->body);
            free(o);
        }
        for (s_wait_t *w = in->clients[k].wait, *next; w; w = next) { /* never handed on */
            next = w->next;
            s_wait_free(w);
        }
    }
    free(in->clients);
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

int pl_coord_intake_waiting(pl_coord_intake_t *in)
{
    pthread_mutex_lock(&in->lock);
    int n = in->n_reqs;
    pthread_mutex_unlock(&in->lock);
    return n;
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
    if (s_checking) { /* the refusal of a request being checked: its first answer, kept with it */
        if (!s_checking->answer && pl_msg_encode(m, &enc) == PL_OK) {
            s_checking->answer = enc; /* a tree of its own: an ERROR's encoding shares nothing */
            s_checking->answer_type = m->type;
        }
        return;
    }
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

/* Answers and node messages held until the state writes queued before them are committed
 * (coord_writer.c): a client is told "queued" or "canceled", and a stage hears of its epoch,
 * only once the disk holds it, while heartbeats and queries that wrote nothing go at once. One
 * list in the order given; an entry goes once c->committed reaches its tag, and a client's
 * entries are tagged in non-decreasing order, so each client and the nodes hear them in order.
 * An answer knows the writes it promises (pl_coord_hold_promise): when one fails, the answer
 * becomes the refusal, in its place. A spec's drop waits here for its row's deletion, and an
 * ASSIGN for the row that holds its epoch: never sent if that write fails. */
#include "common/log.h"
#include "daemon/coord_int.h"
#include "daemon/coord_intake.h"
#include "daemon/coord_writer.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loop's thread is handling a client request (the intake's refusals, on its own thread,
 * pass pl_coord_reply_msg too, and are never collected). */
static _Thread_local bool s_collecting;

typedef enum { S_ANSWER, S_END, S_NODE, S_DROP } s_kind_t;

typedef struct pl_coord_held {
    struct pl_coord_held *next;
    s_kind_t kind;
    uint64_t tag; /* sent once c->committed >= tag */
    pl_tx_peer_t to;
    pl_msg_type_t type;
    json_t *body; /* a tree of its own (the intake's once handed over) */
    /* the writes it promises (0: none); an answer's refusal should one fail (NULL: none, or
     * no memory for it: then "a promised write"), a drop's job (0: voided), an ASSIGN's job
     * and epoch (job 0: voided, never sent: the disk lacks its epoch) */
    uint64_t promise[PL_COORD_PROMISES_MAX];
    char *refusal;
    uint32_t job, epoch;
} s_held_t;

static bool s_promises(const s_held_t *h, uint64_t seq)
{
    for (int k = 0; seq && k < PL_COORD_PROMISES_MAX; k++)
        if (h->promise[k] == seq)
            return true;
    return false;
}

static void s_held_free(s_held_t *h)
{
    json_decref(h->body);
    free(h->refusal);
    free(h);
}

static bool s_same(const pl_tx_peer_t *a, const pl_tx_peer_t *b)
{
    return a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}

static void s_send(pl_coord_t *c, s_held_t *h)
{
    switch (h->kind) {
    case S_ANSWER:
        if (c->intake) {
            pl_coord_intake_reply_body(c->intake, &h->to, h->type, h->body);
            h->body = NULL;
        }
        break;
    case S_END:
        if (c->intake)
            pl_coord_intake_end(c->intake, &h->to);
        break;
    case S_NODE:
        if (h->type == PL_MSG_ASSIGN && !h->job)
            break; /* its epoch's write failed: the job was queued again or failed */
        if (pl_tx_send_body(c->node_router, &h->to, h->type, h->body))
            pl_log_warn("node %.*s: cannot send %s: %s", (int)h->to.len, h->to.id,
                        pl_msg_name(h->type), pl_error_msg());
        break;
    case S_DROP:
        if (h->job && c->intake)
            pl_coord_intake_drop_spec(c->intake, h->job);
        break;
    }
    s_held_free(h);
}

/* A held entry with m encoded into a tree of its own (no other thread holds a reference into
 * it), or NULL and why. */
static s_held_t *s_held_new(const pl_msg_t *m, const char **why)
{
    json_t *enc = NULL;
    s_held_t *h = calloc(1, sizeof(*h));
    if (!h || pl_msg_encode(m, &enc) || !(h->body = json_deep_copy(enc))) {
        *why = h && !enc ? pl_error_msg() : "out of memory";
        json_decref(enc);
        free(h);
        return NULL;
    }
    json_decref(enc);
    h->type = m->type;
    return h;
}

static void s_append(pl_coord_t *c, s_held_t *h)
{
    if (c->held_tail)
        c->held_tail->next = h;
    else
        c->held = h;
    c->held_tail = h;
    c->n_held++;
}

/* The bound: the loop waits until the disk has every write queued so far, then sends. */
static void s_room(pl_coord_t *c)
{
    if (c->n_held < PL_COORD_HELD_MAX || !c->writer)
        return;
    c->held_waits++;
    pl_log_warn_limited("%d answers wait for the state db's commits: the loop waits for the "
                        "disk (%ld time(s) so far)",
                        c->n_held, c->held_waits);
    while (c->committed < pl_coord_writer_queued(c->writer)) {
        pl_coord_saved(c); /* collects, releases */
        if (c->committed < pl_coord_writer_queued(c->writer))
            pl_coord_writer_wait(c->writer);
    }
    pl_coord_saved(c);
}

void pl_coord_hold_begin(pl_coord_t *c)
{
    s_collecting = true;
    c->req_seq0 = c->writer ? pl_coord_writer_queued(c->writer) : 0;
    c->n_req_promises = 0;
}

void pl_coord_hold_promise(pl_coord_t *c, uint64_t seq, const char *fmt, ...)
{
    if (!s_collecting || !seq)
        return; /* no writer (written at once), or no client request's answer to hold */
    assert(c->n_req_promises < PL_COORD_PROMISES_MAX); /* a request promises a write or two */
    if (c->n_req_promises == PL_COORD_PROMISES_MAX)
        return;
    if (!c->n_req_promises) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->req_refusal, sizeof(c->req_refusal), fmt, ap);
        va_end(ap);
    }
    c->req_promises[c->n_req_promises++] = seq;
}

bool pl_coord_hold_answer(pl_coord_t *c, const pl_tx_peer_t *to, const pl_msg_t *m)
{
    if (!s_collecting)
        return false;
    const char *why;
    s_held_t *h = s_held_new(m, &why);
    if (!h) {
        pl_log_warn_limited("reply to '%.*s': %s", (int)to->len, to->id, why);
        return true;
    }
    h->kind = S_ANSWER;
    h->to = *to;
    if (c->cur_tail)
        c->cur_tail->next = h;
    else
        c->cur = h;
    c->cur_tail = h;
    return true;
}

void pl_coord_hold_end(pl_coord_t *c, const pl_tx_peer_t *from)
{
    s_held_t *end = calloc(1, sizeof(*end)), *first = c->cur;
    s_collecting = false;
    c->cur = c->cur_tail = NULL;
    uint64_t q = c->writer ? pl_coord_writer_queued(c->writer) : 0;
    uint64_t tag = q > c->req_seq0 ? q : 0;     /* what it wrote must be on disk first */
    for (int k = 0; k < c->n_req_promises; k++) /* and what it promises */
        if (c->req_promises[k] > tag)
            tag = c->req_promises[k];
    for (s_held_t *h = c->held; h; h = h->next) /* and what its client was told before */
        if ((h->kind == S_ANSWER || h->kind == S_END) && s_same(&h->to, from) && h->tag > tag)
            tag = h->tag;
    if (end)
        *end = (s_held_t){.kind = S_END, .to = *from};
    else
        pl_log_warn_limited("client intake: out of memory: a client's answers held");
    for (s_held_t *h = first, *next; h; h = next) {
        next = h->next;
        h->next = NULL;
        h->tag = tag;
        memcpy(h->promise, c->req_promises, (size_t)c->n_req_promises * sizeof(h->promise[0]));
        if (c->n_req_promises && !(h->refusal = strdup(c->req_refusal)))
            pl_log_warn_limited("client intake: out of memory: a refusal's text");
        if (tag <= c->committed)
            s_send(c, h);
        else
            s_append(c, h);
    }
    if (end) {
        end->tag = tag;
        if (tag <= c->committed)
            s_send(c, end);
        else
            s_append(c, end);
    }
    s_room(c);
}

bool pl_coord_hold_node(pl_coord_t *c, int node, const pl_msg_t *m)
{
    const char *name = c->nodes[node].name;
    pl_tx_peer_t to = {.len = strlen(name)};
    memcpy(to.id, name, to.len + 1);
    /* an assignment after the writes queued before it (its epoch, its job's state); anything
     * else only behind what this node has held, so that it keeps its order */
    uint64_t q = c->writer ? pl_coord_writer_queued(c->writer) : 0, tag = 0;
    if ((m->type == PL_MSG_ASSIGN || m->type == PL_MSG_START) && q > c->committed)
        tag = q;
    for (s_held_t *h = c->held; h; h = h->next)
        if (h->kind == S_NODE && s_same(&h->to, &to) && h->tag > tag)
            tag = h->tag;
    if (tag <= c->committed)
        return false; /* nothing it depends on waits for the disk: sent now */
    const char *why;
    s_held_t *h = s_held_new(m, &why);
    if (!h) {
        pl_log_warn("node %s: cannot send %s: %s", name, pl_msg_name(m->type), why);
        return true;
    }
    h->kind = S_NODE;
    h->tag = tag;
    h->to = to;
    if (m->type == PL_MSG_ASSIGN) { /* it promises the row write that holds its epoch */
        const pl_coord_job_t *j = pl_coord_find_job(c, m->assign.job);
        h->job = m->assign.job;
        h->epoch = m->assign.epoch;
        if (j && j->row_seq > c->committed)
            h->promise[0] = j->row_seq;
    }
    s_append(c, h);
    return true;
}

void pl_coord_hold_release(pl_coord_t *c)
{
    s_held_t **at = &c->held, *prev = NULL;
    while (*at) {
        s_held_t *h = *at;
        if (h->tag > c->committed) {
            prev = h;
            at = &h->next;
            continue;
        }
        *at = h->next;
        if (c->held_tail == h)
            c->held_tail = prev;
        c->n_held--;
        h->next = NULL;
        s_send(c, h);
    }
}

uint32_t pl_coord_hold_failed(pl_coord_t *c, uint64_t seq, pl_status_t code, const char *what)
{
    uint32_t epoch = 0;
    for (s_held_t *h = c->held; h; h = h->next) {
        if (!s_promises(h, seq))
            continue;
        memset(h->promise, 0, sizeof(h->promise)); /* one refusal, the first failure's */
        if (h->kind == S_NODE) { /* an ASSIGN: a stage never hears of an epoch the disk lacks */
            pl_log_warn("node %.*s: job %u's ASSIGN at epoch %u not sent: %s", (int)h->to.len,
                        h->to.id, h->job, h->epoch, what);
            epoch = h->epoch;
            h->job = 0;
            continue;
        }
        if (h->kind == S_DROP) {
            pl_log_warn("job %u: its spec stays with its row: %s", h->job, what);
            h->job = 0;
            continue;
        }
        pl_msg_t m;
        json_t *enc = NULL;
        pl_msg_init(&m, PL_MSG_ERROR);
        m.error.code =
            code < 0 && code >= PL_MSG_MIN_CODE && code != PL_ERR_NOT_FOUND ? code : PL_ERR_IO;
        snprintf(m.error.message, sizeof(m.error.message), "%s: %s",
                 h->refusal ? h->refusal : "a promised write", what);
        if (pl_msg_encode(&m, &enc)) {
            pl_log_warn("reply to '%.*s': its refusal cannot be encoded (%s): %s", (int)h->to.len,
                        h->to.id, pl_error_msg(), m.error.message);
            continue; /* the answer stays; the log and the state say what failed */
        }
        json_decref(h->body);
        h->body = enc;
        h->type = PL_MSG_ERROR;
    }
    return epoch;
}

void pl_coord_hold_forget_job(pl_coord_t *c, uint32_t job)
{
    for (s_held_t *h = c->held; h; h = h->next)
        if (h->kind == S_NODE && h->type == PL_MSG_ASSIGN && h->job == job) {
            memset(h->promise, 0, sizeof(h->promise));
            h->job = 0;
        }
}

void pl_coord_hold_moved(pl_coord_t *c, uint64_t seq, uint64_t to_seq)
{
    for (s_held_t *h = c->held; h; h = h->next) {
        if ((h->kind != S_ANSWER && h->kind != S_NODE) || !s_promises(h, seq))
            continue;
        for (int k = 0; k < PL_COORD_PROMISES_MAX; k++)
            if (h->promise[k] == seq)
                h->promise[k] = to_seq;
        /* it waits for the new write now, and its client's (or node's) later entries behind it */
        for (s_held_t *e = h; e; e = e->next)
            if ((h->kind == S_NODE ? e->kind == S_NODE : e->kind == S_ANSWER || e->kind == S_END) &&
                s_same(&e->to, &h->to) && e->tag < to_seq)
                e->tag = to_seq;
    }
}

void pl_coord_hold_drop_spec(pl_coord_t *c, uint32_t job, uint64_t seq)
{
    if (!c->intake)
        return;
    if (!seq) { /* no writer: the row is deleted already */
        pl_coord_intake_drop_spec(c->intake, job);
        return;
    }
    assert(seq > c->committed); /* queued just now: its outcome is not collected yet */
    s_held_t *h = calloc(1, sizeof(*h));
    if (!h) { /* kept: the next start prunes a spec whose row is gone */
        pl_log_warn("job %u: its spec stays in the specs file until the next start: out of "
                    "memory",
                    job);
        return;
    }
    *h = (s_held_t){.kind = S_DROP, .tag = seq, .promise = {seq}, .job = job};
    s_append(c, h); /* not s_room: the loop may be inside a scan of its jobs */
}

void pl_coord_hold_free(pl_coord_t *c)
{
    for (s_held_t *h = c->held, *next; h; h = next) {
        next = h->next;
        s_held_free(h);
    }
    for (s_held_t *h = c->cur, *next; h; h = next) {
        next = h->next;
        s_held_free(h);
    }
    c->held = c->held_tail = c->cur = c->cur_tail = NULL;
    c->n_held = 0;
}

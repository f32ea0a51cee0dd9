/* Answers and node messages held until the state writes queued before them are committed
 * (coord_writer.c): a client is told "queued" or "canceled", and a stage hears of its epoch,
 * only once the disk holds it, while heartbeats and queries that wrote nothing go at once. One
 * list in the order given; an entry goes once c->committed reaches its tag, and a client's
 * entries are tagged in non-decreasing order, so each client and the nodes hear them in order. */
#include "common/log.h"
#include "daemon/coord_int.h"
#include "daemon/coord_intake.h"
#include "daemon/coord_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loop's thread is handling a client request (the intake's refusals, on its own thread,
 * pass pl_coord_reply_msg too, and are never collected). */
static _Thread_local bool s_collecting;

typedef enum { S_ANSWER, S_END, S_NODE } s_kind_t;

typedef struct pl_coord_held {
    struct pl_coord_held *next;
    s_kind_t kind;
    uint64_t tag; /* sent once c->committed >= tag */
    pl_tx_peer_t to;
    pl_msg_type_t type;
    json_t *body;      /* a tree of its own (the intake's once handed over) */
    uint32_t fail_job; /* an answer to this job's SUBMIT */
} s_held_t;

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
        if (pl_tx_send_body(c->node_router, &h->to, h->type, h->body))
            pl_log_warn("node %.*s: cannot send %s: %s", (int)h->to.len, h->to.id,
                        pl_msg_name(h->type), pl_error_msg());
        break;
    }
    json_decref(h->body);
    free(h);
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
    c->hold_job = 0;
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
    h->fail_job = c->hold_job;
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
    for (s_held_t *h = c->held; h; h = h->next) /* and what its client was told before */
        if (h->kind != S_NODE && s_same(&h->to, from) && h->tag > tag)
            tag = h->tag;
    if (end)
        *end = (s_held_t){.kind = S_END, .to = *from};
    else
        pl_log_warn_limited("client intake: out of memory: a client's answers held");
    for (s_held_t *h = first, *next; h; h = next) {
        next = h->next;
        h->next = NULL;
        h->tag = tag;
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

void pl_coord_hold_refuse(pl_coord_t *c, uint32_t id, const char *why)
{
    for (s_held_t *h = c->held; h; h = h->next) {
        if (h->kind != S_ANSWER || h->fail_job != id)
            continue;
        pl_msg_t m;
        json_t *enc = NULL;
        pl_msg_init(&m, PL_MSG_ERROR);
        m.error.code = PL_ERR_IO;
        snprintf(m.error.message, sizeof(m.error.message), "job rejected: %s", why);
        if (pl_msg_encode(&m, &enc))
            continue; /* the "queued" stays; the job's status says it failed */
        json_decref(h->body);
        h->body = enc;
        h->type = PL_MSG_ERROR;
    }
}

void pl_coord_hold_free(pl_coord_t *c)
{
    for (s_held_t *h = c->held, *next; h; h = next) {
        next = h->next;
        json_decref(h->body);
        free(h);
    }
    for (s_held_t *h = c->cur, *next; h; h = next) {
        next = h->next;
        json_decref(h->body);
        free(h);
    }
    c->held = c->held_tail = c->cur = c->cur_tail = NULL;
    c->n_held = 0;
}

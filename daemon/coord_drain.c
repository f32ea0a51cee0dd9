/* Draining: a drained node gets no new stages (the planner leaves it out) while the stages it
 * runs finish. Kept by node name, so it outlasts a re-registration, and in the state db, so it
 * outlasts a restart; a mark the state db refuses is undone here and its DRAIN answered with the
 * refusal (coord_hold.c). */
#include "common/log.h"
#include "daemon/coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A drained mark queued to the writer and not yet known committed: the node, and the mark the
 * disk keeps should this write fail (what it was before, or what an earlier failed write left
 * for this one to carry). In queue order. */
struct pl_coord_drain_pend {
    uint64_t seq;
    char node[PL_CFG_NAME_MAX + 1];
    bool before;
};

static int s_find(const pl_coord_t *c, const char *name)
{
    for (int i = 0; i < c->n_drained; i++)
        if (!strcmp(c->drained[i], name))
            return i;
    return -1;
}

bool pl_coord_node_draining(const pl_coord_t *c, const char *name)
{
    return s_find(c, name) >= 0;
}

/* Set the mark in the table; false only when the table is full. */
static bool s_set(pl_coord_t *c, const char *name, bool drained)
{
    int i = s_find(c, name);
    if (drained && i < 0) {
        if (c->n_drained == PL_COORD_MAX_NODES)
            return false;
        snprintf(c->drained[c->n_drained++], sizeof(c->drained[0]), "%s", name);
    } else if (!drained && i >= 0) {
        memmove(c->drained[i], c->drained[i + 1],
                (size_t)(c->n_drained - i - 1) * sizeof(c->drained[0]));
        c->n_drained--;
    }
    return true;
}

void pl_coord_drain_failed(pl_coord_t *c, uint64_t seq)
{
    int k = 0;
    while (k < c->n_drain_pend && c->drain_pend[k].seq != seq)
        k++;
    if (k == c->n_drain_pend)
        return; /* not a DRAIN's (none other writes a mark after the start) */
    struct pl_coord_drain_pend *p = &c->drain_pend[k];
    int later = k + 1;
    while (later < c->n_drain_pend && strcmp(c->drain_pend[later].node, p->node))
        later++;
    if (later < c->n_drain_pend) { /* a later DRAIN of this node sets the table: it carries on */
        c->drain_pend[later].before = p->before;
    } else if (!s_set(c, p->node, p->before)) {
        pl_log_error("node %s: its drained mark was not saved and cannot be set back: more than "
                     "%d nodes drained",
                     p->node, PL_COORD_MAX_NODES);
    } else {
        pl_log_warn("node %s: %s again (its %s was not saved)", p->node,
                    p->before ? "drained" : "undrained", p->before ? "undrain" : "drain");
    }
    memmove(p, p + 1, (size_t)(c->n_drain_pend - k - 1) * sizeof(*p));
    c->n_drain_pend--;
}

void pl_coord_drain_saved(pl_coord_t *c)
{
    int k = 0;
    while (k < c->n_drain_pend && c->drain_pend[k].seq <= c->committed)
        k++;
    if (!k)
        return; /* nothing committed since (or no DRAIN at all: no table) */
    memmove(c->drain_pend, c->drain_pend + k,
            (size_t)(c->n_drain_pend - k) * sizeof(*c->drain_pend));
    c->n_drain_pend -= k;
}

void pl_coord_drain_free(pl_coord_t *c)
{
    free(c->drain_pend);
    c->drain_pend = NULL;
    c->n_drain_pend = c->cap_drain_pend = 0;
}

static pl_status_t s_add(void *user, const char *name)
{
    pl_coord_t *c = user;
    if (strlen(name) > PL_CFG_NAME_MAX)
        return pl_error(PL_ERR_INVALID, "drained: node name '%.40s...' is too long", name);
    if (!s_set(c, name, true))
        return pl_error(PL_ERR_INVALID, "drained: more than %d nodes", PL_COORD_MAX_NODES);
    return PL_OK;
}

pl_status_t pl_coord_drain_restore(pl_coord_t *c)
{
    pl_status_t st = c->store ? pl_coord_store_drained(c->store, s_add, c) : PL_OK;
    if (!st && c->n_drained)
        pl_log_info("%d drained node(s) kept from the state db", c->n_drained);
    return st;
}

void pl_coord_on_drain(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_drain_t *m)
{
    const char *verb = m->drain ? "drain" : "undrain";
    int i = s_find(c, m->node);
    bool known = pl_coord_find_node(c, m->node) >= 0;
    for (int k = 0; !known && k < c->cfg->n_nodes; k++)
        known = !strcmp(c->cfg->nodes[k].name, m->node);
    if (!known && i < 0) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no node '%s'", m->node);
        return;
    }
    if (m->drain && i < 0 && c->n_drained == PL_COORD_MAX_NODES) {
        pl_coord_reply_error(c, from, PL_ERR_RANGE, "cannot drain %s: %d nodes drained already",
                             m->node, PL_COORD_MAX_NODES);
        return;
    }
    if (c->writer && c->n_drain_pend == c->cap_drain_pend) { /* room first: nothing written */
        int cap = c->cap_drain_pend ? 2 * c->cap_drain_pend : 8;
        struct pl_coord_drain_pend *p = realloc(c->drain_pend, (size_t)cap * sizeof(*p));
        if (!p) {
            pl_coord_reply_error(c, from, PL_ERR_NOMEM, "cannot %s %s: out of memory", verb,
                                 m->node);
            return;
        }
        c->drain_pend = p;
        c->cap_drain_pend = cap;
    }
    uint64_t seq;
    pl_status_t st = pl_coord_save_drain(c, m->node, m->drain, &seq);
    if (st) { /* nothing changed: the store and the table agree */
        pl_coord_reply_error(c, from, st, "cannot %s %s: %s", verb, m->node, pl_error_msg());
        return;
    }
    if (seq) { /* queued: the answer waits for it, and is the refusal if it fails */
        struct pl_coord_drain_pend *p = &c->drain_pend[c->n_drain_pend++];
        *p = (struct pl_coord_drain_pend){.seq = seq, .before = i >= 0};
        snprintf(p->node, sizeof(p->node), "%s", m->node);
        pl_coord_hold_promise(c, seq, "cannot %s %s", verb, m->node);
    }
    s_set(c, m->node, m->drain); /* room checked above */
    pl_log_info("node %s: %s", m->node,
                m->drain ? "drained: no new stages" : "undrained: takes new stages again");
    pl_coord_reply(c, from, json_pack("{s:s, s:b}", "node", m->node, "draining", m->drain));
    if (!m->drain)
        pl_coord_schedule(c); /* queued jobs may fit now */
}

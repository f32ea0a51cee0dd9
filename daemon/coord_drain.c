/* Draining: a drained node gets no new stages (the planner leaves it out) while the stages it
 * runs finish. Kept by node name, so it outlasts a re-registration, and in the state db, so it
 * outlasts a restart. */
#include "common/log.h"
#include "daemon/coord_int.h"

#include <stdio.h>
#include <string.h>

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

static pl_status_t s_add(void *user, const char *name)
{
    pl_coord_t *c = user;
    if (strlen(name) > PL_CFG_NAME_MAX)
        return pl_error(PL_ERR_INVALID, "drained: node name '%.40s...' is too long", name);
    if (s_find(c, name) >= 0)
        return PL_OK;
    if (c->n_drained == PL_COORD_MAX_NODES)
        return pl_error(PL_ERR_INVALID, "drained: more than %d nodes", PL_COORD_MAX_NODES);
    snprintf(c->drained[c->n_drained++], sizeof(c->drained[0]), "%s", name);
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
    int i = s_find(c, m->node);
    bool known = pl_coord_find_node(c, m->node) >= 0;
    for (int k = 0; !known && k < c->cfg->n_nodes; k++)
        known = !strcmp(c->cfg->nodes[k].name, m->node);
    if (!known && i < 0) {
        pl_coord_reply_error(c, from, PL_ERR_NOT_FOUND, "no node '%s'", m->node);
        return;
    }
    pl_status_t st = pl_coord_save_drain(c, m->node, m->drain); /* its answer waits for it */
    if (!st && m->drain)
        st = s_add(c, m->node);
    if (st) { /* nothing changed: the store and the table agree */
        if (m->drain)
            pl_coord_save_drain(c, m->node, false);
        pl_coord_reply_error(c, from, st, "cannot %s %s: %s", m->drain ? "drain" : "undrain",
                             m->node, pl_error_msg());
        return;
    }
    if (!m->drain && i >= 0) {
        memmove(c->drained[i], c->drained[i + 1],
                (size_t)(c->n_drained - i - 1) * sizeof(c->drained[0]));
        c->n_drained--;
    }
    pl_log_info("node %s: %s", m->node,
                m->drain ? "drained: no new stages" : "undrained: takes new stages again");
    pl_coord_reply(c, from, json_pack("{s:s, s:b}", "node", m->node, "draining", m->drain));
    if (!m->drain)
        pl_coord_schedule(c); /* queued jobs may fit now */
}

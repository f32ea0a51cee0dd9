/* pipeld's registration watch (node_reg.h): silence on the node endpoint and control-protocol
 * mismatches are told in words that name the endpoint and both versions. */
#include "daemon/node_reg.h"

#include "common/log.h"

#include <stdio.h>
#include <string.h>

#define S_REPEAT_S 60.0

void pl_node_reg_init(pl_node_reg_t *r, const char *node_ep, const char *endpoint, bool derived)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->node_ep, sizeof(r->node_ep), "%s", node_ep);
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
    r->derived = derived;
}

void pl_node_reg_hello(pl_node_reg_t *r, double now)
{
    if (r->since == 0) {
        r->since = now;
        r->next_warn = now + PL_NODE_REG_TIMEOUT_S;
    }
}

void pl_node_reg_done(pl_node_reg_t *r)
{
    r->since = 0;
    r->heard = true;
}

void pl_node_reg_lost(pl_node_reg_t *r)
{
    r->since = 0;
    r->heard = false;
}

void pl_node_reg_check(pl_node_reg_t *r, double now)
{
    if (r->since == 0 || r->heard || now < r->next_warn)
        return;
    r->next_warn = now + S_REPEAT_S;
    if (r->derived)
        pl_log_error("no answer in %.0f s from %s, the coordinator's node endpoint "
                     "(coordinator.node_endpoint: by default the port of %s plus 1, or "
                     "ipc://X.nodes for ipc://X): daemons register there, not on the client "
                     "endpoint. An older pipecoord has no node endpoint: upgrade it, or check "
                     "that %s is reachable", now - r->since, r->node_ep, r->endpoint, r->node_ep);
    else
        pl_log_error("no answer in %.0f s from %s, the coordinator's node endpoint as "
                     "coordinator_node_endpoint sets it (coordinator.node_endpoint on the "
                     "coordinator's side). An older pipecoord has no node endpoint: upgrade it, "
                     "or check that %s is the one it binds and is reachable",
                     now - r->since, r->node_ep, r->node_ep);
}

bool pl_node_reg_proto_ok(pl_node_reg_t *r, const pl_msg_t *m)
{
    char peer[300], why[640];
    r->heard = true; /* the endpoint is there, whatever it speaks */
    if (m->proto == PL_PROTO_VERSION)
        return true;
    snprintf(peer, sizeof(peer), "the coordinator at %s", r->node_ep);
    pl_msg_proto_mismatch(peer, m->proto, "this pipeld", why, sizeof(why));
    if (m->type == PL_MSG_ERROR)
        pl_log_limited(PL_LOG_ERROR, "%s (it says: %s)", why, m->error.message);
    else
        pl_log_limited(PL_LOG_ERROR, "%s (its %s is dropped)", why, pl_msg_name(m->type));
    return false;
}

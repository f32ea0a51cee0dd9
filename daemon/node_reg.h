/* pipeld's registration watch: what it says when the coordinator does not answer on the node
 * endpoint, or answers in another control protocol (node.c calls these from its loop). */
#ifndef PL_DAEMON_NODE_REG_H
#define PL_DAEMON_NODE_REG_H

#include "transport/msg.h"

#include <stdbool.h>

/* Silence on the node endpoint this long after the first HELLO is told (then each minute). */
#define PL_NODE_REG_TIMEOUT_S 5.0

typedef struct {
    char node_ep[256];         /* where HELLO goes */
    char endpoint[256];        /* the coordinator's client endpoint it was derived from */
    bool derived;              /* node_ep came from endpoint (no coordinator_node_endpoint) */
    double since, next_warn;   /* the first unanswered HELLO (0: none), the next warning */
    bool heard;                /* something came back on the node endpoint */
} pl_node_reg_t;

void pl_node_reg_init(pl_node_reg_t *r, const char *node_ep, const char *endpoint, bool derived);
/* A HELLO left at `now`. */
void pl_node_reg_hello(pl_node_reg_t *r, double now);
/* Registered (WELCOME): the watch stops until the registration is lost again. */
void pl_node_reg_done(pl_node_reg_t *r);
/* The registration was lost: watch again. */
void pl_node_reg_lost(pl_node_reg_t *r);
/* Unregistered at `now`: past PL_NODE_REG_TIMEOUT_S of silence, say which endpoint had no
 * answer, that it is the node endpoint and how it is found, and that older coordinators lack it. */
void pl_node_reg_check(pl_node_reg_t *r, double now);
/* A message from the coordinator: whether its control protocol is this pipeld's; if not, the
 * mismatch is logged with both versions (and an ERROR's text) and the message must be dropped. */
bool pl_node_reg_proto_ok(pl_node_reg_t *r, const pl_msg_t *m);

#endif

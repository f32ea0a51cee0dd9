/* Raw ZeroMQ control messages for tests that play a node or a client against a real
 * coordinator: the protocol key of hand-written bodies, CURVE with the local state directory's
 * keys, DEALER sockets, typed messages sent as they go on the wire, answers received. */
#ifndef PL_TESTS_WIRE_UTIL_H
#define PL_TESTS_WIRE_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <zmq.h>

#include "common/config.h"
#include "transport/ctl.h"
#include "transport/keys.h"
#include "transport/msg.h"

/* The first key of a hand-written control message body: the protocol it speaks (ctl.h), without
 * which the coordinator refuses it as a sender of protocol 2 or older. */
#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)
#define TC_PROTO "\"proto\": " TC_STR(PL_PROTO_VERSION) ", "

/* A raw ZeroMQ test socket speaks CURVE with the local state directory's pair `which`
 * ("admin", "node"), waiting up to 10 s for the coordinator to have made it. */
static inline void tc_curve_local(void *sock, const char *which)
{
    char dir[512], path[600], server[PL_TX_KEY_LEN + 1];
    pl_tx_keypair_t p;
    cr_assert_eq(pl_tx_key_local_dir(dir, sizeof(dir)), 0);
    snprintf(path, sizeof(path), "%s/coordinator.pub", dir);
    for (int i = 0; i < 100 && access(path, R_OK) != 0; i++)
        usleep(100 * 1000);
    cr_assert_eq(pl_tx_key_local_pair(dir, which, &p), 0, "%s", pl_error_msg());
    cr_assert_eq(pl_tx_key_load_public(path, server), 0, "%s", pl_error_msg());
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 40), 0);
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, p.public_key, 40), 0);
    cr_assert_eq(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, p.secret_key, 40), 0);
}

/* The coordinator's node endpoint for its client endpoint ep (what pipecoord binds and pipeld
 * connects to when neither is told otherwise): raw test sockets that play a node use it. */
static inline void tc_node_ep(const char *ep, char *out, size_t len)
{
    cr_assert_eq(pl_cfg_node_endpoint(ep, NULL, out, len), PL_OK, "%s", pl_error_msg());
}

/* A raw DEALER with routing id `id` (NULL: one of ZeroMQ's), no linger, its receives timing out
 * after rcv_ms; the caller sets its keys and connects it. */
static inline void *tc_dealer(void *ctx, const char *id, int rcv_ms)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    cr_assert_not_null(s, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcv_ms, sizeof(rcv_ms));
    if (id)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id));
    return s;
}

/* tc_dealer (5 s receives) speaking CURVE with the local pair `which`, connected to ep. */
static inline void *tc_dealer_local(void *ctx, const char *id, const char *which, const char *ep)
{
    void *s = tc_dealer(ctx, id, 5000);
    tc_curve_local(s, which);
    cr_assert_eq(zmq_connect(s, ep), 0, "connect %s: %s", ep, zmq_strerror(zmq_errno()));
    return s;
}

/* m on sock as it goes on the wire: its type, then its body as compact JSON (m stays the
 * caller's: borrowed parts are not cleared). */
static inline void tc_send_msg(void *sock, const pl_msg_t *m)
{
    json_t *body;
    cr_assert_eq(pl_msg_encode(m, &body), PL_OK, "%s", pl_error_msg());
    char *text = json_dumps(body, JSON_COMPACT);
    const char *type = pl_msg_name(m->type);
    zmq_send(sock, type, strlen(type), ZMQ_SNDMORE);
    zmq_send(sock, text, strlen(text), 0);
    free(text);
    json_decref(body);
}

/* The next answer on sock: its type part (up to 31 bytes) into type[32] and its body (up to
 * cap - 1 bytes) into body, both NUL-ended and empty when none came; false on timeout. */
static inline bool tc_recv_answer(void *sock, char *type, char *body, size_t cap)
{
    type[0] = body[0] = '\0';
    int n = zmq_recv(sock, type, 31, 0);
    if (n < 0)
        return false;
    type[n < 31 ? n : 31] = '\0';
    n = zmq_recv(sock, body, cap - 1, 0);
    body[n < 0 ? 0 : (size_t)n < cap - 1 ? (size_t)n : cap - 1] = '\0';
    return true;
}

/* A HELLO of this protocol from node `name` on host "fakehost", with no devices yet. */
static inline void tc_hello(pl_msg_t *m, const char *name)
{
    pl_msg_init(m, PL_MSG_HELLO);
    snprintf(m->hello.node, sizeof(m->hello.node), "%s", name);
    snprintf(m->hello.host, sizeof(m->hello.host), "fakehost");
    snprintf(m->hello.health.node, sizeof(m->hello.health.node), "%s", name);
}

#endif

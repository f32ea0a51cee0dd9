/* The ZeroMQ control plane's framing: each message is multipart [identity (ROUTER side)][type]
 * [JSON body]. The type is an ASCII name; the body is a JSON object of at most PL_CTL_MAX_BODY
 * bytes. Receiving validates framing, size, type and that the body is an object; the per-type
 * fields are msg.h's typed codecs, and processes use sock.h rather than these socket calls. */
#ifndef PL_TRANSPORT_CTL_H
#define PL_TRANSPORT_CTL_H

#include "common/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The control protocol every message names in its body's "proto" (msg.h's pl_msg_t.proto): 2,
 * typed messages (ERROR codes, ASSIGN's spec), named it in HELLO only; 3: every message names
 * it, so that a coordinator, pipeld and pipectl of different versions say so. */
#define PL_PROTO_VERSION 3
#define PL_CTL_MAX_BODY (8u << 20)
#define PL_CTL_MAX_IDENTITY 255

typedef enum {
    PL_MSG_HELLO = 1,  /* daemon -> coord: register node and devices */
    PL_MSG_WELCOME,    /* coord -> daemon */
    PL_MSG_HEARTBEAT,  /* daemon -> coord */
    PL_MSG_ASSIGN,     /* coord -> daemon: load a stage (the job spec and the plan's decisions) */
    PL_MSG_READY,      /* daemon -> coord: stage loaded, here is its UCX address */
    PL_MSG_START,      /* coord -> daemon: the neighbours' UCX addresses; run */
    PL_MSG_DONE,       /* daemon -> coord: stage finished with statistics (last stage: results) */
    PL_MSG_FAIL,       /* daemon -> coord: stage failed */
    PL_MSG_CANCEL,     /* coord -> daemon: stop and release a job's stage */
    PL_MSG_SUBMIT,     /* pipectl -> coord */
    PL_MSG_STATUS,     /* pipectl -> coord */
    PL_MSG_RESULTS,    /* pipectl -> coord */
    PL_MSG_KILL,       /* pipectl -> coord: cancel a job */
    PL_MSG_NODES,      /* pipectl -> coord */
    PL_MSG_HEALTH,     /* pipectl -> coord */
    PL_MSG_REPLY,      /* coord -> pipectl: success */
    PL_MSG_ERROR,      /* coord -> pipectl / daemon: failure, {"code": status, "error": "..."} */
    PL_MSG_SHUTDOWN,   /* pipectl -> coord, coord -> daemons: stop the cluster */
    PL_MSG_PLAN,       /* pipectl -> coord: plan a job on the live cluster without submitting */
    PL_MSG_BYE,        /* daemon -> coord: this node is stopping (its stages end now) */
    PL_MSG_JOBS,       /* pipectl -> coord: the jobs the asker may see */
    PL_MSG_DRAIN,      /* pipectl -> coord: no new stages on a node (or again, drain false) */
    PL_MSG_TRACE,      /* pipectl -> coord: one stage's trace; coord -> daemon: send it now */
    PL_MSG_TRACED,     /* daemon -> coord: a running stage's trace so far */
    PL_MSG_SEQ_ADD,    /* coord -> daemon: a request joins a deployment (stage 0, last stage) */
    PL_MSG_SEQ_CANCEL, /* coord -> daemon: a request leaves a deployment early (stage 0) */
    PL_MSG_SEQ_OUT,    /* daemon -> coord: a request's new tokens, text and end (last stage) */
    PL_MSG_PROGRESS,   /* daemon -> coord: tokens the last stage sampled since its last report */
    PL_MSG_TRAIN_STEP, /* daemon -> coord: a training stage finished an optimizer step */
    PL_MSG_DEPLOYMENTS, /* pipectl -> coord: the deployments, their plans, load and throughput */
    PL_MSG_COUNT_
} pl_msg_type_t;

const char *pl_msg_name(pl_msg_type_t type);
/* PL_ERR_PROTOCOL for a name that is not a known type. */
pl_status_t pl_msg_parse_name(const char *name, size_t len, pl_msg_type_t *type_p);

/* Send one message. identity (ROUTER sockets) may be NULL for DEALER sockets. The body is
 * borrowed; NULL sends "{}". Never blocks: a full queue is PL_ERR_BUSY. */
pl_status_t pl_ctl_send(void *sock, const void *identity, size_t identity_len, pl_msg_type_t type,
                        const json_t *body);

typedef struct {
    char identity[PL_CTL_MAX_IDENTITY + 1]; /* ROUTER side: sender's identity */
    size_t identity_len;
    char user_id[96]; /* ROUTER over CURVE: the ZAP handler's User-Id; "" otherwise */
    pl_msg_type_t type;
    json_t *body; /* owned by the message; released by pl_ctl_msg_clear */
} pl_ctl_msg_t;

/* Receive one whole message (all parts are always drained, also on error). With_identity says
 * whether the socket is a ROUTER. Errors: PL_ERR_PROTOCOL (wrong part count, oversized, unknown
 * type, body not a JSON object), PL_ERR_BUSY (nothing waiting, when flags has ZMQ_DONTWAIT),
 * PL_ERR_TRANSPORT. On a protocol error msg->identity is still filled so the sender can be told.
 * The error message reads "control message from 'IDENTITY': ..." (identity escaped). A signal
 * interrupting the wait before anything arrived is also PL_ERR_BUSY. */
pl_status_t pl_ctl_recv(void *sock, bool with_identity, int flags, pl_ctl_msg_t *msg);
void pl_ctl_msg_clear(pl_ctl_msg_t *msg);

/* A message's body part as received, not parsed yet: so that a large body's parse can run on
 * another thread than the socket's (any one thread at a time). */
typedef struct pl_ctl_raw pl_ctl_raw_t;
/* pl_ctl_recv in two halves: pl_ctl_recv_raw checks the framing, the type and the body's size
 * (msg: identity, user id and type; body NULL) and keeps the body part in *raw_p (no copy);
 * pl_ctl_raw_decode parses it into msg->body as pl_ctl_recv would (errors without the "control
 * message from" prefix) and frees it. */
pl_status_t pl_ctl_recv_raw(void *sock, bool with_identity, int flags, pl_ctl_msg_t *msg,
                            pl_ctl_raw_t **raw_p);
size_t pl_ctl_raw_size(const pl_ctl_raw_t *raw);
pl_status_t pl_ctl_raw_decode(pl_ctl_raw_t **raw_p, pl_ctl_msg_t *msg);
/* Safe on NULL and *raw_p NULL; *raw_p NULL. */
void pl_ctl_raw_free(pl_ctl_raw_t **raw_p);

/* Validate a type part and a body part (the socket-free half of pl_ctl_recv): the type must be a
 * known name, the body at most PL_CTL_MAX_BODY bytes of JSON holding one object without
 * duplicate keys. Sets msg->type and msg->body only on success; PL_ERR_PROTOCOL otherwise. */
pl_status_t pl_ctl_decode(const void *type, size_t type_len, const void *body, size_t body_len,
                          pl_ctl_msg_t *msg);

/* Options every control socket should get before bind/connect: ZMQ_MAXMSGSIZE (peers sending
 * more are disconnected by ZeroMQ), ZMQ_LINGER 0, send/receive high-water marks, and
 * ZMQ_ROUTER_MANDATORY on ROUTER sockets so that pl_ctl_send to an unknown or departed identity
 * is PL_ERR_TRANSPORT ("peer not connected") instead of a silent drop. */
pl_status_t pl_ctl_socket_setup(void *sock);

/* CURVE encryption of the control plane. The coordinator's ROUTER is the server (its secret
 * key, Z85); daemons and pipectl are clients that know the server's public key and use a fresh
 * key pair of their own. Call before bind / connect. */
pl_status_t pl_ctl_curve_server(void *sock, const char *secret_z85);
pl_status_t pl_ctl_curve_client(void *sock, const char *server_public_z85);

/* Copy `len` bytes into out (NUL-terminated, out_len > 0) with printable ASCII kept and every
 * other byte (and \ and ') written as \xNN; stops early rather than overflow. Returns the length
 * written. For showing identities and type names from the wire in messages. */
size_t pl_ctl_escape(const void *data, size_t len, char *out, size_t out_len);

#endif

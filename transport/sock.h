/* The ZeroMQ socket wrapper the processes use: a context, ROUTER / DEALER / PAIR sockets with the
 * control plane's options, CURVE, bind / connect, typed send / receive (msg.h) and poll. Nothing
 * outside transport/ includes zmq.h. */
#ifndef PL_TRANSPORT_SOCK_H
#define PL_TRANSPORT_SOCK_H

#include "common/status.h"
#include "transport/msg.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct pl_tx_ctx pl_tx_ctx_t;
typedef struct pl_tx_sock pl_tx_sock_t;

typedef enum {
    PL_TX_ROUTER, /* the coordinator: many peers, addressed by identity */
    PL_TX_DEALER, /* a daemon or pipectl talking to the coordinator */
    PL_TX_PAIR,   /* a node's main thread and one executor thread (inproc) */
} pl_tx_kind_t;

/* What an authenticated client may do (zap.h's allow-list gives each key one). NONE: the
 * socket does not authenticate (a cluster file with `insecure: true`). */
typedef enum {
    PL_TX_ROLE_NONE,
    PL_TX_ROLE_NODE,  /* register, heartbeat, report its stages */
    PL_TX_ROLE_USER,  /* submit, plan, query and cancel its own jobs, list nodes */
    PL_TX_ROLE_ADMIN, /* everything, shutdown included */
} pl_tx_role_t;

const char *pl_tx_role_name(pl_tx_role_t role);
/* "node", "user" or "admin"; PL_ERR_INVALID otherwise. */
pl_status_t pl_tx_role_parse(const char *name, pl_tx_role_t *role_p);

/* Who sent a message to a ROUTER (its identity and, over CURVE, the ZAP handler's verdict), and
 * where a ROUTER's message goes (only id and len are used). */
typedef struct {
    char id[PL_CTL_MAX_IDENTITY + 1]; /* NUL-terminated for logs; may hold binary bytes */
    size_t len;
    pl_tx_role_t role;  /* from the User-Id "ROLE:NAME"; NONE without authentication */
    char user[64];      /* NAME of the key ("" without authentication) */
    pl_tx_sock_t *sock; /* the ROUTER it came on (pl_tx_recv sets it): answers go back there */
    int proto;          /* the control protocol its message named (pl_msg_t.proto; 0: none) */
} pl_tx_peer_t;

pl_status_t pl_tx_ctx_new(pl_tx_ctx_t **ctx_p);
/* Terminate the context (every socket closed first); *ctx_p NULL; safe on NULL. */
void pl_tx_ctx_destroy(pl_tx_ctx_t **ctx_p);

/* A socket with pl_ctl_socket_setup's options (size limit, linger 0, high-water marks, ROUTER
 * mandatory routing). */
pl_status_t pl_tx_sock_new(pl_tx_ctx_t *ctx, pl_tx_kind_t kind, pl_tx_sock_t **sock_p);
void pl_tx_sock_destroy(pl_tx_sock_t **sock_p);
/* Options, before bind / connect: the DEALER's identity; the ROUTER taking over an identity a
 * restarted peer reuses; CURVE as server (secret key; the ZAP domain its handshakes are asked
 * about, zap.h) or client (the server's public key). */
pl_status_t pl_tx_sock_identity(pl_tx_sock_t *s, const char *name);
pl_status_t pl_tx_sock_handover(pl_tx_sock_t *s);
pl_status_t pl_tx_sock_curve_server(pl_tx_sock_t *s, const char *secret_z85,
                                    const char *zap_domain);
pl_status_t pl_tx_sock_curve_client(pl_tx_sock_t *s, const char *server_public_z85);
/* CURVE client with its own key pair (what the coordinator's allow-list knows). */
pl_status_t pl_tx_sock_curve_client_pair(pl_tx_sock_t *s, const char *server_public_z85,
                                         const char *public_z85, const char *secret_z85);
/* Watch the socket's handshakes (before connect / bind). Then pl_tx_sock_handshake_error says
 * why the last handshake failed, if one did since the last call: true with a sentence in `why`
 * ("the coordinator refused this client's key (ZAP status 400)"). */
pl_status_t pl_tx_sock_monitor(pl_tx_sock_t *s);
bool pl_tx_sock_handshake_error(pl_tx_sock_t *s, char *why, size_t why_len);
pl_status_t pl_tx_sock_bind(pl_tx_sock_t *s, const char *endpoint);
pl_status_t pl_tx_sock_connect(pl_tx_sock_t *s, const char *endpoint);

/* Send a typed message; `to` is the peer on a ROUTER, NULL otherwise. Never blocks: a full queue
 * is PL_ERR_BUSY; an unknown peer is PL_ERR_TRANSPORT. */
pl_status_t pl_tx_send(pl_tx_sock_t *s, const pl_tx_peer_t *to, const pl_msg_t *msg);
/* The same for a body pl_msg_encode made already (on another thread, say); borrowed. */
pl_status_t pl_tx_send_body(pl_tx_sock_t *s, const pl_tx_peer_t *to, pl_msg_type_t type,
                            const json_t *body);
/* Receive one typed message, waiting up to timeout_ms (0: only what is queued; -1: forever).
 * PL_ERR_BUSY when nothing came. A message that breaks the protocol (framing or any field) is
 * PL_ERR_PROTOCOL with the sender (ROUTER) in *from and, when its type part was known, that type
 * in *type_p (else PL_MSG_COUNT_), so the sender can be answered. *msg is set only on success;
 * the caller clears it with pl_msg_clear. from and type_p may be NULL. */
pl_status_t pl_tx_recv(pl_tx_sock_t *s, int timeout_ms, pl_tx_peer_t *from, pl_msg_type_t *type_p,
                       pl_msg_t *msg);

/* pl_tx_recv in two halves, so that a large body's parse and typed decode can run on another
 * thread than the socket's: pl_tx_recv_raw takes what is queued (PL_ERR_BUSY: nothing), its
 * framing, type and size checked, *from as pl_tx_recv sets it (also on a protocol error), the
 * body not parsed yet in *raw_p; pl_tx_raw_decode (any thread; raw freed) parses and decodes it
 * into *msg (the caller clears it) and sets from->proto, with pl_tx_recv's errors. */
pl_status_t pl_tx_recv_raw(pl_tx_sock_t *s, pl_tx_peer_t *from, pl_msg_type_t *type_p,
                           pl_ctl_raw_t **raw_p);
pl_status_t pl_tx_raw_decode(pl_ctl_raw_t **raw_p, pl_tx_peer_t *from, pl_msg_t *msg);

/* Wait until one of n sockets has a message or timeout_ms passes (-1: forever); ready[i] says
 * which. A signal is not an error (nothing ready). */
pl_status_t pl_tx_poll(pl_tx_sock_t *const *socks, int n, long timeout_ms, bool *ready);
/* The same with one file descriptor beside them (fd < 0: none): *fd_ready says whether it is
 * readable (an eventfd another thread writes, say). */
pl_status_t pl_tx_poll_fd(pl_tx_sock_t *const *socks, int n, int fd, long timeout_ms,
                          bool *ready, bool *fd_ready);
/* The same with up to 8 descriptors (a negative one is left out); fd_ready[k] for fds[k]. */
pl_status_t pl_tx_poll_fds(pl_tx_sock_t *const *socks, int n, const int *fds, int n_fds,
                           long timeout_ms, bool *ready, bool *fd_ready);

#endif

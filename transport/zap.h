/* The coordinator's ZAP handler (RFC 27): a thread on inproc://zeromq.zap.01 that admits a CURVE
 * client only when its public key is on the allow-list, and names it "ROLE:NAME" (User-Id). */
#ifndef PL_TRANSPORT_ZAP_H
#define PL_TRANSPORT_ZAP_H

#include "common/status.h"
#include "transport/keys.h"
#include "transport/sock.h"

typedef struct pl_tx_zap pl_tx_zap_t;

/* The ZAP domains of the coordinator's two sockets (pl_tx_sock_curve_server): clients (pipectl,
 * any listed key) and nodes, where only node keys are admitted. */
#define PL_TX_ZAP_CLIENTS "pipeld"
#define PL_TX_ZAP_NODES "pipeld-nodes"

/* One allowed client key. name "*" on a node key lets it register under any node name (the
 * local cluster's shared node key); otherwise a node key registers only its own name. */
typedef struct {
    char public_key[PL_TX_KEY_LEN + 1];
    pl_tx_role_t role;
    char name[64];
} pl_tx_client_t;

/* Start the handler on ctx before any CURVE server socket of ctx binds (the clients are
 * copied). Everything not on the list, every mechanism but CURVE, and on the PL_TX_ZAP_NODES
 * domain every key whose role is not node, is refused with status 400 and one log line
 * (rate-limited). */
pl_status_t pl_tx_zap_start(pl_tx_ctx_t *ctx, const pl_tx_client_t *clients, int n,
                            pl_tx_zap_t **zap_p);
/* Stop the thread and close its socket; before the context is destroyed; safe on NULL. */
void pl_tx_zap_stop(pl_tx_zap_t **zap_p);
/* Handshakes refused so far (read from another thread: approximate). */
long pl_tx_zap_refused(const pl_tx_zap_t *zap);

#endif

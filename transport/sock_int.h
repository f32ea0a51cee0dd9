/* The socket wrapper's raw handles, for the other transport files that drive ZeroMQ directly
 * (the ZAP handler). Internal to transport/. */
#ifndef PL_TRANSPORT_SOCK_INT_H
#define PL_TRANSPORT_SOCK_INT_H

#include "transport/sock.h"

void *pl_tx_ctx_raw(pl_tx_ctx_t *ctx);

#endif

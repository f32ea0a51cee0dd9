/* Internals shared by ucx.c (context, endpoints, sends) and ucx_recv.c (receives): the object
 * layouts and the wait helpers. Not for use outside transport/. */
#ifndef PL_TRANSPORT_UCX_IMPL_H
#define PL_TRANSPORT_UCX_IMPL_H

#include "transport/ucx.h"

#include <stdbool.h>
#include <ucp/api/ucp.h>

/* Longest sleep on the event fd, so cancel flags and deadlines are seen promptly. */
#define PL_UCX_POLL_MS 50
/* How long destroy and disconnect wait for endpoints to close and sends to be purged. */
#define PL_UCX_CLOSE_S 2.0
/* Sanity bound on a worker address received from the control plane. */
#define PL_UCX_MAX_ADDR (64u << 10)
#define PL_UCX_TRANSPORT_MAX 128

/* One send in flight: the buffer is ours until UCX completes the request. */
typedef struct pl_ucx_send {
    struct pl_ucx_send *prev, *next;
    pl_ucx_t *ucx;
    pl_ucx_ep_t *ep;
    void *buf;
    void *req;
} pl_ucx_send_t;

/* A buffer UCX may still write into (a send dropped by disconnect); freed after the worker. */
typedef struct pl_ucx_orphan {
    struct pl_ucx_orphan *next;
    void *buf;
} pl_ucx_orphan_t;

/* A matched message being received. It survives the pl_ucx_recv call that matched it (timeout,
 * cancel), so that a later call returns it instead of losing it. */
typedef struct pl_ucx_rx {
    struct pl_ucx_rx *next;
    void *req;           /* NULL once complete */
    ucs_status_t status; /* final status once complete */
    void *buf;
    size_t len;
    uint64_t tag;
    bool discard; /* over the caller's limit: dropped when complete, never returned */
} pl_ucx_rx_t;

struct pl_ucx_ep {
    pl_ucx_ep_t *next;
    pl_ucx_t *ucx;
    ucp_ep_h ep;
    ucs_status_t status; /* UCS_OK, or the first failure seen on this endpoint */
    bool closed;         /* disconnected: kept only until destroy, for late UCX callbacks */
    char transport[PL_UCX_TRANSPORT_MAX];
};

struct pl_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    int efd;
    bool closing;             /* destroy in progress: failures are expected, not peer errors */
    ucs_status_t send_status; /* UCS_OK, or the first failure of a queued send */
    pl_ucx_ep_t *eps;         /* connected endpoints */
    pl_ucx_ep_t *closed;      /* disconnected ones, freed after the worker */
    pl_ucx_send_t pending;    /* list head of sends in flight */
    int n_pending;
    pl_ucx_orphan_t *orphans;
    pl_ucx_rx_t *rx; /* matched messages in match order */
};

/* PL_ERR_TRANSPORT naming the UCX call and status. */
pl_status_t pl_ucx_ucs_error(ucs_status_t status, const char *what);
/* Absolute deadline (pl_now() seconds) of a timeout; infinite when timeout_ms < 0. */
double pl_ucx_deadline(int timeout_ms);
/* Arm the worker and sleep on its event fd until an event, the deadline, or PL_UCX_POLL_MS. */
pl_status_t pl_ucx_sleep(pl_ucx_t *ucx, double deadline);
/* The first connected endpoint that has failed, or NULL. */
pl_ucx_ep_t *pl_ucx_failed_ep(pl_ucx_t *ucx);
/* Whether a matched message is still arriving (UCX aborts if its worker is destroyed then). */
bool pl_ucx_rx_busy(pl_ucx_t *ucx);
/* Free the receive bookkeeping and buffers (after the worker is destroyed). */
void pl_ucx_rx_free(pl_ucx_t *ucx);

#endif

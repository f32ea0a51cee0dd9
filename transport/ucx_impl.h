/* Internals shared by the UCX data plane's files (ucx.c the context, ucx_ep.c endpoints, ucx_send.c
 * sends, ucx_recv.c receives, ...): the object layouts and the wait helpers. Not for use outside
 * transport/. */
#ifndef PL_TRANSPORT_UCX_IMPL_H
#define PL_TRANSPORT_UCX_IMPL_H

#include "transport/ucx.h"
#include "transport/ucx_grant.h"

#include "common/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <ucp/api/ucp.h>

/* Longest sleep on the event fd, so cancel flags and deadlines are seen promptly. */
#ifndef PL_UCX_POLL_MS
#define PL_UCX_POLL_MS 50
#endif
/* How long a wait spins on the worker (progressing it) before it arms the event fd and sleeps:
 * a small message's reply comes within tens of microseconds, and a sleep's wake-up (and on a
 * loaded host, the scheduler) costs as much again; a stage that waits longer still sleeps, so
 * an idle one spins this long per PL_UCX_POLL_MS at most. PL_UCX_SPIN_US in the environment
 * (0..PL_UCX_SPIN_MAX_US) sets it per process; 0 never spins. */
#ifndef PL_UCX_SPIN_US
#define PL_UCX_SPIN_US 50
#endif
#define PL_UCX_SPIN_MAX_US 10000
/* While a transfer streams, a wait keeps spinning until this long has passed since the worker's
 * last event, PL_UCX_PENDING_SPIN times as long while sends of its own are in flight
 * (PL_UCX_STREAM_SPIN_US in the environment, 0..PL_UCX_SPIN_MAX_US; 0: only PL_UCX_SPIN_US).
 * A stream's events come microseconds apart (a socket's next segment, the rendezvous reply to a
 * message's request; a sender whose message sits whole in the socket buffer hears nothing until
 * the reply to the next one, about a message's time later), and a sleep between them puts the
 * wake-up of an idle CPU, on a virtual machine tens of microseconds, on the stream's critical
 * path: on a quiet host TCP ran at 0.65-0.75 of ucx_perftest, which never sleeps (under load,
 * where no CPU idles, at 0.9-1.1). Past PL_UCX_SPIN_US the spin yields the CPU at each turn, so a
 * stage that shares its CPU loses little to it. A wait with no recent event (a stage waiting for
 * its input) still spins PL_UCX_SPIN_US only. */
#ifndef PL_UCX_STREAM_SPIN_US
#define PL_UCX_STREAM_SPIN_US 200
#endif
#define PL_UCX_PENDING_SPIN 10
/* The progress thread's hand-off: after the owner leaves a call it waits this long before it
 * takes the worker (the owner of a ping-pong is back within microseconds, and waking a thread
 * on the owner's CPU at every call's end cost more than the message); while the owner stays in
 * one call longer than PL_UCX_PARK_S it stops waking and waits for the owner's exit. A call
 * that leaves sends in flight (a large message still streaming) hands over at once. */
#define PL_UCX_HANDOFF_S 200e-6
#define PL_UCX_PARK_S 10e-3
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
    /* A pooled send (ucx_outbox.c): the record and its buffer belong to the pool, which `done`
     * hands them back to (reusable false: UCX may still read the buffer, never reuse it);
     * NULL for a malloc'd buffer, freed with its record. */
    void (*done)(struct pl_ucx_send *s, bool reusable);
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
    /* Credits (ucx_inbox.c): sends on this endpoint wait for buffers its peer granted. */
    bool credited;
    uint64_t credit_want, credit_mask; /* tag of the grants that come back for this endpoint */
    int64_t credits;                   /* granted and not yet used */
    int64_t granted, sent;             /* totals: in flight = sent - (granted - first grant) */
    int64_t first_grant, max_in_flight;
    /* The grants' receive: one grant's buffer here, posted again after each grant, so taking
     * grants allocates nothing (ucx_inbox.c). */
    bool grant_posted, grant_done;
    void *grant_req; /* the posted receive while UCX holds it */
    ucs_status_t grant_status;
    ucp_tag_recv_info_t grant_info;
    unsigned char grant_buf[PL_UCX_GRANT_BYTES];
    double credit_wait_s; /* time credited sends waited for a credit */
    int64_t credit_waits; /* credited sends that found none at once */
};

struct pl_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    int efd;
    bool closing;             /* destroy or pl_ucx_expect_close: a peer's going is expected */
    ucs_status_t send_status; /* UCS_OK, or the first failure of a queued send */
    pl_ucx_ep_t *eps;         /* connected endpoints */
    pl_ucx_ep_t *closed;      /* disconnected ones, freed after the worker */
    pl_ucx_send_t pending;    /* list head of sends in flight */
    int n_pending;
    pl_ucx_orphan_t *orphans;
    pl_ucx_rx_t *rx; /* matched messages in match order */
    /* Every use of the worker holds `lock`: the owner thread's calls and, when started, the
     * progress thread, which progresses the worker while the owner computes. */
    pthread_mutex_t lock;
    pthread_cond_t idle; /* signalled when the owner leaves its last call */
    int owner_in;        /* owner calls under way (lock held, or let go only to sleep) */
    double owner_since;  /* pl_now() when owner_in last went from or to 0 */
    bool parked;         /* the progress thread waits for the owner's exit, untimed */
    bool hurry;          /* the owner left sends in flight: the progress thread takes over now */
    atomic_int waiters;  /* owner calls waiting for the lock: the progress thread lets go */
    atomic_bool stop;
    bool has_progress;
    pthread_t progress;
    int wake_fd;   /* eventfd that wakes the progress thread to stop */
    int n_inboxes; /* live inboxes (ucx_inbox.c): they must go before the worker */
    pl_ucx_inbox_t *inboxes; /* the live ones, for pl_ucx_grants_flush */
    int64_t grants_owed;     /* credits released and not yet granted, all inboxes */
    int n_outboxes;      /* live send pools (ucx_outbox.c): likewise */
    int64_t send_allocs; /* sends that allocated their record (the unpooled path) */
    int64_t recv_allocs; /* receives that allocated their buffer (pl_ucx_recv) */
    pl_act_token_t token;   /* the assignment's (pl_ucx_set_token): every grant carries it */
    int64_t grants_dropped; /* grants refused as forged (no token, not a grant) */
    double spin_s;       /* how long pl_ucx_sleep spins before it sleeps (PL_UCX_SPIN_US) */
    double stream_spin_s; /* ... and at least this long after the last event (STREAM_SPIN) */
    double last_event_s;  /* pl_now() of the last progress that found an event */
    pl_ucx_wait_stats_t wait_stats;
};

/* Progress the worker (lock held), noting when it found events: the waits spin on while a
 * transfer streams (PL_UCX_STREAM_SPIN_US). */
static inline unsigned pl_ucx_worker_progress(pl_ucx_t *ucx)
{
    unsigned n = ucp_worker_progress(ucx->worker);
    if (n)
        ucx->last_event_s = pl_now();
    return n;
}

/* A UCX context as the data plane makes it (ucx.c): the user's UCX_* settings (UCX_TLS,
 * UCX_NET_DEVICES, ...) read from the environment, peer-failure timeouts, tag and wakeup
 * features. Both the workers and the resource listing (ucx_info.c) come from it. */
pl_status_t pl_ucx_context_new(int peer_timeout_ms, ucp_context_h *ctx_p);
/* PL_ERR_TRANSPORT naming the UCX call and status. */
pl_status_t pl_ucx_ucs_error(ucs_status_t status, const char *what);
/* Absolute deadline (pl_now() seconds) of a timeout; infinite when timeout_ms < 0. */
double pl_ucx_deadline(int timeout_ms);
/* Stop and join the progress thread, if any (ucx_progress.c); before the worker goes. */
void pl_ucx_progress_stop(pl_ucx_t *ucx);
/* The owner thread's entry to and exit from the worker (every public call). */
void pl_ucx_lock(pl_ucx_t *ucx);
void pl_ucx_unlock(pl_ucx_t *ucx);
/* With the lock held: progress the worker for up to spin_s (returning at its first event), then
 * arm it and sleep (lock released) on its event fd until an event, the deadline, or
 * PL_UCX_POLL_MS. */
pl_status_t pl_ucx_sleep(pl_ucx_t *ucx, double deadline);
/* Unlocked bodies of the public calls, for use with the lock held. */
pl_status_t pl_ucx_send_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf, size_t len);
pl_status_t pl_ucx_recv_locked(pl_ucx_t *ucx, uint64_t want, uint64_t mask, size_t max_len,
                               void **buf_p, size_t *len_p, uint64_t *tag_p, int timeout_ms,
                               const volatile int *cancel);
/* Send a pooled buffer (s->done set, s->buf the buffer) registered under memh: no allocation;
 * s->done runs when UCX is done with it, also at once (completed or failed here). */
pl_status_t pl_ucx_send_pooled_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag,
                                      pl_ucx_send_t *s, size_t len, ucp_mem_h memh);
/* Wait for a credit on a credited endpoint and take it (ucx_inbox.c): the rules of
 * pl_ucx_send_credited, lock held. */
pl_status_t pl_ucx_credit_take_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline,
                                      int timeout_ms, const volatile int *cancel);
/* Cancel ep's posted grant receive and wait (until the deadline) for UCX to let go of it (lock
 * held, or this thread alone on the worker); before the endpoint is freed. */
void pl_ucx_ep_grants_cancel(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline);
/* Send every inbox's owed credits upstream, one grant per inbox (lock held; cheap when none
 * are owed). A release only owes its credit: the grant goes at the next of these, so that over
 * TCP it follows the reply instead of delaying it: before any wait on the worker (pl_ucx_sleep,
 * pl_ucx_arm), after a send, when an inbox's next receive must wait or half its slots are owed,
 * when the progress thread takes over from an owner gone computing, and at the owner's exit
 * when there is no progress thread. A failed grant (its peer gone) is logged; the waits report
 * the endpoint's failure. */
void pl_ucx_grants_flush(pl_ucx_t *ucx);
/* Take a send off the list of sends in flight (lock held); its record and buffer stay. */
void pl_ucx_send_unlink(pl_ucx_send_t *s);
/* Force-close one endpoint without waiting for the peer, progressing until the deadline (lock
 * held, or this thread alone on the worker). */
void pl_ucx_ep_close(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline);
/* The first connected endpoint that has failed, or NULL. */
pl_ucx_ep_t *pl_ucx_failed_ep(pl_ucx_t *ucx);
/* Whether a matched message is still arriving (UCX aborts if its worker is destroyed then). */
bool pl_ucx_rx_busy(pl_ucx_t *ucx);
/* Free the receive bookkeeping and buffers (after the worker is destroyed). */
void pl_ucx_rx_free(pl_ucx_t *ucx);

#endif

/* The UCX data plane: one context and worker per executor thread (and an optional progress
 * thread), endpoints made from worker addresses exchanged through the coordinator (so UCX picks
 * shared memory on one host and TCP or RDMA between hosts), tagged messages. Sends are
 * non-blocking and own their buffer until completion, so a ring of stages never deadlocks on
 * rendezvous; receives either probe (pl_ucx_recv) or land in pre-posted buffers (inbox). */
#ifndef PL_TRANSPORT_UCX_H
#define PL_TRANSPORT_UCX_H

#include "common/status.h"
#include "transport/act_token.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pl_ucx pl_ucx_t;
typedef struct pl_ucx_ep pl_ucx_ep_t;

/* How long a peer that stopped answering (process gone, link cut) may take to fail its
 * endpoints: UCX keepalive rounds and TCP keepalive probes are set from it, unless the user set
 * UCX_KEEPALIVE_INTERVAL / UCX_TCP_KEEP* (their UCX_* settings, UCX_TLS and UCX_NET_DEVICES
 * included, always win). */
#define PL_UCX_PEER_TIMEOUT_MS 3000
typedef struct {
    int peer_timeout_ms; /* 0: PL_UCX_PEER_TIMEOUT_MS; at least 100 */
} pl_ucx_params_t;
pl_status_t pl_ucx_create_with(const pl_ucx_params_t *params, pl_ucx_t **ucx_p);
/* pl_ucx_create_with the defaults. */
pl_status_t pl_ucx_create(pl_ucx_t **ucx_p);
/* Start a thread that progresses the worker whenever it has events (sleeping on its event fd
 * otherwise), so that sends and receives move on while the owner thread computes. The owner
 * keeps calling this API as before; both take turns on the worker. Stopped by destroy. */
pl_status_t pl_ucx_progress_start(pl_ucx_t *ucx);
bool pl_ucx_has_progress(const pl_ucx_t *ucx);
/* Cancels outstanding operations, closes endpoints, frees; *ucx_p NULL; safe on NULL. Waits up to
 * 2 s for a message that is half-received; if it is still arriving then (its sender alive but
 * silent), the worker is left allocated (a logged leak), because UCX 1.13 aborts otherwise. */
void pl_ucx_destroy(pl_ucx_t **ucx_p);
/* The owner's traffic is over and its peers know (both ends are past a barrier of their own, a
 * job's end): a peer that goes from here on is expected, so its endpoint's failure is recorded
 * and returned by later calls as before, but not logged. Over TCP a peer's clean close reaches
 * this side as a failure of the connection, which would otherwise be logged as one. Destroy
 * implies it; whoever closes second must say it before the barrier. */
void pl_ucx_expect_close(pl_ucx_t *ucx);
/* This worker's address as base64 text (caller frees). */
pl_status_t pl_ucx_address(pl_ucx_t *ucx, char **b64_p);
/* Endpoint to the worker whose base64 address is given. Peer failures are reported by later
 * sends / receives as PL_ERR_TRANSPORT, never by aborting. */
pl_status_t pl_ucx_connect(pl_ucx_t *ucx, const char *b64_addr, pl_ucx_ep_t **ep_p);
/* Close an endpoint without waiting for its peer (its unsent messages are dropped; flush first to
 * deliver them) so that its failure no longer concerns this worker; *ep_p NULL; safe on NULL.
 * A worker that outlives a job disconnects that job's peers. */
void pl_ucx_disconnect(pl_ucx_t *ucx, pl_ucx_ep_t **ep_p);
/* Name of the transports UCX chose for the endpoint ("posix/sysv/cma", "tcp", ...), from the
 * endpoint's lanes; "ucx" until the connection is wired up (ask after a message went through).
 * Borrowed, valid while the endpoint lives. */
const char *pl_ucx_ep_transport(pl_ucx_ep_t *ep);
/* The transports this host's UCX context has, each "transport/device" as UCX names its
 * resources ("sysv/memory", "tcp/eth0", "rc_mlx5/mlx5_0:1", ...), after the user's UCX_TLS and
 * UCX_NET_DEVICES: at most max into out, their count in *n_p. Makes and frees a UCX context. */
#define PL_UCX_RES_LEN 48
pl_status_t pl_ucx_resources(char (*out)[PL_UCX_RES_LEN], int max, int *n_p);
/* The resource names in ucp_context_print_info's text (its "resource N : md M dev D flags --
 * TL/DEV" lines), in order, without repeats, malformed ones (pl_msg_ucx_res_name_ok) skipped:
 * at most max; the count. */
int pl_ucx_resources_parse(const char *text, char (*out)[PL_UCX_RES_LEN], int max);
/* Non-blocking tagged send; takes ownership of the malloc'd `buf` (freed when sent). */
pl_status_t pl_ucx_send(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf, size_t len);
/* Wait for the next message whose tag matches (tag & mask) == (want & mask), at most max_len
 * bytes (a longer one is taken off the wire, dropped, and is PL_ERR_PROTOCOL). When nothing
 * matching is waiting and an endpoint of this worker has failed, PL_ERR_TRANSPORT. Returns a
 * malloc'd buffer (*buf_p, caller frees; tag_p may be NULL). Gives up after timeout_ms
 * (PL_ERR_TIMEOUT; < 0 waits forever) or when *cancel becomes non-zero (PL_ERR_CANCELED), also in
 * the middle of a long message: that message is kept and completed by a later call whose tag
 * matches, never lost. Messages matching one (want, mask) come in the order they were sent.
 * Sleeps on the worker's event fd (at most 50 ms at a time) rather than spinning. */
pl_status_t pl_ucx_recv(pl_ucx_t *ucx, uint64_t want, uint64_t mask, size_t max_len,
                        void **buf_p, size_t *len_p, uint64_t *tag_p, int timeout_ms,
                        const volatile int *cancel);
/* Wait until every send has completed (or failed): PL_ERR_TIMEOUT with sends still pending,
 * PL_ERR_TRANSPORT when any queued send of this worker has failed (sticky). An endpoint whose
 * peer left after all sends completed is not a flush failure (see pl_ucx_ep_status). */
pl_status_t pl_ucx_flush(pl_ucx_t *ucx, int timeout_ms);
/* Number of sends not yet completed. */
int pl_ucx_pending(pl_ucx_t *ucx);

/* PL_OK, or PL_ERR_TRANSPORT when UCX reported this endpoint's peer failed (or a send on it
 * failed). pl_ucx_recv and pl_ucx_flush report a failure of any endpoint of the worker. */
pl_status_t pl_ucx_ep_status(pl_ucx_ep_t *ep);
/* One round of worker progress without waiting (completes sends); returns the events handled. */
int pl_ucx_progress(pl_ucx_t *ucx);
/* For callers that wait in their own poll loop (zmq_poll): the worker's event fd, readable when
 * it has work after pl_ucx_arm returned PL_OK. pl_ucx_arm is PL_ERR_BUSY when events are already
 * waiting (progress, then arm again), PL_ERR_TRANSPORT on failure. */
int pl_ucx_efd(const pl_ucx_t *ucx);
pl_status_t pl_ucx_arm(pl_ucx_t *ucx);

/* Credit flow control (ucx_inbox.c). A receiver's inbox pre-posts n_slots receives for tag
 * (want, mask) into slots of slot_bytes, registered with UCX once (ucp_mem_map) and reused, and
 * grants the sending peer one credit per slot over `upstream` (small messages tagged
 * credit_tag). The sender, its endpoint switched to credits, never has more messages in flight
 * than it was granted: a receiver that does not release its slots holds its sender back, and
 * the link's memory is n_slots * slot_bytes at the receiver and as much at the sender. */
typedef struct pl_ucx_inbox pl_ucx_inbox_t;
#define PL_UCX_INBOX_MAX_SLOTS 4096
#define PL_UCX_INBOX_MAX_SLOT_BYTES (1ULL << 32)
/* The inbox must be destroyed before its worker; `upstream` must outlive it. */
pl_status_t pl_ucx_inbox_create(pl_ucx_t *ucx, pl_ucx_ep_t *upstream, uint64_t want,
                                uint64_t mask, uint64_t credit_tag, size_t slot_bytes,
                                int n_slots, pl_ucx_inbox_t **inbox_p);
/* Cancels the posted receives and frees the slots; *inbox_p NULL; safe on NULL. */
void pl_ucx_inbox_destroy(pl_ucx_inbox_t **inbox_p);
/* The next message in the order sent: *buf_p points into its slot (64-byte aligned), where it
 * arrived, valid until pl_ucx_inbox_release; one message is taken at a time. PL_ERR_TIMEOUT,
 * PL_ERR_CANCELED as pl_ucx_recv; PL_ERR_TRANSPORT when nothing came and an endpoint of the
 * worker failed (the upstream peer's, or another: a stage then never waits on a broken ring,
 * within the peer timeout); a message
 * longer than a slot is PL_ERR_PROTOCOL (its slot is posted again without a credit, as by
 * pl_ucx_inbox_drop; the link carries on). */
pl_status_t pl_ucx_inbox_recv(pl_ucx_inbox_t *inbox, const void **buf_p, size_t *len_p,
                              uint64_t *tag_p, int timeout_ms, const volatile int *cancel);
/* Give the taken message's slot back: posted again and its credit returned upstream (owed
 * until the next grant, see pl_ucx_inbox_grants). */
pl_status_t pl_ucx_inbox_release(pl_ucx_inbox_t *inbox);
/* Give the taken message's slot back without a credit: for a message the receiver refuses (not
 * the job's token, malformed). UCX does not say who sent a tagged message, so it may not have
 * cost the sender a credit; returning one would let a flood of forged messages hand the sender
 * credits for slots that are not there. The slot is posted again, so the flood cannot use the
 * slots up either. */
pl_status_t pl_ucx_inbox_drop(pl_ucx_inbox_t *inbox);
/* Bytes of the slots (slot size rounded up to 64) and their number. */
size_t pl_ucx_inbox_bytes(const pl_ucx_inbox_t *inbox);
int pl_ucx_inbox_slots(const pl_ucx_inbox_t *inbox);
/* Grant messages the inbox has sent (the first included). A release owes its slot's credit and
 * the grant goes a moment later, behind the receiver's next send, before it waits, or when the
 * progress thread takes over: credits owed meanwhile travel in one grant. */
int64_t pl_ucx_inbox_grants(pl_ucx_inbox_t *inbox);

/* The assignment's token (act_token.h) for the credit grants of this worker: its inboxes send
 * it in every grant and its credited endpoints take only grants that carry it; the others are
 * dropped (a forged grant adds no credit) and counted. All zero until set; set it before the
 * first inbox is made. */
void pl_ucx_set_token(pl_ucx_t *ucx, const pl_act_token_t *token);
/* Grants dropped so far on this worker as forged. */
int64_t pl_ucx_grants_dropped(pl_ucx_t *ucx);
/* Sends on ep through pl_ucx_send_credited wait for credits, granted by the peer's inbox in
 * messages tagged credit_tag (which a grant from the peer's inbox must match exactly). */
void pl_ucx_ep_use_credits(pl_ucx_ep_t *ep, uint64_t credit_tag);
/* pl_ucx_send once a credit is there: waits for one at most timeout_ms (PL_ERR_TIMEOUT; < 0
 * forever), PL_ERR_CANCELED when *cancel becomes non-zero, PL_ERR_TRANSPORT when the peer
 * failed, PL_ERR_PROTOCOL on a malformed grant. Takes ownership of buf in every case. */
pl_status_t pl_ucx_send_credited(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf,
                                 size_t len, int timeout_ms, const volatile int *cancel);
typedef struct {
    int64_t granted;       /* the first grant: the peer's slots */
    int64_t sent;          /* credited sends */
    int64_t in_flight;     /* sent and whose credit has not come back */
    int64_t max_in_flight; /* the most at any time */
    int64_t waits;         /* credited sends that found no credit at once */
    double wait_s;         /* the time they waited for one */
} pl_ucx_credit_stats_t;
void pl_ucx_ep_credit_stats(pl_ucx_ep_t *ep, pl_ucx_credit_stats_t *stats);

/* The send side without copies or allocations (ucx_outbox.c): n_bufs buffers of buf_bytes
 * (rounded up to 64; each 64-byte aligned), registered with UCX once (ucp_mem_map) and reused.
 * The caller takes a buffer, writes its message there (pl_act_encode_into, or computes into it)
 * and sends it with a credit on `ep` (switched to credits); the buffer comes back to the pool
 * when UCX is done with it, never before, and no send from the pool allocates. One buffer per
 * credit the peer grants, plus one to fill while those are in flight, keeps the link busy. */
typedef struct pl_ucx_outbox pl_ucx_outbox_t;
/* The outbox must be destroyed before its worker; `ep` must outlive it. */
pl_status_t pl_ucx_outbox_create(pl_ucx_t *ucx, pl_ucx_ep_t *ep, size_t buf_bytes, int n_bufs,
                                 pl_ucx_outbox_t **outbox_p);
/* Waits (bounded) for its sends to finish, then unmaps and frees; *outbox_p NULL; safe on
 * NULL. A send still in UCX's hands then leaves the pool in place (a logged leak). */
void pl_ucx_outbox_destroy(pl_ucx_outbox_t **outbox_p);
/* A buffer no send holds (*cap_p bytes): waits for one of the pool's sends to complete when
 * all are in flight, at most timeout_ms (PL_ERR_TIMEOUT; < 0 forever); PL_ERR_CANCELED,
 * PL_ERR_TRANSPORT (peer failed) as pl_ucx_send_credited; PL_ERR_BUSY when every buffer is
 * with the caller (none would ever come back). */
pl_status_t pl_ucx_outbox_get(pl_ucx_outbox_t *outbox, void **buf_p, size_t *cap_p, int timeout_ms,
                              const volatile int *cancel);
/* Give back a buffer taken and not sent. */
void pl_ucx_outbox_unget(pl_ucx_outbox_t *outbox, void *buf);
/* Send len bytes of a taken buffer once a credit is there (the rules and errors of
 * pl_ucx_send_credited; PL_ERR_RANGE when len exceeds the buffer, PL_ERR_INVALID when buf is not
 * a taken buffer). The buffer is the pool's again in every case: on error at once, else when
 * UCX completes the send. */
pl_status_t pl_ucx_outbox_send(pl_ucx_outbox_t *outbox, uint64_t tag, void *buf, size_t len,
                               int timeout_ms, const volatile int *cancel);
typedef struct {
    int bufs;            /* the pool's buffers */
    size_t buf_bytes;    /* bytes of each */
    int64_t sends;       /* sends from the pool */
    int64_t waits;       /* takes that had to wait for a send to complete */
    int sending;         /* sends in UCX's hands now */
    int max_sending;     /* the most at any time */
    int64_t send_allocs; /* the worker's sends that allocated (pl_ucx_send*): none from a pool */
} pl_ucx_outbox_stats_t;
void pl_ucx_outbox_stats(pl_ucx_outbox_t *outbox, pl_ucx_outbox_stats_t *stats);

/* The worker's messages that allocated: sends through pl_ucx_send / pl_ucx_send_credited (not a
 * pool's, nor an inbox's grants) and receives through pl_ucx_recv. A stage's data plane, once
 * set up, makes none. */
typedef struct {
    int64_t sends, recvs;
} pl_ucx_alloc_stats_t;
void pl_ucx_alloc_stats(pl_ucx_t *ucx, pl_ucx_alloc_stats_t *stats);

/* How this worker's waits went: how often they slept on the event fd, and the time they spent
 * spinning first (PL_UCX_SPIN_US, PL_UCX_STREAM_SPIN_US). */
typedef struct {
    int64_t sleeps;
    double spun_s;
} pl_ucx_wait_stats_t;
void pl_ucx_wait_stats(pl_ucx_t *ucx, pl_ucx_wait_stats_t *stats);

#endif

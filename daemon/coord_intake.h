/* The coordinator's client intake: a thread that owns the client ROUTER, receives each client
 * message, has it decoded, authorised and validated (a large one, a SUBMIT's, a PLAN's, on its
 * decoder threads), and hands typed requests to the loop in each client's order. */
#ifndef PL_DAEMON_COORD_INTAKE_H
#define PL_DAEMON_COORD_INTAKE_H

#include "daemon/coord_int.h"

#include <stdbool.h>
#include <stdint.h>

/* Requests that wait for the loop at most; one more is answered "busy" (PL_ERR_BUSY). */
#define PL_COORD_INTAKE_MAX 64
/* SUBMITs' specs that wait for the spec writer (coord_spec_writer.h) at most, and their bytes (a
 * spec alone is let in whatever its size); one more is answered "busy", nothing stored. */
#define PL_COORD_INTAKE_SPECS_MAX 16
#define PL_COORD_INTAKE_SPECS_BYTES ((size_t)64 << 20)
/* The decoder threads, and the bodies that wait to be decoded or, decoded, behind a request of
 * their client's at most (a body alone is let in whatever its size); one more is "busy". */
#define PL_COORD_INTAKE_DECODERS 2
#define PL_COORD_INTAKE_DECODE_BYTES ((size_t)64 << 20)

typedef struct pl_coord_intake pl_coord_intake_t;

/* One client request for the loop. from.sock is NULL: its answers go back through the intake,
 * which keeps the socket. A SUBMIT's job is validated, its spec encoded and (with a state db)
 * stored durably under job->id by the spec writer before the loop sees it; a PLAN's job is validated (no id, nothing stored); msg.submit is empty
 * then. Other types: job NULL. */
typedef struct {
    pl_tx_peer_t from;
    pl_msg_t msg;
    pl_coord_job_t *job;
} pl_coord_req_t;

/* Start the intake on the bound client ROUTER (taken: *router_p NULL). c is the coordinator's
 * state: the thread reads only what is fixed once it listens (the configuration, the node
 * endpoint, security) and the refusal counters (atomics); job ids continue from c->next_job.
 * c->intake is set to it before the thread starts (its refusals go through it).
 * state_db: the state db, beside which its spec writer thread writes the specs file
 * (coord_specs.h), the one writer of that file (NULL: none). */
pl_status_t pl_coord_intake_start(pl_coord_t *c, const char *state_db,
                                  pl_tx_sock_t **router_p, pl_coord_intake_t **in_p);
/* Stop the thread after it has sent every answer queued so far; requests not taken are freed
 * (their stored specs dropped). *in_p NULL; safe on NULL. */
void pl_coord_intake_stop(pl_coord_intake_t **in_p);
/* Readable (for poll) while requests wait for the loop. */
int pl_coord_intake_fd(const pl_coord_intake_t *in);
/* Requests that wait for the loop now (taken by pl_coord_intake_take next). Any thread. */
int pl_coord_intake_waiting(pl_coord_intake_t *in);
/* The next request, oldest first (the caller clears it with pl_coord_req_clear); false when none
 * waits. The loop's thread only. */
bool pl_coord_intake_take(pl_coord_intake_t *in, pl_coord_req_t *req);
void pl_coord_req_clear(pl_coord_req_t *req);
/* The loop is done with req (every answer to it given): cleared, and the answers the intake
 * gave its client itself meanwhile, held so as not to overtake the loop's, may go. */
void pl_coord_intake_done(pl_coord_intake_t *in, pl_coord_req_t *req);
/* The same end marker for a request already cleared (its answers were held until the writes
 * they promise were committed: coord_hold.c), in the order of the answers given before it. */
void pl_coord_intake_end(pl_coord_intake_t *in, const pl_tx_peer_t *to);
/* Send m to a client (`to` from a request): encoded here, sent by the intake thread. */
void pl_coord_intake_reply(pl_coord_intake_t *in, const pl_tx_peer_t *to, const pl_msg_t *m);
/* The same, encoded already: body (taken) a tree no other thread holds a reference into. */
void pl_coord_intake_reply_body(pl_coord_intake_t *in, const pl_tx_peer_t *to,
                                pl_msg_type_t type, json_t *body);
/* A stored spec whose job has no row (the loop refused it, or deleted the row): the spec writer
 * deletes it from the specs file, so that the large delete is off the loop too. Any thread. */
void pl_coord_intake_drop_spec(pl_coord_intake_t *in, uint32_t id);
/* The loop's count of unfinished jobs, published every turn: a SUBMIT that would overfill the
 * queue (coordinator.max_queued_jobs) is refused before its spec is validated or stored. */
void pl_coord_intake_publish(pl_coord_intake_t *in, int unfinished);

#endif

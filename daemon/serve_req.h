/* Serving requests between the coordinator's HTTP threads and its event loop: a request (token
 * ids and settings in; a growing stream of tokens and text and one end out) and the hub where the
 * front hands requests over and the loop publishes the deployments the front may name. */
#ifndef PL_DAEMON_SERVE_REQ_H
#define PL_DAEMON_SERVE_REQ_H

#include "common/config.h"
#include "common/job_gen.h"
#include "common/status.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a request ended. */
typedef enum {
    PL_SERVE_RUNNING = 0, /* not ended yet */
    PL_SERVE_STOP,        /* EOS or a stop string: finish_reason "stop" */
    PL_SERVE_LENGTH,      /* max_new_tokens reached: finish_reason "length" */
    PL_SERVE_CANCELED,    /* the client went away (pl_serve_req_cancel) or the deployment ended */
    PL_SERVE_REFUSED,     /* never admitted: see http_status (404 unknown deployment, 429 queue
                           * full with retry_after_s, 503 nothing can take it, 400 too long) */
    PL_SERVE_FAILED,      /* failed after admission: http_status 500 or 503, message says why */
} pl_serve_finish_t;

typedef struct {
    pl_serve_finish_t finish;
    int http_status;      /* for REFUSED and FAILED */
    double retry_after_s; /* for 429: the Retry-After header */
    char message[256];    /* for REFUSED and FAILED: safe to show a client (no file contents) */
} pl_serve_end_t;

/* What the front asks: the deployment by name (the OpenAI "model" field), the prompt as token
 * ids (chat template applied and tokenized by the front), and the generation settings. */
typedef struct {
    char deployment[PL_CFG_NAME_MAX + 1];
    int32_t *prompt; /* owned by the request once created */
    int n_prompt;
    pl_job_gen_t gen;
    /* The sampler's sequence id: 0 for the front's requests (a request samples as its prompt
     * alone in a one-prompt job); prompt s's index for a batch job run on a deployment. */
    uint32_t stream;
} pl_serve_in_t;

typedef struct pl_serve_req pl_serve_req_t;

/* A new request with one reference; takes in->prompt (NULLed). */
pl_status_t pl_serve_req_create(pl_serve_in_t *in, pl_serve_req_t **req_p);
void pl_serve_req_ref(pl_serve_req_t *r);
/* Drop a reference; frees on the last; *r_p NULL; safe on NULL. */
void pl_serve_req_unref(pl_serve_req_t **r_p);
/* Unique in the process, increasing: for logs and the loop's tables. */
uint64_t pl_serve_req_id(const pl_serve_req_t *r);
/* What was asked; constant for the request's life. */
const pl_serve_in_t *pl_serve_req_input(const pl_serve_req_t *r);

/* ---- the runtime's side (the coordinator's loop) ---- */

/* Append completion tokens and the text they made stable (either may be empty). Ignored after
 * the end. PL_ERR_NOMEM leaves the request as it was. */
pl_status_t pl_serve_req_push(pl_serve_req_t *r, const int32_t *tokens, int n_tokens,
                              const char *text, size_t len);
/* End the request; the first end wins, later ones are ignored. */
void pl_serve_req_end(pl_serve_req_t *r, const pl_serve_end_t *end);
/* Set once the client has gone (the loop frees the sequence's slots on every stage and ends
 * the request as PL_SERVE_CANCELED). */
bool pl_serve_req_canceled(const pl_serve_req_t *r);

/* ---- the front's side (an HTTP thread) ---- */

/* What is new since the front last looked: the text from *text_at on (a malloc'd copy in
 * *text_p, NUL-terminated, its length in *len_p; NULL when none), the number of completion
 * tokens so far, and the end (finish PL_SERVE_RUNNING while running). Waits up to timeout_s
 * (0: not at all) for something new. *text_at moves past what was returned. */
pl_status_t pl_serve_req_wait(pl_serve_req_t *r, double timeout_s, size_t *text_at,
                              char **text_p, size_t *len_p, int *n_tokens_p,
                              pl_serve_end_t *end_p);
/* Every completion token so far (a copy for the caller to free) - for tests and usage. */
pl_status_t pl_serve_req_tokens(pl_serve_req_t *r, int32_t **tokens_p, int *n_p);
/* The client went away: mark it and wake the loop (through the hub it was handed to). */
void pl_serve_req_cancel(pl_serve_req_t *r);

/* ---- the hub ---- */

#define PL_SERVE_MAX_DEPLOYMENTS 16

/* A deployment as the front sees it: what /v1/models lists and what the front needs to
 * tokenize for it. Published by the loop. */
typedef struct {
    char name[PL_CFG_NAME_MAX + 1];
    char model[PATH_MAX]; /* model directory: tokenizer.json, chat template */
    int64_t created;      /* unix seconds */
    int context;          /* the model's context length (prompt + completion) */
    bool ready;           /* stages loaded; false while planning, loading or resuming */
    int max_tokens;       /* the deployment's cap of a request's max_tokens; 0: none */
} pl_serve_deployment_t;

typedef struct pl_serve_hub pl_serve_hub_t;

pl_status_t pl_serve_hub_create(pl_serve_hub_t **hub_p);
/* Ends every request still queued (PL_SERVE_CANCELED); *hub_p NULL; safe on NULL. */
void pl_serve_hub_destroy(pl_serve_hub_t **hub_p);

/* Front: hand a request to the loop (the hub takes its own reference). Never blocks. At most
 * PL_SERVE_HUB_MAX queued between two takes: beyond that the request is ended REFUSED 429. */
#define PL_SERVE_HUB_MAX 1024
void pl_serve_hub_put(pl_serve_hub_t *hub, pl_serve_req_t *req);
/* Loop: a file descriptor readable while requests or cancellations wait (for zmq_poll). */
int pl_serve_hub_fd(const pl_serve_hub_t *hub);
/* Loop: the next handed-over request (the caller owns the reference), or NULL when none; also
 * clears the descriptor's readiness once nothing waits. A cancellation of a request already
 * taken only makes the descriptor readable: the loop checks its live requests'
 * pl_serve_req_canceled when it wakes. */
pl_serve_req_t *pl_serve_hub_take(pl_serve_hub_t *hub);

/* Loop: publish the deployments (copied). Front: a copy of them; returns how many. */
void pl_serve_hub_publish(pl_serve_hub_t *hub, const pl_serve_deployment_t *deps, int n);
int pl_serve_hub_deployments(pl_serve_hub_t *hub, pl_serve_deployment_t out[PL_SERVE_MAX_DEPLOYMENTS]);

#endif

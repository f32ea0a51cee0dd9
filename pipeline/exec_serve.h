/* A deployment's stage executor (spec.serve.on): stage 0's serving loop (exec_serve.c) and the
 * last stage's request side (exec_serve_sink.c), which SEQ_ADD / SEQ_CANCEL feed and SEQ_OUT
 * leaves. */
#ifndef PL_PIPELINE_EXEC_SERVE_H
#define PL_PIPELINE_EXEC_SERVE_H

#include "pipeline/exec_int.h"
#include "pipeline/serve_sink.h"

/* How long the last stage waits for the SEQ_ADD of a request whose first entry came (the two
 * travel to different nodes) before the stage fails. */
#define PL_EXEC_SERVE_BIND_S 10.0
/* Unbound SEQ_ADDs the last stage keeps beyond kv_slots + max_queue. */
#define PL_EXEC_SERVE_PENDING_EXTRA 64

typedef struct pl_exec_sink_side pl_exec_sink_side_t;

/* What a deployment's stage holds besides the executor's own state. */
typedef struct pl_exec_serve {
    int n_slots;                      /* spec.serve.kv_slots */
    pl_exec_sink_side_t *sink;        /* the last stage's; NULL elsewhere */
    struct pl_exec_first_side *first; /* stage 0's; NULL elsewhere */
    double last_drop_log;
    uint64_t dropped; /* control messages refused (wrong job / stage, malformed) */
} pl_exec_serve_t;

/* ---- exec_serve.c ---- */

/* The runtime's job of a deployment from its spec (no prompts: kv_slots sequences, the spec's
 * settings for the data plane) and the state above; checks the assignment's bounds. */
pl_status_t pl_exec_serve_load(pl_exec_t *x, const pl_model_config_t *cfg);
void pl_exec_serve_free(pl_exec_t *x);
/* Take one control message from the node (SEQ_ADD, SEQ_CANCEL), waiting at most timeout_ms
 * (0: only one already queued); PL_ERR_BUSY when none came. */
pl_status_t pl_exec_serve_control(pl_exec_t *x, int timeout_ms);
/* A SEQ_ADD's request as its settings are checked (both ends check the same way): PL_OK, or
 * PL_ERR_INVALID with the reason. */
pl_status_t pl_exec_serve_check(const pl_exec_t *x, const pl_msg_seq_add_t *m);
/* SEQ_OUT to the node (which stamps the epoch), waiting while its queue is full; takes *text_p. */
pl_status_t pl_exec_serve_out(pl_exec_t *x, uint64_t req, const int32_t *tokens, int n,
                              char **text_p, pl_finish_t finish);
/* Stage 0's role, also the all-in-one stage of a one-stage deployment. Runs until canceled. */
pl_status_t pl_exec_run_serve_first(pl_exec_t *x);

/* ---- exec_serve_sink.c: the last stage ---- */

pl_status_t pl_exec_sink_side_create(pl_exec_t *x, pl_exec_sink_side_t **s_p);
void pl_exec_sink_side_destroy(pl_exec_sink_side_t **s_p);
/* A SEQ_ADD kept until its first entry comes (the message's prompt is taken). */
void pl_exec_sink_side_add(pl_exec_t *x, pl_msg_seq_add_t *m);
/* Forget a SEQ_ADD not bound yet (stage 0 could not queue it). */
void pl_exec_sink_side_forget(pl_exec_t *x, uint64_t req);
/* SEQ_CANCEL: the request's SEQ_OUTs stop; its slot is given back by stage 0's notice. */
void pl_exec_sink_side_cancel(pl_exec_t *x, uint64_t req);
/* Bind the first entries (pos0 == 0, token = the request) of a message to their requests,
 * waiting for a SEQ_ADD not here yet (PL_EXEC_SERVE_BIND_S, then PL_ERR_PROTOCOL). */
pl_status_t pl_exec_sink_side_bind(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs);
/* Whether the message's bound entries sample anything (else its forward call skips the head). */
bool pl_exec_sink_side_wants_logits(const pl_exec_t *x, const pl_act_hdr_t *hdr,
                                    const pl_act_seq_t *seqs);
/* Sample a forwarded message's logits; SEQ_OUT per request sampled; the tokens message for
 * stage 0 in out/out_seqs (finished entries flagged; their slots given back here). */
pl_status_t pl_exec_sink_side_sample(pl_exec_t *x, const pl_act_hdr_t *hdr,
                                     const pl_act_seq_t *seqs, const float *logits,
                                     pl_act_hdr_t *out, pl_act_seq_t *out_seqs);
/* A slot's sequence left (stage 0's notice, or a cancel there): its KV and sink slot are free. */
void pl_exec_sink_side_end(pl_exec_t *x, int slot);
/* The last stage's role of a deployment of two stages or more. Runs until canceled. */
pl_status_t pl_exec_run_serve_last(pl_exec_t *x);

#endif

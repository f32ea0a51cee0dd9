/* The stage executor's insides, shared by its files: the state one executor thread owns, and the
 * data-plane helpers (exec_io.c) the roles (exec_first.c, exec_rest.c) are written with. */
#ifndef PL_PIPELINE_EXEC_INT_H
#define PL_PIPELINE_EXEC_INT_H

#include "pipeline/exec.h"
#include "pipeline/gen.h"
#include "pipeline/trace.h"
#include "transport/act_recv.h"
#include "transport/ucx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Receive slots (credits) of a link carrying activations: one per microbatch, so stage 0 can
 * run through a batch's prefill without waiting on a stage that has jitter, at least one
 * arriving while one is computed, and at most PL_EXEC_MAX_HIDDEN_CREDITS (the memory bound). */
#define PL_EXEC_MIN_HIDDEN_CREDITS 2
#define PL_EXEC_MAX_HIDDEN_CREDITS 8

struct pl_exec {
    pl_exec_params_t p;
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *main_sock; /* PAIR, caller's side */
    char endpoint[64];
    pthread_t thread;
    atomic_int cancel;
    atomic_ullong generated; /* last stage: tokens sampled so far, read by the node's heartbeat */
    atomic_ullong busy_us, freed; /* compute time and finished sequences so far, likewise */
    /* last stage of a one-prompt text job: the stable part of the completion (gen_text.h),
     * copied here for the node's main thread, which streams it in heartbeats */
    pl_gen_log_t *log; /* last stage: every sampled token, for the node's PROGRESS reports */
    pthread_mutex_t text_mu;
    char *text;
    size_t text_len, text_cap;
    /* executor-thread state */
    pl_tx_sock_t *sock;
    pl_model_t *model;
    pl_be_stage_t *stage;
    pl_gen_job_t job;
    pl_ucx_t *ucx;
    pl_ucx_ep_t *next, *prev; /* prev: its probe is answered and its credits granted there */
    pl_ucx_inbox_t *inbox;    /* messages from prev land here */
    pl_act_rx_t rx;           /* and are taken from it only with the job's token */
    pl_ucx_outbox_t *outbox;  /* messages to next leave from here, computed or encoded in place */
    size_t out_max;           /* largest message this stage sends */
    bool have_probe;          /* the measured link to next, for DONE */
    pl_msg_probe_t probe;
    pl_act_limits_t limits;
    int hidden, vocab;
    int32_t *tokens;
    float *out;
    float *in_f32; /* received activations widened to f32, when the wire dtype is narrower */
    int *ints;
    pl_act_seq_t *seqs_in, *seqs_out;
    double compute_s, wait_s, t_start;
    /* where else the time went (DONE's stats.overlap) */
    double compute_cpu_s, buf_wait_s, send_s, sample_s;
    int mb_in_flight, max_mb_in_flight; /* stage 0: microbatches out, tokens not yet back */
    double mb_area, mb_t;               /* their integral over time, and its last update */
    pl_gen_sink_t *sink;                /* the last stage's sampler (skips unsampled heads) */
    double phase_s[2]; /* compute of prefill (step 0) and decode calls */
    uint64_t phase_calls[2];
    uint64_t n_msgs, n_tokens, bytes_sent;
    uint64_t n_freed; /* KV slots freed because their sequence finished */
    int kv_held;      /* KV slots counted in the metrics */
    char peer[24];    /* the next stage, as the link metric's label */
    pl_trace_t *trace; /* NULL when the job does not trace */
    /* a deployment's stage (spec.serve.on; exec_serve.h): which KV slots hold a sequence now,
     * taken by its first entry and given back when it ends (kv_held counts them); NULL for a
     * job, whose slots are all held from the start */
    bool *kv_used;
    struct pl_exec_serve *serve;
};

/* ---- exec_io.c: the data plane as the roles use it ---- */

/* One forward call from `in` into `out` (x->out, or the payload of the buffer it is sent in). */
pl_status_t pl_exec_forward(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                            const void *in, float *out);
/* Take a send buffer for a hidden message of n_seq entries; *out_p is where the forward call
 * writes (the buffer's payload when the wire carries f32 as computed, else x->out). */
pl_status_t pl_exec_take(pl_exec_t *x, uint32_t n_seq, void **buf_p, float **out_p);
/* Encode a message into `buf` (from pl_exec_take; NULL: take one here) and send it; the buffer
 * goes back to the pool in every case. */
pl_status_t pl_exec_send_in(pl_exec_t *x, void *buf, const pl_act_hdr_t *hdr,
                            const pl_act_seq_t *seqs, const void *payload);
pl_status_t pl_exec_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                         const void *payload);
/* Forward a hidden microbatch and send the result on, computed into the buffer it leaves in. */
pl_status_t pl_exec_forward_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                 const void *in);
/* Receive and validate the next data message of this job; its entries land in x->seqs_in and
 * it stays in its inbox slot (where *payload points) until pl_exec_release. */
pl_status_t pl_exec_recv(pl_exec_t *x, pl_act_hdr_t *hdr, const void **payload);
/* The same waiting at most timeout_ms (-1: until one comes or the job is canceled);
 * PL_ERR_TIMEOUT when none came. */
pl_status_t pl_exec_recv_for(pl_exec_t *x, pl_act_hdr_t *hdr, const void **payload,
                             int timeout_ms);
/* Hand the received message's slot back (its credit goes to the previous stage). */
pl_status_t pl_exec_release(pl_exec_t *x);
/* Free this stage's KV slot of every sequence a PL_ACT_TOKENS message marks finished; copy
 * those entries to done (may be NULL). Returns how many there were. */
uint32_t pl_exec_free_finished(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                               pl_act_seq_t *done);
/* Free this stage's KV slot `slot` (a deployment's: only when a sequence holds it) and count it. */
void pl_exec_kv_free(pl_exec_t *x, int slot);
/* Whether finished-sequence notices go on from this stage (stages before the one ahead of the
 * last; a deployment's: every stage before the last, which frees canceled sequences on them). */
bool pl_exec_notice_onward(const pl_exec_t *x);
/* Stage 0: microbatches sent down the ring whose tokens are not back yet, changed by delta. */
void pl_exec_mb_in_flight(pl_exec_t *x, int delta);
/* A one-prompt text job's stable completion into the copy the node streams (pl_exec_text). */
void pl_exec_stream_text(pl_exec_t *x, const pl_gen_sink_t *sink);

/* ---- the roles: run until the job's STOP ---- */

/* Stage 0 (exec_first.c): feeds prompts and the tokens that come back; also the all-in-one
 * stage of a one-stage plan, which samples with `sink`. */
pl_status_t pl_exec_run_first(pl_exec_t *x, pl_gen_sink_t *sink);
/* Every other stage (exec_rest.c): forwards activations; the last samples with `sink`. */
pl_status_t pl_exec_run_rest(pl_exec_t *x, pl_gen_sink_t *sink);

#endif

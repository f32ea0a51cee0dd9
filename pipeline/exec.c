/* Stage executor thread: load, announce the UCX address, wait for START, measure the link to the
 * next stage (link_probe.h), then run the stage's role (first, middle, last or all-in-one) until
 * the job's STOP arrives. */
#include "pipeline/exec.h"

#include "common/log.h"
#include "common/util.h"
#include "pipeline/gen.h"
#include "pipeline/link_probe.h"
#include "pipeline/trace.h"
#include "transport/act_recv.h"
#include "transport/sock.h"
#include "transport/ucx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Longest wait for the coordinator's release after DONE. */
#define S_LINGER_S 30.0
/* Receive slots (credits) of a link carrying activations: one per microbatch, so stage 0 can
 * run through a batch's prefill without waiting on a stage that has jitter, at least one
 * arriving while one is computed, and at most S_MAX_HIDDEN_CREDITS (the memory bound). */
#define S_MIN_HIDDEN_CREDITS 2
#define S_MAX_HIDDEN_CREDITS 8

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
};

/* READY, DONE or FAIL to the node's main thread; job and stage are filled in here. */
static pl_status_t s_send_main(pl_exec_t *x, pl_msg_t *m)
{
    if (m->type == PL_MSG_READY)
        m->ready.job = x->p.job_id, m->ready.stage = x->p.stage;
    else if (m->type == PL_MSG_DONE)
        m->done.job = x->p.job_id, m->done.stage = x->p.stage;
    else
        m->fail.job = x->p.job_id, m->fail.stage = x->p.stage;
    pl_status_t st = pl_tx_send(x->sock, NULL, m);
    if (st)
        pl_log_error("job %u stage %d: cannot report %s: %s", x->p.job_id, x->p.stage,
                     pl_msg_name(m->type), pl_error_msg());
    return st;
}

static pl_status_t s_load(pl_exec_t *x)
{
    pl_status_t st;
    const pl_model_config_t *cfg;
    pl_be_stage_params_t sp;

    if ((st = pl_model_open(x->p.spec.model, &x->model)))
        return st;
    cfg = pl_model_config(x->model);
    if ((st = pl_gen_job_from_spec(&x->p.spec, x->p.microbatches, cfg, &x->job)))
        return st;
    x->hidden = cfg->hidden;
    x->vocab = cfg->vocab;
    sp = (pl_be_stage_params_t){.first_layer = x->p.first_layer, .last_layer = x->p.last_layer,
                                .has_embed = x->p.stage == 0,
                                .has_head = x->p.stage == x->p.n_stages - 1,
                                .max_seqs = x->job.n_seqs, .max_ctx = x->p.max_ctx,
                                .max_tokens = x->p.max_tokens};
    if (sp.max_ctx < pl_gen_job_max_ctx(&x->job) || sp.max_tokens < pl_gen_job_max_tokens(&x->job))
        return pl_error(PL_ERR_INVALID, "assignment: max_ctx %d / max_tokens %d smaller than the "
                        "job needs", sp.max_ctx, sp.max_tokens);
    if ((st = pl_be_stage_load(x->p.dev, x->model, &sp, &x->stage)))
        return st;
    x->kv_held = x->job.n_seqs;
    pl_metrics_add(x->p.metrics.kv_slots, NULL, x->kv_held);
    snprintf(x->peer, sizeof(x->peer), "stage %d", (x->p.stage + 1) % x->p.n_stages);
    x->limits = (pl_act_limits_t){.max_seq = (uint32_t)x->job.n_seqs,
                                  .max_tokens = (uint32_t)x->p.max_tokens,
                                  .dim = (uint32_t)x->hidden, .max_pos = (uint32_t)x->p.max_ctx,
                                  .dtype = (uint32_t)x->job.wire_dtype};
    size_t nt = (size_t)x->p.max_tokens, ns = (size_t)x->job.n_seqs;
    x->tokens = malloc(nt * sizeof(int32_t));
    x->out = malloc(PL_MAX(nt * (size_t)x->hidden, ns * (size_t)x->vocab) * sizeof(float));
    if (x->job.wire_dtype != PL_ACT_F32 && x->p.stage > 0 &&
        !(x->in_f32 = malloc(nt * (size_t)x->hidden * sizeof(float))))
        return pl_error(PL_ERR_NOMEM, "stage buffers: out of memory");
    x->ints = malloc(3 * ns * sizeof(int));
    x->seqs_in = malloc(ns * sizeof(pl_act_seq_t));
    x->seqs_out = malloc(ns * sizeof(pl_act_seq_t));
    if (!x->tokens || !x->out || !x->ints || !x->seqs_in || !x->seqs_out)
        return pl_error(PL_ERR_NOMEM, "stage buffers: out of memory");
    return PL_OK;
}

/* Wait for START from the main thread; returns the next and previous stages' addresses
 * (caller frees; NULL when absent). */
static pl_status_t s_wait_start(pl_exec_t *x, char **next_p, char **prev_p)
{
    while (!atomic_load(&x->cancel)) {
        pl_msg_t msg;
        pl_status_t st = pl_tx_recv(x->sock, 100, NULL, NULL, &msg);
        if (st == PL_ERR_BUSY)
            continue;
        if (st)
            return st;
        if (msg.type != PL_MSG_START) {
            pl_msg_clear(&msg);
            continue;
        }
        *next_p = msg.start.next;
        *prev_p = msg.start.prev;
        x->limits.token = msg.start.token; /* what this assignment's messages carry */
        msg.start.next = msg.start.prev = NULL;
        pl_msg_clear(&msg);
        return PL_OK;
    }
    return pl_error(PL_ERR_CANCELED, "canceled before start");
}

static double s_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Between layers of a stage without a progress thread: the data plane moves there. */
static void s_between_layers(void *arg)
{
    pl_ucx_progress(arg);
}

/* Stage 0: microbatches sent down the ring whose tokens are not back yet, changed by delta. */
static void s_mb_in_flight(pl_exec_t *x, int delta)
{
    double t = pl_now();
    if (x->mb_t > 0)
        x->mb_area += x->mb_in_flight * (t - x->mb_t);
    x->mb_t = t;
    x->mb_in_flight += delta;
    x->max_mb_in_flight = PL_MAX(x->max_mb_in_flight, x->mb_in_flight);
}

/* One forward call from `in` into `out` (x->out, or the payload of the buffer it is sent in). */
static pl_status_t s_forward(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                             const void *in, float *out)
{
    pl_be_batch_t batch;
    double t0 = pl_now(), c0 = s_thread_cpu();
    pl_gen_batch(hdr, seqs, x->ints, &batch);
    batch.no_logits = x->sink && !pl_gen_sink_wants_logits(x->sink, hdr, seqs);
    if (x->ucx && !pl_ucx_has_progress(x->ucx)) {
        batch.between_layers = s_between_layers;
        batch.between_arg = x->ucx;
    }
    pl_status_t st = pl_be_stage_forward(x->stage, &batch, in, out);
    double dt = pl_now() - t0;
    x->compute_cpu_s += s_thread_cpu() - c0;
    x->compute_s += dt;
    atomic_store(&x->busy_us, (unsigned long long)(x->compute_s * 1e6));
    x->phase_s[hdr->step > 0] += dt;
    x->phase_calls[hdr->step > 0]++;
    x->n_tokens += hdr->n_tokens;
    pl_metrics_observe(x->p.metrics.compute_s, NULL, dt);
    pl_trace_add(x->trace, PL_TRACE_COMPUTE, hdr, t0, t0 + dt);
    pl_metrics_add(x->p.metrics.microbatches, NULL, 1);
    return st;
}

/* Take a send buffer for a hidden message of n_seq entries; *out_p is where the forward call
 * writes: straight into the buffer's payload when the wire carries f32 as computed (no copy),
 * else x->out (narrowed to the wire dtype by the encoder). */
static pl_status_t s_take(pl_exec_t *x, uint32_t n_seq, void **buf_p, float **out_p)
{
    size_t cap;
    double t0 = pl_now();
    pl_status_t st =
        pl_ucx_outbox_get(x->outbox, buf_p, &cap, -1, (const volatile int *)&x->cancel);
    x->buf_wait_s += pl_now() - t0;
    if (st)
        return st;
    *out_p = x->out;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (x->job.wire_dtype == PL_ACT_F32)
        *out_p = (float *)((unsigned char *)*buf_p + pl_act_payload_offset(n_seq));
#endif
    return PL_OK;
}

/* Encode a message into `buf` (taken by s_take; NULL: take one here) and send it; the buffer
 * goes back to the pool in every case. */
static pl_status_t s_send_in(pl_exec_t *x, void *buf, const pl_act_hdr_t *hdr,
                             const pl_act_seq_t *seqs, const void *payload)
{
    size_t len, cap = x->out_max;
    double t0 = pl_now();
    float *unused;
    pl_act_hdr_t h = *hdr;
    pl_status_t st;
    if (h.kind == PL_ACT_HIDDEN) {
        h.dim = (uint32_t)x->hidden;
        h.dtype = (uint32_t)x->job.wire_dtype;
    }
    h.token = x->limits.token;
    if (!buf && (st = s_take(x, h.n_seq, &buf, &unused)))
        return st;
    if ((st = pl_act_encode_into(&h, seqs, payload, buf, cap, &len))) {
        pl_ucx_outbox_unget(x->outbox, buf);
        return st;
    }
    x->n_msgs++;
    x->bytes_sent += len;
    pl_metrics_add(x->p.metrics.link_bytes, x->peer, (double)len);
    double t1 = pl_now(); /* the credit's wait inside is told apart in s_stats */
    st = pl_ucx_outbox_send(x->outbox,
                            pl_act_tag(hdr->job, (pl_act_kind_t)hdr->kind, hdr->mb, hdr->step), buf,
                            len, -1, (const volatile int *)&x->cancel);
    double t2 = pl_now();
    x->send_s += t2 - t1;
    pl_trace_add(x->trace, PL_TRACE_SEND, hdr, t0, t2);
    return st;
}

static pl_status_t s_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                          const void *payload)
{
    return s_send_in(x, NULL, hdr, seqs, payload);
}

/* Forward a hidden microbatch and send the result on, computed into the buffer it leaves in. */
static pl_status_t s_forward_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                  const void *in)
{
    void *buf;
    float *out;
    pl_status_t st = s_take(x, hdr->n_seq, &buf, &out);
    if (st)
        return st;
    if ((st = s_forward(x, hdr, seqs, in, out))) {
        pl_ucx_outbox_unget(x->outbox, buf);
        return st;
    }
    return s_send_in(x, buf, hdr, seqs, out);
}

/* Receive and validate the next data message of this job (act_recv.h: others are dropped on
 * the way). It stays in its inbox slot (where *payload points) until s_release. */
static pl_status_t s_recv(pl_exec_t *x, pl_act_hdr_t *hdr, const void **payload)
{
    double t0 = pl_now();
    pl_status_t st =
        pl_act_recv(&x->rx, hdr, x->seqs_in, payload, -1, (const volatile int *)&x->cancel);
    double t1 = pl_now();
    x->wait_s += t1 - t0;
    if (!st)
        pl_trace_add(x->trace, PL_TRACE_RECV, hdr, t0, t1);
    return st;
}

/* Hand the received message's slot back (its credit goes to the previous stage). */
static pl_status_t s_release(pl_exec_t *x)
{
    return pl_ucx_inbox_release(x->inbox);
}

/* Free this stage's KV slot of every sequence a PL_ACT_TOKENS message marks finished; copy
 * those entries to done (may be NULL). Returns how many there were. The last stage frees when it
 * samples, stage 0 when the tokens come back, the stages between when stage 0 passes the
 * finished entries on (a PL_ACT_TOKENS message down the pipeline, stopping before the last). */
static uint32_t s_free_finished(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                pl_act_seq_t *done)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        if (!(seqs[i].flags & PL_ACT_FINISHED))
            continue;
        pl_be_stage_free_seq(x->stage, (int)seqs[i].seq);
        x->n_freed++;
        atomic_store(&x->freed, x->n_freed);
        if (x->kv_held > 0) {
            x->kv_held--;
            pl_metrics_add(x->p.metrics.kv_slots, NULL, -1);
        }
        if (done)
            done[n] = seqs[i];
        n++;
    }
    return n;
}

/* Whether finished-sequence notices go on from this stage: only stages before the one ahead of
 * the last (the last frees by itself). */
static bool s_notice_onward(const pl_exec_t *x)
{
    return x->p.stage + 2 < x->p.n_stages;
}

/* A one-prompt text job's completion as far as no later token can change it, into the copy
 * the node streams (pl_exec_text). Out of memory only stops the stream: results still carry the
 * whole text. */
static void s_stream_text(pl_exec_t *x, const pl_gen_sink_t *sink)
{
    const pl_gen_text_t *t = pl_gen_sink_text(sink);
    if (!t || x->job.n_seqs != 1)
        return;
    size_t len, stable = pl_gen_text_stable(t, 0);
    const char *s = pl_gen_text_get(t, 0, &len);
    pthread_mutex_lock(&x->text_mu);
    if (stable > x->text_len && stable > x->text_cap) {
        size_t cap = x->text_cap ? x->text_cap : 256;
        while (cap < stable)
            cap *= 2;
        char *b = realloc(x->text, cap);
        if (b) {
            x->text = b;
            x->text_cap = cap;
        }
    }
    if (stable > x->text_len && stable <= x->text_cap) {
        memcpy(x->text + x->text_len, s + x->text_len, stable - x->text_len);
        x->text_len = stable;
    }
    pthread_mutex_unlock(&x->text_mu);
}

/* Sampled microbatches of an all-in-one stage wait here instead of on the network. */
typedef struct {
    pl_act_hdr_t *hdr;
    pl_act_seq_t *seqs; /* [cap][n_seqs] */
    int cap, head, count, stride;
} s_fifo_t;

static pl_status_t s_emit(pl_exec_t *x, pl_gen_sink_t *sink, s_fifo_t *fifo, pl_act_hdr_t *hdr,
                          const pl_act_seq_t *seqs)
{
    if (!fifo)
        return s_forward_send(x, hdr, seqs, x->tokens);
    pl_status_t st = s_forward(x, hdr, seqs, x->tokens, x->out);
    if (st)
        return st;
    int at = (fifo->head + fifo->count) % fifo->cap;
    double t0 = pl_now();
    st = pl_gen_sink_sample(sink, hdr, seqs, x->out, &fifo->hdr[at], x->seqs_out);
    x->sample_s += pl_now() - t0;
    if (st)
        return st;
    atomic_store(&x->generated, pl_gen_sink_generated(sink));
    s_stream_text(x, sink);
    if (fifo->hdr[at].n_seq == 0)
        return PL_OK; /* an earlier prefill chunk: nothing sampled */
    s_free_finished(x, &fifo->hdr[at], x->seqs_out, NULL);
    memcpy(fifo->seqs + (size_t)at * fifo->stride, x->seqs_out, hdr->n_seq * sizeof(pl_act_seq_t));
    fifo->count++;
    return PL_OK;
}

static pl_status_t s_run_first(pl_exec_t *x, pl_gen_sink_t *sink)
{
    pl_gen_feed_t *feed = NULL;
    pl_act_hdr_t hdr, tok;
    pl_act_seq_t *dec = NULL, *fin = NULL;
    s_fifo_t fifo = {0}, *fq = NULL;
    pl_status_t st;

    if ((st = pl_gen_feed_create(&x->job, &feed)))
        return st;
    dec = malloc((size_t)x->job.n_seqs * sizeof(*dec));
    fin = malloc((size_t)x->job.n_seqs * sizeof(*fin));
    if (x->p.n_stages == 1) {
        fifo.cap = x->job.microbatches;
        fifo.stride = x->job.n_seqs;
        fifo.hdr = calloc((size_t)fifo.cap, sizeof(*fifo.hdr));
        fifo.seqs = calloc((size_t)fifo.cap * (size_t)fifo.stride, sizeof(*fifo.seqs));
        fq = &fifo;
    }
    if (!dec || !fin || (fq && (!fifo.hdr || !fifo.seqs))) {
        st = pl_error(PL_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int mb = 0; mb < x->job.microbatches && !st; mb++) {
        int chunks = pl_gen_feed_prefill_chunks(feed, mb);
        for (int c = 0; c < chunks && !st; c++) {
            pl_gen_feed_prefill(feed, x->p.job_id, mb, c, &hdr, x->seqs_in, x->tokens);
            st = s_emit(x, sink, fq, &hdr, x->seqs_in);
            if (!st && !fq && c == chunks - 1)
                s_mb_in_flight(x, 1);
        }
    }
    while (!st && pl_gen_feed_active(feed) > 0) {
        const void *payload;
        bool taken = false;
        const pl_act_seq_t *in = x->seqs_in;
        if (atomic_load(&x->cancel)) {
            st = pl_error(PL_ERR_CANCELED, "canceled");
            break;
        }
        if (fq) {
            tok = fifo.hdr[fifo.head];
            in = fifo.seqs + (size_t)fifo.head * fifo.stride;
            fifo.head = (fifo.head + 1) % fifo.cap;
            fifo.count--;
        } else if ((st = s_recv(x, &tok, &payload))) {
            break;
        } else {
            taken = true;
            s_mb_in_flight(x, -1);
        }
        if (tok.kind != PL_ACT_TOKENS) {
            st = pl_error(PL_ERR_PROTOCOL, "stage 0 expected tokens, got kind %u", tok.kind);
        } else {
            st = pl_gen_feed_decode(feed, &tok, in, &hdr, dec, x->tokens);
            uint32_t n_fin = fq ? 0 : s_free_finished(x, &tok, in, fin);
            if (!st && n_fin > 0 && s_notice_onward(x)) {
                pl_act_hdr_t notice = {.kind = PL_ACT_TOKENS, .job = x->p.job_id, .mb = tok.mb,
                                       .step = tok.step, .n_seq = n_fin, .n_tokens = n_fin};
                st = s_send(x, &notice, fin, NULL);
            }
        }
        if (taken) { /* the entries were copied out: the slot can take the next message */
            pl_status_t st2 = s_release(x);
            st = st ? st : st2;
        }
        if (!st && hdr.n_seq > 0) {
            st = s_emit(x, sink, fq, &hdr, dec);
            if (!st && !fq)
                s_mb_in_flight(x, 1);
        }
    }
    if (!st && !fq) {
        hdr = (pl_act_hdr_t){.kind = PL_ACT_STOP, .job = x->p.job_id};
        st = s_send(x, &hdr, NULL, NULL);
    }
out:
    free(fifo.hdr);
    free(fifo.seqs);
    free(dec);
    free(fin);
    pl_gen_feed_destroy(&feed);
    return st;
}

static pl_status_t s_run_rest(pl_exec_t *x, pl_gen_sink_t *sink)
{
    bool last = x->p.stage == x->p.n_stages - 1;

    pl_log_set_job(x->p.job_id); /* this thread's lines carry the job (JSON "job") */
    pl_status_t st = PL_OK;
    while (!st) {
        pl_act_hdr_t hdr, out;
        const void *payload;
        if ((st = s_recv(x, &hdr, &payload)))
            break;
        if (hdr.kind == PL_ACT_STOP) {
            if (!(st = s_release(x)) && !last)
                st = s_send(x, &hdr, NULL, NULL);
            break;
        }
        if (hdr.kind == PL_ACT_TOKENS && !last) { /* finished sequences: free, pass on */
            s_free_finished(x, &hdr, x->seqs_in, NULL);
            pl_status_t st2 = s_release(x); /* the entries are in seqs_in */
            st = s_notice_onward(x) ? s_send(x, &hdr, x->seqs_in, NULL) : PL_OK;
            st = st ? st : st2;
            continue;
        }
        if (hdr.kind != PL_ACT_HIDDEN) {
            s_release(x);
            st = pl_error(PL_ERR_PROTOCOL, "stage %d expected activations, got kind %u",
                          x->p.stage, hdr.kind);
            break;
        }
        /* computed straight from the slot it arrived in (f32) into the buffer it leaves in
         * (x->out on the last stage); the slot goes back before the send waits for a credit */
        const float *in;
        void *buf = NULL;
        float *dst = x->out;
        pl_act_payload_f32(&hdr, payload, x->in_f32, &in);
        if (!last && (st = s_take(x, hdr.n_seq, &buf, &dst))) {
            s_release(x);
            break;
        }
        st = s_forward(x, &hdr, x->seqs_in, in, dst);
        pl_status_t st2 = s_release(x);
        if ((st = st ? st : st2)) {
            if (buf)
                pl_ucx_outbox_unget(x->outbox, buf);
            break;
        }
        if (!last) {
            st = s_send_in(x, buf, &hdr, x->seqs_in, dst);
            continue;
        }
        double t0 = pl_now();
        st = pl_gen_sink_sample(sink, &hdr, x->seqs_in, x->out, &out, x->seqs_out);
        x->sample_s += pl_now() - t0;
        atomic_store(&x->generated, pl_gen_sink_generated(sink));
        s_stream_text(x, sink);
        if (!st && out.n_seq > 0) { /* none after an earlier prefill chunk */
            s_free_finished(x, &out, x->seqs_out, NULL);
            st = s_send(x, &out, x->seqs_out, NULL);
        }
    }
    return st;
}

static void s_stats(pl_exec_t *x, pl_gen_sink_t *sink, pl_msg_stats_t *s)
{
    double wall = pl_now() - x->t_start;
    *s = (pl_msg_stats_t){.wall_s = wall, .compute_s = x->compute_s, .wait_s = x->wait_s,
                          .messages = (int64_t)x->n_msgs, .tokens = (int64_t)x->n_tokens,
                          .prefill_compute_s = x->phase_s[0],
                          .prefill_calls = (int64_t)x->phase_calls[0],
                          .decode_compute_s = x->phase_s[1],
                          .decode_calls = (int64_t)x->phase_calls[1],
                          .freed_seqs = (int64_t)x->n_freed,
                          .bytes_sent = (int64_t)x->bytes_sent,
                          .has_probe = x->have_probe, .probe = x->probe};
    if (sink) {
        double pf = pl_gen_sink_prefill_done_at(sink);
        s->has_sink = true;
        s->generated = (int64_t)pl_gen_sink_generated(sink);
        s->prefill_s = pf > 0 ? pf - x->t_start : wall;
    }
    s->has_overlap = true;
    s->compute_cpu_s = x->compute_cpu_s;
    s->buf_wait_s = x->buf_wait_s;
    s->sample_s = x->sample_s;
    s->send_s = x->send_s;
    s->max_mb_in_flight = x->max_mb_in_flight;
    if (x->mb_t > 0) {
        s_mb_in_flight(x, 0);
        s->avg_mb_in_flight = wall > 0 ? x->mb_area / wall : 0;
    }
    snprintf(s->wire_dtype, sizeof(s->wire_dtype), "%s", pl_act_dtype_name(x->job.wire_dtype));
    if (x->next)
        snprintf(s->link, sizeof(s->link), "%s", pl_ucx_ep_transport(x->next));
    if (x->next && x->inbox) {
        /* The data plane's memory: this stage's slots, and its send pool (a buffer per credit
         * the next stage grants, and one to compute into). */
        pl_ucx_credit_stats_t cs;
        pl_ucx_outbox_stats_t os;
        pl_ucx_ep_credit_stats(x->next, &cs);
        pl_ucx_outbox_stats(x->outbox, &os);
        s->credit_waits = cs.waits;
        s->credit_wait_s = cs.wait_s;
        s->send_s = PL_MAX(0.0, x->send_s - cs.wait_s);
        size_t in_bytes = pl_ucx_inbox_bytes(x->inbox);
        s->has_data_plane = true;
        s->data_plane = (pl_msg_data_plane_t){
            .inbox_slots = pl_ucx_inbox_slots(x->inbox),
            .inbox_bytes = (int64_t)in_bytes,
            .send_credits = cs.granted,
            .max_in_flight = cs.max_in_flight,
            .bound_bytes = (int64_t)(in_bytes + (size_t)os.bufs * os.buf_bytes),
            .dropped = (int64_t)pl_act_rx_dropped(&x->rx),
            .progress_thread = pl_ucx_has_progress(x->ucx)};
    }
}

/* Credits both ways and the progress thread: messages from the previous stage land in this
 * stage's inbox, whose slots are granted to it; sends to the next stage wait for its grants.
 * Stage 0's inbox takes the sampled tokens, one message per microbatch at most, so it has a
 * slot for each: the last stage then never waits, and the ring cannot deadlock. */
static pl_status_t s_data_plane(pl_exec_t *x)
{
    pl_act_hdr_t hidden = {.kind = PL_ACT_HIDDEN, .n_seq = x->limits.max_seq,
                           .n_tokens = x->limits.max_tokens, .dim = x->limits.dim,
                           .dtype = x->limits.dtype};
    pl_act_hdr_t tokens = {.kind = PL_ACT_TOKENS, .n_seq = x->limits.max_seq,
                           .n_tokens = x->limits.max_seq};
    bool first = x->p.stage == 0, last = x->p.stage == x->p.n_stages - 1;
    const char *pt = getenv("PL_UCX_PROGRESS_THREAD"); /* "0": progress between layers */
    int hidden_credits =
        PL_MAX(S_MIN_HIDDEN_CREDITS, PL_MIN(x->job.microbatches, S_MAX_HIDDEN_CREDITS));
    pl_status_t st;

    x->out_max = pl_act_size(last ? &tokens : &hidden);
    pl_ucx_ep_use_credits(x->next, pl_act_tag_credit(x->p.job_id));
    if ((st = pl_ucx_inbox_create(x->ucx, x->prev, pl_act_tag_job(x->p.job_id),
                                  PL_ACT_TAG_DATA_MASK, pl_act_tag_credit(x->p.job_id),
                                  pl_act_size(first ? &tokens : &hidden),
                                  first ? x->job.microbatches : hidden_credits, &x->inbox)))
        return st;
    x->rx = (pl_act_rx_t){.inbox = x->inbox, .job = x->p.job_id, .limits = &x->limits,
                          .dropped = x->p.metrics.act_dropped};
    /* One send buffer per credit the next stage's inbox grants (the rule above), and one to
     * compute into while those are in flight. */
    if ((st = pl_ucx_outbox_create(x->ucx, x->next, x->out_max,
                                   (last ? x->job.microbatches : hidden_credits) + 1, &x->outbox)))
        return st;
    if (!(pt && strcmp(pt, "0") == 0) && (st = pl_ucx_progress_start(x->ucx)))
        return st;
    return PL_OK;
}

/* Measure the link to the next stage and answer the previous stage's probe (link_probe.h). */
static pl_status_t s_probe(pl_exec_t *x, const char *next, const char *prev)
{
    pl_probe_result_t r;
    pl_status_t st;
    if (strcmp(prev, next) == 0)
        x->prev = x->next; /* two stages: one endpoint serves both roles */
    else if ((st = pl_ucx_connect(x->ucx, prev, &x->prev)))
        return st;
    if ((st = pl_probe_run(x->ucx, x->next, x->prev, x->p.job_id,
                           (const volatile int *)&x->cancel, &r)))
        return st;
    if (!r.ok) {
        pl_log_warn("job %u stage %d: link probe got no answer in %.1f s", x->p.job_id,
                    x->p.stage, r.took_s);
        return PL_OK;
    }
    x->probe = (pl_msg_probe_t){.to_stage = (x->p.stage + 1) % x->p.n_stages, .gbps = r.gbps,
                                .latency_s = r.latency_s, .took_s = r.took_s};
    snprintf(x->probe.transport, sizeof(x->probe.transport), "%s", pl_ucx_ep_transport(x->next));
    x->have_probe = true;
    pl_log_debug("job %u stage %d: link to the next stage %.2f GB/s, %.1f us (%s), probed in "
                 "%.1f ms", x->p.job_id, x->p.stage, r.gbps, r.latency_s * 1e6,
                 pl_ucx_ep_transport(x->next), r.took_s * 1e3);
    return PL_OK;
}

static void *s_thread(void *arg)
{
    pl_exec_t *x = arg;
    pl_gen_sink_t *sink = NULL;
    char *addr = NULL, *next = NULL, *prev = NULL;
    pl_status_t st;
    bool last = x->p.stage == x->p.n_stages - 1;

    pl_msg_t m;
    if ((st = pl_tx_sock_new(x->ctx, PL_TX_PAIR, &x->sock)) ||
        (st = pl_tx_sock_connect(x->sock, x->endpoint))) {
        pl_log_error("job %u stage %d: inproc socket: %s", x->p.job_id, x->p.stage,
                     pl_error_msg());
        pl_tx_sock_destroy(&x->sock);
        return NULL;
    }
    if ((st = s_load(x)))
        goto fail;
    if (x->p.n_stages > 1) {
        if ((st = pl_ucx_create(&x->ucx)) || (st = pl_ucx_address(x->ucx, &addr)))
            goto fail;
    }
    pl_msg_init(&m, PL_MSG_READY);
    m.ready.ucx_addr = addr; /* borrowed */
    s_send_main(x, &m);
    if ((st = s_wait_start(x, &next, &prev)))
        goto fail;
    if (x->p.n_stages > 1) {
        if (!next) {
            st = pl_error(PL_ERR_PROTOCOL, "START without the next stage's address");
            goto fail;
        }
        if (!prev) {
            st = pl_error(PL_ERR_PROTOCOL, "START without the previous stage's address");
            goto fail;
        }
        if ((st = pl_ucx_connect(x->ucx, next, &x->next)) || (st = s_probe(x, next, prev)) ||
            (st = s_data_plane(x)))
            goto fail;
    }
    if (last && (st = pl_gen_sink_create(&x->job, x->vocab, &sink)))
        goto fail;
    x->sink = sink;
    x->t_start = pl_now();
    pl_log_info("job %u stage %d: running layers %d-%d%s", x->p.job_id, x->p.stage,
                x->p.first_layer, x->p.last_layer,
                x->next ? "" : " (single stage)");
    st = x->p.stage == 0 ? s_run_first(x, sink) : s_run_rest(x, sink);
    if (!st && x->ucx)
        st = pl_ucx_flush(x->ucx, 10000);
    if (st)
        goto fail;
    pl_msg_init(&m, PL_MSG_DONE);
    s_stats(x, sink, &m.done.stats);
    if (sink && (st = pl_gen_sink_collect(sink, &m.done.results, &m.done.n_results)))
        goto fail;
    if (x->trace && pl_trace_export(x->trace, &m.done.trace)) /* DONE goes without it */
        pl_log_warn("job %u stage %d: trace: %s", x->p.job_id, x->p.stage, pl_error_msg());
    s_send_main(x, &m);
    pl_msg_clear(&m);
    /* Keep the worker and its endpoints until the whole job is over: a peer that still waits
     * for STOP would otherwise see this endpoint close and fail (TCP reports it at once). */
    for (double t0 = pl_now(); x->ucx && !atomic_load(&x->cancel) && pl_now() - t0 < S_LINGER_S;) {
        pl_ucx_progress(x->ucx);
        usleep(10 * 1000);
    }
    goto out;
fail:
    if (st != PL_ERR_CANCELED)
        pl_log_error("job %u stage %d: %s", x->p.job_id, x->p.stage,
                     pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    pl_msg_init(&m, PL_MSG_FAIL);
    m.fail.code = st;
    snprintf(m.fail.error, sizeof(m.fail.error), "%s",
             pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    s_send_main(x, &m);
out:
    free(addr);
    free(next);
    free(prev);
    x->sink = NULL;
    pl_gen_sink_destroy(&sink);
    if (x->ucx && x->next)
        pl_ucx_flush(x->ucx, 1000);
    pl_ucx_outbox_destroy(&x->outbox);
    pl_ucx_inbox_destroy(&x->inbox);
    x->next = x->prev = NULL; /* closed with the worker */
    pl_ucx_destroy(&x->ucx);
    pl_metrics_add(x->p.metrics.kv_slots, NULL, -x->kv_held);
    x->kv_held = 0;
    pl_be_stage_unload(&x->stage);
    pl_model_destroy(&x->model);
    pl_gen_job_clear(&x->job);
    free(x->tokens);
    free(x->out);
    free(x->in_f32);
    free(x->ints);
    free(x->seqs_in);
    free(x->seqs_out);
    pl_tx_sock_destroy(&x->sock);
    return NULL;
}

pl_status_t pl_exec_start(pl_tx_ctx_t *ctx, pl_exec_params_t *params, pl_exec_t **exec_p)
{
    static atomic_uint s_counter;
    pl_exec_t *x = calloc(1, sizeof(*x));
    pl_status_t st;
    if (!x) {
        pl_job_spec_clear(&params->spec);
        return pl_error(PL_ERR_NOMEM, "executor: out of memory");
    }
    x->p = *params;
    pl_job_spec_init(&params->spec); /* moved into the exec */
    pthread_mutex_init(&x->text_mu, NULL);
    /* the ring lives as long as the exec: the node's thread may read it while the stage runs */
    if (x->p.spec.gen.trace && (st = pl_trace_new(PL_TRACE_MAX_EVENTS, &x->trace)))
        goto err;
    x->ctx = ctx;
    snprintf(x->endpoint, sizeof(x->endpoint), "inproc://exec-%u-%u", x->p.job_id,
             atomic_fetch_add(&s_counter, 1));
    if ((st = pl_tx_sock_new(ctx, PL_TX_PAIR, &x->main_sock)) ||
        (st = pl_tx_sock_bind(x->main_sock, x->endpoint)))
        goto err;
    if (pthread_create(&x->thread, NULL, s_thread, x) != 0) {
        st = pl_error(PL_ERR_NOMEM, "cannot start executor thread");
        goto err;
    }
    *exec_p = x;
    return PL_OK;
err:
    pl_tx_sock_destroy(&x->main_sock);
    pl_trace_destroy(&x->trace);
    pl_job_spec_clear(&x->p.spec);
    pthread_mutex_destroy(&x->text_mu);
    free(x);
    return st;
}

pl_tx_sock_t *pl_exec_socket(pl_exec_t *x)
{
    return x->main_sock;
}

uint32_t pl_exec_job(const pl_exec_t *x)
{
    return x->p.job_id;
}

uint64_t pl_exec_generated(pl_exec_t *x)
{
    return atomic_load(&x->generated);
}

double pl_exec_busy_s(pl_exec_t *x)
{
    return (double)atomic_load(&x->busy_us) * 1e-6;
}

uint64_t pl_exec_seqs_done(pl_exec_t *x)
{
    return atomic_load(&x->freed);
}

size_t pl_exec_text(pl_exec_t *x, size_t from, char *buf, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&x->text_mu);
    if (from < x->text_len) {
        n = PL_MIN(cap, x->text_len - from);
        if (n < x->text_len - from) /* cut before a character that does not fit */
            while (n > 0 && ((unsigned char)x->text[from + n] & 0xC0) == 0x80)
                n--;
        /* the control plane's JSON refuses NUL: the stream stops before one (the results
         * still carry the text) */
        const char *nul = memchr(x->text + from, '\0', n);
        if (nul)
            n = (size_t)(nul - (x->text + from));
        memcpy(buf, x->text + from, n);
    }
    pthread_mutex_unlock(&x->text_mu);
    return n;
}

pl_status_t pl_exec_trace(pl_exec_t *x, pl_msg_trace_t **out_p)
{
    if (!x->trace)
        return pl_error(PL_ERR_NOT_FOUND, "job %u stage %d does not trace", x->p.job_id,
                        x->p.stage);
    return pl_trace_export(x->trace, out_p);
}

int pl_exec_stage(const pl_exec_t *x)
{
    return x->p.stage;
}

void pl_exec_cancel(pl_exec_t *x)
{
    atomic_store(&x->cancel, 1);
}

void pl_exec_destroy(pl_exec_t **exec_p)
{
    pl_exec_t *x = *exec_p;
    if (!x)
        return;
    pl_exec_cancel(x);
    pthread_join(x->thread, NULL);
    pl_tx_sock_destroy(&x->main_sock);
    pl_job_spec_clear(&x->p.spec);
    pthread_mutex_destroy(&x->text_mu);
    pl_trace_destroy(&x->trace);
    free(x->text);
    free(x);
    *exec_p = NULL;
}

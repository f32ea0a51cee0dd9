/* The stage executor's data plane as its roles use it: forward calls, send buffers, sends and
 * receives with their credits, finished-sequence notices and the streamed text. */
#include "pipeline/exec_int.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

void pl_exec_mb_in_flight(pl_exec_t *x, int delta)
{
    double t = pl_now();
    if (x->mb_t > 0)
        x->mb_area += x->mb_in_flight * (t - x->mb_t);
    x->mb_t = t;
    x->mb_in_flight += delta;
    x->max_mb_in_flight = PL_MAX(x->max_mb_in_flight, x->mb_in_flight);
}

/* One forward call from `in` into `out` (x->out, or the payload of the buffer it is sent in). */
pl_status_t pl_exec_forward(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                             const void *in, float *out)
{
    pl_be_batch_t batch;
    double t0 = pl_now(), c0 = s_thread_cpu();
    pl_gen_batch(hdr, seqs, x->ints, &batch);
    for (uint32_t i = 0; x->kv_used && i < hdr->n_seq; i++) /* a deployment's new sequences */
        if (seqs[i].pos0 == 0 && !x->kv_used[seqs[i].seq]) {
            x->kv_used[seqs[i].seq] = true;
            x->kv_held++;
            pl_metrics_add(x->p.metrics.kv_slots, NULL, 1);
        }
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
pl_status_t pl_exec_take(pl_exec_t *x, uint32_t n_seq, void **buf_p, float **out_p)
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

/* Encode a message into `buf` (taken by pl_exec_take; NULL: take one here) and send it; the buffer
 * goes back to the pool in every case. */
pl_status_t pl_exec_send_in(pl_exec_t *x, void *buf, const pl_act_hdr_t *hdr,
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
    if (!buf && (st = pl_exec_take(x, h.n_seq, &buf, &unused)))
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

pl_status_t pl_exec_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                          const void *payload)
{
    return pl_exec_send_in(x, NULL, hdr, seqs, payload);
}

/* Forward a hidden microbatch and send the result on, computed into the buffer it leaves in. */
pl_status_t pl_exec_forward_send(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                  const void *in)
{
    void *buf;
    float *out;
    pl_status_t st = pl_exec_take(x, hdr->n_seq, &buf, &out);
    if (st)
        return st;
    if ((st = pl_exec_forward(x, hdr, seqs, in, out))) {
        pl_ucx_outbox_unget(x->outbox, buf);
        return st;
    }
    return pl_exec_send_in(x, buf, hdr, seqs, out);
}

/* Receive and validate the next data message of this job (act_recv.h: others are dropped on
 * the way). It stays in its inbox slot (where *payload points) until pl_exec_release. */
pl_status_t pl_exec_recv(pl_exec_t *x, pl_act_hdr_t *hdr, const void **payload)
{
    return pl_exec_recv_for(x, hdr, payload, -1);
}

pl_status_t pl_exec_recv_for(pl_exec_t *x, pl_act_hdr_t *hdr, const void **payload,
                             int timeout_ms)
{
    double t0 = pl_now();
    pl_status_t st = pl_act_recv(&x->rx, hdr, x->seqs_in, payload, timeout_ms,
                                 (const volatile int *)&x->cancel);
    double t1 = pl_now();
    x->wait_s += t1 - t0;
    if (!st)
        pl_trace_add(x->trace, PL_TRACE_RECV, hdr, t0, t1);
    return st;
}

/* Hand the received message's slot back (its credit goes to the previous stage). */
pl_status_t pl_exec_release(pl_exec_t *x)
{
    return pl_ucx_inbox_release(x->inbox);
}

/* Free this stage's KV slot of every sequence a PL_ACT_TOKENS message marks finished; copy
 * those entries to done (may be NULL). Returns how many there were. The last stage frees when it
 * samples, stage 0 when the tokens come back, the stages between when stage 0 passes the
 * finished entries on (a PL_ACT_TOKENS message down the pipeline, stopping before the last). */
uint32_t pl_exec_free_finished(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                pl_act_seq_t *done)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        if (!(seqs[i].flags & PL_ACT_FINISHED))
            continue;
        pl_exec_kv_free(x, (int)seqs[i].seq);
        if (done)
            done[n] = seqs[i];
        n++;
    }
    return n;
}

void pl_exec_kv_free(pl_exec_t *x, int slot)
{
    if (x->kv_used) { /* a deployment's: a notice may name a slot its sequence already left */
        if (slot < 0 || slot >= x->job.n_seqs || !x->kv_used[slot])
            return;
        x->kv_used[slot] = false;
    }
    pl_be_stage_free_seq(x->stage, slot);
    x->n_freed++;
    atomic_store(&x->freed, x->n_freed);
    if (x->kv_held > 0) {
        x->kv_held--;
        pl_metrics_add(x->p.metrics.kv_slots, NULL, -1);
    }
}

/* Whether finished-sequence notices go on from this stage: only stages before the one ahead of
 * the last (the last frees by itself); in a deployment also to the last, which learns of a
 * canceled sequence that way. */
bool pl_exec_notice_onward(const pl_exec_t *x)
{
    return x->p.stage + (x->kv_used ? 1 : 2) < x->p.n_stages;
}

/* A one-prompt text job's completion as far as no later token can change it, into the copy
 * the node streams (pl_exec_text). Out of memory only stops the stream: results still carry the
 * whole text. */
void pl_exec_stream_text(pl_exec_t *x, const pl_gen_sink_t *sink)
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

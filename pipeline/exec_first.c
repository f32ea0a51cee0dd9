/* Stage 0 of a generation, a client of the continuous batcher (batch.h): the job's sequences are
 * submitted at once, each microbatch is formed from the live ones, and each lane's sampled tokens
 * feed the next; a one-stage plan samples here itself. */
#include "pipeline/exec_int.h"

#include "common/log.h"
#include "common/util.h"
#include "pipeline/batch.h"

#include <stdlib.h>
#include <string.h>

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
        return pl_exec_forward_send(x, hdr, seqs, x->tokens);
    pl_status_t st = pl_exec_forward(x, hdr, seqs, x->tokens, x->out);
    if (st)
        return st;
    int at = (fifo->head + fifo->count) % fifo->cap;
    double t0 = pl_now();
    st = pl_gen_sink_sample(sink, hdr, seqs, x->out, &fifo->hdr[at], x->seqs_out);
    x->sample_s += pl_now() - t0;
    if (st)
        return st;
    atomic_store(&x->generated, pl_gen_sink_generated(sink));
    pl_exec_stream_text(x, sink);
    if (fifo->hdr[at].n_seq == 0)
        return PL_OK; /* an earlier prefill chunk: nothing sampled */
    pl_exec_free_finished(x, &fifo->hdr[at], x->seqs_out, NULL);
    memcpy(fifo->seqs + (size_t)at * fifo->stride, x->seqs_out,
           fifo->hdr[at].n_seq * sizeof(pl_act_seq_t));
    fifo->count++;
    return PL_OK;
}

/* The job's sequences into a batcher: a KV slot each (sequence s in slot s, the slot the last
 * stage's sink and sampler know it by), lanes as the plan's microbatches, a step as large as
 * the assignment allows, the job's prefill chunk (the plan's uneven ones when it has them). */
static pl_status_t s_batch(pl_exec_t *x, pl_batch_t **b_p)
{
    const pl_gen_job_t *job = &x->job;
    pl_batch_params_t bp = {.n_slots = job->n_seqs,
                            .lanes = job->microbatches,
                            .step_tokens = x->p.max_tokens,
                            .chunk = job->gen.prefill_chunk,
                            .sched = job->gen.prefill_sched};
    pl_batch_t *b;
    pl_status_t st = pl_batch_create(&bp, &b);
    /* a resumed job: finished sequences stay out; the others' prompts hold the tokens
     * generated before (their KV rebuilt by this prefill) and may sample what is left */
    for (int s = 0; !st && s < job->n_seqs; s++)
        if (!pl_gen_job_was_done(job, s))
            st = pl_batch_add(b, (uint64_t)s, job->prompts[s], job->prompt_len[s],
                              job->gen.max_new_tokens - pl_gen_job_resumed(job, s));
    if (st) {
        pl_batch_destroy(&b);
        return st;
    }
    *b_p = b;
    return PL_OK;
}

/* Send every microbatch the batcher can form now. A lane's step counts the messages it awaited
 * tokens for: the tokens of step k feed its step k + 1 (as traces draw it), its first messages
 * (the prompts) are step 0, a prefill call in the statistics, and messages of earlier prompt
 * chunks only share the step of the one after them. */
static pl_status_t s_fill(pl_exec_t *x, pl_gen_sink_t *sink, s_fifo_t *fq, pl_batch_t *b,
                          uint32_t *steps)
{
    pl_batch_mb_t mb;
    int n;
    while ((n = pl_batch_next(b, x->seqs_in, x->tokens, &mb)) > 0) {
        pl_act_hdr_t hdr = {.kind = PL_ACT_HIDDEN, .job = x->p.job_id, .mb = (uint32_t)mb.lane,
                            .step = steps[mb.lane], .n_seq = (uint32_t)n,
                            .n_tokens = (uint32_t)mb.n_tokens};
        pl_status_t st = s_emit(x, sink, fq, &hdr, x->seqs_in);
        if (st)
            return st;
        if (mb.awaits) {
            steps[mb.lane]++;
            if (!fq)
                pl_exec_mb_in_flight(x, 1);
        }
    }
    return PL_OK;
}

pl_status_t pl_exec_run_first(pl_exec_t *x, pl_gen_sink_t *sink)
{
    pl_batch_t *b = NULL;
    pl_act_hdr_t tok;
    pl_act_seq_t *fin = NULL;
    pl_batch_event_t *ev = NULL;
    uint32_t *steps = NULL;
    s_fifo_t fifo = {0}, *fq = NULL;
    pl_status_t st;

    if ((st = s_batch(x, &b)))
        return st;
    fin = malloc((size_t)x->job.n_seqs * sizeof(*fin));
    ev = malloc((size_t)x->job.n_seqs * sizeof(*ev));
    steps = calloc((size_t)x->job.microbatches, sizeof(*steps));
    if (x->p.n_stages == 1) {
        fifo.cap = x->job.microbatches;
        fifo.stride = x->job.n_seqs;
        fifo.hdr = calloc((size_t)fifo.cap, sizeof(*fifo.hdr));
        fifo.seqs = calloc((size_t)fifo.cap * (size_t)fifo.stride, sizeof(*fifo.seqs));
        fq = &fifo;
    }
    if (!fin || !ev || !steps || (fq && (!fifo.hdr || !fifo.seqs))) {
        st = pl_error(PL_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = s_fill(x, sink, fq, b, steps);
    while (!st && pl_batch_count(b) > 0) {
        const void *payload;
        bool taken = false;
        const pl_act_seq_t *in = x->seqs_in;
        int n_ev;
        if (atomic_load(&x->cancel)) {
            st = pl_error(PL_ERR_CANCELED, "canceled");
            break;
        }
        if (fq) {
            if (fifo.count == 0) {
                st = pl_error(PL_ERR_PROTOCOL, "stage 0: sequences left but none in flight");
                break;
            }
            tok = fifo.hdr[fifo.head];
            in = fifo.seqs + (size_t)fifo.head * fifo.stride;
            fifo.head = (fifo.head + 1) % fifo.cap;
            fifo.count--;
        } else if ((st = pl_exec_recv(x, &tok, &payload))) {
            break;
        } else {
            taken = true;
            pl_exec_mb_in_flight(x, -1);
        }
        if (tok.kind != PL_ACT_TOKENS) {
            st = pl_error(PL_ERR_PROTOCOL, "stage 0 expected tokens, got kind %u", tok.kind);
        } else if (!(st = pl_batch_tokens(b, (int)tok.mb, in, tok.n_seq, ev, &n_ev))) {
            uint32_t n_fin = fq ? 0 : pl_exec_free_finished(x, &tok, in, fin);
            if (n_fin > 0 && pl_exec_notice_onward(x)) {
                pl_act_hdr_t notice = {.kind = PL_ACT_TOKENS, .job = x->p.job_id, .mb = tok.mb,
                                       .step = tok.step, .n_seq = n_fin, .n_tokens = n_fin};
                st = pl_exec_send(x, &notice, fin, NULL);
            }
        }
        if (taken) { /* the entries were copied out: the slot can take the next message */
            pl_status_t st2 = pl_exec_release(x);
            st = st ? st : st2;
        }
        if (!st)
            st = s_fill(x, sink, fq, b, steps);
    }
    if (!st && !fq) {
        pl_act_hdr_t stop = {.kind = PL_ACT_STOP, .job = x->p.job_id};
        st = pl_exec_send(x, &stop, NULL, NULL);
    }
    if (!st) {
        pl_batch_stats_t bs;
        pl_batch_stats(b, &bs);
        pl_log_info("job %u stage 0: %llu microbatches (%llu mixing prompt and decode tokens), "
                    "at most %d of %d in flight, %llu sequences, %llu tokens sampled",
                    x->p.job_id, (unsigned long long)bs.microbatches,
                    (unsigned long long)bs.mixed, bs.max_in_flight, x->job.microbatches,
                    (unsigned long long)bs.left, (unsigned long long)bs.tokens);
    }
out:
    free(fifo.hdr);
    free(fifo.seqs);
    free(fin);
    free(ev);
    free(steps);
    pl_batch_destroy(&b);
    return st;
}

/* Stage 0 of a generation: prefill every microbatch, then turn each microbatch's sampled tokens
 * into its next decode step until all have finished; a one-stage plan samples here itself. */
#include "pipeline/exec_int.h"

#include "common/log.h"
#include "common/util.h"

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
    st = pl_gen_sink_sample(sink, hdr, seqs, x->out, &fifo->hdr[at], x->seqs_out);
    if (st)
        return st;
    atomic_store(&x->generated, pl_gen_sink_generated(sink));
    pl_exec_stream_text(x, sink);
    if (fifo->hdr[at].n_seq == 0)
        return PL_OK; /* an earlier prefill chunk: nothing sampled */
    pl_exec_free_finished(x, &fifo->hdr[at], x->seqs_out, NULL);
    memcpy(fifo->seqs + (size_t)at * fifo->stride, x->seqs_out, hdr->n_seq * sizeof(pl_act_seq_t));
    fifo->count++;
    return PL_OK;
}

pl_status_t pl_exec_run_first(pl_exec_t *x, pl_gen_sink_t *sink)
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
        } else if ((st = pl_exec_recv(x, &tok, &payload))) {
            break;
        } else {
            taken = true;
        }
        if (tok.kind != PL_ACT_TOKENS) {
            st = pl_error(PL_ERR_PROTOCOL, "stage 0 expected tokens, got kind %u", tok.kind);
        } else {
            st = pl_gen_feed_decode(feed, &tok, in, &hdr, dec, x->tokens);
            uint32_t n_fin = fq ? 0 : pl_exec_free_finished(x, &tok, in, fin);
            if (!st && n_fin > 0 && pl_exec_notice_onward(x)) {
                pl_act_hdr_t notice = {.kind = PL_ACT_TOKENS, .job = x->p.job_id, .mb = tok.mb,
                                       .step = tok.step, .n_seq = n_fin, .n_tokens = n_fin};
                st = pl_exec_send(x, &notice, fin, NULL);
            }
        }
        if (taken) { /* the entries were copied out: the slot can take the next message */
            pl_status_t st2 = pl_exec_release(x);
            st = st ? st : st2;
        }
        if (!st && hdr.n_seq > 0)
            st = s_emit(x, sink, fq, &hdr, dec);
    }
    if (!st && !fq) {
        hdr = (pl_act_hdr_t){.kind = PL_ACT_STOP, .job = x->p.job_id};
        st = pl_exec_send(x, &hdr, NULL, NULL);
    }
out:
    free(fifo.hdr);
    free(fifo.seqs);
    free(dec);
    free(fin);
    pl_gen_feed_destroy(&feed);
    return st;
}

/* The stages after stage 0: forward each microbatch's activations on; the last stage samples and
 * sends the tokens back to stage 0, and finished-sequence notices free KV slots on the way. */
#include "pipeline/exec_int.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

pl_status_t pl_exec_run_rest(pl_exec_t *x, pl_gen_sink_t *sink)
{
    bool last = x->p.stage == x->p.n_stages - 1;

    pl_log_set_job(x->p.job_id); /* this thread's lines carry the job (JSON "job") */
    pl_status_t st = PL_OK;
    while (!st) {
        pl_act_hdr_t hdr, out;
        const void *payload;
        if ((st = pl_exec_recv(x, &hdr, &payload)))
            break;
        if (hdr.kind == PL_ACT_STOP) {
            if (!(st = pl_exec_release(x)) && !last)
                st = pl_exec_send(x, &hdr, NULL, NULL);
            break;
        }
        if (hdr.kind == PL_ACT_TOKENS && !last) { /* finished sequences: free, pass on */
            pl_exec_free_finished(x, &hdr, x->seqs_in, NULL);
            pl_status_t st2 = pl_exec_release(x); /* the entries are in seqs_in */
            st = pl_exec_notice_onward(x) ? pl_exec_send(x, &hdr, x->seqs_in, NULL) : PL_OK;
            st = st ? st : st2;
            continue;
        }
        if (hdr.kind != PL_ACT_HIDDEN) {
            pl_exec_release(x);
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
        if (!last && (st = pl_exec_take(x, hdr.n_seq, &buf, &dst))) {
            pl_exec_release(x);
            break;
        }
        st = pl_exec_forward(x, &hdr, x->seqs_in, in, dst);
        pl_status_t st2 = pl_exec_release(x);
        if ((st = st ? st : st2)) {
            if (buf)
                pl_ucx_outbox_unget(x->outbox, buf);
            break;
        }
        if (!last) {
            st = pl_exec_send_in(x, buf, &hdr, x->seqs_in, dst);
            continue;
        }
        double t0 = pl_now();
        st = pl_gen_sink_sample(sink, &hdr, x->seqs_in, x->out, &out, x->seqs_out);
        x->sample_s += pl_now() - t0;
        atomic_store(&x->generated, pl_gen_sink_generated(sink));
        pl_exec_stream_text(x, sink);
        if (!st && out.n_seq > 0) { /* none after an earlier prefill chunk */
            pl_exec_free_finished(x, &out, x->seqs_out, NULL);
            st = pl_exec_send(x, &out, x->seqs_out, NULL);
        }
    }
    return st;
}

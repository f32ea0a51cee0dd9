/* A deployment's stage 0: requests (SEQ_ADD from the node) join the continuous batcher (batch.h)
 * and leave on their end or SEQ_CANCEL; the loop never ends on an empty table, it waits for
 * tokens back from the last stage or the node's next control message.
 *
 * Protocol (/work/notes/s3/protocol.md) as built, and where it differs:
 * - The first entry of a sequence (pos0 == 0) carries token = (int32_t)req (§3).
 * - Stage 0 sends the finished-sequence notice of every sequence that leaves (finished or
 *   canceled) to every later stage, the last included (pl_exec_notice_onward): the last stage
 *   learns of a canceled sequence that way and frees its slot in order with the data (§5).
 * - The wait: no fd of the PAIR socket in the UCX wait (the progress thread would race for the
 *   worker's event fd), but a bounded one: the data wait wakes at once on a message and every
 *   1 ms (a lane free: a request may join now) or 20 ms (every lane busy) to take control
 *   messages; with nothing in flight it sleeps on the PAIR socket alone.
 * - A request whose SEQ_ADD is refused (settings, queue full) ends with a SEQ_OUT of no tokens
 *   and finish "length" (§6); for a refused setting the last stage sends it (stage 0 only logs),
 *   for a full queue stage 0 does (it alone knows): the coordinator must take that one from
 *   stage 0's node.
 * - A resumed request's min_new_tokens counts from its original start, as max_new_tokens does
 *   once `resumed` is added back (SEQ_ADD's max_new_tokens counts what is left). */
#include "pipeline/exec_serve.h"

#include "common/log.h"
#include "common/util.h"
#include "pipeline/batch.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Wait bounds of stage 0's loop, in ms (above). */
#define S_WAIT_LANE_FREE_MS 1
#define S_WAIT_LANES_BUSY_MS 20
#define S_WAIT_IDLE_MS 100

struct pl_exec_first_side {
    pl_batch_t *batch;
    int lanes;
    uint32_t *steps;      /* per lane: messages it awaited tokens for */
    pl_batch_event_t *ev; /* [n_slots] */
    pl_act_seq_t *notice; /* [n_slots] */
    /* a one-stage deployment: its sampled microbatches wait here instead of on the network */
    pl_act_hdr_t *fhdr;
    pl_act_seq_t *fseqs; /* [lanes][n_slots] */
    int head, count;
};

pl_status_t pl_exec_serve_load(pl_exec_t *x, const pl_model_config_t *cfg)
{
    const pl_job_spec_t *spec = &x->p.spec;
    const pl_job_serve_t *sv = &spec->serve;
    pl_gen_job_t j = {0};
    pl_status_t st;
    char path[PATH_MAX + 32];

    if (sv->kv_slots < 1 || sv->kv_slots > PL_JOB_MAX_SEQS)
        return pl_error(PL_ERR_INVALID, "field 'serve.kv_slots': %d not in [1, %d]", sv->kv_slots,
                        PL_JOB_MAX_SEQS);
    if (sv->max_queue < 0 || sv->max_queue > PL_BATCH_MAX_SEQS - sv->kv_slots)
        return pl_error(PL_ERR_INVALID, "field 'serve.max_queue': %d not in [0, %d]", sv->max_queue,
                        PL_BATCH_MAX_SEQS - sv->kv_slots);
    if (x->p.microbatches < 1 || x->p.microbatches > PL_BATCH_MAX_LANES)
        return pl_error(PL_ERR_INVALID, "assignment: microbatches %d not in [1, %d]",
                        x->p.microbatches, PL_BATCH_MAX_LANES);
    if (x->p.max_tokens < 1 || sv->step_tokens < 0 || sv->step_tokens > x->p.max_tokens)
        return pl_error(PL_ERR_INVALID, "assignment: serve.step_tokens %d beyond max_tokens %d",
                        sv->step_tokens, x->p.max_tokens);
    if (x->p.max_ctx < 2 || x->p.max_ctx > cfg->max_pos)
        return pl_error(PL_ERR_INVALID,
                        "assignment: max_ctx %d not in [2, %d] (the model's "
                        "positions)",
                        x->p.max_ctx, cfg->max_pos);
    if ((st = pl_gen_job_set_gen(&j, &spec->gen)))
        return st;
    j.n_seqs = sv->kv_slots;
    j.microbatches = x->p.microbatches;
    j.n_eos = cfg->n_eos;
    memcpy(j.eos, cfg->eos_ids, sizeof(j.eos));
    /* requests' text and stop strings: the model's tokenizer, when it has one */
    snprintf(path, sizeof(path), "%s/tokenizer.json", spec->model);
    if (access(path, R_OK) == 0)
        snprintf(j.text_model, sizeof(j.text_model), "%s", spec->model);
    x->kv_used = calloc((size_t)j.n_seqs, sizeof(bool));
    x->serve = calloc(1, sizeof(*x->serve));
    if (!x->kv_used || !x->serve)
        return pl_error(PL_ERR_NOMEM, "deployment stage: out of memory");
    x->serve->n_slots = j.n_seqs;
    x->job = j;
    return PL_OK;
}

static void s_first_destroy(struct pl_exec_first_side **f_p)
{
    struct pl_exec_first_side *f = *f_p;
    if (!f)
        return;
    pl_batch_destroy(&f->batch);
    free(f->steps);
    free(f->ev);
    free(f->notice);
    free(f->fhdr);
    free(f->fseqs);
    free(f);
    *f_p = NULL;
}

void pl_exec_serve_free(pl_exec_t *x)
{
    if (x->serve) {
        pl_exec_sink_side_destroy(&x->serve->sink);
        s_first_destroy(&x->serve->first);
    }
    free(x->serve);
    free(x->kv_used);
    x->serve = NULL;
    x->kv_used = NULL;
}

pl_status_t pl_exec_serve_check(const pl_exec_t *x, const pl_msg_seq_add_t *m)
{
    const pl_job_gen_t *g = &m->gen;
    if (m->req < 1 || m->req > INT32_MAX)
        return pl_error(PL_ERR_INVALID, "req %llu beyond 1..%d", (unsigned long long)m->req,
                        INT32_MAX);
    for (int i = 0; i < m->n_prompt; i++)
        if (m->prompt[i] < 0 || m->prompt[i] >= x->vocab)
            return pl_error(PL_ERR_INVALID, "prompt token %d (%d) beyond the vocabulary of %d", i,
                            m->prompt[i], x->vocab);
    if (g->max_new_tokens < 1 || m->resumed < 0 || m->resumed >= m->n_prompt ||
        g->max_new_tokens > PL_JOB_MAX_NEW_TOKENS - m->resumed)
        return pl_error(PL_ERR_INVALID, "max_new_tokens %d (resumed %d) out of range",
                        g->max_new_tokens, m->resumed);
    if ((int64_t)m->n_prompt + g->max_new_tokens > x->p.max_ctx)
        return pl_error(PL_ERR_INVALID,
                        "prompt of %d tokens + max_new_tokens %d exceed the "
                        "context of %d",
                        m->n_prompt, g->max_new_tokens, x->p.max_ctx);
    if (g->n_stop > 0 && !x->job.text_model[0])
        return pl_error(PL_ERR_INVALID, "stop strings need the model's tokenizer, and the "
                                        "model has none");
    pl_serve_seq_t sq = {.prompt_len = m->n_prompt,
                         .gen = *g,
                         .resumed = m->resumed,
                         .earlier = m->prompt + m->n_prompt - m->resumed};
    sq.gen.max_new_tokens += m->resumed;
    return pl_serve_seq_check(&sq);
}

pl_status_t pl_exec_serve_out(pl_exec_t *x, uint64_t req, const int32_t *tokens, int n,
                              char **text_p, pl_finish_t finish)
{
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SEQ_OUT);
    m.seq_out.job = x->p.job_id;
    m.seq_out.stage = x->p.stage;
    m.seq_out.req = req;
    m.seq_out.n_tokens = PL_MIN(n, PL_MSG_MAX_SEQ_OUT);
    if (n > 0)
        memcpy(m.seq_out.tokens, tokens, (size_t)m.seq_out.n_tokens * sizeof(int32_t));
    m.seq_out.finish = finish;
    if (text_p) {
        m.seq_out.text = *text_p;
        *text_p = NULL;
    }
    pl_status_t st;
    /* never dropped (the request's tokens would be lost): a full queue means the node's loop
     * is behind, and it reads on */
    while ((st = pl_tx_send(x->sock, NULL, &m)) == PL_ERR_BUSY && !atomic_load(&x->cancel))
        usleep(200);
    if (st && st != PL_ERR_BUSY)
        pl_log_error("job %u stage %d: request %llu: cannot send SEQ_OUT: %s", x->p.job_id,
                     x->p.stage, (unsigned long long)req, pl_error_msg());
    pl_msg_clear(&m);
    return st == PL_ERR_BUSY ? pl_error(PL_ERR_CANCELED, "canceled") : st;
}

/* A sequence left stage 0's table now (canceled while not in flight): its KV here, and on the
 * later stages through a notice; a one-stage deployment's sink slot at once. */
static pl_status_t s_left_now(pl_exec_t *x, int slot)
{
    pl_exec_kv_free(x, slot);
    if (x->p.n_stages == 1) {
        pl_exec_sink_side_end(x, slot);
        return PL_OK;
    }
    pl_act_seq_t e = {.seq = (uint32_t)slot, .n_tok = 1, .flags = PL_ACT_FINISHED};
    pl_act_hdr_t notice = {.kind = PL_ACT_TOKENS, .job = x->p.job_id, .n_seq = 1, .n_tokens = 1};
    return pl_exec_send(x, &notice, &e, NULL);
}

static void s_refused(pl_exec_t *x, uint64_t req, const char *why)
{
    pl_log_warn_limited("job %u stage %d: request %llu refused: %s", x->p.job_id, x->p.stage,
                        (unsigned long long)req, why);
}

static pl_status_t s_on_add(pl_exec_t *x, pl_msg_seq_add_t *m)
{
    struct pl_exec_first_side *f = x->serve->first;
    bool last = x->serve->sink != NULL;
    pl_status_t st = pl_exec_serve_check(x, m);
    if (st) { /* both ends refuse it alike; the last stage answers */
        s_refused(x, m->req, pl_error_msg());
        return last ? pl_exec_serve_out(x, m->req, NULL, 0, NULL, PL_FINISH_LENGTH) : PL_OK;
    }
    if (f && (st = pl_batch_add(f->batch, m->req, m->prompt, m->n_prompt, m->gen.max_new_tokens))) {
        /* the coordinator keeps within the queue: this is its mistake, and the request ends */
        s_refused(x, m->req, pl_error_msg());
        return pl_exec_serve_out(x, m->req, NULL, 0, NULL, PL_FINISH_LENGTH);
    }
    if (last)
        pl_exec_sink_side_add(x, m);
    return PL_OK;
}

static pl_status_t s_on_cancel(pl_exec_t *x, uint64_t req)
{
    struct pl_exec_first_side *f = x->serve->first;
    pl_batch_event_t ev;
    if (f && pl_batch_cancel(f->batch, req, &ev)) {
        if (ev.slot >= 0)
            return s_left_now(x, ev.slot);
        if (x->serve->sink) /* it was queued: never bound */
            pl_exec_sink_side_forget(x, req);
        return PL_OK;
    }
    if (x->serve->sink)
        pl_exec_sink_side_cancel(x, req);
    return PL_OK;
}

static void s_drop(pl_exec_t *x, const char *what)
{
    x->serve->dropped++;
    double now = pl_now();
    if (now - x->serve->last_drop_log < 1.0)
        return;
    x->serve->last_drop_log = now;
    pl_log_warn("job %u stage %d: dropped a control message: %s (%llu so far)", x->p.job_id,
                x->p.stage, what, (unsigned long long)x->serve->dropped);
}

pl_status_t pl_exec_serve_control(pl_exec_t *x, int timeout_ms)
{
    pl_msg_t m;
    pl_status_t st = pl_tx_recv(x->sock, timeout_ms, NULL, NULL, &m);
    if (st == PL_ERR_PROTOCOL) {
        s_drop(x, pl_error_msg());
        return PL_OK;
    }
    if (st)
        return st;
    if (m.type == PL_MSG_SEQ_ADD && m.seq_add.job == x->p.job_id && m.seq_add.stage == x->p.stage)
        st = s_on_add(x, &m.seq_add);
    else if (m.type == PL_MSG_SEQ_CANCEL && m.seq_cancel.job == x->p.job_id &&
             m.seq_cancel.stage == x->p.stage)
        st = s_on_cancel(x, m.seq_cancel.req);
    else
        s_drop(x, pl_msg_name(m.type));
    pl_msg_clear(&m);
    return st;
}

/* Every control message queued now. */
static pl_status_t s_controls(pl_exec_t *x)
{
    pl_status_t st;
    while ((st = pl_exec_serve_control(x, 0)) == PL_OK)
        ;
    return st == PL_ERR_BUSY ? PL_OK : st;
}

/* Send every microbatch the batcher can form now (exec_first.c's rule for a lane's steps); a
 * sequence's first entry names its request; a one-stage deployment samples here. */
static pl_status_t s_fill(pl_exec_t *x, struct pl_exec_first_side *f)
{
    pl_batch_mb_t mb;
    int n;
    while ((n = pl_batch_next(f->batch, x->seqs_in, x->tokens, &mb)) > 0) {
        pl_act_hdr_t hdr = {.kind = PL_ACT_HIDDEN,
                            .job = x->p.job_id,
                            .mb = (uint32_t)mb.lane,
                            .step = f->steps[mb.lane],
                            .n_seq = (uint32_t)n,
                            .n_tokens = (uint32_t)mb.n_tokens};
        pl_status_t st;
        for (int e = 0; e < n; e++) {
            uint64_t id;
            if (x->seqs_in[e].pos0 == 0 && pl_batch_slot_id(f->batch, (int)x->seqs_in[e].seq, &id))
                x->seqs_in[e].token = (int32_t)id;
        }
        if (!f->fhdr) {
            if ((st = pl_exec_forward_send(x, &hdr, x->seqs_in, x->tokens)))
                return st;
        } else {
            int at = (f->head + f->count) % f->lanes;
            pl_act_seq_t *dst = f->fseqs + (size_t)at * (size_t)x->serve->n_slots;
            if ((st = pl_exec_sink_side_bind(x, &hdr, x->seqs_in)) ||
                (st = pl_exec_forward(x, &hdr, x->seqs_in, x->tokens, x->out)) ||
                (st = pl_exec_sink_side_sample(x, &hdr, x->seqs_in, x->out, &f->fhdr[at], dst)))
                return st;
            if (f->fhdr[at].n_seq > 0)
                f->count++;
        }
        if (mb.awaits) {
            f->steps[mb.lane]++;
            if (!f->fhdr)
                pl_exec_mb_in_flight(x, 1);
        }
    }
    return PL_OK;
}

/* The tokens of one lane into the batcher: the sequences that leave give their KV back here and,
 * by a notice, on the later stages (a one-stage deployment's sink slot at once). */
static pl_status_t s_tokens(pl_exec_t *x, struct pl_exec_first_side *f, const pl_act_hdr_t *tok,
                            const pl_act_seq_t *in, bool taken)
{
    int n_ev = 0;
    uint32_t n_left = 0;
    pl_status_t st =
        tok->kind != PL_ACT_TOKENS
            ? pl_error(PL_ERR_PROTOCOL, "stage 0 expected tokens, got kind %u", tok->kind)
            : pl_batch_tokens(f->batch, (int)tok->mb, in, tok->n_seq, f->ev, &n_ev);
    if (taken) { /* the events hold what is needed: the slot can take the next message */
        pl_status_t st2 = pl_exec_release(x);
        st = st ? st : st2;
    }
    if (st)
        return st;
    for (int i = 0; i < n_ev; i++) {
        if (!f->ev[i].left)
            continue;
        pl_exec_kv_free(x, f->ev[i].slot);
        if (f->fhdr)
            pl_exec_sink_side_end(x, f->ev[i].slot);
        f->notice[n_left++] = (pl_act_seq_t){.seq = (uint32_t)f->ev[i].slot,
                                             .n_tok = 1,
                                             .flags = PL_ACT_FINISHED,
                                             .token = PL_MAX(f->ev[i].token, 0)};
    }
    if (n_left == 0 || f->fhdr || !pl_exec_notice_onward(x))
        return PL_OK;
    pl_act_hdr_t notice = {.kind = PL_ACT_TOKENS,
                           .job = x->p.job_id,
                           .mb = tok->mb,
                           .step = tok->step,
                           .n_seq = n_left,
                           .n_tokens = n_left};
    return pl_exec_send(x, &notice, f->notice, NULL);
}

/* Wait for what comes next (above: tokens back, bounded; else a control message) and take it. */
static pl_status_t s_wait(pl_exec_t *x, struct pl_exec_first_side *f)
{
    pl_status_t st;
    if (f->fhdr) {
        if (f->count == 0) {
            st = pl_exec_serve_control(x, S_WAIT_IDLE_MS);
            return st == PL_ERR_BUSY ? PL_OK : st;
        }
        pl_act_hdr_t tok = f->fhdr[f->head];
        const pl_act_seq_t *in = f->fseqs + (size_t)f->head * (size_t)x->serve->n_slots;
        f->head = (f->head + 1) % f->lanes;
        f->count--;
        return s_tokens(x, f, &tok, in, false);
    }
    pl_batch_stats_t bs;
    pl_batch_stats(f->batch, &bs);
    if (bs.in_flight == 0) { /* nothing can come back: only the node can say something */
        st = pl_exec_serve_control(x, S_WAIT_IDLE_MS);
        return st == PL_ERR_BUSY ? PL_OK : st;
    }
    pl_act_hdr_t tok;
    const void *payload;
    st = pl_exec_recv_for(x, &tok, &payload,
                          bs.in_flight < f->lanes ? S_WAIT_LANE_FREE_MS : S_WAIT_LANES_BUSY_MS);
    if (st == PL_ERR_TIMEOUT)
        return PL_OK;
    if (st)
        return st;
    pl_exec_mb_in_flight(x, -1);
    return s_tokens(x, f, &tok, x->seqs_in, true);
}

static pl_status_t s_first_create(pl_exec_t *x, struct pl_exec_first_side **f_p)
{
    const pl_job_serve_t *sv = &x->p.spec.serve;
    size_t ns = (size_t)x->serve->n_slots, lanes = (size_t)x->job.microbatches;
    pl_batch_params_t bp = {.n_slots = (int)ns,
                            .lanes = (int)lanes,
                            .step_tokens = sv->step_tokens > 0 ? sv->step_tokens : x->p.max_tokens,
                            .chunk = x->job.gen.prefill_chunk,
                            .max_queue = sv->max_queue + sv->kv_slots};
    struct pl_exec_first_side *f = calloc(1, sizeof(*f));
    pl_status_t st;
    if (!f)
        return pl_error(PL_ERR_NOMEM, "stage 0: out of memory");
    f->lanes = (int)lanes;
    if ((st = pl_batch_create(&bp, &f->batch)))
        goto err;
    f->steps = calloc(lanes, sizeof(*f->steps));
    f->ev = calloc(ns, sizeof(*f->ev));
    f->notice = calloc(ns, sizeof(*f->notice));
    if (x->p.n_stages == 1) {
        f->fhdr = calloc(lanes, sizeof(*f->fhdr));
        f->fseqs = calloc(lanes * ns, sizeof(*f->fseqs));
    }
    if (!f->steps || !f->ev || !f->notice || (x->p.n_stages == 1 && (!f->fhdr || !f->fseqs))) {
        st = pl_error(PL_ERR_NOMEM, "stage 0: out of memory");
        goto err;
    }
    *f_p = f;
    return PL_OK;
err:
    s_first_destroy(&f);
    return st;
}

pl_status_t pl_exec_run_serve_first(pl_exec_t *x)
{
    pl_status_t st;
    pl_log_set_job(x->p.job_id);
    if ((st = s_first_create(x, &x->serve->first)) ||
        (x->p.n_stages == 1 && (st = pl_exec_sink_side_create(x, &x->serve->sink))))
        return st;
    pl_log_info("job %u stage 0: serving deployment '%s': %d KV slots, %d microbatches, %d "
                "tokens a step",
                x->p.job_id, x->p.spec.serve.name, x->serve->n_slots, x->job.microbatches,
                x->p.spec.serve.step_tokens > 0 ? x->p.spec.serve.step_tokens : x->p.max_tokens);
    while (!st) {
        if (atomic_load(&x->cancel))
            return pl_error(PL_ERR_CANCELED, "canceled");
        if ((st = s_controls(x)) || (st = s_fill(x, x->serve->first)))
            break;
        st = s_wait(x, x->serve->first);
    }
    return st;
}

/* In-process serving: arrivals into the batcher, each formed microbatch through every stage at
 * once, its sampled tokens held in a FIFO of lanes (as they would be in flight) and handed back
 * oldest first. */
#include "pipeline/serve_local.h"

#include "common/util.h"
#include "pipeline/gen.h"
#include "pipeline/local_chain.h"
#include "pipeline/serve_sink.h"

#include <stdlib.h>
#include <string.h>

/* The sampled tokens of lanes in flight, oldest first. */
typedef struct {
    pl_act_hdr_t *hdr;
    pl_act_seq_t *seqs; /* [lanes][n_slots] */
    pl_serve_out_t *outs;
    int cap, head, count, stride;
} s_fifo_t;

typedef struct {
    const pl_batch_params_t *bp;
    const pl_serve_local_req_t *reqs;
    pl_serve_local_out_t *outs;
    int n_reqs, arrived;
    pl_batch_t *batch;
    pl_serve_sink_t *sink;
    pl_local_chain_t c;
    s_fifo_t fifo;
    pl_act_seq_t *seqs;
    int32_t *tokens;
    pl_batch_event_t *ev;
    uint64_t steps;
    int done;
} s_run_t;

static pl_status_t s_arrivals(s_run_t *r)
{
    while (r->arrived < r->n_reqs && r->reqs[r->arrived].arrive <= r->steps) {
        int i = r->arrived++;
        const pl_serve_local_req_t *q = &r->reqs[i];
        pl_status_t st = pl_batch_add(r->batch, (uint64_t)i, q->prompt, q->n_prompt,
                                      q->gen.max_new_tokens);
        if (st == PL_ERR_BUSY) {
            r->outs[i].refused = true;
            r->done++;
        } else if (st) {
            return pl_error_prefix(st, "request %d: ", i);
        }
    }
    return PL_OK;
}

/* Every microbatch the batcher forms now, through the stages and sampled into the FIFO. */
static pl_status_t s_fill(s_run_t *r)
{
    pl_batch_mb_t mb;
    int n;
    while ((n = pl_batch_next(r->batch, r->seqs, r->tokens, &mb)) > 0) {
        pl_act_hdr_t hdr = {.kind = PL_ACT_HIDDEN, .mb = (uint32_t)mb.lane, .n_seq = (uint32_t)n,
                            .n_tokens = (uint32_t)mb.n_tokens};
        pl_status_t st;
        for (int e = 0; e < n; e++) { /* a first chunk: the slot's new sequence */
            uint64_t id;
            if (r->seqs[e].pos0 != 0 || !pl_batch_slot_id(r->batch, (int)r->seqs[e].seq, &id))
                continue;
            pl_serve_seq_t sq = {.stream = 0, .prompt_len = r->reqs[id].n_prompt,
                                 .gen = r->reqs[id].gen};
            if ((st = pl_serve_sink_begin(r->sink, (int)r->seqs[e].seq, &sq)))
                return st;
            r->outs[id].admitted_at = r->steps;
        }
        float *logits = NULL;
        if ((st = pl_local_chain_run(&r->c, &hdr, r->seqs, r->tokens, &logits)))
            return st;
        r->steps++;
        s_fifo_t *f = &r->fifo;
        int at = (f->head + f->count) % f->cap;
        pl_act_seq_t *dst = f->seqs + (size_t)at * f->stride;
        if ((st = pl_serve_sink_sample(r->sink, &hdr, r->seqs, logits, &f->hdr[at], dst,
                                       f->outs + (size_t)at * f->stride)))
            return st;
        if (f->hdr[at].n_seq > 0)
            f->count++;
    }
    return PL_OK;
}

/* The oldest lane's tokens back into the batcher; finished sequences free their slots. */
static pl_status_t s_drain_one(s_run_t *r)
{
    s_fifo_t *f = &r->fifo;
    pl_act_hdr_t *h = &f->hdr[f->head];
    pl_act_seq_t *in = f->seqs + (size_t)f->head * f->stride;
    const pl_serve_out_t *so = f->outs + (size_t)f->head * f->stride;
    int n_ev;
    pl_status_t st = pl_batch_tokens(r->batch, (int)h->mb, in, h->n_seq, r->ev, &n_ev);
    f->head = (f->head + 1) % f->cap;
    f->count--;
    if (st)
        return st;
    for (int i = 0; i < n_ev; i++) {
        pl_serve_local_out_t *o = &r->outs[r->ev[i].id];
        const pl_serve_local_req_t *q = &r->reqs[r->ev[i].id];
        if (!o->tokens && !(o->tokens = malloc((size_t)q->gen.max_new_tokens * sizeof(int32_t))))
            return pl_error(PL_ERR_NOMEM, "out of memory");
        if (o->n_tokens < q->gen.max_new_tokens)
            o->tokens[o->n_tokens++] = r->ev[i].token;
        if (!r->ev[i].left)
            continue;
        o->finish = so[i].finish;
        pl_local_chain_free_seq(&r->c, r->ev[i].slot);
        pl_serve_sink_end(r->sink, r->ev[i].slot);
        r->done++;
    }
    return PL_OK;
}

static pl_status_t s_load(s_run_t *r, pl_model_t *model, pl_be_device_t *dev, const int *counts,
                          int n_stages)
{
    const pl_model_config_t *cfg = pl_model_config(model);
    int max_ctx = 0;
    for (int i = 0; i < r->n_reqs; i++)
        max_ctx = PL_MAX(max_ctx, r->reqs[i].n_prompt + r->reqs[i].gen.max_new_tokens);
    if (max_ctx > cfg->max_pos)
        return pl_error(PL_ERR_RANGE, "a request needs %d positions, the model has %d", max_ctx,
                        cfg->max_pos);
    pl_status_t st = pl_local_chain_load(&r->c, dev, model, counts, n_stages, r->bp->n_slots,
                                         max_ctx, r->bp->step_tokens, PL_ACT_F32);
    if (st)
        return st;
    size_t ns = (size_t)r->bp->n_slots, lanes = (size_t)r->bp->lanes;
    r->seqs = malloc(ns * sizeof(*r->seqs));
    r->tokens = malloc((size_t)r->bp->step_tokens * sizeof(int32_t));
    r->ev = malloc(ns * sizeof(*r->ev));
    r->fifo = (s_fifo_t){.cap = (int)lanes, .stride = (int)ns,
                         .hdr = calloc(lanes, sizeof(pl_act_hdr_t)),
                         .seqs = calloc(lanes * ns, sizeof(pl_act_seq_t)),
                         .outs = calloc(lanes * ns, sizeof(pl_serve_out_t))};
    if (!r->seqs || !r->tokens || !r->ev || !r->fifo.hdr || !r->fifo.seqs || !r->fifo.outs)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    return pl_serve_sink_create((int)ns, cfg->vocab, cfg->eos_ids, cfg->n_eos, NULL, &r->sink);
}

pl_status_t pl_serve_local_run(const char *model_dir, pl_be_device_t *dev, const int *counts,
                               int n_stages, const pl_batch_params_t *bp,
                               const pl_serve_local_req_t *reqs, int n_reqs,
                               pl_serve_local_out_t *outs, pl_serve_local_stats_t *stats)
{
    pl_model_t *model = NULL;
    s_run_t r = {.bp = bp, .reqs = reqs, .outs = outs, .n_reqs = n_reqs};
    double t0 = pl_now();
    pl_status_t st;

    memset(outs, 0, (size_t)n_reqs * sizeof(*outs));
    for (int i = 1; i < n_reqs; i++)
        if (reqs[i].arrive < reqs[i - 1].arrive)
            return pl_error(PL_ERR_INVALID, "request %d arrives before request %d", i, i - 1);
    if ((st = pl_model_open(model_dir, &model)) || (st = pl_batch_create(bp, &r.batch)) ||
        (st = s_load(&r, model, dev, counts, n_stages)))
        goto out;
    while (!st && r.done < n_reqs) {
        if ((st = s_arrivals(&r)) || (st = s_fill(&r)))
            break;
        if (r.fifo.count > 0)
            st = s_drain_one(&r);
        else if (r.arrived < n_reqs)
            r.steps = PL_MAX(r.steps, reqs[r.arrived].arrive); /* idle until the next one */
        else if (r.done < n_reqs)
            st = pl_error(PL_ERR_PROTOCOL, "serving: %d requests neither run nor wait",
                          n_reqs - r.done);
    }
    pl_batch_stats(r.batch, &stats->batch);
    stats->steps = r.steps;
    stats->compute_s = r.c.compute_s;
    stats->total_s = pl_now() - t0;
out:
    if (st)
        pl_serve_local_free(outs, n_reqs);
    pl_local_chain_unload(&r.c);
    free(r.seqs);
    free(r.tokens);
    free(r.ev);
    free(r.fifo.hdr);
    free(r.fifo.seqs);
    free(r.fifo.outs);
    pl_serve_sink_destroy(&r.sink);
    pl_batch_destroy(&r.batch);
    pl_model_destroy(&model);
    return st;
}

void pl_serve_local_free(pl_serve_local_out_t *outs, int n)
{
    for (int i = 0; i < n; i++) {
        free(outs[i].tokens);
        outs[i].tokens = NULL;
    }
}

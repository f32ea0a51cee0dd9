/* A deployment's last stage: KV slots bound to requests as their first entries arrive (token =
 * the request, protocol.md §3), sampling per slot (serve_sink.h), SEQ_OUT per request sampled.
 *
 * Besides protocol.md: a canceled request's unbound SEQ_ADD is kept (marked) rather than
 * dropped, since stage 0 may have admitted it before its own SEQ_CANCEL came: its first entry
 * then still finds its prompt length, and its SEQ_OUTs stay muted. Unbound SEQ_ADDs beyond the
 * bound (kv_slots + max_queue + 64) push out the oldest canceled one, else the oldest. Text bytes
 * NUL are left out of SEQ_OUT (the control plane's JSON strings cannot carry them). */
#include "pipeline/exec_serve.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t req; /* 0: the slot is free */
    bool muted;   /* canceled: no more SEQ_OUT */
    size_t sent;  /* text bytes sent in SEQ_OUTs */
} s_bound_t;

typedef struct {
    pl_msg_seq_add_t add; /* owns its prompt */
    bool canceled;
    uint64_t order;
} s_pend_t;

struct pl_exec_sink_side {
    pl_serve_sink_t *sink;
    s_bound_t *bound; /* [n_slots] */
    s_pend_t *pend;
    int n_pend, cap_pend;
    uint64_t next_order;
    pl_serve_out_t *outs; /* [n_slots] */
};

pl_status_t pl_exec_sink_side_create(pl_exec_t *x, pl_exec_sink_side_t **s_p)
{
    int ns = x->serve->n_slots;
    pl_exec_sink_side_t *s = calloc(1, sizeof(*s));
    pl_status_t st;
    if (!s)
        return pl_error(PL_ERR_NOMEM, "last stage: out of memory");
    s->cap_pend = ns + x->p.spec.serve.max_queue + PL_EXEC_SERVE_PENDING_EXTRA;
    s->bound = calloc((size_t)ns, sizeof(*s->bound));
    s->pend = calloc((size_t)s->cap_pend, sizeof(*s->pend));
    s->outs = calloc((size_t)ns, sizeof(*s->outs));
    if (!s->bound || !s->pend || !s->outs) {
        pl_exec_sink_side_destroy(&s);
        return pl_error(PL_ERR_NOMEM, "last stage: out of memory");
    }
    if ((st = pl_serve_sink_create(ns, x->vocab, x->job.eos, x->job.n_eos,
                                   x->job.text_model[0] ? x->job.text_model : NULL, &s->sink))) {
        pl_exec_sink_side_destroy(&s);
        return st;
    }
    *s_p = s;
    return PL_OK;
}

void pl_exec_sink_side_destroy(pl_exec_sink_side_t **s_p)
{
    pl_exec_sink_side_t *s = *s_p;
    if (!s)
        return;
    for (int i = 0; s->pend && i < s->n_pend; i++)
        free(s->pend[i].add.prompt);
    pl_serve_sink_destroy(&s->sink);
    free(s->bound);
    free(s->pend);
    free(s->outs);
    free(s);
    *s_p = NULL;
}

static int s_find_pend(const pl_exec_sink_side_t *s, uint64_t req)
{
    for (int i = 0; i < s->n_pend; i++)
        if (s->pend[i].add.req == req)
            return i;
    return -1;
}

static void s_drop_pend(pl_exec_sink_side_t *s, int i)
{
    free(s->pend[i].add.prompt);
    s->pend[i] = s->pend[--s->n_pend];
}

void pl_exec_sink_side_add(pl_exec_t *x, pl_msg_seq_add_t *m)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    bool known = s_find_pend(s, m->req) >= 0;
    for (int i = 0; i < x->serve->n_slots && !known; i++)
        known = s->bound[i].req == m->req;
    if (known) {
        pl_log_warn_limited("job %u stage %d: request %llu added twice: the second dropped",
                            x->p.job_id, x->p.stage, (unsigned long long)m->req);
        return;
    }
    if (s->n_pend == s->cap_pend) { /* the oldest canceled one goes, else the oldest */
        int out = 0;
        for (int i = 1; i < s->n_pend; i++) {
            const s_pend_t *a = &s->pend[i], *b = &s->pend[out];
            if (a->canceled > b->canceled || (a->canceled == b->canceled && a->order < b->order))
                out = i;
        }
        pl_log_warn_limited("job %u stage %d: %d requests added but not begun: request %llu "
                            "forgotten",
                            x->p.job_id, x->p.stage, s->n_pend,
                            (unsigned long long)s->pend[out].add.req);
        s_drop_pend(s, out);
    }
    s->pend[s->n_pend++] = (s_pend_t){.add = *m, .order = s->next_order++};
    m->prompt = NULL; /* taken */
    m->n_prompt = 0;
}

void pl_exec_sink_side_forget(pl_exec_t *x, uint64_t req)
{
    int i = s_find_pend(x->serve->sink, req);
    if (i >= 0)
        s_drop_pend(x->serve->sink, i);
}

void pl_exec_sink_side_cancel(pl_exec_t *x, uint64_t req)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    int i = s_find_pend(s, req);
    if (i >= 0)
        s->pend[i].canceled = true;
    for (int k = 0; k < x->serve->n_slots; k++)
        if (s->bound[k].req == req)
            s->bound[k].muted = true;
}

void pl_exec_sink_side_end(pl_exec_t *x, int slot)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    if (slot < 0 || slot >= x->serve->n_slots)
        return;
    pl_exec_kv_free(x, slot);
    pl_serve_sink_end(s->sink, slot);
    s->bound[slot] = (s_bound_t){0};
}

/* The slot's request from its SEQ_ADD (pending index i), which is used up. */
static pl_status_t s_begin(pl_exec_t *x, int slot, int i)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    s_pend_t *p = &s->pend[i];
    const pl_msg_seq_add_t *m = &p->add;
    pl_serve_seq_t sq = {.stream = m->stream,
                         .prompt_len = m->n_prompt,
                         .gen = m->gen,
                         .resumed = m->resumed,
                         .earlier = m->prompt + m->n_prompt - m->resumed};
    sq.gen.max_new_tokens += m->resumed; /* counted from the original start */
    pl_status_t st = pl_serve_sink_begin(s->sink, slot, &sq);
    if (st)
        return pl_error_prefix(st, "request %llu: ", (unsigned long long)m->req);
    size_t len, stable = 0;
    pl_serve_sink_text(s->sink, slot, &len, &stable); /* what the replay made: sent before */
    s->bound[slot] = (s_bound_t){.req = m->req, .muted = p->canceled, .sent = stable};
    s_drop_pend(s, i);
    return PL_OK;
}

pl_status_t pl_exec_sink_side_bind(pl_exec_t *x, const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    for (uint32_t e = 0; e < hdr->n_seq; e++) {
        if (seqs[e].pos0 != 0)
            continue;
        int slot = (int)seqs[e].seq;
        uint64_t req = (uint64_t)(uint32_t)seqs[e].token;
        if (req == 0)
            return pl_error(PL_ERR_PROTOCOL, "slot %d: a first entry without its request", slot);
        if (s->bound[slot].req) { /* its notice did not come: stage 0 has moved on */
            pl_log_debug("job %u stage %d: slot %d: request %llu follows %llu", x->p.job_id,
                         x->p.stage, slot, (unsigned long long)req,
                         (unsigned long long)s->bound[slot].req);
            pl_exec_sink_side_end(x, slot);
        }
        int i = s_find_pend(s, req);
        /* the SEQ_ADD travels to this node apart from stage 0's: wait for it, bounded */
        for (double t0 = pl_now(); i < 0; i = s_find_pend(s, req)) {
            if (atomic_load(&x->cancel))
                return pl_error(PL_ERR_CANCELED, "canceled");
            if (pl_now() - t0 > PL_EXEC_SERVE_BIND_S)
                return pl_error(PL_ERR_PROTOCOL,
                                "request %llu began in slot %d, and its "
                                "SEQ_ADD did not come within %.0f s",
                                (unsigned long long)req, slot, PL_EXEC_SERVE_BIND_S);
            pl_status_t st = pl_exec_serve_control(x, 100);
            if (st && st != PL_ERR_BUSY)
                return st;
        }
        pl_status_t st = s_begin(x, slot, i);
        if (st)
            return st;
    }
    return PL_OK;
}

/* The slot's text that became stable since the last SEQ_OUT, NUL bytes left out: malloc'd into
 * *text_p (NULL when none), at most `cap` bytes cut on a character boundary; false when more is
 * left for another SEQ_OUT. */
static bool s_text(pl_exec_sink_side_t *s, int slot, size_t cap, char **text_p)
{
    size_t len, stable = 0;
    const char *t = pl_serve_sink_text(s->sink, slot, &len, &stable);
    s_bound_t *b = &s->bound[slot];
    *text_p = NULL;
    if (!t || stable <= b->sent)
        return true;
    size_t n = stable - b->sent;
    bool all = n <= cap;
    if (!all) {
        n = cap;
        while (n > 0 && ((unsigned char)t[b->sent + n] & 0xC0) == 0x80)
            n--;
    }
    char *out = malloc(n + 1);
    if (!out) /* the text stays unsent: the next SEQ_OUT carries it */
        return true;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t[b->sent + i] != '\0')
            out[k++] = t[b->sent + i];
    out[k] = '\0';
    b->sent += n;
    *text_p = out;
    return all;
}

bool pl_exec_sink_side_wants_logits(const pl_exec_t *x, const pl_act_hdr_t *hdr,
                                    const pl_act_seq_t *seqs)
{
    return pl_serve_sink_wants_logits(x->serve->sink->sink, hdr, seqs);
}

pl_status_t pl_exec_sink_side_sample(pl_exec_t *x, const pl_act_hdr_t *hdr,
                                     const pl_act_seq_t *seqs, const float *logits,
                                     pl_act_hdr_t *out, pl_act_seq_t *out_seqs)
{
    pl_exec_sink_side_t *s = x->serve->sink;
    double t0 = pl_now();
    pl_status_t st = pl_serve_sink_sample(s->sink, hdr, seqs, logits, out, out_seqs, s->outs);
    x->sample_s += pl_now() - t0;
    if (st)
        return st;
    atomic_fetch_add(&x->generated, out->n_seq);
    for (uint32_t i = 0; i < out->n_seq; i++) {
        const pl_serve_out_t *o = &s->outs[i];
        s_bound_t *b = &s->bound[o->slot];
        char *text;
        if (!b->muted) {
            while (!s_text(s, o->slot, PL_MSG_MAX_SEQ_TEXT, &text)) /* a long piece first */
                if ((st = pl_exec_serve_out(x, b->req, NULL, 0, &text, PL_FINISH_NONE)))
                    return st;
            if ((st = pl_exec_serve_out(x, b->req, &o->token, 1, &text, o->finish)))
                return st;
        }
        if (o->finish != PL_FINISH_NONE)
            pl_exec_sink_side_end(x, o->slot);
    }
    return PL_OK;
}

pl_status_t pl_exec_run_serve_last(pl_exec_t *x)
{
    pl_status_t st;
    pl_log_set_job(x->p.job_id);
    if ((st = pl_exec_sink_side_create(x, &x->serve->sink)))
        return st;
    while (!st) {
        pl_act_hdr_t hdr, out;
        const void *payload;
        if (atomic_load(&x->cancel))
            return pl_error(PL_ERR_CANCELED, "canceled");
        /* the SEQ_ADDs so far (they are needed only when their first entries come) */
        while ((st = pl_exec_serve_control(x, 0)) == PL_OK)
            ;
        if (st != PL_ERR_BUSY)
            break;
        st = pl_exec_recv_for(x, &hdr, &payload, 50);
        if (st == PL_ERR_TIMEOUT) {
            st = PL_OK;
            continue;
        }
        if (st)
            break;
        if (hdr.kind == PL_ACT_STOP)
            return pl_exec_release(x);
        if (hdr.kind == PL_ACT_TOKENS) { /* stage 0's notice: these sequences left */
            for (uint32_t i = 0; i < hdr.n_seq; i++)
                if (x->seqs_in[i].flags & PL_ACT_FINISHED)
                    pl_exec_sink_side_end(x, (int)x->seqs_in[i].seq);
            st = pl_exec_release(x);
            continue;
        }
        if (hdr.kind != PL_ACT_HIDDEN) {
            pl_exec_release(x);
            return pl_error(PL_ERR_PROTOCOL, "stage %d expected activations, got kind %u",
                            x->p.stage, hdr.kind);
        }
        const float *in;
        pl_act_payload_f32(&hdr, payload, x->in_f32, &in);
        if (!(st = pl_exec_sink_side_bind(x, &hdr, x->seqs_in)))
            st = pl_exec_forward(x, &hdr, x->seqs_in, in, x->out);
        pl_status_t st2 = pl_exec_release(x);
        if ((st = st ? st : st2) ||
            (st = pl_exec_sink_side_sample(x, &hdr, x->seqs_in, x->out, &out, x->seqs_out)))
            break;
        if (out.n_seq > 0) /* none after an earlier prefill chunk */
            st = pl_exec_send(x, &out, x->seqs_out, NULL);
    }
    return st;
}

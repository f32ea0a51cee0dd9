/* The coordinator's serving side: the routing of the requests the front hands over to a
 * deployment's stages (SEQ_ADD, SEQ_CANCEL), their tokens back (SEQ_OUT) and their ends. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_deploy_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Retry-After of a 429: a slot frees as soon as one request ends. */
#define S_RETRY_AFTER_S 1.0

static void s_end(pl_serve_req_t *r, pl_serve_finish_t finish, int http_status,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void s_end(pl_serve_req_t *r, pl_serve_finish_t finish, int http_status, const char *fmt,
                  ...)
{
    pl_serve_end_t end = {.finish = finish, .http_status = http_status};
    if (http_status == 429)
        end.retry_after_s = S_RETRY_AFTER_S;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(end.message, sizeof(end.message), fmt, ap);
        va_end(ap);
    }
    pl_serve_req_end(r, &end);
}

static void s_send_stage_pair(pl_coord_t *c, pl_coord_job_t *j, pl_msg_t *m, int *stage_field)
{
    /* stage 0 batches it, the last stage samples it; one message when they are the same */
    for (int k = 0; k < (j->n_stages > 1 ? 2 : 1); k++) {
        int s = k == 0 ? 0 : j->n_stages - 1;
        *stage_field = s;
        pl_coord_send_node(c, j->stages[s].node, m);
    }
}

/* SEQ_ADD of live request q at j's current epoch: its prompt, then the tokens it has so far. */
static pl_status_t s_add(pl_coord_t *c, pl_coord_job_t *j, pl_dep_live_t *q)
{
    const pl_serve_in_t *in = pl_serve_req_input(q->req);
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SEQ_ADD);
    int n = in->n_prompt + q->n_tok;
    if (!(m.seq_add.prompt = malloc((size_t)n * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    memcpy(m.seq_add.prompt, in->prompt, (size_t)in->n_prompt * sizeof(int32_t));
    if (q->n_tok)
        memcpy(m.seq_add.prompt + in->n_prompt, q->tok, (size_t)q->n_tok * sizeof(int32_t));
    m.seq_add.n_prompt = n;
    m.seq_add.job = j->id;
    m.seq_add.epoch = j->epoch;
    m.seq_add.req = q->id;
    m.seq_add.resumed = q->n_tok;
    m.seq_add.stream = in->stream;
    m.seq_add.gen = q->gen;
    m.seq_add.gen.max_new_tokens = q->gen.max_new_tokens - q->n_tok; /* what is left */
    s_send_stage_pair(c, j, &m, &m.seq_add.stage);
    pl_msg_clear(&m);
    q->epoch = j->epoch;
    return PL_OK;
}

static void s_cancel_on_stages(pl_coord_t *c, pl_coord_job_t *j, const pl_dep_live_t *q)
{
    if (j->state != PL_JOB_RUNNING || q->epoch != j->epoch)
        return; /* no stage of the current assignment has it */
    pl_msg_t m;
    pl_msg_init(&m, PL_MSG_SEQ_CANCEL);
    m.seq_cancel = (pl_msg_seq_cancel_t){.job = j->id, .epoch = j->epoch, .req = q->id};
    s_send_stage_pair(c, j, &m, &m.seq_cancel.stage);
}

/* Drop live request k of j (its reference released; the end is the caller's). */
static void s_drop(pl_coord_job_t *j, int k)
{
    struct pl_coord_dep *d = j->dep;
    pl_serve_req_unref(&d->live[k].req);
    free(d->live[k].tok);
    d->live[k] = d->live[--d->n_live];
}

static int s_find_live(const struct pl_coord_dep *d, uint64_t id)
{
    for (int k = 0; k < d->n_live; k++)
        if (d->live[k].id == id)
            return k;
    return -1;
}

/* A request id of d within 1..INT32_MAX that no live request holds. */
static uint32_t s_next_id(struct pl_coord_dep *d)
{
    for (;;) {
        if (d->next_req < 1 || d->next_req > INT32_MAX)
            d->next_req = 1;
        uint32_t id = d->next_req++;
        if (s_find_live(d, id) < 0)
            return id;
    }
}

/* Route one request: refused with the HTTP status that says why, or admitted and sent; for_job
 * (0: a client's) is the batch job whose prompt for_seq it runs. */
static void s_route(pl_coord_t *c, pl_serve_req_t *r, uint32_t for_job, int for_seq)
{
    const pl_serve_in_t *in = pl_serve_req_input(r);
    pl_coord_job_t *j = pl_coord_deploy_find(c, in->deployment);
    if (!j) {
        pl_log_debug("request %llu: no deployment '%s'", (unsigned long long)pl_serve_req_id(r),
                     in->deployment);
        s_end(r, PL_SERVE_REFUSED, 404, "no deployment named '%s'", in->deployment);
        pl_coord_dep_count(c, NULL, in->deployment, PL_DEP_OUT_REFUSED_404);
        return;
    }
    struct pl_coord_dep *d = j->dep;
    const char *name = j->spec.serve.name;
    if (pl_serve_req_canceled(r)) {
        s_end(r, PL_SERVE_CANCELED, 0, NULL);
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_CANCELED);
        return;
    }
    if (j->state != PL_JOB_RUNNING) {
        s_end(r, PL_SERVE_REFUSED, 503, "deployment '%s' is not ready (%s)", name,
              pl_coord_dep_state(j));
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_REFUSED_503);
        return;
    }
    pl_job_gen_t gen = in->gen;
    gen.max_new_tokens = PL_MIN(gen.max_new_tokens, j->spec.serve.max_tokens);
    const char *bad = NULL;
    if (in->n_prompt < 1 || in->n_prompt > PL_MSG_MAX_SEQ_PROMPT)
        bad = "the prompt has no tokens or too many";
    else if (gen.max_new_tokens < 1)
        bad = "max_tokens must be at least 1";
    else if (gen.min_new_tokens < 0 || gen.min_new_tokens > gen.max_new_tokens)
        bad = "min_tokens is more than max_tokens";
    for (int i = 0; !bad && i < in->n_prompt; i++)
        if (in->prompt[i] < 0 || in->prompt[i] >= j->vocab)
            bad = "a prompt token id is outside the vocabulary";
    if (bad) {
        s_end(r, PL_SERVE_REFUSED, 400, "%s", bad);
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_REFUSED_400);
        return;
    }
    if (in->n_prompt + gen.max_new_tokens > j->max_ctx) {
        s_end(r, PL_SERVE_REFUSED, 400,
              "the prompt (%d tokens) and max_tokens (%d) exceed the context of %d tokens",
              in->n_prompt, gen.max_new_tokens, j->max_ctx);
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_REFUSED_400);
        return;
    }
    if (d->n_live >= j->n_seqs + j->spec.serve.max_queue) {
        s_end(r, PL_SERVE_REFUSED, 429,
              "deployment '%s' is full: %d requests in flight (%d KV slots, queue of %d)", name,
              d->n_live, j->n_seqs, j->spec.serve.max_queue);
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_REFUSED_429);
        return;
    }
    if (d->n_live == d->cap_live) {
        int cap = d->cap_live ? 2 * d->cap_live : 16;
        pl_dep_live_t *nl = realloc(d->live, (size_t)cap * sizeof(*nl));
        if (!nl) {
            s_end(r, PL_SERVE_FAILED, 503, "coordinator out of memory");
            pl_coord_dep_count(c, j, name, PL_DEP_OUT_FAILED);
            return;
        }
        d->live = nl;
        d->cap_live = cap;
    }
    pl_dep_live_t *q = &d->live[d->n_live];
    *q = (pl_dep_live_t){.req = r,
                         .id = s_next_id(d),
                         .gen = gen,
                         .t_add = pl_now(),
                         .for_job = for_job,
                         .for_seq = for_seq};
    q->t_last = q->t_add;
    if (s_add(c, j, q)) {
        s_end(r, PL_SERVE_FAILED, 503, "%s", pl_error_msg());
        pl_coord_dep_count(c, j, name, PL_DEP_OUT_FAILED);
        return;
    }
    pl_serve_req_ref(r);
    d->n_live++;
    pl_log_debug("deployment %s: request %llu as %u, %d prompt tokens, at most %d new",
                 name, (unsigned long long)pl_serve_req_id(r), q->id, in->n_prompt,
                 gen.max_new_tokens);
}

void pl_coord_deploy_check_canceled(pl_coord_t *c)
{
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        for (int k = 0; j->dep && k < j->dep->n_live;) {
            pl_dep_live_t *q = &j->dep->live[k];
            if (!pl_serve_req_canceled(q->req)) {
                k++;
                continue;
            }
            s_cancel_on_stages(c, j, q);
            s_end(q->req, PL_SERVE_CANCELED, 0, NULL);
            pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_CANCELED);
            pl_log_debug("deployment %s: request %u canceled by its client", j->spec.serve.name,
                         q->id);
            s_drop(j, k);
        }
    }
}

void pl_coord_deploy_on_hub(pl_coord_t *c)
{
    pl_serve_req_t *r;
    while ((r = pl_serve_hub_take(c->hub))) {
        s_route(c, r, 0, 0);
        pl_serve_req_unref(&r);
    }
    pl_coord_deploy_check_canceled(c);
}

void pl_coord_deploy_route(pl_coord_t *c, pl_serve_req_t *r, uint32_t for_job, int for_seq)
{
    s_route(c, r, for_job, for_seq);
}

void pl_coord_deploy_readd(pl_coord_t *c, pl_coord_job_t *j)
{
    struct pl_coord_dep *d = j->dep;
    for (int k = 0; d && j->state == PL_JOB_RUNNING && k < d->n_live;) {
        pl_dep_live_t *q = &d->live[k];
        if (q->epoch == j->epoch) {
            k++;
            continue;
        }
        if (q->n_tok >= q->gen.max_new_tokens) { /* its last SEQ_OUT was lost with the stage */
            s_end(q->req, PL_SERVE_LENGTH, 0, NULL);
            pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_LENGTH);
            s_drop(j, k);
            continue;
        }
        if (s_add(c, j, q)) {
            s_end(q->req, PL_SERVE_FAILED, 503, "%s", pl_error_msg());
            pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_FAILED);
            s_drop(j, k);
            continue;
        }
        pl_log_info("deployment %s: request %u re-added at epoch %u with %d tokens so far",
                    j->spec.serve.name, q->id, j->epoch, q->n_tok);
        k++;
    }
}

void pl_coord_deploy_end_all(pl_coord_t *c, pl_coord_job_t *j, const pl_serve_end_t *end)
{
    struct pl_coord_dep *d = j->dep;
    while (d && d->n_live > 0) {
        pl_serve_req_end(d->live[0].req, end);
        pl_coord_dep_count(c, j, j->spec.serve.name,
                           end->finish == PL_SERVE_CANCELED ? PL_DEP_OUT_CANCELED
                                                            : PL_DEP_OUT_FAILED);
        s_drop(j, 0);
    }
}

/* Keep the tokens of q (what a re-add on a new assignment prefills); false: out of memory. */
static bool s_keep_tokens(pl_dep_live_t *q, const int32_t *tok, int n)
{
    if (q->n_tok + n > q->cap_tok) {
        int cap = PL_MAX(q->cap_tok ? 2 * q->cap_tok : 32, q->n_tok + n);
        int32_t *nt = realloc(q->tok, (size_t)cap * sizeof(int32_t));
        if (!nt)
            return false;
        q->tok = nt;
        q->cap_tok = cap;
    }
    memcpy(q->tok + q->n_tok, tok, (size_t)n * sizeof(int32_t));
    q->n_tok += n;
    return true;
}

void pl_coord_deploy_on_seq_out(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    const pl_msg_seq_out_t *o = &m->seq_out;
    char node[PL_CFG_NAME_MAX + 1];
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    pl_coord_job_t *j = pl_coord_find_job(c, o->job);
    int ni = pl_coord_find_node(c, node);
    /* stage 0 answers a SEQ_ADD it could not queue with an empty last SEQ_OUT (protocol.md §6) */
    bool refusal = j && j->n_stages > 1 && o->stage == 0 && o->n_tokens == 0 &&
                   o->finish != PL_FINISH_NONE;
    if (!j || !j->dep || j->state != PL_JOB_RUNNING || o->epoch != j->epoch ||
        (o->stage != j->n_stages - 1 && !refusal)) {
        pl_log_debug("SEQ_OUT for job %u stage %d epoch %u from %s: not a running deployment's "
                     "last stage", o->job, o->stage, o->epoch, node);
        return;
    }
    if (j->stages[o->stage].node != ni) {
        char what[96];
        snprintf(what, sizeof(what), "SEQ_OUT for job %u stage %d, assigned to another node",
                 o->job, o->stage);
        pl_coord_auth_stage_refused(c, from, what);
        return;
    }
    struct pl_coord_dep *d = j->dep;
    int k = s_find_live(d, o->req);
    if (k < 0 || d->live[k].epoch != j->epoch) {
        /* canceled (or ended) here already: a late SEQ_OUT is expected, not an error */
        pl_log_debug("deployment %s: SEQ_OUT for request %llu, which is not live",
                     j->spec.serve.name, (unsigned long long)o->req);
        return;
    }
    pl_dep_live_t *q = &d->live[k];
    if (refusal) {
        pl_log_warn_limited("deployment %s: stage 0 on %s could not queue request %u",
                            j->spec.serve.name, node, q->id);
        s_cancel_on_stages(c, j, q); /* the last stage drops its unbound SEQ_ADD */
        s_end(q->req, PL_SERVE_FAILED, 503, "deployment '%s' could not queue the request",
              j->spec.serve.name);
        pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_FAILED);
        s_drop(j, k);
        return;
    }
    const char *why = NULL;
    if (q->n_tok + o->n_tokens > q->gen.max_new_tokens)
        why = "more tokens than max_tokens";
    for (int t = 0; !why && t < o->n_tokens; t++)
        if (o->tokens[t] < 0 || o->tokens[t] >= j->vocab)
            why = "a token id outside the vocabulary";
    if (why) {
        c->refused_stage_msgs++;
        pl_log_warn_limited("deployment %s: SEQ_OUT from %s for request %u refused: %s",
                            j->spec.serve.name, node, q->id, why);
        s_cancel_on_stages(c, j, q);
        s_end(q->req, PL_SERVE_FAILED, 500, "the deployment's last stage sent %s", why);
        pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_FAILED);
        s_drop(j, k);
        return;
    }
    double now = pl_now();
    if (o->n_tokens > 0) {
        if (q->n_tok == 0)
            pl_metrics_observe(c->metrics.serve_ttft, j->spec.serve.name, now - q->t_add);
        else
            pl_metrics_observe(c->metrics.serve_itl, j->spec.serve.name,
                               (now - q->t_last) / o->n_tokens);
        q->t_last = now;
    }
    const char *text = o->text ? o->text : "";
    if (!s_keep_tokens(q, o->tokens, o->n_tokens) ||
        pl_serve_req_push(q->req, o->tokens, o->n_tokens, text, strlen(text))) {
        s_cancel_on_stages(c, j, q);
        s_end(q->req, PL_SERVE_FAILED, 503, "coordinator out of memory");
        pl_coord_dep_count(c, j, j->spec.serve.name, PL_DEP_OUT_FAILED);
        s_drop(j, k);
        return;
    }
    d->output_tokens += o->n_tokens;
    if (o->finish == PL_FINISH_NONE && q->n_tok < q->gen.max_new_tokens)
        return;
    bool length = o->finish == PL_FINISH_LENGTH || o->finish == PL_FINISH_NONE;
    if (q->for_job) /* a batch job's prompt: its result says eos, stop or length */
        pl_coord_bound_finished(c, q->for_job, q->for_seq,
                                o->finish == PL_FINISH_NONE ? PL_FINISH_LENGTH : o->finish);
    s_end(q->req, length ? PL_SERVE_LENGTH : PL_SERVE_STOP, 0, NULL);
    pl_coord_dep_count(c, j, j->spec.serve.name, length ? PL_DEP_OUT_LENGTH : PL_DEP_OUT_STOP);
    s_drop(j, k);
}

/* A batch job that names a deployment (a job file's `deployment:`): its prompts run as requests
 * on the deployment's stages, made and read here as the HTTP front would, and their tokens,
 * text and finishes become the job's results. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_deploy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_coord_bound_free(pl_coord_job_t *j)
{
    struct pl_coord_bound *b = j->bound;
    if (!b)
        return;
    for (int s = 0; s < j->n_seqs; s++)
        if (b->req[s]) {
            pl_serve_req_cancel(b->req[s]); /* the deployment's loop frees its slots */
            pl_serve_req_unref(&b->req[s]);
        }
    free(b->req);
    free(b->finish);
    free(b);
    j->bound = NULL;
    if (j->state != PL_JOB_DONE) { /* the results of the prompts collected so far go too */
        pl_msg_results_free(j->results, j->n_seqs);
        j->results = NULL;
        j->n_results = 0;
    }
}

void pl_coord_bound_finished(pl_coord_t *c, uint32_t job, int seq, pl_finish_t finish)
{
    pl_coord_job_t *j = pl_coord_find_job(c, job);
    if (j && j->bound && seq >= 0 && seq < j->n_seqs)
        j->bound->finish[seq] = finish;
}

static pl_status_t s_bound_new(pl_coord_job_t *j)
{
    struct pl_coord_bound *b = calloc(1, sizeof(*b));
    if (!b || !(b->req = calloc((size_t)j->n_seqs, sizeof(*b->req))) ||
        !(b->finish = calloc((size_t)j->n_seqs, sizeof(*b->finish)))) {
        if (b)
            free(b->req);
        free(b);
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    }
    j->bound = b;
    return PL_OK;
}

/* Prompt s of j as a request on deployment d (routed at once; a refusal ends it). */
static pl_status_t s_send(pl_coord_t *c, pl_coord_job_t *j, int s)
{
    pl_serve_in_t in = {.n_prompt = j->spec.prompt_len[s], .gen = j->spec.gen,
                        .stream = (uint32_t)s}; /* sampled as prompt s of the job */
    snprintf(in.deployment, sizeof(in.deployment), "%s", j->spec.deployment);
    if (!(in.prompt = malloc((size_t)in.n_prompt * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    memcpy(in.prompt, j->spec.prompts[s], (size_t)in.n_prompt * sizeof(int32_t));
    pl_serve_req_t *r;
    pl_status_t st = pl_serve_req_create(&in, &r); /* takes in.prompt */
    free(in.prompt);
    if (st)
        return st;
    j->bound->req[s] = r;
    j->bound->n_out++;
    pl_coord_deploy_route(c, r, j->id, s);
    return PL_OK;
}

/* Request s has ended: its tokens and text into result s. False (j failed) when it did not end
 * with a completion. */
static bool s_collect(pl_coord_t *c, pl_coord_job_t *j, int s, const pl_serve_end_t *end)
{
    struct pl_coord_bound *b = j->bound;
    pl_msg_result_t *res = &j->results[s];
    if (end->finish != PL_SERVE_STOP && end->finish != PL_SERVE_LENGTH) {
        pl_coord_job_fail(c, j, "prompt %d on deployment '%s': %s%s%s", s, j->spec.deployment,
                          end->finish == PL_SERVE_CANCELED ? "canceled" : "refused or failed",
                          end->message[0] ? ": " : "", end->message);
        return false;
    }
    size_t at = 0, len;
    int n;
    pl_serve_end_t e2;
    char *text = NULL;
    if (pl_serve_req_tokens(b->req[s], &res->tokens, &res->n_tokens) ||
        (j->spec.text && pl_serve_req_wait(b->req[s], 0, &at, &text, &len, &n, &e2))) {
        pl_coord_job_fail(c, j, "coordinator out of memory");
        return false;
    }
    if (j->spec.text)
        res->text = text ? text : strdup("");
    else
        free(text);
    res->seq = s;
    res->finish = b->finish[s] != PL_FINISH_NONE       ? b->finish[s]
                  : end->finish == PL_SERVE_LENGTH ? PL_FINISH_LENGTH
                                                   : PL_FINISH_STOP;
    j->generated += res->n_tokens;
    pl_serve_req_unref(&b->req[s]);
    b->n_out--;
    b->n_done++;
    return true;
}

/* One turn of batch job j on its deployment. */
static void s_turn(pl_coord_t *c, pl_coord_job_t *j)
{
    pl_coord_job_t *d = pl_coord_deploy_find(c, j->spec.deployment);
    if (!d) {
        pl_coord_job_fail(c, j, "deployment '%s' is no longer deployed", j->spec.deployment);
        return;
    }
    if (!j->bound && (s_bound_new(j) || !(j->results = calloc((size_t)j->n_seqs,
                                                              sizeof(*j->results))))) {
        pl_coord_job_fail(c, j, "coordinator out of memory");
        return;
    }
    struct pl_coord_bound *b = j->bound;
    if (j->state == PL_JOB_QUEUED) {
        if (d->state != PL_JOB_RUNNING) {
            snprintf(j->error, sizeof(j->error), "waiting for deployment '%s' (%s)",
                     j->spec.deployment, pl_coord_dep_state(d));
            return;
        }
        j->error[0] = '\0';
        j->state = PL_JOB_RUNNING;
        j->t_start = j->t_run = pl_now();
        pl_coord_event(j, "running", "%d prompt(s) as requests on deployment '%s' (job %u)",
                       j->n_seqs, j->spec.deployment, d->id);
        pl_coord_persist(c, j);
    }
    /* keep the deployment's slots full and half its queue free for other clients */
    int room = d->n_seqs + d->spec.serve.max_queue / 2;
    while (d->state == PL_JOB_RUNNING && b->next < j->n_seqs && d->dep->n_live < room) {
        if (s_send(c, j, b->next)) {
            pl_coord_job_fail(c, j, "%s", pl_error_msg());
            return;
        }
        b->next++;
    }
    for (int s = 0; s < b->next && b->n_out > 0; s++) {
        if (!b->req[s])
            continue;
        size_t at = SIZE_MAX, len;
        int n;
        char *text = NULL;
        pl_serve_end_t end;
        if (pl_serve_req_wait(b->req[s], 0, &at, &text, &len, &n, &end) == PL_OK &&
            end.finish != PL_SERVE_RUNNING && !s_collect(c, j, s, &end))
            return;
        free(text);
    }
    if (b->n_done == j->n_seqs) {
        j->n_results = j->n_seqs; /* complete: the job's results from now on */
        pl_coord_job_done(c, j);
    }
}

void pl_coord_bound_tick(pl_coord_t *c)
{
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (!j->spec.deployment[0])
            continue;
        if (pl_coord_job_terminal(j)) /* canceled or failed: its requests leave the stages */
            pl_coord_bound_free(j);
        else
            s_turn(c, j);
    }
}

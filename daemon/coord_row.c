/* A job's stored row read back: the one decoder of what the state database holds, every field
 * checked (the file is outside input), and the names of job states as rows and replies spell them.
 */
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *pl_job_state_name(pl_job_state_t s)
{
    static const char *names[] = {"queued", "loading", "running", "done", "failed", "canceled"};
    return names[s];
}

/* A monotonic time from a stored wall-clock time (elapsed times survive a restart). */
static double s_mono_from_wall(double wall)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return wall > 0 ? pl_now() - ((double)t.tv_sec + t.tv_nsec * 1e-9 - wall) : 0;
}

static pl_status_t s_json(const char *text, const char *field, json_t **out)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!v)
        return pl_error(PL_ERR_INVALID, "field '%s': not JSON: %s", field, e.text);
    *out = v;
    return PL_OK;
}

pl_status_t pl_coord_job_from_row(const pl_coord_row_t *r, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = calloc(1, sizeof(*j));
    json_t *v = NULL;
    pl_status_t st = PL_OK;
    int state = -1;

    if (!j)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    pl_job_spec_init(&j->spec);
    for (int s = PL_JOB_QUEUED; s <= PL_JOB_CANCELED && r->state; s++)
        if (strcmp(r->state, pl_job_state_name((pl_job_state_t)s)) == 0)
            state = s;
    if (r->id < 1 || r->id > UINT32_MAX)
        st = pl_error(PL_ERR_INVALID, "field 'id': %lld is not in 1..%u", (long long)r->id,
                      UINT32_MAX);
    else if (state < 0)
        st = pl_error(PL_ERR_INVALID, "field 'state': '%.32s' is not a job state",
                      r->state ? r->state : "(null)");
    else if (r->n_seqs < 0 || r->n_seqs > PL_JOB_MAX_SEQS || r->n_layers < 0 ||
             r->n_layers > 4096 || r->prompt_tokens < 0 || r->generated < 0 || r->epoch < 0 ||
             r->epoch > UINT32_MAX)
        st = pl_error(PL_ERR_INVALID, "fields n_seqs / n_layers / prompt_tokens / generated / "
                                      "epoch: a value out of range");
    if (st)
        goto err;
    /* a spec gone missing (the specs file lost or replaced): the job cannot run again, but its
     * id and what it produced stay; without a spec there is nothing to check results against */
    j->spec_missing = !r->spec;
    if (r->spec &&
        ((st = s_json(r->spec, "spec", &v)) || (st = pl_job_spec_decode(v, &j->spec)))) {
        pl_error_prefix(st, "spec: ");
        goto err;
    }
    json_decref(v);
    v = NULL;
    if (r->plan && (st = s_json(r->plan, "plan", &j->plan)))
        goto err;
    if (r->results) {
        if ((st = s_json(r->results, "results", &v)) ||
            (st = pl_msg_results_decode(v, &j->results, &j->n_results)))
            goto err;
        if (j->n_results != r->n_seqs) {
            st = pl_error(PL_ERR_INVALID, "field 'results': %d results for %lld sequences",
                          j->n_results, (long long)r->n_seqs);
            goto err;
        }
    } else if (state == PL_JOB_DONE && !j->spec.train && r->spec) { /* training: no results */
        st = pl_error(PL_ERR_INVALID, "field 'results': a done job without results");
        goto err;
    }
    json_decref(v);
    v = NULL;
    if (r->events && ((st = s_json(r->events, "events", &v)) ||
                      (st = pl_coord_events_from_json(v, j))))
        goto err;
    json_decref(v);
    v = NULL;
    if (r->train && j->spec.train && /* a training job's progress (coord_train_row.c) */
        ((st = s_json(r->train, "train", &v)) || (st = pl_coord_train_from_row(v, j))))
        goto err;
    json_decref(v);
    j->id = (uint32_t)r->id;
    j->state = (pl_job_state_t)state;
    snprintf(j->error, sizeof(j->error), "%s", r->error ? r->error : "");
    if (j->spec_missing && state != PL_JOB_DONE && state != PL_JOB_CANCELED) {
        j->state = PL_JOB_FAILED;
        snprintf(j->error, sizeof(j->error), "after a coordinator restart: the job's spec is "
                 "missing from the specs file: it cannot run");
    }
    j->generated = r->generated;
    j->n_seqs = (int)r->n_seqs;
    j->n_layers = (int)r->n_layers;
    j->prompt_tokens = (uint64_t)r->prompt_tokens;
    j->epoch = (uint32_t)r->epoch;
    j->t_submit = s_mono_from_wall(r->submitted_at);
    j->t_end = s_mono_from_wall(r->ended_at);
    if (j->state == PL_JOB_FAILED && j->t_end == 0)
        j->t_end = pl_now();
    j->stored = true; /* its row holds its spec */
    *job_p = j;
    return PL_OK;
err: /* nothing else is allocated yet */
    json_decref(v);
    pl_coord_train_free(j);
    json_decref(j->plan);
    pl_msg_results_free(j->results, j->n_results);
    pl_job_spec_clear(&j->spec);
    free(j);
    return st;
}

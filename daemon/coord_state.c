/* The coordinator's jobs to their stored rows at every state change, and back at start (through
 * coord_row.c): unfinished jobs are queued again, ids and epochs continue. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_specs.h"
#include "daemon/coord_train.h"
#include "daemon/coord_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double s_wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double s_wall_from_mono(double mono)
{
    return mono > 0 ? s_wall() - (pl_now() - mono) : 0;
}

/* The spec's JSON for the row's first save: the bytes admission measured, or encoded now (a job
 * made without a SUBMIT, or one whose row went missing). */
static pl_status_t s_spec_json(pl_coord_job_t *j, char **json_p)
{
    json_t *spec;
    pl_status_t st;
    if (j->spec_json) {
        *json_p = j->spec_json; /* taken */
        j->spec_json = NULL;
        return PL_OK;
    }
    if ((st = pl_job_spec_encode(&j->spec, &spec)))
        return st;
    char *s = json_dumps(spec, JSON_COMPACT);
    json_decref(spec);
    if (!s)
        return pl_error(PL_ERR_NOMEM, "job %u: cannot encode its spec for the state db", j->id);
    *json_p = s;
    return PL_OK;
}

/* Saves the job's row: the spec the first time only (it never changes), the state columns at
 * every save. */
pl_status_t pl_coord_persist(pl_coord_t *c, pl_coord_job_t *j)
{
    json_t *res = NULL, *ev = NULL, *tr = NULL;
    char *spec_s = NULL, *plan_s = NULL, *res_s = NULL, *ev_s = NULL, *tr_s = NULL;
    pl_status_t st;

    if (!c->store)
        return PL_OK;
    /* a spec the intake stored already: the first save adds the job row beside it; a row that
     * went missing (the writer found none to update) is written whole */
    bool add = !j->stored && j->spec_saved && !j->row_lost;
    j->row_lost = false;
    if (!j->stored && !add && (st = s_spec_json(j, &spec_s)))
        goto out;
    if (j->n_results && (st = pl_msg_results_encode(j->results, j->n_results, &res)))
        goto out;
    plan_s = j->plan ? json_dumps(j->plan, JSON_COMPACT) : NULL;
    res_s = res ? json_dumps(res, JSON_COMPACT) : NULL;
    ev = pl_coord_events_json(j);
    ev_s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    tr = j->train ? pl_coord_train_row(j) : NULL; /* coord_train_row.c */
    tr_s = tr ? json_dumps(tr, JSON_COMPACT) : NULL;
    if ((j->plan && !plan_s) || (res && !res_s) || !ev_s || (j->train && !tr_s)) {
        st = pl_error(PL_ERR_NOMEM, "job %u: cannot encode it for the state db", j->id);
        goto out;
    }
    pl_coord_row_t r = {.id = j->id,
                        .state = pl_job_state_name(j->state),
                        .spec = spec_s,
                        .plan = plan_s,
                        .results = res_s,
                        .error = j->error,
                        .generated = j->generated,
                        .n_seqs = j->n_seqs,
                        .n_layers = j->n_layers,
                        .prompt_tokens = (int64_t)j->prompt_tokens,
                        .epoch = j->epoch,
                        .submitted_at = s_wall_from_mono(j->t_submit),
                        .ended_at = s_wall_from_mono(j->t_end),
                        .events = ev_s,
                        .train = tr_s};
    if (c->writer) { /* queued: the loop goes on; what depends on it is held (coord_hold.c) */
        uint64_t seq = pl_coord_writer_row(c->writer, add ? PL_COORD_W_ADD : PL_COORD_W_PUT, &r,
                                           c->next_job, c->next_epoch);
        st = seq ? PL_OK : pl_error(PL_ERR_NOMEM, "out of memory");
        if (!st)
            j->stored = true;
        j->row_seq = seq; /* 0 when not queued: nothing of it to promise */
        goto out;
    }
    st = add ? pl_coord_store_add(c->store, &r, c->next_job, c->next_epoch)
             : pl_coord_store_put(c->store, &r, c->next_job, c->next_epoch);
    if (st == PL_ERR_NOT_FOUND && (j->stored || add)) { /* the row went missing: write it whole */
        j->stored = false;
        if (!(st = s_spec_json(j, &spec_s))) {
            r.spec = spec_s;
            st = pl_coord_store_put(c->store, &r, c->next_job, c->next_epoch);
        }
    }
    if (!st)
        j->stored = true;
out:
    if (st)
        pl_log_error("job %u: not saved: %s", j->id, pl_error_msg());
    json_decref(res);
    free(spec_s);
    free(plan_s);
    free(res_s);
    json_decref(ev);
    free(ev_s);
    json_decref(tr);
    free(tr_s);
    return st;
}

static pl_status_t s_queued(uint64_t seq, uint64_t *seq_p)
{
    if (seq_p)
        *seq_p = seq;
    return seq ? PL_OK : pl_error(PL_ERR_NOMEM, "state db: out of memory");
}

pl_status_t pl_coord_save_delete(pl_coord_t *c, int64_t id, uint64_t *seq_p)
{
    if (seq_p)
        *seq_p = 0;
    if (c->writer)
        return s_queued(pl_coord_writer_delete(c->writer, PL_COORD_W_DELETE, id), seq_p);
    return c->store ? pl_coord_store_delete(c->store, id) : PL_OK;
}

pl_status_t pl_coord_save_progress(pl_coord_t *c, const pl_coord_chunk_t *ch, int n)
{
    if (c->writer)
        return n > 0 ? s_queued(pl_coord_writer_progress(c->writer, ch, n), NULL) : PL_OK;
    return c->store ? pl_coord_store_progress_put(c->store, ch, n) : PL_OK;
}

pl_status_t pl_coord_save_progress_delete(pl_coord_t *c, int64_t job)
{
    if (c->writer)
        return s_queued(pl_coord_writer_delete(c->writer, PL_COORD_W_PROGRESS_DELETE, job), NULL);
    return c->store ? pl_coord_store_progress_delete(c->store, job) : PL_OK;
}

pl_status_t pl_coord_save_drain(pl_coord_t *c, const char *node, bool drained, uint64_t *seq_p)
{
    if (seq_p)
        *seq_p = 0;
    if (c->writer)
        return s_queued(pl_coord_writer_drain(c->writer, node, drained), seq_p);
    return c->store ? pl_coord_store_drain(c->store, node, drained) : PL_OK;
}

/* A write the writer could not do: the answers that promised it hear why, in their place
 * (coord_hold.c); then what the loop did when a synchronous one failed. */
static void s_on_fail(void *user, const pl_coord_wfail_t *f)
{
    pl_coord_t *c = user;
    pl_coord_job_t *j = f->job ? pl_coord_find_job(c, f->job) : NULL;
    char what[160], msg[PL_MSG_TEXT_MAX + 1];
    pl_coord_writer_what(f, what, sizeof(what));
    snprintf(msg, sizeof(msg), "%s not saved: %s", what, f->why);
    pl_log_error("%s", msg);
    switch (f->kind) {
    case PL_COORD_W_ADD: /* a new job: its client hears the refusal instead of "queued", and
                          * the job is gone, as one refused at once is */
        pl_coord_hold_failed(c, f->seq, f->code, msg);
        if (j)
            pl_coord_job_forget(c, j);
        break;
    case PL_COORD_W_PUT:
        if (j && f->code == PL_ERR_NOT_FOUND) { /* the row went missing: written whole */
            j->stored = false;
            j->row_lost = true;
            if (pl_coord_persist(c, j) == PL_OK && j->row_seq > f->seq) {
                pl_coord_hold_moved(c, f->seq, j->row_seq); /* what it promised, the new write */
                break;
            }
        }
        /* the state db keeps the row as it was last saved; the job here moved on (a KILL's
         * stages are canceled already and cannot be started again): its events say so, and
         * so does the answer that promised it */
        uint32_t epoch = pl_coord_hold_failed(c, f->seq, f->code, msg);
        if (j)
            pl_coord_event(j, "not saved",
                           "%s: a coordinator restart would find it as it was last saved", f->why);
        /* the row with a new epoch: its ASSIGNs are not sent (above), so the job plans again,
         * at a new epoch (the counter here never goes back) */
        if (j && epoch && epoch == j->epoch && j->state == PL_JOB_LOADING) {
            char why[PL_MSG_TEXT_MAX + 1];
            snprintf(why, sizeof(why), "its epoch %u was not saved (%s)", epoch, f->why);
            pl_coord_job_interrupt(c, j, why);
        }
        break;
    case PL_COORD_W_DRAIN: /* the mark back to what the disk keeps; the answer is the refusal */
        pl_coord_hold_failed(c, f->seq, f->code, msg);
        pl_coord_drain_failed(c, f->seq);
        break;
    default: /* a deletion's spec drop is not done (the row keeps its spec); progress: a
              * resume starts from what was saved before */
        pl_coord_hold_failed(c, f->seq, f->code, msg);
    }
}

void pl_coord_saved(pl_coord_t *c)
{
    if (!c->writer)
        return;
    c->committed = pl_coord_writer_collect(c->writer, s_on_fail, c);
    pl_coord_drain_saved(c);
    pl_coord_hold_release(c);
}

pl_status_t pl_coord_add_job(pl_coord_t *c, pl_coord_job_t *j)
{
    if (c->n_jobs == c->cap_jobs) {
        int cap = c->cap_jobs ? 2 * c->cap_jobs : 16;
        pl_coord_job_t **nj = realloc(c->jobs, (size_t)cap * sizeof(*nj));
        if (!nj)
            return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
        c->jobs = nj;
        c->cap_jobs = cap;
    }
    c->jobs[c->n_jobs++] = j;
    return PL_OK;
}

/* A stored job that was not finished: validated again against its model (which may have gone),
 * and queued; one that had started resumes from its stored progress (pl_coord_progress_restore),
 * which gives the same output as an undisturbed run. */
static pl_status_t s_requeue(pl_coord_t *c, pl_coord_job_t **jp)
{
    pl_coord_job_t *old = *jp, *j = NULL;
    pl_job_spec_t spec = old->spec;
    pl_job_spec_init(&old->spec);
    pl_status_t st = pl_coord_job_new(&spec, &j);
    if (st) { /* keep it, failed, so its id and the reason stay visible */
        snprintf(old->error, sizeof(old->error), "after a coordinator restart: %s", pl_error_msg());
        old->state = PL_JOB_FAILED;
        old->t_end = pl_now();
        pl_log_warn("job %u failed: %s", old->id, old->error);
        pl_coord_persist(c, old);
        return PL_OK;
    }
    j->id = old->id;
    j->epoch = old->epoch;
    j->stored = old->stored; /* the same spec, in its row already */
    memcpy(j->events, old->events, sizeof(j->events));
    j->n_events = old->n_events;
    j->events_dropped = old->events_dropped;
    j->t_submit = old->t_submit;
    j->t_queued = pl_now();
    j->state = PL_JOB_QUEUED;
    char from[64] = "";
    if (old->state != PL_JOB_QUEUED && old->train && /* from its last whole checkpoint */
        pl_coord_train_rewind(j, &old->train, from, sizeof(from))) {
        snprintf(old->error, sizeof(old->error), "after a coordinator restart: %s", pl_error_msg());
        old->state = PL_JOB_FAILED;
        old->t_end = pl_now();
        pl_log_warn("job %u failed: %s", old->id, old->error);
        old->spec = j->spec; /* back, so that the failed row keeps it */
        pl_job_spec_init(&j->spec);
        pl_coord_job_free(j);
        pl_coord_persist(c, old);
        return PL_OK;
    }
    if (old->state != PL_JOB_QUEUED && j->train) {
        if (!from[0]) /* a row from before training progress was kept: from its start */
            snprintf(from, sizeof(from), "step %d", j->train->run_from);
        j->resuming = true;
        j->n_resumes = 1;
        j->t_lost = j->t_queued;
        snprintf(j->lost_why, sizeof(j->lost_why), "a coordinator restart (it was %s)",
                 pl_job_state_name(old->state));
        snprintf(j->error, sizeof(j->error), "resuming from %s after %s", from, j->lost_why);
        pl_log_info("job %u: was %s, resumes from %s after the restart", j->id,
                    pl_job_state_name(old->state), from);
        pl_coord_event(j, "requeued", "was %s; %s %s after a coordinator restart",
                       pl_job_state_name(old->state),
                       strncmp(from, "checkpoint-", 11) ? "no whole checkpoint yet: starts "
                                                          "again from"
                                                        : "resumes from",
                       from);
    } else if (old->state != PL_JOB_QUEUED) {
        j->resuming = true;
        j->n_resumes = 1;
        j->t_lost = j->t_queued;
        snprintf(j->lost_why, sizeof(j->lost_why), "the coordinator restarted while it was %s",
                 pl_job_state_name(old->state));
        pl_log_info("job %u: was %s, queued again after the restart", j->id,
                    pl_job_state_name(old->state));
        pl_coord_event(j, "requeued", "was %s; queued again after a coordinator restart",
                       pl_job_state_name(old->state));
    }
    pl_coord_job_free(old);
    *jp = j;
    pl_coord_persist(c, j);
    return PL_OK;
}

typedef struct {
    pl_coord_t *c;
    const char *specs; /* the specs file's path, for messages */
} s_restore_t;

static pl_status_t s_on_row(void *user, const pl_coord_row_t *r)
{
    s_restore_t *rs = user;
    pl_coord_t *c = rs->c;
    pl_coord_job_t *j;
    pl_status_t st = pl_coord_job_from_row(r, &j);
    if (st)
        return pl_error_prefix(st, "state db %s: job %lld: ", pl_coord_store_path(c->store),
                               (long long)r->id);
    if (j->spec_missing)
        pl_log_warn("state db %s: job %u: its spec is in neither it nor the specs file %s: %s",
                    pl_coord_store_path(c->store), j->id, rs->specs,
                    pl_coord_job_terminal(j) && j->state != PL_JOB_FAILED ? "kept as it ended"
                                                                          : "failed");
    if ((st = pl_coord_add_job(c, j))) {
        pl_coord_job_free(j);
        return st;
    }
    return PL_OK;
}

pl_status_t pl_coord_restore(pl_coord_t *c)
{
    pl_status_t st;
    int n_terminal = 0, n_again = 0;
    char specs[4096];
    s_restore_t rs = {.c = c, .specs = specs};
    if ((st = pl_coord_specs_path(pl_coord_store_path(c->store), specs, sizeof(specs))) ||
        (st = pl_coord_store_specs_attach(c->store, specs)))
        return st;
    if (!(st = pl_coord_store_counters(c->store, &c->next_job, &c->next_epoch)) &&
        !(st = pl_coord_drain_restore(c)))
        st = pl_coord_store_each(c->store, s_on_row, &rs);
    pl_coord_store_specs_detach(c->store); /* the loop never writes the specs file */
    if (st)
        return st;
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        /* ids and epochs never repeat, even when the counters row is older than a job row */
        if (j->id >= c->next_job)
            c->next_job = j->id + 1;
        if (j->epoch >= c->next_epoch)
            c->next_epoch = j->epoch + 1;
        if (pl_coord_job_terminal(j)) {
            n_terminal++;
            if (j->spec_missing) /* failed now: its row says so too */
                pl_coord_persist(c, j);
            continue;
        }
        n_again++;
        if ((st = s_requeue(c, &c->jobs[i])))
            return st;
    }
    if ((st = pl_coord_progress_restore(c)))
        return st;
    pl_log_info("state db %s: %d finished job(s), %d to run; next job %u, next epoch %u",
                pl_coord_store_path(c->store), n_terminal, n_again, c->next_job, c->next_epoch);
    return PL_OK;
}

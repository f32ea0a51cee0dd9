/* A job's progress (the tokens its last stage reported, persisted as they come) and what makes
 * a lost stage cost no work: the job is queued again and resumes from that progress. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A job interrupted this often fails instead: something keeps killing it. */
#define S_MAX_RESUMES 100

pl_status_t pl_coord_job_seqs_new(pl_coord_job_t *j)
{
    if (j->n_seqs < 1 || !(j->seqs = calloc((size_t)j->n_seqs, sizeof(*j->seqs))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    return PL_OK;
}

void pl_coord_job_seqs_free(pl_coord_job_t *j)
{
    for (int s = 0; j->seqs && s < j->n_seqs; s++)
        free(j->seqs[s].tok);
    free(j->seqs);
    j->seqs = NULL;
}

static int64_t s_held(const pl_coord_job_t *j)
{
    int64_t n = 0;
    for (int s = 0; j->seqs && s < j->n_seqs; s++)
        n += j->seqs[s].n;
    return n;
}

/* Tokens [at, at + n) of sequence s with finish: what extends it is appended. A piece past the
 * end (one before it was lost) waits for a report from the start; an overlap must agree with
 * what is held. Returns how many tokens were added, -1 when the piece is refused. */
static int s_extend(pl_coord_job_t *j, int s, int at, const int32_t *tok, int n, int finish,
                    const char **why)
{
    pl_coord_seq_t *q = &j->seqs[s];
    int max = j->spec.gen.max_new_tokens;
    *why = NULL;
    if (at > q->n)
        return 0;
    if (n < 1 || at + n > max || (finish == PL_FINISH_NONE && at + n == max)) {
        *why = "token count outside max_new_tokens";
        return -1;
    }
    for (int t = 0; t < n; t++)
        if (tok[t] < 0 || tok[t] >= j->vocab) {
            *why = "a token id outside the vocabulary";
            return -1;
        }
    int same = PL_MIN(q->n - at, n);
    if (same > 0 && memcmp(q->tok + at, tok, (size_t)same * sizeof(int32_t)) != 0) {
        *why = "tokens that differ from the ones reported before";
        return -1;
    }
    int add = n - same;
    if (add > 0 && q->finish) {
        *why = "tokens after the sequence finished";
        return -1;
    }
    if (q->n + add > q->cap) {
        int cap = PL_MAX(q->cap ? 2 * q->cap : 64, q->n + add);
        int32_t *nt = realloc(q->tok, (size_t)PL_MIN(cap, max) * sizeof(int32_t));
        if (!nt) {
            *why = "coordinator out of memory";
            return -1;
        }
        q->tok = nt;
        q->cap = PL_MIN(cap, max);
    }
    memcpy(q->tok + q->n, tok + same, (size_t)add * sizeof(int32_t));
    q->n += add;
    if (at + n == q->n && finish && !q->finish)
        q->finish = finish;
    return add;
}

/* New tokens of j since the last save into the state db, one transaction: at each report, so a
 * coordinator crash loses at most one heartbeat of tokens (which the resumed run recomputes,
 * identically). A finish is written with the piece that ends the sequence. */
static void s_save(pl_coord_t *c, pl_coord_job_t *j)
{
    if (!c->store)
        return;
    pl_coord_chunk_t *ch = malloc((size_t)j->n_seqs * sizeof(*ch));
    int n = 0;
    if (!ch) {
        pl_log_warn("job %u: progress not saved: out of memory", j->id);
        return;
    }
    for (int s = 0; s < j->n_seqs; s++) {
        pl_coord_seq_t *q = &j->seqs[s];
        if (q->n > q->saved)
            ch[n++] = (pl_coord_chunk_t){.job = j->id,
                                         .seq = s,
                                         .at = q->saved,
                                         .n = q->n - q->saved,
                                         .tokens = q->tok + q->saved,
                                         .finish = q->finish};
    }
    if (pl_coord_save_progress(c, ch, n) == PL_OK) /* queued: a later failure is logged */
        for (int s = 0; s < j->n_seqs; s++)
            j->seqs[s].saved = j->seqs[s].n;
    else
        pl_log_error("job %u: progress not saved: %s", j->id, pl_error_msg());
    free(ch);
}

void pl_coord_on_progress(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m)
{
    const pl_msg_gen_progress_t *p = &m->progress;
    char node[PL_CFG_NAME_MAX + 1];
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    pl_coord_job_t *j = pl_coord_find_job(c, p->job);
    int ni = pl_coord_find_node(c, node);
    if (j && p->epoch == j->epoch && p->stage < j->n_stages && j->stages[p->stage].node != ni) {
        char what[96];
        snprintf(what, sizeof(what), "PROGRESS for job %u stage %d, assigned to another node",
                 p->job, p->stage);
        pl_coord_auth_stage_refused(c, from, what);
        return;
    }
    if (!j || j->state != PL_JOB_RUNNING || p->epoch != j->epoch || p->stage != j->n_stages - 1) {
        pl_log_debug("PROGRESS for job %u stage %d epoch %u from %s: not its running last stage",
                     p->job, p->stage, p->epoch, node);
        return;
    }
    int added = 0;
    for (int i = 0; i < p->n_seqs; i++) {
        const pl_msg_seq_tokens_t *e = &p->seqs[i];
        const char *why = NULL;
        int k = e->seq < j->n_seqs
                    ? s_extend(j, e->seq, e->at, e->tokens, e->n_tokens, (int)e->finish, &why)
                    : -1;
        if (k < 0) {
            c->refused_stage_msgs++;
            pl_log_warn_limited("job %u: PROGRESS from %s: sequence %d at %d: refused: %s", j->id,
                                node, e->seq, e->at, why ? why : "no such sequence");
            continue;
        }
        added += k;
    }
    if (added == 0)
        return;
    int64_t held = s_held(j);
    if (held > j->generated)
        j->generated = held;
    pl_coord_resume_seen(j, held);
    s_save(c, j);
}

void pl_coord_resume_seen(pl_coord_job_t *j, int64_t tokens)
{
    if (!j->n_resumes || j->t_first_new || tokens <= j->resumed_from)
        return;
    j->t_first_new = pl_now();
    pl_log_info("job %u: resumed: first new token seen %.2f s after the interruption was "
                "detected (%.2f s after the new assignment), from %lld tokens",
                j->id, j->t_first_new - j->t_lost, j->t_first_new - j->t_resumed,
                (long long)j->resumed_from);
}

void pl_coord_resume_what(const pl_coord_job_t *j, char *buf, size_t len)
{
    int64_t tokens;
    if (!j->spec.serve.on) {
        snprintf(buf, len, "resumes from %lld generated tokens", (long long)j->resumed_from);
        return;
    }
    int n = pl_coord_deploy_in_flight(j, &tokens);
    snprintf(buf, len, "resumes with its %d request(s) in flight re-added (%lld tokens so far)", n,
             (long long)tokens);
}

void pl_coord_job_interrupt(pl_coord_t *c, pl_coord_job_t *j, const char *why)
{
    if (j->n_resumes >= S_MAX_RESUMES) {
        pl_coord_job_fail(c, j, "%s, and it was resumed %d times already", why, j->n_resumes);
        return;
    }
    char from[64] = ""; /* a training job's weights live on its stages: its last whole
                         * checkpoint is what outlives them (coord_train_resume.c) */
    pl_coord_train_t *ran = j->train;
    j->train = NULL;
    if (ran && pl_coord_train_rewind(j, &ran, from, sizeof(from))) {
        j->train = ran;
        pl_coord_job_fail(c, j, "%s, and it cannot resume: %s", why, pl_error_msg());
        return;
    }
    for (int i = 0; i < j->n_stages; i++) {
        pl_coord_stage_t *s = &j->stages[i];
        pl_coord_node_t *n = &c->nodes[s->node];
        if (n->alive) { /* running stages stop; a finished one lingers for its release */
            pl_msg_t m;
            pl_msg_init(&m, PL_MSG_CANCEL);
            m.cancel = (pl_msg_cancel_t){.job = j->id, .stage = i, .epoch = j->epoch};
            pl_coord_send_node(c, s->node, &m);
        }
        if (n->busy_job == j->id)
            n->busy_job = 0;
        free(s->ucx_addr);
        memset(s, 0, sizeof(*s));
    }
    j->n_stages = 0;
    j->state = PL_JOB_QUEUED;
    j->resuming = true;
    j->n_resumes++;
    j->t_lost = j->t_queued = pl_now();
    j->t_first_new = 0;
    j->resumed_from = s_held(j);
    snprintf(j->lost_why, sizeof(j->lost_why), "%s", why);
    if (j->train) {
        bool none = strncmp(from, "checkpoint-", 11) != 0;
        snprintf(j->error, sizeof(j->error), "resuming from %s after %s", from, why);
        pl_log_warn("job %u: interrupted (%s): queued to resume from %s", j->id, why, from);
        pl_coord_event(j, "interrupted", "%s; %s %s", why,
                       none ? "no whole checkpoint yet: starts again from" : "resumes from",
                       from);
    } else {
        char what[128];
        pl_coord_resume_what(j, what, sizeof(what));
        snprintf(j->error, sizeof(j->error), "queued: %s: %s", what, why);
        pl_log_warn("job %u: interrupted (%s): queued, %s", j->id, why, what);
        pl_coord_event(j, "interrupted", "%s; %s", why, what);
    }
    pl_coord_persist(c, j);
    s_save(c, j);
}

pl_status_t pl_coord_resume_list(const pl_coord_job_t *j, pl_msg_result_t **r_p, int *n_p)
{
    *n_p = 0;
    *r_p = NULL;
    if (!j->seqs || s_held(j) == 0)
        return PL_OK;
    pl_msg_result_t *r = calloc((size_t)j->n_seqs, sizeof(*r));
    if (!r)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    for (int s = 0; s < j->n_seqs; s++) {
        const pl_coord_seq_t *q = &j->seqs[s];
        r[s].seq = s;
        r[s].finish = (pl_finish_t)q->finish;
        if (q->n && !(r[s].tokens = malloc((size_t)q->n * sizeof(int32_t)))) {
            pl_msg_results_free(r, j->n_seqs);
            return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
        }
        if (q->n)
            memcpy(r[s].tokens, q->tok, (size_t)q->n * sizeof(int32_t));
        r[s].n_tokens = q->n;
    }
    *r_p = r;
    *n_p = j->n_seqs;
    return PL_OK;
}

/* Room left beside the measured body for what differs between the stages' ASSIGNs (stage
 * number, epoch, device name). */
#define S_ASSIGN_SLACK 512u

pl_status_t pl_coord_assign_fits(const pl_msg_t *assign)
{
    json_t *body;
    pl_status_t st = pl_msg_encode(assign, &body);
    if (st)
        return st;
    size_t bytes = json_dumpb(body, NULL, 0, JSON_COMPACT);
    json_decref(body);
    if (bytes + S_ASSIGN_SLACK <= PL_CTL_MAX_BODY)
        return PL_OK;
    const pl_msg_assign_t *a = &assign->assign;
    int64_t held = 0;
    for (int i = 0; i < a->n_resume; i++)
        held += a->resume[i].n_tokens;
    return pl_error(PL_ERR_RANGE,
                    "the assignment of job %u is %.1f MiB with %d sequence(s) and %lld "
                    "token(s) generated so far, over the control plane's %u MiB message "
                    "bound: the job cannot %s (fewer or shorter sequences per job fit)",
                    a->job, (double)bytes / (1 << 20), a->spec.n_prompts, (long long)held,
                    PL_CTL_MAX_BODY >> 20, a->n_resume ? "resume" : "start");
}

pl_status_t pl_coord_resume_apply(const pl_coord_job_t *j, pl_gen_job_t *g)
{
    pl_msg_result_t *r;
    int n;
    pl_status_t st = pl_coord_resume_list(j, &r, &n);
    if (!st && n)
        st = pl_gen_job_resume(g, r, n, j->vocab);
    pl_msg_results_free(r, n);
    return st;
}

static pl_status_t s_on_chunk(void *user, const pl_coord_chunk_t *ch)
{
    pl_coord_t *c = user;
    pl_coord_job_t *j = ch->job > 0 && ch->job <= UINT32_MAX ? pl_coord_find_job(c, ch->job) : NULL;
    const char *why = NULL;
    if (!j || pl_coord_job_terminal(j))
        return PL_OK; /* an ended job's leftovers: its results have everything */
    if (ch->seq < 0 || ch->seq >= j->n_seqs || ch->at < 0 || ch->n < 1 || ch->finish < 0 ||
        ch->finish > PL_FINISH_STOP)
        why = "a field out of range";
    else if (ch->at != j->seqs[ch->seq].n)
        why = "not contiguous with the pieces before it";
    else
        s_extend(j, ch->seq, ch->at, ch->tokens, ch->n, ch->finish, &why);
    if (why) { /* the job still resumes, from fewer tokens: the output is the same */
        pl_log_warn("state db %s: job %u: progress of sequence %d at %d ignored: %s",
                    pl_coord_store_path(c->store), j->id, ch->seq, ch->at, why);
        return PL_OK;
    }
    j->seqs[ch->seq].saved = j->seqs[ch->seq].n;
    return PL_OK;
}

pl_status_t pl_coord_progress_restore(pl_coord_t *c)
{
    pl_status_t st = pl_coord_store_progress_each(c->store, s_on_chunk, c);
    if (st)
        return st;
    for (int i = 0; i < c->n_jobs; i++) {
        pl_coord_job_t *j = c->jobs[i];
        if (!j->resuming && s_held(j) > 0) { /* queued to resume when the coordinator stopped */
            j->resuming = true;
            j->n_resumes = 1;
            j->t_lost = j->t_queued;
            snprintf(j->lost_why, sizeof(j->lost_why),
                     "it waited to resume when the "
                     "coordinator restarted");
        }
        if (!j->resuming || j->train) /* a training job resumes from its checkpoint */
            continue;
        j->resumed_from = s_held(j);
        if (j->spec.serve.on) {
            snprintf(j->error, sizeof(j->error), "deploying again after a coordinator restart");
            pl_log_info("job %u: deployment %s deploys again (its requests in flight ended with "
                        "the coordinator that held them)", j->id, j->spec.serve.name);
            continue;
        }
        snprintf(j->error, sizeof(j->error),
                 "resuming from %lld generated tokens after a "
                 "coordinator restart",
                 (long long)j->resumed_from);
        pl_log_info("job %u: resumes from %lld generated tokens", j->id,
                    (long long)j->resumed_from);
    }
    return PL_OK;
}

json_t *pl_coord_resume_json(const pl_coord_job_t *j)
{
    if (!j->n_resumes)
        return NULL;
    return json_pack("{s:i, s:s, s:I, s:f, s:f, s:f}", "resumes", j->n_resumes, "why", j->lost_why,
                     "from_tokens", (json_int_t)j->resumed_from, "detected_at", j->t_lost,
                     "assigned_at", j->t_resumed, "first_token_at", j->t_first_new);
}

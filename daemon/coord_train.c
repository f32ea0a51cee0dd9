/* Training jobs in the coordinator: a submission checked against its model, data and the
 * checkpoint it resumes from; each stage's TRAIN_STEP reports kept as the job's loss curve and
 * per-stage busy / wait time (the measured bubble); the job's training status for pipectl. */
#include "common/log.h"
#include "common/train_ops.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"
#include "pipeline/train_ckpt_opt.h"
#include "pipeline/train_run.h"
#include "pipeline/train_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_CURVE (1 << 20) /* steps whose loss is kept */
#define S_STATUS_CURVE 4096   /* of those, the latest ones a status shows */

/* A file the daemons will read must be there and readable (they run where the coordinator is,
 * or see the same file system). */
static pl_status_t s_readable(const char *what, const char *path)
{
    if (path[0] && access(path, R_OK) != 0)
        return pl_error(PL_ERR_NOT_FOUND, "%s %s: not readable", what, path);
    return PL_OK;
}

pl_status_t pl_coord_train_validate(pl_coord_job_t *j)
{
    pl_job_train_t *t = j->spec.train;
    const pl_cfg_train_t *job = &t->cfg;
    pl_model_config_t mc;
    pl_train_local_cfg_t tc;
    pl_status_t st;
    double *inv = NULL;
    if ((st = pl_model_config_load(job->model, &mc)))
        return pl_error_prefix(st, "model %s: ", job->model);
    if (!(inv = calloc((size_t)mc.head_dim / 2 + 1, sizeof(double))))
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    st = pl_train_cfg_from_job(job, &mc, inv, &tc);
    free(inv);
    if (st)
        return st;
    if (tc.n_mb % job->replicas)
        return pl_error(PL_ERR_INVALID, "replicas %d: the step's %d microbatches "
                        "(global_batch / micro_batch) do not split evenly over them",
                        job->replicas, tc.n_mb);
    if ((st = s_readable("data", job->data_tokens[0] ? job->data_tokens : job->data_text)))
        return st;
    int steps_done = 0;
    t->kind = -1; /* the plan is the coordinator's to make (a resume fixes split and schedule) */
    t->n_split = 0;
    if (job->resume_from[0]) {
        pl_train_state_t rs;
        if ((st = pl_train_ckpt_state_read(job->resume_from, &rs)))
            return pl_error_prefix(st, "resume_from: ");
        int sum = 0;
        for (int i = 0; i < rs.n_stages && i < PL_TRAIN_MAX_STAGES; i++)
            sum += rs.split[i];
        if (rs.n_stages > PL_CFG_MAX_NODES || sum != mc.n_layers)
            return pl_error(PL_ERR_INVALID, "resume_from %s: its trainer_state.json has no split "
                            "of the model's %d layers over its %d stages", job->resume_from,
                            mc.n_layers, rs.n_stages);
        if (job->stages && job->stages != rs.n_stages)
            return pl_error(PL_ERR_INVALID, "stages %d: the checkpoint %s was written by %d "
                            "stages, and a resume keeps its split", job->stages,
                            job->resume_from, rs.n_stages);
        if (rs.step >= job->steps)
            return pl_error(PL_ERR_INVALID, "resume_from %s: %d steps taken, the job has %d",
                            job->resume_from, rs.step, job->steps);
        t->n_split = rs.n_stages; /* the plan keeps it */
        memcpy(t->split, rs.split, sizeof(int) * (size_t)rs.n_stages);
        pl_train_kind_t kind; /* and its schedule, unless the job names one */
        if (rs.schedule[0] && !pl_train_kind_parse(rs.schedule, &kind))
            t->kind = (int)kind;
        steps_done = rs.step;
    }
    if ((job->stages ? job->stages : 1) > mc.n_layers)
        return pl_error(PL_ERR_RANGE, "%d stages asked for a model of %d layers", job->stages,
                        mc.n_layers);
    pl_coord_train_t *p = calloc(1, sizeof(*p));
    int keep = PL_MIN(job->steps, S_MAX_CURVE);
    if (!p || !(p->losses = malloc((size_t)keep * sizeof(double)))) {
        free(p);
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    }
    p->first_step = p->run_from = p->step = steps_done;
    p->ckpt_step = -1;
    for (int i = 0; i < PL_COORD_MAX_STAGES; i++)
        p->stages[i] = (pl_coord_train_stage_t){.step = steps_done, .ckpt_step = -1};
    pl_coord_train_free(j);
    j->train = p;
    j->n_layers = mc.n_layers;
    j->vocab = mc.vocab;
    j->n_seqs = 0; /* no sequences to generate: results are the curve and the checkpoints */
    j->max_ctx = job->seq_len + 1;
    return PL_OK;
}

void pl_coord_train_start(const pl_coord_job_t *j, int i, pl_msg_start_t *m)
{
    int S = j->spec.train->n_split, R = j->n_stages / S, r = i / S, s = i % S;
    m->next = s < S - 1 ? j->stages[i + 1].ucx_addr : NULL;
    m->prev = s > 0 ? j->stages[i - 1].ucx_addr : NULL;
    m->ring_next = R > 1 ? j->stages[((r + 1) % R) * S + s].ucx_addr : NULL;
    m->ring_prev = R > 1 ? j->stages[((r + R - 1) % R) * S + s].ucx_addr : NULL;
}

void pl_coord_on_train_step(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m)
{
    const pl_msg_train_step_t *r = &m->train_step;
    char node[PL_CFG_NAME_MAX + 1];
    snprintf(node, sizeof(node), "%.*s", (int)PL_MIN(from->len, PL_CFG_NAME_MAX), from->id);
    pl_coord_job_t *j = pl_coord_find_job(c, r->job);
    int ni = pl_coord_find_node(c, node);
    if (j && j->train && r->epoch == j->epoch && r->stage < j->n_stages &&
        j->stages[r->stage].node != ni) {
        pl_coord_auth_stage_refused(c, from, "TRAIN_STEP for a stage assigned to another node");
        return;
    }
    if (!j || !j->train || j->state != PL_JOB_RUNNING || r->epoch != j->epoch ||
        r->stage >= j->n_stages) { /* an earlier assignment, or the job ended */
        pl_log_info_limited("refused TRAIN_STEP for job %u stage %d epoch %u from %s", r->job,
                            r->stage, r->epoch, node);
        return;
    }
    pl_coord_train_t *p = j->train;
    const pl_cfg_train_t *job = &j->spec.train->cfg;
    pl_coord_train_stage_t *s = &p->stages[r->stage];
    if (r->step != s->step + 1) {
        pl_log_warn_limited("job %u stage %d: TRAIN_STEP %d after %d: ignored", j->id, r->stage,
                            r->step, s->step);
        return;
    }
    if (r->step > job->steps) {
        pl_log_warn_limited("job %u stage %d: TRAIN_STEP %d of %d steps: ignored", j->id,
                            r->stage, r->step, job->steps);
        return;
    }
    s->step = r->step;
    s->busy_s += r->busy_s;
    s->wait_s += r->wait_s;
    s->wall_s += r->wall_s;
    s->peak_stash = PL_MAX(s->peak_stash, r->peak_stash_bytes);
    if (r->checkpoint)
        s->ckpt_step = r->step;
    if (j->n_resumes && !j->t_first_new && r->step > p->run_from) {
        j->t_first_new = pl_now();
        pl_log_info("job %u: resumed: first new step seen %.2f s after the interruption was "
                    "detected (%.2f s after the new assignment), from step %d", j->id,
                    j->t_first_new - j->t_lost, j->t_first_new - j->t_resumed, p->run_from);
    }
    if (r->stage == j->n_stages - 1) { /* the curve: every stage has the loss, this one first */
        if (p->step == p->run_from)
            p->t_first = pl_now() - r->wall_s;
        p->step = r->step;
        p->loss = r->loss, p->grad_norm = r->grad_norm, p->lr = r->lr;
        p->tokens += r->tokens * job->replicas; /* every replica trained on as many */
        if (r->step - 1 < S_MAX_CURVE)
            p->losses[r->step - 1] = r->loss;
    }
    bool all = true; /* a checkpoint is whole once every stage of replica 0 wrote its part */
    for (int i = 0; i < j->spec.train->n_split; i++)
        all = all && j->train->stages[i].ckpt_step == r->step;
    if (all && r->checkpoint && p->ckpt_step < r->step) {
        p->ckpt_step = r->step;
        char dir[PATH_MAX];
        if (pl_train_run_ckpt_dir(job, r->step, dir, sizeof(dir)) == PL_OK)
            pl_coord_event(j, "checkpoint", "step %d: %s", r->step, dir);
        pl_coord_persist(c, j); /* durable: a restart or a lost node resumes from it */
    }
}

/* The last step's loss when every stage reported every step; the event DONE records. */
bool pl_coord_train_finished(const pl_coord_job_t *j, char *why, size_t len)
{
    const pl_coord_train_t *p = j->train;
    int steps = j->spec.train->cfg.steps;
    for (int i = 0; i < j->n_stages; i++)
        if (p->stages[i].step != steps) {
            snprintf(why, len, "stage %d reported %d of %d steps", i, p->stages[i].step, steps);
            return false;
        }
    snprintf(why, len, "%d steps, final loss %.6f", steps - p->first_step, p->loss);
    return true;
}

json_t *pl_coord_train_json(const pl_coord_job_t *j)
{
    const pl_coord_train_t *p = j->train;
    const pl_job_train_t *t = j->spec.train;
    json_t *losses = json_array(), *stages = json_array(), *split = json_array();
    int from = PL_MAX(p->first_step, p->step - S_STATUS_CURVE);
    for (int k = from; losses && k < p->step && k < S_MAX_CURVE; k++)
        json_array_append_new(losses, json_real(p->losses[k]));
    for (int i = 0; i < t->n_split; i++)
        json_array_append_new(split, json_integer(t->split[i]));
    for (int i = 0; i < j->n_stages; i++) {
        const pl_coord_train_stage_t *s = &p->stages[i];
        json_array_append_new(
            stages, json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:I}", "stage", i, "step", s->step,
                              "busy_s", s->busy_s, "wait_s", s->wait_s, "wall_s", s->wall_s,
                              "bubble", s->wall_s > 0 ? PL_MAX(0.0, 1.0 - s->busy_s / s->wall_s)
                                                      : 0.0,
                              "peak_stash_bytes", (json_int_t)s->peak_stash));
    }
    double end = j->t_end > 0 ? j->t_end : pl_now(), ran = p->t_first > 0 ? end - p->t_first : 0;
    double tok_s = ran > 0 ? (double)p->tokens / ran : 0;
    int left = t->cfg.steps - p->step;
    double per_step = p->step > p->run_from && ran > 0 ? ran / (p->step - p->run_from) : 0;
    char ckpt[PATH_MAX] = "";
    if (p->ckpt_step > 0 && pl_train_run_ckpt_dir(&t->cfg, p->ckpt_step, ckpt, sizeof(ckpt)))
        ckpt[0] = '\0';
    json_t *o = json_pack(
        "{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:f, s:s, s:o, s:i, s:o, s:o, s:s, s:i}",
        "replicas", t->cfg.replicas, "step", p->step, "steps", t->cfg.steps, "first_step", p->first_step, "loss", p->loss,
        "grad_norm", p->grad_norm, "lr", p->lr, "tok_s", tok_s, "tokens", (json_int_t)p->tokens,
        "eta_s", per_step * left, "schedule",
        t->kind >= 0 ? pl_train_kind_name((pl_train_kind_t)t->kind) : t->cfg.schedule, "split",
        split, "losses_from", from + 1, "losses", losses, "stages", stages, "checkpoint", ckpt,
        "checkpoint_step", p->ckpt_step > 0 ? p->ckpt_step : 0);
    if (o) /* this run's first step: after a resume, the checkpoint it resumed from */
        json_object_set_new(o, "run_from", json_integer(p->run_from));
    if (o && j->n_resumes) {
        char why[320];
        if (p->run_from > 0)
            snprintf(why, sizeof(why), "from checkpoint-%d after %s", p->run_from, j->lost_why);
        else
            snprintf(why, sizeof(why), "from step 0 after %s (no whole checkpoint yet)",
                     j->lost_why);
        json_object_set_new(o, "resumed", json_string(why));
    }
    return o;
}

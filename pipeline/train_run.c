/* A training stage in pipeld's executor thread (train_run.h): what the assignment names is
 * loaded (weights from the model, a checkpoint or a seed; the data), then pl_train_exec runs the
 * steps and every report goes to the node over the executor's PAIR socket. */
#include "pipeline/train_run.h"

#include "common/log.h"
#include "common/path_allow.h"
#include "common/util.h"
#include "pipeline/train_allreduce.h"
#include "pipeline/train_ckpt.h"
#include "pipeline/train_ckpt_opt.h"
#include "pipeline/train_data.h"
#include "pipeline/train_exec.h"
#include "pipeline/train_weights.h"
#include "transport/msg.h"
#include "transport/ucx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_LINGER_S 30.0       /* longest wait for the release after DONE */
#define S_DATA_TIMEOUT_MS 120000 /* a receive waits at most this for a neighbour */

typedef struct {
    const pl_train_run_t *r;
    const pl_cfg_train_t *job;
    pl_train_local_cfg_t cfg;
    double *inv_freq;
    pl_train_master_t *master;
    pl_train_data_t *data;
    pl_train_state_t resume; /* step 0 when starting anew */
    int l0, l1;              /* layers [l0, l1) */
    int S, R, s, rank;       /* replica `rank` of R, its stage s of S */
    int n_mb_all;            /* the step's microbatches over every replica */
    pl_ucx_t *ucx;
    pl_ucx_ep_t *prev, *next;
    pl_ucx_ep_t *ring_next, *ring_prev; /* the same stage of the other replicas */
    pl_train_ar_t *ar;
    pl_train_exec_t *te;
    pl_act_token_t token; /* START's: every data-plane message of this assignment carries it */
    int32_t *tokens;
    double busy_s, wait_s, t0;
} s_run_t;

static pl_status_t s_send(const s_run_t *s, pl_msg_t *m)
{
    pl_status_t st = pl_tx_send(s->r->sock, NULL, m);
    if (st)
        pl_log_error("job %u stage %d: cannot report %s: %s", s->r->job, s->r->stage,
                     pl_msg_name(m->type), pl_error_msg());
    return st;
}

pl_status_t pl_train_run_ckpt_dir(const pl_cfg_train_t *job, int step, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/checkpoint-%d", job->checkpoint_dir, step);
    if (n < 0 || (size_t)n >= len)
        return pl_error(PL_ERR_RANGE, "checkpoint_dir '%.200s': path too long",
                        job->checkpoint_dir);
    return PL_OK;
}

/* mkdir -p: the job's directory and the step's below it (stages race to make them). */
static pl_status_t s_mkdirs(const char *dir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", dir);
    for (char *q = p + 1;; q++) {
        bool end = *q == '\0';
        if (*q == '/' || end) {
            *q = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return pl_error(PL_ERR_IO, "checkpoint: cannot make %s: %s", p, strerror(errno));
            if (end)
                return PL_OK;
            *q = '/';
        }
    }
}

/* The trainer's shape, this stage's master weights and the data; a resume's state. */
static pl_status_t s_load(s_run_t *s)
{
    const pl_train_run_t *r = s->r;
    const pl_cfg_train_t *job = s->job;
    pl_model_config_t mc;
    pl_model_t *m = NULL;
    pl_status_t st;
    s->S = r->train->n_split, s->R = r->n_stages / s->S;
    s->s = r->stage % s->S, s->rank = r->stage / s->S;
    bool first = s->s == 0, last = s->s == s->S - 1;
    if (s->S * s->R != r->n_stages || s->R != job->replicas)
        return pl_error(PL_ERR_PROTOCOL, "assignment: %d stages are not %d x %d replicas",
                        r->n_stages, s->S, job->replicas);
    if ((st = pl_model_config_load(job->model, &mc)))
        return pl_error_prefix(st, "model %s: ", job->model);
    if (!(s->inv_freq = calloc((size_t)mc.head_dim / 2 + 1, sizeof(double))))
        return pl_error(PL_ERR_NOMEM, "training stage: out of memory");
    if ((st = pl_train_cfg_from_job(job, &mc, s->inv_freq, &s->cfg)))
        return st;
    s->n_mb_all = s->cfg.n_mb;
    s->cfg.n_mb /= s->R; /* this replica's share of the step */
    int covered = 0;
    for (int i = 0; i < s->S; i++)
        covered += r->train->split[i];
    if (covered != s->cfg.n_layers)
        return pl_error(PL_ERR_PROTOCOL, "assignment: a split of %d layers for a %d-layer model",
                        covered, s->cfg.n_layers);
    s->l0 = r->first, s->l1 = r->last + 1;
    if (s->l0 < 0 || s->l1 > s->cfg.n_layers || s->l1 <= s->l0)
        return pl_error(PL_ERR_INVALID, "assignment: layers %d-%d of a %d-layer model", r->first,
                        r->last, s->cfg.n_layers);
    if (job->resume_from[0]) {
        if ((st = pl_train_ckpt_stage_readable(job->resume_from, s->s, s->S)) ||
            (st = pl_train_ckpt_state_read(job->resume_from, &s->resume)))
            return st;
        if (s->resume.n_stages != s->S)
            return pl_error(PL_ERR_INVALID, "resume_from %s: written by %d stages, this job has "
                            "%d", job->resume_from, s->resume.n_stages, s->S);
        if (s->resume.step >= job->steps)
            return pl_error(PL_ERR_INVALID, "resume_from %s: %d steps taken already, the job "
                            "has %d", job->resume_from, s->resume.step, job->steps);
    }
    const char *from = job->resume_from[0] ? job->resume_from : job->model;
    if (job->resume_from[0] || strcmp(job->init, "random")) {
        if ((st = pl_model_open(from, &m)))
            return pl_error_prefix(st, "%s: ", from);
        st = pl_train_master_load(m, &s->cfg, s->l0, s->l1, first, last, &s->master);
        pl_model_destroy(&m);
    } else {
        st = pl_train_master_random(&s->cfg, job->seed, s->l0, s->l1, first, last, &s->master);
    }
    if (st)
        return st;
    st = job->data_tokens[0] ? pl_train_data_load_ids(job->data_tokens, s->cfg.vocab, &s->data)
                             : pl_train_data_load_text(job->data_text, job->model, s->cfg.vocab,
                                                       &s->data);
    if (st)
        return st;
    size_t n = (size_t)s->n_mb_all * ((size_t)s->cfg.seq_len + 1);
    if (!(s->tokens = malloc(n * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "training stage: out of memory");
    return PL_OK;
}

/* Wait for START: the neighbours' addresses (next for all but the last, prev for all but the
 * first: a training pipeline is a chain, not the generation ring). */
static pl_status_t s_start(s_run_t *s, char **next_p, char **prev_p, char **ring_p)
{
    while (!*s->r->cancel) {
        pl_msg_t m;
        pl_status_t st = pl_tx_recv(s->r->sock, 100, NULL, NULL, &m);
        if (st == PL_ERR_BUSY)
            continue;
        if (st)
            return st;
        if (m.type == PL_MSG_START) {
            *next_p = m.start.next, *prev_p = m.start.prev;
            ring_p[0] = m.start.ring_next, ring_p[1] = m.start.ring_prev;
            m.start.next = m.start.prev = m.start.ring_next = m.start.ring_prev = NULL;
            s->token = m.start.token;
            pl_msg_clear(&m);
            return PL_OK;
        }
        pl_msg_clear(&m);
    }
    return pl_error(PL_ERR_CANCELED, "canceled before start");
}

static pl_status_t s_connect(s_run_t *s)
{
    const pl_train_run_t *r = s->r;
    char *next = NULL, *prev = NULL, *ring[2] = {NULL, NULL};
    pl_status_t st = s_start(s, &next, &prev, ring);
    if (st)
        goto out;
    if ((s->s < s->S - 1 && !next) || (s->s > 0 && !prev) ||
        (s->R > 1 && (!ring[0] || !ring[1]))) {
        st = pl_error(PL_ERR_PROTOCOL, "START without a neighbour's address");
        goto out;
    }
    if (s->s < s->S - 1 && (st = pl_ucx_connect(s->ucx, next, &s->next)))
        goto out;
    if (s->s > 0 && (st = pl_ucx_connect(s->ucx, prev, &s->prev)))
        goto out;
    if (s->R > 1) { /* two replicas: one peer is both ring neighbours */
        if ((st = pl_ucx_connect(s->ucx, ring[0], &s->ring_next)))
            goto out;
        if (strcmp(ring[0], ring[1]) == 0)
            s->ring_prev = s->ring_next;
        else if ((st = pl_ucx_connect(s->ucx, ring[1], &s->ring_prev)))
            goto out;
        if ((st = pl_train_ar_create(s->ucx, s->ring_next, s->ring_prev, s->rank, s->R, r->job,
                                     &s->token, r->act_dropped, S_DATA_TIMEOUT_MS, r->cancel,
                                     &s->ar)))
            goto out;
    }
    pl_train_link_t link = {.ucx = s->ucx, .prev = s->prev, .next = s->next, .job = r->job,
                            .token = s->token, .dropped = r->act_dropped,
                            .timeout_ms = S_DATA_TIMEOUT_MS,
                            .cancel = r->cancel, .dp = s->ar};
    if ((st = pl_train_exec_create(&s->cfg, pl_train_master_weights(s->master), s->s, s->S,
                                   s->l0, s->l1, r->ops, &link, &s->te)))
        goto out;
    if (s->job->resume_from[0])
        st = pl_train_ckpt_opt_read(s->job->resume_from, &s->cfg, pl_train_exec_opt(s->te),
                                    s->s, s->S, s->l0, s->l1);
out:
    free(next);
    free(prev);
    free(ring[0]);
    free(ring[1]);
    return st;
}

/* This stage's part of step k's checkpoint; stage 0 adds the index, config.json and the
 * trainer state (with the split, so that a resume makes the same stages). */
static pl_status_t s_checkpoint(s_run_t *s, int k)
{
    const pl_train_run_t *r = s->r;
    const pl_job_train_t *t = r->train;
    char dir[PATH_MAX];
    pl_status_t st;
    /* the coordinator checked checkpoint_dir at submit; this file system is the one written */
    if ((st = pl_train_run_ckpt_dir(s->job, k, dir, sizeof(dir))) ||
        (st = pl_path_allow_check("checkpoint_dir", dir, t->allow, t->n_allow, false)) ||
        (st = s_mkdirs(dir)) ||
        (st = pl_train_ckpt_stage_write(dir, &s->cfg, pl_train_master_weights(s->master), s->s,
                                        s->S, s->l0, s->l1)) ||
        (st = pl_train_ckpt_opt_write(dir, &s->cfg, pl_train_exec_opt(s->te), s->s, s->S,
                                      s->l0, s->l1)))
        return st;
    if (s->s != 0)
        return PL_OK;
    pl_train_state_t ts = {.step = k, .n_stages = s->S, .data_step = k,
                           .lr = pl_adamw_lr(&s->cfg.opt, k)};
    memcpy(ts.split, t->split, sizeof(int) * (size_t)t->n_split);
    snprintf(ts.schedule, sizeof(ts.schedule), "%s", pl_train_kind_name((pl_train_kind_t)t->kind));
    if ((st = pl_train_ckpt_index_write(dir, &s->cfg, t->split, t->n_split, s->job->model)) ||
        (st = pl_train_ckpt_state_write(dir, &ts)))
        return st;
    return PL_OK;
}

static pl_status_t s_steps(s_run_t *s)
{
    const pl_train_run_t *r = s->r;
    const pl_cfg_train_t *job = s->job;
    pl_status_t st;
    s->t0 = pl_now();
    for (int step = s->resume.step; step < job->steps; step++) {
        pl_train_exec_step_t out;
        if (*r->cancel)
            return pl_error(PL_ERR_CANCELED, "canceled");
        /* the step's windows of every replica; this one trains on its share of them */
        size_t at = (size_t)s->rank * (size_t)s->cfg.n_mb * ((size_t)s->cfg.seq_len + 1);
        if ((st = pl_train_data_step(s->data, s->cfg.seq_len, s->n_mb_all, step, s->tokens)) ||
            (st = pl_train_exec_step(s->te, s->tokens + at, &out)))
            return st;
        int k = step + 1;
        bool ckpt = job->checkpoint_dir[0] && s->rank == 0 && /* the replicas are one model */
                    ((job->checkpoint_every > 0 && k % job->checkpoint_every == 0) ||
                     k == job->steps);
        if (ckpt && (st = s_checkpoint(s, k)))
            return st;
        s->busy_s += out.busy_s;
        s->wait_s += out.wait_s;
        pl_msg_t m;
        pl_msg_init(&m, PL_MSG_TRAIN_STEP);
        m.train_step = (pl_msg_train_step_t){
            .job = r->job, .stage = r->stage, .step = k, .loss = out.loss,
            .grad_norm = out.grad_norm, .lr = pl_adamw_lr(&s->cfg.opt, step),
            .busy_s = out.busy_s, .wait_s = out.wait_s, .wall_s = out.wall_s,
            .peak_stash_bytes = (int64_t)out.peak_stash_bytes,
            .tokens = (int64_t)s->cfg.n_mb * s->cfg.seq_len, .checkpoint = ckpt};
        s_send(s, &m); /* a report lost is a gap in the curve, not a failed step */
    }
    return PL_OK;
}

static void s_free(s_run_t *s)
{
    pl_train_exec_destroy(&s->te);
    pl_train_ar_destroy(&s->ar);
    if (s->ucx && (s->next || s->prev || s->ring_next) && pl_ucx_flush(s->ucx, 1000))
        pl_error_clear();
    pl_ucx_destroy(&s->ucx); /* closes the endpoints */
    pl_train_data_destroy(&s->data);
    pl_train_master_destroy(&s->master);
    free(s->inv_freq);
    free(s->tokens);
}

void pl_train_run_stage(const pl_train_run_t *r)
{
    s_run_t s = {.r = r, .job = &r->train->cfg};
    char *addr = NULL;
    pl_msg_t m;
    pl_status_t st;
    if (r->train->n_split < 1 || r->n_stages % r->train->n_split || r->train->kind < 0) {
        st = pl_error(PL_ERR_PROTOCOL, "assignment: a training stage without its schedule and "
                      "split");
        goto fail;
    }
    if ((st = s_load(&s)) || (st = pl_ucx_create(&s.ucx)) || (st = pl_ucx_address(s.ucx, &addr)))
        goto fail;
    pl_msg_init(&m, PL_MSG_READY);
    m.ready = (pl_msg_ready_t){.job = r->job, .stage = r->stage, .ucx_addr = addr};
    s_send(&s, &m); /* the address stays ours */
    if ((st = s_connect(&s)))
        goto fail;
    pl_log_info("job %u stage %d: training layers %d-%d, %s, steps %d..%d", r->job, r->stage,
                r->first, r->last, pl_train_kind_name((pl_train_kind_t)r->train->kind),
                s.resume.step + 1, s.job->steps);
    if ((st = s_steps(&s)) || (st = pl_ucx_flush(s.ucx, 10000)))
        goto fail;
    pl_msg_init(&m, PL_MSG_DONE);
    m.done.job = r->job, m.done.stage = r->stage;
    m.done.stats = (pl_msg_stats_t){.wall_s = pl_now() - s.t0, .compute_s = s.busy_s,
                                    .wait_s = s.wait_s};
    snprintf(m.done.stats.link, sizeof(m.done.stats.link), "%s",
             s.next ? pl_ucx_ep_transport(s.next) : "");
    s_send(&s, &m);
    /* keep the worker until the whole job is over: a neighbour still in its last step's
     * reduction would see this endpoint close. This stage is done, so a neighbour that goes
     * from here on (its own DONE, the release) is no failure to log. */
    pl_ucx_expect_close(s.ucx);
    for (double t0 = pl_now(); !*r->cancel && pl_now() - t0 < S_LINGER_S;) {
        pl_ucx_progress(s.ucx);
        usleep(10 * 1000);
    }
    goto out;
fail:
    if (st != PL_ERR_CANCELED)
        pl_log_error("job %u stage %d: %s", r->job, r->stage,
                     pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    pl_msg_init(&m, PL_MSG_FAIL);
    m.fail = (pl_msg_fail_t){.job = r->job, .stage = r->stage, .code = st};
    snprintf(m.fail.error, sizeof(m.fail.error), "%s",
             pl_error_msg()[0] ? pl_error_msg() : pl_status_str(st));
    s_send(&s, &m);
out:
    free(addr);
    s_free(&s);
}

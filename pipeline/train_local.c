/* The in-process pipelined trainer (train_local.h): stages own their layers, stashes, gradients
 * and AdamW; one thread steps every stage's op list in turn, a receive waiting until its sender
 * has posted into the link's mailbox. */
#include "pipeline/train_local.h"

#include "pipeline/train_stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A link's mailbox: one slot per microbatch, posted by the sender, taken by the receiver. */
typedef struct {
    float **slot;
    bool *full;
} s_mail_t;

struct pl_train_local {
    pl_train_local_cfg_t cfg;
    pl_train_weights_t *w;
    const pl_train_ops_t *sched;
    int n_stages;
    pl_train_stage_t st[PL_TRAIN_MAX_STAGES];
    s_mail_t act[PL_TRAIN_MAX_STAGES], grad[PL_TRAIN_MAX_STAGES]; /* act[s]: s -> s+1 */
    float *cos_tab, *sin_tab;
};

pl_adamw_t *pl_train_local_opt(pl_train_local_t *tl, int stage)
{
    return tl->st[stage].opt;
}

void pl_train_local_destroy(pl_train_local_t **tl_p)
{
    if (!tl_p || !*tl_p)
        return;
    pl_train_local_t *t = *tl_p;
    int M = t->cfg.n_mb;
    for (int s = 0; s < t->n_stages; s++) {
        pl_train_stage_fini(&t->st[s]);
        pl_train_bufs_free(t->act[s].slot, M);
        pl_train_bufs_free(t->grad[s].slot, M);
        free(t->act[s].full);
        free(t->grad[s].full);
    }
    free(t->cos_tab);
    free(t->sin_tab);
    free(t);
    *tl_p = NULL;
}

static pl_status_t s_stage_init(pl_train_local_t *t, int s, int l0, int l1)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    int M = c->n_mb;
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    t->act[s].slot = pl_train_bufs_new(M, act), t->grad[s].slot = pl_train_bufs_new(M, act);
    t->act[s].full = calloc((size_t)M, sizeof(bool));
    t->grad[s].full = calloc((size_t)M, sizeof(bool));
    if (!t->act[s].slot || !t->grad[s].slot || !t->act[s].full || !t->grad[s].full)
        return pl_error(PL_ERR_NOMEM, "train: stage %d mailboxes", s);
    return pl_train_stage_init(&t->st[s], c, t->w, t->cos_tab, t->sin_tab, l0, l1, s == 0,
                               s == t->n_stages - 1);
}

pl_status_t pl_train_local_create(const pl_train_local_cfg_t *cfg, pl_train_weights_t *w,
                                  const int *counts, int n_stages, const pl_train_ops_t *sched,
                                  pl_train_local_t **tl_p)
{
    if (n_stages < 1 || n_stages > PL_TRAIN_MAX_STAGES || sched->n_stages != n_stages ||
        sched->n_mb != cfg->n_mb)
        return pl_error(PL_ERR_INVALID,
                        "train: %d stages, schedule for %d stages x %d mb, "
                        "config %d mb",
                        n_stages, sched->n_stages, sched->n_mb, cfg->n_mb);
    if (cfg->seq_len < 1 || cfg->vocab < 1 || cfg->n_layers < 0)
        return pl_error(PL_ERR_INVALID, "train: seq_len %d, vocab %d, layers %d", cfg->seq_len,
                        cfg->vocab, cfg->n_layers);
    int sum = 0;
    for (int s = 0; s < n_stages; s++) {
        if (counts[s] < 0)
            return pl_error(PL_ERR_INVALID, "train: stage %d has %d layers", s, counts[s]);
        sum += counts[s];
    }
    if (sum != cfg->n_layers)
        return pl_error(PL_ERR_INVALID, "train: stages hold %d layers, the model %d", sum,
                        cfg->n_layers);
    pl_train_local_t *t = calloc(1, sizeof(*t));
    if (!t)
        return pl_error(PL_ERR_NOMEM, "train");
    t->cfg = *cfg, t->w = w, t->sched = sched, t->n_stages = n_stages;
    pl_status_t rc = pl_train_rope_tables(cfg, &t->cos_tab, &t->sin_tab);
    if (rc != PL_OK)
        goto err_t;
    for (int s = 0, l = 0; s < n_stages; l += counts[s], s++)
        if ((rc = s_stage_init(t, s, l, l + counts[s])) != PL_OK)
            goto err_t;
    *tl_p = t;
    return PL_OK;

err_t:
    pl_train_local_destroy(&t);
    return rc;
}

/* Run op pc of stage s; *ran_p false when it waits on a mailbox. */
static pl_status_t s_step_op(pl_train_local_t *t, int s, int pc, bool *ran_p)
{
    pl_train_stage_t *g = &t->st[s];
    pl_train_op_t op = t->sched->ops[s][pc];
    size_t bytes = sizeof(float) * (size_t)t->cfg.seq_len * t->cfg.dims.hidden;
    int m = op.mb;
    pl_status_t rc = PL_OK;
    *ran_p = false;
    switch (op.kind) {
    case PL_TRAIN_OP_RECV_ACT:
        if (!t->act[s - 1].full[m])
            return PL_OK;
        memcpy(g->x_in[m], t->act[s - 1].slot[m], bytes);
        t->act[s - 1].full[m] = false;
        break;
    case PL_TRAIN_OP_RECV_GRAD:
        if (!t->grad[s + 1].full[m])
            return PL_OK;
        memcpy(g->g_in[m], t->grad[s + 1].slot[m], bytes);
        t->grad[s + 1].full[m] = false;
        break;
    case PL_TRAIN_OP_SEND_ACT:
        memcpy(t->act[s].slot[m], g->y_out[m], bytes);
        t->act[s].full[m] = true;
        break;
    case PL_TRAIN_OP_SEND_GRAD:
        memcpy(t->grad[s].slot[m], g->g_out[m], bytes);
        t->grad[s].full[m] = true;
        break;
    case PL_TRAIN_OP_F:
        rc = pl_train_stage_forward(g, m);
        break;
    case PL_TRAIN_OP_B:
        rc = pl_train_stage_backward_input(g, m);
        break;
    case PL_TRAIN_OP_W:
        pl_train_stage_backward_weight(g, m);
        break;
    }
    if (rc == PL_OK)
        *ran_p = true;
    return rc;
}

pl_status_t pl_train_local_step(pl_train_local_t *t, const int32_t *tokens, pl_train_step_t *out)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    pl_status_t rc = pl_train_tokens_check(c, tokens);
    if (rc != PL_OK)
        return rc;
    pl_train_step_t r = {0};
    int pc[PL_TRAIN_MAX_STAGES] = {0};
    for (int s = 0; s < t->n_stages; s++)
        t->st[s].tokens = tokens, t->st[s].loss_sum = 0;
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < t->n_stages; s++) {
            bool ran = true;
            while (ran && pc[s] < t->sched->n_ops[s]) {
                if ((rc = s_step_op(t, s, pc[s], &ran)) != PL_OK)
                    goto err_step;
                pc[s] += ran;
                progress |= ran;
                size_t now = pl_train_stage_stash_bytes(&t->st[s]);
                if (now > r.peak_stash_bytes[s])
                    r.peak_stash_bytes[s] = now;
            }
        }
    }
    for (int s = 0; s < t->n_stages; s++)
        if (pc[s] < t->sched->n_ops[s]) {
            rc = pl_error(PL_ERR_INFEASIBLE, "train: stage %d waits forever at op %d", s,
                          pc[s]);
            goto err_step;
        }
    double sumsq = 0;
    for (int s = 0; s < t->n_stages; s++)
        sumsq += pl_adamw_grad_sumsq(t->st[s].opt);
    for (int s = 0; s < t->n_stages; s++)
        pl_adamw_step(t->st[s].opt, sumsq, &r.clip);
    r.loss = t->st[t->n_stages - 1].loss_sum / ((double)c->seq_len * c->n_mb);
    r.grad_norm = sqrt(sumsq);
    *out = r;
    return PL_OK;

err_step:
    /* nothing half-applied: the weights are untouched, gradients, stashes and mailboxes dropped */
    for (int s = 0; s < t->n_stages; s++) {
        pl_status_t rc2 = pl_train_stage_reset(&t->st[s]);
        if (rc2 != PL_OK)
            return rc2;
        for (int m = 0; m < c->n_mb; m++)
            t->act[s].full[m] = t->grad[s].full[m] = false;
    }
    return rc;
}

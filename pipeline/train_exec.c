/* The distributed training stage (train_exec.h): the op list over UCX, activations and gradients
 * as act messages through credited inboxes, the gradient norm and loss as PL_ACT_SUM messages. */
#include "pipeline/train_exec.h"

#include "common/util.h"
#include "pipeline/train_allreduce.h"
#include "pipeline/train_stage.h"
#include "transport/act.h"
#include "transport/act_recv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_KIND_MASK (PL_ACT_TAG_JOB_MASK | 0x00000f0000000000ULL)
/* the norm's partial sum goes up the chain (mb 0), the total and the loss come down (mb 1) */
#define S_SUM_UP 0u
#define S_SUM_DOWN 1u

struct pl_train_exec {
    pl_train_local_cfg_t cfg;
    pl_train_link_t link;
    int stage, n_stages, n_ops;
    const pl_train_op_t *ops;
    pl_train_stage_t st;
    float *cos_tab, *sin_tab;
    pl_ucx_inbox_t *act_in, *grad_in; /* from prev, from next */
    pl_act_rx_t act_rx, grad_rx, sum_rx; /* what is taken from them (and the sums) */
    pl_act_limits_t limits;
    pl_act_seq_t *seqs; /* [n_mb] decode scratch */
    size_t row_bytes;   /* one microbatch's hidden message */
    uint32_t step;      /* attempts so far: the tags' step field */
};

/* The credit tags of the two directions, so a middle stage tells its neighbours' grants apart. */
static uint64_t s_credit_tag(uint32_t job, pl_act_kind_t kind)
{
    return pl_act_tag_credit(job) | (uint64_t)kind << 24;
}

void pl_train_exec_destroy(pl_train_exec_t **te_p)
{
    if (!te_p || !*te_p)
        return;
    pl_train_exec_t *x = *te_p;
    if (x->link.ucx && pl_ucx_flush(x->link.ucx, 2000) != PL_OK)
        pl_error_clear(); /* a peer already gone: its sends are dropped */
    pl_ucx_inbox_destroy(&x->act_in);
    pl_ucx_inbox_destroy(&x->grad_in);
    pl_train_stage_fini(&x->st);
    free(x->cos_tab);
    free(x->sin_tab);
    free(x->seqs);
    free(x);
    *te_p = NULL;
}

pl_adamw_t *pl_train_exec_opt(pl_train_exec_t *te)
{
    return te->st.opt;
}

/* The stage's op list may only talk to neighbours it has, about microbatches there are. */
static pl_status_t s_check_ops(const pl_train_exec_t *x)
{
    bool first = x->stage == 0, last = x->stage == x->n_stages - 1;
    for (int i = 0; i < x->n_ops; i++) {
        pl_train_op_t op = x->ops[i];
        bool bad_end = ((op.kind == PL_TRAIN_OP_RECV_ACT || op.kind == PL_TRAIN_OP_SEND_GRAD) &&
                        first) ||
                       ((op.kind == PL_TRAIN_OP_SEND_ACT || op.kind == PL_TRAIN_OP_RECV_GRAD) &&
                        last);
        if (op.mb < 0 || op.mb >= x->cfg.n_mb || (unsigned)op.kind > PL_TRAIN_OP_RECV_GRAD ||
            bad_end)
            return pl_error(PL_ERR_INVALID, "train stage %d: op %d (kind %d, mb %d) does not fit "
                                            "a stage %d of %d with %d microbatches",
                            x->stage, i, (int)op.kind, op.mb, x->stage, x->n_stages,
                            x->cfg.n_mb);
    }
    return PL_OK;
}

static pl_status_t s_data_plane(pl_train_exec_t *x)
{
    const pl_train_link_t *k = &x->link;
    pl_status_t st;
    pl_act_rx_t rx = {.job = k->job, .limits = &x->limits, .dropped = k->dropped};
    x->act_rx = x->grad_rx = x->sum_rx = rx;
    pl_ucx_set_token(k->ucx, &k->token); /* the grants carry it too */
    if (x->stage > 0) {
        pl_ucx_ep_use_credits(k->prev, s_credit_tag(k->job, PL_ACT_GRAD));
        if ((st = pl_ucx_inbox_create(k->ucx, k->prev, pl_act_tag(k->job, PL_ACT_HIDDEN, 0, 0),
                                      S_KIND_MASK, s_credit_tag(k->job, PL_ACT_HIDDEN),
                                      x->row_bytes, x->cfg.n_mb, &x->act_in)) != PL_OK)
            return st;
        x->act_rx.inbox = x->act_in;
    }
    if (x->stage < x->n_stages - 1) {
        pl_ucx_ep_use_credits(k->next, s_credit_tag(k->job, PL_ACT_HIDDEN));
        if ((st = pl_ucx_inbox_create(k->ucx, k->next, pl_act_tag(k->job, PL_ACT_GRAD, 0, 0),
                                      S_KIND_MASK, s_credit_tag(k->job, PL_ACT_GRAD),
                                      x->row_bytes, x->cfg.n_mb, &x->grad_in)) != PL_OK)
            return st;
        x->grad_rx.inbox = x->grad_in;
    }
    return PL_OK;
}

pl_status_t pl_train_exec_create(const pl_train_local_cfg_t *cfg, pl_train_weights_t *w, int stage,
                                 int n_stages, int l0, int l1, const pl_train_ops_t *sched,
                                 const pl_train_link_t *link, pl_train_exec_t **te_p)
{
    if (n_stages < 1 || n_stages > PL_TRAIN_MAX_STAGES || stage < 0 || stage >= n_stages ||
        sched->n_stages != n_stages || sched->n_mb != cfg->n_mb)
        return pl_error(PL_ERR_INVALID, "train stage %d of %d: schedule for %d stages x %d mb, "
                                        "config %d mb",
                        stage, n_stages, sched->n_stages, sched->n_mb, cfg->n_mb);
    if (cfg->seq_len < 1 || cfg->vocab < 1 || cfg->n_mb < 1 || cfg->n_mb > PL_TRAIN_MAX_MB ||
        l0 < 0 || l1 < l0 || l1 > cfg->n_layers)
        return pl_error(PL_ERR_INVALID, "train stage %d: seq_len %d, vocab %d, %d mb, layers "
                                        "%d..%d of %d",
                        stage, cfg->seq_len, cfg->vocab, cfg->n_mb, l0, l1, cfg->n_layers);
    if (!link->ucx || (stage > 0) != (link->prev != NULL) ||
        (stage < n_stages - 1) != (link->next != NULL))
        return pl_error(PL_ERR_INVALID, "train stage %d of %d: needs a worker and exactly the "
                                        "endpoints to its neighbours",
                        stage, n_stages);
    pl_train_exec_t *x = calloc(1, sizeof(*x));
    if (!x)
        return pl_error(PL_ERR_NOMEM, "train stage %d", stage);
    x->cfg = *cfg, x->link = *link, x->stage = stage, x->n_stages = n_stages;
    x->ops = sched->ops[stage], x->n_ops = sched->n_ops[stage];
    x->limits = (pl_act_limits_t){.max_seq = (uint32_t)cfg->n_mb,
                                  .max_tokens = (uint32_t)cfg->seq_len,
                                  .dim = (uint32_t)cfg->dims.hidden,
                                  .max_pos = (uint32_t)cfg->seq_len,
                                  .dtype = PL_ACT_F32,
                                  .token = link->token};
    pl_act_hdr_t row = {.kind = PL_ACT_HIDDEN, .n_seq = 1, .n_tokens = (uint32_t)cfg->seq_len,
                        .dim = (uint32_t)cfg->dims.hidden};
    x->row_bytes = pl_act_size(&row);
    pl_status_t rc;
    x->seqs = calloc((size_t)cfg->n_mb, sizeof(*x->seqs));
    if (!x->seqs) {
        rc = pl_error(PL_ERR_NOMEM, "train stage %d", stage);
        goto err_x;
    }
    if ((rc = s_check_ops(x)) != PL_OK ||
        (rc = pl_train_rope_tables(&x->cfg, &x->cos_tab, &x->sin_tab)) != PL_OK ||
        (rc = pl_train_stage_init(&x->st, &x->cfg, w, x->cos_tab, x->sin_tab, l0, l1, stage == 0,
                                  stage == n_stages - 1)) != PL_OK ||
        (rc = s_data_plane(x)) != PL_OK)
        goto err_x;
    *te_p = x;
    return PL_OK;

err_x:
    x->link.ucx = NULL; /* nothing was sent: no flush */
    pl_train_exec_destroy(&x);
    return rc;
}

/* Send microbatch m's rows (activations to next, or the input gradient to prev). */
static pl_status_t s_send_rows(pl_train_exec_t *x, pl_act_kind_t kind, int m, const float *rows)
{
    pl_act_hdr_t h = {.kind = kind, .job = x->link.job, .mb = (uint32_t)m, .step = x->step,
                      .n_seq = 1, .n_tokens = (uint32_t)x->cfg.seq_len,
                      .dim = (uint32_t)x->cfg.dims.hidden, .dtype = PL_ACT_F32,
                      .token = x->link.token};
    pl_act_seq_t e = {.seq = (uint32_t)m, .n_tok = (uint32_t)x->cfg.seq_len};
    void *buf;
    size_t len;
    pl_status_t rc = pl_act_encode(&h, &e, rows, &buf, &len);
    if (rc != PL_OK)
        return rc;
    return pl_ucx_send_credited(x->link.ucx, kind == PL_ACT_HIDDEN ? x->link.next : x->link.prev,
                                pl_act_tag(x->link.job, kind, (uint32_t)m, x->step), buf, len,
                                x->link.timeout_ms, x->link.cancel);
}

/* Take microbatch m's rows from an inbox into dst: the message must be this step's m, whole
 * (what is not the job's never gets here: pl_act_recv drops it). */
static pl_status_t s_recv_rows(pl_train_exec_t *x, pl_act_rx_t *rx, pl_act_kind_t kind, int m,
                               float *dst)
{
    const void *payload;
    pl_act_hdr_t h;
    pl_status_t rc =
        pl_act_recv(rx, &h, x->seqs, &payload, x->link.timeout_ms, x->link.cancel);
    if (rc != PL_OK)
        return rc;
    if ((h.kind != (uint32_t)kind || h.job != x->link.job || h.step != x->step ||
         h.mb != (uint32_t)m || h.n_seq != 1 || x->seqs[0].seq != (uint32_t)m ||
         x->seqs[0].pos0 != 0 || h.n_tokens != (uint32_t)x->cfg.seq_len))
        rc = pl_error(PL_ERR_PROTOCOL, "train stage %d: expected %s of job %u step %u mb %d "
                                       "(%d tokens), got kind %u job %u step %u mb %u (%u tokens)",
                      x->stage, kind == PL_ACT_HIDDEN ? "activations" : "gradients", x->link.job,
                      x->step, m, x->cfg.seq_len, h.kind, h.job, h.step, h.mb, h.n_tokens);
    if (rc == PL_OK) {
        const float *f;
        pl_act_payload_f32(&h, payload, dst, &f);
        if (f != dst)
            memcpy(dst, f, sizeof(float) * (size_t)x->cfg.seq_len * x->cfg.dims.hidden);
    }
    pl_status_t rc2 = pl_ucx_inbox_release(rx->inbox);
    return rc != PL_OK ? rc : rc2;
}

static pl_status_t s_send_sum(pl_train_exec_t *x, pl_ucx_ep_t *ep, uint32_t dir, const double *v,
                              int n)
{
    pl_act_hdr_t h = {.kind = PL_ACT_SUM, .job = x->link.job, .mb = dir, .step = x->step,
                      .dim = (uint32_t)n, .token = x->link.token};
    void *buf;
    size_t len;
    pl_status_t rc = pl_act_encode(&h, NULL, v, &buf, &len);
    if (rc != PL_OK)
        return rc;
    return pl_ucx_send(x->link.ucx, ep, pl_act_tag(x->link.job, PL_ACT_SUM, dir, x->step), buf,
                       len);
}

static pl_status_t s_recv_sum(pl_train_exec_t *x, uint32_t dir, double *v, int n)
{
    pl_act_hdr_t h = {.kind = PL_ACT_SUM, .dim = (uint32_t)n};
    void *buf;
    size_t len;
    const void *payload;
    size_t max = pl_act_size(&h);
    double deadline = x->link.timeout_ms < 0 ? INFINITY : pl_now() + x->link.timeout_ms / 1e3;
    pl_status_t rc;
    for (;;) { /* what is not the job's is dropped and counted, and the wait goes on */
        int left = -1;
        if (x->link.timeout_ms >= 0)
            left = (int)PL_MAX(0.0, ceil((deadline - pl_now()) * 1e3));
        rc = pl_ucx_recv(x->link.ucx, pl_act_tag(x->link.job, PL_ACT_SUM, dir, x->step), ~0ULL,
                         max, &buf, &len, NULL, left, x->link.cancel);
        if (rc == PL_ERR_PROTOCOL) { /* longer than a sum: taken off the wire */
            pl_act_rx_note(&x->sum_rx, PL_ACT_DROP_OVERSIZE, 1);
            continue;
        }
        if (rc != PL_OK)
            return rc;
        if ((rc = pl_act_rx_check(&x->sum_rx, buf, len, &h, x->seqs, &payload)) == PL_OK)
            break;
        free(buf);
    }
    if ((h.kind != PL_ACT_SUM || h.job != x->link.job || h.step != x->step || h.mb != dir ||
         h.dim != (uint32_t)n))
        rc = pl_error(PL_ERR_PROTOCOL, "train stage %d: expected a sum of %d values (job %u "
                                       "step %u dir %u), got kind %u job %u step %u dir %u dim %u",
                      x->stage, n, x->link.job, x->step, dir, h.kind, h.job, h.step, h.mb, h.dim);
    if (rc == PL_OK)
        pl_act_payload_f64(&h, payload, v);
    free(buf);
    return rc;
}

static pl_status_t s_run_op(pl_train_exec_t *x, pl_train_op_t op, double *busy, double *wait)
{
    pl_train_stage_t *g = &x->st;
    double t0 = pl_now();
    pl_status_t rc = PL_OK;
    switch (op.kind) {
    case PL_TRAIN_OP_RECV_ACT:
        rc = s_recv_rows(x, &x->act_rx, PL_ACT_HIDDEN, op.mb, g->x_in[op.mb]);
        *wait += pl_now() - t0;
        return rc;
    case PL_TRAIN_OP_RECV_GRAD:
        rc = s_recv_rows(x, &x->grad_rx, PL_ACT_GRAD, op.mb, g->g_in[op.mb]);
        *wait += pl_now() - t0;
        return rc;
    case PL_TRAIN_OP_SEND_ACT:
        rc = s_send_rows(x, PL_ACT_HIDDEN, op.mb, g->y_out[op.mb]);
        *wait += pl_now() - t0;
        return rc;
    case PL_TRAIN_OP_SEND_GRAD:
        rc = s_send_rows(x, PL_ACT_GRAD, op.mb, g->g_out[op.mb]);
        *wait += pl_now() - t0;
        return rc;
    case PL_TRAIN_OP_F:
        rc = pl_train_stage_forward(g, op.mb);
        break;
    case PL_TRAIN_OP_B:
        rc = pl_train_stage_backward_input(g, op.mb);
        break;
    case PL_TRAIN_OP_W:
        pl_train_stage_backward_weight(g, op.mb);
        break;
    }
    *busy += pl_now() - t0;
    return rc;
}

/* The norm summed in stage order, as train_local sums it (bitwise the same), and the loss. */
static pl_status_t s_reduce(pl_train_exec_t *x, double *sumsq_p, double *loss_sum_p, double *wait)
{
    bool first = x->stage == 0, last = x->stage == x->n_stages - 1;
    double partial = 0, down[2];
    double t0 = pl_now();
    pl_status_t rc;
    if (!first && (rc = s_recv_sum(x, S_SUM_UP, &partial, 1)) != PL_OK)
        return rc;
    partial += pl_adamw_grad_sumsq(x->st.opt);
    if (last) {
        down[0] = partial, down[1] = x->st.loss_sum;
    } else if ((rc = s_send_sum(x, x->link.next, S_SUM_UP, &partial, 1)) != PL_OK ||
               (rc = s_recv_sum(x, S_SUM_DOWN, down, 2)) != PL_OK) {
        return rc;
    }
    if (!first && (rc = s_send_sum(x, x->link.prev, S_SUM_DOWN, down, 2)) != PL_OK)
        return rc;
    *wait += pl_now() - t0;
    *sumsq_p = down[0], *loss_sum_p = down[1];
    return PL_OK;
}

pl_status_t pl_train_exec_step(pl_train_exec_t *x, const int32_t *tokens,
                               pl_train_exec_step_t *out)
{
    const pl_train_local_cfg_t *c = &x->cfg;
    pl_status_t rc = pl_train_tokens_check(c, tokens);
    if (rc != PL_OK)
        return rc;
    pl_train_exec_step_t r = {0};
    double t0 = pl_now(), sumsq = 0, loss_sum = 0;
    x->st.tokens = tokens, x->st.loss_sum = 0;
    for (int i = 0; i < x->n_ops; i++) {
        if ((rc = s_run_op(x, x->ops[i], &r.busy_s, &r.wait_s)) != PL_OK)
            goto err_step;
        size_t now = pl_train_stage_stash_bytes(&x->st);
        if (now > r.peak_stash_bytes)
            r.peak_stash_bytes = now;
    }
    if (x->link.dp) { /* replicas: the mean gradient and loss first (train_allreduce.h) */
        double t_dp = pl_now();
        rc = pl_train_ar_mean(x->link.dp, x->st.opt, &x->st.loss_sum, x->step);
        r.wait_s += pl_now() - t_dp;
        if (rc != PL_OK)
            goto err_step;
    }
    if ((rc = s_reduce(x, &sumsq, &loss_sum, &r.wait_s)) != PL_OK)
        goto err_step;
    x->step++;
    pl_adamw_step(x->st.opt, sumsq, &r.clip);
    r.loss = loss_sum / ((double)c->seq_len * c->n_mb);
    r.grad_norm = sqrt(sumsq);
    r.wall_s = pl_now() - t0;
    *out = r;
    return PL_OK;

err_step:
    x->step++; /* a retry's messages never match this attempt's */
    {
        pl_status_t rc2 = pl_train_stage_reset(&x->st);
        return rc2 != PL_OK ? rc2 : rc;
    }
}

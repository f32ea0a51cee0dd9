/* The in-process pipelined trainer (train_local.h): stages own their layers, stashes, gradients
 * and AdamW; one thread steps every stage's op list in turn, a receive waiting until its sender
 * has posted into the link's mailbox. */
#include "pipeline/train_local.h"

#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int l0, l1; /* layers [l0, l1) */
    bool first, last;
    pl_adamw_t *opt;
    pl_cpu_tlayer_t *grads; /* [l1 - l0] into the optimizer's buffers */
    float *g_embed, *g_norm, *g_head;
    pl_cpu_tstash_t **stash;                /* [(l1 - l0) * n_mb] */
    pl_cpu_thead_t **head;                  /* [n_mb], last stage */
    float **x_in, **y_out, **g_in, **g_out; /* [n_mb] each, seq_len * hidden */
    float *tmp;
    int pc; /* next op of the list */
} s_stage_t;

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
    s_stage_t st[PL_TRAIN_MAX_STAGES];
    s_mail_t act[PL_TRAIN_MAX_STAGES], grad[PL_TRAIN_MAX_STAGES]; /* act[s]: s -> s+1 */
    float *cos_tab, *sin_tab;
    const int32_t *tokens;
    double loss_sum;
};

static float **s_bufs(int n, size_t floats)
{
    float **b = calloc((size_t)n, sizeof(float *));
    if (!b)
        return NULL;
    for (int i = 0; i < n; i++)
        if (!(b[i] = malloc(sizeof(float) * floats))) {
            for (int j = 0; j < i; j++)
                free(b[j]);
            free(b);
            return NULL;
        }
    return b;
}

static void s_free_bufs(float **b, int n)
{
    if (!b)
        return;
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
}

void pl_train_local_destroy(pl_train_local_t **tl_p)
{
    if (!tl_p || !*tl_p)
        return;
    pl_train_local_t *t = *tl_p;
    int M = t->cfg.n_mb;
    for (int s = 0; s < t->n_stages; s++) {
        s_stage_t *g = &t->st[s];
        int nl = g->l1 - g->l0;
        if (g->stash)
            for (int i = 0; i < nl * M; i++)
                pl_cpu_tstash_destroy(&g->stash[i]);
        if (g->head)
            for (int m = 0; m < M; m++)
                pl_cpu_thead_destroy(&g->head[m]);
        free(g->stash);
        free(g->head);
        free(g->grads);
        s_free_bufs(g->x_in, M);
        s_free_bufs(g->y_out, M);
        s_free_bufs(g->g_in, M);
        s_free_bufs(g->g_out, M);
        free(g->tmp);
        pl_adamw_destroy(&g->opt);
        s_free_bufs(t->act[s].slot, M);
        s_free_bufs(t->grad[s].slot, M);
        free(t->act[s].full);
        free(t->grad[s].full);
    }
    free(t->cos_tab);
    free(t->sin_tab);
    free(t);
    *tl_p = NULL;
}

/* Register stage g's tensors with its optimizer, in model order. */
static pl_status_t s_stage_tensors(pl_train_local_t *t, s_stage_t *g)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    size_t hd = (size_t)c->dims.hidden, sizes[9];
    pl_status_t rc;
    pl_cpu_tlayer_sizes(&c->dims, sizes);
    if (g->first &&
        (rc = pl_adamw_add(g->opt, t->w->embed, hd * c->vocab, true, &g->g_embed)) != PL_OK)
        return rc;
    for (int l = g->l0; l < g->l1; l++)
        for (int i = 0; i < 9; i++) {
            bool norm = i == 0 || i == 5; /* no decay on norm weights */
            float *w = *pl_cpu_tlayer_field(&t->w->layers[l], i);
            if ((rc = pl_adamw_add(g->opt, w, sizes[i], !norm,
                                   pl_cpu_tlayer_field(&g->grads[l - g->l0], i))) != PL_OK)
                return rc;
        }
    if (g->last &&
        ((rc = pl_adamw_add(g->opt, t->w->final_norm, hd, false, &g->g_norm)) != PL_OK ||
         (rc = pl_adamw_add(g->opt, t->w->head, hd * c->vocab, true, &g->g_head)) != PL_OK))
        return rc;
    return PL_OK;
}

static pl_status_t s_stage_init(pl_train_local_t *t, int s, int l0, int l1)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    s_stage_t *g = &t->st[s];
    int M = c->n_mb, nl = l1 - l0;
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    pl_status_t rc;
    g->l0 = l0, g->l1 = l1, g->first = s == 0, g->last = s == t->n_stages - 1;
    if ((rc = pl_adamw_create(&c->opt, &g->opt)) != PL_OK)
        return rc;
    g->grads = calloc((size_t)(nl ? nl : 1), sizeof(*g->grads));
    g->stash = calloc((size_t)(nl > 0 ? nl * M : 1), sizeof(*g->stash));
    g->head = calloc((size_t)M, sizeof(*g->head));
    g->x_in = s_bufs(M, act), g->y_out = s_bufs(M, act);
    g->g_in = s_bufs(M, act), g->g_out = s_bufs(M, act);
    g->tmp = malloc(sizeof(float) * act);
    t->act[s].slot = s_bufs(M, act), t->grad[s].slot = s_bufs(M, act);
    t->act[s].full = calloc((size_t)M, sizeof(bool));
    t->grad[s].full = calloc((size_t)M, sizeof(bool));
    if (!g->grads || !g->stash || !g->head || !g->x_in || !g->y_out || !g->g_in || !g->g_out ||
        !g->tmp || !t->act[s].slot || !t->grad[s].slot || !t->act[s].full || !t->grad[s].full)
        return pl_error(PL_ERR_NOMEM, "train: stage %d buffers", s);
    for (int i = 0; i < nl * M; i++)
        if ((rc = pl_cpu_tstash_create(&c->dims, c->seq_len, c->recompute, &g->stash[i])) != PL_OK)
            return rc;
    if (g->last)
        for (int m = 0; m < M; m++)
            if ((rc = pl_cpu_thead_create(c->seq_len, c->dims.hidden, c->vocab, c->dims.eps,
                                          &g->head[m])) != PL_OK)
                return rc;
    return s_stage_tensors(t, g);
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
    pl_status_t rc = PL_OK;
    int half = cfg->dims.head_dim / 2, *pos = malloc(sizeof(int) * (size_t)cfg->seq_len);
    t->cos_tab = malloc(sizeof(float) * (size_t)cfg->seq_len * half);
    t->sin_tab = malloc(sizeof(float) * (size_t)cfg->seq_len * half);
    if (!pos || !t->cos_tab || !t->sin_tab) {
        free(pos);
        rc = pl_error(PL_ERR_NOMEM, "train: rope tables");
        goto err_t;
    }
    for (int i = 0; i < cfg->seq_len; i++)
        pos[i] = i;
    pl_cpu_rope_table(cfg->inv_freq, half, pos, cfg->seq_len, t->cos_tab, t->sin_tab);
    free(pos);
    for (int s = 0, l = 0; s < n_stages; l += counts[s], s++)
        if ((rc = s_stage_init(t, s, l, l + counts[s])) != PL_OK)
            goto err_t;
    *tl_p = t;
    return PL_OK;

err_t:
    pl_train_local_destroy(&t);
    return rc;
}

static pl_status_t s_forward(pl_train_local_t *t, s_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    const int32_t *tok = t->tokens + (size_t)m * (c->seq_len + 1);
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    pl_status_t rc;
    if (g->first && (rc = pl_cpu_tembed_forward(t->w->embed, c->vocab, c->dims.hidden, tok,
                                                c->seq_len, g->x_in[m])) != PL_OK)
        return rc;
    memcpy(g->y_out[m], g->x_in[m], sizeof(float) * act);
    for (int l = g->l0; l < g->l1; l++) {
        pl_cpu_tstash_t *st = g->stash[(size_t)(l - g->l0) * c->n_mb + m];
        if ((rc = pl_cpu_tlayer_forward(&c->dims, &t->w->layers[l], t->cos_tab, t->sin_tab,
                                        g->y_out[m], st, g->tmp)) != PL_OK)
            return rc;
        memcpy(g->y_out[m], g->tmp, sizeof(float) * act);
    }
    if (!g->last)
        return PL_OK;
    double loss = 0;
    float scale = 1.0f / ((float)c->seq_len * c->n_mb);
    if ((rc = pl_cpu_thead_forward(g->head[m], t->w->final_norm, t->w->head, g->y_out[m], tok + 1,
                                   scale, &loss)) != PL_OK)
        return rc;
    t->loss_sum += loss;
    return PL_OK;
}

static pl_status_t s_backward_input(pl_train_local_t *t, s_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    pl_status_t rc;
    if (g->last) {
        if ((rc = pl_cpu_thead_backward_input(g->head[m], t->w->final_norm, t->w->head,
                                              g->g_out[m])) != PL_OK)
            return rc;
    } else {
        memcpy(g->g_out[m], g->g_in[m], sizeof(float) * act);
    }
    for (int l = g->l1 - 1; l >= g->l0; l--) {
        pl_cpu_tstash_t *st = g->stash[(size_t)(l - g->l0) * c->n_mb + m];
        if ((rc = pl_cpu_tlayer_backward_input(&c->dims, &t->w->layers[l], t->cos_tab, t->sin_tab,
                                               st, g->g_out[m], g->g_out[m])) != PL_OK)
            return rc;
    }
    return PL_OK;
}

static void s_backward_weight(pl_train_local_t *t, s_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    for (int l = g->l1 - 1; l >= g->l0; l--)
        pl_cpu_tlayer_backward_weight(&c->dims, g->stash[(size_t)(l - g->l0) * c->n_mb + m],
                                      &g->grads[l - g->l0]);
    if (g->last)
        pl_cpu_thead_backward_weight(g->head[m], g->g_norm, g->g_head);
    if (g->first)
        pl_cpu_embed_bwd_weight(t->tokens + (size_t)m * (c->seq_len + 1), g->g_out[m], c->seq_len,
                                c->dims.hidden, g->g_embed);
}

static size_t s_stash_bytes(const pl_train_local_t *t, const s_stage_t *g)
{
    size_t b = 0;
    for (int i = 0; i < (g->l1 - g->l0) * t->cfg.n_mb; i++)
        b += pl_cpu_tstash_bytes(g->stash[i]);
    if (g->last)
        for (int m = 0; m < t->cfg.n_mb; m++)
            b += pl_cpu_thead_bytes(g->head[m]);
    return b;
}

/* Run stage s's next op; *ran_p false when it waits on a mailbox. */
static pl_status_t s_step_op(pl_train_local_t *t, int s, bool *ran_p)
{
    s_stage_t *g = &t->st[s];
    pl_train_op_t op = t->sched->ops[s][g->pc];
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
        rc = s_forward(t, g, m);
        break;
    case PL_TRAIN_OP_B:
        rc = s_backward_input(t, g, m);
        break;
    case PL_TRAIN_OP_W:
        s_backward_weight(t, g, m);
        break;
    }
    if (rc == PL_OK)
        g->pc++, *ran_p = true;
    return rc;
}

pl_status_t pl_train_local_step(pl_train_local_t *t, const int32_t *tokens, pl_train_step_t *out)
{
    const pl_train_local_cfg_t *c = &t->cfg;
    size_t n_tok = (size_t)c->n_mb * (c->seq_len + 1);
    for (size_t i = 0; i < n_tok; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return pl_error(PL_ERR_RANGE, "train: token %zu of the step is %d, vocab %d", i,
                            tokens[i], c->vocab);
    pl_train_step_t r = {0};
    t->tokens = tokens;
    t->loss_sum = 0;
    for (int s = 0; s < t->n_stages; s++)
        t->st[s].pc = 0;
    pl_status_t rc = PL_OK;
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < t->n_stages; s++) {
            bool ran = true;
            while (ran && t->st[s].pc < t->sched->n_ops[s]) {
                if ((rc = s_step_op(t, s, &ran)) != PL_OK)
                    goto err_step;
                progress |= ran;
                size_t now = s_stash_bytes(t, &t->st[s]);
                if (now > r.peak_stash_bytes[s])
                    r.peak_stash_bytes[s] = now;
            }
        }
    }
    for (int s = 0; s < t->n_stages; s++)
        if (t->st[s].pc < t->sched->n_ops[s]) {
            rc = pl_error(PL_ERR_INFEASIBLE, "train: stage %d waits forever at op %d", s,
                          t->st[s].pc);
            goto err_step;
        }
    double sumsq = 0;
    for (int s = 0; s < t->n_stages; s++)
        sumsq += pl_adamw_grad_sumsq(t->st[s].opt);
    for (int s = 0; s < t->n_stages; s++)
        pl_adamw_step(t->st[s].opt, sumsq, &r.clip);
    r.loss = t->loss_sum / ((double)c->seq_len * c->n_mb);
    r.grad_norm = sqrt(sumsq);
    *out = r;
    return PL_OK;

err_step:
    /* nothing half-applied: the weights are untouched, gradients, stashes and mailboxes dropped */
    for (int s = 0; s < t->n_stages; s++) {
        s_stage_t *g = &t->st[s];
        pl_status_t rc2 = PL_OK;
        pl_adamw_zero_grad(g->opt);
        for (int i = 0; i < (g->l1 - g->l0) * c->n_mb && rc2 == PL_OK; i++) {
            pl_cpu_tstash_destroy(&g->stash[i]);
            rc2 = pl_cpu_tstash_create(&c->dims, c->seq_len, c->recompute, &g->stash[i]);
        }
        for (int m = 0; g->last && m < c->n_mb && rc2 == PL_OK; m++) {
            pl_cpu_thead_destroy(&g->head[m]);
            rc2 =
                pl_cpu_thead_create(c->seq_len, c->dims.hidden, c->vocab, c->dims.eps, &g->head[m]);
        }
        if (rc2 != PL_OK)
            return rc2;
        for (int m = 0; m < c->n_mb; m++)
            t->act[s].full[m] = t->grad[s].full[m] = false;
    }
    return rc;
}

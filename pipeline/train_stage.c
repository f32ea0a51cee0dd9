/* One training stage (train_stage.h): its buffers, optimizer tensors, and the F, B and W of a
 * microbatch over its layers, with the embedding on the first stage and head + loss on the last. */
#include "pipeline/train_stage.h"

#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"

#include <stdlib.h>
#include <string.h>

float **pl_train_bufs_new(int n, size_t floats)
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

void pl_train_bufs_free(float **b, int n)
{
    if (!b)
        return;
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
}

void pl_train_stage_fini(pl_train_stage_t *g)
{
    if (!g->cfg)
        return;
    int M = g->cfg->n_mb, nl = g->l1 - g->l0;
    if (g->stash)
        for (int i = 0; i < nl * M; i++)
            pl_cpu_tstash_destroy(&g->stash[i]);
    if (g->head)
        for (int m = 0; m < M; m++)
            pl_cpu_thead_destroy(&g->head[m]);
    free(g->stash);
    free(g->head);
    free(g->grads);
    pl_train_bufs_free(g->x_in, M);
    pl_train_bufs_free(g->y_out, M);
    pl_train_bufs_free(g->g_in, M);
    pl_train_bufs_free(g->g_out, M);
    free(g->tmp);
    pl_adamw_destroy(&g->opt);
    memset(g, 0, sizeof(*g));
}

/* Register stage g's tensors with its optimizer, in model order. */
static pl_status_t s_stage_tensors(pl_train_stage_t *g)
{
    const pl_train_local_cfg_t *c = g->cfg;
    size_t hd = (size_t)c->dims.hidden, sizes[9];
    pl_status_t rc;
    pl_cpu_tlayer_sizes(&c->dims, sizes);
    if (g->first && (rc = pl_adamw_add(g->opt, g->w->embed, hd * c->vocab, true, &g->g_embed)) !=
                        PL_OK)
        return rc;
    for (int l = g->l0; l < g->l1; l++)
        for (int i = 0; i < 9; i++) {
            bool norm = i == 0 || i == 5; /* no decay on norm weights */
            float *w = *pl_cpu_tlayer_field(&g->w->layers[l], i);
            if ((rc = pl_adamw_add(g->opt, w, sizes[i], !norm,
                                   pl_cpu_tlayer_field(&g->grads[l - g->l0], i))) != PL_OK)
                return rc;
        }
    if (g->last &&
        ((rc = pl_adamw_add(g->opt, g->w->final_norm, hd, false, &g->g_norm)) != PL_OK ||
         (rc = pl_adamw_add(g->opt, g->w->head, hd * c->vocab, true, &g->g_head)) != PL_OK))
        return rc;
    return PL_OK;
}

/* A fresh stash per (layer, microbatch) and head per microbatch (the last stage). */
static pl_status_t s_stashes(pl_train_stage_t *g)
{
    const pl_train_local_cfg_t *c = g->cfg;
    int M = c->n_mb, nl = g->l1 - g->l0;
    pl_status_t rc;
    for (int i = 0; i < nl * M; i++) {
        pl_cpu_tstash_destroy(&g->stash[i]);
        if ((rc = pl_cpu_tstash_create(&c->dims, c->seq_len, c->recompute, &g->stash[i])) != PL_OK)
            return rc;
    }
    for (int m = 0; g->last && m < M; m++) {
        pl_cpu_thead_destroy(&g->head[m]);
        if ((rc = pl_cpu_thead_create(c->seq_len, c->dims.hidden, c->vocab, c->dims.eps,
                                      &g->head[m])) != PL_OK)
            return rc;
    }
    return PL_OK;
}

pl_status_t pl_train_stage_init(pl_train_stage_t *g, const pl_train_local_cfg_t *cfg,
                                pl_train_weights_t *w, const float *cos_tab, const float *sin_tab,
                                int l0, int l1, bool first, bool last)
{
    int M = cfg->n_mb, nl = l1 - l0;
    size_t act = (size_t)cfg->seq_len * cfg->dims.hidden;
    pl_status_t rc;
    g->cfg = cfg, g->w = w, g->cos_tab = cos_tab, g->sin_tab = sin_tab;
    g->l0 = l0, g->l1 = l1, g->first = first, g->last = last;
    if ((rc = pl_adamw_create(&cfg->opt, &g->opt)) != PL_OK)
        return rc;
    g->grads = calloc((size_t)(nl ? nl : 1), sizeof(*g->grads));
    g->stash = calloc((size_t)(nl > 0 ? nl * M : 1), sizeof(*g->stash));
    g->head = calloc((size_t)M, sizeof(*g->head));
    g->x_in = pl_train_bufs_new(M, act), g->y_out = pl_train_bufs_new(M, act);
    g->g_in = pl_train_bufs_new(M, act), g->g_out = pl_train_bufs_new(M, act);
    g->tmp = malloc(sizeof(float) * act);
    if (!g->grads || !g->stash || !g->head || !g->x_in || !g->y_out || !g->g_in || !g->g_out ||
        !g->tmp)
        return pl_error(PL_ERR_NOMEM, "train: buffers of layers %d..%d", l0, l1);
    if ((rc = s_stashes(g)) != PL_OK)
        return rc;
    return s_stage_tensors(g);
}

pl_status_t pl_train_rope_tables(const pl_train_local_cfg_t *cfg, float **cos_p, float **sin_p)
{
    int half = cfg->dims.head_dim / 2, *pos = malloc(sizeof(int) * (size_t)cfg->seq_len);
    float *ct = malloc(sizeof(float) * (size_t)cfg->seq_len * half);
    float *st = malloc(sizeof(float) * (size_t)cfg->seq_len * half);
    if (!pos || !ct || !st) {
        free(pos), free(ct), free(st);
        return pl_error(PL_ERR_NOMEM, "train: rope tables");
    }
    for (int i = 0; i < cfg->seq_len; i++)
        pos[i] = i;
    pl_cpu_rope_table(cfg->inv_freq, half, pos, cfg->seq_len, ct, st);
    free(pos);
    *cos_p = ct, *sin_p = st;
    return PL_OK;
}

pl_status_t pl_train_tokens_check(const pl_train_local_cfg_t *cfg, const int32_t *tokens)
{
    size_t n_tok = (size_t)cfg->n_mb * (cfg->seq_len + 1);
    for (size_t i = 0; i < n_tok; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab)
            return pl_error(PL_ERR_RANGE, "train: token %zu of the step is %d, vocab %d", i,
                            tokens[i], cfg->vocab);
    return PL_OK;
}

pl_status_t pl_train_stage_forward(pl_train_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = g->cfg;
    const int32_t *tok = g->tokens + (size_t)m * (c->seq_len + 1);
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    pl_status_t rc;
    if (g->first && (rc = pl_cpu_tembed_forward(g->w->embed, c->vocab, c->dims.hidden, tok,
                                                c->seq_len, g->x_in[m])) != PL_OK)
        return rc;
    memcpy(g->y_out[m], g->x_in[m], sizeof(float) * act);
    for (int l = g->l0; l < g->l1; l++) {
        pl_cpu_tstash_t *st = g->stash[(size_t)(l - g->l0) * c->n_mb + m];
        if ((rc = pl_cpu_tlayer_forward(&c->dims, &g->w->layers[l], g->cos_tab, g->sin_tab,
                                        g->y_out[m], st, g->tmp)) != PL_OK)
            return rc;
        memcpy(g->y_out[m], g->tmp, sizeof(float) * act);
    }
    if (!g->last)
        return PL_OK;
    double loss = 0;
    float scale = 1.0f / ((float)c->seq_len * c->n_mb);
    if ((rc = pl_cpu_thead_forward(g->head[m], g->w->final_norm, g->w->head, g->y_out[m], tok + 1,
                                   scale, &loss)) != PL_OK)
        return rc;
    g->loss_sum += loss;
    return PL_OK;
}

pl_status_t pl_train_stage_backward_input(pl_train_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = g->cfg;
    size_t act = (size_t)c->seq_len * c->dims.hidden;
    pl_status_t rc;
    if (g->last) {
        if ((rc = pl_cpu_thead_backward_input(g->head[m], g->w->final_norm, g->w->head,
                                              g->g_out[m])) != PL_OK)
            return rc;
    } else {
        memcpy(g->g_out[m], g->g_in[m], sizeof(float) * act);
    }
    for (int l = g->l1 - 1; l >= g->l0; l--) {
        pl_cpu_tstash_t *st = g->stash[(size_t)(l - g->l0) * c->n_mb + m];
        if ((rc = pl_cpu_tlayer_backward_input(&c->dims, &g->w->layers[l], g->cos_tab, g->sin_tab,
                                               st, g->g_out[m], g->g_out[m])) != PL_OK)
            return rc;
    }
    return PL_OK;
}

void pl_train_stage_backward_weight(pl_train_stage_t *g, int m)
{
    const pl_train_local_cfg_t *c = g->cfg;
    for (int l = g->l1 - 1; l >= g->l0; l--)
        pl_cpu_tlayer_backward_weight(&c->dims, g->stash[(size_t)(l - g->l0) * c->n_mb + m],
                                      &g->grads[l - g->l0]);
    if (g->last)
        pl_cpu_thead_backward_weight(g->head[m], g->g_norm, g->g_head);
    if (g->first)
        pl_cpu_embed_bwd_weight(g->tokens + (size_t)m * (c->seq_len + 1), g->g_out[m], c->seq_len,
                                c->dims.hidden, g->g_embed);
}

size_t pl_train_stage_stash_bytes(const pl_train_stage_t *g)
{
    size_t b = 0;
    for (int i = 0; i < (g->l1 - g->l0) * g->cfg->n_mb; i++)
        b += pl_cpu_tstash_bytes(g->stash[i]);
    if (g->last)
        for (int m = 0; m < g->cfg->n_mb; m++)
            b += pl_cpu_thead_bytes(g->head[m]);
    return b;
}

pl_status_t pl_train_stage_reset(pl_train_stage_t *g)
{
    pl_adamw_zero_grad(g->opt);
    g->loss_sum = 0;
    return s_stashes(g);
}

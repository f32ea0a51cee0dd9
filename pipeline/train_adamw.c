/* AdamW (decoupled weight decay, bias-corrected moments, as torch.optim.AdamW) over a stage's
 * tensors, with the learning-rate schedule and the global-norm clipping factor. */
#include "pipeline/train_adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *w, *g, *m, *v;
    size_t n;
    bool decay;
} s_tensor_t;

struct pl_adamw {
    pl_adamw_cfg_t cfg;
    s_tensor_t *t;
    int n_t, cap, steps;
};

pl_adamw_cfg_t pl_adamw_cfg_default(void)
{
    return (pl_adamw_cfg_t){.lr = 1e-3f,
                            .min_lr = 0.0f,
                            .warmup_steps = 0,
                            .total_steps = 1,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.01f,
                            .clip_norm = 0.0f};
}

pl_status_t pl_adamw_cfg_check(const pl_adamw_cfg_t *c)
{
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return pl_error(PL_ERR_RANGE, "optimizer: lr %g must be > 0", (double)c->lr);
    if (!(c->min_lr >= 0.0f) || c->min_lr > c->lr)
        return pl_error(PL_ERR_RANGE, "optimizer: min_lr %g must be in [0, lr]", (double)c->min_lr);
    if (c->total_steps < 1)
        return pl_error(PL_ERR_RANGE, "optimizer: total_steps %d must be >= 1", c->total_steps);
    if (c->warmup_steps < 0 || c->warmup_steps > c->total_steps)
        return pl_error(PL_ERR_RANGE, "optimizer: warmup_steps %d must be in [0, total_steps]",
                        c->warmup_steps);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return pl_error(PL_ERR_RANGE, "optimizer: beta1 %g must be in [0, 1)", (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return pl_error(PL_ERR_RANGE, "optimizer: beta2 %g must be in [0, 1)", (double)c->beta2);
    if (!(c->eps > 0.0f))
        return pl_error(PL_ERR_RANGE, "optimizer: eps %g must be > 0", (double)c->eps);
    if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
        return pl_error(PL_ERR_RANGE, "optimizer: weight_decay %g must be >= 0",
                        (double)c->weight_decay);
    if (!(c->clip_norm >= 0.0f) || !isfinite(c->clip_norm))
        return pl_error(PL_ERR_RANGE, "optimizer: clip_norm %g must be >= 0", (double)c->clip_norm);
    return PL_OK;
}

double pl_adamw_lr(const pl_adamw_cfg_t *c, int step)
{
    if (step < c->warmup_steps)
        return (double)c->lr * (step + 1) / c->warmup_steps;
    int span = c->total_steps - c->warmup_steps;
    double p = span > 0 ? (double)(step - c->warmup_steps) / span : 1.0;
    if (p > 1.0)
        p = 1.0;
    return c->min_lr + 0.5 * ((double)c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

pl_status_t pl_adamw_create(const pl_adamw_cfg_t *cfg, pl_adamw_t **opt_p)
{
    pl_status_t rc = pl_adamw_cfg_check(cfg);
    if (rc != PL_OK)
        return rc;
    pl_adamw_t *o = calloc(1, sizeof(*o));
    if (!o)
        return pl_error(PL_ERR_NOMEM, "optimizer");
    o->cfg = *cfg;
    *opt_p = o;
    return PL_OK;
}

void pl_adamw_destroy(pl_adamw_t **opt_p)
{
    if (!opt_p || !*opt_p)
        return;
    pl_adamw_t *o = *opt_p;
    for (int i = 0; i < o->n_t; i++) {
        free(o->t[i].g);
        free(o->t[i].m);
        free(o->t[i].v);
    }
    free(o->t);
    free(o);
    *opt_p = NULL;
}

pl_status_t pl_adamw_add(pl_adamw_t *o, float *w, size_t n, bool decay, float **grad_p)
{
    if (o->n_t == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        s_tensor_t *t = realloc(o->t, sizeof(*t) * (size_t)cap);
        if (!t)
            return pl_error(PL_ERR_NOMEM, "optimizer: tensor table");
        o->t = t, o->cap = cap;
    }
    s_tensor_t t = {.w = w, .n = n, .decay = decay};
    t.g = calloc(n ? n : 1, sizeof(float));
    t.m = calloc(n ? n : 1, sizeof(float));
    t.v = calloc(n ? n : 1, sizeof(float));
    if (!t.g || !t.m || !t.v) {
        free(t.g);
        free(t.m);
        free(t.v);
        return pl_error(PL_ERR_NOMEM, "optimizer: state of a %zu-float tensor", n);
    }
    o->t[o->n_t++] = t;
    *grad_p = t.g;
    return PL_OK;
}

void pl_adamw_zero_grad(pl_adamw_t *o)
{
    for (int i = 0; i < o->n_t; i++)
        memset(o->t[i].g, 0, sizeof(float) * o->t[i].n);
}

void pl_adamw_grad(pl_adamw_t *o, int i, float **g_p, size_t *n_p)
{
    *g_p = o->t[i].g;
    *n_p = o->t[i].n;
}

double pl_adamw_grad_sumsq(const pl_adamw_t *o)
{
    double s = 0.0;
    for (int i = 0; i < o->n_t; i++)
        for (size_t j = 0; j < o->t[i].n; j++)
            s += (double)o->t[i].g[j] * o->t[i].g[j];
    return s;
}

void pl_adamw_step(pl_adamw_t *o, double global_sumsq, float *clip_p)
{
    const pl_adamw_cfg_t *c = &o->cfg;
    float clip = 1.0f;
    double norm = sqrt(global_sumsq);
    if (c->clip_norm > 0.0f && norm > c->clip_norm)
        clip = (float)(c->clip_norm / (norm + 1e-6));
    int t = ++o->steps;
    float lr = (float)pl_adamw_lr(c, t - 1);
    float bc1 = (float)(1.0 - pow(c->beta1, t)), bc2 = (float)(1.0 - pow(c->beta2, t));
    for (int i = 0; i < o->n_t; i++) {
        s_tensor_t *x = &o->t[i];
        float decay = x->decay ? 1.0f - lr * c->weight_decay : 1.0f;
        for (size_t j = 0; j < x->n; j++) {
            float g = x->g[j] * clip;
            x->m[j] = c->beta1 * x->m[j] + (1.0f - c->beta1) * g;
            x->v[j] = c->beta2 * x->v[j] + (1.0f - c->beta2) * g * g;
            float mh = x->m[j] / bc1, vh = x->v[j] / bc2;
            x->w[j] = x->w[j] * decay - lr * mh / (sqrtf(vh) + c->eps);
        }
    }
    pl_adamw_zero_grad(o);
    if (clip_p)
        *clip_p = clip;
}

int pl_adamw_steps(const pl_adamw_t *o)
{
    return o->steps;
}

int pl_adamw_n_tensors(const pl_adamw_t *o)
{
    return o->n_t;
}

void pl_adamw_moments(pl_adamw_t *o, int i, float **m_p, float **v_p, size_t *n_p)
{
    *m_p = o->t[i].m, *v_p = o->t[i].v, *n_p = o->t[i].n;
}

pl_status_t pl_adamw_set_steps(pl_adamw_t *o, int steps)
{
    if (steps < 0 || steps > o->cfg.total_steps)
        return pl_error(PL_ERR_RANGE, "optimizer: %d steps taken is outside 0..%d (total_steps)",
                        steps, o->cfg.total_steps);
    o->steps = steps;
    return PL_OK;
}

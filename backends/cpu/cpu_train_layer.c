/* A decoder layer's training forward, input-gradient (B) and weight-gradient (W) passes over the
 * kernels of cpu_ops.c and cpu_backward*.c, with the activations kept between them. */
#include "backends/cpu/cpu_train_layer.h"

#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"

#include <stdlib.h>
#include <string.h>

struct pl_cpu_tstash {
    pl_cpu_tdims_t d;
    int n;
    bool recompute, have_f, have_b;
    float *x;   /* [n][hidden] the layer's input (always kept from F) */
    float *fwd; /* the rest of the forward's activations, one block */
    float *xn1, *q, *k, *v, *att, *h, *xn2, *gate, *up, *act;
    float *bwd; /* B's gradients that W needs, one block */
    float *dy, *dgate, *dup, *dxn2, *dh, *dq, *dk, *dv, *dxn1;
};

void pl_cpu_tlayer_sizes(const pl_cpu_tdims_t *d, size_t sizes[9])
{
    size_t hd = (size_t)d->hidden, q = (size_t)d->n_heads * d->head_dim;
    size_t kv = (size_t)d->n_kv * d->head_dim, in = (size_t)d->inter;
    size_t s[9] = {hd, q * hd, kv * hd, kv * hd, hd * q, hd, in * hd, in * hd, hd * in};
    memcpy(sizes, s, sizeof(s));
}

float **pl_cpu_tlayer_field(pl_cpu_tlayer_t *l, int i)
{
    float **f[9] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo,
                    &l->ffn_norm,  &l->wg, &l->wu, &l->wd};
    return f[i];
}

/* The buffers of the forward block and of B's block, in the order they are laid out: floats per
 * token each. One table gives both a block's size and its layout. */
enum { S_FWD_BUFS = 10, S_BWD_BUFS = 9 };

static void s_fwd_widths(const pl_cpu_tdims_t *d, size_t w[S_FWD_BUFS])
{
    size_t hd = (size_t)d->hidden, q = (size_t)d->n_heads * d->head_dim;
    size_t kv = (size_t)d->n_kv * d->head_dim, in = (size_t)d->inter;
    /* xn1, q, k, v, att, h, xn2, gate, up, act */
    size_t s[S_FWD_BUFS] = {hd, q, kv, kv, q, hd, hd, in, in, in};
    memcpy(w, s, sizeof(s));
}

static void s_bwd_widths(const pl_cpu_tdims_t *d, size_t w[S_BWD_BUFS])
{
    size_t hd = (size_t)d->hidden, q = (size_t)d->n_heads * d->head_dim;
    size_t kv = (size_t)d->n_kv * d->head_dim, in = (size_t)d->inter;
    /* dy, dgate, dup, dxn2, dh, dq, dk, dv, dxn1 */
    size_t s[S_BWD_BUFS] = {hd, in, in, hd, hd, q, kv, kv, hd};
    memcpy(w, s, sizeof(s));
}

static size_t s_floats(const size_t *w, int count, int n)
{
    size_t t = 0;
    for (int i = 0; i < count; i++)
        t += w[i];
    return (size_t)n * t;
}

static size_t s_fwd_floats(const pl_cpu_tdims_t *d, int n)
{
    size_t w[S_FWD_BUFS];
    s_fwd_widths(d, w);
    return s_floats(w, S_FWD_BUFS, n);
}

static size_t s_bwd_floats(const pl_cpu_tdims_t *d, int n)
{
    size_t w[S_BWD_BUFS];
    s_bwd_widths(d, w);
    return s_floats(w, S_BWD_BUFS, n);
}

size_t pl_cpu_tstash_f_bytes(const pl_cpu_tdims_t *d, int n_tok, bool recompute)
{
    size_t x = (size_t)n_tok * d->hidden;
    return sizeof(float) * (recompute ? x : x + s_fwd_floats(d, n_tok));
}

size_t pl_cpu_tstash_b_bytes(const pl_cpu_tdims_t *d, int n_tok, bool recompute)
{
    return sizeof(float) * (s_bwd_floats(d, n_tok) + (recompute ? s_fwd_floats(d, n_tok) : 0));
}

pl_status_t pl_cpu_tstash_create(const pl_cpu_tdims_t *d, int n_tok, bool recompute,
                                 pl_cpu_tstash_t **st_p)
{
    if (n_tok <= 0 || d->hidden <= 0 || d->inter <= 0 || d->n_heads <= 0 || d->n_kv <= 0 ||
        d->head_dim <= 0 || d->head_dim % 2 || d->n_heads % d->n_kv)
        return pl_error(PL_ERR_INVALID, "train stash: bad layer shape or n_tok %d", n_tok);
    pl_cpu_tstash_t *st = calloc(1, sizeof(*st));
    if (!st)
        return pl_error(PL_ERR_NOMEM, "train stash");
    st->d = *d;
    st->n = n_tok;
    st->recompute = recompute;
    st->x = malloc(sizeof(float) * (size_t)n_tok * d->hidden);
    if (!st->x) {
        free(st);
        return pl_error(PL_ERR_NOMEM, "train stash");
    }
    *st_p = st;
    return PL_OK;
}

void pl_cpu_tstash_destroy(pl_cpu_tstash_t **st_p)
{
    if (!st_p || !*st_p)
        return;
    free((*st_p)->x);
    free((*st_p)->fwd);
    free((*st_p)->bwd);
    free(*st_p);
    *st_p = NULL;
}

size_t pl_cpu_tstash_bytes(const pl_cpu_tstash_t *st)
{
    if (!st->have_f)
        return 0;
    size_t f = st->fwd ? s_fwd_floats(&st->d, st->n) : 0;
    size_t b = st->bwd ? s_bwd_floats(&st->d, st->n) : 0;
    return sizeof(float) * ((size_t)st->n * st->d.hidden + f + b);
}

/* One block of n tokens' buffers of the given widths into *block_p, bufs[i] pointing at the i-th.
 */
static pl_status_t s_carve(const size_t *w, int count, int n, float **const *bufs, float **block_p,
                           const char *what)
{
    float *p = malloc(sizeof(float) * s_floats(w, count, n));
    if (!p)
        return pl_error(PL_ERR_NOMEM, "train stash: %s", what);
    *block_p = p;
    for (int i = 0; i < count; i++) {
        *bufs[i] = p;
        p += (size_t)n * w[i];
    }
    return PL_OK;
}

static pl_status_t s_alloc_fwd(pl_cpu_tstash_t *st)
{
    size_t w[S_FWD_BUFS];
    float **const bufs[S_FWD_BUFS] = {&st->xn1, &st->q,   &st->k,    &st->v,  &st->att,
                                      &st->h,   &st->xn2, &st->gate, &st->up, &st->act};
    s_fwd_widths(&st->d, w);
    return s_carve(w, S_FWD_BUFS, st->n, bufs, &st->fwd, "forward activations");
}

static pl_status_t s_alloc_bwd(pl_cpu_tstash_t *st)
{
    size_t w[S_BWD_BUFS];
    float **const bufs[S_BWD_BUFS] = {&st->dy, &st->dgate, &st->dup, &st->dxn2, &st->dh,
                                      &st->dq, &st->dk,    &st->dv,  &st->dxn1};
    s_bwd_widths(&st->d, w);
    return s_carve(w, S_BWD_BUFS, st->n, bufs, &st->bwd, "gradients");
}

/* The forward from st->x into st's activation buffers; y = the layer's output. */
static pl_status_t s_forward(const pl_cpu_tdims_t *d, const pl_cpu_tlayer_t *w, const float *ct,
                             const float *stab, pl_cpu_tstash_t *st, float *y)
{
    int n = st->n, hd = d->hidden, qd = d->n_heads * d->head_dim, kvd = d->n_kv * d->head_dim;
    size_t nh = (size_t)n * hd;
    float *scratch = malloc(sizeof(float) * (size_t)n);
    if (!scratch)
        return pl_error(PL_ERR_NOMEM, "train forward: attention scratch");
    pl_cpu_rmsnorm(st->x, w->attn_norm, n, hd, d->eps, st->xn1);
    pl_cpu_matmul(st->xn1, n, hd, w->wq, qd, st->q);
    pl_cpu_matmul(st->xn1, n, hd, w->wk, kvd, st->k);
    pl_cpu_matmul(st->xn1, n, hd, w->wv, kvd, st->v);
    pl_cpu_rope_apply(st->q, n, qd, d->n_heads, d->head_dim, ct, stab);
    pl_cpu_rope_apply(st->k, n, kvd, d->n_kv, d->head_dim, ct, stab);
    pl_cpu_attention_train_fwd(st->q, st->k, st->v, n, d->n_heads, d->n_kv, d->head_dim, scratch,
                               st->att);
    free(scratch);
    pl_cpu_matmul(st->att, n, qd, w->wo, hd, st->h);
    pl_cpu_add(st->h, st->x, nh);
    pl_cpu_rmsnorm(st->h, w->ffn_norm, n, hd, d->eps, st->xn2);
    pl_cpu_matmul(st->xn2, n, hd, w->wg, d->inter, st->gate);
    pl_cpu_matmul(st->xn2, n, hd, w->wu, d->inter, st->up);
    memcpy(st->act, st->gate, sizeof(float) * (size_t)n * d->inter);
    pl_cpu_swiglu(st->act, st->up, (size_t)n * d->inter);
    if (y) {
        pl_cpu_matmul(st->act, n, d->inter, w->wd, hd, y);
        pl_cpu_add(y, st->h, nh);
    }
    return PL_OK;
}

pl_status_t pl_cpu_tlayer_forward(const pl_cpu_tdims_t *d, const pl_cpu_tlayer_t *w,
                                  const float *cos_tab, const float *sin_tab, const float *x,
                                  pl_cpu_tstash_t *st, float *y)
{
    if (st->have_f)
        return pl_error(PL_ERR_BUSY, "train forward: stash still holds a microbatch");
    size_t nh = (size_t)st->n * d->hidden;
    memcpy(st->x, x, sizeof(float) * nh);
    pl_status_t rc = s_alloc_fwd(st);
    if (rc != PL_OK)
        return rc;
    rc = s_forward(d, w, cos_tab, sin_tab, st, y);
    if (rc != PL_OK || st->recompute) {
        free(st->fwd);
        st->fwd = NULL;
    }
    if (rc == PL_OK)
        st->have_f = true;
    return rc;
}

pl_status_t pl_cpu_tlayer_backward_input(const pl_cpu_tdims_t *d, const pl_cpu_tlayer_t *w,
                                         const float *cos_tab, const float *sin_tab,
                                         pl_cpu_tstash_t *st, const float *dy, float *dx)
{
    if (!st->have_f || st->have_b)
        return pl_error(PL_ERR_INVALID, "train backward: no forward waiting for its backward");
    int n = st->n, hd = d->hidden, qd = d->n_heads * d->head_dim, kvd = d->n_kv * d->head_dim;
    size_t nh = (size_t)n * hd;
    pl_status_t rc;
    bool recomputed = false;
    if (!st->fwd) {
        if ((rc = s_alloc_fwd(st)) != PL_OK)
            return rc;
        if ((rc = s_forward(d, w, cos_tab, sin_tab, st, NULL)) != PL_OK)
            goto err_fwd;
        recomputed = true;
    }
    float *scratch = malloc(sizeof(float) * 2 * (size_t)n);
    float *tmp = malloc(sizeof(float) * (size_t)n * (qd > d->inter ? qd : d->inter));
    if (!scratch || !tmp || (rc = s_alloc_bwd(st)) != PL_OK) {
        free(scratch);
        free(tmp);
        rc = pl_error(PL_ERR_NOMEM, "train backward: buffers");
        goto err_fwd;
    }
    memcpy(st->dy, dy, sizeof(float) * nh);
    /* y = h + act @ wd^T, act = silu(gate) * up */
    pl_cpu_matmul_bwd_input(st->dy, n, hd, w->wd, d->inter, 0, tmp);
    pl_cpu_swiglu_bwd(st->gate, st->up, tmp, (size_t)n * d->inter, st->dgate, st->dup);
    pl_cpu_matmul_bwd_input(st->dgate, n, d->inter, w->wg, hd, 0, st->dxn2);
    pl_cpu_matmul_bwd_input(st->dup, n, d->inter, w->wu, hd, 1, st->dxn2);
    /* h = x + att @ wo^T */
    memcpy(st->dh, st->dy, sizeof(float) * nh);
    pl_cpu_rmsnorm_bwd_input(st->h, w->ffn_norm, st->dxn2, n, hd, d->eps, st->dh);
    pl_cpu_matmul_bwd_input(st->dh, n, hd, w->wo, qd, 0, tmp);
    pl_cpu_attention_bwd(st->q, st->k, st->v, tmp, n, d->n_heads, d->n_kv, d->head_dim, scratch,
                         st->dq, st->dk, st->dv);
    pl_cpu_rope_bwd(st->dq, n, qd, d->n_heads, d->head_dim, cos_tab, sin_tab);
    pl_cpu_rope_bwd(st->dk, n, kvd, d->n_kv, d->head_dim, cos_tab, sin_tab);
    pl_cpu_matmul_bwd_input(st->dq, n, qd, w->wq, hd, 0, st->dxn1);
    pl_cpu_matmul_bwd_input(st->dk, n, kvd, w->wk, hd, 1, st->dxn1);
    pl_cpu_matmul_bwd_input(st->dv, n, kvd, w->wv, hd, 1, st->dxn1);
    memmove(dx, st->dh, sizeof(float) * nh);
    pl_cpu_rmsnorm_bwd_input(st->x, w->attn_norm, st->dxn1, n, hd, d->eps, dx);
    free(scratch);
    free(tmp);
    st->have_b = true;
    return PL_OK;

err_fwd:
    if (recomputed || st->recompute) {
        free(st->fwd);
        st->fwd = NULL;
    }
    return rc;
}

void pl_cpu_tlayer_backward_weight(const pl_cpu_tdims_t *d, pl_cpu_tstash_t *st, pl_cpu_tlayer_t *g)
{
    int n = st->n, hd = d->hidden, qd = d->n_heads * d->head_dim, kvd = d->n_kv * d->head_dim;
    if (!st->have_b)
        return;
    pl_cpu_matmul_bwd_weight(st->dy, st->act, n, hd, d->inter, g->wd);
    pl_cpu_matmul_bwd_weight(st->dgate, st->xn2, n, d->inter, hd, g->wg);
    pl_cpu_matmul_bwd_weight(st->dup, st->xn2, n, d->inter, hd, g->wu);
    pl_cpu_rmsnorm_bwd_weight(st->h, st->dxn2, n, hd, d->eps, g->ffn_norm);
    pl_cpu_matmul_bwd_weight(st->dh, st->att, n, hd, qd, g->wo);
    pl_cpu_matmul_bwd_weight(st->dq, st->xn1, n, qd, hd, g->wq);
    pl_cpu_matmul_bwd_weight(st->dk, st->xn1, n, kvd, hd, g->wk);
    pl_cpu_matmul_bwd_weight(st->dv, st->xn1, n, kvd, hd, g->wv);
    pl_cpu_rmsnorm_bwd_weight(st->x, st->dxn1, n, hd, d->eps, g->attn_norm);
    free(st->fwd);
    free(st->bwd);
    st->fwd = st->bwd = NULL;
    st->have_f = st->have_b = false;
}

/* Final norm + LM head + cross-entropy, and the embedding, for training (cpu_train_head.h). The
 * head keeps x, the normed x and dL/dlogits from its forward to its weight gradient. */
#include "backends/cpu/cpu_train_head.h"

#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct pl_cpu_thead {
    int n, hidden, vocab;
    float eps;
    bool have_f, have_b;
    float *x, *xn, *dlogits, *dxn;
};

pl_status_t pl_cpu_thead_create(int n_tok, int hidden, int vocab, float eps, pl_cpu_thead_t **h_p)
{
    if (n_tok <= 0 || hidden <= 0 || vocab <= 0)
        return pl_error(PL_ERR_INVALID, "train head: bad shape");
    pl_cpu_thead_t *h = calloc(1, sizeof(*h));
    size_t nh = (size_t)n_tok * hidden;
    if (!h)
        return pl_error(PL_ERR_NOMEM, "train head");
    h->n = n_tok, h->hidden = hidden, h->vocab = vocab, h->eps = eps;
    h->x = malloc(sizeof(float) * nh);
    h->xn = malloc(sizeof(float) * nh);
    h->dxn = malloc(sizeof(float) * nh);
    h->dlogits = malloc(sizeof(float) * (size_t)n_tok * vocab);
    if (!h->x || !h->xn || !h->dxn || !h->dlogits) {
        pl_cpu_thead_destroy(&h);
        return pl_error(PL_ERR_NOMEM, "train head");
    }
    *h_p = h;
    return PL_OK;
}

void pl_cpu_thead_destroy(pl_cpu_thead_t **h_p)
{
    if (!h_p || !*h_p)
        return;
    pl_cpu_thead_t *h = *h_p;
    free(h->x);
    free(h->xn);
    free(h->dxn);
    free(h->dlogits);
    free(h);
    *h_p = NULL;
}

size_t pl_cpu_thead_bytes(const pl_cpu_thead_t *h)
{
    if (!h->have_f)
        return 0;
    return sizeof(float) * (size_t)h->n * (3 * (size_t)h->hidden + h->vocab);
}

pl_status_t pl_cpu_thead_forward(pl_cpu_thead_t *h, const float *norm, const float *head,
                                 const float *x, const int32_t *targets, float scale,
                                 double *loss_p)
{
    if (h->have_f)
        return pl_error(PL_ERR_BUSY, "train head: still holds a microbatch");
    for (int r = 0; r < h->n; r++)
        if (targets[r] < 0 || targets[r] >= h->vocab)
            return pl_error(PL_ERR_RANGE, "train head: target %d of token %d outside vocab %d",
                            targets[r], r, h->vocab);
    memcpy(h->x, x, sizeof(float) * (size_t)h->n * h->hidden);
    pl_cpu_rmsnorm(h->x, norm, h->n, h->hidden, h->eps, h->xn);
    pl_cpu_matmul(h->xn, h->n, h->hidden, head, h->vocab, h->dlogits);
    *loss_p = pl_cpu_xent(h->dlogits, targets, h->n, h->vocab, scale, h->dlogits);
    h->have_f = true;
    return PL_OK;
}

pl_status_t pl_cpu_thead_backward_input(pl_cpu_thead_t *h, const float *norm, const float *head,
                                        float *dx)
{
    if (!h->have_f || h->have_b)
        return pl_error(PL_ERR_INVALID, "train head: no forward waiting for its backward");
    pl_cpu_matmul_bwd_input(h->dlogits, h->n, h->vocab, head, h->hidden, 0, h->dxn);
    memset(dx, 0, sizeof(float) * (size_t)h->n * h->hidden);
    pl_cpu_rmsnorm_bwd_input(h->x, norm, h->dxn, h->n, h->hidden, h->eps, dx);
    h->have_b = true;
    return PL_OK;
}

void pl_cpu_thead_backward_weight(pl_cpu_thead_t *h, float *dnorm, float *dhead)
{
    if (!h->have_b)
        return;
    pl_cpu_matmul_bwd_weight(h->dlogits, h->xn, h->n, h->vocab, h->hidden, dhead);
    pl_cpu_rmsnorm_bwd_weight(h->x, h->dxn, h->n, h->hidden, h->eps, dnorm);
    h->have_f = h->have_b = false;
}

pl_status_t pl_cpu_tembed_forward(const float *table, int vocab, int hidden, const int32_t *ids,
                                  int n, float *out)
{
    for (int r = 0; r < n; r++) {
        if (ids[r] < 0 || ids[r] >= vocab)
            return pl_error(PL_ERR_RANGE, "train embed: token %d of id %d outside vocab %d", r,
                            ids[r], vocab);
    }
    for (int r = 0; r < n; r++)
        memcpy(out + (size_t)r * hidden, table + (size_t)ids[r] * hidden,
               sizeof(float) * (size_t)hidden);
    return PL_OK;
}

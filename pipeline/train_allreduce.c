/* The ring all-reduce of a training stage's gradients across replicas (train_allreduce.h). Its
 * messages are UCX tagged sends under the job's PL_ACT_SUM kind with mb values of their own
 * (0x8000 | phase << 12 | ring step; train_exec's norm uses mb 0 and 1): a small header with the
 * assignment's data-plane token, then the chunk's doubles. A message without the token is
 * dropped and counted, as the stage's rows are (act_recv.h), and the wait goes on. */
#include "pipeline/train_allreduce.h"

#include "common/log.h"
#include "common/util.h"
#include "transport/act.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAGIC 0x52414c50u /* "PLAR" */
#define S_MAX_RANKS 64

typedef struct {
    uint32_t magic, job, step, mb, chunk, n; /* n doubles follow */
    pl_act_token_t token;                    /* the assignment's (act_token.h) */
} s_hdr_t;

struct pl_train_ar {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *next, *prev;
    int rank, n;
    uint32_t job;
    pl_act_token_t token;
    pl_act_rx_t rx; /* only its drop counts: sums come outside an inbox */
    int timeout_ms;
    const volatile int *cancel;
    double *v; /* the gathered vector, grown as needed */
    size_t cap;
};

pl_status_t pl_train_ar_create(pl_ucx_t *ucx, pl_ucx_ep_t *next, pl_ucx_ep_t *prev, int rank,
                               int n_ranks, uint32_t job, const pl_act_token_t *token,
                               pl_metric_t *dropped, int timeout_ms, const volatile int *cancel,
                               pl_train_ar_t **ar_p)
{
    if (!ucx || !next || !prev || !token || n_ranks < 2 || n_ranks > S_MAX_RANKS || rank < 0 ||
        rank >= n_ranks)
        return pl_error(PL_ERR_INVALID, "all-reduce: rank %d of %d needs a worker and both ring "
                        "neighbours", rank, n_ranks);
    pl_train_ar_t *ar = calloc(1, sizeof(*ar));
    if (!ar)
        return pl_error(PL_ERR_NOMEM, "all-reduce: out of memory");
    *ar = (pl_train_ar_t){.ucx = ucx, .next = next, .prev = prev, .rank = rank, .n = n_ranks,
                          .job = job, .token = *token,
                          .rx = {.job = job, .dropped = dropped},
                          .timeout_ms = timeout_ms, .cancel = cancel};
    *ar_p = ar;
    return PL_OK;
}

void pl_train_ar_destroy(pl_train_ar_t **ar_p)
{
    if (!ar_p || !*ar_p)
        return;
    free((*ar_p)->v);
    free(*ar_p);
    *ar_p = NULL;
}

int pl_train_ar_ranks(const pl_train_ar_t *ar)
{
    return ar->n;
}

uint64_t pl_train_ar_dropped(const pl_train_ar_t *ar)
{
    return pl_act_rx_dropped(&ar->rx);
}

/* Chunk c of a vector of len values: [c * len / n, (c + 1) * len / n). */
static void s_chunk(const pl_train_ar_t *ar, size_t len, int c, size_t *lo, size_t *hi)
{
    *lo = (size_t)c * len / (size_t)ar->n;
    *hi = (size_t)(c + 1) * len / (size_t)ar->n;
}

static pl_status_t s_send(pl_train_ar_t *ar, uint32_t step, uint32_t mb, int c, const double *v,
                          size_t n)
{
    size_t len = sizeof(s_hdr_t) + n * sizeof(double);
    char *buf = malloc(len);
    if (!buf)
        return pl_error(PL_ERR_NOMEM, "all-reduce: out of memory");
    s_hdr_t h = {S_MAGIC, ar->job, step, mb, (uint32_t)c, (uint32_t)n, ar->token};
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), v, n * sizeof(double));
    return pl_ucx_send(ar->ucx, ar->next, pl_act_tag(ar->job, PL_ACT_SUM, mb, step), buf, len);
}

/* The chunk c of (step, mb) from prev: added into v (add) or copied over it. What does not carry
 * the assignment's token (an earlier epoch, or from outside the job) is dropped, counted and
 * logged as act_recv drops a row, and the wait goes on within the same deadline; a message with
 * the token but another shape is the ring's own error. */
static pl_status_t s_recv(pl_train_ar_t *ar, uint32_t step, uint32_t mb, int c, double *v,
                          size_t n, bool add)
{
    size_t want = sizeof(s_hdr_t) + n * sizeof(double), len;
    double deadline = ar->timeout_ms < 0 ? INFINITY : pl_now() + ar->timeout_ms / 1e3;
    void *buf;
    s_hdr_t h;
    for (;;) {
        int left = -1;
        if (ar->timeout_ms >= 0)
            left = (int)PL_MAX(0.0, ceil((deadline - pl_now()) * 1e3));
        pl_status_t rc = pl_ucx_recv(ar->ucx, pl_act_tag(ar->job, PL_ACT_SUM, mb, step), ~0ULL,
                                     want, &buf, &len, NULL, left, ar->cancel);
        if (rc == PL_ERR_PROTOCOL) { /* longer than the chunk: taken off the wire */
            pl_act_rx_note(&ar->rx, PL_ACT_DROP_OVERSIZE, 1);
            pl_log_warn_limited("all-reduce rank %d of job %u: an oversized message dropped",
                                ar->rank, ar->job);
            continue;
        }
        if (rc != PL_OK)
            return rc;
        if (len >= sizeof(h))
            memcpy(&h, buf, sizeof(h));
        pl_act_drop_t why = len < sizeof(h) || h.magic != S_MAGIC ? PL_ACT_DROP_MALFORMED
                            : !pl_act_token_equal(&h.token, &ar->token) ? PL_ACT_DROP_TOKEN
                                                                       : PL_ACT_DROP_COUNT;
        if (why == PL_ACT_DROP_COUNT)
            break;
        free(buf);
        pl_act_rx_note(&ar->rx, why, 1);
        pl_log_warn_limited("all-reduce rank %d of job %u: a message dropped: %s", ar->rank,
                            ar->job, pl_act_drop_reason(why));
    }
    if (len != want || h.job != ar->job || h.step != step || h.mb != mb ||
        h.chunk != (uint32_t)c || h.n != n) {
        free(buf);
        return pl_error(PL_ERR_PROTOCOL, "all-reduce rank %d: expected chunk %d (%zu values) of "
                        "job %u step %u mb %#x, got %zu bytes", ar->rank, c, n, ar->job, step,
                        mb, len);
    }
    const double *in = (const double *)((const char *)buf + sizeof(h));
    if (add)
        for (size_t i = 0; i < n; i++)
            v[i] += in[i];
    else
        memcpy(v, in, n * sizeof(double));
    free(buf);
    return PL_OK;
}

pl_status_t pl_train_ar_mean(pl_train_ar_t *ar, pl_adamw_t *opt, double *extra, uint32_t step)
{
    size_t len = 1;
    int nt = pl_adamw_n_tensors(opt);
    for (int i = 0; i < nt; i++) {
        float *g;
        size_t n;
        pl_adamw_grad(opt, i, &g, &n);
        len += n;
    }
    if (len > ar->cap) {
        double *v = realloc(ar->v, len * sizeof(double));
        if (!v)
            return pl_error(PL_ERR_NOMEM, "all-reduce: out of memory");
        ar->v = v, ar->cap = len;
    }
    double *v = ar->v;
    size_t k = 0;
    for (int i = 0; i < nt; i++) {
        float *g;
        size_t n;
        pl_adamw_grad(opt, i, &g, &n);
        for (size_t j = 0; j < n; j++)
            v[k++] = g[j];
    }
    v[k] = *extra;
    pl_status_t rc;
    /* reduce-scatter: after n - 1 rounds rank r holds the whole sum of chunk (r + 1) mod n */
    for (int s = 0; s < ar->n - 1; s++) {
        int cs = (ar->rank - s + ar->n) % ar->n, cr = (ar->rank - s - 1 + 2 * ar->n) % ar->n;
        size_t lo, hi, rlo, rhi;
        uint32_t mb = 0x8000u | (uint32_t)s;
        s_chunk(ar, len, cs, &lo, &hi);
        s_chunk(ar, len, cr, &rlo, &rhi);
        if ((rc = s_send(ar, step, mb, cs, v + lo, hi - lo)) ||
            (rc = s_recv(ar, step, mb, cr, v + rlo, rhi - rlo, true)))
            return rc;
    }
    /* all-gather: each whole chunk goes round once, copied as it is */
    for (int s = 0; s < ar->n - 1; s++) {
        int cs = (ar->rank + 1 - s + ar->n) % ar->n, cr = (ar->rank - s + ar->n) % ar->n;
        size_t lo, hi, rlo, rhi;
        uint32_t mb = 0x9000u | (uint32_t)s;
        s_chunk(ar, len, cs, &lo, &hi);
        s_chunk(ar, len, cr, &rlo, &rhi);
        if ((rc = s_send(ar, step, mb, cs, v + lo, hi - lo)) ||
            (rc = s_recv(ar, step, mb, cr, v + rlo, rhi - rlo, false)))
            return rc;
    }
    double inv = 1.0 / ar->n;
    k = 0;
    for (int i = 0; i < nt; i++) {
        float *g;
        size_t n;
        pl_adamw_grad(opt, i, &g, &n);
        for (size_t j = 0; j < n; j++)
            g[j] = (float)(v[k++] * inv);
    }
    *extra = v[k] * inv;
    return PL_OK;
}

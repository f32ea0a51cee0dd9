/* Training schedules as operation lists: the fixed GPipe and 1F1B patterns, the wiring of
 * sends and receives around compute, memory per stage and the choice of a schedule. ZB-H1's
 * order and the replay that predicts times are in train_sim.c. */
#include "scheduler/train_sched.h"

#include "scheduler/train_sched_int.h"

#include <stdlib.h>
#include <string.h>

/* Append compute op (kind, mb) of stage s with the transfers around it. */
static void s_emit(pl_train_ops_t *t, int s, pl_train_op_kind_t kind, int mb)
{
    pl_train_op_t *o = t->ops[s];
    int *n = &t->n_ops[s], last = t->n_stages - 1;
    if (kind == PL_TRAIN_OP_F && s > 0)
        o[(*n)++] = (pl_train_op_t){PL_TRAIN_OP_RECV_ACT, mb};
    if (kind == PL_TRAIN_OP_B && s < last)
        o[(*n)++] = (pl_train_op_t){PL_TRAIN_OP_RECV_GRAD, mb};
    o[(*n)++] = (pl_train_op_t){kind, mb};
    if (kind == PL_TRAIN_OP_F && s < last)
        o[(*n)++] = (pl_train_op_t){PL_TRAIN_OP_SEND_ACT, mb};
    if (kind == PL_TRAIN_OP_B && s > 0)
        o[(*n)++] = (pl_train_op_t){PL_TRAIN_OP_SEND_GRAD, mb};
}

void pl_tsched_emit(pl_train_ops_t *t, int s, pl_train_op_kind_t kind, int mb)
{
    s_emit(t, s, kind, mb);
}

static void s_fixed(pl_train_ops_t *t)
{
    int S = t->n_stages, M = t->n_mb;
    for (int s = 0; s < S; s++) {
        if (t->kind == PL_TRAIN_GPIPE) {
            for (int m = 0; m < M; m++)
                s_emit(t, s, PL_TRAIN_OP_F, m);
            for (int m = 0; m < M; m++)
                s_emit(t, s, PL_TRAIN_OP_B, m), s_emit(t, s, PL_TRAIN_OP_W, m);
            continue;
        }
        int warm = S - s - 1 < M ? S - s - 1 : M, f = 0, b = 0;
        for (; f < warm; f++)
            s_emit(t, s, PL_TRAIN_OP_F, f);
        for (; f < M; f++, b++) {
            s_emit(t, s, PL_TRAIN_OP_F, f);
            s_emit(t, s, PL_TRAIN_OP_B, b), s_emit(t, s, PL_TRAIN_OP_W, b);
        }
        for (; b < M; b++)
            s_emit(t, s, PL_TRAIN_OP_B, b), s_emit(t, s, PL_TRAIN_OP_W, b);
    }
}

/* ZB-H1 as a fixed pattern: 1F1B's order with stage s's W passes lagging s microbatches behind
 * its B passes (the memory 1F1B leaves free there), so B passes travel upstream sooner. */
static void s_lagged(pl_train_ops_t *t, bool lag_w)
{
    int S = t->n_stages, M = t->n_mb;
    for (int s = 0; s < S; s++) {
        int warm = S - s - 1 < M ? S - s - 1 : M, f = 0, b = 0, w = 0, lag = lag_w ? s : 0;
        for (; f < warm; f++)
            s_emit(t, s, PL_TRAIN_OP_F, f);
        for (; f < M; f++) {
            s_emit(t, s, PL_TRAIN_OP_F, f);
            s_emit(t, s, PL_TRAIN_OP_B, b++);
            if (b - w > lag)
                s_emit(t, s, PL_TRAIN_OP_W, w++);
        }
        for (; b < M; b++) {
            s_emit(t, s, PL_TRAIN_OP_B, b);
            if (b + 1 - w > lag || w < b)
                s_emit(t, s, PL_TRAIN_OP_W, w++);
        }
        for (; w < M; w++)
            s_emit(t, s, PL_TRAIN_OP_W, w);
    }
}

/* ZB-H1: the fastest under these times of the lagged pattern, the greedy fill (train_sim.c) and,
 * for stages too uneven for either to pay, 1F1B's order; none lets a stage stash more than
 * min(S, M) microbatches, 1F1B's peak. */
static pl_status_t s_zbh1(pl_train_ops_t *t, const pl_tsched_times_t *times, double comm)
{
    pl_train_ops_t *alt = calloc(1, sizeof(*alt));
    pl_status_t rc = PL_OK;
    if (!alt)
        return pl_error(PL_ERR_NOMEM, "schedule");
    *alt = *t; /* shares nothing after the swap below */
    for (int s = 0; s < t->n_stages; s++) {
        alt->ops[s] = malloc(sizeof(pl_train_op_t) * 7 * (size_t)t->n_mb);
        if (!alt->ops[s]) {
            rc = pl_error(PL_ERR_NOMEM, "schedule");
            goto out;
        }
    }
    s_lagged(t, true);
    for (int cand = 0; cand < 2; cand++) {
        memset(alt->n_ops, 0, sizeof(alt->n_ops));
        if (cand == 0 && (rc = pl_tsched_zbh1(alt, times, comm)) != PL_OK)
            goto out;
        if (cand == 1)
            s_lagged(alt, false);
        pl_tsched_pred_t pt, pa;
        if ((rc = pl_tsched_predict(t, times, comm, &pt)) != PL_OK ||
            (rc = pl_tsched_predict(alt, times, comm, &pa)) != PL_OK)
            goto out;
        if (pa.makespan < pt.makespan)
            for (int s = 0; s < t->n_stages; s++) {
                pl_train_op_t *o = t->ops[s];
                int n = t->n_ops[s];
                t->ops[s] = alt->ops[s], t->n_ops[s] = alt->n_ops[s];
                alt->ops[s] = o, alt->n_ops[s] = n;
            }
    }
out:
    pl_train_ops_destroy(&alt);
    return rc;
}

pl_status_t pl_tsched_build(pl_train_kind_t kind, int n_stages, int n_mb,
                            const pl_tsched_times_t *times, double comm, pl_train_ops_t **sched_p)
{
    if (kind < 0 || kind >= PL_TRAIN_KIND_COUNT)
        return pl_error(PL_ERR_INVALID, "schedule: unknown kind %d", (int)kind);
    if (n_stages < 1 || n_stages > PL_TRAIN_MAX_STAGES)
        return pl_error(PL_ERR_RANGE, "schedule: stages %d outside 1..%d", n_stages,
                        PL_TRAIN_MAX_STAGES);
    if (n_mb < 1 || n_mb > PL_TRAIN_MAX_MB)
        return pl_error(PL_ERR_RANGE, "schedule: microbatches %d outside 1..%d", n_mb,
                        PL_TRAIN_MAX_MB);
    if (times)
        for (int s = 0; s < n_stages; s++)
            if (!(times[s].f >= 0 && times[s].b >= 0 && times[s].w >= 0))
                return pl_error(PL_ERR_RANGE, "schedule: stage %d op times must be >= 0", s);
    if (!(comm >= 0))
        return pl_error(PL_ERR_RANGE, "schedule: comm time must be >= 0");
    pl_train_ops_t *t = calloc(1, sizeof(*t));
    if (!t)
        return pl_error(PL_ERR_NOMEM, "schedule");
    t->kind = kind, t->n_stages = n_stages, t->n_mb = n_mb;
    for (int s = 0; s < n_stages; s++) {
        /* 3 compute ops and at most 4 transfers per microbatch */
        t->ops[s] = malloc(sizeof(pl_train_op_t) * 7 * (size_t)n_mb);
        if (!t->ops[s]) {
            pl_train_ops_destroy(&t);
            return pl_error(PL_ERR_NOMEM, "schedule");
        }
    }
    pl_status_t rc = PL_OK;
    if (kind == PL_TRAIN_ZBH1)
        rc = s_zbh1(t, times, comm);
    else
        s_fixed(t);
    if (rc != PL_OK) {
        pl_train_ops_destroy(&t);
        return rc;
    }
    *sched_p = t;
    return PL_OK;
}

double pl_tsched_stash_bytes(const pl_train_ops_t *t, int s, double f_bytes, double b_bytes)
{
    int nf = 0, nb = 0;
    double peak = 0;
    for (int i = 0; i < t->n_ops[s]; i++) {
        pl_train_op_kind_t k = t->ops[s][i].kind;
        if (k == PL_TRAIN_OP_F)
            nf++;
        else if (k == PL_TRAIN_OP_B)
            nb++;
        else if (k == PL_TRAIN_OP_W)
            nf--, nb--;
        double now = nf * f_bytes + nb * b_bytes;
        if (now > peak)
            peak = now;
    }
    return peak;
}

double pl_tsched_stage_mem(const pl_train_ops_t *t, int s, const pl_tsched_mem_t *m)
{
    double per_param = m->weight_bytes + (m->weight_bytes == 4.0 ? 0.0 : 4.0) + 4.0 + 8.0;
    return m->params * per_param + pl_tsched_stash_bytes(t, s, m->f_bytes, m->b_bytes);
}

pl_status_t pl_tsched_choose(int n_stages, int n_mb, const pl_tsched_times_t *times, double comm,
                             const pl_tsched_mem_t *mem, const double *budget, int forced,
                             pl_train_ops_t **sched_p, pl_tsched_pred_t *pred_p)
{
    pl_train_ops_t *best = NULL;
    pl_tsched_pred_t best_pred;
    pl_status_t rc = PL_OK;
    double need_min = 0;
    int need_stage = -1;
    if (forced >= PL_TRAIN_KIND_COUNT)
        return pl_error(PL_ERR_INVALID, "schedule: unknown kind %d", forced);
    for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++) {
        if (forced >= 0 && k != forced)
            continue;
        pl_train_ops_t *t = NULL;
        pl_tsched_pred_t p;
        if ((rc = pl_tsched_build((pl_train_kind_t)k, n_stages, n_mb, times, comm, &t)) != PL_OK ||
            (rc = pl_tsched_predict(t, times, comm, &p)) != PL_OK) {
            pl_train_ops_destroy(&t);
            pl_train_ops_destroy(&best);
            return rc;
        }
        bool fits = true;
        for (int s = 0; s < n_stages && fits; s++) {
            double need = pl_tsched_stage_mem(t, s, &mem[s]);
            if (need > budget[s]) {
                fits = false;
                if (need_stage < 0 || need - budget[s] < need_min)
                    need_min = need - budget[s], need_stage = s;
            }
        }
        if (fits && (!best || p.makespan < best_pred.makespan)) {
            pl_train_ops_destroy(&best);
            best = t, best_pred = p;
        } else {
            pl_train_ops_destroy(&t);
        }
    }
    if (!best)
        return pl_error(PL_ERR_INFEASIBLE,
                        "schedule: %s does not fit: stage %d needs %.0f bytes more than its budget",
                        forced >= 0 ? pl_train_kind_name((pl_train_kind_t)forced) : "no schedule",
                        need_stage, need_min);
    *sched_p = best;
    *pred_p = best_pred;
    return PL_OK;
}

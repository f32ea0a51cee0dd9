/* Time simulation of training schedules: the replay of operation lists that predicts makespan,
 * bubble and stash, and the greedy event simulation that places ZB-H1's W passes into the gaps
 * where a stage would otherwise wait. */
#include "scheduler/train_sched_int.h"

#include <math.h>
#include <stdlib.h>

static const pl_tsched_times_t s_unit = {1.0, 1.0, 1.0};

static const pl_tsched_times_t *s_times(const pl_tsched_times_t *times, int s)
{
    return times ? &times[s] : &s_unit;
}

/* end[s * M + m], NAN while unknown */
static double *s_ends(int S, int M)
{
    double *e = malloc(sizeof(double) * (size_t)S * M);
    if (e)
        for (size_t i = 0; i < (size_t)S * M; i++)
            e[i] = NAN;
    return e;
}

pl_status_t pl_tsched_predict(const pl_train_ops_t *t, const pl_tsched_times_t *times, double comm,
                              pl_tsched_pred_t *pred_p)
{
    int S = t->n_stages, M = t->n_mb, last = S - 1;
    double *fe = s_ends(S, M), *be = s_ends(S, M), *we = s_ends(S, M);
    int idx[PL_TRAIN_MAX_STAGES] = {0}, stash[PL_TRAIN_MAX_STAGES] = {0};
    double clock[PL_TRAIN_MAX_STAGES] = {0};
    pl_tsched_pred_t p = {0};
    pl_status_t rc = PL_OK;
    if (!fe || !be || !we) {
        rc = pl_error(PL_ERR_NOMEM, "schedule prediction");
        goto out;
    }
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < S; s++) {
            const pl_tsched_times_t *tm = s_times(times, s);
            while (idx[s] < t->n_ops[s]) {
                pl_train_op_t op = t->ops[s][idx[s]];
                if (op.mb < 0 || op.mb >= M) {
                    rc = pl_error(PL_ERR_INVALID, "schedule: stage %d op %d: microbatch %d", s,
                                  idx[s], op.mb);
                    goto out;
                }
                size_t i = (size_t)s * M + op.mb;
                double ready = clock[s];
                if (op.kind == PL_TRAIN_OP_RECV_ACT || (op.kind == PL_TRAIN_OP_F && s > 0)) {
                    if (s == 0 || isnan(fe[i - M]))
                        break;
                    ready = fmax(ready, fe[i - M] + comm);
                } else if (op.kind == PL_TRAIN_OP_RECV_GRAD ||
                           (op.kind == PL_TRAIN_OP_B && s < last)) {
                    if (s == last || isnan(be[i + M]))
                        break;
                    ready = fmax(ready, be[i + M] + comm);
                }
                if (op.kind == PL_TRAIN_OP_B && isnan(fe[i]))
                    break;
                if (op.kind == PL_TRAIN_OP_W && isnan(be[i]))
                    break;
                clock[s] = ready;
                if (op.kind == PL_TRAIN_OP_F) {
                    fe[i] = clock[s] += tm->f, p.busy[s] += tm->f;
                    if (++stash[s] > p.peak_stash[s])
                        p.peak_stash[s] = stash[s];
                } else if (op.kind == PL_TRAIN_OP_B) {
                    be[i] = clock[s] += tm->b, p.busy[s] += tm->b;
                } else if (op.kind == PL_TRAIN_OP_W) {
                    we[i] = clock[s] += tm->w, p.busy[s] += tm->w;
                    stash[s]--;
                }
                idx[s]++;
                progress = true;
            }
        }
    }
    for (int s = 0; s < S; s++) {
        if (idx[s] < t->n_ops[s]) {
            rc =
                pl_error(PL_ERR_INFEASIBLE, "schedule: stage %d waits forever at op %d", s, idx[s]);
            goto out;
        }
        p.makespan = fmax(p.makespan, clock[s]);
    }
    double idle = 0;
    for (int s = 0; s < S; s++)
        idle += p.makespan - p.busy[s];
    p.bubble = p.makespan > 0 ? idle / (S * p.makespan) : 0;
    *pred_p = p;
out:
    free(fe);
    free(be);
    free(we);
    return rc;
}

pl_status_t pl_tsched_zbh1(pl_train_ops_t *t, const pl_tsched_times_t *times, double comm)
{
    int S = t->n_stages, M = t->n_mb, last = S - 1, limit = S < M ? S : M;
    double *fe = s_ends(S, M), *be = s_ends(S, M);
    double clock[PL_TRAIN_MAX_STAGES] = {0};
    int nf[PL_TRAIN_MAX_STAGES] = {0}, nb[PL_TRAIN_MAX_STAGES] = {0};
    int nw[PL_TRAIN_MAX_STAGES] = {0};
    pl_status_t rc = PL_OK;
    if (!fe || !be) {
        rc = pl_error(PL_ERR_NOMEM, "schedule: zb-h1");
        goto out;
    }
    for (;;) {
        int best = -1;
        double best_e = INFINITY, rb_best = INFINITY, rf_best = INFINITY;
        bool all_done = true;
        for (int s = 0; s < S; s++) {
            if (nw[s] == M)
                continue;
            all_done = false;
            double e = INFINITY, rb = INFINITY, rf = INFINITY;
            if (nw[s] < nb[s])
                e = clock[s];
            if (nb[s] < nf[s]) {
                size_t i = (size_t)s * M + nb[s];
                double r = s == last ? fe[i] : be[i + M] + comm;
                if (!isnan(r))
                    rb = fmax(clock[s], r), e = fmin(e, rb);
            }
            if (nf[s] < M && nf[s] - nw[s] < limit) {
                double r = s == 0 ? 0.0 : fe[(size_t)(s - 1) * M + nf[s]] + comm;
                if (!isnan(r))
                    rf = fmax(clock[s], r), e = fmin(e, rf);
            }
            if (e < best_e)
                best = s, best_e = e, rb_best = rb, rf_best = rf;
        }
        if (all_done)
            break;
        if (best < 0) {
            rc = pl_error(PL_ERR_INFEASIBLE, "schedule: zb-h1 placement stalled");
            goto out;
        }
        int s = best;
        const pl_tsched_times_t *tm = s_times(times, s);
        clock[s] = best_e;
        size_t base = (size_t)s * M;
        if (rb_best <= best_e) {
            be[base + nb[s]] = clock[s] += tm->b;
            pl_tsched_emit(t, s, PL_TRAIN_OP_B, nb[s]++);
        } else if (rf_best <= best_e) {
            fe[base + nf[s]] = clock[s] += tm->f;
            pl_tsched_emit(t, s, PL_TRAIN_OP_F, nf[s]++);
        } else {
            clock[s] += tm->w;
            pl_tsched_emit(t, s, PL_TRAIN_OP_W, nw[s]++);
        }
    }
out:
    free(fe);
    free(be);
    return rc;
}

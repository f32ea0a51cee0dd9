/* The exact partition for a fixed device order: dynamic programming over (device, first layer)
 * states that minimises the largest stage cost within every device's memory. */
#include "scheduler/plan_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* State (s, j, a): order[j] is the next stage and starts at layer a, s stages came before it.
 * g is the smallest possible largest cost of those s stages (their transfers included). A stage's
 * cost depends only on its device, its range and the next device, so the state is all the future
 * needs: the recurrence is exact. Costs are monotone in the range, which allows two prunings:
 * a stage whose cost already reaches the best complete plan cannot improve on it, and nor can a
 * longer range of the same stage. The successors of j are grouped by transfer cost (links of
 * one kind cost the same), so a stage on j is evaluated once per group, not once per successor.
 * Updates need a strictly smaller value and run in index order, so ties go to the lowest device
 * index and the earliest boundary. */
typedef struct {
    const pl_sched_eval_t *ev;
    const int *order;
    int n, L, ns; /* ns: stage-count layers of the state space (1 when unlimited) */
    bool skip, limited;
    double *g;
    int *par; /* parent state index, -1 for a first stage */
    /* for the device being expanded: [s][q][e] best value of a stage ending at e (exclusive)
     * followed by a device of transfer group q, and that stage's first layer */
    double *gt;
    int *gt_a;
    int nq, cls[PL_SCHED_MAX_DEVICES];
    double xq[PL_SCHED_MAX_DEVICES];
    int e_lo, e_hi; /* ends touched in gt */
    double best;
    size_t best_state;
} s_dp_t;

static size_t s_idx(const s_dp_t *dp, int s, int j, int a)
{
    return ((size_t)s * dp->n + j) * dp->L + a;
}

static size_t s_gidx(const s_dp_t *dp, int s, int q, int e)
{
    return ((size_t)s * dp->nq + q) * dp->L + e;
}

static void s_relax_from(s_dp_t *dp, int s, int j, int a)
{
    const pl_sched_eval_t *ev = dp->ev;
    size_t here = s_idx(dp, s, j, a);
    double v = dp->g[here];
    int d = dp->order[j], L = dp->L;
    if (!(v < dp->best))
        return;
    if ((dp->skip || j == dp->n - 1) && ev->fin_ok[(size_t)d * L + a]) {
        double c = ev->cost_last[(size_t)d * L + a];
        double m = v > c ? v : c;
        if (m < dp->best) {
            dp->best = m;
            dp->best_state = here;
        }
    }
    int s2 = dp->limited ? s + 1 : 0;
    if (s2 >= dp->ns || dp->nq == 0)
        return;
    int emax = ev->emax[(size_t)d * L + a];
    for (int e = a + 1; e <= emax; e++) {
        double c = pl_sched_comp(ev, d, a, e);
        if (!(c < dp->best))
            break;
        for (int q = 0; q < dp->nq; q++) {
            double t = c + dp->xq[q];
            double val = v > t ? v : t;
            size_t gi = s_gidx(dp, s, q, e);
            if (val < dp->gt[gi]) {
                dp->gt[gi] = val;
                dp->gt_a[gi] = a;
                if (e < dp->e_lo)
                    dp->e_lo = e;
                if (e > dp->e_hi)
                    dp->e_hi = e;
            }
        }
    }
}

/* Expand device j: its stages from every state, then hand the results to its successors. */
static void s_expand(s_dp_t *dp, int j)
{
    int d = dp->order[j], L = dp->L;
    int j_end = dp->skip ? dp->n : (j + 2 < dp->n ? j + 2 : dp->n);
    dp->nq = 0;
    for (int j2 = j + 1; j2 < j_end; j2++) {
        double x = pl_sched_xfer(dp->ev, d, dp->order[j2]);
        int q = 0;
        while (q < dp->nq && dp->xq[q] != x)
            q++;
        if (q == dp->nq)
            dp->xq[dp->nq++] = x;
        dp->cls[j2] = q;
    }
    for (size_t i = 0; i < (size_t)dp->ns * dp->nq * L; i++)
        dp->gt[i] = INFINITY;
    dp->e_lo = L;
    dp->e_hi = -1;
    for (int s = 0; s < dp->ns; s++)
        for (int a = 0; a < L; a++)
            s_relax_from(dp, s, j, a);
    for (int j2 = j + 1; j2 < j_end; j2++) {
        int q = dp->cls[j2];
        for (int s = 0; s + (dp->limited ? 1 : 0) < dp->ns; s++) {
            int s2 = dp->limited ? s + 1 : 0;
            for (int e = dp->e_lo; e <= dp->e_hi; e++) {
                size_t gi = s_gidx(dp, s, q, e), to = s_idx(dp, s2, j2, e);
                double val = dp->gt[gi];
                if (val < dp->g[to] && val < dp->best) {
                    dp->g[to] = val;
                    dp->par[to] = (int)s_idx(dp, s, j, dp->gt_a[gi]);
                }
            }
        }
    }
}

pl_status_t pl_sched_check_list(const pl_sched_eval_t *ev, const int *order, int n)
{
    if (!order || n < 1 || n > PL_SCHED_MAX_DEVICES || n > ev->n_dev)
        return pl_error(PL_ERR_RANGE, "device list: %d devices not in [1, %d]", n,
                        ev->n_dev < PL_SCHED_MAX_DEVICES ? ev->n_dev : PL_SCHED_MAX_DEVICES);
    unsigned char seen[PL_SCHED_MAX_DEVICES] = {0};
    for (int i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= ev->n_dev)
            return pl_error(PL_ERR_RANGE, "device list[%d]: %d not a device", i, order[i]);
        if (seen[order[i]]++)
            return pl_error(PL_ERR_INVALID, "device list[%d]: device %d listed twice", i, order[i]);
    }
    return PL_OK;
}

pl_status_t pl_sched_partition(const pl_sched_eval_t *ev, const int *order, int n, bool allow_skip,
                               int max_stages, pl_sched_split_t *out)
{
    pl_status_t st = pl_sched_check_list(ev, order, n);
    if (st)
        return st;
    if (max_stages < 0)
        return pl_error(PL_ERR_RANGE, "max_stages: %d < 0", max_stages);
    assert(pl_sched_tables_ok(ev));
    int L = ev->L;
    s_dp_t dp = {.ev = ev, .order = order, .n = n, .L = L, .skip = allow_skip};
    int lim = max_stages > 0 && max_stages < n ? max_stages : n;
    if (!allow_skip && lim < n)
        return pl_error(PL_ERR_INFEASIBLE,
                        "%d devices must all be used but at most %d stages are allowed", n, lim);
    if (!allow_skip && L < n)
        return pl_error(PL_ERR_INFEASIBLE, "%d layers cannot give each of the %d devices one", L,
                        n);
    dp.limited = lim < n;
    dp.ns = dp.limited ? lim : 1;
    size_t states = (size_t)dp.ns * n * L;
    if (states > ((size_t)1 << 26))
        return pl_error(PL_ERR_RANGE, "partition: %d stages x %d devices x %d layers is too large",
                        dp.ns, n, L);
    dp.g = malloc(states * sizeof(double));
    dp.par = malloc(states * sizeof(int));
    /* transfer groups of one device: at most its successors */
    size_t gts = (size_t)dp.ns * (size_t)(allow_skip ? n - 1 : 1) * L + 1;
    dp.gt = malloc(gts * sizeof(double));
    dp.gt_a = malloc(gts * sizeof(int));
    if (!dp.g || !dp.par || !dp.gt || !dp.gt_a) {
        st = pl_error(PL_ERR_NOMEM, "partition: out of memory for %zu states", states);
        goto out;
    }
    for (size_t i = 0; i < states; i++) {
        dp.g[i] = INFINITY;
        dp.par[i] = -1;
    }
    for (int j = 0; j < (allow_skip ? n : 1); j++)
        dp.g[s_idx(&dp, 0, j, 0)] = 0.0;

    dp.best = INFINITY;
    for (int j = 0; j < n; j++)
        s_expand(&dp, j);

    if (dp.best == INFINITY) {
        st = pl_error(PL_ERR_INFEASIBLE, "no split of %d layers over %d devices fits in memory", L,
                      n);
        goto out;
    }
    /* walk the parents back from the last stage */
    int stack_dev[PL_SCHED_MAX_DEVICES], stack_first[PL_SCHED_MAX_DEVICES], k = 0;
    for (long cur = (long)dp.best_state; cur >= 0; cur = dp.par[cur]) {
        int a = (int)(cur % L), j = (int)((cur / L) % n);
        stack_dev[k] = order[j];
        stack_first[k] = a;
        k++;
    }
    out->n_stages = k;
    for (int i = 0; i < k; i++) {
        out->device[i] = stack_dev[k - 1 - i];
        out->first[i] = stack_first[k - 1 - i];
    }
    out->bottleneck = dp.best;
out:
    free(dp.g);
    free(dp.par);
    free(dp.gt);
    free(dp.gt_a);
    return st;
}

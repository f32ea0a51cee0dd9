/* The plain reference the planner's partition is checked against (test_sched_plan) and timed
 * beside (bench_sched): the textbook O(m L^2) dynamic programme over one device sequence. */
#ifndef PL_TESTS_SCHED_REF_H
#define PL_TESTS_SCHED_REF_H

#include "scheduler/plan.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Layers a..e-1 fit device d's usable memory. */
static inline bool sched_ref_fits(const pl_sched_eval_t *ev, int d, int a, int e)
{
    return pl_sched_stage_mem(ev, d, a, e - a) <= pl_sched_device_usable(ev, d);
}

/* One device's stage in the chain: h2[e] = the best bottleneck with device d taking layers a..e-1
 * after h[a] (its activations to device `next`), for e < L. Whether any e was reached. */
static inline bool sched_ref_step(const pl_sched_eval_t *ev, const double *h, int d, int next,
                                  double *h2)
{
    int L = pl_sched_eval_layers(ev);
    bool any = false;
    for (int e = 0; e <= L; e++)
        h2[e] = INFINITY;
    for (int a = 0; a < L; a++) {
        if (h[a] == INFINITY)
            continue;
        for (int e = a + 1; e < L; e++) {
            if (!sched_ref_fits(ev, d, a, e))
                break;
            double c = pl_sched_stage_cost(ev, d, a, e - a, next);
            double v = h[a] > c ? h[a] : c;
            if (v < h2[e]) {
                h2[e] = v;
                any = true;
            }
        }
    }
    return any;
}

/* The best bottleneck with device d, the last, taking layers a..L-1 after h[a] (INFINITY: none). */
static inline double sched_ref_last(const pl_sched_eval_t *ev, const double *h, int d)
{
    int L = pl_sched_eval_layers(ev);
    double best = INFINITY;
    for (int a = 0; a < L; a++) {
        if (h[a] == INFINITY || !sched_ref_fits(ev, d, a, L))
            continue;
        double c = pl_sched_stage_cost(ev, d, a, L - a, -1);
        double v = h[a] > c ? h[a] : c;
        if (v < best)
            best = v;
    }
    return best;
}

/* The best bottleneck of seq[0..m-1] where every device takes a stage, in that order (INFINITY:
 * none fits). h[a] is the best bottleneck with the current device starting at layer a: exact by
 * the principle of optimality for a fixed sequence. h: scratch of 2 (L + 1) doubles. */
static inline double sched_ref_chain(const pl_sched_eval_t *ev, const int *seq, int m, double *h)
{
    int L = pl_sched_eval_layers(ev);
    double *h2 = h + L + 1;
    for (int a = 0; a <= L; a++)
        h[a] = a == 0 ? 0.0 : INFINITY;
    for (int i = 0; i + 1 < m; i++) {
        sched_ref_step(ev, h, seq[i], seq[i + 1], h2);
        memcpy(h, h2, sizeof(double) * (size_t)(L + 1));
    }
    return sched_ref_last(ev, h, seq[m - 1]);
}

#endif

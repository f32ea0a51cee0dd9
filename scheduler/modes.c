/* Placement modes over the planner: auto lets it leave devices out, optimal uses every
 * candidate (or the N fastest for a fixed stage count), even is pl_plan_even's baseline. */
#include "scheduler/modes.h"

#include "common/util.h"

#include <stdio.h>

static int s_layers(const pl_plan_input_t *in)
{
    return in->costs ? in->costs->n_layers : in->model ? in->model->n_layers : 0;
}

/* Keep the `want` devices of mask that run the whole model fastest (memory not considered;
 * ties to the lower index). */
static pl_status_t s_fastest(const pl_plan_input_t *in, bool *mask, int want)
{
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(in, in->job.n_seqs, 1, &ev);
    if (st)
        return st;
    int L = pl_sched_eval_layers(ev), order[PL_SCHED_MAX_DEVICES], n = 0;
    double cost[PL_SCHED_MAX_DEVICES];
    for (int i = 0; i < in->n_devices; i++) {
        if (!mask[i])
            continue;
        cost[i] = pl_sched_stage_cost(ev, i, 0, L, -1);
        int k = n++;
        while (k > 0 && cost[order[k - 1]] > cost[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = want; k < n; k++)
        mask[order[k]] = false;
    pl_sched_eval_destroy(&ev);
    return PL_OK;
}

static pl_status_t s_plan_once(const pl_plan_input_t *in, const bool *mask, pl_planner_t mode,
                               int stages, pl_plan_t **plan_p)
{
    if (mode == PL_PLANNER_EVEN)
        return pl_plan_even(in, mask, plan_p);
    pl_plan_input_t x = *in;
    x.options.field_mask |= PL_PLAN_OPT_ALLOW_SKIP;
    x.options.allow_skip = mode == PL_PLANNER_AUTO;
    if (mode == PL_PLANNER_AUTO && stages > 0) {
        x.options.field_mask |= PL_PLAN_OPT_MAX_STAGES;
        x.options.max_stages = stages;
    }
    return pl_replan(&x, mask, plan_p);
}

pl_status_t pl_sched_plan_mode(const pl_plan_input_t *in, const bool *alive, pl_planner_t mode,
                               int stages, pl_plan_t **plan_p)
{
    bool mask[PL_SCHED_MAX_DEVICES];
    int n = 0;
    pl_status_t st;
    if (!in || in->n_devices < 1 || in->n_devices > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "plan: %d devices not in [1, %d]", in ? in->n_devices : 0,
                        PL_SCHED_MAX_DEVICES);
    if ((unsigned)mode > PL_PLANNER_EVEN)
        return pl_error(PL_ERR_INVALID, "plan: planner mode %d unknown", (int)mode);
    bool cand[PL_SCHED_MAX_DEVICES];
    int first_refused = -1;
    for (int i = 0; i < in->n_devices; i++) {
        mask[i] = !alive || alive[i];
        bool refused = in->refused && in->refused[i];
        if (mask[i] && refused && first_refused < 0)
            first_refused = i;
        n += (cand[i] = mask[i] && !refused);
    }
    if (n == 0 && first_refused >= 0)
        return pl_error(PL_ERR_NO_DEVICE, "no device can hold this model (%s on %s: %s)",
                        in->devices[first_refused].name, in->devices[first_refused].node,
                        in->refused[first_refused]);
    if (n == 0)
        return pl_error(PL_ERR_NO_DEVICE, "no device can take a stage");
    if (stages < 0)
        return pl_error(PL_ERR_RANGE, "stages: %d < 0", stages);
    if (mode != PL_PLANNER_AUTO) {
        if (stages > n)
            return pl_error(PL_ERR_INFEASIBLE,
                            "%d stages asked for, but only %d device%s can take one%s%s%s", stages,
                            n, n == 1 ? "" : "s", first_refused >= 0 ? " (the others: " : "",
                            first_refused >= 0 ? in->refused[first_refused] : "",
                            first_refused >= 0 ? ")" : "");
        int want = PL_MIN(stages > 0 ? stages : n, s_layers(in));
        if (want < n && (st = s_fastest(in, cand, want)))
            return st;
    }
    /* the refused devices stay in the mask: the planner passes them over and lists why */
    for (int i = 0; i < in->n_devices; i++)
        mask[i] = cand[i] || (mask[i] && in->refused && in->refused[i]);
    pl_plan_input_t x = *in;
    pl_plan_t *p = NULL;
    if ((st = s_plan_once(&x, mask, mode, stages, &p)))
        return st;
    /* at least one microbatch per stage keeps every stage busy (when there are enough) */
    int need = PL_MIN(p->n_stages, p->resident_seqs);
    if (p->microbatches < need) {
        pl_plan_destroy(&p);
        x.job.microbatches = need;
        if ((st = s_plan_once(&x, mask, mode, stages, &p)))
            return st;
    }
    *plan_p = p;
    return PL_OK;
}

bool pl_sched_waves_note(const pl_plan_t *plan, char *buf, size_t len)
{
    if (!plan || plan->resident_seqs >= plan->n_seqs)
        return false;
    snprintf(buf, len,
             "KV cache for %d sequences does not fit; at most %d fit — split the prompts into "
             "several jobs",
             plan->n_seqs, plan->resident_seqs);
    return true;
}

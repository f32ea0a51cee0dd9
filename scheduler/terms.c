/* A stage's predicted compute split into its roofline terms: the same stage evaluated on a copy
 * of its device with the other resource made free. */
#include "scheduler/terms.h"

#include "scheduler/plan_impl.h"

#define S_HUGE 1e12 /* GFLOP/s or GB/s that makes one roofline term vanish */

/* Prefill and decode compute of `stage` on a copy of its device with the given rates. */
static pl_status_t s_times(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           double gflops, double gbps, double *pre, double *dec)
{
    const pl_plan_stage_t *s = &plan->stages[stage];
    pl_sched_device_t d = in->devices[s->device];
    d.gflops = gflops;
    d.mem_gbps = gbps;
    pl_plan_input_t one = *in;
    one.devices = &d;
    one.n_devices = 1;
    one.links = NULL;
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(&one, plan->resident_seqs, plan->microbatch_size, &ev);
    if (st)
        return st;
    double unused, cf, cm, x;
    pl_sched_stage_times(ev, 0, s->first_layer, s->n_layers, -1, &unused, dec);
    /* per prefill call: a chunk of a microbatch when the plan cuts prompts (its executor counts
     * each message as a call) */
    pl_sched_prefill_call(ev, 0, s->first_layer, s->first_layer + s->n_layers, -1,
                          pl_sched_chunks(ev, plan->prefill_chunk), &cf, &cm, &x);
    *pre = cf > cm ? cf : cm;
    pl_sched_eval_destroy(&ev);
    return PL_OK;
}

pl_status_t pl_sched_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           pl_sched_terms_t *terms)
{
    if (!in || !plan || stage < 0 || stage >= plan->n_stages ||
        plan->stages[stage].device < 0 || plan->stages[stage].device >= in->n_devices)
        return pl_error(PL_ERR_INVALID, "plan terms: no stage %d", stage);
    const pl_sched_device_t *d = &in->devices[plan->stages[stage].device];
    pl_sched_terms_t t;
    pl_status_t st;
    if ((st = s_times(in, plan, stage, d->gflops, S_HUGE, &t.pre_flop_s, &t.dec_flop_s)) ||
        (st = s_times(in, plan, stage, S_HUGE, d->mem_gbps, &t.pre_mem_s, &t.dec_mem_s)))
        return st;
    *terms = t;
    return PL_OK;
}

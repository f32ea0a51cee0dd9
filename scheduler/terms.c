/* A stage's predicted compute split into its roofline terms: the same stage evaluated on a copy
 * of its device with the other resource made free. */
#include "scheduler/terms.h"

#include "scheduler/plan_impl.h"

#define S_HUGE 1e12 /* GFLOP/s or GB/s that makes one roofline term vanish */

/* A copy of a device's rates: compute (GFLOP/s, decode's rows, prefill's pass, prefill's
 * attention) and memory. */
typedef struct {
    double gflops, dec_gflops, pass_gbps, attn_gflops, mem_gbps;
} s_rates_t;

/* Prefill and decode compute of `stage` on a copy of its device with the given rates; whether
 * its prefill call runs on decode's kernels. */
static pl_status_t s_times(const pl_plan_input_t *in, const pl_plan_t *plan, int stage, s_rates_t r,
                           double *pre, double *dec, bool *pre_rows)
{
    const pl_plan_stage_t *s = &plan->stages[stage];
    pl_sched_device_t d = in->devices[s->device];
    d.gflops = r.gflops;
    d.mem_gbps = r.mem_gbps;
    d.dec_gflops = r.dec_gflops;
    d.pass_gbps = r.pass_gbps;
    d.attn_gflops = r.attn_gflops;
    pl_plan_input_t one = *in;
    one.devices = &d;
    one.n_devices = 1;
    one.links = NULL;
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(&one, plan->resident_seqs, plan->microbatch_size, &ev);
    if (st)
        return st;
    double unused, cf, cm, cc, x;
    pl_sched_stage_times(ev, 0, s->first_layer, s->n_layers, -1, &unused, dec);
    /* per prefill call: a chunk of a microbatch when the plan cuts prompts (its executor counts
     * each message as a call) */
    pl_sched_prefill_call(ev, 0, s->first_layer, s->first_layer + s->n_layers, -1,
                          pl_sched_chunks(ev, plan->prefill_chunk), &cf, &cm, pre_rows, &cc, &x);
    *pre = cc;
    pl_sched_eval_destroy(&ev);
    return PL_OK;
}

pl_status_t pl_sched_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           pl_sched_terms_t *terms)
{
    if (!in || !plan || stage < 0 || stage >= plan->n_stages || plan->stages[stage].device < 0 ||
        plan->stages[stage].device >= in->n_devices)
        return pl_error(PL_ERR_INVALID, "plan terms: no stage %d", stage);
    const pl_sched_device_t *d = &in->devices[plan->stages[stage].device];
    pl_sched_terms_t t = {.dec_rows = d->dec_gflops > 0};
    pl_status_t st;
    /* the rates a device does not have stay absent (0) in both copies; the others made free */
    s_rates_t flop = {d->gflops, d->dec_gflops, d->pass_gbps, d->attn_gflops, S_HUGE};
    s_rates_t mem = {S_HUGE, d->dec_gflops > 0 ? S_HUGE : 0.0, d->pass_gbps > 0 ? S_HUGE : 0.0,
                     d->attn_gflops > 0 ? S_HUGE : 0.0, d->mem_gbps};
    /* the compute without the attention: the attention's part is the difference */
    s_rates_t dense = flop;
    dense.attn_gflops = d->attn_gflops > 0 ? S_HUGE : 0.0;
    bool rows;
    double dense_s = 0.0, unused;
    if ((st = s_times(in, plan, stage, flop, &t.pre_flop_s, &t.dec_flop_s, &t.pre_rows)) ||
        (st = s_times(in, plan, stage, mem, &t.pre_mem_s, &t.dec_mem_s, &rows)) ||
        (d->attn_gflops > 0 && (st = s_times(in, plan, stage, dense, &dense_s, &unused, &rows))))
        return st;
    t.pre_attn_s = d->attn_gflops > 0 && t.pre_flop_s > dense_s ? t.pre_flop_s - dense_s : 0.0;
    *terms = t;
    return PL_OK;
}

double pl_sched_terms_prefill(const pl_sched_terms_t *t)
{
    return pl_sched_phase(t->pre_rows, t->pre_flop_s, t->pre_mem_s);
}

double pl_sched_terms_decode(const pl_sched_terms_t *t)
{
    return pl_sched_phase(t->dec_rows, t->dec_flop_s, t->dec_mem_s);
}

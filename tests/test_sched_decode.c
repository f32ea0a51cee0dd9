/* The kernel rates of a CPU device, worked out by hand: a decode step (and a short prompt's
 * prefill) on decode's row rate, the larger of rows and weight pass plus part of the other;
 * prefill's pass over the weights per sequence; their terms, their pooling among identical
 * devices, their checks, and the splits they give. */
#include "sched_util.h"
#include "scheduler/inputs.h"
#include "scheduler/terms.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

TestSuite(sched_decode);

/* Explicit costs: L layers of W bytes and F FLOPs per token, nothing else (no attention, KV,
 * embedding, head or activation bytes), links free. */
#define S_L 8
#define S_W 1e8
#define S_F 2e7

static pl_sched_layer_cost_t s_layers[S_L];
static pl_sched_costs_t s_costs = {.n_layers = S_L, .layers = s_layers};
static int s_chunk; /* the job's prefill_chunk; 0: whole prompts */

/* `stages` equal devices (gflops, gbps, decode row rate, prefill passes), 4 sequences of
 * `prompt`-token prompts and 9 new tokens in `stages` microbatches, prompts in chunks of s_chunk
 * (0: whole), fixed order, every device used. */
static pl_plan_t *s_plan(double gflops, double gbps, double dec, double pass, int prompt,
                         int stages, pl_plan_input_t *in, pl_sched_device_t *d)
{
    for (int i = 0; i < S_L; i++)
        s_layers[i] = (pl_sched_layer_cost_t){.weight_bytes = S_W, .flops_per_token = S_F};
    for (int i = 0; i < stages; i++) {
        d[i] = dev(i ? "b" : "a", "h", gflops, gbps, 64);
        d[i].dec_gflops = dec;
        d[i].pass_gbps = pass;
    }
    *in = (pl_plan_input_t){.costs = &s_costs, .devices = d, .n_devices = stages};
    in->job = (pl_sched_job_t){.n_seqs = 4,
                               .prompt_avg = prompt,
                               .prompt_max = prompt,
                               .max_new_tokens = 9,
                               .microbatches = stages,
                               .prefill_chunk = s_chunk ? s_chunk : prompt};
    plan_fixed_order(in);
    plan_free_links(in);
    return plan_ok(in);
}

/* max + PL_SCHED_ROW_OVERLAP min, by hand */
static double s_rows(double a, double b)
{
    return fmax(a, b) + 0.4 * fmin(a, b);
}

Test(sched_decode, a_step_is_its_larger_term_and_part_of_the_other)
{
    cr_assert_eq(PL_SCHED_ROW_OVERLAP, 0.4);
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    /* one stage, 4 rows: 8 * 1e8 B / 20 GB/s = 40 ms of weights, 4 * 8 * 2e7 / 50 GFLOP/s =
     * 12.8 ms of rows: 40 + 0.4 * 12.8 ms a step (at 100 GFLOP/s the roofline said 40 ms) */
    pl_plan_t *p = s_plan(100, 20, 50, 0, 16, 1, &in, d);
    double t = s_rows(S_L * S_W / 20e9, 4.0 * S_L * S_F / 50e9);
    cr_expect(s_near(p->stages[0].t_decode, t), "%g vs %g", p->stages[0].t_decode, t);
    cr_expect(s_near(p->decode_period, t), "%g", p->decode_period);
    cr_expect(s_near(p->decode_tok_s, 4 / t), "%g", p->decode_tok_s);
    /* 16-token prompts run on decode's kernels too: 64 rows at 50 GFLOP/s beside the weights */
    double tp = s_rows(64.0 * S_L * S_F / 50e9, S_L * S_W / 20e9);
    cr_expect(s_near(p->stages[0].t_prefill, tp), "%g vs %g", p->stages[0].t_prefill, tp);
    pl_plan_destroy(&p);

    /* the rows larger than the pass (4 rows at 5 GFLOP/s: 128 ms): bound by the rows */
    p = s_plan(100, 20, 5, 0, 16, 1, &in, d);
    t = s_rows(4.0 * S_L * S_F / 5e9, S_L * S_W / 20e9);
    cr_expect(s_near(p->stages[0].t_decode, t), "%g vs %g", p->stages[0].t_decode, t);
    pl_plan_destroy(&p);

    /* two stages of 4 layers, 2 microbatches of 2: 20 ms and 3.2 ms a stage, the period two */
    p = s_plan(100, 20, 50, 0, 16, 2, &in, d);
    cr_assert_eq(p->stages[0].n_layers, 4);
    cr_assert_eq(p->microbatches, 2);
    double ts = s_rows(4 * S_W / 20e9, 2.0 * 4 * S_F / 50e9);
    cr_expect(s_near(p->stages[1].t_decode, ts), "%g vs %g", p->stages[1].t_decode, ts);
    cr_expect(fabs(p->decode_period - 2 * ts) < 1e-9, "%g vs %g", p->decode_period, 2 * ts);
    pl_plan_destroy(&p);
}

Test(sched_decode, prefill_passes_over_the_weights_once_per_sequence)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    /* 64-token prompts (sgemm's products): 4 * 64 * 8 * 2e7 / 100 GFLOP/s = 409.6 ms of flops,
     * and 4 sequences each passing over 8e8 B at 4 GB/s: 800 ms more */
    pl_plan_t *p = s_plan(100, 20, 50, 4, 64, 1, &in, d);
    double t = 4.0 * 64 * S_L * S_F / 100e9 + 4 * S_L * S_W / 4e9;
    cr_expect(s_near(p->stages[0].t_prefill, t), "%g vs %g", p->stages[0].t_prefill, t);
    cr_expect(s_near(p->prefill_time, t), "%g", p->prefill_time);
    pl_plan_destroy(&p);
    /* without a pass rate, the roofline of the flops alone */
    p = s_plan(100, 20, 50, 0, 64, 1, &in, d);
    t = 4.0 * 64 * S_L * S_F / 100e9;
    cr_expect(s_near(p->stages[0].t_prefill, t), "%g vs %g", p->stages[0].t_prefill, t);
    pl_plan_destroy(&p);
    /* 2 stages, chunks of 32 (2 messages per microbatch of 2): each message passes over the
     * stage's weights once for each of its 2 sequences */
    s_chunk = 32;
    p = s_plan(100, 20, 50, 4, 64, 2, &in, d);
    s_chunk = 0;
    cr_assert_eq(p->prefill_chunk, 32);
    double tc = 2.0 * 32 * 4 * S_F / 100e9 + 2 * 4 * S_W / 4e9;
    cr_expect(s_near(p->stages[0].t_prefill_call, tc), "%g vs %g", p->stages[0].t_prefill_call, tc);
    /* 4 messages through 2 stages: 5 message times */
    cr_expect(fabs(p->prefill_time - 5 * tc) < 1e-9, "%g vs %g", p->prefill_time, 5 * tc);
    pl_plan_destroy(&p);
    /* chunks of 16: below PL_SCHED_ROW_TOKENS, decode's kernels, no passes */
    s_chunk = 16;
    p = s_plan(100, 20, 50, 4, 64, 2, &in, d);
    s_chunk = 0;
    tc = s_rows(2.0 * 16 * 4 * S_F / 50e9, 4 * S_W / 20e9);
    cr_expect(s_near(p->stages[0].t_prefill_call, tc), "%g vs %g", p->stages[0].t_prefill_call, tc);
    pl_plan_destroy(&p);
}

Test(sched_decode, without_kernel_rates_both_phases_stay_rooflines)
{
    pl_plan_input_t in;
    pl_sched_device_t d[1];
    pl_plan_t *p = s_plan(100, 20, 0, 0, 16, 1, &in, d);
    double t = fmax(S_L * S_W / 20e9, 4.0 * S_L * S_F / 100e9);
    cr_expect(s_near(p->stages[0].t_decode, t), "%g vs %g", p->stages[0].t_decode, t);
    double tp = fmax(S_L * S_W / 20e9, 64.0 * S_L * S_F / 100e9);
    cr_expect(s_near(p->stages[0].t_prefill, tp), "%g vs %g", p->stages[0].t_prefill, tp);
    pl_sched_terms_t tm;
    cr_assert_eq(pl_sched_terms(&in, p, 0, &tm), PL_OK);
    cr_expect(!tm.dec_rows && !tm.pre_rows);
    cr_expect(s_near(tm.dec_flop_s, 4.0 * S_L * S_F / 100e9), "%g", tm.dec_flop_s);
    cr_expect(s_near(pl_sched_terms_decode(&tm), t));
    pl_plan_destroy(&p);
}

Test(sched_decode, terms_are_the_rows_and_the_pass)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    pl_plan_t *p = s_plan(100, 20, 50, 4, 16, 2, &in, d);
    pl_sched_terms_t t;
    cr_assert_eq(pl_sched_terms(&in, p, 1, &t), PL_OK, "%s", pl_error_msg());
    cr_expect(t.dec_rows && t.pre_rows);
    double rows = 2.0 * 4 * S_F / 50e9, pass = 4 * S_W / 20e9;
    cr_expect(s_near(t.dec_flop_s, rows), "%g vs %g", t.dec_flop_s, rows);
    cr_expect(s_near(t.dec_mem_s, pass), "%g vs %g", t.dec_mem_s, pass);
    /* combined, they are the stage's predicted decode compute, which the plan JSON shows */
    cr_expect(s_near(pl_sched_terms_decode(&t), p->stages[1].t_decode));
    json_t *o = pl_plan_to_json_full(p, &in, PL_PLANNER_OPTIMAL);
    cr_assert_not_null(o);
    json_t *s1 = json_array_get(json_object_get(o, "stages"), 1);
    cr_expect_eq(json_real_value(json_object_get(s1, "dec_gflops")), 50.0);
    cr_expect_eq(json_real_value(json_object_get(s1, "pass_gbps")), 4.0);
    cr_expect(s_near(json_real_value(json_object_get(s1, "compute_decode_s")), s_rows(rows, pass)));
    json_decref(o);
    /* the 16-token prefill on decode's kernels: 2 * 16 rows of 4 layers at the row rate */
    double prow = 2.0 * 16 * 4 * S_F / 50e9;
    cr_expect(s_near(t.pre_flop_s, prow), "%g vs %g", t.pre_flop_s, prow);
    cr_expect(s_near(pl_sched_terms_prefill(&t), s_rows(prow, pass)));
    pl_plan_destroy(&p);
    /* 64-token prompts: sgemm's rate and the passes, a roofline against the weights */
    p = s_plan(100, 20, 50, 4, 64, 2, &in, d);
    cr_assert_eq(pl_sched_terms(&in, p, 1, &t), PL_OK, "%s", pl_error_msg());
    cr_expect(!t.pre_rows);
    double pf = 2.0 * 64 * 4 * S_F / 100e9 + 2 * 4 * S_W / 4e9;
    cr_expect(s_near(t.pre_flop_s, pf), "%g vs %g", t.pre_flop_s, pf);
    cr_expect(s_near(t.pre_mem_s, pass), "%g vs %g", t.pre_mem_s, pass);
    cr_expect(s_near(pl_sched_terms_prefill(&t), pf));
    pl_plan_destroy(&p);
}

Test(sched_decode, a_bad_row_rate_is_refused_by_name)
{
    pl_plan_input_t in;
    pl_sched_device_t d[1];
    pl_plan_t *p = s_plan(100, 20, 50, 4, 16, 1, &in, d);
    pl_plan_destroy(&p);
    const double bad[] = {-1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d[0].dec_gflops = bad[i];
        cr_expect_eq(pl_plan(&in, &p), PL_ERR_RANGE, "%g", bad[i]);
        cr_expect(strstr(pl_error_msg(), "devices[0].dec_gflops") != NULL, "%s", pl_error_msg());
        cr_expect_null(p);
        d[0].dec_gflops = 50;
        d[0].pass_gbps = bad[i];
        cr_expect_eq(pl_plan(&in, &p), PL_ERR_RANGE, "%g", bad[i]);
        cr_expect(strstr(pl_error_msg(), "devices[0].pass_gbps") != NULL, "%s", pl_error_msg());
        cr_expect_null(p);
        d[0].pass_gbps = 4;
    }
}

Test(sched_decode, identical_devices_pool_their_row_rates)
{
    pl_sched_device_t d[3] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 52, 12, 64),
                              dev("xeon", "h", 50, 12, 64)};
    /* within the band of the smallest (84 * 1.2 = 100.8): one rate, the mean; and so for the
     * prefill passes */
    d[0].dec_gflops = 84;
    d[1].dec_gflops = 96;
    d[2].dec_gflops = 90;
    for (int i = 0; i < 3; i++)
        d[i].pass_gbps = 2.5 + 0.1 * i;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    for (int i = 0; i < 3; i++) {
        cr_expect(s_near(d[i].dec_gflops, 90), "device %d: %g", i, d[i].dec_gflops);
        cr_expect(s_near(d[i].pass_gbps, 2.6), "device %d: %g", i, d[i].pass_gbps);
    }
    /* a device without one (an older daemon) keeps the roofline, and so do its peers' rates */
    d[0].dec_gflops = 80;
    d[1].dec_gflops = 0;
    d[2].dec_gflops = 100;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    cr_expect(d[0].dec_gflops == 80 && d[1].dec_gflops == 0 && d[2].dec_gflops == 100);
}

/* bench_pipeline's model on two equal 1-thread CPU stages: its decode job splits 6 + 6 with the
 * row rate as without it (the weight pass and the rows both divide with the layers). */
Test(sched_decode, equal_stages_split_evenly)
{
    const pl_sched_model_t m = bench_model();
    pl_sched_device_t d[2] = {dev("xeon", "h", 60, 12, 64), dev("xeon", "h", 60, 12, 64)};
    for (int k = 0; k < 2; k++) {
        d[0].dec_gflops = d[1].dec_gflops = k ? 90 : 0;
        pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 2};
        in.job =
            (pl_sched_job_t){.n_seqs = 12, .prompt_avg = 8, .prompt_max = 8, .max_new_tokens = 32};
        in.options.field_mask = PL_PLAN_OPT_MAX_STAGES | PL_PLAN_OPT_ALLOW_SKIP;
        in.options.max_stages = 2;
        in.options.allow_skip = false;
        pl_plan_t *p = NULL;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(p->n_stages, 2);
        cr_expect(p->stages[0].n_layers == 6 && p->stages[1].n_layers == 6, "row rate %g: %d+%d",
                  d[0].dec_gflops, p->stages[0].n_layers, p->stages[1].n_layers);
        pl_plan_destroy(&p);
    }
}

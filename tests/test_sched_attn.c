/* Prefill's attention at a rate of its own, worked out by hand: a long prompt's attention
 * (quadratic in the prompt, each chunk its share against the prefix cached before it) goes at
 * attn_gflops beside the products at sgemm's rate and the weight passes, or beside decode's
 * rows for short chunks; without the rate, at the phase's rate as before. Its terms, JSON,
 * checks and pooling. */
#include "sched_util.h"
#include "scheduler/inputs.h"
#include "scheduler/terms.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

TestSuite(sched_attn);

/* Explicit costs: L layers of W bytes, F FLOPs per token and A attention FLOPs per (token,
 * cached position), nothing else (no KV, embedding, head or activation bytes), links free. */
#define S_L 8
#define S_W 1e8
#define S_F 2e7
#define S_A 4096.0
#define S_P 1024 /* one prompt of this many tokens */

static pl_sched_layer_cost_t s_layers[S_L];
static pl_sched_costs_t s_costs = {.n_layers = S_L, .layers = s_layers};

/* `stages` equal devices at 100 GFLOP/s, 20 GB/s, decode rows at 50, passes at 4 GB/s and
 * attention at `attn`; one S_P-token prompt and 2 new tokens, prompts in chunks of `chunk`
 * (0: whole), fixed order, every device used. */
static pl_plan_t *s_plan(double attn, int chunk, int stages, pl_plan_input_t *in,
                         pl_sched_device_t *d)
{
    for (int i = 0; i < S_L; i++)
        s_layers[i] = (pl_sched_layer_cost_t){
            .weight_bytes = S_W, .flops_per_token = S_F, .attn_flops_per_pos = S_A};
    for (int i = 0; i < stages; i++) {
        d[i] = dev(i ? "b" : "a", "h", 100, 20, 64);
        d[i].dec_gflops = 50;
        d[i].pass_gbps = 4;
        d[i].attn_gflops = attn;
    }
    *in = (pl_plan_input_t){.costs = &s_costs, .devices = d, .n_devices = stages};
    in->job = (pl_sched_job_t){.n_seqs = 1,
                               .prompt_avg = S_P,
                               .prompt_max = S_P,
                               .max_new_tokens = 2,
                               .microbatches = 1,
                               .prefill_chunk = chunk ? chunk : S_P};
    plan_fixed_order(in);
    plan_free_links(in);
    return plan_ok(in);
}

/* the prompt's attention flops over `layers` layers: each of its tokens against itself and
 * every position before it */
static double s_attn_flops(int layers)
{
    return S_P * (S_P + 1) / 2.0 * layers * S_A;
}

Test(sched_attn, a_long_prompt_s_attention_goes_at_its_own_rate)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    /* one stage, the whole prompt: 1024 * 8 * 2e7 / 100 GFLOP/s = 1.638 s of products, 17.2
     * GFLOP of attention at 10 GFLOP/s = 1.720 s, one pass over 8e8 B at 4 GB/s = 0.2 s (at the
     * sgemm rate the attention took 0.172 s: the prompt predicted 1.6x too fast) */
    pl_plan_t *p = s_plan(10, 0, 1, &in, d);
    double t = S_P * S_L * S_F / 100e9 + s_attn_flops(S_L) / 10e9 + S_L * S_W / 4e9;
    cr_expect(s_near(p->stages[0].t_prefill, t), "%g vs %g", p->stages[0].t_prefill, t);
    cr_expect(s_near(p->prefill_time, t), "%g vs %g", p->prefill_time, t);
    pl_plan_destroy(&p);
    /* without the rate (older daemons, GPUs): at the phase's rate, as before */
    p = s_plan(0, 0, 1, &in, d);
    t = (S_P * S_L * S_F + s_attn_flops(S_L)) / 100e9 + S_L * S_W / 4e9;
    cr_expect(s_near(p->stages[0].t_prefill, t), "%g vs %g", p->stages[0].t_prefill, t);
    pl_plan_destroy(&p);
}

Test(sched_attn, each_chunk_takes_its_share_of_the_attention)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    /* 2 stages of 4 layers, chunks of 256 (4 messages): each message a quarter of the stage's
     * products and attention, and one pass over its weights */
    pl_plan_t *p = s_plan(10, 256, 2, &in, d);
    cr_assert_eq(p->prefill_chunk, 256);
    double tc = S_P * 4 * S_F / 4 / 100e9 + s_attn_flops(4) / 4 / 10e9 + 4 * S_W / 4e9;
    cr_expect(s_near(p->stages[1].t_prefill_call, tc), "%g vs %g", p->stages[1].t_prefill_call, tc);
    /* 4 messages through 2 stages: 5 message times */
    cr_expect(fabs(p->prefill_time - 5 * tc) < 1e-9, "%g vs %g", p->prefill_time, 5 * tc);
    pl_sched_terms_t t;
    cr_assert_eq(pl_sched_terms(&in, p, 1, &t), PL_OK, "%s", pl_error_msg());
    cr_expect(!t.pre_rows);
    cr_expect(s_near(t.pre_flop_s, tc), "%g vs %g", t.pre_flop_s, tc);
    double ta = s_attn_flops(4) / 4 / 10e9; /* the attention's part of it */
    cr_expect(fabs(t.pre_attn_s - ta) < 1e-9 * ta, "%g vs %g", t.pre_attn_s, ta);
    cr_expect(s_near(t.pre_mem_s, 4 * S_W / 20e9), "%g", t.pre_mem_s); /* attention is compute */
    json_t *o = pl_plan_to_json_full(p, &in, PL_PLANNER_OPTIMAL);
    cr_assert_not_null(o);
    json_t *s1 = json_array_get(json_object_get(o, "stages"), 1);
    cr_expect_eq(json_real_value(json_object_get(s1, "attn_gflops")), 10.0);
    cr_expect(s_near(json_real_value(json_object_get(s1, "compute_prefill_s")), tc));
    json_decref(o);
    pl_plan_destroy(&p);
    /* chunks of 16 (64 messages): decode's kernels for the products, no passes, the attention
     * still at its own rate; rows and the weights overlap in part */
    p = s_plan(10, 16, 2, &in, d);
    double rows = S_P * 4 * S_F / 64 / 50e9 + s_attn_flops(4) / 64 / 10e9;
    tc = fmax(rows, 4 * S_W / 20e9) + PL_SCHED_ROW_OVERLAP * fmin(rows, 4 * S_W / 20e9);
    cr_expect(s_near(p->stages[0].t_prefill_call, tc), "%g vs %g", p->stages[0].t_prefill_call, tc);
    pl_plan_destroy(&p);
}

Test(sched_attn, a_bad_attention_rate_is_refused_by_name)
{
    pl_plan_input_t in;
    pl_sched_device_t d[1];
    pl_plan_t *p = s_plan(10, 0, 1, &in, d);
    pl_plan_destroy(&p);
    const double bad[] = {-1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d[0].attn_gflops = bad[i];
        cr_expect_eq(pl_plan(&in, &p), PL_ERR_RANGE, "%g", bad[i]);
        cr_expect(strstr(pl_error_msg(), "devices[0].attn_gflops") != NULL, "%s", pl_error_msg());
        cr_expect_null(p);
    }
}

Test(sched_attn, identical_devices_pool_their_attention_rates)
{
    pl_sched_device_t d[3] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 52, 12, 64),
                              dev("xeon", "h", 50, 12, 64)};
    /* within the band of the smallest (24 * 1.2 = 28.8): one rate, the mean */
    d[0].attn_gflops = 24;
    d[1].attn_gflops = 26;
    d[2].attn_gflops = 28;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    for (int i = 0; i < 3; i++)
        cr_expect(s_near(d[i].attn_gflops, 26), "device %d: %g", i, d[i].attn_gflops);
    /* one without the rate (an older daemon): every one keeps its own */
    d[0].attn_gflops = 24;
    d[1].attn_gflops = 0;
    d[2].attn_gflops = 28;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    cr_expect(d[0].attn_gflops == 24 && d[1].attn_gflops == 0 && d[2].attn_gflops == 28);
}

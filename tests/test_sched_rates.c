/* Rates and predictions the planner takes from measurements: identical devices with noisy rates
 * get one rate and the even split, the same run to run; chunked prefill predicted as a pipeline
 * of messages that each re-read the stage's weights, worked out by hand; per-call terms. */
#include "sched_util.h"
#include "scheduler/inputs.h"
#include "scheduler/terms.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

TestSuite(sched_rates);

/* Layers per stage of the plan of `n` devices (the optimal planner: every device used) for a
 * 12-prompt job of `prompt` tokens and `new_tokens`, written to counts[]. */
static int s_split(pl_sched_device_t *d, int n, int prompt, int new_tokens, int *counts)
{
    pl_sched_model_t m = bench_model();
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = n};
    in.job = (pl_sched_job_t){.n_seqs = 12,
                              .prompt_avg = prompt,
                              .prompt_max = prompt,
                              .max_new_tokens = new_tokens,
                              .microbatches = n};
    plan_fixed_order(&in);
    pl_plan_t *p = plan_ok(&in);
    int s = p->n_stages;
    for (int i = 0; i < s; i++)
        counts[i] = p->stages[i].n_layers;
    pl_plan_destroy(&p);
    return s;
}

Test(sched_rates, noise_within_the_band_gives_identical_devices_one_rate)
{
    pl_sched_device_t d[3] = {dev("xeon", "h", 100, 12, 64), dev("xeon", "h", 118, 13.5, 64),
                              dev("xeon", "h", 109, 12.4, 64)};
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    for (int i = 0; i < 3; i++) {
        cr_expect(fabs(d[i].gflops - (100 + 118 + 109) / 3.0) < 1e-9, "%g", d[i].gflops);
        cr_expect(fabs(d[i].mem_gbps - (12 + 13.5 + 12.4) / 3.0) < 1e-9, "%g", d[i].mem_gbps);
    }
}

Test(sched_rates, a_real_difference_and_other_kinds_keep_their_rates)
{
    /* twice as fast is no noise; an equal rate on another kind of device is not merged; a
     * non-candidate is left alone */
    pl_sched_device_t d[4] = {dev("xeon", "h", 100, 12, 64), dev("xeon", "h", 200, 12.5, 64),
                              dev("epyc", "h", 110, 12, 64), dev("xeon", "h", 105, 12, 64)};
    bool cand[4] = {true, true, true, false};
    pl_sched_rates_equalize(d, NULL, NULL, 4, cand, PL_SCHED_RATE_BAND);
    cr_expect_eq(d[0].gflops, 100);
    cr_expect_eq(d[1].gflops, 200);
    cr_expect_eq(d[2].gflops, 110);
    cr_expect_eq(d[3].gflops, 105);
    cr_expect(fabs(d[0].mem_gbps - 12.25) < 1e-12 && fabs(d[1].mem_gbps - 12.25) < 1e-12);
}

Test(sched_rates, the_result_does_not_depend_on_the_device_order)
{
    const double g[5] = {100, 150, 108, 160, 95}, m[5] = {10, 11, 30, 10.5, 29};
    pl_sched_device_t a[5], b[5];
    for (int i = 0; i < 5; i++) {
        a[i] = dev("xeon", "h", g[i], m[i], 64);
        b[4 - i] = a[i];
    }
    pl_sched_rates_equalize(a, NULL, NULL, 5, NULL, PL_SCHED_RATE_BAND);
    pl_sched_rates_equalize(b, NULL, NULL, 5, NULL, PL_SCHED_RATE_BAND);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(a[i].gflops, b[4 - i].gflops);
        cr_expect_eq(a[i].mem_gbps, b[4 - i].mem_gbps);
    }
    /* runs from the smallest: {95, 100, 108} and {150, 160}; {10, 10.5, 11} and {29, 30} */
    cr_expect(fabs(a[0].gflops - 101) < 1e-9 && fabs(a[1].gflops - 155) < 1e-9);
    cr_expect(fabs(a[0].mem_gbps - 10.5) < 1e-9 && fabs(a[2].mem_gbps - 29.5) < 1e-9);
}

/* Lessons from jobs of different shapes: two devices calibrated alike (within the calibration
 * band: 100 and 140 GFLOP/s) learned 30% apart (one ran a long prompt, the other a batch).
 * Grouped by calibration, they plan with the mean of what they learned; a device calibrated 2x
 * slower (a slowed-down one) keeps its own. */
Test(sched_rates, devices_calibrated_alike_pool_their_lessons)
{
    pl_sched_device_t cal[3] = {dev("xeon", "h", 100, 12, 64), dev("xeon", "h", 140, 16, 64),
                                dev("xeon", "h", 50, 6, 64)};
    pl_sched_device_t d[3] = {dev("xeon", "h", 40, 12, 64), dev("xeon", "h", 52, 9, 64),
                              dev("xeon", "h", 20, 3, 64)};
    pl_sched_rates_equalize(d, cal, NULL, 3, NULL, PL_SCHED_CALIB_BAND);
    cr_expect(fabs(d[0].gflops - 46) < 1e-12 && fabs(d[1].gflops - 46) < 1e-12, "%g %g",
              d[0].gflops, d[1].gflops);
    cr_expect(fabs(d[0].mem_gbps - 10.5) < 1e-12 && fabs(d[1].mem_gbps - 10.5) < 1e-12);
    cr_expect(d[2].gflops == 20 && d[2].mem_gbps == 3);
    /* a third daemon joins (the bench's node2): still on its calibration, it plans with what its
     * peers learned, not with the calibration's sgemm peak */
    pl_sched_device_t e[3] = {dev("xeon", "h", 40, 12, 64), dev("xeon", "h", 52, 9, 64),
                              dev("xeon", "h", 102, 12.1, 64)};
    pl_sched_device_t ecal[3] = {cal[0], cal[1], dev("xeon", "h", 110, 13, 64)};
    bool learned[3] = {true, true, false};
    pl_sched_rates_equalize(e, ecal, learned, 3, NULL, PL_SCHED_CALIB_BAND);
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(e[i].gflops - 46) < 1e-12 && fabs(e[i].mem_gbps - 10.5) < 1e-12,
                  "device %d: %g, %g", i, e[i].gflops, e[i].mem_gbps);
}

/* The bench's case: two identical cores whose calibrations (or lessons) differ by draws within
 * the band. Without equalizing, the optimal split follows the draw (5+7, 7+5); with it, every
 * draw gives the split of exactly equal rates: 6+6. */
Test(sched_rates, noisy_identical_devices_get_the_even_split_every_time)
{
    int ref[2], got[2];
    pl_sched_device_t e[2] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 50, 12, 64)};
    cr_assert_eq(s_split(e, 2, 64, 1, ref), 2);
    cr_assert_eq(ref[0], 6, "equal rates: %d+%d", ref[0], ref[1]);
    srand(8);
    int moved = 0;
    for (int draw = 0; draw < 200; draw++) {
        pl_sched_device_t d[2];
        for (int i = 0; i < 2; i++) /* +-9%: any two within the 20% band */
            d[i] = dev("xeon", "h", 50 * (0.91 + 0.18 * rand() / (double)RAND_MAX),
                       12 * (0.91 + 0.18 * rand() / (double)RAND_MAX), 64);
        int raw[2];
        s_split(d, 2, 64, 1, raw);
        moved += raw[0] != ref[0];
        pl_sched_rates_equalize(d, NULL, NULL, 2, NULL, PL_SCHED_RATE_BAND);
        cr_assert_eq(s_split(d, 2, 64, 1, got), 2);
        cr_assert(got[0] == ref[0] && got[1] == ref[1], "draw %d: %d+%d", draw, got[0], got[1]);
        cr_assert_eq(s_split(d, 2, 8, 32, got), 2); /* the decode job too */
        cr_assert(abs(got[0] - got[1]) <= 1, "draw %d decode: %d+%d", draw, got[0], got[1]);
    }
    cr_expect_gt(moved, 0, "the draws never moved a layer: the test shows nothing");
}

/* ---- chunked prefill, by hand ---------------------------------------------------------- */

/* Explicit costs: L layers of W bytes and F FLOPs per token, nothing else (no attention, KV,
 * embedding, head or activation bytes), links free: a prefill message's time on a stage of n
 * layers is max(b P / K * n F / rate, n W / bw). */
#define S_L 8
#define S_W 1e8
#define S_F 2e7

static pl_sched_layer_cost_t s_layers[S_L];
static pl_sched_costs_t s_costs = {.n_layers = S_L, .layers = s_layers};

static pl_plan_t *s_chunked(double gflops, double gbps, int stages, int seqs, int prompt,
                            int chunk, pl_plan_input_t *in, pl_sched_device_t *d)
{
    for (int i = 0; i < S_L; i++)
        s_layers[i] = (pl_sched_layer_cost_t){.weight_bytes = S_W, .flops_per_token = S_F};
    for (int i = 0; i < stages; i++)
        d[i] = dev(i ? "b" : "a", "h", gflops, gbps, 64);
    *in = (pl_plan_input_t){.costs = &s_costs, .devices = d, .n_devices = stages};
    in->job = (pl_sched_job_t){.n_seqs = seqs,
                               .prompt_avg = prompt,
                               .prompt_max = prompt,
                               .max_new_tokens = 1,
                               .microbatches = stages,
                               .prefill_chunk = chunk};
    plan_fixed_order(in);
    plan_free_links(in);
    return plan_ok(in);
}

Test(sched_rates, chunked_prefill_is_a_pipeline_of_messages)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    /* 2 stages of 4 layers, 2 microbatches of 2 sequences, 1024-token prompts in 8 chunks of
     * 128: 16 messages, each 2 * 128 * 4 * 2e7 = 20.48 GFLOP = 0.2048 s at 100 GFLOP/s against
     * 4e8 bytes = 0.02 s at 20 GB/s (compute-bound) */
    pl_plan_t *p = s_chunked(100, 20, 2, 4, 1024, 128, &in, d);
    cr_assert_eq(p->n_stages, 2);
    cr_assert_eq(p->stages[0].n_layers, 4);
    cr_assert_eq(p->microbatches, 2);
    cr_assert_eq(p->prefill_chunk, 128);
    double t = 2.0 * 128 * 4 * S_F / 100e9;
    cr_expect(fabs(p->stages[0].t_prefill_call - t) < 1e-12 * t, "%g", p->stages[0].t_prefill_call);
    /* 16 messages through 2 stages: 17 message times */
    cr_expect(fabs(p->prefill_time - 17 * t) < 1e-9 * t, "%g vs %g", p->prefill_time, 17 * t);
    cr_expect(fabs(p->prefill_tok_s - 4 * 1024 / (17 * t)) < 1e-6, "%g", p->prefill_tok_s);
    /* the whole-microbatch stage time is still the searches' prefill cost */
    cr_expect(fabs(p->stages[0].t_prefill - 8 * t) < 1e-9 * t);
    pl_plan_destroy(&p);

    /* memory-bound messages: 1 sequence in 32 chunks of 32 tokens at 1000 GFLOP/s and 1 GB/s:
     * compute 32 * 4 * 2e7 / 1e12 = 2.56 ms, weights 4e8 B / 1 GB/s = 0.4 s per message, so
     * cutting re-reads the weights 32 times: 33 * 0.4 s, not 2 * 0.4 s */
    p = s_chunked(1000, 1, 2, 1, 1024, 32, &in, d);
    cr_assert_eq(p->microbatches, 1);
    cr_expect(fabs(p->prefill_time - 33 * 0.4) < 1e-9, "%g", p->prefill_time);
    pl_plan_destroy(&p);
}

Test(sched_rates, per_call_terms_follow_the_chunk)
{
    pl_plan_input_t in;
    pl_sched_device_t d[2];
    pl_plan_t *p = s_chunked(100, 20, 2, 4, 1024, 128, &in, d);
    pl_sched_terms_t t;
    cr_assert_eq(pl_sched_terms(&in, p, 1, &t), PL_OK, "%s", pl_error_msg());
    /* one message: an eighth of the microbatch's FLOPs, the stage's weights once */
    double flop = 2.0 * 128 * 4 * S_F / 100e9, mem = 4 * S_W / 20e9;
    cr_expect(fabs(t.pre_flop_s - flop) < 1e-12 * flop, "%g vs %g", t.pre_flop_s, flop);
    cr_expect(fabs(t.pre_mem_s - mem) < 1e-12 * mem, "%g vs %g", t.pre_mem_s, mem);
    /* a decode step of the 2-sequence microbatch: 2 tokens */
    cr_expect(fabs(t.dec_flop_s - 2.0 * 4 * S_F / 100e9) < 1e-15, "%g", t.dec_flop_s);
    cr_expect(fabs(t.dec_mem_s - mem) < 1e-12 * mem, "%g", t.dec_mem_s);
    /* the JSON's compute_prefill_s, which pipectl multiplies by the calls, is the same call */
    json_t *o = pl_plan_to_json_full(p, &in, PL_PLANNER_OPTIMAL);
    cr_assert_not_null(o);
    json_t *s1 = json_array_get(json_object_get(o, "stages"), 1);
    cr_expect(fabs(json_real_value(json_object_get(s1, "compute_prefill_s")) - flop) <
              1e-12 * flop);
    json_decref(o);
    pl_plan_destroy(&p);
}

/* ---- daemons pinned to shared CPUs ---------------------------------------------------- */

Test(sched_rates, cpu_shares_of_pinned_and_unpinned_daemons)
{
    pl_sched_device_t d[5] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 50, 12, 64),
                              dev("xeon", "h", 50, 12, 64), dev("xeon", "other", 50, 12, 64),
                              dev("gpu", "h", 5e3, 900, 64)};
    snprintf(d[4].backend, sizeof(d[4].backend), "cuda");
    /* the bench: node0 on CPU 0, node1 on CPU 1, node2 on CPU 0; another host's daemon on its
     * CPU 0; a GPU (whatever its mask says) */
    uint64_t mask[5] = {1, 2, 1, 1, 1};
    int threads[5] = {1, 1, 1, 1, 1};
    double share[5];
    pl_sched_cpu_shares(d, 5, mask, threads, NULL, NULL, share);
    const double want[5] = {0.5, 1, 0.5, 1, 1};
    for (int i = 0; i < 5; i++)
        cr_expect(fabs(share[i] - want[i]) < 1e-12, "device %d: %g, expected %g", i, share[i],
                  want[i]);
    /* only the devices a plan uses compute: node0 alone on CPU 0 */
    bool used[5] = {true, true, false, false, false};
    pl_sched_cpu_shares(d, 5, mask, threads, used, NULL, share);
    cr_expect(share[0] == 1 && share[1] == 1 && share[2] == 1);
    /* three unpinned 1-thread daemons on 2 CPUs: 2/3 each; a 2-thread daemon on both CPUs with
     * a 1-thread one pinned to CPU 1: 2 / (2 + 1) and 1 / (1 + 1) */
    uint64_t all[3] = {3, 3, 3};
    pl_sched_cpu_shares(d, 3, all, threads, NULL, NULL, share);
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(share[i] - 2.0 / 3) < 1e-12, "%g", share[i]);
    uint64_t m2[2] = {3, 2};
    int t2[2] = {2, 1};
    pl_sched_cpu_shares(d, 2, m2, t2, NULL, NULL, share);
    cr_expect(fabs(share[0] - 2.0 / 3) < 1e-12 && fabs(share[1] - 0.5) < 1e-12, "%g %g",
              share[0], share[1]);
    /* unknown CPUs (mask 0): nothing is assumed */
    uint64_t none[3] = {0, 0, 1};
    pl_sched_cpu_shares(d, 3, none, threads, NULL, NULL, share);
    cr_expect(share[0] == 1 && share[1] == 1 && share[2] == 1);
}

/* Three daemons on two cores, node0 and node2 sharing one: with the shares, the prefill job's
 * split puts as many layers on the shared core's two stages together as on node1's own core
 * (3+6+3), and every stage is predicted to take the same time. */
Test(sched_rates, three_daemons_on_two_cores_split_by_core)
{
    pl_sched_device_t d[3] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 50, 12, 64),
                              dev("xeon", "h", 50, 12, 64)};
    uint64_t mask[3] = {1, 2, 1};
    int threads[3] = {1, 1, 1};
    double share[3];
    pl_sched_cpu_shares(d, 3, mask, threads, NULL, NULL, share);
    for (int i = 0; i < 3; i++) {
        d[i].gflops *= share[i];
        d[i].mem_gbps *= share[i];
    }
    int counts[3];
    cr_assert_eq(s_split(d, 3, 64, 1, counts), 3);
    cr_expect(counts[0] == 3 && counts[1] == 6 && counts[2] == 3, "%d+%d+%d", counts[0],
              counts[1], counts[2]);
}

/* The bench's 3 stages on 2 cores (node0 and node2 on CPU 0): stages that alternate on one core
 * (one waits while the other computes) are charged by how busy each is, not 1/2 each. */
Test(sched_rates, daemons_sharing_a_core_split_it_by_their_busy_fractions)
{
    pl_sched_device_t d[3] = {dev("xeon", "h", 50, 12, 64), dev("xeon", "h", 50, 12, 64),
                              dev("xeon", "h", 50, 12, 64)};
    uint64_t mask[3] = {1, 2, 1};
    int threads[3] = {1, 1, 1};
    /* a 3+3+6 split at the devices' own rates: per microbatch 1, 1 and 2 units of compute; the
     * pipeline goes at the 6-layer stage's pace, so the others are busy half the time */
    pl_plan_stage_t st[3] = {{.device = 0}, {.device = 1}, {.device = 2}};
    const double t_call[3] = {0.010, 0.010, 0.020}, t_dec[3] = {0.002, 0.002, 0.004};
    for (int i = 0; i < 3; i++) {
        st[i].t_prefill_call = t_call[i] + 0.001; /* a send after each, not compute */
        st[i].xfer_prefill_call = 0.001;
        st[i].t_decode = t_dec[i] + (i < 2 ? 0.0005 : 0.0);
        st[i].xfer_decode = i < 2 ? 0.0005 : 0.0;
    }
    pl_plan_t plan = {.n_stages = 3, .stages = st, .prefill_chunk = 128};
    pl_plan_input_t in = {.devices = d, .n_devices = 3};
    in.job = (pl_sched_job_t){.prompt_max = 1024, .max_new_tokens = 11};
    double busy[3], share[3];
    pl_sched_plan_busy(&in, &plan, NULL, busy);
    /* 8 chunks and 10 decode steps: 0.1 + 0.02 s against 0.2 + 0.04 s */
    const double want_busy[3] = {0.5, 0.5, 1.0};
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(busy[i] - want_busy[i]) < 1e-12, "stage %d: %g", i, busy[i]);
    /* core 0 serves 0.5 + 1 of demand: 2/3 each, where every stage busy gave 1/2 */
    pl_sched_cpu_shares(d, 3, mask, threads, NULL, busy, share);
    const double want[3] = {2.0 / 3, 1, 2.0 / 3};
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(share[i] - want[i]) < 1e-12, "device %d: %g, expected %g", i, share[i],
                  want[i]);
    /* at those shares the 6-layer stage takes 0.03 s a chunk: core 0's 0.01 + 0.02 s of work,
     * as the two alternate (at 1/2 it was charged 0.04 s) */
    cr_expect(fabs(t_call[2] / share[2] - (t_call[0] + t_call[2])) < 1e-12, "%g",
              t_call[2] / share[2]);
    /* times charged at shares of 1/2: the own rates are times x share, the same fractions */
    double half[3] = {0.5, 1, 0.5};
    for (int i = 0; i < 3; i++) {
        st[i].t_prefill_call = t_call[i] / half[i] + 0.001;
        st[i].t_decode = t_dec[i] / half[i] + (i < 2 ? 0.0005 : 0.0);
    }
    pl_sched_plan_busy(&in, &plan, half, busy);
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(busy[i] - want_busy[i]) < 1e-12, "stage %d charged: %g", i, busy[i]);
    /* two stages always busy on one core (a 2-stage pipeline of equal stages): 1/2 each */
    const double full[3] = {1, 1, 1};
    pl_sched_cpu_shares(d, 3, mask, threads, NULL, full, share);
    cr_expect(fabs(share[0] - 0.5) < 1e-12 && fabs(share[2] - 0.5) < 1e-12, "%g %g", share[0],
              share[2]);
}

/* The coordinator's lessons from finished stages: a device whose stage ran far slower than its
 * claimed rates predicted is flagged and planned with the measured rates at once; an honest
 * one is only nudged. White-box: builds the coordinator's tables directly. */
#include "daemon/coord_int.h"

#include <criterion/criterion.h>
#include <math.h>

static pl_coord_t s_c;
static pl_coord_job_t s_j;

/* One node claiming gflops / gbps; a one-stage job whose prefill is compute-bound and whose
 * decode is memory-bound, predicted 0.01 s each per call, measured `slow_c` and `slow_m` times
 * that. */
static void s_setup(double gflops, double gbps, double slow_c, double slow_m)
{
    memset(&s_c, 0, sizeof(s_c));
    memset(&s_j, 0, sizeof(s_j));
    s_c.n_nodes = 1;
    pl_coord_node_t *n = &s_c.nodes[0];
    snprintf(n->name, sizeof(n->name), "liar");
    n->alive = true;
    n->n_dev = 1;
    snprintf(n->dev[0].id, sizeof(n->dev[0].id), "cpu:0");
    n->dev[0].gflops = gflops;
    n->dev[0].mem_gbps = gbps;
    s_j.id = 7;
    s_j.n_stages = 1;
    pl_coord_stage_t *st = &s_j.stages[0];
    st->have_stats = st->have_terms = true;
    st->used_gflops = gflops;
    st->used_gbps = gbps;
    st->terms.pre_flop_s = 0.01;
    st->terms.pre_mem_s = 0.001;
    st->terms.dec_flop_s = 0.001;
    st->terms.dec_mem_s = 0.01;
    st->stats.prefill_calls = 1;
    st->stats.decode_calls = 10;
    st->stats.prefill_compute_s = 0.01 * slow_c;
    st->stats.decode_compute_s = 10 * 0.01 * slow_m;
}

Test(coord_learn, a_claim_far_above_the_measurement_is_flagged_and_replaced)
{
    s_setup(1e9, 4e6, 1e5, 2e4); /* claims 10^9 GFLOP/s and 4 PB/s */
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(d->flagged);
    cr_assert_eq(d->n_obs, 1);
    /* not clamped to the ordinary 50x step: the measured rates themselves */
    cr_expect(fabs(d->eff_gflops - 1e4) < 1e-6 * 1e4, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 200) < 1e-6 * 200, "%g", d->eff_mem_gbps);
}

Test(coord_learn, an_honest_device_is_not_flagged)
{
    s_setup(100, 20, 1.5, 0.8);
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(!d->flagged);
    cr_expect(fabs(d->eff_gflops - 100 / 1.5) < 1e-6, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 20 / 0.8) < 1e-6, "%g", d->eff_mem_gbps);
}

Test(coord_learn, a_slow_memory_claim_alone_is_flagged)
{
    s_setup(100, 1e5, 1.0, 1000); /* compute as claimed, bandwidth 1000x below */
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(d->flagged);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-6, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 100) < 1e-6, "%g", d->eff_mem_gbps);
}

/* Two daemons pinned to one core: the plan charged the device half its rate (share 1/2), the
 * stage took what that predicted in wall time and half of it in CPU time. The lesson is the
 * device's own rate, so a 2-stage job on cores of their own afterwards is planned with it. */
Test(coord_learn, a_stage_on_a_shared_core_does_not_lower_the_rate)
{
    s_setup(100, 20, 1.0, 1.0);
    pl_coord_stage_t *st = &s_j.stages[0];
    st->used_gflops = 50; /* the terms were made at these rates: the times predicted are theirs */
    st->used_gbps = 10;
    st->share = 0.5;
    st->stats.has_overlap = true;
    st->stats.compute_s = st->stats.prefill_compute_s + st->stats.decode_compute_s;
    st->stats.compute_cpu_s = st->stats.compute_s / 2;
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(!d->flagged);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 20) < 1e-9, "%g", d->eff_mem_gbps);
    /* sharing the plan did not know of (no share): the wall time is what the job had */
    s_setup(100, 20, 2.0, 2.0);
    s_j.stages[0].stats.has_overlap = true;
    s_j.stages[0].stats.compute_s = 2 * (0.01 + 0.1);
    s_j.stages[0].stats.compute_cpu_s = 0.01 + 0.1;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(s_c.nodes[0].dev[0].eff_gflops - 50) < 1e-9);
    /* a stage that sped up beyond its CPU time's rate would be a wrong share: CPU time caps it */
    s_setup(100, 20, 1.0, 1.0);
    s_j.stages[0].share = 0.25; /* the plan thought a quarter; it computed half the time */
    s_j.stages[0].stats.has_overlap = true;
    s_j.stages[0].stats.compute_s = 0.01 + 0.1;
    s_j.stages[0].stats.compute_cpu_s = (0.01 + 0.1) / 2;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(s_c.nodes[0].dev[0].eff_gflops - 200) < 1e-9, "%g",
              s_c.nodes[0].dev[0].eff_gflops);
}

/* Lessons form a running mean of the last few: after four jobs at the claimed rate, one job
 * twice as slow moves the rate by a quarter of the difference, not three quarters. */
Test(coord_learn, one_odd_job_moves_a_settled_rate_a_little)
{
    s_setup(100, 20, 1.0, 1.0);
    pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    for (int i = 0; i < 4; i++)
        pl_coord_learn(&s_c, &s_j);
    cr_assert_eq(d->n_obs, 4);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    s_j.stages[0].stats.prefill_compute_s *= 2;
    s_j.stages[0].stats.decode_compute_s *= 2;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_gflops - 87.5) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 17.5) < 1e-9, "%g", d->eff_mem_gbps);
}

/* test_plan_cluster's slowed daemon (issue 8): a device that runs 2.5x slower in wall time by
 * idling (CPU time 0.4 of its compute time) on a CPU of its own (share 1). Its lesson is the
 * wall-time rate: the idling is the device's slowness, not CPUs taken by others. And the fast
 * daemon beside it, which had its CPU the whole time, keeps its rate when the plan charged it
 * share 1; had the plan charged 1/2 (the HELLO once said "2 cores" for a 1-thread daemon), the
 * lesson is still the rate it showed with its whole CPU (CPU time caps it), never twice that. */
Test(coord_learn, a_slowed_device_on_its_own_cpu_learns_its_wall_rate)
{
    s_setup(40, 8, 2.5, 2.5);
    pl_coord_stage_t *st = &s_j.stages[0];
    st->share = 1.0;
    st->stats.has_overlap = true;
    st->stats.compute_s = st->stats.prefill_compute_s + st->stats.decode_compute_s;
    st->stats.compute_cpu_s = 0.4 * st->stats.compute_s;
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(!d->flagged);
    cr_expect(fabs(d->eff_gflops - 40 / 2.5) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 8 / 2.5) < 1e-9, "%g", d->eff_mem_gbps);
    /* the fast one: charged half (used 50, 10 of its own 100, 20), took what that predicted
     * halved, with its CPU all the while: its own rate is what it showed, 100 and 20 */
    s_setup(100, 20, 0.5, 0.5);
    st = &s_j.stages[0];
    st->used_gflops = 50;
    st->used_gbps = 10;
    st->share = 0.5;
    st->stats.has_overlap = true;
    st->stats.compute_s = st->stats.prefill_compute_s + st->stats.decode_compute_s;
    st->stats.compute_cpu_s = st->stats.compute_s;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(s_c.nodes[0].dev[0].eff_gflops - 100) < 1e-9, "%g",
              s_c.nodes[0].dev[0].eff_gflops);
    cr_expect(fabs(s_c.nodes[0].dev[0].eff_mem_gbps - 20) < 1e-9, "%g",
              s_c.nodes[0].dev[0].eff_mem_gbps);
}

/* A decode step on decode's kernels (a device with a decode row rate): its time, the larger of
 * its two terms and part of the other, teaches the bandwidth and the row rate by one factor;
 * prefill's lesson teaches the GFLOP/s and its weight passes alone. */
Test(coord_learn, a_decode_row_rate_moves_with_the_weight_pass)
{
    s_setup(100, 20, 2.0, 1.25);
    pl_coord_stage_t *st = &s_j.stages[0];
    s_c.nodes[0].dev[0].dec_gflops = 80;
    st->used_dec_gflops = 80;
    st->used_pass_gbps = 3;
    st->terms.dec_rows = true;
    st->terms.dec_flop_s = 0.005; /* rows at 80 GFLOP/s */
    st->terms.dec_mem_s = 0.008;  /* the pass: 0.008 + 0.4 * 0.005 = 0.01 s, as s_setup has it */
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(!d->flagged);
    cr_expect(fabs(d->eff_gflops - 100 / 2.0) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_pass_gbps - 3 / 2.0) < 1e-9, "%g", d->eff_pass_gbps);
    cr_expect(fabs(d->eff_mem_gbps - 20 / 1.25) < 1e-9, "%g", d->eff_mem_gbps);
    cr_expect(fabs(d->eff_dec_gflops - 80 / 1.25) < 1e-9, "%g", d->eff_dec_gflops);
    /* bound by its rows, the step still teaches both (a roofline's rule would have charged the
     * GFLOP/s alone) */
    s_setup(100, 20, 1.0, 2.0);
    st = &s_j.stages[0];
    st->used_dec_gflops = 80;
    st->terms.dec_rows = true;
    st->terms.dec_flop_s = 0.0075;
    st->terms.dec_mem_s = 0.00625;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 10) < 1e-9, "%g", d->eff_mem_gbps);
    cr_expect(fabs(d->eff_dec_gflops - 40) < 1e-9, "%g", d->eff_dec_gflops);
    /* a prefill on decode's kernels (short prompts) teaches them too, not the GFLOP/s */
    s_setup(100, 20, 2.0, 2.0);
    st = &s_j.stages[0];
    st->used_dec_gflops = 80;
    st->terms.pre_rows = st->terms.dec_rows = true;
    st->terms.pre_flop_s = 0.01; /* 0.01 + 0.4 * 0.001 */
    st->stats.prefill_compute_s = 2 * 0.0104;
    st->terms.dec_flop_s = 0.0075;
    st->terms.dec_mem_s = 0.00625;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_mem_gbps - 10) < 1e-9, "%g", d->eff_mem_gbps);
    cr_expect(fabs(d->eff_dec_gflops - 40) < 1e-9, "%g", d->eff_dec_gflops);
    /* a device without them keeps 0: no such terms */
    s_setup(100, 20, 1.0, 1.0);
    pl_coord_learn(&s_c, &s_j);
    cr_expect_eq(d->eff_dec_gflops, 0.0);
    cr_expect_eq(d->eff_pass_gbps, 0.0);
    cr_expect_eq(d->eff_attn_gflops, 0.0);
}

/* Prefill's attention keeps a lesson of its own, moved by what the prefill phase's compute
 * taught (its GFLOP/s on sgemm's products, decode's row rate when it ran on decode's kernels) to
 * the power of the attention's share of that phase's predicted compute. */
Test(coord_learn, the_attention_rate_moves_with_the_prefill_phase_s_kernels)
{
    s_setup(100, 20, 2.0, 1.0); /* prefill took twice its prediction, all of it attention */
    pl_coord_stage_t *st = &s_j.stages[0];
    st->used_attn_gflops = 25;
    st->terms.pre_attn_s = st->terms.pre_flop_s;
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_expect(fabs(d->eff_gflops - 50) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_attn_gflops - 12.5) < 1e-9, "%g", d->eff_attn_gflops);
    /* half of it attention: by sqrt(2); none (a short prompt): as it was */
    const double part[2] = {0.5, 0.0}, want[2] = {25 / sqrt(2.0), 25};
    for (int i = 0; i < 2; i++) {
        s_setup(100, 20, 2.0, 1.0);
        st = &s_j.stages[0];
        st->used_attn_gflops = 25;
        st->terms.pre_attn_s = part[i] * st->terms.pre_flop_s;
        pl_coord_learn(&s_c, &s_j);
        cr_expect(fabs(d->eff_gflops - 50) < 1e-9, "%g", d->eff_gflops);
        cr_expect(fabs(d->eff_attn_gflops - want[i]) < 1e-9, "share %g: %g", part[i],
                  d->eff_attn_gflops);
    }
    /* short chunks on decode's kernels: the row rate's lesson moves it, the GFLOP/s stays */
    s_setup(100, 20, 2.0, 2.0);
    st = &s_j.stages[0];
    st->used_dec_gflops = 80;
    st->used_attn_gflops = 25;
    st->terms.pre_attn_s = 0.01;
    st->terms.pre_rows = st->terms.dec_rows = true;
    st->terms.pre_flop_s = 0.01;
    st->stats.prefill_compute_s = 2 * 0.0104;
    st->terms.dec_flop_s = 0.0075;
    st->terms.dec_mem_s = 0.00625;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    cr_expect(fabs(d->eff_dec_gflops - 40) < 1e-9, "%g", d->eff_dec_gflops);
    cr_expect(fabs(d->eff_attn_gflops - 12.5) < 1e-9, "%g", d->eff_attn_gflops);
}

/* On a core shared by two daemons the plan charged the device half its rates: the attention
 * rate learned is the device's own (used / share), moved only by the phase's lesson, so job
 * after job it stays where it was rather than shrinking by a part of the share each time. */
Test(coord_learn, a_shared_core_does_not_shrink_the_attention_rate)
{
    for (int job = 0; job < 4; job++) {
        s_setup(100, 20, 1.0, 1.0); /* every time as predicted */
        pl_coord_stage_t *st = &s_j.stages[0];
        st->used_gflops = 50;
        st->used_gbps = 10;
        st->used_attn_gflops = 10; /* the device's 20, half of it charged */
        st->share = 0.5;
        st->terms.pre_attn_s = 0.01 * st->terms.pre_flop_s; /* a short prompt */
        st->stats.has_overlap = true;
        st->stats.compute_s = st->stats.prefill_compute_s + st->stats.decode_compute_s;
        st->stats.compute_cpu_s = st->stats.compute_s / 2;
        s_c.nodes[0].dev[0].n_obs = job;
        if (job) { /* what the jobs before taught: the device's own rates */
            s_c.nodes[0].dev[0].eff_gflops = 100;
            s_c.nodes[0].dev[0].eff_mem_gbps = 20;
            s_c.nodes[0].dev[0].eff_attn_gflops = 20;
        }
        pl_coord_learn(&s_c, &s_j);
        const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
        cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "job %d: %g", job, d->eff_gflops);
        cr_expect(fabs(d->eff_attn_gflops - 20) < 1e-9, "job %d: %g", job, d->eff_attn_gflops);
    }
}

/* Two stages on one host whose reads the plan cut to half (bw_share 1/2: the host's 40 GB/s
 * against two streams of 40) and that ran at half that again: the host gives 20, not 40, and
 * the device's own rate stays 20 / 1/2 = 40 (moved into it, the lesson would be cut away by the
 * same share at the next plan). A stage the host did not bind learns its own rate, as before. */
Test(coord_learn, a_stage_bound_by_its_hosts_bandwidth_teaches_the_host)
{
    s_setup(100, 40, 1.0, 2.0);
    pl_coord_stage_t *st = &s_j.stages[0];
    st->used_gbps = 20; /* its 40 x the host's share 1/2 */
    st->bw_share = 0.5;
    st->used_host_gbps = 40;
    pl_coord_learn(&s_c, &s_j);
    const pl_coord_dev_t *d = &s_c.nodes[0].dev[0];
    cr_assert(!d->flagged);
    cr_expect(fabs(d->eff_host_gbps - 20) < 1e-9, "host %g", d->eff_host_gbps);
    cr_expect(fabs(d->eff_mem_gbps - 40) < 1e-9, "own %g", d->eff_mem_gbps);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
    /* the same stage alone on its host: its own rate learns, the host's figure stays */
    s_setup(100, 40, 1.0, 2.0);
    s_j.stages[0].used_host_gbps = 50;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_host_gbps - 50) < 1e-9, "host %g", d->eff_host_gbps);
    cr_expect(fabs(d->eff_mem_gbps - 20) < 1e-9, "own %g", d->eff_mem_gbps);
    /* on a shared core too (CPU share 1/2 and the host's 1/2): each share taken out once */
    s_setup(100, 40, 1.0, 1.0);
    st->used_gflops = 50;
    st->used_gbps = 10; /* 40 x 1/2 x 1/2 */
    st->share = 0.5;
    st->bw_share = 0.5;
    st->used_host_gbps = 40;
    st->stats.has_overlap = true; /* it had its CPU half the time, as charged */
    st->stats.compute_s = st->stats.prefill_compute_s + st->stats.decode_compute_s;
    st->stats.compute_cpu_s = st->stats.compute_s / 2;
    pl_coord_learn(&s_c, &s_j);
    cr_expect(fabs(d->eff_mem_gbps - 40) < 1e-9, "own %g", d->eff_mem_gbps);
    cr_expect(fabs(d->eff_host_gbps - 40) < 1e-9, "host %g", d->eff_host_gbps);
    cr_expect(fabs(d->eff_gflops - 100) < 1e-9, "%g", d->eff_gflops);
}

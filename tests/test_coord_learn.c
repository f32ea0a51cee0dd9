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

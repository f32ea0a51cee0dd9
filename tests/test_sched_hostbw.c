/* A host's shared read bandwidth: the CPU stages of daemons on one host that stream at once
 * split the host's all-core figure (pl_sched_host_bw_shares), worked out by hand; what a plan's
 * decode terms charge with those shares; identical hosts pool the figure as the other rates. */
#include "sched_util.h"
#include "scheduler/inputs.h"
#include "scheduler/terms.h"

#include <criterion/criterion.h>
#include <math.h>

TestSuite(sched_hostbw);

/* A CPU at this machine's figures: 37 GB/s on one core, 50 GB/s on all of them. */
static pl_sched_device_t s_cpu(const char *host)
{
    pl_sched_device_t d = dev("epyc", host, 40, 37, 64);
    d.dec_gflops = 20;
    d.host_gbps = 50;
    return d;
}

static void s_expect(const double *got, const double *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        cr_expect(fabs(got[i] - want[i]) < 1e-12, "%s: device %d %.15g, expected %.15g", what, i,
                  got[i], want[i]);
}

Test(sched_hostbw, two_stages_on_one_host_share_it_and_two_hosts_do_not)
{
    pl_sched_device_t d[4] = {s_cpu("h"), s_cpu("h"), s_cpu("g"), s_cpu("h")};
    snprintf(d[3].backend, sizeof(d[3].backend), "cuda"); /* a GPU reads its own memory */
    d[3].mem_gbps = 3000;
    double share[4];
    /* a and b stream on h at once: 37 + 37 against 50, each slowed alike; c alone on g */
    pl_sched_host_bw_shares(d, 4, NULL, NULL, share);
    s_expect(share, (double[]){50.0 / 74, 50.0 / 74, 1, 1}, 4, "all");
    /* a 2-stage plan over two hosts: each has its host to itself */
    bool two_hosts[4] = {true, false, true, false};
    pl_sched_host_bw_shares(d, 4, two_hosts, NULL, share);
    s_expect(share, (double[]){1, 1, 1, 1}, 4, "two hosts");
    /* a lone stage: one core's 37 is within the host's 50 */
    bool lone[4] = {true, false, false, false};
    pl_sched_host_bw_shares(d, 4, lone, NULL, share);
    s_expect(share, (double[]){1, 1, 1, 1}, 4, "lone");
    /* the host's figure is the best of its devices' (one read while another daemon calibrated
     * is low); a device that did not measure it (0) adds its stream all the same */
    d[1].host_gbps = 40;
    pl_sched_host_bw_shares(d, 4, NULL, NULL, share);
    s_expect(share, (double[]){50.0 / 74, 50.0 / 74, 1, 1}, 4, "best of the host's");
    d[0].host_gbps = d[1].host_gbps = 0; /* nobody measured h: no limit is assumed */
    pl_sched_host_bw_shares(d, 4, NULL, NULL, share);
    s_expect(share, (double[]){1, 1, 1, 1}, 4, "not measured");
}

/* Streams that run part of the time want that part of their rate: a stage idle half the time
 * (waiting for the pipeline's slowest stage) leaves the other more of the host. */
Test(sched_hostbw, streams_share_the_host_by_their_busy_fractions)
{
    pl_sched_device_t d[2] = {s_cpu("h"), s_cpu("h")};
    double share[2];
    pl_sched_host_bw_shares(d, 2, NULL, (double[]){1.0, 0.5}, share);
    s_expect(share, (double[]){50.0 / 55.5, 50.0 / 55.5}, 2, "busy 1 and 1/2");
    /* busy little enough that the sum is within the host: no cut */
    pl_sched_host_bw_shares(d, 2, NULL, (double[]){1.0, 0.25}, share);
    s_expect(share, (double[]){1, 1}, 2, "busy 1 and 1/4");
}

/* The bench's 3 daemons on 2 cores (node0 and node2 on CPU 0): their reads at their CPU shares
 * (1/2, 1, 1/2: 18.5 + 37 + 18.5 = 74 GB/s) against the host's 50; by the busy fractions of a
 * 3+3+6 split (1/2, 1/2, 1: CPU shares 2/3, 1, 2/3) 24.67 / 2 + 37 / 2 + 24.67 = 55.5. */
Test(sched_hostbw, three_daemons_on_two_cores)
{
    pl_sched_device_t d[3] = {s_cpu("h"), s_cpu("h"), s_cpu("h")};
    uint64_t mask[3] = {1, 2, 1};
    int threads[3] = {1, 1, 1};
    const double *busy_of[2] = {NULL, (double[]){0.5, 0.5, 1.0}};
    const double want[2] = {50.0 / 74, 50.0 / 55.5};
    for (int k = 0; k < 2; k++) {
        pl_sched_device_t at[3] = {d[0], d[1], d[2]};
        double cpu[3], share[3];
        pl_sched_cpu_shares(at, 3, mask, threads, NULL, busy_of[k], cpu);
        for (int i = 0; i < 3; i++)
            at[i].mem_gbps *= cpu[i];
        pl_sched_host_bw_shares(at, 3, NULL, busy_of[k], share);
        s_expect(share, (double[]){want[k], want[k], want[k]}, 3, k ? "busy" : "all busy");
    }
}

/* Decode steps of a 2-stage plan: on one host each stage's read term is its bytes at
 * 37 x 50/74 GB/s, on two hosts at 37. */
Test(sched_hostbw, a_plans_decode_reads_at_the_shared_rate)
{
    pl_sched_model_t m = bench_model();
    for (int k = 0; k < 2; k++) {
        pl_sched_device_t d[2] = {s_cpu("h"), s_cpu(k ? "g" : "h")};
        double share[2];
        pl_sched_host_bw_shares(d, 2, NULL, NULL, share);
        for (int i = 0; i < 2; i++)
            d[i].mem_gbps *= share[i];
        pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 2};
        in.job = (pl_sched_job_t){
            .n_seqs = 12, .prompt_avg = 16, .prompt_max = 16, .max_new_tokens = 64};
        in.options.field_mask = PL_PLAN_OPT_ALLOW_SKIP | PL_PLAN_OPT_ORDER;
        in.options.allow_skip = false;
        in.options.order = PL_SCHED_ORDER_FIXED;
        pl_plan_t *p = NULL;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(p->n_stages, 2);
        for (int s = 0; s < 2; s++) {
            pl_sched_terms_t t;
            cr_assert_eq(pl_sched_terms(&in, p, s, &t), PL_OK);
            double gbps = k ? 37.0 : 37.0 * 50 / 74;
            double want = p->stages[s].decode_read_bytes / (gbps * 1e9);
            cr_expect(fabs(t.dec_mem_s - want) < 1e-9 * want, "%s stage %d: %g s, expected %g",
                      k ? "two hosts" : "one host", s, t.dec_mem_s, want);
        }
        pl_plan_destroy(&p);
    }
}

/* The host's figure is a rate like the others: identical devices within the band pool it, a
 * device without one (0) keeps none, and a plan checks it. */
Test(sched_hostbw, identical_hosts_pool_the_figure_and_bad_ones_are_refused)
{
    pl_sched_device_t d[3] = {s_cpu("h"), s_cpu("g"), s_cpu("f")};
    d[0].host_gbps = 48;
    d[1].host_gbps = 52;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(d[i].host_gbps - 50) < 1e-12, "device %d: %g", i, d[i].host_gbps);
    d[1].host_gbps = 0;
    pl_sched_rates_equalize(d, NULL, NULL, 3, NULL, PL_SCHED_RATE_BAND);
    cr_expect(d[1].host_gbps == 0);
    pl_sched_model_t m = bench_model();
    const double bad[] = {-1, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        d[0].host_gbps = bad[i];
        pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 1};
        in.job =
            (pl_sched_job_t){.n_seqs = 1, .prompt_avg = 8, .prompt_max = 8, .max_new_tokens = 4};
        pl_plan_t *p = NULL;
        cr_expect_eq(pl_plan(&in, &p), PL_ERR_RANGE, "%g", bad[i]);
        cr_expect(strstr(pl_error_msg(), "devices[0].host_gbps") != NULL, "%s", pl_error_msg());
        pl_plan_destroy(&p);
    }
}

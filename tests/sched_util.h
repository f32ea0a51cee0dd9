/* What the scheduler suites share: a device with given rates on a host, and the model shapes the
 * planner is tried on (hand-computed values in the suites depend on these exact shapes). */
#ifndef PL_TESTS_SCHED_UTIL_H
#define PL_TESTS_SCHED_UTIL_H

#include "scheduler/plan.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A CPU device `name` on node "node-NAME" of `host`. */
static inline pl_sched_device_t dev(const char *name, const char *host, double gflops,
                                    double gbps, double mem_gib)
{
    pl_sched_device_t d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", name);
    snprintf(d.node, sizeof(d.node), "node-%s", name);
    snprintf(d.host, sizeof(d.host), "%s", host);
    snprintf(d.backend, sizeof(d.backend), "cpu");
    d.gflops = gflops;
    d.mem_gbps = gbps;
    d.mem_bytes = (uint64_t)(mem_gib * GIB);
    return d;
}

/* A CPU device `name` alone on host "host-NAME" (links to every other device are the network's). */
static inline pl_sched_device_t dev_alone(const char *name, double gflops, double gbps,
                                          double mem_gib)
{
    pl_sched_device_t d = dev(name, "", gflops, gbps, mem_gib);
    snprintf(d.host, sizeof(d.host), "host-%s", name);
    return d;
}

/* Plan with every device used in the given order (no order search, no device left out): the
 * hand-worked suites know each stage's device. */
static inline void plan_fixed_order(pl_plan_input_t *in)
{
    in->options.field_mask |= PL_PLAN_OPT_ALLOW_SKIP | PL_PLAN_OPT_ORDER;
    in->options.allow_skip = false;
    in->options.order = PL_SCHED_ORDER_FIXED;
}

/* Links within a host free (1 TB/s, no latency): only the devices' own terms count. */
static inline void plan_free_links(pl_plan_input_t *in)
{
    in->options.field_mask |= PL_PLAN_OPT_SAME_HOST;
    in->options.same_host = (pl_sched_link_t){1e12, 0.0};
}

/* pl_plan(in), which must succeed. */
static inline pl_plan_t *plan_ok(const pl_plan_input_t *in)
{
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(in, &p), PL_OK, "%s", pl_error_msg());
    return p;
}

/* a and b equal to within rounding (relative 1e-9 of b) */
static inline bool s_near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b);
}

/* bench_pipeline's model: 12 equal layers of hidden 1024, a small vocabulary, bf16 weights. */
static inline pl_sched_model_t bench_model(void)
{
    return (pl_sched_model_t){.n_layers = 12,
                              .hidden = 1024,
                              .intermediate = 2816,
                              .n_heads = 16,
                              .n_kv_heads = 8,
                              .head_dim = 64,
                              .vocab = 8192,
                              .weight_bytes = 2,
                              .kv_bytes = 4,
                              .act_bytes = 4};
}

/* A 1B-parameter-ish model whose layers are ~0.11 GiB each in bf16. */
static inline pl_sched_model_t mid_model(int layers)
{
    return (pl_sched_model_t){.n_layers = layers,
                              .hidden = 2048,
                              .intermediate = 8192,
                              .n_heads = 32,
                              .n_kv_heads = 8,
                              .head_dim = 64,
                              .vocab = 32000,
                              .weight_bytes = 2,
                              .kv_bytes = 2,
                              .act_bytes = 4};
}

#endif

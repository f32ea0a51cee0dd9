/* Whole plans: device selection, memory limits, infeasibility messages, microbatches, re-planning,
 * predictions, and the table / JSON forms. */
#include "scheduler/catalog.h"
#include "scheduler/plan.h"
#include "tests/sched_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_plan_input_t input(const pl_sched_model_t *m, pl_sched_device_t *d, int n)
{
    pl_plan_input_t in = {.model = m, .devices = d, .n_devices = n};
    in.job =
        (pl_sched_job_t){.n_seqs = 8, .prompt_avg = 128, .prompt_max = 256, .max_new_tokens = 64};
    return in;
}

/* Stages are contiguous, cover every layer, fit their devices, and use no device twice. */
static void check_plan(const pl_plan_t *p, int layers)
{
    int next = 0;
    cr_assert(p->n_stages >= 1);
    for (int i = 0; i < p->n_stages; i++) {
        const pl_plan_stage_t *s = &p->stages[i];
        cr_assert_eq(s->first_layer, next, "stage %d starts at %d", i, s->first_layer);
        cr_assert_eq(s->n_layers, s->last_layer - s->first_layer + 1);
        cr_assert(s->n_layers >= 1);
        cr_assert(s->mem_used <= s->mem_avail, "stage %d over memory", i);
        cr_assert_eq(s->has_embed, i == 0);
        cr_assert_eq(s->has_head, i == p->n_stages - 1);
        cr_assert_eq(s->next_stage, i + 1 < p->n_stages ? i + 1 : 0);
        for (int k = 0; k < i; k++)
            cr_assert_neq(p->stages[k].device, s->device);
        next = s->last_layer + 1;
    }
    cr_assert_eq(next, layers);
}

static bool uses(const pl_plan_t *p, int device)
{
    for (int i = 0; i < p->n_stages; i++)
        if (p->stages[i].device == device)
            return true;
    return false;
}

Test(sched_output, slow_cpu_behind_fast_gpus_is_left_out)
{
    /* the model (~2.1 GiB) needs both GPUs; the CPU could add memory but only slows it down */
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("gpu0", "h", 100000, 1000, 1.5), dev("cpu", "h", 1000, 50, 64),
                              dev("gpu1", "h", 100000, 1000, 1.5)};
    pl_plan_input_t in = input(&m, d, 3);
    for (int order = 0; order < 2; order++) {
        in.options.field_mask = PL_PLAN_OPT_ORDER;
        in.options.order = (pl_sched_order_t)order;
        pl_plan_t *p = NULL;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        check_plan(p, 16);
        cr_assert(!uses(p, 1), "the CPU slows the pipeline down but was used");
        cr_assert_eq(p->n_left_out, 1);
        cr_assert_eq(p->left_out[0].device, 1);
        cr_assert_str_eq(p->left_out[0].node, "node-cpu");
        cr_assert_str_eq(p->search, order ? "fixed" : "exact");
        double best = p->bottleneck;
        pl_plan_destroy(&p);
        /* forced to use every device, the same order is slower */
        in.options.field_mask |= PL_PLAN_OPT_ALLOW_SKIP;
        in.options.allow_skip = false;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        check_plan(p, 16);
        cr_assert_eq(p->n_stages, 3);
        cr_assert(p->bottleneck > best);
        pl_plan_destroy(&p);
    }
}

Test(sched_output, cpu_used_when_gpus_lack_memory)
{
    pl_sched_model_t m = mid_model(16); /* ~2.1 GiB */
    pl_sched_device_t d[3] = {dev("gpu0", "h", 100000, 1000, 0.9),
                              dev("gpu1", "h", 100000, 1000, 0.9), dev("cpu", "h", 1000, 50, 1.2)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    cr_assert_eq(p->n_stages, 3);
    cr_assert(uses(p, 2));
    cr_assert_eq(p->single.device, -1); /* no single device fits */
    cr_assert_eq(p->speedup_single, 0.0);
    pl_plan_destroy(&p);
}

Test(sched_output, never_slower_than_one_device)
{
    /* the GPUs hold a few layers each; the CPU holds the model alone. With one microbatch per
     * stage the CPU stage would read its weights three times per step: one device is faster */
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("gpu0", "h", 100000, 1000, 0.6),
                              dev("gpu1", "h", 100000, 1000, 0.6), dev("cpu", "h", 1000, 50, 64)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    cr_assert_str_eq(p->search, "single");
    cr_assert_eq(p->n_stages, 1);
    cr_assert_eq(p->stages[0].device, 2);
    cr_assert_eq(p->single.device, 2);
    cr_assert_float_eq(p->speedup_single, 1.0, 1e-12);
    cr_assert_eq(p->n_left_out, 2);
    pl_plan_destroy(&p);
}

Test(sched_output, identical_devices_beat_one)
{
    /* compute-bound: a long prompt and many sequences; two equal devices hold the model alone */
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[2] = {dev("a", "h", 20000, 2000, 24), dev("b", "h", 20000, 2000, 24)};
    pl_plan_input_t in = input(&m, d, 2);
    in.job = (pl_sched_job_t){
        .n_seqs = 32, .prompt_avg = 1024, .prompt_max = 1024, .max_new_tokens = 16};
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    cr_assert_eq(p->n_stages, 2);
    cr_assert(abs(p->stages[0].n_layers - p->stages[1].n_layers) <= 2);
    cr_assert(p->speedup_single > 1.5, "speed-up %.3f", p->speedup_single);
    cr_assert(p->speedup_even >= 1.0 - 1e-12, "speed-up over even %.3f", p->speedup_even);
    cr_assert(p->microbatches >= 2);
    pl_plan_destroy(&p);
}

Test(sched_output, infeasible_says_how_much_is_missing)
{
    pl_sched_model_t m = mid_model(16); /* ~2 GiB with embedding and head */
    pl_sched_device_t d[3] = {dev("a", "h", 1000, 100, 0.5), dev("b", "h", 1000, 100, 0.5),
                              dev("c", "h2", 1000, 100, 0.5)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INFEASIBLE);
    cr_assert_null(p);
    const char *msg = pl_error_msg();
    cr_assert(strstr(msg, "model needs") && strstr(msg, "the 3 devices have 1.50 GiB usable") &&
                  strstr(msg, "GiB missing") && strstr(msg, "largest shortfall: layers"),
              "message: %s", msg);
    /* a single layer bigger than any device */
    d[0] = dev("a", "h", 1000, 100, 0.05);
    in.n_devices = 1;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "the 1 device has 0.05 GiB usable"), "message: %s",
              pl_error_msg());
    cr_assert(strstr(pl_error_msg(), "layer 15 alone needs") &&
                  strstr(pl_error_msg(), "with the LM head"),
              "message: %s", pl_error_msg());
    cr_assert(strstr(pl_error_msg(), "node-a"), "message: %s", pl_error_msg());
    /* fits only without the constraint */
    pl_sched_device_t e[2] = {dev("a", "h", 1000, 100, 1.5), dev("b", "h", 1000, 100, 1.5)};
    in = input(&m, e, 2);
    in.options.field_mask = PL_PLAN_OPT_MAX_STAGES;
    in.options.max_stages = 1;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "constraints"), "message: %s", pl_error_msg());
    in.options.max_stages = 2;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    pl_plan_destroy(&p);
}

Test(sched_output, kv_cache_limits_resident_sequences)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[2] = {dev("a", "h", 100000, 1000, 3), dev("b", "h", 100000, 1000, 3)};
    pl_plan_input_t in = input(&m, d, 2);
    /* 4096 positions x 32 KiB per token = 128 MiB of KV per sequence */
    in.job = (pl_sched_job_t){
        .n_seqs = 64, .prompt_avg = 1024, .prompt_max = 2048, .max_new_tokens = 2048};
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    cr_assert(p->resident_seqs >= 1 && p->resident_seqs < 64, "resident %d", p->resident_seqs);
    cr_assert_eq(p->waves, (64 + p->resident_seqs - 1) / p->resident_seqs);
    cr_assert_eq(p->ctx, 4096);
    uint64_t kv = 0;
    for (int i = 0; i < p->n_stages; i++)
        kv += p->stages[i].mem_kv;
    cr_assert_float_eq((double)kv, p->resident_seqs * 4096.0 * 16 * 2 * 512 * 2, 16.0);
    pl_plan_destroy(&p);
}

Test(sched_output, microbatches_requested_and_chosen)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("a", "h", 50000, 900, 8), dev("b", "h", 50000, 900, 8),
                              dev("c", "h", 50000, 900, 8)};
    pl_plan_input_t in = input(&m, d, 3);
    in.job.n_seqs = 12;
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    cr_assert(p->microbatches >= p->n_stages, "%d microbatches, %d stages", p->microbatches,
              p->n_stages);
    cr_assert(p->microbatches <= 2 * p->n_stages);
    cr_assert_eq(p->microbatch_size, (12 + p->microbatches - 1) / p->microbatches);
    cr_assert_eq(p->max_tokens, p->microbatch_size * 256);
    pl_plan_destroy(&p);
    in.job.microbatches = 5;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(p->microbatches, 5);
    cr_assert_eq(p->microbatch_size, 3);
    pl_plan_destroy(&p);
    /* fewer sequences than stages: the pipeline cannot be full, the bubble shows it */
    in.job.microbatches = 0;
    in.job.n_seqs = 1;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(p->microbatches, 1);
    if (p->n_stages > 1)
        cr_assert(p->bubble_decode > 0.3, "bubble %.3f", p->bubble_decode);
    pl_plan_destroy(&p);
}

Test(sched_output, predictions_follow_the_formulas)
{
    pl_sched_model_t m = mid_model(24);
    pl_sched_device_t d[4] = {dev("a", "h1", 80000, 900, 4), dev("b", "h1", 30000, 500, 4),
                              dev("c", "h2", 60000, 700, 4), dev("d", "h2", 5000, 100, 64)};
    pl_plan_input_t in = input(&m, d, 4);
    in.job.n_seqs = 20;
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 24);
    double max_d = 0, sum_d = 0, max_p = 0, sum_p = 0, worst = 0;
    int worst_i = 0;
    for (int i = 0; i < p->n_stages; i++) {
        const pl_plan_stage_t *s = &p->stages[i];
        max_d = fmax(max_d, s->t_decode);
        max_p = fmax(max_p, s->t_prefill);
        sum_d += s->t_decode;
        sum_p += s->t_prefill;
        if (s->cost > worst) {
            worst = s->cost;
            worst_i = i;
        }
        /* job objective: one prefill and N - 1 decode steps */
        cr_assert(fabs(s->cost - (s->t_prefill + 63 * s->t_decode)) <= 1e-9 * s->cost);
    }
    int M = p->microbatches;
    double period = fmax(M * max_d, sum_d + p->ring_s);
    double pre = sum_p + (M - 1) * max_p;
    cr_assert_float_eq(p->bottleneck, worst, 1e-15);
    cr_assert_eq(p->bottleneck_stage, worst_i);
    cr_assert(fabs(p->decode_period - period) <= 1e-12 * period);
    cr_assert(fabs(p->prefill_time - pre) <= 1e-12 * pre);
    cr_assert(fabs(p->decode_tok_s - p->resident_seqs / period) <= 1e-9 * p->decode_tok_s);
    cr_assert(fabs(p->prefill_tok_s - p->resident_seqs * 128.0 / pre) <= 1e-9 * p->prefill_tok_s);
    cr_assert(fabs(p->bubble_decode - (1 - M * max_d / period)) <= 1e-12);
    cr_assert(fabs(p->wave_time - (pre + 63 * period)) <= 1e-12 * p->wave_time);
    cr_assert(fabs(p->job_time - p->waves * p->wave_time) <= 1e-12 * p->job_time);
    if (p->speedup_even > 0)
        cr_assert(fabs(p->speedup_even - p->even_job_time / p->job_time) <= 1e-12);
    cr_assert(p->speedup_single > 0);
    cr_assert(fabs(p->speedup_single - p->single_job_time / p->job_time) <= 1e-12);
    /* the last stage's link is the ring back to stage 0 */
    const pl_plan_stage_t *last = &p->stages[p->n_stages - 1];
    if (p->n_stages > 1)
        cr_assert(p->ring_s >= last->link.latency_s);
    pl_plan_destroy(&p);
}

Test(sched_output, objective_decode_minimises_decode_time)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[2] = {dev("a", "h", 30000, 900, 24), dev("b", "h2", 10000, 300, 24)};
    pl_plan_input_t in = input(&m, d, 2);
    in.options.field_mask = PL_PLAN_OPT_OBJECTIVE;
    in.options.objective = PL_SCHED_OBJ_DECODE;
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    for (int i = 0; i < p->n_stages; i++)
        cr_assert_float_eq(p->stages[i].cost, p->stages[i].t_decode, 1e-15);
    cr_assert_eq(p->objective, PL_SCHED_OBJ_DECODE);
    pl_plan_destroy(&p);
}

Test(sched_output, deterministic)
{
    pl_sched_model_t m = mid_model(20);
    pl_sched_device_t d[5] = {dev("a", "h1", 50000, 900, 2), dev("b", "h1", 50000, 900, 2),
                              dev("c", "h2", 50000, 900, 2), dev("d", "h2", 50000, 900, 2),
                              dev("e", "h3", 50000, 900, 2)};
    pl_plan_input_t in = input(&m, d, 5);
    pl_plan_t *p = NULL, *q = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_plan(&in, &q), PL_OK);
    cr_assert_eq(p->n_stages, q->n_stages);
    cr_assert_eq(memcmp(p->stages, q->stages, sizeof(*p->stages) * (size_t)p->n_stages), 0);
    cr_assert_eq(p->bottleneck, q->bottleneck);
    cr_assert_eq(p->job_time, q->job_time);
    /* identical devices: ties go to the lowest index first */
    cr_assert_eq(p->stages[0].device, 0);
    pl_plan_destroy(&p);
    pl_plan_destroy(&q);
}

Test(sched_output, replan_after_loss_and_join)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("a", "h1", 50000, 900, 1.2), dev("b", "h1", 50000, 900, 1.2),
                              dev("c", "h2", 50000, 900, 1.2)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    int lost = p->stages[0].device;
    pl_plan_destroy(&p);
    bool alive[3] = {true, true, true};
    alive[lost] = false;
    cr_assert_eq(pl_replan(&in, alive, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 16);
    cr_assert(!uses(p, lost));
    for (int i = 0; i < p->n_stages; i++) /* indices still refer to the input */
        cr_assert_str_eq(p->stages[i].device_name, d[p->stages[i].device].name);
    pl_plan_destroy(&p);
    /* only one left: it cannot hold the model */
    bool one[3] = {true, false, false};
    cr_assert_eq(pl_replan(&in, one, &p), PL_ERR_INFEASIBLE);
    bool none[3] = {false, false, false};
    cr_assert_eq(pl_replan(&in, none, &p), PL_ERR_NO_DEVICE);
    cr_assert_eq(pl_replan(&in, NULL, &p), PL_ERR_INVALID);
    cr_assert_null(p);
    /* the node rejoins: back to the full plan */
    pl_plan_t *full = NULL;
    cr_assert_eq(pl_replan(&in, alive, &p), PL_OK);
    alive[lost] = true;
    pl_plan_destroy(&p);
    cr_assert_eq(pl_replan(&in, alive, &p), PL_OK);
    cr_assert_eq(pl_plan(&in, &full), PL_OK);
    cr_assert_eq(memcmp(p->stages, full->stages, sizeof(*p->stages) * (size_t)p->n_stages), 0);
    pl_plan_destroy(&p);
    pl_plan_destroy(&full);
}

Test(sched_output, heuristic_order_groups_hosts)
{
    pl_sched_model_t m = mid_model(8);
    pl_sched_device_t d[5] = {dev("slow-b", "hb", 1000, 100, 8), dev("fast-a", "ha", 90000, 900, 8),
                              dev("fast-b", "hb", 9000, 400, 8), dev("mid-a", "ha", 40000, 600, 8),
                              dev("solo", "hc", 500, 50, 8)};
    pl_plan_input_t in = input(&m, d, 5);
    pl_sched_eval_t *ev = NULL;
    cr_assert_eq(pl_sched_eval_new(&in, 8, 8, &ev), PL_OK);
    int devs[5] = {0, 1, 2, 3, 4}, order[5];
    pl_sched_heuristic_order(ev, devs, 5, order);
    int want[5] = {1, 3, 2, 0, 4}; /* host a (fastest), then b, then c; fastest first within */
    for (int i = 0; i < 5; i++)
        cr_assert_eq(order[i], want[i], "position %d: %d", i, order[i]);
    pl_sched_eval_destroy(&ev);
}

Test(sched_output, hypothetical_cluster_from_catalogue)
{
    pl_sched_model_t m = {.n_layers = 80,
                          .hidden = 8192,
                          .intermediate = 28672,
                          .n_heads = 64,
                          .n_kv_heads = 8,
                          .head_dim = 128,
                          .vocab = 128256,
                          .weight_bytes = 2,
                          .kv_bytes = 2,
                          .act_bytes = 4};
    pl_sched_device_t d[7];
    int n = 0;
    cr_assert_eq(pl_sched_catalog_device("H100 SXM", 0.6, 0.8, "a", "ha", &d[n++]), PL_OK);
    cr_assert_eq(pl_sched_catalog_device("h100", 0.6, 0.8, "a", "ha", &d[n++]), PL_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pl_sched_catalog_device("rtx 4090", 0.6, 0.8, "b", "hb", &d[n++]), PL_OK);
    cr_assert_eq(pl_sched_catalog_device("epyc 9654", 0.5, 0.7, "c", "hb", &d[n++]), PL_OK);
    pl_plan_input_t in = input(&m, d, n);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    check_plan(p, 80);
    cr_assert_str_eq(p->search, "exact");
    /* 70B in bf16 fits no single GPU: the baseline is the CPU, which the pipeline beats */
    cr_assert_eq(p->single.device, 6);
    cr_assert(p->speedup_single > 2.0, "%.2f", p->speedup_single);
    pl_plan_destroy(&p);
}

Test(sched_output, json_has_every_number)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("gpu0", "h", 100000, 1000, 1.5), dev("cpu", "h", 1000, 50, 64),
                              dev("gpu1", "h2", 100000, 1000, 1.5)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    json_t *j = pl_plan_to_json(p);
    cr_assert_not_null(j);
    json_t *stages = json_object_get(j, "stages");
    cr_assert_eq(json_array_size(stages), (size_t)p->n_stages);
    for (int i = 0; i < p->n_stages; i++) {
        json_t *s = json_array_get(stages, (size_t)i);
        cr_assert_eq(json_integer_value(json_object_get(s, "device")), p->stages[i].device);
        cr_assert_eq(json_integer_value(json_object_get(s, "first_layer")),
                     p->stages[i].first_layer);
        cr_assert_eq(json_integer_value(json_object_get(s, "last_layer")), p->stages[i].last_layer);
        cr_assert_eq(json_integer_value(json_object_get(s, "mem_used")),
                     (json_int_t)p->stages[i].mem_used);
        cr_assert_eq(json_real_value(json_object_get(s, "decode_s")), p->stages[i].t_decode);
        cr_assert_str_eq(json_string_value(json_object_get(s, "node")), p->stages[i].node);
        cr_assert(json_is_object(json_object_get(s, "link")));
        cr_assert(json_is_boolean(json_object_get(json_object_get(s, "link"), "same_host")));
    }
    cr_assert_eq(json_real_value(json_object_get(j, "decode_tok_s")), p->decode_tok_s);
    cr_assert_eq(json_real_value(json_object_get(j, "bubble_decode")), p->bubble_decode);
    cr_assert_eq(json_integer_value(json_object_get(j, "microbatches")), p->microbatches);
    cr_assert_eq(json_real_value(json_object_get(json_object_get(j, "bottleneck"), "cost_s")),
                 p->bottleneck);
    cr_assert_eq(json_array_size(json_object_get(j, "left_out")), (size_t)p->n_left_out);
    json_t *base = json_object_get(j, "baselines");
    cr_assert(json_is_object(base));
    cr_assert(json_is_real(json_object_get(base, "speedup_single")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "objective")), "job");
    char *text = json_dumps(j, 0);
    cr_assert(text && strlen(text) > 100);
    free(text);
    json_decref(j);
    cr_assert_null(pl_plan_to_json(NULL));
    pl_plan_destroy(&p);
}

Test(sched_output, explain_table)
{
    pl_sched_model_t m = mid_model(16);
    pl_sched_device_t d[3] = {dev("gpu0", "h", 100000, 1000, 1.5), dev("cpu", "h", 1000, 50, 64),
                              dev("gpu1", "h2", 100000, 1000, 1.5)};
    pl_plan_input_t in = input(&m, d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    char buf[8192];
    cr_assert_eq(pl_plan_explain(p, buf, sizeof(buf)), PL_OK, "%s", pl_error_msg());
    const char *want[] = {"stage",         "node-gpu0",  "bottleneck: stage", "tokens/s",
                          "bubble",        "left out",   "node-cpu",          "over an even split",
                          "single device", "cross host", "ring to stage 0"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(buf, want[i]), "'%s' missing from:\n%s", want[i], buf);
    /* the stream form prints the same text */
    char mem[8192] = {0};
    FILE *f = fmemopen(mem, sizeof(mem), "w");
    cr_assert_not_null(f);
    pl_plan_print(p, f);
    fclose(f);
    cr_assert_str_eq(mem, buf);
    char small[64];
    cr_assert_eq(pl_plan_explain(p, small, sizeof(small)), PL_ERR_RANGE);
    cr_assert_eq(strlen(small), sizeof(small) - 1);
    cr_assert_eq(pl_plan_explain(p, small, 0), PL_ERR_INVALID);
    cr_assert_eq(pl_plan_explain(NULL, buf, sizeof(buf)), PL_ERR_INVALID);
    pl_plan_destroy(&p);
}

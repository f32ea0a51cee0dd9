/* The planner as the system calls it: inputs from a model config and a typed job spec, the
 * placement modes (optimal, auto, even), roofline terms, what-if clusters and the full plan JSON.
 * References are computed here by hand (layer counts, sizes, the roofline formula). */
#include "sched_util.h"
#include "scheduler/inputs.h"
#include "scheduler/modes.h"
#include "scheduler/terms.h"
#include "scheduler/whatif.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each device on a host of its own. */
static pl_sched_device_t s_dev(const char *name, double gflops, double gbps, double mem_gib)
{
    return dev_alone(name, gflops, gbps, mem_gib);
}

static const pl_sched_model_t s_model = {.n_layers = 10,
                                         .hidden = 1024,
                                         .intermediate = 4096,
                                         .n_heads = 16,
                                         .n_kv_heads = 4,
                                         .head_dim = 64,
                                         .vocab = 8000,
                                         .weight_bytes = 2,
                                         .kv_bytes = 2,
                                         .act_bytes = 4};

static pl_plan_input_t s_input(pl_sched_device_t *d, int n)
{
    pl_plan_input_t in = {.model = &s_model, .devices = d, .n_devices = n};
    in.job = (pl_sched_job_t){.n_seqs = 6, .prompt_avg = 64, .prompt_max = 64, .max_new_tokens = 8};
    return in;
}

static pl_model_config_t s_cfg(void)
{
    return (pl_model_config_t){.hidden = 256, .intermediate = 688, .n_layers = 4, .n_heads = 8,
                               .n_kv_heads = 2, .head_dim = 32, .vocab = 512, .max_pos = 100,
                               .tie_embeddings = true, .dtype = PL_DT_F16};
}

Test(sched_modes, model_from_config_takes_the_dtype_unless_a_cpu_plans)
{
    pl_model_config_t c = s_cfg();
    pl_sched_model_t m;
    cr_assert_eq(pl_sched_model_from_config(&c, false, &m), PL_OK);
    cr_expect_eq(m.n_layers, 4);
    cr_expect_eq(m.n_kv_heads, 2);
    cr_expect_eq(m.head_dim, 32);
    cr_expect(m.tie_embeddings);
    cr_expect_eq(m.weight_bytes, 2.0);
    cr_expect_eq(m.kv_bytes, 2.0);
    cr_expect_eq(m.act_bytes, 4.0);
    c.dtype = PL_DT_F32;
    cr_assert_eq(pl_sched_model_from_config(&c, false, &m), PL_OK);
    cr_expect_eq(m.weight_bytes, 4.0);
    c.dtype = PL_DT_BF16;
    cr_assert_eq(pl_sched_model_from_config(&c, true, &m), PL_OK);
    cr_expect_eq(m.weight_bytes, 4.0, "the CPU backend holds weights as f32");
    c.n_layers = 0;
    cr_expect_eq(pl_sched_model_from_config(&c, false, &m), PL_ERR_INVALID);
}

Test(sched_modes, job_from_spec)
{
    pl_model_config_t c = s_cfg();
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    int len[3] = {3, 5, 9};
    spec.n_prompts = 3;
    spec.prompt_len = len;
    spec.gen.max_new_tokens = 7;
    spec.microbatches = 2;
    pl_sched_job_t j;
    cr_assert_eq(pl_sched_job_from_spec(&spec, &c, &j), PL_OK, "%s", pl_error_msg());
    cr_expect_eq(j.n_seqs, 3);
    cr_expect_eq(j.prompt_avg, 6); /* round(17 / 3) */
    cr_expect_eq(j.prompt_max, 9);
    cr_expect_eq(j.max_new_tokens, 7);
    cr_expect_eq(j.microbatches, 2);
    cr_expect_eq(j.ctx, 16);

    /* 9 + 92 > 100 positions */
    spec.gen.max_new_tokens = 92;
    pl_sched_job_t keep = j;
    cr_expect_eq(pl_sched_job_from_spec(&spec, &c, &j), PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "prompt 2") != NULL, "%s", pl_error_msg());
    cr_expect_eq(memcmp(&keep, &j, sizeof(j)), 0, "output untouched on error");
    spec.gen.max_new_tokens = 7;
    len[1] = 0;
    cr_expect_eq(pl_sched_job_from_spec(&spec, &c, &j), PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "prompt 1") != NULL, "%s", pl_error_msg());
    len[1] = 5;
    spec.n_prompts = 0;
    cr_expect_eq(pl_sched_job_from_spec(&spec, &c, &j), PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "prompts") != NULL, "%s", pl_error_msg());
    spec.n_prompts = 3;
    spec.microbatches = -1;
    cr_expect_eq(pl_sched_job_from_spec(&spec, &c, &j), PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "microbatches") != NULL, "%s", pl_error_msg());
    spec.prompt_len = NULL; /* borrowed above, not the spec's to free */
    spec.n_prompts = 0;
    pl_job_spec_clear(&spec);
}

Test(sched_modes, even_splits_layers_equally_in_input_order)
{
    pl_sched_device_t d[3] = {s_dev("slow", 50, 20, 64), s_dev("fast", 500, 200, 64),
                              s_dev("mid", 200, 80, 64)};
    pl_plan_input_t in = s_input(d, 3);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 0, &p), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(p->n_stages, 3);
    const int first[3] = {0, 4, 7}, count[3] = {4, 3, 3};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(p->stages[i].device, i, "input order");
        cr_expect_eq(p->stages[i].first_layer, first[i]);
        cr_expect_eq(p->stages[i].n_layers, count[i]);
    }
    cr_expect(p->stages[0].has_embed && p->stages[2].has_head);
    cr_expect_str_eq(p->search, "even");
    cr_expect_eq(p->microbatches, 3, "one microbatch per stage");
    cr_expect_eq(p->resident_seqs, 6);
    cr_expect_eq(p->speedup_even, 1.0);
    cr_expect_eq(p->even_job_time, p->job_time);
    cr_expect_eq(p->single.device, 1, "the fastest single device is the baseline");
    /* the optimal plan over the same devices is predicted no slower */
    pl_plan_t *o = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 0, &o), PL_OK);
    cr_expect_leq(o->job_time, p->job_time * (1 + 1e-12));
    cr_expect_eq(o->n_stages, 3, "optimal uses every device");
    pl_plan_destroy(&o);
    pl_plan_destroy(&p);

    /* alive mask and more devices than layers: the first min(n, L) alive ones */
    pl_sched_model_t small = s_model;
    small.n_layers = 2;
    in.model = &small;
    bool alive[3] = {false, true, true};
    cr_assert_eq(pl_sched_plan_mode(&in, alive, PL_PLANNER_EVEN, 0, &p), PL_OK, "%s",
                 pl_error_msg());
    cr_expect_eq(p->n_stages, 2);
    cr_expect_eq(p->stages[0].device, 1);
    cr_expect_eq(p->stages[1].device, 2);
    pl_plan_destroy(&p);
}

Test(sched_modes, even_names_the_stage_that_does_not_fit)
{
    pl_sched_device_t d[2] = {s_dev("big", 100, 50, 64), s_dev("tiny", 100, 50, 0.05)};
    pl_plan_input_t in = s_input(d, 2);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 0, &p), PL_ERR_INFEASIBLE);
    cr_expect_null(p);
    cr_expect(strstr(pl_error_msg(), "even split: stage 1 (tiny on node-tiny, layers 5-9)"),
              "%s", pl_error_msg());
}

/* More sequences than the even split's KV cache holds: it keeps the most that fit, as the optimal
 * planner does (a deployment's kv_slots are lowered so; a batch job is refused by waves_note):
 * every stage within its memory, R sequences all resident, R + 1 lowered to R again. */
Test(sched_modes, even_lowers_resident_sequences_to_what_fits)
{
    pl_sched_device_t d[2] = {s_dev("a", 100, 50, 2), s_dev("b", 100, 50, 2)};
    pl_plan_input_t in = s_input(d, 2);
    in.job.n_seqs = 100000;
    pl_plan_t *p = NULL, *o = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 0, &p), PL_OK, "%s",
                 pl_error_msg());
    int R = p->resident_seqs;
    cr_assert(R >= 1 && R < 100000, "%d resident", R);
    cr_expect_eq(p->n_seqs, 100000);
    cr_expect_str_eq(p->search, "even");
    cr_assert_eq(p->n_stages, 2);
    for (int i = 0; i < p->n_stages; i++) {
        cr_expect_leq(p->stages[i].mem_used, p->stages[i].mem_avail, "stage %d", i);
        cr_expect_gt(p->stages[i].mem_kv, 0, "stage %d holds its KV cache", i);
    }
    char note[256];
    cr_expect(pl_sched_waves_note(p, note, sizeof(note)), "a batch job of them is refused");
    /* the most that fit, and the optimal planner keeps at least as many */
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 0, &o), PL_OK);
    cr_expect_geq(o->resident_seqs, R);
    pl_plan_destroy(&o);
    pl_plan_destroy(&p);
    in.job.n_seqs = R;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 0, &p), PL_OK);
    cr_expect_eq(p->resident_seqs, R, "R fit all resident");
    pl_plan_destroy(&p);
    in.job.n_seqs = R + 1;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 0, &p), PL_OK);
    cr_expect_eq(p->resident_seqs, R, "R + 1 do not");
    pl_plan_destroy(&p);
}

Test(sched_modes, fixed_stage_count_takes_the_fastest_devices)
{
    pl_sched_device_t d[4] = {s_dev("a", 100, 40, 64), s_dev("b", 400, 160, 64),
                              s_dev("c", 50, 20, 64), s_dev("d", 300, 120, 64)};
    pl_plan_input_t in = s_input(d, 4);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 2, &p), PL_OK);
    cr_assert_eq(p->n_stages, 2);
    bool used[4] = {false};
    for (int i = 0; i < 2; i++)
        used[p->stages[i].device] = true;
    cr_expect(used[1] && used[3], "the two fastest, b and d");
    cr_expect_geq(p->microbatches, 2);
    pl_plan_destroy(&p);
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_EVEN, 3, &p), PL_OK);
    cr_expect_eq(p->n_stages, 3);
    for (int i = 0; i < 3; i++)
        cr_expect_neq(p->stages[i].device, 2, "c is the slowest");
    pl_plan_destroy(&p);
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_AUTO, 2, &p), PL_OK);
    cr_expect_leq(p->n_stages, 2);
    pl_plan_destroy(&p);
    cr_expect_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 5, &p), PL_ERR_INFEASIBLE);
    cr_expect(strstr(pl_error_msg(), "5 stages asked for, but only 4 devices"), "%s",
              pl_error_msg());
    cr_expect_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, -1, &p), PL_ERR_RANGE);
    cr_expect_eq(pl_sched_plan_mode(&in, NULL, (pl_planner_t)7, 0, &p), PL_ERR_INVALID);
    bool none[4] = {false};
    cr_expect_eq(pl_sched_plan_mode(&in, none, PL_PLANNER_AUTO, 0, &p), PL_ERR_NO_DEVICE);
    cr_expect_null(p);
}

/* The coordinator's and pipectl's one planning sequence: the same plan as its parts called by
 * hand, element sizes from the candidates' backends only, nothing written on error. */
Test(sched_modes, plan_spec_is_its_parts_in_order)
{
    pl_model_config_t c = s_cfg();
    pl_sched_device_t d[3] = {s_dev("a", 100, 40, 64), s_dev("b", 400, 160, 64),
                              s_dev("c", 300, 120, 64)};
    snprintf(d[1].backend, sizeof(d[1].backend), "cuda");
    snprintf(d[2].backend, sizeof(d[2].backend), "hip");
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    int len[4] = {12, 20, 7, 30};
    spec.n_prompts = 4;
    spec.prompt_len = len;
    spec.gen.max_new_tokens = 8;
    spec.planner = PL_PLANNER_OPTIMAL;
    spec.stages = 2;

    /* by hand: the CPU device a is no candidate, so the config's f16 sizes stand */
    pl_model_bytes_t *bytes = NULL;
    cr_assert_eq(pl_model_bytes_estimate(&c, &bytes), PL_OK, "%s", pl_error_msg());
    const bool cand[3] = {false, true, true};
    pl_sched_model_t ref_m;
    pl_sched_costs_t *ref_costs = NULL;
    pl_plan_input_t ref_in = {.devices = d, .n_devices = 3};
    pl_plan_t *ref = NULL, *p = NULL;
    cr_assert_eq(pl_sched_model_from_config(&c, false, &ref_m), PL_OK);
    cr_assert_eq(pl_sched_costs_from_stored(&ref_m, bytes, false, &ref_costs), PL_OK);
    cr_assert_eq(pl_sched_job_from_spec(&spec, &c, &ref_in.job), PL_OK);
    ref_in.model = &ref_m;
    ref_in.costs = ref_costs;
    cr_assert_eq(pl_sched_plan_mode(&ref_in, cand, PL_PLANNER_OPTIMAL, 2, &ref), PL_OK);

    static pl_sched_plan_inputs_t pi;
    cr_assert_eq(pl_sched_plan_spec(&spec, &c, bytes, d, 3, NULL, cand, 0, &pi, &p), PL_OK, "%s",
                 pl_error_msg());
    cr_expect_eq(pi.model.weight_bytes, 2.0);
    cr_expect(pi.in.model == &pi.model && pi.in.costs == pi.costs && pi.in.devices == d &&
              pi.in.n_devices == 3 && !pi.in.links);
    cr_expect_eq(memcmp(&pi.in.job, &ref_in.job, sizeof(pi.in.job)), 0);
    cr_assert_eq(p->n_stages, ref->n_stages);
    for (int i = 0; i < p->n_stages; i++) {
        cr_expect_eq(p->stages[i].device, ref->stages[i].device);
        cr_expect_eq(p->stages[i].first_layer, ref->stages[i].first_layer);
        cr_expect_eq(p->stages[i].last_layer, ref->stages[i].last_layer);
    }
    cr_expect_eq(p->job_time, ref->job_time);
    pl_plan_destroy(&p);
    pl_plan_destroy(&ref);
    pl_sched_costs_destroy(&ref_costs);
    pl_sched_plan_inputs_clear(&pi);

    /* every device a candidate (NULL): with the CPU among them KV elements are f32 */
    cr_assert_eq(pl_sched_plan_spec(&spec, &c, bytes, d, 3, NULL, NULL, 0, &pi, &p), PL_OK);
    cr_expect_eq(pi.model.kv_bytes, 4.0);
    pl_plan_destroy(&p);
    pl_sched_plan_inputs_clear(&pi);
    /* the wire dtype's bytes reach the links */
    cr_assert_eq(pl_sched_plan_spec(&spec, &c, bytes, d, 3, NULL, NULL, 2.0, &pi, &p), PL_OK);
    cr_expect_eq(pi.model.act_bytes, 2.0);
    pl_plan_destroy(&p);
    pl_sched_plan_inputs_clear(&pi);

    /* errors: the job shape (prompt 3 + max_new_tokens past 100 positions), the mode's stage
     * count; no plan, nothing kept */
    spec.gen.max_new_tokens = 71;
    cr_expect_eq(pl_sched_plan_spec(&spec, &c, bytes, d, 3, NULL, NULL, 0, &pi, &p),
                 PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "prompt 3") != NULL, "%s", pl_error_msg());
    spec.gen.max_new_tokens = 8;
    spec.stages = 3;
    cr_expect_eq(pl_sched_plan_spec(&spec, &c, bytes, d, 3, NULL, cand, 0, &pi, &p),
                 PL_ERR_INFEASIBLE);
    cr_expect_null(p);
    cr_expect_null(pi.costs);
    pl_model_bytes_destroy(&bytes);
    spec.prompt_len = NULL; /* borrowed above, not the spec's to free */
    spec.n_prompts = 0;
    pl_job_spec_clear(&spec);
}

Test(sched_modes, waves_note_when_not_every_sequence_fits)
{
    pl_plan_t p = {.n_seqs = 8, .resident_seqs = 8};
    char note[256] = "";
    cr_expect_not(pl_sched_waves_note(&p, note, sizeof(note)));
    p.resident_seqs = 3;
    cr_expect(pl_sched_waves_note(&p, note, sizeof(note)));
    cr_expect(strstr(note, "KV cache for 8 sequences does not fit; at most 3 fit"), "%s", note);
}

Test(sched_modes, terms_are_the_two_sides_of_the_roofline)
{
    pl_sched_device_t d[1] = {s_dev("one", 100, 40, 64)};
    pl_plan_input_t in = s_input(d, 1);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 0, &p), PL_OK);
    pl_sched_terms_t t;
    cr_assert_eq(pl_sched_terms(&in, p, 0, &t), PL_OK);
    /* one stage, no transfer: each phase's time is the larger of its two terms */
    cr_expect_float_eq(p->stages[0].t_prefill, fmax(t.pre_flop_s, t.pre_mem_s), 1e-12);
    cr_expect_float_eq(p->stages[0].t_decode, fmax(t.dec_flop_s, t.dec_mem_s), 1e-12);
    /* flop and byte counts by hand for the decode step of microbatch b at context c */
    int b = p->microbatch_size, L = s_model.n_layers, H = s_model.hidden, I = s_model.intermediate;
    double c = in.job.prompt_avg + in.job.max_new_tokens / 2.0;
    /* q and o: H x 1024 each, k and v: H x 256 each, gate, up, down: H x I each */
    double per_layer_params = (double)H * (2 * 16 * 64 + 2 * 4 * 64) + 3.0 * H * I;
    double flops = b * (L * 2.0 * per_layer_params + c * L * 4.0 * 16 * 64) +
                   b * 2.0 * s_model.vocab * H;
    cr_expect_float_eq(t.dec_flop_s, flops / 100e9, 1e-6 * flops / 100e9);
    /* doubling the compute rate halves the compute term, leaves the memory term */
    d[0].gflops = 200;
    pl_sched_terms_t t2;
    cr_assert_eq(pl_sched_terms(&in, p, 0, &t2), PL_OK);
    cr_expect_float_eq(t2.pre_flop_s, t.pre_flop_s / 2, 1e-15);
    cr_expect_float_eq(t2.dec_mem_s, t.dec_mem_s, 1e-15);
    cr_expect_eq(pl_sched_terms(&in, p, 1, &t2), PL_ERR_INVALID);
    pl_plan_destroy(&p);
}

static void s_node(pl_cfg_cluster_t *cl, const char *name, const char *addr)
{
    pl_cfg_node_entry_t *n = &cl->nodes[cl->n_nodes++];
    snprintf(n->name, sizeof(n->name), "%s", name);
    snprintf(n->address, sizeof(n->address), "%s", addr);
}

Test(sched_modes, whatif_cluster_from_parsed_config)
{
    static pl_cfg_cluster_t cl;
    memset(&cl, 0, sizeof(cl));
    s_node(&cl, "a", "10.0.0.1");
    s_node(&cl, "b", "10.0.0.2");
    cl.nodes[0].n_devices = 1;
    cl.nodes[0].devices[0] = (pl_cfg_device_t){
        .name = "card", .count = 2, .gflops = 1000, .mem_gbps = 500, .mem_gb = 16,
        .reserve_gb = 1};
    cl.nodes[1].n_devices = 1;
    cl.nodes[1].devices[0] = (pl_cfg_device_t){
        .name = "box", .backend = "cpu", .count = 1, .gflops = 100, .mem_gbps = 50, .mem_gb = 64};
    cl.n_links = 1;
    cl.links[0] = (pl_cfg_link_t){.from = "b", .to = "a", .gbps = 3, .latency_us = 20};
    pl_sched_device_t *devs = NULL;
    pl_sched_link_t *links = NULL;
    int n = 0;
    cr_assert_eq(pl_sched_whatif(&cl, &devs, &n, &links), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n, 3);
    cr_expect_str_eq(devs[0].backend, "cuda", "explicit figures default to cuda");
    cr_expect_eq(devs[0].index, 0);
    cr_expect_eq(devs[1].index, 1, "second of its backend on node a");
    cr_expect_eq(devs[2].index, 0);
    cr_expect_str_eq(devs[2].host, "10.0.0.2");
    cr_expect_eq(devs[0].mem_bytes, (uint64_t)(16 * GIB));
    cr_expect_eq(devs[0].reserve_bytes, (uint64_t)GIB);
    cr_assert_not_null(links);
    cr_expect_float_eq(links[0 * 3 + 2].gbps, 3.0, 1e-6, "a -> b: both directions");
    cr_expect_float_eq(links[2 * 3 + 1].latency_s, 20e-6, 1e-9);
    cr_expect_eq(links[0 * 3 + 1].gbps, 0.0, "same node: the planner's default");
    free(devs);
    free(links);

    devs = (pl_sched_device_t *)&cl; /* untouched on error */
    snprintf(cl.links[0].to, sizeof(cl.links[0].to), "nowhere");
    cr_expect_eq(pl_sched_whatif(&cl, &devs, &n, &links), PL_ERR_INVALID);
    cr_expect(strstr(pl_error_msg(), "links[0].to: no node 'nowhere'"), "%s", pl_error_msg());
    cr_expect_eq((void *)devs, (void *)&cl);
    cl.nodes[1].n_devices = 0;
    cr_expect_eq(pl_sched_whatif(&cl, &devs, &n, &links), PL_ERR_INVALID);
    cr_expect(strstr(pl_error_msg(), "node 'b' lists no devices"), "%s", pl_error_msg());
}

Test(sched_modes, full_json_adds_the_mode_table_and_device_figures)
{
    pl_sched_device_t d[2] = {s_dev("x", 100, 40, 64), s_dev("y", 300, 90, 64)};
    d[1].index = 3;
    pl_plan_input_t in = s_input(d, 2);
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 0, &p), PL_OK);
    json_t *o = pl_plan_to_json_full(p, &in, PL_PLANNER_OPTIMAL);
    cr_assert_not_null(o);
    cr_expect_str_eq(json_string_value(json_object_get(o, "planner")), "optimal");
    char *table = pl_plan_explain_new(p);
    cr_assert_not_null(table);
    cr_expect_str_eq(json_string_value(json_object_get(o, "table")), table);
    free(table);
    json_t *stages = json_object_get(o, "stages");
    cr_assert_eq(json_array_size(stages), (size_t)p->n_stages);
    for (int i = 0; i < p->n_stages; i++) {
        json_t *s = json_array_get(stages, (size_t)i);
        const pl_sched_device_t *dv = &d[p->stages[i].device];
        char id[32];
        snprintf(id, sizeof(id), "cpu:%d", dv->index);
        cr_expect_str_eq(json_string_value(json_object_get(s, "device_id")), id);
        cr_expect_eq(json_real_value(json_object_get(s, "gflops")), dv->gflops);
        cr_expect_float_eq(json_real_value(json_object_get(s, "compute_decode_s")),
                           p->stages[i].t_decode - p->stages[i].xfer_decode, 1e-15);
    }
    json_decref(o);
    cr_expect_null(pl_plan_to_json_full(p, NULL, PL_PLANNER_OPTIMAL));
    pl_plan_destroy(&p);
}

Test(sched_modes, duration_format)
{
    char b[32];
    cr_expect_str_eq(pl_sched_fmt_time(0, b, sizeof(b)), "0");
    cr_expect_str_eq(pl_sched_fmt_time(12.5e-6, b, sizeof(b)), "12.5 us");
    cr_expect_str_eq(pl_sched_fmt_time(3.2e-3, b, sizeof(b)), "3.20 ms");
    cr_expect_str_eq(pl_sched_fmt_time(1.25, b, sizeof(b)), "1.250 s");
}

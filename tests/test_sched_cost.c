/* Scheduler cost model, catalogue, plan output and error paths, checked against formulas written
 * out again here and against hand-computed values. */
#include "scheduler/catalog.h"
#include "scheduler/plan.h"
#include "tests/sched_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_sched_model_t tiny_model(int layers)
{
    return (pl_sched_model_t){.n_layers = layers,
                              .hidden = 8,
                              .intermediate = 16,
                              .n_heads = 2,
                              .n_kv_heads = 1,
                              .head_dim = 4,
                              .vocab = 10,
                              .weight_bytes = 2,
                              .kv_bytes = 2,
                              .act_bytes = 4};
}

/* ---- cost model ---------------------------------------------------------------------------- */

Test(sched_cost, tiny_model_known_values)
{
    pl_sched_model_t m = tiny_model(3);
    pl_sched_costs_t *c = NULL;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_OK);
    /* q 8, kv 4: matmuls 8*8 + 2*8*4 + 8*8 + 3*8*16 = 576 parameters, norms 16 */
    cr_assert_eq(c->n_layers, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_float_eq(c->layers[i].weight_bytes, 1184.0, 1e-9);
        cr_assert_float_eq(c->layers[i].flops_per_token, 1152.0, 1e-9);
        cr_assert_float_eq(c->layers[i].attn_flops_per_pos, 32.0, 1e-9);
        cr_assert_float_eq(c->layers[i].kv_bytes_per_token, 16.0, 1e-9);
    }
    cr_assert_float_eq(c->embed_weight_bytes, 160.0, 1e-9);
    cr_assert_float_eq(c->embed_bytes_per_token, 16.0, 1e-9);
    cr_assert_float_eq(c->head_weight_bytes, 176.0, 1e-9);
    cr_assert_float_eq(c->head_flops_per_seq, 160.0, 1e-9);
    cr_assert_float_eq(c->tied_bytes, 0.0, 1e-9);
    cr_assert_float_eq(c->act_bytes_per_token, 32.0, 1e-9);
    cr_assert_float_eq(c->logits_bytes_per_seq, 40.0, 1e-9);
    pl_sched_costs_destroy(&c);
    cr_assert_null(c);
    pl_sched_costs_destroy(&c); /* safe twice */
    m.tie_embeddings = true;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_OK);
    cr_assert_float_eq(c->tied_bytes, 160.0, 1e-9);
    pl_sched_costs_destroy(&c);
}

Test(sched_cost, llama3_8b_parameter_count)
{
    pl_sched_model_t m = {.n_layers = 32,
                          .hidden = 4096,
                          .intermediate = 14336,
                          .n_heads = 32,
                          .n_kv_heads = 8,
                          .head_dim = 128,
                          .vocab = 128256,
                          .weight_bytes = 2,
                          .kv_bytes = 2};
    pl_sched_costs_t *c = NULL;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_OK);
    double bytes = c->embed_weight_bytes + c->head_weight_bytes;
    for (int i = 0; i < 32; i++)
        bytes += c->layers[i].weight_bytes;
    /* Llama 3 8B has 8.03e9 parameters */
    cr_assert(bytes / 2 > 8.0e9 && bytes / 2 < 8.06e9, "params %.4g", bytes / 2);
    /* KV cache: 32 layers x 2 x 8 heads x 128 x 2 bytes = 128 KiB per token */
    cr_assert_float_eq(c->layers[0].kv_bytes_per_token * 32, 131072.0, 1e-6);
    cr_assert_float_eq(c->act_bytes_per_token, 16384.0, 1e-9); /* act_bytes 0 means f32 */
    pl_sched_costs_destroy(&c);
}

Test(sched_cost, model_errors_name_the_field)
{
    pl_sched_costs_t *c = NULL;
    pl_sched_model_t m = tiny_model(0);
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "n_layers"));
    m = tiny_model(2);
    m.n_kv_heads = 3;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "n_kv_heads"));
    m = tiny_model(2);
    m.weight_bytes = 0;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "weight_bytes"));
    m = tiny_model(2);
    m.kv_bytes = NAN;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_ERR_RANGE);
    cr_assert_eq(pl_sched_costs_from_model(NULL, &c), PL_ERR_INVALID);
    cr_assert_null(c);
}

/* The formulas of plan.h, written out independently. */
typedef struct {
    double tp, td, mem;
} ref_t;

static ref_t ref_stage(const pl_sched_costs_t *c, const pl_sched_device_t *d,
                       const pl_sched_job_t *j, int R, int b, int a, int e, double link_gbps,
                       double link_lat, bool has_next)
{
    double W = 0, F = 0, A = 0, K = 0;
    for (int l = a; l < e; l++) {
        W += c->layers[l].weight_bytes;
        F += c->layers[l].flops_per_token;
        A += c->layers[l].attn_flops_per_pos;
        K += c->layers[l].kv_bytes_per_token;
    }
    double P = j->prompt_avg, cx = P + j->max_new_tokens / 2.0;
    int L = c->n_layers, ctx = j->ctx ? j->ctx : j->prompt_max + j->max_new_tokens;
    bool first = a == 0, last = e == L;
    double fp = b * P * F + b * P * (P + 1) / 2 * A + (last ? b * c->head_flops_per_seq : 0);
    double bp = W + 2 * b * P * K + (first ? b * P * c->embed_bytes_per_token : 0) +
                (last ? c->head_weight_bytes : 0);
    double fd = b * F + b * cx * A + (last ? b * c->head_flops_per_seq : 0);
    double bd = W + b * (cx + 1) * K + (first ? b * c->embed_bytes_per_token : 0) +
                (last ? c->head_weight_bytes : 0);
    ref_t r;
    r.tp = fmax(fp / (d->gflops * 1e9), bp / (d->mem_gbps * 1e9));
    r.td = fmax(fd / (d->gflops * 1e9), bd / (d->mem_gbps * 1e9));
    if (has_next) {
        r.tp += link_lat + b * P * c->act_bytes_per_token / (link_gbps * 1e9);
        r.td += link_lat + b * c->act_bytes_per_token / (link_gbps * 1e9);
    }
    r.mem = W + (double)R * ctx * K + (first ? c->embed_weight_bytes : 0) +
            (last ? c->head_weight_bytes + b * c->logits_bytes_per_seq : 0) -
            (first && last ? c->tied_bytes : 0) +
            b * j->prompt_max * (2 * c->act_bytes_per_token + c->work_bytes_per_token) +
            (double)j->prompt_max * ctx * c->score_bytes_per_pair;
    return r;
}

static void close_to(double got, double want, const char *what)
{
    cr_assert(fabs(got - want) <= 1e-12 * fabs(want) + 1e-300, "%s: got %.17g want %.17g", what,
              got, want);
}

Test(sched_cost, stage_costs_follow_the_formulas)
{
    pl_sched_model_t m = mid_model(12);
    m.tie_embeddings = true;
    pl_sched_costs_t *c = NULL;
    cr_assert_eq(pl_sched_costs_from_model(&m, &c), PL_OK);
    /* compute-bound, balanced, and memory-bound devices, so both roofline sides are checked */
    pl_sched_device_t d[3] = {dev("gpu", "h1", 8000, 9000, 24), dev("cpu", "h1", 900, 60, 64),
                              dev("far", "h2", 1e9, 3, 16)};
    for (int objective = 0; objective < 3; objective++) {
        pl_plan_input_t in = {.costs = c, .devices = d, .n_devices = 3};
        in.job = (pl_sched_job_t){
            .n_seqs = 12, .prompt_avg = 100, .prompt_max = 300, .max_new_tokens = 51};
        in.options.field_mask = PL_PLAN_OPT_OBJECTIVE;
        in.options.objective = (pl_sched_objective_t)objective;
        pl_sched_eval_t *ev = NULL;
        cr_assert_eq(pl_sched_eval_new(&in, 12, 3, &ev), PL_OK, "%s", pl_error_msg());
        double wp = objective == PL_SCHED_OBJ_DECODE ? 0 : 1;
        double wd = objective == PL_SCHED_OBJ_PREFILL ? 0 : objective == 1 ? 1 : 50;
        for (int di = 0; di < 3; di++) {
            for (int a = 0; a < 12; a++) {
                for (int e = a + 1; e <= 12; e++) {
                    int next = e == 12 ? -1 : (di + 1) % 3;
                    bool same = next >= 0 && strcmp(d[di].host, d[next].host) == 0;
                    ref_t r = ref_stage(c, &d[di], &in.job, 12, 3, a, e, same ? 10.0 : 1.25,
                                        same ? 5e-6 : 50e-6, next >= 0);
                    double tp, td;
                    pl_sched_stage_times(ev, di, a, e - a, next, &tp, &td);
                    close_to(tp, r.tp, "prefill");
                    close_to(td, r.td, "decode");
                    close_to(pl_sched_stage_cost(ev, di, a, e - a, next), wp * r.tp + wd * r.td,
                             "cost");
                    close_to(pl_sched_stage_mem(ev, di, a, e - a), r.mem, "memory");
                }
            }
        }
        pl_sched_eval_destroy(&ev);
        cr_assert_null(ev);
    }
    pl_sched_costs_destroy(&c);
}

Test(sched_cost, one_stage_by_hand)
{
    /* one layer: W=100, F=10, A=0, K=0; device 1 GFLOP/s, 1 GB/s; job P=1, N=1, b=1 */
    pl_sched_layer_cost_t l = {.weight_bytes = 100, .flops_per_token = 10};
    pl_sched_costs_t c = {.n_layers = 1, .layers = &l};
    pl_sched_device_t d = dev("x", "h", 1, 1, 1);
    pl_plan_input_t in = {.costs = &c, .devices = &d, .n_devices = 1};
    in.job = (pl_sched_job_t){.n_seqs = 1, .prompt_avg = 1, .prompt_max = 1, .max_new_tokens = 1};
    pl_sched_eval_t *ev = NULL;
    cr_assert_eq(pl_sched_eval_new(&in, 1, 1, &ev), PL_OK);
    double tp, td;
    pl_sched_stage_times(ev, 0, 0, 1, -1, &tp, &td);
    /* memory-bound: 100 bytes at 1e9 B/s = 100 ns in both phases */
    cr_assert_float_eq(tp, 100e-9, 1e-18);
    cr_assert_float_eq(td, 100e-9, 1e-18);
    /* objective job with N = 1: only the prefill counts */
    cr_assert_float_eq(pl_sched_stage_cost(ev, 0, 0, 1, -1), 100e-9, 1e-18);
    cr_assert_float_eq(pl_sched_stage_mem(ev, 0, 0, 1), 100.0, 1e-9);
    cr_assert_float_eq(pl_sched_device_usable(ev, 0), GIB, 1e-3);
    pl_sched_eval_set_batch(ev, 1, 1);
    cr_assert_eq(pl_sched_eval_layers(ev), 1);
    pl_sched_eval_destroy(&ev);
}

Test(sched_cost, links_defaults_and_measured)
{
    pl_sched_model_t m = tiny_model(4);
    pl_sched_device_t d[3] = {dev("a", "h1", 1000, 100, 1), dev("b", "h1", 1000, 100, 1),
                              dev("c", "h2", 1000, 100, 1)};
    pl_sched_link_t links[9] = {0};
    links[0 * 3 + 2] = (pl_sched_link_t){3.0, 1e-3};
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 3, .links = links};
    in.job = (pl_sched_job_t){.n_seqs = 1, .prompt_avg = 1, .prompt_max = 1, .max_new_tokens = 1};
    pl_sched_eval_t *ev = NULL;
    cr_assert_eq(pl_sched_eval_new(&in, 1, 1, &ev), PL_OK);
    pl_sched_link_t l = pl_sched_link(ev, 0, 1);
    cr_assert_float_eq(l.gbps, 10.0, 1e-12);
    cr_assert_float_eq(l.latency_s, 5e-6, 1e-15);
    l = pl_sched_link(ev, 1, 2);
    cr_assert_float_eq(l.gbps, 1.25, 1e-12);
    cr_assert_float_eq(l.latency_s, 50e-6, 1e-15);
    l = pl_sched_link(ev, 0, 2); /* measured */
    cr_assert_float_eq(l.gbps, 3.0, 1e-12);
    cr_assert_float_eq(l.latency_s, 1e-3, 1e-15);
    pl_sched_eval_destroy(&ev);
    /* option defaults override the built-in ones */
    in.links = NULL;
    in.options.field_mask = PL_PLAN_OPT_CROSS_HOST | PL_PLAN_OPT_SAME_HOST;
    in.options.cross_host = (pl_sched_link_t){25.0, 2e-6};
    in.options.same_host = (pl_sched_link_t){100.0, 1e-6};
    cr_assert_eq(pl_sched_eval_new(&in, 1, 1, &ev), PL_OK);
    cr_assert_float_eq(pl_sched_link(ev, 1, 2).gbps, 25.0, 1e-12);
    cr_assert_float_eq(pl_sched_link(ev, 0, 1).gbps, 100.0, 1e-12);
    pl_sched_eval_destroy(&ev);
}

Test(sched_cost, input_errors_name_the_field)
{
    pl_sched_model_t m = tiny_model(4);
    pl_sched_device_t d[2] = {dev("a", "h1", 1000, 100, 1), dev("b", "h1", 1000, 100, 1)};
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 2};
    in.job = (pl_sched_job_t){.n_seqs = 2, .prompt_avg = 4, .prompt_max = 8, .max_new_tokens = 4};
    pl_plan_t *p = NULL;
    d[1].gflops = 0;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "devices[1].gflops"), "%s", pl_error_msg());
    d[1].gflops = 1000;
    d[0].mem_gbps = -1;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "devices[0].mem_gbps"));
    d[0].mem_gbps = 100;
    memset(d[0].host, 'x', sizeof(d[0].host));
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "devices[0].host"));
    snprintf(d[0].host, sizeof(d[0].host), "h1");
    in.job.ctx = 10;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "job.ctx"));
    in.job.ctx = 0;
    in.job.prompt_max = 2;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "job.prompt_max"));
    in.job.prompt_max = 8;
    in.job.n_seqs = 0;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "job.n_seqs"));
    in.job.n_seqs = 2;
    in.options.field_mask = PL_PLAN_OPT_EXACT_MAX;
    in.options.exact_max_devices = 17;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "exact_max_devices"));
    in.options.field_mask = PL_PLAN_OPT_ORDER;
    in.options.order = (pl_sched_order_t)7;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INVALID);
    in.options.field_mask = PL_PLAN_OPT_SAME_HOST;
    in.options.same_host = (pl_sched_link_t){0, 0};
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "same_host"));
    in.options.field_mask = 0;
    pl_sched_link_t links[4] = {{0, 0}, {NAN, 0}, {0, 0}, {0, 0}};
    in.links = links;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "links[0][1]"));
    in.links = NULL;
    in.n_devices = 0;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    in.n_devices = 2;
    in.model = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_INVALID);
    cr_assert_eq(pl_plan(NULL, &p), PL_ERR_INVALID);
    cr_assert_null(p);
    /* and a good input plans */
    in.model = &m;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    pl_plan_destroy(&p);
    cr_assert_null(p);
    pl_plan_destroy(&p);
    pl_plan_destroy(NULL);
}

Test(sched_cost, partition_and_search_argument_errors)
{
    pl_sched_model_t m = tiny_model(4);
    pl_sched_device_t d[2] = {dev("a", "h1", 1000, 100, 1), dev("b", "h1", 1000, 100, 1)};
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 2};
    in.job = (pl_sched_job_t){.n_seqs = 1, .prompt_avg = 1, .prompt_max = 1, .max_new_tokens = 1};
    pl_sched_eval_t *ev = NULL;
    cr_assert_eq(pl_sched_eval_new(&in, 1, 2, &ev), PL_ERR_RANGE); /* b > R */
    cr_assert_eq(pl_sched_eval_new(&in, 1, 1, &ev), PL_OK);
    pl_sched_split_t s;
    int dup[2] = {1, 1}, bad[1] = {5};
    cr_assert_eq(pl_sched_partition(ev, dup, 2, true, 0, &s), PL_ERR_INVALID);
    cr_assert_eq(pl_sched_partition(ev, bad, 1, true, 0, &s), PL_ERR_RANGE);
    cr_assert_eq(pl_sched_search(ev, dup, 2, true, 0, 12, &s, NULL), PL_ERR_INVALID);
    int ok[2] = {0, 1};
    cr_assert_eq(pl_sched_search(ev, ok, 2, true, 0, 17, &s, NULL), PL_ERR_RANGE);
    cr_assert_eq(pl_sched_partition(ev, ok, 2, false, 1, &s), PL_ERR_INFEASIBLE);
    cr_assert_eq(pl_sched_partition(ev, ok, 2, false, 0, &s), PL_OK);
    cr_assert_eq(s.n_stages, 2);
    pl_sched_eval_destroy(&ev);
}

/* ---- catalogue ----------------------------------------------------------------------------- */

Test(sched_cost, catalogue_lookup)
{
    const char *issue[] = {"H100 SXM",
                           "H200",
                           "A100 40GB",
                           "A100 80GB",
                           "L40S",
                           "RTX 4090",
                           "RTX 3090",
                           "MI300X",
                           "MI250X",
                           "MI210",
                           "RX 7900 XTX",
                           "EPYC 9654",
                           "Xeon Platinum 8480+",
                           "Desktop CPU"};
    for (size_t i = 0; i < sizeof(issue) / sizeof(issue[0]); i++) {
        const pl_sched_catalog_entry_t *e = pl_sched_catalog_find(issue[i]);
        cr_assert_not_null(e, "%s missing", issue[i]);
        cr_assert(e->tflops > 0 && e->mem_gbps > 0 && e->mem_bytes > 0);
    }
    cr_assert_str_eq(pl_sched_catalog_find("h100-sxm")->name, "H100 SXM");
    cr_assert_str_eq(pl_sched_catalog_find("h100sxm")->name, "H100 SXM");
    cr_assert_str_eq(pl_sched_catalog_find("NVIDIA H100 80GB HBM3")->name, "H100 SXM");
    cr_assert_str_eq(pl_sched_catalog_find("geforce_rtx_4090")->name, "RTX 4090");
    cr_assert_str_eq(pl_sched_catalog_find("instinct mi300x")->name, "MI300X");
    cr_assert_str_eq(pl_sched_catalog_find("xeon 8480+")->name, "Xeon Platinum 8480+");
    const pl_sched_catalog_entry_t *h = pl_sched_catalog_find("h100");
    cr_assert_float_eq(h->tflops, 989.4, 1e-9);
    cr_assert_float_eq(h->mem_gbps, 3350.0, 1e-9);
    cr_assert_eq(h->mem_bytes, 80ull << 30);
    cr_assert_float_eq(pl_sched_catalog_find("mi300x")->mem_gbps, 5300.0, 1e-9);
    cr_assert_null(pl_sched_catalog_find("TPU v5"));
    cr_assert(strstr(pl_error_msg(), "TPU v5"));
    cr_assert_null(pl_sched_catalog_find(""));
    cr_assert_null(pl_sched_catalog_find(NULL));
    cr_assert(pl_sched_catalog_count() >= 14);
    cr_assert_null(pl_sched_catalog_get(-1));
    cr_assert_null(pl_sched_catalog_get(pl_sched_catalog_count()));
    for (int i = 0; i < pl_sched_catalog_count(); i++) /* every entry finds itself */
        cr_assert_eq(pl_sched_catalog_find(pl_sched_catalog_get(i)->name), pl_sched_catalog_get(i));
}

Test(sched_cost, catalogue_device)
{
    pl_sched_device_t d;
    cr_assert_eq(pl_sched_catalog_device("a100 80gb", 0.5, 0.8, "n1", "h1", &d), PL_OK);
    cr_assert_str_eq(d.name, "A100 80GB");
    cr_assert_str_eq(d.backend, "cuda");
    cr_assert_str_eq(d.node, "n1");
    cr_assert_float_eq(d.gflops, 156000.0, 1e-6);
    cr_assert_float_eq(d.mem_gbps, 2039.0 * 0.8, 1e-9);
    cr_assert_eq(d.mem_bytes, 80ull << 30);
    cr_assert(d.reserve_bytes > 0 && d.reserve_bytes < d.mem_bytes);
    cr_assert_eq(pl_sched_catalog_device("epyc 9654", 0, 0, NULL, NULL, &d), PL_OK);
    cr_assert_str_eq(d.backend, "cpu");
    cr_assert_float_eq(d.gflops, 14700.0, 1e-6);
    cr_assert_eq(pl_sched_catalog_device("epyc 9654", 1.5, 0, NULL, NULL, &d), PL_ERR_RANGE);
    cr_assert_eq(pl_sched_catalog_device("nope", 1, 1, NULL, NULL, &d), PL_ERR_NOT_FOUND);
}

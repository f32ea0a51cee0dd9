/* The planner's memory and decode bytes from the stored bytes of each stage's tensors (f32, bf16,
 * Q4_K), and quantized models kept off GPUs. References are computed here from the tensor
 * shapes and each type's block geometry, independently of model/ and scheduler/. */
#include "cluster_util.h"
#include "model/model.h"
#include "scheduler/inputs.h"
#include "scheduler/modes.h"
#include "scheduler/terms.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The models pl-mkmodel writes below: 3 layers, hidden 256, intermediate 512, 4 heads of 64,
 * 2 NKV heads, vocabulary 320. */
#define NL 3
#define NH 256
#define NF 512
#define NQ 256  /* 4 heads x 64 */
#define NKV 128 /* 2 NKV heads x 64 */
#define NV 320

typedef enum { T_F32, T_BF16, T_Q4K } s_type_t;

static char s_dir[64];

/* Bytes of a rows x cols tensor: f32 4 per element, bf16 2, Q4_K 144 per 256 elements of a row
 * (f16 d and dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit quants). */
static uint64_t s_nb(s_type_t t, uint64_t rows, uint64_t cols)
{
    switch (t) {
    case T_F32:
        return 4 * rows * cols;
    case T_BF16:
        return 2 * rows * cols;
    default:
        cr_assert_eq(cols % 256, 0);
        return rows * (cols / 256) * 144;
    }
}

/* A model's expected bytes: matrices in mat, vectors (norms) in vec. */
typedef struct {
    uint64_t layer, embed, head, tied;
} s_want_t;

static s_want_t s_want(s_type_t mat, s_type_t vec, bool tied)
{
    s_want_t w;
    w.layer = s_nb(mat, NQ, NH) + 2 * s_nb(mat, NKV, NH) + s_nb(mat, NH, NQ) +
              2 * s_nb(mat, NF, NH) + s_nb(mat, NH, NF) + 2 * s_nb(vec, 1, NH);
    w.embed = s_nb(mat, NV, NH);
    w.head = s_nb(vec, 1, NH) + s_nb(mat, NV, NH);
    w.tied = tied ? w.embed : 0;
    return w;
}

static void s_mk(const char *out, const char *extra)
{
    cr_assert_eq(tc_sh(NULL,
                       "'%s/pl-mkmodel' --out %s/%s --layers %d --hidden %d --intermediate %d "
                       "--heads 4 --kv-heads 2 --vocab %d --seed 3 %s >/dev/null",
                       tc_bin(), s_dir, out, NL, NH, NF, NV, extra),
                 0, "pl-mkmodel %s", extra);
}

static void s_models(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/pl-bytes-XXXXXX");
    cr_assert(mkdtemp(s_dir));
    s_mk("f32", "--dtype f32");
    s_mk("bf16", "--dtype bf16 --tie");
    s_mk("q4k.gguf", "--format gguf --type q4_k");
    s_mk("f32.gguf", "--format gguf --type f32");
}

static void s_rm(void)
{
    tc_sh(NULL, "rm -rf %s", s_dir);
}

/* An opened model's config and stored bytes; the model is closed again. */
static pl_model_bytes_t *s_bytes(const char *name, pl_model_config_t *cfg)
{
    char path[128];
    pl_model_t *m = NULL;
    pl_model_bytes_t *b = NULL;
    snprintf(path, sizeof(path), "%s/%s", s_dir, name);
    cr_assert_eq(pl_model_open(path, &m), PL_OK, "%s: %s", path, pl_error_msg());
    cr_assert_eq(pl_model_bytes_new(m, &b), PL_OK, "%s", pl_error_msg());
    *cfg = *pl_model_config(m);
    pl_model_destroy(&m);
    return b;
}

/* The planner's costs of a model as the coordinator makes them. */
static pl_status_t s_costs(const pl_model_config_t *cfg, const pl_model_bytes_t *b, bool any_cpu,
                           pl_sched_costs_t **costs_p)
{
    pl_sched_model_t m;
    pl_status_t st = pl_sched_model_from_config(cfg, any_cpu, &m);
    return st ? st : pl_sched_costs_from_stored(&m, b, any_cpu, costs_p);
}

static pl_sched_device_t s_dev(const char *name, const char *backend, double gflops, double gbps,
                               double mem_bytes)
{
    pl_sched_device_t d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", name);
    snprintf(d.node, sizeof(d.node), "node-%s", name);
    snprintf(d.host, sizeof(d.host), "host-%s", name);
    snprintf(d.backend, sizeof(d.backend), "%s", backend);
    d.gflops = gflops;
    d.mem_gbps = gbps;
    d.mem_bytes = (uint64_t)mem_bytes;
    return d;
}

static const pl_sched_job_t s_job = {
    .n_seqs = 2, .prompt_avg = 16, .prompt_max = 16, .max_new_tokens = 8};

TestSuite(sched_bytes, .init = s_models, .fini = s_rm);

Test(sched_bytes, stored_bytes_of_f32_bf16_and_q4k_models)
{
    static const struct {
        const char *name;
        s_type_t mat, vec;
        bool tied;
        pl_wtype_t wt, quant;
    } cases[] = {
        {"f32", T_F32, T_F32, false, PL_WT_F32, PL_WT_COUNT},
        {"bf16", T_BF16, T_BF16, true, PL_WT_BF16, PL_WT_COUNT},
        {"q4k.gguf", T_Q4K, T_F32, false, PL_WT_Q4_K, PL_WT_Q4_K}, /* GGUF norms stay f32 */
        {"f32.gguf", T_F32, T_F32, false, PL_WT_F32, PL_WT_COUNT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pl_model_config_t cfg;
        pl_model_bytes_t *b = s_bytes(cases[i].name, &cfg);
        s_want_t w = s_want(cases[i].mat, cases[i].vec, cases[i].tied);
        cr_assert_eq(b->n_layers, NL);
        for (int l = 0; l < NL; l++)
            cr_expect_eq(b->layer[l], w.layer, "%s layer %d: %llu, want %llu", cases[i].name, l,
                         (unsigned long long)b->layer[l], (unsigned long long)w.layer);
        cr_expect_eq(b->embed, w.embed, "%s embed", cases[i].name);
        cr_expect_eq(b->head, cases[i].tied ? s_nb(cases[i].vec, 1, NH) + w.embed : w.head,
                     "%s head", cases[i].name);
        cr_expect_eq(b->tied, w.tied, "%s tied", cases[i].name);
        cr_expect_eq(b->matrix_wtype, cases[i].wt, "%s", cases[i].name);
        cr_expect_eq(b->quantized, cases[i].quant, "%s", cases[i].name);
        pl_model_bytes_destroy(&b);
        cr_expect_null(b);
        pl_model_bytes_destroy(&b); /* safe twice */
    }
}

Test(sched_bytes, a_described_model_is_estimated_as_its_stored_twin)
{
    pl_model_config_t cfg;
    pl_model_bytes_t *real = s_bytes("bf16", &cfg), *est = NULL;
    cr_assert_eq(pl_model_bytes_estimate(&cfg, &est), PL_OK, "%s", pl_error_msg());
    for (int l = 0; l < NL; l++)
        cr_expect_eq(est->layer[l], real->layer[l]);
    cr_expect_eq(est->embed, real->embed);
    cr_expect_eq(est->head, real->head);
    cr_expect_eq(est->tied, real->tied);
    pl_model_bytes_destroy(&est);
    pl_model_bytes_destroy(&real);
    char path[128];
    snprintf(path, sizeof(path), "%s/f32", s_dir);
    cr_expect(!pl_model_is_described(path), "a model with weights");
    tc_sh(NULL, "mkdir -p %s/desc && cp %s/f32/config.json %s/desc/", s_dir, s_dir, s_dir);
    snprintf(path, sizeof(path), "%s/desc", s_dir);
    cr_expect(pl_model_is_described(path));
    cfg.hidden = 0;
    cr_expect_eq(pl_model_bytes_estimate(&cfg, &est), PL_ERR_INVALID);
    cr_expect_null(est);
}

/* Per stage: the weights are its layers' stored bytes plus the embedding (first) and head
 * (last), NKV is f32 with a CPU among the candidates, and memory is their sum with the work. */
Test(sched_bytes, stage_memory_is_the_stored_bytes_of_its_tensors)
{
    static const struct {
        const char *name;
        s_type_t mat, vec;
        bool tied;
    } cases[] = {{"f32", T_F32, T_F32, false},
                 {"bf16", T_BF16, T_BF16, true},
                 {"q4k.gguf", T_Q4K, T_F32, false}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pl_model_config_t cfg;
        pl_model_bytes_t *b = s_bytes(cases[i].name, &cfg);
        s_want_t w = s_want(cases[i].mat, cases[i].vec, cases[i].tied);
        pl_sched_costs_t *costs = NULL;
        cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK, "%s", pl_error_msg());
        /* one stage (tied table once), then two */
        for (int stages = 1; stages <= 2; stages++) {
            pl_sched_device_t d[2] = {s_dev("a", "cpu", 100, 20, 1e9),
                                      s_dev("b", "cpu", 100, 20, 1e9)};
            pl_plan_input_t in = {.costs = costs, .devices = d, .n_devices = stages, .job = s_job};
            pl_plan_t *p = NULL;
            cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, stages, &p), PL_OK, "%s",
                         pl_error_msg());
            cr_assert_eq(p->n_stages, stages);
            for (int s = 0; s < p->n_stages; s++) {
                const pl_plan_stage_t *st = &p->stages[s];
                uint64_t want = (uint64_t)st->n_layers * w.layer;
                if (st->has_embed)
                    want += w.embed;
                if (st->has_head)
                    want += cases[i].tied ? s_nb(cases[i].vec, 1, NH) + w.embed : w.head;
                if (st->has_embed && st->has_head)
                    want -= w.tied;
                cr_expect_eq(st->mem_weights, want, "%s, %d stage(s), stage %d: %llu, want %llu",
                             cases[i].name, stages, s, (unsigned long long)st->mem_weights,
                             (unsigned long long)want);
                uint64_t kv = (uint64_t)p->resident_seqs * (uint64_t)p->ctx *
                              (uint64_t)st->n_layers * 2 * NKV * 4;
                cr_expect_eq(st->mem_kv, kv, "%s stage %d kv", cases[i].name, s);
                cr_expect_leq(llabs((long long)st->mem_used -
                                    (long long)(st->mem_weights + st->mem_kv + st->mem_work)),
                              1);
            }
            pl_plan_destroy(&p);
        }
        pl_sched_costs_destroy(&costs);
        pl_model_bytes_destroy(&b);
    }
}

/* The bytes a decode step streams on one device: every stored weight once, the NKV read and
 * written, one embedding row per sequence (plan.h's formula). */
Test(sched_bytes, decode_roofline_streams_the_stored_bytes)
{
    const char *names[] = {"f32", "bf16", "q4k.gguf"};
    const s_type_t mats[] = {T_F32, T_BF16, T_Q4K}, vecs[] = {T_F32, T_BF16, T_F32};
    double streamed[3];
    for (int i = 0; i < 3; i++) {
        pl_model_config_t cfg;
        pl_model_bytes_t *b = s_bytes(names[i], &cfg);
        s_want_t w = s_want(mats[i], vecs[i], i == 1);
        pl_sched_costs_t *costs = NULL;
        cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK);
        const double gbps = 20;
        pl_sched_device_t d = s_dev("a", "cpu", 100, gbps, 1e9);
        pl_plan_input_t in = {.costs = costs, .devices = &d, .n_devices = 1, .job = s_job};
        pl_plan_t *p = NULL;
        cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 1, &p), PL_OK);
        pl_sched_terms_t t;
        cr_assert_eq(pl_sched_terms(&in, p, 0, &t), PL_OK);
        double bsz = p->microbatch_size, c = s_job.prompt_avg + s_job.max_new_tokens / 2.0;
        double head = i == 1 ? s_nb(vecs[i], 1, NH) + w.embed : w.head;
        double want = NL * (double)w.layer + bsz * (c + 1) * NL * 2.0 * NKV * 4 +
                      bsz * (double)w.embed / NV + head;
        streamed[i] = t.dec_mem_s * gbps * 1e9;
        cr_expect_lt(fabs(streamed[i] / want - 1), 1e-9, "%s: %.0f bytes, want %.0f", names[i],
                     streamed[i], want);
        pl_plan_destroy(&p);
        pl_sched_costs_destroy(&costs);
        pl_model_bytes_destroy(&b);
    }
    cr_expect_lt(streamed[2], 0.5 * streamed[0], "Q4_K streams far less than f32");
}

/* The used memory of the whole model on one device with room to spare. */
static double s_mem_used(const char *name)
{
    pl_model_config_t cfg;
    pl_model_bytes_t *b = s_bytes(name, &cfg);
    pl_sched_costs_t *costs = NULL;
    cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK);
    pl_sched_device_t d = s_dev("a", "cpu", 100, 20, 1e9);
    pl_plan_input_t in = {.costs = costs, .devices = &d, .n_devices = 1, .job = s_job};
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_sched_plan_mode(&in, NULL, PL_PLANNER_AUTO, 0, &p), PL_OK);
    double used = (double)p->stages[0].mem_used;
    pl_plan_destroy(&p);
    pl_sched_costs_destroy(&costs);
    pl_model_bytes_destroy(&b);
    return used;
}

static pl_status_t s_plan_capped(const char *name, double cap)
{
    pl_model_config_t cfg;
    pl_model_bytes_t *b = s_bytes(name, &cfg);
    pl_sched_costs_t *costs = NULL;
    cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK);
    pl_sched_device_t d = s_dev("a", "cpu", 100, 20, cap);
    pl_plan_input_t in = {.costs = costs, .devices = &d, .n_devices = 1, .job = s_job};
    in.job.n_seqs = 1;
    pl_plan_t *p = NULL;
    pl_status_t st = pl_sched_plan_mode(&in, NULL, PL_PLANNER_AUTO, 0, &p);
    pl_plan_destroy(&p);
    pl_sched_costs_destroy(&costs);
    pl_model_bytes_destroy(&b);
    return st;
}

Test(sched_bytes, a_memory_cap_that_q4k_fits_and_its_f32_twin_does_not)
{
    double q = s_mem_used("q4k.gguf"), f = s_mem_used("f32.gguf");
    s_want_t wq = s_want(T_Q4K, T_F32, false), wf = s_want(T_F32, T_F32, false);
    double dw =
        (double)(NL * wf.layer + wf.embed + wf.head) - (double)(NL * wq.layer + wq.embed + wq.head);
    cr_expect_lt(fabs((f - q) - dw), 2, "f32 - q4k: %.0f, want the weights' difference %.0f", f - q,
                 dw);
    double cap = (q + f) / 2;
    cr_expect_eq(s_plan_capped("q4k.gguf", cap), PL_OK, "%s", pl_error_msg());
    cr_expect_eq(s_plan_capped("f32.gguf", cap), PL_ERR_INFEASIBLE);
}

/* A fast GPU and a slow CPU: the f32 model uses the GPU, the Q4_K one is all on the CPU and the
 * plan says why the GPU was left out; GPUs alone refuse it with the same reason. */
Test(sched_bytes, a_quantized_model_stays_off_gpus_and_the_plan_says_why)
{
    const char *names[] = {"f32.gguf", "q4k.gguf"};
    for (int i = 0; i < 2; i++) {
        pl_model_config_t cfg;
        pl_model_bytes_t *b = s_bytes(names[i], &cfg);
        pl_sched_device_t d[2] = {s_dev("gpu", "cuda", 100000, 2000, 8e9),
                                  s_dev("cpu", "cpu", 100, 20, 8e9)};
        pl_sched_refusals_t r;
        pl_sched_refusals_find(d, 2, b, &r);
        cr_expect_eq(r.n_refused, i);
        cr_expect_null(r.refused[1], "a CPU is never refused");
        pl_sched_costs_t *costs = NULL;
        cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK);
        pl_plan_input_t in = {
            .costs = costs, .devices = d, .n_devices = 2, .job = s_job, .refused = r.refused};
        const pl_planner_t modes[] = {PL_PLANNER_AUTO, PL_PLANNER_OPTIMAL, PL_PLANNER_EVEN};
        for (int m = 0; m < 3; m++) {
            pl_plan_t *p = NULL;
            cr_assert_eq(pl_sched_plan_mode(&in, NULL, modes[m], 0, &p), PL_OK, "%s",
                         pl_error_msg());
            bool on_gpu = false;
            int layers = 0;
            for (int s = 0; s < p->n_stages; s++) {
                on_gpu |= p->stages[s].device == 0;
                layers += p->stages[s].n_layers;
            }
            cr_expect_eq(layers, NL);
            if (i == 0) {
                cr_expect(on_gpu, "%s, mode %d: the fast GPU takes layers", names[i], m);
                pl_plan_destroy(&p);
                continue;
            }
            cr_expect(!on_gpu, "mode %d: a Q4_K stage on the GPU", m);
            cr_assert_eq(p->n_left_out, 1);
            cr_expect_eq(p->left_out[0].device, 0);
            cr_expect(strstr(p->left_out[0].why, "Q4_K") && strstr(p->left_out[0].why, "GPU"), "%s",
                      p->left_out[0].why);
            char *table = pl_plan_explain_new(p);
            cr_assert_not_null(table);
            cr_expect(strstr(table, "left out: gpu on node-gpu: the model's weights are "
                                    "quantized (Q4_K)"),
                      "%s", table);
            free(table);
            json_t *j = pl_plan_to_json(p);
            const char *why = json_string_value(
                json_object_get(json_array_get(json_object_get(j, "left_out"), 0), "why"));
            cr_expect(why && strstr(why, "Q4_K"), "%s", why ? why : "(none)");
            json_decref(j);
            pl_plan_destroy(&p);
        }
        /* GPUs alone */
        in.n_devices = 1;
        for (int m = 0; m < 3; m++) {
            pl_plan_t *p = NULL;
            pl_status_t st = pl_sched_plan_mode(&in, NULL, modes[m], 0, &p);
            if (i == 0) {
                cr_expect_eq(st, PL_OK);
            } else {
                cr_expect_eq(st, PL_ERR_NO_DEVICE);
                cr_expect(strstr(pl_error_msg(), "no device can hold this model") &&
                              strstr(pl_error_msg(), "Q4_K"),
                          "%s", pl_error_msg());
                cr_expect_null(p);
            }
            pl_plan_destroy(&p);
        }
        /* a stage count the CPU alone cannot give says why the others are out */
        in.n_devices = 2;
        pl_plan_t *p = NULL;
        pl_status_t st = pl_sched_plan_mode(&in, NULL, PL_PLANNER_OPTIMAL, 2, &p);
        if (i == 1)
            cr_expect(st == PL_ERR_INFEASIBLE && strstr(pl_error_msg(), "Q4_K"), "%s",
                      pl_error_msg());
        pl_plan_destroy(&p);
        pl_sched_costs_destroy(&costs);
        pl_model_bytes_destroy(&b);
    }
}

Test(sched_bytes, costs_from_stored_checks_its_inputs)
{
    pl_model_config_t cfg;
    pl_model_bytes_t *b = s_bytes("f32", &cfg);
    pl_sched_costs_t *costs = (pl_sched_costs_t *)&cfg; /* untouched on error */
    cr_expect_eq(s_costs(&cfg, NULL, true, &costs), PL_ERR_INVALID);
    cr_expect_eq(pl_sched_costs_from_stored(NULL, b, true, &costs), PL_ERR_INVALID);
    cfg.n_layers = NL + 1;
    cr_expect_eq(s_costs(&cfg, b, true, &costs), PL_ERR_INVALID);
    cr_expect(strstr(pl_error_msg(), "3 layers for a config of 4"), "%s", pl_error_msg());
    cr_expect_eq((void *)costs, (void *)&cfg);
    cfg.n_layers = NL;
    /* GPUs only: the NKV cache in the matrices' dtype (f32 here), weights as stored */
    cr_assert_eq(s_costs(&cfg, b, false, &costs), PL_OK);
    cr_expect_float_eq(costs->layers[0].kv_bytes_per_token, 2.0 * NKV * 4, 1e-9);
    pl_sched_costs_destroy(&costs);
    pl_model_bytes_destroy(&b);
    b = s_bytes("bf16", &cfg);
    cr_assert_eq(s_costs(&cfg, b, false, &costs), PL_OK);
    cr_expect_float_eq(costs->layers[0].kv_bytes_per_token, 2.0 * NKV * 2, 1e-9, "bf16 NKV on GPU");
    cr_expect_float_eq(costs->layers[0].weight_bytes, (double)s_want(T_BF16, T_BF16, true).layer,
                       1e-9);
    pl_sched_costs_destroy(&costs);
    cr_assert_eq(s_costs(&cfg, b, true, &costs), PL_OK);
    cr_expect_float_eq(costs->layers[0].kv_bytes_per_token, 2.0 * NKV * 4, 1e-9, "f32 NKV on CPU");
    pl_sched_costs_destroy(&costs);
    pl_model_bytes_destroy(&b);
}

/* pipectl plan on a described cluster with a GPU and a CPU: the Q4_K model's every layer on the
 * CPU, and the table says why the GPU is not used. */
Test(sched_bytes, pipectl_whatif_puts_a_q4k_model_on_the_cpu_and_says_why)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/p.jsonl", s_dir);
    tc_write(path, "[3, 14, 25, 36]\n[7, 8, 9]\n");
    snprintf(path, sizeof(path), "%s/job.yaml", s_dir);
    tc_write(path, "model: q4k.gguf\nprompts: p.jsonl\nmax_new_tokens: 8\nplanner: optimal\n");
    snprintf(path, sizeof(path), "%s/mixed.yaml", s_dir);
    tc_write(path, "coordinator:\n  endpoint: tcp://127.0.0.1:1\n"
                   "nodes:\n"
                   "  - name: gpubox\n    address: 10.0.0.1\n    devices: [{kind: H100 SXM}]\n"
                   "  - name: cpubox\n    address: 10.0.0.2\n    devices: [{kind: EPYC 9654}]\n");
    char *out = NULL;
    int rc = tc_sh(&out, "%s/pipectl -o json plan %s/job.yaml --cluster %s/mixed.yaml 2>&1",
                   tc_bin(), s_dir, s_dir);
    cr_assert_eq(rc, 0, "%s", out);
    json_t *r = json_loads(out, 0, NULL), *p = json_object_get(r, "plan");
    cr_assert(json_is_object(p), "%s", out);
    free(out);
    json_t *stages = json_object_get(p, "stages");
    cr_assert_gt(json_array_size(stages), 0);
    for (size_t i = 0; i < json_array_size(stages); i++)
        cr_expect_str_eq(json_string_value(json_object_get(json_array_get(stages, i), "node")),
                         "cpubox");
    const char *table = json_string_value(json_object_get(p, "table"));
    cr_expect(table && strstr(table, "left out: H100 SXM on gpubox: the model's weights are "
                                     "quantized (Q4_K)"),
              "%s", table ? table : "(no table)");
    json_decref(r);
}

/* The planner's prefill chunk: the rule of pl_sched_prefill_chunk on hand-worked values, and whole
 * plans whose chunk follows from their own stage times, shown in the table and the JSON. */
#include "sched_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(sched_chunk);

Test(sched_chunk, rule_on_hand_worked_values)
{
    /* the job's own value always wins, also with one stage */
    cr_assert_eq(pl_sched_prefill_chunk(7, 1, 1, 1000, 1000, 1.0), 7);
    cr_assert_eq(pl_sched_prefill_chunk(7, 3, 1, 1000, 1000, 1.0), 7);
    /* one stage: nothing to overlap */
    cr_assert_eq(pl_sched_prefill_chunk(0, 1, 1, 4096, 4096, 1.0), 0);
    /* short prompts stay whole */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 32, 32, 1e-6), 0);
    cr_assert_eq(pl_sched_prefill_chunk(0, 4, 1, 20, 10, 1e-6), 0);
    /* fast stages: the count decides, ceil(1024 / 4) = 256 and ceil(1000 / 6) = 167 */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 1024, 1024, 1e-3), 256);
    cr_assert_eq(pl_sched_prefill_chunk(0, 3, 1, 1000, 500, 1e-4), 167);
    /* slower stages: 1024 tokens in 0.02 s are 51200 tokens/s, 4 ms of them 204 tokens, below
     * the 256 the count allows */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 1024, 1024, 0.02), 204);
    /* 0.025 s: 163 tokens in 4 ms */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 1024, 1024, 0.025), 163);
    /* slower still: a long prompt in at most max(PL_SCHED_CHUNKS_MAX, 4 S) chunks, 1024 / 8 */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 1024, 1024, 0.128), 128);
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 1024, 1024, 10.0), 128);
    /* 3 stages: at most 12 chunks, ceil(1200 / 12) = 100; 8 stages: 32, ceil(4096 / 32) */
    cr_assert_eq(pl_sched_prefill_chunk(0, 3, 1, 1200, 1200, 10.0), 100);
    cr_assert_eq(pl_sched_prefill_chunk(0, 8, 1, 4096, 4096, 10.0), 128);
    /* a prompt short enough for its 8 chunks to stay under PL_SCHED_CHUNK_MIN rows */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 200, 200, 10.0), PL_SCHED_CHUNK_MIN);
    /* just above the floor: 33 tokens on 8 stages still make two chunks */
    cr_assert_eq(pl_sched_prefill_chunk(0, 8, 1, 33, 33, 1e-6), 32);
    /* 40 tokens, 2 stages: ceil(40 / 4) = 10, raised to 32: two chunks */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 40, 40, 1e-6), 32);
    /* no prediction (0 s): the count alone */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 1, 512, 100, 0.0), 128);
    /* microbatches of several sequences: the floor is on a message's rows (b chunks), so 12
     * prompts of 64 tokens in two microbatches of 6 on 2 stages go in chunks of
     * ceil(64 / 4) = 16 (96 rows: 8 messages), where one sequence's floor of 32 made 4 */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 6, 64, 64, 1e-6), 16);
    /* slow stages: the floor for 3 sequences is ceil(32 / 3) = 11 tokens */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 3, 64, 64, 10.0), 11);
    /* and never below PL_SCHED_CHUNK_MIN_TOKENS, however many sequences */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 64, 64, 64, 10.0), PL_SCHED_CHUNK_MIN_TOKENS);
    /* but a long prompt's chunk count still bounds them: 1024 / 8 */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 64, 1024, 1024, 10.0), 128);
    /* prompts no longer than the floor stay whole: 8 tokens with 16 sequences, 5 with 8 */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 16, 8, 8, 1e-6), 0);
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 8, 5, 5, 1e-6), 0);
    /* 9 tokens with 16 sequences: ceil(9 / 4) = 3, raised to the 8-token floor: two chunks */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 16, 9, 9, 1e-6), 8);
    /* no microbatch size known (0): as one sequence */
    cr_assert_eq(pl_sched_prefill_chunk(0, 2, 0, 200, 200, 10.0), PL_SCHED_CHUNK_MIN);
}

/* A CPU device on the one host "h", with room for any split. */
static pl_sched_device_t s_dev(const char *name, double gflops, double gbps)
{
    return dev(name, "h", gflops, gbps, 64);
}

/* The chunk the rule gives for this plan, worked out from the plan's own figures. */
static int s_expected(const pl_plan_t *p, int pmax, int pavg)
{
    int b = p->microbatch_size > 0 ? p->microbatch_size : 1;
    double floor_c = fmax(fmax(ceil(32.0 / b), 8), ceil(pmax / fmax(8, 4.0 * p->n_stages)));
    if (p->n_stages == 1 || pmax <= floor_c)
        return 0;
    double t = 0;
    for (int i = 0; i < p->n_stages; i++)
        t = fmax(t, p->stages[i].t_prefill);
    double c = ceil((double)pmax / (2.0 * p->n_stages));
    c = fmin(c, floor(0.004 * pavg / t));
    c = fmax(c, floor_c);
    return (int)c;
}

static void s_check(double gflops, double gbps, int stages, int pmax, int pavg,
                    bool want_time_bound)
{
    pl_sched_device_t d[4] = {s_dev("a", gflops, gbps), s_dev("b", gflops, gbps),
                              s_dev("c", gflops, gbps), s_dev("d", gflops, gbps)};
    pl_sched_model_t m = mid_model(16);
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = stages};
    in.job =
        (pl_sched_job_t){.n_seqs = 1, .prompt_avg = pavg, .prompt_max = pmax, .max_new_tokens = 4};
    plan_fixed_order(&in);
    pl_plan_t *p = plan_ok(&in);
    cr_assert_eq(p->n_stages, stages);
    int want = s_expected(p, pmax, pavg);
    cr_assert_eq(p->prefill_chunk, want, "%d stages, %d tokens: chunk %d, expected %d", stages,
                 pmax, p->prefill_chunk, want);
    if (want > 0) {
        int chunks = (pmax + want - 1) / want;
        double t = 0;
        for (int i = 0; i < p->n_stages; i++)
            t = fmax(t, p->stages[i].t_prefill);
        double chunk_s = t * want / pavg;
        if (want_time_bound) /* slow stages: a few ms per chunk, more chunks than 2 S */
            cr_assert(chunk_s <= 0.004 + 1e-12 && chunk_s > 0.002 && chunks > 2 * stages + 1,
                      "%g s, %d chunks", chunk_s, chunks);
        else if (want == (pmax + 2 * stages - 1) / (2 * stages)) /* fast: just enough for 2 S */
            cr_assert(chunks >= 2 * stages && chunks <= 2 * stages + 1, "%d chunks", chunks);
        else /* slow: the floor's chunks, at most max(8, 4 S) */
            cr_assert(chunks <= (4 * stages > 8 ? 4 * stages : 8), "%d chunks", chunks);
    }
    /* shown in the table and the JSON */
    char *table = pl_plan_explain_new(p);
    cr_assert_not_null(table);
    char line[96];
    if (want > 0)
        snprintf(line, sizeof(line), "prefill chunk: %d tokens per sequence and message\n", want);
    else
        snprintf(line, sizeof(line), "prefill chunk: whole prompts\n");
    cr_assert(strstr(table, line), "%s", table);
    json_t *o = pl_plan_to_json(p);
    cr_assert_not_null(o);
    cr_assert_eq(json_integer_value(json_object_get(o, "prefill_chunk")), want);
    json_decref(o);
    free(table);
    pl_plan_destroy(&p);
}

Test(sched_chunk, plans_choose_by_the_rule)
{
    s_check(1e7, 1e6, 2, 1024, 1024, false); /* fast: 4 chunks of 256 */
    s_check(1e7, 1e6, 3, 1000, 1000, false);
    /* slower (about 20 us a token per stage): chunks of about 4 ms, more of them than 2 S */
    s_check(5e4, 2e3, 2, 1024, 1024, true);
    s_check(5e4, 2e3, 4, 4000, 3000, true);
    s_check(1e7, 1e6, 1, 1024, 1024, false); /* one stage: whole */
    s_check(1e7, 1e6, 2, 24, 24, false);     /* short: whole */
    /* slow: the floor, 8 chunks of 128 tokens */
    s_check(20, 50, 2, 1024, 1024, false);
}

Test(sched_chunk, the_jobs_own_chunk_is_kept_and_checked)
{
    pl_sched_device_t d[2] = {s_dev("a", 100, 50), s_dev("b", 100, 50)};
    pl_sched_model_t m = mid_model(16);
    pl_plan_input_t in = {.model = &m, .devices = d, .n_devices = 2};
    in.job = (pl_sched_job_t){.n_seqs = 2,
                              .prompt_avg = 500,
                              .prompt_max = 900,
                              .max_new_tokens = 4,
                              .prefill_chunk = 77};
    in.options.field_mask = PL_PLAN_OPT_ALLOW_SKIP;
    in.options.allow_skip = false;
    pl_plan_t *p = NULL;
    cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(p->prefill_chunk, 77);
    pl_plan_destroy(&p);
    in.job.prefill_chunk = -1;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "prefill_chunk"), "%s", pl_error_msg());
    in.job.prefill_chunk = 65537;
    cr_assert_eq(pl_plan(&in, &p), PL_ERR_RANGE);
    cr_assert_null(p);
}

Test(sched_chunk, a_schedule_cuts_prompts_from_their_end)
{
    /* [5, 3, 2]: a 10-token prompt exactly, shorter ones drop the first entries, longer ones take
     * more of the first entry's size in front */
    pl_job_chunks_t c = {.n = 3, .len = {5, 3, 2}};
    static const struct {
        int len, n, cuts[6];
    } want[] = {
        {10, 3, {5, 3, 2}},    {7, 3, {2, 3, 2}},          {3, 2, {1, 2}}, {2, 1, {2}}, {1, 1, {1}},
        {14, 4, {4, 5, 3, 2}}, {21, 6, {1, 5, 5, 5, 3, 2}}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_eq(pl_job_chunks_count(&c, want[i].len), want[i].n, "len %d", want[i].len);
        int fed = 0;
        for (int k = 0; k < want[i].n; k++) {
            int n = pl_job_chunks_next(&c, want[i].len, fed);
            cr_assert_eq(n, want[i].cuts[k], "len %d, cut %d: %d", want[i].len, k, n);
            fed += n;
            /* the cut ends where the tail of the cuts after it begins */
            cr_assert_eq(want[i].len - fed, pl_job_chunks_tail(&c, want[i].n - 1 - k));
        }
        cr_assert_eq(fed, want[i].len);
    }
    cr_assert_eq(pl_job_chunks_tail(&c, 0), 0);
    cr_assert_eq(pl_job_chunks_tail(&c, 2), 5);
    cr_assert_eq(pl_job_chunks_tail(&c, 5), 20);
    /* one entry is today's fixed chunk: (len - 1) % c + 1 first, then c */
    pl_job_gen_t g = {.prefill_chunk = 4};
    pl_job_chunks_t f = pl_job_chunks_of(&g);
    cr_assert_eq(f.n, 1);
    cr_assert_eq(pl_job_chunks_next(&f, 10, 0), 2);
    cr_assert_eq(pl_job_chunks_next(&f, 10, 2), 4);
    cr_assert_eq(pl_job_chunks_count(&f, 10), 3);
    /* a schedule replaces the chunk; neither: whole prompts */
    g.prefill_sched = c;
    cr_assert_eq(pl_job_chunks_of(&g).n, 3);
    g = (pl_job_gen_t){0};
    f = pl_job_chunks_of(&g);
    cr_assert_eq(pl_job_chunks_next(&f, 10, 3), 7);
    cr_assert_eq(pl_job_chunks_count(&f, 10), 1);
    /* checked: counts and sizes */
    cr_assert_eq(pl_job_chunks_check(&c, "s"), PL_OK);
    c.len[1] = 0;
    cr_assert_eq(pl_job_chunks_check(&c, "s"), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "'s': entry 1"), "%s", pl_error_msg());
    c.len[1] = PL_JOB_MAX_PREFILL_CHUNK + 1;
    cr_assert_eq(pl_job_chunks_check(&c, "s"), PL_ERR_RANGE);
    c.len[1] = 3;
    c.n = PL_JOB_MAX_CHUNKS + 1;
    cr_assert_eq(pl_job_chunks_check(&c, "s"), PL_ERR_RANGE);
}

/* Two stages of one layer each on two alike devices (1 GFLOP/s, memory and links all but free)
 * for one prompt of `p` tokens: with attention only (1e9 FLOPs per query and key), a piece of
 * n tokens after s costs n s + n (n + 1) / 2 seconds; with dense flops only, n seconds. */
static pl_sched_eval_t *s_eval_two(int p, bool attention, pl_sched_split_t *split,
                                   pl_sched_device_t *d, pl_sched_layer_cost_t *layers,
                                   pl_sched_costs_t *costs)
{
    for (int i = 0; i < 2; i++) {
        d[i] = s_dev(i ? "b" : "a", 1.0, 1e9);
        layers[i] = (pl_sched_layer_cost_t){.weight_bytes = 1,
                                            .flops_per_token = attention ? 0 : 1e9,
                                            .attn_flops_per_pos = attention ? 1e9 : 0};
    }
    *costs = (pl_sched_costs_t){.n_layers = 2, .layers = layers};
    pl_plan_input_t in = {.costs = costs, .devices = d, .n_devices = 2};
    in.job = (pl_sched_job_t){.n_seqs = 1, .prompt_avg = p, .prompt_max = p, .max_new_tokens = 4};
    pl_sched_eval_t *ev;
    cr_assert_eq(pl_sched_eval_new(&in, 1, 1, &ev), PL_OK, "%s", pl_error_msg());
    *split = (pl_sched_split_t){.n_stages = 2, .device = {0, 1}, .first = {0, 1}};
    return ev;
}

Test(sched_chunk, uneven_pieces_beat_equal_chunks_in_the_model)
{
    pl_sched_device_t d[2];
    pl_sched_layer_cost_t layers[2];
    pl_sched_costs_t costs;
    pl_sched_split_t s;
    pl_sched_eval_t *ev = s_eval_two(256, true, &s, d, layers, &costs);
    /* equal chunks of 128: 8256 s and 24640 s on each stage; stage 1 ends at 8256 + 8256 +
     * 24640 waiting for stage 0's second piece at 32896: 57536 s */
    pl_job_chunks_t eq = {.n = 1, .len = {128}}, un;
    double busy, t_eq = pl_sched_chunks_time(ev, &s, 1, &eq, &busy);
    cr_assert_float_eq(t_eq, 57536.0, 1e-3, "%f", t_eq);
    cr_assert_float_eq(busy, 32896.0, 1e-3, "%f", busy);
    /* two pieces: the total 32896 plus the dearer piece; the boundary on the 16-token grid
     * back from the end that balances them best is 176 (15576 s and 17320 s): 50216 s */
    double t = pl_sched_chunks_plan(ev, &s, 1, 2, 16, 256, 256, &un);
    cr_assert_eq(un.n, 2);
    cr_assert_eq(un.len[0], 176, "%d", un.len[0]);
    cr_assert_eq(un.len[1], 80);
    cr_assert_float_eq(t, 50216.0, 1e-3, "%f", t);
    cr_assert_float_eq(pl_sched_chunks_time(ev, &s, 1, &un, NULL), t, 1e-6);
    /* more pieces: the prompt covered exactly, larger where the prefix is short */
    t = pl_sched_chunks_plan(ev, &s, 1, 6, 16, 256, 256, &un);
    cr_assert_eq(un.n, 6);
    int sum = 0;
    for (int k = 0; k < un.n; k++) {
        sum += un.len[k];
        if (k > 0)
            cr_assert_leq(un.len[k], un.len[k - 1], "piece %d: %d after %d", k, un.len[k],
                          un.len[k - 1]);
    }
    cr_assert_eq(sum, 256);
    cr_assert_gt(un.len[0], 2 * un.len[5], "%d, %d", un.len[0], un.len[5]);
    pl_job_chunks_t eq6 = {.n = 1, .len = {43}}; /* 6 equal-ish chunks: 41 then 5 of 43 */
    cr_assert_lt(t, pl_sched_chunks_time(ev, &s, 1, &eq6, NULL));
    /* the bounds on a piece hold: none outside [48, 80], and none fit when they cannot */
    t = pl_sched_chunks_plan(ev, &s, 1, 4, 48, 80, 80, &un);
    cr_assert(isfinite(t));
    sum = 0;
    for (int k = 0; k < un.n; k++) {
        cr_assert(un.len[k] >= 48 && un.len[k] <= 80, "piece %d: %d", k, un.len[k]);
        sum += un.len[k];
    }
    cr_assert_eq(sum, 256);
    cr_assert_eq(un.len[0], 80, "the cheap front takes the most: %d", un.len[0]);
    /* and the first piece's own bound: where attention is cheapest it would take the most */
    t = pl_sched_chunks_plan(ev, &s, 1, 4, 16, 256, 48, &un);
    cr_assert(isfinite(t));
    cr_assert(un.len[0] <= 48 && un.len[0] >= 16, "%d", un.len[0]);
    cr_assert_eq(un.len[0] + un.len[1] + un.len[2] + un.len[3], 256);
    cr_assert(isinf(pl_sched_chunks_plan(ev, &s, 1, 2, 16, 100, 100, &un)));
    cr_assert_eq(un.n, 0);
    cr_assert(isinf(pl_sched_chunks_plan(ev, &s, 1, 1, 16, 256, 256, &un)));
    pl_sched_eval_destroy(&ev);
    /* dense flops only: every token costs alike, so equal pieces are best */
    ev = s_eval_two(256, false, &s, d, layers, &costs);
    t = pl_sched_chunks_plan(ev, &s, 1, 4, 16, 256, 256, &un);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(un.len[k], 64, "piece %d: %d", k, un.len[k]);
    cr_assert_float_eq(t, 256.0 + 64.0, 1e-3, "%f", t);
    pl_sched_eval_destroy(&ev);
}

/* bench_pipeline.sh's model: 12 layers of hidden 1024, where a 1,024-token prompt's attention is
 * a tenth of its flops, and more of its time at the attention's own rate */
static const pl_sched_model_t s_pipe_model = {.n_layers = 12,
                                              .hidden = 1024,
                                              .intermediate = 2816,
                                              .n_heads = 16,
                                              .n_kv_heads = 8,
                                              .head_dim = 64,
                                              .vocab = 8192,
                                              .weight_bytes = 2,
                                              .kv_bytes = 2,
                                              .act_bytes = 4};

Test(sched_chunk, plans_carry_the_uneven_schedule)
{
    for (int stages = 2; stages <= 3; stages++) {
        pl_sched_device_t d[3] = {s_dev("a", 80, 50), s_dev("b", 80, 50), s_dev("c", 80, 50)};
        for (int i = 0; i < 3; i++) /* as this machine's CPU measured them */
            d[i].attn_gflops = 20, d[i].pass_gbps = 8.5;
        pl_plan_input_t in = {.model = &s_pipe_model, .devices = d, .n_devices = stages};
        in.job = (pl_sched_job_t){
            .n_seqs = 1, .prompt_avg = 1024, .prompt_max = 1024, .max_new_tokens = 4};
        in.options.field_mask = PL_PLAN_OPT_ORDER | PL_PLAN_OPT_ALLOW_SKIP;
        in.options.order = PL_SCHED_ORDER_FIXED;
        in.options.allow_skip = false;
        pl_plan_t *p = NULL;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        int K = (1024 + p->prefill_chunk - 1) / p->prefill_chunk;
        cr_assert_eq(K, stages == 2 ? 8 : 12, "%d stages: chunk %d", stages, p->prefill_chunk);
        cr_assert_eq(p->prefill_sched.n, K);
        int sum = 0;
        for (int k = 0; k < K; k++) {
            cr_assert(p->prefill_sched.len[k] >= PL_SCHED_CHUNK_MIN &&
                          p->prefill_sched.len[k] <= 2 * p->prefill_chunk,
                      "piece %d: %d", k, p->prefill_sched.len[k]);
            sum += p->prefill_sched.len[k];
        }
        cr_assert_eq(sum, 1024);
        /* the first piece no larger than the equal chunk, the last smaller */
        cr_assert_leq(p->prefill_sched.len[0], p->prefill_chunk);
        cr_assert_lt(p->prefill_sched.len[K - 1], p->prefill_chunk);
        cr_assert_gt(p->prefill_time_even, 0);
        cr_assert_lt(p->prefill_time, p->prefill_time_even, "%g vs %g", p->prefill_time,
                     p->prefill_time_even);
        cr_assert_float_eq(p->prefill_tok_s, 1024 / p->prefill_time, 1e-6 * p->prefill_tok_s);
        char *table = pl_plan_explain_new(p);
        char line[64];
        snprintf(line, sizeof(line), "prefill schedule: %d, ", p->prefill_sched.len[0]);
        cr_assert(strstr(table, line), "%s", table);
        json_t *o = pl_plan_to_json(p);
        json_t *js = json_object_get(o, "prefill_schedule");
        cr_assert_eq(json_array_size(js), (size_t)K);
        cr_assert_eq(json_integer_value(json_array_get(js, K - 1)), p->prefill_sched.len[K - 1]);
        cr_assert_float_eq(json_real_value(json_object_get(o, "prefill_time_even_s")),
                           p->prefill_time_even, 1e-12);
        json_decref(o);
        free(table);
        pl_plan_destroy(&p);
        /* the job's own chunk keeps today's equal chunks */
        in.job.prefill_chunk = 128;
        cr_assert_eq(pl_plan(&in, &p), PL_OK, "%s", pl_error_msg());
        cr_assert_eq(p->prefill_chunk, 128);
        cr_assert_eq(p->prefill_sched.n, 0);
        cr_assert_eq(p->prefill_time_even, 0);
        pl_plan_destroy(&p);
    }
}

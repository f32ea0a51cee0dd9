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

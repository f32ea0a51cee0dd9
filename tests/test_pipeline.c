/* The split does not change the answer: a job run as 1, 2 and 3 stages (in one process) gives the
 * same token ids, greedy and seeded sampling, whatever the microbatching; errors are reported. */
#include "gen_util.h"
#include "pipeline/gen.h"
#include "pipeline/gen_local.h"

#include <criterion/criterion.h>

static json_t *s_job(double temperature, int mb, int max_new)
{
    return json_pack("{s:[[i,i,i,i],[i,i],[i,i,i,i,i,i,i,i,i],[i],[i,i,i]], s:i, s:i, s:b, "
                     "s:{s:f, s:i, s:f, s:s}}",
                     "prompts", 1, 15, 27, 99, 1, 7, 1, 100, 101, 102, 103, 104, 105, 106, 107,
                     250, 3, 200, 5, "max_new_tokens", max_new, "microbatches", mb,
                     "stop_at_eos", 0, "sampling", "temperature", temperature, "top_k", 20,
                     "top_p", 0.9, "seed", "77");
}

/* pl_gen_local_run over the job in its JSON form ("microbatches" beside the settings), decoded
 * by the spec's codec. */
static pl_status_t s_local(const char *model, const json_t *gen, pl_be_device_t *dev,
                           const int *counts, int n, json_t **res, pl_gen_local_stats_t *stats)
{
    pl_job_spec_t spec;
    pl_status_t st = tg_spec(gen, &spec);
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    st = pl_gen_local_run(model, &spec, dev, counts, n, res, stats);
    pl_job_spec_clear(&spec);
    return st;
}

static json_t *s_run(const json_t *job, const int *counts, int n)
{
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    pl_status_t st = s_local(tg_model, job, dev, counts, n, &res, &stats);
    cr_assert_eq(st, PL_OK, "run failed: %s", pl_error_msg());
    cr_assert_eq(stats.generated, 5 * 12);
    /* every sequence finished and gave its KV slot back on every stage */
    cr_assert_eq(stats.freed, (uint64_t)(counts ? n : 1) * 5, "freed %llu slots",
                 (unsigned long long)stats.freed);
    pl_be_device_close(&dev);
    return res;
}

static void s_assert_same(const json_t *a, const json_t *b, const char *what)
{
    char *sa = json_dumps(a, JSON_COMPACT), *sb = json_dumps(b, JSON_COMPACT);
    cr_assert_str_eq(sa, sb, "%s", what);
    free(sa);
    free(sb);
}

TestSuite(pipeline, .init = tg_setup, .fini = tg_teardown, .timeout = 60);

Test(pipeline, greedy_tokens_do_not_depend_on_the_split_or_microbatches)
{
    json_t *j1 = s_job(0, 1, 12), *j3 = s_job(0, 3, 12), *j5 = s_job(0, 5, 12);
    json_t *ref = s_run(j1, NULL, 1);
    json_t *two = s_run(j3, (int[]){2, 3}, 2);
    json_t *three = s_run(j3, (int[]){1, 1, 3}, 3);
    json_t *five = s_run(j5, (int[]){1, 1, 1, 1, 1}, 5);
    s_assert_same(ref, two, "2 stages");
    s_assert_same(ref, three, "3 stages");
    s_assert_same(ref, five, "5 stages, one sequence per microbatch");
    /* the tokens are not degenerate: sequences differ */
    char *s0 = json_dumps(json_object_get(json_array_get(ref, 0), "tokens"), 0);
    char *s1 = json_dumps(json_object_get(json_array_get(ref, 1), "tokens"), 0);
    cr_assert_str_neq(s0, s1);
    free(s0), free(s1);
    json_decref(j1), json_decref(j3), json_decref(j5);
    json_decref(ref), json_decref(two), json_decref(three), json_decref(five);
}

Test(pipeline, seeded_sampling_does_not_depend_on_the_split)
{
    json_t *j1 = s_job(0.8, 1, 12), *j4 = s_job(0.8, 4, 12), *g = s_job(0, 1, 12);
    json_t *ref = s_run(j1, NULL, 1);
    json_t *three = s_run(j4, (int[]){2, 2, 1}, 3);
    json_t *greedy = s_run(g, NULL, 1);
    s_assert_same(ref, three, "3 stages, sampled");
    char *a = json_dumps(ref, JSON_COMPACT), *b = json_dumps(greedy, JSON_COMPACT);
    cr_assert_str_neq(a, b, "sampling gave the greedy tokens: temperature unused?");
    free(a), free(b);
    json_decref(j1), json_decref(j4), json_decref(g);
    json_decref(ref), json_decref(three), json_decref(greedy);
}

Test(pipeline, eos_stops_a_sequence)
{
    /* find a token greedy decoding produces, then declare it EOS via a second model config */
    json_t *job = s_job(0, 1, 12);
    json_t *ref = s_run(job, NULL, 1);
    json_int_t second = json_integer_value(
        json_array_get(json_object_get(json_array_get(ref, 0), "tokens"), 1));
    tc_sh(NULL,
          "mkdir -p %s/e && ln -sf %s/m/model.safetensors %s/e/ && "
          "sed 's/\"eos_token_id\": *[0-9]*/\"eos_token_id\": %lld/' %s/m/config.json > "
          "%s/e/config.json",
          tg_dir, tg_dir, tg_dir, (long long)second, tg_dir, tg_dir);
    json_object_set_new(job, "stop_at_eos", json_true());
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    char edir[300];
    snprintf(edir, sizeof(edir), "%s/e", tg_dir);
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    cr_assert_eq(s_local(edir, job, dev, NULL, 1, &res, &stats), PL_OK, "%s",
                 pl_error_msg());
    json_t *r0 = json_array_get(res, 0);
    cr_assert_str_eq(json_string_value(json_object_get(r0, "finish")), "eos");
    json_t *toks = json_object_get(r0, "tokens");
    cr_assert_leq(json_array_size(toks), 2);
    cr_assert_eq(json_integer_value(json_array_get(toks, json_array_size(toks) - 1)), second);
    pl_be_device_close(&dev);
    json_decref(res), json_decref(ref), json_decref(job);
}

Test(pipeline, bad_partition_and_bad_tokens_are_errors)
{
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    json_t *job = s_job(0, 1, 4);
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    cr_assert_neq(s_local(tg_model, job, dev, (int[]){2, 2}, 2, &res, &stats), PL_OK);
    cr_assert(strstr(pl_error_msg(), "layers"), "%s", pl_error_msg());
    json_array_append_new(json_object_get(job, "prompts"), json_pack("[i]", 300));
    cr_assert_neq(s_local(tg_model, job, dev, NULL, 1, &res, &stats), PL_OK);
    cr_assert(strstr(pl_error_msg(), "vocabulary"), "%s", pl_error_msg());
    cr_assert_neq(s_local("/nonexistent", job, dev, NULL, 1, &res, &stats), PL_OK);
    cr_assert_null(res);
    pl_be_device_close(&dev);
    json_decref(job);
}

/* A job whose prompts are cut into prefill chunks of `chunk` tokens (0: whole prompts). */
static json_t *s_chunked_job(double temperature, int mb, int chunk)
{
    json_t *job = s_job(temperature, mb, 12);
    json_t *longp = json_array();
    for (int i = 0; i < 70; i++) /* past the sgemm threshold: long-sequence products */
        json_array_append_new(longp, json_integer((i * 37 + 11) % 300));
    json_array_append_new(json_object_get(job, "prompts"), longp);
    json_object_set_new(job, "prefill_chunk", json_integer(chunk));
    return job;
}

static json_t *s_run_n(const json_t *job, const int *counts, int n, int n_seqs,
                       uint64_t *prompt_tokens)
{
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    pl_status_t st = s_local(tg_model, job, dev, counts, n, &res, &stats);
    cr_assert_eq(st, PL_OK, "run failed: %s", pl_error_msg());
    cr_assert_eq(stats.generated, (uint64_t)n_seqs * 12);
    *prompt_tokens = stats.prompt_tokens;
    pl_be_device_close(&dev);
    return res;
}

Test(pipeline, chunked_prefill_gives_the_tokens_of_whole_prefill)
{
    /* prompts of 4, 2, 9, 1, 3 and 70 tokens: chunks of 1 .. 7, 40 and 64 tokens, most of them
     * dividing no prompt; 1, 2 and 3 stages; one and three microbatches; on packed weights
     * (PL_CPU_WEIGHTS=packed), whose long-prompt products round as the short rows' do. */
    static const int sizes[] = {1, 2, 3, 4, 5, 7, 40, 64};
    static const int two[] = {2, 3}, three[] = {1, 1, 3};
    const int *splits[] = {NULL, two, three};
    setenv("PL_CPU_WEIGHTS", "packed", 1);
    for (int temp = 0; temp < 2; temp++) {
        json_t *whole = s_chunked_job(temp ? 0.8 : 0, 1, 0);
        uint64_t ptok_ref, ptok;
        json_t *ref = s_run_n(whole, NULL, 1, 6, &ptok_ref);
        cr_assert_eq(ptok_ref, 4 + 2 + 9 + 1 + 3 + 70);
        for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
            for (int n = 1; n <= 3; n++) {
                json_t *job = s_chunked_job(temp ? 0.8 : 0, n == 1 ? 1 : 3, sizes[c]);
                json_t *res = s_run_n(job, splits[n - 1], n, 6, &ptok);
                char what[96];
                snprintf(what, sizeof(what), "chunks of %d, %d stages, temperature %s",
                         sizes[c], n, temp ? "0.8" : "0");
                s_assert_same(ref, res, what);
                cr_assert_eq(ptok, ptok_ref, "%s: every prompt token goes in once", what);
                json_decref(res), json_decref(job);
            }
        }
        json_decref(ref), json_decref(whole);
    }
    unsetenv("PL_CPU_WEIGHTS");
}

Test(pipeline, uneven_prefill_schedules_give_the_tokens_of_whole_prefill)
{
    /* the planner's uneven chunks (counted back from each prompt's end): larger first as it
     * plans them, pieces that divide no prompt, 1-token pieces, a schedule longer than every
     * prompt and one shorter than the longest (its first entry repeats in front), over a
     * prefill_chunk they replace; 1, 2 and 3 stages, one and three microbatches */
    static const int scheds[][5] = {{3, 40, 20, 10}, {3, 1, 1, 1}, {4, 33, 7, 64, 1},
                                    {2, 100, 3},     {2, 9, 2},    {1, 1}};
    static const int two[] = {2, 3}, three[] = {1, 1, 3};
    const int *splits[] = {NULL, two, three};
    json_t *whole = s_chunked_job(0, 1, 0);
    uint64_t ptok_ref, ptok;
    json_t *ref = s_run_n(whole, NULL, 1, 6, &ptok_ref);
    for (size_t c = 0; c < sizeof(scheds) / sizeof(scheds[0]); c++) {
        for (int n = 1; n <= 3; n++) {
            json_t *job = s_chunked_job(0, n == 1 ? 1 : 3, 5);
            json_t *sched = json_array();
            for (int k = 1; k <= scheds[c][0]; k++)
                json_array_append_new(sched, json_integer(scheds[c][k]));
            json_object_set_new(job, "prefill_schedule", sched);
            json_t *res = s_run_n(job, splits[n - 1], n, 6, &ptok);
            char what[96];
            snprintf(what, sizeof(what), "schedule %zu, %d stages", c, n);
            s_assert_same(ref, res, what);
            cr_assert_eq(ptok, ptok_ref, "%s: every prompt token goes in once", what);
            json_decref(res), json_decref(job);
        }
    }
    json_decref(ref), json_decref(whole);
}

/* The in-process feeder cuts by the schedule, every prompt from its own end: a microbatch of
 * prompts of 20, 7 and 3 tokens under [8, 6, 4] goes as 4 messages (the longest's cuts 2, 8, 6,
 * 4), the shorter prompts only in the last ones. */
Test(pipeline, the_feeder_cuts_by_the_schedule)
{
    int32_t p20[20] = {0}, p7[7] = {0}, p3[3] = {0};
    int32_t *prompts[3] = {p20, p7, p3};
    int lens[3] = {20, 7, 3};
    pl_gen_job_t job = {.n_seqs = 3, .microbatches = 1, .prompts = prompts, .prompt_len = lens};
    job.gen.prefill_chunk = 5; /* replaced by the schedule */
    job.gen.prefill_sched = (pl_job_chunks_t){.n = 3, .len = {8, 6, 4}};
    pl_gen_feed_t *f;
    cr_assert_eq(pl_gen_feed_create(&job, &f), PL_OK);
    cr_assert_eq(pl_gen_feed_prefill_chunks(f, 0), 4);
    /* per message: the entries (sequence, start, tokens) */
    static const int want[4][3][3] = {
        {{0, 0, 2}}, {{0, 2, 8}}, {{0, 10, 6}, {1, 0, 3}}, {{0, 16, 4}, {1, 3, 4}, {2, 0, 3}}};
    static const int n_want[4] = {1, 1, 2, 3};
    pl_act_hdr_t hdr;
    pl_act_seq_t seqs[3];
    int32_t tokens[32];
    for (int k = 0; k < 4; k++) {
        pl_gen_feed_prefill(f, 1, 0, k, &hdr, seqs, tokens);
        cr_assert_eq(hdr.n_seq, (uint32_t)n_want[k], "message %d: %u entries", k, hdr.n_seq);
        uint32_t t = 0;
        for (int i = 0; i < n_want[k]; i++) {
            cr_assert_eq(seqs[i].seq, (uint32_t)want[k][i][0], "message %d entry %d", k, i);
            cr_assert_eq(seqs[i].pos0, (uint32_t)want[k][i][1], "message %d entry %d", k, i);
            cr_assert_eq(seqs[i].n_tok, (uint32_t)want[k][i][2], "message %d entry %d", k, i);
            t += seqs[i].n_tok;
        }
        cr_assert_eq(hdr.n_tokens, t);
    }
    pl_gen_feed_destroy(&f);
}

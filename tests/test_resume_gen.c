/* Resume inside the runtime: a job continued from any point of an undisturbed run (its first k
 * tokens per sequence, finished sequences kept) gives exactly that run's tokens, finishes and
 * text, greedy and seeded, whatever the new split, microbatching and prefill chunks; bad resume
 * inputs are refused and change nothing. */
#include "gen_util.h"
#include "js_ref.h"
#include "model/model.h"
#include "pipeline/gen.h"
#include "pipeline/gen_local.h"
#include "transport/msg.h"

#include <criterion/criterion.h>

/* A spec from the job's JSON form. */
static void s_spec(const char *model, json_t *gen, int mb, pl_job_spec_t *spec)
{
    json_t *body = json_pack("{s:s, s:o, s:i}", "model", model, "gen", gen, "microbatches", mb);
    cr_assert_eq(pl_job_spec_decode(body, spec), PL_OK, "%s", pl_error_msg());
    json_decref(body);
}

static json_t *s_gen(double temperature, int max_new)
{
    /* EOS allowed after 2 tokens: sequences end at different steps */
    return json_pack("{s:[[i,i,i,i],[i,i],[i,i,i,i,i,i,i,i,i],[i],[i,i,i]], s:i, s:i, s:b, "
                     "s:{s:f, s:i, s:f, s:s}}",
                     "prompts", 1, 15, 27, 99, 1, 7, 1, 100, 101, 102, 103, 104, 105, 106, 107, 250,
                     3, 200, 5, "max_new_tokens", max_new, "min_new_tokens", 2, "stop_at_eos", 1,
                     "sampling", "temperature", temperature, "top_k", 40, "top_p", 0.95, "seed",
                     "1234");
}

/* Run spec on the CPU (split as counts), from resume when given. */
static json_t *s_run(const pl_job_spec_t *spec, const pl_msg_result_t *resume, int n_resume,
                     const int *counts, int n_stages)
{
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    pl_status_t st = pl_gen_local_resume(spec->model, spec, resume, n_resume, dev, counts, n_stages,
                                         &res, &stats);
    cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
    pl_be_device_close(&dev);
    return res;
}

/* The first k tokens of each sequence of results `full`: finished ones (k past their end) keep
 * their finish, the others run on. */
static pl_msg_result_t *s_cut(const json_t *full, int k, int *n_p)
{
    pl_msg_result_t *r;
    cr_assert_eq(pl_msg_results_decode(full, &r, n_p), PL_OK, "%s", pl_error_msg());
    for (int s = 0; s < *n_p; s++) {
        free(r[s].text);
        r[s].text = NULL;
        if (k < r[s].n_tokens) {
            r[s].n_tokens = k;
            r[s].finish = PL_FINISH_NONE;
        }
    }
    return r;
}

static void s_same(const json_t *want, const json_t *got, const char *what)
{
    char *a = json_dumps(want, JSON_SORT_KEYS), *b = json_dumps(got, JSON_SORT_KEYS);
    cr_assert_str_eq(b, a, "%s", what);
    free(a);
    free(b);
}

static void s_check_cuts(double temperature)
{
    pl_job_spec_t spec;
    s_spec(tg_model, s_gen(temperature, 12), 1, &spec);
    json_t *full = s_run(&spec, NULL, 0, NULL, 1);
    int longest = 0;
    for (size_t i = 0; i < json_array_size(full); i++)
        longest = PL_MAX(longest,
                         (int)json_array_size(json_object_get(json_array_get(full, i), "tokens")));
    cr_assert_gt(longest, 5, "a run this short tests little");
    static const int cuts[] = {0, 1, 2, 3, 5, 8, 11, 12};
    static const int two[] = {2, 3}, three[] = {1, 3, 1};
    for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
        for (int variant = 0; variant < 3; variant++) {
            pl_job_spec_t sp;
            /* the new assignment may split, batch and chunk differently */
            s_spec(tg_model, s_gen(temperature, 12), variant + 1, &sp);
            sp.gen.prefill_chunk = variant == 2 ? 3 : 0;
            int n;
            pl_msg_result_t *r = s_cut(full, cuts[c], &n);
            json_t *got = variant == 0   ? s_run(&sp, r, n, NULL, 1)
                          : variant == 1 ? s_run(&sp, r, n, two, 2)
                                         : s_run(&sp, r, n, three, 3);
            char what[96];
            snprintf(what, sizeof(what), "temperature %.1f, resumed after %d tokens, variant %d",
                     temperature, cuts[c], variant);
            s_same(full, got, what);
            json_decref(got);
            pl_msg_results_free(r, n);
            pl_job_spec_clear(&sp);
        }
    }
    json_decref(full);
    pl_job_spec_clear(&spec);
}

Test(resume_gen, greedy_resumes_to_the_undisturbed_output, .init = tg_setup, .fini = tg_teardown)
{
    s_check_cuts(0);
}

Test(resume_gen, seeded_sampling_resumes_to_the_undisturbed_output, .init = tg_setup,
     .fini = tg_teardown)
{
    s_check_cuts(0.9);
}

Test(resume_gen, bad_resume_inputs_are_refused_and_change_nothing, .init = tg_setup,
     .fini = tg_teardown)
{
    pl_job_spec_t spec;
    pl_model_t *m;
    pl_gen_job_t g;
    s_spec(tg_model, s_gen(0, 4), 1, &spec);
    cr_assert_eq(pl_model_open(tg_model, &m), PL_OK);
    cr_assert_eq(pl_gen_job_from_spec(&spec, 1, pl_model_config(m), &g), PL_OK);
    int32_t toks[5] = {4, 5, 6, 7, 8};
    pl_msg_result_t r[5];
    for (int s = 0; s < 5; s++)
        r[s] = (pl_msg_result_t){.seq = s, .n_tokens = 1, .tokens = toks};
    cr_assert_eq(pl_gen_job_resume(&g, r, 4, 300), PL_ERR_INVALID); /* one sequence short */
    r[2].tokens = (int32_t[]){300};
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_RANGE); /* outside the vocabulary */
    cr_assert(strstr(pl_error_msg(), "sequence 2"), "%s", pl_error_msg());
    r[2].tokens = toks;
    r[3].n_tokens = 5; /* more than max_new_tokens */
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_INVALID);
    r[3].n_tokens = 4; /* all of them, yet running */
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_INVALID);
    r[3].n_tokens = 0;
    r[3].finish = PL_FINISH_EOS; /* finished without a token */
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_INVALID);
    r[3].seq = 2; /* out of order */
    r[3].finish = PL_FINISH_NONE;
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_INVALID);
    cr_assert_null(g.gen_len);
    cr_assert_eq(g.prompt_len[0], 4, "a refused resume changed the job");
    r[3].seq = 3;
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(g.prompt_len[0], 5);
    cr_assert_eq(g.prompts[0][4], 4);
    cr_assert_eq(pl_gen_job_prompt_base(&g, 0), 4);
    cr_assert_eq(pl_gen_job_max_ctx(&g), 9 + 4, "max_ctx counts from the original prompt");
    cr_assert_eq(pl_gen_job_resume(&g, r, 5, 300), PL_ERR_INVALID); /* twice */
    pl_gen_job_clear(&g);
    pl_model_destroy(&m);
    pl_job_spec_clear(&spec);
}

/* A text job with a stop string: the resumed text is whole and the stop falls where it fell. */
Test(resume_gen, text_and_stop_strings_resume_whole, .init = tg_setup, .fini = tg_teardown)
{
    js_ref_require(JS_LENML "/tokenizer-llama3/models");
    cr_assert_eq(tc_make_model(tg_dir, "t",
                               "--layers 3 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512 --tokenizer " JS_LENML
                               "/tokenizer-llama3/models"),
                 0);
    char model[320];
    snprintf(model, sizeof(model), "%s/t", tg_dir);
    json_t *gen = json_pack("{s:[[i,i,i],[i,i]], s:i, s:b, s:{s:f, s:s}}", "prompts", 128000, 9906,
                            11, 128000, 40, "max_new_tokens", 24, "stop_at_eos", 0, "sampling",
                            "temperature", 0.8, "seed", "5");
    pl_job_spec_t spec;
    s_spec(model, json_deep_copy(gen), 1, &spec);
    spec.text = true;
    snprintf(spec.gen.stop[0], sizeof(spec.gen.stop[0]), "%s", "");
    json_t *free_run = s_run(&spec, NULL, 0, NULL, 1);
    /* a stop string from the middle of sequence 0's text */
    const char *t0 = json_string_value(json_object_get(json_array_get(free_run, 0), "text"));
    cr_assert(t0 && strlen(t0) > 12, "text too short: %s", t0 ? t0 : "(null)");
    size_t at = strlen(t0) / 2;
    while (at > 0 && ((unsigned char)t0[at] & 0xC0) == 0x80)
        at--;
    size_t len = 2;
    while (((unsigned char)t0[at + len] & 0xC0) == 0x80)
        len++;
    spec.gen.n_stop = 1;
    snprintf(spec.gen.stop[0], sizeof(spec.gen.stop[0]), "%.*s", (int)len, t0 + at);
    json_t *full = s_run(&spec, NULL, 0, NULL, 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(full, 0), "finish")), "stop");
    for (int k = 0; k <= 24; k += 3) {
        int n;
        pl_msg_result_t *r = s_cut(full, k, &n);
        json_t *got = s_run(&spec, r, n, (int[]){1, 2}, 2);
        char what[64];
        snprintf(what, sizeof(what), "text job resumed after %d tokens", k);
        s_same(full, got, what);
        json_decref(got);
        pl_msg_results_free(r, n);
    }
    json_decref(free_run);
    json_decref(full);
    json_decref(gen);
    pl_job_spec_clear(&spec);
}

static pl_status_t s_decode_progress(const char *text, pl_msg_t *m)
{
    json_t *b = json_loads(text, 0, NULL);
    cr_assert_not_null(b, "%s", text);
    pl_status_t st = pl_msg_decode(PL_MSG_PROGRESS, b, m);
    json_decref(b);
    return st;
}

/* PROGRESS round-trips; every bound the coordinator relies on is the decoder's. */
Test(resume_gen, progress_messages_are_checked)
{
    pl_msg_t m;
    cr_assert_eq(s_decode_progress("{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":1,"
                                   "\"at\":3,\"tokens\":[5,6],\"finish\":\"eos\"}]}",
                                   &m),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(m.progress.n_seqs, 1);
    cr_assert_eq(m.progress.seqs[0].at, 3);
    cr_assert_eq(m.progress.seqs[0].tokens[1], 6);
    cr_assert_eq(m.progress.seqs[0].finish, PL_FINISH_EOS);
    json_t *enc;
    cr_assert_eq(pl_msg_encode(&m, &enc), PL_OK);
    char *s = json_dumps(enc, JSON_SORT_KEYS | JSON_COMPACT);
    cr_assert_str_eq(s, "{\"epoch\":9,\"job\":4,\"proto\":3,\"seqs\":[{\"at\":3,\"finish\":"
                        "\"eos\",\"seq\":1,\"tokens\":[5,6]}],\"stage\":2}");
    free(s);
    json_decref(enc);
    pl_msg_clear(&m);
    static const char *bad[] = {
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":1,\"at\":0,\"tokens\":[5],"
        "\"finish\":\"none\"},{\"seq\":1,\"at\":1,\"tokens\":[6],\"finish\":\"none\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":4096,\"at\":0,\"tokens\":[5],"
        "\"finish\":\"none\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":0,\"at\":65535,\"tokens\":[5,6],"
        "\"finish\":\"none\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":0,\"at\":0,\"tokens\":[],"
        "\"finish\":\"none\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":0,\"at\":0,\"tokens\":[-1],"
        "\"finish\":\"none\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":9,\"seqs\":[{\"seq\":0,\"at\":0,\"tokens\":[1],"
        "\"finish\":\"maybe\"}]}",
        "{\"job\":4,\"stage\":2,\"epoch\":0,\"seqs\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_neq(s_decode_progress(bad[i], &m), PL_OK, "accepted: %s", bad[i]);
}

/* The log a node reports from: what was taken is sent again until committed; a rewind sends
 * all again; the budget splits a long report; the finish rides with the last token. */
Test(resume_gen, progress_log_take_commit_rewind)
{
    pl_gen_log_t *log;
    pl_msg_gen_progress_t p;
    cr_assert_eq(pl_gen_log_create(3, &log), PL_OK);
    for (int t = 0; t < 5; t++)
        pl_gen_log_push(log, 0, 10 + t, t == 4 ? PL_FINISH_LENGTH : PL_FINISH_NONE);
    pl_gen_log_push(log, 2, 7, PL_FINISH_NONE);
    cr_assert_eq(pl_gen_log_take(log, 3, &p), PL_OK);
    cr_assert_eq(p.n_seqs, 1);
    cr_assert_eq(p.seqs[0].n_tokens, 3);
    cr_assert_eq(p.seqs[0].finish, PL_FINISH_NONE, "a finish before the last token");
    pl_msg_gen_progress_clear(&p);
    cr_assert_eq(pl_gen_log_take(log, 100, &p), PL_OK); /* nothing committed: the same again */
    cr_assert_eq(p.n_seqs, 2);
    cr_assert_eq(p.seqs[0].at, 0);
    cr_assert_eq(p.seqs[0].n_tokens, 5);
    cr_assert_eq(p.seqs[0].finish, PL_FINISH_LENGTH);
    cr_assert_eq(p.seqs[1].seq, 2);
    pl_gen_log_commit(log, &p);
    pl_msg_gen_progress_clear(&p);
    cr_assert_eq(pl_gen_log_take(log, 100, &p), PL_OK);
    cr_assert_eq(p.n_seqs, 0, "committed tokens reported again");
    pl_msg_gen_progress_clear(&p);
    pl_gen_log_rewind(log);
    cr_assert_eq(pl_gen_log_take(log, 100, &p), PL_OK);
    cr_assert_eq(p.n_seqs, 2);
    pl_msg_gen_progress_clear(&p);
    pl_gen_log_destroy(&log);
    cr_assert_null(log);
}

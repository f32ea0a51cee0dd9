/* Integration: text jobs (text and chat prompts, a model with a real tokenizer) through 2- and
 * 3-stage clusters of real processes give exactly the text of the single-process run; a stop
 * string ends a sequence where the unstopped run shows it; pipectl prints the text. */
#include "job_util.h"
#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>

static tc_cluster_t s_c;
static int s_passed;

/* The second line has a character Llama 3 spells as several byte tokens. */
static const char *s_prompts =
    "{\"text\": \"Once upon a time\"}\n"
    "{\"text\": \"x 龘 🦙 — ça\"}\n"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
    "{\"role\": \"user\", \"content\": \"Hi!\"}]}\n"
    "[128000, 9906, 11]\n";

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

static void s_start(int n)
{
    js_ref_require(JS_LENML "/tokenizer-llama3/models");
    cr_assert_eq(tc_cluster_start(&s_c, n, NULL), 0, "nodes did not register");
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, s_prompts);
    cr_assert_eq(tc_make_model(s_c.dir, "t",
                               "--layers 3 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512 --tokenizer " JS_LENML
                               "/tokenizer-llama3/models"),
                 0);
}

/* Submit job, wait, and return the results of job id as pipectl -o json gives them. */
static json_t *s_cluster_results(const char *job, int id, char **printed_p)
{
    int rc;
    char *printed = tc_submit(&s_c, job, &rc), *js;
    cr_assert_eq(rc, 0, "pipectl failed: %s", tc_err(&s_c, job));
    cr_assert_eq(tc_sh(&js, "%s/pipectl -c %s -o json results %d", tc_bin(), s_c.ep, id), 0);
    json_t *r = json_loads(js, 0, NULL);
    cr_assert_not_null(r, "%s", js);
    json_t *res = json_incref(json_object_get(r, "results"));
    json_decref(r);
    free(js);
    *printed_p = printed;
    return res;
}

static void s_same(json_t *ref, json_t *got, const char *what)
{
    cr_assert_eq(json_array_size(got), json_array_size(ref), "%s", what);
    for (size_t i = 0; i < json_array_size(ref); i++) {
        json_t *a = json_array_get(ref, i), *b = json_array_get(got, i);
        const char *ta = json_string_value(json_object_get(a, "text"));
        cr_assert_not_null(ta, "%s: reference seq %zu has no text", what, i);
        cr_assert_str_eq(json_string_value(json_object_get(b, "text")), ta, "%s seq %zu", what, i);
        cr_assert(json_equal(json_object_get(a, "tokens"), json_object_get(b, "tokens")),
                  "%s seq %zu: tokens differ", what, i);
        cr_assert_str_eq(json_string_value(json_object_get(b, "finish")),
                         json_string_value(json_object_get(a, "finish")));
    }
}

TestSuite(cluster_text, .fini = s_teardown, .timeout = 300);

Test(cluster_text, two_and_three_stages_give_the_single_process_text)
{
    char *ref_out, *printed3, *printed2;
    s_start(3);
    tc_job(&s_c, "t3", "t", "max_new_tokens: 12\n");
    tc_job(&s_c, "t2", "t", "max_new_tokens: 12\nstages: 2\nmicrobatches: 2\n");
    ref_out = tc_reference(&s_c, "t3");
    json_t *ref = tc_jsonl_array(ref_out);
    cr_assert_eq(json_array_size(ref), 4);
    json_t *got3 = s_cluster_results("t3", 1, &printed3);
    s_same(ref, got3, "3 stages");
    json_t *got2 = s_cluster_results("t2", 2, &printed2);
    s_same(ref, got2, "2 stages");
    /* pipectl prints the text of each sequence under a line naming it */
    for (size_t i = 0; i < 4; i++) {
        const char *t = json_string_value(json_object_get(json_array_get(ref, i), "text"));
        if (*t)
            cr_assert(strstr(printed3, t), "seq %zu's text not printed: %s", i, printed3);
    }
    cr_assert(strstr(printed3, "### seq 3 (length)"), "%s", printed3);
    json_decref(ref), json_decref(got3), json_decref(got2);
    free(ref_out), free(printed3), free(printed2);
    s_passed = 1;
}

Test(cluster_text, a_stop_string_ends_the_sequence_where_the_unstopped_run_shows_it)
{
    char *ref_out, *printed;
    s_start(2);
    tc_job(&s_c, "free", "t", "max_new_tokens: 16\n");
    ref_out = tc_reference(&s_c, "free");
    json_t *ref = tc_jsonl_array(ref_out);
    /* a stop string from the middle of sequence 0's free-running text: whole characters */
    const char *full = json_string_value(json_object_get(json_array_get(ref, 0), "text"));
    size_t len = strlen(full), a = len / 3, b;
    while (a < len && ((unsigned char)full[a] & 0xC0) == 0x80)
        a++;
    b = a + 1;
    while (b < len && (b - a < 3 || ((unsigned char)full[b] & 0xC0) == 0x80))
        b++;
    cr_assert_lt(a, len, "sequence 0 generated too little text: '%s'", full);
    char stop[64];
    snprintf(stop, sizeof(stop), "%.*s", (int)(b - a), full + a);
    const char *at = strstr(full, stop);
    size_t want = (size_t)(at - full);
    json_t *sj = json_pack("[s]", stop);
    char *stop_yaml = json_dumps(sj, JSON_COMPACT); /* JSON is YAML flow style */
    char extra[512];
    snprintf(extra, sizeof(extra), "max_new_tokens: 16\nstages: 2\nstop: %s\n", stop_yaml);
    tc_job(&s_c, "stopj", "t", extra);
    char *sref_out = tc_reference(&s_c, "stopj");
    json_t *sref = tc_jsonl_array(sref_out);
    json_t *s0 = json_array_get(sref, 0);
    cr_assert_str_eq(json_string_value(json_object_get(s0, "finish")), "stop", "%s", sref_out);
    const char *cut = json_string_value(json_object_get(s0, "text"));
    cr_assert_eq(strlen(cut), want, "stop '%s' in '%s': got '%s'", stop, full, cut);
    cr_assert(strncmp(cut, full, want) == 0);
    /* its tokens are a prefix of the free run's: generation stopped, nothing else changed */
    json_t *ft = json_object_get(json_array_get(ref, 0), "tokens"),
           *st = json_object_get(s0, "tokens");
    cr_assert_lt(json_array_size(st), json_array_size(ft));
    for (size_t i = 0; i < json_array_size(st); i++)
        cr_assert(json_equal(json_array_get(st, i), json_array_get(ft, i)));
    /* and the cluster agrees with the single process */
    json_t *got = s_cluster_results("stopj", 1, &printed);
    s_same(sref, got, "stop, 2 stages");
    json_decref(ref), json_decref(sref), json_decref(got), json_decref(sj);
    free(ref_out), free(sref_out), free(printed), free(stop_yaml);
    s_passed = 1;
}

Test(cluster_text, text_errors_are_named_and_the_cluster_keeps_running)
{
    int rc;
    s_start(2);
    char path[512];
    /* a model without tokenizer.json: a text line is an error naming the line */
    tc_sh(NULL, "mkdir -p %s/bare && cp %s/t/config.json %s/t/model.safetensors %s/bare/", s_c.dir,
          s_c.dir, s_c.dir, s_c.dir);
    tc_job(&s_c, "bare", "bare", "");
    char *out = tc_submit(&s_c, "bare", &rc), *err = tc_err(&s_c, "bare");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "prompts.jsonl:1: a text prompt needs the model's tokenizer"), "%s", err);
    free(out), free(err);
    tc_job(&s_c, "barestop", "bare", "stop: [\"x\"]\n");
    snprintf(path, sizeof(path), "%s/ids.jsonl", s_c.dir);
    tc_write(path, "[1, 2]\n");
    tc_sh(NULL, "sed -i 's/prompts.jsonl/ids.jsonl/' %s/barestop.yaml", s_c.dir);
    out = tc_submit(&s_c, "barestop", &rc), err = tc_err(&s_c, "barestop");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "field 'stop'") && strstr(err, "tokenizer"), "%s", err);
    free(out), free(err);
    /* two prompts on one line, invalid UTF-8, a prompt longer than the context */
    snprintf(path, sizeof(path), "%s/bad.jsonl", s_c.dir);
    tc_write(path, "[1, 2] [3]\n");
    tc_job(&s_c, "two", "t", "");
    tc_sh(NULL, "sed -i 's/prompts.jsonl/bad.jsonl/' %s/two.yaml", s_c.dir);
    out = tc_submit(&s_c, "two", &rc), err = tc_err(&s_c, "two");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "bad.jsonl:1"), "%s", err);
    free(out), free(err);
    tc_write(path, "{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n");
    out = tc_submit(&s_c, "two", &rc), err = tc_err(&s_c, "two");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "bad.jsonl:2"), "%s", err);
    free(out), free(err);
    tc_write(path, "{\"text\": \"ok\"}\n");
    tc_job(&s_c, "long", "t", "max_new_tokens: 512\n");
    tc_sh(NULL, "sed -i 's/prompts.jsonl/bad.jsonl/' %s/long.yaml", s_c.dir);
    out = tc_submit(&s_c, "long", &rc), err = tc_err(&s_c, "long");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "bad.jsonl:1") && strstr(err, "512 positions"), "%s", err);
    free(out), free(err);
    tc_job(&s_c, "fmt", "t", "chat_format: vicuna\n");
    out = tc_submit(&s_c, "fmt", &rc), err = tc_err(&s_c, "fmt");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "chat_format") && strstr(err, "chatml"), "%s", err);
    free(out), free(err);
    /* the cluster still runs a text job */
    tc_job(&s_c, "good", "t", "max_new_tokens: 3\n");
    out = tc_submit(&s_c, "good", &rc);
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "good"));
    free(out);
    s_passed = 1;
}

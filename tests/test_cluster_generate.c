/* Integration: `pipectl generate` on 2-stage clusters of real processes prints exactly the text
 * that the results and the single-process run give, streamed while the job runs (a character
 * split over byte tokens included), and refuses bad input with one line. */
#include "job_util.h"
#include "js_ref.h"
#include "model/tokenizer.h"

#include <criterion/criterion.h>
#include <jansson.h>

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

static void s_model(void)
{
    cr_assert_eq(tc_make_model(s_c.dir, "t",
                               "--layers 3 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512 --tokenizer " JS_LENML
                               "/tokenizer-llama3/models"),
                 0);
}

/* A coordinator and two daemons from node files: heartbeats every 100 ms (the stream's pace),
 * both slowed `slowdown` times (1: not), so that a job lasts many heartbeats. */
static void s_start(double slowdown)
{
    js_ref_require(JS_LENML "/tokenizer-llama3/models");
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_start_coord(&s_c, s_c.ep);
    for (int i = 0; i < 2; i++) {
        char path[512], text[512], cmd[1024], log[512];
        snprintf(path, sizeof(path), "%s/node%d.yaml", s_c.dir, i);
        snprintf(text, sizeof(text),
                 "name: node%d\ncoordinator: %s\nthreads: 1\nheartbeat_ms: 100\nslowdown: %g\n", i,
                 s_c.ep, slowdown);
        tc_write(path, text);
        snprintf(log, sizeof(log), "%s/node%d.log", s_c.dir, i);
        snprintf(cmd, sizeof(cmd), "exec %s/pipeld --config %s", tc_bin(), path);
        s_c.node[s_c.n_nodes++] = tc_spawn((char *[]){"/bin/sh", "-c", cmd, NULL}, log);
    }
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "nodes did not register");
    s_model();
}

/* The text of job id's only result, as `pipectl -o json results` gives it (caller frees). */
static char *s_result_text(int id, json_t **tokens_p)
{
    char *js;
    cr_assert_eq(tc_sh(&js, "%s/pipectl -c %s -o json results %d", tc_bin(), s_c.ep, id), 0);
    json_t *r = json_loads(js, 0, NULL);
    cr_assert_not_null(r, "%s", js);
    json_t *res = json_object_get(r, "results");
    cr_assert_eq(json_array_size(res), 1, "%s", js);
    const char *t = json_string_value(json_object_get(json_array_get(res, 0), "text"));
    cr_assert_not_null(t, "%s", js);
    char *text = strdup(t);
    if (tokens_p)
        *tokens_p = json_incref(json_object_get(json_array_get(res, 0), "tokens"));
    json_decref(r);
    free(js);
    return text;
}

/* How many stages job id ran on. */
static size_t s_stages(int id)
{
    char *js;
    cr_assert_eq(tc_sh(&js, "%s/pipectl -c %s -o json status %d", tc_bin(), s_c.ep, id), 0);
    json_t *r = json_loads(js, 0, NULL);
    cr_assert_not_null(r, "%s", js);
    size_t n = json_array_size(json_object_get(r, "stages"));
    json_decref(r);
    free(js);
    return n;
}

/* pl-generate's text for one prompts line with extra job keys. */
static char *s_reference_text(const char *name, const char *line, const char *extra)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.jsonl", s_c.dir, name);
    tc_write(path, line);
    tc_job(&s_c, name, "t", extra);
    tc_sh(NULL, "sed -i 's/prompts.jsonl/%s.jsonl/' %s/%s.yaml", name, s_c.dir, name);
    char *out = tc_reference(&s_c, name);
    json_t *v = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    cr_assert_not_null(v, "%s", out);
    char *text = strdup(json_string_value(json_object_get(v, "text")));
    json_decref(v);
    free(out);
    return text;
}

TestSuite(cluster_generate, .fini = s_teardown, .timeout = 300);

Test(cluster_generate, prints_the_text_of_the_results_and_of_the_single_process_run)
{
    char *out, *err;
    s_start(1);
    int rc = tc_sh(&out,
                   "%s/pipectl -c %s generate %s/t 'Once upon a time' --max-tokens 12 --stages 2 "
                   "2>%s/gen1.err",
                   tc_bin(), s_c.ep, s_c.dir, s_c.dir);
    cr_assert_eq(rc, 0, "%s", (tc_sh(&err, "cat %s/gen1.err", s_c.dir), err));
    cr_assert_eq(s_stages(1), 2);
    char *res = s_result_text(1, NULL);
    cr_assert_str_eq(out, res, "generate printed '%s', the results say '%s'", out, res);
    char *ref =
        s_reference_text("ref1", "{\"text\": \"Once upon a time\"}\n", "max_new_tokens: 12\n");
    cr_assert_str_eq(out, ref);
    cr_assert_gt(strlen(out), 0);
    free(out), free(res), free(ref);
    /* --chat: the prompt as a user message; --stop and --temperature pass through */
    rc = tc_sh(&out,
               "%s/pipectl -c %s generate %s/t 'Hi!' --chat --max-tokens 10 --temperature 0.8 "
               "--stages 2 --stop '<|never|>' 2>/dev/null",
               tc_bin(), s_c.ep, s_c.dir);
    cr_assert_eq(rc, 0);
    res = s_result_text(2, NULL);
    ref = s_reference_text("ref2", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}]}\n",
                           "max_new_tokens: 10\nsampling:\n  temperature: 0.8\n"
                           "stop: [\"<|never|>\"]\n");
    cr_assert_str_eq(out, res);
    cr_assert_str_eq(out, ref);
    free(out), free(res), free(ref);
    s_passed = 1;
}

/* Whether some token of `tokens` ends inside a character: decoding the ids up to it gives
 * what is not a prefix of the whole text (the incomplete character became U+FFFD). */
static bool s_splits_a_character(json_t *tokens, const char *text)
{
    char model[512];
    pl_tokenizer_t *tok;
    size_t n = json_array_size(tokens);
    int32_t *ids = calloc(n + 1, sizeof(int32_t));
    bool split = false;
    snprintf(model, sizeof(model), "%s/e", s_c.dir);
    cr_assert_eq(pl_tokenizer_load(model, &tok), PL_OK, "%s", pl_error_msg());
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(tokens, i));
    for (size_t i = 1; i < n && !split; i++) {
        char *pre;
        size_t len;
        cr_assert_eq(pl_tokenizer_decode(tok, ids, i, PL_TOK_SKIP_SPECIAL, &pre, &len), PL_OK);
        split = len > strlen(text) || memcmp(pre, text, len) != 0;
        free(pre);
    }
    pl_tokenizer_destroy(&tok);
    free(ids);
    return split;
}

static bool s_running(int id)
{
    char *st;
    tc_sh(&st, "%s/pipectl -c %s -o json status %d 2>/dev/null", tc_bin(), s_c.ep, id);
    bool running = strstr(st, "\"state\": \"running\"") != NULL;
    free(st);
    return running;
}

/* A model that spells a character across tokens on purpose: token 73596 of Llama 3 is the
 * bytes 92 E1 9E, so a run of it is U+1792 (E1 9E 92) again and again, each split over two
 * tokens. Its output head is the embedding (a token predicts itself: the residual stream keeps
 * the input's embedding over two small random layers), with 73596's row made 2 (e_240 +
 * e_73596): after 240 (the byte 92, where the prompt "ធធធ" ends) and after itself, 73596 wins. */
static void s_echo_model(void)
{
    char path[512], *hdr;
    uint64_t n;
    cr_assert_eq(tc_make_model(s_c.dir, "e",
                               "--layers 2 --hidden 64 --intermediate 128 --heads 4 "
                               "--kv-heads 2 --seed 11 --max-pos 512 --tokenizer " JS_LENML
                               "/tokenizer-llama3/models"),
                 0);
    snprintf(path, sizeof(path), "%s/e/model.safetensors", s_c.dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fread(&n, 8, 1, f), 1);
    cr_assert_not_null(hdr = calloc(1, n + 1));
    cr_assert_eq(fread(hdr, 1, n, f), n);
    json_t *h = json_loads(hdr, 0, NULL);
    cr_assert_not_null(h);
    json_t *eo = json_object_get(json_object_get(h, "model.embed_tokens.weight"), "data_offsets");
    json_t *lo = json_object_get(json_object_get(h, "lm_head.weight"), "data_offsets");
    const int dim = 64;
    size_t bytes = (size_t)(json_integer_value(json_array_get(eo, 1)) -
                            json_integer_value(json_array_get(eo, 0)));
    cr_assert_eq(bytes, (size_t)128256 * dim * sizeof(float));
    float *w = malloc(bytes);
    cr_assert_eq(fseek(f, (long)(8 + n + json_integer_value(json_array_get(eo, 0))), SEEK_SET), 0);
    cr_assert_eq(fread(w, 1, bytes, f), bytes);
    for (int i = 0; i < dim; i++)
        w[73596 * dim + i] = 2 * (w[240 * dim + i] + w[73596 * dim + i]);
    cr_assert_eq(fseek(f, (long)(8 + n + json_integer_value(json_array_get(lo, 0))), SEEK_SET), 0);
    cr_assert_eq(fwrite(w, 1, bytes, f), bytes);
    fclose(f);
    free(w);
    json_decref(h);
    free(hdr);
}

Test(cluster_generate, streams_while_running_and_the_pieces_make_the_final_text)
{
    s_start(20);
    s_echo_model();
    char cmd[1024], buf[4096], *all = calloc(1, 1 << 20);
    size_t len = 0;
    int reads_running = 0;
    snprintf(cmd, sizeof(cmd),
             "%s/pipectl -c %s generate %s/e 'ធធធ' --max-tokens 48 --stages 2 2>%s/gen.err",
             tc_bin(), s_c.ep, s_c.dir, s_c.dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    ssize_t n;
    while ((n = read(fileno(p), buf, sizeof(buf))) > 0) {
        cr_assert_lt(len + (size_t)n, (size_t)1 << 20);
        memcpy(all + len, buf, (size_t)n);
        len += (size_t)n;
        /* a piece that came while the job still ran was streamed, not printed at the end */
        if (s_running(1))
            reads_running++;
    }
    int rc = pclose(p);
    char *err;
    tc_sh(&err, "cat %s/gen.err", s_c.dir);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(s_stages(1), 2);
    json_t *tokens;
    char *res = s_result_text(1, &tokens);
    cr_assert_eq(len, strlen(res));
    cr_assert(memcmp(all, res, len) == 0, "streamed '%s', the results say '%s'", all, res);
    cr_assert_geq(reads_running, 2, "only %d reads while the job ran; stderr: %s", reads_running,
                  err);
    cr_assert(s_splits_a_character(tokens, res), "no character of '%s' spans two tokens", res);
    cr_assert(strstr(res, "ធធធ"), "%s", res);
    json_decref(tokens);
    free(all), free(res), free(err);
    /* Ctrl-C while it streams cancels the job: the interrupt comes once the job runs, however
     * long pipectl took to get there (its tokenizer under the sanitizers, a loaded machine) */
    rc = tc_sh(NULL,
               "%s/pipectl -c %s generate %s/e 'ធធធ' --max-tokens 400 --stages 2 >/dev/null "
               "2>%s/int.err & pid=$!; for i in $(seq 1200); do %s/pipectl -c %s -o json status 2 "
               "2>/dev/null | grep -q '\"state\": \"running\"' && break; sleep 0.1; done; "
               "kill -INT $pid; wait $pid",
               tc_bin(), s_c.ep, s_c.dir, s_c.dir, tc_bin(), s_c.ep);
    tc_sh(&err, "cat %s/int.err", s_c.dir);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert(strstr(err, "job 2 canceled (interrupted)"), "%s", err);
    char *st;
    tc_sh(&st, "%s/pipectl -c %s -o json status 2", tc_bin(), s_c.ep);
    cr_assert(strstr(st, "\"state\": \"canceled\""), "%s", st);
    free(err), free(st);
    s_passed = 1;
}

Test(cluster_generate, bad_input_is_one_line_and_exit_1_or_2)
{
    char *out, *err;
    s_start(1);
    tc_sh(NULL, "mkdir -p %s/bare && cp %s/t/config.json %s/t/model.safetensors %s/bare/", s_c.dir,
          s_c.dir, s_c.dir, s_c.dir);
    struct {
        const char *args, *want;
        int rc; /* 2: a usage error (an option's value), 1: a refused request */
    } cases[] = {
        {"%s/bare 'hello'", "a text prompt needs the model's tokenizer", 1},
        {"%s/t ''", "the prompt is empty", 1},
        {"%s/t 'hi' --max-tokens 0", "max_new_tokens", 1},
        {"%s/t 'hi' --max-tokens many", "--max-tokens: 'many' is not a whole number", 2},
        {"%s/t 'hi' --stop ''", "stop[0]", 1},
        {"%s/nowhere 'hi'", "does not exist", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[1024];
        snprintf(args, sizeof(args), cases[i].args, s_c.dir);
        int rc = tc_sh(&out, "%s/pipectl -c %s generate %s 2>%s/bad.err", tc_bin(), s_c.ep, args,
                       s_c.dir);
        tc_sh(&err, "cat %s/bad.err", s_c.dir);
        cr_assert_eq(rc, cases[i].rc, "%s: exit %d", args, rc);
        cr_assert_str_eq(out, "", "%s", args);
        cr_assert(strstr(err, cases[i].want), "%s: %s", args, err);
        cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "%s: not one line: %s", args, err);
        free(out), free(err);
    }
    /* the options are generate's only */
    int rc = tc_sh(NULL, "%s/pipectl -c %s nodes --chat 2>/dev/null", tc_bin(), s_c.ep);
    cr_assert_neq(rc, 0);
    /* nothing was submitted, and the cluster still generates */
    rc = tc_sh(&out, "%s/pipectl -c %s generate %s/t 'ok' --max-tokens 3 2>/dev/null", tc_bin(),
               s_c.ep, s_c.dir);
    cr_assert_eq(rc, 0);
    char *res = s_result_text(1, NULL);
    cr_assert_str_eq(out, res);
    free(out), free(res);
    s_passed = 1;
}

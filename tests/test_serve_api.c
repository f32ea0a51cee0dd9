/* The OpenAI API on a real HTTP server over a serving hub whose loop side is a responder thread
 * here: it answers every request with the token ids the independent tokenizer reference gives for
 * a known reply, a token at a time, so the official openai client, curl's raw SSE bytes, every
 * error status and body, cancellation by a client that leaves, a full hub and 32 concurrent
 * streams are checked against numbers computed outside pipeld. */
#include "daemon/serve_api.h"
#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MODEL_DIR JS_LENML "/tokenizer-llama3/models"
/* ASCII with a two-byte and a four-byte character, which the pieces split mid-character */
#define S_REPLY "Pipelines keep every stage busy: caf\xc3\xa9 \xf0\x9f\x9a\x80 and onwards."
#define S_SLOW_SEED 777 /* the responder streams without end until canceled */

/* ---- the responder: the coordinator's loop played here ---- */

typedef struct {
    pl_serve_hub_t *hub;
    atomic_bool stop, paused;
    pthread_t thread;
    int32_t reply_ids[256];
    int n_reply;
    atomic_int canceled, taken, max_live;
    int32_t last_prompt[4096];
    atomic_int n_last_prompt;
} s_resp_t;

static s_resp_t s_r;
static atomic_int s_step_us = 3000;

typedef struct {
    pl_serve_req_t *r;
    int step;
} s_live_t;

/* Bytes of the reply that go with tokens [0, k): proportional, so a character may split. */
static size_t s_reply_at(int k, int n)
{
    return strlen(S_REPLY) * (size_t)k / (size_t)n;
}

static void *s_responder(void *arg)
{
    s_resp_t *s = arg;
    s_live_t live[256];
    int n_live = 0;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = pl_serve_hub_fd(s->hub), .events = POLLIN};
        poll(&p, 1, n_live ? 0 : 20);
        pl_serve_req_t *r;
        while (!atomic_load(&s->paused) && n_live < 256 && (r = pl_serve_hub_take(s->hub))) {
            const pl_serve_in_t *in = pl_serve_req_input(r);
            atomic_fetch_add(&s->taken, 1);
            int n = in->n_prompt < 4096 ? in->n_prompt : 4096;
            memcpy(s->last_prompt, in->prompt, (size_t)n * sizeof(int32_t));
            atomic_store(&s->n_last_prompt, n);
            pl_serve_end_t end = {.finish = PL_SERVE_REFUSED};
            if (!strcmp(in->deployment, "busy")) {
                end.http_status = 429;
                end.retry_after_s = 2.5;
                snprintf(end.message, sizeof(end.message), "every slot is taken; retry");
            } else if (!strcmp(in->deployment, "broken")) {
                end.http_status = 503;
                snprintf(end.message, sizeof(end.message), "its stages are lost");
            } else {
                live[n_live++] = (s_live_t){.r = r};
                continue;
            }
            pl_serve_req_end(r, &end);
            pl_serve_req_unref(&r);
        }
        if (n_live > atomic_load(&s->max_live))
            atomic_store(&s->max_live, n_live);
        for (int i = 0; i < n_live; i++) { /* one token to every live request, as a step does */
            s_live_t *l = &live[i];
            const pl_serve_in_t *in = pl_serve_req_input(l->r);
            bool slow = in->gen.seed == S_SLOW_SEED, gone = pl_serve_req_canceled(l->r);
            int max = in->gen.max_new_tokens, k = l->step;
            pl_serve_end_t end = {.finish = PL_SERVE_RUNNING};
            if (gone) {
                atomic_fetch_add(&s->canceled, 1);
                end.finish = PL_SERVE_CANCELED;
            } else {
                int id = s->reply_ids[k % s->n_reply];
                size_t a = s_reply_at(k % s->n_reply, s->n_reply);
                size_t b = s_reply_at(k % s->n_reply + 1, s->n_reply);
                pl_serve_req_push(l->r, &id, 1, S_REPLY + a, b - a);
                l->step++;
                if (!slow && l->step == max)
                    end.finish = PL_SERVE_LENGTH;
                else if (!slow && l->step == s->n_reply)
                    end.finish = PL_SERVE_STOP;
            }
            if (end.finish != PL_SERVE_RUNNING) {
                pl_serve_req_end(l->r, &end);
                pl_serve_req_unref(&l->r);
                live[i--] = live[--n_live];
            }
        }
        usleep((useconds_t)atomic_load(&s_step_us));
    }
    for (int i = 0; i < n_live; i++)
        pl_serve_req_unref(&live[i].r);
    return NULL;
}

/* ---- the server under test ---- */

typedef struct {
    pl_serve_hub_t *hub;
    pl_serve_api_t *api;
    pl_http_t *http;
    int port;
    char base[64];
} s_srv_t;

static s_srv_t s_srv;

/* The reply's ids from the reference tokenizer (not pipeld's). */
static void s_reply_ids(void)
{
    json_t *in = json_pack("[s]", S_REPLY);
    json_t *out = js_ref_run("tokenize.mjs", S_MODEL_DIR, in);
    json_t *ids = json_object_get(json_array_get(out, 0), "ids");
    s_r.n_reply = (int)json_array_size(ids);
    cr_assert(s_r.n_reply > 8 && s_r.n_reply < 256);
    for (int i = 0; i < s_r.n_reply; i++)
        s_r.reply_ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    json_decref(in);
    json_decref(out);
}

static void s_start(const pl_cfg_http_t *cfg, bool responder)
{
    js_ref_require(S_MODEL_DIR);
    if (access(JS_DIR "/node_modules/openai/package.json", R_OK) != 0 ||
        system("curl --version >/dev/null 2>&1") != 0) {
        if (getenv("CI") && !strcmp(getenv("CI"), "true"))
            cr_assert_fail("the openai package or curl is missing (tools/setup.sh installs them)");
        cr_skip_test("the openai npm package or curl is missing: run tools/setup.sh");
    }
    s_reply_ids();
    cr_assert_eq(pl_serve_hub_create(&s_srv.hub), PL_OK);
    pl_serve_deployment_t deps[4] = {
        {.name = "tiny", .created = 1700000000, .context = 512, .ready = true},
        {.name = "busy", .created = 1700000001, .context = 512, .ready = true},
        {.name = "broken", .created = 1700000002, .context = 512, .ready = true},
        {.name = "loading", .created = 1700000003, .context = 512, .ready = false},
    };
    for (int i = 0; i < 4; i++)
        snprintf(deps[i].model, sizeof(deps[i].model), "%s", S_MODEL_DIR);
    deps[0].max_tokens = 300;
    pl_serve_hub_publish(s_srv.hub, deps, 4);
    pl_cfg_http_t none = {0};
    cr_assert_eq(pl_serve_api_new(cfg ? cfg : &none, s_srv.hub, &s_srv.api), PL_OK, "%s",
                 pl_error_msg());
    pl_http_route_t routes[PL_SERVE_API_N_ROUTES];
    int n = pl_serve_api_routes(s_srv.api, routes);
    pl_http_params_t p = {.address = "127.0.0.1", .max_body = 64 * 1024, .max_conns = 80};
    cr_assert_eq(pl_http_start(&p, routes, n, &s_srv.http), PL_OK, "%s", pl_error_msg());
    s_srv.port = pl_http_port(s_srv.http);
    snprintf(s_srv.base, sizeof(s_srv.base), "http://127.0.0.1:%d/v1", s_srv.port);
    s_r.hub = s_srv.hub;
    if (responder)
        pthread_create(&s_r.thread, NULL, s_responder, &s_r);
}

static void s_stop(bool responder)
{
    pl_http_stop(&s_srv.http);
    if (responder) {
        atomic_store(&s_r.stop, true);
        pthread_join(s_r.thread, NULL);
    }
    pl_serve_api_destroy(&s_srv.api);
    pl_serve_hub_destroy(&s_srv.hub);
}

/* ---- curl ---- */

typedef struct {
    int status;
    char *head; /* the response headers */
    char *body;
    json_t *json; /* the body parsed, when it is JSON */
} s_ans_t;

static void s_ans_free(s_ans_t *a)
{
    free(a->head);
    free(a->body);
    json_decref(a->json);
    memset(a, 0, sizeof(*a));
}

/* curl METHOD PATH with a body (NULL: none) from a file and extra arguments. */
static s_ans_t s_curl(const char *method, const char *path, const char *body, const char *extra)
{
    char bfile[] = "/tmp/pl_sapi_body_XXXXXX", hfile[] = "/tmp/pl_sapi_head_XXXXXX";
    char ofile[] = "/tmp/pl_sapi_out_XXXXXX", cmd[2048];
    int fb = mkstemp(bfile), fh = mkstemp(hfile), fo = mkstemp(ofile);
    cr_assert(fb >= 0 && fh >= 0 && fo >= 0);
    if (body)
        cr_assert_eq(write(fb, body, strlen(body)), (ssize_t)strlen(body));
    close(fb);
    close(fh);
    close(fo);
    snprintf(cmd, sizeof(cmd),
             "curl -sS -N -X %s -o '%s' -D '%s' -w '%%{http_code}' %s%s%s "
             "-H 'Content-Type: application/json' 'http://127.0.0.1:%d%s'",
             method, ofile, hfile, body ? "--data-binary '@" : "", body ? bfile : "",
             body ? "'" : "", s_srv.port, path);
    char full[2300];
    snprintf(full, sizeof(full), "%s %s", cmd, extra ? extra : "");
    FILE *f = popen(full, "r");
    s_ans_t a = {0};
    cr_assert(f);
    if (fscanf(f, "%d", &a.status) != 1)
        a.status = -1;
    pclose(f);
    size_t len;
    cr_assert_eq(pl_file_read(hfile, 1 << 20, &a.head, &len), PL_OK);
    cr_assert_eq(pl_file_read(ofile, 64 << 20, &a.body, &len), PL_OK);
    a.json = json_loadb(a.body, len, 0, NULL);
    unlink(bfile);
    unlink(hfile);
    unlink(ofile);
    return a;
}

static const char *s_err_field(const s_ans_t *a, const char *key)
{
    return json_string_value(json_object_get(json_object_get(a->json, "error"), key));
}

/* ---- tests ---- */

Test(serve_api, the_openai_client_lists_completes_chats_and_streams)
{
    s_start(NULL, true);
    json_t *in = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}], s:i, s:i}", "base_url",
        s_srv.base, "api_key", "", "model", "tiny", "model_dir", S_MODEL_DIR, "prompt",
        "Once upon a time", "messages", "role", "system", "content", "Be brief.", "role", "user",
        "content", "What keeps a pipeline busy?", "max_tokens", 200, "seed", 5);
    json_t *out = js_ref_run("serve_openai.mjs", "-", in);
    char *dump = json_dumps(out, JSON_COMPACT);
    json_t *ref = json_object_get(out, "ref");

    json_t *models = json_object_get(out, "models");
    cr_assert_eq(json_array_size(models), 4, "%s", dump);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(models, 0), "id")), "tiny");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(models, 0), "object")),
                     "model");

    json_t *c = json_object_get(out, "completion");
    cr_assert_str_eq(json_string_value(json_object_get(c, "object")), "text_completion", "%s",
                     dump);
    cr_assert_str_eq(json_string_value(json_object_get(c, "text")), S_REPLY, "%s", dump);
    cr_assert_str_eq(json_string_value(json_object_get(c, "finish")), "stop");
    cr_assert(!strncmp(json_string_value(json_object_get(c, "id")), "cmpl-", 5));
    json_t *u = json_object_get(c, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "completion_tokens")), s_r.n_reply);
    cr_assert_eq(json_integer_value(json_object_get(u, "prompt_tokens")),
                 json_integer_value(json_object_get(ref, "completion_prompt_tokens")), "%s", dump);
    cr_assert_eq(json_integer_value(json_object_get(u, "total_tokens")),
                 json_integer_value(json_object_get(u, "prompt_tokens")) + s_r.n_reply);

    json_t *ch = json_object_get(out, "chat");
    cr_assert_str_eq(json_string_value(json_object_get(ch, "object")), "chat.completion");
    cr_assert_str_eq(json_string_value(json_object_get(ch, "role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(ch, "text")), S_REPLY);
    u = json_object_get(ch, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "prompt_tokens")),
                 json_integer_value(json_object_get(ref, "chat_prompt_tokens")), "%s", dump);
    cr_assert_eq(json_integer_value(json_object_get(u, "completion_tokens")), s_r.n_reply);

    json_t *sc = json_object_get(out, "stream_chat");
    cr_assert_str_eq(json_string_value(json_object_get(sc, "text")),
                     json_string_value(json_object_get(ch, "text")),
                     "the streamed text differs from the whole answer");
    cr_assert_str_eq(json_string_value(json_object_get(sc, "first_role")), "assistant");
    cr_assert_str_eq(json_string_value(json_object_get(sc, "finish")), "stop");
    cr_assert_gt(json_integer_value(json_object_get(sc, "chunks")), 4, "%s", dump);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(sc, "objects"), 0)),
                     "chat.completion.chunk");
    u = json_object_get(sc, "usage");
    cr_assert_eq(json_integer_value(json_object_get(u, "prompt_tokens")),
                 json_integer_value(json_object_get(ref, "chat_prompt_tokens")));
    cr_assert_eq(json_integer_value(json_object_get(u, "completion_tokens")), s_r.n_reply);

    json_t *scomp = json_object_get(out, "stream_completion");
    cr_assert_str_eq(json_string_value(json_object_get(scomp, "text")), S_REPLY);
    cr_assert_str_eq(json_string_value(json_object_get(scomp, "finish")), "stop");
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(scomp, "objects"), 0)),
                     "text_completion");

    json_t *um = json_object_get(out, "unknown_model");
    cr_assert_eq(json_integer_value(json_object_get(um, "status")), 404, "%s", dump);
    cr_assert_str_eq(json_string_value(json_object_get(um, "code")), "model_not_found");
    free(dump);
    json_decref(in);
    json_decref(out);
    s_stop(true);
}

/* The prompt the responder was handed is the reference's ids for the same text. */
Test(serve_api, prompt_ids_are_the_reference_tokenizers)
{
    s_start(NULL, true);
    const char *text = "Ni\xc3\xb1os <|eot_id|> y ni\xc3\xb1" "as, 42!";
    json_t *in = json_pack("[s]", text), *ref = js_ref_run("tokenize.mjs", S_MODEL_DIR, in);
    json_t *ids = json_object_get(json_array_get(ref, 0), "ids");
    json_t *body = json_pack("{s:s, s:s, s:i}", "model", "tiny", "prompt", text, "max_tokens", 3);
    char *b = json_dumps(body, 0);
    s_ans_t a = s_curl("POST", "/v1/completions", b, NULL);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert_eq(atomic_load(&s_r.n_last_prompt), (int)json_array_size(ids));
    for (size_t i = 0; i < json_array_size(ids); i++)
        cr_assert_eq(s_r.last_prompt[i], json_integer_value(json_array_get(ids, i)), "id %zu", i);
    json_t *choice = json_array_get(json_object_get(a.json, "choices"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "length");
    cr_assert_eq(json_integer_value(
                     json_object_get(json_object_get(a.json, "usage"), "completion_tokens")),
                 3);
    s_ans_free(&a);
    /* token ids go through as they are */
    a = s_curl("POST", "/v1/completions",
               "{\"model\":\"tiny\",\"prompt\":[1,2,3,128000],\"max_tokens\":2}", NULL);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert_eq(atomic_load(&s_r.n_last_prompt), 4);
    cr_assert(s_r.last_prompt[0] == 1 && s_r.last_prompt[3] == 128000);
    s_ans_free(&a);
    free(b);
    json_decref(body);
    json_decref(in);
    json_decref(ref);
    s_stop(true);
}

Test(serve_api, raw_sse_framing)
{
    s_start(NULL, true);
    s_ans_t a = s_curl("POST", "/v1/chat/completions",
                       "{\"model\":\"tiny\",\"stream\":true,\"stream_options\":{\"include_usage\":"
                       "true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                       NULL);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert(strcasestr(a.head, "\r\ncontent-type: text/event-stream"), "%s", a.head);
    cr_assert(strcasestr(a.head, "\r\ncache-control: no-cache"), "%s", a.head);
    /* every event is "data: {json}\n\n" and the last is [DONE] */
    const char *p = a.body, *end = a.body + strlen(a.body);
    int n = 0, n_usage = 0;
    bool role_first = false, finish_seen = false, done = false;
    char text[1024] = "";
    while (p < end) {
        cr_assert(!done, "bytes after [DONE]: %s", p);
        cr_assert(!strncmp(p, "data: ", 6), "event %d: %.80s", n, p);
        const char *e = strstr(p, "\n\n");
        cr_assert_not_null(e, "event %d not ended by a blank line", n);
        if (!strncmp(p + 6, "[DONE]", 6) && e == p + 12) {
            done = true;
            p = e + 2;
            continue;
        }
        json_t *ev = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        cr_assert_not_null(ev, "event %d: %.*s", n, (int)(e - p), p);
        cr_assert_str_eq(json_string_value(json_object_get(ev, "object")),
                         "chat.completion.chunk");
        cr_assert(json_object_get(ev, "id") && json_object_get(ev, "created"));
        cr_assert_str_eq(json_string_value(json_object_get(ev, "model")), "tiny");
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        if (n == 0)
            role_first =
                json_is_string(json_object_get(delta, "role")) &&
                !strcmp(json_string_value(json_object_get(delta, "role")), "assistant");
        if (json_is_string(json_object_get(delta, "content")))
            strncat(text, json_string_value(json_object_get(delta, "content")),
                    sizeof(text) - strlen(text) - 1);
        if (json_is_string(json_object_get(ch, "finish_reason"))) {
            cr_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
            finish_seen = true;
        }
        if (json_is_object(json_object_get(ev, "usage"))) {
            cr_assert(finish_seen, "usage before the finish chunk: %s", a.body);
            cr_assert_eq(json_array_size(json_object_get(ev, "choices")), 0);
            n_usage++;
        } else {
            cr_assert(json_is_null(json_object_get(ev, "usage")), "include_usage: usage null");
        }
        json_decref(ev);
        n++;
        p = e + 2;
    }
    cr_assert(role_first && finish_seen && done && n_usage == 1);
    cr_assert_str_eq(text, S_REPLY);
    s_ans_free(&a);
    /* completions stream text_completion chunks, no role */
    a = s_curl("POST", "/v1/completions", "{\"model\":\"tiny\",\"stream\":true,\"prompt\":\"x\"}",
               NULL);
    cr_assert_eq(a.status, 200);
    cr_assert(!strncmp(a.body, "data: {", 7) && strstr(a.body, "\"object\":\"text_completion\""));
    cr_assert_null(strstr(a.body, "\"role\""));
    cr_assert(strlen(a.body) > 14 && !strcmp(a.body + strlen(a.body) - 14, "data: [DONE]\n\n"));
    s_ans_free(&a);
    s_stop(true);
}

typedef struct {
    const char *method, *path, *body, *extra;
    int status;
    const char *param, *code, *header; /* NULL: not checked */
} s_bad_t;

Test(serve_api, errors_have_their_status_and_openai_body_and_the_server_keeps_serving)
{
    s_start(NULL, true);
    static const s_bad_t cases[] = {
        {"POST", "/v1/chat/completions", "{\"model\":", NULL, 400, NULL, NULL, NULL},
        {"POST", "/v1/chat/completions", "[1, 2]", NULL, 400, NULL, NULL, NULL},
        {"POST", "/v1/chat/completions", "", NULL, 400, NULL, NULL, NULL},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"tiny\",\"temperature\":\"hot\",\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         NULL, 400, "temperature", NULL, NULL},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"tiny\",\"top_p\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         NULL, 400, "top_p", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":0}", NULL,
         400, "max_tokens", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":2.5}",
         NULL, 400, "max_tokens", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":7,\"prompt\":\"x\"}", NULL, 400, "model", NULL,
         NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":{}}", NULL, 400, "prompt",
         NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":[1,-2]}", NULL, 400, "prompt",
         NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":[999999999]}", NULL, 400,
         "prompt", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\"}", NULL, 400, "prompt", NULL, NULL},
        {"POST", "/v1/chat/completions", "{\"model\":\"tiny\",\"messages\":[]}", NULL, 400,
         "messages", NULL, NULL},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"tiny\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", NULL, 400,
         "messages[0]", NULL, NULL},
        {"POST", "/v1/chat/completions", "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\"}]}",
         NULL, 400, "messages[0]", NULL, NULL},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"tiny\",\"frobnicate\":1,\"messages\":[{\"role\":\"user\",\"content\":"
         "\"x\"}]}",
         NULL, 400, "frobnicate", NULL, NULL},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"tiny\",\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL,
         400, "n", "unsupported_parameter", NULL},
        {"POST", "/v1/completions",
         "{\"model\":\"tiny\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\","
         "\"g\",\"h\",\"i\"]}",
         NULL, 400, "stop", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\",\"stop\":[\"\"]}", NULL,
         400, "stop", NULL, NULL},
        {"POST", "/v1/completions",
         "{\"model\":\"tiny\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", NULL,
         400, "stream_options", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":1000}",
         NULL, 400, "max_tokens", "context_length_exceeded", NULL},
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":400}",
         NULL, 400, "max_tokens", NULL, NULL},
        {"POST", "/v1/completions", "{\"model\":\"nope\",\"prompt\":\"x\"}", NULL, 404, "model",
         "model_not_found", NULL},
        {"POST", "/v1/completions", "{\"model\":\"loading\",\"prompt\":\"x\"}", NULL, 503, "model",
         NULL, "retry-after: 5"},
        {"POST", "/v1/completions", "{\"model\":\"busy\",\"prompt\":\"x\"}", NULL, 429, NULL,
         "rate_limit_exceeded", "retry-after: 3"},
        {"POST", "/v1/chat/completions",
         "{\"model\":\"busy\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}"
         "]}",
         NULL, 429, NULL, "rate_limit_exceeded", "retry-after: 3"},
        {"POST", "/v1/completions", "{\"model\":\"broken\",\"prompt\":\"x\"}", NULL, 503, NULL,
         NULL, NULL},
        {"GET", "/v1/chat/completions", NULL, NULL, 405, NULL, NULL, "allow: POST"},
        {"GET", "/v1/nothing", NULL, NULL, 404, NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const s_bad_t *c = &cases[i];
        s_ans_t a = s_curl(c->method, c->path, c->body, c->extra);
        cr_assert_eq(a.status, c->status, "case %zu (%s): %d %s", i, c->body ? c->body : c->path,
                     a.status, a.body);
        if (c->status != 405 && !(c->status == 404 && !c->code)) {
            cr_assert_not_null(a.json, "case %zu: not JSON: %s", i, a.body);
            cr_assert(s_err_field(&a, "message") && s_err_field(&a, "type"), "case %zu: %s", i,
                      a.body);
            cr_assert_eq(json_object_size(json_object_get(a.json, "error")), 4, "%s", a.body);
        }
        if (c->param)
            cr_assert(s_err_field(&a, "param") && strstr(s_err_field(&a, "param"), c->param),
                      "case %zu: param: %s", i, a.body);
        if (c->code)
            cr_assert(s_err_field(&a, "code") && !strcmp(s_err_field(&a, "code"), c->code),
                      "case %zu: code: %s", i, a.body);
        if (c->header)
            cr_assert(strcasestr(a.head, c->header), "case %zu: no '%s' in %s", i, c->header,
                      a.head);
        s_ans_free(&a);
    }
    /* a 10 MB body: a 400 with a message, not a cut connection */
    size_t big = 10u << 20;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    memcpy(body, "{\"model\":\"tiny\",\"prompt\":\"", 26);
    memset(body + 26, 'a', big - 30);
    memcpy(body + big - 4, "\"}  ", 4);
    body[big] = '\0';
    s_ans_t a = s_curl("POST", "/v1/completions", body, NULL);
    cr_assert_eq(a.status, 400, "%d %.300s", a.status, a.body);
    cr_assert_str_eq(s_err_field(&a, "code"), "request_too_large");
    s_ans_free(&a);
    free(body);
    /* and it still serves */
    a = s_curl("POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\"}", NULL);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert_eq(atomic_load(&s_r.canceled), 0);
    s_ans_free(&a);
    s_stop(true);
}

Test(serve_api, bearer_tokens)
{
    static pl_cfg_http_t cfg;
    cfg.n_api_keys = 2;
    strcpy(cfg.api_keys[0], "sk-test-1");
    strcpy(cfg.api_keys[1], "sk-test-2");
    s_start(&cfg, true);
    s_ans_t a = s_curl("GET", "/v1/models", NULL, NULL);
    cr_assert_eq(a.status, 401, "%s", a.body);
    cr_assert_str_eq(s_err_field(&a, "code"), "missing_api_key");
    cr_assert(strcasestr(a.head, "\r\nwww-authenticate: Bearer"), "%s", a.head);
    s_ans_free(&a);
    a = s_curl("POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"x\"}",
               "-H 'Authorization: Bearer sk-test-3'");
    cr_assert_eq(a.status, 401);
    cr_assert_str_eq(s_err_field(&a, "code"), "invalid_api_key");
    s_ans_free(&a);
    a = s_curl("GET", "/v1/models", NULL, "-H 'Authorization: Bearer sk-test-1x'");
    cr_assert_eq(a.status, 401);
    s_ans_free(&a);
    a = s_curl("GET", "/v1/models", NULL, "-H 'Authorization: Bearer sk-test-2'");
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert_str_eq(json_string_value(json_object_get(a.json, "object")), "list");
    s_ans_free(&a);
    s_stop(true);

    /* a keys file: 0600 only, errors name the file and line but never a key */
    char path[] = "/tmp/pl_sapi_keys_XXXXXX";
    int fd = mkstemp(path);
    const char *text = "# the API's keys\n\n  sk-file-1  \nsk-file-2\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    pl_cfg_http_t fc = {0};
    snprintf(fc.api_keys_file, sizeof(fc.api_keys_file), "%s", path);
    pl_serve_api_t *api = NULL;
    chmod(path, 0644);
    cr_assert_eq(pl_serve_api_new(&fc, s_srv.hub, &api), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), path) && strstr(pl_error_msg(), "0600"), "%s",
              pl_error_msg());
    chmod(path, 0600);
    cr_assert_eq(pl_serve_api_new(&fc, s_srv.hub, &api), PL_OK, "%s", pl_error_msg());
    pl_serve_api_destroy(&api);
    FILE *f = fopen(path, "a");
    fputs("sk bad key with spaces\n", f);
    fclose(f);
    cr_assert_eq(pl_serve_api_new(&fc, s_srv.hub, &api), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), ":5:"), "%s", pl_error_msg());
    cr_assert_null(strstr(pl_error_msg(), "sk"), "a key in the message: %s", pl_error_msg());
    unlink(path);
    snprintf(fc.api_keys_file, sizeof(fc.api_keys_file), "/nonexistent/keys");
    cr_assert_eq(pl_serve_api_new(&fc, s_srv.hub, &api), PL_ERR_IO);
}

static void s_wait_for(atomic_int *v, int want, double max_s)
{
    for (int i = 0; i < (int)(max_s * 100) && atomic_load(v) < want; i++)
        usleep(10000);
    cr_assert_geq(atomic_load(v), want, "%d, waited for %d", atomic_load(v), want);
}

Test(serve_api, a_client_that_leaves_cancels_its_request)
{
    s_start(NULL, true);
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"tiny\",\"stream\":true,\"seed\":%d,\"messages\":[{\"role\":\"user\","
             "\"content\":\"go on\"}]}",
             S_SLOW_SEED);
    /* the first request loads the tokenizer, which may take longer than curl waits below */
    s_ans_t a = s_curl("POST", "/v1/chat/completions",
                       "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                       NULL);
    cr_assert_eq(a.status, 200);
    s_ans_free(&a);
    a = s_curl("POST", "/v1/chat/completions", body, "--max-time 2 2>/dev/null");
    cr_assert_eq(a.status, 200, "the stream began: %d %s", a.status, a.body);
    cr_assert(strstr(a.body, "\"role\":\"assistant\""), "%s", a.body);
    s_ans_free(&a);
    s_wait_for(&s_r.canceled, 1, 3.0);
    /* a non-streamed request whose client leaves is canceled too */
    snprintf(body, sizeof(body), "{\"model\":\"tiny\",\"seed\":%d,\"prompt\":\"x\"}", S_SLOW_SEED);
    a = s_curl("POST", "/v1/completions", body, "--max-time 2 2>/dev/null");
    s_ans_free(&a);
    s_wait_for(&s_r.canceled, 2, 3.0);
    s_stop(true);
}

Test(serve_api, a_full_hub_answers_429_with_retry_after)
{
    s_start(NULL, false); /* nobody takes from the hub */
    pl_serve_req_t *held[PL_SERVE_HUB_MAX];
    for (int i = 0; i < PL_SERVE_HUB_MAX; i++) {
        int32_t *p = malloc(sizeof(int32_t));
        *p = 1;
        pl_serve_in_t in = {.deployment = "tiny", .prompt = p, .n_prompt = 1};
        cr_assert_eq(pl_serve_req_create(&in, &held[i]), PL_OK);
        pl_serve_hub_put(s_srv.hub, held[i]);
    }
    s_ans_t a = s_curl("POST", "/v1/chat/completions",
                       "{\"model\":\"tiny\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"x\"}]}",
                       NULL);
    cr_assert_eq(a.status, 429, "%s", a.body);
    cr_assert(strcasestr(a.head, "\r\nretry-after: 1\r\n"), "%s", a.head);
    cr_assert_str_eq(s_err_field(&a, "type"), "rate_limit_error");
    s_ans_free(&a);
    s_stop(false);
    for (int i = 0; i < PL_SERVE_HUB_MAX; i++)
        pl_serve_req_unref(&held[i]);
}

Test(serve_api, thirty_two_concurrent_streams_all_complete)
{
    atomic_store(&s_step_us, 20000); /* each stream lasts about half a second */
    s_start(NULL, true);
    json_t *in = json_pack("{s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:s}], s:i, s:i}", "base_url",
                           s_srv.base, "api_key", "", "model", "tiny", "model_dir", S_MODEL_DIR,
                           "prompt", "x", "messages", "role", "user", "content", "hello",
                           "max_tokens", 100, "concurrent", 32);
    json_t *out = js_ref_run("serve_openai.mjs", "-", in);
    json_t *all = json_object_get(out, "concurrent");
    cr_assert_eq(json_array_size(all), 32);
    for (size_t i = 0; i < 32; i++) {
        json_t *r = json_array_get(all, i);
        cr_assert_str_eq(json_string_value(json_object_get(r, "text")), S_REPLY, "stream %zu: %s",
                         i, json_dumps(r, 0));
        cr_assert_str_eq(json_string_value(json_object_get(r, "finish")), "stop");
    }
    cr_assert_geq(atomic_load(&s_r.max_live), 16, "only %d streams overlapped",
                  atomic_load(&s_r.max_live));
    cr_log_info("32 streams in %lld ms, %d live at most",
                (long long)json_integer_value(json_object_get(out, "concurrent_ms")),
                atomic_load(&s_r.max_live));
    json_decref(in);
    json_decref(out);
    s_stop(true);
}

/* The OpenAI API's refusals on the real server (tests/serve_api_util.h): every error's status,
 * OpenAI-shaped body, param, code and headers by curl, a 10 MB body, and bearer tokens inline
 * and from a 0600 file; the server keeps serving after each. */
#include "serve_api_util.h"

typedef struct {
    const char *method, *path, *body, *extra;
    int status;
    const char *param, *code, *header; /* NULL: not checked */
} s_bad_t;

Test(serve_api_errors, errors_have_their_status_and_openai_body_and_the_server_keeps_serving)
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
        {"POST", "/v1/completions", "{\"model\":\"tiny\",\"prompt\":{}}", NULL, 400, "prompt", NULL,
         NULL},
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

Test(serve_api_errors, bearer_tokens)
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
    cr_assert(strstr(pl_error_msg(), path) && strstr(pl_error_msg(), "0600"), "%s", pl_error_msg());
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

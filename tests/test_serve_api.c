/* The OpenAI API on a real HTTP server over a serving hub whose loop side is a responder thread
 * (tests/serve_api_util.h): the official openai client, curl's raw SSE bytes, prompt ids against
 * the reference tokenizer, cancellation by a client that leaves, a full hub and 32 concurrent
 * streams, checked against numbers computed outside pipeld. */
#include "serve_api_util.h"

/* ---- tests ---- */

Test(serve_api, the_openai_client_lists_completes_chats_and_streams)
{
    s_start(NULL, true);
    json_t *in =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}], s:i, s:i}", "base_url",
                  s_srv.base, "api_key", "", "model", "tiny", "model_dir", S_MODEL_DIR, "prompt",
                  "Once upon a time", "messages", "role", "system", "content", "Be brief.", "role",
                  "user", "content", "What keeps a pipeline busy?", "max_tokens", 200, "seed", 5);
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
    const char *text = "Ni\xc3\xb1os <|eot_id|> y ni\xc3\xb1"
                       "as, 42!";
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
    cr_assert_eq(
        json_integer_value(json_object_get(json_object_get(a.json, "usage"), "completion_tokens")),
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
        cr_assert_str_eq(json_string_value(json_object_get(ev, "object")), "chat.completion.chunk");
        cr_assert(json_object_get(ev, "id") && json_object_get(ev, "created"));
        cr_assert_str_eq(json_string_value(json_object_get(ev, "model")), "tiny");
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        if (n == 0)
            role_first = json_is_string(json_object_get(delta, "role")) &&
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

Test(serve_api, a_client_that_leaves_cancels_its_request)
{
    s_start(NULL, true);
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"tiny\",\"stream\":true,\"seed\":%d,\"messages\":[{\"role\":\"user\","
             "\"content\":\"go on\"}]}",
             S_SLOW_SEED);
    /* the first request loads the tokenizer, which may take longer than curl waits below */
    s_ans_t a =
        s_curl("POST", "/v1/chat/completions",
               "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL);
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

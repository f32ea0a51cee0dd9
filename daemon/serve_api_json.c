/* The OpenAI API's answers as JSON: errors, whole completions, the chunks of a stream as
 * Server-Sent Events, and the models list, shaped as OpenAI's own. */
#include "daemon/serve_api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dump and free v; NULL when v is (out of memory). */
static char *s_dump(json_t *v, size_t *len_p)
{
    if (!v)
        return NULL;
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    if (s && len_p)
        *len_p = strlen(s);
    return s;
}

/* "data: JSON\n\n" */
static char *s_event(json_t *v, size_t *len_p)
{
    size_t n;
    char *j = s_dump(v, &n), *out = NULL;
    if (!j)
        return NULL;
    if (asprintf(&out, "data: %s\n\n", j) < 0)
        out = NULL;
    else
        *len_p = n + 8;
    free(j);
    return out;
}

/* The message and param may quote the request (a field's name, the JSON parser's view of the
 * body), cut at any byte: cleaned to UTF-8 before they become JSON strings. */
static json_t *s_err_obj(const pl_sapi_err_t *e)
{
    char msg[3 * sizeof(e->message) + 1], param[3 * sizeof(e->param) + 1];
    size_t used;
    pl_sapi_utf8_clean(e->message, strnlen(e->message, sizeof(e->message)), true, msg, &used);
    pl_sapi_utf8_clean(e->param, strnlen(e->param, sizeof(e->param)), true, param, &used);
    return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", msg, "type",
                     e->type ? e->type : "invalid_request_error", "param", param[0] ? param : NULL,
                     "code", e->code);
}

char *pl_sapi_err_json(const pl_sapi_err_t *e, size_t *len_p)
{
    return s_dump(s_err_obj(e), len_p);
}

char *pl_sapi_chunk_error(const pl_sapi_err_t *e, size_t *len_p)
{
    return s_event(s_err_obj(e), len_p);
}

const char *pl_sapi_finish_name(pl_serve_finish_t f)
{
    return f == PL_SERVE_LENGTH ? "length" : "stop";
}

static json_t *s_usage(const pl_sapi_answer_t *a, int n_completion)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", a->n_prompt, "completion_tokens",
                     n_completion, "total_tokens", a->n_prompt + n_completion);
}

/* {id, object, created, model, choices: [choice]} (+ usage when given; json_null() for null). */
static json_t *s_envelope(const pl_sapi_answer_t *a, const char *object, json_t *choice,
                          json_t *usage)
{
    json_t *choices = choice ? json_pack("[o]", choice) : json_array();
    json_t *v = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", a->id, "object", object, "created",
                          (json_int_t)a->created, "model", a->model, "choices", choices);
    if (v && usage)
        json_object_set_new(v, "usage", usage);
    else
        json_decref(usage);
    return v;
}

char *pl_sapi_answer_json(const pl_sapi_answer_t *a, const char *text, size_t len,
                          pl_serve_finish_t finish, int n_completion, size_t *len_p)
{
    json_t *t = json_stringn(text ? text : "", text ? len : 0), *choice;
    const char *fin = pl_sapi_finish_name(finish);
    if (a->kind == PL_SAPI_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0, "message", "role",
                           "assistant", "content", t, "logprobs", "finish_reason", fin);
    else
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", t, "logprobs",
                           "finish_reason", fin);
    return s_dump(s_envelope(a, a->kind == PL_SAPI_CHAT ? "chat.completion" : "text_completion",
                             choice, s_usage(a, n_completion)),
                  len_p);
}

static const char *s_chunk_object(const pl_sapi_answer_t *a)
{
    return a->kind == PL_SAPI_CHAT ? "chat.completion.chunk" : "text_completion";
}

/* A stream chunk's choice: chat {index, delta, logprobs, finish_reason}, completions {index,
 * text, logprobs, finish_reason}. `delta` is taken. */
static json_t *s_choice(const pl_sapi_answer_t *a, json_t *delta, const char *text, size_t len,
                        const char *finish)
{
    json_t *fin = finish ? json_string(finish) : json_null();
    if (a->kind == PL_SAPI_CHAT)
        return json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs",
                         "finish_reason", fin);
    json_decref(delta);
    return json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", json_stringn(text, len),
                     "logprobs", "finish_reason", fin);
}

char *pl_sapi_chunk_role(const pl_sapi_answer_t *a, bool with_usage, size_t *len_p)
{
    json_t *delta = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
    return s_event(s_envelope(a, s_chunk_object(a), s_choice(a, delta, "", 0, NULL),
                              with_usage ? json_null() : NULL),
                   len_p);
}

char *pl_sapi_chunk_text(const pl_sapi_answer_t *a, const char *text, size_t len, bool with_usage,
                         size_t *len_p)
{
    json_t *delta = json_pack("{s:o}", "content", json_stringn(text, len));
    return s_event(s_envelope(a, s_chunk_object(a), s_choice(a, delta, text, len, NULL),
                              with_usage ? json_null() : NULL),
                   len_p);
}

char *pl_sapi_chunk_finish(const pl_sapi_answer_t *a, pl_serve_finish_t finish, bool with_usage,
                           size_t *len_p)
{
    return s_event(s_envelope(a, s_chunk_object(a),
                              s_choice(a, json_object(), "", 0, pl_sapi_finish_name(finish)),
                              with_usage ? json_null() : NULL),
                   len_p);
}

char *pl_sapi_chunk_usage(const pl_sapi_answer_t *a, int n_completion, size_t *len_p)
{
    return s_event(s_envelope(a, s_chunk_object(a), NULL, s_usage(a, n_completion)), len_p);
}

char *pl_sapi_models_json(const pl_serve_deployment_t *deps, int n, size_t *len_p)
{
    json_t *data = json_array();
    for (int i = 0; data && i < n; i++)
        json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s}", "id", deps[i].name, "object",
                                              "model", "created", (json_int_t)deps[i].created,
                                              "owned_by", "pipeld"));
    return s_dump(data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL, len_p);
}

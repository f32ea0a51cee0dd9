/* The OpenAI API's request bodies checked field by field: /v1/completions and
 * /v1/chat/completions into one typed call, every other field refused by name. */
#include "daemon/serve_api_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_INVALID "invalid_request_error"
#define S_MAX_STR 256 /* model, user */

pl_status_t pl_sapi_err_set(pl_sapi_err_t *e, int status, const char *type, const char *code,
                            const char *param, const char *fmt, ...)
{
    va_list ap;
    memset(e, 0, sizeof(*e));
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return PL_ERR_INVALID;
}

static pl_status_t s_bad(pl_sapi_err_t *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pl_status_t s_bad(pl_sapi_err_t *e, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return pl_sapi_err_set(e, 400, S_INVALID, NULL, param, "%s", msg);
}

static pl_status_t s_unsupported(pl_sapi_err_t *e, const char *param, const char *what)
{
    return pl_sapi_err_set(e, 400, S_INVALID, "unsupported_parameter", param,
                           "'%s': %s is not supported", param, what);
}

/* A string value without NUL characters (jansson has checked the UTF-8), at most max bytes. */
static bool s_str(const json_t *v, size_t max, const char **s_p, size_t *len_p)
{
    if (!json_is_string(v))
        return false;
    size_t n = json_string_length(v);
    if (n > max || strlen(json_string_value(v)) != n)
        return false;
    *s_p = json_string_value(v);
    if (len_p)
        *len_p = n;
    return true;
}

static pl_status_t s_int(const json_t *v, const char *key, int64_t lo, int64_t hi, int64_t *out,
                         pl_sapi_err_t *e)
{
    if (!json_is_integer(v))
        return s_bad(e, key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return s_bad(e, key, "'%s' is %" JSON_INTEGER_FORMAT "; it must be %" PRId64 " to %" PRId64,
                     key, x, lo, hi);
    *out = x;
    return PL_OK;
}

static pl_status_t s_num(const json_t *v, const char *key, double lo, double hi, bool lo_excl,
                         double *out, pl_sapi_err_t *e)
{
    if (!json_is_number(v))
        return s_bad(e, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi) || (lo_excl && x == lo))
        return s_bad(e, key, "'%s' is %g; it must be %s %g and at most %g", key, x,
                     lo_excl ? "above" : "at least", lo, hi);
    *out = x;
    return PL_OK;
}

static pl_status_t s_bool(const json_t *v, const char *key, bool *out, pl_sapi_err_t *e)
{
    if (!json_is_boolean(v))
        return s_bad(e, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return PL_OK;
}

/* prompt: a string, an array of token ids, or an array holding one of those. */
static pl_status_t s_prompt(pl_sapi_call_t *c, const json_t *v, pl_sapi_err_t *e)
{
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        if (!s_str(v, SIZE_MAX, &c->text, &c->text_len))
            return s_bad(e, "prompt", "'prompt' contains a NUL character");
        return PL_OK;
    }
    if (!json_is_array(v))
        return s_bad(e, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_array_size(v);
    if (n == 0)
        return s_bad(e, "prompt", "'prompt' is empty");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return s_bad(e, "prompt", "'prompt' holds %zu prompts; one request takes one", n);
    if (n > PL_SAPI_MAX_PROMPT_IDS)
        return s_bad(e, "prompt", "'prompt' has %zu token ids, more than %d", n,
                     PL_SAPI_MAX_PROMPT_IDS);
    int32_t *ids = malloc(n * sizeof(*ids));
    if (!ids)
        return pl_sapi_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            free(ids);
            return s_bad(e, "prompt", "'prompt': entry %zu is not a token id", i);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    c->ids = ids;
    c->n_ids = (int)n;
    return PL_OK;
}

/* content: a string, or an array of {"type": "text", "text": ...} parts joined. */
static pl_status_t s_content(pl_sapi_call_t *c, size_t i, const json_t *v, pl_sapi_err_t *e)
{
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu].content", i);
    if (json_is_null(v)) { /* an assistant turn that only called tools */
        c->msgs[i].content = "";
        return PL_OK;
    }
    if (json_is_string(v)) {
        if (!s_str(v, SIZE_MAX, &c->msgs[i].content, NULL))
            return s_bad(e, param, "'%s' contains a NUL character", param);
        return PL_OK;
    }
    if (!json_is_array(v))
        return s_bad(e, param, "'%s' must be a string or an array of text parts", param);
    size_t total = 0, n = json_array_size(v);
    for (size_t k = 0; k < n; k++) {
        const json_t *p = json_array_get(v, k), *type = json_object_get(p, "type");
        const char *s;
        size_t len;
        if (!json_is_object(p) || json_object_size(p) != 2 || !json_is_string(type) ||
            !s_str(json_object_get(p, "text"), SIZE_MAX, &s, &len))
            return s_bad(e, param, "'%s': part %zu must be {\"type\": \"text\", \"text\": ...}",
                         param, k);
        if (strcmp(json_string_value(type), "text") != 0)
            return s_unsupported(e, param, "a content part other than text");
        total += len;
    }
    char *joined = malloc(total + 1);
    if (!joined)
        return pl_sapi_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        const json_t *t = json_object_get(json_array_get(v, k), "text");
        memcpy(joined + at, json_string_value(t), json_string_length(t));
        at += json_string_length(t);
    }
    joined[at] = '\0';
    c->msg_own[i] = joined;
    c->msgs[i].content = joined;
    return PL_OK;
}

static pl_status_t s_messages(pl_sapi_call_t *c, const json_t *v, pl_sapi_err_t *e)
{
    static const char *const roles[] = {"system", "user", "assistant", "developer"};
    if (!json_is_array(v))
        return s_bad(e, "messages", "'messages' must be an array of messages");
    size_t n = json_array_size(v);
    if (n == 0)
        return s_bad(e, "messages", "'messages' is empty; it needs at least one message");
    if (n > PL_SAPI_MAX_MESSAGES)
        return s_bad(e, "messages", "'messages' has %zu messages, more than %d", n,
                     PL_SAPI_MAX_MESSAGES);
    c->msgs = calloc(n, sizeof(*c->msgs));
    c->msg_own = calloc(n, sizeof(*c->msg_own));
    if (!c->msgs || !c->msg_own)
        return pl_sapi_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    c->n_msgs = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(v, i), *val;
        const char *key, *role = NULL;
        char param[64];
        pl_status_t st;
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m))
            return s_bad(e, param, "'%s' must be an object with 'role' and 'content'", param);
        json_object_foreach((json_t *)m, key, val)
        {
            if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0 && strcmp(key, "name") != 0)
                return s_bad(e, param, "'%s': unrecognized field '%.64s'", param, key);
        }
        if (!s_str(json_object_get(m, "role"), 32, &role, NULL))
            return s_bad(e, param, "'%s.role' must be a string", param);
        size_t r = 0;
        while (r < 4 && strcmp(role, roles[r]) != 0)
            r++;
        if (r == 4)
            return s_bad(e, param,
                         "'%s.role' is '%s'; it must be system, user, assistant or "
                         "developer",
                         param, role);
        c->msgs[i].role = r == 3 ? "system" : roles[r];
        const json_t *name = json_object_get(m, "name");
        const char *ignored;
        if (name && !s_str(name, S_MAX_STR, &ignored, NULL))
            return s_bad(e, param, "'%s.name' must be a string of at most %d bytes", param,
                         S_MAX_STR);
        if (!json_object_get(m, "content"))
            return s_bad(e, param, "'%s' has no 'content'", param);
        if ((st = s_content(c, i, json_object_get(m, "content"), e)))
            return st;
    }
    return PL_OK;
}

static pl_status_t s_stop(pl_sapi_call_t *c, const json_t *v, pl_sapi_err_t *e)
{
    const json_t *one[1] = {v};
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return s_bad(e, "stop", "'stop' must be a string or an array of strings");
    if (n > PL_JOB_MAX_STOP)
        return s_bad(e, "stop", "'stop' has %zu strings, at most %d", n, PL_JOB_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        const char *text;
        size_t len;
        if (!s_str(s, PL_JOB_STOP_MAX, &text, &len) || len == 0)
            return s_bad(e, "stop", "'stop': each is a non-empty string of at most %d bytes",
                         PL_JOB_STOP_MAX);
        memcpy(c->gen.stop[i], text, len + 1);
    }
    c->gen.n_stop = (int)n;
    return PL_OK;
}

/* The fields OpenAI's clients send that we accept only at their neutral value. */
static pl_status_t s_neutral(const char *key, const json_t *v, pl_sapi_err_t *e)
{
    if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty")) {
        double x = 0;
        pl_status_t st = s_num(v, key, -2, 2, false, &x, e);
        return st ? st : x != 0 ? s_unsupported(e, key, "a non-zero penalty") : PL_OK;
    }
    if (!strcmp(key, "logit_bias"))
        return json_is_object(v) && json_object_size(v) == 0
                   ? PL_OK
                   : s_unsupported(e, key, "a logit bias");
    if (!strcmp(key, "logprobs") || !strcmp(key, "echo"))
        return json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0)
                   ? PL_OK
                   : s_unsupported(e, key, !strcmp(key, "echo") ? "echo" : "logprobs");
    if (!strcmp(key, "top_logprobs"))
        return json_is_integer(v) && json_integer_value(v) == 0
                   ? PL_OK
                   : s_unsupported(e, key, "top_logprobs");
    if (!strcmp(key, "best_of"))
        return json_is_integer(v) && json_integer_value(v) == 1
                   ? PL_OK
                   : s_unsupported(e, key, "best_of other than 1");
    if (!strcmp(key, "suffix"))
        return json_is_string(v) && json_string_length(v) == 0 ? PL_OK
                                                               : s_unsupported(e, key, "a suffix");
    if (!strcmp(key, "response_format")) {
        const json_t *t = json_object_get(v, "type");
        return json_is_object(v) && json_object_size(v) == 1 && json_is_string(t) &&
                       !strcmp(json_string_value(t), "text")
                   ? PL_OK
                   : s_unsupported(e, key, "a response format other than text");
    }
    if (!strcmp(key, "user")) {
        const char *s;
        return s_str(v, S_MAX_STR, &s, NULL)
                   ? PL_OK
                   : s_bad(e, key, "'user' must be a string of at most %d bytes", S_MAX_STR);
    }
    return s_bad(e, key, "unrecognized request argument supplied: %.64s", key);
}

static pl_status_t s_field(pl_sapi_call_t *c, const char *key, const json_t *v, int64_t *max_comp,
                           pl_sapi_err_t *e)
{
    int64_t i64 = 0;
    double d = 0;
    pl_status_t st = PL_OK;
    bool chat = c->kind == PL_SAPI_CHAT;
    if (!strcmp(key, "model")) {
        if (!s_str(v, S_MAX_STR, &c->model, NULL) || !c->model[0])
            return s_bad(e, key, "'model' must be a non-empty string of at most %d bytes",
                         S_MAX_STR);
    } else if (!chat && !strcmp(key, "prompt")) {
        st = s_prompt(c, v, e);
    } else if (chat && !strcmp(key, "messages")) {
        st = s_messages(c, v, e);
    } else if (!strcmp(key, "max_tokens") || (chat && !strcmp(key, "max_completion_tokens"))) {
        if (!(st = s_int(v, key, 1, PL_JOB_MAX_NEW_TOKENS, &i64, e))) {
            if (!strcmp(key, "max_tokens"))
                c->max_tokens = (int)i64;
            else
                *max_comp = i64;
        }
    } else if (!strcmp(key, "temperature")) {
        if (!(st = s_num(v, key, 0, 2, false, &d, e)))
            c->gen.temperature = (float)d;
    } else if (!strcmp(key, "top_p")) {
        if (!(st = s_num(v, key, 0, 1, true, &d, e)))
            c->gen.top_p = (float)d;
    } else if (!strcmp(key, "top_k")) {
        if (!(st = s_int(v, key, -1, 1 << 20, &i64, e)))
            c->gen.top_k = i64 < 0 ? 0 : (int)i64;
    } else if (!strcmp(key, "seed")) {
        if (!(st = s_int(v, key, INT64_MIN, INT64_MAX, &i64, e))) {
            c->gen.seed = (uint64_t)i64;
            c->seed_set = true;
        }
    } else if (!strcmp(key, "stop")) {
        st = s_stop(c, v, e);
    } else if (!strcmp(key, "n")) {
        if (!(st = s_int(v, key, 1, INT32_MAX, &i64, e)) && i64 != 1)
            st = s_unsupported(e, key, "more than one choice");
    } else if (!strcmp(key, "stream")) {
        st = s_bool(v, key, &c->stream, e);
    } else if (!strcmp(key, "stream_options")) {
        const json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (u ? 1u : 0u))
            return s_bad(e, key, "'stream_options' takes only 'include_usage'");
        if (u)
            st = s_bool(u, "stream_options.include_usage", &c->include_usage, e);
    } else if (!strcmp(key, "min_tokens")) { /* vLLM's */
        if (!(st = s_int(v, key, 0, PL_JOB_MAX_NEW_TOKENS, &i64, e)))
            c->gen.min_new_tokens = (int)i64;
    } else if (!strcmp(key, "ignore_eos")) { /* vLLM's */
        bool ig = false;
        if (!(st = s_bool(v, key, &ig, e)))
            c->gen.stop_at_eos = !ig;
    } else {
        st = s_neutral(key, v, e);
    }
    return st;
}

void pl_sapi_call_clear(pl_sapi_call_t *c)
{
    for (size_t i = 0; c->msg_own && i < c->n_msgs; i++)
        free(c->msg_own[i]);
    free(c->msg_own);
    free(c->msgs);
    free(c->ids);
    json_decref(c->root);
    memset(c, 0, sizeof(*c));
}

pl_status_t pl_sapi_call_parse(pl_sapi_kind_t kind, const char *body, size_t len,
                               pl_sapi_call_t *call, pl_sapi_err_t *err)
{
    json_error_t jerr;
    pl_sapi_call_t c = {.kind = kind};
    int64_t max_comp = 0;
    const char *key;
    json_t *v;
    pl_status_t st = PL_OK;

    c.gen.temperature = 1.0f; /* OpenAI's defaults */
    c.gen.top_p = 1.0f;
    c.gen.stop_at_eos = true;
    c.root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!c.root)
        return s_bad(err, NULL, "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
                     jerr.line, jerr.column);
    if (!json_is_object(c.root)) {
        st = s_bad(err, NULL, "the body must be a JSON object");
        goto out;
    }
    json_object_foreach(c.root, key, v)
    {
        if (json_is_null(v))
            continue; /* null: the default, as OpenAI takes it */
        if ((st = s_field(&c, key, v, &max_comp, err)))
            goto out;
    }
    if (!c.model) {
        st = s_bad(err, "model", "'model' is required");
        goto out;
    }
    if (kind == PL_SAPI_CHAT && !c.msgs) {
        st = s_bad(err, "messages", "'messages' is required");
        goto out;
    }
    if (kind == PL_SAPI_COMPLETION && !c.text && !c.ids) {
        st = s_bad(err, "prompt", "'prompt' is required");
        goto out;
    }
    if (max_comp && c.max_tokens && max_comp != c.max_tokens) {
        st = s_bad(err, "max_completion_tokens",
                   "'max_tokens' (%d) and 'max_completion_tokens' (%" PRId64 ") differ",
                   c.max_tokens, max_comp);
        goto out;
    }
    if (max_comp)
        c.max_tokens = (int)max_comp;
    if (c.include_usage && !c.stream) {
        st = s_bad(err, "stream_options", "'stream_options' is only allowed with 'stream': true");
        goto out;
    }
    if (c.max_tokens && c.gen.min_new_tokens > c.max_tokens) {
        st = s_bad(err, "min_tokens", "'min_tokens' (%d) is more than 'max_tokens' (%d)",
                   c.gen.min_new_tokens, c.max_tokens);
        goto out;
    }
    *call = c;
    return PL_OK;
out:
    pl_sapi_call_clear(&c);
    return st;
}

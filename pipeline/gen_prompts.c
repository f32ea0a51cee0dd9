/* The prompts file of a job, read into the spec: one prompt per line as token ids, text or chat
 * messages, tokenized here and nowhere else (stages only ever see ids). */
#include "pipeline/gen.h"

#include "model/chat_template.h"

#include <stdlib.h>
#include <string.h>

#define S_MAX_MESSAGES 1024

typedef struct {
    const pl_gen_prompts_ctx_t *ctx;
    pl_chat_template_t *tmpl; /* made at the first messages line */
    const char *origin;
    size_t line;
    bool text; /* a text or messages line was seen */
} s_parser_t;

static pl_status_t s_ids(s_parser_t *p, const json_t *v, int32_t **ids_p, size_t *n_p)
{
    size_t n = json_array_size(v);
    if (n == 0 || n > (size_t)INT32_MAX)
        return pl_error(PL_ERR_INVALID, "%s:%zu: expected a non-empty JSON array of token ids",
                        p->origin, p->line);
    int32_t *ids = malloc(n * sizeof(int32_t));
    if (!ids)
        return pl_error(PL_ERR_NOMEM, "%s:%zu: out of memory", p->origin, p->line);
    for (size_t t = 0; t < n; t++) {
        json_t *e = json_array_get(v, t);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
            free(ids);
            return pl_error(PL_ERR_INVALID, "%s:%zu: token %zu is not a token id", p->origin,
                            p->line, t);
        }
        ids[t] = (int32_t)json_integer_value(e);
    }
    *ids_p = ids;
    *n_p = n;
    return PL_OK;
}

/* A string field without NUL bytes (jansson has checked the UTF-8 already). */
static pl_status_t s_string(s_parser_t *p, const json_t *v, const char *what, const char **s_p,
                            size_t *len_p)
{
    if (!json_is_string(v))
        return pl_error(PL_ERR_INVALID, "%s:%zu: %s: expected a string", p->origin, p->line, what);
    size_t n = json_string_length(v);
    if (strlen(json_string_value(v)) != n)
        return pl_error(PL_ERR_INVALID, "%s:%zu: %s: contains a NUL character", p->origin, p->line,
                        what);
    *s_p = json_string_value(v);
    *len_p = n;
    return PL_OK;
}

static pl_status_t s_need_tokenizer(s_parser_t *p, const char *kind)
{
    if (p->ctx && p->ctx->tok)
        return PL_OK;
    return pl_error(PL_ERR_INVALID,
                    "%s:%zu: a %s prompt needs the model's tokenizer, and the model directory "
                    "has no tokenizer.json",
                    p->origin, p->line, kind);
}

static pl_status_t s_text(s_parser_t *p, const json_t *v, int32_t **ids_p, size_t *n_p)
{
    const char *text = NULL;
    size_t len = 0;
    pl_status_t st;
    if ((st = s_string(p, v, "field 'text'", &text, &len)) || (st = s_need_tokenizer(p, "text")))
        return st;
    if ((st = pl_tokenizer_encode(p->ctx->tok, text, len, PL_TOK_ENCODE_DEFAULT, ids_p, n_p)))
        return pl_error_prefix(st, "%s:%zu: ", p->origin, p->line);
    return PL_OK;
}

static pl_status_t s_messages(s_parser_t *p, const json_t *v, int32_t **ids_p, size_t *n_p)
{
    size_t n = json_array_size(v);
    pl_chat_msg_t *msgs = NULL;
    pl_status_t st;
    if (!json_is_array(v) || n == 0 || n > S_MAX_MESSAGES)
        return pl_error(PL_ERR_INVALID,
                        "%s:%zu: field 'messages': expected an array of 1 to %d messages",
                        p->origin, p->line, S_MAX_MESSAGES);
    if ((st = s_need_tokenizer(p, "messages")))
        return st;
    if (!(msgs = calloc(n, sizeof(*msgs))))
        return pl_error(PL_ERR_NOMEM, "%s:%zu: out of memory", p->origin, p->line);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(v, i);
        char what[64];
        size_t len;
        if (!json_is_object(m) || json_object_size(m) != 2 || !json_object_get(m, "role") ||
            !json_object_get(m, "content")) {
            st = pl_error(PL_ERR_INVALID,
                          "%s:%zu: message %zu: expected {\"role\": ..., \"content\": ...}",
                          p->origin, p->line, i);
            goto out;
        }
        snprintf(what, sizeof(what), "message %zu: field 'role'", i);
        if ((st = s_string(p, json_object_get(m, "role"), what, &msgs[i].role, &len)))
            goto out;
        snprintf(what, sizeof(what), "message %zu: field 'content'", i);
        if ((st = s_string(p, json_object_get(m, "content"), what, &msgs[i].content, &len)))
            goto out;
    }
    const char *fmt = p->ctx->chat_format && p->ctx->chat_format[0] ? p->ctx->chat_format : NULL;
    if (!p->tmpl &&
        (st = pl_chat_template_for(p->ctx->tok, fmt, "tokenizer_config.json", &p->tmpl))) {
        pl_error_prefix(st, "%s:%zu: ", p->origin, p->line);
        goto out;
    }
    if ((st = pl_chat_template_encode(p->tmpl, p->ctx->tok, msgs, n, true, ids_p, n_p)))
        pl_error_prefix(st, "%s:%zu: ", p->origin, p->line);
out:
    free(msgs);
    return st;
}

/* One line (surrounding blanks trimmed): exactly one JSON value, nothing after it. */
static pl_status_t s_line(s_parser_t *p, const char *text, size_t len, int32_t **ids_p, int *n_p)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, 0, &jerr);
    int32_t *ids = NULL;
    size_t n = 0;
    pl_status_t st;
    if (!v)
        return pl_error(PL_ERR_INVALID,
                        "%s:%zu: expected one JSON array of token ids, {\"text\": ...} or "
                        "{\"messages\": [...]}: %s",
                        p->origin, p->line, jerr.text);
    if (json_is_array(v)) {
        st = s_ids(p, v, &ids, &n);
    } else if (json_is_object(v) && json_object_size(v) == 1 && json_object_get(v, "text")) {
        st = s_text(p, json_object_get(v, "text"), &ids, &n);
        p->text = true;
    } else if (json_is_object(v) && json_object_size(v) == 1 && json_object_get(v, "messages")) {
        st = s_messages(p, json_object_get(v, "messages"), &ids, &n);
        p->text = true;
    } else {
        st = pl_error(PL_ERR_INVALID,
                      "%s:%zu: expected a JSON array of token ids, or an object with exactly "
                      "one key, 'text' or 'messages'",
                      p->origin, p->line);
    }
    json_decref(v);
    if (st)
        return st;
    if (n == 0) {
        free(ids);
        return pl_error(PL_ERR_INVALID, "%s:%zu: the prompt encodes to no tokens", p->origin,
                        p->line);
    }
    const pl_gen_prompts_ctx_t *c = p->ctx;
    if (c && c->max_pos > 0 &&
        (n > (size_t)c->max_pos || (int)n + c->max_new_tokens > c->max_pos)) {
        free(ids);
        return pl_error(PL_ERR_RANGE,
                        "%s:%zu: the prompt is %zu tokens; with max_new_tokens %d it exceeds the "
                        "model's context of %d positions",
                        p->origin, p->line, n, c->max_new_tokens, c->max_pos);
    }
    *ids_p = ids;
    *n_p = (int)n;
    return PL_OK;
}

bool pl_gen_prompts_have_text(const char *text, size_t len)
{
    bool start = true;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '\n')
            start = true;
        else if (start && ch != ' ' && ch != '\t' && ch != '\r') {
            if (ch == '{')
                return true;
            start = false;
        }
    }
    return false;
}

pl_status_t pl_gen_prompts_parse(const char *text, size_t len, const char *origin,
                                 const pl_gen_prompts_ctx_t *ctx, pl_job_spec_t *spec)
{
    int32_t **prompts = calloc(PL_GEN_MAX_SEQS, sizeof(*prompts));
    int *lens = calloc(PL_GEN_MAX_SEQS, sizeof(*lens)), n = 0;
    s_parser_t p = {.ctx = ctx, .origin = origin};
    size_t i = 0;
    pl_status_t st = PL_OK;
    if (!prompts || !lens) {
        st = pl_error(PL_ERR_NOMEM, "%s: out of memory", origin);
        goto out;
    }
    while (i < len && !st) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        p.line++;
        size_t a = i, b = end;
        while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r'))
            a++;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r'))
            b--;
        if (a < b) {
            if (n == PL_GEN_MAX_SEQS)
                st = pl_error(PL_ERR_RANGE, "%s: more than %d prompts", origin, PL_GEN_MAX_SEQS);
            else if (!(st = s_line(&p, text + a, b - a, &prompts[n], &lens[n])))
                n++;
        }
        i = end + 1;
    }
    if (!st && n == 0)
        st = pl_error(PL_ERR_INVALID, "%s: no prompts", origin);
    if (!st) {
        for (int k = 0; spec->prompts && k < spec->n_prompts; k++)
            free(spec->prompts[k]);
        free(spec->prompts);
        free(spec->prompt_len);
        spec->prompts = prompts;
        spec->prompt_len = lens;
        spec->n_prompts = n;
        spec->text = p.text;
        pl_chat_template_destroy(&p.tmpl);
        return PL_OK;
    }
out:
    for (int k = 0; prompts && k < n; k++)
        free(prompts[k]);
    free(prompts);
    free(lens);
    pl_chat_template_destroy(&p.tmpl);
    return st;
}

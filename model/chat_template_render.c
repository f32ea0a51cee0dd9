/* The renderers, one per family, each writing exactly what that family's official template
 * writes (the Jinja of tokenizer_config.json), including the errors its raise_exception gives. */
#include "model/chat_template_impl.h"

#include <string.h>

static bool s_is(const pl_chat_msg_t *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

/* user, assistant, user, ... after an optional leading system message. */
static pl_status_t s_alternate(const pl_chat_msg_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s_is(&m[i], "user") != (i % 2 == 0))
            return pl_error(PL_ERR_INVALID, "messages: Conversation roles must alternate "
                                            "user/assistant/user/assistant/...");
    return PL_OK;
}

pl_status_t pl_chat_render_llama(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                 bool gen, pl_tok_buf_t *o)
{
    pl_status_t st = PL_OK;
    size_t i = 0;
    bool bos = !t->no_bos;

    if (t->date_header) { /* Llama 3.1+: the system block is always there */
        if ((st = pl_chat_cat(o, t->bos, "<|start_header_id|>system<|end_header_id|>\n\n",
                              "Cutting Knowledge Date: December 2023\n", "Today Date: ", t->date,
                              "\n\n", NULL)))
            return st;
        if (s_is(&m[0], "system") && (st = pl_chat_cat_trim(o, m[i++].content)))
            return st;
        if ((st = pl_chat_cat(o, "<|eot_id|>", NULL)))
            return st;
        bos = false;
    }
    for (; i < n && !st; i++) {
        if (i == 0 && bos)
            st = pl_chat_cat(o, t->bos, NULL);
        if (!st)
            st = pl_chat_cat(o, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n", NULL);
        if (!st)
            st = pl_chat_cat_trim(o, m[i].content);
        if (!st)
            st = pl_chat_cat(o, "<|eot_id|>", NULL);
    }
    if (!st && (gen || t->gen_always))
        st = pl_chat_cat(o, "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
    return st;
}

/* Llama 2 ([INST] with <<SYS>> folded into the first user turn, stripped contents) and
 * Mistral ([INST] only, contents as given, no system role). Neither has a generation prompt. */
pl_status_t pl_chat_render_inst(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                bool gen, pl_tok_buf_t *o)
{
    bool llama2 = t->format == PL_CHAT_LLAMA2;
    const char *system = NULL;
    pl_status_t st = PL_OK;

    (void)gen;
    if (llama2 && s_is(&m[0], "system"))
        system = m[0].content, m++, n--;
    if ((st = s_alternate(m, n)))
        return st;
    if (!llama2 && (st = pl_chat_cat(o, t->bos, NULL)))
        return st;
    for (size_t i = 0; i < n && !st; i++) {
        if (!llama2 && !s_is(&m[i], "user") && !s_is(&m[i], "assistant"))
            return pl_error(PL_ERR_INVALID, "messages: Only user and assistant roles are "
                                            "supported!");
        if (s_is(&m[i], "user")) {
            if (!llama2) {
                st = pl_chat_cat(o, "[INST] ", m[i].content, " [/INST]", NULL);
                continue;
            }
            st = pl_chat_cat(o, t->bos, "[INST] ", NULL);
            /* content.strip() of '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content */
            if (!st && i == 0 && system) {
                pl_tok_buf_t c = {0};
                st = pl_chat_cat(&c, "<<SYS>>\n", system, "\n<</SYS>>\n\n", m[i].content, NULL);
                if (!st)
                    st = pl_chat_cat_trim(o, c.buf);
                pl_tok_buf_free(&c);
            } else if (!st) {
                st = pl_chat_cat_trim(o, m[i].content);
            }
            if (!st)
                st = pl_chat_cat(o, " [/INST]", NULL);
        } else if (s_is(&m[i], "assistant")) {
            if (llama2) {
                st = pl_chat_cat(o, " ", NULL);
                if (!st)
                    st = pl_chat_cat_trim(o, m[i].content);
                if (!st)
                    st = pl_chat_cat(o, " ", t->eos, NULL);
            } else {
                st = pl_chat_cat(o, m[i].content, t->eos, NULL);
            }
        }
    }
    return st;
}

/* Python's str.split(sep)[-1] and [0] and the strips Qwen 3's template uses. */
static const char *s_after_last(const char *s, const char *sep)
{
    const char *p, *last = s;
    while ((p = strstr(last, sep)))
        last = p + strlen(sep);
    return last;
}

static void s_span_strip_nl(const char **s, size_t *len, bool left, bool right)
{
    while (left && *len && **s == '\n')
        (*s)++, (*len)--;
    while (right && *len && (*s)[*len - 1] == '\n')
        (*len)--;
}

/* An assistant turn of Qwen 3: reasoning split off at </think>; a <think> block when the turn
 * comes after the last user query and is the last turn or has reasoning. */
static pl_status_t s_qwen3_assistant(const pl_chat_msg_t *m, bool after, bool last,
                                     pl_tok_buf_t *o)
{
    const char *content = m->content, *r = "", *end;
    size_t content_len = strlen(content), r_len = 0;
    pl_status_t st;

    if ((end = strstr(m->content, "</think>"))) {
        content = s_after_last(m->content, "</think>");
        content_len = strlen(content);
        s_span_strip_nl(&content, &content_len, true, false);
        r = m->content; /* split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        r_len = (size_t)(end - r);
        s_span_strip_nl(&r, &r_len, false, true);
        for (const char *p; (p = memmem(r, r_len, "<think>", 7));) {
            r_len -= (size_t)(p + 7 - r);
            r = p + 7;
        }
        s_span_strip_nl(&r, &r_len, true, false);
    }
    if (after && (last || r_len)) {
        s_span_strip_nl(&r, &r_len, true, true);
        s_span_strip_nl(&content, &content_len, true, false);
        if ((st = pl_chat_cat(o, "<|im_start|>", m->role, "\n<think>\n", NULL)) ||
            (st = pl_tok_buf_add(o, r, r_len)) || (st = pl_chat_cat(o, "\n</think>\n\n", NULL)))
            return st;
    } else if ((st = pl_chat_cat(o, "<|im_start|>", m->role, "\n", NULL))) {
        return st;
    }
    return pl_tok_buf_add(o, content, content_len);
}

static bool s_tool_response(const char *c)
{
    size_t len = strlen(c);
    return strncmp(c, "<tool_response>", 15) == 0 && len >= 16 &&
           strcmp(c + len - 16, "</tool_response>") == 0;
}

/* Qwen's tool turns: consecutive tool results inside one user turn. */
static pl_status_t s_qwen_tool(const pl_chat_msg_t *m, size_t n, size_t i, pl_tok_buf_t *o)
{
    pl_status_t st = PL_OK;
    if (i == 0 || !s_is(&m[i - 1], "tool"))
        st = pl_chat_cat(o, "<|im_start|>user", NULL);
    if (!st)
        st = pl_chat_cat(o, "\n<tool_response>\n", m[i].content, "\n</tool_response>", NULL);
    if (!st && (i == n - 1 || !s_is(&m[i + 1], "tool")))
        st = pl_chat_cat(o, "<|im_end|>\n", NULL);
    return st;
}

pl_status_t pl_chat_render_chatml(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                  bool gen, pl_tok_buf_t *o)
{
    bool qwen = t->think || t->default_system;
    size_t last_query = n - 1;
    pl_status_t st = PL_OK;

    if (s_is(&m[0], "system") && qwen)
        st = pl_chat_cat(o, "<|im_start|>system\n", m[0].content, "<|im_end|>\n", NULL);
    else if (t->default_system)
        st = pl_chat_cat(o, "<|im_start|>system\n", t->default_system, "<|im_end|>\n", NULL);
    for (size_t i = n; t->think && i-- > 0;)
        if (s_is(&m[i], "user") && !s_tool_response(m[i].content)) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n && !st; i++) {
        if (!qwen || s_is(&m[i], "user") || (s_is(&m[i], "system") && i > 0) ||
            (s_is(&m[i], "assistant") && !t->think)) {
            st = pl_chat_cat(o, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n",
                             NULL);
        } else if (s_is(&m[i], "assistant")) {
            st = s_qwen3_assistant(&m[i], i > last_query, i == n - 1, o);
            if (!st)
                st = pl_chat_cat(o, "<|im_end|>\n", NULL);
        } else if (s_is(&m[i], "tool")) {
            st = s_qwen_tool(m, n, i, o);
        }
    }
    return st || !gen ? st : pl_chat_cat(o, "<|im_start|>assistant\n", NULL);
}

pl_status_t pl_chat_render_gemma(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                 bool gen, pl_tok_buf_t *o)
{
    const char *prefix = NULL;
    pl_status_t st;

    if ((st = pl_chat_cat(o, t->bos, NULL)))
        return st;
    if (s_is(&m[0], "system")) {
        if (!t->system_ok)
            return pl_error(PL_ERR_INVALID, "messages: System role not supported");
        prefix = m[0].content;
        m++, n--;
    }
    if ((st = s_alternate(m, n)))
        return st;
    for (size_t i = 0; i < n && !st; i++) {
        st = pl_chat_cat(o, "<start_of_turn>", s_is(&m[i], "assistant") ? "model" : m[i].role,
                         "\n", NULL);
        if (!st && i == 0 && prefix)
            st = pl_chat_cat(o, prefix, "\n\n", NULL);
        if (!st)
            st = pl_chat_cat_trim(o, m[i].content);
        if (!st)
            st = pl_chat_cat(o, "<end_of_turn>\n", NULL);
    }
    return st || !gen ? st : pl_chat_cat(o, "<start_of_turn>model\n", NULL);
}

pl_status_t pl_chat_render_phi3(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                bool gen, pl_tok_buf_t *o)
{
    pl_status_t st = PL_OK;
    if (!t->no_bos)
        st = pl_chat_cat(o, t->bos, NULL);
    for (size_t i = 0; i < n && !st; i++) {
        if (s_is(&m[i], "system") || s_is(&m[i], "user") || s_is(&m[i], "assistant"))
            st = pl_chat_cat(o, "<|", m[i].role, "|>\n", m[i].content, "<|end|>\n", NULL);
    }
    if (!st)
        st = pl_chat_cat(o, gen ? "<|assistant|>\n" : t->eos, NULL);
    return st;
}

/* Chat templates recognised from their text (the markers each family's template writes) or named
 * by chat_format, and the render entry point that dispatches to the family's renderer. */
#include "model/chat_template_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_names[PL_CHAT_N_FORMATS] = {"llama3", "llama2", "mistral",
                                                 "chatml", "gemma",  "phi3"};

const char *pl_chat_format_name(pl_chat_format_t format)
{
    return (unsigned)format < PL_CHAT_N_FORMATS ? s_names[format] : NULL;
}

pl_status_t pl_chat_format_parse(const char *name, pl_chat_format_t *format_p)
{
    for (int i = 0; i < PL_CHAT_N_FORMATS; i++)
        if (strcmp(name, s_names[i]) == 0) {
            *format_p = (pl_chat_format_t)i;
            return PL_OK;
        }
    return pl_error(PL_ERR_INVALID, "chat_format '%s' is not one of llama3, llama2, mistral, "
                                    "chatml, gemma, phi3", name);
}

static bool s_has(const char *text, const char *what)
{
    return text && strstr(text, what);
}

static pl_status_t s_recognise(const char *text, const char *name, pl_chat_format_t *f)
{
    if (s_has(text, "<|start_header_id|>") && s_has(text, "<|eot_id|>"))
        *f = PL_CHAT_LLAMA3;
    else if (s_has(text, "[INST]") && s_has(text, "<<SYS>>"))
        *f = PL_CHAT_LLAMA2;
    else if (s_has(text, "[INST]"))
        *f = PL_CHAT_MISTRAL;
    else if (s_has(text, "<|im_start|>") && s_has(text, "<|im_end|>"))
        *f = PL_CHAT_CHATML;
    else if (s_has(text, "<start_of_turn>") && s_has(text, "<end_of_turn>"))
        *f = PL_CHAT_GEMMA;
    else if (s_has(text, "<|user|>") && s_has(text, "<|assistant|>") && s_has(text, "<|end|>"))
        *f = PL_CHAT_PHI3;
    else if (!text)
        return pl_error(PL_ERR_NOT_FOUND, "%s: no chat_template; set the job's chat_format to "
                                          "one of llama3, llama2, mistral, chatml, gemma, phi3",
                        name);
    else
        return pl_error(PL_ERR_UNSUPPORTED, "%s: chat template not recognised (it begins "
                                            "'%.60s'); set the job's chat_format to one of "
                                            "llama3, llama2, mistral, chatml, gemma, phi3",
                        name, text);
    return PL_OK;
}

/* The switches of a family's variants, read off the template text. */
static void s_variant(pl_chat_template_t *t, const char *text)
{
    const char *d;
    if (!text)
        return;
    t->gen_always = t->format == PL_CHAT_LLAMA3 && !s_has(text, "add_generation_prompt");
    t->no_bos = !s_has(text, "bos_token");
    t->date_header = s_has(text, "Cutting Knowledge Date");
    snprintf(t->date, sizeof(t->date), "26 Jul 2024");
    if ((d = strstr(text, "set date_string = \""))) {
        d += strlen("set date_string = \"");
        size_t len = strcspn(d, "\"");
        if (len < sizeof(t->date))
            snprintf(t->date, sizeof(t->date), "%.*s", (int)len, d);
    }
    t->think = s_has(text, "<think>") && s_has(text, "last_query_index");
    if (s_has(text, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."))
        t->default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    t->system_ok = s_has(text, "first_user_prefix");
}

pl_status_t pl_chat_template_new(const char *text, const char *format, const char *name,
                                 const char *bos, const char *eos, pl_chat_template_t **tmpl_p)
{
    pl_chat_template_t *t = calloc(1, sizeof(*t));
    pl_status_t st;

    if (!t)
        return pl_error(PL_ERR_NOMEM, "chat template: out of memory");
    if (!name)
        name = "chat_template";
    st = format ? pl_chat_format_parse(format, &t->format) : s_recognise(text, name, &t->format);
    if (st)
        goto err;
    /* defaults when there is no text to read: the families' official templates */
    t->system_ok = true;
    if (text)
        s_variant(t, text);
    else
        t->no_bos = t->format == PL_CHAT_PHI3;
    if (!(t->bos = strdup(bos ? bos : "")) || !(t->eos = strdup(eos ? eos : ""))) {
        st = pl_error(PL_ERR_NOMEM, "chat template: out of memory");
        goto err;
    }
    *tmpl_p = t;
    return PL_OK;
err:
    pl_chat_template_destroy(&t);
    return st;
}

void pl_chat_template_destroy(pl_chat_template_t **tmpl_p)
{
    if (!*tmpl_p)
        return;
    free((*tmpl_p)->bos);
    free((*tmpl_p)->eos);
    free(*tmpl_p);
    *tmpl_p = NULL;
}

pl_status_t pl_chat_template_for(const pl_tokenizer_t *tok, const char *chat_format,
                                 const char *name, pl_chat_template_t **tmpl_p)
{
    return pl_chat_template_new(pl_tokenizer_chat_template(tok), chat_format, name,
                                pl_tokenizer_bos_text(tok), pl_tokenizer_eos_text(tok), tmpl_p);
}

pl_status_t pl_chat_template_encode(const pl_chat_template_t *tmpl, const pl_tokenizer_t *tok,
                                    const pl_chat_msg_t *msgs, size_t n,
                                    bool add_generation_prompt, int32_t **ids_p, size_t *n_p)
{
    char *text = NULL;
    pl_status_t st = pl_chat_template_render(tmpl, msgs, n, add_generation_prompt, &text);
    if (!st)
        st = pl_tokenizer_encode(tok, text, strlen(text), PL_TOK_PARSE_SPECIAL, ids_p, n_p);
    free(text);
    return st;
}

pl_chat_format_t pl_chat_template_format(const pl_chat_template_t *tmpl)
{
    return tmpl->format;
}

pl_status_t pl_chat_cat(pl_tok_buf_t *o, ...)
{
    va_list ap;
    const char *s;
    pl_status_t st = PL_OK;
    va_start(ap, o);
    while (!st && (s = va_arg(ap, const char *)))
        st = pl_tok_buf_add(o, s, strlen(s));
    va_end(ap);
    return st;
}

static bool s_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

pl_status_t pl_chat_cat_trim(pl_tok_buf_t *o, const char *s)
{
    size_t len = strlen(s);
    while (len && s_ws(*s))
        s++, len--;
    while (len && s_ws(s[len - 1]))
        len--;
    return pl_tok_buf_add(o, s, len);
}

pl_status_t pl_chat_template_render(const pl_chat_template_t *t, const pl_chat_msg_t *msgs,
                                    size_t n, bool gen, char **text_p)
{
    pl_tok_buf_t o = {0};
    pl_status_t st;

    if (!n)
        return pl_error(PL_ERR_INVALID, "messages: empty");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return pl_error(PL_ERR_INVALID, "messages[%zu]: role and content must be strings", i);
    if ((st = pl_tok_buf_add(&o, "", 0)))
        return st;
    switch (t->format) {
    case PL_CHAT_LLAMA3: st = pl_chat_render_llama(t, msgs, n, gen, &o); break;
    case PL_CHAT_LLAMA2:
    case PL_CHAT_MISTRAL: st = pl_chat_render_inst(t, msgs, n, gen, &o); break;
    case PL_CHAT_CHATML: st = pl_chat_render_chatml(t, msgs, n, gen, &o); break;
    case PL_CHAT_GEMMA: st = pl_chat_render_gemma(t, msgs, n, gen, &o); break;
    case PL_CHAT_PHI3: st = pl_chat_render_phi3(t, msgs, n, gen, &o); break;
    default: st = pl_error(PL_ERR_INVALID, "chat template: bad format"); break;
    }
    if (st) {
        pl_tok_buf_free(&o);
        return st;
    }
    *text_p = o.buf;
    return PL_OK;
}

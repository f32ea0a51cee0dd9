/* Internal to model/chat_template*.c: a recognised template is a family plus the few variant
 * switches its text shows (trimming, defaults, always-on generation prompt). */
#ifndef PL_MODEL_CHAT_TEMPLATE_IMPL_H
#define PL_MODEL_CHAT_TEMPLATE_IMPL_H

#include "model/chat_template.h"
#include "model/tokenizer_impl.h" /* pl_tok_buf_t */

struct pl_chat_template {
    pl_chat_format_t format;
    char *bos, *eos;
    bool gen_always;      /* Llama 3: the text adds the assistant header unconditionally */
    bool no_bos;          /* the text never writes bos_token */
    bool date_header;     /* Llama 3.1+: a system block with the knowledge and today dates */
    char date[32];        /* its default date_string */
    bool think;           /* Qwen 3: <think> blocks after the last user turn */
    const char *default_system; /* Qwen 2.5: system prompt when the messages have none */
    bool system_ok;       /* Gemma 3 folds a system message into the first user turn */
};

pl_status_t pl_chat_render_llama(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                 bool gen, pl_tok_buf_t *o);
pl_status_t pl_chat_render_inst(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                bool gen, pl_tok_buf_t *o);
pl_status_t pl_chat_render_chatml(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                  bool gen, pl_tok_buf_t *o);
pl_status_t pl_chat_render_gemma(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                 bool gen, pl_tok_buf_t *o);
pl_status_t pl_chat_render_phi3(const pl_chat_template_t *t, const pl_chat_msg_t *m, size_t n,
                                bool gen, pl_tok_buf_t *o);

/* Append strings (NULL-terminated list) to o. */
pl_status_t pl_chat_cat(pl_tok_buf_t *o, ...) __attribute__((sentinel));
/* Append s with leading and trailing whitespace removed (Jinja's trim, Python's strip()). */
pl_status_t pl_chat_cat_trim(pl_tok_buf_t *o, const char *s);

#endif

/* Chat templates: messages rendered into the prompt text the model was trained on, for the
 * families people run (Llama 3.x, Llama 2, Mistral [INST], ChatML/Qwen, Gemma, Phi-3). */
#ifndef PL_MODEL_CHAT_TEMPLATE_H
#define PL_MODEL_CHAT_TEMPLATE_H

#include "common/status.h"
#include "model/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    PL_CHAT_LLAMA3 = 0,
    PL_CHAT_LLAMA2,
    PL_CHAT_MISTRAL,
    PL_CHAT_CHATML,
    PL_CHAT_GEMMA,
    PL_CHAT_PHI3,
    PL_CHAT_N_FORMATS
} pl_chat_format_t;

typedef struct {
    const char *role;    /* "system", "user", "assistant" (others as the family allows) */
    const char *content;
} pl_chat_msg_t;

typedef struct pl_chat_template pl_chat_template_t;

/* A template for `text` (the tokenizer_config.json chat_template; may be NULL when `format` is
 * given). `format` (a chat_format name: "llama3", "llama2", "mistral", "chatml", "gemma",
 * "phi3"; NULL to recognise it from the text) overrides recognition. `name` says where the
 * text came from, for errors. bos / eos are the token texts (NULL: empty). */
pl_status_t pl_chat_template_new(const char *text, const char *format, const char *name,
                                 const char *bos, const char *eos, pl_chat_template_t **tmpl_p);
void pl_chat_template_destroy(pl_chat_template_t **tmpl_p);
pl_chat_format_t pl_chat_template_format(const pl_chat_template_t *tmpl);

/* Render messages as the template does; add_generation_prompt as the model expects it.
 * Messages the template refuses (roles out of turn, a role the family lacks) are an error with
 * the template's own message. *text_p is the caller's to free. */
pl_status_t pl_chat_template_render(const pl_chat_template_t *tmpl, const pl_chat_msg_t *msgs,
                                    size_t n, bool add_generation_prompt, char **text_p);

/* The template of a loaded tokenizer (its config's chat_template, bos_token and eos_token),
 * or the family chat_format names (NULL: recognise it). `name` says where the config came from. */
pl_status_t pl_chat_template_for(const pl_tokenizer_t *tok, const char *chat_format,
                                 const char *name, pl_chat_template_t **tmpl_p);

/* Render messages and encode the prompt as the model expects it: special token texts the
 * template wrote become their tokens, and no BOS is added beyond the one the template writes
 * (Hugging Face's apply_chat_template(tokenize=True)). *ids_p is the caller's to free. */
pl_status_t pl_chat_template_encode(const pl_chat_template_t *tmpl, const pl_tokenizer_t *tok,
                                    const pl_chat_msg_t *msgs, size_t n,
                                    bool add_generation_prompt, int32_t **ids_p, size_t *n_p);

/* "llama3", ... for a format; NULL when out of range. */
const char *pl_chat_format_name(pl_chat_format_t format);
/* The format named `name`; PL_ERR_INVALID listing the names when unknown. */
pl_status_t pl_chat_format_parse(const char *name, pl_chat_format_t *format_p);

#endif

/* The OpenAI API's prompts as token ids: each deployment's tokenizer and chat template loaded
 * once and shared by the HTTP threads (both are read-only once made), the same calls a job's
 * prompts file goes through (pipeline/gen_prompts.c), so a request and a job agree. */
#include "daemon/serve_api_int.h"

#include "common/log.h"
#include "model/tokenizer.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_MODELS 32

typedef struct {
    char dir[PATH_MAX];
    pl_tokenizer_t *tok; /* NULL: it failed to load (not retried) */
    pl_chat_template_t *tmpl;
    bool tmpl_tried;
} s_model_t;

struct pl_sapi_toks {
    pthread_mutex_t mu;
    s_model_t *models[S_MAX_MODELS];
    int n;
};

pl_status_t pl_sapi_toks_new(pl_sapi_toks_t **toks_p)
{
    pl_sapi_toks_t *t = calloc(1, sizeof(*t));
    if (!t)
        return pl_error(PL_ERR_NOMEM, "serve api: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    *toks_p = t;
    return PL_OK;
}

void pl_sapi_toks_destroy(pl_sapi_toks_t **toks_p)
{
    pl_sapi_toks_t *t = *toks_p;
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        pl_chat_template_destroy(&t->models[i]->tmpl);
        pl_tokenizer_destroy(&t->models[i]->tok);
        free(t->models[i]);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
    *toks_p = NULL;
}

/* The model's entry, its tokenizer loaded (and its template when `chat`). The entries live as
 * long as the table; their tokenizer and template never change once set. */
static pl_status_t s_model(pl_sapi_toks_t *t, const char *dir, bool chat, s_model_t **m_p,
                           pl_sapi_err_t *e)
{
    s_model_t *m = NULL;
    pl_status_t st = PL_OK;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && !m; i++)
        if (strcmp(t->models[i]->dir, dir) == 0)
            m = t->models[i];
    if (!m) {
        if (t->n == S_MAX_MODELS || !(m = calloc(1, sizeof(*m)))) {
            st = pl_sapi_err_set(e, 503, "server_error", NULL, NULL,
                                 "the API has tokenizers of %d models loaded already", t->n);
            goto out;
        }
        snprintf(m->dir, sizeof(m->dir), "%s", dir);
        if (pl_tokenizer_load(dir, &m->tok)) /* the detail is for the log, not the client */
            pl_log_warn("serve api: model %s: %s", dir, pl_error_msg());
        t->models[t->n++] = m;
    }
    if (!m->tok) {
        st = pl_sapi_err_set(e, 500, "server_error", NULL, NULL,
                             "the deployment's model has no usable tokenizer");
        goto out;
    }
    if (chat && !m->tmpl_tried) {
        m->tmpl_tried = true;
        if (pl_chat_template_for(m->tok, NULL, "tokenizer_config.json", &m->tmpl))
            pl_log_warn("serve api: model %s: %s", dir, pl_error_msg());
    }
    if (chat && !m->tmpl) {
        st = pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "messages",
                             "the model has no chat template this server knows; use "
                             "/v1/completions with a prompt");
        goto out;
    }
    *m_p = m;
out:
    pthread_mutex_unlock(&t->mu);
    return st;
}

pl_status_t pl_sapi_prompt(pl_sapi_toks_t *t, const char *model_dir, const pl_sapi_call_t *c,
                           int32_t **ids_p, int *n_p, pl_sapi_err_t *e)
{
    s_model_t *m = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    pl_status_t st;
    if ((st = s_model(t, model_dir, c->kind == PL_SAPI_CHAT, &m, e)))
        return st;
    if (c->kind == PL_SAPI_CHAT) {
        if (pl_chat_template_encode(m->tmpl, m->tok, c->msgs, c->n_msgs, true, &ids, &n))
            return pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "messages", "%s",
                                   pl_error_msg());
    } else if (c->ids) {
        int vocab = pl_tokenizer_vocab_size(m->tok);
        for (int i = 0; i < c->n_ids; i++)
            if (c->ids[i] >= vocab)
                return pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "prompt",
                                       "'prompt': token id %d at %d is outside the model's "
                                       "vocabulary of %d",
                                       (int)c->ids[i], i, vocab);
        if (!(ids = malloc((size_t)c->n_ids * sizeof(*ids))))
            return pl_sapi_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(ids, c->ids, (size_t)c->n_ids * sizeof(*ids));
        n = (size_t)c->n_ids;
    } else if (pl_tokenizer_encode(m->tok, c->text, c->text_len, PL_TOK_ENCODE_DEFAULT, &ids, &n)) {
        return pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "prompt", "%s",
                               pl_error_msg());
    }
    if (n == 0 || n > PL_SAPI_MAX_PROMPT_IDS) {
        free(ids);
        const char *param = c->kind == PL_SAPI_CHAT ? "messages" : "prompt";
        if (n == 0)
            return pl_sapi_err_set(e, 400, "invalid_request_error", NULL, param,
                                   "the prompt encodes to no tokens");
        return pl_sapi_err_set(e, 400, "invalid_request_error", NULL, param,
                               "the prompt is %zu tokens, more than %d", n, PL_SAPI_MAX_PROMPT_IDS);
    }
    *ids_p = ids;
    *n_p = (int)n;
    return PL_OK;
}

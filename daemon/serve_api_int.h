/* Internals of the OpenAI-compatible API shared by daemon/serve_api*.c: a request body parsed
 * and checked into a call, the OpenAI-shaped error, the response and chunk bodies. */
#ifndef PL_DAEMON_SERVE_API_INT_H
#define PL_DAEMON_SERVE_API_INT_H

#include "common/config.h"
#include "common/job_gen.h"
#include "common/status.h"
#include "daemon/http.h"
#include "daemon/serve_req.h"
#include "model/chat_template.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_SAPI_MAX_MESSAGES 1024
#define PL_SAPI_MAX_PROMPT_IDS (1 << 20)

typedef enum { PL_SAPI_COMPLETION = 0, PL_SAPI_CHAT } pl_sapi_kind_t;

/* An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}} with its status. */
typedef struct {
    int status;       /* 400, 401, 404, 413, 429, 500, 503 */
    const char *type; /* "invalid_request_error", ... (a constant) */
    const char *code; /* a constant, NULL: null */
    char param[64];   /* the request field at fault; "" : null */
    char message[512];
    double retry_after; /* 429: seconds, the Retry-After header */
} pl_sapi_err_t;

/* A request body, checked. Strings are borrowed from `root`, which the call holds. */
typedef struct {
    pl_sapi_kind_t kind;
    json_t *root;
    const char *model;
    /* the prompt: text (completions), token ids (completions) or messages (chat) */
    const char *text;
    size_t text_len;
    int32_t *ids;
    int n_ids;
    pl_chat_msg_t *msgs;
    char **msg_own; /* contents joined from parts (freed with the call), else NULL */
    size_t n_msgs;
    int max_tokens;   /* 0: not given */
    pl_job_gen_t gen; /* sampling, stop strings, min tokens, EOS; max_new_tokens set later */
    bool seed_set;
    bool stream, include_usage;
} pl_sapi_call_t;

/* Fill an error (status, type, code, param; message formatted). Returns PL_ERR_INVALID. */
pl_status_t pl_sapi_err_set(pl_sapi_err_t *e, int status, const char *type, const char *code,
                            const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Parse and check a request body of `kind`: every field's type and range, unknown fields
 * refused. On error *err says why (a 400) and *call is untouched; else the caller frees *call
 * with pl_sapi_call_clear. */
pl_status_t pl_sapi_call_parse(pl_sapi_kind_t kind, const char *body, size_t len,
                               pl_sapi_call_t *call, pl_sapi_err_t *err);
void pl_sapi_call_clear(pl_sapi_call_t *call);

/* ---- bodies (serve_api_json.c); each returns a malloc'd NUL-terminated string or NULL ---- */

char *pl_sapi_err_json(const pl_sapi_err_t *e, size_t *len_p);
/* What the answer names itself: the id ("chatcmpl-..." / "cmpl-..."), created, the model. */
typedef struct {
    pl_sapi_kind_t kind;
    char id[48];
    int64_t created;
    char model[PL_CFG_NAME_MAX + 1];
    int n_prompt;
} pl_sapi_answer_t;
const char *pl_sapi_finish_name(pl_serve_finish_t f);
/* The whole answer of a non-streamed call. */
char *pl_sapi_answer_json(const pl_sapi_answer_t *a, const char *text, size_t len,
                          pl_serve_finish_t finish, int n_completion, size_t *len_p);
/* One Server-Sent Event "data: {...}\n\n" of a stream: the first (chat: the role), one of text,
 * the last (finish set; with_usage adds "usage": null to every chunk as OpenAI does when
 * stream_options.include_usage is set), and the usage chunk. */
char *pl_sapi_chunk_role(const pl_sapi_answer_t *a, bool with_usage, size_t *len_p);
char *pl_sapi_chunk_text(const pl_sapi_answer_t *a, const char *text, size_t len, bool with_usage,
                         size_t *len_p);
char *pl_sapi_chunk_finish(const pl_sapi_answer_t *a, pl_serve_finish_t finish, bool with_usage,
                           size_t *len_p);
char *pl_sapi_chunk_usage(const pl_sapi_answer_t *a, int n_completion, size_t *len_p);
/* An error inside a stream that had begun: "data: {"error": ...}\n\n". */
char *pl_sapi_chunk_error(const pl_sapi_err_t *e, size_t *len_p);
/* The models list of /v1/models. */
char *pl_sapi_models_json(const pl_serve_deployment_t *deps, int n, size_t *len_p);

/* Text safe for JSON: invalid UTF-8 becomes U+FFFD; an incomplete character at the end is held
 * back (not consumed) unless `final`. out has room for 3 * len + 1 bytes; returns its length and
 * sets *used_p to the input bytes consumed. */
size_t pl_sapi_utf8_clean(const char *in, size_t len, bool final, char *out, size_t *used_p);

/* ---- prompts (serve_api_tok.c): the deployments' tokenizers, each loaded once ---- */

typedef struct pl_sapi_toks pl_sapi_toks_t;

pl_status_t pl_sapi_toks_new(pl_sapi_toks_t **toks_p);
void pl_sapi_toks_destroy(pl_sapi_toks_t **toks_p);
/* The call's prompt as the model's token ids: text encoded as a job's text prompt is, messages
 * through the model's chat template as a job's messages are (model/chat_template.h), ids
 * checked against the vocabulary. */
pl_status_t pl_sapi_prompt(pl_sapi_toks_t *toks, const char *model_dir, const pl_sapi_call_t *c,
                           int32_t **ids_p, int *n_p, pl_sapi_err_t *err);

/* ---- streams (serve_api_stream.c) ---- */

/* Answer with the request's stream of events (takes *req_p): the role chunk (chat), text
 * chunks as they come, the finish chunk, usage when asked, "data: [DONE]". A client that goes
 * away cancels the request. */
void pl_sapi_stream_answer(pl_serve_req_t **req_p, const pl_sapi_answer_t *a, bool with_usage,
                           pl_http_resp_t *resp);
/* The error of a request that ended without an answer (refused, failed, canceled). */
void pl_sapi_end_err(const pl_serve_end_t *end, pl_sapi_err_t *err);

#endif

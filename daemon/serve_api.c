/* The OpenAI API's routes: the bearer-token check, /v1/models from the hub's deployments, and the
 * completion routes: a call checked, its prompt tokenized, handed to the hub as a serving
 * request, and answered whole or as a stream. */
#include "daemon/serve_api.h"

#include "common/log.h"
#include "common/util.h"
#include "daemon/serve_api_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_WAIT_S 0.2 /* one wait on a request between looks at the client */
#define S_KEYS_FILE_MAX (1u << 20)

struct pl_serve_api {
    pl_serve_hub_t *hub;
    pl_sapi_toks_t *toks;
    int n_keys;
    char keys[PL_CFG_MAX_API_KEYS][PL_CFG_API_KEY_MAX + 1];
};

/* ---- bearer tokens ---- */

static pl_status_t s_keys_file(pl_serve_api_t *api, const char *path)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pl_error(PL_ERR_IO, "api_keys_file %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pl_error(PL_ERR_INVALID, "api_keys_file %s: not a regular file", path);
    }
    if (sb.st_mode & 077) {
        close(fd);
        return pl_error(PL_ERR_INVALID,
                        "api_keys_file %s: mode %04o lets others read it; it must be 0600 "
                        "(chmod 600 %s)",
                        path, (unsigned)(sb.st_mode & 07777), path);
    }
    close(fd);
    char *text;
    size_t len;
    pl_status_t st = pl_file_read(path, S_KEYS_FILE_MAX, &text, &len);
    if (st)
        return st;
    int line = 0;
    for (char *p = text, *next; p < text + len; p = next) {
        line++;
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        next = nl ? nl + 1 : text + len;
        size_t n = (size_t)((nl ? nl : text + len) - p);
        while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        while (n && (*p == ' ' || *p == '\t'))
            p++, n--;
        if (n == 0 || *p == '#')
            continue;
        bool ok = n <= PL_CFG_API_KEY_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)p[i] > ' ' && (unsigned char)p[i] < 0x7f;
        if (!ok || api->n_keys == PL_CFG_MAX_API_KEYS) {
            st = pl_error(PL_ERR_INVALID,
                          ok ? "api_keys_file %s:%d: more than %d keys"
                             : "api_keys_file %s:%d: a key is 1 to %d characters of visible "
                               "ASCII without spaces",
                          path, line, ok ? PL_CFG_MAX_API_KEYS : PL_CFG_API_KEY_MAX);
            break;
        }
        memcpy(api->keys[api->n_keys], p, n);
        api->keys[api->n_keys++][n] = '\0';
    }
    if (!st && api->n_keys == 0)
        st = pl_error(PL_ERR_INVALID, "api_keys_file %s: no keys in it", path);
    memset(text, 0, len);
    free(text);
    return st;
}

/* Compared in time that depends only on the lengths. */
static bool s_key_eq(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na && i < nb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool s_authorized(const pl_serve_api_t *api, const pl_http_req_t *req, pl_sapi_err_t *e)
{
    if (api->n_keys == 0)
        return true;
    const char *h = pl_http_req_header(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        pl_sapi_err_set(e, 401, "invalid_request_error", "missing_api_key", NULL,
                        "You didn't provide an API key: send it as 'Authorization: Bearer KEY'");
        return false;
    }
    const char *k = h + 7;
    while (*k == ' ')
        k++;
    size_t n = strlen(k);
    while (n && k[n - 1] == ' ')
        n--;
    bool ok = false;
    for (int i = 0; i < api->n_keys; i++)
        ok |= s_key_eq(k, n, api->keys[i]);
    if (!ok)
        pl_sapi_err_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "Incorrect API key provided");
    return ok;
}

/* ---- answers ---- */

static void s_error(pl_http_resp_t *resp, const pl_sapi_err_t *e)
{
    size_t len = 0;
    char *body = pl_sapi_err_json(e, &len);
    if (!body) {
        pl_http_resp_text(resp, 500, "out of memory\n");
        return;
    }
    pl_http_resp_take(resp, e->status, "application/json", &body, len);
    if (e->status == 401)
        pl_http_resp_header(resp, "WWW-Authenticate", "Bearer realm=\"pipeld\"");
    if (e->status == 429 || (e->status == 503 && e->retry_after > 0))
        pl_http_resp_header(resp, "Retry-After", "%d",
                            (int)PL_MAX(1.0, ceil(PL_MIN(e->retry_after, 86400.0))));
}

static void s_models(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    pl_serve_api_t *api = arg;
    pl_sapi_err_t e;
    if (!s_authorized(api, req, &e)) {
        s_error(resp, &e);
        return;
    }
    pl_serve_deployment_t *deps = malloc(PL_SERVE_MAX_DEPLOYMENTS * sizeof(*deps));
    size_t len = 0;
    char *body = NULL;
    if (deps)
        body = pl_sapi_models_json(deps, pl_serve_hub_deployments(api->hub, deps), &len);
    free(deps);
    if (!body)
        pl_http_resp_text(resp, 500, "out of memory\n");
    else
        pl_http_resp_take(resp, 200, "application/json", &body, len);
}

/* The deployment the call names (404 when none; 503 while it is not ready). */
static bool s_deployment(pl_serve_api_t *api, const char *name, pl_serve_deployment_t *out,
                         pl_sapi_err_t *e)
{
    pl_serve_deployment_t *deps = malloc(PL_SERVE_MAX_DEPLOYMENTS * sizeof(*deps));
    if (!deps) {
        pl_sapi_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    int n = pl_serve_hub_deployments(api->hub, deps), i = 0;
    while (i < n && strcmp(deps[i].name, name) != 0)
        i++;
    if (i < n)
        *out = deps[i];
    free(deps);
    if (i == n) {
        pl_sapi_err_set(e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.*s' does not exist (GET /v1/models lists them)",
                        PL_CFG_NAME_MAX, name);
        return false;
    }
    if (!out->ready) {
        pl_sapi_err_set(e, 503, "server_error", "service_unavailable", "model",
                        "The model '%s' is not ready (planning, loading or recovering)", out->name);
        e->retry_after = 5;
        return false;
    }
    return true;
}

/* The request's settings: max_tokens defaulted and checked against the context and the
 * deployment's cap, a seed when none was given. */
static bool s_settings(const pl_sapi_call_t *c, const pl_serve_deployment_t *d, int n_prompt,
                       pl_job_gen_t *gen, pl_sapi_err_t *e)
{
    int cap =
        d->max_tokens > 0 ? PL_MIN(d->max_tokens, PL_JOB_MAX_NEW_TOKENS) : PL_JOB_MAX_NEW_TOKENS;
    int room = d->context > 0 ? d->context - n_prompt : cap;
    int max = c->max_tokens;
    const char *param = c->kind == PL_SAPI_CHAT ? "messages" : "prompt";
    if (room < 1) {
        pl_sapi_err_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                        "This model's maximum context length is %d tokens; the prompt is %d "
                        "tokens, which leaves no room for a completion",
                        d->context, n_prompt);
        return false;
    }
    if (!max) /* OpenAI's default for completions; a chat may fill the context */
        max = c->kind == PL_SAPI_CHAT ? PL_MIN(room, cap) : 16;
    if (max > room) {
        pl_sapi_err_set(e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                        "This model's maximum context length is %d tokens. However, you "
                        "requested %d tokens (%d in the prompt, %d for the completion)",
                        d->context, n_prompt + max, n_prompt, max);
        return false;
    }
    if (max > cap) {
        pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "max_tokens",
                        "'max_tokens' is %d; this deployment allows at most %d", max, cap);
        return false;
    }
    if (c->gen.min_new_tokens > max) {
        pl_sapi_err_set(e, 400, "invalid_request_error", NULL, "min_tokens",
                        "'min_tokens' (%d) is more than max_tokens (%d)", c->gen.min_new_tokens,
                        max);
        return false;
    }
    *gen = c->gen;
    gen->max_new_tokens = max;
    if (!c->seed_set) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gen->seed =
            pl_rand_u64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), (uint64_t)getpid());
    }
    return true;
}

/* Wait until the request has output or ended (stream) or ended (whole), appending the text
 * to *all when given. False when the client went away first: the request is canceled. */
static bool s_wait(pl_serve_req_t *r, const pl_http_req_t *req, bool until_end, char **all,
                   size_t *all_len, size_t *text_at, int *n_tokens, pl_serve_end_t *end)
{
    for (;;) {
        char *text = NULL;
        size_t len = 0;
        if (pl_serve_req_wait(r, S_WAIT_S, text_at, &text, &len, n_tokens, end)) {
            pl_serve_req_cancel(r);
            return false;
        }
        if (all && len) {
            char *b = realloc(*all, *all_len + len + 1);
            if (!b) {
                free(text);
                pl_serve_req_cancel(r);
                return false;
            }
            memcpy(b + *all_len, text, len + 1);
            *all = b;
            *all_len += len;
        }
        free(text);
        if (end->finish != PL_SERVE_RUNNING || (!until_end && (*n_tokens > 0 || *text_at > 0)))
            return true;
        if (pl_http_req_gone(req)) {
            pl_serve_req_cancel(r);
            return false;
        }
    }
}

static void s_answer(pl_serve_req_t **r_p, const pl_sapi_call_t *c, const pl_sapi_answer_t *a,
                     const pl_http_req_t *req, pl_http_resp_t *resp)
{
    pl_serve_end_t end;
    pl_sapi_err_t e;
    size_t text_at = 0, all_len = 0;
    char *all = NULL;
    int n_tokens = 0;
    if (!s_wait(*r_p, req, !c->stream, c->stream ? NULL : &all, &all_len, &text_at, &n_tokens,
                &end)) {
        pl_http_resp_text(resp, 503, "the client went away\n");
        goto out;
    }
    bool answered = end.finish == PL_SERVE_STOP || end.finish == PL_SERVE_LENGTH;
    if (!answered && n_tokens == 0 && text_at == 0) { /* never began: an error status */
        pl_sapi_end_err(&end, &e);
        s_error(resp, &e);
        goto out;
    }
    if (c->stream) {
        pl_serve_req_t *r = *r_p;
        pl_serve_req_ref(r); /* the stream restarts from the beginning of the text */
        pl_sapi_stream_answer(&r, a, c->include_usage, resp);
        goto out;
    }
    if (!answered) {
        pl_sapi_end_err(&end, &e);
        s_error(resp, &e);
        goto out;
    }
    char *clean = malloc(3 * all_len + 1);
    size_t used, len = 0;
    char *body = NULL;
    if (clean) {
        size_t n = pl_sapi_utf8_clean(all ? all : "", all_len, true, clean, &used);
        body = pl_sapi_answer_json(a, clean, n, end.finish, n_tokens, &len);
    }
    free(clean);
    if (body)
        pl_http_resp_take(resp, 200, "application/json", &body, len);
    else
        pl_http_resp_text(resp, 500, "out of memory\n");
out:
    free(all);
    pl_serve_req_unref(r_p);
}

static void s_generate(pl_serve_api_t *api, pl_sapi_kind_t kind, const pl_http_req_t *req,
                       pl_http_resp_t *resp)
{
    pl_sapi_err_t e;
    pl_sapi_call_t c;
    pl_serve_deployment_t dep;
    pl_serve_in_t in = {0};
    pl_serve_req_t *r = NULL;
    if (!s_authorized(api, req, &e)) {
        s_error(resp, &e);
        return;
    }
    if (req->oversize) {
        pl_sapi_err_set(&e, 400, "invalid_request_error", "request_too_large", NULL,
                        "The request body is %zu bytes, more than this server's limit",
                        req->oversize);
        s_error(resp, &e);
        return;
    }
    if (pl_sapi_call_parse(kind, req->body, req->body_len, &c, &e)) {
        s_error(resp, &e);
        return;
    }
    if (!s_deployment(api, c.model, &dep, &e) ||
        pl_sapi_prompt(api->toks, dep.model, &c, &in.prompt, &in.n_prompt, &e) ||
        !s_settings(&c, &dep, in.n_prompt, &in.gen, &e)) {
        s_error(resp, &e);
        goto out;
    }
    snprintf(in.deployment, sizeof(in.deployment), "%s", dep.name);
    pl_sapi_answer_t a = {.kind = kind, .created = (int64_t)time(NULL), .n_prompt = in.n_prompt};
    snprintf(a.model, sizeof(a.model), "%s", dep.name);
    if (pl_serve_req_create(&in, &r)) {
        pl_sapi_err_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        s_error(resp, &e);
        goto out;
    }
    snprintf(a.id, sizeof(a.id), "%s-%016llx%08llx", kind == PL_SAPI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)pl_serve_req_id(r),
             (unsigned long long)(in.gen.seed & 0xffffffffu));
    pl_serve_hub_put(api->hub, r);
    s_answer(&r, &c, &a, req, resp);
out:
    free(in.prompt);
    pl_sapi_call_clear(&c);
}

static void s_completions(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    s_generate(arg, PL_SAPI_COMPLETION, req, resp);
}

static void s_chat(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    s_generate(arg, PL_SAPI_CHAT, req, resp);
}

/* ---- the object ---- */

pl_status_t pl_serve_api_new(const pl_cfg_http_t *cfg, pl_serve_hub_t *hub, pl_serve_api_t **api_p)
{
    pl_serve_api_t *api = calloc(1, sizeof(*api));
    pl_status_t st;
    if (!api)
        return pl_error(PL_ERR_NOMEM, "serve api: out of memory");
    api->hub = hub;
    if ((st = pl_sapi_toks_new(&api->toks)))
        goto err;
    if (cfg && cfg->api_keys_file[0]) {
        if ((st = s_keys_file(api, cfg->api_keys_file)))
            goto err;
    } else if (cfg) {
        api->n_keys = PL_MIN(cfg->n_api_keys, PL_CFG_MAX_API_KEYS);
        memcpy(api->keys, cfg->api_keys, sizeof(api->keys));
    }
    *api_p = api;
    return PL_OK;
err:
    pl_serve_api_destroy(&api);
    return st;
}

int pl_serve_api_routes(pl_serve_api_t *api, pl_http_route_t out[PL_SERVE_API_N_ROUTES])
{
    out[0] = (pl_http_route_t){"GET", "/v1/models", s_models, api, 0};
    out[1] = (pl_http_route_t){"POST", "/v1/completions", s_completions, api, PL_HTTP_OVERSIZE};
    out[2] = (pl_http_route_t){"POST", "/v1/chat/completions", s_chat, api, PL_HTTP_OVERSIZE};
    return PL_SERVE_API_N_ROUTES;
}

void pl_serve_api_destroy(pl_serve_api_t **api_p)
{
    pl_serve_api_t *api = *api_p;
    if (!api)
        return;
    pl_sapi_toks_destroy(&api->toks);
    memset(api->keys, 0, sizeof(api->keys));
    free(api);
    *api_p = NULL;
}

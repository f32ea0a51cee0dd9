/* A streamed OpenAI answer: the producer the HTTP server pulls Server-Sent Events from, waiting
 * on its serving request in short waits; a client that leaves cancels the request. Also the
 * UTF-8 cleaning every answer's text goes through. */
#include "daemon/serve_api_int.h"

#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_WAIT_S 0.2      /* one wait on the request; the server's contract is 0.25 s */
#define S_KEEPALIVE_S 5.0 /* a comment line when nothing else was sent for this long */
#define S_HOLD 8          /* an incomplete UTF-8 character held back */

/* The length of the UTF-8 sequence starting at p (at most n bytes), 0 when invalid, -1 when it
 * is a valid but incomplete start. */
static int s_utf8_seq(const unsigned char *p, size_t n)
{
    int len;
    unsigned min;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, min = 0x80, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, min = 0x800, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, min = 0x10000, cp = p[0] & 0x07;
    else
        return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return -1;
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

size_t pl_sapi_utf8_clean(const char *in, size_t len, bool final, char *out, size_t *used_p)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t i = 0, o = 0;
    while (i < len) {
        int k = s_utf8_seq(p + i, len - i);
        if (k < 0 && !final)
            break; /* the rest of this character comes later */
        if (k <= 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, p + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
    }
    out[o] = '\0';
    *used_p = i;
    return o;
}

void pl_sapi_end_err(const pl_serve_end_t *end, pl_sapi_err_t *err)
{
    int status = end->http_status >= 400 && end->http_status <= 599 ? end->http_status : 503;
    const char *msg = end->message[0] ? end->message : "the request ended without an answer";
    if (end->finish == PL_SERVE_CANCELED && !end->message[0])
        msg = "the deployment ended the request";
    const char *type = status == 429   ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    const char *code = status == 429   ? "rate_limit_exceeded"
                       : status == 404 ? "model_not_found"
                       : status == 503 ? "service_unavailable"
                                       : NULL;
    pl_sapi_err_set(err, status, type, code, NULL, "%.*s", (int)sizeof(end->message), msg);
    err->retry_after = status == 429 ? (end->retry_after_s > 0 ? end->retry_after_s : 1.0) : 0;
}

typedef enum { S_BEGIN = 0, S_RUNNING, S_ENDED } s_phase_t;

typedef struct {
    pl_serve_req_t *req;
    pl_sapi_answer_t a;
    bool usage;
    s_phase_t phase;
    size_t text_at;
    char hold[S_HOLD];
    size_t n_hold;
    char *out; /* events made, not yet handed over */
    size_t out_len, out_at, out_cap;
    double last_sent;
} s_stream_t;

/* Append an event (taken; NULL: out of memory, which ends the stream as an error). Its
 * length is read after the event is made: s_put(s, make(&len), &len). */
static bool s_put(s_stream_t *s, char *ev, const size_t *len_p)
{
    size_t len = *len_p;
    if (!ev)
        return false;
    if (s->out_at == s->out_len)
        s->out_at = s->out_len = 0;
    if (s->out_len + len > s->out_cap) {
        size_t cap = PL_MAX(s->out_cap * 2, s->out_len + len);
        char *b = realloc(s->out, cap);
        if (!b) {
            free(ev);
            return false;
        }
        s->out = b;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, ev, len);
    s->out_len += len;
    free(ev);
    return true;
}

/* The text since the last look (held bytes first), cleaned, as a chunk. */
static bool s_text(s_stream_t *s, const char *text, size_t len, bool final)
{
    if (!len && !(final && s->n_hold))
        return true;
    char *joined = malloc(s->n_hold + len + 1), *clean = malloc(3 * (s->n_hold + len) + 1);
    bool ok = joined && clean;
    if (ok) {
        memcpy(joined, s->hold, s->n_hold);
        if (len)
            memcpy(joined + s->n_hold, text, len);
        size_t total = s->n_hold + len, used;
        size_t n = pl_sapi_utf8_clean(joined, total, final, clean, &used);
        s->n_hold = total - used; /* at most 3: an incomplete character */
        memcpy(s->hold, joined + used, s->n_hold);
        size_t ev_len = 0;
        if (n)
            ok = s_put(s, pl_sapi_chunk_text(&s->a, clean, n, s->usage, &ev_len), &ev_len);
    }
    free(joined);
    free(clean);
    return ok;
}

static bool s_finish(s_stream_t *s, const pl_serve_end_t *end, int n_tokens)
{
    size_t len = 0;
    bool ok = true;
    if (end->finish == PL_SERVE_STOP || end->finish == PL_SERVE_LENGTH) {
        ok = s_put(s, pl_sapi_chunk_finish(&s->a, end->finish, s->usage, &len), &len);
        if (ok && s->usage)
            ok = s_put(s, pl_sapi_chunk_usage(&s->a, n_tokens, &len), &len);
    } else {
        pl_sapi_err_t e;
        pl_sapi_end_err(end, &e);
        ok = s_put(s, pl_sapi_chunk_error(&e, &len), &len);
    }
    static const char done[] = "data: [DONE]\n\n";
    size_t dlen = sizeof(done) - 1;
    return ok && s_put(s, strdup(done), &dlen);
}

static ssize_t s_next(void *arg, char *buf, size_t max)
{
    s_stream_t *s = arg;
    if (s->out_at == s->out_len) {
        if (s->phase == S_ENDED)
            return PL_HTTP_STREAM_END;
        size_t len = 0;
        if (s->phase == S_BEGIN) {
            s->phase = S_RUNNING;
            if (s->a.kind == PL_SAPI_CHAT &&
                !s_put(s, pl_sapi_chunk_role(&s->a, s->usage, &len), &len))
                return PL_HTTP_STREAM_ERROR;
        }
        char *text = NULL;
        int n_tokens = 0;
        pl_serve_end_t end;
        bool have = s->out_at < s->out_len; /* the role chunk: go without waiting */
        if (pl_serve_req_wait(s->req, have ? 0 : S_WAIT_S, &s->text_at, &text, &len, &n_tokens,
                              &end))
            return PL_HTTP_STREAM_ERROR;
        bool ended = end.finish != PL_SERVE_RUNNING;
        bool ok = s_text(s, text, len, ended);
        free(text);
        if (ok && ended) {
            ok = s_finish(s, &end, n_tokens);
            s->phase = S_ENDED;
        }
        if (!ok)
            return PL_HTTP_STREAM_ERROR;
        double now = pl_now();
        if (s->out_at == s->out_len && now - s->last_sent >= S_KEEPALIVE_S) {
            static const char ka[] = ": keep-alive\n\n";
            size_t ka_len = sizeof(ka) - 1;
            if (!s_put(s, strdup(ka), &ka_len))
                return PL_HTTP_STREAM_ERROR;
        }
        if (s->out_at == s->out_len)
            return 0;
    }
    size_t n = PL_MIN(max, s->out_len - s->out_at);
    memcpy(buf, s->out + s->out_at, n);
    s->out_at += n;
    s->last_sent = pl_now();
    return (ssize_t)n;
}

static void s_done(void *arg, bool completed)
{
    s_stream_t *s = arg;
    if (!completed)
        pl_serve_req_cancel(s->req); /* the client left: free its slots */
    pl_serve_req_unref(&s->req);
    free(s->out);
    free(s);
}

void pl_sapi_stream_answer(pl_serve_req_t **req_p, const pl_sapi_answer_t *a, bool with_usage,
                           pl_http_resp_t *resp)
{
    s_stream_t *s = calloc(1, sizeof(*s));
    if (!s) {
        pl_serve_req_cancel(*req_p);
        pl_serve_req_unref(req_p);
        pl_http_resp_text(resp, 500, "out of memory\n");
        return;
    }
    s->req = *req_p;
    *req_p = NULL;
    s->a = *a;
    s->usage = with_usage;
    s->last_sent = pl_now();
    pl_http_stream_t st = {.next = s_next, .done = s_done, .arg = s};
    pl_http_resp_stream(resp, 200, "text/event-stream; charset=utf-8", &st);
    pl_http_resp_header(resp, "Cache-Control", "no-cache");
    pl_http_resp_header(resp, "X-Accel-Buffering", "no");
}

/* HTTP request routing without the server: the method and target checked, the route found,
 * the handler run; the response's parts. The server calls it per request; the fuzz harness
 * calls it directly. */
#include "daemon/http.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_http_resp_clear(pl_http_resp_t *resp)
{
    free(resp->body);
    if (resp->stream.done)
        resp->stream.done(resp->stream.arg, false);
    memset(resp, 0, sizeof(*resp));
}

void pl_http_resp_stream(pl_http_resp_t *resp, int status, const char *content_type,
                         const pl_http_stream_t *stream)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    if (resp->stream.done)
        resp->stream.done(resp->stream.arg, false);
    resp->status = status;
    snprintf(resp->content_type, sizeof(resp->content_type), "%s", content_type);
    resp->stream = *stream;
}

/* Header names are tokens, values visible ASCII and spaces: nothing that could split a line. */
static bool s_header_ok(const char *s, bool value)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f || (!value && *s == ':') ||
            (!value && *s == ' '))
            return false;
    return true;
}

void pl_http_resp_header(pl_http_resp_t *resp, const char *name, const char *fmt, ...)
{
    if (resp->n_headers >= PL_HTTP_MAX_HEADERS)
        return;
    char value[sizeof(resp->headers[0].value)];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(value) || strlen(name) >= sizeof(resp->headers[0].name) ||
        !s_header_ok(name, false) || !s_header_ok(value, true))
        return;
    snprintf(resp->headers[resp->n_headers].name, sizeof(resp->headers[0].name), "%s", name);
    memcpy(resp->headers[resp->n_headers].value, value, (size_t)n + 1);
    resp->n_headers++;
}

const char *pl_http_req_header(const pl_http_req_t *req, const char *name)
{
    return req->conn && req->conn->header ? req->conn->header(req->conn->ctx, name) : NULL;
}

bool pl_http_req_gone(const pl_http_req_t *req)
{
    return req->conn && req->conn->gone && req->conn->gone(req->conn->ctx);
}

void pl_http_resp_take(pl_http_resp_t *resp, int status, const char *content_type, char **body_p,
                       size_t len)
{
    free(resp->body);
    if (resp->stream.done)
        resp->stream.done(resp->stream.arg, false);
    memset(&resp->stream, 0, sizeof(resp->stream));
    resp->status = status;
    snprintf(resp->content_type, sizeof(resp->content_type), "%s", content_type);
    resp->body = *body_p;
    resp->len = *body_p ? len : 0;
    *body_p = NULL;
}

void pl_http_resp_text(pl_http_resp_t *resp, int status, const char *fmt, ...)
{
    va_list ap;
    char *text = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        text = NULL;
    pl_http_resp_take(resp, status, "text/plain; charset=utf-8", &text, n < 0 ? 0 : (size_t)n);
}

/* A method is an RFC 9110 token; ours are upper case letters only. */
static bool s_valid_method(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > PL_HTTP_MAX_METHOD)
        return false;
    for (size_t i = 0; i < n; i++)
        if (m[i] < 'A' || m[i] > 'Z')
            return false;
    return true;
}

/* An origin-form target: '/' then visible ASCII. */
static bool s_valid_target(const char *t, size_t n)
{
    if (n == 0 || t[0] != '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return false;
    return true;
}

void pl_http_handle(const pl_http_route_t *routes, int n_routes, const char *method,
                    const char *target, const char *body, size_t body_len, pl_http_resp_t *resp)
{
    pl_http_handle_conn(routes, n_routes, method, target, body, body_len, 0, NULL, resp);
}

void pl_http_handle_conn(const pl_http_route_t *routes, int n_routes, const char *method,
                         const char *target, const char *body, size_t body_len, size_t oversize,
                         const pl_http_conn_t *conn, pl_http_resp_t *resp)
{
    char path[PL_HTTP_MAX_URL + 1];
    size_t tlen = target ? strnlen(target, PL_HTTP_MAX_URL + 1) : 0;
    if (!method || !s_valid_method(method)) {
        pl_http_resp_text(resp, 400, "bad request: method is not a token\n");
        return;
    }
    if (tlen > PL_HTTP_MAX_URL) {
        pl_http_resp_text(resp, 414, "request target longer than %d bytes\n", PL_HTTP_MAX_URL);
        return;
    }
    if (!s_valid_target(target, tlen)) {
        pl_http_resp_text(resp, 400, "bad request: the target must be a path starting with '/'\n");
        return;
    }
    memcpy(path, target, tlen + 1);
    char *q = strchr(path, '?');
    const char *query = "";
    if (q) {
        *q = '\0';
        query = target + (q - path) + 1;
    }
    bool path_known = false;
    char allow[64] = "";
    for (int i = 0; i < n_routes; i++) {
        if (strcmp(routes[i].path, path) != 0)
            continue;
        path_known = true;
        if (strcmp(routes[i].method, method) == 0 ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET"))) {
            pl_http_req_t req = {.method = method,
                                 .path = path,
                                 .query = query,
                                 .body = body && !oversize ? body : "",
                                 .body_len = body && !oversize ? body_len : 0,
                                 .oversize = oversize,
                                 .conn = conn};
            pl_http_resp_clear(resp);
            if (oversize && !(routes[i].flags & PL_HTTP_OVERSIZE)) {
                pl_http_resp_text(resp, 413, "request body larger than the limit\n");
                return;
            }
            routes[i].fn(routes[i].arg, &req, resp);
            if (resp->status < 100 || resp->status > 599)
                pl_http_resp_text(resp, 500, "internal error: the handler gave no answer\n");
            if (!resp->content_type[0])
                snprintf(resp->content_type, sizeof(resp->content_type),
                         "text/plain; charset=utf-8");
            return;
        }
        size_t used = strlen(allow);
        snprintf(allow + used, sizeof(allow) - used, "%s%s", used ? ", " : "", routes[i].method);
    }
    if (!path_known) {
        pl_http_resp_text(resp, 404, "not found: %s\n", path);
        return;
    }
    pl_http_resp_text(resp, 405, "method %s not allowed on %s\n", method, path);
    snprintf(resp->allow, sizeof(resp->allow), "%s", allow);
}

/* The HTTP server on libmicrohttpd: a thread per connection beside the event loop, bodies
 * gathered up to a limit, every request answered through pl_http_handle's route table. */
#include "daemon/http.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ROUTES 32

struct pl_http {
    struct MHD_Daemon *mhd;
    pl_http_route_t routes[S_MAX_ROUTES];
    int n_routes;
    size_t max_body;
    int port;
};

/* One request's state between libmicrohttpd's calls: the raw target, the body so far. */
typedef struct {
    char target[PL_HTTP_MAX_URL + 2]; /* one byte over the limit, so too long stays too long */
    char *buf;
    size_t len, cap;
    bool too_big, started;
} s_req_t;

/* Called first with the raw target, before libmicrohttpd splits the query off and decodes it;
 * what it returns is the request's state. */
static void *s_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    s_req_t *q = calloc(1, sizeof(*q));
    if (q)
        snprintf(q->target, sizeof(q->target), "%s", uri ? uri : "");
    return q;
}

/* libmicrohttpd leaves the body out of a HEAD answer itself, keeping its Content-Length. */
static enum MHD_Result s_queue(struct MHD_Connection *conn, pl_http_resp_t *r)
{
    struct MHD_Response *mr;
    if (!r->body)
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    else {
        mr = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (mr)
            r->body = NULL; /* the response frees it */
    }
    if (!mr)
        return MHD_NO;
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    if (r->allow[0])
        MHD_add_response_header(mr, MHD_HTTP_HEADER_ALLOW, r->allow);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result s_too_big(pl_http_t *s, struct MHD_Connection *conn)
{
    pl_http_resp_t r = {0};
    pl_http_resp_text(&r, 413, "request body larger than %zu bytes\n", s->max_body);
    enum MHD_Result ret = s_queue(conn, &r);
    pl_http_resp_clear(&r);
    return ret;
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **req_cls)
{
    pl_http_t *s = cls;
    s_req_t *q = *req_cls;
    if (!q)
        return MHD_NO; /* s_uri could not allocate */
    if (!q->started) { /* the headers are in; the body (if any) comes in the next calls */
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        q->started = true;
        if (cl && strtoull(cl, NULL, 10) > s->max_body) {
            q->too_big = true;
            return s_too_big(s, conn); /* refused before a byte of it is read */
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        if (!q->too_big && q->len + n <= s->max_body) {
            if (q->len + n + 1 > q->cap) {
                size_t cap = q->cap ? q->cap : 4096;
                while (cap < q->len + n + 1)
                    cap *= 2;
                char *b = realloc(q->buf, cap);
                if (!b)
                    return MHD_NO;
                q->buf = b;
                q->cap = cap;
            }
            memcpy(q->buf + q->len, upload, n);
            q->len += n;
            q->buf[q->len] = '\0';
        } else {
            q->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big)
        return s_too_big(s, conn);
    pl_http_resp_t r = {0};
    pl_http_handle(s->routes, s->n_routes, method, q->target, q->buf, q->len, &r);
    enum MHD_Result ret = s_queue(conn, &r);
    pl_http_resp_clear(&r);
    return ret;
}

static void s_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                        enum MHD_RequestTerminationCode toe)
{
    s_req_t *q = *req_cls;
    if (q) {
        free(q->buf);
        free(q);
        *req_cls = NULL;
    }
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    pl_log_debug("http: %s", msg);
}

pl_status_t pl_http_start(const pl_http_params_t *p, const pl_http_route_t *routes, int n_routes,
                          pl_http_t **srv_p)
{
    struct sockaddr_storage sa = {0};
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (n_routes > S_MAX_ROUTES)
        return pl_error(PL_ERR_RANGE, "http: %d routes, at most %d", n_routes, S_MAX_ROUTES);
    if (p->port < 0 || p->port > 65535)
        return pl_error(PL_ERR_RANGE, "http: port %d is not 0-65535", p->port);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
    if (inet_pton(AF_INET, p->address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p->port);
    } else if (inet_pton(AF_INET6, p->address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p->port);
        flags |= MHD_USE_IPv6;
    } else {
        return pl_error(PL_ERR_INVALID, "http: address '%s' is not an IPv4 or IPv6 address",
                        p->address);
    }
    pl_http_t *s = calloc(1, sizeof(*s));
    if (!s)
        return pl_error(PL_ERR_NOMEM, "http: out of memory");
    memcpy(s->routes, routes, (size_t)n_routes * sizeof(*routes));
    s->n_routes = n_routes;
    s->max_body = p->max_body ? p->max_body : PL_HTTP_MAX_BODY_DEF;
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, s_access, s, MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(p->max_conns > 0 ? p->max_conns : 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(p->timeout_s > 0 ? p->timeout_s : 10), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED, s_completed, s,
        MHD_OPTION_URI_LOG_CALLBACK, s_uri, s, MHD_OPTION_END);
    if (!s->mhd) {
        free(s);
        return pl_error(PL_ERR_IO, "http: cannot listen on %s port %d", p->address, p->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : p->port;
    *srv_p = s;
    return PL_OK;
}

int pl_http_port(const pl_http_t *s)
{
    return s->port;
}

void pl_http_stop(pl_http_t **srv_p)
{
    pl_http_t *s = *srv_p;
    if (!s)
        return;
    MHD_stop_daemon(s->mhd);
    free(s);
    *srv_p = NULL;
}

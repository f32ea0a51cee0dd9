/* The HTTP server on libmicrohttpd: a thread per connection beside the event loop, bodies
 * gathered up to a limit, every request answered through pl_http_handle's route table, streamed
 * bodies pulled from their producer on the connection's thread. */
#include "daemon/http.h"

#include "common/config.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
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
    atomic_bool stopping;
};

/* One request's state between libmicrohttpd's calls: the raw target, the body so far, the
 * connection for handlers that ask after their client. */
typedef struct {
    char target[PL_HTTP_MAX_URL + 2]; /* one byte over the limit, so too long stays too long */
    char *buf;
    size_t len, cap;
    size_t dropped; /* bytes over the limit, read and dropped */
    bool too_big, started;
    pl_http_t *srv;
    struct MHD_Connection *mhd_conn;
    pl_http_conn_t conn;
} s_req_t;

/* A streamed body between its producer and libmicrohttpd. */
typedef struct {
    pl_http_t *srv;
    pl_http_stream_t user;
    int fd;
    bool completed;
} s_stream_t;

/* The peer hung up (or reset): a zero-time poll of the socket. Bytes it sent after its request
 * (a pipelined one) are left for libmicrohttpd. */
static bool s_fd_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int s_conn_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static const char *s_conn_header(void *ctx, const char *name)
{
    s_req_t *q = ctx;
    return MHD_lookup_connection_value(q->mhd_conn, MHD_HEADER_KIND, name);
}

static bool s_conn_gone(void *ctx)
{
    s_req_t *q = ctx;
    return atomic_load(&q->srv->stopping) || s_fd_gone(s_conn_fd(q->mhd_conn));
}

static ssize_t s_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    s_stream_t *st = cls;
    for (;;) {
        if (atomic_load(&st->srv->stopping) || s_fd_gone(st->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        ssize_t n = st->user.next(st->user.arg, buf, max);
        if (n > 0)
            return n > (ssize_t)max ? MHD_CONTENT_READER_END_WITH_ERROR : n;
        if (n == PL_HTTP_STREAM_END) {
            st->completed = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (n < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void s_stream_free(void *cls)
{
    s_stream_t *st = cls;
    st->user.done(st->user.arg, st->completed);
    free(st);
}

/* Whether the route of this target (any method) answers an oversized body itself. */
static bool s_takes_oversize(const pl_http_t *s, const char *target)
{
    size_t n = strcspn(target, "?");
    for (int i = 0; i < s->n_routes; i++)
        if ((s->routes[i].flags & PL_HTTP_OVERSIZE) && strlen(s->routes[i].path) == n &&
            strncmp(s->routes[i].path, target, n) == 0)
            return true;
    return false;
}

/* Called first with the raw target, before libmicrohttpd splits the query off and decodes it;
 * what it returns is the request's state. */
static void *s_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    s_req_t *q = calloc(1, sizeof(*q));
    if (q) {
        snprintf(q->target, sizeof(q->target), "%s", uri ? uri : "");
        q->srv = cls;
        q->mhd_conn = conn;
        q->conn = (pl_http_conn_t){.header = s_conn_header, .gone = s_conn_gone, .ctx = q};
    }
    return q;
}

/* libmicrohttpd leaves the body out of a HEAD answer itself, keeping its Content-Length. A
 * stream goes out chunked (HTTP/1.1) or until close (1.0). */
static enum MHD_Result s_queue(pl_http_t *s, struct MHD_Connection *conn, pl_http_resp_t *r)
{
    struct MHD_Response *mr;
    if (r->stream.next) {
        s_stream_t *st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO; /* the caller's clear ends the stream */
        *st = (s_stream_t){.srv = s, .user = r->stream, .fd = s_conn_fd(conn)};
        mr = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_stream_read, st,
                                               s_stream_free);
        if (!mr) {
            free(st);
            return MHD_NO;
        }
        memset(&r->stream, 0, sizeof(r->stream)); /* libmicrohttpd's now: s_stream_free ends it */
    } else if (!r->body)
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
    for (int i = 0; i < r->n_headers && i < PL_HTTP_MAX_HEADERS; i++)
        MHD_add_response_header(mr, r->headers[i].name, r->headers[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result s_too_big(pl_http_t *s, struct MHD_Connection *conn)
{
    pl_http_resp_t r = {0};
    pl_http_resp_text(&r, 413, "request body larger than %zu bytes\n", s->max_body);
    enum MHD_Result ret = s_queue(s, conn, &r);
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
        unsigned long long want = cl ? strtoull(cl, NULL, 10) : 0;
        if (want > s->max_body) {
            q->too_big = true;
            if (want <= PL_HTTP_MAX_DRAIN && s_takes_oversize(s, q->target))
                return MHD_YES;        /* read and dropped, then answered by the route */
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
            q->dropped += n;
            if (q->dropped > PL_HTTP_MAX_DRAIN)
                return MHD_NO; /* a chunked body without end: cut off */
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big && !s_takes_oversize(s, q->target))
        return s_too_big(s, conn);
    pl_http_resp_t r = {0};
    pl_http_handle_conn(s->routes, s->n_routes, method, q->target, q->buf, q->len,
                        q->too_big ? q->len + q->dropped : 0, &q->conn, &r);
    enum MHD_Result ret = s_queue(s, conn, &r);
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
    /* a thread per connection, so a handler or stream that waits holds up no one else; poll(),
     * so descriptors past FD_SETSIZE work */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
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
        (unsigned)(p->max_conns > 0 ? p->max_conns : PL_CFG_HTTP_MAX_CONNS), MHD_OPTION_CONNECTION_TIMEOUT,
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
    atomic_store(&s->stopping, true); /* waiting handlers and streams end at their next look */
    MHD_stop_daemon(s->mhd);
    free(s);
    *srv_p = NULL;
}

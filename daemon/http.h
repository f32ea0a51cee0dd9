/* The HTTP front both processes share (metrics, probes, the OpenAI API): a route table served by
 * libmicrohttpd on a thread per connection, with request size limits and streamed answers. */
#ifndef PL_DAEMON_HTTP_H
#define PL_DAEMON_HTTP_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PL_HTTP_MAX_URL 1024  /* longest request target accepted (414 beyond) */
#define PL_HTTP_MAX_METHOD 16 /* longest method token */
#define PL_HTTP_MAX_BODY_DEF (1u << 20)
#define PL_HTTP_MAX_DRAIN (64u << 20) /* most of an oversized body read and dropped */

/* The connection a request came on, for handlers that wait: its headers and whether the client
 * is still there. */
typedef struct {
    const char *(*header)(void *ctx, const char *name); /* a header's value, NULL when absent */
    bool (*gone)(void *ctx); /* the client hung up, or the server is stopping */
    void *ctx;
} pl_http_conn_t;

typedef struct {
    const char *method; /* "GET" */
    const char *path;   /* the target without its query, "/metrics" */
    const char *query;  /* after '?', "" when none */
    const char *body;   /* NUL-terminated copy; "" when none */
    size_t body_len;
    size_t oversize;            /* bytes of a body over the limit, dropped (PL_HTTP_OVERSIZE) */
    const pl_http_conn_t *conn; /* NULL when not from a server */
} pl_http_req_t;

/* A body produced while it is sent (Server-Sent Events): the server calls `next` on the
 * connection's thread until it ends, then `done` once. */
#define PL_HTTP_STREAM_END ((ssize_t)-1)   /* the body is complete */
#define PL_HTTP_STREAM_ERROR ((ssize_t)-2) /* cut the connection */
typedef struct {
    /* Up to max bytes of the body into buf. May wait for them, but for a quarter of a second at
     * most: 0 means nothing yet, and the server calls again after checking that the client is
     * still there and the server is not stopping. */
    ssize_t (*next)(void *arg, char *buf, size_t max);
    /* The server is done with the stream: `completed` when next returned PL_HTTP_STREAM_END,
     * false when the client went away, the server stopped or the stream was never sent. Owns
     * arg (frees it). */
    void (*done)(void *arg, bool completed);
    void *arg;
} pl_http_stream_t;

#define PL_HTTP_MAX_HEADERS 4 /* extra headers of a response */

typedef struct {
    int status;            /* 0 when the handler set nothing: answered as 500 */
    char content_type[64]; /* default text/plain; charset=utf-8 */
    char allow[64];        /* Allow header of a 405 */
    char *body;            /* malloc'd, owned by the response */
    size_t len;
    pl_http_stream_t stream; /* .next set: the body is streamed instead of `body` */
    int n_headers;
    struct {
        char name[32];
        char value[160];
    } headers[PL_HTTP_MAX_HEADERS]; /* Retry-After, WWW-Authenticate, Cache-Control... */
} pl_http_resp_t;

/* A route's handler. Runs on an HTTP thread (its connection's own), never the event loop's: it
 * may only read state the owning thread publishes safely (atomics, locks, the metrics registry).
 * It may wait for an answer in short waits, checking pl_http_req_gone between them. */
typedef void (*pl_http_fn)(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp);

/* Route flags. */
enum {
    /* The handler answers a body over the limit itself: the server reads and drops it (up to
     * PL_HTTP_MAX_DRAIN, so the client is not cut off mid-send) and calls the handler with
     * req->oversize set and an empty body. Without it such a request gets 413. */
    PL_HTTP_OVERSIZE = 1u << 0,
};

typedef struct {
    const char *method;
    const char *path; /* exact match */
    pl_http_fn fn;
    void *arg;
    unsigned flags;
} pl_http_route_t;

typedef struct {
    const char *address; /* IPv4 or IPv6 literal */
    int port;            /* 0: any free port (see pl_http_port) */
    size_t max_body;     /* 0: PL_HTTP_MAX_BODY_DEF; 413 beyond */
    int max_conns;       /* concurrent connections, each on its own thread; 0: 64 */
    int timeout_s;       /* idle connection timeout; 0: 10 */
} pl_http_params_t;

typedef struct pl_http pl_http_t;

/* Set a response's status and a formatted text body (replacing any earlier body). */
void pl_http_resp_text(pl_http_resp_t *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Take a malloc'd body (*body_p is NULLed) with its content type. */
void pl_http_resp_take(pl_http_resp_t *resp, int status, const char *content_type, char **body_p,
                       size_t len);
/* Stream the body instead: *stream is the response's now (its done runs even if never sent). */
void pl_http_resp_stream(pl_http_resp_t *resp, int status, const char *content_type,
                         const pl_http_stream_t *stream);
/* Add a response header (PL_HTTP_MAX_HEADERS at most, further ones are dropped; a name or value
 * with a control character is dropped too). */
void pl_http_resp_header(pl_http_resp_t *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Free the body, end a stream never sent (done(arg, false)), zero the response. */
void pl_http_resp_clear(pl_http_resp_t *resp);

/* A request header (case-insensitive name); NULL when absent or outside a server. */
const char *pl_http_req_header(const pl_http_req_t *req, const char *name);
/* Whether the client has gone or the server is stopping (false outside a server). */
bool pl_http_req_gone(const pl_http_req_t *req);

/* Route one request: check the method and target (400 / 414 when malformed), find the route
 * (404, or 405 with Allow when only the method differs) and run its handler into *resp, which
 * the caller clears. Pure apart from the handler; the server calls it for every request. */
void pl_http_handle(const pl_http_route_t *routes, int n_routes, const char *method,
                    const char *target, const char *body, size_t body_len, pl_http_resp_t *resp);
/* The same with the connection (NULL: none) and the bytes dropped of a body over the limit
 * (413 unless the route takes PL_HTTP_OVERSIZE). */
void pl_http_handle_conn(const pl_http_route_t *routes, int n_routes, const char *method,
                         const char *target, const char *body, size_t body_len, size_t oversize,
                         const pl_http_conn_t *conn, pl_http_resp_t *resp);

/* Listen and serve `routes` (copied; their args must outlive the server). */
pl_status_t pl_http_start(const pl_http_params_t *params, const pl_http_route_t *routes,
                          int n_routes, pl_http_t **srv_p);
/* The port it listens on. */
int pl_http_port(const pl_http_t *srv);
/* Stop serving (streams and waiting handlers end within a second; joins its threads), free;
 * *srv_p NULL; safe on NULL. */
void pl_http_stop(pl_http_t **srv_p);

#endif

/* The HTTP front both processes share (metrics and probes now, the OpenAI API later): a route
 * table served by libmicrohttpd on its own threads, with request size limits. */
#ifndef PL_DAEMON_HTTP_H
#define PL_DAEMON_HTTP_H

#include "common/status.h"

#include <stddef.h>

#define PL_HTTP_MAX_URL 1024  /* longest request target accepted (414 beyond) */
#define PL_HTTP_MAX_METHOD 16 /* longest method token */
#define PL_HTTP_MAX_BODY_DEF (1u << 20)

typedef struct {
    const char *method; /* "GET" */
    const char *path;   /* the target without its query, "/metrics" */
    const char *query;  /* after '?', "" when none */
    const char *body;   /* NUL-terminated copy; "" when none */
    size_t body_len;
} pl_http_req_t;

typedef struct {
    int status;            /* 0 when the handler set nothing: answered as 500 */
    char content_type[64]; /* default text/plain; charset=utf-8 */
    char allow[64];        /* Allow header of a 405 */
    char *body;            /* malloc'd, owned by the response */
    size_t len;
} pl_http_resp_t;

/* A route's handler. Runs on an HTTP thread, never the event loop's: it may only read state
 * the owning thread publishes safely (atomics, the metrics registry). Must not block for long. */
typedef void (*pl_http_fn)(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp);

typedef struct {
    const char *method;
    const char *path; /* exact match */
    pl_http_fn fn;
    void *arg;
} pl_http_route_t;

typedef struct {
    const char *address; /* IPv4 or IPv6 literal */
    int port;            /* 0: any free port (see pl_http_port) */
    size_t max_body;     /* 0: PL_HTTP_MAX_BODY_DEF; 413 beyond */
    int max_conns;       /* 0: 64 */
    int timeout_s;       /* idle connection timeout; 0: 10 */
} pl_http_params_t;

typedef struct pl_http pl_http_t;

/* Set a response's status and a formatted text body (replacing any earlier body). */
void pl_http_resp_text(pl_http_resp_t *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Take a malloc'd body (*body_p is NULLed) with its content type. */
void pl_http_resp_take(pl_http_resp_t *resp, int status, const char *content_type, char **body_p,
                       size_t len);
void pl_http_resp_clear(pl_http_resp_t *resp);

/* Route one request: check the method and target (400 / 414 when malformed), find the route
 * (404, or 405 with Allow when only the method differs) and run its handler into *resp, which
 * the caller clears. Pure apart from the handler; the server calls it for every request. */
void pl_http_handle(const pl_http_route_t *routes, int n_routes, const char *method,
                    const char *target, const char *body, size_t body_len, pl_http_resp_t *resp);

/* Listen and serve `routes` (copied; their args must outlive the server). */
pl_status_t pl_http_start(const pl_http_params_t *params, const pl_http_route_t *routes,
                          int n_routes, pl_http_t **srv_p);
/* The port it listens on. */
int pl_http_port(const pl_http_t *srv);
/* Stop serving (joins its threads), free; *srv_p NULL; safe on NULL. */
void pl_http_stop(pl_http_t **srv_p);

#endif

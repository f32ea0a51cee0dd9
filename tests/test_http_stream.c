/* The HTTP server's streamed answers and waiting handlers: a producer's chunks arrive in order
 * as they are made, a client that hangs up ends the stream (done without completion) and a
 * waiting handler sees it gone, extra headers, oversized bodies answered by the route, 40
 * concurrent streams, and a stop that ends streams which never finish. */
#include "common/config.h"
#include "daemon/http.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- a producer: `count` numbered events, one per `gap_ms` ---- */

static atomic_int s_done_ok, s_done_cut, s_gone_seen;

typedef struct {
    int count, sent, gap_ms;
    char pending[64];
    size_t pending_len, pending_at;
} s_prod_t;

static ssize_t s_prod_next(void *arg, char *buf, size_t max)
{
    s_prod_t *p = arg;
    if (p->pending_at == p->pending_len) {
        if (p->count >= 0 && p->sent == p->count)
            return PL_HTTP_STREAM_END;
        struct timespec ts = {0, (long)p->gap_ms * 1000000L};
        nanosleep(&ts, NULL);
        p->pending_len = (size_t)snprintf(p->pending, sizeof(p->pending), "data: %d\n\n", p->sent);
        p->pending_at = 0;
        p->sent++;
    }
    size_t n = p->pending_len - p->pending_at;
    if (n > max)
        n = max;
    memcpy(buf, p->pending + p->pending_at, n);
    p->pending_at += n;
    return (ssize_t)n;
}

static void s_prod_done(void *arg, bool completed)
{
    atomic_fetch_add(completed ? &s_done_ok : &s_done_cut, 1);
    free(arg);
}

/* /events?N&GAP: N events (-1: without end) GAP ms apart */
static void s_events(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    s_prod_t *p = calloc(1, sizeof(*p));
    p->count = 3;
    p->gap_ms = 5;
    sscanf(req->query, "%d&%d", &p->count, &p->gap_ms);
    pl_http_stream_t st = {.next = s_prod_next, .done = s_prod_done, .arg = p};
    pl_http_resp_stream(resp, 200, "text/event-stream", &st);
    pl_http_resp_header(resp, "Cache-Control", "no-cache");
    pl_http_resp_header(resp, "Retry-After", "%d", 7);
    pl_http_resp_header(resp, "Bad Name", "x");        /* dropped: a space in the name */
    pl_http_resp_header(resp, "X-Split", "a\r\nb: c"); /* dropped: a line break */
}

/* A handler that waits until its client goes (or 5 s), as the API's non-streamed answers do. */
static void s_wait(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    for (int i = 0; i < 500; i++) {
        if (pl_http_req_gone(req)) {
            atomic_fetch_add(&s_gone_seen, 1);
            break;
        }
        usleep(10000);
    }
    pl_http_resp_text(resp, 200, "waited\n");
}

static void s_auth(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    const char *a = pl_http_req_header(req, "authorization");
    if (req->oversize) {
        pl_http_resp_text(resp, 400, "{\"oversize\": %zu}", req->oversize);
        return;
    }
    pl_http_resp_text(resp, a ? 200 : 401, "%s|%zu", a ? a : "-", req->body_len);
    if (!a)
        pl_http_resp_header(resp, "WWW-Authenticate", "Bearer");
}

static const pl_http_route_t s_routes[] = {
    {"GET", "/events", s_events, NULL, 0},
    {"GET", "/wait", s_wait, NULL, 0},
    {"POST", "/auth", s_auth, NULL, PL_HTTP_OVERSIZE},
    {"POST", "/plain", s_auth, NULL, 0},
};

static pl_http_t *s_server(size_t max_body, int max_conns)
{
    pl_http_t *srv = NULL;
    pl_http_params_t p = {
        .address = "127.0.0.1", .port = 0, .max_body = max_body, .max_conns = max_conns};
    cr_assert_eq(pl_http_start(&p, s_routes, 4, &srv), PL_OK, "%s", pl_error_msg());
    return srv;
}

static int s_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

static void s_send(int fd, const char *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
}

/* The whole answer until the server closes. */
static char *s_read_all(int fd, size_t *len_p)
{
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap + 1);
    for (ssize_t n; (n = recv(fd, buf + got, cap - got, 0)) > 0;) {
        got += (size_t)n;
        if (got == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    buf[got] = '\0';
    *len_p = got;
    return buf;
}

static char *s_get(int port, const char *target, size_t *len_p)
{
    char req[256];
    int fd = s_connect(port);
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     target);
    s_send(fd, req, (size_t)n);
    char *a = s_read_all(fd, len_p);
    close(fd);
    return a;
}

/* Chunked transfer decoding of an answer's body; NULL when malformed. */
static char *s_dechunk(const char *body)
{
    char *out = calloc(1, strlen(body) + 1);
    size_t o = 0;
    for (;;) {
        char *end;
        unsigned long n = strtoul(body, &end, 16);
        if (end == body || strncmp(end, "\r\n", 2) != 0) {
            free(out);
            return NULL;
        }
        if (n == 0)
            return out;
        memcpy(out + o, end + 2, n);
        o += n;
        body = end + 2 + n + 2;
    }
}

static void s_wait_counter(atomic_int *c, int want)
{
    for (int i = 0; i < 500 && atomic_load(c) < want; i++)
        usleep(10000);
    cr_assert_eq(atomic_load(c), want);
}

Test(http_stream, chunks_in_order_with_headers_and_an_end)
{
    pl_http_t *srv = s_server(0, 0);
    size_t len;
    char *a = s_get(pl_http_port(srv), "/events?4&2", &len);
    cr_assert(strncmp(a, "HTTP/1.1 200", 12) == 0, "%s", a);
    cr_assert(strcasestr(a, "\r\nContent-Type: text/event-stream\r\n"), "%s", a);
    cr_assert(strcasestr(a, "\r\nTransfer-Encoding: chunked\r\n"), "%s", a);
    cr_assert(strcasestr(a, "\r\nCache-Control: no-cache\r\n"), "%s", a);
    cr_assert(strcasestr(a, "\r\nRetry-After: 7\r\n"), "%s", a);
    cr_assert_null(strcasestr(a, "Bad Name"), "%s", a);
    cr_assert_null(strcasestr(a, "X-Split"), "%s", a);
    char *body = s_dechunk(strstr(a, "\r\n\r\n") + 4);
    cr_assert_not_null(body, "%s", a);
    cr_assert_str_eq(body, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\n");
    free(body);
    free(a);
    s_wait_counter(&s_done_ok, 1);
    cr_assert_eq(atomic_load(&s_done_cut), 0);
    /* HEAD: the headers, no body; the stream never sent is still ended */
    int fd = s_connect(pl_http_port(srv));
    const char *head = "HEAD /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    s_send(fd, head, strlen(head));
    a = s_read_all(fd, &len);
    close(fd);
    cr_assert(strncmp(a, "HTTP/1.1 200", 12) == 0, "%s", a);
    cr_assert(len >= 4 && strcmp(a + len - 4, "\r\n\r\n") == 0, "a body after HEAD: %s", a);
    free(a);
    s_wait_counter(&s_done_cut, 1);
    pl_http_stop(&srv);
}

Test(http_stream, a_client_that_hangs_up_ends_the_stream)
{
    pl_http_t *srv = s_server(0, 0);
    int fd = s_connect(pl_http_port(srv));
    const char *req = "GET /events?-1&20 HTTP/1.1\r\nHost: x\r\n\r\n";
    s_send(fd, req, strlen(req));
    char buf[4096] = "";
    size_t got = 0;
    while (!strstr(buf, "data: 2\n") && got < sizeof(buf) - 1) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        cr_assert_gt(n, 0);
        got += (size_t)n;
        buf[got] = '\0';
    }
    close(fd);
    s_wait_counter(&s_done_cut, 1);
    cr_assert_eq(atomic_load(&s_done_ok), 0);
    /* a waiting handler notices its client gone too */
    fd = s_connect(pl_http_port(srv));
    const char *w = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
    s_send(fd, w, strlen(w));
    usleep(100000);
    close(fd);
    s_wait_counter(&s_gone_seen, 1);
    pl_http_stop(&srv);
}

Test(http_stream, stop_ends_endless_streams_and_waiting_handlers)
{
    pl_http_t *srv = s_server(0, 0);
    int fds[3];
    const char *reqs[3] = {"GET /events?-1&50 HTTP/1.1\r\nHost: x\r\n\r\n",
                           "GET /events?-1&50 HTTP/1.1\r\nHost: x\r\n\r\n",
                           "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"};
    for (int i = 0; i < 3; i++) {
        fds[i] = s_connect(pl_http_port(srv));
        s_send(fds[i], reqs[i], strlen(reqs[i]));
    }
    usleep(200000);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pl_http_stop(&srv);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    cr_assert_lt(took, 3.0, "stop took %.2f s", took);
    cr_assert_eq(atomic_load(&s_done_cut), 2);
    cr_assert_eq(atomic_load(&s_gone_seen), 1);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

Test(http_stream, an_oversized_body_is_read_and_answered_by_the_route)
{
    pl_http_t *srv = s_server(1024, 0);
    size_t big = 10u << 20;
    char *req = malloc(big + 512);
    int n = snprintf(req, 512,
                     "POST /auth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Authorization: Bearer k1\r\nContent-Length: %zu\r\n\r\n",
                     big);
    memset(req + n, 'x', big);
    int fd = s_connect(pl_http_port(srv));
    s_send(fd, req, (size_t)n + big);
    size_t len;
    char *a = s_read_all(fd, &len);
    close(fd);
    cr_assert(strncmp(a, "HTTP/1.1 400", 12) == 0, "%.200s", a);
    cr_assert(strstr(a, "{\"oversize\": 10485760}"), "%s", a);
    free(a);
    /* a route without the flag answers 413 as before */
    n = snprintf(req, 512,
                 "POST /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "Content-Length: 2048\r\n\r\n");
    fd = s_connect(pl_http_port(srv));
    s_send(fd, req, (size_t)n + 2048);
    a = s_read_all(fd, &len);
    close(fd);
    cr_assert(strncmp(a, "HTTP/1.1 413", 12) == 0, "%.200s", a);
    free(a);
    /* within the limit: the header reaches the handler */
    n = snprintf(req, 512,
                 "POST /auth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "authorization: Bearer k2\r\nContent-Length: 3\r\n\r\nabc");
    fd = s_connect(pl_http_port(srv));
    s_send(fd, req, (size_t)n);
    a = s_read_all(fd, &len);
    close(fd);
    cr_assert(strstr(a, "\r\n\r\nBearer k2|3"), "%s", a);
    free(a);
    n = snprintf(req, 512,
                 "POST /auth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 "Content-Length: 0\r\n\r\n");
    fd = s_connect(pl_http_port(srv));
    s_send(fd, req, (size_t)n);
    a = s_read_all(fd, &len);
    close(fd);
    cr_assert(strncmp(a, "HTTP/1.1 401", 12) == 0, "%s", a);
    cr_assert(strcasestr(a, "\r\nWWW-Authenticate: Bearer\r\n"), "%s", a);
    free(a);
    free(req);
    pl_http_stop(&srv);
}

typedef struct {
    int port, ok;
} s_client_t;

static void *s_stream_client(void *arg)
{
    s_client_t *c = arg;
    size_t len;
    char *a = s_get(c->port, "/events?20&25", &len);
    char *body = strstr(a, "\r\n\r\n") ? s_dechunk(strstr(a, "\r\n\r\n") + 4) : NULL;
    c->ok = body && strstr(body, "data: 0\n\n") == body && strstr(body, "data: 19\n\n");
    free(body);
    free(a);
    return NULL;
}

/* 40 streams of half a second each at once: each on its own thread, so they overlap. */
Test(http_stream, forty_concurrent_streams)
{
    enum { N = 40 };
    pl_http_t *srv = s_server(0, 48);
    pthread_t t[N];
    s_client_t c[N];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < N; i++) {
        c[i] = (s_client_t){.port = pl_http_port(srv)};
        pthread_create(&t[i], NULL, s_stream_client, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_expect(c[i].ok, "stream %d incomplete", i);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    /* one after another they would take 20 s; a generous bound for a loaded machine */
    cr_assert_lt(took, 10.0, "40 streams took %.1f s: not concurrent", took);
    s_wait_counter(&s_done_ok, N);
    pl_http_stop(&srv);
}

Test(http_stream, config_keys)
{
    static pl_cfg_cluster_t c;
    const char *y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    port: 9100\n"
                    "    max_connections: 128\n    max_body_kb: 64\n"
                    "    api_keys: [sk-one, sk-two]\n";
    cr_assert_eq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.http.max_connections, 128);
    cr_assert_eq(c.http.max_body_kb, 64);
    cr_assert_eq(c.http.n_api_keys, 2);
    cr_assert_str_eq(c.http.api_keys[1], "sk-two");
    /* the flag keeps the file's other keys */
    cr_assert_eq(pl_cfg_http_parse("127.0.0.2:81", "--http", &c.http), PL_OK);
    cr_assert_eq(c.http.n_api_keys, 2);
    cr_assert_eq(c.http.port, 81);
    y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    port: 9100\n";
    cr_assert_eq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.http.max_connections, PL_CFG_HTTP_MAX_CONNS);
    cr_assert_eq(c.http.max_body_kb, 1024);
    cr_assert_eq(c.http.n_api_keys, 0);
    const char *bad[] = {
        "    api_keys: ['has space']\n",
        "    api_keys: [a, a]\n",
        "    api_keys: [a]\n    api_keys_file: /k\n",
        "    max_connections: 0\n",
        "    api_keys: x\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    port: 9100\n%s",
                 bad[i]);
        cr_assert_neq(pl_cfg_cluster_parse(text, strlen(text), "c.yaml", &c), PL_OK, "%s", bad[i]);
        cr_assert(strstr(pl_error_msg(), "c.yaml:"), "%s", pl_error_msg());
    }
    /* the node's http section has no API keys */
    static pl_cfg_node_t n;
    y = "name: n0\ncoordinator: tcp://127.0.0.1:5555\nhttp:\n  port: 9101\n  api_keys: [a]\n";
    cr_assert_neq(pl_cfg_node_parse(y, strlen(y), "n.yaml", &n), PL_OK);
}

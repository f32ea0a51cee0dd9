/* The HTTP module: routing without a server (status codes, Allow, limits), then a real server
 * on loopback driven by a raw-socket client written here: bodies, the size limit, malformed
 * requests, concurrent clients, handlers off the caller's thread; and the http config keys. */
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
#include <unistd.h>

static pthread_t s_handler_thread;

static void s_hello(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    s_handler_thread = pthread_self();
    pl_http_resp_text(resp, 200, "hello %s q=%s\n", (const char *)arg, req->query);
}

static void s_echo(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    char *b = malloc(req->body_len + 1);
    memcpy(b, req->body, req->body_len + 1);
    pl_http_resp_take(resp, 201, "application/octet-stream", &b, req->body_len);
}

static void s_silent(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp) {}

static const pl_http_route_t s_routes[] = {
    {"GET", "/hello", s_hello, "world", 0},
    {"POST", "/echo", s_echo, NULL, 0},
    {"PUT", "/echo", s_echo, NULL, 0},
    {"GET", "/silent", s_silent, NULL, 0},
};
#define S_N_ROUTES ((int)(sizeof(s_routes) / sizeof(s_routes[0])))

static int s_handle(const char *method, const char *target, pl_http_resp_t *r)
{
    memset(r, 0, sizeof(*r));
    pl_http_handle(s_routes, S_N_ROUTES, method, target, NULL, 0, r);
    return r->status;
}

Test(http_route, status_codes)
{
    pl_http_resp_t r;
    cr_assert_eq(s_handle("GET", "/hello", &r), 200);
    cr_assert_str_eq(r.body, "hello world q=\n");
    cr_assert_str_eq(r.content_type, "text/plain; charset=utf-8");
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("GET", "/hello?a=1&b", &r), 200);
    cr_assert_str_eq(r.body, "hello world q=a=1&b\n");
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("HEAD", "/hello", &r), 200, "HEAD is GET without the body");
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("GET", "/nothing", &r), 404);
    cr_assert(strstr(r.body, "/nothing"));
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("GET", "/echo", &r), 405);
    cr_assert_str_eq(r.allow, "POST, PUT");
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("DELETE", "/hello", &r), 405);
    cr_assert_str_eq(r.allow, "GET");
    pl_http_resp_clear(&r);
    cr_assert_eq(s_handle("GET", "/silent", &r), 500, "a handler that answers nothing");
    pl_http_resp_clear(&r);
}

Test(http_route, malformed_requests)
{
    pl_http_resp_t r;
    const char *bad_methods[] = {"", "get", "G ET", "GETGETGETGETGETGET", "GE\x01T"};
    for (size_t i = 0; i < sizeof(bad_methods) / sizeof(*bad_methods); i++) {
        cr_assert_eq(s_handle(bad_methods[i], "/hello", &r), 400, "method '%s'", bad_methods[i]);
        pl_http_resp_clear(&r);
    }
    cr_assert_eq(s_handle(NULL, "/hello", &r), 400);
    pl_http_resp_clear(&r);
    const char *bad_targets[] = {"", "hello", "http://x/hello", "/he llo", "/\x7f", "/\xc3\xa9"};
    for (size_t i = 0; i < sizeof(bad_targets) / sizeof(*bad_targets); i++) {
        cr_assert_eq(s_handle("GET", bad_targets[i], &r), 400, "target '%s'", bad_targets[i]);
        pl_http_resp_clear(&r);
    }
    cr_assert_eq(s_handle("GET", NULL, &r), 400);
    pl_http_resp_clear(&r);
    char *longt = malloc(PL_HTTP_MAX_URL + 2);
    memset(longt, 'a', PL_HTTP_MAX_URL + 1);
    longt[0] = '/';
    longt[PL_HTTP_MAX_URL + 1] = '\0';
    cr_assert_eq(s_handle("GET", longt, &r), 414);
    pl_http_resp_clear(&r);
    longt[PL_HTTP_MAX_URL] = '\0'; /* exactly the limit: routed (and not found) */
    cr_assert_eq(s_handle("GET", longt, &r), 404);
    pl_http_resp_clear(&r);
    free(longt);
}

/* ---- a raw client: one request per connection, the whole answer read until close ---- */

typedef struct {
    int status;
    char head[2048];
    char *body;
    size_t body_len;
} s_answer_t;

static int s_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        return -1;
    return fd;
}

/* Send raw bytes; parse the status line, headers and body (by Content-Length). */
static int s_raw(int port, const char *req, size_t len, s_answer_t *ans)
{
    int fd = s_connect(port);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may answer and close before taking it all (413) */
        off += (size_t)n;
    }
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap + 1);
    for (ssize_t n; (n = recv(fd, buf + got, cap - got, 0)) > 0;) {
        got += (size_t)n;
        if (got == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    close(fd);
    buf[got] = '\0';
    memset(ans, 0, sizeof(*ans));
    char *end = strstr(buf, "\r\n\r\n");
    if (got < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || !end) {
        free(buf);
        return -1;
    }
    ans->status = atoi(buf + 9);
    snprintf(ans->head, sizeof(ans->head), "%.*s", (int)(end - buf), buf);
    size_t body_len = got - (size_t)(end + 4 - buf);
    char *cl = strcasestr(ans->head, "\r\nContent-Length:");
    if (cl && (size_t)strtoull(cl + 17, NULL, 10) < body_len)
        body_len = (size_t)strtoull(cl + 17, NULL, 10);
    ans->body = malloc(body_len + 1);
    memcpy(ans->body, end + 4, body_len);
    ans->body[body_len] = '\0';
    ans->body_len = body_len;
    free(buf);
    return 0;
}

static int s_request(int port, const char *method, const char *path, const char *body,
                     size_t body_len, s_answer_t *ans)
{
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     method, path, body_len);
    char *req = malloc((size_t)n + body_len);
    memcpy(req, head, (size_t)n);
    if (body_len)
        memcpy(req + n, body, body_len);
    int rc = s_raw(port, req, (size_t)n + body_len, ans);
    free(req);
    return rc;
}

static pl_http_t *s_server(size_t max_body)
{
    pl_http_t *srv = NULL;
    pl_http_params_t p = {.address = "127.0.0.1", .port = 0, .max_body = max_body};
    cr_assert_eq(pl_http_start(&p, s_routes, S_N_ROUTES, &srv), PL_OK, "%s", pl_error_msg());
    cr_assert_gt(pl_http_port(srv), 0);
    return srv;
}

Test(http_server, routes_bodies_and_limits)
{
    pl_http_t *srv = s_server(4096);
    int port = pl_http_port(srv);
    s_answer_t a;
    cr_assert_eq(s_request(port, "GET", "/hello?x=2", NULL, 0, &a), 0);
    cr_assert_eq(a.status, 200);
    cr_assert_str_eq(a.body, "hello world q=x=2\n");
    free(a.body);
    /* HEAD: GET's status and length, no body */
    cr_assert_eq(s_request(port, "HEAD", "/hello?x=2", NULL, 0, &a), 0);
    cr_assert_eq(a.status, 200);
    cr_assert(strcasestr(a.head, "\r\nContent-Length: 18"), "%s", a.head);
    cr_assert_eq(a.body_len, 0);
    free(a.body);
    cr_assert_eq(s_request(port, "GET", "/none", NULL, 0, &a), 0);
    cr_assert_eq(a.status, 404);
    free(a.body);
    cr_assert_eq(s_request(port, "GET", "/echo", NULL, 0, &a), 0);
    cr_assert_eq(a.status, 405);
    cr_assert(strcasestr(a.head, "\r\nAllow: POST, PUT"), "%s", a.head);
    free(a.body);

    /* a binary body comes back byte for byte, up to the limit exactly */
    char body[4096];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (char)(i * 7 + 3);
    cr_assert_eq(s_request(port, "POST", "/echo", body, sizeof(body), &a), 0);
    cr_assert_eq(a.status, 201);
    cr_assert_eq(a.body_len, sizeof(body));
    cr_assert(memcmp(a.body, body, sizeof(body)) == 0);
    free(a.body);
    /* one byte more: 413, announced by Content-Length */
    char *big = calloc(1, 4097);
    cr_assert_eq(s_request(port, "POST", "/echo", big, 4097, &a), 0);
    cr_assert_eq(a.status, 413);
    free(a.body);
    /* a chunked body without a length that grows past the limit: 413 as well */
    char chunked[8192];
    int n = snprintf(chunked, sizeof(chunked),
                     "PUT /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    for (int k = 0; k < 3; k++)
        n += snprintf(chunked + n, sizeof(chunked) - (size_t)n, "7d0\r\n%2000s\r\n", "");
    n += snprintf(chunked + n, sizeof(chunked) - (size_t)n, "0\r\n\r\n");
    cr_assert_eq(s_raw(port, chunked, (size_t)n, &a), 0);
    cr_assert_eq(a.status, 413, "%s", a.head);
    free(a.body);
    free(big);
    pl_http_stop(&srv);
    cr_assert_null(srv);
    pl_http_stop(&srv); /* safe twice */
}

Test(http_server, malformed_requests_get_answers_and_the_server_keeps_serving)
{
    pl_http_t *srv = s_server(0);
    int port = pl_http_port(srv);
    s_answer_t a;
    const char *bad[] = {
        "GARBAGE\r\n\r\n",
        "GET /hello HTTP/9.9\r\nHost: x\r\n\r\n",
        "GET /hello HTTP/1.1\r\nNo-Colon-Header\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: banana\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        int rc = s_raw(port, bad[i], strlen(bad[i]), &a);
        if (rc == 0) { /* answered (or the connection closed): never a success */
            cr_assert_geq(a.status, 400, "request %zu answered %d", i, a.status);
            free(a.body);
        }
        cr_assert_eq(s_request(port, "GET", "/hello", NULL, 0, &a), 0, "after request %zu", i);
        cr_assert_eq(a.status, 200);
        free(a.body);
    }
    /* a target longer than libmicrohttpd's per-connection memory: refused, still serving */
    char *req = malloc(200000);
    int n = sprintf(req, "GET /");
    memset(req + n, 'a', 150000);
    n += 150000;
    n += sprintf(req + n, " HTTP/1.1\r\nHost: x\r\n\r\n");
    if (s_raw(port, req, (size_t)n, &a) == 0) {
        cr_assert_geq(a.status, 400);
        free(a.body);
    }
    free(req);
    cr_assert_eq(s_request(port, "GET", "/hello", NULL, 0, &a), 0);
    cr_assert_eq(a.status, 200);
    free(a.body);
    pl_http_stop(&srv);
}

typedef struct {
    int port, id, ok;
} s_client_t;

static void *s_client(void *arg)
{
    s_client_t *c = arg;
    for (int k = 0; k < 25; k++) {
        char body[64];
        int n = snprintf(body, sizeof(body), "client %d request %d", c->id, k);
        s_answer_t a;
        if (s_request(c->port, "POST", "/echo", body, (size_t)n, &a) == 0 && a.status == 201 &&
            a.body_len == (size_t)n && memcmp(a.body, body, (size_t)n) == 0)
            c->ok++;
        if (a.body)
            free(a.body);
    }
    return NULL;
}

Test(http_server, concurrent_clients_each_get_their_own_answer)
{
    pl_http_t *srv = s_server(0);
    enum { N = 16 };
    pthread_t t[N];
    s_client_t c[N];
    for (int i = 0; i < N; i++) {
        c[i] = (s_client_t){.port = pl_http_port(srv), .id = i};
        pthread_create(&t[i], NULL, s_client, &c[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(c[i].ok, 25, "client %d: %d of 25 answers right", i, c[i].ok);
    }
    pl_http_stop(&srv);
}

Test(http_server, handlers_run_off_the_callers_thread)
{
    pl_http_t *srv = s_server(0);
    s_answer_t a;
    s_handler_thread = pthread_self();
    cr_assert_eq(s_request(pl_http_port(srv), "GET", "/hello", NULL, 0, &a), 0);
    free(a.body);
    cr_assert(!pthread_equal(s_handler_thread, pthread_self()),
              "the handler ran on the thread that owns the loop");
    pl_http_stop(&srv);
}

Test(http_server, bad_parameters_are_refused)
{
    pl_http_t *srv = NULL;
    pl_http_params_t p = {.address = "localhost", .port = 0};
    cr_assert_eq(pl_http_start(&p, s_routes, S_N_ROUTES, &srv), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "localhost"));
    p.address = "127.0.0.1";
    p.port = 70000;
    cr_assert_eq(pl_http_start(&p, s_routes, S_N_ROUTES, &srv), PL_ERR_RANGE);
    /* a port already taken */
    pl_http_t *first = s_server(0);
    p.port = pl_http_port(first);
    cr_assert_eq(pl_http_start(&p, s_routes, S_N_ROUTES, &srv), PL_ERR_IO);
    cr_assert_null(srv);
    pl_http_stop(&first);
    /* IPv6 loopback, where the machine has it */
    p = (pl_http_params_t){.address = "::1", .port = 0};
    if (pl_http_start(&p, s_routes, S_N_ROUTES, &srv) == PL_OK)
        pl_http_stop(&srv);
}

/* ---- the http keys of the cluster and node files, and the --http flag ---- */

Test(http_config, flag_and_yaml_sections)
{
    pl_cfg_http_t h = {0};
    cr_assert_eq(pl_cfg_http_parse("0.0.0.0:9100", "--http", &h), PL_OK);
    cr_assert_str_eq(h.address, "0.0.0.0");
    cr_assert_eq(h.port, 9100);
    cr_assert_eq(pl_cfg_http_parse("[::1]:80", "--http", &h), PL_OK);
    cr_assert_str_eq(h.address, "::1");
    cr_assert_eq(h.port, 80);
    const char *bad[] = {"9100",
                         ":9100",
                         "127.0.0.1:",
                         "127.0.0.1:0",
                         "127.0.0.1:65536",
                         "127.0.0.1:9x",
                         "host.example:9100",
                         "[::1:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        h = (pl_cfg_http_t){.port = 7};
        cr_assert_neq(pl_cfg_http_parse(bad[i], "--http", &h), PL_OK, "'%s' accepted", bad[i]);
        cr_assert(strstr(pl_error_msg(), "--http"), "%s", pl_error_msg());
        cr_assert_eq(h.port, 7, "output written on error");
    }

    static pl_cfg_cluster_t c;
    const char *y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n";
    cr_assert_eq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK);
    cr_assert_eq(c.http.port, 0, "off unless configured");
    y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    port: 9100\n";
    cr_assert_eq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.http.port, 9100);
    cr_assert_str_eq(c.http.address, "127.0.0.1");
    y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    address: '::'\n"
        "    port: 9100\n";
    cr_assert_eq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(c.http.address, "::");
    y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    address: 0.0.0.0\n";
    cr_assert_neq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK);
    cr_assert(strstr(pl_error_msg(), "c.yaml:") && strstr(pl_error_msg(), "port"), "%s",
              pl_error_msg());
    y = "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n  http:\n    address: my.host\n"
        "    port: 9100\n";
    cr_assert_neq(pl_cfg_cluster_parse(y, strlen(y), "c.yaml", &c), PL_OK);
    cr_assert(strstr(pl_error_msg(), "address"), "%s", pl_error_msg());

    static pl_cfg_node_t n;
    y = "name: n0\ncoordinator: tcp://127.0.0.1:5555\nhttp:\n  address: 10.0.0.2\n  port: 9101\n";
    cr_assert_eq(pl_cfg_node_parse(y, strlen(y), "n.yaml", &n), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(n.http.address, "10.0.0.2");
    cr_assert_eq(n.http.port, 9101);
    y = "name: n0\ncoordinator: tcp://127.0.0.1:5555\nhttp:\n  port: 0\n";
    cr_assert_neq(pl_cfg_node_parse(y, strlen(y), "n.yaml", &n), PL_OK);
    cr_assert(strstr(pl_error_msg(), "n.yaml:4:"), "%s", pl_error_msg());
}

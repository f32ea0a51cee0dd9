/* libFuzzer harness for the HTTP request path we own: pl_http_handle's method and target
 * checks and routing, with the real /metrics, /livez and /readyz handlers behind it (through
 * pl_front with no server) and a body echo; and the --http flag's parser (pl_cfg_http_parse) on
 * the body. No input may crash; every answer has a status in 100-599 and a body that matches its
 * length; an accepted flag prints back as ADDRESS:PORT that parses the same. Built by
 * tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_http.c \
 *       daemon/http_route.c daemon/front.c daemon/http.c common/metrics.c common/status.c \
 *       common/log.c common/config*.c common/yaml_schema.c \
 *       common/yaml_tree.c common/util.c -lmicrohttpd -ljansson -lyaml -lpthread -lm \
 *       -o /tmp/fuzz_http
 *   /tmp/fuzz_http -max_total_time=60 -max_len=4096 /tmp/fuzz_http_corpus
 * Input: method, target and body separated by the first two NUL bytes (missing parts: ""). */
#include "daemon/front.h"
#include "daemon/http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_front_t *s_front;

static void s_echo(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    if (strlen(req->body) > req->body_len) /* the body is NUL-terminated at body_len */
        abort();
    char *b = malloc(req->body_len + 1);
    memcpy(b, req->body, req->body_len + 1);
    pl_http_resp_take(resp, 200, "application/octet-stream", &b, req->body_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_front) {
        pl_cfg_http_t off = {0};
        if (pl_front_start(&off, NULL, 0, &s_front))
            abort();
        pl_metric_t *m;
        pl_metrics_counter(pl_front_metrics(s_front), "fuzz_inputs_total", "Inputs.", "k", &m);
        pl_metrics_add(m, "a\"b", 1);
    }
    char *buf = malloc(size + 3);
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = '\0';
    char *method = buf, *target = method + strlen(method) + 1;
    if (target > buf + size)
        target = buf + size + 1;
    char *body = target + strlen(target) + 1;
    if (body > buf + size + 1)
        body = buf + size + 2;
    size_t body_len = (size_t)(buf + size - body > 0 ? buf + size - body : 0);
    pl_front_set_ready(s_front, size & 1, "fuzzing");
    pl_http_route_t routes[4];
    int n = pl_front_routes(s_front, routes);
    routes[n++] = (pl_http_route_t){"POST", "/echo", s_echo, NULL, 0};
    pl_http_resp_t r = {0};
    pl_http_handle(routes, n, method, target, body, body_len, &r);
    if (r.status < 100 || r.status > 599 || (r.body && strlen(r.body) > r.len) ||
        (!r.body && r.len))
        abort();
    if (r.status == 200 && !strcmp(method, "POST") &&
        (r.len != body_len || memcmp(r.body, body, body_len)))
        abort();
    pl_http_resp_clear(&r);

    pl_cfg_http_t h, again;
    memset(&h, 0x5a, sizeof(h));
    if (pl_cfg_http_parse(body, "--http", &h) == PL_OK) {
        char text[96];
        snprintf(text, sizeof(text), strchr(h.address, ':') ? "[%s]:%d" : "%s:%d", h.address,
                 h.port);
        if (h.port < 1 || h.port > 65535 || pl_cfg_http_parse(text, "again", &again) != PL_OK ||
            strcmp(again.address, h.address) || again.port != h.port)
            abort();
    } else if (((unsigned char *)&h)[0] != 0x5a) {
        abort(); /* output untouched on error */
    }
    free(buf);
    return 0;
}

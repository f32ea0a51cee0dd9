/* The probes and the metrics page: readiness published by the event loop under a lock, read by
 * the HTTP threads; /metrics renders the registry as Prometheus text format 0.0.4. */
#include "daemon/front.h"

#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_EXTRA 24

struct pl_front {
    pl_metrics_t *metrics;
    pl_http_t *http;
    pthread_mutex_t lock;
    bool ready;
    char why[256];
};

static void s_metrics(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    pl_front_t *f = arg;
    char *text;
    size_t len;
    if (pl_metrics_render(f->metrics, &text, &len)) {
        pl_http_resp_text(resp, 500, "%s\n", pl_error_msg());
        return;
    }
    pl_http_resp_take(resp, 200, "text/plain; version=0.0.4; charset=utf-8", &text, len);
}

static void s_livez(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    pl_http_resp_text(resp, 200, "ok\n");
}

static void s_readyz(void *arg, const pl_http_req_t *req, pl_http_resp_t *resp)
{
    pl_front_t *f = arg;
    pthread_mutex_lock(&f->lock);
    if (f->ready)
        pl_http_resp_text(resp, 200, "ready\n");
    else
        pl_http_resp_text(resp, 503, "not ready: %s\n", f->why);
    pthread_mutex_unlock(&f->lock);
}

pl_status_t pl_front_start(const pl_cfg_http_t *cfg, const pl_http_route_t *extra, int n_extra,
                           pl_front_t **front_p)
{
    pl_status_t st;
    if (n_extra > S_MAX_EXTRA)
        return pl_error(PL_ERR_RANGE, "http: %d extra routes, at most %d", n_extra, S_MAX_EXTRA);
    pl_front_t *f = calloc(1, sizeof(*f));
    if (!f)
        return pl_error(PL_ERR_NOMEM, "http front: out of memory");
    pthread_mutex_init(&f->lock, NULL);
    snprintf(f->why, sizeof(f->why), "starting");
    if ((st = pl_metrics_new(&f->metrics)))
        goto err_free;
    if (cfg && cfg->port) {
        pl_http_route_t routes[3 + S_MAX_EXTRA];
        pl_front_routes(f, routes);
        if (n_extra)
            memcpy(routes + 3, extra, (size_t)n_extra * sizeof(*extra));
        pl_http_params_t p = {.address = cfg->address,
                              .port = cfg->port,
                              .max_conns = cfg->max_connections,
                              .max_body = (size_t)cfg->max_body_kb * 1024};
        if ((st = pl_http_start(&p, routes, 3 + n_extra, &f->http)))
            goto err_metrics;
        pl_log_info("http: /metrics, /livez, /readyz%s on %s port %d",
                    n_extra ? " and the API" : "", cfg->address, pl_http_port(f->http));
    }
    *front_p = f;
    return PL_OK;
err_metrics:
    pl_metrics_destroy(&f->metrics);
err_free:
    pthread_mutex_destroy(&f->lock);
    free(f);
    return st;
}

int pl_front_routes(pl_front_t *f, pl_http_route_t out[3])
{
    out[0] = (pl_http_route_t){"GET", "/metrics", s_metrics, f, 0};
    out[1] = (pl_http_route_t){"GET", "/livez", s_livez, f, 0};
    out[2] = (pl_http_route_t){"GET", "/readyz", s_readyz, f, 0};
    return 3;
}

pl_metrics_t *pl_front_metrics(pl_front_t *f)
{
    return f->metrics;
}

int pl_front_port(const pl_front_t *f)
{
    return f->http ? pl_http_port(f->http) : 0;
}

void pl_front_set_ready(pl_front_t *f, bool ready, const char *why)
{
    pthread_mutex_lock(&f->lock);
    f->ready = ready;
    snprintf(f->why, sizeof(f->why), "%s", why ? why : "");
    pthread_mutex_unlock(&f->lock);
}

void pl_front_stop(pl_front_t **front_p)
{
    pl_front_t *f = *front_p;
    if (!f)
        return;
    pl_http_stop(&f->http); /* no handler runs after this, so the registry can go */
    pl_metrics_destroy(&f->metrics);
    pthread_mutex_destroy(&f->lock);
    free(f);
    *front_p = NULL;
}

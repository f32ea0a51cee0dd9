/* Serving requests and their hub: a reference-counted request whose output grows under a mutex
 * and wakes the waiting HTTP thread by a condition variable, and a bounded hand-over queue that
 * wakes the coordinator's loop through an eventfd. */
#include "daemon/serve_req.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct pl_serve_req {
    atomic_int refs;
    uint64_t id;
    pl_serve_in_t in;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *tokens;
    int n_tokens, cap_tokens;
    char *text;
    size_t text_len, text_cap;
    pl_serve_end_t end;
    atomic_bool canceled;
    pl_serve_hub_t *_Atomic hub; /* where it was handed over: woken on cancel */
};

struct pl_serve_hub {
    pthread_mutex_t mu;
    int fd;
    pl_serve_req_t *queue[PL_SERVE_HUB_MAX];
    int head, count;
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS];
    int n_deps;
};

static atomic_ullong s_next_id = 1;

pl_status_t pl_serve_req_create(pl_serve_in_t *in, pl_serve_req_t **req_p)
{
    if (in->n_prompt < 0 || (in->n_prompt > 0 && !in->prompt))
        return pl_error(PL_ERR_INVALID, "serve request: no prompt");
    pl_serve_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return pl_error(PL_ERR_NOMEM, "serve request: out of memory");
    atomic_init(&r->refs, 1);
    r->id = atomic_fetch_add(&s_next_id, 1);
    r->in = *in;
    in->prompt = NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    *req_p = r;
    return PL_OK;
}

void pl_serve_req_ref(pl_serve_req_t *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void pl_serve_req_unref(pl_serve_req_t **r_p)
{
    pl_serve_req_t *r = *r_p;
    *r_p = NULL;
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->in.prompt);
    free(r->tokens);
    free(r->text);
    free(r);
}

uint64_t pl_serve_req_id(const pl_serve_req_t *r)
{
    return r->id;
}

const pl_serve_in_t *pl_serve_req_input(const pl_serve_req_t *r)
{
    return &r->in;
}

static bool s_grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *b = realloc(*buf, c * elem);
    if (!b)
        return false;
    *buf = b;
    *cap = c;
    return true;
}

pl_status_t pl_serve_req_push(pl_serve_req_t *r, const int32_t *tokens, int n_tokens,
                              const char *text, size_t len)
{
    if (n_tokens < 0)
        return pl_error(PL_ERR_INVALID, "serve request: %d tokens", n_tokens);
    pl_status_t st = PL_OK;
    pthread_mutex_lock(&r->mu);
    if (r->end.finish != PL_SERVE_RUNNING)
        goto out;
    size_t cap_t = (size_t)r->cap_tokens;
    if (!s_grow((void **)&r->tokens, &cap_t, (size_t)r->n_tokens + (size_t)n_tokens,
                sizeof(*r->tokens)) ||
        !s_grow((void **)&r->text, &r->text_cap, r->text_len + len + 1, 1)) {
        r->cap_tokens = (int)cap_t;
        st = pl_error(PL_ERR_NOMEM, "serve request %llu: out of memory",
                      (unsigned long long)r->id);
        goto out;
    }
    r->cap_tokens = (int)cap_t;
    if (n_tokens > 0)
        memcpy(r->tokens + r->n_tokens, tokens, (size_t)n_tokens * sizeof(*tokens));
    r->n_tokens += n_tokens;
    if (len > 0)
        memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    r->text[r->text_len] = '\0';
    pthread_cond_broadcast(&r->cv);
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

void pl_serve_req_end(pl_serve_req_t *r, const pl_serve_end_t *end)
{
    pthread_mutex_lock(&r->mu);
    if (r->end.finish == PL_SERVE_RUNNING && end->finish != PL_SERVE_RUNNING) {
        r->end = *end;
        r->end.message[sizeof(r->end.message) - 1] = '\0';
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

bool pl_serve_req_canceled(const pl_serve_req_t *r)
{
    return atomic_load(&r->canceled);
}

pl_status_t pl_serve_req_wait(pl_serve_req_t *r, double timeout_s, size_t *text_at,
                              char **text_p, size_t *len_p, int *n_tokens_p,
                              pl_serve_end_t *end_p)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_s > 0) {
        double whole = floor(timeout_s);
        until.tv_sec += (time_t)whole;
        until.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&r->mu);
    while (timeout_s > 0 && r->text_len <= *text_at && r->end.finish == PL_SERVE_RUNNING) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT)
            break;
    }
    char *copy = NULL;
    size_t n = r->text_len > *text_at ? r->text_len - *text_at : 0;
    if (n > 0) {
        copy = malloc(n + 1);
        if (!copy) {
            pthread_mutex_unlock(&r->mu);
            return pl_error(PL_ERR_NOMEM, "serve request: out of memory");
        }
        memcpy(copy, r->text + *text_at, n);
        copy[n] = '\0';
    }
    *text_at += n;
    *text_p = copy;
    *len_p = n;
    *n_tokens_p = r->n_tokens;
    *end_p = r->end;
    pthread_mutex_unlock(&r->mu);
    return PL_OK;
}

pl_status_t pl_serve_req_tokens(pl_serve_req_t *r, int32_t **tokens_p, int *n_p)
{
    pthread_mutex_lock(&r->mu);
    int32_t *t = malloc(((size_t)r->n_tokens + 1) * sizeof(*t));
    if (!t) {
        pthread_mutex_unlock(&r->mu);
        return pl_error(PL_ERR_NOMEM, "serve request: out of memory");
    }
    if (r->n_tokens > 0)
        memcpy(t, r->tokens, (size_t)r->n_tokens * sizeof(*t));
    *n_p = r->n_tokens;
    pthread_mutex_unlock(&r->mu);
    *tokens_p = t;
    return PL_OK;
}

static void s_wake(pl_serve_hub_t *hub)
{
    uint64_t one = 1;
    ssize_t w = write(hub->fd, &one, sizeof(one)); /* EAGAIN: the counter is already set */
    (void)w;
}

void pl_serve_req_cancel(pl_serve_req_t *r)
{
    atomic_store(&r->canceled, true);
    pl_serve_hub_t *hub = atomic_load(&r->hub);
    if (hub)
        s_wake(hub);
}

pl_status_t pl_serve_hub_create(pl_serve_hub_t **hub_p)
{
    pl_serve_hub_t *h = calloc(1, sizeof(*h));
    if (!h)
        return pl_error(PL_ERR_NOMEM, "serve hub: out of memory");
    h->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->fd < 0) {
        pl_status_t st = pl_error(PL_ERR_IO, "serve hub: eventfd: %s", strerror(errno));
        free(h);
        return st;
    }
    pthread_mutex_init(&h->mu, NULL);
    *hub_p = h;
    return PL_OK;
}

void pl_serve_hub_destroy(pl_serve_hub_t **hub_p)
{
    pl_serve_hub_t *h = *hub_p;
    if (!h)
        return;
    *hub_p = NULL;
    pl_serve_req_t *r;
    pl_serve_end_t end = {.finish = PL_SERVE_CANCELED, .http_status = 503};
    snprintf(end.message, sizeof(end.message), "the coordinator is stopping");
    while ((r = pl_serve_hub_take(h))) {
        pl_serve_req_end(r, &end);
        pl_serve_req_unref(&r);
    }
    close(h->fd);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void pl_serve_hub_put(pl_serve_hub_t *hub, pl_serve_req_t *req)
{
    pthread_mutex_lock(&hub->mu);
    if (hub->count == PL_SERVE_HUB_MAX) {
        pthread_mutex_unlock(&hub->mu);
        pl_serve_end_t end = {.finish = PL_SERVE_REFUSED, .http_status = 429,
                              .retry_after_s = 1.0};
        snprintf(end.message, sizeof(end.message), "too many requests waiting; retry later");
        pl_serve_req_end(req, &end);
        return;
    }
    pl_serve_req_ref(req);
    atomic_store(&req->hub, hub);
    hub->queue[(hub->head + hub->count) % PL_SERVE_HUB_MAX] = req;
    hub->count++;
    pthread_mutex_unlock(&hub->mu);
    s_wake(hub);
}

int pl_serve_hub_fd(const pl_serve_hub_t *hub)
{
    return hub->fd;
}

pl_serve_req_t *pl_serve_hub_take(pl_serve_hub_t *hub)
{
    pthread_mutex_lock(&hub->mu);
    pl_serve_req_t *r = NULL;
    if (hub->count > 0) {
        r = hub->queue[hub->head];
        hub->head = (hub->head + 1) % PL_SERVE_HUB_MAX;
        hub->count--;
    }
    if (hub->count == 0) { /* drain the counter: readable again on the next put or cancel */
        uint64_t v;
        ssize_t n = read(hub->fd, &v, sizeof(v));
        (void)n;
    }
    pthread_mutex_unlock(&hub->mu);
    return r;
}

void pl_serve_hub_publish(pl_serve_hub_t *hub, const pl_serve_deployment_t *deps, int n)
{
    if (n < 0)
        n = 0;
    if (n > PL_SERVE_MAX_DEPLOYMENTS)
        n = PL_SERVE_MAX_DEPLOYMENTS;
    pthread_mutex_lock(&hub->mu);
    if (n > 0)
        memcpy(hub->deps, deps, (size_t)n * sizeof(*deps));
    hub->n_deps = n;
    pthread_mutex_unlock(&hub->mu);
}

int pl_serve_hub_deployments(pl_serve_hub_t *hub, pl_serve_deployment_t out[PL_SERVE_MAX_DEPLOYMENTS])
{
    pthread_mutex_lock(&hub->mu);
    int n = hub->n_deps;
    if (n > 0)
        memcpy(out, hub->deps, (size_t)n * sizeof(*out));
    pthread_mutex_unlock(&hub->mu);
    return n;
}

/* The UCX data plane's context: one ucp context + worker per owner thread, the lock its owner
 * and the progress thread take turns under, and destroy. Endpoints are in ucx_ep.c, sends in
 * ucx_send.c, receives in ucx_recv.c. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

pl_status_t pl_ucx_ucs_error(ucs_status_t status, const char *what)
{
    return pl_error(PL_ERR_TRANSPORT, "ucx %s: %s", what, ucs_status_string(status));
}

double pl_ucx_deadline(int timeout_ms)
{
    return timeout_ms < 0 ? INFINITY : pl_now() + timeout_ms / 1e3;
}

void pl_ucx_lock(pl_ucx_t *ucx)
{
    atomic_fetch_add(&ucx->waiters, 1);
    pthread_mutex_lock(&ucx->lock);
    atomic_fetch_sub(&ucx->waiters, 1);
    if (ucx->owner_in++ == 0)
        ucx->owner_since = pl_now();
}

void pl_ucx_unlock(pl_ucx_t *ucx)
{
    if (ucx->owner_in == 1 && !ucx->has_progress)
        pl_ucx_grants_flush(ucx); /* nobody else would send them while the owner is away */
    if (--ucx->owner_in == 0) {
        ucx->owner_since = pl_now();
        ucx->hurry = ucx->n_pending > 0;
        /* else the progress thread looks again within PL_UCX_HANDOFF_S */
        if (ucx->has_progress && (ucx->parked || ucx->hurry))
            pthread_cond_signal(&ucx->idle);
    }
    pthread_mutex_unlock(&ucx->lock);
}

pl_status_t pl_ucx_sleep(pl_ucx_t *ucx, double deadline)
{
    struct pollfd pfd = {.fd = ucx->efd, .events = POLLIN};
    pl_ucx_grants_flush(ucx); /* a wait of this thread must not hold back a sender's credit */
    double now = pl_now(), t0 = now;
    /* the reply to a small message is usually this close, and a streaming transfer's next
     * event closer still */
    double stream_s = ucx->stream_spin_s * (ucx->n_pending > 0 ? PL_UCX_PENDING_SPIN : 1);
    double spin_end = fmin(fmax(now + ucx->spin_s, ucx->last_event_s + stream_s), deadline);
    while (now < spin_end) {
        if (pl_ucx_worker_progress(ucx)) {
            ucx->wait_stats.spun_s += pl_now() - t0;
            return PL_OK;
        }
        if (now - t0 > ucx->spin_s)
            sched_yield(); /* whoever else wants this CPU runs first */
        now = pl_now();
    }
    ucx->wait_stats.spun_s += now - t0;
    double left_ms = (deadline - now) * 1e3;
    int ms = left_ms <= 0 ? 0 : left_ms < PL_UCX_POLL_MS ? (int)ceil(left_ms) : PL_UCX_POLL_MS;
    ucs_status_t us = ucp_worker_arm(ucx->worker);
    int rc, err;

    if (us == UCS_ERR_BUSY)
        return PL_OK; /* events came in meanwhile: progress again */
    if (us != UCS_OK)
        return pl_ucx_ucs_error(us, "worker arm");
    ucx->wait_stats.sleeps++;
    pthread_mutex_unlock(&ucx->lock); /* still the owner's call: the progress thread stays off */
    rc = poll(&pfd, 1, ms);
    err = errno;
    pthread_mutex_lock(&ucx->lock);
    if (rc < 0 && err != EINTR)
        return pl_error(PL_ERR_TRANSPORT, "ucx: poll on the worker's event fd: %s",
                        strerror(err));
    return PL_OK;
}

/* Whether to switch on the shared-memory transports' error handling: not when the user set it,
 * nor when UCX_TLS leaves them out (UCX would warn about an unused setting). */
static bool s_want_mm_error_handling(void)
{
    const char *tls = getenv("UCX_TLS");
    if (getenv("UCX_MM_ERROR_HANDLING") || getenv("UCX_SYSV_ERROR_HANDLING") ||
        getenv("UCX_POSIX_ERROR_HANDLING"))
        return false;
    return !tls || strstr(tls, "all") || strstr(tls, "sm") || strstr(tls, "posix") ||
           strstr(tls, "sysv") || strchr(tls, '^');
}

/* Set a UCX setting the user did not set (UCX_<env> in the environment). A transport's setting
 * is modified without its transport prefix (UCX 1.13 matches it in every transport). */
static void s_config_default(ucp_config_t *config, const char *env, const char *name,
                             const char *value)
{
    char var[64];
    snprintf(var, sizeof(var), "UCX_%s", env);
    if (getenv(var))
        return;
    ucs_status_t us = ucp_config_modify(config, name, value);
    if (us != UCS_OK)
        pl_log_debug("ucx: cannot set %s=%s: %s", name, value, ucs_status_string(us));
}

/* Peer failure within timeout_ms: a UCX keepalive round every half of it (a peer process gone
 * from shared memory), and TCP probes after half of it, three more in the other half (a cut
 * link). */
static void s_config_timeouts(ucp_config_t *config, int timeout_ms)
{
    char v[32];
    snprintf(v, sizeof(v), "%dms", timeout_ms / 2);
    s_config_default(config, "KEEPALIVE_INTERVAL", "KEEPALIVE_INTERVAL", v);
    s_config_default(config, "TCP_KEEPIDLE", "KEEPIDLE", v);
    snprintf(v, sizeof(v), "%dms", PL_MAX(timeout_ms / 6, 1));
    s_config_default(config, "TCP_KEEPINTVL", "KEEPINTVL", v);
    s_config_default(config, "TCP_KEEPCNT", "KEEPCNT", "3");
}

pl_status_t pl_ucx_create(pl_ucx_t **ucx_p)
{
    return pl_ucx_create_with(&(pl_ucx_params_t){0}, ucx_p);
}

pl_status_t pl_ucx_context_new(int peer_timeout_ms, ucp_context_h *ctx_p)
{
    ucp_config_t *config = NULL;
    ucp_params_t params = {0};
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK)
        return pl_ucx_ucs_error(us, "config");
    /* UCX 1.13's shared-memory transports only declare peer-failure support when asked to; without
     * it, the error-handling endpoints would fall back to TCP over loopback on one host. */
    s_config_timeouts(config, peer_timeout_ms);
    if (s_want_mm_error_handling()) {
        us = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
        if (us != UCS_OK)
            pl_log_debug("ucx: cannot enable shared-memory error handling: %s",
                         ucs_status_string(us));
    }
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.name = "pipeld";
    us = ucp_init(&params, config, ctx_p);
    ucp_config_release(config);
    return us == UCS_OK ? PL_OK : pl_ucx_ucs_error(us, "init");
}

/* How long waits spin (the environment's `name`, else the built-in default `us`). */
static pl_status_t s_spin_from_env(const char *name, long us, double *spin_s_p)
{
    const char *v = getenv(name);
    if (v) {
        char *end;
        errno = 0;
        us = strtol(v, &end, 10);
        if (errno || end == v || *end || us < 0 || us > PL_UCX_SPIN_MAX_US)
            return pl_error(PL_ERR_RANGE, "ucx: %s=\"%s\" (microseconds, 0..%d)", name, v,
                            PL_UCX_SPIN_MAX_US);
    }
    *spin_s_p = (double)us * 1e-6;
    return PL_OK;
}

pl_status_t pl_ucx_create_with(const pl_ucx_params_t *p, pl_ucx_t **ucx_p)
{
    ucp_worker_params_t wparams = {0};
    ucs_status_t us;
    pl_status_t st;
    int timeout_ms = p->peer_timeout_ms ? p->peer_timeout_ms : PL_UCX_PEER_TIMEOUT_MS;
    pl_ucx_t *ucx;
    double spin_s = 0, stream_spin_s = 0;

    if (timeout_ms < 100)
        return pl_error(PL_ERR_RANGE, "ucx: peer timeout %d ms (at least 100)", timeout_ms);
    if ((st = s_spin_from_env("PL_UCX_SPIN_US", PL_UCX_SPIN_US, &spin_s)) != PL_OK ||
        (st = s_spin_from_env("PL_UCX_STREAM_SPIN_US", PL_UCX_STREAM_SPIN_US, &stream_spin_s)) !=
            PL_OK)
        return st;
    if (!(ucx = calloc(1, sizeof(*ucx))))
        return pl_error(PL_ERR_NOMEM, "ucx: out of memory");
    ucx->spin_s = spin_s;
    ucx->stream_spin_s = stream_spin_s;
    ucx->last_event_s = -INFINITY;
    ucx->pending.next = ucx->pending.prev = &ucx->pending;
    ucx->efd = -1;
    ucx->wake_fd = -1;
    pthread_mutex_init(&ucx->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the progress thread's timed waits */
    pthread_cond_init(&ucx->idle, &ca);
    pthread_condattr_destroy(&ca);

    if ((st = pl_ucx_context_new(timeout_ms, &ucx->ctx)))
        goto err_free;
    /* Serialized: the owner thread and the progress thread take turns under ucx->lock. */
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    us = ucp_worker_create(ucx->ctx, &wparams, &ucx->worker);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "worker create");
        goto err_ctx;
    }
    us = ucp_worker_get_efd(ucx->worker, &ucx->efd);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "worker event fd");
        goto err_worker;
    }
    us = ucp_worker_get_address(ucx->worker, &ucx->addr, &ucx->addr_len);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "worker address");
        goto err_worker;
    }
    *ucx_p = ucx;
    return PL_OK;

err_worker:
    ucp_worker_destroy(ucx->worker);
err_ctx:
    ucp_cleanup(ucx->ctx);
err_free:
    pthread_cond_destroy(&ucx->idle);
    pthread_mutex_destroy(&ucx->lock);
    free(ucx);
    return st;
}

pl_status_t pl_ucx_address(pl_ucx_t *ucx, char **b64_p)
{
    char *text = pl_base64_encode(ucx->addr, ucx->addr_len);
    if (!text)
        return pl_error(PL_ERR_NOMEM, "ucx: out of memory");
    *b64_p = text;
    return PL_OK;
}

void pl_ucx_wait_stats(pl_ucx_t *ucx, pl_ucx_wait_stats_t *stats)
{
    pl_ucx_lock(ucx);
    *stats = ucx->wait_stats;
    pl_ucx_unlock(ucx);
}

int pl_ucx_progress(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    int n = (int)ucp_worker_progress(ucx->worker);
    pl_ucx_unlock(ucx);
    return n;
}

int pl_ucx_efd(const pl_ucx_t *ucx)
{
    return ucx->efd;
}

pl_status_t pl_ucx_arm(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    pl_ucx_grants_flush(ucx); /* the caller is about to sleep in its own poll */
    ucs_status_t us = ucp_worker_arm(ucx->worker);
    pl_ucx_unlock(ucx);
    if (us == UCS_ERR_BUSY)
        return pl_error(PL_ERR_BUSY, "ucx: events are waiting");
    return us == UCS_OK ? PL_OK : pl_ucx_ucs_error(us, "worker arm");
}

/* Take the messages nobody received (late credit grants, late probes) off the worker, into
 * nothing, so that UCX does not warn about each one when the worker goes. */
static void s_drop_unexpected(pl_ucx_t *ucx, double deadline)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    while (pl_now() < deadline && (msg = ucp_tag_probe_nb(ucx->worker, 0, 0, 1, &info))) {
        ucp_request_param_t param = {0};
        ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(ucx->worker, NULL, 0, msg, &param);
        if (req == NULL || UCS_PTR_IS_ERR(req))
            continue;
        while (ucp_request_check_status(req) == UCS_INPROGRESS && pl_now() < deadline)
            ucp_worker_progress(ucx->worker);
        ucp_request_free(req);
    }
}

void pl_ucx_destroy(pl_ucx_t **ucx_p)
{
    pl_ucx_t *ucx = ucx_p ? *ucx_p : NULL;
    double deadline = pl_now() + PL_UCX_CLOSE_S;

    if (!ucx)
        return;
    *ucx_p = NULL;
    assert(ucx->n_inboxes == 0 && "inboxes are destroyed before their worker");
    assert(ucx->n_outboxes == 0 && "send pools are destroyed before their worker");
    pl_ucx_expect_close(ucx);  /* before the progress thread stops: it may see a peer go */
    pl_ucx_progress_stop(ucx); /* from here on this thread alone uses the worker */
    pl_ucx_lock(ucx);          /* pl_ucx_sleep lets go of it */
    /* Force-closing the endpoints purges their sends: the callbacks free the buffers. */
    for (pl_ucx_ep_t *ep = ucx->eps; ep; ep = ep->next) {
        pl_ucx_ep_grants_cancel(ucx, ep, deadline);
        pl_ucx_ep_close(ucx, ep, deadline);
    }
    /* A message still arriving cannot be canceled, and UCX 1.13 asserts when the endpoint it
     * arrives on is destroyed with it: give it time to finish (or fail with its peer). */
    while ((ucx->n_pending > 0 || pl_ucx_rx_busy(ucx)) && pl_now() < deadline)
        if (!ucp_worker_progress(ucx->worker) && pl_ucx_sleep(ucx, deadline) != PL_OK)
            break;
    if (pl_ucx_rx_busy(ucx)) {
        pl_log_warn("ucx: a message was still arriving after %.0f s; leaving the worker in place "
                    "(leaked) rather than have UCX abort",
                    PL_UCX_CLOSE_S);
        pl_ucx_unlock(ucx);
        return;
    }
    pl_ucx_unlock(ucx);
    s_drop_unexpected(ucx, deadline);
    /* Whatever is left is released to UCX; its buffers outlive the worker. */
    for (pl_ucx_send_t *s = ucx->pending.next; s != &ucx->pending; s = s->next)
        ucp_request_free(s->req);
    ucp_worker_release_address(ucx->worker, ucx->addr);
    ucp_worker_destroy(ucx->worker);
    ucp_cleanup(ucx->ctx);
    while (ucx->pending.next != &ucx->pending) {
        pl_ucx_send_t *s = ucx->pending.next;
        pl_ucx_send_unlink(s);
        if (s->done) { /* a pool left in place, its sends stuck (logged there) */
            s->done(s, false);
            continue;
        }
        free(s->buf);
        free(s);
    }
    pl_ucx_rx_free(ucx);
    while (ucx->orphans) {
        pl_ucx_orphan_t *o = ucx->orphans;
        ucx->orphans = o->next;
        free(o->buf);
        free(o);
    }
    for (pl_ucx_ep_t *lists[2] = {ucx->eps, ucx->closed}, **l = lists; l < lists + 2; l++) {
        while (*l) {
            pl_ucx_ep_t *ep = *l;
            *l = ep->next;
            free(ep);
        }
    }
    pthread_cond_destroy(&ucx->idle);
    pthread_mutex_destroy(&ucx->lock);
    free(ucx);
}

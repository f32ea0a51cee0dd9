/* The UCX data plane: one ucp context + worker per owner thread, endpoints from exchanged worker
 * addresses, and non-blocking tagged sends that own their buffer (receives are in ucx_recv.c).
 * Peer failures are recorded on the endpoint and reported, never fatal. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

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
    ucx->owner_in++;
}

void pl_ucx_unlock(pl_ucx_t *ucx)
{
    if (--ucx->owner_in == 0 && ucx->has_progress)
        pthread_cond_signal(&ucx->idle); /* the owner went back to its own work */
    pthread_mutex_unlock(&ucx->lock);
}

pl_status_t pl_ucx_sleep(pl_ucx_t *ucx, double deadline)
{
    struct pollfd pfd = {.fd = ucx->efd, .events = POLLIN};
    double left_ms = (deadline - pl_now()) * 1e3;
    int ms = left_ms <= 0 ? 0 : left_ms < PL_UCX_POLL_MS ? (int)ceil(left_ms) : PL_UCX_POLL_MS;
    ucs_status_t us = ucp_worker_arm(ucx->worker);
    int rc, err;

    if (us == UCS_ERR_BUSY)
        return PL_OK; /* events came in meanwhile: progress again */
    if (us != UCS_OK)
        return pl_ucx_ucs_error(us, "worker arm");
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

pl_status_t pl_ucx_create_with(const pl_ucx_params_t *p, pl_ucx_t **ucx_p)
{
    ucp_config_t *config = NULL;
    ucp_params_t params = {0};
    ucp_worker_params_t wparams = {0};
    ucs_status_t us;
    pl_status_t st;
    int timeout_ms = p->peer_timeout_ms ? p->peer_timeout_ms : PL_UCX_PEER_TIMEOUT_MS;
    pl_ucx_t *ucx;

    if (timeout_ms < 100)
        return pl_error(PL_ERR_RANGE, "ucx: peer timeout %d ms (at least 100)", timeout_ms);
    if (!(ucx = calloc(1, sizeof(*ucx))))
        return pl_error(PL_ERR_NOMEM, "ucx: out of memory");
    ucx->pending.next = ucx->pending.prev = &ucx->pending;
    ucx->efd = -1;
    ucx->wake_fd = -1;
    pthread_mutex_init(&ucx->lock, NULL);
    pthread_cond_init(&ucx->idle, NULL);

    us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "config");
        goto err_free;
    }
    /* UCX 1.13's shared-memory transports only declare peer-failure support when asked to; without
     * it, the error-handling endpoints below would fall back to TCP over loopback on one host. */
    s_config_timeouts(config, timeout_ms);
    if (s_want_mm_error_handling()) {
        us = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
        if (us != UCS_OK)
            pl_log_debug("ucx: cannot enable shared-memory error handling: %s",
                         ucs_status_string(us));
    }
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.name = "pipeld";
    us = ucp_init(&params, config, &ucx->ctx);
    ucp_config_release(config);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "init");
        goto err_free;
    }
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

static void s_ep_error(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    pl_ucx_ep_t *ep = arg;
    if (ep->status == UCS_OK) {
        ep->status = status;
        if (!ep->ucx->closing && !ep->closed)
            pl_log_warn("ucx: peer endpoint failed: %s", ucs_status_string(status));
    }
}

pl_status_t pl_ucx_connect(pl_ucx_t *ucx, const char *b64_addr, pl_ucx_ep_t **ep_p)
{
    ucp_ep_params_t params = {0};
    void *addr = NULL;
    size_t addr_len;
    ucs_status_t us;
    pl_status_t st;
    pl_ucx_ep_t *ep;

    if (strlen(b64_addr) > PL_UCX_MAX_ADDR * 4 / 3 + 4)
        return pl_error(PL_ERR_INVALID, "ucx: worker address of %zu characters is too long",
                        strlen(b64_addr));
    if ((st = pl_base64_decode(b64_addr, &addr, &addr_len)) != PL_OK)
        return pl_error_prefix(st, "ucx: worker address: ");
    if (addr_len == 0) {
        free(addr);
        return pl_error(PL_ERR_INVALID, "ucx: empty worker address");
    }
    ep = calloc(1, sizeof(*ep));
    if (!ep) {
        free(addr);
        return pl_error(PL_ERR_NOMEM, "ucx: out of memory");
    }
    ep->ucx = ucx;
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = addr;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = s_ep_error;
    params.err_handler.arg = ep;
    pl_ucx_lock(ucx);
    us = ucp_ep_create(ucx->worker, &params, &ep->ep);
    free(addr);
    if (us != UCS_OK) {
        pl_ucx_unlock(ucx);
        free(ep);
        return pl_ucx_ucs_error(us, "endpoint create");
    }
    ep->next = ucx->eps;
    ucx->eps = ep;
    pl_ucx_unlock(ucx);
    *ep_p = ep;
    return PL_OK;
}

/* Whether `name` is one of the '/'-separated names in `list`. */
static bool s_has_name(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == '/') && (p[n] == '/' || p[n] == '\0'))
            return true;
    return false;
}

/* Collect the transport names of the lanes UCX chose from ucp_ep_print_info's lines such as
 * "#   lane[0]:  3:sysv/memory.0 md[2] -> ..." (deduplicated, joined with '/'). Edits text. */
static void s_parse_transports(char *text, char *out, size_t out_len)
{
    char *save = NULL;
    size_t o = 0;
    out[0] = '\0';
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *lane = strstr(line, "lane[");
        char name[32];
        if (!lane || sscanf(lane, "lane[%*u]: %*u:%31[^/ ]/", name) != 1 || s_has_name(out, name))
            continue;
        size_t n = strlen(name);
        if (o + n + 2 > out_len)
            break;
        if (o > 0)
            out[o++] = '/';
        memcpy(out + o, name, n + 1);
        o += n;
    }
}

const char *pl_ucx_ep_transport(pl_ucx_ep_t *ep)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    /* Not cached: the lanes may still change while the connection is wired up. */
    if (!f)
        return "ucx";
    pl_ucx_lock(ep->ucx);
    ucp_ep_print_info(ep->ep, f);
    pl_ucx_unlock(ep->ucx);
    fclose(f);
    if (text)
        s_parse_transports(text, ep->transport, sizeof(ep->transport));
    else
        ep->transport[0] = '\0';
    free(text);
    return ep->transport[0] ? ep->transport : "ucx";
}

static void s_send_unlink(pl_ucx_send_t *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->ucx->n_pending--;
}

static void s_send_done(void *request, ucs_status_t status, void *user_data)
{
    pl_ucx_send_t *s = user_data;
    if (status != UCS_OK && !s->ucx->closing && !s->ep->closed) {
        if (s->ep->status == UCS_OK)
            s->ep->status = status;
        if (s->ucx->send_status == UCS_OK)
            s->ucx->send_status = status;
        pl_log_warn("ucx: send failed: %s", ucs_status_string(status));
    }
    s_send_unlink(s);
    ucp_request_free(request);
    if (s->done) {
        s->done(s, true);
        return;
    }
    free(s->buf);
    free(s);
}

pl_status_t pl_ucx_send(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf, size_t len)
{
    pl_ucx_lock(ucx);
    pl_status_t st = pl_ucx_send_locked(ucx, ep, tag, buf, len);
    pl_ucx_unlock(ucx);
    return st;
}

pl_status_t pl_ucx_send_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf,
                               size_t len)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t req;
    pl_ucx_send_t *s;

    if (ep->status != UCS_OK) {
        free(buf);
        return pl_error(PL_ERR_TRANSPORT, "ucx send: peer endpoint failed: %s",
                        ucs_status_string(ep->status));
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        free(buf);
        return pl_error(PL_ERR_NOMEM, "ucx send: out of memory");
    }
    ucx->send_allocs++;
    s->ucx = ucx;
    s->ep = ep;
    s->buf = buf;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = s_send_done;
    param.user_data = s;
    req = ucp_tag_send_nbx(ep->ep, buf, len, tag, &param);
    if (req == NULL) {
        free(buf);
        free(s);
        return PL_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        ucs_status_t us = UCS_PTR_STATUS(req);
        free(buf);
        free(s);
        return pl_ucx_ucs_error(us, "send");
    }
    s->req = req;
    s->prev = ucx->pending.prev;
    s->next = &ucx->pending;
    s->prev->next = s;
    ucx->pending.prev = s;
    ucx->n_pending++;
    return PL_OK;
}

pl_status_t pl_ucx_send_pooled_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag,
                                      pl_ucx_send_t *s, size_t len, ucp_mem_h memh)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t req;

    if (ep->status != UCS_OK) {
        s->done(s, true);
        return pl_error(PL_ERR_TRANSPORT, "ucx send: peer endpoint failed: %s",
                        ucs_status_string(ep->status));
    }
    s->ucx = ucx;
    s->ep = ep;
    s->req = NULL;
    /* The pool's registration: UCX's registration cache is never asked about this buffer. */
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = s_send_done;
    param.user_data = s;
    param.memh = memh;
    req = ucp_tag_send_nbx(ep->ep, s->buf, len, tag, &param);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        s->done(s, true);
        return req == NULL ? PL_OK : pl_ucx_ucs_error(UCS_PTR_STATUS(req), "send");
    }
    s->req = req;
    s->prev = ucx->pending.prev;
    s->next = &ucx->pending;
    s->prev->next = s;
    ucx->pending.prev = s;
    ucx->n_pending++;
    return PL_OK;
}

int pl_ucx_pending(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    int n = ucx->n_pending;
    pl_ucx_unlock(ucx);
    return n;
}

pl_ucx_ep_t *pl_ucx_failed_ep(pl_ucx_t *ucx)
{
    for (pl_ucx_ep_t *ep = ucx->eps; ep; ep = ep->next)
        if (ep->status != UCS_OK)
            return ep;
    return NULL;
}

pl_status_t pl_ucx_ep_status(pl_ucx_ep_t *ep)
{
    pl_ucx_lock(ep->ucx);
    ucs_status_t us = ep->status;
    pl_ucx_unlock(ep->ucx);
    if (us != UCS_OK)
        return pl_error(PL_ERR_TRANSPORT, "ucx: peer endpoint failed: %s",
                        ucs_status_string(us));
    return PL_OK;
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
    ucs_status_t us = ucp_worker_arm(ucx->worker);
    pl_ucx_unlock(ucx);
    if (us == UCS_ERR_BUSY)
        return pl_error(PL_ERR_BUSY, "ucx: events are waiting");
    return us == UCS_OK ? PL_OK : pl_ucx_ucs_error(us, "worker arm");
}

/* Hand a buffer UCX may still write into to the orphan list, freed after the worker. */
static void s_orphan(pl_ucx_t *ucx, void *buf)
{
    pl_ucx_orphan_t *o = malloc(sizeof(*o));
    if (!o)
        return; /* leaking is the only safe choice left */
    o->buf = buf;
    o->next = ucx->orphans;
    ucx->orphans = o;
}

static pl_status_t s_flush(pl_ucx_t *ucx, int timeout_ms)
{
    double deadline = pl_ucx_deadline(timeout_ms);
    pl_status_t st;

    while (ucx->n_pending > 0) {
        if (ucp_worker_progress(ucx->worker))
            continue;
        if (pl_now() >= deadline)
            return pl_error(PL_ERR_TIMEOUT, "ucx flush: %d sends still pending after %d ms",
                            ucx->n_pending, timeout_ms);
        if ((st = pl_ucx_sleep(ucx, deadline)) != PL_OK)
            return st;
    }
    /* Only the sends matter here: a peer that left after taking everything is no failure. */
    if (ucx->send_status != UCS_OK)
        return pl_error(PL_ERR_TRANSPORT, "ucx flush: a send failed: %s",
                        ucs_status_string(ucx->send_status));
    return PL_OK;
}

pl_status_t pl_ucx_flush(pl_ucx_t *ucx, int timeout_ms)
{
    pl_ucx_lock(ucx);
    pl_status_t st = s_flush(ucx, timeout_ms);
    pl_ucx_unlock(ucx);
    return st;
}

/* Close one endpoint without waiting for the peer, progressing for a bounded time. */
static void s_ep_close(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t req;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(ep->ep, &param);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && pl_now() < deadline)
        ucp_worker_progress(ucx->worker);
    ucp_request_free(req);
}

void pl_ucx_disconnect(pl_ucx_t *ucx, pl_ucx_ep_t **ep_p)
{
    pl_ucx_ep_t *ep = ep_p ? *ep_p : NULL;
    pl_ucx_send_t *s, *next;

    if (!ep)
        return;
    *ep_p = NULL;
    pl_ucx_lock(ucx);
    for (pl_ucx_ep_t **pp = &ucx->eps; *pp; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    ep->closed = true;
    ep->next = ucx->closed;
    ucx->closed = ep;
    s_ep_close(ucx, ep, pl_now() + PL_UCX_CLOSE_S);
    /* Sends the close did not purge in time are released to UCX; their buffers wait for destroy. */
    for (s = ucx->pending.next; s != &ucx->pending; s = next) {
        next = s->next;
        if (s->ep != ep)
            continue;
        ucp_request_free(s->req);
        s_send_unlink(s);
        if (s->done) {
            s->done(s, false); /* the pool keeps the buffer out of use */
            continue;
        }
        s_orphan(ucx, s->buf);
        free(s);
    }
    pl_ucx_unlock(ucx);
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
    pl_ucx_progress_stop(ucx); /* from here on this thread alone uses the worker */
    pl_ucx_lock(ucx);     /* pl_ucx_sleep lets go of it */
    ucx->closing = true;
    /* Force-closing the endpoints purges their sends: the callbacks free the buffers. */
    for (pl_ucx_ep_t *ep = ucx->eps; ep; ep = ep->next)
        s_ep_close(ucx, ep, deadline);
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
        s_send_unlink(s);
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

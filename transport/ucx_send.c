/* Non-blocking tagged sends on the UCX data plane: a send owns its buffer (malloc'd, or a send
 * pool's) until UCX completes it, and flush waits for every send in flight. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <ucp/api/ucp.h>

void pl_ucx_send_unlink(pl_ucx_send_t *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->ucx->n_pending--;
}

/* s in flight as request req: at the end of the worker's pending list. */
static void s_link(pl_ucx_t *ucx, pl_ucx_send_t *s, void *req)
{
    s->req = req;
    s->prev = ucx->pending.prev;
    s->next = &ucx->pending;
    s->prev->next = s;
    ucx->pending.prev = s;
    ucx->n_pending++;
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
    pl_ucx_send_unlink(s);
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
    pl_ucx_grants_flush(ucx); /* behind the message, not ahead of it */
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
    s_link(ucx, s, req);
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
    s_link(ucx, s, req);
    return PL_OK;
}

int pl_ucx_pending(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    int n = ucx->n_pending;
    pl_ucx_unlock(ucx);
    return n;
}

static pl_status_t s_flush(pl_ucx_t *ucx, int timeout_ms)
{
    double deadline = pl_ucx_deadline(timeout_ms);
    pl_status_t st;

    while (ucx->n_pending > 0) {
        if (pl_ucx_worker_progress(ucx))
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

void pl_ucx_alloc_stats(pl_ucx_t *ucx, pl_ucx_alloc_stats_t *stats)
{
    pl_ucx_lock(ucx);
    *stats = (pl_ucx_alloc_stats_t){.sends = ucx->send_allocs, .recvs = ucx->recv_allocs};
    pl_ucx_unlock(ucx);
}

/* Receiving on the UCX data plane: probe for a message whose tag matches, receive it into a fresh
 * buffer, and keep a half-received message across calls so that a timeout never loses it. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/util.h"

#include <stdlib.h>

/* Note completed receives; forget completed discards. */
static void s_rx_reap(pl_ucx_t *ucx)
{
    for (pl_ucx_rx_t **pp = &ucx->rx; *pp;) {
        pl_ucx_rx_t *rx = *pp;
        if (rx->req) {
            ucs_status_t us = ucp_request_check_status(rx->req);
            if (us == UCS_INPROGRESS) {
                pp = &rx->next;
                continue;
            }
            ucp_request_free(rx->req);
            rx->req = NULL;
            rx->status = us;
        }
        if (rx->discard) {
            *pp = rx->next;
            free(rx->buf);
            free(rx);
            continue;
        }
        pp = &rx->next;
    }
}

/* Link to the first matched message whose tag fits (want, mask), or NULL. */
static pl_ucx_rx_t **s_rx_find(pl_ucx_t *ucx, uint64_t want, uint64_t mask)
{
    for (pl_ucx_rx_t **pp = &ucx->rx; *pp; pp = &(*pp)->next)
        if (!(*pp)->discard && ((*pp)->tag & mask) == (want & mask))
            return pp;
    return NULL;
}

/* Start receiving a probed (and thereby dequeued) message, appended to the list in match order.
 * One over max_len, or one we cannot allocate for, is still taken off the wire, into nothing (UCX
 * completes it as truncated), so it does not hold up the messages behind it. */
static pl_status_t s_rx_start(pl_ucx_t *ucx, ucp_tag_message_h msg,
                              const ucp_tag_recv_info_t *info, size_t max_len)
{
    ucp_request_param_t param = {0};
    pl_ucx_rx_t *rx = calloc(1, sizeof(*rx));
    pl_status_t st = PL_OK;
    ucs_status_ptr_t req;
    size_t cap = 0;

    if (!rx) {
        req = ucp_tag_msg_recv_nbx(ucx->worker, NULL, 0, msg, &param);
        if (req && !UCS_PTR_IS_ERR(req))
            ucp_request_free(req); /* nothing of ours for UCX to write into */
        return pl_error(PL_ERR_NOMEM, "ucx receive: out of memory");
    }
    rx->tag = info->sender_tag;
    rx->len = info->length;
    if (info->length > max_len) {
        rx->discard = true;
        st = pl_error(PL_ERR_PROTOCOL, "ucx receive: message of %zu bytes (tag 0x%016llx) "
                                       "exceeds %zu",
                      info->length, (unsigned long long)info->sender_tag, max_len);
    } else if (!(rx->buf = malloc(info->length > 0 ? info->length : 1))) {
        rx->discard = true;
        st = pl_error(PL_ERR_NOMEM, "ucx receive: cannot allocate %zu bytes", info->length);
    } else {
        cap = info->length;
        ucx->recv_allocs++;
    }
    req = ucp_tag_msg_recv_nbx(ucx->worker, rx->buf, cap, msg, &param);
    if (UCS_PTR_IS_ERR(req))
        rx->status = UCS_PTR_STATUS(req);
    else
        rx->req = req; /* NULL: completed at once, status UCS_OK */

    pl_ucx_rx_t **tail = &ucx->rx;
    while (*tail)
        tail = &(*tail)->next;
    *tail = rx;
    return st;
}

pl_status_t pl_ucx_recv(pl_ucx_t *ucx, uint64_t want, uint64_t mask, size_t max_len,
                        void **buf_p, size_t *len_p, uint64_t *tag_p, int timeout_ms,
                        const volatile int *cancel)
{
    pl_ucx_lock(ucx);
    pl_status_t st = pl_ucx_recv_locked(ucx, want, mask, max_len, buf_p, len_p, tag_p,
                                        timeout_ms, cancel);
    pl_ucx_unlock(ucx);
    return st;
}

pl_status_t pl_ucx_recv_locked(pl_ucx_t *ucx, uint64_t want, uint64_t mask, size_t max_len,
                               void **buf_p, size_t *len_p, uint64_t *tag_p, int timeout_ms,
                               const volatile int *cancel)
{
    double deadline = pl_ucx_deadline(timeout_ms);
    ucp_tag_recv_info_t info;
    pl_ucx_rx_t **pp, *rx;
    pl_status_t st;

    for (;;) {
        if (cancel && *cancel)
            return pl_error(PL_ERR_CANCELED, "ucx receive: canceled");
        s_rx_reap(ucx);
        pp = s_rx_find(ucx, want, mask);
        if (pp && !(*pp)->req)
            break;
        if (!pp) {
            ucp_tag_message_h msg = ucp_tag_probe_nb(ucx->worker, want & mask, mask, 1, &info);
            if (msg) {
                if ((st = s_rx_start(ucx, msg, &info, max_len)) != PL_OK)
                    return st;
                continue;
            }
        }
        if (pl_ucx_worker_progress(ucx))
            continue;
        pl_ucx_ep_t *failed = pp ? NULL : pl_ucx_failed_ep(ucx);
        if (failed)
            return pl_error(PL_ERR_TRANSPORT, "ucx receive: peer endpoint failed: %s",
                            ucs_status_string(failed->status));
        if (pl_now() >= deadline) {
            if (pp)
                return pl_error(PL_ERR_TIMEOUT, "ucx receive: message of %zu bytes still "
                                                "arriving after %d ms",
                                (*pp)->len, timeout_ms);
            return pl_error(PL_ERR_TIMEOUT, "ucx receive: nothing after %d ms", timeout_ms);
        }
        if ((st = pl_ucx_sleep(ucx, deadline)) != PL_OK)
            return st;
    }

    rx = *pp;
    *pp = rx->next;
    if (rx->status != UCS_OK || rx->len > max_len) {
        /* The limit is checked again: the message may have been matched by a call with a larger
         * one. */
        if (rx->status != UCS_OK)
            st = pl_error(PL_ERR_TRANSPORT, "ucx receive of tag 0x%016llx: %s",
                          (unsigned long long)rx->tag, ucs_status_string(rx->status));
        else
            st = pl_error(PL_ERR_PROTOCOL, "ucx receive: message of %zu bytes (tag 0x%016llx) "
                                           "exceeds %zu",
                          rx->len, (unsigned long long)rx->tag, max_len);
        free(rx->buf);
        free(rx);
        return st;
    }
    *buf_p = rx->buf;
    *len_p = rx->len;
    if (tag_p)
        *tag_p = rx->tag;
    free(rx);
    return PL_OK;
}

bool pl_ucx_rx_busy(pl_ucx_t *ucx)
{
    s_rx_reap(ucx);
    for (pl_ucx_rx_t *rx = ucx->rx; rx; rx = rx->next)
        if (rx->req)
            return true;
    return false;
}

void pl_ucx_rx_free(pl_ucx_t *ucx)
{
    while (ucx->rx) {
        pl_ucx_rx_t *rx = ucx->rx;
        ucx->rx = rx->next;
        free(rx->buf);
        free(rx);
    }
}

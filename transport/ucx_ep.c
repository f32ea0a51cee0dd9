/* Endpoints of the UCX data plane: connected from exchanged worker addresses, their lanes'
 * transports named, closed without waiting for the peer. Peer failures are recorded on the
 * endpoint and reported, never fatal. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

static void s_ep_error(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    pl_ucx_ep_t *ep = arg;
    if (ep->status == UCS_OK) {
        ep->status = status;
        if (!ep->ucx->closing && !ep->closed)
            pl_log_warn("ucx: peer endpoint failed: %s", ucs_status_string(status));
    }
}

void pl_ucx_expect_close(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    ucx->closing = true;
    pl_ucx_unlock(ucx);
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

/* Close one endpoint without waiting for the peer, progressing for a bounded time. */
void pl_ucx_ep_close(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline)
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
    pl_ucx_ep_grants_cancel(ucx, ep, pl_now() + PL_UCX_CLOSE_S);
    pl_ucx_ep_close(ucx, ep, pl_now() + PL_UCX_CLOSE_S);
    /* Sends the close did not purge in time are released to UCX; their buffers wait for destroy. */
    for (s = ucx->pending.next; s != &ucx->pending; s = next) {
        next = s->next;
        if (s->ep != ep)
            continue;
        ucp_request_free(s->req);
        pl_ucx_send_unlink(s);
        if (s->done) {
            s->done(s, false); /* the pool keeps the buffer out of use */
            continue;
        }
        s_orphan(ucx, s->buf);
        free(s);
    }
    pl_ucx_unlock(ucx);
}

/* The send side of the data plane without copies or allocations: a pool of buffers registered
 * with UCX once, which a stage encodes (or computes) into and sends with credits; reused. */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

#define S_BUF_ALIGN 64u
#define S_MEM_ALIGN 4096u

typedef enum { S_FREE, S_TAKEN, S_SENDING, S_LOST } s_state_t;

typedef struct {
    pl_ucx_send_t send; /* first: the completion hands this back */
    pl_ucx_outbox_t *ob;
    s_state_t state;
} s_buf_t;

struct pl_ucx_outbox {
    pl_ucx_t *ucx;
    pl_ucx_ep_t *ep;
    size_t buf_bytes;
    int n;
    unsigned char *mem;
    ucp_mem_h memh;
    s_buf_t *bufs;
    int n_sending, n_lost;
    pl_ucx_outbox_stats_t stats;
};

/* The send of a pool buffer is over (lock held, from UCX's completion or the send call). */
static void s_done(pl_ucx_send_t *s, bool reusable)
{
    s_buf_t *b = (s_buf_t *)s;
    if (b->state == S_SENDING)
        b->ob->n_sending--;
    b->state = reusable ? S_FREE : S_LOST;
    b->ob->n_lost += !reusable;
}

pl_status_t pl_ucx_outbox_create(pl_ucx_t *ucx, pl_ucx_ep_t *ep, size_t buf_bytes, int n_bufs,
                                 pl_ucx_outbox_t **ob_p)
{
    ucp_mem_map_params_t mp = {0};
    pl_ucx_outbox_t *ob;
    ucs_status_t us;
    size_t total;

    if (n_bufs < 1 || n_bufs > PL_UCX_INBOX_MAX_SLOTS + 1 || buf_bytes == 0 ||
        buf_bytes > PL_UCX_INBOX_MAX_SLOT_BYTES)
        return pl_error(PL_ERR_RANGE,
                        "ucx outbox: %d buffers of %zu bytes (1..%d buffers of at most %zu "
                        "bytes)",
                        n_bufs, buf_bytes, PL_UCX_INBOX_MAX_SLOTS + 1,
                        (size_t)PL_UCX_INBOX_MAX_SLOT_BYTES);
    buf_bytes = (buf_bytes + S_BUF_ALIGN - 1) / S_BUF_ALIGN * S_BUF_ALIGN;
    total = buf_bytes * (size_t)n_bufs;
    if (!(ob = calloc(1, sizeof(*ob))))
        return pl_error(PL_ERR_NOMEM, "ucx outbox: out of memory");
    ob->ucx = ucx;
    ob->ep = ep;
    ob->buf_bytes = buf_bytes;
    ob->n = n_bufs;
    ob->bufs = calloc((size_t)n_bufs, sizeof(*ob->bufs));
    if (!ob->bufs || posix_memalign((void **)&ob->mem, S_MEM_ALIGN, total) != 0) {
        free(ob->bufs);
        free(ob);
        return pl_error(PL_ERR_NOMEM, "ucx outbox: cannot allocate %zu bytes", total);
    }
    for (int i = 0; i < n_bufs; i++) {
        ob->bufs[i].ob = ob;
        ob->bufs[i].send.buf = ob->mem + (size_t)i * buf_bytes;
        ob->bufs[i].send.done = s_done;
    }
    /* Registered once, here: every send from the pool reuses the registration. */
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = ob->mem;
    mp.length = total;
    pl_ucx_lock(ucx);
    us = ucp_mem_map(ucx->ctx, &mp, &ob->memh);
    if (us != UCS_OK) {
        pl_ucx_unlock(ucx);
        free(ob->mem);
        free(ob->bufs);
        free(ob);
        return pl_ucx_ucs_error(us, "outbox memory map");
    }
    ucx->n_outboxes++;
    ob->stats.bufs = n_bufs;
    ob->stats.buf_bytes = buf_bytes;
    pl_ucx_unlock(ucx);
    *ob_p = ob;
    return PL_OK;
}

/* A free buffer's index, or -1 (lock held). */
static int s_find_free(const pl_ucx_outbox_t *ob)
{
    for (int i = 0; i < ob->n; i++)
        if (ob->bufs[i].state == S_FREE)
            return i;
    return -1;
}

pl_status_t pl_ucx_outbox_get(pl_ucx_outbox_t *ob, void **buf_p, size_t *cap_p, int timeout_ms,
                              const volatile int *cancel)
{
    double deadline = pl_ucx_deadline(timeout_ms);
    pl_ucx_t *ucx = ob->ucx;
    pl_status_t st = PL_OK;
    bool waited = false;
    int i;

    pl_ucx_lock(ucx);
    while ((i = s_find_free(ob)) < 0) {
        waited = true;
        if (ob->n_sending == 0) { /* every buffer is with the caller, or lost */
            st = pl_error(PL_ERR_BUSY, "ucx outbox: all %d buffers are taken or lost", ob->n);
            goto out;
        }
        if (cancel && *cancel) {
            st = pl_error(PL_ERR_CANCELED, "ucx outbox: canceled");
            goto out;
        }
        if (pl_ucx_worker_progress(ucx))
            continue;
        if (ob->ep->status != UCS_OK) {
            st = pl_error(PL_ERR_TRANSPORT, "ucx outbox: peer endpoint failed: %s",
                          ucs_status_string(ob->ep->status));
            goto out;
        }
        if (pl_now() >= deadline) {
            st = pl_error(PL_ERR_TIMEOUT, "ucx outbox: no buffer free after %d ms", timeout_ms);
            goto out;
        }
        if ((st = pl_ucx_sleep(ucx, deadline)) != PL_OK)
            goto out;
    }
    ob->bufs[i].state = S_TAKEN;
    ob->stats.waits += waited;
    *buf_p = ob->bufs[i].send.buf;
    *cap_p = ob->buf_bytes;
out:
    pl_ucx_unlock(ucx);
    return st;
}

/* The pool buffer that starts at buf and is with the caller, or NULL. */
static s_buf_t *s_taken(pl_ucx_outbox_t *ob, const void *buf)
{
    const unsigned char *p = buf;
    if (p < ob->mem || p >= ob->mem + ob->buf_bytes * (size_t)ob->n)
        return NULL;
    size_t off = (size_t)(p - ob->mem);
    s_buf_t *b = &ob->bufs[off / ob->buf_bytes];
    return off % ob->buf_bytes == 0 && b->state == S_TAKEN ? b : NULL;
}

void pl_ucx_outbox_unget(pl_ucx_outbox_t *ob, void *buf)
{
    pl_ucx_lock(ob->ucx);
    s_buf_t *b = s_taken(ob, buf);
    if (b)
        b->state = S_FREE;
    pl_ucx_unlock(ob->ucx);
}

pl_status_t pl_ucx_outbox_send(pl_ucx_outbox_t *ob, uint64_t tag, void *buf, size_t len,
                               int timeout_ms, const volatile int *cancel)
{
    pl_ucx_t *ucx = ob->ucx;
    pl_status_t st;

    pl_ucx_lock(ucx);
    s_buf_t *b = s_taken(ob, buf);
    if (!b) {
        pl_ucx_unlock(ucx);
        return pl_error(PL_ERR_INVALID, "ucx outbox: %p is not a buffer taken from the pool", buf);
    }
    if (len > ob->buf_bytes) {
        b->state = S_FREE;
        pl_ucx_unlock(ucx);
        return pl_error(PL_ERR_RANGE, "ucx outbox: %zu bytes exceed the %zu-byte buffer", len,
                        ob->buf_bytes);
    }
    st = pl_ucx_credit_take_locked(ucx, ob->ep, pl_ucx_deadline(timeout_ms), timeout_ms, cancel);
    if (st != PL_OK) {
        b->state = S_FREE;
        pl_ucx_unlock(ucx);
        return st;
    }
    b->state = S_SENDING;
    ob->n_sending++;
    if (ob->n_sending > ob->stats.max_sending)
        ob->stats.max_sending = ob->n_sending;
    ob->stats.sends++;
    st = pl_ucx_send_pooled_locked(ucx, ob->ep, tag, &b->send, len, ob->memh);
    pl_ucx_grants_flush(ucx); /* behind the message, not ahead of it */
    pl_ucx_unlock(ucx);
    return st;
}

void pl_ucx_outbox_stats(pl_ucx_outbox_t *ob, pl_ucx_outbox_stats_t *stats)
{
    pl_ucx_lock(ob->ucx);
    *stats = ob->stats;
    stats->sending = ob->n_sending;
    stats->send_allocs = ob->ucx->send_allocs;
    pl_ucx_unlock(ob->ucx);
}

void pl_ucx_outbox_destroy(pl_ucx_outbox_t **ob_p)
{
    pl_ucx_outbox_t *ob = ob_p ? *ob_p : NULL;
    if (!ob)
        return;
    *ob_p = NULL;
    pl_ucx_t *ucx = ob->ucx;
    double deadline = pl_now() + PL_UCX_CLOSE_S;
    pl_ucx_lock(ucx);
    ucx->n_outboxes--;
    /* Sends still going finish (or fail with their peer) in bounded time. */
    while (ob->n_sending > 0 && pl_now() < deadline)
        if (!ucp_worker_progress(ucx->worker) && pl_ucx_sleep(ucx, deadline) != PL_OK)
            break;
    if (ob->n_sending > 0 || ob->n_lost > 0) {
        /* UCX may still read a buffer: the pool stays, mapped (a logged leak). */
        pl_log_warn("ucx outbox: %d sends still going, %d buffers lost to a closed endpoint; "
                    "leaving its %zu bytes in place",
                    ob->n_sending, ob->n_lost, ob->buf_bytes * (size_t)ob->n);
        pl_ucx_unlock(ucx);
        return;
    }
    ucp_mem_unmap(ucx->ctx, ob->memh);
    pl_ucx_unlock(ucx);
    free(ob->mem);
    free(ob->bufs);
    free(ob);
}

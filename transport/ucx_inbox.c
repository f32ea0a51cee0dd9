/* Credit flow control on the UCX data plane: an inbox pre-posts receives into registered slots
 * and grants its sender a credit per slot (released slots' credits batched into one grant); a
 * credited send waits for a credit before it goes. */
#include "transport/ucx.h"
#include "transport/ucx_grant.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

#define S_SLOT_ALIGN 64u
#define S_MEM_ALIGN 4096u

typedef struct {
    pl_ucx_inbox_t *in;
    unsigned char *buf;
    void *req; /* the posted receive, NULL once complete */
    bool done;
    ucs_status_t status;
    ucp_tag_recv_info_t info;
} s_slot_t;

/* A grant's send: its 8 bytes lie in the inbox's registered memory, behind the slots. */
typedef struct {
    pl_ucx_send_t send; /* first: the completion hands this back */
    bool sending;       /* with UCX */
    bool lost;          /* dropped by a disconnect: UCX may still read it, never reused */
} s_grant_t;

struct pl_ucx_inbox {
    pl_ucx_inbox_t *next; /* the worker's live inboxes */
    pl_ucx_t *ucx;
    pl_ucx_ep_t *up;
    uint64_t want, mask, credit_tag;
    size_t slot_bytes;
    int n;
    unsigned char *mem;
    ucp_mem_h memh;
    s_slot_t *slots;
    s_grant_t *grants; /* n + 1: the first grant and one per slot's return */
    int head;          /* the oldest posted slot: the next message arrives there */
    bool taken;        /* the head slot's message is with the caller */
    int owed;          /* released slots whose credit is not granted yet (pl_ucx_grants_flush) */
    int64_t grant_msgs; /* grants sent, the first included */
};

static void s_grant_done(pl_ucx_send_t *s, bool reusable)
{
    s_grant_t *g = (s_grant_t *)s;
    g->sending = false;
    g->lost |= !reusable;
}

/* Grant buffers still with UCX, or lost (lock held). */
static int s_grants_busy(const pl_ucx_inbox_t *in)
{
    int n = 0;
    for (int i = 0; i <= in->n; i++)
        n += in->grants[i].sending || in->grants[i].lost;
    return n;
}

/* Send `n` credits to the inbox's sender (lock held): from a grant buffer of the inbox's own;
 * only when all of them are still with UCX (a peer that does not progress) from a malloc'd one,
 * which the worker's allocation count shows. */
static pl_status_t s_grant(pl_ucx_inbox_t *in, uint32_t n)
{
    in->grant_msgs++;
    for (int i = 0; i <= in->n; i++) {
        s_grant_t *g = &in->grants[i];
        if (g->sending || g->lost)
            continue;
        g->sending = true;
        pl_ucx_grant_encode(n, &in->ucx->token, g->send.buf);
        return pl_ucx_send_pooled_locked(in->ucx, in->up, in->credit_tag, &g->send,
                                         PL_UCX_GRANT_BYTES, in->memh);
    }
    unsigned char *b = malloc(PL_UCX_GRANT_BYTES);
    if (!b)
        return pl_error(PL_ERR_NOMEM, "ucx inbox: out of memory");
    pl_ucx_grant_encode(n, &in->ucx->token, b);
    return pl_ucx_send_locked(in->ucx, in->up, in->credit_tag, b, PL_UCX_GRANT_BYTES);
}

static void s_slot_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    s_slot_t *sl = user_data;
    sl->status = status;
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)
        sl->info = *info;
    sl->done = true;
    sl->req = NULL;
    ucp_request_free(request);
}

/* Post the receive of one slot (lock held). */
static pl_status_t s_post(pl_ucx_inbox_t *in, s_slot_t *sl)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t req;

    sl->done = false;
    sl->status = UCS_INPROGRESS;
    /* Never completed at once: UCX 1.13 then leaves recv_info unwritten when the message came
     * from its unexpected queue (one that arrived while the slot was away, as behind a dropped
     * forged message), and the slot would report the length of the one before. The callback
     * always has the message's own length; it may run before ucp_tag_recv_nbx returns. */
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = s_slot_done;
    param.user_data = sl;
    param.memh = in->memh;
    req = ucp_tag_recv_nbx(in->ucx->worker, sl->buf, in->slot_bytes, in->want & in->mask, in->mask,
                           &param);
    if (UCS_PTR_IS_ERR(req) && UCS_PTR_STATUS(req) == UCS_ERR_MESSAGE_TRUNCATED) {
        /* an oversized message that was already waiting matched at once: the slot is done,
         * and inbox_recv refuses it as it would one that came later */
        sl->status = UCS_ERR_MESSAGE_TRUNCATED;
        sl->done = true;
        return PL_OK;
    }
    if (UCS_PTR_IS_ERR(req))
        return pl_ucx_ucs_error(UCS_PTR_STATUS(req), "inbox receive");
    if (!sl->done) /* the callback has not run yet */
        sl->req = req;
    return PL_OK;
}

/* Cancel the posted receives and wait (bounded) for UCX to let go of them and of the grants'
 * sends; false when one is still in UCX's hands (lock held). */
static bool s_cancel_all(pl_ucx_inbox_t *in)
{
    double deadline = pl_now() + PL_UCX_CLOSE_S;
    bool busy = true;
    for (int i = 0; i < in->n; i++)
        if (in->slots[i].req)
            ucp_request_cancel(in->ucx->worker, in->slots[i].req);
    while (busy) {
        busy = s_grants_busy(in) > 0;
        for (int i = 0; i < in->n; i++)
            busy |= in->slots[i].req != NULL;
        if (!busy || pl_now() >= deadline)
            break;
        if (!ucp_worker_progress(in->ucx->worker) && pl_ucx_sleep(in->ucx, deadline) != PL_OK)
            break;
    }
    return !busy;
}

pl_status_t pl_ucx_inbox_create(pl_ucx_t *ucx, pl_ucx_ep_t *upstream, uint64_t want, uint64_t mask,
                                uint64_t credit_tag, size_t slot_bytes, int n_slots,
                                pl_ucx_inbox_t **inbox_p)
{
    ucp_mem_map_params_t mp = {0};
    pl_ucx_inbox_t *in;
    ucs_status_t us;
    pl_status_t st;
    size_t total;

    if (n_slots < 1 || n_slots > PL_UCX_INBOX_MAX_SLOTS || slot_bytes == 0 ||
        slot_bytes > PL_UCX_INBOX_MAX_SLOT_BYTES)
        return pl_error(PL_ERR_RANGE,
                        "ucx inbox: %d slots of %zu bytes (1..%d slots of at most "
                        "%zu bytes)",
                        n_slots, slot_bytes, PL_UCX_INBOX_MAX_SLOTS,
                        (size_t)PL_UCX_INBOX_MAX_SLOT_BYTES);
    slot_bytes = (slot_bytes + S_SLOT_ALIGN - 1) / S_SLOT_ALIGN * S_SLOT_ALIGN;
    /* the slots, then n_slots + 1 grant buffers of S_SLOT_ALIGN bytes each */
    total = slot_bytes * (size_t)n_slots + S_SLOT_ALIGN * (size_t)(n_slots + 1);
    if (!(in = calloc(1, sizeof(*in))))
        return pl_error(PL_ERR_NOMEM, "ucx inbox: out of memory");
    in->ucx = ucx;
    in->up = upstream;
    in->want = want;
    in->mask = mask;
    in->credit_tag = credit_tag;
    in->slot_bytes = slot_bytes;
    in->n = n_slots;
    in->slots = calloc((size_t)n_slots, sizeof(*in->slots));
    in->grants = calloc((size_t)n_slots + 1, sizeof(*in->grants));
    if (!in->slots || !in->grants || posix_memalign((void **)&in->mem, S_MEM_ALIGN, total) != 0) {
        free(in->slots);
        free(in->grants);
        free(in);
        return pl_error(PL_ERR_NOMEM, "ucx inbox: cannot allocate %zu bytes", total);
    }
    /* Registered once, here: every receive into a slot reuses the registration. */
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = in->mem;
    mp.length = total;
    pl_ucx_lock(ucx);
    us = ucp_mem_map(ucx->ctx, &mp, &in->memh);
    if (us != UCS_OK) {
        st = pl_ucx_ucs_error(us, "inbox memory map");
        goto err_free;
    }
    for (int i = 0; i <= n_slots; i++) {
        in->grants[i].send.buf = in->mem + slot_bytes * (size_t)n_slots + S_SLOT_ALIGN * (size_t)i;
        in->grants[i].send.done = s_grant_done;
    }
    for (int i = 0; i < n_slots; i++) {
        in->slots[i].in = in;
        in->slots[i].buf = in->mem + (size_t)i * slot_bytes;
        if ((st = s_post(in, &in->slots[i])) != PL_OK)
            goto err_cancel;
    }
    if ((st = s_grant(in, (uint32_t)n_slots)) != PL_OK)
        goto err_cancel;
    ucx->n_inboxes++;
    in->next = ucx->inboxes;
    ucx->inboxes = in;
    pl_ucx_unlock(ucx);
    *inbox_p = in;
    return PL_OK;

err_cancel:
    if (!s_cancel_all(in)) {
        pl_log_warn("ucx inbox: a receive is still in UCX's hands; leaving its %zu bytes", total);
        pl_ucx_unlock(ucx);
        return st;
    }
    ucp_mem_unmap(ucx->ctx, in->memh);
err_free:
    pl_ucx_unlock(ucx);
    free(in->mem);
    free(in->slots);
    free(in->grants);
    free(in);
    return st;
}

size_t pl_ucx_inbox_bytes(const pl_ucx_inbox_t *in)
{
    return in->slot_bytes * (size_t)in->n;
}

int pl_ucx_inbox_slots(const pl_ucx_inbox_t *in)
{
    return in->n;
}

int64_t pl_ucx_inbox_grants(pl_ucx_inbox_t *in)
{
    pl_ucx_lock(in->ucx);
    int64_t n = in->grant_msgs;
    pl_ucx_unlock(in->ucx);
    return n;
}

/* Re-post the head slot, move on, and owe its credit when `credit` (lock held). */
static pl_status_t s_release(pl_ucx_inbox_t *in, bool credit)
{
    s_slot_t *sl = &in->slots[in->head];
    pl_status_t st;
    in->taken = false;
    in->head = (in->head + 1) % in->n;
    if ((st = s_post(in, sl)) != PL_OK)
        return st;
    if (credit) { /* granted by pl_ucx_grants_flush: the slot is posted, the credit is real */
        in->owed++;
        in->ucx->grants_owed++;
    }
    return PL_OK;
}

/* Grant this inbox's owed credits in one message (lock held). */
static void s_grant_owed(pl_ucx_inbox_t *in)
{
    uint32_t n = (uint32_t)in->owed;
    in->ucx->grants_owed -= in->owed;
    in->owed = 0;
    if (in->up->closed || in->up->status != UCS_OK)
        return; /* the peer is gone: its failure is reported by the waits */
    if (s_grant(in, n) != PL_OK) {
        pl_log_warn_limited("ucx inbox: granting %u credits: %s", n, pl_error_msg());
        pl_error_clear();
    }
}

void pl_ucx_grants_flush(pl_ucx_t *ucx)
{
    if (ucx->grants_owed == 0)
        return;
    for (pl_ucx_inbox_t *in = ucx->inboxes; in; in = in->next)
        if (in->owed > 0)
            s_grant_owed(in);
}

pl_status_t pl_ucx_inbox_recv(pl_ucx_inbox_t *in, const void **buf_p, size_t *len_p,
                              uint64_t *tag_p, int timeout_ms, const volatile int *cancel)
{
    double deadline = pl_ucx_deadline(timeout_ms);
    pl_ucx_t *ucx = in->ucx;
    s_slot_t *sl = &in->slots[in->head];
    pl_status_t st = PL_OK;

    if (in->taken)
        return pl_error(PL_ERR_INVALID, "ucx inbox: the previous message was not released");
    pl_ucx_lock(ucx);
    /* About to wait, or half the slots owed: the sender gets them now, in one grant */
    if (!sl->done || in->owed * 2 >= in->n)
        pl_ucx_grants_flush(ucx);
    while (!sl->done) {
        if (cancel && *cancel) {
            st = pl_error(PL_ERR_CANCELED, "ucx inbox: canceled");
            goto out;
        }
        if (pl_ucx_worker_progress(ucx))
            continue;
        pl_ucx_ep_t *failed = pl_ucx_failed_ep(ucx); /* this link's peer, or another */
        if (failed) {
            st =
                pl_error(PL_ERR_TRANSPORT, "ucx inbox: %s peer endpoint failed: %s",
                         failed == in->up ? "the sending" : "a", ucs_status_string(failed->status));
            goto out;
        }
        if (pl_now() >= deadline) {
            st = pl_error(PL_ERR_TIMEOUT, "ucx inbox: nothing after %d ms", timeout_ms);
            goto out;
        }
        if ((st = pl_ucx_sleep(ucx, deadline)) != PL_OK)
            goto out;
    }
    if (sl->status != UCS_OK) {
        if (sl->status == UCS_ERR_MESSAGE_TRUNCATED)
            st = pl_error(PL_ERR_PROTOCOL,
                          "ucx inbox: message of %zu bytes (tag 0x%016llx) "
                          "exceeds the %zu-byte slot",
                          sl->info.length, (unsigned long long)sl->info.sender_tag, in->slot_bytes);
        else
            st = pl_ucx_ucs_error(sl->status, "inbox receive");
        /* The slot goes back at once, so the link carries on after a bad message; without a
         * credit, since anyone who knows the worker's address could have sent it. */
        pl_status_t st2 = s_release(in, false);
        if (st2 != PL_OK)
            st = st2;
        goto out;
    }
    in->taken = true;
    *buf_p = sl->buf;
    *len_p = sl->info.length;
    if (tag_p)
        *tag_p = sl->info.sender_tag;
out:
    pl_ucx_unlock(ucx);
    return st;
}

static pl_status_t s_give_back(pl_ucx_inbox_t *in, bool credit)
{
    if (!in->taken)
        return pl_error(PL_ERR_INVALID, "ucx inbox: no message to release");
    pl_ucx_lock(in->ucx);
    pl_status_t st = s_release(in, credit);
    pl_ucx_unlock(in->ucx);
    return st;
}

pl_status_t pl_ucx_inbox_release(pl_ucx_inbox_t *in)
{
    return s_give_back(in, true);
}

pl_status_t pl_ucx_inbox_drop(pl_ucx_inbox_t *in)
{
    return s_give_back(in, false);
}

void pl_ucx_inbox_destroy(pl_ucx_inbox_t **in_p)
{
    pl_ucx_inbox_t *in = in_p ? *in_p : NULL;
    if (!in)
        return;
    *in_p = NULL;
    pl_ucx_t *ucx = in->ucx;
    pl_ucx_lock(ucx);
    ucx->n_inboxes--;
    for (pl_ucx_inbox_t **pp = &ucx->inboxes; *pp; pp = &(*pp)->next) {
        if (*pp == in) {
            *pp = in->next;
            break;
        }
    }
    ucx->grants_owed -= in->owed; /* nobody will send into this inbox again */
    in->owed = 0;
    if (!s_cancel_all(in)) {
        /* UCX may still write into a slot: its memory stays, mapped (a logged leak). */
        pl_log_warn("ucx inbox: a message was still arriving after %.0f s; leaving its %zu "
                    "bytes in place",
                    PL_UCX_CLOSE_S, pl_ucx_inbox_bytes(in));
        pl_ucx_unlock(ucx);
        return;
    }
    ucp_mem_unmap(ucx->ctx, in->memh);
    pl_ucx_unlock(ucx);
    free(in->mem);
    free(in->slots);
    free(in->grants);
    free(in);
}

void pl_ucx_ep_use_credits(pl_ucx_ep_t *ep, uint64_t credit_tag)
{
    pl_ucx_lock(ep->ucx);
    ep->credited = true;
    ep->credit_want = credit_tag;
    ep->credit_mask = ~0ULL;
    pl_ucx_unlock(ep->ucx);
}

static void s_grant_recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                              void *user_data)
{
    pl_ucx_ep_t *ep = user_data;
    ep->grant_status = status;
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)
        ep->grant_info = *info;
    ep->grant_done = true;
    ep->grant_req = NULL;
    ucp_request_free(request);
}

/* Post ep's grant receive into its own buffer (lock held). Always through the callback, which
 * fills in the length (UCX 1.13 leaves the info of an at-once completion empty), maybe from
 * inside this call when the grant is already there. */
static pl_status_t s_grant_post(pl_ucx_t *ucx, pl_ucx_ep_t *ep)
{
    ucp_request_param_t param = {0};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = s_grant_recv_done;
    param.user_data = ep;
    ep->grant_done = false;
    ep->grant_status = UCS_INPROGRESS;
    ep->grant_req = NULL;
    ucs_status_ptr_t req =
        ucp_tag_recv_nbx(ucx->worker, ep->grant_buf, sizeof(ep->grant_buf),
                         ep->credit_want & ep->credit_mask, ep->credit_mask, &param);
    if (UCS_PTR_IS_ERR(req))
        return pl_ucx_ucs_error(UCS_PTR_STATUS(req), "credit grant receive");
    ep->grant_posted = true;
    if (!ep->grant_done)
        ep->grant_req = req; /* else the callback has freed it */
    return PL_OK;
}

void pl_ucx_ep_grants_cancel(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline)
{
    if (ep->grant_req)
        ucp_request_cancel(ucx->worker, ep->grant_req);
    while (ep->grant_req && pl_now() < deadline)
        ucp_worker_progress(ucx->worker);
    ep->grant_posted = ep->grant_req != NULL;
}

/* Take the grants that have come in for ep (lock held): each lands in the endpoint's grant
 * buffer, checked, counted, and the receive posted again. */
static pl_status_t s_take_grants(pl_ucx_t *ucx, pl_ucx_ep_t *ep)
{
    pl_status_t st;
    for (;;) {
        if (!ep->grant_posted && (st = s_grant_post(ucx, ep)) != PL_OK)
            return st;
        if (!ep->grant_done)
            return PL_OK;
        ep->grant_posted = false;
        uint32_t n;
        if (ep->grant_status == UCS_ERR_MESSAGE_TRUNCATED) {
            st = pl_error(PL_ERR_PROTOCOL, "ucx: credit grant of %zu bytes (expected %u)",
                          ep->grant_info.length, PL_UCX_GRANT_BYTES);
        } else if (ep->grant_status != UCS_OK) {
            return pl_ucx_ucs_error(ep->grant_status, "credit grant receive");
        } else { /* more than an inbox can have, with the job's token, is a broken peer */
            st = pl_ucx_grant_decode(ep->grant_buf, ep->grant_info.length, &ucx->token,
                                     (uint32_t)(PL_UCX_INBOX_MAX_SLOTS - ep->credits), &n);
            if (st == PL_ERR_RANGE)
                return st;
        }
        if (st != PL_OK) { /* anyone can send on the credit tag: no credit, and no failure */
            ucx->grants_dropped++;
            pl_log_warn_limited("ucx: dropped a credit grant: %s", pl_error_msg());
            pl_error_clear();
            continue;
        }
        if (ep->granted == 0)
            ep->first_grant = n;
        ep->granted += n;
        ep->credits += n;
    }
}

void pl_ucx_set_token(pl_ucx_t *ucx, const pl_act_token_t *token)
{
    pl_ucx_lock(ucx);
    ucx->token = *token;
    pl_ucx_unlock(ucx);
}

int64_t pl_ucx_grants_dropped(pl_ucx_t *ucx)
{
    pl_ucx_lock(ucx);
    int64_t n = ucx->grants_dropped;
    pl_ucx_unlock(ucx);
    return n;
}

pl_status_t pl_ucx_credit_take_locked(pl_ucx_t *ucx, pl_ucx_ep_t *ep, double deadline,
                                      int timeout_ms, const volatile int *cancel)
{
    pl_status_t st;
    double t0 = 0;
    if (!ep->credited)
        return pl_error(PL_ERR_INVALID, "ucx: credited send on an endpoint without credits");
    for (;;) {
        if ((st = s_take_grants(ucx, ep)) != PL_OK)
            return st;
        if (ep->credits > 0)
            break;
        if (t0 == 0) {
            t0 = pl_now();
            ep->credit_waits++;
        }
        if (pl_ucx_worker_progress(ucx))
            continue;
        if (ep->status != UCS_OK)
            return pl_error(PL_ERR_TRANSPORT, "ucx send: peer endpoint failed: %s",
                            ucs_status_string(ep->status));
        if (cancel && *cancel)
            return pl_error(PL_ERR_CANCELED, "ucx send: canceled while waiting for a credit");
        if (pl_now() >= deadline)
            return pl_error(PL_ERR_TIMEOUT, "ucx send: no credit from the peer after %d ms",
                            timeout_ms);
        if ((st = pl_ucx_sleep(ucx, deadline)) != PL_OK)
            return st;
    }
    if (t0 > 0)
        ep->credit_wait_s += pl_now() - t0;
    ep->credits--;
    ep->sent++;
    int64_t in_flight = ep->sent - (ep->granted - ep->first_grant);
    if (in_flight > ep->max_in_flight)
        ep->max_in_flight = in_flight;
    return PL_OK;
}

pl_status_t pl_ucx_send_credited(pl_ucx_t *ucx, pl_ucx_ep_t *ep, uint64_t tag, void *buf,
                                 size_t len, int timeout_ms, const volatile int *cancel)
{
    pl_ucx_lock(ucx);
    pl_status_t st =
        pl_ucx_credit_take_locked(ucx, ep, pl_ucx_deadline(timeout_ms), timeout_ms, cancel);
    if (st != PL_OK) {
        pl_ucx_unlock(ucx);
        free(buf);
        return st;
    }
    st = pl_ucx_send_locked(ucx, ep, tag, buf, len);
    pl_ucx_grants_flush(ucx); /* behind the message, not ahead of it */
    pl_ucx_unlock(ucx);
    return st;
}

void pl_ucx_ep_credit_stats(pl_ucx_ep_t *ep, pl_ucx_credit_stats_t *stats)
{
    pl_ucx_lock(ep->ucx);
    *stats = (pl_ucx_credit_stats_t){.granted = ep->first_grant,
                                     .sent = ep->sent,
                                     .in_flight = ep->sent - (ep->granted - ep->first_grant),
                                     .max_in_flight = ep->max_in_flight,
                                     .waits = ep->credit_waits,
                                     .wait_s = ep->credit_wait_s};
    pl_ucx_unlock(ep->ucx);
}

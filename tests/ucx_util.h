/* What the UCX data-plane suites share: two workers in this process joined both ways (a link, with
 * an inbox and optionally a send pool), message bytes that depend on (seed, index), and strings
 * over a pipe to a peer process. */
#ifndef PL_TESTS_UCX_UTIL_H
#define PL_TESTS_UCX_UTIL_H

#include "transport/ucx.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TU_DATA_TAG 0x100ULL
#define TU_DATA_MASK 0xf00ULL
#define TU_CREDIT_TAG 0x200ULL

/* An endpoint of `from` to `to`'s worker address. */
static inline pl_ucx_ep_t *tu_connect(pl_ucx_t *from, pl_ucx_t *to)
{
    char *addr = NULL;
    pl_ucx_ep_t *ep = NULL;
    cr_assert_eq(pl_ucx_address(to, &addr), PL_OK);
    cr_assert_eq(pl_ucx_connect(from, addr, &ep), PL_OK, "%s", pl_error_msg());
    free(addr);
    return ep;
}

/* Byte i of message `seed`: any misplaced byte is caught. */
static inline unsigned char tu_byte(size_t i, unsigned seed)
{
    return (unsigned char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

/* A malloc'd buffer of len tu_byte(i, seed) bytes. */
static inline void *tu_pattern(size_t len, unsigned seed)
{
    unsigned char *b = malloc(len ? len : 1);
    cr_assert(b);
    for (size_t i = 0; i < len; i++)
        b[i] = tu_byte(i, seed);
    return b;
}

/* The first byte of buf that is not tu_byte(i, seed); len when none. */
static inline size_t tu_pattern_diff(const void *buf, size_t len, unsigned seed)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        if (b[i] != tu_byte(i, seed))
            return i;
    return len;
}

static inline bool tu_pattern_ok(const void *buf, size_t len, unsigned seed)
{
    return tu_pattern_diff(buf, len, seed) == len;
}

/* The large messages of the suites: rendezvous-sized on every transport. */
#define TU_BIG (8u << 20)

static inline pl_ucx_t *tu_create(void)
{
    pl_ucx_t *u = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK, "%s", pl_error_msg());
    cr_assert_not_null(u);
    return u;
}

/* A plain send of a tu_pattern(len, seed) buffer (the worker frees it). */
static inline pl_status_t tu_send(pl_ucx_t *u, pl_ucx_ep_t *ep, uint64_t tag, size_t len,
                                  unsigned seed)
{
    return pl_ucx_send(u, ep, tag, tu_pattern(len, seed), len);
}

/* Receive on `rx` in one thread while also progressing `other` (the sender), so rendezvous
 * messages complete without a second thread. */
static inline pl_status_t tu_recv_with(pl_ucx_t *rx, pl_ucx_t *other, uint64_t want, uint64_t mask,
                                       size_t max_len, void **buf, size_t *len, uint64_t *tag,
                                       int timeout_ms)
{
    double end = pl_now() + timeout_ms / 1e3;
    pl_status_t st;
    do {
        st = pl_ucx_recv(rx, want, mask, max_len, buf, len, tag, 5, NULL);
        if (st != PL_ERR_TIMEOUT)
            return st;
        for (int i = 0; i < 100; i++)
            pl_ucx_progress(other);
    } while (pl_now() < end);
    return st;
}

/* Two workers in this process and a's endpoint to b, wired up by one message a -> b (tag 1, `len`
 * tu_pattern bytes of seed 1) taken whole. */
static inline void tu_pair(pl_ucx_t **a_p, pl_ucx_t **b_p, pl_ucx_ep_t **ab_p, size_t len)
{
    pl_ucx_t *a = tu_create(), *b = tu_create();
    pl_ucx_ep_t *ab = tu_connect(a, b);
    void *buf;
    size_t got;
    cr_assert_eq(tu_send(a, ab, 1, len, 1), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(tu_recv_with(b, a, 1, ~0ULL, len, &buf, &got, NULL, 5000), PL_OK, "%s",
                 pl_error_msg());
    cr_assert(got == len && tu_pattern_ok(buf, got, 1), "the first message came wrong");
    free(buf);
    *a_p = a, *b_p = b, *ab_p = ab;
}

/* s with its NUL over fd: 0, or -1 when the write fell short. */
static inline int tu_put(int fd, const char *s)
{
    size_t n = strlen(s) + 1;
    return write(fd, s, n) == (ssize_t)n ? 0 : -1;
}

/* A NUL-ended string from fd into out: 0, or -1 (out[0] = '\0') when none came whole. */
static inline int tu_get(int fd, char *out, size_t cap)
{
    size_t got = 0;
    for (ssize_t r; (got == 0 || out[got - 1] != '\0') && got < cap &&
                    (r = read(fd, out + got, cap - got)) > 0;)
        got += (size_t)r;
    if (got > 0 && out[got - 1] == '\0')
        return 0;
    if (cap > 0)
        out[0] = '\0';
    return -1;
}

/* a sends to b (credited, from its pool when it has one); b's inbox grants credits over ba. */
typedef struct {
    pl_ucx_t *a, *b;
    pl_ucx_ep_t *ab, *ba;
    pl_ucx_inbox_t *in;
    pl_ucx_outbox_t *out; /* NULL when made with bufs 0 */
} tu_link_t;

/* Which workers of a link get a progress thread (a worker without one moves only inside its
 * owner's calls: a receiver that progresses late). */
#define TU_PROGRESS_A 1
#define TU_PROGRESS_B 2
#define TU_PROGRESS_BOTH (TU_PROGRESS_A | TU_PROGRESS_B)

/* Two workers with progress threads as `progress` says; b's inbox of `slots` slots of `bytes`;
 * a's send pool of `bufs` buffers of `bytes` (none when bufs is 0). */
static inline void tu_link(tu_link_t *l, size_t bytes, int slots, int bufs, int progress)
{
    memset(l, 0, sizeof(*l));
    cr_assert_eq(pl_ucx_create(&l->a), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_ucx_create(&l->b), PL_OK, "%s", pl_error_msg());
    if (progress & TU_PROGRESS_A)
        cr_assert_eq(pl_ucx_progress_start(l->a), PL_OK, "%s", pl_error_msg());
    if (progress & TU_PROGRESS_B)
        cr_assert_eq(pl_ucx_progress_start(l->b), PL_OK, "%s", pl_error_msg());
    l->ab = tu_connect(l->a, l->b);
    l->ba = tu_connect(l->b, l->a);
    pl_ucx_ep_use_credits(l->ab, TU_CREDIT_TAG);
    cr_assert_eq(pl_ucx_inbox_create(l->b, l->ba, TU_DATA_TAG, TU_DATA_MASK, TU_CREDIT_TAG, bytes,
                                     slots, &l->in),
                 PL_OK, "%s", pl_error_msg());
    if (bufs > 0)
        cr_assert_eq(pl_ucx_outbox_create(l->a, l->ab, bytes, bufs, &l->out), PL_OK, "%s",
                     pl_error_msg());
}

/* Take message i from l's inbox and check it whole: `size` tu_byte bytes of seed i, tagged
 * TU_DATA_TAG | i's low byte (so in order), in a 64-byte aligned slot. The caller releases it. */
static inline void tu_take(tu_link_t *l, size_t size, int i)
{
    const void *buf;
    size_t len;
    uint64_t tag;
    pl_status_t st = pl_ucx_inbox_recv(l->in, &buf, &len, &tag, 30000, NULL);
    cr_assert_eq(st, PL_OK, "message %d: %s", i, pl_error_msg());
    cr_assert_eq(len, size, "message %d", i);
    cr_assert_eq(tag, TU_DATA_TAG | (uint64_t)(i & 0xff), "message %d: out of order", i);
    cr_assert((uintptr_t)buf % 64 == 0, "message %d: slot not 64-byte aligned", i);
    size_t at = tu_pattern_diff(buf, len, (unsigned)i);
    cr_assert_eq(at, len, "message %d of %zu bytes differs at %zu", i, len, at);
}

/* Destroy the link; each destroy nulls its pointer and is safe twice. */
static inline void tu_unlink(tu_link_t *l)
{
    pl_ucx_outbox_destroy(&l->out);
    cr_assert_null(l->out);
    pl_ucx_outbox_destroy(&l->out);
    pl_ucx_inbox_destroy(&l->in);
    cr_assert_null(l->in);
    pl_ucx_inbox_destroy(&l->in);
    pl_ucx_destroy(&l->a);
    pl_ucx_destroy(&l->b);
}

#endif

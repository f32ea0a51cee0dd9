/* Serving requests and their hub: output pushed on one thread arrives whole and in order on
 * another, the first end wins, the hub hands over in order, wakes its descriptor, refuses past
 * its bound with 429, and a cancellation wakes the loop. */
#include "daemon/serve_req.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_serve_req_t *s_req(int n_prompt)
{
    pl_serve_in_t in = {.n_prompt = n_prompt};
    snprintf(in.deployment, sizeof(in.deployment), "tiny");
    in.prompt = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
    for (int i = 0; i < n_prompt; i++)
        in.prompt[i] = i + 7;
    pl_serve_req_t *r;
    cr_assert_eq(pl_serve_req_create(&in, &r), PL_OK);
    cr_assert_null(in.prompt, "the request took the prompt");
    return r;
}

static bool s_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

#define N_PIECES 2000

static void *s_producer(void *arg)
{
    pl_serve_req_t *r = arg;
    for (int i = 0; i < N_PIECES; i++) {
        char piece[16];
        int n = snprintf(piece, sizeof(piece), "%d,", i);
        int32_t tok = i;
        cr_assert_eq(pl_serve_req_push(r, &tok, 1, piece, (size_t)n), PL_OK);
    }
    pl_serve_end_t end = {.finish = PL_SERVE_LENGTH};
    pl_serve_req_end(r, &end);
    pl_serve_req_unref(&r);
    return NULL;
}

Test(serve_req, output_arrives_whole_and_in_order_across_threads)
{
    pl_serve_req_t *r = s_req(3);
    cr_assert_eq(pl_serve_req_input(r)->n_prompt, 3);
    cr_assert_eq(pl_serve_req_input(r)->prompt[2], 9);
    pl_serve_req_ref(r);
    pthread_t t;
    pthread_create(&t, NULL, s_producer, r);
    size_t at = 0, total = 0;
    char *all = calloc(1, 16 * N_PIECES);
    pl_serve_end_t end = {0};
    int n_tok = 0;
    while (end.finish == PL_SERVE_RUNNING) {
        char *text;
        size_t len;
        cr_assert_eq(pl_serve_req_wait(r, 5.0, &at, &text, &len, &n_tok, &end), PL_OK);
        if (text) {
            memcpy(all + total, text, len);
            total += len;
            free(text);
        }
    }
    pthread_join(t, NULL);
    cr_assert_eq(end.finish, PL_SERVE_LENGTH);
    cr_assert_eq(n_tok, N_PIECES);
    cr_assert_eq(at, total);
    char *want = calloc(1, 16 * N_PIECES);
    size_t wl = 0;
    for (int i = 0; i < N_PIECES; i++)
        wl += (size_t)sprintf(want + wl, "%d,", i);
    cr_assert_eq(total, wl);
    cr_assert_eq(memcmp(all, want, wl), 0, "text arrived whole and in order");
    int32_t *toks;
    int nt;
    cr_assert_eq(pl_serve_req_tokens(r, &toks, &nt), PL_OK);
    cr_assert_eq(nt, N_PIECES);
    for (int i = 0; i < nt; i++)
        cr_assert_eq(toks[i], i);
    free(toks);
    free(all);
    free(want);
    pl_serve_req_unref(&r);
    cr_assert_null(r);
}

Test(serve_req, first_end_wins_and_push_after_end_is_ignored)
{
    pl_serve_req_t *r = s_req(1);
    pl_serve_end_t stop = {.finish = PL_SERVE_STOP}, fail = {.finish = PL_SERVE_FAILED,
                                                              .http_status = 500};
    pl_serve_req_end(r, &stop);
    pl_serve_req_end(r, &fail);
    int32_t tok = 1;
    cr_assert_eq(pl_serve_req_push(r, &tok, 1, "x", 1), PL_OK);
    size_t at = 0;
    char *text;
    size_t len;
    int n;
    pl_serve_end_t end;
    cr_assert_eq(pl_serve_req_wait(r, 0, &at, &text, &len, &n, &end), PL_OK);
    cr_assert_null(text);
    cr_assert_eq(n, 0);
    cr_assert_eq(end.finish, PL_SERVE_STOP);
    pl_serve_req_unref(&r);
}

Test(serve_req, wait_times_out_with_nothing_new)
{
    pl_serve_req_t *r = s_req(1);
    size_t at = 0;
    char *text;
    size_t len;
    int n;
    pl_serve_end_t end;
    cr_assert_eq(pl_serve_req_wait(r, 0.05, &at, &text, &len, &n, &end), PL_OK);
    cr_assert_null(text);
    cr_assert_eq(end.finish, PL_SERVE_RUNNING);
    pl_serve_req_unref(&r);
}

Test(serve_hub, hands_over_in_order_and_wakes_its_descriptor)
{
    pl_serve_hub_t *hub;
    cr_assert_eq(pl_serve_hub_create(&hub), PL_OK);
    int fd = pl_serve_hub_fd(hub);
    cr_assert_not(s_readable(fd));
    pl_serve_req_t *a = s_req(1), *b = s_req(2);
    pl_serve_hub_put(hub, a);
    pl_serve_hub_put(hub, b);
    cr_assert(s_readable(fd));
    pl_serve_req_t *x = pl_serve_hub_take(hub), *y = pl_serve_hub_take(hub);
    cr_assert_eq(x, a);
    cr_assert_eq(y, b);
    cr_assert_null(pl_serve_hub_take(hub));
    cr_assert_not(s_readable(fd), "drained once nothing waits");
    cr_assert_not(pl_serve_req_canceled(a));
    pl_serve_req_cancel(a);
    cr_assert(pl_serve_req_canceled(a));
    cr_assert(s_readable(fd), "a cancellation wakes the loop");
    cr_assert_null(pl_serve_hub_take(hub));
    pl_serve_req_unref(&x);
    pl_serve_req_unref(&y);
    pl_serve_req_unref(&a);
    pl_serve_req_unref(&b);
    pl_serve_hub_destroy(&hub);
    cr_assert_null(hub);
}

Test(serve_hub, refuses_with_429_past_its_bound_and_cancels_the_queued_at_destroy)
{
    pl_serve_hub_t *hub;
    cr_assert_eq(pl_serve_hub_create(&hub), PL_OK);
    pl_serve_req_t *first = s_req(1);
    pl_serve_hub_put(hub, first);
    for (int i = 1; i < PL_SERVE_HUB_MAX; i++) {
        pl_serve_req_t *r = s_req(1);
        pl_serve_hub_put(hub, r);
        pl_serve_req_unref(&r);
    }
    pl_serve_req_t *over = s_req(1);
    pl_serve_hub_put(hub, over);
    size_t at = 0;
    char *text;
    size_t len;
    int n;
    pl_serve_end_t end;
    cr_assert_eq(pl_serve_req_wait(over, 0, &at, &text, &len, &n, &end), PL_OK);
    cr_assert_eq(end.finish, PL_SERVE_REFUSED);
    cr_assert_eq(end.http_status, 429);
    cr_assert_gt(end.retry_after_s, 0);
    pl_serve_hub_destroy(&hub);
    cr_assert_eq(pl_serve_req_wait(first, 0, &at, &text, &len, &n, &end), PL_OK);
    cr_assert_eq(end.finish, PL_SERVE_CANCELED, "queued requests end when the hub goes");
    pl_serve_req_unref(&over);
    pl_serve_req_unref(&first);
}

Test(serve_hub, publishes_deployments_bounded)
{
    pl_serve_hub_t *hub;
    cr_assert_eq(pl_serve_hub_create(&hub), PL_OK);
    pl_serve_deployment_t deps[PL_SERVE_MAX_DEPLOYMENTS + 3] = {0}, out[PL_SERVE_MAX_DEPLOYMENTS];
    for (int i = 0; i < PL_SERVE_MAX_DEPLOYMENTS + 3; i++)
        snprintf(deps[i].name, sizeof(deps[i].name), "d%d", i);
    cr_assert_eq(pl_serve_hub_deployments(hub, out), 0);
    pl_serve_hub_publish(hub, deps, 2);
    cr_assert_eq(pl_serve_hub_deployments(hub, out), 2);
    cr_assert_str_eq(out[1].name, "d1");
    pl_serve_hub_publish(hub, deps, PL_SERVE_MAX_DEPLOYMENTS + 3);
    cr_assert_eq(pl_serve_hub_deployments(hub, out), PL_SERVE_MAX_DEPLOYMENTS);
    pl_serve_hub_destroy(&hub);
}

/* A distributed training stage's UCX links when every stage is a thread of one process, as
 * test_train_exec runs them and bench_train_pipe times them (no criterion: a bench includes it). */
#ifndef PL_TESTS_TRAIN_LINK_UTIL_H
#define PL_TESTS_TRAIN_LINK_UTIL_H

#include "pipeline/train_exec.h"
#include "transport/ucx.h"

#include <pthread.h>

/* Stage s of S: a worker of its own, its address published in addr[s], then (once every stage
 * has published, at bar) endpoints to stages s - 1 and s + 1. Every stage reaches the barrier
 * whatever fails before it, so none waits for ever; tl_close frees what was made. */
static inline pl_status_t tl_open(int S, int s, pthread_barrier_t *bar, char **addr, pl_ucx_t **u_p,
                                  pl_ucx_ep_t **prev_p, pl_ucx_ep_t **next_p)
{
    pl_status_t rc = pl_ucx_create(u_p);
    if (rc == PL_OK)
        rc = pl_ucx_address(*u_p, &addr[s]);
    pthread_barrier_wait(bar);
    if (rc == PL_OK && s > 0)
        rc = pl_ucx_connect(*u_p, addr[s - 1], prev_p);
    if (rc == PL_OK && s < S - 1)
        rc = pl_ucx_connect(*u_p, addr[s + 1], next_p);
    return rc;
}

/* Every stage done before any closes (a peer's last message may still be in flight), then the
 * stage's executor and its worker. */
static inline void tl_close(pthread_barrier_t *bar, pl_train_exec_t **x_p, pl_ucx_t **u_p)
{
    pthread_barrier_wait(bar);
    pl_train_exec_destroy(x_p);
    pthread_barrier_wait(bar);
    pl_ucx_destroy(u_p);
}

#endif

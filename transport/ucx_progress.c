/* The UCX progress thread: it progresses the worker while its owner computes, and stays off
 * while the owner is inside a call of this API (which then progresses by itself). */
#include "transport/ucx.h"
#include "transport/ucx_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Wait (lock released) until `s` seconds from now, or a signal. */
static void s_wait_for(pl_ucx_t *ucx, double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&ucx->idle, &ucx->lock, &ts);
}

/* The progress thread: while the owner is away from this API (computing), progress whenever
 * the worker has events and sleep on its event fd otherwise; while the owner is in a call it
 * progresses itself, and the thread waits, so small messages never bounce between threads.
 * The owner's calls come in quick succession (receive, release, send): the thread takes over
 * only once the owner has been out PL_UCX_HANDOFF_S, looking again at that pace, and the owner
 * wakes it only after a long call (PL_UCX_PARK_S) or when it left sends in flight, so that the
 * end of a small message's call costs no wake-up and a large one's still streams on. */
static void *s_progress_main(void *arg)
{
    pl_ucx_t *ucx = arg;
    struct pollfd pfd[2] = {{.fd = ucx->efd, .events = POLLIN},
                            {.fd = ucx->wake_fd, .events = POLLIN}};
    pthread_mutex_lock(&ucx->lock);
    while (!atomic_load(&ucx->stop)) {
        double since = pl_now() - ucx->owner_since;
        if (ucx->owner_in > 0 && since >= PL_UCX_PARK_S) {
            ucx->parked = true;
            pthread_cond_wait(&ucx->idle, &ucx->lock);
            ucx->parked = false;
            continue;
        }
        if (ucx->owner_in > 0 || (since < PL_UCX_HANDOFF_S && !ucx->hurry)) {
            s_wait_for(ucx, ucx->owner_in > 0 ? PL_UCX_HANDOFF_S : PL_UCX_HANDOFF_S - since);
            continue;
        }
        pl_ucx_grants_flush(ucx); /* the owner released slots and went to compute */
        if (pl_ucx_worker_progress(ucx)) {
            if (atomic_load(&ucx->waiters) > 0) {
                pthread_mutex_unlock(&ucx->lock);
                sched_yield();
                pthread_mutex_lock(&ucx->lock);
            }
            continue;
        }
        ucs_status_t us = ucp_worker_arm(ucx->worker);
        if (us == UCS_ERR_BUSY)
            continue;
        pthread_mutex_unlock(&ucx->lock);
        if (us != UCS_OK) /* cannot sleep on the fd: poll the worker gently instead */
            usleep(1000);
        else
            poll(pfd, 2, PL_UCX_POLL_MS);
        pthread_mutex_lock(&ucx->lock);
    }
    pthread_mutex_unlock(&ucx->lock);
    return NULL;
}

pl_status_t pl_ucx_progress_start(pl_ucx_t *ucx)
{
    if (ucx->has_progress)
        return PL_OK;
    ucx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ucx->wake_fd < 0)
        return pl_error(PL_ERR_TRANSPORT, "ucx progress thread: eventfd: %s", strerror(errno));
    atomic_store(&ucx->stop, false);
    if (pthread_create(&ucx->progress, NULL, s_progress_main, ucx) != 0) {
        close(ucx->wake_fd);
        ucx->wake_fd = -1;
        return pl_error(PL_ERR_NOMEM, "ucx: cannot start the progress thread");
    }
    ucx->has_progress = true;
    return PL_OK;
}

bool pl_ucx_has_progress(const pl_ucx_t *ucx)
{
    return ucx->has_progress;
}

void pl_ucx_progress_stop(pl_ucx_t *ucx)
{
    uint64_t one = 1;
    if (!ucx->has_progress)
        return;
    pthread_mutex_lock(&ucx->lock);
    atomic_store(&ucx->stop, true);
    pthread_cond_signal(&ucx->idle);
    pthread_mutex_unlock(&ucx->lock);
    if (write(ucx->wake_fd, &one, sizeof(one)) < 0)
        pl_log_debug("ucx: waking the progress thread: %s", strerror(errno));
    pthread_join(ucx->progress, NULL);
    close(ucx->wake_fd);
    ucx->wake_fd = -1;
    ucx->has_progress = false;
}

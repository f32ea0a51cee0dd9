/* The CPU backend's thread pool: a fixed set of workers that run one function on every thread
 * at once, for the batch-invariant GEMM and anything else a stage splits across its cores. */
#include "backends/cpu/cpu_ops.h"

#include "common/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

/* Waking a sleeping thread costs tens of microseconds (more on a loaded machine), and a decode
 * step runs a job per matrix, ~100 a token: so a worker spins this long on the job counter after
 * its last job before it sleeps on the condition variable, and the caller spins as long for the
 * workers to finish. */
#define S_SPIN_S 50e-6

struct pl_cpu_pool {
    int n; /* workers + the calling thread */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t gen;     /* atomic; bumped under mu, so a worker about to sleep cannot miss it */
    int pending;      /* atomic: workers yet to finish the current job */
    int sleepers;     /* under mu: workers asleep on cv_work */
    bool done_waiter; /* under mu: the caller asleep on cv_done */
    bool stop;        /* atomic */
    void (*fn)(void *arg, int i, int n);
    void *arg;
};

typedef struct {
    pl_cpu_pool_t *pool;
    int index;
} s_worker_t;

static inline void s_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

/* Spin until *v != val or S_SPIN_S has passed; whether it changed. */
static bool s_spin_while(const void *v, uint64_t val, bool wide)
{
    double t0 = 0;
    for (unsigned i = 0;; i++) {
        uint64_t now = wide ? __atomic_load_n((const uint64_t *)v, __ATOMIC_ACQUIRE)
                            : (uint64_t)__atomic_load_n((const int *)v, __ATOMIC_ACQUIRE);
        if (now != val)
            return true;
        if ((i & 63) == 0) {
            double t = pl_now();
            if (i == 0)
                t0 = t;
            else if (t - t0 > S_SPIN_S)
                return false;
        }
        s_pause();
    }
}

static void *s_worker(void *p)
{
    s_worker_t w = *(s_worker_t *)p;
    pl_cpu_pool_t *pool = w.pool;
    uint64_t seen = 0;

    free(p);
    for (;;) {
        if (!s_spin_while(&pool->gen, seen, true)) {
            pthread_mutex_lock(&pool->mu);
            pool->sleepers++;
            while (__atomic_load_n(&pool->gen, __ATOMIC_ACQUIRE) == seen &&
                   !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&pool->cv_work, &pool->mu);
            pool->sleepers--;
            pthread_mutex_unlock(&pool->mu);
        }
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
            break;
        seen = __atomic_load_n(&pool->gen, __ATOMIC_ACQUIRE);
        pool->fn(pool->arg, w.index, pool->n);
        if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&pool->mu);
            if (pool->done_waiter)
                pthread_cond_signal(&pool->cv_done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

pl_status_t pl_cpu_pool_create(int threads, pl_cpu_pool_t **pool_p)
{
    pl_cpu_pool_t *pool = calloc(1, sizeof(*pool));

    if (!pool)
        return pl_error(PL_ERR_NOMEM, "cpu pool: out of memory");
    pool->n = 1;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv_work, NULL);
    pthread_cond_init(&pool->cv_done, NULL);
    pool->tids = calloc((size_t)PL_MAX(threads, 1), sizeof(pthread_t));
    if (!pool->tids)
        goto err_nomem;
    for (int i = 1; i < threads; i++) {
        s_worker_t *w = malloc(sizeof(*w));
        if (!w)
            goto err_nomem;
        w->pool = pool;
        w->index = i;
        if (pthread_create(&pool->tids[i], NULL, s_worker, w) != 0) {
            free(w);
            break; /* fewer threads than asked for is still a working pool */
        }
        pool->n++;
    }
    *pool_p = pool;
    return PL_OK;

err_nomem:
    pl_cpu_pool_destroy(&pool);
    return pl_error(PL_ERR_NOMEM, "cpu pool: out of memory");
}

void pl_cpu_pool_destroy(pl_cpu_pool_t **pool_p)
{
    pl_cpu_pool_t *pool = pool_p ? *pool_p : NULL;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    __atomic_store_n(&pool->stop, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++)
        pthread_join(pool->tids[i], NULL);
    pthread_cond_destroy(&pool->cv_work);
    pthread_cond_destroy(&pool->cv_done);
    pthread_mutex_destroy(&pool->mu);
    free(pool->tids);
    free(pool);
    *pool_p = NULL;
}

int pl_cpu_pool_size(const pl_cpu_pool_t *pool)
{
    return pool ? pool->n : 1;
}

void pl_cpu_pool_run(pl_cpu_pool_t *pool, void (*fn)(void *arg, int i, int n), void *arg)
{
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    /* one job at a time: the previous one finished (pending 0) before this call */
    pool->fn = fn;
    pool->arg = arg;
    __atomic_store_n(&pool->pending, pool->n - 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool->mu);
    __atomic_store_n(&pool->gen, pool->gen + 1, __ATOMIC_RELEASE);
    if (pool->sleepers)
        pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n);
    for (int left; (left = __atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE)) > 0;) {
        if (s_spin_while(&pool->pending, (uint64_t)left, false))
            continue;
        pthread_mutex_lock(&pool->mu);
        pool->done_waiter = true;
        while (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) > 0)
            pthread_cond_wait(&pool->cv_done, &pool->mu);
        pool->done_waiter = false;
        pthread_mutex_unlock(&pool->mu);
    }
}

/* The CPU backend's thread pool: a fixed set of workers that run one function on every thread
 * at once, for the batch-invariant GEMM and anything else a stage splits across its cores. */
#include "backends/cpu/cpu_ops.h"

#include "common/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct pl_cpu_pool {
    int n; /* workers + the calling thread */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t gen;
    int pending;
    bool stop;
    void (*fn)(void *arg, int i, int n);
    void *arg;
};

typedef struct {
    pl_cpu_pool_t *pool;
    int index;
} s_worker_t;

static void *s_worker(void *p)
{
    s_worker_t w = *(s_worker_t *)p;
    pl_cpu_pool_t *pool = w.pool;
    uint64_t seen = 0;

    free(p);
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (pool->gen == seen && !pool->stop)
            pthread_cond_wait(&pool->cv_work, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->gen;
        void (*fn)(void *, int, int) = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->mu);
        fn(arg, w.index, pool->n);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->cv_done);
    }
    pthread_mutex_unlock(&pool->mu);
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
    pool->stop = true;
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
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->pending = pool->n - 1;
    pool->gen++;
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n);
    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0)
        pthread_cond_wait(&pool->cv_done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

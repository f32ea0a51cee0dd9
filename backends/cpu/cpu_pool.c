/* The CPU backend's thread pool: a fixed set of workers that share a job's chunks with the
 * caller, for the batch-invariant GEMM and anything else a stage splits across its cores. */
#include "backends/cpu/cpu_ops.h"

#include "common/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Waking a sleeping thread costs tens of microseconds (more on a loaded machine), and a decode
 * step runs a few jobs per layer, ~50 a token: so a worker spins this long on the job counter
 * after its last job before it sleeps on the condition variable, and the caller spins as long for
 * the workers that joined to finish. */
#define S_SPIN_S 50e-6

/* state: the job's generation (low 32 bits) << 32 | S_OPEN while workers may still join | the
 * number of workers inside the job. A worker joins only the job it was woken for and only
 * while it is open, so the caller never waits for a worker that has not started (one the
 * scheduler left off a core does not hold the job up: the threads that run take its chunks). */
#define S_OPEN (1ull << 31)
#define S_ACTIVE_MASK (S_OPEN - 1)

struct pl_cpu_pool {
    int n; /* workers + the calling thread */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    void (*fn)(void *arg, int chunk); /* the current job: set while it is closed and empty */
    void *arg;
    int n_chunks;
    int sleepers;     /* atomic, changed under mu: workers asleep (or about to be) on cv_work */
    bool done_waiter; /* under mu: the caller asleep on cv_done */
    bool stop;        /* atomic */
    /* the counters every thread writes, each on its own cache line */
    _Alignas(64) uint64_t gen; /* atomic; only the caller bumps it */
    _Alignas(64) uint64_t state;
    _Alignas(64) int next; /* atomic: the next chunk to take */
};

typedef struct {
    pl_cpu_pool_t *pool;
    int index;
} s_worker_t;

/* pl_cpu_pool_stats' counters, process-wide; only callers of jobs write them. */
static struct {
    uint64_t jobs, wakes, waits, sleeps;
    uint64_t wait_ns;
} s_stats;

static void s_count(uint64_t *counter, uint64_t v)
{
    __atomic_add_fetch(counter, v, __ATOMIC_RELAXED);
}

void pl_cpu_pool_stats(pl_cpu_pool_stats_t *stats)
{
    *stats = (pl_cpu_pool_stats_t){
        .jobs = __atomic_load_n(&s_stats.jobs, __ATOMIC_RELAXED),
        .wakes = __atomic_load_n(&s_stats.wakes, __ATOMIC_RELAXED),
        .waits = __atomic_load_n(&s_stats.waits, __ATOMIC_RELAXED),
        .sleeps = __atomic_load_n(&s_stats.sleeps, __ATOMIC_RELAXED),
        .wait_s = (double)__atomic_load_n(&s_stats.wait_ns, __ATOMIC_RELAXED) * 1e-9};
}

static inline void s_pause(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

/* Spin until the generation moves past `seen`, S_SPIN_S at most; whether it did. */
static bool s_spin_gen(const uint64_t *gen, uint64_t seen)
{
    double t0 = 0;
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(gen, __ATOMIC_ACQUIRE) != seen)
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

/* Spin until no worker is inside the job, S_SPIN_S at most; whether none is. */
static bool s_spin_active(const uint64_t *state)
{
    double t0 = 0;
    for (unsigned i = 0;; i++) {
        if ((__atomic_load_n(state, __ATOMIC_ACQUIRE) & S_ACTIVE_MASK) == 0)
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

/* Take chunks until none is left. */
static void s_take(pl_cpu_pool_t *pool)
{
    for (int c; (c = __atomic_fetch_add(&pool->next, 1, __ATOMIC_RELAXED)) < pool->n_chunks;)
        pool->fn(pool->arg, c);
}

/* Join job `gen` if it is still open: whether this worker is now inside it. */
static bool s_join(pl_cpu_pool_t *pool, uint64_t gen)
{
    uint64_t v = __atomic_load_n(&pool->state, __ATOMIC_ACQUIRE);
    while ((v >> 32) == (gen & 0xffffffffu) && (v & S_OPEN))
        if (__atomic_compare_exchange_n(&pool->state, &v, v + 1, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return true;
    return false;
}

static void *s_worker(void *p)
{
    s_worker_t w = *(s_worker_t *)p;
    pl_cpu_pool_t *pool = w.pool;
    uint64_t seen = 0;

    free(p);
    for (;;) {
        if (!s_spin_gen(&pool->gen, seen)) {
            pthread_mutex_lock(&pool->mu);
            __atomic_add_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pool->gen, __ATOMIC_SEQ_CST) == seen &&
                   !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&pool->cv_work, &pool->mu);
            __atomic_sub_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool->mu);
        }
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
            break;
        seen = __atomic_load_n(&pool->gen, __ATOMIC_ACQUIRE);
        if (!s_join(pool, seen))
            continue; /* the caller has already taken every chunk */
        s_take(pool);
        uint64_t v = __atomic_sub_fetch(&pool->state, 1, __ATOMIC_ACQ_REL);
        if ((v & S_ACTIVE_MASK) == 0 && !(v & S_OPEN)) {
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
    /* the counters' cache-line alignment needs an aligned block */
    pl_cpu_pool_t *pool = aligned_alloc(_Alignof(pl_cpu_pool_t), sizeof(*pool));

    if (!pool)
        return pl_error(PL_ERR_NOMEM, "cpu pool: out of memory");
    memset(pool, 0, sizeof(*pool));
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

void pl_cpu_pool_chunks(pl_cpu_pool_t *pool, int n_chunks, void (*fn)(void *arg, int chunk),
                        void *arg)
{
    if (!pool || pool->n == 1 || n_chunks <= 1) {
        for (int c = 0; c < n_chunks; c++)
            fn(arg, c);
        return;
    }
    /* one job at a time: the previous one is closed and no worker is inside it */
    pool->fn = fn;
    pool->arg = arg;
    pool->n_chunks = n_chunks;
    __atomic_store_n(&pool->next, 0, __ATOMIC_RELAXED);
    uint64_t gen = __atomic_load_n(&pool->gen, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&pool->state, (gen & 0xffffffffu) << 32 | S_OPEN, __ATOMIC_RELEASE);
    /* seq_cst on both sides: a worker that counted itself a sleeper sees the new gen before it
     * waits, or this sees it as a sleeper and wakes it */
    __atomic_store_n(&pool->gen, gen, __ATOMIC_SEQ_CST);
    s_count(&s_stats.jobs, 1);
    if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST) > 0) {
        s_count(&s_stats.wakes, 1);
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv_work);
        pthread_mutex_unlock(&pool->mu);
    }
    s_take(pool);
    /* no one joins from here */
    uint64_t v = __atomic_and_fetch(&pool->state, ~S_OPEN, __ATOMIC_ACQ_REL);
    if ((v & S_ACTIVE_MASK) == 0)
        return; /* the common case: nothing to wait for, no clock read */
    double t0 = pl_now();
    s_count(&s_stats.waits, 1);
    if (!s_spin_active(&pool->state)) {
        s_count(&s_stats.sleeps, 1);
        pthread_mutex_lock(&pool->mu);
        pool->done_waiter = true;
        while (__atomic_load_n(&pool->state, __ATOMIC_ACQUIRE) & S_ACTIVE_MASK)
            pthread_cond_wait(&pool->cv_done, &pool->mu);
        pool->done_waiter = false;
        pthread_mutex_unlock(&pool->mu);
    }
    s_count(&s_stats.wait_ns, (uint64_t)((pl_now() - t0) * 1e9));
}

typedef struct {
    void (*fn)(void *arg, int i, int n);
    void *arg;
    int n;
} s_parts_t;

static void s_part(void *arg, int chunk)
{
    const s_parts_t *p = arg;
    p->fn(p->arg, chunk, p->n);
}

void pl_cpu_pool_run(pl_cpu_pool_t *pool, void (*fn)(void *arg, int i, int n), void *arg)
{
    s_parts_t p = {.fn = fn, .arg = arg, .n = pl_cpu_pool_size(pool)};
    pl_cpu_pool_chunks(pool, p.n, s_part, &p);
}

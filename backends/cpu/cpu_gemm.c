/* A batch-invariant f32 GEMM for short sequences and a small thread pool to run it. OpenBLAS
 * picks different micro-kernels (and so different rounding) depending on where a row falls in the
 * batch; here every output element is computed by the same instruction sequence whatever the
 * batch, so a sequence's result never depends on who shares its microbatch. */
#include "backends/cpu/cpu_ops.h"

#include "common/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S_TILE_R 4   /* rows per micro-tile */
#define S_TILE_O 2   /* outputs per micro-tile */
#define S_BLOCK_O 32 /* outputs whose weights stay in cache while every row passes */

typedef float s_v8_t __attribute__((vector_size(32)));
typedef float s_v8u_t __attribute__((vector_size(32), aligned(4))); /* unaligned loads */

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

/* ---- the kernel ---- */

/* The fixed reduction every element goes through: its 8 lane sums pairwise, then the scalar
 * tail of the inner dimension in order. */
static inline float s_finish(const s_v8_t *v, const float *x, const float *w, int k8, int k)
{
    const float *a = (const float *)v;
    float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    for (int i = k8; i < k; i++)
        s += x[i] * w[i];
    return s;
}

/* Add inner positions [k0, k1) (multiples of 8) of S_TILE_R rows times S_TILE_O weight rows to
 * the tile's lane accumulators acc[r * S_TILE_O + o]. Each lane sums its positions in order, so
 * splitting the inner dimension into blocks does not change the result. */
#if defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void
s_tile(s_v8_t *acc, const float *const *x, const float *const *w, int k0, int k1)
{
    s_v8_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
    s_v8_t a20 = acc[4], a21 = acc[5], a30 = acc[6], a31 = acc[7];
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *w0 = w[0], *w1 = w[1];
    for (int i = k0; i < k1; i += 8) {
        s_v8_t vw0 = *(const s_v8u_t *)(w0 + i), vw1 = *(const s_v8u_t *)(w1 + i);
        s_v8_t v = *(const s_v8u_t *)(x0 + i);
        a00 += v * vw0, a01 += v * vw1;
        v = *(const s_v8u_t *)(x1 + i);
        a10 += v * vw0, a11 += v * vw1;
        v = *(const s_v8u_t *)(x2 + i);
        a20 += v * vw0, a21 += v * vw1;
        v = *(const s_v8u_t *)(x3 + i);
        a30 += v * vw0, a31 += v * vw1;
    }
    acc[0] = a00, acc[1] = a01, acc[2] = a10, acc[3] = a11;
    acc[4] = a20, acc[5] = a21, acc[6] = a30, acc[7] = a31;
}

#define S_TILE_ACC (S_TILE_R * S_TILE_O)
#define S_GROUP_R 64 /* rows whose accumulators are kept at once */
#define S_BLOCK_K 256
#define S_L2_BYTES (256 * 1024) /* rows of x that stay cached without blocking the inner dim */

typedef struct {
    const float *x;
    const int *rows;
    int n_rows, in_dim;
    const float *w;
    int out_dim;
    float *y;
} s_gemm_job_t;

/* Rows [r0, r0+nr) of the job against outputs [o0, o0+no), no <= S_BLOCK_O. */
static void s_gemm_block(const s_gemm_job_t *j, int r0, int nr, int o0, int no, s_v8_t *acc)
{
    int k = j->in_dim, k8 = k & ~7;
    int n_rt = (nr + S_TILE_R - 1) / S_TILE_R, n_ot = (no + S_TILE_O - 1) / S_TILE_O;
    const float *xr[S_GROUP_R / S_TILE_R][S_TILE_R], *wr[S_BLOCK_O / S_TILE_O][S_TILE_O];

    /* partial tiles repeat their last row / output so every element takes the same path */
    for (int t = 0; t < n_rt; t++)
        for (int i = 0; i < S_TILE_R; i++)
            xr[t][i] = j->x + (size_t)j->rows[r0 + PL_MIN(t * S_TILE_R + i, nr - 1)] * k;
    for (int t = 0; t < n_ot; t++)
        for (int i = 0; i < S_TILE_O; i++)
            wr[t][i] = j->w + (size_t)(o0 + PL_MIN(t * S_TILE_O + i, no - 1)) * k;
    memset(acc, 0, sizeof(s_v8_t) * S_TILE_ACC * (size_t)(n_rt * n_ot));
    /* Blocking the inner dimension keeps the rows of x in cache while the weights pass; when
     * those rows fit in L2 anyway (decode batches) whole weight rows stream better than many
     * interleaved 1 KiB pieces. Either way each lane sums its positions in the same order. */
    int block_k = (size_t)n_rt * S_TILE_R * (size_t)k * sizeof(float) > S_L2_BYTES ? S_BLOCK_K : k8;
    for (int kb = 0; kb < k8; kb += block_k) {
        int ke = PL_MIN(kb + block_k, k8);
        for (int ot = 0; ot < n_ot; ot++)
            for (int rt = 0; rt < n_rt; rt++)
                s_tile(acc + (size_t)(rt * n_ot + ot) * S_TILE_ACC, xr[rt], wr[ot], kb, ke);
    }
    for (int rt = 0; rt < n_rt; rt++) {
        for (int ot = 0; ot < n_ot; ot++) {
            const s_v8_t *a = acc + (size_t)(rt * n_ot + ot) * S_TILE_ACC;
            for (int r = 0; r < S_TILE_R && rt * S_TILE_R + r < nr; r++) {
                float *y = j->y + (size_t)j->rows[r0 + rt * S_TILE_R + r] * j->out_dim + o0;
                for (int o = 0; o < S_TILE_O && ot * S_TILE_O + o < no; o++)
                    y[ot * S_TILE_O + o] =
                        s_finish(&a[r * S_TILE_O + o], xr[rt][r], wr[ot][o], k8, k);
            }
        }
    }
}

/* Each thread's tile accumulators (64 KiB), kept rather than allocated on every product. */
static _Thread_local s_v8_t s_acc[S_TILE_ACC * (S_GROUP_R / S_TILE_R) * (S_BLOCK_O / S_TILE_O)];

static void s_gemm_part(void *arg, int part, int n_parts)
{
    const s_gemm_job_t *j = arg;
    /* this thread's outputs, whole S_TILE_O tiles so no tile straddles two threads */
    int tiles = (j->out_dim + S_TILE_O - 1) / S_TILE_O;
    int t0 = (int)((int64_t)tiles * part / n_parts);
    int t1 = (int)((int64_t)tiles * (part + 1) / n_parts);
    int o_end = PL_MIN(t1 * S_TILE_O, j->out_dim);
    s_v8_t *acc = s_acc;

    for (int r0 = 0; r0 < j->n_rows; r0 += S_GROUP_R)
        for (int o0 = t0 * S_TILE_O; o0 < o_end; o0 += S_BLOCK_O)
            s_gemm_block(j, r0, PL_MIN(S_GROUP_R, j->n_rows - r0), o0,
                         PL_MIN(S_BLOCK_O, o_end - o0), acc);
}

void pl_cpu_matmul_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        int in_dim, const float *w, int out_dim, float *y)
{
    s_gemm_job_t job = {.x = x,
                        .rows = rows,
                        .n_rows = n_rows,
                        .in_dim = in_dim,
                        .w = w,
                        .out_dim = out_dim,
                        .y = y};
    if (n_rows <= 0 || out_dim <= 0)
        return;
    /* small products are not worth waking the workers; the result is the same either way */
    if ((int64_t)n_rows * out_dim * in_dim < (1 << 16))
        s_gemm_part(&job, 0, 1);
    else
        pl_cpu_pool_run(pool, s_gemm_part, &job);
}

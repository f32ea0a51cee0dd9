/* bench_qdot: decode-shaped products (one activation row) on weights as stored, per weight type,
 * as weight bytes streamed per second beside the machine's best streaming read (AVX accumulators). */
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "common/util.h"
#include "model/wtype.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BYTES (768ull << 20) /* per matrix: well past the caches */
#define S_K 4096
#define S_REPS 5

typedef struct {
    const unsigned char *buf;
    size_t n;
    double sink[8];
} s_read_t;

/* Eight independent 256-bit accumulators: the read rate a kernel could at best stream at. */
__attribute__((target("avx2"))) static void s_read_part(const unsigned char *p, size_t n,
                                                        double *sink)
{
    __m256d a[8];
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_pd();
    for (size_t i = 0; i + 256 <= n; i += 256)
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_add_pd(a[j], _mm256_loadu_pd((const double *)(const void *)(p + i + 32 * j)));
    for (int j = 0; j < 8; j++)
        sink[j] += _mm256_cvtsd_f64(a[j]);
}

static void s_read_fn(void *arg, int i, int n)
{
    s_read_t *r = arg;
    size_t lo = r->n / (size_t)n * (size_t)i, hi = i == n - 1 ? r->n : r->n / (size_t)n * (size_t)(i + 1);
    double sink[8] = {0};
    s_read_part(r->buf + lo, hi - lo, sink);
    if (i == 0)
        memcpy(r->sink, sink, sizeof(sink));
}

int main(void)
{
    static const pl_wtype_t types[] = {PL_WT_F32, PL_WT_BF16, PL_WT_F16, PL_WT_Q8_0,
                                       PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};
    unsigned char *buf = malloc(S_BYTES);
    float *x = malloc(S_K * sizeof(float)), *row = malloc(S_K * sizeof(float));
    float *y = malloc(((S_BYTES / (S_K / 8)) + 1) * sizeof(float));

    if (!buf || !x || !row || !y)
        return 1;
    memset(buf, 1, S_BYTES);
    for (int i = 0; i < S_K; i++)
        x[i] = pl_rand_uniform(1, (uint64_t)i) - 0.5f;
    printf("bench_qdot: k = %d, %llu MiB of weights per type, best of %d; machine shared with "
           "other builds: figures are noisy\nkernels: %s\n\n", S_K,
           (unsigned long long)(S_BYTES >> 20), S_REPS, pl_cpu_isa_name(pl_cpu_isa()));
    printf("each product's rate is paired with a streaming read (8 AVX2 accumulators) timed in the\n"
           "same rounds, so that both see the same load from the rest of the machine\n\n");
    printf("%-6s %10s %11s %10s %8s %11s %10s %8s\n", "type", "rows", "1 thr GB/s", "read GB/s",
           "ratio", "2 thr GB/s", "read GB/s", "ratio");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        size_t rb;
        if (pl_wtype_row_bytes(types[t], S_K, &rb))
            return 1;
        int rows = (int)(S_BYTES / rb);
        for (int i = 0; i < S_K; i++)
            row[i] = pl_rand_uniform(2 + t, (uint64_t)i) - 0.5f;
        pl_wtype_from_f32(types[t], row, S_K, buf);
        for (int r = 1; r < rows; r++) /* the values do not matter to the speed */
            memcpy(buf + (size_t)r * rb, buf, rb);
        pl_cpu_wmat_t m = {.type = types[t], .rows = rows, .cols = S_K, .row_bytes = rb,
                           .data = buf};
        double gbs[3], ref[3];
        for (int th = 1; th <= 2; th++) {
            pl_cpu_pool_t *pool = NULL;
            s_read_t rd = {.buf = buf, .n = (size_t)rows * rb};
            int zero = 0;
            double best = 1e30, best_rd = 1e30;
            if (pl_cpu_pool_create(th, &pool))
                return 1;
            for (int rep = 0; rep < S_REPS + 1; rep++) { /* round 0 untimed: wake-up */
                double t0 = pl_now();
                pl_cpu_gemm_rows(pool, x, &zero, 1, &m, y);
                double t1 = pl_now();
                pl_cpu_pool_run(pool, s_read_fn, &rd);
                if (rep) {
                    best = PL_MIN(best, t1 - t0);
                    best_rd = PL_MIN(best_rd, pl_now() - t1);
                }
            }
            gbs[th] = (double)rows * rb / best / 1e9;
            ref[th] = (double)rows * rb / best_rd / 1e9;
            pl_cpu_pool_destroy(&pool);
        }
        printf("%-6s %10d %11.1f %10.1f %7.0f%% %11.1f %10.1f %7.0f%%\n", pl_wtype_name(types[t]),
               rows, gbs[1], ref[1], 100 * gbs[1] / ref[1], gbs[2], ref[2],
               100 * gbs[2] / ref[2]);
        fflush(stdout);
    }
    free(buf);
    free(x);
    free(row);
    free(y);
    return 0;
}

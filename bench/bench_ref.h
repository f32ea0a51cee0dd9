/* The machine's own references for bench_decode: streaming read bandwidth (a plain sum and
 * several-accumulator AVX2 / AVX-512 reads, 1..N threads), sgemm time, and CPU-time accounting,
 * so every figure prints beside what this machine can do at best. */
#ifndef PL_BENCH_BENCH_REF_H
#define PL_BENCH_BENCH_REF_H

#include "common/util.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define S_MAX_THREADS 64
/* Untimed runs first: OpenBLAS's threads, and a second core woken from idle, can run at half
 * speed for the first few tenths of a second. */
#define S_WARM_S 0.5

typedef enum {
    S_READ_PLAIN,
    S_READ_AVX2,
    S_READ_AVX512,
    S_READ_AVX2_8S,
    S_READ_AVX512_8S,
    S_READ_COUNT
} s_read_kind_t;
static const char *const s_read_names[S_READ_COUNT] = {
    "plain sum (compiler-vectorised)", "AVX2, 8 accumulators, 256 B per step",
    "AVX-512, 8 accumulators, 512 B per step", "AVX2, 8 streams side by side (an eighth each)",
    "AVX-512, 8 streams side by side (an eighth each)"};

typedef struct {
    const uint64_t *src;
    size_t n; /* words */
    uint64_t sum;
    s_read_kind_t kind;
} s_mem_job_t;

static uint64_t s_sum_plain(const uint64_t *p, size_t n)
{
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += p[i + j];
    for (; i < n; i++)
        a[0] += p[i];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

#if defined(__x86_64__)
/* Eight independent accumulators, so the loads, not an add chain, set the pace. */
__attribute__((target("avx2"))) static uint64_t s_sum_avx2(const uint64_t *p, size_t n)
{
    __m256i a[8];
    size_t i = 0;
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_si256();
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_add_epi64(a[j], _mm256_loadu_si256((const __m256i *)(p + i + 4 * j)));
    for (int j = 1; j < 8; j++)
        a[0] = _mm256_add_epi64(a[0], a[j]);
    uint64_t s[4];
    _mm256_storeu_si256((__m256i *)s, a[0]);
    for (; i < n; i++)
        s[0] += p[i];
    return s[0] + s[1] + s[2] + s[3];
}

__attribute__((target("avx512f"))) static uint64_t s_sum_avx512(const uint64_t *p, size_t n)
{
    __m512i a[8];
    size_t i = 0;
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_si512();
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_add_epi64(a[j], _mm512_loadu_si512((const void *)(p + i + 8 * j)));
    for (int j = 1; j < 8; j++)
        a[0] = _mm512_add_epi64(a[0], a[j]);
    uint64_t s = _mm512_reduce_add_epi64(a[0]);
    for (; i < n; i++)
        s += p[i];
    return s;
}
#endif

/* Eight streams at once, one accumulator each: the access pattern of a GEMM tile that reads
 * several weight rows side by side; on some machines it draws more bandwidth than one. */
__attribute__((target("avx2"))) static uint64_t s_sum_avx2_8s(const uint64_t *p, size_t n)
{
    __m256i a[8];
    size_t part = n / 8 / 4 * 4, i;
    uint64_t s[4], t = 0;
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_si256();
    for (i = 0; i < part; i += 4)
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_add_epi64(a[j], _mm256_loadu_si256((const __m256i *)(p + j * part + i)));
    for (int j = 1; j < 8; j++)
        a[0] = _mm256_add_epi64(a[0], a[j]);
    _mm256_storeu_si256((__m256i *)s, a[0]);
    for (i = 8 * part; i < n; i++)
        t += p[i];
    return s[0] + s[1] + s[2] + s[3] + t;
}

__attribute__((target("avx512f"))) static uint64_t s_sum_avx512_8s(const uint64_t *p, size_t n)
{
    __m512i a[8];
    size_t part = n / 8 / 8 * 8, i;
    uint64_t t = 0;
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_si512();
    for (i = 0; i < part; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_add_epi64(a[j], _mm512_loadu_si512((const void *)(p + j * part + i)));
    for (int j = 1; j < 8; j++)
        a[0] = _mm512_add_epi64(a[0], a[j]);
    for (i = 8 * part; i < n; i++)
        t += p[i];
    return _mm512_reduce_add_epi64(a[0]) + t;
}

/* Whether this machine runs read kind k. */
static bool s_read_supported(s_read_kind_t k)
{
#if defined(__x86_64__)
    if (k == S_READ_AVX2 || k == S_READ_AVX2_8S)
        return __builtin_cpu_supports("avx2");
    if (k == S_READ_AVX512 || k == S_READ_AVX512_8S)
        return __builtin_cpu_supports("avx512f");
#endif
    return k == S_READ_PLAIN;
}

static void *s_read_thread(void *arg)
{
    s_mem_job_t *j = arg;
#if defined(__x86_64__)
    if (j->kind == S_READ_AVX2) {
        j->sum = s_sum_avx2(j->src, j->n);
        return NULL;
    }
    if (j->kind == S_READ_AVX512) {
        j->sum = s_sum_avx512(j->src, j->n);
        return NULL;
    }
    if (j->kind == S_READ_AVX2_8S) {
        j->sum = s_sum_avx2_8s(j->src, j->n);
        return NULL;
    }
    if (j->kind == S_READ_AVX512_8S) {
        j->sum = s_sum_avx512_8s(j->src, j->n);
        return NULL;
    }
#endif
    j->sum = s_sum_plain(j->src, j->n);
    return NULL;
}

/* Best seconds over reps of reading n words split evenly over `threads` threads, after warm_s
 * seconds of untimed runs. */
static double s_read_time(s_read_kind_t kind, const uint64_t *src, size_t n, int threads, int reps,
                          double warm_s)
{
    s_mem_job_t jobs[S_MAX_THREADS];
    pthread_t tids[S_MAX_THREADS];
    bool started[S_MAX_THREADS];
    volatile uint64_t sink = 0;
    double best = 1e30, start = pl_now();

    for (int timed = 0; timed < reps;) {
        double t0 = pl_now();
        for (int i = 0; i < threads; i++) {
            size_t lo = n / threads * i, hi = i == threads - 1 ? n : n / threads * (i + 1);
            jobs[i] = (s_mem_job_t){.src = src + lo, .n = hi - lo, .kind = kind};
            started[i] = i > 0 && pthread_create(&tids[i], NULL, s_read_thread, &jobs[i]) == 0;
        }
        for (int i = 0; i < threads; i++) /* job 0, and any whose thread did not start */
            if (!started[i])
                s_read_thread(&jobs[i]);
        for (int i = 1; i < threads; i++)
            if (started[i])
                pthread_join(tids[i], NULL);
        double t = pl_now() - t0;
        for (int i = 0; i < threads; i++)
            sink += jobs[i].sum;
        if (t0 - start >= warm_s && ++timed)
            best = PL_MIN(best, t);
    }
    (void)sink;
    return best;
}

/* Bytes of the last-level cache (0 when unknown). */
static size_t s_llc_bytes(void)
{
    char path[96], buf[64];
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(buf, sizeof(buf), f)) {
            char *end;
            size_t v = strtoull(buf, &end, 10);
            v *= *end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : 1;
            best = PL_MAX(best, v);
        }
        fclose(f);
    }
    return best;
}

/* Seconds of one cblas_sgemm y[m][n] = x[m][k] @ w[n][k]^T (the backend's layout), best of reps. */
static double s_sgemm_time(int m, int n, int k, int reps)
{
    float *x = malloc((size_t)m * k * sizeof(float)), *w = malloc((size_t)n * k * sizeof(float));
    float *y = malloc((size_t)m * n * sizeof(float));
    double best = -1.0;

    if (x && w && y) {
        for (size_t i = 0; i < (size_t)m * k; i++)
            x[i] = pl_rand_uniform(1, i) - 0.5f;
        for (size_t i = 0; i < (size_t)n * k; i++)
            w[i] = pl_rand_uniform(2, i) - 0.5f;
        double start = pl_now();
        best = 1e30;
        for (int timed = 0; timed < reps;) {
            double t0 = pl_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y,
                        n);
            double t = pl_now() - t0;
            if (t0 - start >= S_WARM_S && ++timed)
                best = PL_MIN(best, t);
        }
    }
    free(x);
    free(w);
    free(y);
    return best;
}

/* Seconds of CPU time the whole machine spent busy (/proc/stat) and this process used. */
static void s_cpu_times(double *machine_p, double *self_p)
{
    unsigned long long v[8] = {0};
    struct rusage ru;
    FILE *f = fopen("/proc/stat", "r");
    if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7]) != 8)
        memset(v, 0, sizeof(v));
    if (f)
        fclose(f);
    *machine_p = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / sysconf(_SC_CLK_TCK);
    getrusage(RUSAGE_SELF, &ru);
    *self_p = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
              ru.ru_stime.tv_usec * 1e-6;
}

/* CPU seconds the process has used (every thread, spinning included). */
static double s_proc_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A read reference kept for timing beside a measurement, in the same rounds: a buffer far past
 * the caches and, per thread count, the read kind that was best on it. */
#define S_REF_TLIST 4
typedef struct {
    uint64_t *src;
    size_t bytes;
    s_read_kind_t kind[S_REF_TLIST];
} s_ref_t;

/* One read of the whole reference buffer on `threads` threads with kind: wall seconds, and CPU
 * seconds per thread. */
static void s_ref_once(const s_ref_t *r, s_read_kind_t kind, int threads, double *wall_p,
                       double *cpu_p)
{
    double c0 = s_proc_cpu_now();
    *wall_p = s_read_time(kind, r->src, r->bytes / 8, threads, 1, 0);
    *cpu_p = (s_proc_cpu_now() - c0) / threads;
}

#endif

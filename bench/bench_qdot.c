/* bench_qdot: decode-shaped products (one activation row, or --batch B rows: batched decode) on
 * weights as stored, per weight type, as weight bytes streamed per second beside the machine's
 * best streaming read, in wall and CPU time; the weights in huge pages, as a stage holds them. */
/* the references this file does not use (sgemm, CPU accounting) are static in the header */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "bench/bench_ref.h"

#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_wcopy.h"
#include "common/util.h"
#include "model/wtype.h"

#include <getopt.h>
#include <time.h>

#define S_BYTES (768ull << 20)  /* per matrix: well past a 300 MB last-level cache */
#define S_L2_BYTES (1ull << 20) /* --cached: a matrix that stays in a 2 MB L2 */
#define S_K 4096

typedef struct {
    const uint64_t *buf;
    size_t words;
    uint64_t sink;
    s_read_kind_t kind;
} s_read_t;

/* One thread's share of the best read kind (the caller times the pool run). */
static void s_read_fn(void *arg, int i, int n)
{
    s_read_t *r = arg;
    size_t lo = r->words / (size_t)n * (size_t)i;
    size_t hi = i == n - 1 ? r->words : r->words / (size_t)n * (size_t)(i + 1);
    s_mem_job_t j = {.src = r->buf + lo, .n = hi - lo, .kind = r->kind};
    s_read_thread(&j);
    __atomic_fetch_add(&r->sink, j.sum, __ATOMIC_RELAXED);
}

/* CPU seconds the process has used: under load, the time the scheduler gave to others is left
 * out, which wall time cannot do. Divided by the thread count it is a per-thread rate. */
#define s_cpu_now s_proc_cpu_now

typedef struct {
    double wall, cpu; /* best seconds of each, over the reps */
} s_best_t;

static void s_keep(s_best_t *b, double wall, double cpu)
{
    b->wall = PL_MIN(b->wall, wall);
    b->cpu = PL_MIN(b->cpu, cpu);
}

static int s_usage(FILE *f, int rc)
{
    fprintf(f,
            "usage: bench_qdot [--isa scalar|avx2|avx512] [--types q4_k,q8_0,...] "
            "[--threads 1,2] [--reps N] [--cached] [--batch B]\n"
            "  --cached  a 1 MiB matrix called over and over: the kernel's compute rate, which\n"
            "            must sit well above the read reference for decode to be memory-bound\n"
            "  --batch B B activation rows per product (1..64): batched decode, which should\n"
            "            still stream the weights at about the batch-1 rate\n");
    return rc;
}

int main(int argc, char **argv)
{
    /* on OpenBLAS's tuned kernels, as pipeld computes (it restarts this program when needed) */
    pl_cpu_blas_core_fix(argv);
    static const struct option opts[] = {{"isa", required_argument, NULL, 'i'},
                                         {"types", required_argument, NULL, 't'},
                                         {"threads", required_argument, NULL, 'n'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"cached", no_argument, NULL, 'c'},
                                         {"batch", required_argument, NULL, 'b'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    pl_wtype_t types[PL_WT_COUNT] = {PL_WT_F32,  PL_WT_BF16, PL_WT_F16,  PL_WT_Q8_0,
                                     PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};
    int n_types = 8, threads[4] = {1, 2}, n_thr = 2, reps = 5, batch = 1, c;
    bool cached = false;
    char buf[128], *save, *tok;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': {
            int isa = 0;
            while (isa < PL_CPU_ISA_COUNT && strcmp(optarg, pl_cpu_isa_name((pl_cpu_isa_t)isa)))
                isa++;
            if (isa == PL_CPU_ISA_COUNT)
                return s_usage(stderr, 2);
            pl_cpu_isa_cap((pl_cpu_isa_t)isa);
            break;
        }
        case 't':
            snprintf(buf, sizeof(buf), "%s", optarg);
            n_types = 0;
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (n_types == PL_WT_COUNT || pl_wtype_parse(tok, &types[n_types]) != PL_OK)
                    return s_usage(stderr, 2);
                n_types++;
            }
            break;
        case 'n':
            snprintf(buf, sizeof(buf), "%s", optarg);
            n_thr = 0;
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (n_thr == 4 || atoi(tok) < 1 || atoi(tok) > S_MAX_THREADS)
                    return s_usage(stderr, 2);
                threads[n_thr++] = atoi(tok);
            }
            break;
        case 'r':
            reps = PL_MAX(1, atoi(optarg));
            break;
        case 'c':
            cached = true;
            break;
        case 'b':
            batch = atoi(optarg);
            if (batch < 1 || batch > 64)
                return s_usage(stderr, 2);
            break;
        case 'h':
            return s_usage(stdout, 0);
        default:
            return s_usage(stderr, 2);
        }
    }
    size_t bytes = cached ? S_L2_BYTES : S_BYTES, ref_bytes = PL_MAX(S_BYTES, 4 * s_llc_bytes());
    unsigned char *w = malloc(bytes);
    uint64_t *rbuf = malloc(ref_bytes);
    float *x = malloc((size_t)batch * S_K * sizeof(float)), *row = malloc(S_K * sizeof(float));
    float *y = malloc((size_t)batch * ((bytes / (S_K / 8)) + 1) * sizeof(float));
    int brows[64];
    double load[3] = {0};
    s_read_kind_t kind = S_READ_PLAIN;

    if (!w || !rbuf || !x || !row || !y)
        return 1;
    for (size_t i = 0; i < ref_bytes / 8; i++)
        rbuf[i] = i;
    for (int i = 0; i < batch * S_K; i++)
        x[i] = pl_rand_uniform(1, (uint64_t)i) - 0.5f;
    for (int i = 0; i < batch; i++)
        brows[i] = i;
    /* the reference: the read kind that is fastest here on one thread (several streams side by
     * side beat one stream on some machines) */
    double best_kind = 0;
    for (int k = 0; k < S_READ_COUNT; k++)
        if (s_read_supported((s_read_kind_t)k)) {
            double g = (double)ref_bytes / s_read_time((s_read_kind_t)k, rbuf, ref_bytes / 8, 1, 3,
                                                       S_WARM_S);
            if (g > best_kind) {
                best_kind = g;
                kind = (s_read_kind_t)k;
            }
        }
    getloadavg(load, 3);
    printf("bench_qdot: k = %d, %d activation row(s), %llu KiB of weights per type%s, best of %d; "
           "kernels: %s; load average %.2f %.2f %.2f\n",
           S_K, batch, (unsigned long long)(bytes >> 10),
           cached ? " (L2-resident, called 64 times per rep)" : "", reps,
           pl_cpu_isa_name(pl_cpu_isa()), load[0], load[1], load[2]);
    printf("reference: %s over %zu MB, timed in the same rounds as each product; wall and CPU "
           "time (process CPU seconds / threads), best of each\n\n",
           s_read_names[kind], ref_bytes >> 20);
    printf("| type | threads | kernel GB/s wall | read GB/s wall | ratio | kernel GB/s CPU | read "
           "GB/s CPU | ratio |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int t = 0; t < n_types; t++) {
        size_t rb;
        if (pl_wtype_row_bytes(types[t], S_K, &rb))
            return 1;
        int rows = (int)(bytes / rb), calls = cached ? 64 : 1;
        for (int i = 0; i < S_K; i++)
            row[i] = pl_rand_uniform(2 + (uint64_t)t, (uint64_t)i) - 0.5f;
        pl_wtype_from_f32(types[t], row, S_K, w);
        for (int r = 1; r < rows; r++) /* the values do not matter to the speed */
            memcpy(w + (size_t)r * rb, w, rb);
        pl_cpu_wmat_t m = {.type = types[t], .rows = rows, .cols = S_K, .row_bytes = rb, .data = w};
        pl_cpu_wmat_t *mp = &m;
        pl_cpu_wcopy_t copy = {0};
        /* huge pages, packed where a stage packs, as a stage holds its weights */
        if (pl_cpu_wcopy_make(&mp, 1, pl_cpu_wcopy_pack_wanted(), &copy))
            return 1;
        for (int th = 0; th < n_thr; th++) {
            pl_cpu_pool_t *pool = NULL;
            s_read_t rd = {.buf = rbuf, .words = ref_bytes / 8, .kind = kind};
            s_best_t kb = {1e30, 1e30}, rdb = {1e30, 1e30};
            if (pl_cpu_pool_create(threads[th], &pool))
                return 1;
            for (int rep = 0; rep < reps + 1; rep++) { /* round 0 untimed: wake-up */
                double t0 = pl_now(), c0 = s_cpu_now();
                for (int k = 0; k < calls; k++)
                    pl_cpu_gemm_rows(pool, x, brows, batch, &m, y);
                double t1 = pl_now(), c1 = s_cpu_now();
                pl_cpu_pool_run(pool, s_read_fn, &rd);
                double t2 = pl_now(), c2 = s_cpu_now();
                if (rep) {
                    s_keep(&kb, t1 - t0, (c1 - c0) / threads[th]);
                    s_keep(&rdb, t2 - t1, (c2 - c1) / threads[th]);
                }
            }
            double kbytes = (double)rows * rb * calls, rbytes = (double)ref_bytes;
            printf("| %s | %d | %.1f | %.1f | %.0f%% | %.1f | %.1f | %.0f%% |\n",
                   pl_wtype_name(types[t]), threads[th], kbytes / kb.wall / 1e9,
                   rbytes / rdb.wall / 1e9, 100 * (kbytes / kb.wall) / (rbytes / rdb.wall),
                   kbytes / kb.cpu / 1e9, rbytes / rdb.cpu / 1e9,
                   100 * (kbytes / kb.cpu) / (rbytes / rdb.cpu));
            fflush(stdout);
            pl_cpu_pool_destroy(&pool);
        }
        pl_cpu_wcopy_free(&copy);
    }
    getloadavg(load, 3);
    printf("\nload average after: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    free(w);
    free(rbuf);
    free(x);
    free(row);
    free(y);
    return 0;
}

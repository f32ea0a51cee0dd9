/* Prefill products on packed weights (cpu_pack.h) beside today's path and the machine's own
 * reference, 1 thread: GFLOP/s of one sequence's product y[n][rows] = x[n][cols] @ w^T through
 * pl_cpu_gemm_seq on bf16 weights packed at load (AVX-512 and the forced AVX2 path), through
 * pl_cpu_gemm_seq on bf16 as stored (tiles converted to f32, then OpenBLAS sgemm, as before
 * packing), and plain OpenBLAS sgemm on f32 weights (no conversion: the reference), on the
 * shapes of bench_pipeline's model (hidden 1024, intermediate 2816). Thread CPU time. */
/* the references this file does not use (bandwidth, CPU accounting) are static in the header */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "bench/bench_ref.h"

#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_pack.h"

#include <stdlib.h>

/* This thread's CPU seconds (1 thread, OpenBLAS's too: a loaded machine's waits left out). */
static double s_thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best CPU seconds of one product over reps after a warm-up: pl_cpu_gemm_seq(x[n], w), or
 * (f32w) plain sgemm against f32 weights f32w. */
static double s_time(const float *x, int n, const pl_cpu_wmat_t *w, const float *f32w, float *tile,
                     float *y, int reps)
{
    double best = 1e30, start = s_thread_s();
    for (int timed = 0; timed < reps;) {
        double t0 = s_thread_s();
        if (f32w)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w->rows, w->cols, 1.0f, x,
                        w->cols, f32w, w->cols, 0.0f, y, w->rows);
        else
            pl_cpu_gemm_seq(NULL, x, n, w, tile, y);
        double t = s_thread_s() - t0;
        if (t0 - start >= 0.1 && ++timed)
            best = PL_MIN(best, t);
    }
    return best;
}

int main(int argc, char **argv)
{
    static const int shapes[][2] = {{1024, 1024}, {2816, 1024}, {1024, 2816}}; /* rows, cols */
    static const int tokens[] = {64, 128, 256, 1024};
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    double load[3] = {0};

    pl_cpu_blas_core_fix(argv);
    openblas_set_num_threads(1);
    printf("OpenBLAS core %s, kernels %s, 1 thread, thread CPU time, best of %d\n\n",
           openblas_get_corename(), pl_cpu_isa_name(pl_cpu_isa()), reps);
    printf("| rows x cols | tokens | packed bf16 GFLOP/s | packed, AVX2 forced | bf16 as stored "
           "(tiles + sgemm) | sgemm on f32 (reference) | packed / sgemm | packed / as stored |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < PL_ARRAY_SIZE(shapes); s++) {
        int rows = shapes[s][0], cols = shapes[s][1], nmax = tokens[PL_ARRAY_SIZE(tokens) - 1];
        uint16_t *wb = malloc((size_t)rows * cols * 2);
        float *x = malloc((size_t)nmax * cols * 4), *y = malloc((size_t)nmax * rows * 4);
        float *tile = malloc((size_t)PL_CPU_TILE_ROWS * cols * 4);
        float *f32w = malloc((size_t)rows * cols * 4);
        pl_cpu_wmat_t plain = {.type = PL_WT_BF16,
                               .rows = rows,
                               .cols = cols,
                               .row_bytes = (size_t)cols * 2,
                               .data = wb};
        void *pb = wb ? malloc(pl_cpu_pack_bytes(&plain)) : NULL;
        if (!wb || !x || !y || !tile || !pb || !f32w)
            return 1;
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            wb[i] = pl_f32_to_bf16(pl_rand_uniform(4, i) - 0.5f);
        for (size_t i = 0; i < (size_t)nmax * cols; i++)
            x[i] = pl_rand_uniform(5, i) - 0.5f;
        for (int r = 0; r < rows; r++)
            pl_cpu_wmat_row_f32(&plain, r, f32w + (size_t)r * cols);
        pl_cpu_pack(&plain, pb);
        pl_cpu_wmat_t packed = plain;
        packed.data = pb;
        packed.packed = true;
        for (size_t t = 0; t < PL_ARRAY_SIZE(tokens); t++) {
            int n = tokens[t];
            double fl = 2.0 * n * rows * (double)cols / 1e9;
            double tp = s_time(x, n, &packed, NULL, tile, y, reps);
            pl_cpu_isa_cap(PL_CPU_ISA_AVX2);
            double t2 = s_time(x, n, &packed, NULL, tile, y, PL_MAX(1, reps / 2));
            pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
            pl_cpu_gemm_seq_force(1);
            double tb = s_time(x, n, &plain, NULL, tile, y, reps);
            pl_cpu_gemm_seq_force(-1);
            double ts = s_time(x, n, &plain, f32w, tile, y, reps);
            printf("| %d x %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", rows, cols, n,
                   fl / tp, fl / t2, fl / tb, fl / ts, ts / tp, tb / tp);
            fflush(stdout);
        }
        free(wb), free(x), free(y), free(tile), free(pb), free(f32w);
    }
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("\nload average %.2f at the end (figures measured under load when it is well above 1)\n",
           load[0]);
    return 0;
}

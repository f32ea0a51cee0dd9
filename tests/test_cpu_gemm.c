/* Tests of the typed-weight GEMMs: f32, f16 and bf16 weights as stored, on every instruction set
 * this machine has, against a double-precision reference; bitwise agreement between instruction
 * sets, batch compositions, thread counts and a half-precision matrix's f32 widening. */
#include "backends/cpu/cpu_gemm.h"
#include "tests/cpu_mat_util.h"

#include "common/util.h"

#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pl_wtype_t k_types[] = {PL_WT_F32, PL_WT_F16, PL_WT_BF16};

/* Each type on each instruction set is within 1e-6 (relative to sum |x w|) of the reference, and
 * bitwise equal to the scalar path and to the f32 kernel on the widened matrix. */
Test(cpu_gemm, rows_match_reference_and_agree_across_isas)
{
    int shapes[][3] = {{1, 7, 5}, {3, 64, 48}, {9, 40, 129}, {6, 1000, 67}, {70, 300, 70}};
    pl_cpu_isa_t top = pl_cpu_isa();
    pl_cpu_pool_t *pool = NULL;
    cr_assert(pl_cpu_pool_create(2, &pool) == PL_OK);
    cr_log_info("instruction set: %s", pl_cpu_isa_name(top));
    for (size_t s = 0; s < PL_ARRAY_SIZE(shapes); s++) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
        int *rows = xalloc((size_t)m * sizeof(int));
        float *x = xalloc((size_t)m * k * sizeof(float));
        float *y = xalloc((size_t)m * n * sizeof(float)), *y0 = xalloc((size_t)m * n * 4);
        float *yw = xalloc((size_t)m * n * sizeof(float));
        fill(x, (size_t)m * k, 1 + (unsigned)s);
        for (int i = 0; i < m; i++)
            rows[i] = m - 1 - i;
        for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++) {
            tmat_t t;
            tmat_make(&t, k_types[ti], n, k, 2 + s % 3, 100 + (unsigned)s);
            pl_cpu_wmat_t wide = {.type = PL_WT_F32,
                                  .rows = n,
                                  .cols = k,
                                  .row_bytes = (size_t)k * 4,
                                  .data = t.wide};
            for (int isa = 0; isa <= (int)top; isa++) {
                pl_cpu_isa_cap((pl_cpu_isa_t)isa);
                pl_cpu_gemm_rows(pool, x, rows, m, &t.m, y);
                if (isa == 0)
                    memcpy(y0, y, (size_t)m * n * sizeof(float));
                cr_assert(memcmp(y, y0, (size_t)m * n * sizeof(float)) == 0,
                          "%s on %s differs from the scalar path (shape %d)",
                          pl_wtype_name(k_types[ti]), pl_cpu_isa_name((pl_cpu_isa_t)isa), (int)s);
                pl_cpu_gemm_rows(pool, x, rows, m, &wide, yw);
                cr_assert(memcmp(y, yw, (size_t)m * n * sizeof(float)) == 0,
                          "%s differs from its f32 widening on %s", pl_wtype_name(k_types[ti]),
                          pl_cpu_isa_name((pl_cpu_isa_t)isa));
            }
            pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double ref = 0, mag = 0;
                    for (int p = 0; p < k; p++) {
                        ref += (double)x[i * k + p] * t.wide[(size_t)j * k + p];
                        mag += fabs((double)x[i * k + p] * t.wide[(size_t)j * k + p]);
                    }
                    cr_expect(fabs(y[i * n + j] - ref) <= 1e-6 * mag + 1e-7,
                              "%s y[%d][%d] = %.9g want %.9g", pl_wtype_name(k_types[ti]), i, j,
                              y[i * n + j], ref);
                }
            tmat_free(&t);
        }
        free(rows), free(x), free(y), free(y0), free(yw);
    }
    pl_cpu_pool_destroy(&pool);
}

/* A row's result is bitwise the same alone or among others, in any order, on 1-3 threads. */
Test(cpu_gemm, rows_batch_invariant_for_every_type)
{
    int k = 1100, n = 301, max_m = 23, rows[23];
    float *x = xalloc((size_t)max_m * k * 4), *alone = xalloc((size_t)max_m * n * 4);
    float *y = xalloc((size_t)max_m * n * 4);
    pl_cpu_pool_t *pools[3] = {NULL, NULL, NULL};
    cr_assert(pl_cpu_pool_create(2, &pools[1]) == PL_OK);
    cr_assert(pl_cpu_pool_create(3, &pools[2]) == PL_OK);
    fill(x, (size_t)max_m * k, 7);
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++) {
        tmat_t t;
        tmat_make(&t, k_types[ti], n, k, 0, 8);
        for (int i = 0; i < max_m; i++) {
            rows[0] = i;
            pl_cpu_gemm_rows(NULL, x, rows, 1, &t.m, alone);
        }
        for (int p = 0; p < 3; p++)
            for (int m = 2; m <= max_m; m += 3) {
                for (int i = 0; i < m; i++)
                    rows[i] = (i * 5 + p) % max_m;
                pl_cpu_gemm_rows(pools[p], x, rows, m, &t.m, y);
                for (int i = 0; i < m; i++)
                    cr_assert(memcmp(y + (size_t)rows[i] * n, alone + (size_t)rows[i] * n,
                                     (size_t)n * 4) == 0,
                              "%s: row %d differs among %d rows on %d threads",
                              pl_wtype_name(k_types[ti]), rows[i], m, p + 1);
            }
        tmat_free(&t);
    }
    pl_cpu_pool_destroy(&pools[1]);
    pl_cpu_pool_destroy(&pools[2]);
    free(x), free(alone), free(y);
}

/* Whole sequences through OpenBLAS on converted tiles (more weight rows than one tile) and
 * through the batch-invariant kernel, the choice on machines where OpenBLAS runs generic code. */
Test(cpu_gemm, seq_matches_reference)
{
    cr_log_info("OpenBLAS core %s: long sequences through %s", openblas_get_corename(),
                pl_cpu_gemm_seq_uses_blas() ? "OpenBLAS" : "the batch-invariant kernel");
    for (int blas = 0; blas <= 1; blas++) {
        pl_cpu_gemm_seq_force(blas);
        int m = 40, k = 72, n = PL_CPU_TILE_ROWS + 37;
        float *x = xalloc((size_t)m * k * 4), *y = xalloc((size_t)m * n * 4);
        float *tile = xalloc((size_t)PL_CPU_TILE_ROWS * k * 4);
        fill(x, (size_t)m * k, 3);
        for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++)
            for (size_t mis = 0; mis <= 2; mis += 2) { /* misaligned f32 goes through tiles too */
                tmat_t t;
                tmat_make(&t, k_types[ti], n, k, mis, 4);
                pl_cpu_gemm_seq(NULL, x, m, &t.m, tile, y);
                if (!blas) { /* then a sequence's rows are the rows product's, bitwise */
                    float *y2 = xalloc((size_t)m * n * 4);
                    int *rows = xalloc((size_t)m * sizeof(int));
                    for (int i = 0; i < m; i++)
                        rows[i] = i;
                    pl_cpu_gemm_rows(NULL, x, rows, m, &t.m, y2);
                    cr_expect(memcmp(y, y2, (size_t)m * n * 4) == 0, "%s", pl_wtype_name(t.m.type));
                    free(y2), free(rows);
                }
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double ref = 0, mag = 0;
                        for (int p = 0; p < k; p++) {
                            ref += (double)x[i * k + p] * t.wide[(size_t)j * k + p];
                            mag += fabs((double)x[i * k + p] * t.wide[(size_t)j * k + p]);
                        }
                        cr_expect(fabs(y[i * n + j] - ref) <= 1e-6 * mag + 1e-7,
                                  "%s seq y[%d][%d] = %.9g want %.9g", pl_wtype_name(k_types[ti]),
                                  i, j, y[i * n + j], ref);
                    }
                tmat_free(&t);
            }
        free(x), free(y), free(tile);
    }
    pl_cpu_gemm_seq_force(-1);
}

/* A long sequence's OpenBLAS product on a 2-thread pool: bitwise what one thread gives (the
 * tiles are single-threaded sgemm calls of the same shapes whoever runs them), for weights read
 * in place and converted alike; OpenBLAS on one thread, as a stage sets it. */
Test(cpu_gemm, seq_threads_agree_bitwise)
{
    int m = 300, k = 96, n = 3 * PL_CPU_TILE_ROWS + 37;
    pl_cpu_pool_t *pool = NULL;
    float *x = xalloc((size_t)m * k * 4), *y1 = xalloc((size_t)m * n * 4);
    float *y2 = xalloc((size_t)m * n * 4), *tile = xalloc((size_t)2 * PL_CPU_TILE_ROWS * k * 4);
    cr_assert_eq(pl_cpu_pool_create(2, &pool), PL_OK);
    pl_cpu_gemm_seq_force(1);
    fill(x, (size_t)m * k, 7);
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++) {
        tmat_t t;
        tmat_make(&t, k_types[ti], n, k, 0, 9);
        openblas_set_num_threads(1);
        pl_cpu_gemm_seq(NULL, x, m, &t.m, tile, y1);
        pl_cpu_gemm_seq(pool, x, m, &t.m, tile, y2);
        cr_expect(memcmp(y1, y2, (size_t)m * n * 4) == 0, "%s: 2 threads differ from 1",
                  pl_wtype_name(k_types[ti]));
        tmat_free(&t);
    }
    pl_cpu_gemm_seq_force(-1);
    pl_cpu_pool_destroy(&pool);
    free(x), free(y1), free(y2), free(tile);
}

/* Half-precision rows to f32 on every instruction set equal the scalar conversion. */
Test(cpu_gemm, row_conversion_exact)
{
    tmat_t t;
    float *r = xalloc(77 * 4);
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++) {
        tmat_make(&t, k_types[ti], 3, 77, 1, 9);
        for (int row = 0; row < 3; row++) {
            pl_cpu_wmat_row_f32(&t.m, row, r);
            cr_expect(memcmp(r, t.wide + row * 77, 77 * 4) == 0, "%s row %d",
                      pl_wtype_name(k_types[ti]), row);
        }
        tmat_free(&t);
    }
    free(r);
}

Test(cpu_gemm, view_checks)
{
    float data[12] = {0};
    pl_cpu_wmat_t m;
    pl_tensor_view_t v = {.dtype = PL_DT_F32,
                          .wtype = PL_WT_F32,
                          .ndim = 2,
                          .shape = {3, 4},
                          .numel = 12,
                          .data = data,
                          .nbytes = sizeof(data)};
    cr_expect(pl_cpu_wmat_from_view("w", &v, &m) == PL_OK);
    cr_expect(m.rows == 3 && m.cols == 4 && m.row_bytes == 16 && m.data == data);
    v.nbytes = 40;
    cr_expect(pl_cpu_wmat_from_view("w", &v, &m) == PL_ERR_INVALID);
    cr_expect(strstr(pl_error_msg(), "'w'") != NULL, "%s", pl_error_msg());
    v.nbytes = sizeof(data);
    v.ndim = 1;
    cr_expect(pl_cpu_wmat_from_view("w", &v, &m) == PL_ERR_INVALID);
    v.ndim = 2;
    v.wtype = PL_WT_COUNT;
    cr_expect(pl_cpu_wmat_from_view("w", &v, &m) == PL_ERR_UNSUPPORTED);
    cr_expect(strstr(pl_error_msg(), "no CPU kernel") != NULL, "%s", pl_error_msg());
}

/* Several matrices of one input in one job (q, k, v; gate, up): each output bitwise what
 * pl_cpu_gemm_rows gives that matrix alone, with types whose activations take different forms
 * (f32, Q8_0's blocks, the K-quants' super-blocks) side by side, more matrices than one job
 * holds, an empty one, and 1-3 threads. */
Test(cpu_gemm, rows_n_equal_one_matrix_at_a_time)
{
    enum { K = 512, M = 6, NW = 6 };
    const pl_wtype_t types[NW] = {PL_WT_Q4_K, PL_WT_Q6_K, PL_WT_F32, PL_WT_Q8_0, PL_WT_BF16,
                                  PL_WT_Q4_K};
    const int outs[NW] = {300, 40, 77, 0, 129, 1000};
    unsigned char *bufs[NW];
    pl_cpu_wmat_t mats[NW];
    const pl_cpu_wmat_t *wp[NW];
    float *y[NW], *alone[NW], *x = xalloc((size_t)M * K * 4), *src = xalloc((size_t)1000 * K * 4);
    int rows[M] = {5, 1, 3, 0, 4, 2};
    fill(x, (size_t)M * K, 21);
    for (int i = 0; i < NW; i++) {
        size_t rb;
        cr_assert_eq(pl_wtype_row_bytes(types[i], K, &rb), PL_OK);
        fill(src, (size_t)PL_MAX(outs[i], 1) * K, 30 + (unsigned)i);
        for (size_t e = 0; e < (size_t)outs[i] * K; e++)
            src[e] *= 0.1f;
        bufs[i] = xalloc(rb * (size_t)PL_MAX(outs[i], 1));
        pl_wtype_from_f32(types[i], src, (size_t)outs[i] * K, bufs[i]);
        mats[i] = (pl_cpu_wmat_t){
            .type = types[i], .rows = outs[i], .cols = K, .row_bytes = rb, .data = bufs[i]};
        wp[i] = &mats[i];
        y[i] = xalloc((size_t)M * PL_MAX(outs[i], 1) * 4);
        alone[i] = xalloc((size_t)M * PL_MAX(outs[i], 1) * 4);
        pl_cpu_gemm_rows(NULL, x, rows, M, &mats[i], alone[i]);
    }
    for (int threads = 1; threads <= 3; threads++) {
        pl_cpu_pool_t *pool = NULL;
        cr_assert(pl_cpu_pool_create(threads, &pool) == PL_OK);
        for (int i = 0; i < NW; i++)
            memset(y[i], 0xff, (size_t)M * PL_MAX(outs[i], 1) * 4);
        pl_cpu_gemm_rows_n(pool, x, rows, M, wp, y, NW);
        for (int i = 0; i < NW; i++)
            cr_assert(memcmp(y[i], alone[i], (size_t)M * outs[i] * 4) == 0,
                      "matrix %d (%s) on %d threads differs from itself alone", i,
                      pl_wtype_name(types[i]), threads);
        pl_cpu_pool_destroy(&pool);
    }
    for (int i = 0; i < NW; i++)
        free(bufs[i]), free(y[i]), free(alone[i]);
    free(x), free(src);
}

/* Tests of the packed float weights (cpu_pack.h): the layout gives every row back exactly, and
 * the packed kernels of every instruction set this machine has (plus the forced AVX2 and scalar
 * ones) give bitwise what the scalar block kernel gives on the matrix as stored, on odd shapes
 * (token counts, rows not a multiple of the panel, inner sizes not a multiple of 16), any row
 * subset and thread count; and that stays within a double-precision reference. */
#include "backends/cpu/cpu_pack.h"
#include "backends/cpu/cpu_wcopy.h"
#include "tests/cpu_mat_util.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pl_wtype_t k_types[] = {PL_WT_F32, PL_WT_F16, PL_WT_BF16};

/* A [n][k] matrix of type t as stored (plain) and packed, and the exact values it holds. */
typedef struct {
    unsigned char *buf, *pbuf;
    pl_cpu_wmat_t plain, packed;
    float *wide;
} pmat_t;

static void pmat_make(pmat_t *t, pl_wtype_t type, int n, int k, unsigned seed)
{
    tmat_t m;
    tmat_make(&m, type, n, k, 0, seed);
    t->buf = m.buf;
    t->wide = m.wide;
    t->plain = m.m;
    cr_assert(pl_cpu_pack_suits(&t->plain));
    t->pbuf = xalloc(pl_cpu_pack_bytes(&t->plain));
    pl_cpu_pack(&t->plain, t->pbuf);
    t->packed = t->plain;
    t->packed.data = t->pbuf;
    t->packed.packed = true;
}

static void pmat_free(pmat_t *t)
{
    free(t->buf), free(t->pbuf), free(t->wide);
}

Test(cpu_pack, rows_come_back_exactly)
{
    static const int shapes[][2] = {{1, 1}, {3, 15}, {4, 16}, {5, 17}, {9, 40}, {13, 100}};
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++)
        for (size_t s = 0; s < PL_ARRAY_SIZE(shapes); s++) {
            pmat_t t;
            int n = shapes[s][0], k = shapes[s][1];
            pmat_make(&t, k_types[ti], n, k, (unsigned)(s + 1));
            cr_assert_eq(pl_cpu_pack_bytes(&t.plain), (size_t)((n + 3) / 4 * 4) * t.plain.row_bytes,
                         "whole panels");
            float *a = xalloc((size_t)k * 4), *b = xalloc((size_t)k * 4);
            for (int r = 0; r < n; r++) {
                pl_cpu_wmat_row_f32(&t.plain, r, a);
                pl_cpu_wmat_row_f32(&t.packed, r, b);
                cr_assert(memcmp(a, b, (size_t)k * 4) == 0, "%s %dx%d row %d",
                          pl_wtype_name(k_types[ti]), n, k, r);
            }
            free(a), free(b);
            pmat_free(&t);
        }
}

/* The packed sequence product on each path against the scalar block kernel on the stored
 * matrix, bitwise, and against double precision. */
Test(cpu_pack, seq_bitwise_the_stored_kernels_on_every_path)
{
    static const int shapes[][3] = {/* tokens, weight rows, inner */
                                    {1, 5, 16},    {3, 4, 7},     {7, 37, 40},    {33, 70, 100},
                                    {65, 33, 515}, {130, 19, 64}, {12, 64, 1024}, {6, 6, 33}};
    pl_cpu_isa_t top = pl_cpu_isa();
    cr_log_info("this machine: %s", pl_cpu_isa_name(top));
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++)
        for (size_t s = 0; s < PL_ARRAY_SIZE(shapes); s++) {
            int n = shapes[s][0], rows = shapes[s][1], k = shapes[s][2];
            pmat_t t;
            pmat_make(&t, k_types[ti], rows, k, (unsigned)(7 * s + ti + 1));
            float *x = xalloc((size_t)n * k * 4), *ref = xalloc((size_t)n * rows * 4),
                  *y = xalloc((size_t)n * rows * 4);
            int *all = xalloc((size_t)n * sizeof(int));
            fill(x, (size_t)n * k, (unsigned)(s + 100));
            for (int i = 0; i < n; i++)
                all[i] = i;
            pl_cpu_isa_cap(PL_CPU_ISA_SCALAR);
            pl_cpu_gemm_rows(NULL, x, all, n, &t.plain, ref);
            for (int isa = PL_CPU_ISA_SCALAR; isa <= (int)top; isa++) {
                pl_cpu_isa_cap((pl_cpu_isa_t)isa);
                memset(y, 0xff, (size_t)n * rows * 4);
                pl_cpu_gemm_seq(NULL, x, n, &t.packed, NULL, y);
                cr_assert(memcmp(y, ref, (size_t)n * rows * 4) == 0,
                          "%s %d tokens x %d rows x %d on %s: packed differs from stored",
                          pl_wtype_name(k_types[ti]), n, rows, k,
                          pl_cpu_isa_name((pl_cpu_isa_t)isa));
            }
            pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < rows; j++) {
                    double d = 0, mag = 0;
                    for (int p = 0; p < k; p++) {
                        d += (double)x[i * k + p] * t.wide[(size_t)j * k + p];
                        mag += fabs((double)x[i * k + p] * t.wide[(size_t)j * k + p]);
                    }
                    cr_assert(fabs(ref[i * rows + j] - d) <= 1e-6 * mag + 1e-7);
                }
            free(x), free(ref), free(y), free(all);
            pmat_free(&t);
        }
}

/* Any subset of rows, in any order, on 1 and 2 threads: each row bitwise its product alone. */
Test(cpu_pack, rows_batch_invariant_on_threads)
{
    pl_cpu_pool_t *pool = NULL;
    int rows = 301, k = 200, n = 40;
    cr_assert_eq(pl_cpu_pool_create(2, &pool), PL_OK);
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(k_types); ti++) {
        pmat_t t;
        pmat_make(&t, k_types[ti], rows, k, 11 + (unsigned)ti);
        float *x = xalloc((size_t)n * k * 4), *alone = xalloc((size_t)n * rows * 4),
              *y = xalloc((size_t)n * rows * 4);
        int sub[40];
        fill(x, (size_t)n * k, 5);
        for (int i = 0; i < n; i++)
            pl_cpu_gemm_rows(NULL, x, &i, 1, &t.plain, alone); /* y rows as x rows */
        for (int m = 1; m <= n; m += 13) {
            for (int i = 0; i < m; i++)
                sub[i] = (i * 7 + m) % n;
            for (int p = 0; p < 2; p++) {
                pl_cpu_gemm_rows(p ? pool : NULL, x, sub, m, &t.packed, y);
                for (int i = 0; i < m; i++)
                    cr_assert(memcmp(y + (size_t)sub[i] * rows, alone + (size_t)sub[i] * rows,
                                     (size_t)rows * 4) == 0,
                              "%s: row %d of %d on %d threads", pl_wtype_name(k_types[ti]), sub[i],
                              m, p + 1);
            }
        }
        free(x), free(alone), free(y);
        pmat_free(&t);
    }
    pl_cpu_pool_destroy(&pool);
}

/* The stage's copy packs float matrices in place of the plain copy, keeps a tied one shared,
 * and leaves quantized ones as they are. */
Test(cpu_pack, wcopy_packs_float_matrices)
{
    pmat_t a, b;
    pmat_make(&a, PL_WT_BF16, 10, 48, 1);
    pmat_make(&b, PL_WT_F16, 3, 20, 2);
    unsigned char q[34 * 2];
    memset(q, 7, sizeof(q));
    pl_cpu_wmat_t m0 = a.plain, m1 = b.plain, tied = a.plain;
    pl_cpu_wmat_t mq = {.type = PL_WT_Q8_0, .rows = 2, .cols = 32, .row_bytes = 34, .data = q};
    pl_cpu_wmat_t *mats[] = {&m0, &m1, &tied, &mq};
    pl_cpu_wcopy_t c;
    cr_assert_eq(pl_cpu_wcopy_make(mats, 4, true, &c), PL_OK);
    cr_assert(m0.packed && m1.packed && tied.packed);
    cr_assert_not(mq.packed);
    cr_assert_eq(tied.data, m0.data);
    cr_assert(memcmp(m0.data, a.pbuf, pl_cpu_pack_bytes(&a.plain)) == 0);
    cr_assert(memcmp(m1.data, b.pbuf, pl_cpu_pack_bytes(&b.plain)) == 0);
    cr_assert(memcmp(mq.data, q, sizeof(q)) == 0);
    pl_cpu_wcopy_free(&c);
    pmat_free(&a), pmat_free(&b);
}

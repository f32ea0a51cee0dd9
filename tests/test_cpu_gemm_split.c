/* Tests of how a batch-invariant product is cut up: the one-row blocks of the float kernels
 * (tiles of several weight rows and the rows left over) and the pool's chunks of falling size.
 * Each element against its weight row's dot computed alone on the scalar path, bitwise. */
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_qdot.h"
#include "tests/cpu_mat_util.h"
#include "tests/qdot_util.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* n rows of k random weights of type t (a float type: converted from f32; quantized: blocks of
 * quantized random values) at byte offset mis into a new buffer. */
static pl_cpu_wmat_t s_mat(pl_wtype_t t, int n, int k, size_t mis, uint64_t seed,
                           unsigned char **buf_p)
{
    size_t rb;
    cr_assert_eq(pl_wtype_row_bytes(t, k, &rb), PL_OK);
    unsigned char *buf = xalloc(rb * (size_t)n + mis);
    if (pl_wtype_info(t)->block > 1) {
        qt_weights(t, (int)((size_t)n * (size_t)k / (size_t)pl_wtype_info(t)->block), 0, seed,
                   buf + mis);
    } else {
        float *src = xalloc((size_t)n * k * sizeof(float));
        for (size_t i = 0; i < (size_t)n * k; i++)
            src[i] = pl_rand_uniform(seed, i) - 0.5f;
        pl_wtype_from_f32(t, src, (size_t)n * k, buf + mis);
        free(src);
    }
    *buf_p = buf;
    return (pl_cpu_wmat_t){.type = t, .rows = n, .cols = k, .row_bytes = rb, .data = buf + mis};
}

/* Weight row o of m against activation row x alone, on the scalar path: the reference. */
static float s_alone(const pl_cpu_wmat_t *m, const float *x, int o)
{
    const pl_cpu_wkernel_t *k = pl_cpu_wkernel(m->type);
    const unsigned char *w = (const unsigned char *)m->data + (size_t)o * m->row_bytes;
    float out, *y = &out;
    if (k->x_bytes) {
        void *qx = xalloc(k->x_bytes(m->cols));
        pl_cpu_qact_quantize(m->type, x, m->cols, qx);
        out = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), m->type)(w, qx, m->cols);
        free(qx);
        return out;
    }
    const void *xr = x;
    k->block[PL_CPU_ISA_SCALAR](&xr, 1, w, m->row_bytes, 1, m->cols, &y);
    return out;
}

static const pl_wtype_t s_float_types[] = {PL_WT_F32, PL_WT_F16, PL_WT_BF16};

/* The float block products with one activation row (batch-1 decode), 1 to PL_CPU_BLOCK_OUTS
 * weight rows (counts around the tile widths reach the rows a tile leaves over), rows with and
 * without a tail past the last 16 elements, at odd addresses: every element its row's scalar dot,
 * bitwise, and nothing written past the block; the scalar dot close to the double-precision sum. */
Test(cpu_gemm_split, one_row_float_blocks_equal_rows_alone)
{
    enum { NO = PL_CPU_BLOCK_OUTS };
    static const int counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 23, 24, 31, NO};
    static const int ks[] = {48, 1003};
    float y[NO], want[NO];
    for (size_t ti = 0; ti < PL_ARRAY_SIZE(s_float_types); ti++)
        for (size_t ki = 0; ki < PL_ARRAY_SIZE(ks); ki++) {
            int K = ks[ki];
            unsigned char *buf;
            pl_cpu_wmat_t m = s_mat(s_float_types[ti], NO, K, 1 + ki, 10 + ti, &buf);
            const pl_cpu_wkernel_t *k = pl_cpu_wkernel(m.type);
            float *x = xalloc((size_t)K * sizeof(float)), *wide = xalloc((size_t)K * 4);
            const void *xr = x;
            float *yr = y;
            for (int i = 0; i < K; i++)
                x[i] = pl_rand_uniform(20 + ti, (uint64_t)i) - 0.5f;
            for (int o = 0; o < NO; o++) {
                want[o] = s_alone(&m, x, o);
                double ref = 0, mag = 0;
                pl_cpu_wmat_row_f32(&m, o, wide);
                for (int i = 0; i < K; i++) {
                    ref += (double)x[i] * wide[i];
                    mag += fabs((double)x[i] * wide[i]);
                }
                cr_assert(fabs(want[o] - ref) <= 1e-6 * mag + 1e-7, "%s row %d: %.9g want %.9g",
                          pl_wtype_name(m.type), o, want[o], ref);
            }
            for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
                if (isa > (int)pl_cpu_isa() || !k->block[isa])
                    continue;
                for (size_t c = 0; c < PL_ARRAY_SIZE(counts); c++) {
                    int no = counts[c];
                    memset(y, 0xff, sizeof(y));
                    k->block[isa](&xr, 1, m.data, m.row_bytes, no, K, &yr);
                    for (int o = 0; o < NO; o++) {
                        uint32_t bits;
                        memcpy(&bits, &y[o], 4);
                        if (o >= no)
                            cr_assert_eq(bits, 0xffffffffu, "%s %s k %d: row %d of %d written",
                                         pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(m.type),
                                         K, o, no);
                        else
                            cr_assert(memcmp(&y[o], &want[o], 4) == 0,
                                      "%s %s k %d: row %d of %d: %.9g, alone %.9g",
                                      pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(m.type), K,
                                      o, no, y[o], want[o]);
                    }
                }
            }
            free(x), free(wide), free(buf);
        }
}

/* Products big enough that the pool's plan cuts them into chunks of falling size (whole
 * 128-row blocks first, 16-row pieces last, matrices of one job side by side), on 1-4 threads,
 * for one activation row and a few: every element of every output its row's scalar dot alone,
 * bitwise, so no weight row is skipped, taken twice or written to another's place. */
Test(cpu_gemm_split, chunks_cover_every_row_once)
{
    enum { NM = 3, NR = 3 };
    /* f32 rows of 3,280 B (the smallest chunks 40 rows, rounded up to 48: whole 16-row pieces)
     * and Q8_0 rows of 4,352 B (32 rows), both past the cap at first (whole 128-row blocks); a
     * Q4_K matrix shorter than a chunk */
    const pl_wtype_t types[NM] = {PL_WT_F32, PL_WT_Q8_0, PL_WT_Q4_K};
    const int outs[NM] = {2003, 1500, 37}, K[NM] = {820, 4096, 2048};
    unsigned char *bufs[NM];
    pl_cpu_wmat_t m[NM];
    float *want[NM], *y[NM], *x = xalloc((size_t)NR * 4096 * sizeof(float));
    int rows[NR] = {2, 0, 1};
    for (int i = 0; i < NR * 4096; i++)
        x[i] = pl_rand_uniform(31, (uint64_t)i) - 0.5f;
    for (int i = 0; i < NM; i++) {
        m[i] = s_mat(types[i], outs[i], K[i], (size_t)i, 40 + (uint64_t)i, &bufs[i]);
        want[i] = xalloc((size_t)NR * outs[i] * sizeof(float));
        y[i] = xalloc((size_t)NR * outs[i] * sizeof(float));
        for (int r = 0; r < NR; r++)
            for (int o = 0; o < outs[i]; o++)
                want[i][(size_t)r * outs[i] + o] = s_alone(&m[i], x + (size_t)r * 4096, o);
    }
    /* every matrix alone and the last two in one job (their activations differ in form); K
     * differs between jobs only, as a job's matrices share their input */
    for (int threads = 1; threads <= 4; threads++) {
        pl_cpu_pool_t *pool = NULL;
        cr_assert_eq(pl_cpu_pool_create(threads, &pool), PL_OK);
        for (int nr = 1; nr <= NR; nr += NR - 1)
            for (int i = 0; i < NM; i++) {
                memset(y[i], 0xff, (size_t)NR * outs[i] * sizeof(float));
                float *xs = xalloc((size_t)NR * K[i] * sizeof(float));
                for (int r = 0; r < NR; r++)
                    memcpy(xs + (size_t)r * K[i], x + (size_t)r * 4096, (size_t)K[i] * 4);
                pl_cpu_gemm_rows(pool, xs, rows, nr, &m[i], y[i]);
                for (int r = 0; r < nr; r++)
                    cr_assert(memcmp(y[i] + (size_t)rows[r] * outs[i],
                                     want[i] + (size_t)rows[r] * outs[i],
                                     (size_t)outs[i] * sizeof(float)) == 0,
                              "%s %dx%d, %d row(s) on %d threads: row %d differs from the rows "
                              "alone",
                              pl_wtype_name(types[i]), outs[i], K[i], nr, threads, rows[r]);
                free(xs);
            }
        pl_cpu_pool_destroy(&pool);
    }
    for (int i = 0; i < NM; i++)
        free(bufs[i]), free(want[i]), free(y[i]);
    free(x);
}

/* One job of several matrices of one input (q, k and v), each large enough for several chunks,
 * the job's chunks falling in size across the matrix boundaries: each output bitwise its rows
 * alone, on 2 and 3 threads, for every type a stage holds. */
Test(cpu_gemm_split, one_job_of_several_matrices)
{
    enum { K = 2048, NW = 3 };
    const pl_wtype_t types[] = {PL_WT_F32,  PL_WT_BF16, PL_WT_F16,  PL_WT_Q8_0,
                                PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};
    const int outs[NW] = {1040, 160, 272};
    float *x = xalloc(K * sizeof(float));
    int row0 = 0;
    for (int i = 0; i < K; i++)
        x[i] = pl_rand_uniform(51, (uint64_t)i) - 0.5f;
    for (size_t t = 0; t < PL_ARRAY_SIZE(types); t++) {
        unsigned char *bufs[NW];
        pl_cpu_wmat_t m[NW];
        const pl_cpu_wmat_t *mp[NW];
        float *y[NW], *want[NW];
        for (int i = 0; i < NW; i++) {
            m[i] = s_mat(types[t], outs[i], K, 3, 60 + 10 * t + (uint64_t)i, &bufs[i]);
            mp[i] = &m[i];
            y[i] = xalloc((size_t)outs[i] * sizeof(float));
            want[i] = xalloc((size_t)outs[i] * sizeof(float));
            for (int o = 0; o < outs[i]; o++)
                want[i][o] = s_alone(&m[i], x, o);
        }
        for (int threads = 2; threads <= 3; threads++) {
            pl_cpu_pool_t *pool = NULL;
            cr_assert_eq(pl_cpu_pool_create(threads, &pool), PL_OK);
            for (int i = 0; i < NW; i++)
                memset(y[i], 0xff, (size_t)outs[i] * sizeof(float));
            pl_cpu_gemm_rows_n(pool, x, &row0, 1, mp, y, NW);
            for (int i = 0; i < NW; i++)
                for (int o = 0; o < outs[i]; o++)
                    cr_assert(memcmp(&y[i][o], &want[i][o], 4) == 0,
                              "%s matrix %d row %d on %d threads: %.9g, alone %.9g",
                              pl_wtype_name(types[t]), i, o, threads, y[i][o], want[i][o]);
            pl_cpu_pool_destroy(&pool);
        }
        for (int i = 0; i < NW; i++)
            free(bufs[i]), free(y[i]), free(want[i]);
    }
    free(x);
}

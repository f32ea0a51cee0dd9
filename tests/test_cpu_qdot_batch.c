/* Tests of batched quantized decode: cpu_qdot_batch512.c's block products (8 rows per pass over a
 * weight row, AVX-512 VNNI) and the GEMM on every instruction set, each row of a batch bitwise
 * the scalar one-row dot of that row alone, and within tolerance of double sums. */
#include "backends/cpu/cpu_qdot.h"
#include "common/util.h"
#include "tests/qdot_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pl_wtype_t s_types[] = {PL_WT_Q8_0, PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};

/* Activation row r of a test: mode 0 uniform, mode 1 a wide range with a spike per block (the
 * quants reach +-127, the largest products the kernels' int16 steps see), mode 2 alternating
 * +-1 (every quant +-127: the worst case of every pair sum). */
static void s_act(int64_t n, int mode, uint64_t seed, float *x)
{
    for (int64_t i = 0; i < n; i++) {
        float u = pl_rand_uniform(seed, (uint64_t)i) - 0.5f;
        x[i] = mode == 0 ? u : mode == 1 ? (i % 29 == 0 ? 50.0f * u : u) : (i % 2 ? -1.0f : 1.0f);
    }
}

#if defined(__x86_64__)
static bool s_has_vnni512(void)
{
    __builtin_cpu_init();
    return pl_cpu_isa() >= PL_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
}

typedef void (*s_block_fn)(const void *const *x, int nr, const void *w, size_t rb, int no, int k,
                           float *const *y);

/* The 512-bit batch kernels directly, every type: 1..17 rows (two groups of 8 and a lone row), 1..5
 * weight rows at an odd address, rows of 1..9 blocks (odd counts reach the Q8_0 / Q4_0 scalar
 * tail), three kinds of weights and activations: every element bitwise the scalar one-row dot. */
Test(cpu_qdot_batch, batch512_blocks_equal_one_row_dots_bitwise)
{
    enum { MAXB = 9, MAXN = MAXB * 256, NR = 17, NO = 5 };
    static const s_block_fn fns[] = {pl_cpu_q8_0_block_b512, pl_cpu_q4_0_block_b512,
                                     pl_cpu_q4_k_block_b512, pl_cpu_q5_k_block_b512,
                                     pl_cpu_q6_k_block_b512};
    static unsigned char w[NO * MAXB * 256 + 8], qx[NR][MAXN * 2];
    static float x[MAXN], y[NR][NO];
    int checked = 0;
    if (!s_has_vnni512())
        cr_skip_test("this CPU has no AVX-512 VNNI (the kernels under test need it)");
    for (size_t t = 0; t < PL_ARRAY_SIZE(fns); t++) {
        pl_wtype_t dt = s_types[t];
        int blk = pl_wtype_info(dt)->block;
        pl_cpu_qdot_fn ref = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), dt);
        for (int nb = 1; nb <= MAXB; nb++)
            for (int mode = 0; mode < 3; mode++) {
                int64_t n = (int64_t)nb * blk;
                size_t rb = (size_t)nb * pl_wtype_info(dt)->block_bytes;
                uint64_t seed = 9000 + 100 * t + 10 * (uint64_t)nb + (uint64_t)mode;
                const void *xr[NR];
                float *yr[NR];
                qt_weights(dt, nb * NO, mode % 2, seed, w + 3);
                for (int r = 0; r < NR; r++) {
                    s_act(n, mode, seed + 31 * (uint64_t)r, x);
                    pl_cpu_qact_quantize(dt, x, n, qx[r]);
                    xr[r] = qx[r];
                    yr[r] = y[r];
                }
                for (int nr = 1; nr <= NR; nr++)
                    for (int no = 1; no <= NO; no += 2) {
                        memset(y, 0xff, sizeof(y));
                        fns[t](xr, nr, w + 3, rb, no, (int)n, yr);
                        for (int r = 0; r < nr; r++)
                            for (int o = 0; o < no; o++) {
                                float want = ref(w + 3 + o * rb, qx[r], n);
                                cr_assert(memcmp(&want, &y[r][o], 4) == 0,
                                          "%s, %d blocks, mode %d: [%d][%d] of %dx%d: %.9g, alone "
                                          "%.9g",
                                          pl_wtype_name(dt), nb, mode, r, o, nr, no, y[r][o], want);
                                checked++;
                            }
                    }
            }
    }
    cr_assert_gt(checked, 0);
}
#endif

/* The dequantized dot in double: what every path must stay near. */
static double s_dot_double(pl_wtype_t dt, const void *w, const float *x, int64_t n, double *wabs_p)
{
    float *wd = malloc((size_t)n * sizeof(float));
    double s = 0, wabs = 0;
    cr_assert_not_null(wd, "%lld weights", (long long)n);
    pl_wtype_to_f32(dt, w, (size_t)n, wd);
    for (int64_t i = 0; i < n; i++) {
        s += (double)wd[i] * x[i];
        wabs += fabs(wd[i]);
    }
    free(wd);
    *wabs_p = wabs;
    return s;
}

/* Batched decode through pl_cpu_gemm_rows on 2 threads, on every instruction set this CPU has
 * (AVX2 forced as well: a CI machine without AVX-512 runs it): each row of batches of 2..8 and
 * 13, in shuffled order, is bitwise that row computed alone and bitwise the scalar path's row,
 * which is near the double-precision dot of the dequantized weights. */
Test(cpu_qdot_batch, batch_rows_equal_rows_alone_on_every_isa)
{
    enum { OUT = 48, K = 768, NR = 13 };
    static unsigned char w[OUT * K * 2];
    static float x[NR * K], y[NR * OUT], alone[NR * OUT], ref[NR * OUT];
    static const int sizes[] = {2, 3, 4, 5, 7, 8, 13};
    pl_cpu_pool_t *pool = NULL;
    int isas = 0;
    cr_assert_eq(pl_cpu_pool_create(2, &pool), PL_OK);
    for (int r = 0; r < NR; r++)
        s_act(K, r % 3, 700 + (uint64_t)r, x + (size_t)r * K);
    for (size_t t = 0; t < PL_ARRAY_SIZE(s_types); t++) {
        pl_wtype_t dt = s_types[t];
        size_t rb;
        cr_assert_eq(pl_wtype_row_bytes(dt, K, &rb), PL_OK);
        qt_weights(dt, OUT * K / pl_wtype_info(dt)->block, (int)t % 2, 800 + t, w);
        pl_tensor_view_t v = {.dtype = PL_DT_F32,
                              .wtype = dt,
                              .ndim = 2,
                              .shape = {OUT, K},
                              .numel = OUT * K,
                              .data = w,
                              .nbytes = rb * OUT};
        pl_cpu_wmat_t m;
        cr_assert_eq(pl_cpu_wmat_from_view("w", &v, &m), PL_OK, "%s", pl_error_msg());
        pl_cpu_isa_cap(PL_CPU_ISA_SCALAR); /* the reference: each row alone, scalar code */
        for (int r = 0; r < NR; r++)
            pl_cpu_gemm_rows(NULL, x, &r, 1, &m, ref);
        for (int r = 0; r < NR; r++)
            for (int o = 0; o < OUT; o++) {
                double wabs, amax = 0;
                double want = s_dot_double(dt, w + (size_t)o * rb, x + (size_t)r * K, K, &wabs);
                for (int i = 0; i < K; i++)
                    amax = fmax(amax, fabs(x[(size_t)r * K + i]));
                /* each activation off by at most amax / 254, plus float rounding */
                cr_assert_leq(fabs(ref[(size_t)r * OUT + o] - want),
                              amax / 254 * wabs * 1.01 + 1e-4, "%s [%d][%d]: %.6g, double %.6g",
                              pl_wtype_name(dt), r, o, ref[(size_t)r * OUT + o], want);
            }
        for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
            pl_cpu_isa_cap((pl_cpu_isa_t)isa);
            if (pl_cpu_isa() != (pl_cpu_isa_t)isa)
                continue;
            isas += t == 0;
            for (int r = 0; r < NR; r++)
                pl_cpu_gemm_rows(NULL, x, &r, 1, &m, alone);
            for (size_t s = 0; s < PL_ARRAY_SIZE(sizes); s++) {
                int n = sizes[s], rows[NR];
                for (int i = 0; i < n; i++) /* a shuffled subset: rows s, s + 5, s + 10, .. */
                    rows[i] = (int)((5 * (unsigned)i + s) % NR);
                memset(y, 0, sizeof(y));
                pl_cpu_gemm_rows(pool, x, rows, n, &m, y);
                for (int i = 0; i < n; i++) {
                    size_t at = (size_t)rows[i] * OUT;
                    cr_assert_eq(memcmp(y + at, alone + at, OUT * sizeof(float)), 0,
                                 "%s %s: row %d of a batch of %d differs from it alone",
                                 pl_wtype_name(dt), pl_cpu_isa_name((pl_cpu_isa_t)isa), rows[i], n);
                    cr_assert_eq(memcmp(y + at, ref + at, OUT * sizeof(float)), 0,
                                 "%s %s: row %d of a batch of %d differs from the scalar path",
                                 pl_wtype_name(dt), pl_cpu_isa_name((pl_cpu_isa_t)isa), rows[i], n);
                }
            }
        }
        pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
    }
    cr_log_info("instruction sets checked: %d of %d", isas, PL_CPU_ISA_COUNT);
    cr_assert_geq(isas, 1);
    pl_cpu_pool_destroy(&pool);
}

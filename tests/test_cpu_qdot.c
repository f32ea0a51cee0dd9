/* Tests of the quantized CPU dots: every ISA this CPU has, every block type, rows of 1..9 blocks
 * (odd counts reach the SIMD kernels' tail), against double-precision sums of dequantized values;
 * bitwise agreement between instruction sets; their slots in the GEMM's weight-type table. */
#include "backends/cpu/cpu_qdot.h"
#include "common/util.h"
#include "tests/qdot_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pl_wtype_t s_types[] = {PL_WT_Q8_0, PL_WT_Q4_0, PL_WT_Q4_K, PL_WT_Q5_K, PL_WT_Q6_K};

/* The activations as floats, read from the documented layouts (d, then the int8 quants). */
static void s_act_f32(pl_wtype_t wt, const void *qx, int64_t n, float *out)
{
    int blk = pl_wtype_info(wt)->block;
    for (int64_t b = 0; b < n / blk; b++) {
        float d;
        const int8_t *qs;
        if (blk == 32) {
            const pl_q8_act_t *a = (const pl_q8_act_t *)qx + b;
            d = a->d, qs = a->qs;
        } else {
            const pl_q8k_act_t *a = (const pl_q8k_act_t *)qx + b;
            d = a->d, qs = a->qs;
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += qs[16 * j + l];
                cr_assert_eq(a->bsums[j], s, "bsums[%d]", j);
            }
        }
        for (int i = 0; i < blk; i++)
            out[b * blk + i] = d * (float)qs[i];
    }
}

Test(cpu_qdot, activation_quantizer_within_half_a_step)
{
    enum { N = 512 };
    float x[N], y[N];
    static unsigned char q[N * 2];
    for (int i = 0; i < N; i++)
        x[i] = (pl_rand_uniform(3, (uint64_t)i) - 0.5f) * (i % 50 == 0 ? 40.0f : 2.0f);
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        int blk = pl_wtype_info(s_types[t])->block;
        cr_assert_leq(pl_cpu_qact_bytes(s_types[t], N), sizeof(q));
        pl_cpu_qact_quantize(s_types[t], x, N, q);
        s_act_f32(s_types[t], q, N, y);
        for (int b = 0; b < N / blk; b++) {
            float amax = 0;
            for (int i = 0; i < blk; i++)
                amax = fmaxf(amax, fabsf(x[b * blk + i]));
            for (int i = 0; i < blk; i++)
                cr_assert_leq(fabsf(x[b * blk + i] - y[b * blk + i]), amax / 254 * 1.0001f,
                              "%s element %d", pl_wtype_name(s_types[t]), b * blk + i);
        }
    }
    cr_assert_eq(pl_cpu_qact_bytes(PL_WT_F32, N), 0);
}

/* The SIMD quantizer writes bitwise the scalar one's bytes: scales, quants, bsums; for values
 * of every magnitude, exact halves (round to even), zero blocks and a NaN. */
Test(cpu_qdot, activation_quantizer_same_bytes_on_every_isa)
{
    enum { N = 1024 };
    static float x[N];
    static unsigned char ref[N * 2], got[N * 2];
    for (int i = 0; i < N; i++)
        x[i] = (pl_rand_uniform(4, (uint64_t)i) - 0.5f) * (i % 37 == 0 ? 1e3f : i % 5 ? 2.0f : 1e-3f);
    for (int i = 256; i < 288; i++)
        x[i] = 0.0f; /* a zero Q8_0 block */
    for (int i = 512; i < 544; i++)
        x[i] = (float)(i - 528) * 0.5f; /* amax 8: x / (8 / 127) has exact halves */
    x[700] = NAN;
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        size_t nb = pl_cpu_qact_bytes(s_types[t], N);
        pl_cpu_isa_cap(PL_CPU_ISA_SCALAR);
        memset(ref, 0, sizeof(ref));
        pl_cpu_qact_quantize(s_types[t], x, N, ref);
        for (int isa = 1; isa < PL_CPU_ISA_COUNT; isa++) {
            pl_cpu_isa_cap((pl_cpu_isa_t)isa);
            if (pl_cpu_isa() != (pl_cpu_isa_t)isa)
                continue;
            memset(got, 0, sizeof(got));
            pl_cpu_qact_quantize(s_types[t], x, N, got);
            cr_assert(memcmp(got, ref, nb) == 0, "%s %s", pl_cpu_isa_name((pl_cpu_isa_t)isa),
                      pl_wtype_name(s_types[t]));
        }
        pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
    }
}

Test(cpu_qdot, every_isa_and_type_against_double_sums)
{
    enum { MAXB = 9, MAXN = MAXB * 256 };
    static unsigned char w[MAXB * 256 * 2], qx[MAXN * 2];
    static float x[MAXN], wd[MAXN], xd[MAXN];
    int n_isa = 0;
    for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
        const pl_cpu_qdot_table_t *tab = pl_cpu_qdot_table((pl_cpu_isa_t)isa);
        if (!tab)
            continue;
        n_isa++;
        for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
            pl_wtype_t dt = s_types[t];
            pl_cpu_qdot_fn fn = pl_cpu_qdot_fn_of(tab, dt);
            int blk = pl_wtype_info(dt)->block;
            for (int nb = 1; nb <= MAXB; nb += 2) {
                for (int mode = 0; mode < 2; mode++) {
                    int64_t n = (int64_t)nb * blk;
                    uint64_t seed = 1000 * t + 10 * (uint64_t)nb + (uint64_t)mode;
                    qt_weights(dt, nb, mode, seed, w + 1); /* misaligned row */
                    for (int64_t i = 0; i < n; i++)
                        x[i] = (pl_rand_uniform(seed + 5, (uint64_t)i) - 0.5f) * 3.0f;
                    pl_cpu_qact_quantize(dt, x, n, qx);
                    pl_wtype_to_f32(dt, w + 1, (size_t)n, wd);
                    s_act_f32(dt, qx, n, xd);
                    double exact = 0, mag = 0, vs_x = 0, bound = 0;
                    for (int64_t i = 0; i < n; i++) {
                        exact += (double)wd[i] * xd[i];
                        vs_x += (double)wd[i] * x[i];
                        mag += fabs((double)wd[i] * xd[i]);
                    }
                    for (int64_t b = 0; b < n / blk; b++) {
                        double amax = 0;
                        for (int i = 0; i < blk; i++)
                            amax = fmax(amax, fabs(x[b * blk + i]));
                        for (int i = 0; i < blk; i++)
                            bound += fabs(wd[b * blk + i]) * amax / 254;
                    }
                    float got = fn(w + 1, qx, n);
                    cr_assert_leq(fabs(got - exact), 2e-6 * mag + 1e-9,
                                  "%s %s %d blocks mode %d: %g, exact %g", pl_cpu_isa_name((pl_cpu_isa_t)isa),
                                  pl_wtype_name(dt), nb, mode, got, exact);
                    cr_assert_leq(fabs(got - vs_x), bound * 1.001 + 2e-6 * mag + 1e-9,
                                  "%s %s: %g vs f32 activations %g (bound %g)",
                                  pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(dt), got, vs_x, bound);
                }
            }
        }
    }
    cr_assert_geq(n_isa, 1);
}

/* Every instruction set gives bitwise the scalar result (stages agree across machines). */
Test(cpu_qdot, instruction_sets_agree_bitwise)
{
    enum { NB = 7, N = NB * 256 };
    static unsigned char w[N * 2], qx[N * 2];
    static float x[N];
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        pl_wtype_t dt = s_types[t];
        for (int mode = 0; mode < 2; mode++) {
            qt_weights(dt, NB * 256 / pl_wtype_info(dt)->block, mode, 40 + t, w);
            for (int i = 0; i < N; i++)
                x[i] = pl_rand_uniform(41 + t, (uint64_t)i) - 0.5f;
            pl_cpu_qact_quantize(dt, x, N, qx);
            float ref = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), dt)(w, qx, N);
            for (int isa = 1; isa < PL_CPU_ISA_COUNT; isa++) {
                const pl_cpu_qdot_table_t *tab = pl_cpu_qdot_table((pl_cpu_isa_t)isa);
                if (!tab)
                    continue;
                float got = pl_cpu_qdot_fn_of(tab, dt)(w, qx, N);
                cr_assert(memcmp(&got, &ref, 4) == 0, "%s %s: %.9g, scalar %.9g",
                          pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(dt), got, ref);
            }
        }
    }
}

/* Whether the kernel's flags line of /proc/cpuinfo (the first CPU's) has flag: the kernel
 * clears a flag whose registers it does not save, so this is the reference cpu_gemm.c's cpuid
 * and XCR0 reading must agree with. */
static bool s_cpuinfo_has(const char *flag)
{
    static char line[8192];
    FILE *f = fopen("/proc/cpuinfo", "r");
    bool found = false;
    cr_assert_not_null(f, "/proc/cpuinfo");
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "flags", 5))
            break;
    fclose(f);
    size_t n = strlen(flag);
    for (const char *p = strchr(line, ':'); p && *p; p += strcspn(p, " \n")) {
        p += strspn(p, " :\n");
        if (!strncmp(p, flag, n) && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0')) {
            found = true;
            break;
        }
    }
    return found;
}

/* AVX-512 is picked only when the CPU and the OS have it, AVX2 likewise; scalar is always
 * there. */
Test(cpu_qdot, isa_follows_cpuid)
{
#if defined(__x86_64__)
    bool avx2 = s_cpuinfo_has("avx2") && s_cpuinfo_has("fma") && s_cpuinfo_has("f16c");
    bool avx512 = avx2 && s_cpuinfo_has("avx512f") && s_cpuinfo_has("avx512bw") &&
                  s_cpuinfo_has("avx512vl");
#else
    bool avx2 = false, avx512 = false;
#endif
    cr_assert_not_null(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR));
    cr_assert_eq(pl_cpu_qdot_table(PL_CPU_ISA_AVX2) != NULL, avx2);
    cr_assert_eq(pl_cpu_qdot_table(PL_CPU_ISA_AVX512) != NULL, avx512);
    cr_assert_eq(pl_cpu_isa(),
                 avx512 ? PL_CPU_ISA_AVX512 : avx2 ? PL_CPU_ISA_AVX2 : PL_CPU_ISA_SCALAR);
    cr_assert_null(pl_cpu_qdot_fn_of(pl_cpu_qdot_table(pl_cpu_isa()), PL_WT_BF16));
    cr_log_info("quantized dots: %s", pl_cpu_isa_name(pl_cpu_isa()));
    /* the standalone kernels are the chosen table's */
    enum { N = 256 };
    static unsigned char w[N * 2], qx[N * 2];
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = pl_rand_uniform(8, (uint64_t)i) - 0.5f;
    float (*const standalone[])(const void *, const void *, int64_t) = {
        pl_q8_0_dot, pl_q4_0_dot, pl_q4_k_dot, pl_q5_k_dot, pl_q6_k_dot};
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        pl_wtype_from_f32(s_types[t], x, N, w);
        pl_cpu_qact_quantize(s_types[t], x, N, qx);
        cr_assert(standalone[t](w, qx, N) ==
                  pl_cpu_qdot_fn_of(pl_cpu_qdot_table(pl_cpu_isa()), s_types[t])(w, qx, N));
    }
}

/* The quantized types' GEMM: every element the row dot of its activation row, whatever the
 * rows around it (batch invariance), through pl_cpu_gemm_rows on a pool, and the OpenBLAS path on
 * dequantized tiles close to it. */
Test(cpu_qdot, gemm_through_the_weight_type_table)
{
    enum { OUT = 70, K = 512, NR = 5 };
    static unsigned char w[OUT * K * 2];
    static float x[NR * K], y[NR * OUT], ys[NR * OUT], yseq[NR * OUT],
        tile[2 * PL_CPU_TILE_ROWS * K];
    static unsigned char qx[K * 2];
    pl_cpu_pool_t *pool = NULL;
    cr_assert_eq(pl_cpu_pool_create(2, &pool), PL_OK);
    for (int i = 0; i < NR * K; i++)
        x[i] = pl_rand_uniform(50, (uint64_t)i) - 0.5f;
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        pl_wtype_t dt = s_types[t];
        size_t rb;
        cr_assert_eq(pl_wtype_row_bytes(dt, K, &rb), PL_OK);
        qt_weights(dt, OUT * K / pl_wtype_info(dt)->block, 0, 60 + t, w);
        pl_tensor_view_t v = {.dtype = PL_DT_F32, .wtype = dt, .ndim = 2, .shape = {OUT, K},
                              .numel = OUT * K, .data = w, .nbytes = rb * OUT};
        pl_cpu_wmat_t m;
        cr_assert_eq(pl_cpu_wmat_from_view("w", &v, &m), PL_OK, "%s", pl_error_msg());
        int rows[NR] = {4, 0, 3, 1, 2};
        pl_cpu_gemm_rows(pool, x, rows, NR, &m, y);
        for (int r = 0; r < NR; r++) {
            const float *y1 = ys + (size_t)rows[r] * OUT;
            pl_cpu_gemm_rows(NULL, x, &rows[r], 1, &m, ys);
            cr_assert_eq(memcmp(y1, y + (size_t)rows[r] * OUT, OUT * sizeof(float)), 0,
                         "%s row %d", pl_wtype_name(dt), rows[r]);
            pl_cpu_qact_quantize(dt, x + (size_t)rows[r] * K, K, qx);
            for (int o = 0; o < OUT; o++) {
                float d = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(pl_cpu_isa()), dt)(w + o * rb, qx, K);
                cr_assert(memcmp(&d, &y1[o], 4) == 0, "%s [%d][%d]", pl_wtype_name(dt), rows[r],
                          o);
            }
        }
        pl_cpu_gemm_seq_force(1); /* OpenBLAS on dequantized tiles */
        pl_cpu_gemm_seq(pool, x, NR, &m, tile, yseq);
        pl_cpu_gemm_seq_force(-1);
        for (int i = 0; i < NR * OUT; i++)
            cr_assert_float_eq(yseq[i], y[i], 0.02f, "%s element %d", pl_wtype_name(dt), i);
    }
    pl_cpu_pool_destroy(&pool);
}

/* The multi-row dots (batched decode: a weight row unpacked once for several activation rows)
 * give each row bitwise what the scalar one-row dot gives it alone, on every instruction set,
 * for every row count, rows of 1..9 blocks (odd counts reach the vector loops' tails, even ones
 * their sums in registers) and weight rows at odd addresses. */
Test(cpu_qdot, multi_row_dots_equal_one_row_dots_bitwise)
{
    enum { MAXB = 9, MAXN = MAXB * 256 };
    static unsigned char w[MAXB * 256 * 2];
    static unsigned char qx[PL_CPU_QDOT_ROWS][MAXN * 2];
    static float x[MAXN];
    int checked = 0;
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        pl_wtype_t dt = s_types[t];
        int blk = pl_wtype_info(dt)->block;
        pl_cpu_qdot_fn ref = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), dt);
        for (int nb = 1; nb <= MAXB; nb++) {
            int64_t n = (int64_t)nb * blk;
            for (int mode = 0; mode < 2; mode++) {
                uint64_t seed = 7000 + 100 * t + 10 * (uint64_t)nb + (uint64_t)mode;
                const void *rows[PL_CPU_QDOT_ROWS];
                float want[PL_CPU_QDOT_ROWS];
                qt_weights(dt, nb, mode, seed, w + 3);
                for (int r = 0; r < PL_CPU_QDOT_ROWS; r++) {
                    for (int64_t i = 0; i < n; i++)
                        x[i] = (pl_rand_uniform(seed + 11 + (uint64_t)r, (uint64_t)i) - 0.5f) *
                               (r + 1.0f);
                    pl_cpu_qact_quantize(dt, x, n, qx[r]);
                    rows[r] = qx[r];
                    want[r] = ref(w + 3, qx[r], n);
                }
                for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
                    const pl_cpu_qdot_table_t *tab = pl_cpu_qdot_table((pl_cpu_isa_t)isa);
                    if (!tab)
                        continue;
                    pl_cpu_qdot_rows_fn fn = pl_cpu_qdot_rows_fn_of(tab, dt);
                    cr_assert_not_null(fn);
                    for (int nr = 1; nr <= PL_CPU_QDOT_ROWS; nr++)
                        for (int first = 0; first + nr <= PL_CPU_QDOT_ROWS; first++) {
                            float got[PL_CPU_QDOT_ROWS];
                            fn(w + 3, rows + first, nr, n, got);
                            for (int r = 0; r < nr; r++)
                                cr_assert(memcmp(&got[r], &want[first + r], 4) == 0,
                                          "%s %s, %d blocks, mode %d: row %d of %d: %.9g, alone "
                                          "%.9g",
                                          pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(dt),
                                          nb, mode, r, nr, got[r], want[first + r]);
                            checked++;
                        }
                }
            }
        }
    }
    cr_assert_gt(checked, 0);
    cr_assert_null(pl_cpu_qdot_rows_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), PL_WT_F32));
}

/* The block products of the GEMM table for 1..9 activation rows (groups of PL_CPU_QDOT_ROWS and
 * what is left) and 1..33 weight rows, and for one activation row up to PL_CPU_BLOCK_OUTS_ONE
 * weight rows (even and odd counts: the batch-1 kernels pair row o with row no / 2 + o), rows of
 * an even and an odd block count, and a long row (41 blocks of 32: the VNNI Q4_0 kernel's groups
 * of 16 blocks, its pairs after them and an odd last block): each element the scalar one-row dot
 * of its pair. */
Test(cpu_qdot, block_products_of_every_row_count)
{
    enum { KMAX = 41 * 32, NO = PL_CPU_BLOCK_OUTS_ONE, NR = 9 };
    static const int one_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                                     127, PL_CPU_BLOCK_OUTS_ONE};
    static unsigned char w[NO * KMAX * 2], qx[NR][KMAX * 2];
    static float x[KMAX], y[NR][NO], want[NR][NO];
    for (size_t tk = 0; tk < 3 * PL_ARRAY_SIZE(s_types); tk++) {
        size_t t = tk / 3;
        pl_wtype_t dt = s_types[t];
        int blk = pl_wtype_info(dt)->block;
        /* even, odd block counts, a long row */
        int K = tk % 3 == 0   ? 512
                : tk % 3 == 1 ? (blk == 32 ? 15 * 32 : 3 * 256)
                              : (blk == 32 ? 41 * 32 : 5 * 256);
        const pl_cpu_wkernel_t *k = pl_cpu_wkernel(dt);
        pl_cpu_qdot_fn ref = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), dt);
        size_t rb;
        cr_assert_eq(pl_wtype_row_bytes(dt, K, &rb), PL_OK);
        cr_assert(k->wide_one, "%s", pl_wtype_name(dt));
        qt_weights(dt, NO * K / pl_wtype_info(dt)->block, 1, 300 + t, w);
        const void *xr[NR];
        for (int r = 0; r < NR; r++) {
            for (int i = 0; i < K; i++)
                x[i] = pl_rand_uniform(400 + t * 16 + (uint64_t)r, (uint64_t)i) - 0.5f;
            k->x_prep(x, K, qx[r]);
            xr[r] = qx[r];
            for (int o = 0; o < NO; o++)
                want[r][o] = ref(w + (size_t)o * rb, qx[r], K);
        }
        for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
            if (!pl_cpu_qdot_table((pl_cpu_isa_t)isa) || !k->block[isa])
                continue;
            for (int nr = 1; nr <= NR; nr++) {
                int n_counts = nr == 1 ? (int)PL_ARRAY_SIZE(one_counts) : 5;
                for (int c = 0; c < n_counts; c++) {
                    int no = nr == 1 ? one_counts[c] : 1 + 8 * c; /* 1, 9, .. 33 */
                    float *yr[NR];
                    for (int r = 0; r < nr; r++) {
                        yr[r] = y[r];
                        memset(y[r], 0xff, sizeof(y[r]));
                    }
                    k->block[isa](xr, nr, w, rb, no, K, yr);
                    for (int r = 0; r < nr; r++)
                        for (int o = 0; o < NO; o++) {
                            if (o >= no) { /* nothing written past the block */
                                uint32_t bits;
                                memcpy(&bits, &y[r][o], 4);
                                cr_assert_eq(bits, 0xffffffffu, "%s %s: [%d][%d] of %dx%d written",
                                             pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(dt),
                                             r, o, nr, no);
                                continue;
                            }
                            cr_assert(memcmp(&want[r][o], &y[r][o], 4) == 0,
                                      "%s %s: [%d][%d] of %dx%d: %.9g, alone %.9g",
                                      pl_cpu_isa_name((pl_cpu_isa_t)isa), pl_wtype_name(dt), r, o,
                                      nr, no, y[r][o], want[r][o]);
                        }
                }
            }
        }
    }
}

/* A Q4_0 row longer than the VNNI kernel's activation layout holds (1,024 blocks) takes the
 * 256-bit kernel instead, and a row of exactly 1,024 blocks the layout: either way each element
 * of the block product is bitwise the scalar one-row dot (3 weight rows: a pair and a lone one). */
Test(cpu_qdot, q4_0_rows_past_the_vnni_layout)
{
    enum { NO = 3 };
    static const int lengths[] = {1024 * 32, 1041 * 32};
    const pl_cpu_wkernel_t *k = pl_cpu_wkernel(PL_WT_Q4_0);
    pl_cpu_qdot_fn ref = pl_cpu_qdot_fn_of(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR), PL_WT_Q4_0);
    for (size_t li = 0; li < PL_ARRAY_SIZE(lengths); li++) {
        int K = lengths[li];
        size_t rb;
        cr_assert_eq(pl_wtype_row_bytes(PL_WT_Q4_0, K, &rb), PL_OK);
        unsigned char *w = malloc(rb * NO), *qx = malloc(k->x_bytes(K));
        float *x = malloc((size_t)K * sizeof(float));
        cr_assert(w && qx && x);
        qt_weights(PL_WT_Q4_0, NO * K / 32, 1, 900 + li, w);
        for (int i = 0; i < K; i++)
            x[i] = pl_rand_uniform(910 + li, (uint64_t)i) - 0.5f;
        k->x_prep(x, K, qx);
        const void *xr[1] = {qx};
        for (int isa = 0; isa < PL_CPU_ISA_COUNT; isa++) {
            if (!pl_cpu_qdot_table((pl_cpu_isa_t)isa) || !k->block[isa])
                continue;
            float y[NO], *yr[1] = {y};
            k->block[isa](xr, 1, w, rb, NO, K, yr);
            for (int o = 0; o < NO; o++) {
                float want = ref(w + (size_t)o * rb, qx, K);
                cr_assert(memcmp(&want, &y[o], 4) == 0, "%s, %d blocks: row %d: %.9g, alone %.9g",
                          pl_cpu_isa_name((pl_cpu_isa_t)isa), K / 32, o, y[o], want);
            }
        }
        free(w);
        free(qx);
        free(x);
    }
}

/* Tests of the quantized CPU dots: every ISA this CPU has, every block type, rows of 1..9 blocks
 * (odd counts reach the SIMD kernels' tail), against double-precision sums of dequantized values. */
#include "backends/cpu/cpu_qdot.h"
#include "common/util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pl_dtype_t s_types[] = {PL_DT_Q8_0, PL_DT_Q4_0, PL_DT_Q4_K, PL_DT_Q5_K, PL_DT_Q6_K};

/* The activations as floats, read from the documented layouts (d, then the int8 quants). */
static void s_act_f32(pl_dtype_t wt, const void *qx, int64_t n, float *out)
{
    int blk = pl_dtype_block(wt);
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
        int blk = pl_dtype_block(s_types[t]);
        cr_assert_leq(pl_cpu_qact_bytes(s_types[t], N), sizeof(q));
        pl_cpu_qact_quantize(s_types[t], x, N, q);
        s_act_f32(s_types[t], q, N, y);
        for (int b = 0; b < N / blk; b++) {
            float amax = 0;
            for (int i = 0; i < blk; i++)
                amax = fmaxf(amax, fabsf(x[b * blk + i]));
            for (int i = 0; i < blk; i++)
                cr_assert_leq(fabsf(x[b * blk + i] - y[b * blk + i]), amax / 254 * 1.0001f,
                              "%s element %d", pl_dtype_name(s_types[t]), b * blk + i);
        }
    }
    cr_assert_eq(pl_cpu_qact_bytes(PL_DT_F32, N), 0);
}

/* Weights: quantized random values, or random bytes with finite scales (every bit pattern). */
static void s_weights(pl_dtype_t dt, int nb, int mode, uint64_t seed, unsigned char *w)
{
    int blk = pl_dtype_block(dt);
    size_t bb = pl_dtype_block_bytes(dt);
    if (mode == 0) {
        float *x = malloc((size_t)nb * blk * sizeof(float));
        for (int i = 0; i < nb * blk; i++)
            x[i] = (pl_rand_uniform(seed, (uint64_t)i) - 0.5f) * 0.2f;
        pl_dtype_from_f32(dt, x, (size_t)nb * blk, w);
        free(x);
        return;
    }
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        w[i] = (unsigned char)pl_rand_u64(seed, i);
    for (int b = 0; b < nb; b++) {
        size_t offs[2] = {0, 2};
        int n_offs = dt == PL_DT_Q4_K || dt == PL_DT_Q5_K ? 2 : 1;
        if (dt == PL_DT_Q6_K)
            offs[0] = 208;
        for (int k = 0; k < n_offs; k++) {
            uint16_t h = pl_f32_to_f16((pl_rand_uniform(seed + 9, (uint64_t)(2 * b + k)) - 0.5f) *
                                       0.01f);
            memcpy(w + (size_t)b * bb + offs[k], &h, 2);
        }
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
            pl_dtype_t dt = s_types[t];
            pl_cpu_qdot_fn fn = pl_cpu_qdot_fn_of(tab, dt);
            int blk = pl_dtype_block(dt);
            for (int nb = 1; nb <= MAXB; nb += 2) {
                for (int mode = 0; mode < 2; mode++) {
                    int64_t n = (int64_t)nb * blk;
                    uint64_t seed = 1000 * t + 10 * (uint64_t)nb + (uint64_t)mode;
                    s_weights(dt, nb, mode, seed, w + 1); /* misaligned row */
                    for (int64_t i = 0; i < n; i++)
                        x[i] = (pl_rand_uniform(seed + 5, (uint64_t)i) - 0.5f) * 3.0f;
                    pl_cpu_qact_quantize(dt, x, n, qx);
                    pl_dtype_to_f32(dt, w + 1, (size_t)n, wd);
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
                                  "%s %s %d blocks mode %d: %g, exact %g", pl_cpu_isa_name(isa),
                                  pl_dtype_name(dt), nb, mode, got, exact);
                    cr_assert_leq(fabs(got - vs_x), bound * 1.001 + 2e-6 * mag + 1e-9,
                                  "%s %s: %g vs f32 activations %g (bound %g)",
                                  pl_cpu_isa_name(isa), pl_dtype_name(dt), got, vs_x, bound);
                }
            }
        }
    }
    cr_assert_geq(n_isa, 1);
}

/* AVX-512 is picked only when cpuid reports it, AVX2 likewise; scalar is always there. */
Test(cpu_qdot, isa_follows_cpuid)
{
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    cr_assert_not_null(pl_cpu_qdot_table(PL_CPU_ISA_SCALAR));
    cr_assert_eq(pl_cpu_qdot_table(PL_CPU_ISA_AVX2) != NULL, avx2);
    cr_assert_eq(pl_cpu_qdot_table(PL_CPU_ISA_AVX512) != NULL, avx512);
    cr_assert_eq(pl_cpu_qdot_best_isa(),
                 avx512 ? PL_CPU_ISA_AVX512 : avx2 ? PL_CPU_ISA_AVX2 : PL_CPU_ISA_SCALAR);
    cr_assert_null(pl_cpu_qdot_fn_of(pl_cpu_qdot_best(), PL_DT_BF16));
    cr_log_info("quantized dots: %s", pl_cpu_isa_name(pl_cpu_qdot_best_isa()));
    /* the standalone kernels are the best table's */
    enum { N = 256 };
    static unsigned char w[N * 2], qx[N * 2];
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = pl_rand_uniform(8, (uint64_t)i) - 0.5f;
    float (*const standalone[])(const void *, const void *, int64_t) = {
        pl_q8_0_dot, pl_q4_0_dot, pl_q4_k_dot, pl_q5_k_dot, pl_q6_k_dot};
    for (size_t t = 0; t < sizeof(s_types) / sizeof(s_types[0]); t++) {
        pl_dtype_from_f32(s_types[t], x, N, w);
        pl_cpu_qact_quantize(s_types[t], x, N, qx);
        cr_assert(standalone[t](w, qx, N) ==
                  pl_cpu_qdot_fn_of(pl_cpu_qdot_best(), s_types[t])(w, qx, N));
    }
}

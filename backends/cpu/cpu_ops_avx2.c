/* The element-wise ops of cpu_ops.c with AVX2 and FMA (compiled with those flags and
 * -ffp-contract=off; cpu_ops.c calls in only when cpuid reports them): SwiGLU eight at a time. */
#if defined(__x86_64__)
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_vexp.h"

#include <immintrin.h>

/* pl_cpu_vexp in eight lanes, step for step. */
static inline __m256 s_vexp(__m256 x)
{
    x = _mm256_min_ps(x, _mm256_set1_ps(PL_CPU_VEXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(PL_CPU_VEXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(PL_CPU_VEXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-PL_CPU_VEXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-PL_CPU_VEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(PL_CPU_VEXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_CPU_VEXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_CPU_VEXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_CPU_VEXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_CPU_VEXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(PL_CPU_VEXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void pl_cpu_swiglu_avx2(float *gate, const float *up, size_t n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = s_vexp(_mm256_xor_ps(g, sign)); /* -g, as the scalar negation */
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++)
        gate[i] = pl_cpu_swiglu_one(gate[i], up[i]);
}
#endif

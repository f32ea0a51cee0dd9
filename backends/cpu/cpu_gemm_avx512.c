/* The float-type GEMM kernels with AVX-512 F/BW/VL, FMA and F16C (this file is compiled with
 * those flags; cpu_gemm.c calls into it only when cpuid reports them). */
#if defined(__x86_64__)
#include <immintrin.h>

typedef __m512 s_v16_t;

static inline s_v16_t s_v_ld(const float *p)
{
    return _mm512_loadu_ps(p);
}

static inline void s_v_st(float *p, s_v16_t a)
{
    _mm512_storeu_ps(p, a);
}

static inline s_v16_t s_v_fma(s_v16_t x, s_v16_t w, s_v16_t a)
{
    return _mm512_fmadd_ps(x, w, a);
}

static inline s_v16_t s_v_ldw_f32(const unsigned char *p)
{
    return _mm512_loadu_ps(p);
}

static inline s_v16_t s_v_ldw_f16(const unsigned char *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

static inline s_v16_t s_v_ldw_bf16(const unsigned char *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#define S_ISA avx512
#define S_TR 4
#define S_TO 4
#define S_TO1 8
#include "backends/cpu/cpu_gemm_tmpl.h"
#endif

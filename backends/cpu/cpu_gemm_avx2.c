/* The float-type GEMM kernels with AVX2, FMA and F16C (this file is compiled with those flags;
 * cpu_gemm.c calls into it only when cpuid reports them). */
#if defined(__x86_64__)
#include <immintrin.h>

typedef struct {
    __m256 lo, hi; /* lanes 0..7 and 8..15 */
} s_v16_t;

static inline s_v16_t s_v_ld(const float *p)
{
    return (s_v16_t){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}

static inline void s_v_st(float *p, s_v16_t a)
{
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}

static inline s_v16_t s_v_fma(s_v16_t x, s_v16_t w, s_v16_t a)
{
    return (s_v16_t){_mm256_fmadd_ps(x.lo, w.lo, a.lo), _mm256_fmadd_ps(x.hi, w.hi, a.hi)};
}

static inline s_v16_t s_v_ldw_f32(const unsigned char *p)
{
    return s_v_ld((const float *)(const void *)p); /* loadu: any alignment */
}

static inline s_v16_t s_v_ldw_f16(const unsigned char *p)
{
    return (s_v16_t){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)),
                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)))};
}

static inline __m256 s_bf16x8(const unsigned char *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline s_v16_t s_v_ldw_bf16(const unsigned char *p)
{
    return (s_v16_t){s_bf16x8(p), s_bf16x8(p + 16)};
}

#define S_ISA avx2
#define S_TR 2
#define S_TO 2
#define S_TO1 4
#include "backends/cpu/cpu_gemm_tmpl.h"

/* The two rows of a packed bf16 pair (cpu_pack.h): each word's low half shifted up, its high
 * half masked. */
static inline void s_v_ldw2_bf16(const unsigned char *p, s_v16_t *a, s_v16_t *b)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    __m256i m = _mm256_set1_epi32((int)0xffff0000u);
    a->lo = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
    a->hi = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
    b->lo = _mm256_castsi256_ps(_mm256_and_si256(lo, m));
    b->hi = _mm256_castsi256_ps(_mm256_and_si256(hi, m));
}

#define S_PR 1
#include "backends/cpu/cpu_pack_tmpl.h"
#endif

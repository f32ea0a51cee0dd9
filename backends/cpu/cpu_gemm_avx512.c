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
/* batch-1 decode: two streams far apart read bf16 at 85-90% of one core's read bandwidth on an
 * AVX-512 EPYC where 8 rows side by side (8 streams) read it at 67-71% (bench/README.md) */
#define S_PAIR_ONE 1
#define S_PAIR_PF 4096
#include "backends/cpu/cpu_gemm_tmpl.h"

/* The two rows of a packed bf16 pair (cpu_pack.h): each word's low half shifted up, its high
 * half masked. */
static inline void s_v_ldw2_bf16(const unsigned char *p, s_v16_t *a, s_v16_t *b)
{
    __m512i v = _mm512_loadu_si512(p);
    *a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

/* The four sums of lane vectors a[0..3] in s_finish's order, side by side: lanes j and j + 8
 * (two rows' halves per shuffle), then j and j + 4, then neighbours, then pairs of neighbours. */
#define S_HAVE_RED4
static inline void s_v_red4(s_v16_t a0, s_v16_t a1, s_v16_t a2, s_v16_t a3, float *s)
{
    __m512 ab =
        _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xee));
    __m512 cd =
        _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xee));
    __m512 u =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    __m512 t = _mm512_add_ps(u, _mm512_permute_ps(u, 0xb1));
    __m512 v = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4e));
    __m512 g =
        _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), v);
    _mm_storeu_ps(s, _mm512_castps512_ps128(g));
}

#define S_PR 6
#include "backends/cpu/cpu_pack_tmpl.h"
#endif

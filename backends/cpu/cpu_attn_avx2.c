/* One query row's attention over the KV cache with AVX2 and FMA (compiled with those flags;
 * cpu_ops.c calls into it only when cpuid reports them): decode's two small products per head. */
#if defined(__x86_64__)
#include "backends/cpu/cpu_ops.h"

#include <immintrin.h>

static inline float s_hsum(__m256 a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void pl_cpu_attn_scores_avx2(const float *q, const float *k, int kv_stride, int n, int hd,
                             float scale, float *scores)
{
    for (int j = 0; j < n; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int d = 0;
        for (; d + 16 <= hd; d += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kj + d), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(kj + d + 8), a1);
        }
        for (; d + 8 <= hd; d += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kj + d), a0);
        float s = s_hsum(_mm256_add_ps(a0, a1));
        for (; d < hd; d++)
            s += q[d] * kj[d];
        scores[j] = s * scale;
    }
}

void pl_cpu_attn_values_avx2(const float *p, const float *v, int kv_stride, int n, int hd,
                             float *out)
{
    int d0 = 0;
    for (; d0 + 32 <= hd; d0 += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < n; j++) {
            const float *vj = v + (size_t)j * kv_stride + d0;
            __m256 s = _mm256_broadcast_ss(p + j);
            a0 = _mm256_fmadd_ps(s, _mm256_loadu_ps(vj), a0);
            a1 = _mm256_fmadd_ps(s, _mm256_loadu_ps(vj + 8), a1);
            a2 = _mm256_fmadd_ps(s, _mm256_loadu_ps(vj + 16), a2);
            a3 = _mm256_fmadd_ps(s, _mm256_loadu_ps(vj + 24), a3);
        }
        _mm256_storeu_ps(out + d0, a0);
        _mm256_storeu_ps(out + d0 + 8, a1);
        _mm256_storeu_ps(out + d0 + 16, a2);
        _mm256_storeu_ps(out + d0 + 24, a3);
    }
    for (; d0 + 8 <= hd; d0 += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (int j = 0; j < n; j++)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
                                 _mm256_loadu_ps(v + (size_t)j * kv_stride + d0), a0);
        _mm256_storeu_ps(out + d0, a0);
    }
    for (; d0 < hd; d0++) {
        float a = 0.0f;
        for (int j = 0; j < n; j++)
            a += p[j] * v[(size_t)j * kv_stride + d0];
        out[d0] = a;
    }
}
#endif

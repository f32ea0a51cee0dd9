/* Rotary embedding: a per-forward cos/sin table computed in double (as the CPU backend does),
 * then one kernel per layer that rotates q in place and stores rotated k and plain v into the
 * KV cache at each token's slot and position. */
#include "backends/gpu/gpu_dev.cuh"

__global__ void s_rope_table(const double *inv_freq, int n_half, const int32_t *pos, int n,
                             float *cos_tab, float *sin_tab)
{
    size_t total = (size_t)n * n_half, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        size_t r = idx / n_half, i = idx % n_half;
        double a = (double)pos[r] * inv_freq[i];
        cos_tab[idx] = (float)cos(a);
        sin_tab[idx] = (float)sin(a);
    }
}

template <typename TK>
__global__ void s_rope_kv(float *qkv, int qkv_stride, int n_heads, int n_kv, int hd,
                          const float *cos_tab, const float *sin_tab, const int32_t *tok_slot,
                          const int32_t *tok_pos, TK *k_cache, TK *v_cache, int max_ctx)
{
    int t = blockIdx.x, n_half = hd / 2;
    float *row = qkv + (size_t)t * qkv_stride;
    const float *c = cos_tab + (size_t)t * n_half, *sn = sin_tab + (size_t)t * n_half;
    size_t kv_dim = (size_t)n_kv * hd;
    size_t base = ((size_t)tok_slot[t] * max_ctx + (size_t)tok_pos[t]) * kv_dim;
    int n_rot = (n_heads + n_kv) * n_half;

    for (int j = threadIdx.x; j < n_rot; j += blockDim.x) {
        int h = j / n_half, i = j % n_half;
        float *v = row + (size_t)h * hd;
        float a = v[i], b = v[i + n_half];
        float ra = a * c[i] - b * sn[i], rb = b * c[i] + a * sn[i];
        if (h < n_heads) {
            v[i] = ra;
            v[i + n_half] = rb;
        } else {
            size_t o = base + (size_t)(h - n_heads) * hd;
            k_cache[o + i] = pl_from_f32<TK>(ra);
            k_cache[o + i + n_half] = pl_from_f32<TK>(rb);
        }
    }
    const float *vsrc = row + (size_t)(n_heads + n_kv) * hd;
    for (size_t j = threadIdx.x; j < kv_dim; j += blockDim.x)
        v_cache[base + j] = pl_from_f32<TK>(vsrc[j]);
}

extern "C" cudaError_t pl_gpu_rope_table(const double *inv_freq, int n_half, const int32_t *pos,
                                         int n, float *cos_tab, float *sin_tab, cudaStream_t s)
{
    size_t total = (size_t)n * n_half;
    if (total == 0)
        return cudaSuccess;
    s_rope_table<<<pl_gpu_grid(total, 256), 256, 0, s>>>(inv_freq, n_half, pos, n, cos_tab,
                                                         sin_tab);
    return cudaGetLastError();
}

extern "C" cudaError_t pl_gpu_rope_kv(float *qkv, int n_tok, int qkv_stride, int n_heads, int n_kv,
                                      int hd, const float *cos_tab, const float *sin_tab,
                                      const int32_t *tok_slot, const int32_t *tok_pos,
                                      void *k_cache, void *v_cache, pl_dtype_t kv_dt, int max_ctx,
                                      cudaStream_t s)
{
    if (n_tok <= 0)
        return cudaSuccess;
    PL_GPU_DISPATCH(kv_dt, TK,
                    s_rope_kv<TK><<<n_tok, 256, 0, s>>>(qkv, qkv_stride, n_heads, n_kv, hd, cos_tab,
                                                        sin_tab, tok_slot, tok_pos, (TK *)k_cache,
                                                        (TK *)v_cache, max_ctx));
    return cudaGetLastError();
}

/* SwiGLU of the fused gate/up projection: out = silu(gate) * up, written in the GEMM input
 * dtype of the down projection. */
#include "backends/gpu/gpu_dev.cuh"

template <typename TO> __global__ void s_swiglu(const float *gu, int inter, size_t n, TO *out)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        size_t r = idx / inter, i = idx % inter;
        float g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        out[idx] = pl_from_f32<TO>(g / (1.0f + expf(-g)) * u);
    }
}

extern "C" cudaError_t pl_gpu_swiglu(const float *gu, int n_rows, int inter, void *out,
                                     pl_dtype_t out_dt, cudaStream_t s)
{
    size_t n = (size_t)n_rows * inter;
    if (n == 0)
        return cudaSuccess;
    PL_GPU_DISPATCH(out_dt, TO,
                    s_swiglu<TO><<<pl_gpu_grid(n, 256), 256, 0, s>>>(gu, inter, n, (TO *)out));
    return cudaGetLastError();
}

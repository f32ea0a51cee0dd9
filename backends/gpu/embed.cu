/* Token embedding lookup: one block per token copies its table row into the f32 residual
 * stream, converting from the model dtype. */
#include "backends/gpu/gpu_dev.cuh"

template <typename T>
__global__ void s_embed(const T *table, int hidden, const int32_t *ids, float *out)
{
    const T *src = table + (size_t)ids[blockIdx.x] * hidden;
    float *dst = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        dst[i] = pl_to_f32(src[i]);
}

extern "C" cudaError_t pl_gpu_embed(const void *table, pl_dtype_t dt, int hidden,
                                    const int32_t *ids, int n, float *out, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    PL_GPU_DISPATCH(dt, T, s_embed<T><<<n, 256, 0, s>>>((const T *)table, hidden, ids, out));
    return cudaGetLastError();
}

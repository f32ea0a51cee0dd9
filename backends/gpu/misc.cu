/* Small utility kernels: f32 to model-dtype casts (tests, benchmarks, calibration inputs) and
 * a streaming read used to measure device memory bandwidth. */
#include "backends/gpu/gpu_dev.cuh"

#define S_READ_BLOCKS 1024
#define S_READ_THREADS 256

template <typename TO> __global__ void s_cast(const float *x, size_t n, TO *out)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = pl_from_f32<TO>(x[i]);
}

__global__ void __launch_bounds__(S_READ_THREADS)
    s_read_sum(const float4 *x, size_t n4, float *sink)
{
    __shared__ float red[32];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        acc += v.x + v.y + v.z + v.w;
    }
    acc = pl_block_sum(acc, red);
    if (threadIdx.x == 0)
        sink[blockIdx.x] = acc;
}

extern "C" cudaError_t pl_gpu_cast(const float *x, size_t n, void *out, pl_dtype_t dt,
                                   cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    PL_GPU_DISPATCH(dt, TO, s_cast<TO><<<pl_gpu_grid(n, 256), 256, 0, s>>>(x, n, (TO *)out));
    return cudaGetLastError();
}

extern "C" int pl_gpu_read_blocks(void)
{
    return S_READ_BLOCKS;
}

extern "C" cudaError_t pl_gpu_read_sum(const float *x, size_t n, float *sink, cudaStream_t s)
{
    if (n % 4)
        return PL_GPU_ERR_INVALID;
    s_read_sum<<<S_READ_BLOCKS, S_READ_THREADS, 0, s>>>((const float4 *)x, n / 4, sink);
    return cudaGetLastError();
}

/* Device-side helpers shared by the kernels: element types and their f32 conversions, warp and
 * block reductions, and a dtype dispatch that instantiates one kernel per element type. */
#ifndef PL_BACKENDS_GPU_GPU_DEV_CUH
#define PL_BACKENDS_GPU_GPU_DEV_CUH

#include "backends/gpu/gpu_kernels.h"

#include <math.h>
#include <stdint.h>

/* bf16 as raw bits: the same layout as __nv_bfloat16 / hip_bfloat16 without either vendor's
 * class, so both compilers see identical code. */
struct pl_bf16 {
    uint16_t bits;
};

__device__ __forceinline__ float pl_to_f32(float x)
{
    return x;
}
__device__ __forceinline__ float pl_to_f32(__half x)
{
    return __half2float(x);
}
__device__ __forceinline__ float pl_to_f32(pl_bf16 x)
{
    return __uint_as_float((unsigned)x.bits << 16);
}

template <typename T> __device__ __forceinline__ T pl_from_f32(float x);
template <> __device__ __forceinline__ float pl_from_f32<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __half pl_from_f32<__half>(float x)
{
    return __float2half(x); /* round to nearest even */
}
template <> __device__ __forceinline__ pl_bf16 pl_from_f32<pl_bf16>(float x)
{
    unsigned u = __float_as_uint(x);
    pl_bf16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN stays quiet NaN, as common/util.c */
        b.bits = (uint16_t)((u >> 16) | 0x40);
        return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = (uint16_t)(u >> 16);
    return b;
}

__device__ __forceinline__ float pl_warp_sum(float v)
{
    for (int m = PL_WARP_SIZE / 2; m > 0; m >>= 1)
        v += PL_SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ double pl_warp_sum_f64(double v)
{
    for (int m = PL_WARP_SIZE / 2; m > 0; m >>= 1)
        v += PL_SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ float pl_warp_max(float v)
{
    for (int m = PL_WARP_SIZE / 2; m > 0; m >>= 1)
        v = fmaxf(v, PL_SHFL_XOR(v, m));
    return v;
}

/* Reductions over `width` consecutive lanes (a power of two dividing the warp size). */
__device__ __forceinline__ float pl_group_sum(float v, int width)
{
    for (int m = width / 2; m > 0; m >>= 1)
        v += PL_SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ float pl_group_max(float v, int width)
{
    for (int m = width / 2; m > 0; m >>= 1)
        v = fmaxf(v, PL_SHFL_XOR(v, m));
    return v;
}

/* Whole-block reductions; `red` is shared scratch of at least 32 floats. Every thread of the
 * block must call them; all get the result. */
__device__ __forceinline__ float pl_block_sum(float v, float *red)
{
    int lane = threadIdx.x % PL_WARP_SIZE, warp = threadIdx.x / PL_WARP_SIZE;
    int n_warps = (blockDim.x + PL_WARP_SIZE - 1) / PL_WARP_SIZE;
    v = pl_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous reduction */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < n_warps; w++)
        v += red[w];
    return v;
}

/* pl_block_sum in double; `red` is shared scratch of at least 32 doubles. */
__device__ __forceinline__ double pl_block_sum_f64(double v, double *red)
{
    int lane = threadIdx.x % PL_WARP_SIZE, warp = threadIdx.x / PL_WARP_SIZE;
    int n_warps = (blockDim.x + PL_WARP_SIZE - 1) / PL_WARP_SIZE;
    v = pl_warp_sum_f64(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = 0.0;
    for (int w = 0; w < n_warps; w++)
        v += red[w];
    return v;
}

__device__ __forceinline__ float pl_block_max(float v, float *red)
{
    int lane = threadIdx.x % PL_WARP_SIZE, warp = threadIdx.x / PL_WARP_SIZE;
    int n_warps = (blockDim.x + PL_WARP_SIZE - 1) / PL_WARP_SIZE;
    v = pl_warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = -INFINITY;
    for (int w = 0; w < n_warps; w++)
        v = fmaxf(v, red[w]);
    return v;
}

/* Run BODY with T bound to the element type of dtype DT; unknown dtypes give
 * cudaErrorInvalidValue-like failure through `err`. */
#if defined(__HIP_PLATFORM_AMD__)
#define PL_GPU_ERR_INVALID hipErrorInvalidValue
#else
#define PL_GPU_ERR_INVALID cudaErrorInvalidValue
#endif

#define PL_GPU_DISPATCH(DT, T, ...)                                                                \
    do {                                                                                           \
        switch (DT) {                                                                              \
        case PL_DT_F32: {                                                                          \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        case PL_DT_F16: {                                                                          \
            typedef __half T;                                                                      \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        case PL_DT_BF16: {                                                                         \
            typedef pl_bf16 T;                                                                     \
            __VA_ARGS__;                                                                           \
            break;                                                                                 \
        }                                                                                          \
        default:                                                                                   \
            return PL_GPU_ERR_INVALID;                                                             \
        }                                                                                          \
    } while (0)

/* Grid size for a grid-stride loop over n elements. */
static inline unsigned pl_gpu_grid(size_t n, unsigned threads)
{
    size_t g = (n + threads - 1) / threads;
    if (g > 65535u * 8u)
        g = 65535u * 8u;
    return g ? (unsigned)g : 1u;
}

#endif

/* RMSNorm of f32 rows, optionally gathering rows through an index map (the LM head normalises
 * only each sequence's last token), written in the GEMM input dtype. The sum of squares is
 * accumulated in double, as the CPU backend does: each square of a float is exact in double,
 * so only the summation order differs and the f32 scale almost always rounds to the CPU's. */
#include "backends/gpu/gpu_dev.cuh"

template <typename TO>
__global__ void s_rmsnorm(const float *x, const int32_t *rows, int dim, const float *w, float eps,
                          TO *out)
{
    __shared__ double red[32];
    int src = rows ? rows[blockIdx.x] : (int)blockIdx.x;
    const float *xr = x + (size_t)src * dim;
    TO *yr = out + (size_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += (double)xr[i] * xr[i];
    ss = pl_block_sum_f64(ss, red);
    float scale = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = pl_from_f32<TO>((xr[i] * scale) * w[i]);
}

extern "C" cudaError_t pl_gpu_rmsnorm(const float *x, const int32_t *rows, int n_rows, int dim,
                                      const float *w, float eps, void *out, pl_dtype_t out_dt,
                                      cudaStream_t s)
{
    if (n_rows <= 0)
        return cudaSuccess;
    unsigned threads = dim >= 4096 ? 1024 : dim >= 1024 ? 512 : 256;
    PL_GPU_DISPATCH(out_dt, TO,
                    s_rmsnorm<TO><<<n_rows, threads, 0, s>>>(x, rows, dim, w, eps, (TO *)out));
    return cudaGetLastError();
}

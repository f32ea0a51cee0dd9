/* Built-in GEMM y = x W^T (+ y) for builds without a vendor BLAS (HIP here) and as a fallback:
 * a warp-per-output GEMV for few rows (decode, memory-bound) and a 64x64 shared-memory tiled
 * kernel otherwise. x is f32, W any model dtype, accumulation in f32. */
#include "backends/gpu/gpu_dev.cuh"

#define S_BM 64
#define S_BN 64
#define S_BK 16
#define S_GEMV_ROWS 8 /* largest m handled by the GEMV path */
#define S_GEMV_THREADS PL_GPU_GEMV_THREADS

template <typename TW>
__global__ void __launch_bounds__(256)
    s_gemm_tiled(const float *x, int m, int k, const TW *w, int n, float *y, int accumulate)
{
    __shared__ float xs[S_BK][S_BM + 4];
    __shared__ float ws[S_BK][S_BN + 4];
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int m0 = blockIdx.y * S_BM, n0 = blockIdx.x * S_BN;
    float c[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            c[i][j] = 0.0f;

    for (int k0 = 0; k0 < k; k0 += S_BK) {
        for (int i = tid; i < S_BM * S_BK; i += 256) {
            int r = i / S_BK, kk = i % S_BK, gr = m0 + r, gk = k0 + kk;
            xs[kk][r] = (gr < m && gk < k) ? x[(size_t)gr * k + gk] : 0.0f;
            int gn = n0 + r;
            ws[kk][r] = (gn < n && gk < k) ? pl_to_f32(w[(size_t)gn * k + gk]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < S_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                av[i] = xs[kk][ty + 16 * i];
                bv[i] = ws[kk][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    c[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = m0 + ty + 16 * i;
        if (row >= m)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int col = n0 + tx + 16 * j;
            if (col < n) {
                float *dst = y + (size_t)row * n + col;
                *dst = accumulate ? *dst + c[i][j] : c[i][j];
            }
        }
    }
}

/* One output column `col` of the GEMV by one warp; each lane reads 16-byte chunks of the weight
 * row wr (vectorised when VEC is set: k is a multiple of the chunk) and multiplies them into
 * every x row. */
template <typename TW, bool VEC>
__device__ __forceinline__ void s_gemv_col(const float *x, int m, int k, const TW *wr, int n,
                                           int col, float *y, int accumulate)
{
    const int vn = 16 / (int)sizeof(TW);
    int lane = threadIdx.x % PL_WARP_SIZE;
    float sum[S_GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < S_GEMV_ROWS; r++)
        sum[r] = 0.0f;

    if (VEC) {
        for (int kk = lane * vn; kk < k; kk += PL_WARP_SIZE * vn) {
            uint4 raw = *(const uint4 *)(wr + kk);
            const TW *e = (const TW *)&raw;
            float wv[16 / sizeof(TW)];
#pragma unroll
            for (int i = 0; i < vn; i++)
                wv[i] = pl_to_f32(e[i]);
#pragma unroll
            for (int r = 0; r < S_GEMV_ROWS; r++) {
                if (r < m) {
                    const float *xr = x + (size_t)r * k + kk;
#pragma unroll
                    for (int i = 0; i < vn; i++)
                        sum[r] += wv[i] * xr[i];
                }
            }
        }
    } else {
        for (int kk = lane; kk < k; kk += PL_WARP_SIZE) {
            float wv = pl_to_f32(wr[kk]);
#pragma unroll
            for (int r = 0; r < S_GEMV_ROWS; r++)
                if (r < m)
                    sum[r] += wv * x[(size_t)r * k + kk];
        }
    }
#pragma unroll
    for (int r = 0; r < S_GEMV_ROWS; r++) {
        if (r < m) {
            float v = pl_warp_sum(sum[r]);
            if (lane == 0) {
                float *dst = y + (size_t)r * n + col;
                *dst = accumulate ? *dst + v : v;
            }
        }
    }
}

/* Block b owns output columns [b * cols, (b + 1) * cols), one warp each: the host sizes cols for
 * the device's warp width (8 for 32 lanes, 4 for 64, so wave32 parts get no idle blocks), and
 * where that guess is off the block's warps loop over its columns, so the result never
 * depends on it. */
template <typename TW, bool VEC>
__global__ void __launch_bounds__(S_GEMV_THREADS)
    s_gemv(const float *x, int m, int k, const TW *w, int n, float *y, int accumulate, int cols)
{
    int n_warps = blockDim.x / PL_WARP_SIZE;
    int end = min((int)(blockIdx.x + 1) * cols, n);
    /* the bounds are the same for every lane of a warp: whole warps iterate together */
    for (int col = blockIdx.x * cols + threadIdx.x / PL_WARP_SIZE; col < end; col += n_warps)
        s_gemv_col<TW, VEC>(x, m, k, w + (size_t)col * k, n, col, y, accumulate);
}

template <typename TW>
static cudaError_t s_launch(const float *x, int m, int k, const TW *w, int n, float *y,
                            bool accumulate, int cols, cudaStream_t s)
{
    if (m <= S_GEMV_ROWS) {
        /* the host pass cannot see the device's warp width (AMD: 32 or 64 per target), so the
         * caller says how many columns a block covers */
        unsigned blocks = (unsigned)((n + cols - 1) / cols);
        bool vec = k % (16 / (int)sizeof(TW)) == 0;
        if (vec)
            s_gemv<TW, true><<<blocks, S_GEMV_THREADS, 0, s>>>(x, m, k, w, n, y, accumulate, cols);
        else
            s_gemv<TW, false><<<blocks, S_GEMV_THREADS, 0, s>>>(x, m, k, w, n, y, accumulate, cols);
    } else {
        if ((m + S_BM - 1) / S_BM > 65535)
            return PL_GPU_ERR_INVALID; /* grid y limit: the stage check caps max_tokens */
        dim3 grid((unsigned)((n + S_BN - 1) / S_BN), (unsigned)((m + S_BM - 1) / S_BM));
        s_gemm_tiled<TW><<<grid, 256, 0, s>>>(x, m, k, w, n, y, accumulate);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t pl_gpu_gemm_builtin(const float *x, int m, int k, const void *w,
                                           pl_dtype_t w_dt, int n, float *y, bool accumulate,
                                           int gemv_cols, cudaStream_t s)
{
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    if (k <= 0 || (size_t)n * (size_t)k == 0 || gemv_cols <= 0)
        return PL_GPU_ERR_INVALID;
    PL_GPU_DISPATCH(w_dt, TW,
                    return s_launch<TW>(x, m, k, (const TW *)w, n, y, accumulate, gemv_cols, s));
    return cudaSuccess;
}

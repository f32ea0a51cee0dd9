/* Flash-decoding: the last query row of each sequence attends to its whole KV history split
 * across blocks; each block keeps an online softmax (max, sum, accumulator) over its chunk and a
 * second kernel merges the chunks. Grid shapes depend only on (n_seq, splits), so the launch can
 * be captured once in a graph while positions change step to step. */
#include "backends/gpu/gpu_dev.cuh"

#define S_THREADS 128
#define S_TILE 64 /* key positions scored per pass */

template <typename TK>
__global__ void __launch_bounds__(S_THREADS)
    s_decode_partial(pl_gpu_attn_args_t a, int chunk, float *work)
{
    __shared__ float qs[PL_GPU_MAX_HEAD_DIM];
    __shared__ float ps[S_TILE];
    __shared__ float red[32];
    int h = blockIdx.x, sp = blockIdx.y, si = blockIdx.z, splits = gridDim.y;
    int hd = a.head_dim, tid = threadIdx.x;
    int n_keys = a.seq_pos0[si] + a.seq_ntok[si];
    int k0 = sp * chunk, k1 = min(k0 + chunk, n_keys);
    float *wout = work + (((size_t)si * a.n_heads + h) * splits + sp) * (size_t)(hd + 2);

    if (k0 >= k1) { /* nothing here: an empty partial that the merge skips */
        if (tid == 0) {
            wout[0] = -INFINITY;
            wout[1] = 0.0f;
        }
        return;
    }

    int row = a.seq_off[si] + a.seq_ntok[si] - 1;
    const float *q = a.q + (size_t)row * a.q_stride + (size_t)h * hd;
    for (int d = tid; d < hd; d += blockDim.x)
        qs[d] = q[d];

    size_t kv_dim = (size_t)a.n_kv * hd;
    int kvh = h / (a.n_heads / a.n_kv);
    size_t slot_base = (size_t)a.seq_slot[si] * a.max_ctx * kv_dim + (size_t)kvh * hd;
    const TK *kb = (const TK *)a.k_cache + slot_base;
    const TK *vb = (const TK *)a.v_cache + slot_base;

    int lane = tid % PL_WARP_SIZE, warp = tid / PL_WARP_SIZE;
    int n_warps = blockDim.x / PL_WARP_SIZE;
    float m = -INFINITY, l = 0.0f;
    float acc[PL_GPU_MAX_HEAD_DIM / S_THREADS] = {0.0f};
    __syncthreads();

    for (int t0 = k0; t0 < k1; t0 += S_TILE) {
        int nt = min(S_TILE, k1 - t0);
        for (int j = warp; j < nt; j += n_warps) {
            const TK *kr = kb + (size_t)(t0 + j) * kv_dim;
            float dot = 0.0f;
            for (int d = lane; d < hd; d += PL_WARP_SIZE)
                dot += qs[d] * pl_to_f32(kr[d]);
            dot = pl_warp_sum(dot);
            if (lane == 0)
                ps[j] = dot * a.scale;
        }
        __syncthreads();
        float tmax = -INFINITY;
        for (int j = tid; j < nt; j += blockDim.x)
            tmax = fmaxf(tmax, ps[j]);
        tmax = pl_block_max(tmax, red);
        float m_new = fmaxf(m, tmax);
        float alpha = expf(m - m_new); /* 0 on the first tile, m = -inf */
        float part = 0.0f;
        for (int j = tid; j < nt; j += blockDim.x) {
            float e = expf(ps[j] - m_new);
            ps[j] = e;
            part += e;
        }
        float tsum = pl_block_sum(part, red); /* its barriers also publish ps */
        l = l * alpha + tsum;
        m = m_new;
#pragma unroll
        for (int k = 0; k < PL_GPU_MAX_HEAD_DIM / S_THREADS; k++) {
            int d = tid + k * S_THREADS;
            if (d < hd) {
                float o = 0.0f;
                for (int j = 0; j < nt; j++)
                    o += ps[j] * pl_to_f32(vb[(size_t)(t0 + j) * kv_dim + d]);
                acc[k] = acc[k] * alpha + o;
            }
        }
        __syncthreads(); /* ps is rewritten by the next tile */
    }

    if (tid == 0) {
        wout[0] = m;
        wout[1] = l;
    }
#pragma unroll
    for (int k = 0; k < PL_GPU_MAX_HEAD_DIM / S_THREADS; k++) {
        int d = tid + k * S_THREADS;
        if (d < hd)
            wout[2 + d] = acc[k];
    }
}

template <typename TO>
__global__ void s_decode_merge(pl_gpu_attn_args_t a, int splits, const float *work)
{
    int h = blockIdx.x, si = blockIdx.y, hd = a.head_dim;
    const float *w = work + ((size_t)si * a.n_heads + h) * splits * (size_t)(hd + 2);
    float mx = -INFINITY;
    for (int sp = 0; sp < splits; sp++)
        if (w[sp * (hd + 2) + 1] > 0.0f)
            mx = fmaxf(mx, w[sp * (hd + 2)]);
    float sum = 0.0f;
    for (int sp = 0; sp < splits; sp++) {
        const float *p = w + sp * (hd + 2);
        if (p[1] > 0.0f)
            sum += expf(p[0] - mx) * p[1];
    }
    int row = a.seq_off[si] + a.seq_ntok[si] - 1;
    TO *out = (TO *)a.out + (size_t)row * a.out_stride + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int sp = 0; sp < splits; sp++) {
            const float *p = w + sp * (hd + 2);
            if (p[1] > 0.0f)
                o += expf(p[0] - mx) * p[2 + d];
        }
        out[d] = pl_from_f32<TO>(o / sum);
    }
}

extern "C" cudaError_t pl_gpu_attn_decode(const pl_gpu_attn_args_t *a, int splits, int chunk,
                                          float *work, cudaStream_t s)
{
    if (a->n_seq <= 0)
        return cudaSuccess;
    if (a->head_dim > PL_GPU_MAX_HEAD_DIM || splits <= 0 || chunk <= 0)
        return PL_GPU_ERR_INVALID;
    if (splits > 65535 || a->n_seq > 65535 || a->n_heads > 65535)
        return PL_GPU_ERR_INVALID; /* grid y/z limits: pl_gpu_stage_check keeps stages inside */
    dim3 grid((unsigned)a->n_heads, (unsigned)splits, (unsigned)a->n_seq);
    PL_GPU_DISPATCH(a->kv_dt, TK, s_decode_partial<TK><<<grid, S_THREADS, 0, s>>>(*a, chunk, work));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    dim3 grid2((unsigned)a->n_heads, (unsigned)a->n_seq);
    PL_GPU_DISPATCH(a->out_dt, TO, s_decode_merge<TO><<<grid2, 128, 0, s>>>(*a, splits, work));
    return cudaGetLastError();
}

/* Causal attention for many query rows (prefill, or batches that mix prefill and decode): a
 * block holds a tile of query rows of one head and streams KV tiles through shared memory with an
 * online softmax, so the score matrix is never materialised beyond one tile. */
#include "backends/gpu/gpu_dev.cuh"

#define S_THREADS 128
#define S_MAX_DIMS 16 /* head dims accumulated per thread: head_dim / (S_THREADS / rows) */

/* Tile shape for a head dimension: rows of queries, keys per tile. */
static inline void s_tile(int hd, int *bq, int *bk)
{
    *bq = hd <= 128 ? 16 : 8;
    *bk = hd <= 128 ? 32 : 16;
}

static inline size_t s_smem_floats(int hd, int bq, int bk)
{
    return (size_t)bq * hd + (size_t)bk * (hd + 1) + (size_t)bk * hd + (size_t)bq * bk;
}

template <typename TK, typename TO>
__global__ void __launch_bounds__(S_THREADS) s_prefill(pl_gpu_attn_args_t a, int bq, int bk)
{
    extern __shared__ float sm[];
    int qt = blockIdx.x, h = blockIdx.y, si = blockIdx.z;
    int hd = a.head_dim, tid = threadIdx.x;
    int ntok = a.seq_ntok[si];
    int q_first = qt * bq;
    if (q_first >= ntok)
        return; /* uniform over the block */

    float *qs = sm;                         /* [bq][hd] */
    float *ks = qs + (size_t)bq * hd;       /* [bk][hd + 1] */
    float *vs = ks + (size_t)bk * (hd + 1); /* [bk][hd] */
    float *ps = vs + (size_t)bk * hd;       /* [bq][bk] */

    int tpr = S_THREADS / bq; /* threads per query row */
    int r = tid / tpr, lr = tid % tpr;
    int pos0 = a.seq_pos0[si], off = a.seq_off[si];
    int n_rows = min(bq, ntok - q_first);
    bool row_ok = r < n_rows;
    int qpos = pos0 + q_first + r;
    int last_pos = pos0 + q_first + n_rows - 1;

    for (int i = tid; i < bq * hd; i += S_THREADS) {
        int rr = i / hd, d = i % hd;
        qs[i] = rr < n_rows ? a.q[(size_t)(off + q_first + rr) * a.q_stride + (size_t)h * hd + d]
                            : 0.0f;
    }

    size_t kv_dim = (size_t)a.n_kv * hd;
    int kvh = h / (a.n_heads / a.n_kv);
    size_t slot_base = (size_t)a.seq_slot[si] * a.max_ctx * kv_dim + (size_t)kvh * hd;
    const TK *kb = (const TK *)a.k_cache + slot_base;
    const TK *vb = (const TK *)a.v_cache + slot_base;

    float m = -INFINITY, l = 0.0f;
    float acc[S_MAX_DIMS];
#pragma unroll
    for (int j = 0; j < S_MAX_DIMS; j++)
        acc[j] = 0.0f;

    for (int kt0 = 0; kt0 <= last_pos; kt0 += bk) {
        int nk = min(bk, last_pos + 1 - kt0);
        __syncthreads(); /* previous tile fully consumed (and qs loaded, first time) */
        for (int i = tid; i < bk * hd; i += S_THREADS) {
            int k = i / hd, d = i % hd;
            float kv = 0.0f, vv = 0.0f;
            if (k < nk) {
                kv = pl_to_f32(kb[(size_t)(kt0 + k) * kv_dim + d]);
                vv = pl_to_f32(vb[(size_t)(kt0 + k) * kv_dim + d]);
            }
            ks[k * (hd + 1) + d] = kv;
            vs[k * hd + d] = vv;
        }
        __syncthreads();

        float tmax = -INFINITY;
        for (int k = lr; k < bk; k += tpr) {
            float sc = -INFINITY;
            if (row_ok && k < nk && kt0 + k <= qpos) {
                float dot = 0.0f;
                for (int d = 0; d < hd; d++)
                    dot += qs[r * hd + d] * ks[k * (hd + 1) + d];
                sc = dot * a.scale;
            }
            ps[r * bk + k] = sc;
            tmax = fmaxf(tmax, sc);
        }
        tmax = pl_group_max(tmax, tpr);
        float m_new = fmaxf(m, tmax);
        /* rows past the sequence (or with no visible key yet) keep m = -inf and add nothing */
        float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
        float part = 0.0f;
        for (int k = lr; k < bk; k += tpr) {
            float sc = ps[r * bk + k];
            float p = sc == -INFINITY ? 0.0f : expf(sc - m_new);
            ps[r * bk + k] = p;
            part += p;
        }
        part = pl_group_sum(part, tpr);
        l = l * alpha + part;
        m = m_new;
        __syncthreads(); /* ps of the row, written by its tpr threads, is read by all of them */

#pragma unroll
        for (int j = 0; j < S_MAX_DIMS; j++) {
            int d = lr + j * tpr;
            if (d < hd) {
                float o = 0.0f;
                for (int k = 0; k < nk; k++)
                    o += ps[r * bk + k] * vs[k * hd + d];
                acc[j] = acc[j] * alpha + o;
            }
        }
    }

    if (!row_ok)
        return;
    TO *out = (TO *)a.out + (size_t)(off + q_first + r) * a.out_stride + (size_t)h * hd;
    float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < S_MAX_DIMS; j++) {
        int d = lr + j * tpr;
        if (d < hd)
            out[d] = pl_from_f32<TO>(acc[j] * inv);
    }
}

template <typename TK, typename TO>
static cudaError_t s_launch(const pl_gpu_attn_args_t *a, int max_ntok, cudaStream_t s)
{
    int bq, bk;
    s_tile(a->head_dim, &bq, &bk);
    size_t smem = s_smem_floats(a->head_dim, bq, bk) * sizeof(float);
    dim3 grid((unsigned)((max_ntok + bq - 1) / bq), (unsigned)a->n_heads, (unsigned)a->n_seq);
    s_prefill<TK, TO><<<grid, S_THREADS, smem, s>>>(*a, bq, bk);
    return cudaGetLastError();
}

template <typename TK>
static cudaError_t s_launch_out(const pl_gpu_attn_args_t *a, int max_ntok, cudaStream_t s)
{
    PL_GPU_DISPATCH(a->out_dt, TO, return s_launch<TK, TO>(a, max_ntok, s));
    return cudaSuccess;
}

extern "C" cudaError_t pl_gpu_attn_prefill(const pl_gpu_attn_args_t *a, int max_ntok,
                                           cudaStream_t s)
{
    if (a->n_seq <= 0 || max_ntok <= 0)
        return cudaSuccess;
    if (a->head_dim > PL_GPU_MAX_HEAD_DIM || a->head_dim % 2)
        return PL_GPU_ERR_INVALID;
    if (a->n_seq > 65535 || a->n_heads > 65535)
        return PL_GPU_ERR_INVALID; /* grid y/z limits: pl_gpu_stage_check keeps stages inside */
    PL_GPU_DISPATCH(a->kv_dt, TK, return s_launch_out<TK>(a, max_ntok, s));
    return cudaSuccess;
}

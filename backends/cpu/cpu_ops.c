/* CPU kernels of a Llama decoder in f32: the element-wise ops, RoPE, attention over the KV cache
 * and the OpenBLAS matrix product (the batch-invariant one is in cpu_gemm.c). */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_vexp.h"

#include "common/util.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void pl_cpu_rmsnorm(const float *x, const float *w, int n_rows, int dim, float eps, float *out)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim;
        float *yr = out + (size_t)r * dim;
        /* eight sums side by side (a float square is exact in double, so the order of these
         * is the only rounding there is, and it is fixed), not one chain of dim dependent adds */
        double a[8] = {0};
        int i = 0;
        for (; i + 8 <= dim; i += 8)
            for (int j = 0; j < 8; j++)
                a[j] += (double)xr[i + j] * xr[i + j];
        for (int j = 0; i < dim; i++, j++)
            a[j] += (double)xr[i] * xr[i];
        double ss = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        float scale = (float)(1.0 / sqrt(ss / dim + (double)eps));
        for (i = 0; i < dim; i++)
            yr[i] = (xr[i] * scale) * w[i];
    }
}

void pl_cpu_matmul(const float *x, int n_rows, int in_dim, const float *w, int out_dim, float *y)
{
    if (n_rows <= 0 || out_dim <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_rows, out_dim, in_dim, 1.0f, x, in_dim,
                w, in_dim, 0.0f, y, out_dim);
}

void pl_cpu_rope_table(const double *inv_freq, int half, const int *pos, int n, float *cos_tab,
                       float *sin_tab)
{
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < half; i++) {
            double a = (double)pos[r] * inv_freq[i];
            cos_tab[(size_t)r * half + i] = (float)cos(a);
            sin_tab[(size_t)r * half + i] = (float)sin(a);
        }
    }
}

void pl_cpu_rope_apply(float *x, int n_rows, int row_stride, int n_heads, int head_dim,
                       const float *cos_tab, const float *sin_tab)
{
    int half = head_dim / 2;
    for (int r = 0; r < n_rows; r++) {
        const float *c = cos_tab + (size_t)r * half, *s = sin_tab + (size_t)r * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)r * row_stride + (size_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

/* Softmax of the first n_valid of n columns in place; the rest become exact zeros so the
 * following GEMM adds nothing for them. */
static void s_softmax_row(float *row, int n_valid, int n)
{
    float mx = row[0];
    for (int j = 1; j < n_valid; j++)
        if (row[j] > mx)
            mx = row[j];
    float sum = 0.0f;
    for (int j = 0; j < n_valid; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n_valid; j++)
        row[j] *= inv;
    for (int j = n_valid; j < n; j++)
        row[j] = 0.0f;
}

void pl_cpu_attn_scores_scalar(const float *q, const float *k, int kv_stride, int n, int hd,
                               float scale, float *scores)
{
    for (int j = 0; j < n; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        float s = 0.0f;
        for (int d = 0; d < hd; d++)
            s += q[d] * kj[d];
        scores[j] = s * scale;
    }
}

void pl_cpu_attn_values_scalar(const float *p, const float *v, int kv_stride, int n, int hd,
                               float *out)
{
    for (int d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hd; d++)
            out[d] += p[j] * v[(size_t)j * kv_stride + d];
}

/* One query row (a decode step): two OpenBLAS calls per head cost more than the products
 * (a quarter of a small model's step, profiled), so plain kernels do it. */
void pl_cpu_attention_heads(const float *q, int pos, const float *k_cache, const float *v_cache,
                            int n_heads, int n_kv, int head_dim, int h0, int h1, float *scores,
                            float *out)
{
    int kv_stride = n_kv * head_dim, group = n_heads / n_kv, n = pos + 1;
    float scale = 1.0f / sqrtf((float)head_dim);
#if defined(__x86_64__)
    bool avx2 = pl_cpu_isa() >= PL_CPU_ISA_AVX2;
#else
    bool avx2 = false;
#endif
    for (int h = h0; h < h1; h++) {
        const float *kh = k_cache + (size_t)(h / group) * head_dim;
        const float *vh = v_cache + (size_t)(h / group) * head_dim;
        const float *qh = q + (size_t)h * head_dim;
        float *oh = out + (size_t)h * head_dim;
        if (avx2)
            pl_cpu_attn_scores_avx2(qh, kh, kv_stride, n, head_dim, scale, scores);
        else
            pl_cpu_attn_scores_scalar(qh, kh, kv_stride, n, head_dim, scale, scores);
        s_softmax_row(scores, n, n);
        if (avx2)
            pl_cpu_attn_values_avx2(scores, vh, kv_stride, n, head_dim, oh);
        else
            pl_cpu_attn_values_scalar(scores, vh, kv_stride, n, head_dim, oh);
    }
}

typedef struct {
    const pl_cpu_att_row_t *rows;
    int n_heads, n_kv, head_dim, units, n_chunks;
    float *scores;
    size_t scores_stride;
} s_dec_job_t;

static void s_dec_chunk(void *arg, int c)
{
    const s_dec_job_t *j = arg;
    int u = (int)((int64_t)j->units * c / j->n_chunks);
    int u_end = (int)((int64_t)j->units * (c + 1) / j->n_chunks);
    while (u < u_end) {
        const pl_cpu_att_row_t *r = &j->rows[u / j->n_heads];
        int h0 = u % j->n_heads, h1 = PL_MIN(j->n_heads, h0 + (u_end - u));
        pl_cpu_attention_heads(r->q, r->pos, r->k, r->v, j->n_heads, j->n_kv, j->head_dim, h0, h1,
                               j->scores + (size_t)c * j->scores_stride, r->out);
        u += h1 - h0;
    }
}

void pl_cpu_attention_decode(pl_cpu_pool_t *pool, const pl_cpu_att_row_t *rows, int n,
                             int n_heads, int n_kv, int head_dim, float *scores,
                             size_t scores_stride)
{
    s_dec_job_t j = {.rows = rows,
                     .n_heads = n_heads,
                     .n_kv = n_kv,
                     .head_dim = head_dim,
                     .units = n * n_heads,
                     .scores = scores,
                     .scores_stride = scores_stride};
    int64_t work = 0;
    for (int i = 0; i < n; i++)
        work += (int64_t)n_heads * (rows[i].pos + 1) * head_dim;
    if (j.units <= 0)
        return;
    j.n_chunks = PL_MIN(j.units, PL_CPU_ATT_ROWS);
    /* under ~64 K multiply-adds (a few microseconds) a worker's share is shorter than its wake */
    pl_cpu_pool_chunks(work < (1 << 16) ? NULL : pool, j.n_chunks, s_dec_chunk, &j);
}

/* Heads h0..h1-1 of one sequence's multi-token attention: per head, blocks of PL_CPU_ATT_ROWS
 * queries scored and summed by OpenBLAS (its own single-threaded call on each block). */
static void s_attention_gemm(const float *q, int n_tok, int pos0, const float *k_cache,
                             const float *v_cache, int n_heads, int n_kv, int head_dim, int h0,
                             int h1, float *scores, float *out)
{
    int q_stride = n_heads * head_dim, kv_stride = n_kv * head_dim, group = n_heads / n_kv;
    float scale = 1.0f / sqrtf((float)head_dim);

    for (int h = h0; h < h1; h++) {
        const float *kh = k_cache + (size_t)(h / group) * head_dim;
        const float *vh = v_cache + (size_t)(h / group) * head_dim;
        for (int r0 = 0; r0 < n_tok; r0 += PL_CPU_ATT_ROWS) {
            int rows = PL_MIN(PL_CPU_ATT_ROWS, n_tok - r0);
            int cols = pos0 + r0 + rows; /* the last row's position + 1 */
            const float *qh = q + (size_t)r0 * q_stride + (size_t)h * head_dim;
            float *oh = out + (size_t)r0 * q_stride + (size_t)h * head_dim;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, head_dim, scale, qh,
                        q_stride, kh, kv_stride, 0.0f, scores, cols);
            for (int r = 0; r < rows; r++)
                s_softmax_row(scores + (size_t)r * cols, pos0 + r0 + r + 1, cols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, cols, 1.0f,
                        scores, cols, vh, kv_stride, 0.0f, oh, q_stride);
        }
    }
}

void pl_cpu_attention(const float *q, int n_tok, int pos0, const float *k_cache,
                      const float *v_cache, int n_heads, int n_kv, int head_dim, float *scores,
                      float *out)
{
    if (n_tok == 1)
        pl_cpu_attention_heads(q, pos0, k_cache, v_cache, n_heads, n_kv, head_dim, 0, n_heads,
                               scores, out);
    else
        s_attention_gemm(q, n_tok, pos0, k_cache, v_cache, n_heads, n_kv, head_dim, 0, n_heads,
                         scores, out);
}

typedef struct {
    const float *q, *k, *v;
    float *scores, *out;
    int n_tok, pos0, n_heads, n_kv, head_dim;
    int next; /* atomic: the next head to take */
} s_seq_att_t;

static void s_seq_att_part(void *arg, int part, int n_parts)
{
    s_seq_att_t *j = arg;
    float *scores = j->scores + (size_t)part * PL_CPU_ATT_ROWS * (size_t)(j->pos0 + j->n_tok);
    int h;
    (void)n_parts;
    while ((h = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_heads)
        s_attention_gemm(j->q, j->n_tok, j->pos0, j->k, j->v, j->n_heads, j->n_kv, j->head_dim, h,
                         h + 1, scores, j->out);
}

void pl_cpu_attention_seq(pl_cpu_pool_t *pool, const float *q, int n_tok, int pos0,
                          const float *k_cache, const float *v_cache, int n_heads, int n_kv,
                          int head_dim, float *scores, float *out)
{
    s_seq_att_t j = {.q = q,
                     .k = k_cache,
                     .v = v_cache,
                     .scores = scores,
                     .out = out,
                     .n_tok = n_tok,
                     .pos0 = pos0,
                     .n_heads = n_heads,
                     .n_kv = n_kv,
                     .head_dim = head_dim};
    if (n_tok == 1) {
        pl_cpu_attention(q, n_tok, pos0, k_cache, v_cache, n_heads, n_kv, head_dim, scores, out);
        return;
    }
    pl_cpu_pool_run(pool, s_seq_att_part, &j);
}

void pl_cpu_swiglu_scalar(float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gate[i] = pl_cpu_swiglu_one(gate[i], up[i]);
}

void pl_cpu_swiglu(float *gate, const float *up, size_t n)
{
#if defined(__x86_64__)
    if (pl_cpu_isa() >= PL_CPU_ISA_AVX2) {
        pl_cpu_swiglu_avx2(gate, up, n);
        return;
    }
#endif
    pl_cpu_swiglu_scalar(gate, up, n);
}

void pl_cpu_add_bias(float *y, const float *bias, int n_rows, int dim)
{
    for (int r = 0; r < n_rows; r++)
        pl_cpu_add(y + (size_t)r * dim, bias, (size_t)dim);
}

void pl_cpu_add(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* Backward of the element-wise ops, RoPE, the matrix products, the embedding and cross-entropy.
 * Attention's backward is in cpu_backward_attn.c. */
#include "backends/cpu/cpu_backward.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static float s_rms_scale(const float *x, int dim, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < dim; i++)
        ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / dim + (double)eps));
}

void pl_cpu_rmsnorm_bwd_input(const float *x, const float *w, const float *dy, int n_rows, int dim,
                              float eps, float *dx)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        float *dxr = dx + (size_t)r * dim;
        float rs = s_rms_scale(xr, dim, eps);
        double dot = 0.0; /* sum of dxhat * xhat */
        for (int i = 0; i < dim; i++)
            dot += (double)dyr[i] * w[i] * xr[i] * rs;
        float m = (float)(dot / dim);
        for (int i = 0; i < dim; i++)
            dxr[i] += rs * (dyr[i] * w[i] - xr[i] * rs * m);
    }
}

void pl_cpu_rmsnorm_bwd_weight(const float *x, const float *dy, int n_rows, int dim, float eps,
                               float *dw)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
        float rs = s_rms_scale(xr, dim, eps);
        for (int i = 0; i < dim; i++)
            dw[i] += dyr[i] * (xr[i] * rs);
    }
}

void pl_cpu_rope_bwd(float *dx, int n_rows, int row_stride, int n_heads, int head_dim,
                     const float *cos_tab, const float *sin_tab)
{
    int half = head_dim / 2;
    for (int r = 0; r < n_rows; r++) {
        const float *c = cos_tab + (size_t)r * half, *s = sin_tab + (size_t)r * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = dx + (size_t)r * row_stride + (size_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] + b * s[i];
                v[i + half] = b * c[i] - a * s[i];
            }
        }
    }
}

void pl_cpu_swiglu_bwd(const float *gate, const float *up, const float *dy, size_t n, float *dgate,
                       float *dup)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], sig = 1.0f / (1.0f + expf(-g)), d = dy[i], u = up[i];
        dup[i] = d * g * sig;
        dgate[i] = d * u * sig * (1.0f + g * (1.0f - sig));
    }
}

void pl_cpu_matmul_bwd_input(const float *dy, int n_rows, int out_dim, const float *w, int in_dim,
                             int accumulate, float *dx)
{
    if (n_rows <= 0 || in_dim <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_rows, in_dim, out_dim, 1.0f, dy,
                out_dim, w, in_dim, accumulate ? 1.0f : 0.0f, dx, in_dim);
}

void pl_cpu_matmul_bwd_weight(const float *dy, const float *x, int n_rows, int out_dim, int in_dim,
                              float *dw)
{
    if (n_rows <= 0 || out_dim <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, n_rows, 1.0f, dy, out_dim,
                x, in_dim, 1.0f, dw, in_dim);
}

void pl_cpu_embed_bwd_weight(const int32_t *ids, const float *dy, int n, int hidden, float *dtable)
{
    for (int r = 0; r < n; r++) {
        float *t = dtable + (size_t)ids[r] * hidden;
        const float *d = dy + (size_t)r * hidden;
        for (int i = 0; i < hidden; i++)
            t[i] += d[i];
    }
}

double pl_cpu_xent(const float *logits, const int32_t *targets, int n, int vocab, float scale,
                   float *dlogits)
{
    double total = 0.0;
    for (int r = 0; r < n; r++) {
        const float *l = logits + (size_t)r * vocab;
        float mx = l[0];
        for (int j = 1; j < vocab; j++)
            if (l[j] > mx)
                mx = l[j];
        double sum = 0.0;
        for (int j = 0; j < vocab; j++)
            sum += exp((double)l[j] - mx);
        double lse = log(sum) + mx;
        total += lse - l[targets[r]];
        if (!dlogits)
            continue;
        float *d = dlogits + (size_t)r * vocab;
        for (int j = 0; j < vocab; j++)
            d[j] = scale * (float)exp((double)l[j] - lse);
        d[targets[r]] -= scale;
    }
    return total;
}

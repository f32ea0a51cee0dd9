/* Causal GQA self-attention for training, forward and backward: probabilities are recomputed in
 * the backward from q and k rather than kept, so the stash is q, k, v and the output. */
#include "backends/cpu/cpu_backward.h"

#include <math.h>
#include <string.h>

/* p[0..i] = softmax of row i's scaled scores against keys 0..i of one head. */
static void s_probs(const float *qi, const float *k, int kv_stride, int i, int hd, float scale,
                    float *p)
{
    float mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        float s = 0.0f;
        for (int d = 0; d < hd; d++)
            s += qi[d] * kj[d];
        p[j] = s * scale;
        if (p[j] > mx)
            mx = p[j];
    }
    double sum = 0.0;
    for (int j = 0; j <= i; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j <= i; j++)
        p[j] *= inv;
}

void pl_cpu_attention_train_fwd(const float *q, const float *k, const float *v, int n_tok,
                                int n_heads, int n_kv, int head_dim, float *scratch, float *out)
{
    int qs = n_heads * head_dim, ks = n_kv * head_dim, group = n_heads / n_kv;
    float scale = 1.0f / sqrtf((float)head_dim);
    float *p = scratch;
    for (int h = 0; h < n_heads; h++) {
        const float *kh = k + (size_t)(h / group) * head_dim;
        const float *vh = v + (size_t)(h / group) * head_dim;
        for (int i = 0; i < n_tok; i++) {
            s_probs(q + (size_t)i * qs + (size_t)h * head_dim, kh, ks, i, head_dim, scale, p);
            float *o = out + (size_t)i * qs + (size_t)h * head_dim;
            memset(o, 0, sizeof(float) * (size_t)head_dim);
            for (int j = 0; j <= i; j++)
                for (int d = 0; d < head_dim; d++)
                    o[d] += p[j] * vh[(size_t)j * ks + d];
        }
    }
}

void pl_cpu_attention_bwd(const float *q, const float *k, const float *v, const float *dout,
                          int n_tok, int n_heads, int n_kv, int head_dim, float *scratch, float *dq,
                          float *dk, float *dv)
{
    int qs = n_heads * head_dim, ks = n_kv * head_dim, group = n_heads / n_kv;
    float scale = 1.0f / sqrtf((float)head_dim);
    float *p = scratch, *dp = scratch + n_tok;
    memset(dq, 0, sizeof(float) * (size_t)n_tok * qs);
    memset(dk, 0, sizeof(float) * (size_t)n_tok * ks);
    memset(dv, 0, sizeof(float) * (size_t)n_tok * ks);
    for (int h = 0; h < n_heads; h++) {
        size_t koff = (size_t)(h / group) * head_dim, qoff = (size_t)h * head_dim;
        for (int i = 0; i < n_tok; i++) {
            const float *qi = q + (size_t)i * qs + qoff, *doi = dout + (size_t)i * qs + qoff;
            s_probs(qi, k + koff, ks, i, head_dim, scale, p);
            double dsum = 0.0; /* sum p_j dp_j = dout_i . out_i */
            for (int j = 0; j <= i; j++) {
                const float *vj = v + (size_t)j * ks + koff;
                float s = 0.0f;
                for (int d = 0; d < head_dim; d++)
                    s += doi[d] * vj[d];
                dp[j] = s;
                dsum += (double)p[j] * s;
            }
            float *dqi = dq + (size_t)i * qs + qoff;
            for (int j = 0; j <= i; j++) {
                float ds = p[j] * (dp[j] - (float)dsum) * scale;
                const float *kj = k + (size_t)j * ks + koff;
                float *dkj = dk + (size_t)j * ks + koff, *dvj = dv + (size_t)j * ks + koff;
                for (int d = 0; d < head_dim; d++) {
                    dqi[d] += ds * kj[d];
                    dkj[d] += ds * qi[d];
                    dvj[d] += p[j] * doi[d];
                }
            }
        }
    }
}

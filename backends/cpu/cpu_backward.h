/* Backward passes of the CPU decoder kernels in f32, for training: each op's input gradient and
 * weight gradient as separate calls (ZB-H1 runs them at different times), plus cross-entropy. */
#ifndef PL_BACKENDS_CPU_CPU_BACKWARD_H
#define PL_BACKENDS_CPU_CPU_BACKWARD_H

#include <stddef.h>
#include <stdint.h>

/* RMSNorm y = x * r * w with r = rsqrt(mean(x^2) + eps): dx[r] += dL/dx given dy, n_rows rows. */
void pl_cpu_rmsnorm_bwd_input(const float *x, const float *w, const float *dy, int n_rows, int dim,
                              float eps, float *dx);
/* dw[i] += sum over rows of dy * x * r. */
void pl_cpu_rmsnorm_bwd_weight(const float *x, const float *dy, int n_rows, int dim, float eps,
                               float *dw);

/* The transpose of pl_cpu_rope_apply on the same tables: rotates gradients back, in place. */
void pl_cpu_rope_bwd(float *dx, int n_rows, int row_stride, int n_heads, int head_dim,
                     const float *cos_tab, const float *sin_tab);

/* out = silu(gate) * up: dgate, dup from dy (any of them may alias dy). */
void pl_cpu_swiglu_bwd(const float *gate, const float *up, const float *dy, size_t n, float *dgate,
                       float *dup);

/* y = x @ w^T (w [out_dim][in_dim]): dx = dy @ w, or dx += dy @ w when accumulate. */
void pl_cpu_matmul_bwd_input(const float *dy, int n_rows, int out_dim, const float *w, int in_dim,
                             int accumulate, float *dx);
/* dw += dy^T @ x. Rounding depends only on the call's shape, so equal calls accumulate alike. */
void pl_cpu_matmul_bwd_weight(const float *dy, const float *x, int n_rows, int out_dim, int in_dim,
                              float *dw);

/* Embedding lookup's weight gradient: dtable[ids[r]] += dy[r], rows in order. ids in range. */
void pl_cpu_embed_bwd_weight(const int32_t *ids, const float *dy, int n, int hidden, float *dtable);

/* Cross-entropy of n rows of logits [n][vocab] against targets (in range): returns the sum of
 * -log softmax(logits)[target] in double; dlogits (may be NULL, may alias logits) gets
 * scale * (softmax - onehot), scale being 1 / the tokens the loss is averaged over. */
double pl_cpu_xent(const float *logits, const int32_t *targets, int n, int vocab, float scale,
                   float *dlogits);

/* Causal GQA self-attention of one sequence of n_tok tokens from position 0: q [n][n_heads*hd],
 * k, v [n][n_kv*hd]; out like q; scratch holds n_tok floats. */
void pl_cpu_attention_train_fwd(const float *q, const float *k, const float *v, int n_tok,
                                int n_heads, int n_kv, int head_dim, float *scratch, float *out);
/* Its backward: dq (like q), dk, dv (like k) from dout, all overwritten; scratch holds 2 * n_tok
 * floats. */
void pl_cpu_attention_bwd(const float *q, const float *k, const float *v, const float *dout,
                          int n_tok, int n_heads, int n_kv, int head_dim, float *scratch, float *dq,
                          float *dk, float *dv);

#endif

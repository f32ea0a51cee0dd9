/* What the CPU gradient suites share: an arena of the arrays a test makes (freed by the suite's
 * fini), a seeded generator (GRAD_SEED before the include), f32-exact random arrays, the layer's
 * ops in double (RMSNorm, matmul, RoPE, causal attention, SiLU, cross-entropy) and a whole decoder
 * layer made of them, the RoPE settings the suites train with, and the check of a gradient
 * against central finite differences. */
#ifndef PL_TESTS_GRAD_UTIL_H
#define PL_TESTS_GRAD_UTIL_H

#include "backends/cpu/cpu_train_layer.h"
#include "model/model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef GRAD_SEED
#define GRAD_SEED 1
#endif

/* head_dim 4, Llama 3 scaling (which changes the frequencies at this size): the settings, and
 * their inverse frequencies into inv_freq[2]. */
static inline pl_model_config_t rope_train_cfg(double *inv_freq)
{
    pl_model_config_t cfg = {.head_dim = 4,
                             .rope_theta = 10000.0f,
                             .rope_scaling = PL_ROPE_LLAMA3,
                             .rope_factor = 8.0f,
                             .rope_low_freq_factor = 1.0f,
                             .rope_high_freq_factor = 4.0f,
                             .rope_orig_max_pos = 8};
    pl_model_rope_inv_freq(&cfg, inv_freq);
    return cfg;
}

/* Every array a test makes, freed when it ends (the sanitizer build checks for leaks). */
static void *g_arena[256];
static int g_n_arena;

static inline void *track(void *p)
{
    cr_assert(p && g_n_arena < 256);
    return g_arena[g_n_arena++] = p;
}

static inline void free_arena(void)
{
    while (g_n_arena)
        free(g_arena[--g_n_arena]);
}

static uint64_t g_rng = GRAD_SEED;

static inline double rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)((g_rng >> 40) & 0xffffff) / 8388608.0 - 1.0;
}

/* n values off + scale * U(-1, 1), each exactly representable in f32 (tracked). */
static inline double *drand(size_t n, double scale, double off)
{
    double *p = track(malloc(n * sizeof(double)));
    for (size_t i = 0; i < n; i++)
        p[i] = (double)(float)(off + scale * rnd());
    return p;
}

/* d as f32 (tracked). */
static inline float *to_f(const double *d, size_t n)
{
    float *p = track(malloc(n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)d[i];
    return p;
}

/* RMSNorm of n rows of dim, in double. */
static inline void r_rmsnorm(const double *x, const double *w, int n, int dim, double eps,
                             double *y)
{
    for (int r = 0; r < n; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += x[r * dim + i] * x[r * dim + i];
        double s = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            y[r * dim + i] = x[r * dim + i] * s * w[i];
    }
}

/* y[n][out] = x[n][in] * w[out][in]^T, in double. */
static inline void r_matmul(const double *x, int n, int in, const double *w, int out, double *y)
{
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < in; i++)
                s += x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

/* RoPE in place on n rows (positions 0..n-1) of `heads` heads of hd, in double. */
static inline void r_rope(double *x, int n, int heads, int hd, const double *inv_freq)
{
    int half = hd / 2;
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++) {
            double *v = x + (r * heads + h) * hd;
            for (int i = 0; i < half; i++) {
                double c = cos(r * inv_freq[i]), s = sin(r * inv_freq[i]);
                double a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
}

/* Causal attention of n rows (at most 64), `heads` query heads sharing kvh key/value heads, in
 * double. */
static inline void r_attention(const double *q, const double *k, const double *v, int n, int heads,
                               int kvh, int hd, double *out)
{
    double p[64];
    for (int h = 0; h < heads; h++) {
        int g = h / (heads / kvh);
        for (int i = 0; i < n; i++) {
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) {
                double s = 0;
                for (int d = 0; d < hd; d++)
                    s += q[(i * heads + h) * hd + d] * k[(j * kvh + g) * hd + d];
                p[j] = s / sqrt((double)hd);
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j <= i; j++)
                sum += (p[j] = exp(p[j] - mx));
            for (int d = 0; d < hd; d++) {
                double o = 0;
                for (int j = 0; j <= i; j++)
                    o += p[j] / sum * v[(j * kvh + g) * hd + d];
                out[(i * heads + h) * hd + d] = o;
            }
        }
    }
}

static inline double r_silu(double g)
{
    return g / (1 + exp(-g));
}

/* One decoder layer on n rows (positions 0..n-1) in double, written from its definition:
 * y = h + W_d(silu(W_g n2) * W_u n2), h = x + W_o attn(rope(W_q n1), rope(W_k n1), W_v n1), n1 and
 * n2 the RMSNorms of x and h; w[9] in pl_cpu_tlayer_field's order. */
static inline void r_layer(const pl_cpu_tdims_t *d, double *const w[9], const double *x, int n,
                           const double *inv_freq, double *y)
{
    int H = d->hidden, Q = d->n_heads * d->head_dim, K = d->n_kv * d->head_dim, I = d->inter;
    double *n1 = malloc(sizeof(double) * n * (3 * H + 2 * Q + 2 * K + 2 * I));
    cr_assert(n1);
    double *q = n1 + n * H, *k = q + n * Q, *v = k + n * K, *att = v + n * K, *h = att + n * Q;
    double *n2 = h + n * H, *g = n2 + n * H, *u = g + n * I;
    r_rmsnorm(x, w[0], n, H, d->eps, n1);
    r_matmul(n1, n, H, w[1], Q, q);
    r_matmul(n1, n, H, w[2], K, k);
    r_matmul(n1, n, H, w[3], K, v);
    r_rope(q, n, d->n_heads, d->head_dim, inv_freq);
    r_rope(k, n, d->n_kv, d->head_dim, inv_freq);
    r_attention(q, k, v, n, d->n_heads, d->n_kv, d->head_dim, att);
    r_matmul(att, n, Q, w[4], H, h);
    for (int i = 0; i < n * H; i++)
        h[i] += x[i];
    r_rmsnorm(h, w[5], n, H, d->eps, n2);
    r_matmul(n2, n, H, w[6], I, g);
    r_matmul(n2, n, H, w[7], I, u);
    for (int i = 0; i < n * I; i++)
        g[i] = r_silu(g[i]) * u[i];
    r_matmul(g, n, I, w[8], H, y);
    for (int i = 0; i < n * H; i++)
        y[i] += h[i];
    free(n1);
}

/* sum(y * r): the suites' scalar loss of an op's output. */
static inline double r_dot(const double *y, const double *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += y[i] * r[i];
    return s;
}

/* The mean cross-entropy of n rows of v logits against their targets, in double. */
static inline double r_xent(const double *logits, const int32_t *target, int n, int v)
{
    double s = 0;
    for (int r = 0; r < n; r++) {
        double sum = 0;
        for (int j = 0; j < v; j++)
            sum += exp(logits[r * v + j]);
        s += log(sum) - logits[r * v + target[r]];
    }
    return s / n;
}

typedef double (*loss_fn)(void);

/* Compare the analytic gradient g (f32) of loss with respect to p[0..n) with central
 * differences. */
static inline void check_grad(const char *what, double *p, size_t n, const float *g, loss_fn loss)
{
    double maxg = 0, maxerr = 0;
    double *fd = malloc(n * sizeof(double));
    cr_assert(fd);
    for (size_t i = 0; i < n; i++) {
        double keep = p[i], h = 1e-5 * fmax(1.0, fabs(keep));
        p[i] = keep + h;
        double lp = loss();
        p[i] = keep - h;
        double lm = loss();
        p[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
        maxg = fmax(maxg, fabs(fd[i]));
    }
    for (size_t i = 0; i < n; i++)
        maxerr = fmax(maxerr, fabs(fd[i] - g[i]));
    cr_assert(maxg > 1e-6, "%s: gradient is all zeros, test is vacuous", what);
    cr_assert(maxerr <= 2e-3 * maxg + 1e-5, "%s: max |analytic - fd| = %g (max |fd| %g)", what,
              maxerr, maxg);
    free(fd);
}

#endif

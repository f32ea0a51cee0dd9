/* What the CPU gradient suites share: an arena of the arrays a test makes (freed by the suite's
 * fini), a seeded generator (GRAD_SEED before the include), f32-exact random arrays, RMSNorm and
 * matmul in double, and the check of a gradient against central finite differences. */
#ifndef PL_TESTS_GRAD_UTIL_H
#define PL_TESTS_GRAD_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef GRAD_SEED
#define GRAD_SEED 1
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

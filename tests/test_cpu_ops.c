/* Tests of the CPU kernels against plain scalar references computed in double: GEMM, RMSNorm,
 * RoPE (with llama3 scaling), causal GQA attention, SwiGLU, embedding, residual add. */
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "common/util.h"
#include "tests/cpu_mat_util.h"

#include <cblas.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float *falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert(p);
    return p;
}

/* |got - ref| <= tol * scale + tiny, where scale is the magnitude the error grows with. */
static void expect_close(float got, double ref, double scale, double tol, const char *what,
                         size_t i)
{
    cr_expect(fabs((double)got - ref) <= tol * scale + 1e-7, "%s[%zu]: got %.9g want %.9g", what, i,
              got, ref);
}

Test(cpu_ops, matmul_matches_naive)
{
    int shapes[][3] = {{1, 7, 5}, {3, 64, 48}, {17, 33, 129}, {5, 300, 1000}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
        float *x = falloc((size_t)m * k), *w = falloc((size_t)n * k), *y = falloc((size_t)m * n);
        fill(x, (size_t)m * k, 1 + s);
        fill(w, (size_t)n * k, 100 + s);
        pl_cpu_matmul(x, m, k, w, n, y);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int t = 0; t < k; t++) {
                    ref += (double)x[i * k + t] * w[j * k + t];
                    mag += fabs((double)x[i * k + t] * w[j * k + t]);
                }
                expect_close(y[i * n + j], ref, mag, 1e-6, "y", (size_t)(i * n + j));
            }
        }
        free(x);
        free(w);
        free(y);
    }
}

Test(cpu_ops, matmul_rows_matches_naive)
{
    int shapes[][3] = {{1, 7, 5}, {3, 64, 48}, {9, 33, 129}, {6, 1000, 67}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], rows[16];
        float *x = falloc((size_t)m * k), *w = falloc((size_t)n * k), *y = falloc((size_t)m * n);
        pl_cpu_pool_t *pool = NULL;
        cr_assert(pl_cpu_pool_create(2, &pool) == PL_OK);
        fill(x, (size_t)m * k, 1 + s);
        fill(w, (size_t)n * k, 100 + s);
        for (int i = 0; i < m; i++)
            rows[i] = m - 1 - i;
        pl_cpu_matmul_rows(pool, x, rows, m, k, w, n, y);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int t = 0; t < k; t++) {
                    ref += (double)x[i * k + t] * w[j * k + t];
                    mag += fabs((double)x[i * k + t] * w[j * k + t]);
                }
                expect_close(y[i * n + j], ref, mag, 1e-6, "y", (size_t)(i * n + j));
            }
        }
        pl_cpu_pool_destroy(&pool);
        pl_cpu_pool_destroy(&pool); /* safe twice */
        free(x);
        free(w);
        free(y);
    }
}

/* A row's result is bitwise the same alone, among any other rows, in any order, on any number
 * of threads; rows not listed are left untouched. */
Test(cpu_ops, matmul_rows_batch_invariant)
{
    int k = 1100, n = 301, max_m = 23, rows[23];
    float *x = falloc((size_t)max_m * k), *w = falloc((size_t)n * k);
    float *alone = falloc((size_t)max_m * n), *y = falloc((size_t)max_m * n);
    pl_cpu_pool_t *pools[3] = {NULL, NULL, NULL};
    cr_assert(pl_cpu_pool_create(2, &pools[1]) == PL_OK);
    cr_assert(pl_cpu_pool_create(3, &pools[2]) == PL_OK);
    cr_expect(pl_cpu_pool_size(pools[0]) == 1 && pl_cpu_pool_size(pools[2]) == 3);
    fill(x, (size_t)max_m * k, 7);
    fill(w, (size_t)n * k, 8);
    for (int i = 0; i < max_m; i++) {
        rows[0] = i;
        pl_cpu_matmul_rows(NULL, x, rows, 1, k, w, n, alone);
    }
    for (int p = 0; p < 3; p++) {
        for (int m = 1; m <= max_m; m += 2) {
            for (int off = 0; off < max_m; off += 4) {
                for (int i = 0; i < m; i++) /* a scattered, wrapped subset */
                    rows[i] = (off + i * 5) % max_m;
                memset(y, 0xff, (size_t)max_m * n * sizeof(float));
                pl_cpu_matmul_rows(pools[p], x, rows, m, k, w, n, y);
                for (int i = 0; i < m; i++)
                    cr_assert(memcmp(y + (size_t)rows[i] * n, alone + (size_t)rows[i] * n,
                                     (size_t)n * sizeof(float)) == 0,
                              "row %d differs among %d rows on %d threads", rows[i], m,
                              pl_cpu_pool_size(pools[p]));
            }
        }
    }
    /* unlisted rows keep their contents */
    memset(y, 0, (size_t)max_m * n * sizeof(float));
    rows[0] = 3;
    pl_cpu_matmul_rows(pools[1], x, rows, 1, k, w, n, y);
    cr_expect(y[0] == 0.0f && y[(size_t)4 * n] == 0.0f);
    pl_cpu_pool_destroy(&pools[1]);
    pl_cpu_pool_destroy(&pools[2]);
    free(x);
    free(w);
    free(alone);
    free(y);
}

static void count_part(void *arg, int i, int n)
{
    int *hits = arg;
    __atomic_fetch_add(&hits[i], 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&hits[8], n, __ATOMIC_SEQ_CST);
}

Test(cpu_ops, pool_runs_every_part_once)
{
    pl_cpu_pool_t *pool = NULL;
    int hits[9] = {0};
    cr_assert(pl_cpu_pool_create(4, &pool) == PL_OK);
    for (int r = 0; r < 100; r++)
        pl_cpu_pool_run(pool, count_part, hits);
    for (int i = 0; i < 4; i++)
        cr_expect(hits[i] == 100, "part %d ran %d times", i, hits[i]);
    cr_expect(hits[4] == 0 && hits[8] == 100 * 4 * 4);
    pl_cpu_pool_destroy(&pool);
    memset(hits, 0, sizeof(hits));
    pl_cpu_pool_run(NULL, count_part, hits);
    cr_expect(hits[0] == 1 && hits[8] == 1);
}

static void slow_part(void *arg, int i, int n)
{
    int *hits = arg;
    if (i == n - 1 && hits[8] % 3 == 0)
        usleep(300); /* longer than the pool's spin: the caller sleeps for it */
    __atomic_fetch_add(&hits[i], 1, __ATOMIC_SEQ_CST);
    if (i == 0)
        __atomic_fetch_add(&hits[8], 1, __ATOMIC_SEQ_CST);
}

/* Jobs back to back (workers still spinning), after gaps longer than the spin (workers asleep),
 * and parts that outlast the caller's spin: every part runs once per job, and its writes are
 * seen when the job returns. */
Test(cpu_ops, pool_spinning_and_sleeping_workers)
{
    pl_cpu_pool_t *pool = NULL;
    int hits[9] = {0};
    cr_assert(pl_cpu_pool_create(3, &pool) == PL_OK);
    for (int r = 0; r < 60; r++) {
        pl_cpu_pool_run(pool, slow_part, hits);
        for (int i = 0; i < 3; i++)
            cr_assert(hits[i] == r + 1, "job %d: part %d ran %d times", r, i, hits[i]);
        if (r % 4 == 0)
            usleep(500);
    }
    pl_cpu_pool_destroy(&pool);
    cr_assert_null(pool);
}

typedef struct {
    int *hits;
    int n;
    pthread_t caller;
    int on_caller, out_of_range;
} chunk_job_t;

static void chunk_hit(void *arg, int c)
{
    chunk_job_t *j = arg;
    if (c < 0 || c >= j->n) { /* no assert off the test's thread */
        __atomic_fetch_add(&j->out_of_range, 1, __ATOMIC_RELAXED);
        return;
    }
    if (c % 7 == 3 && !pthread_equal(pthread_self(), j->caller))
        usleep(100); /* a slow worker: the caller takes the chunks it cannot */
    __atomic_fetch_add(&j->hits[c], 1, __ATOMIC_RELAXED);
    if (pthread_equal(pthread_self(), j->caller))
        __atomic_fetch_add(&j->on_caller, 1, __ATOMIC_RELAXED);
}

/* Every chunk runs once per job and its writes are seen when the job returns, for no chunk, one,
 * fewer than the threads and many; back to back, and after gaps the workers sleep through; and
 * a NULL pool runs them all on the caller. */
Test(cpu_ops, pool_chunks_each_once)
{
    static const int counts[] = {0, 1, 2, 5, 64, 1000};
    int hits[1000];
    pl_cpu_pool_t *pool = NULL;
    cr_assert(pl_cpu_pool_create(3, &pool) == PL_OK);
    for (int rep = 0; rep < 40; rep++)
        for (size_t i = 0; i < PL_ARRAY_SIZE(counts); i++) {
            chunk_job_t j = {.hits = hits, .n = counts[i], .caller = pthread_self()};
            memset(hits, 0, sizeof(hits));
            pl_cpu_pool_chunks(rep % 2 ? pool : NULL, j.n, chunk_hit, &j);
            cr_assert(j.out_of_range == 0);
            for (int c = 0; c < j.n; c++)
                cr_assert(hits[c] == 1, "rep %d: chunk %d of %d ran %d times", rep, c, j.n,
                          hits[c]);
            if (rep % 2 == 0)
                cr_assert(j.on_caller == j.n, "a NULL pool runs every chunk on the caller");
            if (rep % 10 == 9)
                usleep(300); /* past the workers' spin: they sleep */
        }
    pl_cpu_pool_destroy(&pool);
}

Test(cpu_ops, rmsnorm_matches_reference)
{
    int rows = 3, dim = 257;
    float *x = falloc((size_t)rows * dim), *w = falloc(dim), *y = falloc((size_t)rows * dim);
    fill(x, (size_t)rows * dim, 3);
    fill(w, dim, 4);
    x[5] = 40.0f; /* a large value in one row */
    pl_cpu_rmsnorm(x, w, rows, dim, 1e-5f, y);
    for (int r = 0; r < rows; r++) {
        double ms = 0;
        for (int i = 0; i < dim; i++)
            ms += (double)x[r * dim + i] * x[r * dim + i];
        ms /= dim;
        for (int i = 0; i < dim; i++) {
            double ref = x[r * dim + i] / sqrt(ms + 1e-5) * w[i];
            expect_close(y[r * dim + i], ref, fabs(ref), 1e-5, "rmsnorm", (size_t)(r * dim + i));
        }
    }
    /* in place gives the same */
    pl_cpu_rmsnorm(x, w, rows, dim, 1e-5f, x);
    cr_expect(memcmp(x, y, (size_t)rows * dim * sizeof(float)) == 0);
    free(x);
    free(w);
    free(y);
}

static pl_model_config_t rope_cfg(int head_dim, float theta, bool llama3)
{
    pl_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.head_dim = head_dim;
    c.rope_theta = theta;
    if (llama3) {
        c.rope_scaling = PL_ROPE_LLAMA3;
        c.rope_factor = 8.0f;
        c.rope_low_freq_factor = 1.0f;
        c.rope_high_freq_factor = 4.0f;
        c.rope_orig_max_pos = 8192;
    }
    return c;
}

Test(cpu_ops, rope_inv_freq_plain)
{
    pl_model_config_t c = rope_cfg(8, 10000.0f, false);
    double f[4];
    pl_model_rope_inv_freq(&c, f);
    /* 10000^(-2i/8) = 1, 0.1, 0.01, 0.001 */
    double want[4] = {1.0, 0.1, 0.01, 0.001};
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(f[i] - want[i]) <= 1e-12 * want[i] + 1e-15, "inv_freq[%d] = %g", i, f[i]);
}

/* Hugging Face's _compute_llama3_parameters written the way it reads there: the three cases
 * computed for every frequency, then chosen with where(). */
static double hf_llama3(double inv, double factor, double low, double high, double orig)
{
    double low_wavelen = orig / low, high_wavelen = orig / high;
    double wavelen = 2 * M_PI / inv;
    double llama = wavelen > low_wavelen ? inv / factor : inv;
    double smooth = (orig / wavelen - low) / (high - low);
    double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    return medium ? smoothed : llama;
}

Test(cpu_ops, rope_inv_freq_llama3)
{
    pl_model_config_t c = rope_cfg(128, 500000.0f, true);
    double f[64];
    int n_low = 0, n_mid = 0, n_high = 0;
    pl_model_rope_inv_freq(&c, f);
    for (int i = 0; i < 64; i++) {
        double plain = pow(500000.0, -2.0 * i / 128), wavelen = 2 * M_PI / plain;
        double ref = hf_llama3(plain, 8, 1, 4, 8192);
        cr_expect(fabs(f[i] - ref) <= 1e-12 * ref, "inv_freq[%d]: %g want %g", i, f[i], ref);
        n_high += wavelen < 2048;
        n_low += wavelen > 8192;
        n_mid += wavelen >= 2048 && wavelen <= 8192;
    }
    /* all three regimes are exercised */
    cr_expect(n_low > 0 && n_mid > 0 && n_high > 0, "low %d mid %d high %d", n_low, n_mid, n_high);
    cr_expect(f[0] == 1.0);
    cr_expect(fabs(f[63] - pow(500000.0, -126.0 / 128) / 8) <= 1e-15);
}

Test(cpu_ops, rope_apply_matches_rotate_half)
{
    int n_heads = 3, hd = 16, half = hd / 2, rows = 4, stride = n_heads * hd + 5;
    int pos[4] = {0, 1, 37, 5000};
    pl_model_config_t c = rope_cfg(hd, 10000.0f, true);
    double inv[8];
    float *x = falloc((size_t)rows * stride), *orig = falloc((size_t)rows * stride);
    float cos_t[4 * 8], sin_t[4 * 8];
    fill(x, (size_t)rows * stride, 11);
    memcpy(orig, x, (size_t)rows * stride * sizeof(float));
    pl_model_rope_inv_freq(&c, inv);
    pl_cpu_rope_table(inv, half, pos, rows, cos_t, sin_t);
    pl_cpu_rope_apply(x, rows, stride, n_heads, hd, cos_t, sin_t);
    for (int r = 0; r < rows; r++) {
        for (int h = 0; h < n_heads; h++) {
            const float *v = orig + r * stride + h * hd;
            double rot[16], cosv[16], sinv[16];
            for (int i = 0; i < half; i++) { /* rotate_half: cat(-x2, x1) */
                rot[i] = -v[i + half];
                rot[i + half] = v[i];
                double a = pos[r] * inv[i];
                cosv[i] = cosv[i + half] = cos(a);
                sinv[i] = sinv[i + half] = sin(a);
            }
            for (int i = 0; i < hd; i++) {
                double ref = v[i] * cosv[i] + rot[i] * sinv[i];
                expect_close(x[r * stride + h * hd + i], ref, 1.0, 2e-6, "rope",
                             (size_t)(r * stride + h * hd + i));
            }
        }
        /* the padding after the heads is untouched */
        for (int i = n_heads * hd; i < stride; i++)
            cr_expect(x[r * stride + i] == orig[r * stride + i]);
    }
    free(x);
    free(orig);
}

/* Naive attention with an explicit score matrix, in double. */
static void naive_attention(const float *q, int n_tok, int pos0, const float *kc, const float *vc,
                            int n_heads, int n_kv, int hd, double *out)
{
    int qs = n_heads * hd, kvs = n_kv * hd, ctx = pos0 + n_tok;
    double *score = calloc((size_t)n_tok * ctx, sizeof(double));
    cr_assert(score);
    for (int h = 0; h < n_heads; h++) {
        int kh = h / (n_heads / n_kv);
        for (int r = 0; r < n_tok; r++)
            for (int j = 0; j < ctx; j++) {
                double d = 0;
                for (int t = 0; t < hd; t++)
                    d += (double)q[r * qs + h * hd + t] * kc[j * kvs + kh * hd + t];
                score[r * ctx + j] = j <= pos0 + r ? d / sqrt(hd) : -INFINITY;
            }
        for (int r = 0; r < n_tok; r++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < ctx; j++)
                mx = fmax(mx, score[r * ctx + j]);
            for (int j = 0; j < ctx; j++)
                sum += exp(score[r * ctx + j] - mx);
            for (int t = 0; t < hd; t++) {
                double o = 0;
                for (int j = 0; j < ctx; j++)
                    o += exp(score[r * ctx + j] - mx) / sum * vc[j * kvs + kh * hd + t];
                out[r * qs + h * hd + t] = o;
            }
        }
    }
    free(score);
}

static void check_attention(int n_tok, int pos0, int n_heads, int n_kv, int hd)
{
    int qs = n_heads * hd, kvs = n_kv * hd, ctx = pos0 + n_tok, max_ctx = ctx + 3;
    float *q = falloc((size_t)n_tok * qs), *kc = falloc((size_t)max_ctx * kvs);
    float *vc = falloc((size_t)max_ctx * kvs), *out = falloc((size_t)n_tok * qs);
    float *scores = falloc((size_t)PL_CPU_ATT_ROWS * ctx);
    double *ref = calloc((size_t)n_tok * qs, sizeof(double));
    fill(q, (size_t)n_tok * qs, 21);
    fill(kc, (size_t)max_ctx * kvs, 22);
    fill(vc, (size_t)max_ctx * kvs, 23);
    for (size_t i = 0; i < (size_t)n_tok * qs; i++)
        q[i] *= 3.0f; /* peakier softmax */
    /* positions past the last query hold garbage that must not be read */
    for (size_t i = (size_t)ctx * kvs; i < (size_t)max_ctx * kvs; i++)
        kc[i] = vc[i] = NAN;
    pl_cpu_attention(q, n_tok, pos0, kc, vc, n_heads, n_kv, hd, scores, out);
    naive_attention(q, n_tok, pos0, kc, vc, n_heads, n_kv, hd, ref);
    for (size_t i = 0; i < (size_t)n_tok * qs; i++)
        expect_close(out[i], ref[i], 1.0, 2e-5, "attention", i);
    free(q);
    free(kc);
    free(vc);
    free(out);
    free(scores);
    free(ref);
}

Test(cpu_ops, attention_prefill_mha)
{
    check_attention(5, 0, 2, 2, 8);
}

Test(cpu_ops, attention_prefill_gqa_many_rows)
{
    check_attention(PL_CPU_ATT_ROWS + 9, 3, 8, 2, 16);
}

Test(cpu_ops, attention_decode_gqa)
{
    check_attention(1, 50, 6, 3, 32);
    check_attention(1, 0, 4, 1, 8);
}

/* Decode's own path (one query row) on every instruction set this machine runs: head sizes
 * with 32-, 8- and 1-float tails, a long context, GQA. */
Test(cpu_ops, attention_decode_every_isa)
{
    int top = (int)pl_cpu_isa();
    for (int isa = PL_CPU_ISA_SCALAR; isa <= top; isa++) {
        pl_cpu_isa_cap((pl_cpu_isa_t)isa);
        check_attention(1, 0, 1, 1, 1);
        check_attention(1, 7, 2, 1, 13);
        check_attention(1, 300, 4, 2, 64);
        check_attention(1, 61, 6, 3, 45);
        check_attention(1, 130, 2, 2, 128);
    }
    pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
}

Test(cpu_ops, swiglu_add_embed)
{
    float g[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 9.0f}, u[5] = {1.0f, 2.0f, 3.0f, -4.0f, 0.5f};
    float g0[5];
    memcpy(g0, g, sizeof(g));
    pl_cpu_swiglu(g, u, 5);
    for (int i = 0; i < 5; i++) {
        double ref = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        expect_close(g[i], ref, fabs(ref), 1e-6, "swiglu", (size_t)i);
    }
    float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 10};
    pl_cpu_add(a, b, 3);
    cr_expect(a[0] == 1.5f && a[1] == 0.0f && a[2] == 13.0f);

    float table[4 * 3];
    for (int i = 0; i < 12; i++)
        table[i] = (float)i;
    int32_t ids[3] = {3, 0, 3};
    float e[9];
    pl_cpu_wmat_t tab = {.type = PL_WT_F32, .rows = 4, .cols = 3, .row_bytes = 12, .data = table};
    pl_cpu_embed(&tab, ids, 3, e);
    float want[9] = {9, 10, 11, 0, 1, 2, 9, 10, 11};
    cr_expect(memcmp(e, want, sizeof(e)) == 0);
    uint16_t half[4 * 3]; /* a bf16 table widens exactly */
    for (int i = 0; i < 12; i++)
        half[i] = pl_f32_to_bf16((float)i);
    tab = (pl_cpu_wmat_t){.type = PL_WT_BF16, .rows = 4, .cols = 3, .row_bytes = 6, .data = half};
    pl_cpu_embed(&tab, ids, 3, e);
    cr_expect(memcmp(e, want, sizeof(e)) == 0);

    float y[2 * 3] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30};
    pl_cpu_add_bias(y, bias, 2, 3);
    float want_b[6] = {11, 22, 33, 14, 25, 36};
    cr_expect(memcmp(y, want_b, sizeof(y)) == 0);
}

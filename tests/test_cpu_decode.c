/* Tests of the CPU decode step's own path: SwiGLU's exp bitwise alike on every instruction set
 * and close to exp, decode attention split over a pool equal to the serial one, the pool's
 * counters, and a stage decoding at a long context on 1 and 2 threads. */
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_vexp.h"
#include "cpu_layer_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float s_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f; /* [-1, 1) */
}

/* e^x within 2 ulp of the exact value over the whole clamped range, and the clamps. */
Test(cpu_decode, vexp_close_to_exp)
{
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = PL_CPU_VEXP_LO + (PL_CPU_VEXP_HI - PL_CPU_VEXP_LO) * (float)i / 200000.0f;
        double want = exp((double)x), got = pl_cpu_vexp(x);
        double err = fabs(got - want) / want;
        worst = fmax(worst, err);
        cr_expect(err <= 2.5e-7, "exp(%.9g): %.9g want %.9g (rel %.3g)", x, got, want, err);
    }
    cr_log_info("vexp: worst relative error %.3g", worst);
    cr_expect(pl_cpu_vexp(0.0f) == 1.0f);
    cr_expect(pl_cpu_vexp(1000.0f) == pl_cpu_vexp(PL_CPU_VEXP_HI) && isfinite(pl_cpu_vexp(1e30f)));
    cr_expect(pl_cpu_vexp(-1000.0f) == pl_cpu_vexp(PL_CPU_VEXP_LO) && pl_cpu_vexp(-1e30f) > 0);
}

/* Every instruction set gives the scalar bits, at every length (the SIMD tails), and the values
 * stay within a few ulp of silu(g) * u in double, large and tiny gates included. */
Test(cpu_decode, swiglu_every_isa_same_bits)
{
    enum { N = 1037 };
    static float g[N], u[N], want[N], got[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) {
        float scale = i % 7 == 0 ? 120.0f : i % 5 == 0 ? 12.0f : 3.0f;
        g[i] = s_rand(&seed) * scale;
        u[i] = s_rand(&seed) * 2.0f;
    }
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 1e-30f, g[3] = -90.0f, g[4] = 90.0f, g[5] = -200.0f;
    memcpy(want, g, sizeof(g));
    pl_cpu_swiglu_scalar(want, u, N);
    for (int i = 0; i < N; i++) {
        double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        cr_expect(fabs(want[i] - ref) <= 1e-6 * fabs(ref) + 1e-30, "swiglu(%.9g, %.9g): %.9g want "
                  "%.9g", g[i], u[i], want[i], ref);
    }
    int top = (int)pl_cpu_isa();
    for (int isa = PL_CPU_ISA_SCALAR; isa <= top; isa++) {
        pl_cpu_isa_cap((pl_cpu_isa_t)isa);
        for (int n = 0; n <= 19; n++) { /* every tail of the 8-wide loop */
            memcpy(got, g, sizeof(g));
            pl_cpu_swiglu(got, u, (size_t)n);
            cr_expect(memcmp(got, want, (size_t)n * sizeof(float)) == 0, "%s, n %d",
                      pl_cpu_isa_name((pl_cpu_isa_t)isa), n);
            cr_expect(got[n] == g[n], "%s wrote past n %d", pl_cpu_isa_name((pl_cpu_isa_t)isa), n);
        }
        memcpy(got, g, sizeof(g));
        pl_cpu_swiglu(got, u, N);
        cr_expect(memcmp(got, want, sizeof(got)) == 0, "%s, n %d",
                  pl_cpu_isa_name((pl_cpu_isa_t)isa), N);
    }
    pl_cpu_isa_cap(PL_CPU_ISA_COUNT - 1);
}

/* Rows of n_heads heads at positions pos[] over caches of ctx rows, each row its own cache. */
typedef struct {
    int n, n_heads, n_kv, hd, ctx;
    float *q, *k, *v, *out, *scores;
    pl_cpu_att_row_t rows[8];
} s_att_case_t;

static void s_att_make(s_att_case_t *a, int n, int n_heads, int n_kv, int hd, const int *pos)
{
    uint64_t seed = (uint64_t)(n * 131 + n_heads * 7 + hd);
    *a = (s_att_case_t){.n = n, .n_heads = n_heads, .n_kv = n_kv, .hd = hd};
    for (int i = 0; i < n; i++)
        a->ctx = PL_MAX(a->ctx, pos[i] + 1);
    size_t qs = (size_t)n_heads * hd, kvs = (size_t)n_kv * hd, cache = (size_t)a->ctx * kvs;
    a->q = malloc((size_t)n * qs * sizeof(float));
    a->out = calloc((size_t)n * qs, sizeof(float));
    a->k = malloc((size_t)n * cache * sizeof(float));
    a->v = malloc((size_t)n * cache * sizeof(float));
    a->scores = malloc((size_t)PL_CPU_ATT_ROWS * a->ctx * sizeof(float));
    cr_assert(a->q && a->out && a->k && a->v && a->scores);
    for (size_t i = 0; i < (size_t)n * qs; i++)
        a->q[i] = 2.0f * s_rand(&seed);
    for (size_t i = 0; i < (size_t)n * cache; i++)
        a->k[i] = s_rand(&seed), a->v[i] = s_rand(&seed);
    for (int i = 0; i < n; i++)
        a->rows[i] = (pl_cpu_att_row_t){.q = a->q + i * qs,
                                        .k = a->k + i * cache,
                                        .v = a->v + i * cache,
                                        .out = a->out + i * qs,
                                        .pos = pos[i]};
}

static void s_att_free(s_att_case_t *a)
{
    free(a->q), free(a->k), free(a->v), free(a->out), free(a->scores);
}

/* pl_cpu_attention_decode on pools of 1-3 threads equals pl_cpu_attention row by row, bitwise:
 * short contexts (run on the caller) and long ones (split), fewer units than chunks and more. */
Test(cpu_decode, attention_decode_split_equals_serial)
{
    struct {
        int n, n_heads, n_kv, hd, pos[8];
    } cases[] = {{1, 4, 2, 12, {5}},
                 {1, 12, 12, 64, {700}},
                 {3, 4, 1, 16, {1500, 3, 1200}},
                 {8, 12, 4, 32, {200, 300, 1, 250, 199, 40, 260, 300}},
                 {2, 40, 8, 8, {900, 640}}};
    pl_cpu_pool_t *pools[3] = {NULL};
    for (int t = 0; t < 3; t++)
        cr_assert(pl_cpu_pool_create(t + 1, &pools[t]) == PL_OK);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        s_att_case_t a;
        s_att_make(&a, cases[c].n, cases[c].n_heads, cases[c].n_kv, cases[c].hd, cases[c].pos);
        size_t qs = (size_t)a.n_heads * a.hd;
        float *want = malloc((size_t)a.n * qs * sizeof(float));
        cr_assert(want);
        for (int i = 0; i < a.n; i++)
            pl_cpu_attention(a.rows[i].q, 1, a.rows[i].pos, a.rows[i].k, a.rows[i].v, a.n_heads,
                             a.n_kv, a.hd, a.scores, want + i * qs);
        for (int t = 0; t < 3; t++) {
            memset(a.out, 0, (size_t)a.n * qs * sizeof(float));
            pl_cpu_attention_decode(pools[t], a.rows, a.n, a.n_heads, a.n_kv, a.hd, a.scores,
                                    (size_t)a.ctx);
            cr_expect(memcmp(a.out, want, (size_t)a.n * qs * sizeof(float)) == 0,
                      "case %zu, %d thread(s)", c, t + 1);
        }
        pl_cpu_attention_decode(pools[1], a.rows, 0, a.n_heads, a.n_kv, a.hd, a.scores,
                                (size_t)a.ctx); /* no rows: nothing */
        free(want);
        s_att_free(&a);
    }
    for (int t = 0; t < 3; t++)
        pl_cpu_pool_destroy(&pools[t]);
}

static void s_spin_chunk(void *arg, int c)
{
    volatile double x = 1;
    for (int i = 0; i < 20000 * (c + 1); i++)
        x = x * 1.0000001;
    (void)arg;
}

/* The counters move for jobs with workers only, and stay consistent. */
Test(cpu_decode, pool_stats_count_jobs_with_workers)
{
    pl_cpu_pool_t *one = NULL, *two = NULL;
    pl_cpu_pool_stats_t s0, s1, s2;
    cr_assert(pl_cpu_pool_create(1, &one) == PL_OK && pl_cpu_pool_create(2, &two) == PL_OK);
    pl_cpu_pool_stats(&s0);
    for (int i = 0; i < 10; i++) {
        pl_cpu_pool_chunks(one, 4, s_spin_chunk, NULL);
        pl_cpu_pool_chunks(NULL, 4, s_spin_chunk, NULL);
        pl_cpu_pool_chunks(two, 1, s_spin_chunk, NULL); /* one chunk: the caller alone */
    }
    pl_cpu_pool_stats(&s1);
    cr_expect(s1.jobs == s0.jobs && s1.waits == s0.waits, "jobs without workers counted");
    for (int i = 0; i < 50; i++)
        pl_cpu_pool_chunks(two, 4, s_spin_chunk, NULL);
    pl_cpu_pool_stats(&s2);
    cr_expect(s2.jobs - s1.jobs == 50, "%llu jobs", (unsigned long long)(s2.jobs - s1.jobs));
    cr_expect(s2.waits - s1.waits <= 50 && s2.sleeps - s1.sleeps <= s2.waits - s1.waits);
    cr_expect(s2.wakes - s1.wakes <= 50 && s2.wait_s >= s1.wait_s);
    cr_expect((s2.waits == s1.waits) == (s2.wait_s == s1.wait_s));
    pl_cpu_pool_destroy(&one);
    pl_cpu_pool_destroy(&two);
}

/* Decode steps far enough into the context that attention runs on the pool: the logits of a
 * 2-thread stage equal a 1-thread one's bitwise, alone and with other sequences in the batch,
 * and the reference's within tolerance. */
Test(cpu_decode, stage_long_context_threads_agree, .timeout = 120)
{
    enum { P = 1400, S = 3 };
    tmodel_t m;
    exec_t two, one;
    int V = k_gqa.vocab, last = k_gqa.n_layers - 1;
    static int32_t tok[P + S];
    static float l1[S][64], l2[S][64], lb[3 * 64];
    static double ref[64];
    pl_be_stage_params_t p = {.first_layer = 0, .last_layer = last, .has_embed = true,
                              .has_head = true, .max_seqs = 3, .max_ctx = P + S + 1,
                              .max_tokens = P};
    tmodel_make(&m, k_gqa, 31);
    tokens_for(tok, P + S, V, 4);
    cr_assert(exec_open(&two, &m, 0, last, true, true, 3, P + S + 1, P) == PL_OK);
    cr_assert(pl_be_device_open(pl_be_cpu(), 0, 1, &one.dev) == PL_OK);
    one.stage = NULL;
    cr_assert(pl_be_stage_load(one.dev, m.model, &p, &one.stage) == PL_OK);
    for (int slot = 0; slot < 3; slot++) /* the same prompt in every slot of the 2-thread one */
        fwd1(&two, slot, 0, P, tok, l2[0]);
    fwd1(&one, 0, 0, P, tok, l1[0]);
    for (int i = 0; i < S; i++) {
        fwd1(&one, 0, P + i, 1, tok + P + i, l1[i]);
        fwd1(&two, 0, P + i, 1, tok + P + i, l2[i]);
        cr_expect(memcmp(l1[i], l2[i], (size_t)V * sizeof(float)) == 0, "step %d", i);
    }
    /* slots 1 and 2 step together with their own tokens: each equals the single-sequence run */
    {
        int slot[2] = {2, 1}, pos0[2] = {P, P}, n_tok[2] = {1, 1};
        int32_t in[2] = {tok[P], tok[P]};
        cr_assert(fwd(&two, 2, slot, pos0, n_tok, in, lb) == PL_OK, "%s", pl_error_msg());
        cr_expect(memcmp(lb, l1[0], (size_t)V * sizeof(float)) == 0);
        cr_expect(memcmp(lb + V, l1[0], (size_t)V * sizeof(float)) == 0);
    }
    ref_forward(&m, tok, P + 1, k_gqa.n_layers, NULL, ref);
    expect_logits(l1[0], ref, V, "decode at a long context");
    exec_close(&two);
    exec_close(&one);
    tmodel_free(&m);
}

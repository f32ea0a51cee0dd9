/* Tests of the CPU backward ops and the training layer/head: every gradient against central
 * finite differences of a scalar double-precision forward written here (loss = sum(out * R)). */
#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"
#include "backends/cpu/cpu_train_layer.h"
#include "model/model.h"

#define GRAD_SEED 1
#include "grad_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

TestSuite(cpu_backward, .fini = free_arena);

static double g_inv_freq[64];

/* ---- single ops ---- */

#define N 5
#define D 12

static double *g_x, *g_w, *g_r, *g_y;

static double loss_rmsnorm(void)
{
    r_rmsnorm(g_x, g_w, N, D, 1e-5, g_y);
    return r_dot(g_y, g_r, N * D);
}

Test(cpu_backward, rmsnorm_input_and_weight)
{
    g_x = drand(N * D, 1.0, 0), g_w = drand(D, 0.5, 1.0), g_r = drand(N * D, 1, 0);
    g_y = track(malloc(sizeof(double) * N * D));
    float *x = to_f(g_x, N * D), *w = to_f(g_w, D), *r = to_f(g_r, N * D);
    float dx[N * D], dw[D];
    for (int i = 0; i < N * D; i++)
        dx[i] = 0.25f; /* the call adds */
    pl_cpu_rmsnorm_bwd_input(x, w, r, N, D, 1e-5f, dx);
    for (int i = 0; i < N * D; i++)
        dx[i] -= 0.25f;
    memset(dw, 0, sizeof(dw));
    pl_cpu_rmsnorm_bwd_weight(x, r, N, D, 1e-5f, dw);
    check_grad("rmsnorm dx", g_x, N * D, dx, loss_rmsnorm);
    check_grad("rmsnorm dw", g_w, D, dw, loss_rmsnorm);
}

static double loss_rope(void)
{
    memcpy(g_y, g_x, sizeof(double) * N * D);
    r_rope(g_y, N, 3, 4, g_inv_freq);
    return r_dot(g_y, g_r, N * D);
}

Test(cpu_backward, rope_llama3)
{
    pl_model_config_t plain = rope_train_cfg(g_inv_freq);
    plain.rope_scaling = PL_ROPE_NONE;
    double unscaled[2];
    pl_model_rope_inv_freq(&plain, unscaled);
    cr_assert(unscaled[1] != g_inv_freq[1], "the scaling must matter in this test");
    g_x = drand(N * D, 1, 0), g_r = drand(N * D, 1, 0);
    g_y = track(malloc(sizeof(double) * N * D));
    int pos[N];
    for (int i = 0; i < N; i++)
        pos[i] = i;
    float ct[N * 2], st[N * 2];
    pl_cpu_rope_table(g_inv_freq, 2, pos, N, ct, st);
    float *dx = to_f(g_r, N * D);
    pl_cpu_rope_bwd(dx, N, D, 3, 4, ct, st);
    check_grad("rope dx", g_x, N * D, dx, loss_rope);
}

static double *g_u;

static double loss_swiglu(void)
{
    double s = 0;
    for (int i = 0; i < N * D; i++)
        s += r_silu(g_x[i]) * g_u[i] * g_r[i];
    return s;
}

Test(cpu_backward, swiglu)
{
    g_x = drand(N * D, 3, 0), g_u = drand(N * D, 2, 0), g_r = drand(N * D, 1, 0);
    float *x = to_f(g_x, N * D), *u = to_f(g_u, N * D), *r = to_f(g_r, N * D);
    float dg[N * D], du[N * D];
    pl_cpu_swiglu_bwd(x, u, r, N * D, dg, du);
    check_grad("swiglu dgate", g_x, N * D, dg, loss_swiglu);
    check_grad("swiglu dup", g_u, N * D, du, loss_swiglu);
}

#define O 7

static double loss_matmul(void)
{
    r_matmul(g_x, N, D, g_w, O, g_y);
    return r_dot(g_y, g_r, N * O);
}

Test(cpu_backward, matmul_input_and_weight)
{
    g_x = drand(N * D, 1, 0), g_w = drand(O * D, 1, 0), g_r = drand(N * O, 1, 0);
    g_y = track(malloc(sizeof(double) * N * O));
    float *x = to_f(g_x, N * D), *w = to_f(g_w, O * D), *r = to_f(g_r, N * O);
    float dx[N * D], dw[O * D];
    pl_cpu_matmul_bwd_input(r, N, O, w, D, 0, dx);
    for (int i = 0; i < O * D; i++)
        dw[i] = 1.0f;
    pl_cpu_matmul_bwd_weight(r, x, N, O, D, dw);
    for (int i = 0; i < O * D; i++)
        dw[i] -= 1.0f;
    check_grad("matmul dx", g_x, N * D, dx, loss_matmul);
    check_grad("matmul dw", g_w, O * D, dw, loss_matmul);
    /* accumulate adds to what is there */
    float dx2[N * D];
    for (int i = 0; i < N * D; i++)
        dx2[i] = 2.0f;
    pl_cpu_matmul_bwd_input(r, N, O, w, D, 1, dx2);
    for (int i = 0; i < N * D; i++)
        cr_assert_float_eq(dx2[i] - 2.0f, dx[i], 1e-5);
}

#define AH 4
#define AK 2
#define AD 4
static double *g_q, *g_k, *g_v;

static double loss_attn(void)
{
    r_attention(g_q, g_k, g_v, N, AH, AK, AD, g_y);
    return r_dot(g_y, g_r, N * AH * AD);
}

Test(cpu_backward, attention_causal_gqa)
{
    int qn = N * AH * AD, kn = N * AK * AD;
    g_q = drand(qn, 1.5, 0), g_k = drand(kn, 1.5, 0), g_v = drand(kn, 1, 0);
    g_r = drand(qn, 1, 0), g_y = track(malloc(sizeof(double) * qn));
    float *q = to_f(g_q, qn), *k = to_f(g_k, kn), *v = to_f(g_v, kn), *r = to_f(g_r, qn);
    float out[N * AH * AD], dq[N * AH * AD], dk[N * AK * AD], dv[N * AK * AD], scratch[2 * N];
    pl_cpu_attention_train_fwd(q, k, v, N, AH, AK, AD, scratch, out);
    r_attention(g_q, g_k, g_v, N, AH, AK, AD, g_y);
    for (int i = 0; i < qn; i++)
        cr_assert_float_eq(out[i], g_y[i], 1e-5, "forward [%d]", i);
    pl_cpu_attention_bwd(q, k, v, r, N, AH, AK, AD, scratch, dq, dk, dv);
    check_grad("attention dq", g_q, qn, dq, loss_attn);
    check_grad("attention dk", g_k, kn, dk, loss_attn);
    check_grad("attention dv", g_v, kn, dv, loss_attn);
}

#define V 9
static int32_t g_t[N] = {3, 0, 8, 3, 5};

static double loss_xent(void)
{
    return r_xent(g_x, g_t, N, V);
}

Test(cpu_backward, cross_entropy)
{
    g_x = drand(N * V, 3, 0);
    float *l = to_f(g_x, N * V), dl[N * V];
    double loss = pl_cpu_xent(l, g_t, N, V, 1.0f / N, dl);
    cr_assert(fabs(loss / N - loss_xent()) < 1e-9, "loss %g vs %g", loss / N, loss_xent());
    check_grad("xent dlogits", g_x, N * V, dl, loss_xent);
    /* in place */
    pl_cpu_xent(l, g_t, N, V, 1.0f / N, l);
    for (int i = 0; i < N * V; i++)
        cr_assert_eq(l[i], dl[i]);
}

Test(cpu_backward, embedding)
{
    float dy[N * 3], dt[V * 3];
    for (int i = 0; i < N * 3; i++)
        dy[i] = (float)(i + 1);
    memset(dt, 0, sizeof(dt));
    pl_cpu_embed_bwd_weight(g_t, dy, N, 3, dt);
    for (int v = 0; v < V; v++)
        for (int c = 0; c < 3; c++) {
            float want = 0;
            for (int r = 0; r < N; r++)
                if (g_t[r] == v)
                    want += dy[r * 3 + c];
            cr_assert_eq(dt[v * 3 + c], want);
        }
    float table[V * 3], out[N * 3];
    for (int i = 0; i < V * 3; i++)
        table[i] = (float)i;
    cr_assert_eq(pl_cpu_tembed_forward(table, V, 3, g_t, N, out), PL_OK);
    cr_assert_eq(out[3 * 2 + 1], table[8 * 3 + 1]);
    int32_t bad[2] = {1, V};
    cr_assert_eq(pl_cpu_tembed_forward(table, V, 3, bad, 2, out), PL_ERR_RANGE);
}

/* Tests of the CPU training layer and head: a whole decoder layer's input gradient and its nine
 * weight gradients, stashed or recomputed, and the head's, against central finite differences of
 * a scalar double-precision forward written from the definitions (grad_util.h). */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"
#include "backends/cpu/cpu_train_layer.h"
#include "model/model.h"

#define GRAD_SEED 7
#include "grad_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(cpu_train_layer, .fini = free_arena);

#define T 6 /* tokens */
static const pl_cpu_tdims_t g_d = {
    .hidden = 16, .inter = 24, .n_heads = 4, .n_kv = 2, .head_dim = 4, .eps = 1e-5f};
static double g_inv_freq[2];
static double *g_w[9], *g_x, *g_r;
static size_t g_sz[9];

static double loss_layer(void)
{
    double y[T * 16];
    r_layer(&g_d, g_w, g_x, T, g_inv_freq, y);
    return r_dot(y, g_r, T * 16);
}

static void tables(float *ct, float *st)
{
    rope_train_cfg(g_inv_freq);
    int pos[T];
    for (int i = 0; i < T; i++)
        pos[i] = i;
    pl_cpu_rope_table(g_inv_freq, 2, pos, T, ct, st);
}

/* Run F, B, W on the f32 layer; dx [T*16] and grads (allocated, zeroed first) out. */
static void run_layer(bool recompute, float *dx, float *grads[9], size_t *stash_f, size_t *stash_b)
{
    pl_cpu_tlayer_t w, g;
    for (int i = 0; i < 9; i++) {
        *pl_cpu_tlayer_field(&w, i) = to_f(g_w[i], g_sz[i]);
        grads[i] = calloc(g_sz[i], sizeof(float));
        *pl_cpu_tlayer_field(&g, i) = grads[i];
    }
    float ct[T * 2], st[T * 2], *x = to_f(g_x, T * 16), *r = to_f(g_r, T * 16), y[T * 16];
    tables(ct, st);
    pl_cpu_tstash_t *sh = NULL;
    cr_assert_eq(pl_cpu_tstash_create(&g_d, T, recompute, &sh), PL_OK);
    cr_assert_eq(pl_cpu_tstash_bytes(sh), 0);
    cr_assert_eq(pl_cpu_tlayer_forward(&g_d, &w, ct, st, x, sh, y), PL_OK);
    *stash_f = pl_cpu_tstash_bytes(sh);
    cr_assert_eq(*stash_f, pl_cpu_tstash_f_bytes(&g_d, T, recompute));
    cr_assert_eq(pl_cpu_tlayer_forward(&g_d, &w, ct, st, x, sh, y), PL_ERR_BUSY);
    double yr[T * 16];
    r_layer(&g_d, g_w, g_x, T, g_inv_freq, yr);
    for (int i = 0; i < T * 16; i++)
        cr_assert_float_eq(y[i], yr[i], 1e-4, "forward [%d]: %g vs %g", i, y[i], yr[i]);
    cr_assert_eq(pl_cpu_tlayer_backward_input(&g_d, &w, ct, st, sh, r, dx), PL_OK);
    *stash_b = pl_cpu_tstash_bytes(sh);
    cr_assert_eq(*stash_b, *stash_f + pl_cpu_tstash_b_bytes(&g_d, T, recompute));
    cr_assert_eq(pl_cpu_tlayer_backward_input(&g_d, &w, ct, st, sh, r, dx), PL_ERR_INVALID);
    pl_cpu_tlayer_backward_weight(&g_d, sh, &g);
    cr_assert_eq(pl_cpu_tstash_bytes(sh), 0);
    pl_cpu_tstash_destroy(&sh);
    cr_assert_null(sh);
}

static void setup_layer(void)
{
    pl_cpu_tlayer_sizes(&g_d, g_sz);
    for (int i = 0; i < 9; i++)
        g_w[i] = (i == 0 || i == 5) ? drand(g_sz[i], 0.3, 1.0) : drand(g_sz[i], 0.4, 0);
    g_x = drand(T * 16, 1.0, 0);
    g_r = drand(T * 16, 1.0, 0);
}

static const char *g_names[9] = {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "wg", "wu", "wd"};

Test(cpu_train_layer, gradients_against_finite_differences)
{
    setup_layer();
    float dx[T * 16], *grads[9];
    size_t f, b;
    run_layer(false, dx, grads, &f, &b);
    check_grad("layer dx", g_x, T * 16, dx, loss_layer);
    for (int i = 0; i < 9; i++) {
        char what[32];
        snprintf(what, sizeof(what), "layer d%s", g_names[i]);
        check_grad(what, g_w[i], g_sz[i], grads[i], loss_layer);
        free(grads[i]);
    }
}

Test(cpu_train_layer, recompute_equals_stash_bitwise_and_keeps_less)
{
    setup_layer();
    float dx0[T * 16], dx1[T * 16], *g0[9], *g1[9];
    size_t f0, b0, f1, b1;
    run_layer(false, dx0, g0, &f0, &b0);
    run_layer(true, dx1, g1, &f1, &b1);
    cr_assert(f1 < f0 / 4, "recompute keeps only the input: %zu vs %zu", f1, f0);
    cr_assert_eq(b1, b0, "between B and W both hold the same");
    cr_assert_eq(memcmp(dx0, dx1, sizeof(dx0)), 0);
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(memcmp(g0[i], g1[i], g_sz[i] * sizeof(float)), 0, "%s", g_names[i]);
        free(g0[i]);
        free(g1[i]);
    }
}

Test(cpu_train_layer, rejects_bad_shape_and_out_of_order_calls)
{
    pl_cpu_tstash_t *sh = NULL;
    pl_cpu_tdims_t bad = g_d;
    bad.n_kv = 3;
    cr_assert_eq(pl_cpu_tstash_create(&bad, T, false, &sh), PL_ERR_INVALID);
    cr_assert_eq(pl_cpu_tstash_create(&g_d, 0, false, &sh), PL_ERR_INVALID);
    cr_assert_null(sh);
    cr_assert_eq(pl_cpu_tstash_create(&g_d, T, false, &sh), PL_OK);
    pl_cpu_tlayer_t w = {0};
    float dy[T * 16] = {0};
    cr_assert_eq(pl_cpu_tlayer_backward_input(&g_d, &w, NULL, NULL, sh, dy, dy), PL_ERR_INVALID);
    pl_cpu_tstash_destroy(&sh);
    pl_cpu_tstash_destroy(&sh);
}

/* ---- head: final norm, LM head, cross-entropy ---- */

#define HV 11
static double *g_hn, *g_hw, *g_hx;
static int32_t g_tg[T] = {1, 10, 4, 4, 0, 7};

static double loss_head(void)
{
    double xn[T * 16], l[T * HV];
    r_rmsnorm(g_hx, g_hn, T, 16, 1e-5, xn);
    r_matmul(xn, T, 16, g_hw, HV, l);
    return r_xent(l, g_tg, T, HV);
}

Test(cpu_train_layer, head_gradients_against_finite_differences)
{
    g_hn = drand(16, 0.3, 1.0), g_hw = drand(HV * 16, 0.8, 0), g_hx = drand(T * 16, 1, 0);
    float *n = to_f(g_hn, 16), *w = to_f(g_hw, HV * 16), *x = to_f(g_hx, T * 16);
    float dx[T * 16], dn[16] = {0}, dw[HV * 16] = {0};
    pl_cpu_thead_t *h = NULL;
    cr_assert_eq(pl_cpu_thead_create(T, 16, HV, 1e-5f, &h), PL_OK);
    double loss = 0;
    cr_assert_eq(pl_cpu_thead_forward(h, n, w, x, g_tg, 1.0f / T, &loss), PL_OK);
    cr_assert(fabs(loss / T - loss_head()) < 1e-5, "loss %g vs %g", loss / T, loss_head());
    cr_assert_gt(pl_cpu_thead_bytes(h), 0);
    cr_assert_eq(pl_cpu_thead_backward_input(h, n, w, dx), PL_OK);
    pl_cpu_thead_backward_weight(h, dn, dw);
    cr_assert_eq(pl_cpu_thead_bytes(h), 0);
    check_grad("head dx", g_hx, T * 16, dx, loss_head);
    check_grad("head dnorm", g_hn, 16, dn, loss_head);
    check_grad("head dweight", g_hw, HV * 16, dw, loss_head);
    int32_t bad[T] = {0, 0, HV, 0, 0, 0};
    cr_assert_eq(pl_cpu_thead_forward(h, n, w, x, bad, 1.0f, &loss), PL_ERR_RANGE);
    cr_assert_eq(pl_cpu_thead_backward_input(h, n, w, dx), PL_ERR_INVALID);
    pl_cpu_thead_destroy(&h);
}

/* Tests of AdamW against a double-precision reference written here (torch.optim.AdamW's update),
 * the warmup + cosine schedule at known points, clipping by a global norm, config errors. */
#include "pipeline/train_adamw.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

Test(train_adamw, schedule_at_known_points)
{
    pl_adamw_cfg_t c = pl_adamw_cfg_default();
    c.lr = 1.0f, c.min_lr = 0.0f, c.warmup_steps = 4, c.total_steps = 10;
    cr_assert_float_eq(pl_adamw_lr(&c, 0), 0.25, 1e-12);
    cr_assert_float_eq(pl_adamw_lr(&c, 3), 1.0, 1e-12);
    cr_assert_float_eq(pl_adamw_lr(&c, 4), 1.0, 1e-12);
    cr_assert_float_eq(pl_adamw_lr(&c, 7), 0.5, 1e-12);
    cr_assert_float_eq(pl_adamw_lr(&c, 10), 0.0, 1e-12);
    cr_assert_float_eq(pl_adamw_lr(&c, 50), 0.0, 1e-12);
    c.min_lr = 0.1f;
    cr_assert_float_eq(pl_adamw_lr(&c, 7), 0.1 + 0.5 * 0.9, 1e-7);
}

static void expect_bad(pl_adamw_cfg_t c, const char *field)
{
    pl_adamw_t *o = NULL;
    cr_assert_eq(pl_adamw_create(&c, &o), PL_ERR_RANGE, "%s accepted", field);
    cr_assert_null(o);
    cr_assert(strstr(pl_error_msg(), field), "error '%s' names %s", pl_error_msg(), field);
}

Test(train_adamw, rejects_bad_settings_naming_them)
{
    pl_adamw_cfg_t d = pl_adamw_cfg_default(), c;
    c = d, c.lr = 0.0f, expect_bad(c, "lr");
    c = d, c.lr = NAN, expect_bad(c, "lr");
    c = d, c.min_lr = 1.0f, expect_bad(c, "min_lr");
    c = d, c.total_steps = 0, expect_bad(c, "total_steps");
    c = d, c.warmup_steps = 2, expect_bad(c, "warmup_steps");
    c = d, c.beta1 = 1.0f, expect_bad(c, "beta1");
    c = d, c.beta2 = -0.1f, expect_bad(c, "beta2");
    c = d, c.eps = 0.0f, expect_bad(c, "eps");
    c = d, c.weight_decay = -1.0f, expect_bad(c, "weight_decay");
    c = d, c.clip_norm = INFINITY, expect_bad(c, "clip_norm");
}

/* torch.optim.AdamW in double, with the clipping factor min(1, clip / (norm + 1e-6)). */
typedef struct {
    double w[8], m[8], v[8];
} ref_t;

static void ref_step(const pl_adamw_cfg_t *c, ref_t *r, int n, const double *g, bool decay,
                     double clip, int t)
{
    double lr;
    int step = t - 1;
    if (step < c->warmup_steps)
        lr = (double)c->lr * (step + 1) / c->warmup_steps;
    else
        lr = c->min_lr + 0.5 * ((double)c->lr - c->min_lr) *
                             (1 + cos(M_PI * fmin(1.0, (double)(step - c->warmup_steps) /
                                                           (c->total_steps - c->warmup_steps))));
    for (int j = 0; j < n; j++) {
        double gj = g[j] * clip;
        if (decay)
            r->w[j] -= lr * c->weight_decay * r->w[j];
        r->m[j] = c->beta1 * r->m[j] + (1 - c->beta1) * gj;
        r->v[j] = c->beta2 * r->v[j] + (1 - c->beta2) * gj * gj;
        double mh = r->m[j] / (1 - pow(c->beta1, t)), vh = r->v[j] / (1 - pow(c->beta2, t));
        r->w[j] -= lr * mh / (sqrt(vh) + c->eps);
    }
}

Test(train_adamw, matches_reference_with_accumulation_clipping_and_decay)
{
    pl_adamw_cfg_t c = pl_adamw_cfg_default();
    c.lr = 0.05f, c.min_lr = 0.005f, c.warmup_steps = 3, c.total_steps = 12;
    c.weight_decay = 0.1f, c.clip_norm = 1.5f;
    pl_adamw_t *o = NULL;
    cr_assert_eq(pl_adamw_create(&c, &o), PL_OK);
    float a[8], b[5], *ga = NULL, *gb = NULL;
    ref_t ra, rb;
    memset(&ra, 0, sizeof(ra));
    memset(&rb, 0, sizeof(rb));
    for (int j = 0; j < 8; j++)
        a[j] = (float)(0.3 * j - 1.0), ra.w[j] = a[j];
    for (int j = 0; j < 5; j++)
        b[j] = (float)(0.5 - 0.2 * j), rb.w[j] = b[j];
    cr_assert_eq(pl_adamw_add(o, a, 8, true, &ga), PL_OK);
    cr_assert_eq(pl_adamw_add(o, b, 5, false, &gb), PL_OK);
    bool clipped = false, unclipped = false;
    for (int t = 1; t <= 15; t++) {
        double sa[8] = {0}, sb[5] = {0};
        for (int mb = 0; mb < 3; mb++) { /* accumulate three microbatches' gradients */
            for (int j = 0; j < 8; j++) {
                float g = (float)(sin(t * 1.3 + j + mb) * (t % 4 == 0 ? 2.0 : 0.2));
                ga[j] += g, sa[j] += g;
            }
            for (int j = 0; j < 5; j++) {
                float g = (float)cos(t * 0.7 + j * 2 + mb) * 0.3f;
                gb[j] += g, sb[j] += g;
            }
        }
        double ss = 0;
        for (int j = 0; j < 8; j++)
            ss += (double)ga[j] * ga[j];
        for (int j = 0; j < 5; j++)
            ss += (double)gb[j] * gb[j];
        cr_assert_float_eq(pl_adamw_grad_sumsq(o), ss, 1e-12 * ss);
        /* the norm is global: pretend another stage holds 0.25 of it */
        double global = ss + 0.25, norm = sqrt(global);
        double clip = norm > c.clip_norm ? c.clip_norm / (norm + 1e-6) : 1.0;
        clipped |= clip < 1.0, unclipped |= clip == 1.0;
        /* the reference sees the gradients as the optimizer accumulated them in f32 */
        for (int j = 0; j < 8; j++)
            sa[j] = ga[j];
        for (int j = 0; j < 5; j++)
            sb[j] = gb[j];
        float applied = 0;
        pl_adamw_step(o, global, &applied);
        cr_assert_float_eq(applied, clip, 1e-6);
        ref_step(&c, &ra, 8, sa, true, clip, t);
        ref_step(&c, &rb, 5, sb, false, clip, t);
        for (int j = 0; j < 8; j++)
            cr_assert_float_eq(a[j], ra.w[j], 1e-5, "step %d a[%d]: %g vs %g", t, j, a[j], ra.w[j]);
        for (int j = 0; j < 5; j++)
            cr_assert_float_eq(b[j], rb.w[j], 1e-5, "step %d b[%d]", t, j);
        for (int j = 0; j < 8; j++)
            cr_assert_eq(ga[j], 0.0f, "gradients zeroed after the step");
    }
    cr_assert(clipped && unclipped, "both regimes exercised");
    cr_assert_eq(pl_adamw_steps(o), 15);
    pl_adamw_destroy(&o);
    pl_adamw_destroy(&o);
}

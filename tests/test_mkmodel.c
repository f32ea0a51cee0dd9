/* Tests of pl-mkmodel's output (split from test_model_open.c): its dtypes and shards agree, the
 * weights are usable, each family's config and tensors, and bad arguments refused in one line. */
#include "common/status.h"
#include "model/model.h"

#define SCRATCH_TEMPLATE "/tmp/pl_mk_XXXXXX"
#include "scratch_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A tensor's name and shape. */
typedef struct {
    char name[96];
    int ndim;
    int64_t d[2];
} s_t;

TestSuite(mkmodel, .init = s_mkdir, .fini = s_rmdir);

/* Run pl-mkmodel writing into s_dir/sub; returns its exit status. */
static int s_mk(const char *sub, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s/pl-mkmodel' --out '%s/%s' %s >'%s/out.txt' 2>'%s/err.txt'",
             PL_BIN_DIR, s_dir, sub, args, s_dir, s_dir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static pl_model_t *s_open_sub(const char *sub)
{
    pl_model_t *m = NULL;
    cr_assert_eq(pl_model_open(s_path(sub), &m), PL_OK, "%s: %s", sub, pl_error_msg());
    return m;
}

/* Every Llama tensor name and shape a config implies. */
static size_t s_names(const pl_model_config_t *c, s_t *t, size_t max)
{
    static const char *const sfx[] = {
        "input_layernorm",  "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    int64_t h = c->hidden, q = (int64_t)c->n_heads * c->head_dim;
    int64_t kv = (int64_t)c->n_kv_heads * c->head_dim, f = c->intermediate;
    const int64_t dims[][3] = {{1, h, 0}, {2, q, h}, {2, kv, h}, {2, kv, h}, {2, h, q},
                               {1, h, 0}, {2, f, h}, {2, f, h},  {2, h, f}};
    size_t n = 0;
    t[n++] = (s_t){"model.embed_tokens.weight", 2, {c->vocab, h}};
    t[n++] = (s_t){"model.norm.weight", 1, {h, 0}};
    if (!c->tie_embeddings)
        t[n++] = (s_t){"lm_head.weight", 2, {c->vocab, h}};
    for (int l = 0; l < c->n_layers; l++) {
        for (int i = 0; i < 9; i++) {
            cr_assert_lt(n, max);
            snprintf(t[n].name, sizeof(t[n].name), "model.layers.%d.%s.weight", l, sfx[i]);
            t[n].ndim = (int)dims[i][0];
            t[n].d[0] = dims[i][1];
            t[n].d[1] = dims[i][2];
            n++;
        }
    }
    return n;
}

static float s_ref_bf16_round(float x)
{
    /* nearest bf16 by comparing both neighbours in double; ties to even */
    uint32_t u, lo, hi;
    float fl, fh;
    memcpy(&u, &x, 4);
    lo = u & 0xffff0000u;
    hi = lo + 0x10000u;
    memcpy(&fl, &lo, 4);
    memcpy(&fh, &hi, 4);
    double dl = fabs((double)fl - x), dh = fabs((double)fh - x);
    return (dl < dh || (dl == dh && !(lo & 0x10000u))) ? fl : fh;
}

#define S_MK_ARGS "--layers 3 --hidden 64 --intermediate 160 --heads 4 --kv-heads 2 --vocab 300 "

Test(mkmodel, dtypes_agree)
{
    cr_assert_eq(s_mk("f32", S_MK_ARGS "--seed 7"), 0);
    cr_assert_eq(s_mk("f16", S_MK_ARGS "--seed 7 --dtype f16"), 0);
    cr_assert_eq(s_mk("bf16", S_MK_ARGS "--seed 7 --dtype bf16 --shards 3"), 0);
    cr_assert_eq(s_mk("f32s", S_MK_ARGS "--seed 7 --shards 2"), 0);
    pl_model_t *m32 = s_open_sub("f32"), *m16 = s_open_sub("f16"), *mbf = s_open_sub("bf16");
    pl_model_t *m32s = s_open_sub("f32s");
    const pl_model_config_t *c = pl_model_config(m32);
    s_t t[64];
    size_t n = s_names(c, t, 64);

    cr_assert_eq(c->n_layers, 3);
    cr_assert_eq(c->head_dim, 16);
    cr_assert_eq(c->n_kv_heads, 2);
    cr_assert_eq(pl_model_weight_bytes(m16) * 2, pl_model_weight_bytes(m32));
    cr_assert_eq(pl_model_weight_bytes(mbf), pl_model_weight_bytes(m16));
    for (size_t i = 0; i < n; i++) {
        float *a, *b, *h, *s;
        bool oa, ob, oh, os;
        pl_tensor_view_t v;
        cr_assert_eq(pl_model_tensor_f32(m32, t[i].name, t[i].ndim, t[i].d, &a, &oa), PL_OK);
        cr_assert_eq(pl_model_tensor_f32(mbf, t[i].name, t[i].ndim, t[i].d, &b, &ob), PL_OK);
        cr_assert_eq(pl_model_tensor_f32(m16, t[i].name, t[i].ndim, t[i].d, &h, &oh), PL_OK);
        cr_assert_eq(pl_model_tensor_f32(m32s, t[i].name, t[i].ndim, t[i].d, &s, &os), PL_OK);
        cr_assert(!oa && ob && oh && !os);
        cr_assert_eq(pl_model_tensor(mbf, t[i].name, &v), PL_OK);
        cr_assert_eq(v.dtype, PL_DT_BF16);
        for (int64_t j = 0; j < v.numel; j++) {
            cr_assert_eq(b[j], s_ref_bf16_round(a[j]), "%s[%lld]", t[i].name, (long long)j);
            cr_assert_leq(fabsf(h[j] - a[j]), fabsf(a[j]) / 2048.0f + 1e-7f, "%s[%lld]", t[i].name,
                          (long long)j);
            cr_assert_eq(s[j], a[j]);
        }
        free(b);
        free(h);
    }
    pl_model_destroy(&m32);
    pl_model_destroy(&m16);
    pl_model_destroy(&mbf);
    pl_model_destroy(&m32s);
}

/* Sample statistics of a tensor: mean, standard deviation, min, max. */
static void s_stats(pl_model_t *m, const char *name, double st[4])
{
    pl_tensor_view_t v;
    cr_assert_eq(pl_model_tensor(m, name, &v), PL_OK, "%s", pl_error_msg());
    const float *x = v.data;
    double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t j = 0; j < v.numel; j++) {
        s += x[j];
        s2 += (double)x[j] * x[j];
        lo = fmin(lo, x[j]);
        hi = fmax(hi, x[j]);
    }
    st[0] = s / (double)v.numel;
    st[1] = sqrt(s2 / (double)v.numel - st[0] * st[0]);
    st[2] = lo;
    st[3] = hi;
}

Test(mkmodel, weights_are_usable)
{
    double st[4];
    cr_assert_eq(s_mk("a", S_MK_ARGS "--seed 1 --tie --rope-llama3 --eos 2,7 --max-pos 512"), 0);
    cr_assert_eq(s_mk("b", S_MK_ARGS "--seed 2 --tie"), 0);
    pl_model_t *a = s_open_sub("a"), *b = s_open_sub("b");
    const pl_model_config_t *c = pl_model_config(a);
    pl_tensor_view_t v;

    cr_assert(c->tie_embeddings);
    cr_assert_eq(c->rope_scaling, PL_ROPE_LLAMA3);
    cr_assert_eq(c->n_eos, 2);
    cr_assert_eq(c->eos_ids[1], 7);
    cr_assert_eq(c->max_pos, 512);
    cr_assert_eq(pl_model_tensor(a, "lm_head.weight", &v), PL_ERR_NOT_FOUND);
    /* projections: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), std 1/sqrt(3 fan_in) */
    s_stats(a, "model.layers.1.mlp.down_proj.weight", st);
    cr_assert_float_eq(st[1], 1.0 / sqrt(3.0 * 160), 0.1 / sqrt(3.0 * 160));
    cr_assert_lt(fabs(st[0]), 0.1 * st[1]);
    cr_assert_leq(st[3], 1.0 / sqrt(160.0));
    s_stats(a, "model.layers.0.input_layernorm.weight", st);
    cr_assert(st[2] >= 0.9 && st[3] <= 1.1 && st[1] > 0.01);
    s_stats(a, "model.embed_tokens.weight", st);
    cr_assert(st[2] >= -0.5 && st[3] <= 0.5 && st[1] > 0.2);
    /* different tensors and different seeds give different streams */
    pl_tensor_view_t q0, q1, qb;
    cr_assert_eq(pl_model_tensor(a, "model.layers.0.self_attn.q_proj.weight", &q0), PL_OK);
    cr_assert_eq(pl_model_tensor(a, "model.layers.1.self_attn.q_proj.weight", &q1), PL_OK);
    cr_assert_eq(pl_model_tensor(b, "model.layers.0.self_attn.q_proj.weight", &qb), PL_OK);
    cr_assert_neq(memcmp(q0.data, q1.data, q0.nbytes), 0);
    cr_assert_neq(memcmp(q0.data, qb.data, q0.nbytes), 0);
    pl_model_destroy(&a);
    pl_model_destroy(&b);

    /* rewriting a sharded directory as one file must not leave the old index in charge */
    cr_assert_eq(s_mk("c", S_MK_ARGS "--shards 2 --seed 3"), 0);
    cr_assert_eq(access(s_path("c/model.safetensors.index.json"), F_OK), 0);
    cr_assert_eq(s_mk("c", S_MK_ARGS "--seed 4"), 0);
    cr_assert_neq(access(s_path("c/model.safetensors.index.json"), F_OK), 0);
    pl_model_t *c4 = s_open_sub("c");
    cr_assert_eq(s_mk("d", S_MK_ARGS "--seed 4"), 0);
    pl_model_t *d4 = s_open_sub("d");
    cr_assert_eq(pl_model_tensor(c4, "model.layers.2.mlp.up_proj.weight", &q0), PL_OK);
    cr_assert_eq(pl_model_tensor(d4, "model.layers.2.mlp.up_proj.weight", &q1), PL_OK);
    cr_assert_eq(memcmp(q0.data, q1.data, q0.nbytes), 0);
    pl_model_destroy(&c4);
    pl_model_destroy(&d4);
}

/* --family writes each family's config and extra tensors; the reader agrees on the family. */
Test(mkmodel, families)
{
    static const char *const fams[] = {"llama", "mistral", "qwen2", "qwen3"};
    char args[256];
    for (int f = 0; f < 4; f++) {
        snprintf(args, sizeof(args), S_MK_ARGS "--seed 5 --dtype bf16 --family %s", fams[f]);
        cr_assert_eq(s_mk(fams[f], args), 0, "%s", fams[f]);
        pl_model_t *m = s_open_sub(fams[f]);
        const pl_model_config_t *c = pl_model_config(m);
        pl_tensor_view_t v, l0;
        cr_expect_eq((int)c->family, f, "%s", fams[f]);
        cr_expect_eq(c->qkv_bias, f == PL_FAMILY_QWEN2);
        cr_expect_eq(c->qk_norm, f == PL_FAMILY_QWEN3);
        cr_expect_eq(pl_model_tensor(m, "model.layers.2.self_attn.k_proj.bias", &v) == PL_OK,
                     f == PL_FAMILY_QWEN2, "%s", fams[f]);
        cr_expect_eq(pl_model_tensor(m, "model.layers.2.self_attn.q_norm.weight", &v) == PL_OK,
                     f == PL_FAMILY_QWEN3, "%s", fams[f]);
        /* layer 0's Llama tensors come first in every family: the same values */
        pl_model_t *ll = f ? s_open_sub("llama") : NULL;
        if (ll) {
            cr_assert_eq(pl_model_tensor(m, "model.layers.0.mlp.up_proj.weight", &v), PL_OK);
            cr_assert_eq(pl_model_tensor(ll, "model.layers.0.mlp.up_proj.weight", &l0), PL_OK);
            cr_expect_eq(memcmp(v.data, l0.data, v.nbytes), 0, "%s", fams[f]);
        }
        pl_model_destroy(&ll);
        pl_model_destroy(&m);
    }
    /* a Llama file under a Qwen config lacks the family's tensors: refused, naming the first */
    static const struct {
        const char *type, *missing;
    } lack[] = {{"qwen2", "'model.layers.0.self_attn.q_proj.bias' is missing"},
                {"qwen3", "'model.layers.0.self_attn.q_norm.weight' is missing"}};
    for (int i = 0; i < 2; i++) {
        char cmd[1024];
        pl_model_t *m = NULL;
        snprintf(cmd, sizeof(cmd), "sed -i 's/\"llama\"/\"%s\"/' '%s'", lack[i].type,
                 s_path("llama/config.json"));
        cr_assert_eq(system(cmd), 0);
        cr_expect_eq(pl_model_open(s_path("llama"), &m), PL_ERR_INVALID, "%s", lack[i].type);
        cr_expect(strstr(pl_error_msg(), lack[i].missing) != NULL, "%s", pl_error_msg());
        snprintf(cmd, sizeof(cmd), "sed -i 's/\"%s\"/\"llama\"/' '%s'", lack[i].type,
                 s_path("llama/config.json"));
        cr_assert_eq(system(cmd), 0);
    }
}

Test(mkmodel, rejects_bad_args)
{
    static const char *const bad[] = {
        "--heads 3",  "--kv-heads 3", "--dtype f8",    "--layers abc",     "--layers 0",
        "--shards 9", "--eos 600",    "--head-dim 7",  "--hidden 1048576", "stray",
        "--seed -1",  "--vocab 1e3",  "--family gemma"};
    char line[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_neq(s_mk("x", bad[i]), 0, "%s accepted", bad[i]);
        FILE *f = fopen(s_path("err.txt"), "r");
        cr_assert_not_null(f);
        cr_assert_not_null(fgets(line, sizeof(line), f), "%s: no message", bad[i]);
        cr_assert_eq(strncmp(line, "pl-mkmodel: ", 12), 0, "%s: '%s'", bad[i], line);
        cr_assert_null(fgets(line, sizeof(line), f), "%s: more than one line", bad[i]);
        fclose(f);
    }
    cr_assert_neq(s_mk("no/such/dir", ""), 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "'%s/pl-mkmodel' --layers 2 >/dev/null 2>&1", PL_BIN_DIR);
    cr_assert_neq(system(cmd), 0, "--out is required");
}

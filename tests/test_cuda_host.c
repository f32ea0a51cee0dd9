/* Host-side tests of the GPU backends that need no GPU: the planning code shared by the CUDA and
 * HIP plugins (compiled into this test), and loading the built plugins on a machine without a
 * driver, which must report why rather than fail to load or crash. */
#include <criterion/criterion.h>

#include "backends/backend_impl.h" /* the plugin's exported table, tested as such */
#include "backends/cpu/cpu_ops.h"
#include "backends/gpu/gpu_plan.c" /* pure C, no GPU API: tested directly */

#include <dlfcn.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The HIP runtime keeps allocations alive at exit; they are not ours. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libamdhip64\nleak:libhsa-runtime64\nleak:libamd_comgr\n";
}

static pl_model_config_t s_cfg(void)
{
    pl_model_config_t c;
    memset(&c, 0, sizeof(c));
    c.hidden = 64;
    c.intermediate = 160;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.vocab = 100;
    c.max_pos = 256;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.bos_id = -1;
    return c;
}

static pl_be_stage_params_t s_params(void)
{
    pl_be_stage_params_t p = {.first_layer = 1,
                              .last_layer = 2,
                              .has_embed = false,
                              .has_head = true,
                              .max_seqs = 3,
                              .max_ctx = 40,
                              .max_tokens = 10};
    return p;
}

/* ---- RoPE inverse frequencies ---- */

Test(gpu_rope, plain_theta_known_values)
{
    pl_model_config_t c = s_cfg();
    double f[64];
    c.head_dim = 128;
    pl_model_rope_inv_freq(&c, f);
    /* theta^(-2i/d) computed independently (Python, float64) */
    cr_assert_float_eq(f[0], 1.0, 1e-15);
    cr_assert_float_eq(f[1], 0.8659643233600653, 1e-15);
    cr_assert_float_eq(f[32], 0.01, 1e-15);
    cr_assert_float_eq(f[63], 0.00011547819846894582, 1e-18);
}

Test(gpu_rope, llama3_matches_hugging_face)
{
    /* Llama 3.1: theta 500000, factor 8, low 1, high 4, original context 8192; expected values
     * from Hugging Face's _compute_llama3_parameters algorithm evaluated in float64 */
    static const struct {
        int i;
        double v;
    } want[] = {
        {0, 1.0}, /* high-frequency band: unchanged */
        {10, 0.12868737343265052},
        {28, 0.003211445994752591},
        {29, 0.002166570763503359}, /* medium band: smoothed */
        {31, 0.0008567514129196321},
        {34, 0.0001785078127679964},
        {40, 3.428102195952591e-05}, /* low band: divided by the factor */
        {63, 3.068925988914511e-07},
    };
    pl_model_config_t c = s_cfg();
    double f[64];
    c.head_dim = 128;
    c.rope_theta = 500000.0f;
    c.rope_scaling = PL_ROPE_LLAMA3;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_orig_max_pos = 8192;
    pl_model_rope_inv_freq(&c, f);
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
        cr_assert(fabs(f[want[k].i] - want[k].v) <= 1e-12 * want[k].v, "i=%d: %.17g vs %.17g",
                  want[k].i, f[want[k].i], want[k].v);
}

Test(gpu_rope, equals_cpu_backend_bit_for_bit)
{
    /* the GPU stages and the CPU stages of one pipeline must rotate identically */
    pl_model_config_t c = s_cfg();
    double g[128], h[128];
    const int dims[] = {16, 64, 128, 256};
    for (int scaled = 0; scaled < 2; scaled++) {
        for (size_t k = 0; k < sizeof(dims) / sizeof(dims[0]); k++) {
            c.head_dim = dims[k];
            c.rope_theta = scaled ? 500000.0f : 10000.0f;
            c.rope_scaling = scaled ? PL_ROPE_LLAMA3 : PL_ROPE_NONE;
            c.rope_factor = 32.0f;
            c.rope_low_freq_factor = 1.0f;
            c.rope_high_freq_factor = 4.0f;
            c.rope_orig_max_pos = 8192;
            pl_model_rope_inv_freq(&c, g);
            pl_model_rope_inv_freq(&c, h);
            cr_assert(memcmp(g, h, sizeof(double) * (size_t)(dims[k] / 2)) == 0,
                      "head_dim %d scaled %d", dims[k], scaled);
        }
    }
}

/* ---- stage and batch checks ---- */

Test(gpu_plan, stage_check_accepts_and_rejects)
{
    pl_model_config_t c = s_cfg();
    pl_be_stage_params_t p = s_params();
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK);

    p.last_layer = 4; /* model has layers 0..3 */
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "outside"), "%s", pl_error_msg());

    p = s_params();
    p.first_layer = 3;
    p.last_layer = 2; /* no layers: embed/head only is fine */
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK);

    p = s_params();
    p.max_ctx = 0;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_RANGE);

    p = s_params();
    c.head_dim = 512;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_error_msg(), "head_dim"));

    c = s_cfg();
    c.head_dim = 15;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);

    c = s_cfg();
    c.n_kv_heads = 3;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "num_key_value_heads"));

    c = s_cfg();
    c.rope_scaling = PL_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 4;
    c.rope_high_freq_factor = 1; /* high must exceed low */
    c.rope_orig_max_pos = 8192;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_INVALID);
}

/* Every grid dimension the stage can launch stays within the 65,535-block limit of y and z; the
 * values just past it fail with a message naming the field. */
Test(gpu_plan, stage_check_caps_the_launch_grids)
{
    pl_model_config_t c = s_cfg();
    pl_be_stage_params_t p = s_params();
    p.max_seqs = 65535;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK, "%s", pl_error_msg());
    p.max_seqs = 65536; /* accepted before: the attention grids' z then overflows */
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "max_seqs 65536 above 65535"), "%s", pl_error_msg());

    p = s_params();
    p.max_tokens = 65535 * 64; /* the built-in GEMM's 64-row tiles on grid y */
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK, "%s", pl_error_msg());
    p.max_tokens = 65535 * 64 + 1;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "max_tokens 4194241"), "%s", pl_error_msg());

    p = s_params();
    c.n_heads = 65536;
    c.n_kv_heads = 1;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_error_msg(), "num_attention_heads 65536"), "%s", pl_error_msg());

    /* the largest context and one sequence: the most decode splits there can be */
    c = s_cfg();
    p = s_params();
    p.max_ctx = 1 << 24;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK, "%s", pl_error_msg());
    int splits = 0, chunk = 0;
    for (int heads = 1; heads <= 64; heads *= 4) {
        pl_gpu_decode_split(1 << 24, 1, heads, &splits, &chunk);
        cr_assert_leq(splits, 65535, "heads %d: %d splits", heads, splits);
        cr_assert_geq((int64_t)splits * chunk, 1 << 24);
    }
    p.max_ctx = (1 << 24) + 1;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "max_ctx"), "%s", pl_error_msg());
}

/* The built-in GEMV's columns per block follow the warp width: 8 on NVIDIA and RDNA's wave32
 * (gfx1030), 4 on CDNA's wave64, so a wave32 part launches no idle blocks. */
Test(gpu_plan, gemv_columns_follow_the_warp_width)
{
    cr_assert_eq(pl_gpu_gemv_cols(256, 32), 8);
    cr_assert_eq(pl_gpu_gemv_cols(256, 64), 4);
    cr_assert_eq(pl_gpu_gemv_cols(128, 32), 4);
    /* an answer no device gives: the fewest columns, which the kernel covers with any warps */
    cr_assert_eq(pl_gpu_gemv_cols(256, 0), 4);
    cr_assert_eq(pl_gpu_gemv_cols(256, 48), 4);
    cr_assert_eq(pl_gpu_gemv_cols(32, 64), 1);
}

Test(gpu_plan, batch_check_valid)
{
    int slot[] = {2, 0}, pos0[] = {5, 0}, n_tok[] = {1, 4};
    pl_be_batch_t b = {.n_seq = 2, .n_tokens = 5, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    cr_assert_eq(pl_gpu_batch_check(&b, 3, 40, 10), PL_OK);
}

Test(gpu_plan, batch_check_errors_name_the_field)
{
    int slot[] = {2, 0}, pos0[] = {5, 0}, n_tok[] = {1, 4};
    pl_be_batch_t b = {.n_seq = 2, .n_tokens = 5, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    struct {
        int what;
        pl_status_t want;
        const char *word;
    } cases[] = {
        {0, PL_ERR_RANGE, "n_seq"},     {1, PL_ERR_RANGE, "n_tokens"},
        {2, PL_ERR_RANGE, "slot"},      {3, PL_ERR_RANGE, "n_tok"},
        {4, PL_ERR_RANGE, "positions"}, {5, PL_ERR_INVALID, "share slot"},
        {6, PL_ERR_INVALID, "sums"},    {7, PL_ERR_RANGE, "positions"},
        {8, PL_ERR_INVALID, "missing"}, {9, PL_ERR_RANGE, "n_seq"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int s2[] = {2, 0}, p2[] = {5, 0}, n2[] = {1, 4};
        pl_be_batch_t c = {.n_seq = 2, .n_tokens = 5, .slot = s2, .pos0 = p2, .n_tok = n2};
        switch (cases[k].what) {
        case 0:
            c.n_seq = 4;
            break; /* more than max_seqs */
        case 1:
            c.n_tokens = 11;
            break; /* more than max_tokens */
        case 2:
            s2[1] = 3;
            break; /* slot outside 0..2 */
        case 3:
            n2[0] = 0;
            c.n_tokens = 4;
            break;
        case 4:
            p2[1] = 37;
            break; /* 37 + 4 > 40 */
        case 5:
            s2[1] = 2;
            break;
        case 6:
            c.n_tokens = 6;
            break;
        case 7:
            p2[0] = -1;
            break;
        case 8:
            c.pos0 = NULL;
            break;
        case 9:
            c.n_seq = 0;
            break;
        }
        cr_assert_eq(pl_gpu_batch_check(&c, 3, 40, 10), cases[k].want, "case %d", cases[k].what);
        cr_assert(strstr(pl_error_msg(), cases[k].word), "case %d: %s", cases[k].what,
                  pl_error_msg());
    }
    (void)b;
}

/* ---- flash-decoding splits ---- */

/* Families whose extra parts the GPU kernels lack, and a context past a sliding window, are
 * refused by name rather than computed wrongly. */
Test(gpu_plan, stage_check_refuses_unimplemented_family_parts)
{
    pl_model_config_t c = s_cfg();
    pl_be_stage_params_t p = s_params();
    c.family = PL_FAMILY_QWEN2;
    c.qkv_bias = true;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_error_msg(), "qwen2: the GPU kernels have no q/k/v biases"), "%s",
              pl_error_msg());
    c = s_cfg();
    c.family = PL_FAMILY_QWEN3;
    c.qk_norm = true;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_error_msg(), "qwen3"), "%s", pl_error_msg());
    c = s_cfg();
    c.family = PL_FAMILY_MISTRAL;
    c.sliding_window = p.max_ctx;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_OK, "%s", pl_error_msg());
    c.sliding_window = p.max_ctx - 1;
    cr_assert_eq(pl_gpu_stage_check(&c, &p), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_error_msg(), "sliding window"), "%s", pl_error_msg());
}

Test(gpu_plan, decode_split_covers_context_and_caps_blocks)
{
    const int ctxs[] = {1, 100, 256, 257, 4096, 131072};
    const int seqs[] = {1, 3, 8, 32, 128, 1024};
    for (size_t a = 0; a < sizeof(ctxs) / sizeof(ctxs[0]); a++) {
        for (size_t b = 0; b < sizeof(seqs) / sizeof(seqs[0]); b++) {
            int splits, chunk;
            pl_gpu_decode_split(ctxs[a], seqs[b], 32, &splits, &chunk);
            cr_assert_geq(splits, 1);
            cr_assert_geq((int64_t)splits * chunk, ctxs[a], "ctx %d seqs %d", ctxs[a], seqs[b]);
            cr_assert_lt((int64_t)(splits - 1) * chunk, ctxs[a], "an empty split at the end");
            if (splits > 1) {
                cr_assert_geq(chunk, PL_GPU_DECODE_MIN_CHUNK / 2);
                cr_assert_leq((int64_t)splits * seqs[b] * 32, PL_GPU_DECODE_MAX_BLOCKS);
            }
            size_t work = pl_gpu_decode_work_floats(ctxs[a], seqs[b], 32, 128);
            for (int n = 1; n <= seqs[b]; n++) {
                pl_gpu_decode_split(ctxs[a], n, 32, &splits, &chunk);
                cr_assert_leq((size_t)n * 32 * splits * 130, work, "work too small for n=%d", n);
            }
        }
    }
    int splits, chunk;
    pl_gpu_decode_split(4096, 1, 32, &splits, &chunk);
    cr_assert_eq(splits, 16); /* 4096 / 256 */
    cr_assert_eq(chunk, 256);
}

/* ---- metadata block ---- */

Test(gpu_plan, meta_fill_layout_and_values)
{
    int slot[] = {2, 0}, pos0[] = {5, 0}, n_tok[] = {1, 3};
    int32_t ids[] = {7, 8, 9, 10};
    pl_be_batch_t b = {.n_seq = 2, .n_tokens = 4, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    int32_t meta[64];
    pl_gpu_meta_t l;
    cr_assert_eq(pl_gpu_meta_fill(&b, ids, meta, 64, &l), PL_OK);
    const int32_t want[] = {
        7, 8, 9, 10, /* ids */
        5, 0, 1, 2,  /* positions */
        2, 0, 0, 0,  /* token slots */
        2, 0,        /* seq slots */
        5, 0,        /* pos0 */
        1, 3,        /* n_tok */
        0, 1,        /* offsets */
        0, 3,        /* last rows */
    };
    cr_assert_eq(l.count, sizeof(want) / sizeof(want[0]));
    cr_assert(memcmp(meta, want, sizeof(want)) == 0);
    cr_assert_eq(l.max_ntok, 3);
    cr_assert(!l.decode);
    cr_assert_eq(l.tok_pos, 4);
    cr_assert_eq(l.last_row, 20);
    cr_assert_leq(l.count, pl_gpu_meta_capacity(4, 2));

    n_tok[1] = 1;
    b.n_tokens = 2;
    cr_assert_eq(pl_gpu_meta_fill(&b, NULL, meta, 64, &l), PL_OK);
    cr_assert(l.decode);
    cr_assert_eq(meta[0], 0); /* no ids: zeros */
    cr_assert_eq(pl_gpu_meta_fill(&b, NULL, meta, 5, &l), PL_ERR_RANGE);
}

/* ---- buffer layout ---- */

Test(gpu_plan, layout_sizes_by_hand)
{
    pl_model_config_t c = s_cfg();
    pl_be_stage_params_t p = s_params();
    pl_gpu_layout_t l;
    cr_assert_eq(pl_gpu_layout(&c, &p, PL_DT_BF16, PL_DT_BF16, PL_DT_F16, &l), PL_OK);

    /* per layer: qkv (64+32+32)x64, o 64x64, gate+up 2x160x64, down 64x160, in bf16, plus two
     * f32 norms of 64; two layers; head: norm + untied LM head 100x64 */
    size_t per_layer = (size_t)(128 * 64 + 64 * 64 + 2 * 160 * 64 + 64 * 160) * 2 + 2 * 64 * 4;
    cr_assert_eq(l.weight_bytes, 2 * per_layer + 64 * 4 + 100 * 64 * 2);
    /* KV: 2 layers x (K, V) x 3 slots x 40 positions x 32 dims x 2 bytes */
    cr_assert_eq(l.kv_bytes, (size_t)2 * 2 * 3 * 40 * 32 * 2);

    size_t offs[] = {l.resid,    l.xa,   l.fb, l.cos_tab, l.sin_tab,
                     l.inv_freq, l.work, l.xh, l.logits,  l.meta};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        cr_assert_eq(offs[i] % PL_GPU_PLAN_ALIGN, 0);
        if (i)
            cr_assert_gt(offs[i], offs[i - 1]);
    }
    cr_assert_geq(l.xa - l.resid, (size_t)10 * 64 * 4);    /* resid f32 [T][H] */
    cr_assert_geq(l.fb - l.xa, (size_t)10 * 160 * 2);      /* xa bf16 [T][inter] */
    cr_assert_geq(l.cos_tab - l.fb, (size_t)10 * 320 * 4); /* fb f32 [T][2 inter] */
    cr_assert_geq(l.meta - l.logits, (size_t)3 * 100 * 4); /* logits [S][vocab] */
    cr_assert_geq(l.dev_bytes - l.meta, pl_gpu_meta_capacity(10, 3) * 4);
    cr_assert_geq(l.h_out - l.h_in, (size_t)10 * 64 * 4);
    cr_assert_geq(l.host_bytes - l.h_out, (size_t)3 * 100 * 4);

    /* tied embeddings with the embedding on the same stage: the head reuses it */
    c.tie_embeddings = true;
    p.has_embed = true;
    pl_gpu_layout_t t;
    cr_assert_eq(pl_gpu_layout(&c, &p, PL_DT_BF16, PL_DT_BF16, PL_DT_F16, &t), PL_OK);
    cr_assert_eq(t.weight_bytes, l.weight_bytes); /* + embedding, - LM head */

    p.max_tokens = 1 << 24;
    p.max_seqs = 1 << 16;
    c.hidden = 1 << 27; /* 8 PiB of residual stream */
    cr_assert_eq(pl_gpu_layout(&c, &p, PL_DT_F32, PL_DT_F32, PL_DT_F32, &t), PL_ERR_RANGE);
}

/* ---- the GEMM context, with the real cuBLAS and no driver ---- */

/* Without a driver the real cuBLAS loads but cublasCreate fails: stage load and calibration must
 * still get a context, running the built-in GEMM and saying why. Checked through the parity
 * program, which links the plugins' host code statically. */
Test(gpu_blas, cublas_that_loads_but_cannot_start_falls_back_to_builtin)
{
    const char *bin = getenv("PL_BIN_DIR"), *cublas = "/usr/local/cuda/lib64/libcublas.so.13";
    char prog[4096], cmd[8400], line[512];
    snprintf(prog, sizeof(prog), "%s/pl-cuda-parity", bin && *bin ? bin : PL_BIN_DIR);
    if (access(prog, X_OK) != 0)
        cr_skip_test("pl-cuda-parity not built (no nvcc here)");
    if (access(cublas, R_OK) != 0)
        cr_skip_test("no %s to load", cublas);
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (drv) {
        dlclose(drv);
        cr_skip_test("a CUDA driver is present: cuBLAS may start here");
    }
    snprintf(cmd, sizeof(cmd), "PL_CUBLAS_LIB=%s timeout 60 %s --host-only 2>&1", cublas, prog);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    bool fell_back = false, named = false;
    int fails = 0;
    while (fgets(line, sizeof(line), p)) {
        fell_back |= strstr(line, "PASS gemm context: builtin (cuBLAS setup failed: cublasCreate") !=
                     NULL;
        named |= strstr(line, "PASS gemm context: a loadable library that did not start") != NULL;
        fails += strncmp(line, "FAIL", 4) == 0;
    }
    int rc = pclose(p);
    cr_assert_eq(rc, 0, "%s: exit status %d", cmd, rc);
    cr_assert_eq(fails, 0);
    cr_assert(fell_back && named, "no fallback reported by %s", cmd);
}

/* ---- the built plugins, loaded as the registry loads them ---- */

typedef const pl_be_ops_t *(*s_entry_fn)(void);
typedef const char *(*s_msg_fn)(void);

static void s_check_plugin(const char *lib, const char *name, const char *old_health_sym)
{
    char path[4096];
    const char *bin = getenv("PL_BIN_DIR"); /* ctest sets it; tools/gpu-check.sh points it at
                                             * the binaries it carried to the GPU machine */
    snprintf(path, sizeof(path), "%s/../lib/%s", bin && *bin ? bin : PL_BIN_DIR, lib);
    if (access(path, F_OK) != 0)
        cr_skip_test("%s not built (no compiler for it here)", lib);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", path, dlerror());
    s_entry_fn entry = (s_entry_fn)dlsym(h, PL_BE_PLUGIN_SYMBOL);
    s_msg_fn msg = (s_msg_fn)dlsym(h, "pl_error_msg");
    cr_assert(entry && msg, "missing exported symbols");
    cr_assert_null(dlsym(h, old_health_sym), "health is a slot of the table, not an export");
    cr_assert_null(dlsym(h, "pl_model_open"), "the plugin leaks its static libraries' symbols");

    const pl_be_ops_t *ops = entry();
    cr_assert_eq(ops->abi_version, PL_BE_ABI_VERSION);
    cr_assert_str_eq(ops->name, name);
    cr_assert(ops->probe && ops->open && ops->close && ops->calibrate && ops->stage_load &&
              ops->stage_forward && ops->stage_free_seq && ops->stage_unload && ops->health);
    pl_status_t (*health)(int, json_t **) = ops->health;

    pl_be_device_info_t infos[8];
    int n = -1;
    pl_status_t st = ops->probe(infos, 8, &n);
    json_t *j = NULL;
    if (st == PL_ERR_NO_DEVICE) {
        /* this machine: no driver; the plugin says why */
        cr_assert_gt(strlen(msg()), 10, "no reason: '%s'", msg());
        cr_assert_eq(n, -1, "n_p written on failure");
        void *dev = NULL;
        cr_assert_eq(ops->open(0, 0, &dev), PL_ERR_NO_DEVICE);
        cr_assert_null(dev);
        cr_assert_eq(health(0, &j), PL_ERR_NO_DEVICE);
        cr_assert_null(j);
    } else {
        /* a GPU machine */
        cr_assert_eq(st, PL_OK, "probe: %s", msg());
        cr_assert_geq(n, 1);
        cr_assert_str_eq(infos[0].backend, name);
        cr_assert_eq(infos[0].index, 0);
        cr_assert_gt(infos[0].cores, 0);
        cr_assert_gt(infos[0].mem_bytes, 0);
        cr_assert_gt(strlen(infos[0].isa), 3);
        cr_assert_eq(health(0, &j), PL_OK, "health: %s", msg());
        cr_assert(json_is_string(json_object_get(j, "name")));
        json_decref(j);
        void *dev = NULL;
        cr_assert_eq(ops->open(n, 0, &dev), PL_ERR_NOT_FOUND); /* one past the last */
    }
}

Test(gpu_plugin, cuda_loads_and_reports_without_driver)
{
    s_check_plugin("libpipeld_be_cuda.so", "cuda", "pl_be_cuda_health");
}

Test(gpu_plugin, hip_loads_and_reports_without_driver)
{
    s_check_plugin("libpipeld_be_hip.so", "hip", "pl_be_hip_health");
}

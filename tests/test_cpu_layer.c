/* Tests of the CPU executor's forward pass on small models written by the test (Llama, Mistral,
 * Qwen2 with q/k/v biases, Qwen3 with q/k norms; f32, f16 and bf16 weights) against a scalar
 * double-precision reference (cpu_layer_util.h). */
#include "cpu_layer_util.h"

static void check_prefill(shape_t s, int n)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[64];
    float *logits = calloc((size_t)s.vocab, sizeof(float));
    double *ref = calloc((size_t)s.vocab, sizeof(double));
    tmodel_make(&m, s, 42);
    cr_assert(exec_open(&e, &m, 0, s.n_layers - 1, true, true, 2, 64, 64) == PL_OK, "load: %s",
              pl_error_msg());
    tokens_for(tok, n, s.vocab, 1);
    fwd1(&e, 1, 0, n, tok, logits);
    ref_forward(&m, tok, n, s.n_layers, NULL, ref);
    expect_logits(logits, ref, s.vocab, "prefill");
    exec_close(&e);
    tmodel_free(&m);
    free(logits);
    free(ref);
}

Test(cpu_layer, prefill_matches_reference)
{
    check_prefill(k_small, 7);
}

Test(cpu_layer, prefill_gqa_head_dim_llama3_matches_reference)
{
    check_prefill(k_gqa, 45); /* more rows than one attention chunk, positions past orig/high */
}

Test(cpu_layer, tied_bf16_matches_reference)
{
    shape_t s = k_gqa;
    s.tied = true;
    s.bf16 = true; /* converted (owned) tensors on the load path */
    check_prefill(s, 9);
}

/* Qwen2: q/k/v biases, on the short-sequence path (9 tokens) and the sgemm one (45). */
Test(cpu_layer, qwen2_biases_match_reference)
{
    check_prefill(with_family(k_gqa, F_QWEN2), 9);
    check_prefill(with_family(k_gqa, F_QWEN2), 45);
}

/* Qwen3: per-head q/k RMSNorm before RoPE; tied bf16 as small Qwen3 models ship. */
Test(cpu_layer, qwen3_qk_norm_matches_reference)
{
    shape_t s = with_family(k_gqa, F_QWEN3);
    check_prefill(s, 9);
    check_prefill(s, 45);
    s.tied = s.bf16 = true;
    check_prefill(s, 33);
}

/* Mistral: Llama's layer; a context within the sliding window loads and matches, one past it is
 * refused rather than computed with full attention. */
Test(cpu_layer, mistral_matches_reference_within_its_window)
{
    shape_t s = with_family(k_gqa, F_MISTRAL);
    s.window = 64;
    check_prefill(s, 40);
    tmodel_t m;
    exec_t e;
    tmodel_make(&m, s, 3);
    cr_expect(exec_open(&e, &m, 0, s.n_layers - 1, true, true, 1, 65, 8) == PL_ERR_UNSUPPORTED);
    cr_expect(strstr(pl_error_msg(), "sliding window of 64") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    tmodel_free(&m);
}

/* f16 weights as stored: converted in registers (decode rows) and by tiles (sgemm). */
Test(cpu_layer, f16_matches_reference)
{
    shape_t s = k_gqa;
    s.f16 = true;
    check_prefill(s, 9);
    check_prefill(s, 45);
}

/* A stage with no layers: embedding straight into the head. */
Test(cpu_layer, no_layer_stage)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[3] = {4, 9, 1};
    float logits[64];
    double ref[64];
    tmodel_make(&m, k_small, 3);
    cr_assert(exec_open(&e, &m, 0, -1, true, true, 1, 8, 8) == PL_OK, "%s", pl_error_msg());
    fwd1(&e, 0, 0, 3, tok, logits);
    ref_forward(&m, tok, 3, 0, NULL, ref);
    expect_logits(logits, ref, k_small.vocab, "no layers");
    exec_close(&e);
    tmodel_free(&m);
}

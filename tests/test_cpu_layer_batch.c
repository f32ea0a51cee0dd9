/* Tests of the CPU executor's KV cache across calls: decode after prefill, batches of any
 * composition giving the same logits, a prefill chunk without logits, a freed slot, a long
 * prompt prefilled in chunks bitwise as whole. */
#include "cpu_layer_util.h"

/* Prefill 6 tokens then decode one at a time: each step's logits equal the reference over the
 * whole prefix, i.e. what one full-sequence prefill gives. */
Test(cpu_layer, decode_after_prefill_matches_full_prefill)
{
    tmodel_t m;
    exec_t e, full;
    int32_t tok[16];
    float logits[64], full_logits[64];
    double ref[64];
    int n = 14;
    tmodel_make(&m, k_gqa, 7);
    cr_assert(exec_open(&e, &m, 0, k_gqa.n_layers - 1, true, true, 3, 32, 8) == PL_OK);
    cr_assert(exec_open(&full, &m, 0, k_gqa.n_layers - 1, true, true, 1, 32, 32) == PL_OK);
    tokens_for(tok, n, k_gqa.vocab, 2);
    fwd1(&e, 2, 0, 6, tok, logits);
    for (int p = 6; p <= n; p++) {
        if (p > 6)
            fwd1(&e, 2, p - 1, 1, tok + p - 1, logits);
        ref_forward(&m, tok, p, k_gqa.n_layers, NULL, ref);
        expect_logits(logits, ref, k_gqa.vocab, "decode");
        fwd1(&full, 0, 0, p, tok, full_logits);
        for (int i = 0; i < k_gqa.vocab; i++)
            cr_expect(fabsf(logits[i] - full_logits[i]) <= 1e-4f * (1 + fabsf(full_logits[i])),
                      "step %d logit %d: decode %g, full prefill %g", p, i, logits[i],
                      full_logits[i]);
    }
    exec_close(&e);
    exec_close(&full);
    tmodel_free(&m);
}

/* The same sequence in batches of different composition (alone, after others, before others,
 * other slots) gives bitwise-identical logits, in prefill and in decode, for a short sequence
 * (batch-invariant GEMM) and a long one (its own sgemm). */
Test(cpu_layer, batch_composition_does_not_change_logits)
{
    tmodel_t m;
    exec_t a, b;
    int V = k_gqa.vocab;
    static int32_t tok[5][48], in[128];
    static float alone[3][64], mixed[5 * 64];
    tmodel_make(&m, k_gqa, 9);
    for (int i = 0; i < 5; i++)
        tokens_for(tok[i], 48, V, 10 + i);
    cr_assert(exec_open(&a, &m, 0, k_gqa.n_layers - 1, true, true, 4, 48, 96) == PL_OK);
    cr_assert(exec_open(&b, &m, 0, k_gqa.n_layers - 1, true, true, 4, 48, 96) == PL_OK);
    /* alone: sequence 0 (5 tokens, then one decode step) and sequence 2 (34 tokens) */
    fwd1(&a, 0, 0, 5, tok[0], alone[0]);
    fwd1(&a, 0, 5, 1, tok[0] + 5, alone[1]);
    fwd1(&a, 1, 0, 34, tok[2], alone[2]);
    /* prefill among others: 3 tokens, ours (5), ours (34), 40 tokens; other slots */
    {
        int slot[4] = {1, 3, 0, 2}, pos0[4] = {0, 0, 0, 0}, n_tok[4] = {3, 5, 34, 40}, k = 0;
        const int32_t *src[4] = {tok[1], tok[0], tok[2], tok[3]};
        for (int i = 0; i < 4; i++)
            memcpy(in + k, src[i], (size_t)n_tok[i] * sizeof(int32_t)), k += n_tok[i];
        cr_assert(fwd(&b, 4, slot, pos0, n_tok, in, mixed) == PL_OK, "%s", pl_error_msg());
        cr_expect(memcmp(mixed + V, alone[0], (size_t)V * sizeof(float)) == 0,
                  "short prefill logits depend on the batch");
        cr_expect(memcmp(mixed + 2 * V, alone[2], (size_t)V * sizeof(float)) == 0,
                  "long prefill logits depend on the batch");
    }
    /* decode: a new 4-token prompt first, then one token each for three sequences, ours last */
    {
        int slot[4] = {2, 1, 0, 3}, pos0[4] = {40, 3, 34, 5}, n_tok[4] = {4, 1, 1, 1};
        int32_t din[7] = {tok[3][40], tok[3][41], tok[3][42], tok[3][43],
                          tok[1][3],  tok[2][34], tok[0][5]};
        cr_assert(fwd(&b, 4, slot, pos0, n_tok, din, mixed) == PL_OK, "%s", pl_error_msg());
        cr_expect(memcmp(mixed + 3 * V, alone[1], (size_t)V * sizeof(float)) == 0,
                  "decode logits depend on the batch");
    }
    exec_close(&a);
    exec_close(&b);
    tmodel_free(&m);
}

Test(cpu_layer, free_seq_forgets_slot)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    float a[64], b[64];
    tmodel_make(&m, k_small, 6);
    cr_assert(exec_open(&e, &m, 0, 1, true, true, 2, 8, 8) == PL_OK);
    fwd1(&e, 1, 0, 4, tok, a);
    pl_be_stage_free_seq(e.stage, 1);
    pl_be_stage_free_seq(e.stage, 99); /* out of range: ignored */
    int slot = 1, pos0 = 4, n = 1;
    cr_expect(fwd(&e, 1, &slot, &pos0, &n, tok + 4, b) == PL_ERR_INVALID);
    fwd1(&e, 1, 0, 4, tok, b); /* reused from scratch: same result */
    cr_expect(memcmp(a, b, sizeof(float) * (size_t)k_small.vocab) == 0);
    exec_close(&e);
    tmodel_free(&m);
}

/* An earlier prefill chunk asks for no logits: the head is skipped (out untouched), the chunk's
 * KV is kept, and the last chunk's logits equal the reference over the whole prompt; between
 * layers the hook runs once per layer boundary. */
static void s_count(void *arg)
{
    (*(int *)arg)++;
}

Test(cpu_layer, no_logits_skips_the_head_and_keeps_the_kv)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[7] = {5, 3, 8, 1, 9, 2, 6};
    float out[64], logits[64];
    double ref[64];
    int calls = 0;
    tmodel_make(&m, k_gqa, 7);
    cr_assert(exec_open(&e, &m, 0, k_gqa.n_layers - 1, true, true, 1, 8, 8) == PL_OK, "%s",
              pl_error_msg());
    for (int i = 0; i < 64; i++)
        out[i] = (float)i + 0.5f;
    int slot = 0, pos0 = 0, n = 4;
    pl_be_batch_t b = {.n_seq = 1,
                       .n_tokens = 4,
                       .slot = &slot,
                       .pos0 = &pos0,
                       .n_tok = &n,
                       .no_logits = true,
                       .between_layers = s_count,
                       .between_arg = &calls};
    cr_assert(pl_be_stage_forward(e.stage, &b, tok, out) == PL_OK, "%s", pl_error_msg());
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], (float)i + 0.5f, "out[%d] written although no logits were asked", i);
    cr_expect_eq(calls, k_gqa.n_layers - 1, "between-layers hook ran %d times", calls);
    fwd1(&e, 0, 4, 3, tok + 4, logits);
    ref_forward(&m, tok, 7, k_gqa.n_layers, NULL, ref);
    expect_logits(logits, ref, k_gqa.vocab, "after a chunk without logits");
    exec_close(&e);
    tmodel_free(&m);
}

/* A prompt past the sgemm threshold prefilled whole and in chunks of several sizes (under the
 * threshold, at it, past it, most dividing nothing): the hidden states come out bitwise the
 * same, for every float weight type. Packed weights (cpu_pack.h) round as the short rows'
 * kernels do whatever the token count (PL_CPU_WEIGHTS=packed; as stored, OpenBLAS's rounding of
 * a long sequence depends on its length and this fails), and attention goes row by row (a GEMM
 * over a block of query rows rounds a row by the block's shape), so 1-token chunks, which take
 * decode's path, round alike too. */
Test(cpu_layer, chunked_prefill_hidden_bitwise_whole)
{
    static const int chunks[] = {1, 2, 7, 31, 32, 34, 48, 64};
    enum { P = 100, H = 32 };
    cr_assert_eq(k_gqa.hidden, H);
    setenv("PL_CPU_WEIGHTS", "packed", 1);
    for (int dt = 0; dt < 3; dt++) {
        shape_t s = k_gqa;
        s.f16 = dt == 1;
        s.bf16 = dt == 2;
        tmodel_t m;
        exec_t e;
        int32_t tok[P];
        static float whole[P * H], part[P * H];
        tmodel_make(&m, s, 40 + (unsigned)dt);
        for (int i = 0; i < P; i++)
            tok[i] = (i * 7 + 3) % s.vocab;
        cr_assert(exec_open(&e, &m, 0, s.n_layers - 1, true, false, 1, P, P) == PL_OK, "%s",
                  pl_error_msg());
        fwd1(&e, 0, 0, P, tok, whole);
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
            memset(part, 0, sizeof(part));
            for (int p0 = 0; p0 < P; p0 += chunks[c])
                fwd1(&e, 0, p0, PL_MIN(chunks[c], P - p0), tok + p0, part + (size_t)p0 * H);
            for (int t = 0; t < P; t++)
                cr_assert(memcmp(whole + (size_t)t * H, part + (size_t)t * H, H * 4) == 0,
                          "dtype %d, chunks of %d: token %d's hidden state differs from the whole "
                          "prompt's",
                          dt, chunks[c], t);
        }
        exec_close(&e);
        tmodel_free(&m);
    }
    unsetenv("PL_CPU_WEIGHTS");
}

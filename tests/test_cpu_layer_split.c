/* Tests of the CPU executor split into stages: every family and weight type on 2 and 3 stages
 * gives bitwise the one-stage logits, and a first stage's hidden output is the reference's. */
#include "cpu_layer_util.h"

/* Every family and weight type: 2 and 3 stages give bitwise the 1-stage logits, in prefill
 * (short and long sequences) and in the decode steps after it. */
Test(cpu_layer, families_and_types_split_equal_single_stage)
{
    static const family_t fams[] = {F_LLAMA, F_MISTRAL, F_QWEN2, F_QWEN3};
    int V = k_gqa.vocab, H = k_gqa.hidden;
    for (size_t fi = 0; fi < sizeof(fams) / sizeof(fams[0]); fi++) {
        for (int dt = 0; dt < 3; dt++) {
            shape_t s = with_family(k_gqa, fams[fi]);
            s.f16 = dt == 1;
            s.bf16 = dt == 2;
            tmodel_t m;
            exec_t one, a2, b2, a3, b3, c3;
            int32_t tok[40];
            static float hid[40 * 32], hid2[40 * 32], l1[64], l2[64], l3[64];
            tmodel_make(&m, s, 20 + fi * 3 + (unsigned)dt);
            cr_assert(exec_open(&one, &m, 0, 2, true, true, 1, 48, 40) == PL_OK, "%s",
                      pl_error_msg());
            cr_assert(exec_open(&a2, &m, 0, 1, true, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&b2, &m, 2, 2, false, true, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&a3, &m, 0, 0, true, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&b3, &m, 1, 1, false, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&c3, &m, 2, 2, false, true, 1, 48, 40) == PL_OK);
            for (int n = 5, pos = 0; pos + n <= 40; pos += n, n = n == 5 ? 34 : 1) {
                tokens_for(tok, 40, V, (int)fi + dt);
                fwd1(&one, 0, pos, n, tok + pos, l1);
                fwd1(&a2, 0, pos, n, tok + pos, hid);
                fwd1(&b2, 0, pos, n, hid, l2);
                fwd1(&a3, 0, pos, n, tok + pos, hid);
                fwd1(&b3, 0, pos, n, hid, hid2);
                fwd1(&c3, 0, pos, n, hid2, l3);
                cr_expect(memcmp(l1, l2, (size_t)V * 4) == 0 && memcmp(l1, l3, (size_t)V * 4) == 0,
                          "family %d dtype %d: %d tokens at %d: split stages differ", (int)fi, dt,
                          n, pos);
            }
            (void)H;
            exec_close(&one), exec_close(&a2), exec_close(&b2);
            exec_close(&a3), exec_close(&b3), exec_close(&c3);
            tmodel_free(&m);
        }
    }
}

/* Two stages (embed + layer 0 | layers 1..2 + head) give the one-stage logits, and the first
 * stage's hidden output equals the reference hidden state after one layer. */
Test(cpu_layer, split_stages_match_single_stage)
{
    tmodel_t m;
    exec_t s0, s1, all;
    int n = 6, H = k_gqa.hidden, V = k_gqa.vocab;
    int32_t tok[8];
    float hid[8 * 32], logits[64], one[64];
    double ref_hid[8 * 32];
    tmodel_make(&m, k_gqa, 11);
    tokens_for(tok, n, V, 5);
    cr_assert(exec_open(&s0, &m, 0, 0, true, false, 2, 16, 16) == PL_OK);
    cr_assert(exec_open(&s1, &m, 1, 2, false, true, 2, 16, 16) == PL_OK);
    cr_assert(exec_open(&all, &m, 0, 2, true, true, 2, 16, 16) == PL_OK);
    fwd1(&s0, 1, 0, n, tok, hid);
    ref_forward(&m, tok, n, 1, ref_hid, NULL);
    for (int i = 0; i < n * H; i++)
        cr_expect(fabs(hid[i] - ref_hid[i]) <= 1e-4 * (1 + fabs(ref_hid[i])), "hidden %d", i);
    fwd1(&s1, 1, 0, n, hid, logits);
    fwd1(&all, 0, 0, n, tok, one);
    cr_expect(memcmp(logits, one, (size_t)V * sizeof(float)) == 0, "split differs from single");
    exec_close(&s0);
    exec_close(&s1);
    exec_close(&all);
    tmodel_free(&m);
}

/* Tests of the CPU executor's refusals: bad batches leave the KV cache as it was, and a stage
 * that cannot load says why. */
#include "cpu_layer_util.h"

static void expect_reject(exec_t *e, pl_status_t want, const char *needle, int n_seq,
                          const int *slot, const int *pos0, const int *n_tok, int n_tokens,
                          const void *in)
{
    float out[4 * 64];
    pl_be_batch_t b = {
        .n_seq = n_seq, .n_tokens = n_tokens, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    pl_error_clear();
    pl_status_t st = pl_be_stage_forward(e->stage, &b, in, out);
    cr_expect(st == want, "want %s, got %s (%s)", pl_status_str(want), pl_status_str(st),
              pl_error_msg());
    cr_expect(strstr(pl_error_msg(), needle) != NULL, "message '%s' lacks '%s'", pl_error_msg(),
              needle);
}

Test(cpu_layer, bad_batches_rejected_and_state_kept)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bad_tok[2] = {1, 50};
    float before[64], after[64];
    double ref[64];
    tmodel_make(&m, k_small, 5);
    cr_assert(exec_open(&e, &m, 0, 1, true, true, 2, 8, 6) == PL_OK);
    fwd1(&e, 0, 0, 3, tok, before);
    int s0[2] = {0, 1}, s_big[1] = {2}, s_neg[1] = {-1}, s_dup[2] = {1, 1};
    int p0[2] = {0, 0}, p3[1] = {3}, p_far[1] = {5}, p_end[1] = {7}, p_neg[1] = {-2};
    int n1[1] = {1}, n2[1] = {2}, n11[2] = {1, 1}, n7[1] = {7}, n0[1] = {0};
    expect_reject(&e, PL_ERR_RANGE, "slot 2", 1, s_big, p0, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "slot -1", 1, s_neg, p0, n1, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "used twice", 2, s_dup, p0, n11, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "max_ctx", 1, s0, p_end, n2, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "positions", 1, s0, p_neg, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "max_tokens", 1, s0, p0, n7, 7, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_tok 0", 1, s0, p0, n0, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "sum to 2", 2, s0, p0, n11, 3, tok);
    expect_reject(&e, PL_ERR_RANGE, "id 50", 1, s0, p3, n2, 2, bad_tok);
    expect_reject(&e, PL_ERR_INVALID, "holds only", 1, s0, p_far, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_seq 3", 3, s0, p0, n11, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_seq 0", 0, s0, p0, n11, 0, tok);
    expect_reject(&e, PL_ERR_INVALID, "NULL", 1, s0, NULL, n1, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "NULL", 1, s0, p0, n1, 1, NULL);
    /* nothing above touched slot 0: decoding continues as if they never happened */
    fwd1(&e, 0, 3, 1, tok + 3, after);
    ref_forward(&m, tok, 4, 2, NULL, ref);
    expect_logits(after, ref, k_small.vocab, "after rejects");
    (void)before;
    exec_close(&e);
    tmodel_free(&m);
}

Test(cpu_layer, load_failures)
{
    tmodel_t m;
    exec_t e;
    tmodel_make(&m, k_small, 8);
    cr_expect(exec_open(&e, &m, 1, 2, true, true, 1, 8, 8) == PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "layers 1..2") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    cr_expect(exec_open(&e, &m, 0, 1, true, true, 1, 0, 8) == PL_ERR_INVALID);
    pl_be_device_close(&e.dev);
    cr_expect(exec_open(&e, &m, 0, 1, true, true, 1, 8, -1) == PL_ERR_INVALID);
    pl_be_device_close(&e.dev);
    /* 2^30 slots x 2^30 positions: the KV cache size overflows or exceeds memory */
    cr_expect(exec_open(&e, &m, 0, 1, false, false, 1 << 30, 1 << 30, 8) == PL_ERR_NOMEM);
    cr_expect(strstr(pl_error_msg(), "kv cache") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    /* a cache that fits no machine, without overflow: the message says how many bytes */
    cr_expect(exec_open(&e, &m, 0, 1, false, false, 1 << 20, 1 << 20, 8) == PL_ERR_NOMEM);
    cr_expect(strstr(pl_error_msg(), "bytes") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    exec_close(&(exec_t){.dev = NULL, .stage = NULL}); /* unload and close accept NULL */
    tmodel_free(&m);
}

/* Tests of pl_sample: greedy ties, top-k / top-p filtering against a sort-based reference,
 * seed repeatability, independence of (sequence, step), and the empirical distribution. */
#include "model/sample.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float g_scratch[2 * 4096];

static int sample(const float *logits, int vocab, float temp, int top_k, float top_p, uint64_t seed,
                  uint64_t seq, uint64_t step)
{
    pl_sample_params_t p = {.temperature = temp, .top_k = top_k, .top_p = top_p, .seed = seed};
    int id = pl_sample(logits, vocab, &p, seq, step, g_scratch);
    cr_assert(id >= 0 && id < vocab, "token %d outside the vocabulary", id);
    return id;
}

Test(sample, greedy_takes_lowest_index_on_ties)
{
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    cr_expect(sample(l, 6, 0.0f, 0, 1.0f, 1, 0, 0) == 1);
    cr_expect(sample(l, 6, -1.0f, 0, 1.0f, 1, 0, 0) == 1);
    float m[4] = {NAN, -5.0f, 7.0f, 7.0f};
    cr_expect(sample(m, 4, 0.0f, 0, 1.0f, 1, 0, 0) == 2, "a NaN logit is never the argmax");
    float one = 1.0f;
    cr_expect(sample(&one, 1, 1.0f, 0, 1.0f, 1, 0, 0) == 0);
}

Test(sample, top_k_1_equals_greedy)
{
    float l[64];
    uint64_t s = 5;
    for (int i = 0; i < 64; i++) {
        s = s * 6364136223846793005ULL + 1;
        l[i] = (float)(s >> 40) / 1e6f;
    }
    l[40] = l[12] = 1e9f; /* tie: lowest id */
    for (uint64_t step = 0; step < 50; step++)
        cr_expect(sample(l, 64, 1.5f, 1, 0.9f, 3, 1, step) == 12);
}

Test(sample, same_inputs_same_token)
{
    float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = sinf((float)i) * 2.0f;
    for (uint64_t step = 0; step < 30; step++) {
        int a = sample(l, 100, 1.0f, 0, 1.0f, 77, 4, step);
        memset(g_scratch, 0x7f, sizeof(g_scratch)); /* scratch contents do not matter */
        cr_expect(sample(l, 100, 1.0f, 0, 1.0f, 77, 4, step) == a);
    }
}

Test(sample, different_seq_and_step_give_different_draws)
{
    /* uniform logits: the token is the draw itself, so equal streams would show */
    float l[1000];
    int same_step = 0, same_seq = 0, same_seed = 0;
    for (int i = 0; i < 1000; i++)
        l[i] = 0.0f;
    for (uint64_t k = 0; k < 200; k++) {
        int base = sample(l, 1000, 1.0f, 0, 1.0f, 9, k, k);
        same_step += sample(l, 1000, 1.0f, 0, 1.0f, 9, k, k + 1) == base;
        same_seq += sample(l, 1000, 1.0f, 0, 1.0f, 9, k + 1, k) == base;
        same_seed += sample(l, 1000, 1.0f, 0, 1.0f, 10, k, k) == base;
    }
    /* chance agreement is 1/1000 per pair: 200 pairs give about 0.2 */
    cr_expect(same_step <= 5 && same_seq <= 5 && same_seed <= 5, "%d %d %d", same_step, same_seq,
              same_seed);
}

/* Reference: sort ids by (logit desc, id asc), keep top_k, softmax, keep the nucleus. Returns the
 * number kept; ids and probabilities (renormalised) in rank order. */
static const float *g_cmp_logits;
static int cmp_rank(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    double lx = g_cmp_logits[x], ly = g_cmp_logits[y];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x - y;
}

static int ref_filter(const float *l, int vocab, float temp, int top_k, float top_p, int *ids,
                      double *prob)
{
    g_cmp_logits = l;
    for (int i = 0; i < vocab; i++)
        ids[i] = i;
    qsort(ids, (size_t)vocab, sizeof(int), cmp_rank);
    int n = top_k > 0 && top_k < vocab ? top_k : vocab;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += prob[i] = exp(((double)l[ids[i]] - l[ids[0]]) / temp);
    if (top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += prob[i] / sum;
            if (cum >= top_p - 1e-6) {
                n = i + 1;
                break;
            }
        }
    }
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += prob[i];
    for (int i = 0; i < n; i++)
        prob[i] /= sum;
    return n;
}

/* Draw many times and compare the counts with the reference probabilities: each count within
 * 5 sigma of its expectation, and tokens outside the filtered set never drawn. */
static void check_distribution(const float *l, int vocab, float temp, int top_k, float top_p)
{
    int ids[64], n, draws = 10000, counts[64] = {0};
    double prob[64];
    n = ref_filter(l, vocab, temp, top_k, top_p, ids, prob);
    for (uint64_t step = 0; step < (uint64_t)draws; step++)
        counts[sample(l, vocab, temp, top_k, top_p, 1234, 5, step)]++;
    int inside = 0;
    for (int i = 0; i < n; i++) {
        double e = draws * prob[i], sd = sqrt(draws * prob[i] * (1 - prob[i]));
        cr_expect(fabs(counts[ids[i]] - e) <= 5 * sd + 1, "token %d: %d draws, expected %.1f",
                  ids[i], counts[ids[i]], e);
        inside += counts[ids[i]];
    }
    cr_expect(inside == draws, "%d draws fell outside the kept set of %d", draws - inside, n);
}

Test(sample, distribution_matches_softmax)
{
    float l[4] = {1.0f, 0.0f, 2.0f, -0.5f};
    check_distribution(l, 4, 1.0f, 0, 1.0f);
    check_distribution(l, 4, 0.5f, 0, 1.0f); /* temperature sharpens */
    check_distribution(l, 4, 3.0f, 0, 1.0f);
}

Test(sample, top_k_keeps_k_largest)
{
    float l[10] = {0.1f, 0.9f, 0.3f, 0.8f, 0.2f, 0.7f, 0.0f, 0.95f, 0.5f, 0.4f};
    check_distribution(l, 10, 0.3f, 3, 1.0f);
}

Test(sample, top_p_keeps_nucleus)
{
    /* probabilities about .64 .24 .09 .03: top_p .8 keeps two, .9 keeps three */
    float l[4] = {0.0f, 2.0f, 1.0f, -0.2f};
    check_distribution(l, 4, 1.0f, 0, 0.8f);
    check_distribution(l, 4, 1.0f, 0, 0.9f);
    check_distribution(l, 4, 1.0f, 2, 0.95f); /* both filters */
    int ids[4];
    double prob[4];
    cr_expect(ref_filter(l, 4, 1.0f, 0, 0.8f, ids, prob) == 2);
    cr_expect(ref_filter(l, 4, 1.0f, 0, 0.9f, ids, prob) == 3);
    /* top_p 0 keeps only the most likely */
    for (uint64_t s = 0; s < 20; s++)
        cr_expect(sample(l, 4, 1.0f, 0, 0.0f, 3, 0, s) == 1);
}

/* Top-k and top-p over a vocabulary larger than the selection's first block, against the sort
 * reference: every drawn token is inside the reference set. */
Test(sample, large_vocab_filters_match_reference)
{
    enum { V = 3000 };
    static float l[V];
    static int ids[V];
    static double prob[V];
    uint64_t s = 99;
    for (int i = 0; i < V; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((s >> 40) % 1000) / 100.0f; /* many exact ties */
    }
    int n = ref_filter(l, V, 0.7f, 0, 0.9f, ids, prob);
    cr_assert(n > 64, "the nucleus must exceed the first selection block (%d)", n);
    static bool in_set[V];
    for (int i = 0; i < n; i++)
        in_set[ids[i]] = true;
    for (uint64_t step = 0; step < 300; step++) {
        int t = sample(l, V, 0.7f, 0, 0.9f, 8, 2, step);
        cr_expect(in_set[t], "token %d is outside the nucleus", t);
    }
    memset(in_set, 0, sizeof(in_set));
    n = ref_filter(l, V, 1.0f, 200, 1.0f, ids, prob);
    for (int i = 0; i < n; i++)
        in_set[ids[i]] = true;
    for (uint64_t step = 0; step < 300; step++) {
        int t = sample(l, V, 1.0f, 200, 1.0f, 8, 2, step);
        cr_expect(in_set[t], "token %d is outside the top 200", t);
    }
}

Test(sample, infinite_and_masked_logits)
{
    float l[4] = {-INFINITY, 1.0f, INFINITY, 0.0f};
    cr_expect(sample(l, 4, 1.0f, 0, 1.0f, 1, 0, 0) == 2);
    float m[3] = {-INFINITY, -INFINITY, -INFINITY};
    cr_expect(sample(m, 3, 1.0f, 0, 1.0f, 1, 0, 0) == 0);
    float k[3] = {-INFINITY, 5.0f, -INFINITY};
    for (uint64_t s = 0; s < 20; s++)
        cr_expect(sample(k, 3, 2.0f, 0, 1.0f, 1, 0, s) == 1);
}

/* Greedy over a large vocabulary (the argmax's lanes and its tail) against a plain loop: ties,
 * NaN and signed zeros in every place, lowest id wins. */
Test(sample, greedy_large_vocab_matches_plain_loop)
{
    enum { V = 4093 };
    static float l[V];
    uint64_t s = 3;
    for (int round = 0; round < 200; round++) {
        int n = V - round % 13;
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            l[i] = (float)((s >> 40) % 64) - 40.0f; /* ties everywhere */
            if ((s >> 20) % 97 == 0)
                l[i] = NAN;
        }
        if (round % 3 == 0) /* only zeros and below: +0 and -0 tie */
            for (int i = 0; i < n; i++)
                l[i] = l[i] > 0 ? ((s >> (i % 40)) & 1 ? 0.0f : -0.0f) : l[i];
        int want = 0;
        for (int i = 1; i < n; i++) {
            float a = isnan(l[i]) ? -INFINITY : l[i], b = isnan(l[want]) ? -INFINITY : l[want];
            if (a > b)
                want = i;
        }
        cr_expect(sample(l, n, 0.0f, 0, 1.0f, 1, 0, 0) == want, "round %d", round);
    }
}

/* Top-k far below the vocabulary (the heap selection) keeps exactly the reference's k: every
 * draw inside the set, and over many draws every member drawn. */
Test(sample, small_top_k_of_large_vocab_matches_reference)
{
    enum { V = 4096, K = 8 };
    static float l[V];
    static int ids[V];
    static double prob[V];
    static bool in_set[V], drawn[V];
    uint64_t s = 17;
    for (int i = 0; i < V; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((s >> 40) % 4000) / 1000.0f; /* ties */
    }
    int n = ref_filter(l, V, 1.0f, K, 1.0f, ids, prob);
    cr_assert(n == K);
    for (int i = 0; i < n; i++)
        in_set[ids[i]] = true;
    for (uint64_t step = 0; step < 2000; step++) {
        int t = sample(l, V, 1.0f, K, 1.0f, 8, 2, step);
        cr_expect(in_set[t], "token %d is outside the top %d", t, K);
        drawn[t] = true;
    }
    for (int i = 0; i < n; i++)
        cr_expect(drawn[ids[i]], "token %d of the top %d never drawn", ids[i], K);
}

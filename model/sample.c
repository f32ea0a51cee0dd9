/* Next-token sampling: greedy argmax, or temperature, top-k and top-p with one counter-based
 * uniform draw per (seed, sequence, step), so the choice never depends on how work was split. */
#include "model/sample.h"

#include "common/util.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

/* A candidate token; scratch (2 * vocab floats) is used as an array of these. */
typedef struct {
    float v; /* logit / temperature, later its probability */
    int id;
} s_cand_t;

/* The strict total order candidates are ranked by: larger value first, then lower id. */
static bool s_before(const s_cand_t *a, const s_cand_t *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static void s_swap(s_cand_t *a, s_cand_t *b)
{
    s_cand_t t = *a;
    *a = *b;
    *b = t;
}

/* Sift c[i] down the heap c[0..k) whose root is its worst entry (the one every other entry is
 * s_before). */
static void s_sift(s_cand_t *c, int k, int i)
{
    for (;;) {
        int w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && s_before(&c[w], &c[l]))
            w = l;
        if (r < k && s_before(&c[w], &c[r]))
            w = r;
        if (w == i)
            return;
        s_swap(&c[i], &c[w]);
        i = w;
    }
}

/* s_select for k far below n: one pass that keeps the k best so far as a heap, so most entries
 * cost one well-predicted comparison with its worst (a quickselect over a 32 K vocabulary
 * mispredicts half its comparisons: ~0.5 ms a token for top-k 40, measured). An entry that
 * enters swaps places with the one it evicts, so c[k..n) keeps the rest. */
static void s_select_heap(s_cand_t *c, int n, int k)
{
    for (int i = k / 2 - 1; i >= 0; i--)
        s_sift(c, k, i);
    for (int i = k; i < n; i++)
        if (s_before(&c[i], &c[0])) {
            s_swap(&c[i], &c[0]);
            s_sift(c, k, 0);
        }
}

/* Reorder c[0..n) so its first k entries are the k best (in no particular order). */
static void s_select(s_cand_t *c, int n, int k)
{
    if (k > 0 && k <= n / 16) {
        s_select_heap(c, n, k);
        return;
    }
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        /* median of three as pivot keeps sorted input from going quadratic */
        int mid = lo + (hi - lo) / 2;
        if (s_before(&c[mid], &c[lo]))
            s_swap(&c[mid], &c[lo]);
        if (s_before(&c[hi], &c[lo]))
            s_swap(&c[hi], &c[lo]);
        if (s_before(&c[hi], &c[mid]))
            s_swap(&c[hi], &c[mid]);
        s_cand_t pivot = c[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (s_before(&c[i], &pivot))
                i++;
            while (s_before(&pivot, &c[j]))
                j--;
            if (i <= j)
                s_swap(&c[i++], &c[j--]);
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            return;
    }
}

static void s_sort(s_cand_t *c, int n)
{
    /* insertion sort for short runs, else select the middle and recurse on both halves */
    if (n <= 16) {
        for (int i = 1; i < n; i++) {
            s_cand_t x = c[i];
            int j = i - 1;
            while (j >= 0 && s_before(&x, &c[j])) {
                c[j + 1] = c[j];
                j--;
            }
            c[j + 1] = x;
        }
        return;
    }
    int half = n / 2;
    s_select(c, n, half);
    s_sort(c, half);
    s_sort(c + half, n - half);
}

static float s_clean(float x)
{
    return isnan(x) ? -INFINITY : x;
}

/* The lowest id of the largest logit (NaN as -inf). Two passes, the largest value and then its
 * first place: one pass that compares each logit with logits[best] chains a load and a compare
 * through every element (~190 us for 32 K logits, measured; the two passes ~20). */
static int s_argmax(const float *logits, int vocab)
{
    float m[8], mx;
    int i = 0;
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    for (; i + 8 <= vocab; i += 8) /* eight maxima side by side: no chain through one */
        for (int j = 0; j < 8; j++) {
            float v = s_clean(logits[i + j]);
            m[j] = v > m[j] ? v : m[j];
        }
    for (int j = 0; i < vocab; i++, j++) {
        float v = s_clean(logits[i]);
        m[j] = v > m[j] ? v : m[j];
    }
    mx = m[0];
    for (int j = 1; j < 8; j++)
        mx = m[j] > mx ? m[j] : mx;
    for (i = 0; i < vocab; i++)
        if (s_clean(logits[i]) == mx)
            return i;
    return 0; /* every logit NaN or -inf: the first */
}

/* Sort the best prefix of c[0..n) (probabilities) until it holds at least `mass`; returns its
 * length. Selects a growing prefix instead of sorting the whole vocabulary. */
static int s_nucleus(s_cand_t *c, int n, double mass)
{
    int m = PL_MIN(n, 64), done = 0;
    double cum = 0.0;
    for (;;) {
        if (m < n)
            s_select(c + done, n - done, m - done);
        s_sort(c + done, m - done);
        for (int i = done; i < m; i++) {
            cum += c[i].v;
            if (cum >= mass)
                return i + 1;
        }
        if (m == n)
            return n;
        done = m;
        m = m > n / 2 ? n : 2 * m;
    }
}

int pl_sample(const float *logits, int vocab, const pl_sample_params_t *params, uint64_t seq_id,
              uint64_t step, float *scratch)
{
    s_cand_t *c = (s_cand_t *)(void *)scratch;
    int n = vocab;
    double total = 0.0;

    if (vocab <= 1)
        return 0;
    if (!(params->temperature > 0.0f) || params->top_k == 1)
        return s_argmax(logits, vocab);
    for (int i = 0; i < vocab; i++) {
        c[i].v = s_clean(logits[i]) / params->temperature;
        c[i].id = i;
    }
    if (params->top_k > 0 && params->top_k < vocab) {
        s_select(c, vocab, params->top_k);
        n = params->top_k;
        s_sort(c, n);
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = c[i].v > mx ? c[i].v : mx;
    if (isinf(mx)) /* everything masked, or an infinite logit */
        return s_argmax(logits, vocab);
    for (int i = 0; i < n; i++) {
        c[i].v = expf(c[i].v - mx);
        total += c[i].v;
    }
    if (params->top_p < 1.0f) {
        double p = params->top_p > 0.0f ? (double)params->top_p : 0.0;
        int keep = s_nucleus(c, n, p * total);
        total = 0.0;
        for (int i = 0; i < keep; i++)
            total += c[i].v;
        n = keep;
    }
    /* Candidates are walked in rank order when filtered, in id order otherwise. */
    double target = (double)pl_rand_uniform(pl_rand_key(params->seed, seq_id, step), 0) * total;
    double cum = 0.0;
    int last = c[0].id;
    for (int i = 0; i < n; i++) {
        if (c[i].v <= 0.0f)
            continue;
        cum += c[i].v;
        last = c[i].id;
        if (target < cum)
            return c[i].id;
    }
    return last;
}

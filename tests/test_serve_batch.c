/* The continuous batcher's rules (pipeline/batch.h): admission only with a free slot, leaving at
 * once, the token budget, chunked prefill mixed with decode, lanes spread over the stages. */
#include "pipeline/batch.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX 64

static pl_batch_t *s_new(int slots, int lanes, int step, int chunk, int queue)
{
    pl_batch_params_t p = {.n_slots = slots, .lanes = lanes, .step_tokens = step, .chunk = chunk,
                           .max_queue = queue};
    pl_batch_t *b = NULL;
    cr_assert_eq(pl_batch_create(&p, &b), PL_OK, "%s", pl_error_msg());
    return b;
}

static void s_prompt(int32_t *p, int len, int base)
{
    for (int i = 0; i < len; i++)
        p[i] = base + i;
}

/* One formed microbatch, kept as the test's record of what was sent. */
typedef struct {
    int lane, n, n_tokens;
    bool prompt, awaits;
    pl_act_seq_t seqs[S_MAX];
    int32_t tokens[256];
    bool samples[S_MAX]; /* the entry ends its prompt or decodes: it comes back */
} s_mb_t;

static bool s_next(pl_batch_t *b, s_mb_t *m)
{
    pl_batch_mb_t mb;
    m->n = pl_batch_next(b, m->seqs, m->tokens, &mb);
    if (m->n > 0) {
        m->lane = mb.lane;
        m->n_tokens = mb.n_tokens;
        m->prompt = mb.prompt;
        m->awaits = mb.awaits;
    }
    return m->n > 0;
}

Test(serve_batch, params_checked)
{
    pl_batch_params_t p = {.n_slots = 0, .lanes = 1, .step_tokens = 1};
    pl_batch_t *b = NULL;
    cr_assert_eq(pl_batch_create(&p, &b), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "n_slots"), "%s", pl_error_msg());
    p.n_slots = 1, p.lanes = 0;
    cr_assert_eq(pl_batch_create(&p, &b), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "lanes"), "%s", pl_error_msg());
    p.lanes = 1, p.step_tokens = 0;
    cr_assert_eq(pl_batch_create(&p, &b), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "step_tokens"), "%s", pl_error_msg());
    p.step_tokens = 4, p.max_queue = -1;
    cr_assert_eq(pl_batch_create(&p, &b), PL_ERR_INVALID);
    cr_assert_null(b);
    b = s_new(2, 1, 8, 0, 0);
    int32_t t[2] = {1, 2};
    cr_assert_eq(pl_batch_add(b, 1, t, 0, 4), PL_ERR_INVALID, "empty prompt");
    cr_assert_eq(pl_batch_add(b, 1, t, 2, 0), PL_ERR_INVALID, "max_new 0");
    cr_assert_eq(pl_batch_add(b, 1, t, 2, 4), PL_OK);
    cr_assert_eq(pl_batch_add(b, 1, t, 2, 4), PL_ERR_INVALID, "the same id twice");
    pl_batch_destroy(&b);
    pl_batch_destroy(&b); /* safe twice */
}

/* Admission needs a free slot; the queue is bounded; a finished sequence frees its slot at once
 * and the next queued one takes it in the very next microbatch. */
Test(serve_batch, admission_and_leaving)
{
    pl_batch_t *b = s_new(2, 1, 64, 0, 1);
    int32_t p[3][4];
    for (int i = 0; i < 3; i++)
        s_prompt(p[i], 4, 100 * (i + 1));
    cr_assert_eq(pl_batch_add(b, 10, p[0], 4, 5), PL_OK);
    cr_assert_eq(pl_batch_add(b, 11, p[1], 4, 5), PL_OK);
    cr_assert_eq(pl_batch_add(b, 12, p[2], 4, 5), PL_OK, "queued");
    cr_assert_eq(pl_batch_add(b, 13, p[2], 4, 5), PL_ERR_BUSY, "queue of 1 is full");
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.live, 2);
    cr_assert_eq(st.queued, 1);
    s_mb_t m;
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 2, "both live prompts in the one lane");
    for (int i = 0; i < m.n; i++)
        cr_assert_lt(m.seqs[i].seq, 2u, "only slots 0 and 1 exist");
    cr_assert_eq(m.n_tokens, 8);
    cr_assert_not(s_next(b, &m), "the only lane awaits its tokens");
    /* slot 0 finishes with its first token; slot 1 goes on */
    pl_act_seq_t back[2] = {{.seq = 0, .token = 7, .flags = PL_ACT_FINISHED}, {.seq = 1, .token = 8}};
    pl_batch_event_t ev[2];
    int n_ev;
    cr_assert_eq(pl_batch_tokens(b, 0, back, 2, ev, &n_ev), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n_ev, 2);
    cr_assert(ev[0].left && ev[0].id == 10 && ev[0].slot == 0 && ev[0].token == 7);
    cr_assert(!ev[1].left && ev[1].id == 11 && ev[1].token == 8);
    pl_batch_stats(b, &st);
    cr_assert_eq(st.live, 1, "the slot is free at once");
    cr_assert_eq(st.queued, 1, "admission happens when the next microbatch is formed");
    cr_assert(s_next(b, &m));
    pl_batch_stats(b, &st);
    cr_assert_eq(st.queued, 0);
    cr_assert_eq(st.admitted, 3);
    cr_assert_eq(st.admitted_mid, 1, "sequence 12 joined while 11 was decoding");
    /* slot 1's decode token first, then slot 0's new prompt */
    cr_assert_eq(m.n, 2);
    cr_assert_eq(m.seqs[0].seq, 1u);
    cr_assert_eq(m.seqs[0].pos0, 4u);
    cr_assert_eq(m.seqs[0].n_tok, 1u);
    cr_assert_eq(m.tokens[0], 8);
    cr_assert_eq(m.seqs[1].seq, 0u, "the queued sequence took the freed slot");
    cr_assert_eq(m.seqs[1].pos0, 0u);
    cr_assert_eq(m.tokens[1], 300);
    pl_batch_destroy(&b);
}

/* Prompts are cut back from their end (7 in chunks of 3: 1, 3, 3); chunks that end no prompt do
 * not hold their lane; a decoding sequence and a long prompt share microbatches under the
 * budget. */
Test(serve_batch, chunked_prefill_mixed_with_decode)
{
    pl_batch_t *b = s_new(4, 1, 4, 3, 4);
    int32_t shortp[2] = {1, 2}, longp[7];
    s_prompt(longp, 7, 50);
    cr_assert_eq(pl_batch_add(b, 1, shortp, 2, 10), PL_OK);
    s_mb_t m;
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 1);
    pl_act_seq_t back = {.seq = m.seqs[0].seq, .token = 9};
    pl_batch_event_t ev[4];
    int n_ev;
    cr_assert_eq(pl_batch_tokens(b, m.lane, &back, 1, ev, &n_ev), PL_OK);
    cr_assert_eq(pl_batch_add(b, 2, longp, 7, 10), PL_OK);
    int want_start[3] = {0, 1, 4}, want_len[3] = {1, 3, 3};
    for (int c = 0; c < 3; c++) {
        cr_assert(s_next(b, &m), "chunk %d", c);
        cr_assert_eq(m.n, 2, "chunk %d: the decode token and the chunk", c);
        cr_assert_leq(m.n_tokens, 4, "budget");
        cr_assert_eq(m.seqs[0].n_tok, 1u, "decode first");
        cr_assert(m.prompt);
        cr_assert_eq(m.seqs[1].pos0, (uint32_t)want_start[c], "chunk %d", c);
        cr_assert_eq(m.seqs[1].n_tok, (uint32_t)want_len[c], "chunk %d", c);
        cr_assert_eq(m.tokens[1], 50 + want_start[c]);
        /* only the decode entry (and, in the last chunk, the prompt's end) comes back */
        pl_act_seq_t r[2] = {{.seq = m.seqs[0].seq, .token = 20 + c},
                             {.seq = m.seqs[1].seq, .token = 30}};
        cr_assert_eq(pl_batch_tokens(b, m.lane, r, c == 2 ? 2 : 1, ev, &n_ev), PL_OK,
                     "chunk %d: %s", c, pl_error_msg());
    }
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.mixed, 3);
    cr_assert_eq(st.tokens, 5);
    /* both decode now: positions go on from each one's own prompt */
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 2);
    cr_assert_eq(m.seqs[0].pos0, 5u, "2 prompt + 4 sampled - 1");
    cr_assert_eq(m.tokens[0], 22);
    cr_assert_eq(m.seqs[1].pos0, 7u);
    cr_assert_not(m.prompt, "decode tokens only");
    cr_assert_eq(m.tokens[1], 30);
    pl_batch_destroy(&b);
}

/* A chunk larger than the rest of the budget waits (no partial chunk: where a prompt is cut
 * never depends on its neighbours), and a later prompt does not overtake it. */
Test(serve_batch, budget_respected_in_order)
{
    pl_batch_t *b = s_new(3, 1, 6, 0, 0);
    int32_t a[5], c[5], d[1] = {3};
    s_prompt(a, 5, 10);
    s_prompt(c, 5, 20);
    cr_assert_eq(pl_batch_add(b, 1, a, 5, 3), PL_OK);
    cr_assert_eq(pl_batch_add(b, 2, c, 5, 3), PL_OK);
    cr_assert_eq(pl_batch_add(b, 3, d, 1, 3), PL_OK);
    s_mb_t m;
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 1, "5 + 5 exceeds 6, and 3 waits behind 2");
    cr_assert_eq(m.n_tokens, 5);
    pl_batch_destroy(&b);
}

/* Enough sequences fill every lane: at least as many microbatches in flight as stages. */
Test(serve_batch, lanes_fill_with_enough_sequences)
{
    const int S = 3;
    pl_batch_t *b = s_new(8, S, 64, 0, 0);
    int32_t p[4] = {1, 2, 3, 4};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(pl_batch_add(b, (uint64_t)i, p, 1 + i % 4, 4), PL_OK);
    s_mb_t m;
    int sizes[8], n_mb = 0;
    while (s_next(b, &m))
        sizes[n_mb++] = m.n;
    cr_assert_eq(n_mb, S, "one microbatch per lane");
    cr_assert_eq(sizes[0] + sizes[1] + sizes[2], 7);
    for (int i = 0; i < S; i++)
        cr_assert_leq(sizes[i], 3, "ceil(7 / 3) per lane");
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.in_flight, S);
    cr_assert_geq(st.max_in_flight, S);
    pl_batch_destroy(&b);
}

/* Canceled: queued ones are dropped, idle live ones leave at once, in-flight ones leave when
 * their tokens come back. */
Test(serve_batch, cancel)
{
    pl_batch_t *b = s_new(2, 2, 64, 0, 2);
    int32_t p[2] = {5, 6};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pl_batch_add(b, (uint64_t)i, p, 2, 8), PL_OK);
    pl_batch_event_t ev;
    cr_assert(pl_batch_cancel(b, 3, &ev), "queued");
    cr_assert(ev.left && ev.canceled && ev.slot == -1);
    cr_assert_not(pl_batch_cancel(b, 99, &ev), "unknown");
    s_mb_t m;
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 1, "2 live over 2 lanes");
    uint32_t flying = m.seqs[0].seq;
    uint64_t flying_id = flying == 0 ? 0 : 1, idle_id = 1 - flying_id;
    cr_assert(pl_batch_cancel(b, idle_id, &ev), "idle: leaves now");
    cr_assert_eq(ev.slot, (int)(1 - flying));
    cr_assert_not(pl_batch_cancel(b, flying_id, &ev), "in flight: later");
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.live, 1);
    pl_act_seq_t back = {.seq = flying, .token = 4};
    pl_batch_event_t evs[2];
    int n_ev;
    cr_assert_eq(pl_batch_tokens(b, m.lane, &back, 1, evs, &n_ev), PL_OK);
    cr_assert(evs[0].left && evs[0].canceled);
    pl_batch_stats(b, &st);
    cr_assert_eq(st.live, 0);
    cr_assert_eq(st.canceled, 3);
    cr_assert_eq(pl_batch_count(b), 1, "sequence 2 waits for its admission");
    cr_assert(s_next(b, &m));
    cr_assert_eq(pl_batch_count(b), 1);
    pl_batch_destroy(&b);
}

/* Tokens that do not fit what the lane awaits are refused and change nothing. */
Test(serve_batch, bad_tokens_refused)
{
    pl_batch_t *b = s_new(4, 2, 64, 0, 0);
    int32_t p[2] = {5, 6};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pl_batch_add(b, (uint64_t)i, p, 2, 8), PL_OK);
    s_mb_t m;
    cr_assert(s_next(b, &m));
    cr_assert_eq(m.n, 2);
    pl_batch_event_t ev[4];
    int n_ev;
    pl_act_seq_t r[2] = {{.seq = m.seqs[0].seq, .token = 1}, {.seq = m.seqs[1].seq, .token = 2}};
    cr_assert_eq(pl_batch_tokens(b, 1, r, 2, ev, &n_ev), PL_ERR_PROTOCOL, "lane 1 awaits none");
    cr_assert_eq(pl_batch_tokens(b, 7, r, 2, ev, &n_ev), PL_ERR_PROTOCOL, "no such lane");
    cr_assert_eq(pl_batch_tokens(b, m.lane, r, 1, ev, &n_ev), PL_ERR_PROTOCOL, "one missing");
    pl_act_seq_t dup[2] = {r[0], r[0]};
    cr_assert_eq(pl_batch_tokens(b, m.lane, dup, 2, ev, &n_ev), PL_ERR_PROTOCOL, "twice");
    pl_act_seq_t bad[2] = {r[0], {.seq = 40, .token = 1}};
    cr_assert_eq(pl_batch_tokens(b, m.lane, bad, 2, ev, &n_ev), PL_ERR_PROTOCOL, "no slot 40");
    pl_act_seq_t neg[2] = {r[0], {.seq = r[1].seq, .token = -5}};
    cr_assert_eq(pl_batch_tokens(b, m.lane, neg, 2, ev, &n_ev), PL_ERR_PROTOCOL, "token < 0");
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.tokens, 0, "nothing recorded");
    cr_assert_eq(pl_batch_tokens(b, m.lane, r, 2, ev, &n_ev), PL_OK, "%s", pl_error_msg());
    pl_batch_destroy(&b);
}

/* A whole run against a model of the pipeline: S stages, lanes in flight delivered out of
 * order, random prompt lengths and stop points. The reference is each sequence on its own: what
 * it is fed must be its prompt then its own sampled tokens, at consecutive positions, whatever
 * shares its microbatches; no microbatch exceeds the budget; slots never exceed n_slots. */
Test(serve_batch, whole_run_against_each_sequence_alone)
{
    enum { N = 40, SLOTS = 6, LANES = 3, STEP = 10, CHUNK = 4 };
    pl_batch_t *b = s_new(SLOTS, LANES, STEP, CHUNK, N);
    int len[N], stop[N], fed_pos[N], n_gen[N];
    int32_t prompt[N][24], sampled[N][16];
    uint64_t slot_of[SLOTS];
    bool slot_busy[SLOTS] = {0};
    srand(7);
    for (int i = 0; i < N; i++) {
        len[i] = 1 + rand() % 23;
        stop[i] = 1 + rand() % 12; /* the "last stage" finishes it after this many */
        s_prompt(prompt[i], len[i], 1000 * i);
        fed_pos[i] = n_gen[i] = 0;
        cr_assert_eq(pl_batch_add(b, (uint64_t)i, prompt[i], len[i], 16), PL_OK);
    }
    s_mb_t flight[LANES];
    bool busy[LANES] = {0};
    int left = 0, rounds = 0, max_busy = 0;
    while (left < N) {
        cr_assert_lt(++rounds, 10000, "no progress");
        s_mb_t m;
        while (s_next(b, &m)) {
            cr_assert_leq(m.n_tokens, STEP);
            int t = 0;
            bool samples = false;
            for (int e = 0; e < m.n; e++) {
                pl_act_seq_t *q = &m.seqs[e];
                cr_assert_lt(q->seq, (uint32_t)SLOTS);
                /* which sequence holds this slot: learn it at its first chunk */
                int id = -1;
                if (q->pos0 == 0 && !slot_busy[q->seq]) {
                    for (int i = 0; i < N && id < 0; i++)
                        if (fed_pos[i] == 0 && n_gen[i] == 0 && prompt[i][0] == m.tokens[t])
                            id = i;
                    slot_busy[q->seq] = true;
                    slot_of[q->seq] = (uint64_t)id;
                }
                id = (int)slot_of[q->seq];
                cr_assert_geq(id, 0);
                cr_assert_eq(q->pos0, (uint32_t)fed_pos[id], "seq %d fed out of order", id);
                for (uint32_t k = 0; k < q->n_tok; k++, t++) {
                    int p = fed_pos[id]++;
                    int32_t want = p < len[id] ? prompt[id][p] : sampled[id][p - len[id]];
                    cr_assert_eq(m.tokens[t], want, "seq %d position %d", id, p);
                }
                cr_assert_leq(q->n_tok, (uint32_t)CHUNK);
                m.samples[e] = fed_pos[id] >= len[id];
                samples |= m.samples[e];
            }
            cr_assert_eq(m.awaits, samples, "the lane awaits exactly when an entry samples");
            if (samples) {
                cr_assert_not(busy[m.lane]);
                busy[m.lane] = true;
                flight[m.lane] = m;
            }
        }
        int n_busy = 0;
        for (int l = 0; l < LANES; l++)
            n_busy += busy[l];
        max_busy = n_busy > max_busy ? n_busy : max_busy;
        /* the oldest-numbered busy lane... or another, at random: lanes return in any order */
        int pickl = -1;
        for (int tries = 0; tries < 32 && pickl < 0; tries++) {
            int l = rand() % LANES;
            if (busy[l])
                pickl = l;
        }
        for (int l = 0; l < LANES && pickl < 0; l++)
            if (busy[l])
                pickl = l;
        cr_assert_geq(pickl, 0, "nothing in flight and nothing to send");
        s_mb_t *f = &flight[pickl];
        pl_act_seq_t back[S_MAX];
        uint32_t nb = 0;
        for (int e = 0; e < f->n; e++) {
            int id = (int)slot_of[f->seqs[e].seq];
            if (!f->samples[e])
                continue; /* an earlier chunk: nothing sampled */
            int32_t tok = 5000 + 100 * id + n_gen[id];
            sampled[id][n_gen[id]++] = tok;
            back[nb++] = (pl_act_seq_t){.seq = f->seqs[e].seq, .token = tok,
                                        .flags = n_gen[id] >= stop[id] ? PL_ACT_FINISHED : 0};
        }
        pl_batch_event_t ev[S_MAX];
        int n_ev;
        cr_assert_eq(pl_batch_tokens(b, pickl, back, nb, ev, &n_ev), PL_OK, "%s", pl_error_msg());
        busy[pickl] = false;
        for (int i = 0; i < n_ev; i++)
            if (ev[i].left) {
                cr_assert_eq(n_gen[ev[i].id], stop[ev[i].id]);
                slot_busy[ev[i].slot] = false;
                left++;
            }
    }
    cr_assert_geq(max_busy, LANES, "every lane was in flight at once");
    pl_batch_stats_t st;
    pl_batch_stats(b, &st);
    cr_assert_eq(st.left, (uint64_t)N);
    cr_assert_eq(st.live, 0);
    cr_assert_gt(st.admitted_mid, 0);
    cr_assert_gt(st.mixed, 0);
    pl_batch_destroy(&b);
}

/* A plan's uneven schedule replaces the chunk: a 20-token prompt under [8, 6, 4] is cut 2, 8, 6,
 * 4 (the first entry again in front), an entry above a budget of 5 is cut to it (1, 5, 5, 5, 4),
 * and a bad schedule is refused. */
Test(serve_batch, uneven_schedule_cuts_from_the_end)
{
    static const struct {
        int step, want_n, want[6];
    } cases[] = {{64, 4, {2, 8, 6, 4}}, {5, 5, {1, 5, 5, 5, 4}}};
    for (int c = 0; c < 2; c++) {
        pl_batch_params_t p = {.n_slots = 2,
                               .lanes = 1,
                               .step_tokens = cases[c].step,
                               .chunk = 3,
                               .sched = {.n = 3, .len = {8, 6, 4}},
                               .max_queue = 1};
        pl_batch_t *b = NULL;
        cr_assert_eq(pl_batch_create(&p, &b), PL_OK, "%s", pl_error_msg());
        int32_t prompt[20];
        s_prompt(prompt, 20, 100);
        cr_assert_eq(pl_batch_add(b, 1, prompt, 20, 4), PL_OK);
        s_mb_t m;
        int fed = 0;
        for (int k = 0; k < cases[c].want_n; k++) {
            cr_assert(s_next(b, &m), "step %d, cut %d", cases[c].step, k);
            cr_assert_eq(m.n, 1);
            cr_assert_eq(m.seqs[0].pos0, (uint32_t)fed);
            cr_assert_eq(m.seqs[0].n_tok, (uint32_t)cases[c].want[k], "step %d, cut %d: %u",
                         cases[c].step, k, m.seqs[0].n_tok);
            cr_assert_eq(m.tokens[0], 100 + fed);
            fed += cases[c].want[k];
            cr_assert_eq(m.awaits, fed == 20, "only the prompt's end is sampled");
        }
        cr_assert_eq(fed, 20);
        cr_assert_not(s_next(b, &m), "the lane awaits the sampled token");
        pl_batch_destroy(&b);
    }
    pl_batch_params_t bad = {
        .n_slots = 2, .lanes = 1, .step_tokens = 8, .sched = {.n = 2, .len = {4, 0}}};
    pl_batch_t *b = NULL;
    cr_assert_eq(pl_batch_create(&bad, &b), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "entry 1"), "%s", pl_error_msg());
    cr_assert_null(b);
}

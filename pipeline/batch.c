/* Continuous batching: live sequences in their KV slots, a queue for those waiting for one, and
 * the lanes (microbatches in flight) whose tokens have not come back yet. */
#include "pipeline/batch.h"

#include "common/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    bool used;
    uint64_t id;
    int32_t *prompt;
    int len, max_new;
    int fed;        /* prompt tokens sent */
    int generated;  /* tokens sampled */
    int32_t next;   /* the last token sampled: the next one fed */
    int lane;       /* awaiting its tokens in this lane; -1 when not */
    bool canceled;  /* leaves when its tokens come back */
    uint64_t order; /* admission order */
} s_seq_t;

struct pl_batch {
    pl_batch_params_t p;
    pl_job_chunks_t cuts; /* the effective prompt schedule: no entry above step_tokens */
    s_seq_t *slots;  /* [n_slots] */
    s_seq_t *queue;  /* ring [max_queue] of waiting sequences (slot not yet chosen) */
    int q_head, q_count;
    int live;
    int *lane_n;     /* [lanes]: entries awaiting tokens */
    int *pick;       /* [n_slots] scratch: slots by admission order */
    uint64_t next_order;
    pl_batch_stats_t st;
};

pl_status_t pl_batch_create(const pl_batch_params_t *p, pl_batch_t **batch_p)
{
    if (p->n_slots < 1 || p->n_slots > PL_BATCH_MAX_SEQS)
        return pl_error(PL_ERR_INVALID, "batch: n_slots %d outside 1..%d", p->n_slots,
                        PL_BATCH_MAX_SEQS);
    if (p->lanes < 1 || p->lanes > PL_BATCH_MAX_LANES)
        return pl_error(PL_ERR_INVALID, "batch: lanes %d outside 1..%d", p->lanes,
                        PL_BATCH_MAX_LANES);
    if (p->step_tokens < 1)
        return pl_error(PL_ERR_INVALID, "batch: step_tokens %d below 1", p->step_tokens);
    if (p->max_queue < 0 || p->max_queue > PL_BATCH_MAX_SEQS)
        return pl_error(PL_ERR_INVALID, "batch: max_queue %d outside 0..%d", p->max_queue,
                        PL_BATCH_MAX_SEQS);
    if (p->chunk < 0)
        return pl_error(PL_ERR_INVALID, "batch: chunk %d below 0", p->chunk);
    pl_status_t st = pl_job_chunks_check(&p->sched, "batch: sched");
    if (st)
        return st;
    pl_batch_t *b = calloc(1, sizeof(*b));
    if (!b)
        return pl_error(PL_ERR_NOMEM, "batch: out of memory");
    b->p = *p;
    if (p->sched.n > 0) {
        b->cuts = p->sched;
        for (int i = 0; i < b->cuts.n; i++)
            b->cuts.len[i] = PL_MIN(b->cuts.len[i], p->step_tokens);
    } else {
        b->cuts = (pl_job_chunks_t){
            .n = 1, .len = {p->chunk > 0 ? PL_MIN(p->chunk, p->step_tokens) : p->step_tokens}};
    }
    b->slots = calloc((size_t)p->n_slots, sizeof(*b->slots));
    b->queue = calloc((size_t)PL_MAX(p->max_queue, 1), sizeof(*b->queue));
    b->lane_n = calloc((size_t)p->lanes, sizeof(int));
    b->pick = calloc((size_t)p->n_slots, sizeof(int));
    if (!b->slots || !b->queue || !b->lane_n || !b->pick) {
        pl_batch_destroy(&b);
        return pl_error(PL_ERR_NOMEM, "batch: out of memory");
    }
    *batch_p = b;
    return PL_OK;
}

void pl_batch_destroy(pl_batch_t **batch_p)
{
    pl_batch_t *b = *batch_p;
    if (!b)
        return;
    if (b->slots)
        for (int i = 0; i < b->p.n_slots; i++)
            free(b->slots[i].prompt);
    if (b->queue)
        for (int i = 0; i < b->q_count; i++)
            free(b->queue[(b->q_head + i) % PL_MAX(b->p.max_queue, 1)].prompt);
    free(b->slots);
    free(b->queue);
    free(b->lane_n);
    free(b->pick);
    free(b);
    *batch_p = NULL;
}

static s_seq_t *s_queued(pl_batch_t *b, int i)
{
    return &b->queue[(b->q_head + i) % PL_MAX(b->p.max_queue, 1)];
}

static bool s_known(pl_batch_t *b, uint64_t id)
{
    for (int i = 0; i < b->p.n_slots; i++)
        if (b->slots[i].used && b->slots[i].id == id)
            return true;
    for (int i = 0; i < b->q_count; i++)
        if (s_queued(b, i)->id == id)
            return true;
    return false;
}

static int s_free_slot(const pl_batch_t *b)
{
    for (int i = 0; i < b->p.n_slots; i++)
        if (!b->slots[i].used)
            return i;
    return -1;
}

/* Whether some live sequence has sampled a token and not left: a join now is a join mid-flight. */
static bool s_decoding(const pl_batch_t *b)
{
    for (int i = 0; i < b->p.n_slots; i++)
        if (b->slots[i].used && b->slots[i].generated > 0)
            return true;
    return false;
}

static void s_admit(pl_batch_t *b, s_seq_t *q)
{
    int slot = s_free_slot(b);
    bool mid = s_decoding(b);
    b->slots[slot] = *q;
    b->slots[slot].used = true;
    b->slots[slot].lane = -1;
    b->slots[slot].order = b->next_order++;
    b->live++;
    b->st.admitted++;
    b->st.admitted_mid += mid;
}

pl_status_t pl_batch_add(pl_batch_t *b, uint64_t id, const int32_t *prompt, int len, int max_new)
{
    if (len < 1 || !prompt)
        return pl_error(PL_ERR_INVALID, "batch: sequence %llu has an empty prompt",
                        (unsigned long long)id);
    if (max_new < 1)
        return pl_error(PL_ERR_INVALID, "batch: sequence %llu: max_new %d below 1",
                        (unsigned long long)id, max_new);
    if (s_known(b, id))
        return pl_error(PL_ERR_INVALID, "batch: sequence %llu is already in the table",
                        (unsigned long long)id);
    bool slot_free = b->q_count == 0 && s_free_slot(b) >= 0;
    if (!slot_free && b->q_count >= b->p.max_queue)
        return pl_error(PL_ERR_BUSY, "batch: %d sequences already wait for a KV slot",
                        b->q_count);
    s_seq_t q = {.id = id, .len = len, .max_new = max_new, .lane = -1};
    if (!(q.prompt = malloc((size_t)len * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "batch: out of memory");
    memcpy(q.prompt, prompt, (size_t)len * sizeof(int32_t));
    if (slot_free) {
        s_admit(b, &q);
        return PL_OK;
    }
    *s_queued(b, b->q_count++) = q;
    return PL_OK;
}

static int s_by_order(const void *pa, const void *pb, void *arg)
{
    const s_seq_t *s = arg;
    uint64_t a = s[*(const int *)pa].order, c = s[*(const int *)pb].order;
    return a < c ? -1 : a > c;
}

/* Slots of live sequences not in flight, by admission order, into b->pick; returns the count. */
static int s_idle(pl_batch_t *b)
{
    int n = 0;
    for (int i = 0; i < b->p.n_slots; i++)
        if (b->slots[i].used && b->slots[i].lane < 0)
            b->pick[n++] = i;
    qsort_r(b->pick, (size_t)n, sizeof(int), s_by_order, b->slots);
    return n;
}

/* The size of a sequence's next prompt chunk: prompts are cut from their end backwards. */
static int s_chunk(const pl_batch_t *b, const s_seq_t *s)
{
    return pl_job_chunks_next(&b->cuts, s->len, s->fed);
}

int pl_batch_next(pl_batch_t *b, pl_act_seq_t *seqs, int32_t *tokens, pl_batch_mb_t *mb)
{
    while (b->q_count > 0 && s_free_slot(b) >= 0) {
        s_admit(b, s_queued(b, 0));
        b->q_head = (b->q_head + 1) % PL_MAX(b->p.max_queue, 1);
        b->q_count--;
    }
    int lane = -1;
    for (int l = 0; l < b->p.lanes && lane < 0; l++)
        if (b->lane_n[l] == 0)
            lane = l;
    if (lane < 0 || b->live == 0)
        return 0;
    int cap = (b->live + b->p.lanes - 1) / b->p.lanes;
    int n_idle = s_idle(b), n = 0, t = 0;
    bool decode = false, prompt = false;
    for (int k = 0; k < n_idle && n < cap && t < b->p.step_tokens; k++) {
        s_seq_t *s = &b->slots[b->pick[k]];
        if (s->fed < s->len)
            continue;
        seqs[n++] = (pl_act_seq_t){.seq = (uint32_t)b->pick[k],
                                   .pos0 = (uint32_t)(s->len + s->generated - 1), .n_tok = 1};
        tokens[t++] = s->next;
        s->lane = lane;
        b->lane_n[lane]++;
        decode = true;
    }
    for (int k = 0; k < n_idle && n < cap; k++) {
        s_seq_t *s = &b->slots[b->pick[k]];
        if (s->fed >= s->len || s->lane >= 0)
            continue;
        int c = s_chunk(b, s);
        if (t + c > b->p.step_tokens)
            break; /* in admission order: a later prompt does not overtake it */
        seqs[n++] = (pl_act_seq_t){.seq = (uint32_t)b->pick[k], .pos0 = (uint32_t)s->fed,
                                   .n_tok = (uint32_t)c};
        memcpy(tokens + t, s->prompt + s->fed, (size_t)c * sizeof(int32_t));
        t += c;
        s->fed += c;
        if (s->fed == s->len) { /* its prompt ends here: it is sampled, the lane waits for it */
            s->lane = lane;
            b->lane_n[lane]++;
        }
        prompt = true;
    }
    if (n == 0)
        return 0;
    b->st.microbatches++;
    b->st.mixed += decode && prompt;
    int busy = 0;
    for (int l = 0; l < b->p.lanes; l++)
        busy += b->lane_n[l] > 0;
    b->st.max_in_flight = PL_MAX(b->st.max_in_flight, busy);
    *mb = (pl_batch_mb_t){.lane = lane, .n_tokens = t, .prompt = prompt,
                          .awaits = b->lane_n[lane] > 0};
    return n;
}

static void s_leave(pl_batch_t *b, int slot, bool canceled, pl_batch_event_t *ev)
{
    s_seq_t *s = &b->slots[slot];
    ev->id = s->id;
    ev->slot = slot;
    ev->left = true;
    ev->canceled = canceled;
    free(s->prompt);
    *s = (s_seq_t){.lane = -1};
    b->live--;
    b->st.left++;
    b->st.canceled += canceled;
}

pl_status_t pl_batch_tokens(pl_batch_t *b, int lane, const pl_act_seq_t *in, uint32_t n_in,
                            pl_batch_event_t *ev, int *n_ev_p)
{
    if (lane < 0 || lane >= b->p.lanes || b->lane_n[lane] == 0)
        return pl_error(PL_ERR_PROTOCOL, "tokens for microbatch %d, which awaits none", lane);
    if (n_in != (uint32_t)b->lane_n[lane])
        return pl_error(PL_ERR_PROTOCOL, "microbatch %d: %u tokens for %d sequences", lane, n_in,
                        b->lane_n[lane]);
    for (uint32_t i = 0; i < n_in; i++) { /* all or nothing; distinct since counted by lane */
        uint32_t slot = in[i].seq;
        if (slot >= (uint32_t)b->p.n_slots || !b->slots[slot].used ||
            b->slots[slot].lane != lane || in[i].token < 0)
            return pl_error(PL_ERR_PROTOCOL, "microbatch %d: slot %u awaits no token there",
                            lane, slot);
        for (uint32_t j = 0; j < i; j++)
            if (in[j].seq == slot)
                return pl_error(PL_ERR_PROTOCOL, "microbatch %d: slot %u twice", lane, slot);
    }
    for (uint32_t i = 0; i < n_in; i++) {
        int slot = (int)in[i].seq;
        s_seq_t *s = &b->slots[slot];
        s->generated++;
        s->next = in[i].token;
        s->lane = -1;
        b->st.tokens++;
        ev[i] = (pl_batch_event_t){.id = s->id, .slot = slot, .token = in[i].token};
        if ((in[i].flags & PL_ACT_FINISHED) || s->canceled || s->generated >= s->max_new) {
            s_leave(b, slot, s->canceled && !(in[i].flags & PL_ACT_FINISHED), &ev[i]);
            ev[i].token = in[i].token;
        }
    }
    b->lane_n[lane] = 0;
    *n_ev_p = (int)n_in;
    return PL_OK;
}

bool pl_batch_cancel(pl_batch_t *b, uint64_t id, pl_batch_event_t *ev)
{
    for (int i = 0; i < b->q_count; i++) {
        s_seq_t *q = s_queued(b, i);
        if (q->id != id)
            continue;
        free(q->prompt);
        for (int j = i; j + 1 < b->q_count; j++)
            *s_queued(b, j) = *s_queued(b, j + 1);
        b->q_count--;
        b->st.canceled++;
        *ev = (pl_batch_event_t){.id = id, .slot = -1, .token = -1, .left = true,
                                 .canceled = true};
        return true;
    }
    for (int i = 0; i < b->p.n_slots; i++) {
        s_seq_t *s = &b->slots[i];
        if (!s->used || s->id != id)
            continue;
        if (s->lane >= 0) {
            s->canceled = true;
            return false;
        }
        *ev = (pl_batch_event_t){.token = -1};
        s_leave(b, i, true, ev);
        return true;
    }
    return false;
}

bool pl_batch_slot_id(const pl_batch_t *b, int slot, uint64_t *id_p)
{
    if (slot < 0 || slot >= b->p.n_slots || !b->slots[slot].used)
        return false;
    *id_p = b->slots[slot].id;
    return true;
}

int pl_batch_count(const pl_batch_t *b)
{
    return b->live + b->q_count;
}

void pl_batch_stats(const pl_batch_t *b, pl_batch_stats_t *st)
{
    *st = b->st;
    st->live = b->live;
    st->queued = b->q_count;
    st->in_flight = 0;
    for (int l = 0; l < b->p.lanes; l++)
        st->in_flight += b->lane_n[l] > 0;
}

/* Per-slot sampling at a deployment's last stage: the job sink's rules (gen.h's
 * pl_gen_sample_next) over slots that sequences take and give back. */
#include "pipeline/serve_sink.h"

#include "pipeline/gen.h"
#include "pipeline/gen_text.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    bool used, finished;
    pl_serve_seq_t seq;
    pl_sample_params_t sampling;
    int n_out;
} s_slot_t;

struct pl_serve_sink {
    int n_slots, vocab, n_eos;
    int eos[PL_MODEL_MAX_EOS];
    s_slot_t *slots;
    float *scratch;       /* 3 * vocab */
    pl_gen_text_t *text;  /* NULL: tokens only */
};

pl_status_t pl_serve_sink_create(int n_slots, int vocab, const int *eos, int n_eos,
                                 const char *text_model, pl_serve_sink_t **sink_p)
{
    if (n_slots < 1 || vocab < 1 || n_eos < 0 || n_eos > PL_MODEL_MAX_EOS)
        return pl_error(PL_ERR_INVALID, "serve sink: %d slots, vocab %d, %d EOS ids", n_slots,
                        vocab, n_eos);
    pl_serve_sink_t *k = calloc(1, sizeof(*k));
    if (!k)
        return pl_error(PL_ERR_NOMEM, "serve sink: out of memory");
    k->n_slots = n_slots;
    k->vocab = vocab;
    k->n_eos = n_eos;
    memcpy(k->eos, eos, (size_t)n_eos * sizeof(int));
    k->slots = calloc((size_t)n_slots, sizeof(*k->slots));
    k->scratch = malloc(3 * (size_t)vocab * sizeof(float));
    if (!k->slots || !k->scratch) {
        pl_serve_sink_destroy(&k);
        return pl_error(PL_ERR_NOMEM, "serve sink: out of memory");
    }
    pl_job_gen_t none = {.max_new_tokens = 1};
    pl_status_t st;
    if (text_model && text_model[0] &&
        (st = pl_gen_text_create(text_model, n_slots, &none, &k->text))) {
        pl_serve_sink_destroy(&k);
        return st;
    }
    *sink_p = k;
    return PL_OK;
}

void pl_serve_sink_destroy(pl_serve_sink_t **sink_p)
{
    pl_serve_sink_t *k = *sink_p;
    if (!k)
        return;
    free(k->slots);
    free(k->scratch);
    pl_gen_text_destroy(&k->text);
    free(k);
    *sink_p = NULL;
}

pl_status_t pl_serve_seq_check(const pl_serve_seq_t *seq)
{
    const pl_job_gen_t *g = &seq->gen;
    if (seq->prompt_len < 1 || g->max_new_tokens < 1 ||
        g->max_new_tokens > PL_JOB_MAX_NEW_TOKENS || g->min_new_tokens < 0 ||
        g->min_new_tokens > g->max_new_tokens || !(g->temperature >= 0) || g->top_k < 0 ||
        !(g->top_p > 0 && g->top_p <= 1) || seq->resumed < 0 ||
        seq->resumed >= seq->prompt_len || seq->resumed >= g->max_new_tokens ||
        (seq->resumed > 0 && !seq->earlier))
        return pl_error(PL_ERR_INVALID, "settings out of range (prompt %d, max_new_tokens %d, "
                        "min_new_tokens %d, resumed %d)", seq->prompt_len, g->max_new_tokens,
                        g->min_new_tokens, seq->resumed);
    return PL_OK;
}

bool pl_serve_sink_has_text(const pl_serve_sink_t *k)
{
    return k->text != NULL;
}

pl_status_t pl_serve_sink_begin(pl_serve_sink_t *k, int slot, const pl_serve_seq_t *seq)
{
    if (slot < 0 || slot >= k->n_slots || k->slots[slot].used)
        return pl_error(PL_ERR_PROTOCOL, "serve sink: slot %d is not free", slot);
    pl_status_t st = pl_serve_seq_check(seq);
    if (st)
        return pl_error_prefix(st, "serve sink: slot %d: ", slot);
    const pl_job_gen_t *g = &seq->gen;
    if (k->text && (st = pl_gen_text_begin(k->text, slot, g)))
        return st;
    /* a resumed sequence's earlier tokens, as if just sampled: the decoder and the stop strings
     * see them in order */
    for (int t = 0; k->text && t < seq->resumed; t++) {
        bool stopped;
        if ((st = pl_gen_text_push(k->text, slot, seq->earlier[t], false, &stopped)))
            return st;
    }
    k->slots[slot] = (s_slot_t){.used = true, .seq = *seq,
                                .sampling = {.temperature = g->temperature, .top_k = g->top_k,
                                             .top_p = g->top_p, .seed = g->seed}};
    k->slots[slot].seq.earlier = NULL; /* borrowed for this call only */
    return PL_OK;
}

const char *pl_serve_sink_text(const pl_serve_sink_t *k, int slot, size_t *len_p,
                               size_t *stable_p)
{
    if (!k->text || slot < 0 || slot >= k->n_slots || !k->slots[slot].used)
        return NULL;
    *stable_p = pl_gen_text_stable(k->text, slot);
    return pl_gen_text_get(k->text, slot, len_p);
}

void pl_serve_sink_end(pl_serve_sink_t *k, int slot)
{
    if (slot >= 0 && slot < k->n_slots)
        k->slots[slot] = (s_slot_t){0};
}

/* Whether entry e of slot t's sequence ends inside its prompt (it samples nothing). */
static bool s_inside(const s_slot_t *t, const pl_act_seq_t *e)
{
    return pl_gen_in_prompt(t->n_out, e, t->seq.prompt_len);
}

bool pl_serve_sink_wants_logits(const pl_serve_sink_t *k, const pl_act_hdr_t *hdr,
                                const pl_act_seq_t *seqs)
{
    if (hdr->n_seq == 0)
        return true;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        uint32_t s = seqs[i].seq;
        if (s >= (uint32_t)k->n_slots || !k->slots[s].used || k->slots[s].finished ||
            !s_inside(&k->slots[s], &seqs[i]))
            return true; /* sampled (or refused by pl_serve_sink_sample) */
    }
    return false;
}

pl_status_t pl_serve_sink_sample(pl_serve_sink_t *k, const pl_act_hdr_t *hdr,
                                 const pl_act_seq_t *seqs, const float *logits,
                                 pl_act_hdr_t *out, pl_act_seq_t *out_seqs, pl_serve_out_t *outs)
{
    for (uint32_t i = 0; i < hdr->n_seq; i++) { /* all or nothing */
        uint32_t s = seqs[i].seq;
        if (s >= (uint32_t)k->n_slots || !k->slots[s].used || k->slots[s].finished)
            return pl_error(PL_ERR_PROTOCOL, "slot %u holds no running sequence", s);
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].seq == s)
                return pl_error(PL_ERR_PROTOCOL, "slot %u twice in one message", s);
        const s_slot_t *t = &k->slots[s];
        uint64_t end = (uint64_t)seqs[i].pos0 + seqs[i].n_tok;
        uint64_t at = (uint64_t)t->seq.prompt_len + (uint64_t)t->n_out;
        if (!s_inside(t, &seqs[i]) && end != at)
            return pl_error(PL_ERR_PROTOCOL, "slot %u: message ends at position %llu, the "
                            "sequence stands at %llu", s, (unsigned long long)end,
                            (unsigned long long)at);
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        uint32_t s = seqs[i].seq;
        s_slot_t *t = &k->slots[s];
        if (s_inside(t, &seqs[i]))
            continue; /* an earlier chunk of its prompt */
        pl_finish_t fin;
        int tok = pl_gen_sample_next(logits + (size_t)i * (size_t)k->vocab, k->vocab,
                                     &t->seq.gen, &t->sampling, k->eos, k->n_eos, t->seq.stream,
                                     t->seq.resumed + t->n_out, k->scratch, &fin);
        t->n_out++;
        bool stopped = false;
        pl_status_t st;
        if (k->text && (st = pl_gen_text_push(k->text, (int)s, tok, fin != PL_FINISH_NONE,
                                              &stopped)))
            return st;
        if (stopped)
            fin = PL_FINISH_STOP;
        t->finished = fin != PL_FINISH_NONE;
        outs[n] = (pl_serve_out_t){.slot = (int)s, .token = tok, .finish = fin};
        out_seqs[n++] = (pl_act_seq_t){.seq = s, .pos0 = seqs[i].pos0 + seqs[i].n_tok - 1,
                                       .n_tok = 1,
                                       .flags = t->finished ? PL_ACT_FINISHED : 0,
                                       .token = tok};
    }
    *out = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .job = hdr->job, .mb = hdr->mb,
                          .step = hdr->step, .n_seq = n, .n_tokens = n};
    return PL_OK;
}

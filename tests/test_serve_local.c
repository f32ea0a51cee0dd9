/* Serving in one process (pipeline/serve_local.c): requests of different lengths, arriving while
 * others decode, through the continuous batcher on 2 stages, each give the tokens of the same
 * prompt run alone as a one-prompt job (pl_gen_local_run, the job runner, an independent path:
 * its own feeder and sink, one sequence per microbatch). */
#include "gen_util.h"
#include "js_ref.h"
#include "model/tokenizer.h"
#include "pipeline/gen_local.h"
#include "pipeline/serve_local.h"
#include "pipeline/serve_sink.h"
#include "transport/msg.h"

#include <criterion/criterion.h>

#define LLAMA3 JS_LENML "/tokenizer-llama3/models"

TestSuite(serve_local, .init = tg_setup, .fini = tg_teardown, .timeout = 120);

Test(serve_local, requests_give_their_tokens_alone_whatever_shares_the_batch)
{
    enum { N = 32, STEP = 24 };
    static int32_t prompts[N][48];
    pl_serve_local_req_t reqs[N];
    pl_serve_local_out_t outs[N];
    srand(11);
    for (int i = 0; i < N; i++) {
        int len = 1 + (i * 7 + rand() % 5) % 45; /* 1..45 tokens: some in 2 chunks */
        for (int k = 0; k < len; k++)
            prompts[i][k] = 3 + rand() % 290;
        pl_job_gen_t g = {.max_new_tokens = 1 + rand() % 12, .stop_at_eos = i % 3 != 0,
                          .temperature = i % 2 ? 0.8f : 0.0f, .top_k = i % 4 == 1 ? 20 : 0,
                          .top_p = i % 4 == 3 ? 0.9f : 1.0f, .seed = 1000 + (uint64_t)i};
        /* the first 12 at once, the others while those decode */
        reqs[i] = (pl_serve_local_req_t){.prompt = prompts[i], .n_prompt = len, .gen = g,
                                         .arrive = i < 12 ? 0 : (uint64_t)(i - 11) * 3};
    }
    pl_batch_params_t bp = {.n_slots = 6, .lanes = 2, .step_tokens = STEP, .max_queue = N};
    pl_be_device_t *dev;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    pl_serve_local_stats_t st;
    cr_assert_eq(pl_serve_local_run(tg_model, dev, (int[]){2, 3}, 2, &bp, reqs, N, outs, &st),
                 PL_OK, "%s", pl_error_msg());
    int eos = 0, two_chunks = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_not(outs[i].refused, "request %d", i);
        json_t *ref =
            tg_alone(tg_model, prompts[i], reqs[i].n_prompt, &reqs[i].gen, STEP, (int[]){2, 3}, 2);
        json_t *toks = json_object_get(ref, "tokens");
        cr_assert_eq((int)json_array_size(toks), outs[i].n_tokens, "request %d: %d tokens, "
                     "alone %zu", i, outs[i].n_tokens, json_array_size(toks));
        for (int k = 0; k < outs[i].n_tokens; k++)
            cr_assert_eq(outs[i].tokens[k], json_integer_value(json_array_get(toks, (size_t)k)),
                         "request %d token %d", i, k);
        cr_assert_str_eq(tg_finish_name(outs[i].finish),
                         json_string_value(json_object_get(ref, "finish")), "request %d", i);
        eos += outs[i].finish == PL_FINISH_EOS;
        two_chunks += reqs[i].n_prompt > STEP;
        json_decref(ref);
    }
    /* the batch really was shared and changed while running */
    cr_assert_gt(two_chunks, 0, "no prompt was cut into chunks");
    cr_assert_gt(st.batch.admitted_mid, 0, "no request joined while others decoded");
    cr_assert_gt(st.batch.mixed, 0, "no microbatch mixed prompt chunks with decode tokens");
    cr_assert_geq(st.batch.max_in_flight, 2, "fewer microbatches in flight than stages");
    cr_assert_eq(st.batch.left, (uint64_t)N);
    cr_assert_eq(st.batch.live, 0, "every slot given back");
    cr_log_info("%d requests, %d ended by EOS, %llu joined mid-flight, %llu mixed microbatches "
                "of %llu", N, eos, (unsigned long long)st.batch.admitted_mid,
                (unsigned long long)st.batch.mixed, (unsigned long long)st.batch.microbatches);
    pl_serve_local_free(outs, N);
    pl_be_device_close(&dev);
}

/* More requests at once than slots and queue hold: the rest are refused, the others run. */
Test(serve_local, full_queue_refuses)
{
    enum { N = 6 };
    int32_t p[3] = {5, 6, 7};
    pl_serve_local_req_t reqs[N];
    pl_serve_local_out_t outs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (pl_serve_local_req_t){.prompt = p, .n_prompt = 3,
                                         .gen = {.max_new_tokens = 4, .top_p = 1}};
    pl_batch_params_t bp = {.n_slots = 2, .lanes = 2, .step_tokens = 16, .max_queue = 2};
    pl_be_device_t *dev;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    pl_serve_local_stats_t st;
    cr_assert_eq(pl_serve_local_run(tg_model, dev, NULL, 1, &bp, reqs, N, outs, &st), PL_OK, "%s",
                 pl_error_msg());
    int refused = 0;
    for (int i = 0; i < N; i++) {
        refused += outs[i].refused;
        if (!outs[i].refused) {
            cr_assert_eq(outs[i].n_tokens, 4);
            cr_assert_arr_eq(outs[i].tokens, outs[0].tokens, 4 * sizeof(int32_t),
                             "the same prompt gives the same tokens");
        }
    }
    cr_assert_eq(refused, 2, "2 slots + 2 queued of 6");
    cr_assert_eq(st.batch.admitted, 4);
    pl_serve_local_free(outs, N);
    pl_be_device_close(&dev);
}

/* The per-slot sink refuses what does not fit its slots and records nothing then. */
Test(serve_local, sink_refuses_bad_entries)
{
    pl_serve_sink_t *k;
    int eos[1] = {2};
    cr_assert_eq(pl_serve_sink_create(2, 8, eos, 1, NULL, &k), PL_OK);
    size_t tl, ts;
    cr_assert_null(pl_serve_sink_text(k, 0, &tl, &ts), "tokens only");
    pl_serve_seq_t sq = {.prompt_len = 3, .gen = {.max_new_tokens = 2, .top_p = 1}};
    cr_assert_eq(pl_serve_sink_begin(k, 0, &sq), PL_OK);
    cr_assert_eq(pl_serve_sink_begin(k, 0, &sq), PL_ERR_PROTOCOL, "slot taken");
    cr_assert_eq(pl_serve_sink_begin(k, 2, &sq), PL_ERR_PROTOCOL, "no slot 2");
    pl_serve_seq_t bad = sq;
    bad.gen.max_new_tokens = 0;
    cr_assert_eq(pl_serve_sink_begin(k, 1, &bad), PL_ERR_INVALID);
    float logits[2 * 8] = {0};
    logits[5] = 1, logits[8 + 6] = 1;
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .n_seq = 1, .n_tokens = 3}, out;
    pl_act_seq_t e = {.seq = 1, .pos0 = 0, .n_tok = 3}, os[2];
    pl_serve_out_t so[2];
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, os, so), PL_ERR_PROTOCOL,
                 "slot 1 is free");
    e = (pl_act_seq_t){.seq = 0, .pos0 = 1, .n_tok = 3};
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, os, so), PL_ERR_PROTOCOL,
                 "past the prompt");
    e = (pl_act_seq_t){.seq = 0, .pos0 = 0, .n_tok = 2};
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, os, so), PL_OK);
    cr_assert_eq(out.n_seq, 0u, "an earlier chunk samples nothing");
    e = (pl_act_seq_t){.seq = 0, .pos0 = 2, .n_tok = 1};
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, os, so), PL_OK);
    cr_assert_eq(out.n_seq, 1u);
    cr_assert_eq(so[0].token, 5, "greedy");
    cr_assert_eq(so[0].finish, PL_FINISH_NONE);
    e = (pl_act_seq_t){.seq = 0, .pos0 = 3, .n_tok = 1};
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits + 8, &out, os, so), PL_OK);
    cr_assert_eq(so[0].finish, PL_FINISH_LENGTH, "max_new_tokens 2");
    cr_assert(os[0].flags & PL_ACT_FINISHED);
    e.pos0 = 4;
    cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, os, so), PL_ERR_PROTOCOL,
                 "finished");
    pl_serve_sink_end(k, 0);
    cr_assert_eq(pl_serve_sink_begin(k, 0, &sq), PL_OK, "the slot is free again");
    pl_serve_sink_destroy(&k);
    pl_serve_sink_destroy(&k);
}

/* The sink asks for logits only when an entry samples (pl_gen_in_prompt is the rule both sinks
 * share): earlier prompt chunks, a resumed sequence's included, need none, and sampling such a
 * message reads no logits (NULL here) and samples nothing; any other entry needs them. */
Test(serve_local, sink_wants_logits_only_for_entries_that_sample)
{
    pl_serve_sink_t *k;
    int eos[1] = {2};
    int32_t earlier[2] = {4, 6};
    cr_assert_eq(pl_serve_sink_create(3, 8, eos, 1, NULL, &k), PL_OK);
    pl_serve_seq_t a = {.prompt_len = 10, .gen = {.max_new_tokens = 4, .top_p = 1}};
    pl_serve_seq_t b = {.prompt_len = 4, .gen = {.max_new_tokens = 4, .top_p = 1}};
    pl_serve_seq_t r = {.prompt_len = 6, .gen = {.max_new_tokens = 5, .top_p = 1},
                        .resumed = 2, .earlier = earlier};
    cr_assert_eq(pl_serve_sink_begin(k, 0, &a), PL_OK);
    cr_assert_eq(pl_serve_sink_begin(k, 1, &b), PL_OK);
    cr_assert_eq(pl_serve_sink_begin(k, 2, &r), PL_OK);
    float logits[3 * 8] = {0};
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN}, out;
    pl_act_seq_t e[3], os[3];
    pl_serve_out_t so[3];
    /* chunks inside their prompts: slot 0 [0, 5), slot 1 [0, 2), slot 2 [0, 3) of 6 */
    e[0] = (pl_act_seq_t){.seq = 0, .pos0 = 0, .n_tok = 5};
    e[1] = (pl_act_seq_t){.seq = 1, .pos0 = 0, .n_tok = 2};
    e[2] = (pl_act_seq_t){.seq = 2, .pos0 = 0, .n_tok = 3};
    h.n_seq = 3, h.n_tokens = 10;
    cr_assert_not(pl_serve_sink_wants_logits(k, &h, e));
    cr_assert_eq(pl_serve_sink_sample(k, &h, e, NULL, &out, os, so), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(out.n_seq, 0u);
    /* slot 0 still inside [5, 9); slot 1 ends its prompt [2, 4): this message samples */
    e[0] = (pl_act_seq_t){.seq = 0, .pos0 = 5, .n_tok = 4};
    e[1] = (pl_act_seq_t){.seq = 1, .pos0 = 2, .n_tok = 2};
    h.n_seq = 2, h.n_tokens = 6;
    cr_assert(pl_serve_sink_wants_logits(k, &h, e));
    cr_assert_eq(pl_serve_sink_sample(k, &h, e, logits, &out, os, so), PL_OK);
    cr_assert_eq(out.n_seq, 1u);
    /* slot 0's last prompt token, slot 2's rest [3, 6): each samples */
    e[0] = (pl_act_seq_t){.seq = 0, .pos0 = 9, .n_tok = 1};
    h.n_seq = 1, h.n_tokens = 1;
    cr_assert(pl_serve_sink_wants_logits(k, &h, e));
    e[0] = (pl_act_seq_t){.seq = 2, .pos0 = 3, .n_tok = 3};
    h.n_tokens = 3;
    cr_assert(pl_serve_sink_wants_logits(k, &h, e));
    /* what the sample would refuse asks for logits (so it is refused, not skipped) */
    e[0] = (pl_act_seq_t){.seq = 3, .pos0 = 0, .n_tok = 1};
    cr_assert(pl_serve_sink_wants_logits(k, &h, e), "no slot 3");
    pl_serve_sink_end(k, 1);
    e[0] = (pl_act_seq_t){.seq = 1, .pos0 = 0, .n_tok = 1};
    cr_assert(pl_serve_sink_wants_logits(k, &h, e), "a free slot");
    h.n_seq = 0;
    cr_assert(pl_serve_sink_wants_logits(k, &h, e), "an empty message");
    pl_serve_sink_destroy(&k);
}

/* With text: a slot's request ends at its own stop string (finish stop, the text cut before
 * it), and the next request in the same slot decodes afresh with its own (none here). The
 * logits pick the tokens of a known text one after another. */
Test(serve_local, sink_text_and_stop_strings_per_slot, .timeout = 60)
{
    js_ref_require(LLAMA3);
    pl_tokenizer_t *tok;
    cr_assert_eq(pl_tokenizer_load(LLAMA3, &tok), PL_OK, "%s", pl_error_msg());
    const char *full = "The answer is 42, or so they say.";
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tokenizer_encode(tok, full, strlen(full), 0, &ids, &n), PL_OK);
    int V = pl_tokenizer_vocab_size(tok), eos[1] = {0};
    float *logits = calloc((size_t)V, sizeof(float));
    pl_serve_sink_t *k;
    cr_assert_eq(pl_serve_sink_create(1, V, eos, 0, LLAMA3, &k), PL_OK, "%s", pl_error_msg());
    for (int round = 0; round < 2; round++) {
        pl_serve_seq_t sq = {.prompt_len = 1, .gen = {.max_new_tokens = 64, .top_p = 1}};
        if (round == 0) {
            sq.gen.n_stop = 1;
            strcpy(sq.gen.stop[0], "42");
        }
        cr_assert_eq(pl_serve_sink_begin(k, 0, &sq), PL_OK, "%s", pl_error_msg());
        pl_finish_t fin = PL_FINISH_NONE;
        size_t i;
        for (i = 0; i < n && fin == PL_FINISH_NONE; i++) {
            pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .n_seq = 1, .n_tokens = 1}, out;
            pl_act_seq_t e = {.seq = 0, .pos0 = (uint32_t)i, .n_tok = 1}, os;
            pl_serve_out_t so;
            memset(logits, 0, (size_t)V * sizeof(float));
            logits[ids[i]] = 1;
            cr_assert_eq(pl_serve_sink_sample(k, &h, &e, logits, &out, &os, &so), PL_OK, "%s",
                         pl_error_msg());
            cr_assert_eq(so.token, ids[i]);
            fin = so.finish;
        }
        size_t len, stable;
        const char *text = pl_serve_sink_text(k, 0, &len, &stable);
        cr_assert_not_null(text);
        cr_assert_eq(stable, len, "an ended sequence's text is all stable");
        if (round == 0) {
            cr_assert_eq(fin, PL_FINISH_STOP);
            cr_assert_lt(i, n, "stopped before the end");
            cr_assert_str_eq(text, "The answer is ");
        } else {
            cr_assert_eq(fin, PL_FINISH_NONE, "no stop string, 64 tokens allowed");
            cr_assert_str_eq(text, full);
        }
        pl_serve_sink_end(k, 0);
    }
    pl_serve_sink_destroy(&k);
    free(logits);
    free(ids);
    pl_tokenizer_destroy(&tok);
}

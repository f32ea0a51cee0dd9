/* Generation bookkeeping: job parsing and validation, prompts JSONL, the feeder's microbatch
 * plan and positions, the sink's stop rules and results. */
#include "gen_util.h"
#include "pipeline/gen.h"

#include <criterion/criterion.h>
#include <string.h>

static pl_model_config_t s_cfg(void)
{
    pl_model_config_t c = {.hidden = 8, .vocab = 50, .max_pos = 64, .n_eos = 1, .eos_ids = {2}};
    return c;
}

static json_t *s_job(void)
{
    return json_pack("{s:[[i,i,i],[i],[i,i],[i,i,i,i],[i]], s:i, s:i}", "prompts", 1, 2, 3, 4, 5,
                     6, 7, 8, 9, 10, 11, "max_new_tokens", 3, "microbatches", 2);
}

/* The job a stage builds from its JSON form: the spec's codec, then pl_gen_job_from_spec with
 * the job's microbatch count (the coordinator sends "microbatches" beside "gen"). */
static pl_status_t pl_gen_job_from_json(const json_t *gen, const pl_model_config_t *cfg,
                                        pl_gen_job_t *job)
{
    pl_job_spec_t spec;
    pl_status_t st = tg_spec(gen, &spec);
    if (st)
        return st;
    st = pl_gen_job_from_spec(&spec, spec.microbatches, cfg, job);
    pl_job_spec_clear(&spec);
    return st;
}

Test(gen, job_from_json_defaults_and_plan)
{
    pl_model_config_t cfg = s_cfg();
    pl_gen_job_t j;
    json_t *o = s_job();
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j.n_seqs, 5);
    cr_assert_eq(j.microbatches, 2);
    cr_assert(j.gen.stop_at_eos);
    cr_assert_float_eq(j.sampling.temperature, 0.0f, 0);
    cr_assert_eq(pl_gen_job_max_ctx(&j), 4 + 3);
    /* microbatch 0: seqs 0, 2, 4 (3 + 2 + 1 tokens); microbatch 1: seqs 1, 3 (1 + 4) */
    cr_assert_eq(pl_gen_job_max_tokens(&j), 6);
    cr_assert_eq(pl_gen_job_mb_size(&j, 0), 3);
    cr_assert_eq(pl_gen_job_mb_size(&j, 1), 2);
    pl_gen_job_clear(&j);
    json_decref(o);
}

Test(gen, job_from_json_rejects_bad_fields)
{
    pl_model_config_t cfg = s_cfg();
    pl_gen_job_t j;
    struct {
        const char *json, *needle;
    } cases[] = {
        {"{}", "prompts"},
        {"{\"prompts\": []}", "no prompts"},
        {"{\"prompts\": [[1], []]}", "prompt 1"},
        {"{\"prompts\": [[1, \"x\"]]}", "integer"},
        {"{\"prompts\": [[1, 50]]}", "vocabulary"},
        {"{\"prompts\": [[-1]]}", "vocabulary"},
        {"{\"prompts\": [[1]], \"max_new_tokens\": 0}", "max_new_tokens"},
        {"{\"prompts\": [[1]], \"max_new_tokens\": 64}", "positions"},
        {"{\"prompts\": [[1]], \"sampling\": {\"top_p\": 2}}", "top_p"},
        {"{\"prompts\": [[1]], \"sampling\": {\"seed\": \"12x\"}}", "seed"},
        {"{\"prompts\": [[1]], \"sampling\": 3}", "sampling"},
        {"{\"prompts\": [[1]], \"stop_at_eos\": 1}", "stop_at_eos"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *o = json_loads(cases[i].json, 0, NULL);
        cr_assert_not_null(o);
        cr_expect_neq(pl_gen_job_from_json(o, &cfg, &j), PL_OK, "%s accepted", cases[i].json);
        cr_expect(strstr(pl_error_msg(), cases[i].needle), "%s: '%s' not in '%s'",
                  cases[i].json, cases[i].needle, pl_error_msg());
        json_decref(o);
    }
}

Test(gen, prompts_jsonl)
{
    pl_job_spec_t p;
    pl_job_spec_init(&p);
    const char *ok = "[1, 2]\n\n  [3]\r\n[4,5,6]";
    cr_assert_eq(pl_gen_prompts_parse(ok, strlen(ok), "p.jsonl", NULL, &p), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(p.n_prompts, 3);
    cr_assert_eq(p.prompt_len[2], 3);
    cr_assert_eq(p.prompts[2][2], 6);
    const char *bad = "[1, 2]\n{\"a\": 1}\n";
    cr_assert_neq(pl_gen_prompts_parse(bad, strlen(bad), "p.jsonl", NULL, &p), PL_OK);
    cr_assert(strstr(pl_error_msg(), "p.jsonl:2"), "%s", pl_error_msg());
    cr_assert_neq(pl_gen_prompts_parse("\n\n", 2, "e.jsonl", NULL, &p), PL_OK);
    cr_assert_neq(pl_gen_prompts_parse("[1,", 3, "t.jsonl", NULL, &p), PL_OK);
    cr_assert_eq(p.n_prompts, 3, "the spec is untouched on error");
    pl_job_spec_clear(&p);
}

Test(gen, feeder_positions_and_retirement)
{
    pl_model_config_t cfg = s_cfg();
    pl_gen_job_t j;
    pl_gen_feed_t *f;
    pl_act_hdr_t h, tok;
    pl_act_seq_t seqs[5], in[5];
    int32_t tokens[16];
    json_t *o = s_job();
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK);
    cr_assert_eq(pl_gen_feed_create(&j, &f), PL_OK);
    pl_gen_feed_prefill(f, 7, 1, 0, &h, seqs, tokens);
    cr_assert_eq(h.n_seq, 2);
    cr_assert_eq(h.n_tokens, 5);
    cr_assert_eq(seqs[0].seq, 1);
    cr_assert_eq(seqs[1].seq, 3);
    cr_assert_eq(tokens[0], 4);
    cr_assert_eq(tokens[4], 10);
    /* sampled tokens for microbatch 1: seq 1 continues, seq 3 finished */
    tok = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .job = 7, .mb = 1, .n_seq = 2, .n_tokens = 2};
    in[0] = (pl_act_seq_t){.seq = 1, .n_tok = 1, .token = 33};
    in[1] = (pl_act_seq_t){.seq = 3, .n_tok = 1, .token = 2, .flags = PL_ACT_FINISHED};
    cr_assert_eq(pl_gen_feed_decode(f, &tok, in, &h, seqs, tokens), PL_OK);
    cr_assert_eq(h.n_seq, 1);
    cr_assert_eq(seqs[0].seq, 1);
    cr_assert_eq(seqs[0].pos0, 1); /* prompt of one token: next position is 1 */
    cr_assert_eq(tokens[0], 33);
    cr_assert_eq(h.step, 1);
    /* a finished or foreign sequence is a protocol error */
    cr_assert_eq(pl_gen_feed_decode(f, &tok, in + 1, &h, seqs, tokens), PL_ERR_PROTOCOL);
    in[2] = (pl_act_seq_t){.seq = 0, .n_tok = 1, .token = 5};
    tok.n_seq = 1;
    cr_assert_eq(pl_gen_feed_decode(f, &tok, in + 2, &h, seqs, tokens), PL_ERR_PROTOCOL);
    /* last live sequence of microbatch 1 finishes: it retires */
    int before = pl_gen_feed_active(f);
    in[0].flags = PL_ACT_FINISHED;
    cr_assert_eq(pl_gen_feed_decode(f, &tok, in, &h, seqs, tokens), PL_OK);
    cr_assert_eq(h.n_seq, 0);
    cr_assert_eq(pl_gen_feed_active(f), before - 1);
    pl_gen_feed_destroy(&f);
    cr_assert_null(f);
    pl_gen_job_clear(&j);
    json_decref(o);
}

Test(gen, sink_stops_at_eos_and_length)
{
    pl_model_config_t cfg = s_cfg();
    pl_gen_job_t j;
    pl_gen_sink_t *k;
    json_t *o = s_job();
    float logits[2 * 50] = {0};
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .mb = 1, .n_seq = 2, .n_tokens = 2}, out;
    /* the prompts' last tokens: seq 1 has 1 prompt token, seq 3 has 4 */
    pl_act_seq_t seqs[2] = {{.seq = 1, .pos0 = 0, .n_tok = 1}, {.seq = 3, .pos0 = 3, .n_tok = 1}};
    pl_act_seq_t res[2];
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK);
    cr_assert_eq(pl_gen_sink_create(&j, 50, &k), PL_OK);
    logits[10] = 5;      /* seq 1 -> token 10 */
    logits[50 + 2] = 5;  /* seq 3 -> EOS */
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK);
    cr_assert_eq(out.kind, PL_ACT_TOKENS);
    cr_assert_eq(res[0].token, 10);
    cr_assert_eq(res[0].flags, 0);
    cr_assert_eq(res[1].token, 2);
    cr_assert_eq(res[1].flags, PL_ACT_FINISHED);
    /* seq 3 is finished: sampling it again is an error */
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_ERR_PROTOCOL);
    h.n_seq = 1;
    /* seq 1 stands at position 2 now (prompt 1 + 1 sampled): an entry ending elsewhere is a
     * protocol error, and records nothing */
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_ERR_PROTOCOL);
    seqs[0].pos0 = 1;
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK);
    seqs[0].pos0 = 2;
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK);
    cr_assert_eq(res[0].flags, PL_ACT_FINISHED, "max_new_tokens 3 reached");
    cr_assert_not(pl_gen_sink_done(k));
    json_t *r = pl_gen_sink_results(k);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(r, 1), "finish")), "length");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(r, 3), "finish")), "eos");
    cr_assert_eq(json_array_size(json_object_get(json_array_get(r, 1), "tokens")), 3);
    cr_assert_eq(pl_gen_sink_generated(k), 4);
    json_decref(r);
    pl_gen_sink_destroy(&k);
    pl_gen_job_clear(&j);
    json_decref(o);
}

Test(gen, prefill_chunks_end_together_and_cover_each_prompt_once)
{
    pl_model_config_t cfg = s_cfg();
    json_t *o = json_pack("{s:[[i,i,i,i,i,i,i],[i],[i,i,i]], s:i, s:i, s:i}", "prompts", 1, 2,
                          3, 4, 5, 6, 7, 8, 9, 10, 11, "max_new_tokens", 2, "microbatches", 1,
                          "prefill_chunk", 3);
    pl_gen_job_t j;
    pl_gen_feed_t *f;
    pl_gen_sink_t *k;
    pl_act_hdr_t h, out;
    pl_act_seq_t seqs[3], res[3];
    int32_t tokens[16];
    float logits[3 * 50] = {0};
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j.gen.prefill_chunk, 3);
    cr_assert_eq(pl_gen_feed_create(&j, &f), PL_OK);
    cr_assert_eq(pl_gen_sink_create(&j, 50, &k), PL_OK);
    /* 7 tokens in chunks of 3, counted from the end: 1 + 3 + 3; the others join at the end */
    cr_assert_eq(pl_gen_feed_prefill_chunks(f, 0), 3);
    int want_n[3] = {1, 1, 3}, want_tok[3] = {1, 3, 7};
    for (int c = 0; c < 3; c++) {
        pl_gen_feed_prefill(f, 7, 0, c, &h, seqs, tokens);
        cr_assert_eq(h.n_seq, (uint32_t)want_n[c], "chunk %d", c);
        cr_assert_eq(h.n_tokens, (uint32_t)want_tok[c], "chunk %d", c);
        cr_assert_eq(seqs[0].seq, 0);
        cr_assert_eq(seqs[0].pos0, (uint32_t)(c == 0 ? 0 : 1 + 3 * (c - 1)));
        cr_assert_eq(tokens[0], c == 0 ? 1 : 2 + 3 * (c - 1));
        cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK);
        /* only the last chunk ends the prompts: it alone is sampled */
        cr_assert_eq(out.n_seq, c == 2 ? 3u : 0u, "chunk %d", c);
    }
    cr_assert_eq(seqs[1].seq, 1);
    cr_assert_eq(seqs[1].pos0, 0);
    cr_assert_eq(seqs[2].seq, 2);
    cr_assert_eq(seqs[2].n_tok, 3);
    cr_assert_eq(tokens[3], 8);
    cr_assert_eq(pl_gen_sink_generated(k), 3);
    /* a message where some sequences end their prompt and others do not (a continuous batch
     * mixes a prompt's chunks with other sequences) samples those that end it, in order */
    pl_gen_sink_destroy(&k);
    cr_assert_eq(pl_gen_sink_create(&j, 50, &k), PL_OK);
    h = (pl_act_hdr_t){.kind = PL_ACT_HIDDEN, .n_seq = 2, .n_tokens = 2};
    seqs[0] = (pl_act_seq_t){.seq = 0, .pos0 = 0, .n_tok = 1};
    seqs[1] = (pl_act_seq_t){.seq = 1, .pos0 = 0, .n_tok = 1};
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(out.n_seq, 1u);
    cr_assert_eq(res[0].seq, 1u);
    cr_assert_eq(pl_gen_sink_generated(k), 1);
    /* the same sequence twice, or one already past its prompt's end, is refused */
    pl_gen_sink_destroy(&k);
    cr_assert_eq(pl_gen_sink_create(&j, 50, &k), PL_OK);
    seqs[1] = seqs[0];
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_ERR_PROTOCOL);
    cr_assert_eq(pl_gen_sink_generated(k), 0);
    /* one past the prompt before anything was sampled is refused too */
    seqs[0] = (pl_act_seq_t){.seq = 0, .pos0 = 5, .n_tok = 3};
    h.n_seq = 1;
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_ERR_PROTOCOL);
    /* no chunking: one chunk per microbatch, the whole prompts */
    json_object_set_new(o, "prefill_chunk", json_integer(0));
    pl_gen_feed_destroy(&f);
    pl_gen_job_clear(&j);
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK);
    cr_assert_eq(pl_gen_feed_create(&j, &f), PL_OK);
    cr_assert_eq(pl_gen_feed_prefill_chunks(f, 0), 1);
    pl_gen_feed_prefill(f, 7, 0, 0, &h, seqs, tokens);
    cr_assert_eq(h.n_tokens, 11);
    /* the wire dtype: f32 unless asked, and only a known one */
    cr_assert_eq(j.wire_dtype, PL_ACT_F32);
    json_object_set_new(o, "wire_dtype", json_string("f16"));
    pl_gen_job_t w;
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &w), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(w.wire_dtype, PL_ACT_F16);
    pl_gen_job_clear(&w);
    json_object_set_new(o, "wire_dtype", json_string("int8"));
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &w), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "wire_dtype"), "%s", pl_error_msg());
    json_object_del(o, "wire_dtype");
    /* what the planner charges per activation value on a link */
    pl_job_spec_t sp;
    pl_job_spec_init(&sp);
    cr_assert_eq(pl_gen_spec_wire_bytes(&sp), 4.0);
    snprintf(sp.gen.wire_dtype, sizeof(sp.gen.wire_dtype), "bf16");
    cr_assert_eq(pl_gen_spec_wire_bytes(&sp), 2.0);
    snprintf(sp.gen.wire_dtype, sizeof(sp.gen.wire_dtype), "f16");
    cr_assert_eq(pl_gen_spec_wire_bytes(&sp), 2.0);
    /* out of range */
    json_object_set_new(o, "prefill_chunk", json_integer(-1));
    pl_gen_job_t bad;
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &bad), PL_ERR_RANGE, "%s", pl_error_msg());
    cr_assert(strstr(pl_error_msg(), "prefill_chunk"), "%s", pl_error_msg());
    pl_gen_feed_destroy(&f);
    pl_gen_sink_destroy(&k);
    pl_gen_job_clear(&j);
    json_decref(o);
}

Test(gen, sink_holds_eos_back_until_min_new_tokens)
{
    pl_model_config_t cfg = s_cfg();
    pl_gen_job_t j;
    pl_gen_sink_t *k;
    json_t *o = s_job();
    json_object_set_new(o, "min_new_tokens", json_integer(2));
    float logits[50] = {0};
    pl_act_hdr_t h = {.kind = PL_ACT_HIDDEN, .mb = 1, .n_seq = 1, .n_tokens = 1}, out;
    pl_act_seq_t seqs[1] = {{.seq = 1, .pos0 = 1, .n_tok = 1}}, res[1];
    cr_assert_eq(pl_gen_job_from_json(o, &cfg, &j), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(j.gen.min_new_tokens, 2);
    cr_assert_eq(pl_gen_sink_create(&j, 50, &k), PL_OK);
    logits[2] = 5; /* EOS is the best token every step */
    logits[7] = 4; /* the runner-up */
    for (int step = 0; step < 2; step++) {
        seqs[0].pos0 = (uint32_t)step; /* where the sequence stands: prompt of 1, then 1 more */
        cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(res[0].token, 7, "step %d: EOS drawn before min_new_tokens", step);
        cr_assert_eq(res[0].flags, 0);
    }
    seqs[0].pos0 = 2;
    cr_assert_eq(pl_gen_sink_sample(k, &h, seqs, logits, &out, res), PL_OK);
    cr_assert_eq(res[0].token, 2, "from the third token on EOS is allowed");
    cr_assert_eq(res[0].flags, PL_ACT_FINISHED);
    json_t *r = pl_gen_sink_results(k);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(r, 1), "finish")), "eos");
    cr_assert_eq(json_array_size(json_object_get(json_array_get(r, 1), "tokens")), 3);
    json_decref(r);
    pl_gen_sink_destroy(&k);
    pl_gen_job_clear(&j);
    json_decref(o);
}

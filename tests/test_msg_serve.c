/* The serving messages (transport/msg_serve.c): round trips through the wire, the bounds, and
 * every field refused with its name when it does not fit. */
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static pl_status_t s_wire(const pl_msg_t *m, pl_msg_t *back)
{
    json_t *body;
    pl_status_t st = pl_msg_encode(m, &body);
    if (st)
        return st;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    const char *name = pl_msg_name(m->type);
    st = pl_msg_decode_wire(name, strlen(name), text, strlen(text), back);
    free(text);
    return st;
}

static pl_status_t s_decode(pl_msg_type_t type, const char *json, pl_msg_t *m)
{
    const char *name = pl_msg_name(type);
    return pl_msg_decode_wire(name, strlen(name), json, strlen(json), m);
}

Test(msg_serve, seq_add_round_trip)
{
    pl_msg_t m, b;
    int32_t prompt[3] = {7, 0, 2147483647};
    pl_msg_init(&m, PL_MSG_SEQ_ADD);
    m.seq_add = (pl_msg_seq_add_t){.job = 9, .stage = 1, .epoch = 4, .req = 1ull << 40,
                                   .n_prompt = 3, .prompt = prompt, .resumed = 2, .stream = 4095,
                                   .gen = {.max_new_tokens = 33, .min_new_tokens = 2,
                                           .temperature = 0.5f, .top_k = 3, .top_p = 0.75f,
                                           .seed = 18446744073709551615ull, .n_stop = 1}};
    strcpy(m.seq_add.gen.stop[0], "\n\n");
    cr_assert_eq(s_wire(&m, &b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(b.type, PL_MSG_SEQ_ADD);
    cr_assert_eq(b.seq_add.job, 9);
    cr_assert_eq(b.seq_add.stage, 1);
    cr_assert_eq(b.seq_add.epoch, 4);
    cr_assert_eq(b.seq_add.req, 1ull << 40);
    cr_assert_eq(b.seq_add.n_prompt, 3);
    cr_assert_arr_eq(b.seq_add.prompt, prompt, sizeof(prompt));
    cr_assert_eq(b.seq_add.resumed, 2);
    cr_assert_eq(b.seq_add.stream, 4095);
    cr_assert_eq(b.seq_add.gen.max_new_tokens, 33);
    cr_assert_eq(b.seq_add.gen.min_new_tokens, 2);
    cr_assert_float_eq(b.seq_add.gen.temperature, 0.5f, 1e-6);
    cr_assert_eq(b.seq_add.gen.top_k, 3);
    cr_assert_eq(b.seq_add.gen.seed, 18446744073709551615ull);
    cr_assert_eq(b.seq_add.gen.n_stop, 1);
    cr_assert_str_eq(b.seq_add.gen.stop[0], "\n\n");
    pl_msg_clear(&b);
    pl_msg_clear(&b); /* safe twice */
}

Test(msg_serve, seq_add_defaults_and_refusals)
{
    pl_msg_t m;
    cr_assert_eq(s_decode(PL_MSG_SEQ_ADD,
                          "{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1],\"gen\":{}}",
                          &m),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(m.seq_add.gen.max_new_tokens, 16);
    cr_assert(m.seq_add.gen.stop_at_eos);
    cr_assert_float_eq(m.seq_add.gen.top_p, 1.0f, 1e-6);
    cr_assert_eq(m.seq_add.resumed, 0);
    cr_assert_eq(m.seq_add.stream, 0);
    pl_msg_clear(&m);
    static const struct {
        const char *json, *field;
    } bad[] = {
        {"{\"job\":0,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1],\"gen\":{}}", "job"},
        {"{\"job\":1,\"stage\":-1,\"epoch\":1,\"req\":5,\"prompt\":[1],\"gen\":{}}", "stage"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":0,\"prompt\":[1],\"gen\":{}}", "req"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"prompt\":[1],\"gen\":{}}", "req"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[],\"gen\":{}}", "prompt"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[-1],\"gen\":{}}", "prompt"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1.5],\"gen\":{}}", "prompt"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":\"x\",\"gen\":{}}", "prompt"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1]}", "gen"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1,2],\"resumed\":2,"
         "\"gen\":{}}", "resumed"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1],\"stream\":4096,"
         "\"gen\":{}}", "stream"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1],"
         "\"gen\":{\"max_new_tokens\":0}}", "max_new_tokens"},
        {"{\"job\":1,\"stage\":0,\"epoch\":1,\"req\":5,\"prompt\":[1],"
         "\"gen\":{\"sampling\":{\"top_p\":0}}}", "top_p"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&m, 0x5a, sizeof(m));
        cr_assert_eq(s_decode(PL_MSG_SEQ_ADD, bad[i].json, &m), PL_ERR_PROTOCOL, "%s",
                     bad[i].json);
        cr_assert(strstr(pl_error_msg(), bad[i].field), "%s: %s", bad[i].json, pl_error_msg());
        cr_assert(strstr(pl_error_msg(), "SEQ_ADD"), "%s", pl_error_msg());
        cr_assert_eq(((unsigned char *)&m)[0], 0x5a, "output changed on error");
    }
}

/* A prompt of exactly the bound passes, one more is refused. */
Test(msg_serve, seq_add_prompt_bound)
{
    pl_msg_t m, b;
    int32_t *p = calloc(PL_MSG_MAX_SEQ_PROMPT + 1, sizeof(int32_t));
    pl_msg_init(&m, PL_MSG_SEQ_ADD);
    m.seq_add = (pl_msg_seq_add_t){.job = 1, .epoch = 1, .req = 1, .prompt = p,
                                   .n_prompt = PL_MSG_MAX_SEQ_PROMPT,
                                   .gen = {.max_new_tokens = 1, .top_p = 1}};
    cr_assert_eq(s_wire(&m, &b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(b.seq_add.n_prompt, PL_MSG_MAX_SEQ_PROMPT);
    pl_msg_clear(&b);
    m.seq_add.n_prompt++;
    cr_assert_eq(s_wire(&m, &b), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "prompt"), "%s", pl_error_msg());
    free(p);
}

Test(msg_serve, seq_cancel_round_trip)
{
    pl_msg_t m, b;
    pl_msg_init(&m, PL_MSG_SEQ_CANCEL);
    m.seq_cancel = (pl_msg_seq_cancel_t){.job = 3, .stage = 0, .epoch = 8, .req = 77};
    cr_assert_eq(s_wire(&m, &b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(b.seq_cancel.req, 77);
    cr_assert_eq(b.seq_cancel.epoch, 8);
    cr_assert_eq(s_decode(PL_MSG_SEQ_CANCEL, "{\"job\":3,\"stage\":0,\"epoch\":8}", &b),
                 PL_ERR_PROTOCOL);
}

Test(msg_serve, seq_out_round_trip_and_refusals)
{
    pl_msg_t m, b;
    pl_msg_init(&m, PL_MSG_SEQ_OUT);
    m.seq_out = (pl_msg_seq_out_t){.job = 3, .stage = 1, .epoch = 8, .req = 77, .n_tokens = 2,
                                   .tokens = {11, 12}, .text = strdup("h\xc3\xa9llo"),
                                   .finish = PL_FINISH_STOP};
    cr_assert_eq(s_wire(&m, &b), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(b.seq_out.n_tokens, 2);
    cr_assert_eq(b.seq_out.tokens[1], 12);
    cr_assert_str_eq(b.seq_out.text, "h\xc3\xa9llo");
    cr_assert_eq(b.seq_out.finish, PL_FINISH_STOP);
    pl_msg_clear(&b);
    /* nothing new but the end: no tokens, no text */
    free(m.seq_out.text);
    m.seq_out.text = NULL;
    m.seq_out.n_tokens = 0;
    m.seq_out.finish = PL_FINISH_NONE;
    cr_assert_eq(s_wire(&m, &b), PL_OK, "%s", pl_error_msg());
    cr_assert_null(b.seq_out.text);
    cr_assert_eq(b.seq_out.n_tokens, 0);
    pl_msg_clear(&b);
    /* text that is not UTF-8 cannot be sent */
    m.seq_out.text = strdup("\xff");
    cr_assert_eq(pl_msg_encode(&m, &(json_t *){NULL}), PL_ERR_INVALID);
    free(m.seq_out.text);
    static const char *bad[] = {
        "{\"job\":3,\"stage\":1,\"epoch\":8,\"req\":1,\"tokens\":[1],\"finish\":\"done\"}",
        "{\"job\":3,\"stage\":1,\"epoch\":8,\"req\":1,\"tokens\":[1]}",
        "{\"job\":3,\"stage\":1,\"epoch\":8,\"req\":1,\"tokens\":[-3],\"finish\":\"none\"}",
        "{\"job\":3,\"stage\":1,\"epoch\":8,\"req\":1,\"tokens\":[1],\"text\":\"\","
        "\"finish\":\"none\"}",
        "{\"job\":3,\"stage\":1,\"epoch\":8,\"req\":1,\"tokens\":[1],\"text\":\"a\\u0000b\","
        "\"finish\":\"none\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(s_decode(PL_MSG_SEQ_OUT, bad[i], &b), PL_ERR_PROTOCOL, "%s", bad[i]);
    /* more tokens than one SEQ_OUT holds */
    json_t *arr = json_array();
    for (int i = 0; i <= PL_MSG_MAX_SEQ_OUT; i++)
        json_array_append_new(arr, json_integer(1));
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:o, s:s}", "job", 3, "stage", 1, "epoch", 8,
                          "req", 1, "tokens", arr, "finish", "none");
    char *t = json_dumps(o, JSON_COMPACT);
    cr_assert_eq(s_decode(PL_MSG_SEQ_OUT, t, &b), PL_ERR_PROTOCOL);
    cr_assert(strstr(pl_error_msg(), "tokens"), "%s", pl_error_msg());
    free(t);
    json_decref(o);
}

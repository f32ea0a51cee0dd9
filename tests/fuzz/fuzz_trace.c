/* libFuzzer harness for the trace codecs: a stage's trace (inside DONE and the TRACE answer), the
 * TRACE answer pipectl reads, DONE as a whole, the TRACE query and a running stage's TRACED. No
 * input may crash; an accepted trace must hold what its consumers rely on (at most
 * PL_TRACE_MAX_EVENTS events, starts in time order, every field in range, recorded >= held), must
 * be untouched on error, and must be a fixed point of encode after decode. Not part of the CMake
 * build:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_trace.c \
 *       transport/ctl.c transport/msg*.c transport/act_dtype.c common/status.c common/json.c \
 *       common/job_spec.c \
 *       -ljansson -lzmq -o /tmp/fuzz_trace
 *   /tmp/fuzz_trace -max_total_time=60 -max_len=65536 /tmp/fuzz_trace_corpus
 * Input: one byte picking the decoder (0 trace, 1 TRACE answer, 2 DONE, 3 TRACE, 4 TRACED), then
 * the JSON text. */
#include "transport/msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void s_check(const pl_msg_trace_t *t)
{
    if (!t || t->n_events < 0 || t->n_events > PL_TRACE_MAX_EVENTS || t->recorded < t->n_events ||
        t->t0_ns < 0 || (t->n_events && !t->events))
        abort();
    for (int i = 0; i < t->n_events; i++) {
        const pl_msg_trace_event_t *e = &t->events[i];
        if (e->kind >= PL_TRACE_KINDS_ || e->act > 3 || e->mb >= PL_JOB_MAX_SEQS ||
            e->step > PL_JOB_MAX_NEW_TOKENS || e->t_ns < 0 || e->dur_ns < 0 ||
            e->t_ns + e->dur_ns > ((int64_t)1 << 53) || (i && e->t_ns < t->events[i - 1].t_ns))
            abort();
    }
}

/* encode(decode(x)) decodes to itself */
static void s_fixed(json_t *enc, pl_status_t (*again)(const json_t *, json_t **))
{
    json_t *enc2 = NULL;
    if (again(enc, &enc2) != PL_OK || !json_equal(enc, enc2))
        abort();
    json_decref(enc2);
}

static pl_status_t s_trace_again(const json_t *body, json_t **out)
{
    pl_msg_trace_t *t;
    pl_status_t st = pl_msg_trace_decode(body, &t);
    if (st)
        return st;
    s_check(t);
    st = pl_msg_trace_encode(t, out);
    pl_msg_trace_free(&t);
    return st;
}

static pl_status_t s_reply_again(const json_t *body, json_t **out)
{
    pl_msg_trace_reply_t r;
    pl_status_t st = pl_msg_trace_reply_decode(body, &r);
    if (st)
        return st;
    st = pl_msg_trace_reply_encode(&r, out);
    pl_msg_trace_reply_clear(&r);
    return st;
}

static pl_status_t s_msg_again(pl_msg_type_t type, const json_t *body, json_t **out)
{
    pl_msg_t m;
    pl_status_t st = pl_msg_decode(type, body, &m);
    if (st)
        return st;
    st = pl_msg_encode(&m, out);
    pl_msg_clear(&m);
    return st;
}

static pl_status_t s_done_again(const json_t *body, json_t **out)
{
    return s_msg_again(PL_MSG_DONE, body, out);
}

static pl_status_t s_query_again(const json_t *body, json_t **out)
{
    return s_msg_again(PL_MSG_TRACE, body, out);
}

static pl_status_t s_traced_again(const json_t *body, json_t **out)
{
    return s_msg_again(PL_MSG_TRACED, body, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 5;
    char *text = malloc(size); /* exact size: a read past the end is caught */
    memcpy(text, data + 1, size - 1);
    json_t *body = json_loadb(text, size - 1, JSON_REJECT_DUPLICATES, NULL);
    free(text);
    if (!body)
        return 0;
    json_t *enc = NULL;
    if (which == 0) {
        pl_msg_trace_t *t = (pl_msg_trace_t *)0x1;
        if (pl_msg_trace_decode(body, &t) == PL_OK) {
            s_check(t);
            if (pl_msg_trace_encode(t, &enc) != PL_OK)
                abort();
            pl_msg_trace_free(&t);
            s_fixed(enc, s_trace_again);
        } else if (t != (pl_msg_trace_t *)0x1) {
            abort();
        }
    } else if (which == 1) {
        pl_msg_trace_reply_t r;
        memset(&r, 0x5a, sizeof(r));
        if (pl_msg_trace_reply_decode(body, &r) == PL_OK) {
            if (r.trace)
                s_check(r.trace);
            if (r.stage < 0 || r.stage >= r.n_stages || r.n_stages > PL_MSG_MAX_STAGES ||
                r.first > r.last || !r.node[0] || !r.device[0] ||
                pl_msg_trace_reply_encode(&r, &enc) != PL_OK)
                abort();
            pl_msg_trace_reply_clear(&r);
            s_fixed(enc, s_reply_again);
        } else if (((unsigned char *)&r)[0] != 0x5a) {
            abort();
        }
    } else {
        pl_msg_type_t type = which == 2 ? PL_MSG_DONE : which == 3 ? PL_MSG_TRACE : PL_MSG_TRACED;
        pl_msg_t m;
        memset(&m, 0x5a, sizeof(m));
        if (pl_msg_decode(type, body, &m) == PL_OK) {
            if (type == PL_MSG_DONE && m.done.trace)
                s_check(m.done.trace);
            if (type == PL_MSG_TRACED)
                s_check(m.traced.trace);
            if (pl_msg_encode(&m, &enc) != PL_OK)
                abort();
            pl_msg_clear(&m);
            s_fixed(enc, which == 2 ? s_done_again : which == 3 ? s_query_again : s_traced_again);
        } else if (((unsigned char *)&m)[0] != 0x5a) {
            abort();
        }
    }
    json_decref(enc);
    json_decref(body);
    return 0;
}

/* libFuzzer harness for control messages off the wire: the framing (pl_ctl_decode) and every
 * typed decoder behind it (pl_msg_decode_wire), and for REPLY bodies the typed reply decoders
 * (job state, results). No input may crash either; an accepted body must survive a compact
 * re-serialization, and an accepted typed message must encode, and decode again from its own
 * encoding to the same encoding. Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_ctl.c \
 *       transport/ctl.c transport/msg*.c transport/act_dtype.c common/status.c common/json.c \
 *       common/job_spec.c \
 *       -ljansson -lzmq -o /tmp/fuzz_ctl
 *   /tmp/fuzz_ctl -max_total_time=60 -max_len=65536 /tmp/fuzz_ctl_corpus
 * Input: one byte n, then n bytes of type name (n taken modulo 48; 0..PL_MSG_COUNT_-2 pick a real
 * type's name so the typed decoders are reached), then the body. A decoded HEARTBEAT's (or
 * HELLO's) text pieces must lie inside its text buffer, within PL_MSG_MAX_HB_TEXT. */
#include "transport/ctl.h"
#include "transport/msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The same checks for a typed reply decoder (pipectl reads SUBMIT/KILL and RESULTS answers
 * through these): untouched output on error, a fixed point of encode after decode. */
#define S_REPLY(T, DECODE, ENCODE, CLEAR)                                                          \
    static void s_reply_##T(const json_t *body)                                                    \
    {                                                                                              \
        T r, again;                                                                                \
        json_t *enc, *enc2;                                                                        \
        memset(&r, 0x5a, sizeof(r));                                                               \
        if (DECODE(body, &r) != PL_OK) {                                                           \
            if (((unsigned char *)&r)[0] != 0x5a)                                                  \
                abort();                                                                           \
            return;                                                                                \
        }                                                                                          \
        if (ENCODE(&r, &enc) != PL_OK || DECODE(enc, &again) != PL_OK ||                           \
            ENCODE(&again, &enc2) != PL_OK || !json_equal(enc, enc2))                              \
            abort();                                                                               \
        json_decref(enc);                                                                          \
        json_decref(enc2);                                                                         \
        CLEAR(&r);                                                                                 \
        CLEAR(&again);                                                                             \
    }

static void s_no_clear(pl_msg_job_state_t *m)
{
    (void)m;
}

S_REPLY(pl_msg_job_state_t, pl_msg_job_state_decode, pl_msg_job_state_encode, s_no_clear)
S_REPLY(pl_msg_results_reply_t, pl_msg_results_reply_decode, pl_msg_results_reply_encode,
        pl_msg_results_reply_clear)

static void s_check_pieces(const pl_msg_heartbeat_t *h)
{
    uint64_t sum = 0;
    if (h->text_used > PL_MSG_MAX_HB_TEXT)
        abort();
    for (int i = 0; i < h->n_stages; i++) {
        const pl_msg_progress_t *p = &h->stages[i];
        if ((uint64_t)p->text_off + p->text_len > h->text_used || p->text_at < 0 ||
            (p->text_len && (uint64_t)p->text_at + p->text_len > PL_MSG_MAX_RESULT_TEXT))
            abort();
        sum += p->text_len;
    }
    if (sum != h->text_used)
        abort();
}

static void s_typed(const char *type, size_t type_len, const char *body, size_t body_len)
{
    pl_msg_t m, again;
    json_t *enc, *enc2;
    memset(&m, 0x5a, sizeof(m));
    if (pl_msg_decode_wire(type, type_len, body, body_len, &m) != PL_OK) {
        if (((unsigned char *)&m)[0] != 0x5a)
            abort(); /* output must be untouched on error */
        return;
    }
    if (m.type == PL_MSG_REPLY) { /* which reply it is, is the asker's knowledge: try both */
        s_reply_pl_msg_job_state_t(m.reply.body);
        s_reply_pl_msg_results_reply_t(m.reply.body);
    }
    if (m.type == PL_MSG_HEARTBEAT)
        s_check_pieces(&m.heartbeat);
    else if (m.type == PL_MSG_HELLO)
        s_check_pieces(&m.hello.health);
    if (pl_msg_encode(&m, &enc) != PL_OK)
        abort();
    char *text = json_dumps(enc, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text || pl_msg_decode_wire(type, type_len, text, strlen(text), &again) != PL_OK)
        abort();
    if (pl_msg_encode(&again, &enc2) != PL_OK)
        abort();
    char *text2 = json_dumps(enc2, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text2 || strcmp(text, text2) != 0)
        abort();
    free(text);
    free(text2);
    json_decref(enc);
    json_decref(enc2);
    pl_msg_clear(&again);
    pl_msg_clear(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_ctl_msg_t msg = {0}, again = {0};
    char shown[4 * 64 + 1];
    size_t type_len, body_len;
    char *type, *body, *text;

    if (size < 1)
        return 0;
    type_len = data[0] % 48;
    if (type_len > size - 1)
        type_len = size - 1;
    body_len = size - 1 - type_len;
    /* Exact-size heap copies of both parts, so any read past either end is caught. */
    if (data[0] % 48 < PL_MSG_COUNT_ - 1) { /* a real type's name, the input is all body */
        const char *name = pl_msg_name((pl_msg_type_t)(data[0] % 48 + 1));
        type_len = strlen(name);
        type = malloc(type_len);
        memcpy(type, name, type_len);
        body_len = size - 1;
        body = malloc(body_len ? body_len : 1);
        memcpy(body, data + 1, body_len);
    } else {
        type = malloc(type_len ? type_len : 1);
        body = malloc(body_len ? body_len : 1);
        memcpy(type, data + 1, type_len);
        memcpy(body, data + 1 + type_len, body_len);
    }

    pl_ctl_escape(type, type_len, shown, sizeof(shown));
    if (pl_ctl_decode(type, type_len, body, body_len, &msg) == PL_OK) {
        if (msg.type <= 0 || msg.type >= PL_MSG_COUNT_ || !json_is_object(msg.body))
            abort();
        if (strlen(pl_msg_name(msg.type)) != type_len ||
            memcmp(pl_msg_name(msg.type), type, type_len) != 0)
            abort();
        text = json_dumps(msg.body, JSON_COMPACT);
        if (!text)
            abort();
        if (pl_ctl_decode(type, type_len, text, strlen(text), &again) != PL_OK ||
            again.type != msg.type || !json_equal(again.body, msg.body))
            abort();
        free(text);
        pl_ctl_msg_clear(&again);
        pl_ctl_msg_clear(&msg);
        s_typed(type, type_len, body, body_len);
    } else if (msg.body) {
        abort(); /* output must be untouched on error */
    }
    free(type);
    free(body);
    return 0;
}

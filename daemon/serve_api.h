/* The OpenAI-compatible HTTP API on the coordinator's front: GET /v1/models, POST
 * /v1/completions and /v1/chat/completions (streamed as Server-Sent Events) over a serving hub. */
#ifndef PL_DAEMON_SERVE_API_H
#define PL_DAEMON_SERVE_API_H

#include "common/config.h"
#include "common/status.h"
#include "daemon/http.h"
#include "daemon/serve_req.h"

#define PL_SERVE_API_N_ROUTES 3

typedef struct pl_serve_api pl_serve_api_t;

/* The API over `hub` (which must outlive it), with cfg's bearer tokens (api_keys, or the
 * api_keys_file read now: one token a line, '#' comments and blank lines skipped, mode 0600 or
 * stricter; errors name the file and line, never its contents). No tokens: no check. */
pl_status_t pl_serve_api_new(const pl_cfg_http_t *cfg, pl_serve_hub_t *hub, pl_serve_api_t **api_p);
/* Its routes into out; returns PL_SERVE_API_N_ROUTES. Their arg is the API. */
int pl_serve_api_routes(pl_serve_api_t *api, pl_http_route_t out[PL_SERVE_API_N_ROUTES]);
/* Free (after the HTTP server that used its routes has stopped); *api_p NULL; safe on NULL. */
void pl_serve_api_destroy(pl_serve_api_t **api_p);

#endif

/* The coordinator's serving side: the deployments it publishes on the hub and the routing of
 * the requests the front hands over. */
#include "common/log.h"
#include "daemon/coord_int.h"

#include <stdio.h>

void pl_coord_deploy_publish(pl_coord_t *c)
{
    pl_serve_hub_publish(c->hub, NULL, 0); /* nothing is deployed (pipectl serve: to come) */
}

/* End a request that no deployment takes. */
static void s_refuse(pl_serve_req_t *r, int http_status, const char *fmt, const char *name)
{
    pl_serve_end_t end = {.finish = PL_SERVE_REFUSED, .http_status = http_status};
    snprintf(end.message, sizeof(end.message), fmt, name);
    pl_serve_req_end(r, &end);
}

void pl_coord_deploy_on_hub(pl_coord_t *c)
{
    pl_serve_req_t *r;
    while ((r = pl_serve_hub_take(c->hub))) {
        const pl_serve_in_t *in = pl_serve_req_input(r);
        pl_log_debug("request %llu for deployment '%s': no such deployment",
                     (unsigned long long)pl_serve_req_id(r), in->deployment);
        s_refuse(r, 404, "no deployment named '%s'", in->deployment);
        pl_serve_req_unref(&r);
    }
}

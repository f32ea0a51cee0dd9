/* The handle wrappers of backend.h: each call goes through the backend's table, a plugin's
 * error message is copied into ours when a call fails (the one relay for plugins), and a
 * slowed-down device idles after each forward call. */
#include "backends/backend_impl.h"

#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* A failed plugin call left its reason in the plugin's own pl_common: bring it over. */
static pl_status_t s_relay(const pl_be_t *be, pl_status_t st)
{
    const char *m = st != PL_OK && be->plugin_msg ? be->plugin_msg() : NULL;
    if (m && m[0])
        pl_error(st, "%s", m);
    return st;
}

const char *pl_be_name(const pl_be_t *be)
{
    return be->ops->name;
}

pl_status_t pl_be_probe(const pl_be_t *be, pl_be_device_info_t *infos, int max, int *n_p)
{
    return s_relay(be, be->ops->probe(infos, max, n_p));
}

pl_status_t pl_be_device_open(const pl_be_t *be, int index, int threads, pl_be_device_t **dev_p)
{
    pl_be_device_t *d = calloc(1, sizeof(*d));
    if (!d)
        return pl_error(PL_ERR_NOMEM, "device %s:%d: out of memory", pl_be_name(be), index);
    pl_status_t st = s_relay(be, be->ops->open(index, threads, &d->ctx));
    if (st) {
        free(d);
        return st;
    }
    d->be = be;
    d->index = index;
    d->slowdown = 1.0;
    *dev_p = d;
    return PL_OK;
}

void pl_be_device_close(pl_be_device_t **dev_p)
{
    pl_be_device_t *d = dev_p ? *dev_p : NULL;
    if (!d)
        return;
    d->be->ops->close(d->ctx);
    free(d);
    *dev_p = NULL;
}

const pl_be_t *pl_be_device_backend(const pl_be_device_t *dev)
{
    return dev->be;
}

pl_status_t pl_be_device_calibrate(pl_be_device_t *dev, pl_be_calib_t *calib)
{
    if (!dev->be->ops->calibrate)
        return pl_error(PL_ERR_UNSUPPORTED, "backend %s cannot calibrate", pl_be_name(dev->be));
    pl_be_calib_t c = {0}; /* a backend that measures no decode row rate leaves it 0 */
    pl_status_t st = s_relay(dev->be, dev->be->ops->calibrate(dev->ctx, &c));
    if (st)
        return st;
    c.gflops /= dev->slowdown;
    c.mem_gbps /= dev->slowdown;
    c.dec_gflops /= dev->slowdown;
    c.pass_gbps /= dev->slowdown;
    c.attn_gflops /= dev->slowdown;
    /* the host's memory is not slowed: a slowed device only asks less of it (its mem_gbps) */
    *calib = c;
    return PL_OK;
}

pl_status_t pl_be_device_health(pl_be_device_t *dev, json_t **health_p)
{
    if (!dev->be->ops->health)
        return pl_error(PL_ERR_UNSUPPORTED, "backend %s reports no device health",
                        pl_be_name(dev->be));
    json_t *h = NULL;
    pl_status_t st = s_relay(dev->be, dev->be->ops->health(dev->index, &h));
    if (st)
        return st;
    *health_p = h;
    return PL_OK;
}

void pl_be_device_set_slowdown(pl_be_device_t *dev, double factor)
{
    dev->slowdown = factor > 1.0 ? factor : 1.0;
}

pl_status_t pl_be_stage_load(pl_be_device_t *dev, pl_model_t *model,
                             const pl_be_stage_params_t *params, pl_be_stage_t **stage_p)
{
    pl_be_stage_t *s = calloc(1, sizeof(*s));
    if (!s)
        return pl_error(PL_ERR_NOMEM, "stage: out of memory");
    pl_status_t st = s_relay(dev->be, dev->be->ops->stage_load(dev->ctx, model, params, &s->ctx));
    if (st) {
        free(s);
        return st;
    }
    s->be = dev->be;
    s->slowdown = dev->slowdown;
    *stage_p = s;
    return PL_OK;
}

pl_status_t pl_be_stage_forward(pl_be_stage_t *stage, const pl_be_batch_t *batch, const void *in,
                                void *out)
{
    double t0 = stage->slowdown > 1.0 ? pl_now() : 0;
    pl_status_t st = s_relay(stage->be, stage->be->ops->stage_forward(stage->ctx, batch, in, out));
    if (stage->slowdown > 1.0) {
        double idle = (pl_now() - t0) * (stage->slowdown - 1.0);
        struct timespec ts = {.tv_sec = (time_t)idle,
                              .tv_nsec = (long)((idle - (time_t)idle) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    return st;
}

void pl_be_stage_free_seq(pl_be_stage_t *stage, int slot)
{
    if (stage->be->ops->stage_free_seq)
        stage->be->ops->stage_free_seq(stage->ctx, slot);
}

void pl_be_stage_unload(pl_be_stage_t **stage_p)
{
    pl_be_stage_t *s = stage_p ? *stage_p : NULL;
    if (!s)
        return;
    s->be->ops->stage_unload(s->ctx);
    free(s);
    *stage_p = NULL;
}
